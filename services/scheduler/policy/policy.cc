#include "services/scheduler/policy/policy.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/scheduler/policy/engine.h"
#include "services/scheduler/policy/quota.h"

namespace trainyard::scheduler::policy {

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
