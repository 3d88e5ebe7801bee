#include "services/scheduler/policy/pricing.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/snapshot.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::kHour;
using testing::kMinute;
using testing::SnapshotBuilder;

PendingJob Job(int32_t workers, int64_t gpus) {
  return {.id = 1, .workers = workers, .worker = {.gpus = gpus}};
}

TEST(PricingTest, ExpectedRuntimeUsesEstimateThenTimeLimitThenDefault) {
  PolicyConfig config;
  config.default_expected_runtime = 3 * kHour;
  PendingJob job = Job(1, 1);
  EXPECT_EQ(ExpectedRuntime(job, config), 3 * kHour);
  job.time_limit_micros = 2 * kHour;
  EXPECT_EQ(ExpectedRuntime(job, config), 2 * kHour);
  job.expected_runtime_micros = kHour;
  EXPECT_EQ(ExpectedRuntime(job, config), kHour);
}

TEST(PricingTest, LossPerReclaimIsHalfTheIntervalPlusRestart) {
  PolicyConfig config;
  config.restart_overhead = 10 * kMinute;
  PendingJob job = Job(1, 1);
  job.expected_runtime_micros = 10 * kHour;
  job.checkpoint_interval_micros = 2 * kHour;
  const Flavor spot{.kind = FlavorKind::kSpot, .reclaim_rate_per_hour = 0.1};
  EXPECT_EQ(LossPerReclaim(job, spot, config), 70 * kMinute);
  // A job that cannot checkpoint loses half its runtime on average.
  job.can_checkpoint = false;
  EXPECT_EQ(LossPerReclaim(job, spot, config), 5 * kHour + 10 * kMinute);
}

TEST(PricingTest, FlavorRestartOverheadReplacesTheDefault) {
  PolicyConfig config;
  config.restart_overhead = 10 * kMinute;
  PendingJob job = Job(1, 1);
  job.expected_runtime_micros = 10 * kHour;
  job.checkpoint_interval_micros = 2 * kHour;
  Flavor spot{.kind = FlavorKind::kSpot, .reclaim_rate_per_hour = 0.1};
  EXPECT_EQ(RestartOverhead(spot, config), 10 * kMinute);
  spot.restart_overhead_micros = 2 * kMinute;  // A fast Slurm requeue.
  EXPECT_EQ(RestartOverhead(spot, config), 2 * kMinute);
  EXPECT_EQ(LossPerReclaim(job, spot, config), 62 * kMinute);
  // 1 expected reclaim x 62 min lost.
  EXPECT_EQ(InflatedRuntime(job, spot, config), 11 * kHour + 2 * kMinute);
  spot.restart_overhead_micros = 0;  // Set to zero is not "unset".
  EXPECT_EQ(LossPerReclaim(job, spot, config), 60 * kMinute);
  spot.restart_overhead_micros = 45 * kMinute;  // A slow VM replacement.
  EXPECT_EQ(InflatedRuntime(job, spot, config), 11 * kHour + 45 * kMinute);
}

TEST(PricingTest, ExpectedCostInflatesRuntimeByReclaims) {
  PolicyConfig config;
  config.restart_overhead = 10 * kMinute;
  PendingJob job = Job(2, 4);  // 8 GPUs.
  job.expected_runtime_micros = 10 * kHour;
  job.checkpoint_interval_micros = 2 * kHour;
  const Flavor on_demand{.price_micros_per_gpu_hour = 2000000};
  const Flavor spot{.kind = FlavorKind::kSpot,
                    .price_micros_per_gpu_hour = 2000000,
                    .reclaim_rate_per_hour = 0.1};
  EXPECT_EQ(InflatedRuntime(job, on_demand, config), 10 * kHour);
  // 1 expected reclaim x 70 min lost.
  EXPECT_EQ(InflatedRuntime(job, spot, config), 11 * kHour + 10 * kMinute);
  EXPECT_EQ(ExpectedCostMicros(job, on_demand, config), 160000000);
  // 2,000,000 x 8 x 11.1666... h = 178,666,666.67 -> rounded half up.
  EXPECT_EQ(ExpectedCostMicros(job, spot, config), 178666667);
}

TEST(PricingTest, ExpectedCostSaturatesInsteadOfOverflowing) {
  PendingJob job = Job(1 << 20, 1 << 20);
  job.expected_runtime_micros = std::numeric_limits<int64_t>::max() / 2;
  const Flavor f{.kind = FlavorKind::kSpot,
                 .price_micros_per_gpu_hour = 1 << 30,
                 .reclaim_rate_per_hour = 1e6};
  EXPECT_EQ(ExpectedCostMicros(job, f, PolicyConfig{}),
            std::numeric_limits<int64_t>::max());
}

// Queue 0 lists: od-expensive, od-cheap, spot (price 1.5, reclaim rate r).
struct PricedCase {
  SnapshotBuilder b;
  FlavorId od_expensive, od_cheap, spot;
};

PricedCase PricedSetup(double reclaim_rate) {
  PricedCase s;
  s.od_expensive = s.b.AddFlavor("od-expensive");
  s.od_cheap = s.b.AddFlavor("od-cheap");
  s.spot = s.b.AddFlavor("spot", FlavorKind::kSpot);
  Snapshot& snap = s.b.snapshot();
  snap.flavors[s.od_expensive].price_micros_per_gpu_hour = 4000000;
  snap.flavors[s.od_cheap].price_micros_per_gpu_hour = 3000000;
  snap.flavors[s.spot].price_micros_per_gpu_hour = 1500000;
  snap.flavors[s.spot].reclaim_rate_per_hour = reclaim_rate;
  const QueueId q = s.b.AddQueue("q");
  for (FlavorId f : {s.od_expensive, s.od_cheap, s.spot}) {
    s.b.AddNode(f, 8, f, f);
    s.b.AddGpuQuota(q, f, 64);
  }
  return s;
}

PendingJob& AddPricedJob(PricedCase& s, SpotPolicy policy) {
  PendingJob& job = s.b.AddJob(1, 0, 1, 8);
  job.spot_policy = policy;
  job.expected_runtime_micros = 10 * kHour;
  job.checkpoint_interval_micros = 30 * kMinute;
  return job;
}

FlavorId AdmittedFlavor(const PricedCase& s) {
  const Decisions d = Decide(s.b.Build());
  EXPECT_EQ(d.admissions.size(), 1u);
  return d.admissions.empty() ? -1 : d.admissions[0].flavor;
}

TEST(PricingTest, CandidatesAreOrderedByExpectedCost) {
  PricedCase s = PricedSetup(0.1);
  AddPricedJob(s, SpotPolicy::kAllowed);
  const PendingJob& job = s.b.Build().pending[0];
  EXPECT_EQ(CandidateFlavors(s.b.Build(), job, PolicyConfig{}),
            (std::vector<FlavorId>{s.spot, s.od_cheap, s.od_expensive}));
  EXPECT_EQ(AdmittedFlavor(s), s.spot);
}

TEST(PricingTest, CheaperOnDemandFlavorWinsOverQueueOrder) {
  PricedCase s = PricedSetup(0.1);
  AddPricedJob(s, SpotPolicy::kNever);
  EXPECT_EQ(AdmittedFlavor(s), s.od_cheap);
}

TEST(PricingTest, FrequentReclaimsMakeSpotMoreExpensive) {
  // 1.5 x (1 + 1.5/h x (15 + 10) min) = 1.5 x 1.625 = 2.44 < 3: spot.
  PricedCase cheap = PricedSetup(1.5);
  AddPricedJob(cheap, SpotPolicy::kAllowed);
  EXPECT_EQ(AdmittedFlavor(cheap), cheap.spot);
  // Checkpointing every 4 h: 1.5 x (1 + 1.5 x (120 + 10) / 60) = 6.375 > 3.
  PricedCase rare = PricedSetup(1.5);
  AddPricedJob(rare, SpotPolicy::kAllowed).checkpoint_interval_micros =
      4 * kHour;
  EXPECT_EQ(AdmittedFlavor(rare), rare.od_cheap);
}

TEST(PricingTest, JobThatCannotCheckpointUsesSpotOnlyWhenRequired) {
  for (SpotPolicy policy : {SpotPolicy::kAllowed, SpotPolicy::kPreferred}) {
    PricedCase s = PricedSetup(0.0);  // Spot is cheapest and never reclaimed.
    AddPricedJob(s, policy).can_checkpoint = false;
    EXPECT_EQ(AdmittedFlavor(s), s.od_cheap);
  }
  PricedCase s = PricedSetup(0.0);
  AddPricedJob(s, SpotPolicy::kRequired).can_checkpoint = false;
  EXPECT_EQ(AdmittedFlavor(s), s.spot);
  // Only spot quota: allowed but cannot checkpoint => no eligible flavor.
  SnapshotBuilder b;
  const FlavorId spot = b.AddFlavor("spot", FlavorKind::kSpot);
  b.AddNode(spot, 8);
  const QueueId q = b.AddQueue("q");
  b.AddGpuQuota(q, spot, 8);
  b.AddJob(1, q, 1, 8).can_checkpoint = false;
  const Decisions d = Decide(b.Build());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoEligibleFlavor);
}

TEST(PricingTest, PreferredTakesSpotEvenWhenDearer) {
  PricedCase s = PricedSetup(1.5);
  AddPricedJob(s, SpotPolicy::kPreferred).checkpoint_interval_micros =
      4 * kHour;
  EXPECT_EQ(AdmittedFlavor(s), s.spot);
}

TEST(PricingTest, FallsBackToNextCheapestWithoutCapacityOrQuota) {
  PricedCase s = PricedSetup(0.1);
  AddPricedJob(s, SpotPolicy::kAllowed);
  s.b.snapshot().nodes[s.spot].used.gpus = 4;  // Spot node half full.
  EXPECT_EQ(AdmittedFlavor(s), s.od_cheap);
  s.b.snapshot().queues[0].quotas[s.od_cheap].resources[0]->nominal = 4;
  EXPECT_EQ(AdmittedFlavor(s), s.od_expensive);
}

TEST(PricingTest, FlavorRestartOverheadDecidesBetweenSpotAndOnDemand) {
  // Spot at 1.5 with 1.5 reclaims/h, checkpoint every 30 min (15 min lost per
  // reclaim) against on-demand at 3: with the default 10 min overhead spot
  // costs 1.5 x (1 + 1.5 x 25/60) = 2.44 (< 3); with a 60 min overhead on the
  // spot flavor 1.5 x (1 + 1.5 x 75/60) = 4.31 (> 3).
  PricedCase s = PricedSetup(1.5);
  AddPricedJob(s, SpotPolicy::kAllowed);
  EXPECT_EQ(AdmittedFlavor(s), s.spot);
  s.b.snapshot().flavors[s.spot].restart_overhead_micros = 60 * kMinute;
  EXPECT_EQ(AdmittedFlavor(s), s.od_cheap);
  // The flavor's own value wins over the configured default either way.
  PolicyConfig config;
  config.restart_overhead = 0;
  const Snapshot snap = s.b.Build();
  EXPECT_EQ(Decide(snap, config).admissions.at(0).flavor, s.od_cheap);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
