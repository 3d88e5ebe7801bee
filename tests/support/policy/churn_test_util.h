// Test helper: the incremental Scheduler through cycles of churn.
#ifndef TRAINYARD_TESTS_SUPPORT_POLICY_CHURN_TEST_UTIL_H_
#define TRAINYARD_TESTS_SUPPORT_POLICY_CHURN_TEST_UTIL_H_

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "tests/support/policy/synthetic.h"

namespace trainyard::scheduler::policy::testing {

// Runs the incremental Scheduler with `config` for 5 cycles on each of 4
// busy synthetic snapshots (24 queues in 6 cohorts, 1,500 pending). Each
// cycle's decisions must equal Decide()'s, with the config and with its
// speed-ups (equivalence classes, placement index) off; `inspect` sees them
// with the cycle's snapshot. Between cycles: preemptions and admissions are
// applied, a quarter of the running work ends, 40 jobs arrive and a minute
// passes.
inline void CheckIncrementalUnderChurn(
    const PolicyConfig& config,
    const std::function<void(const Decisions&, const Snapshot&)>& inspect) {
  PolicyConfig plain = config;
  plain.use_equivalence_classes = false;
  plain.use_placement_index = false;
  std::mt19937_64 rng(2611);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Scheduler scheduler(MakeSyntheticSnapshot({.nodes = 120,
                                               .nodes_per_rack = 4,
                                               .racks_per_block = 3,
                                               .queues = 24,
                                               .cohorts = 6,
                                               .pending = 1500,
                                               .busy_fraction = 0.5,
                                               .seed = seed}),
                        config);
    JobId next = 10'000'000;
    for (int cycle = 0; cycle < 5; ++cycle) {
      SCOPED_TRACE("cycle " + std::to_string(cycle));
      const Decisions got = scheduler.Cycle();
      ASSERT_EQ(got, Decide(scheduler.snapshot(), config));
      ASSERT_EQ(got, Decide(scheduler.snapshot(), plain));
      inspect(got, scheduler.snapshot());
      for (const Preemption& p : got.preemptions)
        ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
      for (const Admission& a : got.admissions)
        ASSERT_TRUE(scheduler.ApplyAdmission(a));
      std::vector<JobId> done;
      for (const RunningAttempt& r : scheduler.snapshot().running)
        if (rng() % 4 == 0) done.push_back(r.job);
      for (JobId id : done) ASSERT_TRUE(scheduler.CompleteRunning(id));
      for (int k = 0; k < 40; ++k)
        scheduler.AddPending(
            MakeSyntheticJob(scheduler.snapshot(), next++, rng));
      scheduler.SetNow(scheduler.snapshot().now + int64_t{60} * 1000 * 1000);
    }
  }
}

}  // namespace trainyard::scheduler::policy::testing

#endif  // TRAINYARD_TESTS_SUPPORT_POLICY_CHURN_TEST_UTIL_H_
