// Fair share against answers computed by hand: Dominant Resource Fairness's
// own example (Ghodsi et al., NSDI 2011, section 4: 9 CPUs and 18 GB, user
// A's tasks <1 CPU, 4 GB>, user B's <3 CPU, 1 GB>; DRF gives A three tasks
// and B two, both at a dominant share of 2/3), with the weights of queues and
// cohorts, whatever else the platform holds and whatever the submit order.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/quota.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::ApplyDecisions;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::kGiB;
using testing::kMinute;
using testing::SnapshotBuilder;

constexpr int kCpu = static_cast<int>(Resource::kCpu);
constexpr int kMemory = static_cast<int>(Resource::kMemory);
constexpr int kGpu = static_cast<int>(Resource::kGpu);

// A quota entry of CPU (millis) and memory on flavor f.
FlavorQuota CpuMemoryQuota(FlavorId f, int64_t cpu_millis,
                           int64_t memory_bytes) {
  FlavorQuota fq{.flavor = f};
  fq.resources[kCpu] = ResourceQuota{.nominal = cpu_millis};
  fq.resources[kMemory] = ResourceQuota{.nominal = memory_bytes};
  return fq;
}

FlavorQuota GpuQuota(FlavorId f, int64_t gpus) {
  FlavorQuota fq{.flavor = f};
  fq.resources[kGpu] = ResourceQuota{.nominal = gpus};
  return fq;
}

// Runs cycles, each on the snapshot the last one's decisions leave, until a
// cycle changes nothing; fails the test if that takes more than 20 cycles.
Snapshot Converge(Snapshot s, int* preemptions = nullptr) {
  for (int cycle = 0; cycle < 20; ++cycle) {
    const Decisions d = Decide(s);
    if (preemptions != nullptr)
      *preemptions += static_cast<int>(d.preemptions.size());
    if (d.admissions.empty() && d.preemptions.empty()) return s;
    s.now += kMinute;
    s = ApplyDecisions(s, d);
    EXPECT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
  }
  ADD_FAILURE() << "no fixed point after 20 cycles";
  return s;
}

// Running attempts per queue name.
std::map<std::string, int> RunningPerQueue(const Snapshot& s) {
  std::map<std::string, int> count;
  for (const RunningAttempt& r : s.running) ++count[s.queues[r.queue].name];
  return count;
}

// The DRF paper's pool: a cohort that owns one 9-CPU / 18 GiB node (flavor
// "cpu"), queues A and B at nominal 0 borrowing all of it, fair-sharing
// preemption on. Beside it, what the demo platform holds: eight 8-GPU nodes
// of another flavor with a cohort of GPU queues running work, and a queue
// without a cohort.
struct DrfPlatform {
  SnapshotBuilder b;
  QueueId a = 0;
  QueueId bq = 0;
  FlavorId cpu = 0;

  DrfPlatform() {
    const FlavorId gpu = b.AddFlavor("a100");
    cpu = b.AddFlavor("cpu");
    for (int n = 0; n < 8; ++n) b.AddNode(gpu, 8);
    const NodeId pool = b.AddNode(cpu, 0);
    b.snapshot().nodes[pool].capacity = {0, 9000, 18 * kGiB};
    const CohortId gpus = b.AddCohort("gpus");
    const QueueId train = b.AddGpuQueue("train", gpus, gpu, 32);
    b.AddGpuQueue("eval", gpus, gpu, 32);
    const QueueId lone = b.AddGpuQueue("lone", std::nullopt, gpu, 8);
    b.AddRunning(900, train, gpu, 0, 8);
    b.AddRunning(901, train, gpu, 1, 8);
    b.AddRunning(902, lone, gpu, 2, 4);
    const CohortId pool_cohort = b.AddCohort("cpu-pool");
    b.snapshot().cohorts[pool_cohort].quotas.push_back(
        CpuMemoryQuota(cpu, 9000, 18 * kGiB));
    a = b.AddQueue("A", pool_cohort);
    bq = b.AddQueue("B", pool_cohort);
    for (QueueId q : {a, bq}) {
      b.snapshot().queues[q].quotas.push_back(CpuMemoryQuota(cpu, 0, 0));
      b.snapshot().queues[q].fair_share_preemption = true;
    }
  }

  // n jobs of A (<1 CPU, 4 GiB>) or B (<3 CPU, 1 GiB>) submitted at `at`.
  void Submit(QueueId q, int n, JobId first, TimeMicros at) {
    for (int k = 0; k < n; ++k) {
      PendingJob& job = b.AddJob(first + k, q, 1, 0, at + k);
      job.worker =
          q == a ? WorkerShape{.cpu_millis = 1000, .memory_bytes = 4 * kGiB}
                 : WorkerShape{.cpu_millis = 3000, .memory_bytes = 1 * kGiB};
    }
  }
};

TEST(FairShareTest, TheDrfExampleGivesThreeAndTwoWhoeverSubmitsFirst) {
  for (const bool a_first : {true, false}) {
    SCOPED_TRACE(a_first ? "A first" : "B first");
    DrfPlatform p;
    const TimeMicros now = p.b.Build().now;
    p.Submit(p.a, 5, 1, a_first ? now - 10 * kMinute : now - 5 * kMinute);
    p.Submit(p.bq, 5, 101, a_first ? now - 5 * kMinute : now - 10 * kMinute);
    int preemptions = 0;
    const Snapshot end = Converge(p.b.Build(), &preemptions);
    const auto running = RunningPerQueue(end);
    EXPECT_EQ(running.at("A"), 3);
    EXPECT_EQ(running.at("B"), 2);
    // Filled in order of share, nothing had to be taken back.
    EXPECT_EQ(preemptions, 0);
  }
}

TEST(FairShareTest,
     FairSharingPreemptionReachesTheDrfAllocationFromEitherSide) {
  // One queue alone first fills what it can; the other arrives later and
  // takes its fair share back by preemption.
  for (const bool a_first : {true, false}) {
    SCOPED_TRACE(a_first ? "A alone first" : "B alone first");
    DrfPlatform p;
    const TimeMicros now = p.b.Build().now;
    p.Submit(a_first ? p.a : p.bq, 5, 1, now - 10 * kMinute);
    Snapshot s = Converge(p.b.Build());
    const auto alone = RunningPerQueue(s);
    // A alone: memory binds at 4 (16 of 18 GiB); B alone: CPU at 3.
    EXPECT_EQ(alone.at(a_first ? "A" : "B"), a_first ? 4 : 3);
    // The other queue submits five.
    const QueueId other = a_first ? p.bq : p.a;
    for (int k = 0; k < 5; ++k) {
      PendingJob job{.id = 101 + k,
                     .name = "late-" + std::to_string(k),
                     .queue = other,
                     .submit_time = s.now + k};
      job.worker =
          other == p.a
              ? WorkerShape{.cpu_millis = 1000, .memory_bytes = 4 * kGiB}
              : WorkerShape{.cpu_millis = 3000, .memory_bytes = 1 * kGiB};
      s.pending.push_back(job);
    }
    int preemptions = 0;
    const Snapshot end = Converge(s, &preemptions);
    const auto running = RunningPerQueue(end);
    EXPECT_EQ(running.at("A"), 3);
    EXPECT_EQ(running.at("B"), 2);
    EXPECT_EQ(preemptions, 1);
  }
}

TEST(FairShareTest, AloneOnItsPlatformThePoolGivesTheSameAnswer) {
  // The reference: the same pool with nothing beside it.
  SnapshotBuilder b;
  const FlavorId cpu = b.AddFlavor("cpu");
  const NodeId pool = b.AddNode(cpu, 0);
  b.snapshot().nodes[pool].capacity = {0, 9000, 18 * kGiB};
  const CohortId c = b.AddCohort("cpu-pool");
  b.snapshot().cohorts[c].quotas.push_back(
      CpuMemoryQuota(cpu, 9000, 18 * kGiB));
  std::vector<QueueId> queues;
  for (const char* name : {"A", "B"}) {
    const QueueId q = b.AddQueue(name, c);
    b.snapshot().queues[q].quotas.push_back(CpuMemoryQuota(cpu, 0, 0));
    queues.push_back(q);
  }
  for (int k = 0; k < 5; ++k) {
    b.AddJob(1 + k, queues[0], 1, 0, k).worker = {.cpu_millis = 1000,
                                                  .memory_bytes = 4 * kGiB};
    b.AddJob(101 + k, queues[1], 1, 0, k).worker = {.cpu_millis = 3000,
                                                    .memory_bytes = kGiB};
  }
  const auto running = RunningPerQueue(Converge(b.Build()));
  EXPECT_EQ(running.at("A"), 3);
  EXPECT_EQ(running.at("B"), 2);
}

TEST(FairShareTest, SharesAreUsageAboveNominalOverWhatTheTreeCanLend) {
  DrfPlatform p;
  const TimeMicros now = p.b.Build().now;
  p.Submit(p.a, 3, 1, now - 10 * kMinute);
  p.Submit(p.bq, 2, 101, now - 5 * kMinute);
  const Snapshot s = Converge(p.b.Build());
  const QuotaTree quota(s);
  // Both at 2/3: A's memory 12 of 18 GiB, B's CPU 6 of 9.
  EXPECT_EQ(quota.Lendable(p.a, p.cpu, Resource::kCpu), 9000);
  EXPECT_EQ(quota.Lendable(p.a, p.cpu, Resource::kMemory), 18 * kGiB);
  EXPECT_EQ(quota.Share(p.a, 1.0), QuotaTree::kShareOne * 2 / 3);
  EXPECT_EQ(quota.Share(p.bq, 1.0), QuotaTree::kShareOne * 2 / 3);
  // With weight 2 the share halves; a queue within nominal has none.
  EXPECT_EQ(quota.Share(p.a, 2.0), QuotaTree::kShareOne / 3);
  EXPECT_EQ(quota.Share(2, 1.0), 0);  // "eval": idle
  EXPECT_EQ(quota.Share(0, 1.0), 0);  // "train": within its nominal 32
}

// A pool of 12 GPUs that a cohort owns; 1-GPU jobs.
struct GpuPool {
  SnapshotBuilder b;
  FlavorId f = 0;
  CohortId root = 0;

  GpuPool() {
    f = b.AddFlavor("h100");
    b.AddNode(b.AddFlavor("unrelated"), 8);
    b.AddNode(f, 6);
    b.AddNode(f, 6);
    root = b.AddCohort("root");
    b.snapshot().cohorts[root].quotas.push_back(GpuQuota(f, 12));
  }
  QueueId Queue(std::string name, CohortId cohort) {
    const QueueId q = b.AddGpuQueue(std::move(name), cohort, f, 0);
    b.snapshot().queues[q].fair_share_preemption = true;
    return q;
  }
  void Submit(QueueId q, int n, JobId first, TimeMicros at) {
    for (int k = 0; k < n; ++k) b.AddJob(first + k, q, 1, 1, at + k);
  }
};

TEST(FairShareTest, QueueWeightsSplitThePoolByWeight) {
  // Weighted DRF: weights 2 and 1 split 12 GPUs 8 / 4, both at 1/3 once
  // divided by their weights, from either starting point.
  for (const bool heavy_first : {true, false}) {
    SCOPED_TRACE(heavy_first ? "heavy first" : "light first");
    GpuPool pool;
    const QueueId heavy = pool.Queue("heavy", pool.root);
    const QueueId light = pool.Queue("light", pool.root);
    pool.b.snapshot().queues[heavy].weight = 2.0;
    const TimeMicros now = pool.b.Build().now;
    pool.Submit(heavy_first ? heavy : light, 12, 1, now - 10 * kMinute);
    Snapshot s = Converge(pool.b.Build());
    for (int k = 0; k < 12; ++k) {
      s.pending.push_back({.id = 101 + k,
                           .queue = heavy_first ? light : heavy,
                           .submit_time = s.now + k,
                           .worker = {.gpus = 1}});
    }
    const auto running = RunningPerQueue(Converge(s));
    EXPECT_EQ(running.at("heavy"), 8);
    EXPECT_EQ(running.at("light"), 4);
  }
}

TEST(FairShareTest, CohortWeightsSplitThePoolBetweenSubtrees) {
  // Root owns 12 GPUs; cohorts X (weight 2) and Y (weight 1) each hold one
  // queue. Compared across the root, X's share is halved: 8 / 4. With equal
  // cohort weights the same platform splits 6 / 6.
  for (const double x_weight : {2.0, 1.0}) {
    SCOPED_TRACE(x_weight);
    GpuPool pool;
    const CohortId x = pool.b.AddCohort("x", pool.root);
    const CohortId y = pool.b.AddCohort("y", pool.root);
    pool.b.snapshot().cohorts[x].weight = x_weight;
    const QueueId qx = pool.Queue("qx", x);
    const QueueId qy = pool.Queue("qy", y);
    const TimeMicros now = pool.b.Build().now;
    pool.Submit(qy, 12, 1, now - 10 * kMinute);
    pool.Submit(qx, 12, 101, now - 5 * kMinute);
    const auto running = RunningPerQueue(Converge(pool.b.Build()));
    EXPECT_EQ(running.at("qx"), x_weight == 2.0 ? 8 : 6);
    EXPECT_EQ(running.at("qy"), x_weight == 2.0 ? 4 : 6);
  }
}

TEST(FairShareTest, LessThanInitialSharePreemptsWhereFinalShareWouldNot) {
  // B runs one 12-GPU gang (two workers of 6; share 1). A's 2-GPU job would
  // leave B at 0 after the preemption: LessThanOrEqualToFinalShare refuses (1/6
  // > 0), LessThanInitialShare allows it (1/6 < 1), as Kueue's strategies do.
  for (const bool initial : {false, true}) {
    SCOPED_TRACE(initial ? "LessThanInitialShare" : "LessThanOrEqualToFinal");
    GpuPool pool;
    const QueueId qa = pool.Queue("A", pool.root);
    const QueueId qb = pool.Queue("B", pool.root);
    if (initial) {
      pool.b.snapshot().queues[qa].fair_share_strategy =
          FairShareStrategy::kLessThanInitialShare;
    }
    Snapshot& s = pool.b.snapshot();
    s.nodes[1].used.gpus = 6;
    s.nodes[2].used.gpus = 6;
    s.running.push_back({.job = 500,
                         .queue = qb,
                         .flavor = pool.f,
                         .placement = {1, 2},
                         .resources = {.gpus = 12},
                         .start_time = s.now - kMinute});
    pool.b.AddJob(1, qa, 1, 2, s.now - kMinute);
    const Decisions d = Decide(pool.b.Build());
    if (initial) {
      ASSERT_EQ(d.preemptions.size(), 1u);
      EXPECT_EQ(d.preemptions[0].victim, 500);
      EXPECT_EQ(d.preemptions[0].reason, PreemptionReason::kFairShare);
      EXPECT_THAT(testing::Admitted(d), ElementsAre(1));
    } else {
      EXPECT_THAT(d.preemptions, IsEmpty());
      EXPECT_THAT(d.admissions, IsEmpty());
      // The explanation says fair-share preemption was considered and why
      // it found nothing: 2/12 with the job against B's 12/12.
      ASSERT_NE(testing::PendingOf(d, 1), nullptr);
      EXPECT_THAT(testing::PendingOf(d, 1)->message.str(),
                  ::testing::HasSubstr(
                      "fair-share preemption considered on flavor h100: its "
                      "queue's share with the job would be 0.166, the highest "
                      "other in its cohort tree is 1.000 (queue B)"));
    }
  }
}

TEST(FairShareTest, TheIncrementalEngineAgrees) {
  DrfPlatform p;
  const TimeMicros now = p.b.Build().now;
  p.Submit(p.bq, 5, 101, now - 10 * kMinute);
  p.Submit(p.a, 5, 1, now - 5 * kMinute);
  Scheduler scheduler(p.b.Build());
  EXPECT_EQ(scheduler.Cycle(), Decide(p.b.Build()));
}

}  // namespace
}  // namespace trainyard::scheduler::policy
