#include "services/scheduler/policy/preemption.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/snapshot.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::Admitted;
using testing::ApplyDecisions;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kHour;
using testing::kMinute;
using testing::SnapshotBuilder;
using ::testing::StartsWith;

// A running gang: one worker of `gpus_per_worker` GPUs on each node in
// `nodes`, started `age` ago, last checkpoint `since_checkpoint` ago (< 0:
// never checkpointed).
void AddRunning(SnapshotBuilder& b, JobId id, QueueId q, FlavorId f,
                const std::vector<NodeId>& nodes, int64_t gpus_per_worker,
                PriorityClassId priority, TimeMicros age,
                TimeMicros since_checkpoint = -1) {
  Snapshot& s = b.snapshot();
  for (NodeId n : nodes) s.nodes[n].used.gpus += gpus_per_worker;
  RunningAttempt r{.job = id,
                   .queue = q,
                   .flavor = f,
                   .priority_class = priority,
                   .placement = nodes,
                   .resources = {.gpus = gpus_per_worker *
                                         static_cast<int64_t>(nodes.size())},
                   .start_time = s.now - age};
  if (since_checkpoint >= 0) r.last_checkpoint_time = s.now - since_checkpoint;
  s.running.push_back(r);
}

std::vector<JobId> Victims(const Decisions& d) {
  std::vector<JobId> ids;
  for (const Preemption& p : d.preemptions) ids.push_back(p.victim);
  return ids;
}

// One queue, one 8-GPU node fully used by job 100 (priority `victim_value`,
// started 2 h ago); pending job 1 (priority 10) needs 8 GPUs.
struct WithinQueue {
  SnapshotBuilder b;
  QueueId q;
  FlavorId f;
};

WithinQueue WithinQueueSetup(WithinQueuePreemption policy,
                             int32_t victim_value) {
  WithinQueue w;
  w.f = w.b.AddFlavor("a100");
  w.b.AddNode(w.f, 8, 0, 0);
  w.q = w.b.AddQueue("q");
  w.b.AddGpuQuota(w.q, w.f, 8);
  w.b.snapshot().queues[w.q].within_queue_preemption = policy;
  const PriorityClassId high = w.b.AddPriority("high", 10);
  const PriorityClassId victim = w.b.AddPriority("victim", victim_value);
  AddRunning(w.b, 100, w.q, w.f, {0}, 8, victim, 2 * kHour);
  w.b.AddJob(1, w.q, 1, 8, w.b.snapshot().now - 3 * kHour).priority_class =
      high;
  return w;
}

// One queue "q" over `nodes` 8-GPU nodes of flavor "a100" (0, 1, ...) with
// as much nominal quota, preempting lower priorities within it; priority class
// "high" has value 10.
struct LowerPriorityQueue {
  SnapshotBuilder b;
  QueueId q;
  FlavorId f;
  PriorityClassId high;
};

LowerPriorityQueue LowerPriorityQueueSetup(int nodes) {
  LowerPriorityQueue w;
  w.f = w.b.AddFlavor("a100");
  for (int n = 0; n < nodes; ++n) w.b.AddNode(w.f, 8, 0, 0);
  w.q = w.b.AddQueue("q");
  w.b.AddGpuQuota(w.q, w.f, 8 * nodes);
  w.b.snapshot().queues[w.q].within_queue_preemption =
      WithinQueuePreemption::kLowerPriority;
  w.high = w.b.AddPriority("high", 10);
  return w;
}

// Two queues without a cohort on one 8-GPU node: queue b's job 100
// (priority `victim_value`, 6 GPUs, started 2 h ago) leaves 2 GPUs; queue a's
// job 1 (priority 10) needs 4 GPUs and fits a's quota of `a_nominal`.
struct ForCapacity {
  SnapshotBuilder b;
  QueueId a, other;
  FlavorId f;
};

ForCapacity ForCapacitySetup(int32_t victim_value, int64_t a_nominal = 8) {
  ForCapacity w;
  w.f = w.b.AddFlavor("a100");
  w.b.AddNode(w.f, 8, 0, 0);
  w.a = w.b.AddQueue("a");
  w.other = w.b.AddQueue("b");
  w.b.AddGpuQuota(w.a, w.f, a_nominal);
  w.b.AddGpuQuota(w.other, w.f, 8);
  const PriorityClassId high = w.b.AddPriority("high", 10);
  const PriorityClassId victim = w.b.AddPriority("victim", victim_value);
  AddRunning(w.b, 100, w.other, w.f, {0}, 6, victim, 2 * kHour);
  w.b.AddJob(1, w.a, 1, 4).priority_class = high;
  return w;
}

TEST(PreemptionTest, ForCapacityTakesLowerPriorityWorkOfAnyQueue) {
  ForCapacity w = ForCapacitySetup(0);
  // Kueue's rules preempt for quota only: no rule of queue a applies.
  Decisions d = Decide(w.b.Build());
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoCapacity);
  PolicyConfig config;
  config.preempt_for_capacity = true;
  d = Decide(w.b.Build(), config);
  EXPECT_THAT(Admitted(d), ElementsAre(1));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, 100);
  EXPECT_EQ(d.preemptions[0].victim_queue, w.other);
  EXPECT_EQ(d.preemptions[0].reason, PreemptionReason::kPreemptedByPriority);
  // The same through the incremental Scheduler.
  Scheduler scheduler(w.b.Build(), config);
  EXPECT_EQ(scheduler.Cycle(), d);
}

TEST(PreemptionTest, ForCapacityNeverTakesEqualOrHigherPriority) {
  PolicyConfig config;
  config.preempt_for_capacity = true;
  for (int32_t value : {10, 20}) {
    SCOPED_TRACE(value);
    ForCapacity w = ForCapacitySetup(value);
    const Decisions d = Decide(w.b.Build(), config);
    EXPECT_TRUE(d.preemptions.empty());
    EXPECT_TRUE(d.admissions.empty());
  }
}

TEST(PreemptionTest, ForCapacityOnlyWithinNominalQuota) {
  // Queue a's nominal quota is 2 GPUs, so the 4-GPU job would borrow (a
  // queue without a cohort cannot, so it does not fit quota either): no
  // preemption for capacity.
  PolicyConfig config;
  config.preempt_for_capacity = true;
  ForCapacity w = ForCapacitySetup(0, /*a_nominal=*/2);
  Decisions d = Decide(w.b.Build(), config);
  EXPECT_TRUE(d.preemptions.empty());
  // In a cohort that lends it the quota, it would borrow: still none (the
  // victim's queue could reclaim its quota and preempt it back).
  const CohortId c = w.b.AddCohort("c");
  w.b.snapshot().queues[w.a].cohort = c;
  const QueueId lender = w.b.AddQueue("lender", c);
  w.b.AddGpuQuota(lender, w.f, 8);
  d = Decide(w.b.Build(), config);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.admissions.empty());
}

TEST(PreemptionTest, HigherPriorityPreemptsWithinItsQueue) {
  WithinQueue w = WithinQueueSetup(WithinQueuePreemption::kLowerPriority, 0);
  PolicyConfig config;
  config.preemption_grace_period = 7 * kMinute;
  const Decisions d = Decide(w.b.Build(), config);
  EXPECT_THAT(Admitted(d), ElementsAre(1));
  ASSERT_EQ(d.preemptions.size(), 1u);
  const Preemption& p = d.preemptions[0];
  EXPECT_EQ(p.victim, 100);
  EXPECT_EQ(p.victim_queue, w.q);
  EXPECT_EQ(p.preemptor, 1);
  EXPECT_EQ(p.reason, PreemptionReason::kPreemptedByPriority);
  EXPECT_EQ(p.grace_period, 7 * kMinute);
  EXPECT_THAT(p.message, StartsWith("PREEMPTED_BY_PRIORITY: job 1"));
  EXPECT_THAT(p.message, HasSubstr("preempts job 100"));
}

TEST(PreemptionTest, IncrementalSchedulerAndPlainEnginePreemptAlike) {
  WithinQueue w = WithinQueueSetup(WithinQueuePreemption::kLowerPriority, 0);
  const Decisions want = Decide(w.b.Build());
  ASSERT_EQ(want.preemptions.size(), 1u);
  Scheduler scheduler(w.b.Build());
  EXPECT_EQ(scheduler.Cycle(), want);
  EXPECT_EQ(Decide(w.b.Build(), {.use_placement_index = false,
                                 .use_equivalence_classes = false}),
            want);
}

TEST(PreemptionTest, NeverPolicyDoesNotPreempt) {
  WithinQueue w = WithinQueueSetup(WithinQueuePreemption::kNever, 0);
  const Decisions d = Decide(w.b.Build());
  EXPECT_TRUE(d.admissions.empty());
  EXPECT_TRUE(d.preemptions.empty());
}

TEST(PreemptionTest, EqualPriorityOnlyWhenNewerAndPolicyAllows) {
  // Equal priority, victim started (2 h ago) after job 1 was submitted (3 h).
  WithinQueue lower =
      WithinQueueSetup(WithinQueuePreemption::kLowerPriority, 10);
  EXPECT_TRUE(Decide(lower.b.Build()).preemptions.empty());
  WithinQueue newer =
      WithinQueueSetup(WithinQueuePreemption::kLowerOrNewerEqualPriority, 10);
  EXPECT_THAT(Victims(Decide(newer.b.Build())), ElementsAre(100));
  // Submitted after the victim started: not newer.
  WithinQueue older =
      WithinQueueSetup(WithinQueuePreemption::kLowerOrNewerEqualPriority, 10);
  older.b.snapshot().pending[0].submit_time = older.b.snapshot().now - kHour;
  EXPECT_TRUE(Decide(older.b.Build()).preemptions.empty());
  // Higher-priority victims never.
  WithinQueue higher =
      WithinQueueSetup(WithinQueuePreemption::kLowerOrNewerEqualPriority, 11);
  EXPECT_TRUE(Decide(higher.b.Build()).preemptions.empty());
}

TEST(PreemptionTest, NonPreemptibleClassAndMinimumRuntimeAreRespected) {
  WithinQueue np = WithinQueueSetup(WithinQueuePreemption::kLowerPriority, 0);
  np.b.snapshot().priority_classes[2].preemptible = false;
  Decisions d = Decide(np.b.Build());
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.admissions.empty());

  WithinQueue young =
      WithinQueueSetup(WithinQueuePreemption::kLowerPriority, 0);
  PolicyConfig config;
  config.min_runtime_guarantee = 3 * kHour;  // The victim ran 2 h.
  EXPECT_TRUE(Decide(young.b.Build(), config).preemptions.empty());
  config.min_runtime_guarantee = 2 * kHour;
  EXPECT_THAT(Victims(Decide(young.b.Build(), config)), ElementsAre(100));
}

TEST(PreemptionTest, VictimsLoseTheLeastWorkSinceTheirCheckpoint) {
  auto [b, q, f, high] = LowerPriorityQueueSetup(3);
  // 8 GPUs x 2 h since the checkpoint; 8 x 30 min; 8 x 1 h since the start
  // (never checkpointed, started 1 h ago).
  AddRunning(b, 100, q, f, {0}, 8, 0, 10 * kHour, 2 * kHour);
  AddRunning(b, 101, q, f, {1}, 8, 0, 10 * kHour, 30 * kMinute);
  AddRunning(b, 102, q, f, {2}, 8, 0, kHour);
  b.AddJob(1, q, 1, 8).priority_class = high;
  EXPECT_THAT(Victims(Decide(b.Build())), ElementsAre(101));
  b.AddJob(2, q, 1, 8).priority_class = high;
  EXPECT_THAT(Victims(Decide(b.Build())), ElementsAre(101, 102));
}

TEST(PreemptionTest, EqualLostWorkPrefersTheCheaperRestartThenLowerPriority) {
  auto [b, q, f, high] = LowerPriorityQueueSetup(2);
  b.snapshot().flavors[f].price_micros_per_gpu_hour = 2000000;
  // Both lose 8 GPU-hours; 2 GPUs restart cheaper than 8.
  AddRunning(b, 100, q, f, {0}, 8, 0, 10 * kHour, kHour);
  AddRunning(b, 101, q, f, {1}, 2, 0, 10 * kHour, 4 * kHour);
  b.snapshot().nodes[1].used.gpus = 8;  // The rest of node 1 is busy.
  b.AddJob(1, q, 1, 2).priority_class = high;
  EXPECT_THAT(Victims(Decide(b.Build())), ElementsAre(101));
  // Same lost work and GPUs: the lower priority goes first.
  auto [c, r, g, chigh] = LowerPriorityQueueSetup(2);
  const PriorityClassId clow = c.AddPriority("low", -5);
  AddRunning(c, 100, r, g, {0}, 8, 0, 10 * kHour, kHour);
  AddRunning(c, 101, r, g, {1}, 8, clow, 10 * kHour, kHour);
  c.AddJob(1, r, 1, 8).priority_class = chigh;
  EXPECT_THAT(Victims(Decide(c.Build())), ElementsAre(101));
}

TEST(PreemptionTest, GangsArePreemptedWholeAndAdmissionIsAllOrNothing) {
  auto [b, q, f, high] = LowerPriorityQueueSetup(2);
  const PriorityClassId pinned = b.AddPriority("pinned", 0);
  b.snapshot().priority_classes[pinned].preemptible = false;
  // A 2 x 4-GPU gang over both nodes; the other halves are not preemptible.
  AddRunning(b, 100, q, f, {0, 1}, 4, 0, kHour);
  AddRunning(b, 101, q, f, {0}, 4, pinned, kHour);
  AddRunning(b, 102, q, f, {1}, 4, pinned, kHour);
  // Needs one whole node: the gang's preemption frees only 4 per node.
  b.AddJob(1, q, 1, 8).priority_class = high;
  Decisions d = Decide(b.Build());
  EXPECT_TRUE(d.admissions.empty());
  EXPECT_TRUE(d.preemptions.empty());
  // Two workers of 4: the whole gang is preempted, once.
  b.snapshot().pending[0].workers = 2;
  b.snapshot().pending[0].worker.gpus = 4;
  d = Decide(b.Build());
  EXPECT_THAT(Victims(d), ElementsAre(100));
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_THAT(d.admissions[0].worker_nodes, ElementsAre(0, 1));
}

// Cohort "c": queue a (nominal 8, reclaims), queue b (nominal 8) runs two
// 8-GPU jobs on the two nodes (borrowing 8).
struct CohortCase {
  SnapshotBuilder b;
  QueueId a, other;
  FlavorId f;
};

CohortCase ReclaimSetup(ReclaimWithinCohort policy) {
  CohortCase c;
  c.f = c.b.AddFlavor("a100");
  c.b.AddNode(c.f, 8, 0, 0);
  c.b.AddNode(c.f, 8, 0, 1);
  const CohortId cohort = c.b.AddCohort("c");
  c.a = c.b.AddQueue("a", cohort);
  c.other = c.b.AddQueue("b", cohort);
  c.b.AddGpuQuota(c.a, c.f, 8);
  c.b.AddGpuQuota(c.other, c.f, 8);
  c.b.snapshot().queues[c.a].reclaim_within_cohort = policy;
  AddRunning(c.b, 100, c.other, c.f, {0}, 8, 0, 10 * kHour, kHour);
  AddRunning(c.b, 101, c.other, c.f, {1}, 8, 0, 10 * kHour, 2 * kHour);
  c.b.AddJob(1, c.a, 1, 8);
  return c;
}

TEST(PreemptionTest, ReclaimsQuotaLentToABorrower) {
  CohortCase c = ReclaimSetup(ReclaimWithinCohort::kAny);
  const Decisions d = Decide(c.b.Build());
  EXPECT_THAT(Admitted(d), ElementsAre(1));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, 100);  // Less lost work.
  EXPECT_EQ(d.preemptions[0].reason, PreemptionReason::kReclaimedByCohort);
  EXPECT_FALSE(d.admissions[0].borrowing);
  EXPECT_TRUE(Decide(ReclaimSetup(ReclaimWithinCohort::kNever).b.Build())
                  .preemptions.empty());
  // Equal priority: kLowerPriority does not reclaim.
  EXPECT_TRUE(
      Decide(ReclaimSetup(ReclaimWithinCohort::kLowerPriority).b.Build())
          .preemptions.empty());
}

TEST(PreemptionTest, ReclaimOnlyFromBorrowersAndOnlyUpToNominal) {
  // b uses only its nominal: nothing to reclaim.
  CohortCase c = ReclaimSetup(ReclaimWithinCohort::kAny);
  c.b.snapshot().running[1].queue = c.a;  // a already uses its 8.
  EXPECT_TRUE(Decide(c.b.Build()).preemptions.empty());
  // a would go above its nominal: not a reclaim.
  CohortCase big = ReclaimSetup(ReclaimWithinCohort::kAny);
  big.b.snapshot().pending[0].workers = 2;
  EXPECT_TRUE(Decide(big.b.Build()).preemptions.empty());
}

TEST(PreemptionTest, WhatVictimsFreeBeyondThePreemptorIsHeldThisCycle) {
  // a reclaims 8 GPUs from b for a 4-GPU job; a's second 4-GPU job (within
  // a's nominal) may not use the other half: the victim still runs through
  // its grace period.
  CohortCase c = ReclaimSetup(ReclaimWithinCohort::kAny);
  c.b.snapshot().pending[0].worker.gpus = 4;
  c.b.AddJob(2, c.a, 1, 4);
  Decisions d = Decide(c.b.Build());
  EXPECT_THAT(Admitted(d), ElementsAre(1));
  EXPECT_THAT(Victims(d), ElementsAre(100));
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoCapacity);
}

TEST(PreemptionTest, NoBorrowingOfQuotaThatPreemptionFreesThisCycle) {
  // As above, plus a spare node and queue c (nominal 0) with a 4-GPU job:
  // c would borrow the quota the victim frees; it waits for the next cycle.
  CohortCase c = ReclaimSetup(ReclaimWithinCohort::kAny);
  c.b.AddNode(c.f, 8, 0, 2);
  const QueueId qc = c.b.AddQueue("c", 0);
  c.b.AddGpuQuota(qc, c.f, 0);
  c.b.snapshot().pending[0].worker.gpus = 4;
  const PriorityClassId high = c.b.AddPriority("high", 10);
  c.b.snapshot().pending[0].priority_class = high;
  c.b.AddJob(2, qc, 1, 4);
  Decisions d = Decide(c.b.Build());
  EXPECT_THAT(Admitted(d), ElementsAre(1));
  EXPECT_THAT(Victims(d), ElementsAre(100));
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kQuotaExhausted);
  EXPECT_THAT(d.pending[0].message.str(),
              HasSubstr("while preemption frees quota"));
}

TEST(PreemptionTest, WithinQueueRuleComesBeforeReclaim) {
  // a (nominal 16) runs a low job on node 0 with much lost work; b borrows
  // node 1 with little lost work. a's high job takes a's own low job.
  SnapshotBuilder b;
  const FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  b.AddNode(f, 8, 0, 1);
  const CohortId cohort = b.AddCohort("c");
  const QueueId qa = b.AddGpuQueue("a", cohort, f, 16);
  const QueueId qb = b.AddGpuQueue("b", cohort, f, 0);
  b.snapshot().queues[qa].within_queue_preemption =
      WithinQueuePreemption::kLowerPriority;
  b.snapshot().queues[qa].reclaim_within_cohort = ReclaimWithinCohort::kAny;
  const PriorityClassId high = b.AddPriority("high", 10);
  AddRunning(b, 100, qa, f, {0}, 8, 0, 10 * kHour, 5 * kHour);
  AddRunning(b, 101, qb, f, {1}, 8, 0, 10 * kHour, kMinute);
  b.AddJob(1, qa, 1, 8).priority_class = high;
  Decisions d = Decide(b.Build());
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, 100);
  EXPECT_EQ(d.preemptions[0].reason, PreemptionReason::kPreemptedByPriority);
  // Without the within-queue rule, the borrower is reclaimed.
  b.snapshot().queues[qa].within_queue_preemption =
      WithinQueuePreemption::kNever;
  d = Decide(b.Build());
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, 101);
  EXPECT_EQ(d.preemptions[0].reason, PreemptionReason::kReclaimedByCohort);
}

// Cohort: lender l (nominal 16, idle), a and b (nominal 0, fair share on).
// b runs eight 2-GPU jobs on the two 8-GPU nodes; a submits four.
SnapshotBuilder FairShareSetup(bool enabled) {
  SnapshotBuilder b;
  const FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  b.AddNode(f, 8, 0, 1);
  const CohortId cohort = b.AddCohort("c");
  b.AddGpuQueue("l", cohort, f, 16);
  const QueueId qa = b.AddGpuQueue("a", cohort, f, 0);
  const QueueId qb = b.AddGpuQueue("b", cohort, f, 0);
  b.snapshot().queues[qa].fair_share_preemption = enabled;
  b.snapshot().queues[qb].fair_share_preemption = enabled;
  for (int k = 0; k < 8; ++k) {
    AddRunning(b, 100 + k, qb, f, {k / 4}, 2, 0, 10 * kHour, (k + 1) * kMinute);
  }
  for (int k = 0; k < 4; ++k) b.AddJob(1 + k, qa, 1, 2);
  return b;
}

TEST(PreemptionTest, FairSharePreemptsUntilSharesAreEqualAndIsStable) {
  EXPECT_TRUE(Decide(FairShareSetup(false).Build()).preemptions.empty());
  const Snapshot s = FairShareSetup(true).Build();
  const Decisions d = Decide(s);
  EXPECT_THAT(Admitted(d), ElementsAre(1, 2, 3, 4));
  // Least lost work first.
  EXPECT_THAT(Victims(d), ElementsAre(100, 101, 102, 103));
  for (const Preemption& p : d.preemptions) {
    EXPECT_EQ(p.reason, PreemptionReason::kFairShare);
    EXPECT_THAT(p.message, StartsWith("FAIR_SHARE: "));
  }
  // The victims, pending again in b, do not preempt back.
  const Snapshot next = ApplyDecisions(s, d);
  ASSERT_TRUE(ValidateSnapshot(next).ok()) << ValidateSnapshot(next);
  const Decisions again = Decide(next);
  EXPECT_TRUE(again.preemptions.empty());
  EXPECT_TRUE(again.admissions.empty());
  EXPECT_EQ(again.pending.size(), 4u);
}

TEST(PreemptionTest, FairShareStopsShortOfMakingThePreemptorTheBiggerUser) {
  // a already runs 8 on its own: a's next 2 GPUs would give it 10/16 against
  // b's 6/16 after the preemption.
  SnapshotBuilder b = FairShareSetup(true);
  Snapshot& s = b.snapshot();
  for (int k = 4; k < 8; ++k) s.running[k].queue = 1;  // Queue a.
  const Decisions d = Decide(b.Build());
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.admissions.empty());
}

// A preemption lowers the victim queue's share at once in the cycle's order.
// Cohort c1: queue A (nominal 12) runs jobs 100 and 101 (8 GPUs each: it
// borrows 4 of P's quota, share 4/36); P (nominal 16) preempts one of them
// to reclaim for job 1 (2 x 8 GPUs, high priority). Cohort c2: queue C
// (nominal 4, borrowing from D) runs 6 GPUs (share 2/36). After the
// preemption A is within its nominal (share 0) and its job 2 comes before
// C's job 3; both need the last 4 free GPUs, and A's is within its quota.
TEST(PreemptionTest, AVictimQueueMovesUpInTheSameCycle) {
  SnapshotBuilder b;
  const FlavorId f = b.AddFlavor("h100");
  for (int n = 0; n < 3; ++n) b.AddNode(f, 8);
  b.AddNode(f, 12);
  const CohortId c1 = b.AddCohort("c1");
  const CohortId c2 = b.AddCohort("c2");
  const QueueId a = b.AddGpuQueue("A", c1, f, 12);
  const QueueId p = b.AddGpuQueue("P", c1, f, 16);
  const QueueId c = b.AddGpuQueue("C", c2, f, 4);
  b.AddGpuQueue("D", c2, f, 12);
  b.snapshot().queues[p].reclaim_within_cohort = ReclaimWithinCohort::kAny;
  const PriorityClassId high = b.AddPriority("high", 100);
  const TimeMicros now = b.Build().now;
  AddRunning(b, 100, a, f, {0}, 8, 0, kHour, 10 * kMinute);
  AddRunning(b, 101, a, f, {1}, 8, 0, kHour, 20 * kMinute);
  AddRunning(b, 102, c, f, {2}, 6, 0, kHour, 10 * kMinute);
  b.AddJob(1, p, 2, 8, now - 3 * kMinute).priority_class = high;
  b.AddJob(2, a, 1, 4, now - 2 * kMinute);
  b.AddJob(3, c, 1, 4, now - 2 * kMinute);

  const Decisions decisions = Decide(b.Build());
  EXPECT_THAT(Victims(decisions), ElementsAre(100));
  EXPECT_THAT(Admitted(decisions), ElementsAre(1, 2));
  bool found = false;
  for (const PendingDecision& pd : decisions.pending) {
    if (pd.job != 3) continue;
    found = true;
    EXPECT_EQ(pd.reason, PendingReason::kNoCapacity) << pd.message;
  }
  EXPECT_TRUE(found);
  Scheduler scheduler(b.Build());
  EXPECT_EQ(scheduler.Cycle(), decisions);
}

// The victim's queue's min_runtime protects its young jobs from every rule;
// the larger of it and the platform's guarantee applies.
TEST(PreemptionTest, VictimQueueMinimumRuntimeProtectsFromEveryRule) {
  // Rule 1, within the queue: the victim ran 2 h.
  WithinQueue within =
      WithinQueueSetup(WithinQueuePreemption::kLowerPriority, 0);
  within.b.snapshot().queues[within.q].min_runtime = 3 * kHour;
  Decisions d = Decide(within.b.Build());
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.admissions.empty());
  within.b.snapshot().queues[within.q].min_runtime = 2 * kHour;
  EXPECT_THAT(Victims(Decide(within.b.Build())), ElementsAre(100));
  // The larger of the queue's and the platform's guarantee.
  PolicyConfig config;
  config.min_runtime_guarantee = 3 * kHour;
  EXPECT_TRUE(Decide(within.b.Build(), config).preemptions.empty());
  config.min_runtime_guarantee = kHour;
  within.b.snapshot().queues[within.q].min_runtime = 3 * kHour;
  EXPECT_TRUE(Decide(within.b.Build(), config).preemptions.empty());

  // Rule 2, reclaim: b's jobs ran 10 h; the victim's queue (b) counts, not
  // the preemptor's.
  CohortCase reclaim = ReclaimSetup(ReclaimWithinCohort::kAny);
  reclaim.b.snapshot().queues[reclaim.a].min_runtime = 11 * kHour;
  EXPECT_THAT(Victims(Decide(reclaim.b.Build())), ElementsAre(100));
  reclaim.b.snapshot().queues[reclaim.other].min_runtime = 11 * kHour;
  EXPECT_TRUE(Decide(reclaim.b.Build()).preemptions.empty());

  // Rule 3, fair share: b's jobs ran 10 h.
  SnapshotBuilder fair = FairShareSetup(true);
  fair.snapshot().queues[2].min_runtime = 10 * kHour + kMinute;
  d = Decide(fair.Build());
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.admissions.empty());

  // Rule 4, node capacity: the victim ran 2 h.
  ForCapacity capacity = ForCapacitySetup(0);
  PolicyConfig for_capacity;
  for_capacity.preempt_for_capacity = true;
  capacity.b.snapshot().queues[capacity.other].min_runtime = 2 * kHour + 1;
  d = Decide(capacity.b.Build(), for_capacity);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.admissions.empty());
  capacity.b.snapshot().queues[capacity.other].min_runtime = 2 * kHour;
  EXPECT_THAT(Victims(Decide(capacity.b.Build(), for_capacity)),
              ElementsAre(100));
  // The incremental Scheduler agrees, also after the queue changes.
  Scheduler scheduler(capacity.b.Build(), for_capacity);
  EXPECT_THAT(Victims(scheduler.Cycle()), ElementsAre(100));
  Queue protected_queue = capacity.b.snapshot().queues[capacity.other];
  protected_queue.min_runtime = 3 * kHour;
  scheduler.SetQueue(capacity.other, protected_queue);
  EXPECT_TRUE(scheduler.Cycle().preemptions.empty());
}

}  // namespace
}  // namespace trainyard::scheduler::policy
