#include "services/scheduler/policy/placement_index.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace trainyard::scheduler::policy::internal {

ShapeIndex::ShapeIndex(const Snapshot& s, const std::vector<Resources>& free,
                       const std::vector<NodeId>& nodes,
                       const WorkerShape& shape)
    : shape_(shape) {
  rack_of_node_.assign(s.nodes.size(), -1);
  k_of_node_.assign(s.nodes.size(), 0);
  absl::flat_hash_map<TopologyLabel, int> rack_slot, block_slot;
  // The slots of the last node's rack and block.
  TopologyLabel last_rack = kNoLabel, last_block = kNoLabel;
  int rack = -1, block = -1;
  for (NodeId id : nodes) {
    const Node& node = s.nodes[id];
    if (!node.schedulable) continue;
    if (!NodeMatches(node, shape)) continue;
    if (node.rack == kNoLabel || node.block == kNoLabel) {
      usable_ = false;
      return;
    }
    // One cluster only: choosing among clusters is PlaceGang's.
    if (cluster_ == kUnset) cluster_ = node.cluster;
    if (node.cluster != cluster_) {
      usable_ = false;
      return;
    }
    const int64_t k = WorkersThatFit(free[id], shape, kMaxIndexedWorkers + 1);
    if (k > kMaxIndexedWorkers) {
      usable_ = false;
      return;
    }
    // Nodes of a rack are usually consecutive: the last node's slots are
    // reused without hashing.
    if (node.block != last_block) {
      auto [bit, bnew] =
          block_slot.try_emplace(node.block, static_cast<int>(blocks_.size()));
      if (bnew) blocks_.push_back({.label = node.block});
      last_block = node.block;
      block = bit->second;
    }
    if (node.rack != last_rack) {
      auto [rit, rnew] =
          rack_slot.try_emplace(node.rack, static_cast<int>(racks_.size()));
      if (rnew) {
        racks_.push_back({.label = node.rack, .block = block});
        blocks_[block].racks.push_back(rit->second);
      }
      last_rack = node.rack;
      rack = rit->second;
    }
    if (racks_[rack].block != block) {
      usable_ = false;
      return;
    }
    racks_[rack].nodes.push_back(id);
    rack_of_node_[id] = rack;
    k_of_node_[id] = k;
  }
  for (NodeId id : nodes) {
    if (rack_of_node_[id] >= 0) max_k_ = std::max(max_k_, k_of_node_[id]);
  }
  // k never grows during a cycle, so max_k_ bounds every histogram.
  total_hist_.assign(max_k_ + 1, 0);
  for (Block& block : blocks_) block.hist.assign(max_k_ + 1, 0);
  for (Rack& rack : racks_) {
    rack.hist.assign(max_k_ + 1, 0);
    for (NodeId id : rack.nodes) {
      ++rack.hist[k_of_node_[id]];
      ++blocks_[rack.block].hist[k_of_node_[id]];
      ++total_hist_[k_of_node_[id]];
    }
  }
}

bool ShapeIndex::Set(NodeId id, const Resources& free) {
  const int r = rack_of_node_[id];
  if (r < 0) return true;
  const int64_t k = WorkersThatFit(free, shape_, kMaxIndexedWorkers + 1);
  if (k > kMaxIndexedWorkers) {
    usable_ = false;
    return false;
  }
  if (k > max_k_) {
    max_k_ = k;
    total_hist_.resize(max_k_ + 1, 0);
    for (Rack& rack : racks_) rack.hist.resize(max_k_ + 1, 0);
    for (Block& block : blocks_) block.hist.resize(max_k_ + 1, 0);
  }
  Move(id, r, k);
  return true;
}

PlacementResult ShapeIndex::Place(const std::vector<Resources>& free,
                                  const PendingJob& job) const {
  // Called only with job.workers >= 1.
  PlacementResult result;
  const int64_t need = job.workers;
  const int64_t total = Capped(total_hist_, need);
  result.capacity_workers = std::min(total, need);
  if (total < need) {
    result.failure = PlacementFailure::kNoCapacity;
    return result;
  }
  const bool rack_level = job.required_topology == TopologyLevel::kRack;
  // Rack capacities are computed only where they are needed.
  std::vector<int64_t> rack_workers(racks_.size(), -1);
  if (rack_level) {
    for (size_t r = 0; r < racks_.size(); ++r)
      rack_workers[r] = Capped(racks_[r].hist, need);
  }
  std::vector<int64_t> block_workers(blocks_.size(), 0);
  for (size_t b = 0; b < blocks_.size(); ++b)
    block_workers[b] = Capped(blocks_[b].hist, need);
  std::vector<NodeId>& out = result.worker_nodes;
  if (job.required_topology == TopologyLevel::kRack ||
      job.required_topology == TopologyLevel::kBlock) {
    const std::vector<int64_t>& workers =
        rack_level ? rack_workers : block_workers;
    const int best = ChooseRequiredGroup(
        workers.size(), need, [&](size_t g) { return workers[g] > 0; },
        [&](size_t g) { return workers[g]; },
        [&](size_t g) { return Label(rack_level, g); }, result);
    if (best < 0) return result;
    if (rack_level) {
      PlaceOnNodes(free, best, need, need, out);
    } else {
      PlaceOnRacks(free, rack_workers, best, need, need, out);
    }
    std::sort(out.begin(), out.end());
    return result;
  }
  std::vector<int64_t> caps, tie;
  std::vector<int> items;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (block_workers[b] <= 0) continue;
    items.push_back(static_cast<int>(b));
    caps.push_back(block_workers[b]);
    tie.push_back(blocks_[b].label);
  }
  for (const auto& [i, n] : ChooseFewest(caps, tie, need)) {
    PlaceOnRacks(free, rack_workers, items[i], n, need, out);
  }
  std::sort(out.begin(), out.end());
  return result;
}

void ShapeIndex::PlaceOnNodes(const std::vector<Resources>& free, int rack,
                              int64_t n, int64_t cap,
                              std::vector<NodeId>& out) const {
  std::vector<int64_t> caps, tie;
  std::vector<NodeId> items;
  for (NodeId id : racks_[rack].nodes) {
    const int64_t k = std::min<int64_t>(k_of_node_[id], cap);
    if (k <= 0) continue;
    items.push_back(id);
    caps.push_back(k);
    tie.push_back(free[id].gpus);
  }
  for (const auto& [i, m] : ChooseFewest(caps, tie, n)) {
    for (int64_t w = 0; w < m; ++w) out.push_back(items[i]);
  }
}

void ShapeIndex::PlaceOnRacks(const std::vector<Resources>& free,
                              std::vector<int64_t>& rack_workers, int block,
                              int64_t n, int64_t cap,
                              std::vector<NodeId>& out) const {
  std::vector<int64_t> caps, tie;
  std::vector<int> items;
  for (int r : blocks_[block].racks) {
    if (rack_workers[r] < 0) rack_workers[r] = Capped(racks_[r].hist, cap);
    if (rack_workers[r] <= 0) continue;
    items.push_back(r);
    caps.push_back(rack_workers[r]);
    tie.push_back(racks_[r].label);
  }
  for (const auto& [i, m] : ChooseFewest(caps, tie, n)) {
    PlaceOnNodes(free, items[i], m, cap, out);
  }
}

bool PlacementIndexes::BeginCycle(const Snapshot& s) {
  const bool keep = SameNodes(s);
  if (!keep) {
    const size_t num_flavors = s.flavors.size();
    indexes_.clear();
    by_id_.clear();
    of_flavor_.assign(num_flavors, {});
    nodes_of_flavor_.assign(num_flavors, {});
    for (size_t n = 0; n < s.nodes.size(); ++n)
      nodes_of_flavor_[s.nodes[n].flavor].push_back(static_cast<NodeId>(n));
  }
  return keep;
}

void PlacementIndexes::DropUnusable() {
  by_id_.clear();
  for (auto& indexes : of_flavor_) {
    indexes.erase(std::remove_if(
                      indexes.begin(), indexes.end(),
                      [](const ShapeIndex* index) { return !index->usable(); }),
                  indexes.end());
    for (ShapeIndex* index : indexes) {
      index->id = static_cast<int32_t>(by_id_.size());
      by_id_.push_back(index);
    }
  }
  absl::erase_if(indexes_,
                 [](const auto& entry) { return !entry.second->usable(); });
}

ShapeIndex* PlacementIndexes::IndexFor(const Snapshot& s,
                                       const std::vector<Resources>& free,
                                       FlavorId f, const WorkerShape& shape) {
  auto [it, inserted] = indexes_.try_emplace(KeyOfShape(f, shape), nullptr);
  if (inserted) {
    it->second =
        std::make_unique<ShapeIndex>(s, free, nodes_of_flavor_[f], shape);
    if (it->second->usable()) {
      of_flavor_[f].push_back(it->second.get());
      it->second->id = static_cast<int32_t>(by_id_.size());
      by_id_.push_back(it->second.get());
    }
  }
  return it->second->usable() ? it->second.get() : nullptr;
}

bool PlacementIndexes::SameNodes(const Snapshot& s) {
  bool same =
      s.nodes.size() == nodes_.size() && s.flavors.size() == of_flavor_.size();
  if (nodes_.size() != s.nodes.size()) nodes_.resize(s.nodes.size());
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    const Node& node = s.nodes[n];
    const NodeStatic now{.cluster = node.cluster,
                         .backend = node.backend,
                         .flavor = node.flavor,
                         .gpu_model = node.gpu_model,
                         .schedulable = node.schedulable,
                         .capacity = node.capacity,
                         .block = node.block,
                         .rack = node.rack};
    if (!(now == nodes_[n])) {
      same = false;
      nodes_[n] = now;
    }
  }
  return same;
}

}  // namespace trainyard::scheduler::policy::internal
