// PolicyConfig::nominal_before_borrowing: Kueue's ordering across queues, in
// which a job its queue can take within nominal quota goes before every job
// that would borrow, whatever their priorities.
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

using ::testing::ElementsAre;
using testing::SnapshotBuilder;
using testing::SortedAdmitted;

// Cohort of queues a, b and c, 8 GPUs of nominal quota each (c is idle and
// lends its 8). a uses its 8 on n0, b uses `b_running` of n1, and
// `extra_gpus` more are free on another node. Pending: a's high-priority 4-GPU
// job 1 (it would borrow) and b's two low-priority 4-GPU jobs 2 and 3 (2 fits
// b's nominal quota; 3 would borrow once 2 is admitted).
struct NominalFirstFixture {
  explicit NominalFirstFixture(int64_t extra_gpus, int64_t b_running = 4,
                               int64_t free_gpus_in_n2 = 0) {
    const FlavorId f = b.AddFlavor("gpu");
    const CohortId cohort = b.AddCohort("c");
    const QueueId qa = b.AddGpuQueue("a", cohort, f, 8);
    const QueueId qb = b.AddGpuQueue("b", cohort, f, 8);
    b.AddGpuQueue("c", cohort, f, 8);
    const NodeId n0 = b.AddNode(f, 8), n1 = b.AddNode(f, 8);
    if (extra_gpus > 0) b.AddNode(f, extra_gpus);
    b.AddRunning(100, qa, f, n0, 8);
    b.AddRunning(101, qb, f, n1, b_running);
    if (free_gpus_in_n2 > 0) b.AddNode(f, free_gpus_in_n2);
    const PriorityClassId high = b.AddPriority("high", 100);
    const PriorityClassId low = b.AddPriority("low", 10);
    b.AddJob(1, qa, 1, 4, /*submit_time=*/30).priority_class = high;
    b.AddJob(2, qb, 1, 4, /*submit_time=*/10).priority_class = low;
    b.AddJob(3, qb, 1, 4, /*submit_time=*/20).priority_class = low;
  }
  SnapshotBuilder b;
};

std::vector<PolicyConfig> Configs(bool nominal_first) {
  std::vector<PolicyConfig> configs;
  for (bool classes : {true, false}) {
    for (bool index : {true, false}) {
      PolicyConfig config{.nominal_before_borrowing = nominal_first};
      config.use_equivalence_classes = classes;
      config.use_placement_index = index;
      configs.push_back(config);
    }
  }
  return configs;
}

TEST(NominalFirstTest, OffHigherPriorityGoesFirst) {
  // Room for one job: the high-priority borrower takes it.
  NominalFirstFixture fx(/*extra_gpus=*/0);
  for (const PolicyConfig& config : Configs(false))
    EXPECT_THAT(SortedAdmitted(Decide(fx.b.Build(), config)), ElementsAre(1));
}

TEST(NominalFirstTest, AJobWithinNominalQuotaGoesBeforeABorrower) {
  NominalFirstFixture fx(/*extra_gpus=*/0);
  for (const PolicyConfig& config : Configs(true))
    EXPECT_THAT(SortedAdmitted(Decide(fx.b.Build(), config)), ElementsAre(2));
}

TEST(NominalFirstTest, AQueuesNextJobBorrowsOnceItsFirstIsAdmitted) {
  // Room for two: b's job 2 (within nominal), then the high-priority
  // borrower 1 before b's job 3, which borrows after 2 is admitted. Were the
  // order computed from b's usage at the start of the cycle, 2 and 3 would
  // both go before 1.
  NominalFirstFixture fx(/*extra_gpus=*/4);
  for (const PolicyConfig& config : Configs(true))
    EXPECT_THAT(SortedAdmitted(Decide(fx.b.Build(), config)),
                ElementsAre(1, 2));
  for (const PolicyConfig& config : Configs(false))
    EXPECT_THAT(SortedAdmitted(Decide(fx.b.Build(), config)),
                ElementsAre(1, 2));
}

TEST(NominalFirstTest, PriorityOrdersJobsThatBorrow) {
  // b at its nominal quota too: both of the first jobs borrow, and the
  // high-priority one goes first although it was submitted last.
  NominalFirstFixture fx(/*extra_gpus=*/0, /*b_running=*/8,
                         /*free_gpus_in_n2=*/4);
  for (const PolicyConfig& config : Configs(true))
    EXPECT_THAT(SortedAdmitted(Decide(fx.b.Build(), config)), ElementsAre(1));
}

// The incremental Scheduler with the option on decides as Decide() does,
// with and without the speed-ups, through cycles of churn on busy cohorts;
// and the option changes the outcome somewhere on the way.
TEST(NominalFirstTest, IncrementalCyclesDecideAsDecideWithTheOptionOn) {
  int differs = 0, admitted = 0;
  testing::CheckIncrementalUnderChurn(
      PolicyConfig{.nominal_before_borrowing = true},
      [&](const Decisions& got, const Snapshot& snapshot) {
        differs += SortedAdmitted(got) != SortedAdmitted(Decide(snapshot, {}));
        admitted += static_cast<int>(got.admissions.size());
      });
  EXPECT_GT(differs, 0);
  EXPECT_GT(admitted, 100);
  std::printf("cycles where the option changed admissions %d, admitted %d\n",
              differs, admitted);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
