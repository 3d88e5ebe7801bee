#ifndef TRAINYARD_STORAGE_POSTGRES_MIGRATE_H_
#define TRAINYARD_STORAGE_POSTGRES_MIGRATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard::storage::postgres {

// One numbered schema change, from storage/postgres/migrations/NNNN_name.sql.
struct Migration {
  int version;
  std::string name;
  std::string sql;
};

// The migrations compiled into the binary, ascending by version (generated at
// build time).
const std::vector<Migration>& EmbeddedMigrations();

struct MigrateResult {
  std::vector<int> applied;  // versions applied by this call
  int current_version = 0;   // schema version after the call
};

// Applies the missing migrations, each in its own transaction, under a session
// advisory lock so concurrent callers (several services starting at once)
// serialise; idempotent. Fails if the database holds a migration newer than
// this binary knows (a downgrade).
absl::StatusOr<MigrateResult> Migrate(
    const std::string& url,
    const std::vector<Migration>& migrations = EmbeddedMigrations());

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_MIGRATE_H_
