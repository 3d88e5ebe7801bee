// Reconciliation: the ledger of a window against what the attempts and the
// price book imply, recomputed from scratch. The meter writes the ledger
// incrementally (a pass at a time, from each attempt's cursor, replacing
// lines as ends are recorded late); this recomputes every attempt that ran in
// the window whole (pricing::MeterAttempt up to where the meter has got) and
// compares the lines of the window key by key. `trainyard accounting
// reconcile --month=YYYY-MM` runs it. See docs/accounting.md.
#ifndef TRAINYARD_SERVICES_ACCOUNTING_RECONCILE_H_
#define TRAINYARD_SERVICES_ACCOUNTING_RECONCILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"
#include "storage/postgres/accounting_store.h"

namespace trainyard::accounting {

struct ReconcileResult {
  int64_t attempts = 0;           // that ran in the window
  int64_t unmetered = 0;          // of them, not metered at all yet
  int64_t lines = 0;              // recomputed lines in the window
  int64_t ledger_lines = 0;       // stored lines in the window
  int64_t recomputed_micros = 0;  // their costs
  int64_t ledger_micros = 0;
  // One sentence per line that differs, is missing from the ledger or is in
  // the ledger only, e.g. "tenants/a/jobs/7/1/GPU/1793620800000: ledger cost
  // 4000001, recomputed 4000000".
  std::vector<std::string> differences;
  bool ok() const { return differences.empty(); }
};

// The month "YYYY-MM" as [start, end) in UTC milliseconds; InvalidArgument
// on "month" otherwise.
absl::StatusOr<std::pair<pricing::TimeMs, pricing::TimeMs>> MonthWindow(
    std::string_view month);

// Reconciles the ledger's lines of [start_ms, end_ms) with `book` and
// `options` (the meter's settings). An attempt is recomputed up to its end,
// or, while it runs, up to where the meter has metered it (its cursor); an
// attempt the meter has not reached yet counts as unmetered, not as a
// difference.
absl::StatusOr<ReconcileResult> Reconcile(
    storage::postgres::AccountingStore& store, const pricing::PriceBook& book,
    pricing::TimeMs start_ms, pricing::TimeMs end_ms,
    const pricing::MeterOptions& options);

}  // namespace trainyard::accounting

#endif  // TRAINYARD_SERVICES_ACCOUNTING_RECONCILE_H_
