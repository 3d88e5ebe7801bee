// One queue over clusters of two backends (a Slurm cluster and a Kubernetes
// cluster): jobs that may run on either go to the flavor of lowest expected
// cost and spill to the other backend's flavors when it is full; a job bound
// to one backend (JobSpec.backend) is placed on that backend's nodes only,
// waits with a reason that says so, and is a class of its own for the
// failure cache. The expected answers are worked out by hand in comments.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/pricing.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::AdmissionOf;
using ::testing::HasSubstr;
using testing::kHour;
using testing::kMinute;
using testing::PendingOf;
using testing::SnapshotBuilder;

constexpr BackendSet kSlurmOnly = BackendBit(Backend::kSlurm);
constexpr BackendSet kKubernetesOnly = BackendBit(Backend::kKubernetes);

TEST(BackendTest, NodeMatchesTheBackendsAndTheGpuModel) {
  const Node slurm{.backend = Backend::kSlurm, .gpu_model = 1};
  const Node kube{.backend = Backend::kKubernetes, .gpu_model = 1};
  const Node unknown{.gpu_model = 1};
  const WorkerShape any{.gpus = 1};
  EXPECT_TRUE(NodeMatches(slurm, any));
  EXPECT_TRUE(NodeMatches(kube, any));
  EXPECT_TRUE(NodeMatches(unknown, any));
  const WorkerShape on_slurm{.gpus = 1, .backends = kSlurmOnly};
  EXPECT_TRUE(NodeMatches(slurm, on_slurm));
  EXPECT_FALSE(NodeMatches(kube, on_slurm));
  EXPECT_FALSE(NodeMatches(unknown, on_slurm));
  const WorkerShape either{.gpus = 1, .backends = kSlurmOnly | kKubernetesOnly};
  EXPECT_TRUE(NodeMatches(slurm, either));
  EXPECT_TRUE(NodeMatches(kube, either));
  // The GPU model still counts.
  const WorkerShape model_2{.gpus = 1, .gpu_model = 2, .backends = kSlurmOnly};
  EXPECT_FALSE(NodeMatches(slurm, model_2));
}

// A flavor with nodes in both clusters: cluster 0 (Slurm) has one free node,
// cluster 1 (Kubernetes) two. Without a backend the one-worker gang goes to
// the smallest cluster that holds it (cluster 0, node 0); bound to
// Kubernetes, to cluster 1's first node (node 1).
TEST(BackendTest, PlacementKeepsToTheJobsBackend) {
  SnapshotBuilder b;
  const FlavorId f = b.AddFlavor("h100");
  for (int i = 0; i < 3; ++i) {
    const NodeId n = b.AddNode(f, 8, /*block=*/i == 0 ? 0 : 1,
                               /*rack=*/i == 0 ? 0 : 1);
    b.snapshot().nodes[n].cluster = i == 0 ? 0 : 1;
    b.snapshot().nodes[n].backend =
        i == 0 ? Backend::kSlurm : Backend::kKubernetes;
  }
  PendingJob& job = b.AddJob(1, 0, /*workers=*/1, /*gpus=*/8);
  std::vector<Resources> free;
  for (const Node& n : b.Build().nodes) free.push_back(n.capacity);
  const std::vector<std::vector<NodeId>> by_flavor = {{0, 1, 2}};
  PlacementResult r = PlaceGang(b.Build(), free, by_flavor, f, job);
  ASSERT_EQ(r.failure, PlacementFailure::kNone);
  EXPECT_EQ(r.worker_nodes, std::vector<NodeId>{0});
  b.snapshot().pending[0].worker.backends = kKubernetesOnly;
  r = PlaceGang(b.Build(), free, by_flavor, f, b.Build().pending[0]);
  ASSERT_EQ(r.failure, PlacementFailure::kNone);
  EXPECT_EQ(r.worker_nodes, std::vector<NodeId>{1});
  // Two workers bound to Slurm: its one node holds one of them.
  b.snapshot().pending[0].worker.backends = kSlurmOnly;
  b.snapshot().pending[0].workers = 2;
  r = PlaceGang(b.Build(), free, by_flavor, f, b.Build().pending[0]);
  EXPECT_EQ(r.failure, PlacementFailure::kNoCapacity);
  EXPECT_EQ(r.capacity_workers, 1);
}

// The platform of the tests below: one queue with quota on three flavors.
//   f0 slurm-reserved  reserved,  $0.50/GPU-h, Slurm cluster 0: node 0
//   f1 gke-spot        spot,      $0.70/GPU-h, 0.5 reclaims/h, restart 5 min,
//                                 Kubernetes cluster 1: nodes 1, 2
//   f2 gke-ondemand    on-demand, $2.00/GPU-h, Kubernetes cluster 1: node 3
// Every node has 8 GPUs; every job is one worker of 8 GPUs, 1 h expected,
// checkpointing every 10 min. Its expected cost:
//   f0: 8 x 0.50 x 1 h                                        =  4.000000
//   f1: a reclaim loses 10/2 + 5 = 10 min; 0.5 x 1 h of them adds 5 min:
//       8 x 0.70 x 65/60 h                                    =  6.066667
//   f2: 8 x 2.00 x 1 h                                        = 16.000000
class OneQueueOverTwoBackends : public ::testing::Test {
 protected:
  void SetUp() override {
    const FlavorId reserved =
        b_.AddFlavor("slurm-reserved", FlavorKind::kReserved);
    const FlavorId spot = b_.AddFlavor("gke-spot", FlavorKind::kSpot);
    const FlavorId ondemand = b_.AddFlavor("gke-ondemand");
    Snapshot& s = b_.snapshot();
    s.flavors[reserved].price_micros_per_gpu_hour = 500000;
    s.flavors[spot].price_micros_per_gpu_hour = 700000;
    s.flavors[spot].reclaim_rate_per_hour = 0.5;
    s.flavors[spot].restart_overhead_micros = 5 * kMinute;
    s.flavors[ondemand].price_micros_per_gpu_hour = 2000000;
    s.flavors[reserved].backends = kSlurmOnly;
    s.flavors[spot].backends = kKubernetesOnly;
    s.flavors[ondemand].backends = kKubernetesOnly;
    AddNode(reserved, 0, Backend::kSlurm);
    AddNode(spot, 1, Backend::kKubernetes);
    AddNode(spot, 1, Backend::kKubernetes);
    AddNode(ondemand, 1, Backend::kKubernetes);
    q_ = b_.AddQueue("team");
    for (FlavorId f : {reserved, spot, ondemand}) b_.AddGpuQuota(q_, f, 64);
  }

  void AddNode(FlavorId f, int32_t cluster, Backend backend) {
    const NodeId n = b_.AddNode(f, 8, /*block=*/cluster, /*rack=*/cluster);
    b_.snapshot().nodes[n].cluster = cluster;
    b_.snapshot().nodes[n].backend = backend;
  }

  PendingJob& Job(JobId id, BackendSet backends = kAnyBackend) {
    PendingJob& job = b_.AddJob(id, q_, 1, 8, /*submit_time=*/id);
    job.expected_runtime_micros = kHour;
    job.checkpoint_interval_micros = 10 * kMinute;
    job.worker.backends = backends;
    return job;
  }

  SnapshotBuilder b_;
  QueueId q_ = 0;
};

TEST_F(OneQueueOverTwoBackends, TheExpectedCostsAreTheHandWorkedOnes) {
  const PendingJob& job = Job(1);
  const Snapshot& s = b_.Build();
  const PolicyConfig config;
  EXPECT_EQ(ExpectedCostMicros(job, s.flavors[0], config), 4000000);
  EXPECT_EQ(ExpectedCostMicros(job, s.flavors[1], config), 6066667);
  EXPECT_EQ(ExpectedCostMicros(job, s.flavors[2], config), 16000000);
}

TEST_F(OneQueueOverTwoBackends, CheapestFirstThenSpillToTheOtherBackend) {
  Job(1);  // cheapest: f0 on Slurm
  Job(2);  // Slurm is full: f1 on Kubernetes (node 1)
  Job(3);  // f1's other node
  Job(4);  // f1 full too: f2
  Job(5);  // nothing left
  const Decisions d = Decide(b_.Build());
  ASSERT_EQ(d.admissions.size(), 4u);
  const std::vector<std::pair<FlavorId, NodeId>> want = {
      {0, 0}, {1, 1}, {1, 2}, {2, 3}};
  for (JobId id = 1; id <= 4; ++id) {
    const Admission* a = AdmissionOf(d, id);
    ASSERT_NE(a, nullptr) << "job " << id;
    EXPECT_EQ(a->flavor, want[id - 1].first) << "job " << id;
    EXPECT_EQ(a->worker_nodes, std::vector<NodeId>{want[id - 1].second})
        << "job " << id;
  }
  ASSERT_NE(PendingOf(d, 5), nullptr);
}

TEST_F(OneQueueOverTwoBackends, AJobBoundToABackendRunsThereOnly) {
  Job(1);                   // f0, Slurm's only node
  Job(2, kSlurmOnly);       // Slurm full: waits
  Job(3, kKubernetesOnly);  // f1 (cheaper than f2), node 1
  PendingJob& never = Job(4, kKubernetesOnly);
  never.spot_policy = SpotPolicy::kNever;  // f2, node 3
  Job(5, kSlurmOnly | kKubernetesOnly);    // either: f1, node 2
  const Decisions d = Decide(b_.Build());
  ASSERT_EQ(d.admissions.size(), 4u);
  EXPECT_EQ(AdmissionOf(d, 1)->worker_nodes, std::vector<NodeId>{0});
  EXPECT_EQ(AdmissionOf(d, 3)->worker_nodes, std::vector<NodeId>{1});
  EXPECT_EQ(AdmissionOf(d, 4)->worker_nodes, std::vector<NodeId>{3});
  EXPECT_EQ(AdmissionOf(d, 5)->worker_nodes, std::vector<NodeId>{2});
  const PendingDecision* waits = PendingOf(d, 2);
  ASSERT_NE(waits, nullptr);
  EXPECT_EQ(waits->reason, PendingReason::kNoCapacity);
  // Only its backend's flavor is a candidate.
  EXPECT_EQ(waits->message.str(),
            "NO_CAPACITY: free nodes hold 0 of 1 workers (flavor "
            "slurm-reserved); counting slurm nodes only (the job's backend)");
}

TEST_F(OneQueueOverTwoBackends, ABoundJobsCandidatesAreItsBackendsFlavors) {
  const PolicyConfig config;
  const PendingJob any = Job(1);
  const PendingJob on_slurm = Job(2, kSlurmOnly);
  const PendingJob on_kube = Job(3, kKubernetesOnly);
  const Snapshot& s = b_.Build();
  // Cheapest first: f0 (4.00), f1 (6.07), f2 (16.00).
  EXPECT_EQ(CandidateFlavors(s, any, config), (std::vector<FlavorId>{0, 1, 2}));
  EXPECT_EQ(CandidateFlavors(s, on_slurm, config), std::vector<FlavorId>{0});
  EXPECT_EQ(CandidateFlavors(s, on_kube, config),
            (std::vector<FlavorId>{1, 2}));
  // A flavor whose backends are not known stays a candidate for everyone.
  b_.snapshot().flavors[2].backends = kAnyBackend;
  EXPECT_EQ(CandidateFlavors(b_.Build(), on_slurm, config),
            (std::vector<FlavorId>{0, 2}));
}

TEST_F(OneQueueOverTwoBackends, NoFlavorOfItsBackendInTheQueue) {
  Job(1, BackendBit(Backend::kSim));
  for (const PolicyConfig& config :
       {PolicyConfig{}, PolicyConfig{.use_placement_index = false,
                        .use_equivalence_classes = false}}) {
    const Decisions d = Decide(b_.Build(), config);
    ASSERT_TRUE(d.admissions.empty());
    const PendingDecision* waits = PendingOf(d, 1);
    ASSERT_NE(waits, nullptr);
    EXPECT_EQ(waits->reason, PendingReason::kNoEligibleFlavor);
    EXPECT_EQ(
        waits->message.str(),
        "NO_ELIGIBLE_FLAVOR: queue team has no quota for a flavor allowed "
        "by spot policy allowed and offered on sim (the job's backend)");
  }
}

// A Slurm-bound job that fails on a full Slurm cluster must not make an
// otherwise identical Kubernetes-bound job behind it fail from the cache of
// failed classes: the backend is part of the class.
TEST_F(OneQueueOverTwoBackends, TheBackendIsPartOfTheJobsClass) {
  Job(1, kSlurmOnly);       // f0
  Job(2, kSlurmOnly);       // waits
  Job(3, kSlurmOnly);       // waits (same class as 2)
  Job(4, kKubernetesOnly);  // f1
  for (const PolicyConfig& config :
       {PolicyConfig{}, PolicyConfig{.use_placement_index = false,
                        .use_equivalence_classes = false}}) {
    const Decisions d = Decide(b_.Build(), config);
    ASSERT_EQ(d.admissions.size(), 2u);
    ASSERT_NE(AdmissionOf(d, 1), nullptr);
    ASSERT_NE(AdmissionOf(d, 4), nullptr);
    EXPECT_EQ(AdmissionOf(d, 4)->worker_nodes, std::vector<NodeId>{1});
  }
}

}  // namespace
}  // namespace trainyard::scheduler::policy
