// Budgets: the pure rules (no I/O). A budget is a monthly amount for a
// tenant or one of its projects with thresholds, each a percent of the
// amount and an action. The forecast of a month is what the ledger holds
// for the scope in that month plus what the work still running (or
// admitted) is expected to cost until its time limit, within the month. A
// threshold is reached when forecast x 100 >= amount x percent (exact
// integers); the action in force is that of the highest threshold reached
// (WARN < RESTRICT_TO_SPOT < HOLD when two share a percent). The scheduler
// admits new work of the scope only while its expected cost fits under the
// lowest HOLD threshold (HoldLimitMicros), and a user's new work only while
// the hourly price of that user's running work in the scope fits under the
// user hourly cap. See docs/accounting.md "Budgets".
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_BUDGET_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_BUDGET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "services/accounting/pricing/price_book.h"

namespace trainyard::accounting::pricing {

// In the order of their strength (the values of trainyard.v1.BudgetAction).
enum class BudgetAction : int {
  kNone = 0,
  kWarn = 1,
  kRestrictToSpot = 2,
  kHold = 3
};

struct BudgetThreshold {
  int32_t percent = 0;  // 1..1000
  BudgetAction action = BudgetAction::kWarn;
};

struct BudgetRule {
  int64_t monthly_amount_micros = 0;
  // Ascending by percent (ValidateBudgetRule).
  std::vector<BudgetThreshold> thresholds;
  // The most one user's running work in the scope may cost per hour (the
  // sum of its hourly prices); 0 = no cap.
  int64_t user_hourly_cap_micros = 0;
};

inline constexpr int kMaxBudgetThresholds = 10;

// The amount and the user hourly cap are >= 0; 1..10 thresholds,
// percents 1..1000 strictly ascending, actions WARN, RESTRICT_TO_SPOT or HOLD.
// Errors name the field relative to the budget ("monthly_amount",
// "thresholds[2].percent").
absl::Status ValidateBudgetRule(const BudgetRule& rule);

// Whether `forecast` reaches `threshold` of `amount`.
bool Reaches(int64_t forecast_micros, int64_t amount_micros,
             const BudgetThreshold& threshold);

// The action of the highest threshold reached (kNone if none is).
BudgetAction ActiveAction(const BudgetRule& rule, int64_t forecast_micros);

// The highest threshold percent reached (0 if none).
int32_t ReachedPercent(const BudgetRule& rule, int64_t forecast_micros);

// The thresholds reached by `forecast` above `notified_percent` (those to
// notify now), ascending.
std::vector<BudgetThreshold> NewlyReached(const BudgetRule& rule,
                                          int64_t forecast_micros,
                                          int32_t notified_percent);

// The amount new work may bring the forecast to: amount x percent / 100
// (rounded down) of the lowest HOLD threshold; none without one.
std::optional<int64_t> HoldLimitMicros(const BudgetRule& rule);

// The start of the UTC calendar month that contains `t`, and of the next.
TimeMs MonthStartMs(TimeMs t);
TimeMs NextMonthStartMs(TimeMs t);

// "WARN", "RESTRICT_TO_SPOT", "HOLD" (or "NONE").
const char* BudgetActionName(BudgetAction a);

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_BUDGET_H_
