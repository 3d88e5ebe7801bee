#include "services/accounting/pricing/budget.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "services/lib/domain/errors.h"

namespace trainyard::accounting::pricing {

absl::Status ValidateBudgetRule(const BudgetRule& rule) {
  if (rule.monthly_amount_micros < 0) {
    return domain::FieldError("monthly_amount.micros", "INVALID_VALUE",
                              "must not be negative");
  }
  if (rule.user_hourly_cap_micros < 0) {
    return domain::FieldError("user_hourly_cap.micros", "INVALID_VALUE",
                              "must not be negative");
  }
  if (rule.thresholds.empty()) {
    return domain::FieldError("thresholds", "REQUIRED",
                              "needs at least one threshold");
  }
  if (rule.thresholds.size() > kMaxBudgetThresholds) {
    return domain::FieldError(
        "thresholds", "TOO_MANY",
        absl::StrCat("has more than ", kMaxBudgetThresholds, " thresholds"));
  }
  for (size_t i = 0; i < rule.thresholds.size(); ++i) {
    const BudgetThreshold& t = rule.thresholds[i];
    const std::string at = absl::StrCat("thresholds[", i, "]");
    if (t.percent < 1 || t.percent > 1000) {
      return domain::FieldError(absl::StrCat(at, ".percent"), "OUT_OF_RANGE",
                                "must be 1..1000");
    }
    if (i > 0 && t.percent <= rule.thresholds[i - 1].percent) {
      return domain::FieldError(absl::StrCat(at, ".percent"), "INVALID_VALUE",
                                "must be above the previous threshold's");
    }
    if (t.action != BudgetAction::kWarn &&
        t.action != BudgetAction::kRestrictToSpot &&
        t.action != BudgetAction::kHold) {
      return domain::FieldError(absl::StrCat(at, ".action"), "INVALID_VALUE",
                                "must be WARN, RESTRICT_TO_SPOT or HOLD");
    }
  }
  return absl::OkStatus();
}

bool Reaches(int64_t forecast_micros, int64_t amount_micros,
             const BudgetThreshold& threshold) {
  return static_cast<__int128>(forecast_micros) * 100 >=
         static_cast<__int128>(amount_micros) * threshold.percent;
}

BudgetAction ActiveAction(const BudgetRule& rule, int64_t forecast_micros) {
  BudgetAction active = BudgetAction::kNone;
  for (const BudgetThreshold& t : rule.thresholds) {
    if (Reaches(forecast_micros, rule.monthly_amount_micros, t)) {
      active = std::max(active, t.action);
    }
  }
  return active;
}

int32_t ReachedPercent(const BudgetRule& rule, int64_t forecast_micros) {
  int32_t reached = 0;
  for (const BudgetThreshold& t : rule.thresholds) {
    if (Reaches(forecast_micros, rule.monthly_amount_micros, t)) {
      reached = std::max(reached, t.percent);
    }
  }
  return reached;
}

std::vector<BudgetThreshold> NewlyReached(const BudgetRule& rule,
                                          int64_t forecast_micros,
                                          int32_t notified_percent) {
  std::vector<BudgetThreshold> out;
  for (const BudgetThreshold& t : rule.thresholds) {
    if (t.percent > notified_percent &&
        Reaches(forecast_micros, rule.monthly_amount_micros, t)) {
      out.push_back(t);
    }
  }
  return out;
}

std::optional<int64_t> HoldLimitMicros(const BudgetRule& rule) {
  for (const BudgetThreshold& t : rule.thresholds) {
    if (t.action != BudgetAction::kHold) continue;
    const __int128 limit =
        static_cast<__int128>(rule.monthly_amount_micros) * t.percent / 100;
    return static_cast<int64_t>(
        std::min<__int128>(limit, std::numeric_limits<int64_t>::max()));
  }
  return std::nullopt;
}

TimeMs MonthStartMs(TimeMs t) {
  const absl::CivilMonth month(
      absl::ToCivilSecond(absl::FromUnixMillis(t), absl::UTCTimeZone()));
  return absl::ToUnixMillis(absl::FromCivil(month, absl::UTCTimeZone()));
}

TimeMs NextMonthStartMs(TimeMs t) {
  const absl::CivilMonth month(
      absl::ToCivilSecond(absl::FromUnixMillis(t), absl::UTCTimeZone()));
  return absl::ToUnixMillis(absl::FromCivil(month + 1, absl::UTCTimeZone()));
}

const char* BudgetActionName(BudgetAction a) {
  switch (a) {
    case BudgetAction::kNone:
      return "NONE";
    case BudgetAction::kWarn:
      return "WARN";
    case BudgetAction::kRestrictToSpot:
      return "RESTRICT_TO_SPOT";
    case BudgetAction::kHold:
      return "HOLD";
  }
  return "NONE";
}

}  // namespace trainyard::accounting::pricing
