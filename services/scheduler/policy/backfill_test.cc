// Backfill and reservations (docs/scheduling.md, "Backfill and reservations"),
// and budgets (BUDGET_HOLD).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/snapshot.h"
#include "tests/support/policy/synthetic.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::AdmissionOf;
using ::testing::HasSubstr;
using testing::kHour;
using testing::kMinute;
using testing::PendingOf;
using testing::SnapshotBuilder;
using ::testing::StartsWith;

// Two 8-GPU nodes in one rack. Node 0 is fully used by job 100, which
// reaches its time limit in 2 h; node 1 has 4 of 8 GPUs used by job 101,
// which reaches its limit in 1 h. Job 1 (high priority) needs 2 x 8 GPUs: it
// cannot start now, but can in 2 h. Then three 4-GPU jobs of low priority:
// job 2 runs up to 3 h (past the reservation), job 3 up to 30 min (before
// it), job 4 has no time limit.
struct GangSetup {
  SnapshotBuilder b;
  FlavorId f;
  QueueId q;
};

GangSetup TwoNodes() {
  GangSetup x;
  SnapshotBuilder& b = x.b;
  x.f = b.AddFlavor("h100");
  b.AddNodes(2, x.f, 8, 0, 0);
  x.q = b.AddQueue("research");
  b.AddGpuQuota(x.q, x.f, 64);
  const PriorityClassId high = b.AddPriority("high", 100);
  Snapshot& s = b.snapshot();
  auto running = [&](JobId id, NodeId node, int64_t gpus, TimeMicros left) {
    s.nodes[node].used.gpus += gpus;
    s.running.push_back({.job = id,
                         .queue = x.q,
                         .flavor = x.f,
                         .placement = {node},
                         .resources = {.gpus = gpus},
                         .start_time = s.now - kHour,
                         .time_limit_micros = kHour + left});
  };
  running(100, 0, 8, 2 * kHour);
  running(101, 1, 4, 1 * kHour);
  b.AddJob(1, x.q, 2, 8, s.now - 10 * kMinute).priority_class = high;
  b.AddJob(2, x.q, 1, 4, s.now - 9 * kMinute).time_limit_micros = 3 * kHour;
  b.AddJob(3, x.q, 1, 4, s.now - 8 * kMinute).time_limit_micros = 30 * kMinute;
  b.AddJob(4, x.q, 1, 4, s.now - 7 * kMinute);
  return x;
}

TEST(BackfillTest, ReservesForTheGangAndBackfillsOnlyJobsThatEndBefore) {
  GangSetup x = TwoNodes();
  const Snapshot& s = x.b.Build();
  const Decisions d = Decide(s);

  ASSERT_EQ(d.reservations.size(), 1u);
  const Reservation& r = d.reservations[0];
  EXPECT_EQ(r.job, 1);
  EXPECT_EQ(r.flavor, x.f);
  EXPECT_EQ(r.start_time, s.now + 2 * kHour);
  EXPECT_EQ(r.worker_nodes, (std::vector<NodeId>{0, 1}));

  const PendingDecision* gang = PendingOf(d, 1);
  ASSERT_NE(gang, nullptr);
  EXPECT_EQ(gang->reason, PendingReason::kWaitingForReservation);
  EXPECT_EQ(gang->position, 1);
  EXPECT_THAT(gang->message.str(),
              StartsWith("WAITING_FOR_RESERVATION: 2 workers reserved on "
                         "flavor h100 from "));
  EXPECT_THAT(gang->message.str(), HasSubstr("(in 7200 s)"));
  EXPECT_THAT(gang->message.str(),
              HasSubstr("now: NO_CAPACITY: free nodes hold 0 "
                        "of 2 workers (flavor h100)"));

  // Job 3 ends (30 min) before the reservation starts: it backfills onto the
  // held GPUs of node 1.
  const Admission* backfilled = AdmissionOf(d, 3);
  ASSERT_NE(backfilled, nullptr);
  EXPECT_TRUE(backfilled->backfill);
  EXPECT_EQ(backfilled->worker_nodes, (std::vector<NodeId>{1}));
  EXPECT_EQ(d.admissions.size(), 1u);

  // Job 2 (3 h) and job 4 (no limit) would delay it.
  ASSERT_NE(PendingOf(d, 2), nullptr);
  EXPECT_EQ(PendingOf(d, 2)->reason, PendingReason::kNoCapacity);
  ASSERT_NE(PendingOf(d, 4), nullptr);
  EXPECT_EQ(PendingOf(d, 4)->reason, PendingReason::kNoCapacity);
}

// A job kept off free GPUs held for a reservation says so: which job they
// are held for and when it is expected to start. Once the holds are used up
// (job 3 backfills them) later jobs see no held capacity.
TEST(BackfillTest, JobsKeptOffHeldCapacityNameTheReservation) {
  GangSetup x = TwoNodes();
  Snapshot& snap = x.b.snapshot();
  snap.pending[0].name = "head-gang";
  const Snapshot& s = x.b.Build();
  const Decisions d = Decide(s);
  ASSERT_EQ(d.reservations.size(), 1u);
  const std::string start = absl::FormatTime(
      "%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMicros(s.now + 2 * kHour),
      absl::UTCTimeZone());
  const PendingDecision* two = PendingOf(d, 2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->reason, PendingReason::kNoCapacity);
  EXPECT_EQ(two->message.str(),
            "NO_CAPACITY: free nodes hold 0 of 1 workers (flavor h100); free "
            "capacity (4 GPUs) on flavor h100 is reserved for job 1 "
            "(head-gang), expected to start at " +
                start + " when running jobs reach their time limits");
  // Job 3 took the held GPUs: job 4 is told only that nothing is free.
  const PendingDecision* four = PendingOf(d, 4);
  ASSERT_NE(four, nullptr);
  EXPECT_EQ(four->message.str(),
            "NO_CAPACITY: free nodes hold 0 of 1 workers (flavor h100)");

  // Without job 3, job 4 too names the reservation; the incremental
  // Scheduler explains the same.
  GangSetup without = TwoNodes();
  without.b.snapshot().pending[0].name = "head-gang";
  without.b.snapshot().pending.erase(without.b.snapshot().pending.begin() + 2);
  const Snapshot& s2 = without.b.Build();
  const Decisions d2 = Decide(s2);
  ASSERT_NE(PendingOf(d2, 4), nullptr);
  EXPECT_THAT(PendingOf(d2, 4)->message.str(),
              HasSubstr("is reserved for job 1 (head-gang), expected to start "
                        "at " +
                        start));
  Scheduler scheduler(s2);
  EXPECT_EQ(scheduler.Cycle(), d2);
  EXPECT_EQ(Decide(s2, {.use_placement_index = false,
                        .use_equivalence_classes = false}),
            d2);
}

TEST(BackfillTest, WithoutReservationsSmallJobsTakeTheGangsCapacity) {
  GangSetup x = TwoNodes();
  const Decisions d = Decide(x.b.Build(), {.max_reservations = 0});
  EXPECT_TRUE(d.reservations.empty());
  // The first small job in line takes node 1's free GPUs and the gang waits
  // behind it: what the reservation prevents.
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 2);
  EXPECT_FALSE(d.admissions[0].backfill);
  EXPECT_EQ(PendingOf(d, 1)->reason, PendingReason::kNoCapacity);
}

TEST(BackfillTest, NoReservationWhenRunningWorkHasNoTimeLimit) {
  GangSetup x = TwoNodes();
  for (RunningAttempt& r : x.b.snapshot().running) r.time_limit_micros = 0;
  const Decisions d = Decide(x.b.Build());
  EXPECT_TRUE(d.reservations.empty());
  EXPECT_EQ(PendingOf(d, 1)->reason, PendingReason::kNoCapacity);
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 2);
}

TEST(BackfillTest, ReservationHoldsQuota) {
  GangSetup x = TwoNodes();
  // 12 used + 16 reserved = 28 of 28: no quota is left for job 2, 3 or 4.
  x.b.snapshot().queues[x.q].quotas[0].resources[0]->nominal = 28;
  const Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_TRUE(d.admissions.empty());
  EXPECT_EQ(PendingOf(d, 3)->reason, PendingReason::kQuotaExhausted);
}

TEST(BackfillTest, ReservationCountIsLimited) {
  GangSetup x = TwoNodes();
  // A third node, full until job 102's limit in 3 h, and a second gang that
  // fits there.
  Snapshot& s = x.b.snapshot();
  x.b.AddNode(x.f, 8, 0, 0);
  s.nodes[2].used.gpus = 8;
  s.running.push_back({.job = 102,
                       .queue = x.q,
                       .flavor = x.f,
                       .placement = {2},
                       .resources = {.gpus = 8},
                       .start_time = s.now,
                       .time_limit_micros = 3 * kHour});
  x.b.AddJob(5, x.q, 1, 8, s.now - 9 * kMinute).priority_class = 1;
  Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.reservations.size(), 2u);
  EXPECT_EQ(d.reservations[1].job, 5);
  EXPECT_EQ(d.reservations[1].start_time, s.now + 3 * kHour);
  EXPECT_EQ(d.reservations[1].worker_nodes, (std::vector<NodeId>{2}));
  d = Decide(x.b.Build(), {.max_reservations = 1});
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, 1);
  EXPECT_EQ(PendingOf(d, 5)->reason, PendingReason::kNoCapacity);
  d = Decide(x.b.Build(), {.max_reservation_searches = 1});
  EXPECT_EQ(d.reservations.size(), 1u);
}

TEST(BackfillTest, SecondReservationWaitsForWhatTheFirstAwaits) {
  GangSetup x = TwoNodes();
  // Job 5: the same gang; after job 1's reservation both nodes are awaited,
  // so it can only be reserved once more capacity frees: never here.
  x.b.AddJob(5, x.q, 2, 8, x.b.Build().now - 9 * kMinute).priority_class = 1;
  const Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(PendingOf(d, 5)->reason, PendingReason::kNoCapacity);
}

// Job 1 moves to a queue without preemption. Job 5 (priority 50, in the
// queue that preempts lower priorities) fits only by preempting job 101
// (4 GPUs on node 1), which job 1's reservation waits for: it may not, or
// job 1 would wait for job 5 (no time limit) instead of 2 h.
TEST(BackfillTest, PreemptionDoesNotTakeWhatAReservationWaitsFor) {
  GangSetup x = TwoNodes();
  const QueueId calm = x.b.AddQueue("calm");
  x.b.AddGpuQuota(calm, x.f, 64);
  for (PendingJob& j : x.b.snapshot().pending) {
    if (j.id == 1) j.queue = calm;
  }
  x.b.snapshot().queues[x.q].within_queue_preemption =
      WithinQueuePreemption::kLowerPriority;
  const PriorityClassId mid = x.b.AddPriority("mid", 50);
  x.b.AddJob(5, x.q, 1, 4, x.b.Build().now - 5 * kMinute).priority_class = mid;

  // Without reservations job 5 takes node 1's 4 free GPUs; with one, they
  // are held for job 1, and only preempting job 101 would make room.
  PolicyConfig no_reservations;
  no_reservations.max_reservations = 0;
  const Decisions without = Decide(x.b.Build(), no_reservations);
  ASSERT_NE(AdmissionOf(without, 5), nullptr);

  const Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, 1);
  EXPECT_TRUE(d.preemptions.empty()) << d.preemptions[0].message;
  ASSERT_NE(PendingOf(d, 5), nullptr);
  EXPECT_EQ(PendingOf(d, 5)->reason, PendingReason::kNoCapacity);
}

// Property: a reservation is never delayed by what the cycle admitted or
// preempted. On random snapshots with time limits and preemption policies,
// stop the cycle's victims, apply its admissions, move the clock to the first
// reservation's start, end every attempt whose limit has passed, and leave
// only the reserved job pending: it is admitted.
TEST(BackfillPropertyTest, ReservationIsNeverDelayedByTheCycle) {
  std::mt19937_64 rng(7);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int checked = 0;
  int backfilled = 0;
  size_t preempted = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Snapshot s =
        MakeSyntheticSnapshot({.nodes = static_cast<int>(uniform(4, 60)),
                               .gpus_per_node = 8,
                               .nodes_per_rack = 4,
                               .racks_per_block = 2,
                               .queues = static_cast<int>(uniform(1, 6)),
                               .cohorts = static_cast<int>(uniform(0, 2)),
                               .pending = static_cast<int>(uniform(10, 200)),
                               .busy_fraction = 0.4 + uniform(0, 5) / 10.0,
                               .seed = rng()});
    for (RunningAttempt& r : s.running) {
      if (uniform(0, 9) < 8) {
        r.time_limit_micros =
            (s.now - r.start_time) + uniform(1, 240) * kMinute;
      }
    }
    for (PendingJob& j : s.pending) {
      if (uniform(0, 9) < 6) j.time_limit_micros = uniform(5, 300) * kMinute;
    }
    for (Queue& q : s.queues) {
      if (uniform(0, 1) == 0) {
        q.within_queue_preemption = WithinQueuePreemption::kLowerPriority;
        q.reclaim_within_cohort = ReclaimWithinCohort::kAny;
      }
    }
    const Decisions d = Decide(s);
    for (const Admission& a : d.admissions) backfilled += a.backfill;
    preempted += d.preemptions.size();
    if (d.reservations.empty()) continue;
    const Reservation r = d.reservations[0];
    Scheduler scheduler(s);
    for (const Preemption& p : d.preemptions)
      ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
    for (const Admission& a : d.admissions)
      ASSERT_TRUE(scheduler.ApplyAdmission(a));
    scheduler.SetNow(r.start_time);
    std::vector<JobId> ended;
    for (const RunningAttempt& a : scheduler.snapshot().running) {
      if (a.time_limit_micros > 0 &&
          a.start_time + a.time_limit_micros <= r.start_time) {
        ended.push_back(a.job);
      }
    }
    for (JobId id : ended) ASSERT_TRUE(scheduler.CompleteRunning(id));
    std::vector<JobId> others;
    for (const PendingJob& j : scheduler.snapshot().pending) {
      if (j.id != r.job) others.push_back(j.id);
    }
    for (JobId id : others) ASSERT_TRUE(scheduler.RemovePending(id));
    const Decisions later = scheduler.Cycle();
    ASSERT_EQ(later.admissions.size(), 1u) << PendingOf(later, r.job)->message;
    EXPECT_EQ(later.admissions[0].job, r.job);
    ++checked;
  }
  EXPECT_GT(checked, 50);
  EXPECT_GT(backfilled, 20);
  EXPECT_GT(preempted, 20u);
}

// --- Budgets (BUDGET_HOLD) ---

struct BudgetSetup {
  SnapshotBuilder b;
  FlavorId od;
  QueueId q;
};

// One on-demand flavor at 2.00 per GPU-hour; queue "research" spends budget
// "acme"; 1-GPU jobs with a 10 h time limit cost 20.00 each.
BudgetSetup OneBudget(int64_t remaining_micros) {
  BudgetSetup x;
  SnapshotBuilder& b = x.b;
  x.od = b.AddFlavor("od");
  b.snapshot().flavors[x.od].price_micros_per_gpu_hour = 2000000;
  b.AddNode(x.od, 8, 0, 0);
  x.q = b.AddQueue("research");
  b.AddGpuQuota(x.q, x.od, 8);
  b.snapshot().budgets.push_back(
      {.name = "acme", .remaining_micros = remaining_micros});
  b.snapshot().queues[x.q].budget = 0;
  return x;
}

TEST(BudgetTest, HoldsJobsWhoseExpectedCostExceedsWhatRemains) {
  BudgetSetup x = OneBudget(50000000);  // 50.00: two jobs fit, not three.
  for (JobId id = 1; id <= 3; ++id)
    x.b.AddJob(id, x.q, 1, 1, id).time_limit_micros = 10 * kHour;
  const Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.admissions.size(), 2u);
  const PendingDecision* held = PendingOf(d, 3);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->reason, PendingReason::kBudgetHold);
  EXPECT_EQ(held->message,
            "BUDGET_HOLD: budget acme has 10.000000 left, expected cost "
            "20.000000 (flavor od)");
}

TEST(BudgetTest, OverspentBudgetHoldsEverything) {
  BudgetSetup x = OneBudget(-1);
  x.b.AddJob(1, x.q, 1, 1).time_limit_micros = kHour;
  const Decisions d = Decide(x.b.Build());
  EXPECT_TRUE(d.admissions.empty());
  EXPECT_THAT(PendingOf(d, 1)->message.str(),
              StartsWith("BUDGET_HOLD: budget acme has -0.000001 left"));
}

TEST(BudgetTest, FallsBackToAFlavorWithinBudget) {
  BudgetSetup x = OneBudget(10000000);  // 10.00
  // A spot flavor at 0.50/GPU-h: 10 h cost 5.00 plus reclaims.
  const FlavorId spot = x.b.AddFlavor("spot", FlavorKind::kSpot);
  x.b.snapshot().flavors[spot].price_micros_per_gpu_hour = 500000;
  x.b.snapshot().flavors[spot].reclaim_rate_per_hour = 0.01;
  x.b.AddNode(spot, 8, 1, 1);
  x.b.AddGpuQuota(x.q, spot, 8);
  PendingJob& job = x.b.AddJob(1, x.q, 1, 1);
  job.time_limit_micros = 10 * kHour;
  // Spot allowed: the cheaper spot flavor is first anyway.
  Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].flavor, spot);
  // Spot preferred, but the spot node is full: on-demand (20.00) is over
  // budget, so the job waits for spot rather than overrunning.
  x.b.snapshot().pending[0].spot_policy = SpotPolicy::kPreferred;
  x.b.snapshot().nodes[1].used.gpus = 8;
  d = Decide(x.b.Build());
  EXPECT_TRUE(d.admissions.empty());
  EXPECT_EQ(PendingOf(d, 1)->reason, PendingReason::kNoCapacity);
  EXPECT_THAT(PendingOf(d, 1)->message.str(),
              HasSubstr("budget acme has 10.000000 left, expected cost "
                        "20.000000 (flavor od)"));
}

TEST(BudgetTest, QueuesSharingABudgetSpendItTogether) {
  BudgetSetup x = OneBudget(30000000);  // 30.00: one 20.00 job.
  const QueueId other = x.b.AddQueue("other");
  x.b.AddGpuQuota(other, x.od, 8);
  x.b.snapshot().queues[other].budget = 0;
  x.b.AddJob(1, x.q, 1, 1, 1).time_limit_micros = 10 * kHour;
  x.b.AddJob(2, other, 1, 1, 2).time_limit_micros = 10 * kHour;
  const Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 1);
  EXPECT_EQ(PendingOf(d, 2)->reason, PendingReason::kBudgetHold);
}

TEST(BudgetTest, QueueWithoutBudgetIsUnlimited) {
  BudgetSetup x = OneBudget(0);
  x.b.snapshot().queues[x.q].budget.reset();
  x.b.AddJob(1, x.q, 1, 1).time_limit_micros = 1000 * kHour;
  EXPECT_EQ(Decide(x.b.Build()).admissions.size(), 1u);
}

// A project budget (PendingJob::budget) of `remaining_micros` next to the
// queue's budget "acme"; its id.
BudgetId AddProjectBudget(BudgetSetup& x, std::string name,
                          int64_t remaining_micros) {
  x.b.snapshot().budgets.push_back(
      {.name = std::move(name), .remaining_micros = remaining_micros});
  return static_cast<BudgetId>(x.b.snapshot().budgets.size() - 1);
}

TEST(BudgetTest, ProjectBudgetHoldsAJobItsQueueBudgetAffords) {
  BudgetSetup x = OneBudget(50000000);  // acme: 50.00.
  const BudgetId vision = AddProjectBudget(x, "acme/vision", 10000000);
  // 20.00 each: fits acme, not acme/vision.
  x.b.AddJob(1, x.q, 1, 1, 1).time_limit_micros = 10 * kHour;
  x.b.snapshot().pending.back().budget = vision;
  const Decisions d = Decide(x.b.Build());
  EXPECT_TRUE(d.admissions.empty());
  ASSERT_NE(PendingOf(d, 1), nullptr);
  EXPECT_EQ(PendingOf(d, 1)->reason, PendingReason::kBudgetHold);
  EXPECT_EQ(PendingOf(d, 1)->message,
            "BUDGET_HOLD: budget acme/vision has 10.000000 left, expected "
            "cost 20.000000 (flavor od)");
  // Where neither fits, the queue's budget is named.
  x.b.snapshot().budgets[0].remaining_micros = 5000000;
  EXPECT_EQ(PendingOf(Decide(x.b.Build()), 1)->message,
            "BUDGET_HOLD: budget acme has 5.000000 left, expected cost "
            "20.000000 (flavor od)");
}

TEST(BudgetTest, JobsOfAProjectShareItsBudgetAndSpendTheQueueBudgetToo) {
  BudgetSetup x = OneBudget(50000000);  // acme: 50.00.
  const BudgetId vision = AddProjectBudget(x, "acme/vision", 30000000);
  // Jobs 1 and 2 of acme/vision, 3 and 4 without a project: 20.00 each.
  for (JobId id = 1; id <= 4; ++id) {
    PendingJob& job = x.b.AddJob(id, x.q, 1, 1, id);
    job.time_limit_micros = 10 * kHour;
    if (id <= 2) job.budget = vision;
  }
  const Decisions d = Decide(x.b.Build());
  // Job 1: acme 50 -> 30, acme/vision 30 -> 10. Job 2 (20.00) does not fit
  // acme/vision's 10.00. Job 3: acme 30 -> 10. Job 4 does not fit acme's
  // 10.00: job 1's cost was charged to acme too.
  ASSERT_EQ(d.admissions.size(), 2u);
  EXPECT_NE(AdmissionOf(d, 1), nullptr);
  EXPECT_NE(AdmissionOf(d, 3), nullptr);
  EXPECT_EQ(PendingOf(d, 2)->message,
            "BUDGET_HOLD: budget acme/vision has 10.000000 left, expected "
            "cost 20.000000 (flavor od)");
  EXPECT_EQ(PendingOf(d, 4)->message,
            "BUDGET_HOLD: budget acme has 10.000000 left, expected cost "
            "20.000000 (flavor od)");
}

TEST(BudgetTest, JobWithoutAProjectBudgetIgnoresAnotherProjectsBudget) {
  BudgetSetup x = OneBudget(0);
  x.b.snapshot().queues[x.q].budget.reset();  // No queue budget.
  const BudgetId beta = AddProjectBudget(x, "beta/x", 0);
  // Alike but for the budget: job 1 (beta/x, 20.00) first, then job 2.
  x.b.AddJob(1, x.q, 1, 1, 1).time_limit_micros = 10 * kHour;
  x.b.snapshot().pending.back().budget = beta;
  x.b.AddJob(2, x.q, 1, 1, 2).time_limit_micros = 10 * kHour;
  const Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 2);
  EXPECT_EQ(PendingOf(d, 1)->message,
            "BUDGET_HOLD: budget beta/x has 0.000000 left, expected cost "
            "20.000000 (flavor od)");
  // The same through the incremental scheduler, cycle after cycle.
  Scheduler scheduler(x.b.Build());
  EXPECT_EQ(scheduler.Cycle(), d);
}

TEST(BudgetTest, ProjectBudgetSharedAcrossQueues) {
  BudgetSetup x = OneBudget(100000000);  // acme: 100.00.
  const QueueId other = x.b.AddQueue("other");
  x.b.AddGpuQuota(other, x.od, 8);  // No queue budget.
  const BudgetId vision = AddProjectBudget(x, "acme/vision", 30000000);
  x.b.AddJob(1, x.q, 1, 1, 1).time_limit_micros = 10 * kHour;
  x.b.snapshot().pending.back().budget = vision;
  x.b.AddJob(2, other, 1, 1, 2).time_limit_micros = 10 * kHour;
  x.b.snapshot().pending.back().budget = vision;
  const Decisions d = Decide(x.b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 1);
  EXPECT_EQ(PendingOf(d, 2)->message,
            "BUDGET_HOLD: budget acme/vision has 10.000000 left, expected "
            "cost 20.000000 (flavor od)");
}

// Users' hourly spend caps (Budget::hourly): $10/h each for alice and bob,
// 2-GPU jobs at 2.00 per GPU-hour ($4/h each, whatever their time limits).
// Two of alice's fit, her third waits naming her cap; bob's is admitted
// beside them; a job of alice's project, whose cap there has $3/h left,
// waits naming that cap though her tenant cap would take it.
TEST(BudgetTest, UserHourlyCapsAdmitWhatFitsTheirRate) {
  BudgetSetup x = OneBudget(1'000'000'000'000);  // not binding
  auto cap = [&](const std::string& name, const std::string& user,
                 int64_t cap_micros, int64_t remaining_micros) {
    x.b.snapshot().budgets.push_back({.name = name,
                                      .remaining_micros = remaining_micros,
                                      .hourly = true,
                                      .user = user,
                                      .hourly_cap_micros = cap_micros});
    return static_cast<BudgetId>(x.b.snapshot().budgets.size() - 1);
  };
  const BudgetId alice = cap("acme", "alice", 10'000'000, 10'000'000);
  const BudgetId bob = cap("acme", "bob", 10'000'000, 10'000'000);
  const BudgetId alice_nlp = cap("nlp", "alice", 5'000'000, 3'000'000);
  for (JobId id = 1; id <= 3; ++id) {
    PendingJob& j = x.b.AddJob(id, x.q, 1, 2, id);
    j.time_limit_micros = id * 100 * kHour;
    j.tenant_rate_cap = alice;
  }
  x.b.AddJob(4, x.q, 1, 2, 4).tenant_rate_cap = bob;
  PendingJob& nlp = x.b.AddJob(5, x.q, 1, 2, 0);  // first: $4/h > $3/h
  nlp.tenant_rate_cap = alice;
  nlp.project_rate_cap = alice_nlp;
  const Decisions d = Decide(x.b.Build());
  std::vector<JobId> admitted;
  for (const Admission& a : d.admissions) admitted.push_back(a.job);
  std::sort(admitted.begin(), admitted.end());
  EXPECT_EQ(admitted, (std::vector<JobId>{1, 2, 4}));
  ASSERT_NE(PendingOf(d, 3), nullptr);
  EXPECT_EQ(PendingOf(d, 3)->reason, PendingReason::kBudgetHold);
  EXPECT_EQ(PendingOf(d, 3)->message,
            "BUDGET_HOLD: user alice's hourly spend cap of 10.000000/h in "
            "budget acme: 8.000000/h running, this job needs 4.000000/h "
            "(flavor od)");
  ASSERT_NE(PendingOf(d, 5), nullptr);
  EXPECT_EQ(PendingOf(d, 5)->message,
            "BUDGET_HOLD: user alice's hourly spend cap of 5.000000/h in "
            "budget nlp: 2.000000/h running, this job needs 4.000000/h "
            "(flavor od)");
}

TEST(SnapshotValidationTest, NamesTheBadField) {
  auto invalid = [](const Snapshot& s) {
    const Decisions d = Decide(s);
    EXPECT_EQ(d.pending.size(), 1u);
    return d.pending.empty() ? std::string() : d.pending[0].message.str();
  };
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1);
    x.b.snapshot().queues[x.q].budget = 3;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: queues[0].budget: out of range");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1).budget = 1;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: pending[0].budget: out of range");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1).budget = -1;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: pending[0].budget: out of range");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1);
    x.b.snapshot().flavors[0].price_micros_per_cpu_hour = -1;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: flavors[0].price_micros_per_cpu_hour: must "
              "be >= 0");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1);
    x.b.snapshot().flavors[0].price_micros_per_gib_hour = -1;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: flavors[0].price_micros_per_gib_hour: must "
              "be >= 0");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1);
    x.b.snapshot().flavors[0].price_micros_per_gpu_hour = -1;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: flavors[0].price_micros_per_gpu_hour: must "
              "be >= 0");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1);
    x.b.snapshot().flavors[0].reclaim_rate_per_hour =
        std::numeric_limits<double>::quiet_NaN();
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: flavors[0].reclaim_rate_per_hour: must be "
              "finite and >= 0");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1).time_limit_micros = -5;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: pending[0].time_limit_micros: must be >= 0");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1).checkpoint_interval_micros = -1;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: pending[0].checkpoint_interval_micros: must "
              "be >= 0");
  }
  {
    BudgetSetup x = OneBudget(0);
    x.b.AddJob(1, x.q, 1, 1);
    x.b.AddRunning(9, x.q, x.od, 0, 1);
    x.b.snapshot().running[0].time_limit_micros = -1;
    EXPECT_EQ(invalid(x.b.Build()),
              "INVALID_SNAPSHOT: running[0].time_limit_micros: must be >= 0");
  }
}

}  // namespace
}  // namespace trainyard::scheduler::policy
