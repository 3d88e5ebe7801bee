#ifndef TRAINYARD_STORAGE_POSTGRES_AUTH_STORE_H_
#define TRAINYARD_STORAGE_POSTGRES_AUTH_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/postgres/object_store.h"
#include "storage/postgres/pool.h"
#include "trainyard/v1/admin.pb.h"

namespace trainyard::storage::postgres {

// A stored API token: the secret itself is never stored, only its SHA-256.
struct TokenRecord {
  trainyard::v1::ApiToken token;  // name "apiTokens/{id}", principal, times …
  std::string id;
  std::string secret_hash;
};

// API tokens, role bindings and the audit log. Thread-safe.
class AuthStore {
 public:
  explicit AuthStore(Database* db);

  absl::StatusOr<trainyard::v1::ApiToken> CreateToken(
      const std::string& id, const std::string& principal,
      const std::string& secret_hash, const std::string& description,
      const std::string& creator, std::optional<absl::Time> expire_time,
      const AuditRecord* audit);
  // NOT_FOUND if absent (revoked and expired tokens are returned; callers
  // check).
  absl::StatusOr<TokenRecord> GetToken(const std::string& id);
  // principal "" = every principal. Newest first.
  absl::StatusOr<std::vector<trainyard::v1::ApiToken>> ListTokens(
      const std::string& principal, const std::string& after_id, int limit,
      bool* more);
  absl::StatusOr<trainyard::v1::ApiToken> RevokeToken(const std::string& id,
                                                      const AuditRecord* audit);

  // ALREADY_EXISTS for a duplicate (principal, role, tenant);
  // FAILED_PRECONDITION for an unknown tenant.
  absl::StatusOr<trainyard::v1::RoleBinding> CreateRoleBinding(
      const trainyard::v1::RoleBinding& binding, const std::string& creator,
      const AuditRecord* audit);
  absl::StatusOr<trainyard::v1::RoleBinding> GetRoleBinding(int64_t id);
  absl::StatusOr<std::vector<trainyard::v1::RoleBinding>> BindingsOf(
      const std::string& principal);
  // Filters: tenant "" = any; principal "" = any; visible_tenants (when set)
  // restricts to those tenants' bindings. Ascending by id, after `after_id`.
  absl::StatusOr<std::vector<trainyard::v1::RoleBinding>> ListRoleBindings(
      const std::string& tenant, const std::string& principal,
      const std::optional<std::vector<std::string>>& visible_tenants,
      int64_t after_id, int limit, bool* more);
  absl::Status DeleteRoleBinding(int64_t id, const AuditRecord* audit);

  // Writes an audit row on its own (refused or failed mutations).
  absl::Status WriteAudit(const AuditRecord& audit);
  // Newest first. tenant "" = all; before_id 0 = from the newest.
  absl::StatusOr<std::vector<trainyard::v1::AuditEntry>> ListAudit(
      const std::string& tenant, const std::string& principal,
      std::optional<absl::Time> start, std::optional<absl::Time> end,
      int64_t before_id, int limit, bool* more);

 private:
  Database* db_;
};

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_AUTH_STORE_H_
