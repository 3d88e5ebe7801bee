#include "services/lib/domain/capacity.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_join.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

namespace v1 = ::trainyard::v1;

constexpr int64_t kInf = std::numeric_limits<int64_t>::max();

int64_t SatMul(int64_t a, int64_t b) {
  int64_t out;
  return __builtin_mul_overflow(a, b, &out) ? kInf : out;
}

int64_t SatAdd(int64_t a, int64_t b) {
  int64_t out;
  return __builtin_add_overflow(a, b, &out) ? kInf : out;
}

using ShapeKey = std::tuple<int32_t, std::string, int64_t, int64_t>;

struct DomainBuilder {
  std::string cluster;
  v1::BackendKind backend = v1::BACKEND_KIND_UNSPECIFIED;
  absl::flat_hash_map<ShapeKey, int64_t> counts;
};

void Add(absl::flat_hash_map<std::string, DomainBuilder>& domains,
         const std::string& key, const std::string& cluster,
         v1::BackendKind backend, const ShapeKey& shape) {
  DomainBuilder& d = domains[key];
  d.cluster = cluster;
  d.backend = backend;
  ++d.counts[shape];
}

template <typename Domain, typename Shape>
std::vector<Domain> Finish(
    absl::flat_hash_map<std::string, DomainBuilder>& builders) {
  // Sorted by key so that the index is deterministic.
  std::map<std::string, DomainBuilder*> sorted;
  for (auto& [key, builder] : builders) sorted[key] = &builder;
  std::vector<Domain> out;
  out.reserve(sorted.size());
  for (auto& [key, builder] : sorted) {
    Domain d;
    d.cluster = builder->cluster;
    d.backend = builder->backend;
    std::map<ShapeKey, int64_t> shapes(builder->counts.begin(),
                                       builder->counts.end());
    for (const auto& [shape, count] : shapes) {
      Shape s;
      s.capacity.set_gpus(std::get<0>(shape));
      s.capacity.set_gpu_model(std::get<1>(shape));
      s.capacity.set_cpu_millis(std::get<2>(shape));
      s.capacity.set_memory_bytes(std::get<3>(shape));
      s.count = count;
      d.shapes.push_back(std::move(s));
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string_view BackendWord(v1::BackendPreference p) {
  switch (p) {
    case v1::BACKEND_PREFERENCE_SLURM:
      return "Slurm ";
    case v1::BACKEND_PREFERENCE_KUBERNETES:
      return "Kubernetes ";
    case v1::BACKEND_PREFERENCE_SIM:
      return "simulated ";
    default:
      return "";
  }
}

std::string_view LevelWord(v1::TopologyLevel level) {
  switch (level) {
    case v1::TOPOLOGY_LEVEL_BLOCK:
      return "block";
    case v1::TOPOLOGY_LEVEL_RACK:
      return "rack";
    default:
      return "cluster";
  }
}

// "1500m" → "1.5", "16000" → "16".
std::string Cpus(int64_t millis) {
  std::string out = Cat(millis / 1000);
  if (int64_t frac = millis % 1000; frac != 0) {
    std::string digits = Cat(1000 + frac).substr(1);  // 3 digits, zero-padded
    while (!digits.empty() && digits.back() == '0') digits.pop_back();
    absl::StrAppend(&out, ".", digits);
  }
  return out;
}

std::string Bytes(int64_t bytes) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (bytes % kGiB == 0) return Cat(bytes / kGiB, " GiB");
  if (bytes % kMiB == 0) return Cat(bytes / kMiB, " MiB");
  return Cat(bytes, " bytes");
}

// "8 GPUs", "8 H100 GPUs", "1 GPU", "16 CPUs".
std::string DescribeWorker(const v1::Resources& w) {
  if (w.gpus() > 0) {
    return Cat(w.gpus(), " ", w.gpu_model(), w.gpu_model().empty() ? "" : " ",
               w.gpus() == 1 ? "GPU" : "GPUs");
  }
  return Cat(Cpus(w.cpu_millis()), w.cpu_millis() == 1000 ? " CPU" : " CPUs");
}

}  // namespace

bool GpuModelMatches(std::string_view wanted, std::string_view offered) {
  return wanted.empty() || wanted == offered;
}

bool BackendMatches(v1::BackendPreference preference, v1::BackendKind kind) {
  switch (preference) {
    case v1::BACKEND_PREFERENCE_SLURM:
      return kind == v1::BACKEND_KIND_SLURM;
    case v1::BACKEND_PREFERENCE_KUBERNETES:
      return kind == v1::BACKEND_KIND_KUBERNETES;
    case v1::BACKEND_PREFERENCE_SIM:
      return kind == v1::BACKEND_KIND_SIM;
    default:
      return true;
  }
}

int64_t WorkersPerNode(const v1::Resources& node, const v1::Resources& worker) {
  int64_t n = kInf;
  if (worker.gpus() > 0) {
    if (!GpuModelMatches(worker.gpu_model(), node.gpu_model())) return 0;
    n = std::min<int64_t>(n, std::max(0, node.gpus()) / worker.gpus());
  }
  if (worker.cpu_millis() > 0) {
    n = std::min(n,
                 std::max<int64_t>(0, node.cpu_millis()) / worker.cpu_millis());
  }
  if (worker.memory_bytes() > 0) {
    n = std::min(
        n, std::max<int64_t>(0, node.memory_bytes()) / worker.memory_bytes());
  }
  return n;
}

CapacityIndex CapacityIndex::Build(
    const std::vector<v1::Node>& nodes,
    const absl::flat_hash_map<std::string, v1::BackendKind>&
        cluster_backend_by_id) {
  absl::flat_hash_map<std::string, DomainBuilder> clusters, blocks, racks;
  for (const v1::Node& node : nodes) {
    if (node.state() == v1::NODE_STATE_DOWN) continue;
    absl::StatusOr<ClusterChildName> name = ParseNodeName(node.name(), "name");
    if (!name.ok()) continue;
    const std::string& cluster = name->cluster;
    auto it = cluster_backend_by_id.find(cluster);
    const v1::BackendKind backend = it == cluster_backend_by_id.end()
                                        ? v1::BACKEND_KIND_UNSPECIFIED
                                        : it->second;
    const v1::Resources& c = node.capacity();
    const ShapeKey shape{c.gpus(), c.gpu_model(), c.cpu_millis(),
                         c.memory_bytes()};
    const std::string block_key = Cat(cluster, "\n", node.topology().block());
    Add(clusters, cluster, cluster, backend, shape);
    Add(blocks, block_key, cluster, backend, shape);
    Add(racks, Cat(block_key, "\n", node.topology().rack()), cluster, backend,
        shape);
  }
  CapacityIndex index;
  index.clusters_ = Finish<Domain, Shape>(clusters);
  index.blocks_ = Finish<Domain, Shape>(blocks);
  index.racks_ = Finish<Domain, Shape>(racks);
  return index;
}

const std::vector<CapacityIndex::Domain>& CapacityIndex::DomainsAt(
    v1::TopologyLevel level) const {
  switch (level) {
    case v1::TOPOLOGY_LEVEL_BLOCK:
      return blocks_;
    case v1::TOPOLOGY_LEVEL_RACK:
      return racks_;
    default:
      return clusters_;
  }
}

int64_t CapacityIndex::MaxWorkersInOneCluster(
    const v1::Resources& worker, v1::BackendPreference backend) const {
  return MaxWorkersInOneDomain(worker, backend, v1::TOPOLOGY_LEVEL_UNSPECIFIED);
}

int64_t CapacityIndex::MaxWorkersInOneDomain(const v1::Resources& worker,
                                             v1::BackendPreference backend,
                                             v1::TopologyLevel level) const {
  int64_t best = 0;
  for (const Domain& d : DomainsAt(level)) {
    if (!BackendMatches(backend, d.backend)) continue;
    int64_t total = 0;
    for (const Shape& s : d.shapes) {
      total =
          SatAdd(total, SatMul(s.count, WorkersPerNode(s.capacity, worker)));
    }
    best = std::max(best, total);
  }
  return best;
}

absl::Status CapacityIndex::DiagnoseSingleWorker(
    const v1::JobSpec& spec) const {
  const v1::Resources& w = spec.resources();
  bool any_cluster = false;
  bool enough_gpus = false, enough_gpus_of_model = false, enough_cpu = false,
       enough_memory = false;
  int32_t most_gpus = 0;
  int64_t most_cpu = 0, most_memory = 0;
  std::set<std::string> models_with_enough_gpus;
  for (const Domain& d : clusters_) {
    if (!BackendMatches(spec.backend(), d.backend)) continue;
    any_cluster = true;
    for (const Shape& s : d.shapes) {
      const v1::Resources& c = s.capacity;
      most_gpus = std::max(most_gpus, c.gpus());
      most_cpu = std::max(most_cpu, c.cpu_millis());
      most_memory = std::max(most_memory, c.memory_bytes());
      if (c.gpus() >= w.gpus()) {
        enough_gpus = true;
        if (w.gpus() == 0 || GpuModelMatches(w.gpu_model(), c.gpu_model())) {
          enough_gpus_of_model = true;
        }
        if (!c.gpu_model().empty())
          models_with_enough_gpus.insert(c.gpu_model());
      }
      if (c.cpu_millis() >= w.cpu_millis()) enough_cpu = true;
      if (c.memory_bytes() >= w.memory_bytes()) enough_memory = true;
    }
  }
  if (!any_cluster) {
    return FieldError("spec.backend", reason::kNoClusterFits,
                      Cat("no ", BackendWord(spec.backend()),
                          "cluster with usable nodes is known"));
  }
  if (!enough_gpus) {
    return FieldError("spec.resources.gpus", reason::kNoClusterFits,
                      Cat("no node has ", w.gpus(),
                          " GPUs; the most on one node is ", most_gpus));
  }
  if (!enough_gpus_of_model) {
    return FieldError("spec.resources.gpu_model", reason::kNoClusterFits,
                      Cat("no node has ", w.gpus(), " ", w.gpu_model(),
                          " GPUs; models with enough GPUs: ",
                          models_with_enough_gpus.empty()
                              ? std::string("none")
                              : absl::StrJoin(models_with_enough_gpus, ", ")));
  }
  if (!enough_cpu) {
    return FieldError("spec.resources.cpu_millis", reason::kNoClusterFits,
                      Cat("no node has ", Cpus(w.cpu_millis()),
                          " CPUs; the most on one node is ", Cpus(most_cpu)));
  }
  if (!enough_memory) {
    return FieldError(
        "spec.resources.memory_bytes", reason::kNoClusterFits,
        Cat("no node has ", Bytes(w.memory_bytes()),
            " of memory; the most on one node is ", Bytes(most_memory)));
  }
  std::string gpus_part;
  if (w.gpus() > 0) gpus_part = Cat(DescribeWorker(w), ", ");
  return FieldError(
      "spec.resources", reason::kNoClusterFits,
      Cat("no node can hold one worker of ", gpus_part, Cpus(w.cpu_millis()),
          " CPUs and ", Bytes(w.memory_bytes()), " of memory at once"));
}

absl::Status CapacityIndex::CheckFits(const v1::JobSpec& spec) const {
  if (empty()) return absl::OkStatus();
  const v1::Resources& w = spec.resources();
  const int64_t workers = spec.workers();
  const int64_t in_cluster = MaxWorkersInOneCluster(w, spec.backend());
  if (in_cluster == 0) return DiagnoseSingleWorker(spec);
  if (in_cluster < workers) {
    return FieldError("spec.workers", reason::kNoClusterFits,
                      Cat("gang of ", workers, " workers × ", DescribeWorker(w),
                          " cannot fit in any ", BackendWord(spec.backend()),
                          "cluster; the largest fits ", in_cluster));
  }
  const v1::TopologyLevel level = spec.topology().required_level();
  if (level == v1::TOPOLOGY_LEVEL_BLOCK || level == v1::TOPOLOGY_LEVEL_RACK) {
    const int64_t in_unit = MaxWorkersInOneDomain(w, spec.backend(), level);
    if (in_unit < workers) {
      return FieldError(
          "spec.topology.required_level", reason::kNoClusterFits,
          Cat("gang of ", workers, " workers × ", DescribeWorker(w),
              " cannot fit in one ", LevelWord(level), " of any ",
              BackendWord(spec.backend()), "cluster; the largest ",
              LevelWord(level), " fits ", in_unit));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainyard::domain
