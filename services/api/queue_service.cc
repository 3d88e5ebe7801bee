#include "services/api/queue_service.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "services/api/resource_util.h"
#include "services/core/errors.h"
#include "services/core/job_state.h"
#include "services/core/names.h"
#include "services/core/string_view.h"
#include "services/core/validation.h"

namespace trainyard::api {
namespace {

namespace pg = storage::postgres;
namespace v1 = trainyard::v1;

using Key = std::vector<std::string>;

std::string Method(std::string_view rpc) {
  return core::Cat("/trainyard.v1.QueueService/", rpc);
}

const UpdatableFields& TenantFields() {
  static const auto* fields =
      new UpdatableFields{{"display_name", "labels", "default_priority_class",
                           "submit_rate_limit", "submit_burst", "suspended"}};
  return *fields;
}
const UpdatableFields& ProjectFields() {
  static const auto* fields = new UpdatableFields{{"display_name", "labels"}};
  return *fields;
}
const UpdatableFields& QueueFields() {
  static const auto* fields = new UpdatableFields{
      {"display_name", "cohort", "quotas", "fair_share_weight",
       "queueing_strategy", "preemption", "flavor_fungibility", "stop_policy",
       "min_runtime"}};
  return *fields;
}
const UpdatableFields& CohortFields() {
  static const auto* fields =
      new UpdatableFields{{"parent", "fair_share_weight", "quotas"}};
  return *fields;
}
const UpdatableFields& PriorityClassFields() {
  static const auto* fields =
      new UpdatableFields{{"value", "preemptible", "description"}};
  return *fields;
}

std::string TenantNameOf(const Key& key) { return core::TenantName(key[0]); }
std::string ProjectNameOf(const Key& key) {
  return core::ProjectName(key[0], key[1]);
}
std::string QueueNameOf(const Key& key) {
  return core::QueueName(key[0], key[1]);
}
std::string CohortNameOf(const Key& key) { return core::CohortName(key[0]); }

// A foreign key to tenants violated by an insert under parent
// "tenants/{tenant}".
ConstraintMessage UnknownTenant(std::string constraint,
                                std::string_view tenant) {
  return {std::move(constraint), "parent", reason::kUnknownTenant,
          core::Cat("tenant ", Quoted(tenant), " does not exist")};
}

// Every flavor named in quotas exists ("<field>[i].flavor"); ids that are not
// valid are left to validation.
absl::Status CheckQuotaFlavors(
    pg::ObjectStore* objects,
    const google::protobuf::RepeatedPtrField<v1::FlavorQuotas>& quotas,
    std::string_view field) {
  for (int i = 0; i < quotas.size(); ++i) {
    const std::string& flavor = quotas.Get(i).flavor();
    if (!core::IsValidId(flavor)) continue;
    TY_RETURN_IF_ERROR(
        CheckExists(objects, pg::FlavorKind(), {flavor},
                    core::JoinField(core::IndexField(field, i), "flavor"),
                    reason::kUnknownFlavor, "flavor"));
  }
  return absl::OkStatus();
}

// The tenant's default priority class, when set (and a valid id), exists.
absl::Status CheckDefaultPriorityClass(pg::ObjectStore* objects,
                                       const v1::Tenant& tenant) {
  const std::string& pc = tenant.default_priority_class();
  if (pc.empty() || !core::IsValidId(pc)) return absl::OkStatus();
  return CheckExists(objects, pg::PriorityClassKind(), {pc},
                     "tenant.default_priority_class",
                     reason::kUnknownPriorityClass, "priority class");
}

// Making `parent` the parent of `cohort` must not close a loop: walks up from
// `parent`.
absl::Status CheckCohortAncestry(pg::ObjectStore* objects,
                                 const std::string& cohort,
                                 const std::string& parent) {
  absl::flat_hash_set<std::string> seen;
  std::string current = parent;
  while (!current.empty()) {
    if (current == cohort) {
      return core::FieldError(
          "cohort.parent", core::reason::kInconsistent,
          core::Cat("cohort ", Quoted(parent), " is ", cohort,
                    " or one of its descendants; cohorts cannot form a cycle"));
    }
    // A loop that does not involve `cohort` (it cannot be made by this API).
    if (!seen.insert(current).second) break;
    absl::StatusOr<pg::StoredObject> row =
        objects->Get(pg::CohortKind(), {current});
    if (absl::IsNotFound(row.status())) {
      return MissingReference("cohort.parent", reason::kUnknownCohort, "cohort",
                              current);
    }
    if (!row.ok()) return row.status();
    v1::Cohort stored;
    if (!stored.ParseFromString(row->body)) {
      return absl::InternalError(StoredBodyError(core::CohortName(current)));
    }
    current = stored.parent();
  }
  return absl::OkStatus();
}

}  // namespace

void QueueServiceImpl::Invalidate() {
  if (ctx_->directory != nullptr) ctx_->directory->Invalidate();
}

// --- Tenants ---

grpc::Status QueueServiceImpl::CreateTenant(
    grpc::ServerContext* context, const v1::CreateTenantRequest* request,
    v1::Tenant* response) {
  const std::string& id = request->tenant_id();
  const std::string name = core::TenantName(id);
  return RunMutation(
      ctx_, context, Method("CreateTenant"), *request, name,
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "create tenants"));
        TY_RETURN_IF_ERROR(CheckNewId("tenant_id", id));
        audit.record.tenant = id;
        TY_RETURN_IF_ERROR(core::PrefixField(
            core::ValidateTenant(request->tenant(), ctx_->limits), "tenant"));
        TY_RETURN_IF_ERROR(
            CheckDefaultPriorityClass(ctx_->objects, request->tenant()));
        absl::StatusOr<v1::Tenant> tenant =
            CreateObject(ctx_->objects, pg::TenantKind(), {id}, name,
                         request->tenant(), audit);
        if (!tenant.ok()) return tenant.status();
        *response = *std::move(tenant);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::GetTenant(grpc::ServerContext* context,
                                         const v1::GetTenantRequest* request,
                                         v1::Tenant* response) {
  return RunRead(ctx_, context, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<std::string> id =
        core::ParseTenantName(request->name(), "name");
    if (!id.ok()) return id.status();
    const std::string name = core::TenantName(*id);
    TY_RETURN_IF_ERROR(Require(caller, *id, Permission::kRead, name));
    absl::StatusOr<v1::Tenant> tenant =
        GetObject<v1::Tenant>(ctx_->objects, pg::TenantKind(), {*id}, name);
    if (!tenant.ok()) return tenant.status();
    *response = *std::move(tenant);
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::ListTenants(
    grpc::ServerContext* context, const v1::ListTenantsRequest* request,
    v1::ListTenantsResponse* response) {
  return RunRead(ctx_, context, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 1);
    if (!query.ok()) return query.status();
    if (!caller.platform_admin) {
      query->in.emplace("id", caller.VisibleTenants());
    }
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::TenantKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &TenantNameOf, response->mutable_tenants()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::UpdateTenant(
    grpc::ServerContext* context, const v1::UpdateTenantRequest* request,
    v1::Tenant* response) {
  const v1::Tenant& patch = request->tenant();
  return RunMutation(
      ctx_, context, Method("UpdateTenant"), *request, patch.name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseTenantName(patch.name(), "tenant.name");
        if (!id.ok()) return id.status();
        const std::string name = core::TenantName(*id);
        audit.record.resource = name;
        audit.record.tenant = *id;
        TY_RETURN_IF_ERROR(
            RequirePlatformAdminIn(caller, *id, "update tenants", name));
        if (MaskCovers(request->update_mask(), "default_priority_class")) {
          TY_RETURN_IF_ERROR(CheckDefaultPriorityClass(ctx_->objects, patch));
        }
        absl::StatusOr<v1::Tenant> tenant = UpdateObject<v1::Tenant>(
            ctx_->objects, pg::TenantKind(), {*id}, name, patch,
            request->update_mask(), TenantFields(),
            [&](const v1::Tenant& merged) {
              return core::PrefixField(
                  core::ValidateTenant(merged, ctx_->limits), "tenant");
            },
            audit);
        if (!tenant.ok()) return tenant.status();
        *response = *std::move(tenant);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::DeleteTenant(
    grpc::ServerContext* context, const v1::DeleteTenantRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeleteTenant"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseTenantName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::TenantName(*id);
        audit.record.resource = name;
        audit.record.tenant = *id;
        TY_RETURN_IF_ERROR(
            RequirePlatformAdminIn(caller, *id, "delete tenants", name));
        auto still_has = [&](std::string_view what) {
          return core::Cat("tenant ", *id, " still has ", what,
                           "; delete them first");
        };
        TY_RETURN_IF_ERROR(DeleteObject(
            ctx_->objects, pg::TenantKind(), {*id}, name, audit,
            {{"jobs_tenant_fkey", "", reason::kInUse,
              core::Cat("tenant ", *id, " still has jobs")},
             {"projects_tenant_fkey", "", reason::kInUse,
              still_has("projects")},
             {"queues_tenant_fkey", "", reason::kInUse, still_has("queues")}}));
        Invalidate();
        // Its role bindings went with it (ON DELETE CASCADE).
        ctx_->auth->InvalidateAll();
        return absl::OkStatus();
      });
}

// --- Projects ---

grpc::Status QueueServiceImpl::CreateProject(
    grpc::ServerContext* context, const v1::CreateProjectRequest* request,
    v1::Project* response) {
  return RunMutation(
      ctx_, context, Method("CreateProject"), *request,
      core::Cat(request->parent(), "/projects/", request->project_id()),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> tenant =
            core::ParseTenantName(request->parent(), "parent");
        if (!tenant.ok()) return tenant.status();
        audit.record.tenant = *tenant;
        TY_RETURN_IF_ERROR(Require(caller, *tenant, Permission::kAdminTenant,
                                   core::TenantName(*tenant)));
        TY_RETURN_IF_ERROR(CheckNewId("project_id", request->project_id()));
        const std::string name =
            core::ProjectName(*tenant, request->project_id());
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(core::PrefixField(
            core::ValidateProject(request->project(), ctx_->limits),
            "project"));
        absl::StatusOr<v1::Project> project = CreateObject(
            ctx_->objects, pg::ProjectKind(), {*tenant, request->project_id()},
            name, request->project(), audit,
            {UnknownTenant("projects_tenant_fkey", *tenant)});
        if (!project.ok()) return project.status();
        *response = *std::move(project);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::GetProject(grpc::ServerContext* context,
                                          const v1::GetProjectRequest* request,
                                          v1::Project* response) {
  return RunRead(ctx_, context, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<core::TenantChildName> id =
        core::ParseProjectName(request->name(), "name");
    if (!id.ok()) return id.status();
    const std::string name = core::ProjectName(id->tenant, id->id);
    TY_RETURN_IF_ERROR(Require(caller, id->tenant, Permission::kRead, name));
    absl::StatusOr<v1::Project> project = GetObject<v1::Project>(
        ctx_->objects, pg::ProjectKind(), {id->tenant, id->id}, name);
    if (!project.ok()) return project.status();
    *response = *std::move(project);
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::ListProjects(
    grpc::ServerContext* context, const v1::ListProjectsRequest* request,
    v1::ListProjectsResponse* response) {
  return RunRead(ctx_, context, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<std::string> tenant =
        core::ParseTenantName(request->parent(), "parent");
    if (!tenant.ok()) return tenant.status();
    TY_RETURN_IF_ERROR(
        Require(caller, *tenant, Permission::kRead, core::TenantName(*tenant)));
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 2);
    if (!query.ok()) return query.status();
    query->equals.emplace_back("tenant", *tenant);
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::ProjectKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &ProjectNameOf, response->mutable_projects()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::UpdateProject(
    grpc::ServerContext* context, const v1::UpdateProjectRequest* request,
    v1::Project* response) {
  const v1::Project& patch = request->project();
  return RunMutation(
      ctx_, context, Method("UpdateProject"), *request, patch.name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<core::TenantChildName> id =
            core::ParseProjectName(patch.name(), "project.name");
        if (!id.ok()) return id.status();
        const std::string name = core::ProjectName(id->tenant, id->id);
        audit.record.resource = name;
        audit.record.tenant = id->tenant;
        TY_RETURN_IF_ERROR(
            Require(caller, id->tenant, Permission::kAdminTenant, name));
        absl::StatusOr<v1::Project> project = UpdateObject<v1::Project>(
            ctx_->objects, pg::ProjectKind(), {id->tenant, id->id}, name, patch,
            request->update_mask(), ProjectFields(),
            [&](const v1::Project& merged) {
              return core::PrefixField(
                  core::ValidateProject(merged, ctx_->limits), "project");
            },
            audit);
        if (!project.ok()) return project.status();
        *response = *std::move(project);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::DeleteProject(
    grpc::ServerContext* context, const v1::DeleteProjectRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeleteProject"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<core::TenantChildName> id =
            core::ParseProjectName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::ProjectName(id->tenant, id->id);
        audit.record.resource = name;
        audit.record.tenant = id->tenant;
        TY_RETURN_IF_ERROR(
            Require(caller, id->tenant, Permission::kAdminTenant, name));
        TY_RETURN_IF_ERROR(DeleteObject(
            ctx_->objects, pg::ProjectKind(), {id->tenant, id->id}, name, audit,
            {{"jobs_tenant_project_fkey", "", reason::kInUse,
              core::Cat("project ", id->id, " still has jobs")}}));
        Invalidate();
        return absl::OkStatus();
      });
}

// --- Queues ---

namespace {

std::vector<ConstraintMessage> QueueWriteMessages(std::string_view tenant) {
  return {UnknownTenant("queues_tenant_fkey", tenant),
          {"queues_cohort_fkey", "queue.cohort", reason::kUnknownCohort,
           "the cohort does not exist"},
          {"queue_flavors_flavor_fkey", "queue.quotas", reason::kUnknownFlavor,
           "a flavor named in the quotas does not exist"}};
}

// The cohort message names the cohort when the queue's is known.
void NameCohort(std::vector<ConstraintMessage>& messages,
                std::string_view cohort) {
  for (ConstraintMessage& m : messages) {
    if (m.constraint == "queues_cohort_fkey") {
      m.message = core::Cat("cohort ", Quoted(cohort), " does not exist");
    }
  }
}

}  // namespace

grpc::Status QueueServiceImpl::CreateQueue(
    grpc::ServerContext* context, const v1::CreateQueueRequest* request,
    v1::Queue* response) {
  return RunMutation(
      ctx_, context, Method("CreateQueue"), *request,
      core::Cat(request->parent(), "/queues/", request->queue_id()),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> tenant =
            core::ParseTenantName(request->parent(), "parent");
        if (!tenant.ok()) return tenant.status();
        audit.record.tenant = *tenant;
        TY_RETURN_IF_ERROR(RequirePlatformAdminIn(
            caller, *tenant, "create queues (their quotas grant capacity)",
            core::TenantName(*tenant)));
        TY_RETURN_IF_ERROR(CheckNewId("queue_id", request->queue_id()));
        const std::string name = core::QueueName(*tenant, request->queue_id());
        audit.record.resource = name;
        const v1::Queue& queue = request->queue();
        TY_RETURN_IF_ERROR(core::PrefixField(
            core::ValidateQueue(queue, ctx_->limits), "queue"));
        TY_RETURN_IF_ERROR(
            CheckQuotaFlavors(ctx_->objects, queue.quotas(), "queue.quotas"));
        std::vector<ConstraintMessage> messages = QueueWriteMessages(*tenant);
        NameCohort(messages, queue.cohort());
        absl::StatusOr<v1::Queue> created = CreateObject(
            ctx_->objects, pg::QueueKind(), {*tenant, request->queue_id()},
            name, queue, audit, messages);
        if (!created.ok()) return created.status();
        *response = *std::move(created);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::GetQueue(grpc::ServerContext* context,
                                        const v1::GetQueueRequest* request,
                                        v1::Queue* response) {
  return RunRead(ctx_, context, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<core::TenantChildName> id =
        core::ParseQueueName(request->name(), "name");
    if (!id.ok()) return id.status();
    const std::string name = core::QueueName(id->tenant, id->id);
    TY_RETURN_IF_ERROR(Require(caller, id->tenant, Permission::kRead, name));
    absl::StatusOr<v1::Queue> queue = GetObject<v1::Queue>(
        ctx_->objects, pg::QueueKind(), {id->tenant, id->id}, name);
    if (!queue.ok()) return queue.status();
    *response = *std::move(queue);
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::ListQueues(grpc::ServerContext* context,
                                          const v1::ListQueuesRequest* request,
                                          v1::ListQueuesResponse* response) {
  return RunRead(ctx_, context, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<std::string> tenant =
        core::ParseTenantParent(request->parent(), "parent");
    if (!tenant.ok()) return tenant.status();
    if (!request->cohort().empty() && !core::IsValidId(request->cohort())) {
      return CheckNewId("cohort", request->cohort());
    }
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 2);
    if (!query.ok()) return query.status();
    if (*tenant == core::kAllId) {
      if (!caller.platform_admin) {
        query->in.emplace("tenant", caller.VisibleTenants());
      }
    } else {
      TY_RETURN_IF_ERROR(Require(caller, *tenant, Permission::kRead,
                                 core::TenantName(*tenant)));
      query->equals.emplace_back("tenant", *tenant);
    }
    if (!request->cohort().empty()) {
      query->equals.emplace_back("cohort", request->cohort());
    }
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::QueueKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &QueueNameOf, response->mutable_queues()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::UpdateQueue(
    grpc::ServerContext* context, const v1::UpdateQueueRequest* request,
    v1::Queue* response) {
  const v1::Queue& patch = request->queue();
  return RunMutation(
      ctx_, context, Method("UpdateQueue"), *request, patch.name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<core::TenantChildName> id =
            core::ParseQueueName(patch.name(), "queue.name");
        if (!id.ok()) return id.status();
        const std::string name = core::QueueName(id->tenant, id->id);
        audit.record.resource = name;
        audit.record.tenant = id->tenant;
        TY_RETURN_IF_ERROR(RequirePlatformAdminIn(
            caller, id->tenant, "update queues (their quotas grant capacity)",
            name));
        if (MaskCovers(request->update_mask(), "quotas")) {
          TY_RETURN_IF_ERROR(
              CheckQuotaFlavors(ctx_->objects, patch.quotas(), "queue.quotas"));
        }
        std::vector<ConstraintMessage> messages =
            QueueWriteMessages(id->tenant);
        NameCohort(messages, patch.cohort());
        absl::StatusOr<v1::Queue> queue = UpdateObject<v1::Queue>(
            ctx_->objects, pg::QueueKind(), {id->tenant, id->id}, name, patch,
            request->update_mask(), QueueFields(),
            [&](const v1::Queue& merged) {
              return core::PrefixField(
                  core::ValidateQueue(merged, ctx_->limits), "queue");
            },
            audit, messages);
        if (!queue.ok()) return queue.status();
        *response = *std::move(queue);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::DeleteQueue(
    grpc::ServerContext* context, const v1::DeleteQueueRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeleteQueue"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<core::TenantChildName> id =
            core::ParseQueueName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::QueueName(id->tenant, id->id);
        audit.record.resource = name;
        audit.record.tenant = id->tenant;
        TY_RETURN_IF_ERROR(
            RequirePlatformAdminIn(caller, id->tenant, "delete queues", name));
        TY_RETURN_IF_ERROR(DeleteObject(
            ctx_->objects, pg::QueueKind(), {id->tenant, id->id}, name, audit,
            {{"jobs_tenant_queue_fkey", "", reason::kInUse,
              core::Cat("queue ", id->id, " still has jobs")}}));
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::GetQueueStatus(
    grpc::ServerContext* context, const v1::GetQueueStatusRequest* request,
    v1::QueueStatus* response) {
  return RunRead(ctx_, context, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<core::TenantChildName> id =
        core::ParseQueueName(request->name(), "name");
    if (!id.ok()) return id.status();
    const std::string name = core::QueueName(id->tenant, id->id);
    TY_RETURN_IF_ERROR(Require(caller, id->tenant, Permission::kRead, name));
    absl::StatusOr<pg::StoredObject> row =
        ctx_->objects->Get(pg::QueueKind(), {id->tenant, id->id});
    if (!row.ok()) return ExplainStorageError(row.status(), name);
    absl::StatusOr<std::vector<std::pair<v1::JobState, int64_t>>> counts =
        ctx_->jobs->CountByState(id->tenant, id->id);
    if (!counts.ok()) return counts.status();
    response->set_queue(name);
    for (const auto& [state, count] : *counts) {
      (*response
            ->mutable_jobs_by_state())[std::string(core::StateName(state))] +=
          count;
    }
    // Usage: what the queue's admitted and running jobs hold, per flavor and
    // resource, against its quotas (flavors without a quota too, nominal 0).
    // weighted_share stays the scheduler's (it depends on the whole cohort).
    absl::StatusOr<std::map<std::string, pg::JobStore::FlavorHeld>> held =
        ctx_->jobs->QueueUsage(id->tenant, id->id);
    if (!held.ok()) return held.status();
    v1::Queue queue;
    if (!queue.ParseFromString(row->body)) {
      return absl::DataLossError(core::Cat(name, ": unreadable"));
    }
    std::map<std::pair<std::string, v1::ResourceName>, int64_t> nominal;
    for (const v1::FlavorQuotas& q : queue.quotas()) {
      for (const v1::ResourceQuota& r : q.resources()) {
        nominal[{q.flavor(), r.resource()}] = r.nominal();
      }
    }
    std::map<std::pair<std::string, v1::ResourceName>, int64_t> used;
    for (const auto& [flavor, h] : *held) {
      used[{flavor, v1::RESOURCE_NAME_GPU}] = h.gpus;
      used[{flavor, v1::RESOURCE_NAME_CPU}] = h.cpu_millis;
      used[{flavor, v1::RESOURCE_NAME_MEMORY}] = h.memory_bytes;
    }
    std::set<std::pair<std::string, v1::ResourceName>> keys;
    for (const auto& [k, v] : nominal) keys.insert(k);
    for (const auto& [k, v] : used) {
      if (v != 0) keys.insert(k);
    }
    for (const auto& key : keys) {
      v1::FlavorUsage* u = response->add_usage();
      u->set_flavor(key.first);
      u->set_resource(key.second);
      const int64_t in_use = used.contains(key) ? used[key] : 0;
      const int64_t quota = nominal.contains(key) ? nominal[key] : 0;
      u->set_used(in_use);
      u->set_nominal(quota);
      // A resource without a quota entry is not limited by this queue:
      // nothing of it counts as borrowed.
      if (nominal.contains(key)) {
        u->set_borrowed(std::max<int64_t>(0, in_use - quota));
      }
    }
    return absl::OkStatus();
  });
}

// --- Cohorts ---

grpc::Status QueueServiceImpl::CreateCohort(
    grpc::ServerContext* context, const v1::CreateCohortRequest* request,
    v1::Cohort* response) {
  const std::string& id = request->cohort_id();
  const std::string name = core::CohortName(id);
  return RunMutation(
      ctx_, context, Method("CreateCohort"), *request, name,
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "create cohorts"));
        TY_RETURN_IF_ERROR(CheckNewId("cohort_id", id));
        const v1::Cohort& cohort = request->cohort();
        TY_RETURN_IF_ERROR(
            core::PrefixField(core::ValidateCohort(cohort, id), "cohort"));
        TY_RETURN_IF_ERROR(
            CheckQuotaFlavors(ctx_->objects, cohort.quotas(), "cohort.quotas"));
        absl::StatusOr<v1::Cohort> created = CreateObject(
            ctx_->objects, pg::CohortKind(), {id}, name, cohort, audit,
            {{"cohorts_parent_fkey", "cohort.parent", reason::kUnknownCohort,
              core::Cat("cohort ", Quoted(cohort.parent()),
                        " does not exist")}});
        if (!created.ok()) return created.status();
        *response = *std::move(created);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::GetCohort(grpc::ServerContext* context,
                                         const v1::GetCohortRequest* request,
                                         v1::Cohort* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::string> id =
        core::ParseCohortName(request->name(), "name");
    if (!id.ok()) return id.status();
    absl::StatusOr<v1::Cohort> cohort = GetObject<v1::Cohort>(
        ctx_->objects, pg::CohortKind(), {*id}, core::CohortName(*id));
    if (!cohort.ok()) return cohort.status();
    *response = *std::move(cohort);
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::ListCohorts(
    grpc::ServerContext* context, const v1::ListCohortsRequest* request,
    v1::ListCohortsResponse* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 1);
    if (!query.ok()) return query.status();
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::CohortKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &CohortNameOf, response->mutable_cohorts()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::UpdateCohort(
    grpc::ServerContext* context, const v1::UpdateCohortRequest* request,
    v1::Cohort* response) {
  const v1::Cohort& patch = request->cohort();
  return RunMutation(
      ctx_, context, Method("UpdateCohort"), *request, patch.name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseCohortName(patch.name(), "cohort.name");
        if (!id.ok()) return id.status();
        const std::string name = core::CohortName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "update cohorts"));
        if (MaskCovers(request->update_mask(), "parent") &&
            core::IsValidId(patch.parent())) {
          TY_RETURN_IF_ERROR(
              CheckCohortAncestry(ctx_->objects, *id, patch.parent()));
        }
        if (MaskCovers(request->update_mask(), "quotas")) {
          TY_RETURN_IF_ERROR(CheckQuotaFlavors(ctx_->objects, patch.quotas(),
                                               "cohort.quotas"));
        }
        absl::StatusOr<v1::Cohort> cohort = UpdateObject<v1::Cohort>(
            ctx_->objects, pg::CohortKind(), {*id}, name, patch,
            request->update_mask(), CohortFields(),
            [&](const v1::Cohort& merged) {
              return core::PrefixField(core::ValidateCohort(merged, *id),
                                       "cohort");
            },
            audit,
            {{"cohorts_parent_fkey", "cohort.parent", reason::kUnknownCohort,
              core::Cat("cohort ", Quoted(patch.parent()),
                        " does not exist")}});
        if (!cohort.ok()) return cohort.status();
        *response = *std::move(cohort);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::DeleteCohort(
    grpc::ServerContext* context, const v1::DeleteCohortRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeleteCohort"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseCohortName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::CohortName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "delete cohorts"));
        TY_RETURN_IF_ERROR(DeleteObject(
            ctx_->objects, pg::CohortKind(), {*id}, name, audit,
            {{"queues_cohort_fkey", "", reason::kInUse,
              core::Cat("cohort ", *id, " still has queues")},
             {"cohorts_parent_fkey", "", reason::kInUse,
              core::Cat("cohort ", *id, " still has child cohorts")}}));
        Invalidate();
        return absl::OkStatus();
      });
}

// --- Priority classes ---

grpc::Status QueueServiceImpl::CreatePriorityClass(
    grpc::ServerContext* context, const v1::CreatePriorityClassRequest* request,
    v1::PriorityClass* response) {
  const std::string& id = request->priority_class_id();
  const std::string name = core::PriorityClassName(id);
  return RunMutation(
      ctx_, context, Method("CreatePriorityClass"), *request, name,
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        TY_RETURN_IF_ERROR(
            RequirePlatformAdmin(caller, "create priority classes"));
        TY_RETURN_IF_ERROR(CheckNewId("priority_class_id", id));
        TY_RETURN_IF_ERROR(core::PrefixField(
            core::ValidatePriorityClass(request->priority_class()),
            "priority_class"));
        absl::StatusOr<v1::PriorityClass> created =
            CreateObject(ctx_->objects, pg::PriorityClassKind(), {id}, name,
                         request->priority_class(), audit);
        if (!created.ok()) return created.status();
        *response = *std::move(created);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::GetPriorityClass(
    grpc::ServerContext* context, const v1::GetPriorityClassRequest* request,
    v1::PriorityClass* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::string> id =
        core::ParsePriorityClassName(request->name(), "name");
    if (!id.ok()) return id.status();
    absl::StatusOr<v1::PriorityClass> pc =
        GetObject<v1::PriorityClass>(ctx_->objects, pg::PriorityClassKind(),
                                     {*id}, core::PriorityClassName(*id));
    if (!pc.ok()) return pc.status();
    *response = *std::move(pc);
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::ListPriorityClasses(
    grpc::ServerContext* context, const v1::ListPriorityClassesRequest* request,
    v1::ListPriorityClassesResponse* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    // Highest value first: the store pages by key only, so the (few) classes
    // are read whole, ordered by (value desc, id), and the page token is the
    // (value, id) of the last one sent.
    absl::StatusOr<pg::ListQuery> request_query =
        PageQuery(request->page_size(), request->page_token(), 2);
    if (!request_query.ok()) return request_query.status();
    int32_t after_value = 0;
    const bool resume = !request_query->after_key.empty();
    if (resume &&
        !absl::SimpleAtoi(request_query->after_key[0], &after_value)) {
      return core::FieldError(
          "page_token", core::reason::kInvalidValue,
          "malformed; pass the next_page_token of the previous page");
    }
    struct Entry {
      int32_t value;
      std::string id;
      pg::StoredObject row;
    };
    absl::StatusOr<std::vector<pg::StoredObject>> rows =
        ListAll(ctx_->objects, pg::PriorityClassKind(), {});
    if (!rows.ok()) return rows.status();
    std::vector<Entry> all;
    for (pg::StoredObject& row : *rows) {
      v1::PriorityClass pc;
      if (!pc.ParseFromString(row.body)) {
        return absl::InternalError(
            StoredBodyError(core::PriorityClassName(row.key[0])));
      }
      all.push_back(Entry{pc.value(), row.key[0], std::move(row)});
    }
    auto before = [](int32_t va, const std::string& ia, int32_t vb,
                     const std::string& ib) {
      return va != vb ? va > vb : ia < ib;
    };
    std::sort(all.begin(), all.end(), [&](const Entry& a, const Entry& b) {
      return before(a.value, a.id, b.value, b.id);
    });
    size_t i = 0;
    if (resume) {
      const std::string& after_id = request_query->after_key[1];
      while (i < all.size() &&
             !before(after_value, after_id, all[i].value, all[i].id)) {
        ++i;
      }
    }
    const size_t end =
        std::min(all.size(), i + static_cast<size_t>(request_query->limit));
    for (; i < end; ++i) {
      TY_RETURN_IF_ERROR(DecodeStored(all[i].row,
                                      core::PriorityClassName(all[i].id),
                                      response->add_priority_classes()));
    }
    if (end < all.size() && end > 0) {
      response->set_next_page_token(pg::EncodePageToken(
          {core::Cat(all[end - 1].value), all[end - 1].id}));
    }
    return absl::OkStatus();
  });
}

grpc::Status QueueServiceImpl::UpdatePriorityClass(
    grpc::ServerContext* context, const v1::UpdatePriorityClassRequest* request,
    v1::PriorityClass* response) {
  const v1::PriorityClass& patch = request->priority_class();
  return RunMutation(
      ctx_, context, Method("UpdatePriorityClass"), *request, patch.name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParsePriorityClassName(patch.name(), "priority_class.name");
        if (!id.ok()) return id.status();
        const std::string name = core::PriorityClassName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(
            RequirePlatformAdmin(caller, "update priority classes"));
        absl::StatusOr<v1::PriorityClass> pc = UpdateObject<v1::PriorityClass>(
            ctx_->objects, pg::PriorityClassKind(), {*id}, name, patch,
            request->update_mask(), PriorityClassFields(),
            [&](const v1::PriorityClass& merged) {
              return core::PrefixField(core::ValidatePriorityClass(merged),
                                       "priority_class");
            },
            audit);
        if (!pc.ok()) return pc.status();
        *response = *std::move(pc);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status QueueServiceImpl::DeletePriorityClass(
    grpc::ServerContext* context, const v1::DeletePriorityClassRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeletePriorityClass"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParsePriorityClassName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::PriorityClassName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(
            RequirePlatformAdmin(caller, "delete priority classes"));
        TY_RETURN_IF_ERROR(DeleteObject(ctx_->objects, pg::PriorityClassKind(),
                                        {*id}, name, audit));
        Invalidate();
        return absl::OkStatus();
      });
}

}  // namespace trainyard::api
