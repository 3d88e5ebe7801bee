// The meter: one leader among the accounting processes turns every attempt
// that started into ledger lines, at least every `interval` (a running job's
// cost accrues as it runs) and once more, for good, after it ended. The
// pricing is the pure library's (services/accounting/pricing/meter.h); the
// ledger and each attempt's cursor are AccountingStore's. Idempotent: a pass
// re-meters from the attempt's cursor and upserts lines by key, under a row
// lock on the attempt, so a repeated pass, a pass cut short by kill -9 (its
// transaction rolls back) or two meters at once write each line once. See
// docs/accounting.md.
#ifndef TRAINYARD_SERVICES_ACCOUNTING_METER_SERVICE_H_
#define TRAINYARD_SERVICES_ACCOUNTING_METER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/accounting/pricing/meter.h"
#include "services/leader/leader_loop.h"
#include "storage/postgres/accounting_store.h"
#include "storage/postgres/pool.h"

namespace trainyard::accounting {

struct MeterServiceOptions {
  std::string postgres_url;
  // Wake-ups are not needed (the timer drives the passes); kept empty.
  std::string redis_addr;
  int db_pool_size = 2;
  // How often a pass runs (a running attempt's cost is at most this old).
  absl::Duration interval = absl::Seconds(30);
  absl::Duration standby_poll = absl::Seconds(1);
  int64_t leader_lock_key = 0x7479616363740000;  // "tyacct\0\0"
  // The book's currency while no price is stored.
  std::string currency = "USD";
  pricing::MeterOptions meter;
  // Attempts per transaction.
  int batch = 200;
  // A job's JOB_EVENT_TYPE_COST_UPDATED while an attempt of it runs: at most
  // this often (zero: every pass that meters it); each attempt metered for
  // the last time always gets one (with cost.final once the job has ended).
  absl::Duration cost_event_interval = absl::Minutes(1);
  // Closed hours an idle pass computes at most (a meter that was stopped
  // catches up over several passes).
  int idle_max_hours = 744;
  // Called with each budget notice's JSON (the signed webhook), after its
  // status and event are committed. Optional.
  std::function<void(const std::string& event_type, const std::string& json)>
      notify;
};

// The usage of an attempt as the pure meter reads it: failure classes map to
// how it ended (preemption, spot reclaim, node failure and backend errors
// are interruptions: the work since the last checkpoint is lost work; a user
// error, a time limit and a cancel are the tenant's).
pricing::AttemptUsage UsageOf(const storage::postgres::MeterCandidate& c);

// What a pass at `now` writes for the attempt `c`: its lines from where the
// last pass left off (the start of the line that contains its cursor, or of
// its lost work), which replace the stored ones from there on.
absl::StatusOr<storage::postgres::MeterWrite> MeterCandidateAt(
    const pricing::PriceBook& book, const storage::postgres::MeterCandidate& c,
    pricing::TimeMs now, const pricing::MeterOptions& options);

// The idle lines of `input`'s hours (pricing::ComputeIdle) and their shares
// (pricing::ShareIdle): for every hour, one line per flavor that held
// capacity in it or has a commitment overlapping it. A (flavor, hour) that
// cannot be priced (no rate in force) has no line; it is listed in `unpriced`
// with why.
storage::postgres::IdleWrite ComputeIdleWrite(
    const pricing::PriceBook& book, const storage::postgres::IdleInput& input,
    const pricing::MeterOptions& options,
    std::vector<std::pair<std::string, absl::Status>>* unpriced);

class MeterService {
 public:
  static absl::StatusOr<std::unique_ptr<MeterService>> Create(
      MeterServiceOptions options);
  ~MeterService();

  // Runs the leader loop in the background until Shutdown().
  void Start();
  void Shutdown();

  // One whole pass now, on the calling thread (tests and `trainyard
  // accounting meter --once`): every attempt due, in batches.
  struct PassResult {
    int attempts = 0;
    int lines_upserted = 0;
    int lines_deleted = 0;
    int failed = 0;
    // Budgets whose status was written, and thresholds newly reached.
    int budgets = 0;
    int notices = 0;
    // Closed hours whose idle lines were computed, and the lines written.
    int idle_hours = 0;
    int idle_lines = 0;
  };
  absl::StatusOr<PassResult> RunPass(absl::Time now);

  bool is_leader() const { return loop_.is_leader(); }
  int64_t passes() const { return passes_.load(); }

 private:
  explicit MeterService(MeterServiceOptions options);
  // After the attempts are metered: every budget's status and notices
  // (budgets.h).
  absl::Status UpdateBudgets(const pricing::PriceBook& book,
                             pricing::TimeMs now, PassResult& result);
  // After the attempts are metered: the idle lines of every hour closed
  // since the last pass, and of hours a late line changed.
  absl::Status UpdateIdle(pricing::TimeMs now, PassResult& result);

  MeterServiceOptions options_;
  std::unique_ptr<storage::postgres::Database> db_;
  std::unique_ptr<storage::postgres::AccountingStore> store_;
  leader::LeaderLoop loop_;
  std::atomic<int64_t> passes_{0};
  // When each job with a running attempt last got a cost event (RunPass is
  // not reentrant: one pass at a time).
  absl::flat_hash_map<int64_t, absl::Time> cost_evented_;
};

}  // namespace trainyard::accounting

#endif  // TRAINYARD_SERVICES_ACCOUNTING_METER_SERVICE_H_
