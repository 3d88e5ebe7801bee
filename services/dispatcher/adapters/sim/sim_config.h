// Reading and checking the sim backend's cluster file: a text-format
// trainyard.v1.SimClusterConfig (proto/trainyard/v1/sim.proto, docs/sim.md).
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_CONFIG_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainyard/v1/sim.pb.h"

namespace trainyard::dispatcher::sim {

// Longest run time of a job (SIM_DURATION, default_job_duration): 10 years.
inline constexpr absl::Duration kMaxJobDuration = absl::Hours(24 * 3650);

// Semantic checks of a parsed config; the first error as INVALID_ARGUMENT
// naming the field (domain::FieldError), e.g. "nodes[3].pool: unknown pool
// \"gpu\"". Checks: cluster a valid id; at least one pool and one node; pool
// names valid and unique, flavor a valid id, flavor_kind set, price and
// reclaim rate >= 0 (finite), a reclaim rate only on spot pools; each nodes
// entry has either name or prefix + count (1..100000), first_index >= 0, a
// known pool, capacity >= 0 and a valid GPU model; node names valid node ids
// and unique across the cluster (generated names included); fault rates >= 0
// and finite; durations >= 0, default_job_duration at most kMaxJobDuration.
absl::Status ValidateSimConfig(const trainyard::v1::SimClusterConfig& config);

// Parses text-format `text` and validates it. Errors are INVALID_ARGUMENT
// starting with "<source>:<line>:<column>: " (1-based) — the position of the
// syntax error, or of the offending field for a semantic error (just
// "<source>: " when the field is absent from the text).
absl::StatusOr<trainyard::v1::SimClusterConfig> ParseSimConfig(
    std::string_view text, std::string_view source = "<sim config>");

// Reads the file at `path` and ParseSimConfig's it with source = path.
// NOT_FOUND if it cannot be read.
absl::StatusOr<trainyard::v1::SimClusterConfig> LoadSimConfig(
    const std::string& path);

// One node of the config with its name resolved ("a-" + count 2 → "a-0001",
// "a-0002"), in config order.
struct ExpandedNode {
  std::string name;
  // Index of its SimNodes entry in config.nodes().
  int entry = 0;
};
// Expands every nodes entry (assumes a valid config).
std::vector<ExpandedNode> ExpandNodes(
    const trainyard::v1::SimClusterConfig& config);

}  // namespace trainyard::dispatcher::sim

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_CONFIG_H_
