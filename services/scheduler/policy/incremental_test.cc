#include "services/scheduler/policy/incremental.h"

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/snapshot.h"
#include "services/scheduler/policy/synthetic.h"

namespace trainyard::scheduler::policy {
namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A small synthetic snapshot, sometimes with irregular details that make the
// scheduler fall back to PlaceGang: unlabelled nodes, a rack split across
// blocks, tiny CPU-only workers, partly used nodes.
Snapshot RandomSnapshot(std::mt19937_64& rng) {
  SyntheticSpec spec{.nodes = static_cast<int>(Uniform(rng, 1, 120)),
                     .gpus_per_node = static_cast<int>(Uniform(rng, 1, 8)),
                     .nodes_per_rack = static_cast<int>(Uniform(rng, 1, 6)),
                     .racks_per_block = static_cast<int>(Uniform(rng, 1, 4)),
                     .queues = static_cast<int>(Uniform(rng, 1, 30)),
                     .cohorts = static_cast<int>(Uniform(rng, 0, 12)),
                     .pending = static_cast<int>(Uniform(rng, 0, 400)),
                     .busy_fraction = Uniform(rng, 0, 10) / 10.0,
                     .seed = rng()};
  Snapshot s = MakeSyntheticSnapshot(spec);
  if (Uniform(rng, 0, 3) == 0 && !s.nodes.empty()) {
    Node& node = s.nodes[Uniform(rng, 0, s.nodes.size() - 1)];
    if (Uniform(rng, 0, 1) == 0) {
      node.rack = kNoLabel;
    } else {
      node.block = node.block + 1;
    }
  }
  // Some have two clusters (by block, so racks and blocks stay inside one).
  if (Uniform(rng, 0, 2) == 0) {
    for (Node& node : s.nodes) node.cluster = node.block % 2;
  }
  for (Node& node : s.nodes) {
    if (Uniform(rng, 0, 9) == 0) {
      node.used.cpu_millis =
          std::min(node.capacity.cpu_millis,
                   node.used.cpu_millis + Uniform(rng, 0, 48000));
    }
  }
  // Some snapshots preempt: every kind of policy on some queues, a
  // non-preemptible class, checkpoints of running work.
  if (Uniform(rng, 0, 2) == 0) {
    for (Queue& q : s.queues) {
      q.within_queue_preemption =
          static_cast<WithinQueuePreemption>(Uniform(rng, 0, 2));
      q.reclaim_within_cohort =
          static_cast<ReclaimWithinCohort>(Uniform(rng, 0, 2));
      q.fair_share_preemption = Uniform(rng, 0, 1) == 1;
    }
    if (!s.priority_classes.empty())
      s.priority_classes.back().preemptible = false;
    for (RunningAttempt& r : s.running) {
      if (Uniform(rng, 0, 1) == 0)
        r.last_checkpoint_time = r.start_time + Uniform(rng, 0, 3600) * 1000000;
    }
  }
  // Some have time limits (reservations and backfill) and budgets.
  if (Uniform(rng, 0, 1) == 0) {
    for (RunningAttempt& r : s.running) {
      if (Uniform(rng, 0, 9) < 7) {
        r.time_limit_micros =
            (s.now - r.start_time) + Uniform(rng, 1, 480) * 60 * 1000000;
      }
    }
    constexpr int64_t kLimits[] = {0, 1, 4, 24};
    for (PendingJob& job : s.pending) {
      job.time_limit_micros =
          kLimits[Uniform(rng, 0, 3)] * int64_t{3600} * 1000000;
    }
  }
  if (Uniform(rng, 0, 2) == 0) {
    const int budgets = static_cast<int>(Uniform(rng, 1, 3));
    for (int b = 0; b < budgets; ++b) {
      s.budgets.push_back(
          {.name = "budget-" + std::to_string(b),
           .remaining_micros = Uniform(rng, -1, 3000) * 1000000});
    }
    for (Queue& q : s.queues) {
      if (Uniform(rng, 0, 3) != 0) q.budget = Uniform(rng, 0, budgets - 1);
    }
  }
  for (PendingJob& job : s.pending) {
    if (Uniform(rng, 0, 19) == 0) {
      job.worker = {.gpus = 0, .cpu_millis = 500, .memory_bytes = 1 << 30};
    }
  }
  return s;
}

constexpr PolicyConfig kPlain{.use_placement_index = false,
                              .use_equivalence_classes = false};

void ExpectSame(const Decisions& want, const Decisions& got) {
  ASSERT_EQ(want.admissions.size(), got.admissions.size());
  for (size_t i = 0; i < want.admissions.size(); ++i)
    ASSERT_EQ(want.admissions[i], got.admissions[i]) << "admission " << i;
  ASSERT_EQ(want.preemptions, got.preemptions);
  ASSERT_EQ(want.reservations, got.reservations);
  ASSERT_EQ(want.pending.size(), got.pending.size());
  for (size_t i = 0; i < want.pending.size(); ++i) {
    ASSERT_EQ(want.pending[i], got.pending[i])
        << "pending " << i << ": " << want.pending[i].message << " vs "
        << got.pending[i].message;
  }
}

TEST(SchedulerTest, SameDecisionsAsDecideOnRandomSnapshots) {
  std::mt19937_64 rng(20261123);
  int admitted = 0;
  int preempted = 0;
  int reserved = 0;
  int backfilled = 0;
  int held = 0;
  for (int iteration = 0; iteration < 300; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Scheduler scheduler(RandomSnapshot(rng));
    for (int cycle = 0; cycle < 4; ++cycle) {
      SCOPED_TRACE("cycle " + std::to_string(cycle));
      const Decisions got = scheduler.Cycle();
      const Decisions want = Decide(scheduler.snapshot());
      ExpectSame(want, got);
      if (::testing::Test::HasFatalFailure()) return;
      // The speed-ups (placement index, equivalence classes) change nothing.
      ExpectSame(want, Decide(scheduler.snapshot(), kPlain));
      if (::testing::Test::HasFatalFailure()) return;
      admitted += static_cast<int>(got.admissions.size());
      preempted += static_cast<int>(got.preemptions.size());
      reserved += static_cast<int>(got.reservations.size());
      for (const Admission& a : got.admissions) backfilled += a.backfill;
      for (const PendingDecision& p : got.pending)
        held += p.reason == PendingReason::kBudgetHold;
      // Steady state: victims stop, admissions start running, some work
      // completes, new jobs arrive, some pending jobs are cancelled.
      for (const Preemption& p : got.preemptions)
        ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
      for (const Admission& a : got.admissions)
        ASSERT_TRUE(scheduler.ApplyAdmission(a));
      const Snapshot& s = scheduler.snapshot();
      std::vector<JobId> done;
      for (const RunningAttempt& r : s.running) {
        if (Uniform(rng, 0, 3) == 0) done.push_back(r.job);
      }
      for (JobId id : done) ASSERT_TRUE(scheduler.CompleteRunning(id));
      std::vector<JobId> cancelled;
      for (const PendingJob& j : s.pending) {
        if (Uniform(rng, 0, 19) == 0) cancelled.push_back(j.id);
      }
      for (JobId id : cancelled) ASSERT_TRUE(scheduler.RemovePending(id));
      if (!s.queues.empty()) {
        for (int k = 0, n = static_cast<int>(Uniform(rng, 0, 30)); k < n; ++k) {
          scheduler.AddPending(MakeSyntheticJob(
              s, 1000000 + iteration * 1000 + cycle * 100 + k, rng));
        }
      }
      scheduler.SetNow(s.now + Uniform(rng, 0, 600) * 1000 * 1000);
    }
  }
  EXPECT_GT(admitted, 1000);
  EXPECT_GT(preempted, 20);
  EXPECT_GT(reserved, 20);
  EXPECT_GT(backfilled, 20);
  EXPECT_GT(held, 20);
  std::printf(
      "admitted %d, preempted %d, reserved %d, backfilled %d, budget holds "
      "%d\n",
      admitted, preempted, reserved, backfilled, held);
}

TEST(SchedulerTest, InvalidJobDefersToDecide) {
  Scheduler scheduler(MakeSyntheticSnapshot(
      {.nodes = 10, .queues = 3, .cohorts = 1, .pending = 20}));
  PendingJob bad{.id = 999999, .queue = 99};
  scheduler.AddPending(bad);
  ExpectSame(Decide(scheduler.snapshot()), scheduler.Cycle());
  EXPECT_EQ(scheduler.Cycle().pending.front().reason,
            PendingReason::kInvalidSnapshot);
  ASSERT_TRUE(scheduler.RemovePending(999999));
  ExpectSame(Decide(scheduler.snapshot()), scheduler.Cycle());
  const Decisions d = scheduler.Cycle();
  for (const PendingDecision& p : d.pending)
    EXPECT_NE(p.reason, PendingReason::kInvalidSnapshot);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
