#include "services/scheduler/policy/policy.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/scheduler/policy/engine.h"
#include "services/scheduler/policy/quota.h"

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

Decisions Decide(const Snapshot& snapshot, const PolicyConfig& config) {
  if (absl::Status status = ValidateSnapshot(snapshot); !status.ok()) {
    Decisions out;
    const Message message(
        absl::StrCat("INVALID_SNAPSHOT: ", std::string(status.message())));
    for (const PendingJob& job : snapshot.pending) {
      out.pending.push_back({.job = job.id,
                             .queue = job.queue,
                             .reason = PendingReason::kInvalidSnapshot,
                             .message = message,
                             .position = 0});
    }
    return out;
  }
  internal::ClassTable classes;
  std::vector<std::vector<internal::QueueEntry>> jobs;
  internal::BuildQueues(snapshot, config, classes, jobs);
  const QuotaTree running_quota(snapshot);
  return internal::RunCycle(snapshot, config, running_quota, jobs, classes);
}

}  // namespace trainyard::scheduler::policy
