#ifndef TRAINYARD_SERVICES_API_CONTEXT_H_
#define TRAINYARD_SERVICES_API_CONTEXT_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/api/auth.h"
#include "services/lib/domain/capacity.h"
#include "services/lib/domain/validation.h"
#include "storage/postgres/auth_store.h"
#include "storage/postgres/job_store.h"
#include "storage/postgres/object_store.h"
#include "storage/redis/redis_client.h"
#include "storage/redis/tenant_rate_limiter.h"
#include "trainyard/v1/queue.pb.h"

namespace trainyard::api {

class SubmitBatcher;
class EventHub;

// Cached lookups the hot paths need (queue and project existence, priority
// classes, tenant settings, cluster capacity). Entries live `ttl`; writers
// through this replica invalidate.
class Directory {
 public:
  Directory(storage::postgres::ObjectStore* objects, absl::Duration ttl);

  // OK, or FieldError(field, UNKNOWN_QUEUE/UNKNOWN_PROJECT).
  absl::Status CheckQueue(const std::string& tenant, const std::string& queue,
                          const std::string& field);
  absl::Status CheckProject(const std::string& tenant,
                            const std::string& project,
                            const std::string& field);
  // "" → the tenant's default class, else "default"; a missing "default" class
  // means value 0, preemptible. Unknown names are a FieldError on `field`.
  absl::StatusOr<trainyard::v1::PriorityClass> ResolvePriorityClass(
      const trainyard::v1::Tenant& tenant, const std::string& name,
      const std::string& field);
  absl::StatusOr<trainyard::v1::Tenant> GetTenant(const std::string& tenant);
  // Capacity of the known clusters (rebuilt from the nodes table at most every
  // ttl).
  absl::StatusOr<std::shared_ptr<const domain::CapacityIndex>> Capacity();

  void Invalidate();

 private:
  template <typename T>
  struct Cached {
    T value;
    absl::Time fetched;
  };
  // The object {id} of `kind` through `cache`: the cached value while younger
  // than ttl at `now`, else read from the store (errors as they are) and
  // cached.
  template <typename T>
  absl::StatusOr<T> ReadThrough(
      absl::flat_hash_map<std::string, Cached<T>>& cache,
      const storage::postgres::ObjectKind& kind, const std::string& id,
      absl::Time now);
  absl::StatusOr<bool> Exists(const storage::postgres::ObjectKind& kind,
                              const std::vector<std::string>& key);
  // OK if `kind` has the object {tenant, id}, else FieldError(field, reason,
  // "<what> \"<id>\" does not exist in tenant <tenant>").
  absl::Status CheckInTenant(const storage::postgres::ObjectKind& kind,
                             const std::string& tenant, const std::string& id,
                             const std::string& field, std::string_view reason,
                             std::string_view what);

  storage::postgres::ObjectStore* objects_;
  const absl::Duration ttl_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::Time> present_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Cached<trainyard::v1::PriorityClass>>
      classes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Cached<trainyard::v1::Tenant>> tenants_
      ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const domain::CapacityIndex> capacity_ ABSL_GUARDED_BY(mu_);
  absl::Time capacity_fetched_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// Everything the API handlers share. Owned by the server
// (services/api/server.h).
struct ApiContext {
  storage::postgres::Database* db = nullptr;
  storage::postgres::ObjectStore* objects = nullptr;
  storage::postgres::JobStore* jobs = nullptr;
  storage::postgres::AuthStore* auth_store = nullptr;
  storage::redis::RedisClient* redis = nullptr;  // may be down; never required
  storage::redis::TenantRateLimiter* rate_limiter = nullptr;
  Authenticator* auth = nullptr;
  Directory* directory = nullptr;
  SubmitBatcher* batcher = nullptr;
  EventHub* hub = nullptr;
  domain::Limits limits;
};

// Audit record for a mutation by `caller`: `method` is the full RPC name
// ("/trainyard.v1.QueueService/CreateQueue"), the request is stored as JSON.
storage::postgres::AuditRecord MakeAudit(
    const Caller& caller, std::string_view method, const std::string& resource,
    const std::string& tenant, const google::protobuf::Message& request);

// Writes the audit row of a refused or failed mutation (successful ones are
// written in the mutation's own transaction). Best effort: a failure here is
// logged, not returned.
void AuditFailure(const ApiContext& ctx, storage::postgres::AuditRecord audit,
                  const absl::Status& status);

// Page size from a request (domain::ResolvePageSize): 0 → 100, 1..1000 as
// asked, above 1000 → 1000 (AIP-158 lets a server coerce), negative →
// INVALID_ARGUMENT on `field`.
absl::StatusOr<int> PageSize(int32_t requested,
                             std::string_view field = "page_size");

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_CONTEXT_H_
