#include "services/lib/domain/capacity.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

namespace v1 = ::trainyard::v1;

constexpr int64_t kGiB = int64_t{1} << 30;

struct NodeSpec {
  std::string cluster;
  int count;
  int32_t gpus;
  std::string model;
  int64_t cpu_millis = 192'000;
  int64_t memory = 2048 * kGiB;
  v1::NodeState state = v1::NODE_STATE_READY;
  std::string block = "";
  std::string rack = "";
};

std::vector<v1::Node> MakeNodes(const std::vector<NodeSpec>& specs) {
  std::vector<v1::Node> nodes;
  int serial = 0;
  for (const NodeSpec& s : specs) {
    for (int i = 0; i < s.count; ++i) {
      v1::Node n;
      n.set_name(Cat("clusters/", s.cluster, "/nodes/n", serial++));
      n.set_pool("p");
      n.mutable_capacity()->set_gpus(s.gpus);
      n.mutable_capacity()->set_gpu_model(s.model);
      n.mutable_capacity()->set_cpu_millis(s.cpu_millis);
      n.mutable_capacity()->set_memory_bytes(s.memory);
      n.set_state(s.state);
      n.mutable_topology()->set_block(s.block);
      n.mutable_topology()->set_rack(s.rack);
      nodes.push_back(std::move(n));
    }
  }
  return nodes;
}

v1::Resources Worker(int32_t gpus, std::string model = "", int64_t cpu = 16'000,
                     int64_t memory = 64 * kGiB) {
  v1::Resources r;
  r.set_gpus(gpus);
  r.set_gpu_model(model);
  r.set_cpu_millis(cpu);
  r.set_memory_bytes(memory);
  return r;
}

v1::JobSpec Spec(
    int32_t workers, const v1::Resources& worker,
    v1::BackendPreference backend = v1::BACKEND_PREFERENCE_UNSPECIFIED) {
  v1::JobSpec spec;
  spec.set_project("p");
  spec.set_queue("q");
  spec.set_workers(workers);
  *spec.mutable_resources() = worker;
  spec.set_backend(backend);
  return spec;
}

const absl::flat_hash_map<std::string, v1::BackendKind> kBackends = {
    {"slurm-a", v1::BACKEND_KIND_SLURM},
    {"k8s-b", v1::BACKEND_KIND_KUBERNETES},
    {"sim-c", v1::BACKEND_KIND_SIM},
};

void ExpectNoFit(const absl::Status& s, std::string_view field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(ErrorField(s), field) << s;
  EXPECT_EQ(ErrorReason(s), "NO_CLUSTER_FITS") << s;
}

TEST(WorkersPerNodeTest, MinOverResources) {
  v1::Resources node = Worker(8, "H100", 64'000, 512 * kGiB);
  EXPECT_EQ(WorkersPerNode(node, Worker(1, "", 16'000, 64 * kGiB)),
            4);                                                    // CPU-bound
  EXPECT_EQ(WorkersPerNode(node, Worker(2, "", 1'000, kGiB)), 4);  // GPU-bound
  EXPECT_EQ(WorkersPerNode(node, Worker(1, "", 1'000, 256 * kGiB)),
            2);  // memory-bound
  EXPECT_EQ(WorkersPerNode(node, Worker(3, "", 1'000, kGiB)), 2);  // floor
  EXPECT_EQ(WorkersPerNode(node, Worker(9, "", 1'000, kGiB)), 0);
  EXPECT_EQ(WorkersPerNode(node, Worker(8, "H100", 1'000, kGiB)), 1);
  EXPECT_EQ(WorkersPerNode(node, Worker(8, "A100", 1'000, kGiB)), 0);
  EXPECT_EQ(WorkersPerNode(node, Worker(0, "", 8'000, kGiB)),
            8);  // CPU-only on a GPU node
  EXPECT_EQ(WorkersPerNode(node, Worker(0, "", 0, 0)), INT64_MAX);
}

TEST(CapacityIndexTest, GangLargerThanClusterIsRejected) {
  CapacityIndex index =
      CapacityIndex::Build(MakeNodes({{"slurm-a", 8, 8, "H100"}}), kBackends);
  EXPECT_FALSE(index.empty());
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_ANY),
            8);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(4), v1::BACKEND_PREFERENCE_ANY),
            16);
  EXPECT_TRUE(index.CheckFits(Spec(8, Worker(8))).ok());

  absl::Status s = index.CheckFits(Spec(9, Worker(8)));
  ExpectNoFit(s, "spec.workers");
  EXPECT_EQ(s.message(),
            "spec.workers: gang of 9 workers × 8 GPUs cannot fit in any "
            "cluster; the largest "
            "fits 8");
}

TEST(CapacityIndexTest, GpuModelFilter) {
  CapacityIndex index = CapacityIndex::Build(
      MakeNodes({{"slurm-a", 4, 8, "H100"}, {"slurm-a", 6, 8, "A100"}}),
      kBackends);
  const auto any = v1::BACKEND_PREFERENCE_ANY;
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8, "H100"), any), 4);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8, "A100"), any), 6);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), any), 10);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8, "H200"), any), 0);
  EXPECT_TRUE(index.CheckFits(Spec(10, Worker(8))).ok());
  ExpectNoFit(index.CheckFits(Spec(5, Worker(8, "H100"))), "spec.workers");
  absl::Status s = index.CheckFits(Spec(1, Worker(8, "H200")));
  ExpectNoFit(s, "spec.resources.gpu_model");
  EXPECT_NE(std::string(s.message()).find("A100, H100"), std::string::npos)
      << s;
}

TEST(CapacityIndexTest, BackendPreference) {
  CapacityIndex index = CapacityIndex::Build(
      MakeNodes({{"slurm-a", 8, 8, "H100"}, {"k8s-b", 2, 8, "H100"}}),
      kBackends);
  EXPECT_EQ(index.num_clusters(), 2u);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_ANY),
            8);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8),
                                         v1::BACKEND_PREFERENCE_UNSPECIFIED),
            8);
  EXPECT_EQ(
      index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_SLURM), 8);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8),
                                         v1::BACKEND_PREFERENCE_KUBERNETES),
            2);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_SIM),
            0);

  EXPECT_TRUE(
      index.CheckFits(Spec(8, Worker(8), v1::BACKEND_PREFERENCE_SLURM)).ok());
  absl::Status s =
      index.CheckFits(Spec(3, Worker(8), v1::BACKEND_PREFERENCE_KUBERNETES));
  ExpectNoFit(s, "spec.workers");
  EXPECT_NE(
      std::string(s.message()).find("Kubernetes cluster; the largest fits 2"),
      std::string::npos)
      << s;
  ExpectNoFit(index.CheckFits(Spec(1, Worker(8), v1::BACKEND_PREFERENCE_SIM)),
              "spec.backend");
}

TEST(CapacityIndexTest, ClusterWithoutKnownBackendOnlyMatchesAny) {
  CapacityIndex index =
      CapacityIndex::Build(MakeNodes({{"unknown", 2, 8, "H100"}}), kBackends);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_ANY),
            2);
  EXPECT_EQ(
      index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_SLURM), 0);
}

TEST(CapacityIndexTest, TwoClustersFitsInTheLargerOnly) {
  // 14 nodes in all, but a gang never spans clusters.
  CapacityIndex index = CapacityIndex::Build(
      MakeNodes({{"slurm-a", 4, 8, "H100"}, {"k8s-b", 10, 8, "H100"}}),
      kBackends);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_ANY),
            10);
  EXPECT_TRUE(index.CheckFits(Spec(10, Worker(8))).ok());
  ExpectNoFit(index.CheckFits(Spec(11, Worker(8))), "spec.workers");
  ExpectNoFit(index.CheckFits(Spec(14, Worker(8))), "spec.workers");
  ExpectNoFit(index.CheckFits(Spec(5, Worker(8), v1::BACKEND_PREFERENCE_SLURM)),
              "spec.workers");
}

TEST(CapacityIndexTest, NodeStates) {
  CapacityIndex index =
      CapacityIndex::Build(MakeNodes({{"slurm-a", 2, 8, "H100", 192'000,
                                       2048 * kGiB, v1::NODE_STATE_READY},
                                      {"slurm-a", 3, 8, "H100", 192'000,
                                       2048 * kGiB, v1::NODE_STATE_DRAINING},
                                      {"slurm-a", 4, 8, "H100", 192'000,
                                       2048 * kGiB, v1::NODE_STATE_UNSPECIFIED},
                                      {"slurm-a", 5, 8, "H100", 192'000,
                                       2048 * kGiB, v1::NODE_STATE_DOWN}}),
                           kBackends);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_ANY),
            9);
}

TEST(CapacityIndexTest, EmptyIndexAcceptsEverything) {
  CapacityIndex empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_TRUE(empty.CheckFits(Spec(4096, Worker(64, "B200"))).ok());

  CapacityIndex all_down =
      CapacityIndex::Build(MakeNodes({{"slurm-a", 2, 8, "H100", 192'000,
                                       2048 * kGiB, v1::NODE_STATE_DOWN}}),
                           kBackends);
  EXPECT_TRUE(all_down.empty());
  EXPECT_TRUE(all_down.CheckFits(Spec(4096, Worker(64))).ok());

  // Nodes with malformed names are skipped.
  v1::Node bad;
  bad.set_name("nodes/n1");
  bad.mutable_capacity()->set_gpus(8);
  EXPECT_TRUE(CapacityIndex::Build({bad}, kBackends).empty());
}

TEST(CapacityIndexTest, SingleWorkerDiagnosis) {
  // One GPU node rich in CPU but poor in memory, one the other way round.
  CapacityIndex index = CapacityIndex::Build(
      MakeNodes({{"slurm-a", 1, 8, "H100", 256'000, 64 * kGiB},
                 {"slurm-a", 1, 8, "H100", 16'000, 4096 * kGiB}}),
      kBackends);
  ExpectNoFit(index.CheckFits(Spec(1, Worker(16))), "spec.resources.gpus");
  ExpectNoFit(index.CheckFits(Spec(1, Worker(1, "", 512'000, kGiB))),
              "spec.resources.cpu_millis");
  ExpectNoFit(index.CheckFits(Spec(1, Worker(1, "", 1'000, 8192 * kGiB))),
              "spec.resources.memory_bytes");
  ExpectNoFit(index.CheckFits(Spec(1, Worker(1, "", 128'000, 1024 * kGiB))),
              "spec.resources");
  EXPECT_TRUE(index.CheckFits(Spec(2, Worker(1, "", 16'000, 64 * kGiB))).ok());
}

TEST(CapacityIndexTest, CpuOnlyJobsUseAnyNode) {
  CapacityIndex index = CapacityIndex::Build(
      MakeNodes({{"sim-c", 2, 8, "H100", 64'000, 256 * kGiB},
                 {"sim-c", 2, 0, "", 32'000, 128 * kGiB}}),
      kBackends);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(0, "", 32'000, 128 * kGiB),
                                         v1::BACKEND_PREFERENCE_SIM),
            6);
}

TEST(CapacityIndexTest, RequiredTopology) {
  // Cluster of 2 blocks × 2 racks × 2 nodes of 8 GPUs.
  std::vector<NodeSpec> specs;
  for (const std::string& block : std::vector<std::string>{"b1", "b2"}) {
    for (const std::string& rack : std::vector<std::string>{"r1", "r2"}) {
      specs.push_back({"slurm-a", 2, 8, "H100", 192'000, 2048 * kGiB,
                       v1::NODE_STATE_READY, block, rack});
    }
  }
  CapacityIndex index = CapacityIndex::Build(MakeNodes(specs), kBackends);
  const auto any = v1::BACKEND_PREFERENCE_ANY;
  EXPECT_EQ(
      index.MaxWorkersInOneDomain(Worker(8), any, v1::TOPOLOGY_LEVEL_RACK), 2);
  EXPECT_EQ(
      index.MaxWorkersInOneDomain(Worker(8), any, v1::TOPOLOGY_LEVEL_BLOCK), 4);
  EXPECT_EQ(index.MaxWorkersInOneDomain(Worker(8), any,
                                        v1::TOPOLOGY_LEVEL_UNSPECIFIED),
            8);

  v1::JobSpec rack = Spec(3, Worker(8));
  rack.mutable_topology()->set_required_level(v1::TOPOLOGY_LEVEL_RACK);
  absl::Status s = index.CheckFits(rack);
  ExpectNoFit(s, "spec.topology.required_level");
  EXPECT_NE(std::string(s.message()).find("one rack"), std::string::npos) << s;
  rack.set_workers(2);
  EXPECT_TRUE(index.CheckFits(rack).ok());

  v1::JobSpec block = Spec(4, Worker(8));
  block.mutable_topology()->set_required_level(v1::TOPOLOGY_LEVEL_BLOCK);
  EXPECT_TRUE(index.CheckFits(block).ok());
  block.set_workers(5);
  ExpectNoFit(index.CheckFits(block), "spec.topology.required_level");
  // Beyond the whole cluster, the workers are at fault whatever the topology.
  block.set_workers(9);
  ExpectNoFit(index.CheckFits(block), "spec.workers");
  // A preferred level never rejects.
  v1::JobSpec preferred = Spec(8, Worker(8));
  preferred.mutable_topology()->set_preferred_level(v1::TOPOLOGY_LEVEL_RACK);
  EXPECT_TRUE(index.CheckFits(preferred).ok());
}

TEST(CapacityIndexTest, LargeInventoryIsCheapToQuery) {
  // 20,000 nodes of 3 shapes in 4 clusters; each query visits only the distinct
  // shapes.
  std::vector<NodeSpec> specs;
  for (const std::string& cluster :
       std::vector<std::string>{"slurm-a", "k8s-b", "sim-c", "other"}) {
    specs.push_back({cluster, 3000, 8, "H100"});
    specs.push_back({cluster, 1500, 8, "A100"});
    specs.push_back({cluster, 500, 0, "", 64'000, 256 * kGiB});
  }
  CapacityIndex index = CapacityIndex::Build(MakeNodes(specs), kBackends);
  int64_t total = 0;
  for (int i = 0; i < 100'000; ++i) {
    total += index.MaxWorkersInOneCluster(
        Worker(1 + i % 8, i % 2 ? "H100" : ""), v1::BACKEND_PREFERENCE_ANY);
  }
  EXPECT_GT(total, 0);
  EXPECT_EQ(index.MaxWorkersInOneCluster(Worker(8), v1::BACKEND_PREFERENCE_ANY),
            4500);
}

}  // namespace
}  // namespace trainyard::domain
