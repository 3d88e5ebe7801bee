// PolicyConfig::hold_borrowing_for_priority: a job that finds no room in its
// cohort keeps lower-priority jobs from borrowing there for the rest of the
// cycle.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "tests/support/policy/churn_test_util.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using ::testing::HasSubstr;
using testing::PendingOf;
using testing::SnapshotBuilder;
using testing::SortedAdmitted;

// Cohort "c" of queues a, b, c with 8 GPUs each on three 8-GPU nodes. a and b
// use their 8, c uses 4: the cohort has 4 GPUs unused. Pending: a's
// high-priority 8-GPU job (it would borrow 8), b's low-priority 2-GPU job (it
// would borrow 2) and c's low-priority 2-GPU job (within c's nominal quota).
struct HoldFixture {
  explicit HoldFixture(
      std::optional<int64_t> a_borrowing_limit = std::nullopt) {
    const FlavorId f = b.AddFlavor("gpu");
    const CohortId cohort = b.AddCohort("c");
    const QueueId qa = b.AddGpuQueue("a", cohort, f, 8, a_borrowing_limit);
    const QueueId qb = b.AddGpuQueue("b", cohort, f, 8);
    const QueueId qc = b.AddGpuQueue("c", cohort, f, 8);
    const NodeId n0 = b.AddNode(f, 8), n1 = b.AddNode(f, 8),
                 n2 = b.AddNode(f, 8);
    b.AddRunning(100, qa, f, n0, 8);
    b.AddRunning(101, qb, f, n1, 8);
    b.AddRunning(102, qc, f, n2, 4);
    const PriorityClassId high = b.AddPriority("high", 100);
    const PriorityClassId low = b.AddPriority("low", 10);
    b.AddJob(1, qa, 1, 8).priority_class = high;
    b.AddJob(2, qb, 1, 2).priority_class = low;
    b.AddJob(3, qc, 1, 2).priority_class = low;
  }
  SnapshotBuilder b;
};

TEST(BorrowingHoldTest, OffEverythingThatFitsIsAdmitted) {
  HoldFixture fx;
  const Decisions d = Decide(fx.b.Build(), PolicyConfig{});
  EXPECT_THAT(SortedAdmitted(d), ::testing::ElementsAre(2, 3));
}

TEST(BorrowingHoldTest,
     LowerPriorityMayNotBorrowWhatAHigherPriorityJobWaitsFor) {
  HoldFixture fx;
  for (bool classes : {true, false}) {
    for (bool index : {true, false}) {
      PolicyConfig config{.hold_borrowing_for_priority = true};
      config.use_equivalence_classes = classes;
      config.use_placement_index = index;
      const Decisions d = Decide(fx.b.Build(), config);
      // c's job uses c's own quota; b's would borrow the 4 GPUs a's job
      // waits for.
      EXPECT_THAT(SortedAdmitted(d), ::testing::ElementsAre(3));
      const PendingDecision* held = PendingOf(d, 2);
      ASSERT_NE(held, nullptr);
      EXPECT_EQ(held->reason, PendingReason::kQuotaExhausted);
      EXPECT_THAT(held->message.str(),
                  HasSubstr("while a job of priority 100 waits for its quota"));
      const PendingDecision* waiting = PendingOf(d, 1);
      ASSERT_NE(waiting, nullptr);
      EXPECT_EQ(waiting->reason, PendingReason::kQuotaExhausted);
    }
  }
}

TEST(BorrowingHoldTest, AJobItsOwnBorrowingLimitStopsHoldsNothing) {
  // a may not borrow at all: its job waits for a's own quota, which b's
  // borrowing does not take.
  HoldFixture fx(/*a_borrowing_limit=*/0);
  const Decisions d =
      Decide(fx.b.Build(), PolicyConfig{.hold_borrowing_for_priority = true});
  EXPECT_THAT(SortedAdmitted(d), ::testing::ElementsAre(2, 3));
}

// The incremental Scheduler with the hold on decides as Decide() does, with
// and without the speed-ups (equivalence classes, placement index), through
// cycles of churn on a snapshot whose cohorts are busy.
TEST(BorrowingHoldTest, IncrementalCyclesDecideAsDecideWithTheHoldOn) {
  int holds = 0, admitted = 0;
  testing::CheckIncrementalUnderChurn(
      PolicyConfig{.hold_borrowing_for_priority = true},
      [&](const Decisions& got, const Snapshot&) {
        for (const PendingDecision& p : got.pending)
          holds +=
              p.message.str().find("waits for its quota") != std::string::npos;
        admitted += static_cast<int>(got.admissions.size());
      });
  EXPECT_GT(holds, 0);
  EXPECT_GT(admitted, 100);
  std::printf("hold explanations %d, admitted %d\n", holds, admitted);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
