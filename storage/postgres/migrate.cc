#include "storage/postgres/migrate.h"

#include <algorithm>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/postgres/errors.h"

namespace trainyard::storage::postgres {
namespace {

// Arbitrary constant shared by every Trainyard process: "trainyard migrate".
constexpr int64_t kMigrationLockKey = 0x7472616e6d6967;

}  // namespace

absl::StatusOr<MigrateResult> Migrate(
    const std::string& url, const std::vector<Migration>& migrations) {
  MigrateResult result;
  try {
    pqxx::connection conn(url);
    {
      pqxx::nontransaction tx(conn);
      tx.exec("SET client_min_messages = warning");
      tx.exec(absl::StrCat("SELECT pg_advisory_lock(", kMigrationLockKey, ")"));
      tx.exec(
          "CREATE TABLE IF NOT EXISTS schema_migrations ("
          " version integer PRIMARY KEY, name text NOT NULL,"
          " applied_at timestamptz NOT NULL DEFAULT now())");
    }
    int current = 0;
    {
      pqxx::nontransaction tx(conn);
      pqxx::result r =
          tx.exec("SELECT coalesce(max(version), 0) FROM schema_migrations");
      current = r[0][0].as<int>();
    }
    int newest_known = migrations.empty() ? 0 : migrations.back().version;
    if (current > newest_known) {
      pqxx::nontransaction tx(conn);
      tx.exec(
          absl::StrCat("SELECT pg_advisory_unlock(", kMigrationLockKey, ")"));
      return absl::FailedPreconditionError(absl::StrCat(
          "database schema is at version ", current,
          " but this binary knows only up to ", newest_known,
          "; refusing to run an older binary against a newer schema"));
    }
    for (const Migration& m : migrations) {
      if (m.version <= current) continue;
      pqxx::work tx(conn);
      tx.exec(m.sql);
      tx.exec_params(
          "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
          m.version, m.name);
      tx.commit();
      result.applied.push_back(m.version);
      current = m.version;
    }
    {
      pqxx::nontransaction tx(conn);
      tx.exec(
          absl::StrCat("SELECT pg_advisory_unlock(", kMigrationLockKey, ")"));
    }
    result.current_version = current;
    return result;
  } catch (const std::exception& e) {
    // The session lock dies with the connection.
    return StatusFromException(e);
  }
}

absl::StatusOr<MigrateResult> MigrateWhenReachable(
    const std::string& url, absl::Duration wait,
    const std::function<void(const absl::Status&)>& on_retry) {
  const absl::Time deadline = absl::Now() + wait;
  absl::Duration backoff = absl::Milliseconds(100);
  while (true) {
    absl::StatusOr<MigrateResult> result = Migrate(url);
    if (result.ok() || !absl::IsUnavailable(result.status()) ||
        absl::Now() + backoff > deadline) {
      return result;
    }
    if (on_retry) on_retry(result.status());
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

}  // namespace trainyard::storage::postgres
