#include "services/api/auth.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/time_util.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/runtime/crypto.h"

namespace trainyard::api {
namespace {

using trainyard::v1::Role;

constexpr uint32_t Bit(Role r) { return 1u << static_cast<int>(r); }

uint32_t Allowed(Permission p) {
  switch (p) {
    case Permission::kRead:
      return Bit(trainyard::v1::ROLE_VIEWER) | Bit(trainyard::v1::ROLE_MEMBER) |
             Bit(trainyard::v1::ROLE_TENANT_ADMIN) |
             Bit(trainyard::v1::ROLE_FINANCE);
    case Permission::kWriteJobs:
      return Bit(trainyard::v1::ROLE_MEMBER) |
             Bit(trainyard::v1::ROLE_TENANT_ADMIN);
    case Permission::kAdminTenant:
      return Bit(trainyard::v1::ROLE_TENANT_ADMIN);
    case Permission::kFinance:
      return Bit(trainyard::v1::ROLE_FINANCE) |
             Bit(trainyard::v1::ROLE_TENANT_ADMIN);
  }
  return 0;
}

std::string_view PermissionName(Permission p) {
  switch (p) {
    case Permission::kRead:
      return "viewer";
    case Permission::kWriteJobs:
      return "member";
    case Permission::kAdminTenant:
      return "tenant-admin";
    case Permission::kFinance:
      return "finance (or tenant-admin)";
  }
  return "?";
}

}  // namespace

bool Caller::Sees(std::string_view tenant) const {
  return platform_admin || roles.contains(std::string(tenant));
}

bool Caller::ReadsAccountingOf(std::string_view tenant) const {
  return platform_finance || Can(tenant, Permission::kFinance);
}

bool Caller::Can(std::string_view tenant, Permission p) const {
  if (platform_admin) return true;
  auto it = roles.find(std::string(tenant));
  return it != roles.end() && (it->second & Allowed(p)) != 0;
}

std::vector<std::string> Caller::VisibleTenants() const {
  std::vector<std::string> out;
  for (const auto& [tenant, mask] : roles) out.push_back(tenant);
  std::sort(out.begin(), out.end());
  return out;
}

absl::Status Require(const Caller& caller, std::string_view tenant,
                     Permission p, std::string_view resource) {
  if (caller.job_scoped()) {
    return RejectJobToken(caller,
                          absl::StrCat("access ", std::string(resource)));
  }
  if (!caller.Sees(tenant))
    return absl::NotFoundError(
        absl::StrCat(std::string(resource), " not found"));
  if (!caller.Can(tenant, p)) {
    return absl::PermissionDeniedError(absl::StrCat(
        caller.principal, " needs role ", std::string(PermissionName(p)),
        " in tenant ", std::string(tenant), " for ", std::string(resource)));
  }
  return absl::OkStatus();
}

absl::Status RequireJob(const Caller& caller, std::string_view tenant,
                        int64_t job_id, Permission p,
                        std::string_view resource) {
  if (!caller.job_scoped()) return Require(caller, tenant, p, resource);
  if (tenant != caller.job_tenant || job_id != caller.job_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the job token of ", caller.principal, " cannot access ",
        std::string(resource), ": a job token is valid for its own job only"));
  }
  if (p != Permission::kRead && p != Permission::kWriteJobs) {
    return RejectJobToken(caller,
                          absl::StrCat("access ", std::string(resource)));
  }
  return absl::OkStatus();
}

absl::Status RejectJobToken(const Caller& caller, std::string_view action) {
  if (!caller.job_scoped()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "the job token of ", caller.principal, " may not ", std::string(action),
      ": a job token may only Get, Watch, ExplainPending, ListCheckpoints and "
      "ReportCheckpoint its own job; use a personal token"));
}

absl::Status AllowJobTokenMethod(const Caller& caller,
                                 std::string_view method) {
  if (!caller.job_scoped()) return absl::OkStatus();
  for (std::string_view allowed : kJobTokenMethods) {
    if (method == allowed) return absl::OkStatus();
  }
  // "/trainyard.v1.QueueService/ListQueues" → "QueueService.ListQueues".
  std::string_view rpc = method;
  if (const size_t dot = rpc.rfind('.'); dot != std::string_view::npos) {
    rpc.remove_prefix(dot + 1);
  }
  std::string call(rpc);
  std::replace(call.begin(), call.end(), '/', '.');
  return RejectJobToken(caller, absl::StrCat("call ", call));
}

absl::Status RequirePlatformAdmin(const Caller& caller,
                                  std::string_view action) {
  if (caller.platform_admin) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      caller.principal, " needs role platform-admin to ", std::string(action)));
}

absl::Status RequirePlatformAdminIn(const Caller& caller,
                                    std::string_view tenant,
                                    std::string_view action,
                                    std::string_view resource) {
  if (!caller.Sees(tenant)) {
    return absl::NotFoundError(
        absl::StrCat(std::string(resource), " not found"));
  }
  return RequirePlatformAdmin(caller, action);
}

NewToken GenerateToken() {
  NewToken t;
  t.id = absl::StrCat("t", absl::BytesToHexString(runtime::RandomBytes(8)));
  t.secret = absl::StrCat("ty_", t.id, "_", runtime::RandomToken(32));
  t.hash = runtime::Sha256Hex(t.secret);
  return t;
}

absl::StatusOr<std::string> TokenId(std::string_view token) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(domain::AbslView(token), absl::MaxSplits('_', 2));
  if (parts.size() != 3 || parts[0] != "ty" || parts[1].empty() ||
      parts[2].empty()) {
    return absl::UnauthenticatedError("malformed API token");
  }
  return std::string(parts[1]);
}

Authenticator::Authenticator(
    storage::postgres::AuthStore* store, absl::Duration cache_ttl,
    std::shared_ptr<const runtime::JobTokenKeys> job_tokens)
    : store_(store), ttl_(cache_ttl), job_tokens_(std::move(job_tokens)) {}

void Authenticator::InvalidateAll() {
  absl::MutexLock lock(&mu_);
  cache_.clear();
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    const grpc::ServerContextBase& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "missing credentials: send metadata \"authorization: Bearer <token>\"");
  }
  std::string_view value(it->second.data(), it->second.size());
  if (!absl::StartsWithIgnoreCase(domain::AbslView(value), "bearer ")) {
    return absl::UnauthenticatedError(
        "authorization metadata must be \"Bearer <token>\"");
  }
  return AuthenticateToken(value.substr(7));
}

absl::StatusOr<Caller> Authenticator::AuthenticateToken(
    std::string_view token) {
  if (runtime::IsJobToken(token)) {
    // Verified by its signature alone: no database round trip, no cache.
    if (job_tokens_ == nullptr) {
      return absl::UnauthenticatedError(
          "job tokens are not accepted: the api has no job token key "
          "(--job_token_key_file)");
    }
    absl::StatusOr<runtime::JobTokenClaims> claims =
        job_tokens_->Verify(token, absl::Now());
    if (!claims.ok()) return claims.status();
    Caller caller;
    caller.principal =
        absl::StrCat("tenants/", claims->tenant, "/jobs/", claims->job_id);
    caller.job_tenant = claims->tenant;
    caller.job_id = claims->job_id;
    return caller;
  }
  const std::string hash = runtime::Sha256Hex(token);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(hash);
    if (it != cache_.end() && now - it->second.fetched < ttl_ &&
        now < it->second.expires) {
      return it->second.caller;
    }
  }
  absl::StatusOr<std::string> id = TokenId(token);
  if (!id.ok()) return id.status();
  absl::StatusOr<storage::postgres::TokenRecord> record = store_->GetToken(*id);
  if (absl::IsNotFound(record.status()))
    return absl::UnauthenticatedError("unknown API token");
  if (!record.ok()) return record.status();
  if (!runtime::ConstantTimeEquals(record->secret_hash, hash)) {
    return absl::UnauthenticatedError("unknown API token");
  }
  if (record->token.has_revoke_time()) {
    return absl::UnauthenticatedError("API token was revoked");
  }
  absl::Time expires = absl::InfiniteFuture();
  if (record->token.has_expire_time()) {
    expires = absl::FromUnixMicros(
        google::protobuf::util::TimeUtil::TimestampToMicroseconds(
            record->token.expire_time()));
    if (now >= expires) return absl::UnauthenticatedError("API token expired");
  }
  Caller caller;
  caller.principal = record->token.principal();
  caller.token_id = *id;
  absl::StatusOr<std::vector<trainyard::v1::RoleBinding>> bindings =
      store_->BindingsOf(caller.principal);
  if (!bindings.ok()) return bindings.status();
  for (const auto& b : *bindings) {
    if (b.role() == trainyard::v1::ROLE_PLATFORM_ADMIN) {
      caller.platform_admin = true;
    } else if (b.role() == trainyard::v1::ROLE_FINANCE && b.tenant().empty()) {
      caller.platform_finance = true;
    } else if (!b.tenant().empty()) {
      caller.roles[b.tenant()] |= Bit(b.role());
    }
  }
  absl::MutexLock lock(&mu_);
  if (cache_.size() > 100000) cache_.clear();
  cache_[hash] = Entry{caller, now, expires};
  return caller;
}

}  // namespace trainyard::api
