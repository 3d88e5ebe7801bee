#include "services/scheduler/policy/decisions.h"

#include <string>

namespace trainyard::scheduler::policy {

const std::string& Message::Empty() {
  static const std::string* const empty = new std::string();
  return *empty;
}

const char* PendingReasonCode(PendingReason reason) {
  switch (reason) {
    case PendingReason::kQuotaExhausted:
      return "QUOTA_EXHAUSTED";
    case PendingReason::kNoCapacity:
      return "NO_CAPACITY";
    case PendingReason::kNoFitTopology:
      return "NO_FIT_TOPOLOGY";
    case PendingReason::kBlockedByStrictFifo:
      return "BLOCKED_BY_STRICT_FIFO";
    case PendingReason::kNoEligibleFlavor:
      return "NO_ELIGIBLE_FLAVOR";
    case PendingReason::kInvalidSnapshot:
      return "INVALID_SNAPSHOT";
    case PendingReason::kWaitingForReservation:
      return "WAITING_FOR_RESERVATION";
    case PendingReason::kBudgetHold:
      return "BUDGET_HOLD";
  }
  return "UNKNOWN";
}

const char* PreemptionReasonCode(PreemptionReason reason) {
  switch (reason) {
    case PreemptionReason::kPreemptedByPriority:
      return "PREEMPTED_BY_PRIORITY";
    case PreemptionReason::kReclaimedByCohort:
      return "RECLAIMED_BY_COHORT";
    case PreemptionReason::kFairShare:
      return "FAIR_SHARE";
  }
  return "UNKNOWN";
}

}  // namespace trainyard::scheduler::policy
