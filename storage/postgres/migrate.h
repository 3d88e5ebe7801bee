#ifndef TRAINYARD_STORAGE_POSTGRES_MIGRATE_H_
#define TRAINYARD_STORAGE_POSTGRES_MIGRATE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

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

// Migrate, tried again while the database cannot be reached (UNAVAILABLE: not
// started yet, restarting, refusing connections) until `wait` has passed, with
// backoff from 100 ms to 2 s between tries. A service that starts before its
// database, or while it restarts, waits for it instead of exiting. Any other
// error (a downgrade, a failing migration) is returned at once. `on_retry`, if
// set, hears each failed try that will be tried again.
absl::StatusOr<MigrateResult> MigrateWhenReachable(
    const std::string& url, absl::Duration wait,
    const std::function<void(const absl::Status&)>& on_retry = nullptr);

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_MIGRATE_H_
