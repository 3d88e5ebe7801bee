#include "tests/support/policy/fragmentation.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::SnapshotBuilder;

// Marks `gpus` GPUs of `node` used (by work the test does not care about).
void Use(SnapshotBuilder& b, NodeId node, int64_t gpus) {
  b.snapshot().nodes[node].used.gpus += gpus;
}

TEST(FragmentationTest, NoNodes) {
  SnapshotBuilder b;
  b.AddFlavor("a100");
  const FragmentationReport r = MeasureFragmentation(b.Build());
  ASSERT_EQ(r.flavors.size(), 1u);
  EXPECT_EQ(r.flavors[0], FragmentationStats{});
  EXPECT_EQ(r.total, FragmentationStats{});
  EXPECT_EQ(r.skipped_workers, 0);
}

TEST(FragmentationTest, EmptyClusterIsWholeFree) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  // Block 0: racks 0 (3 nodes) and 1 (1 node); block 1: rack 2 (2 nodes).
  b.AddNodes(3, f, 8, /*block=*/0, /*rack=*/0);
  b.AddNode(f, 8, 0, 1);
  b.AddNodes(2, f, 8, 1, 2);
  const FragmentationReport r = MeasureFragmentation(b.Build());
  const FragmentationStats want{.nodes = 6,
                                .gpus = 48,
                                .free_gpus = 48,
                                .whole_free_nodes = 6,
                                .whole_free_gpus = 48,
                                .fragmentation = 0.0,
                                .node_gpus = 8,
                                .largest_full_node_gang = 6,
                                .largest_full_node_gang_in_rack = 3,
                                .largest_full_node_gang_in_block = 4};
  EXPECT_EQ(r.flavors[f], want);
  EXPECT_EQ(r.total, want);
}

TEST(FragmentationTest, PartlyUsedNodes) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  NodeId n0 = b.AddNode(f, 8, /*block=*/0, /*rack=*/0);
  b.AddNode(f, 8, 0, 0);
  b.AddNodes(2, f, 8, 0, 1);
  NodeId n4 = b.AddNode(f, 8, 1, 2);
  NodeId n5 = b.AddNode(f, 8, 1, 2);
  b.AddNode(f, 8);  // No labels: counts, but never within a rack or block.
  Use(b, n0, 3);
  Use(b, n4, 8);
  Use(b, n5, 1);
  const FragmentationReport r = MeasureFragmentation(b.Build());
  // Free: 5 + 8 + 8 + 8 + 0 + 7 + 8 = 44, of which 4 whole nodes hold 32.
  const FragmentationStats want{.nodes = 7,
                                .gpus = 56,
                                .free_gpus = 44,
                                .whole_free_nodes = 4,
                                .whole_free_gpus = 32,
                                .fragmentation = 1.0 - 32.0 / 44.0,
                                .node_gpus = 8,
                                .largest_full_node_gang = 4,
                                .largest_full_node_gang_in_rack = 2,
                                .largest_full_node_gang_in_block = 3};
  EXPECT_EQ(r.flavors[f], want);
  EXPECT_EQ(r.total, want);
  EXPECT_DOUBLE_EQ(r.total.fragmentation, 3.0 / 11.0);
}

TEST(FragmentationTest, EveryNodePartlyUsedIsFullyFragmented) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 4; ++i) Use(b, b.AddNode(f, 8, 0, 0), i + 1);
  const FragmentationStats& t = MeasureFragmentation(b.Build()).total;
  EXPECT_EQ(t.free_gpus, 7 + 6 + 5 + 4);
  EXPECT_EQ(t.whole_free_nodes, 0);
  EXPECT_EQ(t.whole_free_gpus, 0);
  EXPECT_EQ(t.fragmentation, 1.0);
  EXPECT_EQ(t.largest_full_node_gang, 0);
  EXPECT_EQ(t.largest_full_node_gang_in_rack, 0);
  EXPECT_EQ(t.largest_full_node_gang_in_block, 0);
}

TEST(FragmentationTest, FullClusterHasNoFragmentation) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  Use(b, b.AddNode(f, 8, 0, 0), 8);
  Use(b, b.AddNode(f, 8, 0, 0), 8);
  Use(b, b.AddNode(f, 8, 0, 0), 9);  // Over-used: free is 0, not -1.
  const FragmentationStats& t = MeasureFragmentation(b.Build()).total;
  EXPECT_EQ(t.nodes, 3);
  EXPECT_EQ(t.gpus, 24);
  EXPECT_EQ(t.free_gpus, 0);
  EXPECT_EQ(t.whole_free_nodes, 0);
  EXPECT_EQ(t.fragmentation, 0.0);
  EXPECT_EQ(t.node_gpus, 8);
  EXPECT_EQ(t.largest_full_node_gang, 0);
}

TEST(FragmentationTest, UnschedulableAndGpulessNodesAreExcluded) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNode(f, 8, 0, 0);
  NodeId partly = b.AddNode(f, 8, 0, 0);
  Use(b, partly, 2);
  NodeId off = b.AddNode(f, 8, 0, 0);
  b.snapshot().nodes[off].schedulable = false;
  // A bigger node that is unschedulable does not set the node size either.
  NodeId big_off = b.AddNode(f, 16, 0, 0);
  b.snapshot().nodes[big_off].schedulable = false;
  b.AddNode(f, 0, 0, 0);  // CPU-only.
  const FragmentationReport r = MeasureFragmentation(b.Build());
  const FragmentationStats want{.nodes = 2,
                                .gpus = 16,
                                .free_gpus = 14,
                                .whole_free_nodes = 1,
                                .whole_free_gpus = 8,
                                .fragmentation = 1.0 - 8.0 / 14.0,
                                .node_gpus = 8,
                                .largest_full_node_gang = 1,
                                .largest_full_node_gang_in_rack = 1,
                                .largest_full_node_gang_in_block = 1};
  EXPECT_EQ(r.flavors[f], want);
  EXPECT_EQ(r.total, want);
}

TEST(FragmentationTest, AdmissionsAreChargedWithTheJobsWorkerShape) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  for (int i = 0; i < 4; ++i) b.AddNode(f, 8, 0, i / 2);
  QueueId q = b.AddQueue("q");
  b.AddJob(7, q, /*workers=*/2, /*gpus=*/4);
  b.AddJob(8, q, /*workers=*/2, /*gpus=*/3);
  b.AddJob(9, q, /*workers=*/1, /*gpus=*/8);
  const Snapshot& s = b.Build();
  const FragmentationReport before = MeasureFragmentation(s);
  EXPECT_EQ(before.total.whole_free_nodes, 4);
  EXPECT_EQ(before.total.fragmentation, 0.0);

  const std::vector<Admission> admissions = {
      {.job = 7, .queue = q, .flavor = f, .worker_nodes = {0, 0}},
      {.job = 8, .queue = q, .flavor = f, .worker_nodes = {1, 2}},
  };
  const FragmentationReport r = MeasureFragmentation(s, admissions);
  // Node 0 is full, nodes 1 and 2 have 5 free, node 3 is whole.
  const FragmentationStats want{.nodes = 4,
                                .gpus = 32,
                                .free_gpus = 18,
                                .whole_free_nodes = 1,
                                .whole_free_gpus = 8,
                                .fragmentation = 1.0 - 8.0 / 18.0,
                                .node_gpus = 8,
                                .largest_full_node_gang = 1,
                                .largest_full_node_gang_in_rack = 1,
                                .largest_full_node_gang_in_block = 1};
  EXPECT_EQ(r.total, want);
  EXPECT_EQ(r.skipped_workers, 0);

  // Adding the whole-node job takes the last whole node.
  std::vector<Admission> more = admissions;
  more.push_back({.job = 9, .queue = q, .flavor = f, .worker_nodes = {3}});
  const FragmentationStats& t = MeasureFragmentation(s, more).total;
  EXPECT_EQ(t.free_gpus, 10);
  EXPECT_EQ(t.whole_free_nodes, 0);
  EXPECT_EQ(t.fragmentation, 1.0);
  EXPECT_EQ(t.largest_full_node_gang, 0);
}

TEST(FragmentationTest, InvalidAdmissionsAreSkippedAndCounted) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNodes(2, f, 8);
  QueueId q = b.AddQueue("q");
  b.AddJob(7, q, /*workers=*/2, /*gpus=*/2);
  const Snapshot& s = b.Build();
  const std::vector<Admission> admissions = {
      // Unknown job: both workers skipped.
      {.job = 99, .queue = q, .flavor = f, .worker_nodes = {0, 1}},
      // Second worker's node is out of range.
      {.job = 7, .queue = q, .flavor = f, .worker_nodes = {0, 5}},
      {.job = 7, .queue = q, .flavor = f, .worker_nodes = {-1}},
  };
  const FragmentationReport r = MeasureFragmentation(s, admissions);
  EXPECT_EQ(r.skipped_workers, 4);
  EXPECT_EQ(r.total.free_gpus, 14);
  EXPECT_EQ(r.total.whole_free_nodes, 1);
  EXPECT_DOUBLE_EQ(r.total.fragmentation, 1.0 - 8.0 / 14.0);
}

TEST(FragmentationTest, FlavorsAreMeasuredSeparately) {
  SnapshotBuilder b;
  FlavorId a100 = b.AddFlavor("a100");
  FlavorId h100 = b.AddFlavor("h100");
  FlavorId spot = b.AddFlavor("h100-spot", FlavorKind::kSpot);  // No nodes.
  // a100: 3 x 8 GPUs in rack 0 / block 0, one partly used.
  b.AddNodes(3, a100, 8, /*block=*/0, /*rack=*/0);
  Use(b, 0, 4);
  // h100: mixed sizes. 4 x 4 GPUs and 2 x 2 GPUs (the same rack label as the
  // a100 nodes: a gang never mixes flavors, so they are counted apart).
  b.AddNodes(4, h100, 4, /*block=*/0, /*rack=*/0);
  NodeId small = b.AddNode(h100, 2, 0, 0);
  b.AddNode(h100, 2, 0, 0);
  Use(b, 3, 1);  // An h100 4-GPU node, 3 free.
  Use(b, small, 1);
  const FragmentationReport r = MeasureFragmentation(b.Build());
  ASSERT_EQ(r.flavors.size(), 3u);
  EXPECT_EQ(r.flavors[a100],
            (FragmentationStats{.nodes = 3,
                                .gpus = 24,
                                .free_gpus = 20,
                                .whole_free_nodes = 2,
                                .whole_free_gpus = 16,
                                .fragmentation = 1.0 - 16.0 / 20.0,
                                .node_gpus = 8,
                                .largest_full_node_gang = 2,
                                .largest_full_node_gang_in_rack = 2,
                                .largest_full_node_gang_in_block = 2}));
  // h100 free: 3 + 4 + 4 + 4 + 1 + 2 = 18; whole-free: three 4-GPU nodes and
  // one 2-GPU node (14 GPUs). A full-node worker has 4 GPUs: the 2-GPU node
  // is whole-free but cannot hold one.
  EXPECT_EQ(r.flavors[h100],
            (FragmentationStats{.nodes = 6,
                                .gpus = 20,
                                .free_gpus = 18,
                                .whole_free_nodes = 4,
                                .whole_free_gpus = 14,
                                .fragmentation = 1.0 - 14.0 / 18.0,
                                .node_gpus = 4,
                                .largest_full_node_gang = 3,
                                .largest_full_node_gang_in_rack = 3,
                                .largest_full_node_gang_in_block = 3}));
  EXPECT_EQ(r.flavors[spot], FragmentationStats{});
  // Total: sums, the ratio over the sums, the gang of the flavor with the
  // most full-node workers (h100: 3 x 4 GPUs).
  EXPECT_EQ(r.total,
            (FragmentationStats{.nodes = 9,
                                .gpus = 44,
                                .free_gpus = 38,
                                .whole_free_nodes = 6,
                                .whole_free_gpus = 30,
                                .fragmentation = 1.0 - 30.0 / 38.0,
                                .node_gpus = 4,
                                .largest_full_node_gang = 3,
                                .largest_full_node_gang_in_rack = 3,
                                .largest_full_node_gang_in_block = 3}));
}

TEST(FragmentationTest, TotalGangTiesGoToTheLowerFlavorId) {
  SnapshotBuilder b;
  FlavorId empty = b.AddFlavor("empty");  // No nodes: never chosen.
  FlavorId a = b.AddFlavor("a");
  FlavorId c = b.AddFlavor("c");
  b.AddNode(a, 4, 0, 0);
  b.AddNode(c, 8, 1, 1);
  const FragmentationReport r = MeasureFragmentation(b.Build());
  EXPECT_EQ(r.flavors[empty], FragmentationStats{});
  EXPECT_EQ(r.total.largest_full_node_gang, 1);
  EXPECT_EQ(r.total.node_gpus, 4);
  EXPECT_EQ(r.total.whole_free_nodes, 2);
}

// --- The policy's placement against a naive spreading baseline. ---

// 32 nodes x 8 GPUs: 2 blocks x 4 racks x 4 nodes; some nodes partly busy;
// one queue with quota for everything; 1-4 GPU single-worker jobs asking for
// at least `job_gpus` GPUs in all.
Snapshot SmallJobsWorkload(uint64_t seed, int64_t job_gpus) {
  std::mt19937_64 rng(seed);
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("h100");
  for (int n = 0; n < 32; ++n) {
    b.AddNode(f, 8, /*block=*/n / 16, /*rack=*/n / 4);
  }
  QueueId q = b.AddGpuQueue("q", std::nullopt, f, 32 * 8);
  JobId id = 1;
  for (int i = 0; i < 6; ++i) {
    const NodeId node = std::uniform_int_distribution<NodeId>(0, 31)(rng);
    const int64_t gpus = std::uniform_int_distribution<int64_t>(1, 7)(rng);
    if (b.snapshot().nodes[node].used.gpus + gpus > 8) continue;
    b.AddRunning(id++, q, f, node, gpus);
  }
  int64_t total = 0;
  for (TimeMicros t = 1; total < job_gpus; ++t) {
    const int64_t gpus = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    b.AddJob(id++, q, /*workers=*/1, gpus, /*submit_time=*/t);
    total += gpus;
  }
  return b.Build();
}

// Worst fit: each worker, in pending order, to the node with the most free
// GPUs (the lowest id on ties).
std::vector<Admission> SpreadEvenly(const Snapshot& s) {
  std::vector<int64_t> free;
  for (const Node& node : s.nodes) {
    free.push_back(node.capacity.gpus - node.used.gpus);
  }
  std::vector<Admission> admissions;
  for (const PendingJob& job : s.pending) {
    Admission a{.job = job.id, .queue = job.queue, .flavor = 0};
    for (int32_t w = 0; w < job.workers; ++w) {
      NodeId best = 0;
      for (NodeId n = 1; n < static_cast<NodeId>(free.size()); ++n) {
        if (free[n] > free[best]) best = n;
      }
      EXPECT_GE(free[best], job.worker.gpus) << "job " << job.id;
      free[best] -= job.worker.gpus;
      a.worker_nodes.push_back(best);
    }
    admissions.push_back(a);
  }
  return admissions;
}

// Light load (spreading still leaves whole nodes free) and heavy load
// (spreading touches every node), 20 seeds each.
TEST(FragmentationVsSpreadingTest, PolicyKeepsMoreWholeNodesFree) {
  for (int64_t job_gpus : {24, 120}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      SCOPED_TRACE(::testing::Message()
                   << "job GPUs " << job_gpus << ", seed " << seed);
      const Snapshot s = SmallJobsWorkload(seed, job_gpus);
      const Decisions d = Decide(s);
      ASSERT_EQ(d.admissions.size(), s.pending.size());
      const FragmentationReport policy = MeasureFragmentation(s, d.admissions);
      const FragmentationReport spread =
          MeasureFragmentation(s, SpreadEvenly(s));
      EXPECT_EQ(policy.skipped_workers, 0);
      EXPECT_EQ(spread.skipped_workers, 0);
      // The same jobs: the same free GPUs, differently spread.
      ASSERT_EQ(policy.total.free_gpus, spread.total.free_gpus);
      EXPECT_LT(policy.total.fragmentation, spread.total.fragmentation);
      EXPECT_GT(policy.total.whole_free_nodes, spread.total.whole_free_nodes);
      EXPECT_GT(policy.total.largest_full_node_gang,
                spread.total.largest_full_node_gang);
      // Not asserted: the largest whole-free block. Best fit per job does not
      // guarantee it (with 24 GPUs of jobs, some seeds leave a block with
      // more whole-free nodes under spreading).
    }
  }
}

}  // namespace
}  // namespace trainyard::scheduler::policy
