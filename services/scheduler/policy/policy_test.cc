#include "services/scheduler/policy/policy.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/incremental.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::Admitted;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kHour;
using testing::SnapshotBuilder;
using ::testing::StartsWith;

const PendingDecision* FindPending(const Decisions& d, JobId job) {
  for (const PendingDecision& p : d.pending) {
    if (p.job == job) return &p;
  }
  return nullptr;
}

TEST(DecideTest, AdmitsAGangWithAPlacementPerWorker) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNodes(2, f, 8, 0, 0);
  QueueId q = b.AddGpuQueue("research-a", std::nullopt, f, 64);
  b.AddJob(7, q, 2, 8);
  Decisions d = Decide(b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 7);
  EXPECT_EQ(d.admissions[0].flavor, f);
  EXPECT_THAT(d.admissions[0].worker_nodes, ElementsAre(0, 1));
  EXPECT_FALSE(d.admissions[0].borrowing);
  EXPECT_TRUE(d.pending.empty());
}

TEST(DecideTest, GangIsNeverPartiallyAdmitted) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNodes(2, f, 8, 0, 0);
  QueueId q = b.AddGpuQueue("research-a", std::nullopt, f, 64);
  b.AddJob(1, q, 3, 8);
  Decisions d = Decide(b.Build());
  EXPECT_TRUE(d.admissions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoCapacity);
  EXPECT_EQ(d.pending[0].message,
            "NO_CAPACITY: free nodes hold 2 of 3 workers (flavor a100)");
  EXPECT_EQ(d.pending[0].position, 1);
}

TEST(DecideTest, CapacityUsedInTheSameCycleAndByRunningWorkIsRespected) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  NodeId busy = b.AddNode(f, 8, 0, 0);
  QueueId q = b.AddGpuQueue("q", std::nullopt, f, 64);
  b.AddRunning(100, q, f, busy, 6);
  b.AddJob(1, q, 1, 8, /*submit_time=*/1);
  b.AddJob(2, q, 1, 8, /*submit_time=*/2);
  b.AddJob(3, q, 1, 2, /*submit_time=*/3);
  Decisions d = Decide(b.Build());
  EXPECT_THAT(Admitted(d), ElementsAre(1, 3));
  EXPECT_THAT(d.admissions[1].worker_nodes, ElementsAre(busy));
  ASSERT_NE(FindPending(d, 2), nullptr);
  EXPECT_EQ(FindPending(d, 2)->reason, PendingReason::kNoCapacity);
}

TEST(DecideTest, QuotaExhaustedExplainsUsageAndWhatTheCohortLends) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 10; ++i) b.AddNode(f, 8, 0, i);
  CohortId c = b.AddCohort("research");
  QueueId q = b.AddGpuQueue("research-a", c, f, 64);
  b.AddGpuQueue("research-b", c, f, 16, std::nullopt, /*lending_limit=*/0);
  b.AddRunningQuotaOnly(100, q, f, 64);
  b.AddJob(1, q, 1, 8);
  Decisions d = Decide(b.Build());
  EXPECT_TRUE(d.admissions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kQuotaExhausted);
  EXPECT_EQ(d.pending[0].message,
            "QUOTA_EXHAUSTED: queue research-a gpu 64/64, cohort lends 0, job "
            "needs 8 (flavor a100): the rest of cohort tree research is in use "
            "or kept by lending limits (up to 16)");
}

// Failures that leave the state unchanged are taken in runs from their
// queue's order (engine.cc, "Speculative runs"); an admission that comes
// between them in the order takes back those after it, which then see the
// new state: each explanation is the one of the job's own turn.
TEST(DecideTest, ExplanationsFollowAnAdmissionBetweenAQueuesJobs) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 16, 0, 0);
  CohortId c = b.AddCohort("research");
  QueueId a = b.AddGpuQueue("research-a", c, f, 4);
  QueueId other = b.AddGpuQueue("research-b", c, f, 4);
  const PriorityClassId high = b.AddPriority("high", 100);
  const PriorityClassId medium = b.AddPriority("medium", 50);
  // Queue a: 20 high and 5 default jobs that need more than the cohort has;
  // queue b: one medium job, ordered between them, that fits.
  for (JobId id = 1; id <= 25; ++id) {
    b.AddJob(id, a, 1, 32, static_cast<TimeMicros>(id)).priority_class =
        id <= 20 ? high : 0;
  }
  b.AddJob(100, other, 1, 2).priority_class = medium;
  const Decisions d = Decide(b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 100);
  ASSERT_EQ(d.pending.size(), 25u);
  for (const PendingDecision& p : d.pending) {
    SCOPED_TRACE(p.job);
    EXPECT_THAT(p.message.str(),
                HasSubstr(p.job <= 20 ? "cohort lends 4" : "cohort lends 2"));
  }
  EXPECT_EQ(d, Decide(b.Build(), {.use_placement_index = false,
                                  .use_equivalence_classes = false}));
}

TEST(DecideTest, BorrowsFromTheCohortAndMarksTheAdmission) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 4; ++i) b.AddNode(f, 8, 0, i);
  CohortId c = b.AddCohort("research");
  QueueId q = b.AddGpuQueue("a", c, f, 8);
  b.AddGpuQueue("b", c, f, 16);
  b.AddJob(1, q, 3, 8);
  Decisions d = Decide(b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_TRUE(d.admissions[0].borrowing);
  // Without a cohort the same job does not fit the quota.
  b.snapshot().queues[q].cohort.reset();
  EXPECT_TRUE(Decide(b.Build()).admissions.empty());
}

TEST(DecideTest, LendingLimitKeepsPartOfTheLendersQuota) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 4; ++i) b.AddNode(f, 8, 0, i);
  CohortId c = b.AddCohort("research");
  QueueId qa = b.AddGpuQueue("a", c, f, 0);
  QueueId lender =
      b.AddGpuQueue("lender", c, f, 16, std::nullopt, /*lending_limit=*/8);
  const TimeMicros now = b.Build().now;
  b.AddJob(1, qa, 1, 8, now - 2);
  b.AddJob(2, qa, 1, 8, now - 1);
  Decisions d = Decide(b.Build());
  EXPECT_THAT(Admitted(d), ElementsAre(1));
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].message,
            "QUOTA_EXHAUSTED: queue a gpu 8/0, cohort lends 0, job needs 8 "
            "(flavor a100): the rest of cohort tree research is in use or kept "
            "by lending limits (up to 8)");
  // Without the lending limit the lender lends all 16.
  b.snapshot().queues[lender].quotas[0].resources[0]->lending_limit.reset();
  EXPECT_THAT(Admitted(Decide(b.Build())), ElementsAre(1, 2));
}

TEST(DecideTest, BorrowsAcrossNestedCohorts) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 4; ++i) b.AddNode(f, 8, 0, i);
  CohortId root = b.AddCohort("org");
  CohortId x = b.AddCohort("x", root);
  CohortId y = b.AddCohort("y", root);
  QueueId qa = b.AddGpuQueue("a", x, f, 8);
  b.AddGpuQueue("far", y, f, 16);
  b.AddJob(1, qa, 3, 8);
  Decisions d = Decide(b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_TRUE(d.admissions[0].borrowing);
  // Cut y off from the root: nothing to borrow.
  b.snapshot().cohorts[y].parent.reset();
  EXPECT_TRUE(Decide(b.Build()).admissions.empty());
}

TEST(DecideTest, QuotaChargedWithinTheCycle) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 4; ++i) b.AddNode(f, 8, 0, i);
  QueueId q = b.AddGpuQueue("q", std::nullopt, f, 16);
  b.AddJob(1, q, 1, 8, 1);
  b.AddJob(2, q, 1, 8, 2);
  b.AddJob(3, q, 1, 8, 3);
  Decisions d = Decide(b.Build());
  EXPECT_THAT(Admitted(d), ElementsAre(1, 2));
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_THAT(d.pending[0].message.str(),
              StartsWith("QUOTA_EXHAUSTED: queue q gpu 16/16"));
}

TEST(DecideTest, PriorityComesFirst) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  PriorityClassId high = b.AddPriority("high", 100);
  QueueId qa = b.AddGpuQueue("a", std::nullopt, f, 8);
  QueueId qb = b.AddGpuQueue("b", std::nullopt, f, 8);
  b.AddJob(1, qa, 1, 8, /*submit_time=*/1);
  b.AddJob(2, qb, 1, 8, /*submit_time=*/2).priority_class = high;
  EXPECT_THAT(Admitted(Decide(b.Build())), ElementsAre(2));
}

// Two queues in a cohort; `a` already borrows 16 GPUs above its nominal.
SnapshotBuilder FairShareSetup(double weight_a, TimeMicros submit_a,
                               TimeMicros submit_b) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 5; ++i) b.AddNode(f, 8, 0, i);
  CohortId c = b.AddCohort("research");
  QueueId qa = b.AddQueue("a", c, QueueingStrategy::kBestEffortFifo, weight_a);
  QueueId qb = b.AddGpuQueue("b", c, f, 32);
  b.AddGpuQuota(qa, f, 8);
  b.AddGpuQueue("lender", c, f, 64);
  b.AddRunning(100, qa, f, 0, 8);
  b.AddRunning(101, qa, f, 1, 8);
  b.AddRunning(102, qa, f, 2, 8);
  b.AddRunning(103, qb, f, 3, 4);
  // One node (8 GPUs) is free: only one of the two jobs fits.
  b.AddJob(1, qa, 1, 8, submit_a);
  b.AddJob(2, qb, 1, 8, submit_b);
  return b;
}

TEST(DecideTest, FairShareBeforeSubmitTime) {
  const TimeMicros now = SnapshotBuilder().Build().now;
  // a's job is older, but a is far above its nominal quota: b goes first.
  SnapshotBuilder b = FairShareSetup(1.0, now - 2, now - 1);
  EXPECT_THAT(Admitted(Decide(b.Build())), ElementsAre(2));
}

TEST(DecideTest, FairShareIsWeighted) {
  const TimeMicros now = SnapshotBuilder().Build().now;
  // b borrows 4 (share 4/40), a borrows 16 (share 16/40 / weight 1000).
  SnapshotBuilder b = FairShareSetup(1000.0, now - 1, now - 2);
  Snapshot& s = b.snapshot();
  s.queues[1].quotas[0].resources[0]->nominal = 0;
  EXPECT_THAT(Admitted(Decide(s)), ElementsAre(1));
  s.queues[0].weight = 1.0;
  EXPECT_THAT(Admitted(Decide(s)), ElementsAre(2));
}

TEST(DecideTest, SubmitTimeBreaksTies) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  QueueId qa = b.AddGpuQueue("a", std::nullopt, f, 8);
  QueueId qb = b.AddGpuQueue("b", std::nullopt, f, 8);
  const TimeMicros now = b.Build().now;
  b.AddJob(1, qa, 1, 8, now - 2);
  b.AddJob(2, qb, 1, 8, now - 3);
  EXPECT_THAT(Admitted(Decide(b.Build())), ElementsAre(2));
}

TEST(DecideTest, AgingLiftsALongWaitingJobAboveFairShare) {
  const TimeMicros now = SnapshotBuilder().Build().now;
  // a's job has waited two hours; the default aging threshold is one hour.
  SnapshotBuilder b = FairShareSetup(1.0, now - 2 * kHour, now - 1);
  EXPECT_THAT(Admitted(Decide(b.Build())), ElementsAre(1));
  // Without aging fair share wins.
  EXPECT_THAT(Admitted(Decide(b.Build(), {.aging_threshold = 0})),
              ElementsAre(2));
  // Among aged jobs the older goes first.
  b.snapshot().pending[1].submit_time = now - 3 * kHour;
  EXPECT_THAT(Admitted(Decide(b.Build())), ElementsAre(2));
}

TEST(DecideTest, FairShareIsUpdatedAfterEachAdmission) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 3; ++i) b.AddNode(f, 8, 0, i);
  CohortId c = b.AddCohort("research");
  QueueId qa = b.AddGpuQueue("a", c, f, 0);
  QueueId qb = b.AddGpuQueue("b", c, f, 0);
  b.AddGpuQueue("lender", c, f, 24);
  const TimeMicros now = b.Build().now;
  b.AddJob(1, qa, 1, 8, now - 3);
  b.AddJob(2, qa, 1, 8, now - 2);
  b.AddJob(3, qb, 1, 8, now - 1);
  // Job 1 first (oldest, equal shares); then a borrows, so b's job 3 goes
  // before a's job 2.
  EXPECT_THAT(Admitted(Decide(b.Build())), ElementsAre(1, 3, 2));
}

TEST(DecideTest, StrictFifoBlocksTheQueueBehindItsHead) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  QueueId q = b.AddQueue("strict", std::nullopt, QueueingStrategy::kStrictFifo);
  b.AddGpuQuota(q, f, 64);
  b.AddJob(1, q, 2, 8, 1);
  b.AddJob(2, q, 1, 8, 2);
  b.AddJob(3, q, 1, 4, 3);
  Decisions d = Decide(b.Build());
  EXPECT_TRUE(d.admissions.empty());
  ASSERT_EQ(d.pending.size(), 3u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoCapacity);
  EXPECT_EQ(d.pending[1].reason, PendingReason::kBlockedByStrictFifo);
  EXPECT_EQ(d.pending[1].message,
            "BLOCKED_BY_STRICT_FIFO: queue strict is StrictFIFO and job 1 "
            "ahead is pending "
            "(NO_CAPACITY)");
  EXPECT_EQ(d.pending[2].position, 3);
  // BestEffortFIFO lets the later jobs try.
  b.snapshot().queues[q].strategy = QueueingStrategy::kBestEffortFifo;
  Decisions best_effort = Decide(b.Build());
  EXPECT_THAT(Admitted(best_effort), ElementsAre(2));
  ASSERT_EQ(best_effort.pending.size(), 2u);
  EXPECT_EQ(best_effort.pending[0].job, 1);
  EXPECT_EQ(best_effort.pending[0].position, 1);
  EXPECT_EQ(best_effort.pending[1].job, 3);
  EXPECT_EQ(best_effort.pending[1].position, 2);
}

// A queue with quota for an on-demand and a spot flavor, one node each.
SnapshotBuilder SpotSetup() {
  SnapshotBuilder b;
  FlavorId od = b.AddFlavor("od");
  FlavorId spot = b.AddFlavor("spot", FlavorKind::kSpot);
  b.AddNode(od, 8, 0, 0);
  b.AddNode(spot, 8, 1, 1);
  QueueId q = b.AddGpuQueue("q", std::nullopt, spot, 64);
  // Spot listed first: the kind, not the list order, decides.
  b.AddGpuQuota(q, od, 64);
  return b;
}

Decisions DecideOne(SnapshotBuilder b, SpotPolicy policy, int64_t gpus = 8) {
  b.AddJob(1, 0, 1, gpus).spot_policy = policy;
  return Decide(b.Build());
}

TEST(DecideTest, FlavorChoiceFollowsSpotPolicy) {
  constexpr FlavorId kOd = 0, kSpot = 1;
  auto flavor = [](const Decisions& d) {
    return d.admissions.empty() ? -1 : d.admissions[0].flavor;
  };
  EXPECT_EQ(flavor(DecideOne(SpotSetup(), SpotPolicy::kAllowed)), kOd);
  EXPECT_EQ(flavor(DecideOne(SpotSetup(), SpotPolicy::kNever)), kOd);
  EXPECT_EQ(flavor(DecideOne(SpotSetup(), SpotPolicy::kPreferred)), kSpot);
  EXPECT_EQ(flavor(DecideOne(SpotSetup(), SpotPolicy::kRequired)), kSpot);
}

TEST(DecideTest, FallsBackToTheNextFlavorWithoutCapacity) {
  SnapshotBuilder b = SpotSetup();
  b.snapshot().nodes[0].used.gpus = 8;  // On-demand is full.
  Decisions allowed = DecideOne(b, SpotPolicy::kAllowed);
  ASSERT_EQ(allowed.admissions.size(), 1u);
  EXPECT_EQ(allowed.admissions[0].flavor, 1);
  Decisions never = DecideOne(b, SpotPolicy::kNever);
  EXPECT_TRUE(never.admissions.empty());
  ASSERT_EQ(never.pending.size(), 1u);
  EXPECT_EQ(never.pending[0].message,
            "NO_CAPACITY: free nodes hold 0 of 1 workers (flavor od)");
  // Spot full and preferred: falls back to on-demand.
  SnapshotBuilder c = SpotSetup();
  c.snapshot().nodes[1].used.gpus = 8;
  Decisions preferred = DecideOne(c, SpotPolicy::kPreferred);
  ASSERT_EQ(preferred.admissions.size(), 1u);
  EXPECT_EQ(preferred.admissions[0].flavor, 0);
  Decisions required = DecideOne(c, SpotPolicy::kRequired);
  EXPECT_TRUE(required.admissions.empty());
}

// A budget past its RESTRICT_TO_SPOT threshold makes the job spot-only, even
// one that cannot checkpoint, and its explanation says the budget is why it
// waits for spot capacity while on-demand nodes are free.
TEST(DecideTest, SpotOnlyByBudgetIsExplained) {
  constexpr FlavorId kSpot = 1;
  SnapshotBuilder free = SpotSetup();
  Decisions placed = DecideOne(free, SpotPolicy::kRequiredByBudget);
  ASSERT_EQ(placed.admissions.size(), 1u);
  EXPECT_EQ(placed.admissions[0].flavor, kSpot);
  SnapshotBuilder b = SpotSetup();
  b.snapshot().nodes[1].used.gpus = 8;  // Spot is full, on-demand free.
  b.AddJob(1, 0, 1, 8).spot_policy = SpotPolicy::kRequiredByBudget;
  b.snapshot().pending[0].can_checkpoint = false;
  Decisions d = Decide(b.Build());
  EXPECT_TRUE(d.admissions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].message,
            "NO_CAPACITY: free nodes hold 0 of 1 workers (flavor spot); spot "
            "flavors only: a budget of the job's tenant or project is past its "
            "RESTRICT_TO_SPOT threshold");
  // The job's own choice of spot alone blames no budget.
  SnapshotBuilder c = SpotSetup();
  c.snapshot().nodes[1].used.gpus = 8;
  Decisions own = DecideOne(c, SpotPolicy::kRequired);
  ASSERT_EQ(own.pending.size(), 1u);
  EXPECT_EQ(own.pending[0].message,
            "NO_CAPACITY: free nodes hold 0 of 1 workers (flavor spot)");
}

TEST(DecideTest, FallsBackToTheNextFlavorWithoutQuotaAndExplainsEach) {
  SnapshotBuilder b = SpotSetup();
  b.snapshot().queues[0].quotas[1].resources[0]->nominal = 4;  // od quota 4.
  Decisions d = DecideOne(b, SpotPolicy::kAllowed);
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].flavor, 1);
  b.snapshot().nodes[1].used.gpus = 8;  // Spot full too.
  Decisions none = DecideOne(b, SpotPolicy::kAllowed);
  ASSERT_EQ(none.pending.size(), 1u);
  EXPECT_EQ(none.pending[0].reason, PendingReason::kQuotaExhausted);
  EXPECT_EQ(none.pending[0].message,
            "QUOTA_EXHAUSTED: queue q gpu 0/4, cohort lends 0, job needs 8 "
            "(flavor od): the queue has no cohort to borrow from; "
            "free nodes hold 0 of 1 workers (flavor spot)");
}

TEST(DecideTest, NoEligibleFlavor) {
  SnapshotBuilder b;
  FlavorId spot = b.AddFlavor("spot", FlavorKind::kSpot);
  b.AddNode(spot, 8);
  QueueId q = b.AddGpuQueue("q", std::nullopt, spot, 8);
  b.AddJob(1, q, 1, 8).spot_policy = SpotPolicy::kNever;
  Decisions d = Decide(b.Build());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoEligibleFlavor);
  EXPECT_EQ(d.pending[0].message,
            "NO_ELIGIBLE_FLAVOR: queue q has no quota for a flavor allowed by "
            "spot policy never");
}

TEST(DecideTest, NoFitTopologyWhenTheRequiredLevelCannotHoldTheGang) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  b.AddNode(f, 8, 0, 1);
  QueueId q = b.AddGpuQueue("q", std::nullopt, f, 64);
  b.AddJob(1, q, 2, 8).required_topology = TopologyLevel::kRack;
  Decisions d = Decide(b.Build());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoFitTopology);
  EXPECT_EQ(d.pending[0].message,
            "NO_FIT_TOPOLOGY: no single rack holds 2 workers (best holds 1) "
            "(flavor a100)");
}

TEST(DecideTest, PositionsFollowQueueOrder) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  QueueId qa = b.AddGpuQueue("a", std::nullopt, f, 64);
  QueueId qb = b.AddGpuQueue("b", std::nullopt, f, 64);
  PriorityClassId high = b.AddPriority("high", 10);
  b.AddJob(10, qb, 1, 1, 5);
  b.AddJob(11, qa, 1, 1, 9);
  b.AddJob(12, qa, 1, 1, 8);
  b.AddJob(13, qa, 1, 1, 10).priority_class = high;
  Decisions d = Decide(b.Build());  // No nodes: nothing fits.
  ASSERT_EQ(d.pending.size(), 4u);
  std::vector<std::pair<JobId, int32_t>> got;
  for (const PendingDecision& p : d.pending)
    got.emplace_back(p.job, p.position);
  EXPECT_THAT(got, ElementsAre(std::pair<JobId, int32_t>{13, 1},
                               std::pair<JobId, int32_t>{12, 2},
                               std::pair<JobId, int32_t>{11, 3},
                               std::pair<JobId, int32_t>{10, 1}));
}

TEST(DecideTest, InvalidSnapshotLeavesEverythingPending) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8);
  QueueId q = b.AddGpuQueue("q", std::nullopt, f, 8);
  b.AddJob(1, q, 1, 8);
  b.AddJob(2, /*queue=*/5, 1, 8);
  Decisions d = Decide(b.Build());
  EXPECT_TRUE(d.admissions.empty());
  ASSERT_EQ(d.pending.size(), 2u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kInvalidSnapshot);
  EXPECT_THAT(d.pending[1].message.str(),
              HasSubstr("pending[1]: id out of range"));
  // A cohort cycle is rejected too.
  SnapshotBuilder c;
  CohortId x = c.AddCohort("x");
  CohortId y = c.AddCohort("y", x);
  c.snapshot().cohorts[x].parent = y;
  EXPECT_FALSE(ValidateSnapshot(c.Build()).ok());
}

TEST(DecideTest, InputOrderOfPendingJobsDoesNotMatter) {
  SnapshotBuilder b = FairShareSetup(1.0, 5, 6);
  const TimeMicros now = b.Build().now;
  b.AddJob(3, 0, 1, 4, now - 10);
  b.AddJob(4, 1, 1, 4, now - 10);
  b.AddJob(5, 1, 2, 2, now - 10);
  Decisions first = Decide(b.Build());
  std::reverse(b.snapshot().pending.begin(), b.snapshot().pending.end());
  EXPECT_EQ(Decide(b.Build()), first);
  EXPECT_EQ(Decide(b.Build()), Decide(b.Build()));
}

// No queue at all (an empty heap of queue heads, with no room reserved for
// one), a queue with no pending job, and one pending job: in Decide() and in
// the incremental Scheduler.
TEST(DecideTest, NoQueueNoPendingJobAndOnePendingJob) {
  SnapshotBuilder b;
  const FlavorId f = b.AddFlavor("gpu");
  b.AddNode(f, 8);
  const Decisions none = Decide(b.Build());
  EXPECT_TRUE(none.admissions.empty());
  EXPECT_TRUE(none.pending.empty());
  Scheduler no_queue(b.Build());
  EXPECT_EQ(no_queue.Cycle(), none);
  const QueueId q = b.AddGpuQueue("q", std::nullopt, f, 8);
  EXPECT_EQ(Decide(b.Build()), none);
  Scheduler empty(b.Build());
  EXPECT_EQ(empty.Cycle(), none);
  b.AddJob(1, q, 1, 8);
  EXPECT_EQ(Admitted(Decide(b.Build())), std::vector<JobId>{1});
  Scheduler one(b.Build());
  EXPECT_EQ(Admitted(one.Cycle()), std::vector<JobId>{1});
}

}  // namespace
}  // namespace trainyard::scheduler::policy
