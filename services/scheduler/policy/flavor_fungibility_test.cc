// Flavor fungibility (Kueue's flavorFungibility: whenCanBorrow and
// whenCanPreempt), each against the flavor Kueue's documented rule picks.
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::AdmissionOf;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::kMinute;
using testing::SnapshotBuilder;

// Flavors a (preferred) and b, one 8-GPU node each. Queue q has nominal 0
// on a (its cohort's lender l lends 8) and `b_nominal` on b.
struct TwoFlavors {
  SnapshotBuilder b;
  FlavorId a = 0;
  FlavorId fb = 0;
  QueueId q = 0;

  explicit TwoFlavors(int64_t b_nominal) {
    a = b.AddFlavor("a");
    fb = b.AddFlavor("b");
    b.AddNode(a, 8);
    b.AddNode(fb, 8);
    const CohortId c = b.AddCohort("c");
    b.AddGpuQueue("l", c, a, 8);
    q = b.AddGpuQueue("q", c, a, 0);
    b.AddGpuQuota(q, fb, b_nominal);
  }
};

TEST(FlavorFungibilityTest, TryNextFlavorTakesALaterFlavorWithinNominal) {
  for (const bool try_next : {true, false}) {
    SCOPED_TRACE(try_next ? "TRY_NEXT_FLAVOR (default)" : "STOP");
    TwoFlavors p(8);
    p.b.snapshot().queues[p.q].try_next_when_borrowing = try_next;
    p.b.AddJob(1, p.q, 1, 4);
    const Decisions d = Decide(p.b.Build());
    const Admission* admitted = AdmissionOf(d, 1);
    ASSERT_NE(admitted, nullptr);
    // TRY_NEXT_FLAVOR: b holds it within q's nominal quota; STOP: borrow a.
    EXPECT_EQ(admitted->flavor, try_next ? p.fb : p.a);
    EXPECT_EQ(admitted->borrowing, !try_next);
    Scheduler scheduler(p.b.Build());
    EXPECT_EQ(scheduler.Cycle(), d);
  }
}

TEST(FlavorFungibilityTest,
     TryNextFlavorStillBorrowsOnTheFirstWhenNoneIsWithin) {
  // b has no quota room either (nominal 2 < 4): borrow on a, the first.
  TwoFlavors p(2);
  p.b.AddJob(1, p.q, 1, 4);
  const Decisions d = Decide(p.b.Build());
  const Admission* admitted = AdmissionOf(d, 1);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->flavor, p.a);
  EXPECT_TRUE(admitted->borrowing);
}

TEST(FlavorFungibilityTest, WhenCanPreemptStopPreemptsOnTheFirstFlavor) {
  // q (nominal 8 on both) runs a low-priority 8-GPU job on a's node; b's
  // node is free. A high-priority 8-GPU job: TRY_NEXT_FLAVOR takes b
  // without preempting; STOP preempts on a, the preferred flavor.
  for (const bool try_next : {true, false}) {
    SCOPED_TRACE(try_next ? "TRY_NEXT_FLAVOR (default)" : "STOP");
    SnapshotBuilder b;
    const FlavorId a = b.AddFlavor("a");
    const FlavorId fb = b.AddFlavor("b");
    b.AddNode(a, 8);
    b.AddNode(fb, 8);
    const QueueId q = b.AddGpuQueue("q", std::nullopt, a, 8);
    b.AddGpuQuota(q, fb, 8);
    Queue& queue = b.snapshot().queues[q];
    queue.within_queue_preemption = WithinQueuePreemption::kLowerPriority;
    queue.try_next_when_preempting = try_next;
    const PriorityClassId high = b.AddPriority("high", 100);
    b.AddRunning(500, q, a, 0, 8);
    b.snapshot().running.back().start_time = b.Build().now - kMinute;
    b.AddJob(1, q, 1, 8).priority_class = high;
    const Decisions d = Decide(b.Build());
    const Admission* admitted = AdmissionOf(d, 1);
    ASSERT_NE(admitted, nullptr);
    EXPECT_EQ(admitted->flavor, try_next ? fb : a);
    if (try_next) {
      EXPECT_THAT(d.preemptions, IsEmpty());
    } else {
      ASSERT_EQ(d.preemptions.size(), 1u);
      EXPECT_EQ(d.preemptions[0].victim, 500);
    }
    Scheduler scheduler(b.Build());
    EXPECT_EQ(scheduler.Cycle(), d);
  }
}

// Kueue's borrowWithinCohort: cohort c lends 8 GPUs (queue l, idle); v
// (nominal 0) borrows all 8 with a priority-10 job; p (nominal 0, reclaim
// LowerPriority) submits a priority-100 job of 4 GPUs, which will borrow.
TEST(BorrowWithinCohortTest, ABorrowingJobReclaimsBelowTheThreshold) {
  for (const std::optional<int32_t> threshold :
       {std::optional<int32_t>(), std::optional<int32_t>(50),
        std::optional<int32_t>(5)}) {
    SCOPED_TRACE(threshold.has_value() ? *threshold : -1);
    SnapshotBuilder b;
    const FlavorId f = b.AddFlavor("a");
    b.AddNode(f, 8);
    const CohortId c = b.AddCohort("c");
    b.AddGpuQueue("l", c, f, 8);
    const QueueId v = b.AddGpuQueue("v", c, f, 0);
    const QueueId p = b.AddGpuQueue("p", c, f, 0);
    b.snapshot().queues[p].reclaim_within_cohort =
        ReclaimWithinCohort::kLowerPriority;
    b.snapshot().queues[p].borrow_within_cohort_max_priority = threshold;
    const PriorityClassId low = b.AddPriority("low", 10);
    const PriorityClassId high = b.AddPriority("high", 100);
    b.AddRunning(500, v, f, 0, 8);
    b.snapshot().running.back().priority_class = low;
    b.AddJob(1, p, 1, 4).priority_class = high;
    const Decisions d = Decide(b.Build());
    // Only a threshold at or above the victim's priority (10) lets it go.
    if (threshold.has_value() && *threshold >= 10) {
      ASSERT_EQ(d.preemptions.size(), 1u);
      EXPECT_EQ(d.preemptions[0].victim, 500);
      EXPECT_EQ(d.preemptions[0].reason, PreemptionReason::kReclaimedByCohort);
      ASSERT_NE(AdmissionOf(d, 1), nullptr);
      EXPECT_TRUE(AdmissionOf(d, 1)->borrowing);
    } else {
      EXPECT_THAT(d.preemptions, IsEmpty());
      ASSERT_NE(testing::PendingOf(d, 1), nullptr);
      EXPECT_EQ(testing::PendingOf(d, 1)->reason,
                PendingReason::kQuotaExhausted);
    }
    Scheduler scheduler(b.Build());
    EXPECT_EQ(scheduler.Cycle(), d);
  }
}

}  // namespace
}  // namespace trainyard::scheduler::policy
