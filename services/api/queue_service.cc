#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "services/api/handler.h"
#include "services/api/resource_handler.h"
#include "services/api/resource_methods.h"
#include "services/api/resource_util.h"
#include "services/api/services.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/job_state.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"
#include "trainyard/v1/queue.grpc.pb.h"

namespace trainyard::api {
namespace {

namespace pg = storage::postgres;
namespace v1 = trainyard::v1;

using google::protobuf::FieldMask;

// Every flavor named in quotas exists ("<field>[i].flavor"); ids that are not
// valid are left to validation.
absl::Status CheckQuotaFlavors(
    pg::ObjectStore* objects,
    const google::protobuf::RepeatedPtrField<v1::FlavorQuotas>& quotas,
    std::string_view field) {
  for (int i = 0; i < quotas.size(); ++i) {
    const std::string& flavor = quotas.Get(i).flavor();
    if (!domain::IsValidId(flavor)) continue;
    TY_RETURN_IF_ERROR(
        CheckExists(objects, pg::FlavorKind(), {flavor},
                    domain::JoinField(domain::IndexField(field, i), "flavor"),
                    reason::kUnknownFlavor, "flavor"));
  }
  return absl::OkStatus();
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
      return domain::FieldError(
          "cohort.parent", domain::reason::kInconsistent,
          domain::Cat(
              "cohort ", Quoted(parent), " is ", cohort,
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
      return absl::InternalError(StoredBodyError(domain::CohortName(current)));
    }
    current = stored.parent();
  }
  return absl::OkStatus();
}

// --- Tenants ---

constexpr std::string_view kTenantFields[] = {
    "display_name",      "labels",       "default_priority_class",
    "submit_rate_limit", "submit_burst", "suspended"};

// The tenant's default priority class, when set (and a valid id), exists.
absl::Status CheckDefaultPriorityClass(const ApiContext& ctx,
                                       const ResourceKey&,
                                       const v1::Tenant& tenant,
                                       const FieldMask* mask) {
  const std::string& pc = tenant.default_priority_class();
  if (!Changes(mask, "default_priority_class") || pc.empty() ||
      !domain::IsValidId(pc)) {
    return absl::OkStatus();
  }
  return CheckExists(ctx.objects, pg::PriorityClassKind(), {pc},
                     "tenant.default_priority_class",
                     reason::kUnknownPriorityClass, "priority class");
}

std::vector<ConstraintMessage> TenantInUse(const ResourceKey& key) {
  auto still_has = [&](std::string_view what) {
    return domain::Cat("tenant ", key[0], " still has ", what,
                       "; delete them first");
  };
  return {InUse("jobs_tenant_fkey",
                domain::Cat("tenant ", key[0], " still has jobs")),
          InUse("projects_tenant_fkey", still_has("projects")),
          InUse("queues_tenant_fkey", still_has("queues"))};
}

// Role bindings in a tenant go with it (ON DELETE CASCADE).
constexpr ResourceKind<v1::Tenant> kTenants = {
    .field = "tenant",
    .plural = "tenants",
    .parse_name = &ParseKey<&domain::ParseTenantName>,
    .name_of = &KeyName<&domain::TenantName>,
    .in_tenant = true,
    .access = {.create = {.rule = Access::Rule::kPlatformAdmin},
               .read = {.rule = Access::Rule::kTenantRole},
               .update = {.rule = Access::Rule::kPlatformAdminIn},
               .remove = {.rule = Access::Rule::kPlatformAdminIn}},
    .store = &pg::TenantKind,
    .updatable = kTenantFields,
    .validate =
        [](const ApiContext& ctx, const ResourceKey&,
           const v1::Tenant& tenant) {
          return domain::ValidateTenant(tenant, ctx.limits);
        },
    .check_references = &CheckDefaultPriorityClass,
    .delete_conflicts = &TenantInUse,
    .delete_drops_bindings = true,
};

// --- Projects ---

constexpr std::string_view kProjectFields[] = {"display_name", "labels"};

constexpr Access kTenantAdmin = {.rule = Access::Rule::kTenantRole,
                                 .permission = Permission::kAdminTenant};

// A project's tenant foreign key can only fail on insert (updates keep it).
constexpr ResourceKind<v1::Project> kProjects = {
    .field = "project",
    .plural = "projects",
    .collection = "projects",
    .parse_name = &ParseKey<&domain::ParseProjectName>,
    .name_of = &KeyName<&domain::ProjectName>,
    .parse_parent = &domain::ParseTenantName,
    .parent_name = &domain::TenantName,
    .in_tenant = true,
    .access = {.create = kTenantAdmin,
               .read = {.rule = Access::Rule::kTenantRole},
               .update = kTenantAdmin,
               .remove = kTenantAdmin},
    .store = &pg::ProjectKind,
    .updatable = kProjectFields,
    .validate =
        [](const ApiContext& ctx, const ResourceKey&,
           const v1::Project& project) {
          return domain::ValidateProject(project, ctx.limits);
        },
    .write_conflicts = [](const ResourceKey& key, const v1::Project&)
        -> std::vector<ConstraintMessage> {
      return {UnknownReference("projects_tenant_fkey", "parent",
                               reason::kUnknownTenant, "tenant", key[0])};
    },
    .delete_conflicts =
        [](const ResourceKey& key) -> std::vector<ConstraintMessage> {
      return {InUse("jobs_tenant_project_fkey",
                    domain::Cat("project ", key[1], " still has jobs"))};
    },
};

// --- Queues ---

constexpr std::string_view kQueueFields[] = {"display_name",
                                             "cohort",
                                             "quotas",
                                             "fair_share_weight",
                                             "queueing_strategy",
                                             "preemption",
                                             "flavor_fungibility",
                                             "stop_policy",
                                             "min_runtime"};

// Queues are written by platform admins only: their quotas grant capacity.
constexpr Access kQuotaGrant = {.rule = Access::Rule::kPlatformAdminIn,
                                .why = " (their quotas grant capacity)"};

std::vector<ConstraintMessage> QueueConflicts(const ResourceKey& key,
                                              const v1::Queue& queue) {
  return {UnknownReference("queues_tenant_fkey", "parent",
                           reason::kUnknownTenant, "tenant", key[0]),
          UnknownReference("queues_cohort_fkey", "queue.cohort",
                           reason::kUnknownCohort, "cohort", queue.cohort()),
          {"queue_flavors_flavor_fkey", "queue.quotas", reason::kUnknownFlavor,
           "a flavor named in the quotas does not exist"}};
}

constexpr ResourceKind<v1::Queue> kQueues = {
    .field = "queue",
    .plural = "queues",
    .collection = "queues",
    .parse_name = &ParseKey<&domain::ParseQueueName>,
    .name_of = &KeyName<&domain::QueueName>,
    .parse_parent = &domain::ParseTenantName,
    .parent_name = &domain::TenantName,
    .in_tenant = true,
    .access = {.create = kQuotaGrant,
               .read = {.rule = Access::Rule::kTenantRole},
               .update = kQuotaGrant,
               .remove = {.rule = Access::Rule::kPlatformAdminIn}},
    .store = &pg::QueueKind,
    .extra_columns =
        [](const v1::Queue& queue) -> std::vector<std::optional<std::string>> {
      return {NullIfEmpty(queue.cohort())};
    },
    .updatable = kQueueFields,
    .validate =
        [](const ApiContext& ctx, const ResourceKey&, const v1::Queue& queue) {
          return domain::ValidateQueue(queue, ctx.limits);
        },
    .check_references =
        [](const ApiContext& ctx, const ResourceKey&, const v1::Queue& queue,
           const FieldMask* mask) {
          if (!Changes(mask, "quotas")) return absl::OkStatus();
          return CheckQuotaFlavors(ctx.objects, queue.quotas(), "queue.quotas");
        },
    .write_conflicts = &QueueConflicts,
    .delete_conflicts =
        [](const ResourceKey& key) -> std::vector<ConstraintMessage> {
      return {InUse("jobs_tenant_queue_fkey",
                    domain::Cat("queue ", key[1], " still has jobs"))};
    },
};

// --- Cohorts ---

constexpr std::string_view kCohortFields[] = {"parent", "fair_share_weight",
                                              "quotas"};

// A new cohort cannot close a loop (nothing names it yet); a new parent on an
// Update must not be the cohort or one of its descendants.
absl::Status CheckCohortReferences(const ApiContext& ctx,
                                   const ResourceKey& key,
                                   const v1::Cohort& cohort,
                                   const FieldMask* mask) {
  if (mask != nullptr && MaskCovers(*mask, "parent") &&
      domain::IsValidId(cohort.parent())) {
    TY_RETURN_IF_ERROR(
        CheckCohortAncestry(ctx.objects, key[0], cohort.parent()));
  }
  if (!Changes(mask, "quotas")) return absl::OkStatus();
  return CheckQuotaFlavors(ctx.objects, cohort.quotas(), "cohort.quotas");
}

constexpr ResourceKind<v1::Cohort> kCohorts = {
    .field = "cohort",
    .plural = "cohorts",
    .parse_name = &ParseKey<&domain::ParseCohortName>,
    .name_of = &KeyName<&domain::CohortName>,
    .access = kPlatformObjects,
    .store = &pg::CohortKind,
    .extra_columns = [](const v1::Cohort& cohort)
        -> std::vector<std::optional<std::string>> {
      return {NullIfEmpty(cohort.parent())};
    },
    .updatable = kCohortFields,
    .validate =
        [](const ApiContext&, const ResourceKey& key,
           const v1::Cohort& cohort) {
          return domain::ValidateCohort(cohort, key[0]);
        },
    .check_references = &CheckCohortReferences,
    .write_conflicts = [](const ResourceKey&, const v1::Cohort& cohort)
        -> std::vector<ConstraintMessage> {
      return {UnknownReference("cohorts_parent_fkey", "cohort.parent",
                               reason::kUnknownCohort, "cohort",
                               cohort.parent())};
    },
    .delete_conflicts =
        [](const ResourceKey& key) -> std::vector<ConstraintMessage> {
      return {
          InUse("queues_cohort_fkey",
                domain::Cat("cohort ", key[0], " still has queues")),
          InUse("cohorts_parent_fkey",
                domain::Cat("cohort ", key[0], " still has child cohorts"))};
    },
};

// --- Priority classes ---

constexpr std::string_view kPriorityClassFields[] = {"value", "preemptible",
                                                     "description"};

constexpr ResourceKind<v1::PriorityClass> kPriorityClasses = {
    .field = "priority_class",
    .plural = "priority classes",
    .parse_name = &ParseKey<&domain::ParsePriorityClassName>,
    .name_of = &KeyName<&domain::PriorityClassName>,
    .access = kPlatformObjects,
    .store = &pg::PriorityClassKind,
    .extra_columns = [](const v1::PriorityClass& pc)
        -> std::vector<std::optional<std::string>> {
      return {domain::Cat(pc.value())};
    },
    .updatable = kPriorityClassFields,
    .validate =
        [](const ApiContext&, const ResourceKey&, const v1::PriorityClass& pc) {
          return domain::ValidatePriorityClass(pc);
        },
};

// A page of priority classes, highest value first: the store pages by key
// only, so the (few) classes are read whole, ordered by (value desc, id), and
// the page token is the (value, id) of the last one sent.
absl::Status PriorityClassPage(pg::ObjectStore* objects,
                               const v1::ListPriorityClassesRequest& request,
                               v1::ListPriorityClassesResponse* response) {
  TY_ASSIGN_OR_RETURN(const pg::ListQuery request_query,
                      PageQuery(request.page_size(), request.page_token(), 2));
  int32_t after_value = 0;
  const bool resume = !request_query.after_key.empty();
  if (resume && !absl::SimpleAtoi(request_query.after_key[0], &after_value)) {
    return PageTokenError();
  }
  struct Entry {
    int32_t value;
    std::string id;
    pg::StoredObject row;
  };
  TY_ASSIGN_OR_RETURN(std::vector<pg::StoredObject> rows,
                      ListAll(objects, pg::PriorityClassKind(), {}));
  std::vector<Entry> all;
  for (pg::StoredObject& row : rows) {
    v1::PriorityClass pc;
    if (!pc.ParseFromString(row.body)) {
      return absl::InternalError(
          StoredBodyError(domain::PriorityClassName(row.key[0])));
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
    const std::string& after_id = request_query.after_key[1];
    while (i < all.size() &&
           !before(after_value, after_id, all[i].value, all[i].id)) {
      ++i;
    }
  }
  const size_t end =
      std::min(all.size(), i + static_cast<size_t>(request_query.limit));
  for (; i < end; ++i) {
    TY_RETURN_IF_ERROR(DecodeStored(all[i].row,
                                    domain::PriorityClassName(all[i].id),
                                    response->add_priority_classes()));
  }
  if (end < all.size() && end > 0) {
    response->set_next_page_token(pg::EncodePageToken(
        {domain::Cat(all[end - 1].value), all[end - 1].id}));
  }
  return absl::OkStatus();
}

// What a queue's admitted and running jobs hold, per flavor and resource,
// against its quotas (flavors without a quota too, nominal 0).
void AddUsage(const v1::Queue& queue,
              const std::map<std::string, pg::JobStore::FlavorHeld>& held,
              const std::map<std::pair<std::string, int>, int64_t>& lent,
              v1::QueueStatus* response) {
  std::map<std::pair<std::string, v1::ResourceName>, int64_t> nominal;
  for (const v1::FlavorQuotas& q : queue.quotas()) {
    for (const v1::ResourceQuota& r : q.resources()) {
      nominal[{q.flavor(), r.resource()}] = r.nominal();
    }
  }
  std::map<std::pair<std::string, v1::ResourceName>, int64_t> used;
  for (const auto& [flavor, h] : held) {
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
    // A resource without a quota entry is not limited by this queue: nothing
    // of it counts as borrowed.
    if (nominal.contains(key)) {
      u->set_borrowed(std::max<int64_t>(0, in_use - quota));
      // As the scheduler last published it, within what is unused now.
      auto l = lent.find({key.first, static_cast<int>(key.second)});
      if (l != lent.end()) {
        u->set_lent(std::clamp<int64_t>(l->second, 0,
                                        std::max<int64_t>(0, quota - in_use)));
      }
    }
  }
}

// The tenants the caller has a binding in (platform-admin: all).
absl::StatusOr<pg::ListQuery> SelectTenants(
    const ResourceKind<v1::Tenant>& kind, const Caller& caller,
    const v1::ListTenantsRequest& request) {
  TY_ASSIGN_OR_RETURN(pg::ListQuery query, PageOf(kind, request));
  if (!caller.platform_admin) {
    query.in.emplace("id", caller.VisibleTenants());
  }
  return query;
}

// The projects of one tenant the caller may read.
absl::StatusOr<pg::ListQuery> SelectProjects(
    const ResourceKind<v1::Project>& kind, const Caller& caller,
    const v1::ListProjectsRequest& request) {
  TY_ASSIGN_OR_RETURN(std::string tenant,
                      domain::ParseTenantName(request.parent(), "parent"));
  TY_RETURN_IF_ERROR(
      Require(caller, tenant, Permission::kRead, domain::TenantName(tenant)));
  TY_ASSIGN_OR_RETURN(pg::ListQuery query, PageOf(kind, request));
  query.equals.emplace_back("tenant", tenant);
  return query;
}

// The queues of one tenant, or ("tenants/-") of every tenant the caller sees;
// optionally of one cohort.
absl::StatusOr<pg::ListQuery> SelectQueues(
    const ResourceKind<v1::Queue>& kind, const Caller& caller,
    const v1::ListQueuesRequest& request) {
  TY_ASSIGN_OR_RETURN(std::string tenant,
                      domain::ParseTenantParent(request.parent(), "parent"));
  const std::string& cohort = request.cohort();
  if (!cohort.empty()) TY_RETURN_IF_ERROR(CheckNewId("cohort", cohort));
  TY_ASSIGN_OR_RETURN(pg::ListQuery query, PageOf(kind, request));
  if (tenant != domain::kAllId) {
    TY_RETURN_IF_ERROR(
        Require(caller, tenant, Permission::kRead, domain::TenantName(tenant)));
    query.equals.emplace_back("tenant", tenant);
  } else if (!caller.platform_admin) {
    query.in.emplace("tenant", caller.VisibleTenants());
  }
  if (!cohort.empty()) query.equals.emplace_back("cohort", cohort);
  return query;
}

class QueueServiceImpl final : public ApiService<v1::QueueService> {
 public:
  using ApiService::ApiService;

  TY_RESOURCE_METHODS(Tenant, Tenants, tenant, tenants, kTenants, SelectTenants)
  TY_RESOURCE_METHODS(Project, Projects, project, projects, kProjects,
                      SelectProjects)
  TY_RESOURCE_METHODS(Queue, Queues, queue, queues, kQueues, SelectQueues)
  TY_RESOURCE_METHODS(Cohort, Cohorts, cohort, cohorts, kCohorts, PageOnly)

  // Priority classes list through PriorityClassPage (ordered by value).
  TY_CREATE_METHOD(PriorityClass, priority_class, kPriorityClasses)
  TY_GET_METHOD(PriorityClass, kPriorityClasses)
  TY_UPDATE_METHOD(PriorityClass, priority_class, kPriorityClasses)
  TY_DELETE_METHOD(PriorityClass, kPriorityClasses)

  TY_RPC(ListPriorityClasses, v1::ListPriorityClassesRequest,
         v1::ListPriorityClassesResponse) {
    return Run(ctx_, context, Method("ListPriorityClasses"), *request,
               [&](const Caller&) {
                 return PriorityClassPage(ctx_->objects, *request, response);
               });
  }

  TY_RPC(GetQueueStatus, v1::GetQueueStatusRequest, v1::QueueStatus) {
    return ReadResource(
        ctx_, context, Method("GetQueueStatus"), *request, kQueues,
        request->name(),
        [&](const Caller&, const NamedObject& queue) -> absl::Status {
          const std::string& tenant = queue.key[0];
          const std::string& id = queue.key[1];
          absl::StatusOr<pg::StoredObject> row =
              ctx_->objects->Get(pg::QueueKind(), queue.key);
          if (!row.ok()) return ExplainStorageError(row.status(), queue.name);
          TY_ASSIGN_OR_RETURN(const auto counts,
                              ctx_->jobs->CountByState(tenant, id));
          response->set_queue(queue.name);
          for (const auto& [state, count] : counts) {
            (*response->mutable_jobs_by_state())[std::string(
                domain::StateName(state))] += count;
          }
          // The weighted share is the scheduler's (it depends on the whole
          // cohort tree): as it last wrote it.
          TY_ASSIGN_OR_RETURN(const pg::JobStore::QueueShareInfo share,
                              ctx_->jobs->QueueShare(tenant, id));
          response->set_weighted_share(share.weighted_share);
          TY_ASSIGN_OR_RETURN(const auto held,
                              ctx_->jobs->QueueUsage(tenant, id));
          v1::Queue stored;
          if (!stored.ParseFromString(row->body)) {
            return absl::DataLossError(domain::Cat(queue.name, ": unreadable"));
          }
          AddUsage(stored, held, share.lent, response);
          return absl::OkStatus();
        });
  }
};

}  // namespace

std::unique_ptr<grpc::Service> NewQueueService(ApiContext* ctx) {
  return std::make_unique<QueueServiceImpl>(ctx);
}

}  // namespace trainyard::api
