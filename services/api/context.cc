#include "services/api/context.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"
#include "services/lib/runtime/logging.h"

namespace trainyard::api {

using storage::postgres::ObjectKind;

Directory::Directory(storage::postgres::ObjectStore* objects,
                     absl::Duration ttl)
    : objects_(objects), ttl_(ttl) {}

void Directory::Invalidate() {
  absl::MutexLock lock(&mu_);
  present_.clear();
  classes_.clear();
  tenants_.clear();
  capacity_fetched_ = absl::InfinitePast();
}

absl::StatusOr<bool> Directory::Exists(const ObjectKind& kind,
                                       const std::vector<std::string>& key) {
  const std::string cache_key =
      absl::StrCat(kind.table, "/", absl::StrJoin(key, "/"));
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = present_.find(cache_key);
    if (it != present_.end() && now - it->second < ttl_) return true;
  }
  absl::StatusOr<storage::postgres::StoredObject> got =
      objects_->Get(kind, key);
  if (absl::IsNotFound(got.status())) return false;
  if (!got.ok()) return got.status();
  absl::MutexLock lock(&mu_);
  present_[cache_key] = now;
  return true;
}

absl::Status Directory::CheckInTenant(
    const ObjectKind& kind, const std::string& tenant, const std::string& id,
    const std::string& field, std::string_view reason, std::string_view what) {
  absl::StatusOr<bool> ok = Exists(kind, {tenant, id});
  if (!ok.ok()) return ok.status();
  if (*ok) return absl::OkStatus();
  return domain::FieldError(
      field, reason,
      absl::StrCat(domain::AbslView(what), " \"", id,
                   "\" does not exist in tenant ", tenant));
}

absl::Status Directory::CheckQueue(const std::string& tenant,
                                   const std::string& queue,
                                   const std::string& field) {
  return CheckInTenant(storage::postgres::QueueKind(), tenant, queue, field,
                       domain::reason::kUnknownQueue, "queue");
}

absl::Status Directory::CheckProject(const std::string& tenant,
                                     const std::string& project,
                                     const std::string& field) {
  return CheckInTenant(storage::postgres::ProjectKind(), tenant, project, field,
                       "UNKNOWN_PROJECT", "project");
}

template <typename T>
absl::StatusOr<T> Directory::ReadThrough(
    absl::flat_hash_map<std::string, Cached<T>>& cache, const ObjectKind& kind,
    const std::string& id, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    auto it = cache.find(id);
    if (it != cache.end() && now - it->second.fetched < ttl_) {
      return it->second.value;
    }
  }
  absl::StatusOr<storage::postgres::StoredObject> got =
      objects_->Get(kind, {id});
  if (!got.ok()) return got.status();
  T value;
  value.ParseFromString(got->body);
  absl::MutexLock lock(&mu_);
  cache[id] = {value, now};
  return value;
}

absl::StatusOr<trainyard::v1::Tenant> Directory::GetTenant(
    const std::string& tenant) {
  return ReadThrough(tenants_, storage::postgres::TenantKind(), tenant,
                     absl::Now());
}

absl::StatusOr<trainyard::v1::PriorityClass> Directory::ResolvePriorityClass(
    const trainyard::v1::Tenant& tenant, const std::string& name,
    const std::string& field) {
  std::string id = name;
  if (id.empty()) id = tenant.default_priority_class();
  const bool implicit = id.empty();
  if (implicit) id = "default";
  const absl::Time now = absl::Now();
  absl::StatusOr<trainyard::v1::PriorityClass> stored =
      ReadThrough(classes_, storage::postgres::PriorityClassKind(), id, now);
  if (!absl::IsNotFound(stored.status())) return stored;
  if (!implicit && !name.empty()) {
    return domain::FieldError(
        field, "UNKNOWN_PRIORITY_CLASS",
        absl::StrCat("priority class \"", id, "\" does not exist"));
  }
  if (!implicit) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tenant's default priority class \"", id, "\" does not exist"));
  }
  // No "default" class defined: priority 0, preemptible. Cached like a stored
  // class (a "default" created later replaces it on invalidation or after the
  // TTL).
  trainyard::v1::PriorityClass pc;
  pc.set_name("priorityClasses/default");
  pc.set_value(0);
  pc.set_preemptible(true);
  absl::MutexLock lock(&mu_);
  classes_[id] = {pc, now};
  return pc;
}

absl::StatusOr<std::shared_ptr<const domain::CapacityIndex>>
Directory::Capacity() {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (capacity_ != nullptr && now - capacity_fetched_ < ttl_)
      return capacity_;
  }
  std::vector<trainyard::v1::Node> nodes;
  absl::flat_hash_map<std::string, trainyard::v1::BackendKind> backends;
  storage::postgres::ListQuery query;
  query.limit = 5000;
  while (true) {
    absl::StatusOr<storage::postgres::ListPage> page =
        objects_->List(storage::postgres::NodeKind(), query);
    if (!page.ok()) return page.status();
    for (const auto& o : page->objects) {
      trainyard::v1::Node& node = nodes.emplace_back();
      node.ParseFromString(o.body);
      // Stored bodies carry no name; it is the row's key.
      node.set_name(domain::NodeName(o.key[0], o.key[1]));
    }
    if (!page->more) break;
    query.after_key = page->objects.back().key;
  }
  absl::StatusOr<storage::postgres::ListPage> clusters =
      objects_->List(storage::postgres::ClusterKind(), {.limit = 100000});
  if (!clusters.ok()) return clusters.status();
  for (const auto& o : clusters->objects) {
    trainyard::v1::Cluster c;
    c.ParseFromString(o.body);
    backends[o.key[0]] = c.backend();
  }
  auto index = std::make_shared<const domain::CapacityIndex>(
      domain::CapacityIndex::Build(nodes, backends));
  absl::MutexLock lock(&mu_);
  capacity_ = index;
  capacity_fetched_ = now;
  return capacity_;
}

storage::postgres::AuditRecord MakeAudit(
    const Caller& caller, std::string_view method, const std::string& resource,
    const std::string& tenant, const google::protobuf::Message& request) {
  storage::postgres::AuditRecord audit;
  audit.principal = caller.principal;
  audit.method = std::string(method);
  audit.resource = resource;
  audit.tenant = tenant;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(
      request, &audit.request_json, options);
  return audit;
}

void AuditFailure(const ApiContext& ctx, storage::postgres::AuditRecord audit,
                  const absl::Status& status) {
  audit.result = std::string(absl::StatusCodeToString(status.code()));
  if (absl::Status s = ctx.auth_store->WriteAudit(audit); !s.ok()) {
    runtime::Log(runtime::LogLevel::kWarning, "could not write audit row",
                 {{"method", audit.method}, {"error", s}});
  }
}

absl::StatusOr<int> PageSize(int32_t requested, std::string_view field) {
  return domain::ResolvePageSize(requested, field);
}

}  // namespace trainyard::api
