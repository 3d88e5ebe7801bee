// The placement indexes of the engine (docs/scheduling.md, "Engine"): per
// (flavor, worker shape), how many workers of the shape each node, rack and
// block can still hold, so that a gang's capacity check costs O(max workers
// per node) and a placement looks only at the racks and nodes it chooses
// among; a placement through an index equals PlaceGang's (placement.h).
// Internal to the policy library (engine.h).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_PLACEMENT_INDEX_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_PLACEMENT_INDEX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// The most workers of one shape a node may hold for the index to be used; a
// shape that fits more (tiny workers) is placed by PlaceGang instead.
constexpr int64_t kMaxIndexedWorkers = 64;

// Free-capacity index of one (flavor, worker shape): for every eligible node
// how many workers it holds (k), and per rack and for the flavor a histogram
// of k. PlaceGang's rule caps each node's k at the gang size, so a group's
// capacity for a gang of n is sum over k of hist[k] * min(k, n). Usable only
// when every eligible node is labelled with a rack and a block and every rack
// lies in one block (then grouping does not depend on which nodes are
// candidates), and no node holds more than kMaxIndexedWorkers workers.
class ShapeIndex {
 public:
  ShapeIndex(const Snapshot& s, const std::vector<Resources>& free,
             const std::vector<NodeId>& nodes, const WorkerShape& shape);

  bool usable() const { return usable_; }

  // Grows whenever a node's count of workers changes (and on Touch()): a
  // failed placement (its kind, capacity_workers, best_group_workers)
  // depends on the counts alone.
  uint64_t epoch() const { return epoch_; }
  void Touch() { ++epoch_; }
  // Dense among the usable indexes (PlacementIndexes::ById).
  int32_t id = -1;

  // Sum over the eligible nodes of the workers each holds, at most `cap` per
  // node (PlaceGang's capacity check).
  int64_t Workers(int64_t cap) const { return Capped(total_hist_, cap); }

  // Node `id`'s free resources changed (decreased) to `free`.
  void Update(NodeId id, const Resources& free) {
    const int r = rack_of_node_[id];
    if (r < 0) return;
    Move(id, r, WorkersThatFit(free, shape_, max_k_));
  }

  // Node `id`'s free resources are now `free`, more or less than before
  // (between cycles). Returns false if the index is no longer usable (the
  // node holds more than kMaxIndexedWorkers workers).
  bool Set(NodeId id, const Resources& free);

  // Same result as PlaceGang(snapshot, free, ..., job) for a job of this
  // index's flavor and shape.
  PlacementResult Place(const std::vector<Resources>& free,
                        const PendingJob& job) const;

 private:
  struct Rack {
    TopologyLabel label;
    int block;
    std::vector<NodeId> nodes;  // Id order.
    std::vector<int32_t> hist;
  };
  struct Block {
    TopologyLabel label;
    std::vector<int> racks;
    std::vector<int32_t> hist;
  };

  // Moves node `id` (of rack r) to the histograms' bucket k.
  void Move(NodeId id, int r, int64_t k) {
    const int64_t old = k_of_node_[id];
    if (k == old) return;
    const int b = racks_[r].block;
    --racks_[r].hist[old];
    --blocks_[b].hist[old];
    --total_hist_[old];
    ++racks_[r].hist[k];
    ++blocks_[b].hist[k];
    ++total_hist_[k];
    k_of_node_[id] = k;
    ++epoch_;
  }

  static int64_t Capped(const std::vector<int32_t>& hist, int64_t cap) {
    int64_t sum = 0;
    for (size_t k = 1; k < hist.size(); ++k) {
      if (hist[k] != 0) sum += hist[k] * std::min<int64_t>(k, cap);
    }
    return sum;
  }

  int64_t Label(bool rack_level, size_t g) const {
    return rack_level ? racks_[g].label : blocks_[g].label;
  }

  void PlaceOnNodes(const std::vector<Resources>& free, int rack, int64_t n,
                    int64_t cap, std::vector<NodeId>& out) const;
  void PlaceOnRacks(const std::vector<Resources>& free,
                    std::vector<int64_t>& rack_workers, int block, int64_t n,
                    int64_t cap, std::vector<NodeId>& out) const;

  WorkerShape shape_;
  bool usable_ = true;
  static constexpr int64_t kUnset = INT64_MIN;
  int64_t cluster_ = kUnset;
  std::vector<Rack> racks_;
  std::vector<Block> blocks_;
  std::vector<int32_t> rack_of_node_;
  std::vector<int64_t> k_of_node_;
  std::vector<int32_t> total_hist_;
  // The most workers any eligible node held when the index was built.
  int64_t max_k_ = 0;
  uint64_t epoch_ = 0;
};

// A cycle's placement indexes: one per (flavor, worker shape), built when
// first asked for, and kept across cycles (brought up to date node by node)
// while the nodes are the same but for their use, as between the
// incremental Scheduler's cycles. Also each flavor's nodes.
class PlacementIndexes {
 public:
  // Starts a cycle on `s`. Returns whether the indexes of the last cycle are
  // kept: s's nodes are those of the last cycle but for their use (then
  // each node whose free resources changed must be Set()). Otherwise drops
  // them.
  bool BeginCycle(const Snapshot& s);

  // Node n (of flavor f) now has `free` free, more or less than before.
  // Returns false if an index became unusable (DropUnusable() drops it).
  bool Set(FlavorId f, NodeId n, const Resources& free) {
    bool usable = true;
    for (ShapeIndex* index : of_flavor_[f]) {
      if (!index->Set(n, free)) usable = false;
    }
    return usable;
  }
  // Drops the indexes that are no longer usable (built again, usable or
  // not, when next asked for) and numbers the others again.
  void DropUnusable();

  // Forgets what Lookup() found: there are `num_shapes` ClassTable shapes
  // and `num_flavors` flavors.
  void ForgetLookups(size_t num_shapes, size_t num_flavors) {
    num_flavors_ = num_flavors;
    of_shape_.assign(num_shapes * num_flavors, nullptr);
    looked_up_.assign(num_shapes * num_flavors, 0);
  }

  // The index of (f, shape), built from `free` when first asked for; nullptr
  // where it is not usable.
  ShapeIndex* IndexFor(const Snapshot& s, const std::vector<Resources>& free,
                       FlavorId f, const WorkerShape& shape);

  // IndexFor(s, free, f, worker) memoized per (ClassTable shape `shape` of
  // `worker`, flavor): no hashing per attempt.
  ShapeIndex* Lookup(const Snapshot& s, const std::vector<Resources>& free,
                     FlavorId f, int32_t shape, const WorkerShape& worker) {
    const size_t slot = Slot(f, shape);
    if (!looked_up_[slot]) {
      looked_up_[slot] = 1;
      of_shape_[slot] = IndexFor(s, free, f, worker);
    }
    return of_shape_[slot];
  }
  // What Lookup() found for (f, shape), or nullptr if it was not asked.
  const ShapeIndex* LookedUp(FlavorId f, int32_t shape) const {
    const size_t slot = Slot(f, shape);
    return looked_up_[slot] ? of_shape_[slot] : nullptr;
  }

  // Node n of flavor f now has `free` free (less than before).
  void Update(FlavorId f, NodeId n, const Resources& free) {
    for (ShapeIndex* index : of_flavor_[f]) index->Update(n, free);
  }
  // Something other than the counts changed what placements on f can get.
  void Touch(FlavorId f) {
    for (ShapeIndex* index : of_flavor_[f]) index->Touch();
  }

  // The usable index with ShapeIndex::id `id`.
  const ShapeIndex& ById(int32_t id) const { return *by_id_[id]; }

  // Each flavor's nodes, by id.
  const std::vector<std::vector<NodeId>>& nodes_of_flavor() const {
    return nodes_of_flavor_;
  }

 private:
  size_t Slot(FlavorId f, int32_t shape) const {
    return static_cast<size_t>(shape) * num_flavors_ + static_cast<size_t>(f);
  }

  // Whether s's nodes are those of the last BeginCycle() but for their use
  // (Node::used); remembers them.
  bool SameNodes(const Snapshot& s);

  // Worker shape as placement sees it (the GPU model only matters with
  // GPUs).
  using ShapeKey =
      std::tuple<FlavorId, int64_t, GpuModelId, int64_t, int64_t, BackendSet>;
  static ShapeKey KeyOfShape(FlavorId f, const WorkerShape& w) {
    return {f,
            w.gpus,
            w.gpus > 0 ? w.gpu_model : kAnyGpuModel,
            w.cpu_millis,
            w.memory_bytes,
            w.backends};
  }

  absl::flat_hash_map<ShapeKey, std::unique_ptr<ShapeIndex>> indexes_;
  // Per flavor: its usable indexes.
  std::vector<std::vector<ShapeIndex*>> of_flavor_;
  // The usable indexes by ShapeIndex::id.
  std::vector<ShapeIndex*> by_id_;
  // Per (ClassTable shape, flavor): IndexFor() once looked up.
  std::vector<ShapeIndex*> of_shape_;
  std::vector<uint8_t> looked_up_;
  size_t num_flavors_ = 0;
  std::vector<std::vector<NodeId>> nodes_of_flavor_;
  // What placement indexes read of each node, but its use (SameNodes()).
  struct NodeStatic {
    int32_t cluster = 0;
    Backend backend = Backend::kUnknown;
    FlavorId flavor = -1;
    GpuModelId gpu_model = kAnyGpuModel;
    bool schedulable = false;
    Resources capacity;
    TopologyLabel block = kNoLabel;
    TopologyLabel rack = kNoLabel;
    bool operator==(const NodeStatic&) const = default;
  };
  std::vector<NodeStatic> nodes_;
};

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_PLACEMENT_INDEX_H_
