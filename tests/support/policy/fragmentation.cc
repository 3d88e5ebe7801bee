#include "tests/support/policy/fragmentation.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace trainyard::scheduler::policy {
namespace {

double Ratio(int64_t whole_free_gpus, int64_t free_gpus) {
  if (free_gpus <= 0) return 0.0;
  return 1.0 -
         static_cast<double>(whole_free_gpus) / static_cast<double>(free_gpus);
}

// GPUs each admitted worker takes from its node; 0 for an admission whose job
// is not pending (such workers are skipped and counted in the report).
std::vector<int64_t> ChargedGpus(const Snapshot& s,
                                 const std::vector<Admission>& admissions,
                                 int64_t& skipped_workers) {
  std::vector<int64_t> charged(s.nodes.size(), 0);
  if (admissions.empty()) return charged;
  // Worker GPUs of each admitted job; -1 until found among the pending jobs.
  absl::flat_hash_map<JobId, int64_t> worker_gpus;
  worker_gpus.reserve(admissions.size());
  for (const Admission& a : admissions) worker_gpus.try_emplace(a.job, -1);
  for (const PendingJob& job : s.pending) {
    auto it = worker_gpus.find(job.id);
    if (it != worker_gpus.end() && it->second < 0) {
      it->second = job.worker.gpus;
    }
  }
  const int64_t num_nodes = static_cast<int64_t>(s.nodes.size());
  for (const Admission& a : admissions) {
    const int64_t gpus = worker_gpus.find(a.job)->second;
    for (NodeId n : a.worker_nodes) {
      if (gpus < 0 || n < 0 || n >= num_nodes) {
        ++skipped_workers;
        continue;
      }
      charged[n] += gpus;
    }
  }
  return charged;
}

// Key of a (flavor, topology label) group.
int64_t GroupKey(FlavorId flavor, TopologyLabel label) {
  return (static_cast<int64_t>(flavor) << 32) |
         static_cast<int64_t>(static_cast<uint32_t>(label));
}

}  // namespace

FragmentationReport MeasureFragmentation(
    const Snapshot& s, const std::vector<Admission>& admissions) {
  FragmentationReport report;
  const int64_t num_flavors = static_cast<int64_t>(s.flavors.size());
  report.flavors.resize(s.flavors.size());
  const std::vector<int64_t> charged =
      ChargedGpus(s, admissions, report.skipped_workers);

  auto counted = [&](const Node& node) {
    return node.schedulable && node.flavor >= 0 && node.flavor < num_flavors &&
           node.capacity.gpus > 0;
  };
  // Node size of each flavor (the GPUs of a full-node worker).
  for (const Node& node : s.nodes) {
    if (!counted(node)) continue;
    int64_t& size = report.flavors[node.flavor].node_gpus;
    size = std::max(size, node.capacity.gpus);
  }

  // Nodes able to hold a full-node worker, per (flavor, rack/block) label.
  absl::flat_hash_map<int64_t, int64_t> in_rack, in_block;
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    const Node& node = s.nodes[n];
    if (!counted(node)) continue;
    FragmentationStats& f = report.flavors[node.flavor];
    const int64_t capacity = node.capacity.gpus;
    const int64_t free = std::clamp(capacity - node.used.gpus - charged[n],
                                    int64_t{0}, capacity);
    ++f.nodes;
    f.gpus += capacity;
    f.free_gpus += free;
    if (free == capacity) {
      ++f.whole_free_nodes;
      f.whole_free_gpus += capacity;
    }
    if (free >= f.node_gpus) {
      ++f.largest_full_node_gang;
      if (node.rack != kNoLabel) {
        f.largest_full_node_gang_in_rack =
            std::max(f.largest_full_node_gang_in_rack,
                     ++in_rack[GroupKey(node.flavor, node.rack)]);
      }
      if (node.block != kNoLabel) {
        f.largest_full_node_gang_in_block =
            std::max(f.largest_full_node_gang_in_block,
                     ++in_block[GroupKey(node.flavor, node.block)]);
      }
    }
  }

  FragmentationStats& total = report.total;
  int64_t best_flavor = -1;
  for (int64_t id = 0; id < num_flavors; ++id) {
    FragmentationStats& f = report.flavors[id];
    f.fragmentation = Ratio(f.whole_free_gpus, f.free_gpus);
    if (f.nodes == 0) continue;
    total.nodes += f.nodes;
    total.gpus += f.gpus;
    total.free_gpus += f.free_gpus;
    total.whole_free_nodes += f.whole_free_nodes;
    total.whole_free_gpus += f.whole_free_gpus;
    if (best_flavor < 0 ||
        f.largest_full_node_gang >
            report.flavors[best_flavor].largest_full_node_gang) {
      best_flavor = id;
    }
    total.largest_full_node_gang_in_rack = std::max(
        total.largest_full_node_gang_in_rack, f.largest_full_node_gang_in_rack);
    total.largest_full_node_gang_in_block =
        std::max(total.largest_full_node_gang_in_block,
                 f.largest_full_node_gang_in_block);
  }
  total.fragmentation = Ratio(total.whole_free_gpus, total.free_gpus);
  if (best_flavor >= 0) {
    total.node_gpus = report.flavors[best_flavor].node_gpus;
    total.largest_full_node_gang =
        report.flavors[best_flavor].largest_full_node_gang;
  }
  return report;
}

}  // namespace trainyard::scheduler::policy
