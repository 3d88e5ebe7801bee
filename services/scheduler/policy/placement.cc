#include "services/scheduler/policy/placement.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace trainyard::scheduler::policy {

std::vector<std::pair<int, int64_t>> ChooseFewest(
    const std::vector<int64_t>& caps, const std::vector<int64_t>& tie,
    int64_t need) {
  std::vector<int> order(caps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  auto less = [&](int a, int b) {
    if (caps[a] != caps[b]) return caps[a] < caps[b];
    if (tie[a] != tie[b]) return tie[a] < tie[b];
    return a < b;
  };
  std::sort(order.begin(), order.end(), less);
  std::vector<std::pair<int, int64_t>> taken;
  size_t end = order.size();
  while (need > 0 && end > 0) {
    auto it =
        std::lower_bound(order.begin(), order.begin() + end, need,
                         [&](int item, int64_t n) { return caps[item] < n; });
    if (it != order.begin() + end) {
      taken.emplace_back(*it, need);
      need = 0;
      break;
    }
    // Fill the largest item (the first of equally large ones).
    const int64_t max_cap = caps[order[end - 1]];
    auto first =
        std::lower_bound(order.begin(), order.begin() + end, max_cap,
                         [&](int item, int64_t n) { return caps[item] < n; });
    const int largest = *first;
    std::rotate(first, first + 1, order.begin() + end);
    --end;
    taken.emplace_back(largest, caps[largest]);
    need -= caps[largest];
  }
  return taken;
}

namespace {

struct NodeCandidate {
  NodeId node;
  int64_t workers;    // How many workers it can hold.
  int64_t free_gpus;  // Tie-break: fragmented nodes first.
};

// A group of candidates (a rack, or a block of racks).
struct Group {
  int64_t key;  // Label, or a unique negative key for unlabelled nodes.
  int64_t workers = 0;
  std::vector<int> members;  // Indexes into the level below.
};

void PlaceOnNodes(const std::vector<NodeCandidate>& cands,
                  const std::vector<int>& members, int64_t need,
                  std::vector<NodeId>& out) {
  std::vector<int64_t> caps, tie;
  for (int m : members) {
    caps.push_back(cands[m].workers);
    tie.push_back(cands[m].free_gpus);
  }
  for (const auto& [i, n] : ChooseFewest(caps, tie, need)) {
    for (int64_t k = 0; k < n; ++k) out.push_back(cands[members[i]].node);
  }
}

void PlaceOnRacks(const std::vector<NodeCandidate>& cands,
                  const std::vector<Group>& racks,
                  const std::vector<int>& members, int64_t need,
                  std::vector<NodeId>& out) {
  std::vector<int64_t> caps, tie;
  for (int m : members) {
    caps.push_back(racks[m].workers);
    tie.push_back(racks[m].key);
  }
  for (const auto& [i, n] : ChooseFewest(caps, tie, need)) {
    PlaceOnNodes(cands, racks[members[i]].members, n, out);
  }
}

}  // namespace

int64_t WorkersThatFit(const Resources& free, const WorkerShape& shape,
                       int64_t cap) {
  int64_t fit = cap;
  const Resources want = shape.AsResources();
  for (Resource r : kAllResources) {
    const int64_t w = want.Get(r);
    if (w <= 0) continue;
    const int64_t f = free.Get(r);
    fit = std::min(fit, f <= 0 ? 0 : f / w);
  }
  return fit;
}

PlacementResult PlaceGang(
    const Snapshot& s, const std::vector<Resources>& free,
    const std::vector<std::vector<NodeId>>& nodes_of_flavor, FlavorId flavor,
    const PendingJob& job) {
  PlacementResult result;
  const int64_t need = job.workers;
  std::vector<NodeCandidate> cands;
  for (NodeId id : nodes_of_flavor[flavor]) {
    const Node& node = s.nodes[id];
    if (!node.schedulable) continue;
    if (!NodeMatches(node, job.worker)) continue;
    const int64_t k = WorkersThatFit(free[id], job.worker, need);
    if (k > 0) cands.push_back({id, k, free[id].gpus});
  }
  int64_t total = 0;
  for (const NodeCandidate& c : cands) total += c.workers;
  result.capacity_workers = std::min(total, need);
  if (total < need) {
    result.failure = PlacementFailure::kNoCapacity;
    return result;
  }
  if (job.required_topology == TopologyLevel::kNone) {
    // One cluster: the smallest that holds the whole gang.
    std::map<int32_t, int64_t> per_cluster;
    for (const NodeCandidate& c : cands)
      per_cluster[s.nodes[c.node].cluster] += c.workers;
    if (per_cluster.size() > 1) {
      std::optional<int32_t> best;
      for (const auto& [cluster, workers] : per_cluster) {
        result.best_group_workers =
            std::max(result.best_group_workers, workers);
        if (workers >= need &&
            (!best.has_value() || workers < per_cluster[*best])) {
          best = cluster;
        }
      }
      result.best_group_workers = std::min(result.best_group_workers, need);
      if (!best.has_value()) {
        result.failure = PlacementFailure::kNoFitCluster;
        return result;
      }
      std::erase_if(cands, [&](const NodeCandidate& c) {
        return s.nodes[c.node].cluster != *best;
      });
      result.best_group_workers = 0;
    }
  }
  // Group nodes into racks and racks into blocks; std::map keeps key order so
  // the result does not depend on hashing. Unlabelled nodes get unique
  // negative keys (a group of their own).
  std::map<int64_t, int> rack_index, block_index;
  std::vector<Group> racks, blocks;
  std::vector<bool> rack_labelled, block_labelled;
  for (size_t i = 0; i < cands.size(); ++i) {
    const Node& node = s.nodes[cands[i].node];
    const int64_t unique = -2 - static_cast<int64_t>(cands[i].node);
    const int64_t rack_key = node.rack != kNoLabel ? node.rack : unique;
    const int64_t block_key = node.block != kNoLabel ? node.block : unique;
    auto [rit, rnew] =
        rack_index.try_emplace(rack_key, static_cast<int>(racks.size()));
    if (rnew) {
      racks.push_back({rack_key});
      rack_labelled.push_back(node.rack != kNoLabel);
      auto [bit, bnew] =
          block_index.try_emplace(block_key, static_cast<int>(blocks.size()));
      if (bnew) {
        blocks.push_back({block_key});
        block_labelled.push_back(node.block != kNoLabel);
      }
      blocks[bit->second].members.push_back(rit->second);
    }
    racks[rit->second].members.push_back(static_cast<int>(i));
    racks[rit->second].workers += cands[i].workers;
  }
  for (Group& b : blocks) {
    for (int r : b.members) b.workers += racks[r].workers;
  }
  std::vector<NodeId>& out = result.worker_nodes;
  if (job.required_topology == TopologyLevel::kRack ||
      job.required_topology == TopologyLevel::kBlock) {
    const bool rack_level = job.required_topology == TopologyLevel::kRack;
    const std::vector<Group>& groups = rack_level ? racks : blocks;
    const std::vector<bool>& labelled =
        rack_level ? rack_labelled : block_labelled;
    const int best = ChooseRequiredGroup(
        groups.size(), need, [&](size_t g) { return labelled[g]; },
        [&](size_t g) { return groups[g].workers; },
        [&](size_t g) { return groups[g].key; }, result);
    if (best < 0) return result;
    if (rack_level) {
      PlaceOnNodes(cands, racks[best].members, need, out);
    } else {
      PlaceOnRacks(cands, racks, blocks[best].members, need, out);
    }
    std::sort(out.begin(), out.end());
    return result;
  }
  std::vector<int64_t> caps, tie;
  for (const Group& b : blocks) {
    caps.push_back(b.workers);
    tie.push_back(b.key);
  }
  for (const auto& [i, n] : ChooseFewest(caps, tie, need)) {
    PlaceOnRacks(cands, racks, blocks[i].members, n, out);
  }
  std::sort(out.begin(), out.end());
  return result;
}

}  // namespace trainyard::scheduler::policy
