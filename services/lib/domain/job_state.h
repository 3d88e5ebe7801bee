// The job state machine: the one place that says which job state may follow
// which.
//
// States (trainyard.v1.JobState):
//
//   QUEUED       waiting in its queue for the scheduler.
//   HELD         set aside by a user (JobService.Hold); not considered for
//                scheduling until released.
//   ADMITTED     the scheduler chose a placement and reserved quota; waiting
//                for the dispatcher of the chosen cluster.
//   DISPATCHING  the dispatcher is submitting the attempt to its cluster.
//   RUNNING      the attempt runs on its cluster.
//   PREEMPTING   the attempt was signalled to make room for other work and is
//                inside its grace period (time to checkpoint).
//   RECOVERING   the attempt was lost to a platform failure (node failure,
//                spot reclaim, backend error) and is being cleaned up.
//   SUCCEEDED    finished successfully.                       (terminal)
//   FAILED       failed and will not be retried.              (terminal)
//   CANCELLED    cancelled by a user or an administrator.     (terminal)
//
// A job is created in QUEUED. Allowed transitions (anything else is refused):
//
//   QUEUED      → ADMITTED     the scheduler admits it with a placement
//   QUEUED      → HELD         held by a user (JobService.Hold)
//   QUEUED      → CANCELLED    cancelled before it was admitted
//   HELD        → QUEUED       hold released
//   HELD        → CANCELLED    cancelled while held
//   ADMITTED    → DISPATCHING  its dispatcher claims the attempt
//   ADMITTED    → QUEUED       admission revoked (preempted before its
//                              dispatcher claimed it)
//   ADMITTED    → CANCELLED    cancelled before dispatch
//   DISPATCHING → RUNNING      the backend started it
//   DISPATCHING → FAILED       the backend rejected it for good
//   DISPATCHING → RECOVERING   the backend or a node failed during submission
//   DISPATCHING → CANCELLED    cancellation completed during submission
//   RUNNING     → SUCCEEDED    exit 0
//   RUNNING     → FAILED       user error with no retries left, or time limit
//   RUNNING     → CANCELLED    the dispatcher stopped it after a cancel request
//   RUNNING     → PREEMPTING   the scheduler preempts it (signal, grace period)
//   RUNNING     → RECOVERING   node failure or spot reclaim
//   RUNNING     → QUEUED       user error retried per the job's retry policy
//   PREEMPTING  → QUEUED       stopped; resumes from its last checkpoint later
//   PREEMPTING  → SUCCEEDED    it finished inside its grace period
//   PREEMPTING  → FAILED       it failed inside its grace period
//   PREEMPTING  → CANCELLED    cancelled while being preempted
//   RECOVERING  → QUEUED       cleaned up; resumes from its last checkpoint
//   RECOVERING  → FAILED       not recoverable
//   RECOVERING  → CANCELLED    cancelled while recovering
//
// SUCCEEDED, FAILED and CANCELLED are terminal: nothing leaves them. A
// transition to the same state is not a transition and is refused.
// JOB_STATE_UNSPECIFIED (and any value outside the enum) is not a state: it has
// no transitions in or out.
//
// Resources: ADMITTED, DISPATCHING, RUNNING and PREEMPTING hold quota and
// capacity (HoldsResources); QUEUED and HELD are pending (IsPending);
// RECOVERING holds nothing (its capacity is gone) but is not pending either.
//
// Cancellation (CancelActionFor): cancelling a terminal job does nothing
// (Cancel is idempotent); a job that has nothing on a cluster yet (QUEUED,
// HELD, ADMITTED) goes to CANCELLED at once; a job that has or may have
// something on a cluster (DISPATCHING, RUNNING, PREEMPTING, RECOVERING) gets
// cancel_requested set, and its dispatcher stops it and records CANCELLED.
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_JOB_STATE_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_JOB_STATE_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::domain {

using trainyard::v1::JobState;

// The ten real states, in enum order (UNSPECIFIED excluded).
absl::Span<const JobState> AllJobStates();

// SUCCEEDED, FAILED, CANCELLED.
bool IsTerminal(JobState state);
// QUEUED, HELD: waiting, holding nothing.
bool IsPending(JobState state);
// ADMITTED, DISPATCHING, RUNNING, PREEMPTING: counted against quota and node
// capacity.
bool HoldsResources(JobState state);

// Whether from → to is one of the allowed transitions above.
bool CanTransition(JobState from, JobState to);
// OK if allowed, else FailedPreconditionError("job is RUNNING; cannot go to
// HELD").
absl::Status CheckTransition(JobState from, JobState to);
// The states reachable from `from` in one transition, in enum order.
absl::Span<const JobState> NextStates(JobState from);

// "QUEUED", "RUNNING" ...; "UNSPECIFIED" for JOB_STATE_UNSPECIFIED and unknown
// values.
std::string_view StateName(JobState state);
// Accepts "QUEUED", "queued", "JOB_STATE_QUEUED" (any case). UNSPECIFIED and
// unknown names are InvalidArgument.
absl::StatusOr<JobState> ParseStateName(std::string_view name);

// What Cancel does to a job in a given state.
enum class CancelAction {
  // Already terminal: nothing to do (Cancel is idempotent).
  kNone,
  // QUEUED, HELD, ADMITTED: nothing runs anywhere; the job goes to CANCELLED
  // now.
  kEndNow,
  // DISPATCHING, RUNNING, PREEMPTING, RECOVERING: set cancel_requested; the
  // dispatcher stops the attempt on its cluster and records CANCELLED.
  kRequestStop,
};
// kNone for terminal states and for UNSPECIFIED/unknown values.
CancelAction CancelActionFor(JobState state);

}  // namespace trainyard::domain

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_JOB_STATE_H_
