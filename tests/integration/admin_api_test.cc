// QueueService, ClusterService and AdminService against a real PostgreSQL: CRUD
// of every kind with update masks and etags, the sentences of foreign-key
// errors, authorization per role, audit rows for successes and refusals, API
// tokens and role bindings, and `trainyard apply`.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/cmd/trainyard/apply.h"
#include "tests/integration/api_test_harness.h"

namespace trainyard::testing {
namespace {

namespace v1 = trainyard::v1;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto h = ApiHarness::Start();
    ASSERT_TRUE(h.ok()) << h.status();
    h_ = *std::move(h);
    ASSERT_TRUE(h_->SeedTenant("acme").ok());
    ASSERT_TRUE(h_->SeedTenant("other").ok());
    admin_ = h_->admin_token();
    acme_admin_ = h_->Token("users/ann", v1::ROLE_TENANT_ADMIN, "acme");
    acme_viewer_ = h_->Token("users/vic", v1::ROLE_VIEWER, "acme");
    acme_member_ = h_->Token("users/alice", v1::ROLE_MEMBER, "acme");
    other_viewer_ = h_->Token("users/olga", v1::ROLE_VIEWER, "other");
    queues_ = h_->queues();
    clusters_ = h_->clusters();
    admin_stub_ = h_->admin();
    jobs_ = h_->jobs();
  }

  // Runs `fn(ClientContext*)` with `token` and keeps the ErrorInfo of the reply
  // in info_.
  template <typename Fn>
  grpc::Status Run(const std::string& token, Fn fn) {
    auto context = ApiHarness::Context(token);
    grpc::Status status = fn(context.get());
    info_ = ErrorInfoOf(*context);
    return status;
  }

  // Audit entries (newest first) of `method` ("CreateQueue"), as the platform
  // admin sees them.
  std::vector<v1::AuditEntry> Audit(const std::string& method) {
    v1::ListAuditLogRequest req;
    req.set_page_size(1000);
    v1::ListAuditLogResponse resp;
    grpc::Status s = Run(admin_, [&](auto* c) {
      return admin_stub_->ListAuditLog(c, req, &resp);
    });
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<v1::AuditEntry> out;
    for (const auto& e : resp.entries()) {
      if (absl::EndsWith(e.method(), absl::StrCat("/", method))) {
        out.push_back(e);
      }
    }
    return out;
  }

  v1::Tenant CreateTenant(const std::string& id) {
    v1::CreateTenantRequest req;
    req.set_tenant_id(id);
    req.mutable_tenant()->set_display_name(id);
    v1::Tenant out;
    grpc::Status s = Run(
        admin_, [&](auto* c) { return queues_->CreateTenant(c, req, &out); });
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }

  void Submit(const std::string& tenant, const std::string& request_id) {
    v1::SubmitJobResponse resp;
    grpc::Status s = Run(acme_member_, [&](auto* c) {
      return jobs_->Submit(c, MinimalSubmit(tenant, request_id), &resp);
    });
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  std::unique_ptr<ApiHarness> h_;
  std::string admin_, acme_admin_, acme_viewer_, acme_member_, other_viewer_;
  std::unique_ptr<v1::QueueService::Stub> queues_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
  std::unique_ptr<v1::AdminService::Stub> admin_stub_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  v1::ErrorInfo info_;
};

// --- Tenants ---

TEST_F(AdminApiTest, TenantCrudWithMaskAndEtag) {
  v1::CreateTenantRequest create;
  create.set_tenant_id("zeta");
  create.mutable_tenant()->set_name("tenants/ignored");
  create.mutable_tenant()->set_etag("99");
  create.mutable_tenant()->set_display_name("Zeta");
  (*create.mutable_tenant()->mutable_labels())["cost-center"] = "42";
  v1::Tenant created;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->CreateTenant(c, create, &created);
              }).ok());
  EXPECT_EQ(created.name(), "tenants/zeta");
  EXPECT_EQ(created.etag(), "1");
  EXPECT_TRUE(created.has_create_time());
  EXPECT_TRUE(created.has_update_time());
  EXPECT_EQ(created.display_name(), "Zeta");

  // Duplicate.
  v1::Tenant dup;
  grpc::Status s = Run(
      admin_, [&](auto* c) { return queues_->CreateTenant(c, create, &dup); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(s.error_message(), "tenants/zeta already exists");

  // Bad id.
  v1::CreateTenantRequest bad = create;
  bad.set_tenant_id("Zeta_1");
  s = Run(admin_, [&](auto* c) { return queues_->CreateTenant(c, bad, &dup); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "tenant_id");

  // Invalid body field is reported relative to the request.
  bad = create;
  bad.set_tenant_id("zeta2");
  bad.mutable_tenant()->set_submit_rate_limit(-1);
  s = Run(admin_, [&](auto* c) { return queues_->CreateTenant(c, bad, &dup); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "tenant.submit_rate_limit");
  EXPECT_THAT(s.error_message(), StartsWith("tenant.submit_rate_limit: "));

  // Unknown default priority class.
  bad = create;
  bad.set_tenant_id("zeta3");
  bad.mutable_tenant()->set_default_priority_class("nope");
  s = Run(admin_, [&](auto* c) { return queues_->CreateTenant(c, bad, &dup); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "tenant.default_priority_class");

  // Get.
  v1::GetTenantRequest get;
  get.set_name("tenants/zeta");
  v1::Tenant got;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->GetTenant(c, get, &got);
              }).ok());
  EXPECT_EQ(got.labels().at("cost-center"), "42");
  EXPECT_EQ(got.etag(), "1");

  // Update with a mask: only display_name changes.
  v1::UpdateTenantRequest update;
  update.mutable_tenant()->set_name("tenants/zeta");
  update.mutable_tenant()->set_display_name("Zeta team");
  update.mutable_tenant()->set_suspended(true);  // not in the mask
  update.mutable_tenant()->set_etag("1");
  update.mutable_update_mask()->add_paths("display_name");
  v1::Tenant updated;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->UpdateTenant(c, update, &updated);
              }).ok());
  EXPECT_EQ(updated.display_name(), "Zeta team");
  EXPECT_FALSE(updated.suspended());
  EXPECT_EQ(updated.labels().at("cost-center"), "42");
  EXPECT_EQ(updated.etag(), "2");

  // Stale etag.
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateTenant(c, update, &updated); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(s.error_message(), HasSubstr("etag"));

  // Unknown and immutable mask paths.
  update.mutable_tenant()->clear_etag();
  update.mutable_update_mask()->set_paths(0, "bogus");
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateTenant(c, update, &updated); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "update_mask: unknown field \"bogus\"");
  update.mutable_update_mask()->set_paths(0, "name");
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateTenant(c, update, &updated); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("cannot be updated"));

  // Empty mask: every updatable field, so the labels are replaced (by none).
  update.clear_update_mask();
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->UpdateTenant(c, update, &updated);
              }).ok());
  EXPECT_TRUE(updated.suspended());
  EXPECT_TRUE(updated.labels().empty());
  EXPECT_EQ(updated.etag(), "3");

  // Update of a missing tenant.
  update.mutable_tenant()->set_name("tenants/nobody");
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateTenant(c, update, &updated); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "tenants/nobody not found");

  // Delete.
  v1::DeleteTenantRequest del;
  del.set_name("tenants/zeta");
  google::protobuf::Empty empty;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->DeleteTenant(c, del, &empty);
              }).ok());
  s = Run(admin_, [&](auto* c) { return queues_->GetTenant(c, get, &got); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AdminApiTest, TenantVisibilityAndRights) {
  // A viewer sees only its tenant; another tenant is NOT_FOUND.
  v1::ListTenantsRequest list;
  v1::ListTenantsResponse listed;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return queues_->ListTenants(c, list, &listed);
              }).ok());
  ASSERT_EQ(listed.tenants_size(), 1);
  EXPECT_EQ(listed.tenants(0).name(), "tenants/acme");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->ListTenants(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.tenants_size(), 2);

  v1::GetTenantRequest get;
  get.set_name("tenants/other");
  v1::Tenant got;
  grpc::Status s = Run(
      acme_viewer_, [&](auto* c) { return queues_->GetTenant(c, get, &got); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  // Paging: one per page.
  CreateTenant("t3");
  CreateTenant("t4");
  list.set_page_size(1);
  std::vector<std::string> names;
  while (true) {
    v1::ListTenantsResponse page;
    ASSERT_TRUE(Run(admin_, [&](auto* c) {
                  return queues_->ListTenants(c, list, &page);
                }).ok());
    for (const auto& t : page.tenants()) names.push_back(t.name());
    if (page.next_page_token().empty()) break;
    list.set_page_token(page.next_page_token());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("tenants/acme", "tenants/other",
                                            "tenants/t3", "tenants/t4"));
  list.set_page_token("garbage!");
  s = Run(admin_,
          [&](auto* c) { return queues_->ListTenants(c, list, &listed); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "page_token");

  // Only platform admins create tenants; the refusal is audited.
  v1::CreateTenantRequest create;
  create.set_tenant_id("sneaky");
  v1::Tenant out;
  s = Run(acme_admin_,
          [&](auto* c) { return queues_->CreateTenant(c, create, &out); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  std::vector<v1::AuditEntry> audit = Audit("CreateTenant");
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit[0].principal(), "users/ann");
  EXPECT_EQ(audit[0].result(), "PERMISSION_DENIED");
  EXPECT_EQ(audit[0].resource(), "tenants/sneaky");
  EXPECT_THAT(audit[0].request_json(), HasSubstr("sneaky"));
  // The successful creations are audited too.
  bool saw_ok = false;
  for (const auto& e : audit) {
    saw_ok |= e.resource() == "tenants/t3" && e.result() == "OK";
  }
  EXPECT_TRUE(saw_ok);

  // No credentials at all.
  grpc::ClientContext anonymous;
  s = queues_->ListTenants(&anonymous, list, &listed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AdminApiTest, DeleteTenantInUse) {
  v1::DeleteTenantRequest del;
  del.set_name("tenants/acme");
  google::protobuf::Empty empty;
  grpc::Status s = Run(
      admin_, [&](auto* c) { return queues_->DeleteTenant(c, del, &empty); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("tenant acme still has"));
  EXPECT_EQ(info_.reason(), "IN_USE");
  std::vector<v1::AuditEntry> audit = Audit("DeleteTenant");
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit[0].result(), "FAILED_PRECONDITION");
  EXPECT_EQ(audit[0].tenant(), "acme");
}

// --- Projects ---

TEST_F(AdminApiTest, ProjectsNeedTenantAdmin) {
  v1::CreateProjectRequest create;
  create.set_parent("tenants/acme");
  create.set_project_id("vision");
  create.mutable_project()->set_display_name("Vision");
  v1::Project project;
  grpc::Status s = Run(acme_viewer_, [&](auto* c) {
    return queues_->CreateProject(c, create, &project);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = Run(other_viewer_,
          [&](auto* c) { return queues_->CreateProject(c, create, &project); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return queues_->CreateProject(c, create, &project);
              }).ok());
  EXPECT_EQ(project.name(), "tenants/acme/projects/vision");
  EXPECT_EQ(project.etag(), "1");

  // Platform admin, missing tenant: the foreign key speaks.
  create.set_parent("tenants/ghost");
  s = Run(admin_,
          [&](auto* c) { return queues_->CreateProject(c, create, &project); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "parent: tenant \"ghost\" does not exist");
  EXPECT_EQ(info_.field(), "parent");

  v1::GetProjectRequest get;
  get.set_name("tenants/acme/projects/vision");
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return queues_->GetProject(c, get, &project);
              }).ok());
  v1::ListProjectsRequest list;
  list.set_parent("tenants/acme");
  v1::ListProjectsResponse listed;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return queues_->ListProjects(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.projects_size(), 2);  // default, vision
  list.set_parent("tenants/-");
  s = Run(acme_viewer_,
          [&](auto* c) { return queues_->ListProjects(c, list, &listed); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "parent");

  v1::UpdateProjectRequest update;
  update.mutable_project()->set_name("tenants/acme/projects/vision");
  update.mutable_project()->set_display_name("CV");
  update.mutable_update_mask()->add_paths("display_name");
  s = Run(acme_viewer_,
          [&](auto* c) { return queues_->UpdateProject(c, update, &project); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return queues_->UpdateProject(c, update, &project);
              }).ok());
  EXPECT_EQ(project.display_name(), "CV");
  EXPECT_EQ(project.etag(), "2");

  // A project with jobs cannot be deleted.
  Submit("acme", "p-1");
  v1::DeleteProjectRequest del;
  del.set_name("tenants/acme/projects/default");
  google::protobuf::Empty empty;
  s = Run(acme_admin_,
          [&](auto* c) { return queues_->DeleteProject(c, del, &empty); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "project default still has jobs");
  del.set_name("tenants/acme/projects/vision");
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return queues_->DeleteProject(c, del, &empty);
              }).ok());
  s = Run(acme_admin_,
          [&](auto* c) { return queues_->DeleteProject(c, del, &empty); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "tenants/acme/projects/vision not found");

  std::vector<v1::AuditEntry> audit = Audit("DeleteProject");
  ASSERT_GE(audit.size(), 3u);
  EXPECT_EQ(audit[0].result(), "NOT_FOUND");
  EXPECT_EQ(audit[1].result(), "OK");
  EXPECT_EQ(audit[1].tenant(), "acme");
  EXPECT_EQ(audit[2].result(), "FAILED_PRECONDITION");
}

// --- Queues ---

TEST_F(AdminApiTest, QueueCrudAndReferences) {
  v1::CreateQueueRequest create;
  create.set_parent("tenants/acme");
  create.set_queue_id("batch");
  v1::Queue* q = create.mutable_queue();
  q->set_cohort("pool");
  q->set_fair_share_weight(2);
  auto* quota = q->add_quotas();
  quota->set_flavor("gpu");
  auto* gpus = quota->add_resources();
  gpus->set_resource(v1::RESOURCE_NAME_GPU);
  gpus->set_nominal(8);

  v1::Queue queue;
  grpc::Status s = Run(acme_admin_, [&](auto* c) {
    return queues_->CreateQueue(c, create, &queue);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Unknown flavor: checked before writing, named by index.
  v1::CreateQueueRequest bad = create;
  bad.mutable_queue()->add_quotas()->set_flavor("tpu");
  s = Run(admin_,
          [&](auto* c) { return queues_->CreateQueue(c, bad, &queue); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "queue.quotas[1].flavor: flavor \"tpu\" does not exist");
  EXPECT_EQ(info_.field(), "queue.quotas[1].flavor");
  EXPECT_EQ(info_.reason(), "UNKNOWN_FLAVOR");

  // Unknown cohort: the foreign key speaks.
  bad = create;
  bad.mutable_queue()->set_cohort("nope");
  s = Run(admin_,
          [&](auto* c) { return queues_->CreateQueue(c, bad, &queue); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "queue.cohort: cohort \"nope\" does not exist");
  EXPECT_EQ(info_.field(), "queue.cohort");

  // Invalid quota.
  bad = create;
  bad.mutable_queue()->mutable_quotas(0)->mutable_resources(0)->set_nominal(-1);
  s = Run(admin_,
          [&](auto* c) { return queues_->CreateQueue(c, bad, &queue); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "queue.quotas[0].resources[0].nominal");

  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->CreateQueue(c, create, &queue);
              }).ok());
  EXPECT_EQ(queue.name(), "tenants/acme/queues/batch");
  EXPECT_EQ(queue.etag(), "1");

  // Viewers read; other tenants see nothing.
  v1::GetQueueRequest get;
  get.set_name("tenants/acme/queues/batch");
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return queues_->GetQueue(c, get, &queue);
              }).ok());
  s = Run(other_viewer_,
          [&](auto* c) { return queues_->GetQueue(c, get, &queue); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  get.set_name("tenants/acme/batch");
  s = Run(acme_viewer_,
          [&](auto* c) { return queues_->GetQueue(c, get, &queue); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "name");

  // tenants/- lists across the tenants the caller sees.
  v1::ListQueuesRequest list;
  list.set_parent("tenants/-");
  v1::ListQueuesResponse listed;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return queues_->ListQueues(c, list, &listed);
              }).ok());
  ASSERT_EQ(listed.queues_size(), 2);
  for (const auto& each : listed.queues()) {
    EXPECT_THAT(each.name(), StartsWith("tenants/acme/"));
  }
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->ListQueues(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.queues_size(), 3);
  list.set_cohort("pool");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->ListQueues(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.queues_size(), 3);
  list.set_cohort("nothing-here");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->ListQueues(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.queues_size(), 0);

  // Update quotas with a mask; unknown flavor in the new quotas is refused.
  v1::UpdateQueueRequest update;
  *update.mutable_queue() = queue;
  update.mutable_queue()->set_name("tenants/acme/queues/batch");
  update.mutable_queue()->mutable_quotas(0)->mutable_resources(0)->set_nominal(
      16);
  update.mutable_queue()->set_display_name("not in mask");
  update.mutable_update_mask()->add_paths("quotas");
  update.mutable_queue()->set_etag("1");
  v1::Queue updated;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->UpdateQueue(c, update, &updated);
              }).ok());
  EXPECT_EQ(updated.quotas(0).resources(0).nominal(), 16);
  EXPECT_EQ(updated.display_name(), "");
  EXPECT_EQ(updated.fair_share_weight(), 2);
  EXPECT_EQ(updated.etag(), "2");
  update.mutable_queue()->clear_etag();
  update.mutable_queue()->mutable_quotas(0)->set_flavor("tpu");
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateQueue(c, update, &updated); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "queue.quotas[0].flavor");
  // Nested mask path.
  update.mutable_update_mask()->set_paths(0, "preemption.within_queue");
  update.mutable_queue()->mutable_preemption()->set_within_queue(
      v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY);
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->UpdateQueue(c, update, &updated);
              }).ok());
  EXPECT_EQ(updated.preemption().within_queue(),
            v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY);
  EXPECT_EQ(updated.quotas(0).flavor(), "gpu");
  update.mutable_update_mask()->set_paths(0, "preemption.nonsense");
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateQueue(c, update, &updated); });
  EXPECT_EQ(s.error_message(),
            "update_mask: unknown field \"preemption.nonsense\"");

  // Status: jobs per state; usage per quota (nothing admitted yet: 0 used).
  Submit("acme", "q-1");
  Submit("acme", "q-2");
  v1::GetQueueStatusRequest status_req;
  status_req.set_name("tenants/acme/queues/default");
  v1::QueueStatus status;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return queues_->GetQueueStatus(c, status_req, &status);
              }).ok());
  EXPECT_EQ(status.queue(), "tenants/acme/queues/default");
  EXPECT_EQ(status.jobs_by_state().at("QUEUED"), 2);
  ASSERT_EQ(status.usage_size(), 1) << status.DebugString();
  EXPECT_EQ(status.usage(0).resource(), v1::RESOURCE_NAME_GPU);
  EXPECT_GT(status.usage(0).nominal(), 0);
  EXPECT_EQ(status.usage(0).used(), 0);
  EXPECT_EQ(status.usage(0).borrowed(), 0);
  status_req.set_name("tenants/acme/queues/missing");
  s = Run(acme_viewer_, [&](auto* c) {
    return queues_->GetQueueStatus(c, status_req, &status);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  // Queues with jobs stay; empty ones go.
  v1::DeleteQueueRequest del;
  del.set_name("tenants/acme/queues/default");
  google::protobuf::Empty empty;
  s = Run(admin_,
          [&](auto* c) { return queues_->DeleteQueue(c, del, &empty); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "queue default still has jobs");
  del.set_name("tenants/acme/queues/batch");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->DeleteQueue(c, del, &empty);
              }).ok());

  std::vector<v1::AuditEntry> audit = Audit("CreateQueue");
  int ok = 0, refused = 0;
  for (const auto& e : audit) {
    if (e.result() == "OK") ++ok;
    if (e.result() == "PERMISSION_DENIED") ++refused;
  }
  EXPECT_EQ(ok, 3);  // acme/default, other/default (seed), acme/batch
  EXPECT_EQ(refused, 1);
}

// --- Cohorts and priority classes ---

TEST_F(AdminApiTest, Cohorts) {
  v1::CreateCohortRequest create;
  create.set_cohort_id("root");
  v1::Cohort cohort;
  grpc::Status s = Run(acme_admin_, [&](auto* c) {
    return queues_->CreateCohort(c, create, &cohort);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->CreateCohort(c, create, &cohort);
              }).ok());
  create.set_cohort_id("child");
  create.mutable_cohort()->set_parent("root");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->CreateCohort(c, create, &cohort);
              }).ok());
  EXPECT_EQ(cohort.parent(), "root");
  create.set_cohort_id("orphan");
  create.mutable_cohort()->set_parent("ghost");
  s = Run(admin_,
          [&](auto* c) { return queues_->CreateCohort(c, create, &cohort); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "cohort.parent: cohort \"ghost\" does not exist");

  // Any authenticated caller reads.
  v1::GetCohortRequest get;
  get.set_name("cohorts/child");
  ASSERT_TRUE(Run(other_viewer_, [&](auto* c) {
                return queues_->GetCohort(c, get, &cohort);
              }).ok());
  v1::ListCohortsRequest list;
  v1::ListCohortsResponse listed;
  ASSERT_TRUE(Run(other_viewer_, [&](auto* c) {
                return queues_->ListCohorts(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.cohorts_size(), 3);  // child, pool, root

  // No cycles.
  v1::UpdateCohortRequest update;
  update.mutable_cohort()->set_name("cohorts/root");
  update.mutable_cohort()->set_parent("child");
  update.mutable_update_mask()->add_paths("parent");
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateCohort(c, update, &cohort); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "cohort.parent");
  update.mutable_cohort()->set_parent("root");
  s = Run(admin_,
          [&](auto* c) { return queues_->UpdateCohort(c, update, &cohort); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  update.mutable_cohort()->set_parent("pool");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->UpdateCohort(c, update, &cohort);
              }).ok());
  EXPECT_EQ(cohort.parent(), "pool");
  EXPECT_EQ(cohort.etag(), "2");

  // Members keep cohorts alive.
  v1::DeleteCohortRequest del;
  google::protobuf::Empty empty;
  del.set_name("cohorts/pool");
  s = Run(admin_,
          [&](auto* c) { return queues_->DeleteCohort(c, del, &empty); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), StartsWith("cohort pool still has"));
  del.set_name("cohorts/root");
  s = Run(admin_,
          [&](auto* c) { return queues_->DeleteCohort(c, del, &empty); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "cohort root still has child cohorts");
  del.set_name("cohorts/child");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->DeleteCohort(c, del, &empty);
              }).ok());
  del.set_name("cohorts/root");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->DeleteCohort(c, del, &empty);
              }).ok());
}

TEST_F(AdminApiTest, PriorityClassesHighestFirst) {
  for (auto [id, value] :
       std::vector<std::pair<std::string, int>>{{"low", -10},
                                                {"default", 0},
                                                {"high", 100},
                                                {"urgent", 1000},
                                                {"also-zero", 0}}) {
    v1::CreatePriorityClassRequest create;
    create.set_priority_class_id(id);
    create.mutable_priority_class()->set_value(value);
    create.mutable_priority_class()->set_preemptible(value < 100);
    v1::PriorityClass pc;
    ASSERT_TRUE(Run(admin_, [&](auto* c) {
                  return queues_->CreatePriorityClass(c, create, &pc);
                }).ok());
    EXPECT_EQ(pc.name(), absl::StrCat("priorityClasses/", id));
  }
  v1::CreatePriorityClassRequest bad;
  bad.set_priority_class_id("absurd");
  bad.mutable_priority_class()->set_value(2'000'000);
  v1::PriorityClass pc;
  grpc::Status s = Run(admin_, [&](auto* c) {
    return queues_->CreatePriorityClass(c, bad, &pc);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "priority_class.value");

  v1::ListPriorityClassesRequest list;
  list.set_page_size(2);
  std::vector<std::string> order;
  while (true) {
    v1::ListPriorityClassesResponse page;
    ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                  return queues_->ListPriorityClasses(c, list, &page);
                }).ok());
    for (const auto& each : page.priority_classes()) {
      order.push_back(each.name());
    }
    if (page.next_page_token().empty()) break;
    list.set_page_token(page.next_page_token());
  }
  EXPECT_THAT(order, ::testing::ElementsAre(
                         "priorityClasses/urgent", "priorityClasses/high",
                         "priorityClasses/also-zero", "priorityClasses/default",
                         "priorityClasses/low"));

  v1::UpdatePriorityClassRequest update;
  update.mutable_priority_class()->set_name("priorityClasses/high");
  update.mutable_priority_class()->set_description("deadlines");
  update.mutable_update_mask()->add_paths("description");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->UpdatePriorityClass(c, update, &pc);
              }).ok());
  EXPECT_EQ(pc.value(), 100);
  EXPECT_EQ(pc.description(), "deadlines");
  EXPECT_EQ(pc.etag(), "2");

  v1::DeletePriorityClassRequest del;
  del.set_name("priorityClasses/low");
  google::protobuf::Empty empty;
  s = Run(acme_admin_, [&](auto* c) {
    return queues_->DeletePriorityClass(c, del, &empty);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return queues_->DeletePriorityClass(c, del, &empty);
              }).ok());
}

// --- Clusters, flavors, pools, nodes ---

TEST_F(AdminApiTest, ClustersFlavorsPools) {
  v1::CreateClusterRequest create;
  create.set_cluster_id("slurm-a");
  create.mutable_cluster()->set_backend(v1::BACKEND_KIND_SLURM);
  create.mutable_cluster()->mutable_slurm()->set_rest_url(
      "http://127.0.0.1:6820");
  create.mutable_cluster()->set_health(
      v1::CLUSTER_HEALTH_HEALTHY);  // output only
  v1::Cluster cluster;
  grpc::Status s = Run(acme_admin_, [&](auto* c) {
    return clusters_->CreateCluster(c, create, &cluster);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->CreateCluster(c, create, &cluster);
              }).ok());
  EXPECT_EQ(cluster.name(), "clusters/slurm-a");
  EXPECT_EQ(cluster.health(), v1::CLUSTER_HEALTH_UNSPECIFIED);

  // Settings must match the backend.
  v1::CreateClusterRequest bad = create;
  bad.set_cluster_id("k");
  bad.mutable_cluster()->mutable_sim();
  s = Run(admin_,
          [&](auto* c) { return clusters_->CreateCluster(c, bad, &cluster); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(info_.field(), StartsWith("cluster."));

  v1::UpdateClusterRequest cordon;
  cordon.mutable_cluster()->set_name("clusters/slurm-a");
  cordon.mutable_cluster()->set_cordoned(true);
  cordon.mutable_update_mask()->add_paths("cordoned");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->UpdateCluster(c, cordon, &cluster);
              }).ok());
  EXPECT_TRUE(cluster.cordoned());
  EXPECT_EQ(cluster.slurm().rest_url(), "http://127.0.0.1:6820");
  cordon.mutable_update_mask()->set_paths(0, "health");
  s = Run(admin_, [&](auto* c) {
    return clusters_->UpdateCluster(c, cordon, &cluster);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::GetClusterRequest get;
  get.set_name("clusters/slurm-a");
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->GetCluster(c, get, &cluster);
              }).ok());
  v1::ListClustersRequest list;
  v1::ListClustersResponse listed;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->ListClusters(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.clusters_size(), 2);

  // Flavors.
  v1::CreateFlavorRequest flavor_req;
  flavor_req.set_flavor_id("spot-a100");
  flavor_req.mutable_flavor()->set_kind(v1::FLAVOR_KIND_SPOT);
  flavor_req.mutable_flavor()->set_gpu_model("A100");
  flavor_req.mutable_flavor()->set_reclaim_rate_per_hour(0.1);
  v1::Flavor flavor;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->CreateFlavor(c, flavor_req, &flavor);
              }).ok());
  v1::UpdateFlavorRequest flavor_update;
  flavor_update.mutable_flavor()->set_name("flavors/spot-a100");
  flavor_update.mutable_flavor()->set_kind(v1::FLAVOR_KIND_ON_DEMAND);
  flavor_update.mutable_update_mask()->add_paths("kind");
  s = Run(admin_, [&](auto* c) {
    return clusters_->UpdateFlavor(c, flavor_update, &flavor);
  });
  EXPECT_EQ(s.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // reclaim rate must be 0
  EXPECT_EQ(info_.field(), "flavor.reclaim_rate_per_hour");
  flavor_update.mutable_update_mask()->add_paths("reclaim_rate_per_hour");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->UpdateFlavor(c, flavor_update, &flavor);
              }).ok());
  EXPECT_EQ(flavor.kind(), v1::FLAVOR_KIND_ON_DEMAND);
  EXPECT_EQ(flavor.gpu_model(), "A100");

  // Pools need an existing cluster and flavor.
  v1::CreatePoolRequest pool_req;
  pool_req.set_parent("clusters/slurm-a");
  pool_req.set_pool_id("a100");
  pool_req.mutable_pool()->set_flavor("nope");
  v1::Pool pool;
  s = Run(admin_,
          [&](auto* c) { return clusters_->CreatePool(c, pool_req, &pool); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "pool.flavor: flavor \"nope\" does not exist");
  pool_req.set_parent("clusters/ghost");
  pool_req.mutable_pool()->set_flavor("spot-a100");
  s = Run(admin_,
          [&](auto* c) { return clusters_->CreatePool(c, pool_req, &pool); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "parent");
  pool_req.set_parent("clusters/slurm-a");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->CreatePool(c, pool_req, &pool);
              }).ok());
  EXPECT_EQ(pool.name(), "clusters/slurm-a/pools/a100");
  EXPECT_EQ(pool.etag(), "1");

  v1::ListPoolsRequest pools_req;
  pools_req.set_parent("clusters/-");
  v1::ListPoolsResponse pools;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->ListPools(c, pools_req, &pools);
              }).ok());
  EXPECT_EQ(pools.pools_size(), 2);
  pools_req.set_parent("clusters/slurm-a");
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->ListPools(c, pools_req, &pools);
              }).ok());
  ASSERT_EQ(pools.pools_size(), 1);

  // A flavor in use stays.
  v1::DeleteFlavorRequest del_flavor;
  google::protobuf::Empty empty;
  del_flavor.set_name("flavors/spot-a100");
  s = Run(admin_, [&](auto* c) {
    return clusters_->DeleteFlavor(c, del_flavor, &empty);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "flavor spot-a100 is used by a pool");
  del_flavor.set_name("flavors/gpu");  // pool sim/main and the queues' quotas
  s = Run(admin_, [&](auto* c) {
    return clusters_->DeleteFlavor(c, del_flavor, &empty);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), StartsWith("flavor gpu is used by a"));

  // A pool with nodes stays; deleting the cluster takes pools and nodes with
  // it.
  v1::DeletePoolRequest del_pool;
  del_pool.set_name("clusters/sim/pools/main");
  s = Run(admin_,
          [&](auto* c) { return clusters_->DeletePool(c, del_pool, &empty); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "pool main still has nodes");
  del_pool.set_name("clusters/slurm-a/pools/a100");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->DeletePool(c, del_pool, &empty);
              }).ok());
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->DeleteFlavor(c, del_flavor, &empty);
              }).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  v1::DeleteClusterRequest del_cluster;
  del_cluster.set_name("clusters/sim");
  s = Run(admin_, [&](auto* c) {
    return clusters_->DeleteCluster(c, del_cluster, &empty);
  });
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::ListNodesRequest nodes_req;
  nodes_req.set_parent("clusters/-");
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->ListNodes(c, nodes_req, &nodes);
              }).ok());
  EXPECT_EQ(nodes.nodes_size(), 0);
}

TEST_F(AdminApiTest, NodesReportDrainCapacity) {
  // The seed reported clusters/sim/nodes/n0..n3 (8 GPUs each, pool main, flavor
  // gpu).
  v1::GetCapacityRequest cap_req;
  v1::CapacitySummary cap;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->GetCapacity(c, cap_req, &cap);
              }).ok());
  ASSERT_EQ(cap.flavors_size(), 1);
  EXPECT_EQ(cap.flavors(0).flavor(), "gpu");
  EXPECT_EQ(cap.flavors(0).ready_nodes(), 4);
  EXPECT_EQ(cap.flavors(0).total().gpus(), 32);
  EXPECT_EQ(cap.flavors(0).total().cpu_millis(), 4 * 64000);

  v1::GetNodeRequest get;
  get.set_name("clusters/sim/nodes/n1");
  v1::Node node;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->GetNode(c, get, &node);
              }).ok());
  EXPECT_EQ(node.pool(), "main");
  EXPECT_TRUE(node.has_report_time());

  // Drain one; DOWN cannot be set by hand.
  v1::SetNodeStateRequest drain;
  drain.set_name("clusters/sim/nodes/n1");
  drain.set_state(v1::NODE_STATE_DOWN);
  grpc::Status s = Run(admin_, [&](auto* c) {
    return clusters_->SetNodeState(c, drain, &node);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "state");
  drain.set_state(v1::NODE_STATE_DRAINING);
  drain.set_reason("bad DIMM");
  s = Run(acme_admin_,
          [&](auto* c) { return clusters_->SetNodeState(c, drain, &node); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->SetNodeState(c, drain, &node);
              }).ok());
  EXPECT_EQ(node.state(), v1::NODE_STATE_DRAINING);
  EXPECT_EQ(node.state_message(), "bad DIMM");
  std::vector<v1::AuditEntry> audit = Audit("SetNodeState");
  ASSERT_EQ(audit.size(), 3u);  // newest first
  EXPECT_EQ(audit[0].result(), "OK");
  EXPECT_THAT(audit[0].request_json(), HasSubstr("bad DIMM"));
  EXPECT_EQ(audit[0].resource(), "clusters/sim/nodes/n1");
  EXPECT_EQ(audit[0].principal(), "users/root");
  EXPECT_EQ(audit[1].result(), "PERMISSION_DENIED");
  EXPECT_EQ(audit[1].principal(), "users/ann");
  EXPECT_EQ(audit[2].result(), "INVALID_ARGUMENT");

  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->GetCapacity(c, cap_req, &cap);
              }).ok());
  EXPECT_EQ(cap.flavors(0).ready_nodes(), 3);
  EXPECT_EQ(cap.flavors(0).total().gpus(), 24);

  // Filters.
  v1::ListNodesRequest list;
  list.set_parent("clusters/sim");
  list.set_state(v1::NODE_STATE_DRAINING);
  v1::ListNodesResponse listed;
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->ListNodes(c, list, &listed);
              }).ok());
  ASSERT_EQ(listed.nodes_size(), 1);
  EXPECT_EQ(listed.nodes(0).name(), "clusters/sim/nodes/n1");
  list.set_state(v1::NODE_STATE_UNSPECIFIED);
  list.set_pool("main");
  list.set_page_size(3);
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->ListNodes(c, list, &listed);
              }).ok());
  EXPECT_EQ(listed.nodes_size(), 3);
  EXPECT_FALSE(listed.next_page_token().empty());

  // A complete report replaces the inventory.
  v1::ReportNodesRequest report;
  report.set_parent("clusters/sim");
  report.set_complete(true);
  for (const char* id : {"n0", "n9"}) {
    v1::Node* n = report.add_nodes();
    n->set_name(absl::StrCat("clusters/sim/nodes/", id));
    n->set_pool("main");
    n->set_state(v1::NODE_STATE_READY);
    n->mutable_capacity()->set_gpus(4);
    n->mutable_capacity()->set_cpu_millis(1000);
    n->mutable_capacity()->set_memory_bytes(1 << 30);
  }
  v1::ReportNodesResponse reported;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->ReportNodes(c, report, &reported);
              }).ok());
  EXPECT_EQ(reported.upserted(), 2);
  EXPECT_EQ(reported.removed(), 3);
  list.clear_pool();
  list.set_page_size(0);
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return clusters_->ListNodes(c, list, &listed);
              }).ok());
  ASSERT_EQ(listed.nodes_size(), 2);
  EXPECT_EQ(listed.nodes(0).capacity().gpus(), 4);
  audit = Audit("ReportNodes");
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit[0].result(), "OK");
  EXPECT_EQ(audit[0].resource(), "clusters/sim");

  // Bad reports are refused whole.
  v1::ReportNodesRequest bad = report;
  bad.set_complete(false);
  bad.mutable_nodes(1)->set_pool("nope");
  s = Run(admin_,
          [&](auto* c) { return clusters_->ReportNodes(c, bad, &reported); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "nodes[1].pool");
  bad = report;
  bad.mutable_nodes(1)->set_name("clusters/other/nodes/x");
  s = Run(admin_,
          [&](auto* c) { return clusters_->ReportNodes(c, bad, &reported); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "nodes[1].name");
  bad = report;
  bad.mutable_nodes(0)->mutable_capacity()->set_cpu_millis(0);
  s = Run(admin_,
          [&](auto* c) { return clusters_->ReportNodes(c, bad, &reported); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "nodes[0].capacity.cpu_millis");
  audit = Audit("ReportNodes");
  ASSERT_GE(audit.size(), 3u);
  EXPECT_EQ(audit[0].result(), "INVALID_ARGUMENT");
}

// --- API tokens ---

TEST_F(AdminApiTest, ApiTokens) {
  // Own token: the secret works once created, and is shown only then.
  v1::CreateApiTokenRequest create;
  create.set_description("laptop");
  v1::CreateApiTokenResponse created;
  ASSERT_TRUE(Run(acme_member_, [&](auto* c) {
                return admin_stub_->CreateApiToken(c, create, &created);
              }).ok());
  EXPECT_EQ(created.token().principal(), "users/alice");
  EXPECT_EQ(created.token().creator(), "users/alice");
  EXPECT_THAT(created.token().name(), StartsWith("apiTokens/"));
  EXPECT_THAT(created.secret(), StartsWith("ty_"));
  ASSERT_TRUE(created.token().has_expire_time());
  const int64_t lifetime = created.token().expire_time().seconds() -
                           created.token().create_time().seconds();
  EXPECT_NEAR(lifetime, 90 * 86400, 5);
  v1::WhoAmIRequest who;
  v1::Caller me;
  ASSERT_TRUE(Run(created.secret(), [&](auto* c) {
                return admin_stub_->WhoAmI(c, who, &me);
              }).ok());
  EXPECT_EQ(me.principal(), "users/alice");
  ASSERT_EQ(me.bindings_size(), 1);
  EXPECT_EQ(me.bindings(0).role(), v1::ROLE_MEMBER);

  // ttl limits.
  create.mutable_ttl()->set_seconds(366 * 86400);
  v1::CreateApiTokenResponse refused;
  grpc::Status s = Run(acme_member_, [&](auto* c) {
    return admin_stub_->CreateApiToken(c, create, &refused);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "ttl");

  // Others' tokens: members cannot, tenant-admins can for principals of their
  // tenants only.
  create.clear_ttl();
  create.set_principal("users/vic");
  s = Run(acme_member_, [&](auto* c) {
    return admin_stub_->CreateApiToken(c, create, &refused);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return admin_stub_->CreateApiToken(c, create, &refused);
              }).ok());
  EXPECT_EQ(refused.token().principal(), "users/vic");
  EXPECT_EQ(refused.token().creator(), "users/ann");
  create.set_principal("users/olga");  // bound in "other" only
  s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->CreateApiToken(c, create, &refused);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  create.set_principal("users/nobody");  // no bindings at all
  s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->CreateApiToken(c, create, &refused);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  create.set_principal("users/root");  // platform admin
  s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->CreateApiToken(c, create, &refused);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  create.set_principal("not a principal");
  s = Run(admin_, [&](auto* c) {
    return admin_stub_->CreateApiToken(c, create, &refused);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "principal");

  // Listing: own by default; "-" for platform admins only.
  v1::ListApiTokensRequest list;
  v1::ListApiTokensResponse listed;
  ASSERT_TRUE(Run(acme_member_, [&](auto* c) {
                return admin_stub_->ListApiTokens(c, list, &listed);
              }).ok());
  for (const auto& t : listed.tokens()) EXPECT_EQ(t.principal(), "users/alice");
  EXPECT_EQ(listed.tokens_size(), 2);  // the harness's and "laptop"
  list.set_principal("-");
  s = Run(acme_member_, [&](auto* c) {
    return admin_stub_->ListApiTokens(c, list, &listed);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  list.set_page_size(2);
  int total = 0;
  while (true) {
    v1::ListApiTokensResponse page;
    ASSERT_TRUE(Run(admin_, [&](auto* c) {
                  return admin_stub_->ListApiTokens(c, list, &page);
                }).ok());
    total += page.tokens_size();
    if (page.next_page_token().empty()) break;
    list.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(total, 7);  // root, ann, vic (×2), alice (×2), olga

  // Revoke: others cannot see the token; the owner revokes; the secret stops
  // working at once.
  v1::RevokeApiTokenRequest revoke;
  revoke.set_name(created.token().name());
  v1::ApiToken revoked;
  s = Run(acme_viewer_, [&](auto* c) {
    return admin_stub_->RevokeApiToken(c, revoke, &revoked);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Run(acme_member_, [&](auto* c) {
                return admin_stub_->RevokeApiToken(c, revoke, &revoked);
              }).ok());
  EXPECT_TRUE(revoked.has_revoke_time());
  s = Run(created.secret(),
          [&](auto* c) { return admin_stub_->WhoAmI(c, who, &me); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  std::vector<v1::AuditEntry> audit = Audit("RevokeApiToken");
  ASSERT_EQ(audit.size(), 2u);
  EXPECT_EQ(audit[0].result(), "OK");
  EXPECT_EQ(audit[1].result(), "NOT_FOUND");
  audit = Audit("CreateApiToken");
  ASSERT_FALSE(audit.empty());
  for (const auto& e : audit) {
    EXPECT_THAT(e.request_json(), ::testing::Not(HasSubstr("ty_")));
  }

  // Expiry.
  v1::CreateApiTokenRequest short_lived;
  short_lived.mutable_ttl()->set_seconds(1);
  v1::CreateApiTokenResponse brief;
  ASSERT_TRUE(Run(acme_member_, [&](auto* c) {
                return admin_stub_->CreateApiToken(c, short_lived, &brief);
              }).ok());
  ASSERT_TRUE(Run(brief.secret(), [&](auto* c) {
                return admin_stub_->WhoAmI(c, who, &me);
              }).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  s = Run(brief.secret(),
          [&](auto* c) { return admin_stub_->WhoAmI(c, who, &me); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("expired"));
}

// --- Role bindings and the audit log ---

TEST_F(AdminApiTest, RoleBindings) {
  v1::CreateRoleBindingRequest create;
  create.mutable_role_binding()->set_principal("users/bob");
  create.mutable_role_binding()->set_role(v1::ROLE_VIEWER);
  create.mutable_role_binding()->set_tenant("acme");
  v1::RoleBinding binding;
  grpc::Status s = Run(acme_member_, [&](auto* c) {
    return admin_stub_->CreateRoleBinding(c, create, &binding);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return admin_stub_->CreateRoleBinding(c, create, &binding);
              }).ok());
  EXPECT_THAT(binding.name(), StartsWith("roleBindings/"));
  EXPECT_EQ(binding.creator(), "users/ann");
  s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->CreateRoleBinding(c, create, &binding);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  // Other tenants are invisible to a tenant admin; platform-admin is out of
  // reach.
  v1::CreateRoleBindingRequest elsewhere = create;
  elsewhere.mutable_role_binding()->set_tenant("other");
  v1::RoleBinding other_binding;
  s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->CreateRoleBinding(c, elsewhere, &other_binding);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  v1::CreateRoleBindingRequest escalate;
  escalate.mutable_role_binding()->set_principal("users/ann");
  escalate.mutable_role_binding()->set_role(v1::ROLE_PLATFORM_ADMIN);
  s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->CreateRoleBinding(c, escalate, &other_binding);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Invalid: a tenant role without a tenant; an unknown tenant (platform
  // admin).
  v1::CreateRoleBindingRequest bad = create;
  bad.mutable_role_binding()->clear_tenant();
  s = Run(admin_, [&](auto* c) {
    return admin_stub_->CreateRoleBinding(c, bad, &other_binding);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info_.field(), "role_binding.tenant");
  bad.mutable_role_binding()->set_tenant("ghost");
  s = Run(admin_, [&](auto* c) {
    return admin_stub_->CreateRoleBinding(c, bad, &other_binding);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(info_.field(), "role_binding.tenant");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return admin_stub_->CreateRoleBinding(c, elsewhere,
                                                      &other_binding);
              }).ok());

  // The new binding takes effect at once.
  const std::string bob = h_->Token("users/bob", v1::ROLE_UNSPECIFIED);
  v1::GetTenantRequest get;
  get.set_name("tenants/acme");
  v1::Tenant tenant;
  ASSERT_TRUE(Run(bob, [&](auto* c) {
                return queues_->GetTenant(c, get, &tenant);
              }).ok());

  // Listing: a tenant admin sees its tenant's bindings and its own, not other
  // tenants'.
  v1::ListRoleBindingsRequest list;
  v1::ListRoleBindingsResponse listed;
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return admin_stub_->ListRoleBindings(c, list, &listed);
              }).ok());
  for (const auto& b : listed.role_bindings()) EXPECT_EQ(b.tenant(), "acme");
  EXPECT_EQ(listed.role_bindings_size(), 4);  // ann, vic, alice, bob
  ASSERT_TRUE(Run(acme_viewer_, [&](auto* c) {
                return admin_stub_->ListRoleBindings(c, list, &listed);
              }).ok());
  ASSERT_EQ(listed.role_bindings_size(), 1);  // its own
  EXPECT_EQ(listed.role_bindings(0).principal(), "users/vic");
  list.set_page_size(2);
  std::vector<std::string> names;
  while (true) {
    v1::ListRoleBindingsResponse page;
    ASSERT_TRUE(Run(admin_, [&](auto* c) {
                  return admin_stub_->ListRoleBindings(c, list, &page);
                }).ok());
    for (const auto& b : page.role_bindings()) names.push_back(b.name());
    if (page.next_page_token().empty()) break;
    list.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(names.size(), 7u);  // root, ann, vic, alice, olga, bob×2

  // Deleting: same rights as creating.
  v1::DeleteRoleBindingRequest del;
  google::protobuf::Empty empty;
  del.set_name(other_binding.name());
  s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->DeleteRoleBinding(c, del, &empty);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  del.set_name(binding.name());
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return admin_stub_->DeleteRoleBinding(c, del, &empty);
              }).ok());
  s = Run(bob, [&](auto* c) { return queues_->GetTenant(c, get, &tenant); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  del.set_name("roleBindings/999999");
  s = Run(admin_, [&](auto* c) {
    return admin_stub_->DeleteRoleBinding(c, del, &empty);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  std::vector<v1::AuditEntry> audit = Audit("CreateRoleBinding");
  int ok = 0, refused = 0;
  for (const auto& e : audit) {
    if (e.result() == "OK") {
      ++ok;
      EXPECT_THAT(e.resource(), StartsWith("roleBindings/"));
    } else {
      ++refused;
    }
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(refused, 6);
}

TEST_F(AdminApiTest, AuditLogAccess) {
  CreateTenant("zeta");
  v1::CreateProjectRequest create;
  create.set_parent("tenants/acme");
  create.set_project_id("p1");
  v1::Project project;
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return queues_->CreateProject(c, create, &project);
              }).ok());

  v1::ListAuditLogRequest req;
  v1::ListAuditLogResponse resp;
  grpc::Status s = Run(acme_admin_, [&](auto* c) {
    return admin_stub_->ListAuditLog(c, req, &resp);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  req.set_tenant("other");
  s = Run(acme_admin_,
          [&](auto* c) { return admin_stub_->ListAuditLog(c, req, &resp); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  req.set_tenant("acme");
  s = Run(acme_viewer_,
          [&](auto* c) { return admin_stub_->ListAuditLog(c, req, &resp); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Run(acme_admin_, [&](auto* c) {
                return admin_stub_->ListAuditLog(c, req, &resp);
              }).ok());
  ASSERT_FALSE(resp.entries().empty());
  for (const auto& e : resp.entries()) EXPECT_EQ(e.tenant(), "acme");
  EXPECT_EQ(resp.entries(0).method(),
            "/trainyard.v1.QueueService/CreateProject");
  EXPECT_EQ(resp.entries(0).principal(), "users/ann");
  EXPECT_EQ(resp.entries(0).resource(), "tenants/acme/projects/p1");

  // Platform admin: everything, newest first, paged, filtered by principal and
  // time.
  req.clear_tenant();
  req.set_page_size(3);
  int64_t last_id = INT64_MAX;
  int entries = 0;
  while (true) {
    v1::ListAuditLogResponse page;
    ASSERT_TRUE(Run(admin_, [&](auto* c) {
                  return admin_stub_->ListAuditLog(c, req, &page);
                }).ok());
    for (const auto& e : page.entries()) {
      EXPECT_LT(e.id(), last_id);
      last_id = e.id();
      ++entries;
    }
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  EXPECT_GT(entries, 10);
  req.clear_page_token();
  req.set_page_size(0);
  req.set_principal("users/ann");
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return admin_stub_->ListAuditLog(c, req, &resp);
              }).ok());
  EXPECT_EQ(resp.entries_size(), 1);
  *req.mutable_start_time() =
      google::protobuf::util::TimeUtil::GetCurrentTime();
  req.mutable_start_time()->set_seconds(req.start_time().seconds() + 3600);
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return admin_stub_->ListAuditLog(c, req, &resp);
              }).ok());
  EXPECT_EQ(resp.entries_size(), 0);
}

// --- trainyard apply ---

std::string DemoBundle() {
  const char* root = std::getenv("TRAINYARD_SOURCE_DIR");
  std::ifstream in(absl::StrCat(root == nullptr ? "." : root,
                                "/deploy/local/demo.textproto"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path) << text;
  return path;
}

TEST_F(AdminApiTest, ApplyDemoBundleIsIdempotent) {
  const std::string bundle = DemoBundle();
  ASSERT_FALSE(bundle.empty()) << "deploy/local/demo.textproto not found";
  const std::string path = WriteTemp("demo.textproto", bundle);

  ::testing::internal::CaptureStdout();
  int rc = RunApply(path, h_->target(), admin_);
  std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("created priority class priorityClasses/high\n"));
  EXPECT_THAT(out, HasSubstr("created flavor flavors/spot-h100\n"));
  EXPECT_THAT(out, HasSubstr("created pool clusters/sim-a/pools/spot\n"));
  EXPECT_THAT(out, HasSubstr("created node clusters/sim-a/nodes/a-0004\n"));
  EXPECT_THAT(out, HasSubstr("created queue tenants/demo/queues/default\n"));

  // Again: nothing changes.
  ::testing::internal::CaptureStdout();
  rc = RunApply(path, h_->target(), admin_);
  out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("created")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("updated")));
  EXPECT_THAT(out, HasSubstr("unchanged queue tenants/demo/queues/default\n"));
  EXPECT_THAT(out, HasSubstr("unchanged node clusters/sim-a/nodes/a-0001\n"));

  // The demo's capacity is visible.
  v1::GetCapacityRequest cap_req;
  v1::CapacitySummary cap;
  ASSERT_TRUE(Run(admin_, [&](auto* c) {
                return clusters_->GetCapacity(c, cap_req, &cap);
              }).ok());
  int64_t h100_gpus = 0;
  for (const auto& f : cap.flavors()) {
    if (absl::EndsWith(f.flavor(), "-h100")) h100_gpus += f.total().gpus();
  }
  // 8 nodes × 8 GPUs, as in deploy/local/sim-cluster.textproto.
  EXPECT_EQ(h100_gpus, 64);

  // A change is an update.
  std::string changed = bundle;
  const std::string from = "display_name: \"Demo queue\"";
  ASSERT_NE(changed.find(from), std::string::npos);
  changed.replace(changed.find(from), from.size(), "display_name: \"Renamed\"");
  const std::string changed_path = WriteTemp("demo2.textproto", changed);
  ::testing::internal::CaptureStdout();
  rc = RunApply(changed_path, h_->target(), admin_);
  out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("updated queue tenants/demo/queues/default\n"));
  EXPECT_THAT(out, HasSubstr("unchanged tenant tenants/demo\n"));
}

TEST_F(AdminApiTest, ApplyErrors) {
  // Parse error: FILE:LINE:COL, exit 2, nothing applied.
  const std::string broken = WriteTemp(
      "broken.textproto", "tenants {\n  name: \"tenants/x\"\n  bogus: 1\n}\n");
  ::testing::internal::CaptureStderr();
  int rc = RunApply(broken, h_->target(), admin_);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr(absl::StrCat(broken, ":3:")));

  // RPC error: code name and message, exit 1.
  const std::string bad = WriteTemp(
      "bad.textproto",
      "queues { name: \"tenants/acme/queues/q2\" cohort: \"missing\" }\n");
  ::testing::internal::CaptureStderr();
  rc = RunApply(bad, h_->target(), admin_);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("FAILED_PRECONDITION: queue.cohort: cohort "
                             "\"missing\" does not exist"));

  // Wrong credentials.
  const std::string ok =
      WriteTemp("ok.textproto", "tenants { name: \"tenants/acme\" }\n");
  ::testing::internal::CaptureStderr();
  rc = RunApply(ok, h_->target(), "ty_nope_nope");
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("UNAUTHENTICATED"));
}

// --- What every method promises (docs/api.md, "Standard methods", "Errors")
// ---

// A fresh request of `method`'s input type.
std::unique_ptr<google::protobuf::Message> NewRequest(
    const google::protobuf::MethodDescriptor& method) {
  return std::unique_ptr<google::protobuf::Message>(
      google::protobuf::MessageFactory::generated_factory()
          ->GetPrototype(method.input_type())
          ->New());
}

// Sets the string field `field` of `message` if it has one.
void SetIfPresent(google::protobuf::Message& message, const std::string& field,
                  const std::string& value) {
  const google::protobuf::FieldDescriptor* f =
      message.GetDescriptor()->FindFieldByName(field);
  if (f != nullptr) message.GetReflection()->SetString(&message, f, value);
}

// Every List method of the api, with a request a platform admin may make: a
// parent that takes every tenant or cluster where the listing has one
// (ListProjects: tenant acme's), and a job (`job`) for ListCheckpoints.
std::vector<std::pair<const google::protobuf::MethodDescriptor*,
                      std::unique_ptr<google::protobuf::Message>>>
ListRequests(const std::string& job) {
  std::vector<std::pair<const google::protobuf::MethodDescriptor*,
                        std::unique_ptr<google::protobuf::Message>>>
      out;
  for (const google::protobuf::MethodDescriptor* m : ApiHarness::ApiMethods()) {
    if (m->server_streaming() ||
        m->input_type()->FindFieldByName("page_token") == nullptr) {
      continue;
    }
    std::unique_ptr<google::protobuf::Message> req = NewRequest(*m);
    const bool of_cluster =
        m->name() == "ListPools" || m->name() == "ListNodes";
    SetIfPresent(*req, "parent",
                 of_cluster                    ? "clusters/-"
                 : m->name() == "ListProjects" ? "tenants/acme"
                                               : "tenants/-");
    SetIfPresent(*req, "job", job);
    out.emplace_back(m, std::move(req));
  }
  return out;
}

TEST_F(AdminApiTest, EveryListRefusesAPageTokenThatIsNotUtf8) {
  const int64_t job = h_->SubmitJob(admin_, MinimalSubmit("acme", "tokens"));
  ASSERT_GT(job, 0);
  auto lists = ListRequests(absl::StrCat("tenants/acme/jobs/", job));
  // Tenants, projects, queues, cohorts, priority classes, clusters, flavors,
  // pools, nodes, jobs, checkpoints, API tokens, role bindings, audit log.
  EXPECT_GE(lists.size(), 14u);
  // Base64 of bytes that are not UTF-8, raw and as one part of a two-part key.
  for (const std::string& bytes :
       {std::string("\xff\xfe"), std::string("acme\x1f\xc3\x28")}) {
    for (auto& [method, req] : lists) {
      SetIfPresent(*req, "page_token", absl::WebSafeBase64Escape(bytes));
      v1::ErrorInfo info;
      grpc::Status s =
          h_->CallUnary(admin_, *method, req->SerializeAsString(), &info);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << method->full_name() << ": " << s.error_message();
      EXPECT_EQ(info.field(), "page_token") << method->full_name();
      EXPECT_EQ(info.reason(), "INVALID_VALUE") << method->full_name();
      EXPECT_THAT(s.error_message(), Not(HasSubstr("byte sequence")))
          << method->full_name();
    }
  }
}

TEST_F(AdminApiTest, EveryListCapsPageSizeAtAThousand) {
  const int64_t job = h_->SubmitJob(admin_, MinimalSubmit("acme", "sizes"));
  ASSERT_GT(job, 0);
  for (auto& [method, req] :
       ListRequests(absl::StrCat("tenants/acme/jobs/", job))) {
    const google::protobuf::FieldDescriptor* size =
        req->GetDescriptor()->FindFieldByName("page_size");
    ASSERT_NE(size, nullptr) << method->full_name();
    req->GetReflection()->SetInt32(req.get(), size, 5000);
    v1::ErrorInfo info;
    grpc::Status s =
        h_->CallUnary(admin_, *method, req->SerializeAsString(), &info);
    EXPECT_TRUE(s.ok()) << method->full_name() << ": " << s.error_message();
    req->GetReflection()->SetInt32(req.get(), size, -1);
    s = h_->CallUnary(admin_, *method, req->SerializeAsString(), &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method->full_name();
    EXPECT_EQ(info.field(), "page_size") << method->full_name();
    EXPECT_EQ(info.reason(), "OUT_OF_RANGE") << method->full_name();
  }
  // More than a thousand objects: a page of 5,000 asked holds 1,000.
  for (int i = 0; i < 1001; ++i) {
    v1::ReportCheckpointRequest req;
    req.set_job(absl::StrCat("tenants/acme/jobs/", job));
    req.mutable_checkpoint()->set_step(i + 1);
    req.mutable_checkpoint()->set_uri(absl::StrCat("s3://b/ck-", i));
    *req.mutable_checkpoint()->mutable_time() =
        google::protobuf::util::TimeUtil::GetCurrentTime();
    v1::Checkpoint saved;
    grpc::Status s = Run(admin_, [&](auto* c) {
      return jobs_->ReportCheckpoint(c, req, &saved);
    });
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  v1::ListCheckpointsRequest list;
  list.set_job(absl::StrCat("tenants/acme/jobs/", job));
  list.set_page_size(5000);
  v1::ListCheckpointsResponse page;
  grpc::Status s = Run(
      admin_, [&](auto* c) { return jobs_->ListCheckpoints(c, list, &page); });
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(page.checkpoints_size(), 1000);
  EXPECT_FALSE(page.next_page_token().empty());
}

TEST_F(AdminApiTest, NulBytesInAnyStringFieldAreRefusedNamingTheField) {
  const std::string nul("ci\0bot", 6);
  auto expect_refused = [&](const grpc::Status& s, const std::string& field,
                            const std::string& what) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << what << ": " << s.error_message();
    EXPECT_EQ(info_.field(), field) << what;
    EXPECT_EQ(info_.reason(), "INVALID_VALUE") << what;
    EXPECT_THAT(s.error_message(), HasSubstr("NUL")) << what;
  };

  // An API token's description: refused, and no token is made.
  auto token_count = [&] {
    v1::ListApiTokensResponse tokens;
    EXPECT_TRUE(Run(admin_, [&](auto* c) {
                  return admin_stub_->ListApiTokens(
                      c, v1::ListApiTokensRequest(), &tokens);
                }).ok());
    return tokens.tokens_size();
  };
  const int tokens_before = token_count();
  v1::CreateApiTokenRequest token;
  token.set_description(nul);
  v1::CreateApiTokenResponse made;
  expect_refused(Run(admin_,
                     [&](auto* c) {
                       return admin_stub_->CreateApiToken(c, token, &made);
                     }),
                 "description", "CreateApiToken");
  EXPECT_EQ(token_count(), tokens_before);
  // Bytes that are not UTF-8 in a string field never reach a handler:
  // protobuf refuses them when it parses the request (field 2,
  // description), and the server answers INVALID_ARGUMENT naming the
  // request (docs/api.md "Errors"), not gRPC's own INTERNAL.
  const google::protobuf::MethodDescriptor* create =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
          "trainyard.v1.AdminService.CreateApiToken");
  ASSERT_NE(create, nullptr);
  grpc::Status raw =
      h_->CallUnary(admin_, *create, std::string("\x12\x02\xff\xfe", 4));
  EXPECT_EQ(raw.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << raw.error_message();
  EXPECT_THAT(raw.error_message(), HasSubstr("not valid UTF-8"));
  EXPECT_EQ(token_count(), tokens_before);

  // A label value of a project, a tenant's display name.
  v1::CreateProjectRequest project;
  project.set_parent("tenants/acme");
  project.set_project_id("nul");
  (*project.mutable_project()->mutable_labels())["team"] = nul;
  v1::Project created;
  expect_refused(Run(acme_admin_,
                     [&](auto* c) {
                       return queues_->CreateProject(c, project, &created);
                     }),
                 "project.labels[\"team\"]", "CreateProject");
  v1::UpdateTenantRequest tenant;
  tenant.mutable_tenant()->set_name("tenants/acme");
  tenant.mutable_tenant()->set_display_name(nul);
  tenant.mutable_update_mask()->add_paths("display_name");
  v1::Tenant updated;
  expect_refused(
      Run(admin_,
          [&](auto* c) { return queues_->UpdateTenant(c, tenant, &updated); }),
      "tenant.display_name", "UpdateTenant");

  // A job's display name in a batch, and a cancel's reason.
  v1::SubmitJobBatchRequest batch;
  batch.set_parent("tenants/acme");
  *batch.add_requests() = MinimalSubmit("acme", "fine");
  *batch.add_requests() = MinimalSubmit("acme", "nul");
  batch.mutable_requests(1)->mutable_job()->set_display_name(nul);
  v1::SubmitJobBatchResponse submitted;
  expect_refused(
      Run(acme_member_,
          [&](auto* c) { return jobs_->SubmitBatch(c, batch, &submitted); }),
      "requests[1].job.display_name", "SubmitBatch");
  const int64_t job = h_->SubmitJob(acme_member_, MinimalSubmit("acme", "c"));
  ASSERT_GT(job, 0);
  v1::CancelJobRequest cancel;
  cancel.set_name(absl::StrCat("tenants/acme/jobs/", job));
  cancel.set_reason(nul);
  v1::Job cancelled;
  expect_refused(
      Run(acme_member_,
          [&](auto* c) { return jobs_->Cancel(c, cancel, &cancelled); }),
      "reason", "Cancel");
  EXPECT_EQ(h_->GetJob(admin_, "acme", job).state(), v1::JOB_STATE_QUEUED);
}

TEST_F(AdminApiTest, EveryInvalidArgumentNamesItsFieldAndReason) {
  // Every unary method with an empty request, as a platform admin: whatever
  // is INVALID_ARGUMENT says which field and why.
  int invalid = 0;
  for (const google::protobuf::MethodDescriptor* m : ApiHarness::ApiMethods()) {
    if (m->server_streaming() || m->client_streaming()) continue;
    v1::ErrorInfo info;
    grpc::Status s =
        h_->CallUnary(admin_, *m, NewRequest(*m)->SerializeAsString(), &info);
    if (s.error_code() != grpc::StatusCode::INVALID_ARGUMENT) continue;
    ++invalid;
    EXPECT_FALSE(info.field().empty())
        << m->full_name() << ": " << s.error_message();
    EXPECT_FALSE(info.reason().empty())
        << m->full_name() << ": " << s.error_message();
  }
  EXPECT_GT(invalid, 20);
}

}  // namespace
}  // namespace trainyard::testing
