#ifndef TRAINYARD_STORAGE_POSTGRES_POOL_H_
#define TRAINYARD_STORAGE_POSTGRES_POOL_H_

#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"

namespace trainyard::storage::postgres {

struct DatabaseOptions {
  // libpq connection URL, e.g.
  // "postgresql://trainyard@127.0.0.1:55432/trainyard".
  std::string url;
  // Connections kept open.
  int pool_size = 8;
  // How long a caller waits for a free connection before UNAVAILABLE.
  absl::Duration acquire_timeout = absl::Seconds(10);
  // Retries of a transaction that failed with a serialization failure or
  // deadlock.
  int max_retries = 5;
  // Plan every execution of a prepared statement with its parameters
  // (plan_cache_mode = force_custom_plan) instead of letting PostgreSQL
  // settle on a generic plan after five executions. A generic plan is made
  // with the table sizes of that moment and kept until the table is next
  // analyzed: on a fresh database that fills quickly, the batch statements
  // that find job rows by an array of ids were planned as sequential scans
  // of a then-tiny table and stayed so (5-10 ms each with 14,000 jobs,
  // against well under 1 ms by index). The scheduler and the dispatchers
  // turn it on: their statements look up existing rows by id arrays. The
  // api's submit path leaves it off: its statements insert, and planning
  // each one inside the outbox's ordering lock cost it ~20 % of its
  // throughput (submit_bench: 5,600-6,500/s against 7,600-7,750/s).
  bool custom_plans = false;
};

// A pool of PostgreSQL connections with prepared statements. Thread-safe. Every
// statement the stores use is registered once with Prepare() and prepared
// lazily on each connection.
class Database {
 public:
  static absl::StatusOr<std::unique_ptr<Database>> Open(
      DatabaseOptions options);
  ~Database();

  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Registers a prepared statement (idempotent for the same name and SQL).
  void Prepare(const std::string& name, const std::string& sql);

  // Runs `fn` in a read-write transaction and commits when it returns OK. A
  // non-OK status from `fn` rolls back and is returned. Serialization failures
  // and deadlocks are retried; a lost connection is replaced and reported as
  // UNAVAILABLE. `fn` may run more than once, so it must only write to its
  // outputs, not accumulate into them.
  absl::Status Transact(absl::FunctionRef<absl::Status(pqxx::work&)> fn);

  // Runs `fn` in a read-only transaction.
  absl::Status Read(
      absl::FunctionRef<absl::Status(pqxx::read_transaction&)> fn);

  // Runs `fn` with a connection of its own (LISTEN, advisory locks held across
  // transactions).
  absl::Status WithConnection(
      absl::FunctionRef<absl::Status(pqxx::connection&)> fn);

  // SELECT 1.
  absl::Status Ping();

  const DatabaseOptions& options() const { return options_; }

 private:
  explicit Database(DatabaseOptions options);

  struct Slot {
    std::unique_ptr<pqxx::connection> conn;
    size_t prepared = 0;  // statements_[0, prepared) are registered on conn
  };

  absl::StatusOr<Slot*> Acquire();
  void Release(Slot* slot, bool broken);
  absl::Status EnsureConnected(Slot& slot);

  template <typename Txn>
  absl::Status Run(absl::FunctionRef<absl::Status(Txn&)> fn, bool retry);

  const DatabaseOptions options_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot*> free_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> statements_
      ABSL_GUARDED_BY(mu_);
};

// Parameters of a statement built at run time, all passed as text (bytea as
// hex, decoded in SQL); NULL for an empty optional.
class DynamicParams {
 public:
  // Adds a value and returns its placeholder, e.g. "$3".
  std::string Add(std::optional<std::string> value);
  // Adds raw bytes and returns an SQL expression of type bytea.
  std::string AddBytes(const std::string& bytes);
  // For txn.exec_params(sql, params.Dynamic()); valid while this object lives.
  pqxx::internal::dynamic_params<std::vector<const char*>::const_iterator>
  Dynamic();

 private:
  std::vector<std::optional<std::string>> values_;
  std::vector<const char*> pointers_;
};

// pqxx helpers shared by the stores.
std::string BytesOf(const pqxx::field& field);  // bytea column → raw bytes
pqxx::binarystring Bytea(
    const std::string& bytes);  // raw bytes → bytea parameter
// Column selected as `(extract(epoch from t) * 1000000)::bigint` (see
// kEpochMicros) → Time; NULL → absl::InfinitePast().
absl::Time TimeOf(const pqxx::field& field);
// SQL expression of a timestamptz column in epoch microseconds, for TimeOf().
std::string EpochMicros(const std::string& column);
// Time (from TimeOf) → proto Timestamp.
inline google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
      absl::ToUnixMicros(t));
}

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_POOL_H_
