#include "services/scheduler/policy/placement.h"

#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using ::testing::ElementsAre;
using testing::SnapshotBuilder;

// Places `job` on flavor 0 of the snapshot with nothing else placed this cycle.
PlacementResult Place(const Snapshot& s, const PendingJob& job,
                      FlavorId flavor = 0) {
  std::vector<Resources> free;
  std::vector<std::vector<NodeId>> by_flavor(s.flavors.size());
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    Resources f = s.nodes[n].capacity;
    f -= s.nodes[n].used;
    free.push_back(f);
    by_flavor[s.nodes[n].flavor].push_back(static_cast<NodeId>(n));
  }
  return PlaceGang(s, free, by_flavor, flavor, job);
}

std::set<NodeId> Distinct(const std::vector<NodeId>& nodes) {
  return std::set<NodeId>(nodes.begin(), nodes.end());
}

TEST(WorkersThatFitTest, MinimumOverRequestedResources) {
  WorkerShape shape{.gpus = 2, .cpu_millis = 4000, .memory_bytes = 0};
  EXPECT_EQ(WorkersThatFit({.gpus = 8, .cpu_millis = 10000}, shape, 100), 2);
  EXPECT_EQ(WorkersThatFit({.gpus = 8, .cpu_millis = 100000}, shape, 100), 4);
  EXPECT_EQ(WorkersThatFit({.gpus = 8, .cpu_millis = 100000}, shape, 3), 3);
  EXPECT_EQ(WorkersThatFit({.gpus = -1, .cpu_millis = 100000}, shape, 3), 0);
  EXPECT_EQ(WorkersThatFit({}, WorkerShape{}, 5), 5);
}

TEST(PlacementTest, GangIsAllOrNothing) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNodes(2, f, 8);
  PendingJob& job = b.AddJob(1, 0, /*workers=*/3, /*gpus=*/8);
  PlacementResult r = Place(b.Build(), job);
  EXPECT_EQ(r.failure, PlacementFailure::kNoCapacity);
  EXPECT_TRUE(r.worker_nodes.empty());
  EXPECT_EQ(r.capacity_workers, 2);
}

TEST(PlacementTest, GangNeverSpansClusters) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("h100");
  // Cluster 0: 2 nodes (block 0); cluster 1: 3 nodes (block 1); cluster 2:
  // 4 nodes (block 2).
  for (int i = 0; i < 9; ++i) {
    const int cluster = i < 2 ? 0 : (i < 5 ? 1 : 2);
    const NodeId n = b.AddNode(f, 8, /*block=*/cluster, /*rack=*/cluster);
    b.snapshot().nodes[n].cluster = cluster;
  }
  // 3 workers: cluster 0 is too small; cluster 1 fits exactly (best fit)
  // although the flavor's first blocks would hold it across clusters.
  PendingJob& job = b.AddJob(1, 0, /*workers=*/3, /*gpus=*/8);
  PlacementResult r = Place(b.Build(), job);
  ASSERT_EQ(r.failure, PlacementFailure::kNone);
  EXPECT_EQ(r.worker_nodes, (std::vector<NodeId>{2, 3, 4}));
  // 5 workers: 9 nodes are free, but no cluster holds 5.
  b.snapshot().pending[0].workers = 5;
  r = Place(b.Build(), b.Build().pending[0]);
  EXPECT_EQ(r.failure, PlacementFailure::kNoFitCluster);
  EXPECT_EQ(r.best_group_workers, 4);
  EXPECT_EQ(r.capacity_workers, 5);
  // Through the policy: NO_FIT_TOPOLOGY with the cluster named.
  b.AddQueue("q");
  b.AddGpuQuota(0, f, 100);
  const Decisions d = Decide(b.Build());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kNoFitTopology);
  EXPECT_EQ(d.pending[0].message.str(),
            "NO_FIT_TOPOLOGY: no single cluster holds 5 workers (best holds 4) "
            "(flavor h100)");
}

TEST(PlacementTest, PacksOntoTheFewestBlocksBestFit) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  // Block 0: 4 nodes; block 1: 2 nodes.
  for (int i = 0; i < 4; ++i) b.AddNode(f, 8, /*block=*/0, /*rack=*/i);
  b.AddNodes(2, f, 8, /*block=*/1, /*rack=*/10);
  // Two workers: block 1 holds them and is the smaller block.
  PlacementResult two = Place(b.Build(), b.AddJob(1, 0, 2, 8));
  ASSERT_EQ(two.failure, PlacementFailure::kNone);
  EXPECT_THAT(two.worker_nodes, ElementsAre(4, 5));
  // Three workers: only block 0 holds them.
  PlacementResult three = Place(b.Build(), b.AddJob(2, 0, 3, 8));
  ASSERT_EQ(three.failure, PlacementFailure::kNone);
  for (NodeId n : three.worker_nodes) EXPECT_LT(n, 4);
  // Six workers need both blocks.
  PlacementResult six = Place(b.Build(), b.AddJob(3, 0, 6, 8));
  ASSERT_EQ(six.failure, PlacementFailure::kNone);
  EXPECT_EQ(Distinct(six.worker_nodes).size(), 6u);
}

TEST(PlacementTest, PacksOntoTheFewestRacksWithinABlock) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, /*rack=*/0);
  b.AddNodes(2, f, 8, 0, /*rack=*/1);
  b.AddNode(f, 8, 0, /*rack=*/2);
  PlacementResult r = Place(b.Build(), b.AddJob(1, 0, 2, 8));
  ASSERT_EQ(r.failure, PlacementFailure::kNone);
  EXPECT_THAT(r.worker_nodes, ElementsAre(1, 2));
}

TEST(PlacementTest, BestFitNodeKeepsWholeNodesFree) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  NodeId partial = b.AddNode(f, 8, 0, 0);
  b.AddNode(f, 8, 0, 0);
  b.snapshot().nodes[partial].used.gpus = 4;
  PlacementResult r = Place(b.Build(), b.AddJob(1, 0, 1, 4));
  ASSERT_EQ(r.failure, PlacementFailure::kNone);
  EXPECT_THAT(r.worker_nodes, ElementsAre(partial));
}

TEST(PlacementTest, FewestNodes) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNodes(2, f, 2, 0, 0);
  NodeId big = b.AddNode(f, 8, 0, 0);
  PlacementResult r = Place(b.Build(), b.AddJob(1, 0, 4, 1));
  ASSERT_EQ(r.failure, PlacementFailure::kNone);
  EXPECT_THAT(r.worker_nodes, ElementsAre(big, big, big, big));
  // Five workers of 2 GPUs: the big node (4) plus one small one, not three
  // nodes.
  PlacementResult five = Place(b.Build(), b.AddJob(2, 0, 5, 2));
  ASSERT_EQ(five.failure, PlacementFailure::kNone);
  EXPECT_THAT(five.worker_nodes, ElementsAre(0, big, big, big, big));
  EXPECT_EQ(Place(b.Build(), b.AddJob(3, 0, 7, 2)).failure,
            PlacementFailure::kNoCapacity);
}

TEST(PlacementTest, RequiredRackAndBlock) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, /*block=*/0, /*rack=*/0);
  b.AddNode(f, 8, /*block=*/0, /*rack=*/1);
  b.AddNode(f, 8, /*block=*/1, /*rack=*/2);
  PendingJob& rack_job = b.AddJob(1, 0, 2, 8);
  rack_job.required_topology = TopologyLevel::kRack;
  PlacementResult r = Place(b.Build(), rack_job);
  EXPECT_EQ(r.failure, PlacementFailure::kNoFitTopology);
  EXPECT_EQ(r.best_group_workers, 1);
  PendingJob block_job = b.Build().pending[0];
  block_job.required_topology = TopologyLevel::kBlock;
  PlacementResult blk = Place(b.Build(), block_job);
  ASSERT_EQ(blk.failure, PlacementFailure::kNone);
  EXPECT_THAT(blk.worker_nodes, ElementsAre(0, 1));
  block_job.workers = 3;
  EXPECT_EQ(Place(b.Build(), block_job).failure,
            PlacementFailure::kNoFitTopology);
  block_job.required_topology = TopologyLevel::kNone;
  EXPECT_EQ(Place(b.Build(), block_job).failure, PlacementFailure::kNone);
}

TEST(PlacementTest, UnlabelledNodesNeverSatisfyARequiredLevel) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8);
  PendingJob& job = b.AddJob(1, 0, 1, 8);
  job.required_topology = TopologyLevel::kRack;
  EXPECT_EQ(Place(b.Build(), job).failure, PlacementFailure::kNoFitTopology);
}

TEST(PlacementTest, GpuModelSchedulableAndFlavorFilters) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("od");
  FlavorId g = b.AddFlavor("spot", FlavorKind::kSpot);
  b.AddNode(f, 8, 0, 0, /*model=*/1);
  NodeId h100 = b.AddNode(f, 8, 0, 0, /*model=*/2);
  NodeId drained = b.AddNode(f, 8, 0, 0, /*model=*/2);
  b.snapshot().nodes[drained].schedulable = false;
  NodeId spot = b.AddNode(g, 8, 0, 0, /*model=*/2);
  PendingJob& job = b.AddJob(1, 0, 1, 8);
  job.worker.gpu_model = 2;
  PlacementResult r = Place(b.Build(), job, f);
  ASSERT_EQ(r.failure, PlacementFailure::kNone);
  EXPECT_THAT(r.worker_nodes, ElementsAre(h100));
  EXPECT_THAT(Place(b.Build(), job, g).worker_nodes, ElementsAre(spot));
  PendingJob two = job;
  two.workers = 2;
  EXPECT_EQ(Place(b.Build(), two, f).failure, PlacementFailure::kNoCapacity);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
