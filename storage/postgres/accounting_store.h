// Chargeback's storage: the price book (rate versions, spot prices,
// commitments, the book's currency), the ledger of usage lines and each
// attempt's metering cursor (migration 0005_accounting.sql). The pricing rules
// are the pure library's (services/accounting/pricing); this store keeps what
// they produce, all or nothing per call. See docs/accounting.md.
#ifndef TRAINYARD_STORAGE_POSTGRES_ACCOUNTING_STORE_H_
#define TRAINYARD_STORAGE_POSTGRES_ACCOUNTING_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/accounting/pricing/idle.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"
#include "services/accounting/pricing/report.h"
#include "services/accounting/pricing/rollup.h"
#include "storage/postgres/job_rows.h"
#include "storage/postgres/object_store.h"
#include "storage/postgres/pool.h"

namespace trainyard::storage::postgres {

namespace pricing = ::trainyard::accounting::pricing;

// An attempt the meter has still to meter (it started and its final usage is
// not in the ledger yet), as stored, with what metering it needs.
struct MeterCandidate {
  int64_t job_id = 0;
  int32_t attempt = 0;
  std::string tenant;
  std::string project;
  std::string queue;
  std::string user;
  std::string cluster;  // id
  std::string flavor;   // id
  // The flavor's kind is FLAVOR_KIND_SPOT (false when the flavor is gone).
  bool spot_flavor = false;
  std::map<std::string, std::string> labels;
  int32_t workers = 1;
  int64_t gpus_per_worker = 0;
  int64_t cpu_millis_per_worker = 0;
  int64_t memory_bytes_per_worker = 0;
  // From the attempt's body: when it started and ended (ms, UTC), and how.
  pricing::TimeMs start_ms = 0;
  std::optional<pricing::TimeMs> end_ms;
  int32_t failure_class = 0;  // trainyard.v1.FailureClass
  // The last checkpoint the attempt reported.
  std::optional<pricing::TimeMs> last_checkpoint_ms;
  // How far earlier passes metered it.
  std::optional<pricing::TimeMs> metered_until_ms;
  // Whether it started (an admitted attempt that did not has start_ms 0).
  bool started = false;
  // The job's time limit, if it has one.
  std::optional<pricing::TimeMs> time_limit_ms;
};

// What one pass wrote for one attempt: `lines` replace every line of the
// attempt that starts at or after `replace_from`; the cursor moves to
// `metered_until_ms`, and `final` marks the attempt done.
struct MeterWrite {
  std::vector<pricing::LedgerLine> lines;
  pricing::TimeMs replace_from = 0;
  pricing::TimeMs metered_until_ms = 0;
  bool final = false;
};

struct MeterBatchResult {
  int attempts = 0;  // metered in this batch
  int lines_upserted = 0;
  int lines_deleted = 0;
  // The last attempt of the batch (for the next batch's `after`).
  int64_t last_job_id = 0;
  int32_t last_attempt = 0;
  // Attempts `meter` refused, with why (their cursors are left as they were).
  std::vector<std::pair<std::string, absl::Status>> failed;
};

// The JOB_EVENT_TYPE_COST_UPDATED events a metering batch writes in its
// transaction (docs/accounting.md, "A job's cost").
struct CostEvents {
  // Whether to write one for `job_id`, an attempt of which the batch metered
  // (`attempt_final`: for the last time). Called once per metered attempt.
  std::function<bool(int64_t job_id, bool attempt_final)> due;
  // The events' time.
  absl::Time time;
};

// A page of ledger lines, ascending by (job, attempt, resource, start).
struct UsagePage {
  std::vector<pricing::LedgerLine> lines;
  // The key after which the next page starts; empty on the last page.
  std::string next_after;
};

// A budget as stored (its body: the Budget without output-only fields).
struct StoredBudget {
  std::string tenant;
  std::string id;
  std::string project;
  int64_t version = 0;
  std::string body;
};

// What the meter last found for a budget (budget_status).
struct BudgetStatusRow {
  std::string tenant;
  std::string id;
  pricing::TimeMs month_start_ms = 0;
  int64_t spent_micros = 0;
  int64_t forecast_micros = 0;
  int32_t active_action = 0;  // trainyard.v1.BudgetAction
  int32_t notified_percent = 0;
  int64_t budget_version = 0;
  pricing::TimeMs status_ms = 0;
};

// The prices of one flavor in force at an instant (micros per unit-hour).
struct CurrentPrices {
  std::optional<int64_t> gpu_hour;
  std::optional<int64_t> cpu_hour;
  std::optional<int64_t> gib_hour;
  // The latest spot observation at or before the instant.
  std::optional<int64_t> spot_gpu_hour;
};

// --- Idle cost (migration 0008_idle_cost.sql) ---

// What a flavor's nodes held together over [start_ms, end_ms) (pool_capacity;
// kept by a trigger on `nodes`).
struct CapacityInterval {
  std::string flavor;
  pricing::TimeMs start_ms = 0;
  std::optional<pricing::TimeMs> end_ms;  // none: still held
  int32_t nodes = 0;
  int64_t gpus = 0;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
};

// What an idle pass computes the idle lines of `hours` from.
struct IdleInput {
  // Closed UTC hours, ascending.
  std::vector<pricing::TimeMs> hours;
  // The capacity each flavor held from the first hour's start to the last
  // hour's end (an interval still open ends there), by flavor.
  std::map<std::string, std::vector<pricing::CapacityHeld>> held;
  // Flavors of kind FLAVOR_KIND_SPOT.
  std::set<std::string> spot;
  // The ledger's cost of each (hour, flavor, tenant) of the hours, one line
  // each (keys.tenant, keys.flavor, period_start, cost_micros), from the hour
  // rollups.
  std::vector<pricing::LedgerLine> allocated;
};

// A tenant's share of the idle line of (flavor, hour).
using IdleShareRow = pricing::IdleShareLine;

// What an idle pass writes: every idle line of its hours, and their shares.
struct IdleWrite {
  std::vector<pricing::IdleLine> lines;
  std::vector<IdleShareRow> shares;
};

struct IdlePassResult {
  int hours = 0;  // hours computed
  int lines = 0;  // idle lines written
};

class AccountingStore {
 public:
  explicit AccountingStore(Database* db);

  // The stored book. With no price stored yet, an empty book in
  // `default_currency` (which must be an ISO 4217 code).
  absl::StatusOr<pricing::PriceBook> LoadPriceBook(
      std::string_view default_currency);
  // The book's currency alone (`default_currency` while no price is stored).
  absl::StatusOr<std::string> Currency(std::string_view default_currency);

  // Adds prices to the stored book, all or none: under a lock on the book,
  // loads it, adds each entry through PriceBook's checks (its field errors
  // come back unchanged, prefixed by `field_prefix` and the entry's index
  // when there are several), and inserts them. The first price stored sets
  // the book's currency. Returns the book as it is after the change.
  struct PriceChange {
    std::vector<pricing::RateVersion> rates;
    std::vector<pricing::SpotPrice> spot_prices;
    std::vector<pricing::Commitment> commitments;
  };
  // `audit` (may be null) is written in the same transaction.
  absl::StatusOr<pricing::PriceBook> AddPrices(const PriceChange& change,
                                               pricing::TimeMs closed_before,
                                               std::string_view field_prefix,
                                               const AuditRecord* audit);

  // One batch of a metering pass, in one transaction: locks up to `limit`
  // attempts after (after_job_id, after_attempt) that started and are not
  // final (skipping attempts another transaction holds: a second meter, or a
  // dispatcher recording their end, which the next pass meters), calls
  // `meter` for each, and writes what it returns: lines upserted by key, the
  // attempt's older lines from `replace_from` on that it no longer produces
  // deleted, the cursor moved, and the rollups of every hour it wrote or
  // deleted a line of rebuilt from that hour's lines (their days' and
  // months' moved by the same difference). An attempt whose `meter` fails is
  // left as it was and reported in `failed`. Metering the same attempt twice,
  // or two meters at once, writes each line once.
  // With `cost_events`, also writes the cost events it says are due.
  absl::StatusOr<MeterBatchResult> MeterBatch(
      int64_t after_job_id, int32_t after_attempt, int limit,
      absl::FunctionRef<absl::StatusOr<MeterWrite>(const MeterCandidate&)>
          meter,
      const CostEvents* cost_events = nullptr);

  // Every attempt that started and ran at some instant of [start_ms, end_ms)
  // (started before end_ms and not ended by start_ms), as MeterBatch reads
  // them, without locking anything: the reconciliation's input.
  absl::StatusOr<std::vector<MeterCandidate>> AttemptsIn(
      pricing::TimeMs start_ms, pricing::TimeMs end_ms);

  // Ledger lines whose charge period starts in [start_ms, end_ms), of
  // `tenant` ("" = every tenant) and `job_id` (0 = every job), after the
  // page key `after` ("" = from the start), at most `limit`.
  absl::StatusOr<UsagePage> ListLines(const std::string& tenant, int64_t job_id,
                                      pricing::TimeMs start_ms,
                                      pricing::TimeMs end_ms,
                                      const std::string& after, int limit);

  // Every ledger line of `tenant` ("" = all) whose charge period starts in
  // [start_ms, end_ms), with the job's labels in its keys (none when the job
  // is gone: its lines still count, as in the rollups).
  absl::StatusOr<std::vector<pricing::LedgerLine>> LoadLines(
      const std::string& tenant, pricing::TimeMs start_ms,
      pricing::TimeMs end_ms);

  // The sums of the rollups that cover each period of `q` (which
  // pricing::RollupsServe), filtered and grouped as `q` asks, one per
  // (period, keys) with rollup rows: what pricing::ReportFromRollups makes
  // the report of. One read-only statement.
  absl::StatusOr<std::vector<pricing::RollupSum>> SumRollups(
      const pricing::ReportQuery& q);

  // Rebuilds every rollup from the ledger's lines (the statements of
  // migration 0007_usage_rollups.sql), in one transaction: for a ledger
  // loaded in bulk. The meter keeps the rollups up to date itself.
  absl::Status RebuildRollups();

  // Each flavor's prices in force at `at` (two statements; what the
  // scheduler prices expected costs with).
  absl::StatusOr<std::map<std::string, CurrentPrices>> PricesAt(
      pricing::TimeMs at);

  // --- Idle cost ---

  // One idle pass, in one transaction: the hours to compute are those a late
  // line made dirty and the hours from the cursor (idle_state) on, at most
  // `max_hours` of them, all before `closed_until` (a UTC hour boundary).
  // Holding the cursor's row and the rollup lock (so that no node change,
  // price or metering batch interleaves), it loads the book and the input,
  // calls `compute`, replaces the idle lines and shares of those hours with
  // what it returns, and moves the cursor. Computing the same hours again
  // writes the same rows.
  absl::StatusOr<IdlePassResult> IdlePass(
      pricing::TimeMs closed_until, int max_hours,
      std::string_view default_currency,
      absl::FunctionRef<absl::StatusOr<IdleWrite>(const pricing::PriceBook&,
                                                  const IdleInput&)>
          compute);

  // The stored idle lines whose hour is in [start_ms, end_ms), ascending by
  // (hour, flavor); of one flavor unless `flavor` is "".
  absl::StatusOr<std::vector<pricing::IdleLine>> LoadIdleLines(
      pricing::TimeMs start_ms, pricing::TimeMs end_ms,
      const std::string& flavor = "");
  // Their shares, ascending by (hour, flavor, tenant); of one flavor and one
  // tenant unless "".
  absl::StatusOr<std::vector<IdleShareRow>> LoadIdleShares(
      pricing::TimeMs start_ms, pricing::TimeMs end_ms,
      const std::string& flavor = "", const std::string& tenant = "");
  // A flavor's capacity history, ascending.
  absl::StatusOr<std::vector<CapacityInterval>> CapacityHistory(
      const std::string& flavor);

  // --- Budgets (the objects themselves are ObjectStore's BudgetKind) ---

  // Every budget of every tenant, by (tenant, id).
  absl::StatusOr<std::vector<StoredBudget>> LoadBudgets();
  // Every budget's status, by (tenant, id); `tenant` "" = every tenant.
  absl::StatusOr<std::vector<BudgetStatusRow>> LoadBudgetStatus(
      const std::string& tenant = "");
  // What the ledger charges each (tenant, project) of the tenants that have
  // a budget, for the lines whose charge period starts in [start_ms, end_ms).
  absl::StatusOr<std::map<std::pair<std::string, std::string>, int64_t>>
  TenantCostByProject(pricing::TimeMs start_ms, pricing::TimeMs end_ms);
  // Every attempt without an end (admitted or running) of the tenants that
  // have a budget, as MeterBatch reads them, locking nothing.
  absl::StatusOr<std::vector<MeterCandidate>> OpenBudgetedAttempts();
  // Upserts the statuses and appends `events` (budget notices on the Watch
  // stream), in one transaction. A status whose budget was deleted meanwhile
  // is skipped.
  absl::Status WriteBudgetStatus(const std::vector<BudgetStatusRow>& rows,
                                 const std::vector<PendingEvent>& events);

 private:
  Database* db_;
};

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_ACCOUNTING_STORE_H_
