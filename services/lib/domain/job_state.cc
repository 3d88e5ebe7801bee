#include "services/lib/domain/job_state.h"

#include <array>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

using enum trainyard::v1::JobState;

constexpr int kNumStates = 11;  // 0 (UNSPECIFIED) .. 10 (HELD)

bool InRange(JobState s) { return s > JOB_STATE_UNSPECIFIED && s < kNumStates; }

constexpr std::array<JobState, 10> kAll = {
    JOB_STATE_QUEUED,    JOB_STATE_ADMITTED,   JOB_STATE_DISPATCHING,
    JOB_STATE_RUNNING,   JOB_STATE_SUCCEEDED,  JOB_STATE_FAILED,
    JOB_STATE_CANCELLED, JOB_STATE_PREEMPTING, JOB_STATE_RECOVERING,
    JOB_STATE_HELD};

// Successors of each state, in enum order. The single source of truth for
// transitions.
const std::vector<JobState>& Successors(JobState from) {
  static const auto* const kTable = [] {
    auto* t = new std::array<std::vector<JobState>, kNumStates>();
    (*t)[JOB_STATE_QUEUED] = {JOB_STATE_ADMITTED, JOB_STATE_CANCELLED,
                              JOB_STATE_HELD};
    (*t)[JOB_STATE_HELD] = {JOB_STATE_QUEUED, JOB_STATE_CANCELLED};
    (*t)[JOB_STATE_ADMITTED] = {JOB_STATE_QUEUED, JOB_STATE_DISPATCHING,
                                JOB_STATE_CANCELLED};
    (*t)[JOB_STATE_DISPATCHING] = {JOB_STATE_RUNNING, JOB_STATE_FAILED,
                                   JOB_STATE_CANCELLED, JOB_STATE_RECOVERING};
    (*t)[JOB_STATE_RUNNING] = {JOB_STATE_QUEUED,     JOB_STATE_SUCCEEDED,
                               JOB_STATE_FAILED,     JOB_STATE_CANCELLED,
                               JOB_STATE_PREEMPTING, JOB_STATE_RECOVERING};
    (*t)[JOB_STATE_PREEMPTING] = {JOB_STATE_QUEUED, JOB_STATE_SUCCEEDED,
                                  JOB_STATE_FAILED, JOB_STATE_CANCELLED};
    (*t)[JOB_STATE_RECOVERING] = {JOB_STATE_QUEUED, JOB_STATE_FAILED,
                                  JOB_STATE_CANCELLED};
    // SUCCEEDED, FAILED, CANCELLED, UNSPECIFIED: none.
    return t;
  }();
  static const std::vector<JobState> kNone;
  return InRange(from) ? (*kTable)[from] : kNone;
}

}  // namespace

absl::Span<const JobState> AllJobStates() { return kAll; }

bool IsTerminal(JobState state) {
  return state == JOB_STATE_SUCCEEDED || state == JOB_STATE_FAILED ||
         state == JOB_STATE_CANCELLED;
}

bool IsPending(JobState state) {
  return state == JOB_STATE_QUEUED || state == JOB_STATE_HELD;
}

bool HoldsResources(JobState state) {
  return state == JOB_STATE_ADMITTED || state == JOB_STATE_DISPATCHING ||
         state == JOB_STATE_RUNNING || state == JOB_STATE_PREEMPTING;
}

bool CanTransition(JobState from, JobState to) {
  for (JobState s : Successors(from)) {
    if (s == to) return true;
  }
  return false;
}

absl::Status CheckTransition(JobState from, JobState to) {
  if (CanTransition(from, to)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      Cat("job is ", StateName(from), "; cannot go to ", StateName(to)));
}

absl::Span<const JobState> NextStates(JobState from) {
  return Successors(from);
}

std::string_view StateName(JobState state) {
  switch (state) {
    case JOB_STATE_QUEUED:
      return "QUEUED";
    case JOB_STATE_ADMITTED:
      return "ADMITTED";
    case JOB_STATE_DISPATCHING:
      return "DISPATCHING";
    case JOB_STATE_RUNNING:
      return "RUNNING";
    case JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case JOB_STATE_FAILED:
      return "FAILED";
    case JOB_STATE_CANCELLED:
      return "CANCELLED";
    case JOB_STATE_PREEMPTING:
      return "PREEMPTING";
    case JOB_STATE_RECOVERING:
      return "RECOVERING";
    case JOB_STATE_HELD:
      return "HELD";
    default:
      return "UNSPECIFIED";
  }
}

absl::StatusOr<JobState> ParseStateName(std::string_view name) {
  std::string upper = absl::AsciiStrToUpper(AbslView(name));
  std::string_view bare = upper;
  if (bare.starts_with("JOB_STATE_")) bare.remove_prefix(10);
  for (JobState s : kAll) {
    if (StateName(s) == bare) return s;
  }
  return absl::InvalidArgumentError(
      Cat("unknown job state \"", name.substr(0, 64),
          "\"; expected one of QUEUED, HELD, ADMITTED, DISPATCHING, RUNNING, "
          "PREEMPTING, RECOVERING, SUCCEEDED, FAILED, CANCELLED"));
}

CancelAction CancelActionFor(JobState state) {
  switch (state) {
    case JOB_STATE_QUEUED:
    case JOB_STATE_HELD:
    case JOB_STATE_ADMITTED:
      return CancelAction::kEndNow;
    case JOB_STATE_DISPATCHING:
    case JOB_STATE_RUNNING:
    case JOB_STATE_PREEMPTING:
    case JOB_STATE_RECOVERING:
      return CancelAction::kRequestStop;
    default:
      return CancelAction::kNone;
  }
}

}  // namespace trainyard::domain
