// PlanPreemption finds the same plan with and without CycleState's optional
// lists that narrow its scan of running work (per flavor, per cohort tree and
// flavor, per queue and flavor, the queues of each tree, and the lowest
// priority of each queue's attempts on each flavor), on synthetic
// snapshots with random preemption policies, priorities, running ages,
// attempts already taken as victims and attempts a reservation waits for.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/preemption.h"
#include "services/scheduler/policy/quota.h"
#include "services/scheduler/policy/snapshot.h"
#include "tests/support/policy/synthetic.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::kHour;

struct Lists {
  std::vector<int> tree_of_queue;
  std::vector<std::vector<int>> of_flavor, of_tree_flavor, of_queue_flavor;
  std::vector<std::vector<QueueId>> queues_of_tree_flavor;
  std::vector<int32_t> lowest_priority_of_queue_flavor;
};

// The lists as the engine builds them (cycle_preemption.cc), from scratch.
Lists BuildLists(const Snapshot& s) {
  const size_t flavors = s.flavors.size();
  Lists l;
  for (size_t q = 0; q < s.queues.size(); ++q) {
    const int root = CohortRoot(s, static_cast<QueueId>(q));
    l.tree_of_queue.push_back(
        root >= 0 ? root : static_cast<int>(s.cohorts.size() + q));
  }
  l.of_flavor.resize(flavors);
  l.of_tree_flavor.resize((s.cohorts.size() + s.queues.size()) * flavors);
  l.queues_of_tree_flavor.resize(l.of_tree_flavor.size());
  l.of_queue_flavor.resize(s.queues.size() * flavors);
  l.lowest_priority_of_queue_flavor.assign(l.of_queue_flavor.size(),
                                           std::numeric_limits<int32_t>::max());
  for (size_t i = 0; i < s.running.size(); ++i) {
    const RunningAttempt& r = s.running[i];
    const int index = static_cast<int>(i);
    const size_t tree_flavor =
        static_cast<size_t>(l.tree_of_queue[r.queue]) * flavors + r.flavor;
    l.of_flavor[r.flavor].push_back(index);
    l.of_tree_flavor[tree_flavor].push_back(index);
    std::vector<int>& of_queue =
        l.of_queue_flavor[static_cast<size_t>(r.queue) * flavors + r.flavor];
    if (of_queue.empty())
      l.queues_of_tree_flavor[tree_flavor].push_back(r.queue);
    of_queue.push_back(index);
    const PriorityClass& pc = s.priority_classes[r.priority_class];
    int32_t& lowest =
        l.lowest_priority_of_queue_flavor[static_cast<size_t>(r.queue) *
                                              flavors +
                                          r.flavor];
    if (pc.preemptible) lowest = std::min(lowest, pc.value);
  }
  return l;
}

TEST(PreemptionScanTest, NarrowedScansFindTheSamePlans) {
  int plans = 0, reclaims = 0, within_queue = 0, failures = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    std::mt19937_64 rng(seed);
    auto uniform = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    SyntheticSpec spec;
    spec.nodes = 160;
    spec.queues = 16;
    spec.cohorts = 12;  // Two trees: 0 (with 1-9) and 10 (with 11).
    spec.pending = 120;
    spec.busy_fraction = 0.8;
    spec.seed = seed;
    Snapshot s = MakeSyntheticSnapshot(spec);
    for (size_t q = 0; q < s.queues.size(); ++q) {
      Queue& queue = s.queues[q];
      if (q % 8 == 7) queue.cohort.reset();
      queue.within_queue_preemption =
          static_cast<WithinQueuePreemption>(uniform(0, 2));
      queue.reclaim_within_cohort =
          static_cast<ReclaimWithinCohort>(uniform(0, 2));
      queue.fair_share_preemption = uniform(0, 3) == 0;
    }
    s.priority_classes[1].preemptible = uniform(0, 3) != 0;
    for (RunningAttempt& r : s.running) {
      r.priority_class = static_cast<PriorityClassId>(uniform(0, 2));
      r.start_time = s.now - uniform(0, 2 * kHour);
      if (uniform(0, 1) == 0)
        r.last_checkpoint_time =
            r.start_time + uniform(0, s.now - r.start_time);
    }
    PolicyConfig config;
    config.preempt_for_capacity = seed % 3 == 0;
    config.min_runtime_guarantee = seed % 4 == 0 ? kHour : 0;

    QuotaTree quota(s);
    std::vector<Resources> free;
    Resources total;
    std::vector<std::vector<NodeId>> nodes_of_flavor(s.flavors.size());
    for (size_t n = 0; n < s.nodes.size(); ++n) {
      Resources f = s.nodes[n].capacity;
      f -= s.nodes[n].used;
      free.push_back(f);
      if (s.nodes[n].schedulable) total += s.nodes[n].capacity;
      nodes_of_flavor[s.nodes[n].flavor].push_back(static_cast<NodeId>(n));
    }
    std::vector<bool> preempted(s.running.size()), awaited(s.running.size());
    for (size_t i = 0; i < s.running.size(); ++i) {
      preempted[i] = uniform(0, 9) == 0;
      awaited[i] = uniform(0, 19) == 0;
    }
    const Lists lists = BuildLists(s);
    const CycleState plain{.quota = &quota,
                           .free = &free,
                           .nodes_of_flavor = &nodes_of_flavor,
                           .total = total,
                           .preempted = &preempted,
                           .awaited = &awaited};
    CycleState narrowed = plain;
    narrowed.running_of_flavor = &lists.of_flavor;
    narrowed.tree_of_queue = &lists.tree_of_queue;
    narrowed.running_of_tree_flavor = &lists.of_tree_flavor;
    narrowed.running_of_queue_flavor = &lists.of_queue_flavor;
    narrowed.queues_of_tree_flavor = &lists.queues_of_tree_flavor;
    narrowed.lowest_priority_of_queue_flavor =
        &lists.lowest_priority_of_queue_flavor;
    // Without the lowest priorities; only per tree and flavor.
    CycleState by_queue = narrowed;
    by_queue.lowest_priority_of_queue_flavor = nullptr;
    CycleState by_tree = by_queue;
    by_tree.running_of_queue_flavor = nullptr;
    by_tree.queues_of_tree_flavor = nullptr;

    for (const PendingJob& job : s.pending) {
      for (FlavorId f = 0; f < static_cast<FlavorId>(s.flavors.size()); ++f) {
        const std::optional<PreemptionPlan> want =
            PlanPreemption(s, config, plain, job, f);
        for (const CycleState* state : {&narrowed, &by_queue, &by_tree}) {
          const std::optional<PreemptionPlan> got =
              PlanPreemption(s, config, *state, job, f);
          ASSERT_EQ(got.has_value(), want.has_value())
              << "seed " << seed << " job " << job.id << " flavor " << f;
          if (!want.has_value()) continue;
          EXPECT_EQ(got->victims, want->victims)
              << "seed " << seed << " job " << job.id << " flavor " << f;
          EXPECT_EQ(got->reasons, want->reasons);
          EXPECT_EQ(got->placement.worker_nodes, want->placement.worker_nodes);
        }
        if (!want.has_value()) {
          ++failures;
          continue;
        }
        ++plans;
        for (PreemptionReason reason : want->reasons) {
          reclaims += reason == PreemptionReason::kReclaimedByCohort;
          within_queue += reason == PreemptionReason::kPreemptedByPriority;
        }
      }
    }
  }
  // The snapshots exercise both outcomes and the rules the lists narrow.
  EXPECT_GT(plans, 50);
  EXPECT_GT(failures, 50);
  EXPECT_GT(reclaims, 10);
  EXPECT_GT(within_queue, 10);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
