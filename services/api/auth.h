#ifndef TRAINYARD_SERVICES_API_AUTH_H_
#define TRAINYARD_SERVICES_API_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/lib/runtime/job_token.h"
#include "storage/postgres/auth_store.h"
#include "trainyard/v1/admin.pb.h"

namespace trainyard::api {

// What a caller may do. Roles per tenant: viewer ⊂ member ⊂ tenant-admin;
// finance = viewer + accounting; platform-admin = everything everywhere (see
// docs/security.md).
enum class Permission {
  kRead,         // read the tenant's jobs, queues, projects
  kWriteJobs,    // submit, cancel, report checkpoints
  kAdminTenant,  // projects, role bindings and tokens within the tenant
  kFinance,      // accounting reads, budgets
};

// An authenticated principal and its role bindings.
struct Caller {
  std::string principal;
  std::string token_id;
  bool platform_admin = false;
  // ROLE_FINANCE bound without a tenant: reads every tenant's accounting
  // (AccountingService) and nothing else.
  bool platform_finance = false;
  // tenant → bitmask of (1 << trainyard::v1::Role)
  absl::flat_hash_map<std::string, uint32_t> roles;
  // A job token's scope (docs/security.md "Job tokens"): the job it may read
  // and report checkpoints for, and nothing else (no roles). job_id 0 = a
  // personal token.
  std::string job_tenant;
  int64_t job_id = 0;

  bool job_scoped() const { return job_id != 0; }

  bool Sees(std::string_view tenant) const;
  // Whether the caller reads `tenant`'s accounting: platform-admin, platform
  // finance, or finance or tenant-admin of the tenant.
  bool ReadsAccountingOf(std::string_view tenant) const;
  bool Can(std::string_view tenant, Permission p) const;
  // Tenants with any binding (platform admins: all, signalled by the flag, not
  // listed).
  std::vector<std::string> VisibleTenants() const;
};

// NOT_FOUND when the caller cannot see the tenant at all (another tenant's
// objects are invisible), PERMISSION_DENIED when it sees it but lacks the
// permission. A job token is always PERMISSION_DENIED here (it may only use
// RequireJob's methods on its own job).
absl::Status Require(const Caller& caller, std::string_view tenant,
                     Permission p, std::string_view resource);
// Require for one job's reads and checkpoint reports (Get, Watch of a job,
// ExplainPending, ListCheckpoints, ReportCheckpoint): a job token passes for
// its own job with kRead or kWriteJobs, and gets PERMISSION_DENIED naming its
// scope for any other job or permission; other callers as Require.
absl::Status RequireJob(const Caller& caller, std::string_view tenant,
                        int64_t job_id, Permission p,
                        std::string_view resource);
// PERMISSION_DENIED for a job token, naming `action`; OK otherwise. For
// requests a job token may not make within a method it may call (a Watch of
// the whole tenant).
absl::Status RejectJobToken(const Caller& caller, std::string_view action);
// The methods a job token may call at all (docs/security.md "Job tokens"),
// by full name ("/trainyard.v1.JobService/Get"): JobService's Get, Watch,
// ExplainPending, ListCheckpoints and ReportCheckpoint. Every handler runs
// AllowJobTokenMethod first (services/api/handler.h), so a new RPC is closed
// to job tokens unless it is added here.
inline constexpr std::string_view kJobTokenMethods[] = {
    "/trainyard.v1.JobService/Get",
    "/trainyard.v1.JobService/Watch",
    "/trainyard.v1.JobService/ExplainPending",
    "/trainyard.v1.JobService/ListCheckpoints",
    "/trainyard.v1.JobService/ReportCheckpoint",
};
// OK for callers that are not job tokens and for kJobTokenMethods; else
// PERMISSION_DENIED naming the token's job and the method.
absl::Status AllowJobTokenMethod(const Caller& caller, std::string_view method);
// PERMISSION_DENIED unless platform admin.
absl::Status RequirePlatformAdmin(const Caller& caller,
                                  std::string_view action);

// For platform-admin operations on one tenant's objects: a caller with no role
// in `tenant` gets NOT_FOUND for `resource` (the tenant stays invisible),
// others need platform-admin.
absl::Status RequirePlatformAdminIn(const Caller& caller,
                                    std::string_view tenant,
                                    std::string_view action,
                                    std::string_view resource);

// Bearer tokens: "ty_<id>_<secret>". The id locates the record; only the
// SHA-256 of the whole token is stored.
struct NewToken {
  std::string id;
  std::string secret;  // the full bearer token, shown once
  std::string hash;
};
NewToken GenerateToken();
// Splits "ty_<id>_<secret>" and returns the id, or UNAUTHENTICATED.
absl::StatusOr<std::string> TokenId(std::string_view token);

// Resolves `authorization: Bearer <token>` to a Caller, with a short cache
// (revocations and role changes reach other replicas within `cache_ttl`; this
// replica invalidates at once).
class Authenticator {
 public:
  // `job_tokens`: the keys job tokens are verified with; null = job tokens
  // are refused (UNAUTHENTICATED).
  Authenticator(
      storage::postgres::AuthStore* store, absl::Duration cache_ttl,
      std::shared_ptr<const runtime::JobTokenKeys> job_tokens = nullptr);

  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context);
  absl::StatusOr<Caller> AuthenticateToken(std::string_view token);
  void InvalidateAll();

 private:
  struct Entry {
    Caller caller;
    absl::Time fetched;
    absl::Time expires;  // token expiry, InfiniteFuture if none
  };
  storage::postgres::AuthStore* store_;
  const absl::Duration ttl_;
  const std::shared_ptr<const runtime::JobTokenKeys> job_tokens_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> cache_
      ABSL_GUARDED_BY(mu_);  // by token hash
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_AUTH_H_
