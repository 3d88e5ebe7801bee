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

// CPU-hours (per whole CPU) and GiB-hours are priced with GPU-hours, over
// the whole gang.
TEST(PricingTest, ExpectedCostPricesGpusCpusAndMemory) {
  const PolicyConfig config;
  PendingJob job = Job(2, 1);
  job.worker.cpu_millis = 4000;
  job.worker.memory_bytes = 16 * testing::kGiB;
  job.expected_runtime_micros = 90 * kMinute;
  const Flavor f{.price_micros_per_gpu_hour = 2000000,
                 .price_micros_per_cpu_hour = 50000,
                 .price_micros_per_gib_hour = 10000};
  // 2 x (2.00 + 4 x 0.05 + 16 x 0.01) per hour x 1.5 h = 2 x 2.36 x 1.5.
  EXPECT_EQ(ExpectedCostMicros(job, f, config), 7080000);
  // Each price alone: 2 x 2.00 x 1.5 = 6.00, 2 x 0.20 x 1.5 = 0.60,
  // 2 x 0.16 x 1.5 = 0.48.
  EXPECT_EQ(
      ExpectedCostMicros(job, {.price_micros_per_gpu_hour = 2000000}, config),
      6000000);
  EXPECT_EQ(
      ExpectedCostMicros(job, {.price_micros_per_cpu_hour = 50000}, config),
      600000);
  EXPECT_EQ(
      ExpectedCostMicros(job, {.price_micros_per_gib_hour = 10000}, config),
      480000);
}

// Fractions of a micro from CPU and memory are summed exactly and the total
// rounded once, half up.
TEST(PricingTest, ExpectedCostRoundsTheExactSumHalfUp) {
  const PolicyConfig config;
  PendingJob job = Job(1, 0);
  job.worker.cpu_millis = 2500;
  job.worker.memory_bytes = 3 * testing::kGiB + testing::kGiB / 2;
  job.expected_runtime_micros = kHour;
  const Flavor cpu_only{.price_micros_per_cpu_hour = 33333};
  const Flavor memory_only{.price_micros_per_gib_hour = 4001};
  const Flavor both{.price_micros_per_cpu_hour = 33333,
                    .price_micros_per_gib_hour = 4001};
  // 2.5 x 33333 = 83332.5 -> 83333; 3.5 x 4001 = 14003.5 -> 14004.
  EXPECT_EQ(ExpectedCostMicros(job, cpu_only, config), 83333);
  EXPECT_EQ(ExpectedCostMicros(job, memory_only, config), 14004);
  // Together exactly 97336 per hour (not 83333 + 14004).
  EXPECT_EQ(ExpectedCostMicros(job, both, config), 97336);
  // 7 minutes: 97336 x 7 / 60 = 11355.866... -> 11356.
  job.expected_runtime_micros = 7 * kMinute;
  EXPECT_EQ(ExpectedCostMicros(job, both, config), 11356);
  // 3 workers x 1 milli-CPU x 1 micro per CPU-hour for 1 h: 0.003 -> 0; with
  // 500 milli-CPU 1.5 -> 2 (half up); 499: 1.497 -> 1.
  job = Job(3, 0);
  job.expected_runtime_micros = kHour;
  const Flavor micro{.price_micros_per_cpu_hour = 1};
  job.worker.cpu_millis = 1;
  EXPECT_EQ(ExpectedCostMicros(job, micro, config), 0);
  job.worker.cpu_millis = 500;
  EXPECT_EQ(ExpectedCostMicros(job, micro, config), 2);
  job.worker.cpu_millis = 499;
  EXPECT_EQ(ExpectedCostMicros(job, micro, config), 1);
}

// The hourly price (what a user's hourly spend cap counts) is the gang's
// price for one hour whatever the runtime, reclaim rate or checkpointing.
TEST(PricingTest, HourlyPriceIsTheGangsPriceForOneHour) {
  PendingJob job = Job(3, 2);
  job.worker.cpu_millis = 2500;
  job.worker.memory_bytes = 3 * testing::kGiB + testing::kGiB / 2;
  job.expected_runtime_micros = 7 * kMinute;
  job.time_limit_micros = 90 * kMinute;
  job.can_checkpoint = false;
  const Flavor f{.kind = FlavorKind::kSpot,
                 .price_micros_per_gpu_hour = 2000000,
                 .price_micros_per_cpu_hour = 33333,
                 .price_micros_per_gib_hour = 4001,
                 .reclaim_rate_per_hour = 5.0};
  // Per worker: 2 x 2000000 + 2.5 x 33333 + 3.5 x 4001
  //   = 4000000 + 83332.5 + 14003.5 = 4097336; x 3 workers = 12292008.
  EXPECT_EQ(HourlyPriceMicros(job, f), 12292008);
  // The same as the expected cost of a one-hour run without reclaims.
  job.expected_runtime_micros = kHour;
  Flavor steady = f;
  steady.reclaim_rate_per_hour = 0.0;
  EXPECT_EQ(HourlyPriceMicros(job, f),
            ExpectedCostMicros(job, steady, PolicyConfig{}));
  // Rounded once, half up: 3 x 1.5 micro-CPU-hours -> 4.5 -> 5.
  job = Job(3, 0);
  job.worker.cpu_millis = 1500;
  EXPECT_EQ(HourlyPriceMicros(job, {.price_micros_per_cpu_hour = 1}), 5);
  // Free flavors cost nothing.
  EXPECT_EQ(HourlyPriceMicros(job, Flavor{}), 0);
}

TEST(PricingTest, ExpectedCostOfCpuAndMemorySaturates) {
  PendingJob job = Job(1 << 20, 0);
  job.worker.cpu_millis = std::numeric_limits<int64_t>::max();
  job.worker.memory_bytes = std::numeric_limits<int64_t>::max();
  job.expected_runtime_micros = std::numeric_limits<int64_t>::max();
  const Flavor f{
      .price_micros_per_cpu_hour = std::numeric_limits<int64_t>::max(),
      .price_micros_per_gib_hour = std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(ExpectedCostMicros(job, f, PolicyConfig{}),
            std::numeric_limits<int64_t>::max());
  // A microsecond of 2^62 bytes (2^32 GiB) at 2^40 per GiB-hour: 2^72 micros
  // per hour for 1 / 3,600,000,000 h.
  job.workers = 1;
  job.worker.cpu_millis = 0;
  job.worker.memory_bytes = int64_t{1} << 62;
  job.expected_runtime_micros = 1;
  const Flavor g{.price_micros_per_gib_hour = int64_t{1} << 40};
  // 2^72 / 3,600,000,000 = 1,311,768,467,463.79... -> 1311768467464.
  EXPECT_EQ(ExpectedCostMicros(job, g, PolicyConfig{}), 1311768467464);
  // An hour of it: 2^72 = 4722366482869645213696 > INT64_MAX.
  job.expected_runtime_micros = kHour;
  EXPECT_EQ(ExpectedCostMicros(job, g, PolicyConfig{}),
            std::numeric_limits<int64_t>::max());
}

// The gang's memory decides between two flavors whose GPU and memory
// prices differ: jobs alike but for their memory get different orders.
TEST(PricingTest, MemoryPriceDecidesTheFlavorOrder) {
  SnapshotBuilder b;
  // gpu-cheap: 2.00 per GPU-h + 0.10 per GiB-h; flat: 2.50 per GPU-h.
  const FlavorId gpu_cheap = b.AddFlavor("gpu-cheap");
  const FlavorId flat = b.AddFlavor("flat");
  b.snapshot().flavors[gpu_cheap].price_micros_per_gpu_hour = 2000000;
  b.snapshot().flavors[gpu_cheap].price_micros_per_gib_hour = 100000;
  b.snapshot().flavors[flat].price_micros_per_gpu_hour = 2500000;
  const QueueId q = b.AddQueue("q");
  for (FlavorId f : {gpu_cheap, flat}) {
    b.AddNode(f, 8);
    b.AddGpuQuota(q, f, 64);
  }
  // 1 GiB: 2.10 against 2.50 per hour; 16 GiB: 3.60 against 2.50.
  b.AddJob(1, q, 1, 1, 1).expected_runtime_micros = kHour;
  PendingJob& big = b.AddJob(2, q, 1, 1, 2);
  big.expected_runtime_micros = kHour;
  big.worker.memory_bytes = 16 * testing::kGiB;
  const Snapshot& s = b.Build();
  EXPECT_EQ(CandidateFlavors(s, s.pending[0], PolicyConfig{}),
            (std::vector<FlavorId>{gpu_cheap, flat}));
  EXPECT_EQ(CandidateFlavors(s, s.pending[1], PolicyConfig{}),
            (std::vector<FlavorId>{flat, gpu_cheap}));
  const Decisions d = Decide(s);
  ASSERT_EQ(d.admissions.size(), 2u);
  EXPECT_EQ(testing::AdmissionOf(d, 1)->flavor, gpu_cheap);
  EXPECT_EQ(testing::AdmissionOf(d, 2)->flavor, flat);
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
