// The pure budget rule (pricing/budget.h) of a trainyard.v1.Budget: shared by
// the meter (status and notices) and the scheduler (what it acts on).
#ifndef TRAINYARD_SERVICES_ACCOUNTING_BUDGET_RULE_H_
#define TRAINYARD_SERVICES_ACCOUNTING_BUDGET_RULE_H_

#include "services/accounting/pricing/budget.h"
#include "trainyard/v1/accounting.pb.h"

namespace trainyard::accounting {

// UNSPECIFIED actions are WARN, as the API documents.
inline pricing::BudgetRule RuleOf(const trainyard::v1::Budget& budget) {
  pricing::BudgetRule rule;
  rule.monthly_amount_micros = budget.monthly_amount().micros();
  rule.user_hourly_cap_micros = budget.user_hourly_cap().micros();
  for (const trainyard::v1::BudgetThreshold& t : budget.thresholds()) {
    rule.thresholds.push_back(
        {.percent = t.percent(),
         .action = t.action() == trainyard::v1::BUDGET_ACTION_UNSPECIFIED
                       ? pricing::BudgetAction::kWarn
                       : static_cast<pricing::BudgetAction>(t.action())});
  }
  return rule;
}

}  // namespace trainyard::accounting

#endif  // TRAINYARD_SERVICES_ACCOUNTING_BUDGET_RULE_H_
