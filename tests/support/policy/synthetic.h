// A deterministic, seeded generator of realistic scheduler snapshots, for
// benchmarks and equivalence tests (not used by the policy itself).
#ifndef TRAINYARD_TESTS_SUPPORT_POLICY_SYNTHETIC_H_
#define TRAINYARD_TESTS_SUPPORT_POLICY_SYNTHETIC_H_

#include <cstdint>
#include <random>

#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

struct SyntheticSpec {
  int nodes = 10000;
  int gpus_per_node = 8;
  int nodes_per_rack = 16;
  int racks_per_block = 8;
  int queues = 1000;
  int cohorts = 100;  // Every tenth cohort is a root; the others nest in it.
  int pending = 100000;
  // Fraction of nodes that carry running work when the snapshot is taken.
  double busy_fraction = 0.3;
  uint64_t seed = 42;
};

// Flavors: h100 on-demand, h100 reserved, a100 on-demand, h100 spot. Nodes are
// labelled block > rack; a block has one flavor. Gang sizes (GPUs) are mostly
// 1-8 with a tail of 16-64; some gangs require one rack or one block.
Snapshot MakeSyntheticSnapshot(const SyntheticSpec& spec);

// A new pending job like the ones MakeSyntheticSnapshot creates.
PendingJob MakeSyntheticJob(const Snapshot& snapshot, JobId id,
                            std::mt19937_64& rng);

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_TESTS_SUPPORT_POLICY_SYNTHETIC_H_
