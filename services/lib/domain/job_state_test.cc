#include "services/lib/domain/job_state.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"

namespace trainyard::domain {
namespace {

using trainyard::v1::JobState;
constexpr JobState Q = trainyard::v1::JOB_STATE_QUEUED;
constexpr JobState A = trainyard::v1::JOB_STATE_ADMITTED;
constexpr JobState D = trainyard::v1::JOB_STATE_DISPATCHING;
constexpr JobState R = trainyard::v1::JOB_STATE_RUNNING;
constexpr JobState S = trainyard::v1::JOB_STATE_SUCCEEDED;
constexpr JobState F = trainyard::v1::JOB_STATE_FAILED;
constexpr JobState C = trainyard::v1::JOB_STATE_CANCELLED;
constexpr JobState P = trainyard::v1::JOB_STATE_PREEMPTING;
constexpr JobState V = trainyard::v1::JOB_STATE_RECOVERING;
constexpr JobState H = trainyard::v1::JOB_STATE_HELD;
constexpr JobState U = trainyard::v1::JOB_STATE_UNSPECIFIED;

// The specification, written out independently of the implementation.
const std::set<std::pair<JobState, JobState>>& Allowed() {
  static const auto* const kAllowed =
      new std::set<std::pair<JobState, JobState>>{
          {Q, A}, {Q, H}, {H, Q}, {Q, C}, {H, C}, {A, D}, {A, Q},
          {A, C}, {D, R}, {D, F}, {D, V}, {D, C}, {R, S}, {R, F},
          {R, C}, {R, P}, {R, V}, {R, Q}, {P, Q}, {P, S}, {P, F},
          {P, C}, {V, Q}, {V, F}, {V, C},
      };
  return *kAllowed;
}

TEST(JobStateTest, FullTransitionMatrix) {
  int allowed = 0;
  for (int from = 0; from <= 11; ++from) {
    for (int to = 0; to <= 11; ++to) {
      const auto f = static_cast<JobState>(from);
      const auto t = static_cast<JobState>(to);
      const bool want = Allowed().count({f, t}) > 0;
      EXPECT_EQ(CanTransition(f, t), want)
          << StateName(f) << " -> " << StateName(t);
      EXPECT_EQ(CheckTransition(f, t).ok(), want)
          << StateName(f) << " -> " << StateName(t);
      allowed += want;
    }
  }
  EXPECT_EQ(allowed, 25);
}

TEST(JobStateTest, TerminalStatesHaveNoWayOut) {
  for (JobState terminal : {S, F, C}) {
    EXPECT_TRUE(IsTerminal(terminal));
    EXPECT_TRUE(NextStates(terminal).empty());
    for (int to = 0; to <= 10; ++to) {
      EXPECT_FALSE(CanTransition(terminal, static_cast<JobState>(to)))
          << StateName(terminal) << " -> " << to;
    }
  }
}

TEST(JobStateTest, SampleOfForbidden) {
  const std::pair<JobState, JobState> forbidden[] = {
      {R, H}, {Q, R}, {Q, D}, {H, A}, {A, R}, {D, Q}, {P, R}, {V, R},
      {S, Q}, {F, Q}, {C, Q}, {Q, Q}, {R, R}, {U, Q}, {Q, U}, {H, H},
  };
  for (const auto& [from, to] : forbidden) {
    EXPECT_FALSE(CanTransition(from, to))
        << StateName(from) << " -> " << StateName(to);
  }
}

TEST(JobStateTest, CheckTransitionMessage) {
  absl::Status s = CheckTransition(R, H);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job is RUNNING; cannot go to HELD");
  EXPECT_EQ(CheckTransition(S, Q).message(),
            "job is SUCCEEDED; cannot go to QUEUED");
  EXPECT_TRUE(CheckTransition(Q, A).ok());
}

TEST(JobStateTest, NextStatesMatchesCanTransition) {
  for (JobState from : AllJobStates()) {
    std::set<JobState> next(NextStates(from).begin(), NextStates(from).end());
    for (JobState to : AllJobStates()) {
      EXPECT_EQ(next.count(to) > 0, CanTransition(from, to));
    }
  }
  EXPECT_TRUE(NextStates(U).empty());
  EXPECT_TRUE(NextStates(static_cast<JobState>(42)).empty());
}

TEST(JobStateTest, EveryStateReachableAndCanEnd) {
  // From QUEUED every state is reachable.
  std::set<JobState> seen = {Q};
  std::deque<JobState> todo = {Q};
  while (!todo.empty()) {
    JobState s = todo.front();
    todo.pop_front();
    for (JobState n : NextStates(s)) {
      if (seen.insert(n).second) todo.push_back(n);
    }
  }
  EXPECT_EQ(seen.size(), AllJobStates().size());
  // Every non-terminal state can be cancelled or reach CANCELLED directly.
  for (JobState s : AllJobStates()) {
    if (!IsTerminal(s)) {
      EXPECT_TRUE(CanTransition(s, C)) << StateName(s);
    }
  }
}

TEST(JobStateTest, Classification) {
  struct Row {
    JobState state;
    bool terminal, pending, holds;
  };
  const Row rows[] = {
      {Q, false, true, false},  {H, false, true, false},
      {A, false, false, true},  {D, false, false, true},
      {R, false, false, true},  {P, false, false, true},
      {V, false, false, false}, {S, true, false, false},
      {F, true, false, false},  {C, true, false, false},
      {U, false, false, false},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(IsTerminal(r.state), r.terminal) << StateName(r.state);
    EXPECT_EQ(IsPending(r.state), r.pending) << StateName(r.state);
    EXPECT_EQ(HoldsResources(r.state), r.holds) << StateName(r.state);
  }
}

TEST(JobStateTest, NamesRoundTrip) {
  EXPECT_EQ(AllJobStates().size(), 10u);
  for (JobState s : AllJobStates()) {
    const std::string name(StateName(s));
    EXPECT_EQ(trainyard::v1::JobState_Name(s), "JOB_STATE_" + name);
    for (const std::string& spelling : std::vector<std::string>{
             name, absl::AsciiStrToLower(name), "JOB_STATE_" + name,
             "job_state_" + absl::AsciiStrToLower(name)}) {
      absl::StatusOr<JobState> parsed = ParseStateName(spelling);
      ASSERT_TRUE(parsed.ok()) << spelling << ": " << parsed.status();
      EXPECT_EQ(*parsed, s);
    }
  }
  EXPECT_EQ(StateName(U), "UNSPECIFIED");
  EXPECT_EQ(StateName(static_cast<JobState>(99)), "UNSPECIFIED");
  EXPECT_EQ(StateName(R), "RUNNING");
}

TEST(JobStateTest, ParseBadNames) {
  for (const std::string& bad : std::vector<std::string>{
           "", "UNSPECIFIED", "JOB_STATE_UNSPECIFIED", "RUN", "JOB_STATE_",
           "queued ", "STATE_QUEUED", "1"}) {
    absl::StatusOr<JobState> parsed = ParseStateName(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(JobStateTest, CancelActions) {
  const std::pair<JobState, CancelAction> rows[] = {
      {Q, CancelAction::kEndNow},      {H, CancelAction::kEndNow},
      {A, CancelAction::kEndNow},      {D, CancelAction::kRequestStop},
      {R, CancelAction::kRequestStop}, {P, CancelAction::kRequestStop},
      {V, CancelAction::kRequestStop}, {S, CancelAction::kNone},
      {F, CancelAction::kNone},        {C, CancelAction::kNone},
      {U, CancelAction::kNone},
  };
  for (const auto& [state, action] : rows) {
    EXPECT_EQ(CancelActionFor(state), action) << StateName(state);
  }
  // Consistency with the state machine: ending now or stopping must end in
  // CANCELLED.
  for (JobState s : AllJobStates()) {
    if (CancelActionFor(s) != CancelAction::kNone) {
      EXPECT_TRUE(CanTransition(s, C)) << StateName(s);
    }
  }
}

}  // namespace
}  // namespace trainyard::domain
