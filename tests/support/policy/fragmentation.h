// Fragmentation of free GPU capacity: how well placement's bin-packing keeps
// whole nodes free for large gangs. A pure function of a snapshot and,
// optionally, one cycle's admissions; it does not change placement, and the
// policy does not use it (tests and benchmarks do). See docs/scheduling.md,
// "Fragmentation".
//
// Only schedulable nodes with at least one GPU count. A node's free GPUs are
// capacity - used - the GPUs of the admitted workers placed on it (never below
// 0). A node is "whole-free" when all of its GPUs are free (CPU and memory are
// not looked at). A "full-node worker" of a flavor asks for the flavor's node
// size in GPUs (the largest GPU capacity among its counted nodes) and nothing
// else; a node holds one when its free GPUs reach that size.
#ifndef TRAINYARD_TESTS_SUPPORT_POLICY_FRAGMENTATION_H_
#define TRAINYARD_TESTS_SUPPORT_POLICY_FRAGMENTATION_H_

#include <cstdint>
#include <vector>

#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

// Fragmentation of one flavor's nodes, or of all flavors together.
struct FragmentationStats {
  // Counted nodes: schedulable, with at least one GPU.
  int64_t nodes = 0;
  // Their GPU capacity.
  int64_t gpus = 0;
  // Their free GPUs.
  int64_t free_gpus = 0;
  // Counted nodes whose GPUs are all free.
  int64_t whole_free_nodes = 0;
  // GPUs of the whole-free nodes (all of them free).
  int64_t whole_free_gpus = 0;
  // 1 - whole_free_gpus / free_gpus: the share of free GPUs that sit on
  // partly used nodes, so that a job wanting a whole node cannot use them.
  // 0 when every free GPU is on a whole-free node, 1 when none is; 0 when no
  // GPU is free.
  double fragmentation = 0.0;
  // GPUs of a full-node worker (the largest node's GPU capacity); 0 when
  // there are no counted nodes. In the total: that of the flavor with the
  // largest full-node gang (among flavors with counted nodes; the lowest
  // flavor id on ties).
  int64_t node_gpus = 0;
  // The most full-node workers one gang could still get with no topology
  // requirement and no GPU model: counted nodes whose free GPUs reach
  // node_gpus (each holds one). Equals whole_free_nodes when all nodes of the
  // flavor have the same size. In the total: the maximum over flavors (a gang
  // runs on one flavor).
  int64_t largest_full_node_gang = 0;
  // The same, for a gang that requires one rack (one block): the most such
  // nodes in a single labelled rack (block) of the flavor. Unlabelled nodes
  // never count here, as they never satisfy a required level. In the total:
  // the maximum over flavors.
  int64_t largest_full_node_gang_in_rack = 0;
  int64_t largest_full_node_gang_in_block = 0;

  friend bool operator==(const FragmentationStats&,
                         const FragmentationStats&) = default;
};

struct FragmentationReport {
  // One entry per flavor, index = FlavorId (a flavor without counted nodes
  // has all zeros).
  std::vector<FragmentationStats> flavors;
  // All flavors together: counts are sums, fragmentation is recomputed from
  // the summed GPUs, the gang fields are as documented above.
  FragmentationStats total;
  // Admitted workers that were not charged because their job is not pending
  // in the snapshot or their node id is out of range (0 for valid input).
  int64_t skipped_workers = 0;

  friend bool operator==(const FragmentationReport&,
                         const FragmentationReport&) = default;
};

// Measures fragmentation of `s` after charging `admissions` (e.g. one cycle's
// Decisions::admissions): each entry of an admission's worker_nodes takes the
// worker GPUs of the pending job with that id (looked up in s.pending) from
// that node. Invalid admissions are not an error: a job that is not pending
// in `s` or a node id out of range is skipped and counted in
// skipped_workers. Nodes whose flavor id is out of range are ignored; nothing
// else is validated (see ValidateSnapshot). Victims of preemptions are not
// released: remove them from the snapshot first if they should count as free.
FragmentationReport MeasureFragmentation(
    const Snapshot& s, const std::vector<Admission>& admissions = {});

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_TESTS_SUPPORT_POLICY_FRAGMENTATION_H_
