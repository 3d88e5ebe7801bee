#include "services/cmd/trainyard/apply.h"

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"
#include "trainyard/v1/accounting.grpc.pb.h"
#include "trainyard/v1/admin.grpc.pb.h"
#include "trainyard/v1/admin.pb.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/queue.grpc.pb.h"

namespace trainyard {
namespace {

namespace v1 = trainyard::v1;
using domain::Cat;
using grpc::ClientContext;

constexpr auto kRpcTimeout = std::chrono::seconds(30);

// Prints text-format parse errors as "FILE:LINE:COL: message" (1-based).
class PrintingErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit PrintingErrorCollector(std::string file) : file_(std::move(file)) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    std::cerr << file_ << ":" << line + 1 << ":" << column + 1 << ": "
              << message << "\n";
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    std::cerr << file_ << ":" << line + 1 << ":" << column + 1
              << ": warning: " << message << "\n";
  }

 private:
  std::string file_;
};

// Checks every object's resource name, so that a malformed bundle applies
// nothing.
absl::Status CheckNames(const v1::ApplyBundle& b) {
  auto at = [](std::string_view field, int i) {
    return Cat(field, "[", i, "].name");
  };
  for (int i = 0; i < b.priority_classes_size(); ++i) {
    absl::Status s = domain::ParsePriorityClassName(b.priority_classes(i).name(),
                                                  at("priority_classes", i))
                         .status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.flavors_size(); ++i) {
    absl::Status s =
        domain::ParseFlavorName(b.flavors(i).name(), at("flavors", i)).status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.clusters_size(); ++i) {
    absl::Status s =
        domain::ParseClusterName(b.clusters(i).name(), at("clusters", i))
            .status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.pools_size(); ++i) {
    absl::Status s =
        domain::ParsePoolName(b.pools(i).name(), at("pools", i)).status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.nodes_size(); ++i) {
    absl::Status s =
        domain::ParseNodeName(b.nodes(i).name(), at("nodes", i)).status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.cohorts_size(); ++i) {
    absl::Status s =
        domain::ParseCohortName(b.cohorts(i).name(), at("cohorts", i)).status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.tenants_size(); ++i) {
    absl::Status s =
        domain::ParseTenantName(b.tenants(i).name(), at("tenants", i)).status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.projects_size(); ++i) {
    absl::Status s =
        domain::ParseProjectName(b.projects(i).name(), at("projects", i))
            .status();
    if (!s.ok()) return s;
  }
  for (int i = 0; i < b.queues_size(); ++i) {
    absl::Status s =
        domain::ParseQueueName(b.queues(i).name(), at("queues", i)).status();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Clears the fields the server owns, so that desired and stored objects compare
// by content.
void ClearOutputOnly(google::protobuf::Message* m) {
  for (const char* field :
       {"etag", "create_time", "update_time", "report_time", "health",
        "health_message", "heartbeat_time", "creator"}) {
    const google::protobuf::FieldDescriptor* f =
        m->GetDescriptor()->FindFieldByName(field);
    if (f != nullptr) m->GetReflection()->ClearField(m, f);
  }
}

bool SameIgnoringOutputOnly(const google::protobuf::Message& desired,
                            const google::protobuf::Message& stored) {
  std::unique_ptr<google::protobuf::Message> a(desired.New());
  std::unique_ptr<google::protobuf::Message> b(stored.New());
  a->CopyFrom(desired);
  b->CopyFrom(stored);
  ClearOutputOnly(a.get());
  ClearOutputOnly(b.get());
  return google::protobuf::util::MessageDifferencer::Equals(*a, *b);
}

std::string CodeName(const grpc::Status& status) {
  return absl::StatusCodeToString(
      static_cast<absl::StatusCode>(status.error_code()));
}

void Print(std::string_view verb, std::string_view kind,
           std::string_view name) {
  std::cout << verb << " " << kind << " " << name << std::endl;
}

class Applier {
 public:
  Applier(const std::shared_ptr<grpc::Channel>& channel, std::string token)
      : queues_(v1::QueueService::NewStub(channel)),
        clusters_(v1::ClusterService::NewStub(channel)),
        admin_(v1::AdminService::NewStub(channel)),
        accounting_(v1::AccountingService::NewStub(channel)),
        token_(std::move(token)) {}

  // Applies the bundle; on failure returns the RPC's status and sets `step` to
  // what failed.
  grpc::Status Apply(const v1::ApplyBundle& b, std::string* step);

 private:
  void Prepare(ClientContext* context) const {
    if (!token_.empty()) {
      context->AddMetadata("authorization", Cat("Bearer ", token_));
    }
    context->set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  }

  // Get → Create on NOT_FOUND, else Update unless equal. `get`, `create` and
  // `update` are callables (ClientContext*, T* out) → grpc::Status.
  template <typename T, typename Get, typename Create, typename Update>
  grpc::Status ApplyObject(std::string_view kind, const T& desired, Get get,
                           Create create, Update update, std::string* step) {
    const std::string& name = desired.name();
    T stored;
    grpc::Status status;
    {
      ClientContext context;
      Prepare(&context);
      *step = Cat("get ", kind, " ", name);
      status = get(&context, &stored);
    }
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      ClientContext context;
      Prepare(&context);
      T created;
      *step = Cat("create ", kind, " ", name);
      status = create(&context, &created);
      if (!status.ok()) return status;
      Print("created", kind, name);
      return grpc::Status::OK;
    }
    if (!status.ok()) return status;
    if (SameIgnoringOutputOnly(desired, stored)) {
      Print("unchanged", kind, name);
      return grpc::Status::OK;
    }
    ClientContext context;
    Prepare(&context);
    T updated;
    *step = Cat("update ", kind, " ", name);
    status = update(&context, &updated);
    if (!status.ok()) return status;
    Print("updated", kind, name);
    return grpc::Status::OK;
  }

  grpc::Status ApplyNodes(const v1::ApplyBundle& b, std::string* step);
  grpc::Status ApplyRoleBinding(const v1::RoleBinding& binding,
                                std::string* step);
  // The bundle's rates and spot prices against the price book (see
  // ApplyBundle.rates).
  grpc::Status ApplyPrices(const v1::ApplyBundle& b, std::string* step);
  // The stored pool of that name (NOT_FOUND if none), found through ListPools.
  grpc::Status FindPool(const std::string& name, v1::Pool* out);

  std::unique_ptr<v1::QueueService::Stub> queues_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<v1::AccountingService::Stub> accounting_;
  std::string token_;
};

grpc::Status Applier::FindPool(const std::string& name, v1::Pool* out) {
  absl::StatusOr<domain::ClusterChildName> id = domain::ParsePoolName(name, "name");
  if (!id.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        id.status().ToString());
  }
  v1::ListPoolsRequest request;
  request.set_parent(domain::ClusterName(id->cluster));
  request.set_page_size(1000);
  while (true) {
    ClientContext context;
    Prepare(&context);
    v1::ListPoolsResponse response;
    grpc::Status status = clusters_->ListPools(&context, request, &response);
    if (!status.ok()) return status;
    for (const v1::Pool& pool : response.pools()) {
      if (pool.name() == name) {
        *out = pool;
        return grpc::Status::OK;
      }
    }
    if (response.next_page_token().empty()) break;
    request.set_page_token(response.next_page_token());
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND, Cat(name, " not found"));
}

grpc::Status Applier::ApplyNodes(const v1::ApplyBundle& b, std::string* step) {
  // Clusters in order of first appearance, each with its nodes in file order.
  std::vector<std::string> clusters;
  std::map<std::string, std::vector<int>> nodes_of;
  for (int i = 0; i < b.nodes_size(); ++i) {
    absl::StatusOr<domain::ClusterChildName> id =
        domain::ParseNodeName(b.nodes(i).name(), "name");
    if (!id.ok()) continue;  // checked by CheckNames
    auto [it, inserted] = nodes_of.try_emplace(id->cluster);
    if (inserted) clusters.push_back(id->cluster);
    it->second.push_back(i);
  }
  for (const std::string& cluster : clusters) {
    std::vector<std::pair<int, std::string_view>> verdicts;
    v1::ReportNodesRequest report;
    report.set_parent(domain::ClusterName(cluster));
    for (int i : nodes_of[cluster]) {
      const v1::Node& desired = b.nodes(i);
      ClientContext context;
      Prepare(&context);
      v1::GetNodeRequest get;
      get.set_name(desired.name());
      v1::Node stored;
      *step = Cat("get node ", desired.name());
      grpc::Status status = clusters_->GetNode(&context, get, &stored);
      std::string_view verdict;
      if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
        verdict = "created";
      } else if (!status.ok()) {
        return status;
      } else if (SameIgnoringOutputOnly(desired, stored)) {
        verdict = "unchanged";
      } else {
        verdict = "updated";
      }
      if (verdict != "unchanged") {
        v1::Node* node = report.add_nodes();
        *node = desired;
        node->clear_report_time();
      }
      verdicts.emplace_back(i, verdict);
    }
    if (report.nodes_size() > 0) {
      ClientContext context;
      Prepare(&context);
      v1::ReportNodesResponse response;
      *step = Cat("report nodes of ", report.parent());
      grpc::Status status = clusters_->ReportNodes(&context, report, &response);
      if (!status.ok()) return status;
    }
    for (const auto& [i, verdict] : verdicts) {
      Print(verdict, "node", b.nodes(i).name());
    }
  }
  return grpc::Status::OK;
}

grpc::Status Applier::ApplyRoleBinding(const v1::RoleBinding& binding,
                                       std::string* step) {
  const std::string what =
      Cat(binding.principal(), " ", v1::Role_Name(binding.role()),
          binding.tenant().empty() ? std::string()
                                   : Cat(" in tenant ", binding.tenant()));
  v1::CreateRoleBindingRequest request;
  *request.mutable_role_binding() = binding;
  request.mutable_role_binding()->clear_name();
  request.mutable_role_binding()->clear_create_time();
  request.mutable_role_binding()->clear_creator();
  ClientContext context;
  Prepare(&context);
  v1::RoleBinding created;
  *step = Cat("create role binding ", what);
  grpc::Status status = admin_->CreateRoleBinding(&context, request, &created);
  if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    Print("unchanged", "role binding", what);
    return grpc::Status::OK;
  }
  if (!status.ok()) return status;
  Print("created", "role binding", what);
  return grpc::Status::OK;
}

// The version of a series in force at `at` (the last one at or before it),
// or null. `series` holds (effective_time, price) of one flavor (and
// resource), ascending.
const std::pair<int64_t, int64_t>* InForce(
    const std::vector<std::pair<int64_t, int64_t>>& series, int64_t at) {
  const std::pair<int64_t, int64_t>* found = nullptr;
  for (const auto& version : series) {
    if (version.first > at) break;
    found = &version;
  }
  return found;
}

grpc::Status Applier::ApplyPrices(const v1::ApplyBundle& b, std::string* step) {
  if (b.rates().empty() && b.spot_prices().empty()) return grpc::Status::OK;
  v1::PriceBook book;
  {
    ClientContext context;
    Prepare(&context);
    *step = "get the price book";
    grpc::Status status =
        accounting_->GetPriceBook(&context, v1::GetPriceBookRequest(), &book);
    if (!status.ok()) return status;
  }
  // (effective ms, micros) by "flavor/resource" (spot: "flavor/spot").
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> series;
  for (const v1::Rate& r : book.rates()) {
    series[Cat(r.flavor(), "/", v1::ResourceName_Name(r.resource()))]
        .emplace_back(domain::UnixMillis(r.effective_time()),
                      r.price_per_unit_hour().micros());
  }
  for (const v1::SpotPrice& p : book.spot_prices()) {
    series[Cat(p.flavor(), "/spot")].emplace_back(
        domain::UnixMillis(p.effective_time()), p.gpu_hour_price().micros());
  }
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  // Whether the book already has `micros` for `key` at the version's instant
  // (or in force now, without one); an instant taken by another price is
  // FAILED_PRECONDITION.
  auto present = [&](const std::string& key, const std::string& what,
                     bool has_time, int64_t at,
                     int64_t micros) -> absl::StatusOr<bool> {
    const auto& versions = series[key];
    if (!has_time) {
      const auto* now = InForce(versions, now_ms);
      return now != nullptr && now->second == micros;
    }
    for (const auto& version : versions) {
      if (version.first != at) continue;
      if (version.second == micros) return true;
      return absl::FailedPreconditionError(
          Cat(what, " has another price (", version.second,
              " micros) at that instant; versions are never rewritten: add "
              "one with a later effective_time"));
    }
    return false;
  };
  for (const v1::Rate& desired : b.rates()) {
    const std::string what =
        Cat("rate of ", desired.flavor(), " ",
            v1::ResourceName_Name(desired.resource()));
    *step = Cat("add ", what);
    absl::StatusOr<bool> same =
        present(Cat(desired.flavor(), "/",
                    v1::ResourceName_Name(desired.resource())),
                what, desired.has_effective_time(),
                domain::UnixMillis(desired.effective_time()),
                desired.price_per_unit_hour().micros());
    if (!same.ok()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          std::string(same.status().message()));
    }
    if (*same) {
      Print("unchanged", "rate", what);
      continue;
    }
    v1::AddRateRequest request;
    *request.mutable_rate() = desired;
    if (!desired.has_effective_time()) {
      request.mutable_rate()->mutable_effective_time()->set_seconds(now_ms /
                                                                    1000);
    }
    ClientContext context;
    Prepare(&context);
    v1::Rate added;
    grpc::Status status = accounting_->AddRate(&context, request, &added);
    if (!status.ok()) return status;
    Print("created", "rate", what);
  }
  for (const v1::SpotPrice& desired : b.spot_prices()) {
    const std::string what = Cat("spot price of ", desired.flavor());
    *step = Cat("add ", what);
    absl::StatusOr<bool> same = present(
        Cat(desired.flavor(), "/spot"), what, desired.has_effective_time(),
        domain::UnixMillis(desired.effective_time()), desired.gpu_hour_price().micros());
    if (!same.ok()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          std::string(same.status().message()));
    }
    if (*same) {
      Print("unchanged", "spot price", what);
      continue;
    }
    v1::AddSpotPriceRequest request;
    *request.mutable_spot_price() = desired;
    if (!desired.has_effective_time()) {
      request.mutable_spot_price()->mutable_effective_time()->set_seconds(
          now_ms / 1000);
    }
    ClientContext context;
    Prepare(&context);
    v1::SpotPrice added;
    grpc::Status status = accounting_->AddSpotPrice(&context, request, &added);
    if (!status.ok()) return status;
    Print("created", "spot price", what);
  }
  return grpc::Status::OK;
}

grpc::Status Applier::Apply(const v1::ApplyBundle& b, std::string* step) {
  grpc::Status status;
  for (const v1::PriorityClass& desired : b.priority_classes()) {
    const std::string id =
        *domain::ParsePriorityClassName(desired.name(), "name");
    status = ApplyObject(
        "priority class", desired,
        [&](ClientContext* c, v1::PriorityClass* out) {
          v1::GetPriorityClassRequest r;
          r.set_name(desired.name());
          return queues_->GetPriorityClass(c, r, out);
        },
        [&](ClientContext* c, v1::PriorityClass* out) {
          v1::CreatePriorityClassRequest r;
          r.set_priority_class_id(id);
          *r.mutable_priority_class() = desired;
          return queues_->CreatePriorityClass(c, r, out);
        },
        [&](ClientContext* c, v1::PriorityClass* out) {
          v1::UpdatePriorityClassRequest r;
          *r.mutable_priority_class() = desired;
          r.mutable_priority_class()->clear_etag();
          return queues_->UpdatePriorityClass(c, r, out);
        },
        step);
    if (!status.ok()) return status;
  }
  for (const v1::Flavor& desired : b.flavors()) {
    const std::string id = *domain::ParseFlavorName(desired.name(), "name");
    status = ApplyObject(
        "flavor", desired,
        [&](ClientContext* c, v1::Flavor* out) {
          v1::GetFlavorRequest r;
          r.set_name(desired.name());
          return clusters_->GetFlavor(c, r, out);
        },
        [&](ClientContext* c, v1::Flavor* out) {
          v1::CreateFlavorRequest r;
          r.set_flavor_id(id);
          *r.mutable_flavor() = desired;
          return clusters_->CreateFlavor(c, r, out);
        },
        [&](ClientContext* c, v1::Flavor* out) {
          v1::UpdateFlavorRequest r;
          *r.mutable_flavor() = desired;
          r.mutable_flavor()->clear_etag();
          return clusters_->UpdateFlavor(c, r, out);
        },
        step);
    if (!status.ok()) return status;
  }
  for (const v1::Cluster& desired : b.clusters()) {
    const std::string id = *domain::ParseClusterName(desired.name(), "name");
    status = ApplyObject(
        "cluster", desired,
        [&](ClientContext* c, v1::Cluster* out) {
          v1::GetClusterRequest r;
          r.set_name(desired.name());
          return clusters_->GetCluster(c, r, out);
        },
        [&](ClientContext* c, v1::Cluster* out) {
          v1::CreateClusterRequest r;
          r.set_cluster_id(id);
          *r.mutable_cluster() = desired;
          return clusters_->CreateCluster(c, r, out);
        },
        [&](ClientContext* c, v1::Cluster* out) {
          v1::UpdateClusterRequest r;
          *r.mutable_cluster() = desired;
          r.mutable_cluster()->clear_etag();
          return clusters_->UpdateCluster(c, r, out);
        },
        step);
    if (!status.ok()) return status;
  }
  for (const v1::Pool& desired : b.pools()) {
    const domain::ClusterChildName id =
        *domain::ParsePoolName(desired.name(), "name");
    status = ApplyObject(
        "pool", desired,
        [&](ClientContext*, v1::Pool* out) {
          return FindPool(desired.name(), out);
        },
        [&](ClientContext* c, v1::Pool* out) {
          v1::CreatePoolRequest r;
          r.set_parent(domain::ClusterName(id.cluster));
          r.set_pool_id(id.id);
          *r.mutable_pool() = desired;
          return clusters_->CreatePool(c, r, out);
        },
        [&](ClientContext*, v1::Pool*) {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              Cat(desired.name(),
                                  " differs from the stored pool and pools "
                                  "cannot be updated; delete it (after "
                                  "its nodes) and apply again"));
        },
        step);
    if (!status.ok()) return status;
  }
  status = ApplyNodes(b, step);
  if (!status.ok()) return status;
  for (const v1::Cohort& desired : b.cohorts()) {
    const std::string id = *domain::ParseCohortName(desired.name(), "name");
    status = ApplyObject(
        "cohort", desired,
        [&](ClientContext* c, v1::Cohort* out) {
          v1::GetCohortRequest r;
          r.set_name(desired.name());
          return queues_->GetCohort(c, r, out);
        },
        [&](ClientContext* c, v1::Cohort* out) {
          v1::CreateCohortRequest r;
          r.set_cohort_id(id);
          *r.mutable_cohort() = desired;
          return queues_->CreateCohort(c, r, out);
        },
        [&](ClientContext* c, v1::Cohort* out) {
          v1::UpdateCohortRequest r;
          *r.mutable_cohort() = desired;
          r.mutable_cohort()->clear_etag();
          return queues_->UpdateCohort(c, r, out);
        },
        step);
    if (!status.ok()) return status;
  }
  for (const v1::Tenant& desired : b.tenants()) {
    const std::string id = *domain::ParseTenantName(desired.name(), "name");
    status = ApplyObject(
        "tenant", desired,
        [&](ClientContext* c, v1::Tenant* out) {
          v1::GetTenantRequest r;
          r.set_name(desired.name());
          return queues_->GetTenant(c, r, out);
        },
        [&](ClientContext* c, v1::Tenant* out) {
          v1::CreateTenantRequest r;
          r.set_tenant_id(id);
          *r.mutable_tenant() = desired;
          return queues_->CreateTenant(c, r, out);
        },
        [&](ClientContext* c, v1::Tenant* out) {
          v1::UpdateTenantRequest r;
          *r.mutable_tenant() = desired;
          r.mutable_tenant()->clear_etag();
          return queues_->UpdateTenant(c, r, out);
        },
        step);
    if (!status.ok()) return status;
  }
  for (const v1::Project& desired : b.projects()) {
    const domain::TenantChildName id =
        *domain::ParseProjectName(desired.name(), "name");
    status = ApplyObject(
        "project", desired,
        [&](ClientContext* c, v1::Project* out) {
          v1::GetProjectRequest r;
          r.set_name(desired.name());
          return queues_->GetProject(c, r, out);
        },
        [&](ClientContext* c, v1::Project* out) {
          v1::CreateProjectRequest r;
          r.set_parent(domain::TenantName(id.tenant));
          r.set_project_id(id.id);
          *r.mutable_project() = desired;
          return queues_->CreateProject(c, r, out);
        },
        [&](ClientContext* c, v1::Project* out) {
          v1::UpdateProjectRequest r;
          *r.mutable_project() = desired;
          r.mutable_project()->clear_etag();
          return queues_->UpdateProject(c, r, out);
        },
        step);
    if (!status.ok()) return status;
  }
  for (const v1::Queue& desired : b.queues()) {
    const domain::TenantChildName id =
        *domain::ParseQueueName(desired.name(), "name");
    status = ApplyObject(
        "queue", desired,
        [&](ClientContext* c, v1::Queue* out) {
          v1::GetQueueRequest r;
          r.set_name(desired.name());
          return queues_->GetQueue(c, r, out);
        },
        [&](ClientContext* c, v1::Queue* out) {
          v1::CreateQueueRequest r;
          r.set_parent(domain::TenantName(id.tenant));
          r.set_queue_id(id.id);
          *r.mutable_queue() = desired;
          return queues_->CreateQueue(c, r, out);
        },
        [&](ClientContext* c, v1::Queue* out) {
          v1::UpdateQueueRequest r;
          *r.mutable_queue() = desired;
          r.mutable_queue()->clear_etag();
          return queues_->UpdateQueue(c, r, out);
        },
        step);
    if (!status.ok()) return status;
  }
  for (const v1::RoleBinding& binding : b.role_bindings()) {
    status = ApplyRoleBinding(binding, step);
    if (!status.ok()) return status;
  }
  return ApplyPrices(b, step);
}

}  // namespace

int RunApply(const std::string& file, const std::string& target,
             const std::string& token) {
  std::ifstream in(file);
  if (!in) {
    std::cerr << file << ": cannot read: " << std::strerror(errno) << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    std::cerr << file << ": cannot read: " << std::strerror(errno) << "\n";
    return 2;
  }

  v1::ApplyBundle bundle;
  PrintingErrorCollector errors(file);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text.str(), &bundle)) return 2;
  if (absl::Status s = CheckNames(bundle); !s.ok()) {
    std::cerr << file << ": " << s.message() << "\n";
    return 2;
  }

  Applier applier(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()), token);
  std::string step;
  grpc::Status status = applier.Apply(bundle, &step);
  if (!status.ok()) {
    std::cerr << "error: " << step << ": " << CodeName(status) << ": "
              << status.error_message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace trainyard
