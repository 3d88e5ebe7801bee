// When the scheduler rewrites a pending job's explanation row
// (pending_explanations; docs/scheduler.md, "Explanations").
#ifndef TRAINYARD_SERVICES_SCHEDULER_EXPLANATIONS_H_
#define TRAINYARD_SERVICES_SCHEDULER_EXPLANATIONS_H_

#include <string_view>

#include "absl/time/time.h"

namespace trainyard::scheduler {

// Reasons that say the job waits for resources to free up. Under load a job
// moves between them from one cycle to the next (its quota is full in one
// cycle, a node in the next), which is no news to its owner.
inline bool WaitsForResources(std::string_view reason) {
  return reason == "QUOTA_EXHAUSTED" || reason == "NO_CAPACITY" ||
         reason == "NO_FIT_TOPOLOGY" || reason == "WAITING_FOR_RESERVATION";
}

// Whether a job's explanation, last written at `written`, is rewritten at
// `now`, from what changed since: at once when the reason changes
// (!same_reason), unless it only moves between reasons of waiting for
// resources (both_wait_for_resources); those moves and changes of the message
// alone (its numbers move with every admission) at most once per `refresh`.
// The scheduler keeps only a code for the reason and a hash of the message it
// last wrote (no texts, no string compares of every pending job per cycle).
// ExplanationRewrite tells which of the two makes it due.
enum class Rewrite {
  kNo,
  kAtOnce,   // A new reason (not a move between waiting for resources).
  kRefresh,  // Only the refresh: a new message, or such a move.
};
inline Rewrite ExplanationRewrite(bool same_reason, bool same_message,
                                  bool both_wait_for_resources,
                                  absl::Time written, absl::Time now,
                                  absl::Duration refresh) {
  if (same_reason && same_message) return Rewrite::kNo;
  if (!same_reason && !both_wait_for_resources) return Rewrite::kAtOnce;
  return now - written >= refresh ? Rewrite::kRefresh : Rewrite::kNo;
}
inline bool ExplanationDue(bool same_reason, bool same_message,
                           bool both_wait_for_resources, absl::Time written,
                           absl::Time now, absl::Duration refresh) {
  return ExplanationRewrite(same_reason, same_message, both_wait_for_resources,
                            written, now, refresh) != Rewrite::kNo;
}

// The same, on the texts: last written as (old_reason, old_message), now
// (reason, message).
inline bool ExplanationDue(std::string_view old_reason,
                           std::string_view old_message, absl::Time written,
                           std::string_view reason, std::string_view message,
                           absl::Time now, absl::Duration refresh) {
  return ExplanationDue(
      old_reason == reason, old_message == message,
      WaitsForResources(old_reason) && WaitsForResources(reason), written, now,
      refresh);
}

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SERVICES_SCHEDULER_EXPLANATIONS_H_
