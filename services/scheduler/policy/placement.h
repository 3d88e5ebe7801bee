// Gang placement: all N workers of a job onto nodes of one flavor, or none.
//
// Rule: among schedulable nodes of the flavor whose GPU model matches and whose
// free resources hold at least one worker, pack the gang onto the fewest
// blocks, then within them the fewest racks, then the fewest nodes. At every
// level groups are chosen greedily: if one group can hold all that remains,
// the smallest such group is taken (best fit, keeping large groups and whole
// nodes free); otherwise the largest group is filled and the step repeats.
// This yields the minimum number of groups at each level. Ties go to nodes with
// fewer free GPUs (already fragmented), then lower ids. A required level
// (block or rack) restricts the gang to one labelled group of that level.
// A gang never spans clusters (Node::cluster): without a required level, when
// the flavor's nodes are in several clusters, the smallest cluster that holds
// the whole gang is chosen first (best fit; ties to the lower cluster id).
// Racks and blocks must not span clusters.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_PLACEMENT_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_PLACEMENT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

enum class PlacementFailure {
  kNone,
  kNoCapacity,
  // No single group of the required level (rack, block) holds the gang.
  kNoFitTopology,
  // The flavor's nodes hold the gang only across clusters (gangs never span
  // clusters).
  kNoFitCluster,
};

struct PlacementResult {
  PlacementFailure failure = PlacementFailure::kNone;
  // Node of each worker (size = workers, ascending) when failure == kNone.
  std::vector<NodeId> worker_nodes;
  // Workers the eligible nodes could hold in total (capped at the gang size).
  int64_t capacity_workers = 0;
  // Workers the best single group of the required level (or the best single
  // cluster, for kNoFitCluster) could hold.
  int64_t best_group_workers = 0;
};

// How many workers of `shape` fit in `free` (capped at `cap`), ignoring the GPU
// model.
int64_t WorkersThatFit(const Resources& free, const WorkerShape& shape,
                       int64_t cap);

// Picks items to hold `need` workers with the fewest items: best fit when one
// item suffices, else fill the largest and repeat. `caps[i]` is item i's
// capacity; `tie[i]` orders equal capacities (smaller first). Returns
// (item, workers taken) pairs. The caller guarantees sum(caps) >= need. Shared
// by PlaceGang and the incremental scheduler's index (incremental.cc).
std::vector<std::pair<int, int64_t>> ChooseFewest(
    const std::vector<int64_t>& caps, const std::vector<int64_t>& tie,
    int64_t need);

// The group of a gang's required level (rack, block): among the `count`
// groups of that level that are `eligible(g)`, the smallest that holds all
// `need` workers (`workers(g)`), ties to the smaller `key(g)`; -1 if none.
// Sets result.best_group_workers (the most an eligible group holds, capped at
// `need`) and, when none holds the gang, kNoFitTopology. Shared by PlaceGang
// and the incremental scheduler's index (placement_index.cc).
template <typename Eligible, typename Workers, typename Key>
int ChooseRequiredGroup(size_t count, int64_t need, Eligible eligible,
                        Workers workers, Key key, PlacementResult& result) {
  int best = -1;
  for (size_t g = 0; g < count; ++g) {
    if (!eligible(g)) continue;
    const int64_t held = workers(g);
    result.best_group_workers = std::max(result.best_group_workers, held);
    if (held < need) continue;
    if (best < 0 || held < workers(best) ||
        (held == workers(best) && key(g) < key(best))) {
      best = static_cast<int>(g);
    }
  }
  result.best_group_workers = std::min(result.best_group_workers, need);
  if (best < 0) result.failure = PlacementFailure::kNoFitTopology;
  return best;
}

// Free resources of every node (capacity - used, less what this cycle placed).
// `nodes_of_flavor[f]` lists the nodes of flavor f in id order.
PlacementResult PlaceGang(
    const Snapshot& snapshot, const std::vector<Resources>& free,
    const std::vector<std::vector<NodeId>>& nodes_of_flavor, FlavorId flavor,
    const PendingJob& job);

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_PLACEMENT_H_
