// "Could this gang ever fit?": a pure index of node capacity per cluster, used
// at submission to reject jobs that no known cluster could hold even when empty
// (reason NO_CLUSTER_FITS).
//
// A node holds floor(min(gpus/g, cpu/c, mem/m)) workers of shape (g GPUs, c
// millicores, m bytes); when the worker asks for GPUs (g > 0) and names a GPU
// model, nodes of other models hold none (GpuModelMatches: exact,
// case-sensitive). Terms for zero requests are ignored, so a CPU-only worker
// may use GPU nodes. DOWN nodes are not counted; READY, DRAINING and nodes
// whose state is not reported are. The index keeps, per cluster (and per block
// and rack for topology constraints), the distinct node shapes with their
// counts, so a query costs O(#distinct shapes), not O(#nodes).
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_CAPACITY_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_CAPACITY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/common.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::domain {

// Whether a worker asking for GPU model `wanted` (empty = any) may use GPUs of
// `offered`.
bool GpuModelMatches(std::string_view wanted, std::string_view offered);
// Whether a job with this preference may run on a cluster of this kind
// (UNSPECIFIED and ANY match every kind).
bool BackendMatches(trainyard::v1::BackendPreference preference,
                    trainyard::v1::BackendKind kind);
// How many workers of shape `worker` one node of capacity `node` holds at once
// (0 if none; INT64_MAX if the worker asks for nothing).
int64_t WorkersPerNode(const trainyard::v1::Resources& node,
                       const trainyard::v1::Resources& worker);

class CapacityIndex {
 public:
  // An empty index: accepts everything.
  CapacityIndex() = default;

  // Indexes the non-DOWN nodes; a node's cluster is the {c} of its name
  // "clusters/{c}/nodes/{n}" (nodes with malformed names are skipped) and the
  // cluster's backend comes from cluster_backend_by_id (missing:
  // BACKEND_KIND_UNSPECIFIED, which only jobs with no backend preference
  // match).
  static CapacityIndex Build(
      const std::vector<trainyard::v1::Node>& nodes,
      const absl::flat_hash_map<std::string, trainyard::v1::BackendKind>&
          cluster_backend_by_id);

  // No usable node is known (then CheckFits accepts everything).
  bool empty() const { return clusters_.empty(); }
  // Number of clusters with at least one usable node.
  size_t num_clusters() const { return clusters_.size(); }

  // Largest number of workers of this shape that fit into one cluster at once
  // (all its usable nodes empty), over the clusters the backend preference
  // allows. Saturates at INT64_MAX.
  int64_t MaxWorkersInOneCluster(
      const trainyard::v1::Resources& worker,
      trainyard::v1::BackendPreference backend) const;
  // The same within one unit of `level`: BLOCK (same cluster and
  // topology.block) or RACK (same cluster, block and rack); UNSPECIFIED means
  // one cluster. Nodes without topology labels are counted as one unit per
  // cluster (or block), which errs on the side of accepting.
  int64_t MaxWorkersInOneDomain(const trainyard::v1::Resources& worker,
                                trainyard::v1::BackendPreference backend,
                                trainyard::v1::TopologyLevel level) const;

  // OK if some allowed cluster could hold spec.workers workers of
  // spec.resources (within one unit of spec.topology.required_level, if set),
  // else a FieldError with reason NO_CLUSTER_FITS naming the field to change:
  //   spec.workers
  //       "gang of 80 workers × 8 GPUs cannot fit in any cluster; the largest
  //       fits 64"
  //   spec.topology.required_level
  //       it fits in a cluster but not in one rack (block) of one
  //   spec.backend
  //       no cluster of the preferred kind has usable nodes
  //   spec.resources.gpus, .gpu_model, .cpu_millis, .memory_bytes, or
  //   spec.resources
  //       not even one worker fits on any node
  // An empty index accepts everything. Assumes a spec that passed
  // ValidateJobSpec.
  absl::Status CheckFits(const trainyard::v1::JobSpec& spec) const;

 private:
  struct Shape {
    trainyard::v1::Resources capacity;
    int64_t count = 0;
  };
  struct Domain {
    std::string cluster;
    trainyard::v1::BackendKind backend =
        trainyard::v1::BACKEND_KIND_UNSPECIFIED;
    std::vector<Shape> shapes;
  };

  const std::vector<Domain>& DomainsAt(
      trainyard::v1::TopologyLevel level) const;
  absl::Status DiagnoseSingleWorker(const trainyard::v1::JobSpec& spec) const;

  std::vector<Domain> clusters_;
  std::vector<Domain> blocks_;
  std::vector<Domain> racks_;
};

}  // namespace trainyard::domain

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_CAPACITY_H_
