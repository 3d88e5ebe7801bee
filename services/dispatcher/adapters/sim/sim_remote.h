// The sim cluster as a process of its own: NewSimClusterServer serves a
// SimAdapter over gRPC (trainyard.v1.SimClusterService, `trainyard
// sim-cluster`), and SimClusterClient is an Adapter that drives such a server
// (`trainyard dispatcher --sim_target=HOST:PORT`). The cluster then outlives
// the dispatcher the way a real Slurm or Kubernetes does: a dispatcher killed
// between "launched" and "recorded" finds its attempt there on restart, and
// faults can be injected on command from tests and scripts.
//
// Every RPC maps one Adapter method; the adapter's status codes and messages
// cross the wire unchanged. The server also counts what a crash-safety test
// checks: attempts created per name (an attempt created twice is a dispatch
// bug) and launches refused for capacity.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_REMOTE_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_REMOTE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "services/dispatcher/adapters/adapter.h"
#include "services/dispatcher/adapters/sim/sim_adapter.h"
#include "trainyard/v1/sim.grpc.pb.h"
#include "trainyard/v1/sim.pb.h"

namespace trainyard::dispatcher::sim {

// --- Wire conversions (exposed for tests) ------------------------------------

trainyard::v1::SimLaunchRequest ToProto(const LaunchRequest& request);
LaunchRequest FromProto(const trainyard::v1::SimLaunchRequest& request);
trainyard::v1::SimAttempt ToProto(const AttemptStatus& status);
AttemptStatus FromProto(const trainyard::v1::SimAttempt& attempt);
trainyard::v1::SimNodeInventory ToProto(const NodeInventory& node);
NodeInventory FromProto(const trainyard::v1::SimNodeInventory& node);

// --- Server ------------------------------------------------------------------

// Serves `sim`, which must outlive the server, as a
// trainyard.v1.SimClusterService.
std::unique_ptr<grpc::Service> NewSimClusterServer(SimAdapter* sim);

// --- Client ------------------------------------------------------------------

struct SimClusterClientOptions {
  // "host:port" of a `trainyard sim-cluster`.
  std::string target;
  // Deadline of each call.
  absl::Duration rpc_timeout = absl::Seconds(10);
};

class SimClusterClient final : public Adapter {
 public:
  // Connects lazily; calls fail with UNAVAILABLE while the server is down.
  explicit SimClusterClient(SimClusterClientOptions options);

  // The cluster the server simulates (GetSimCluster), waiting up to
  // `timeout` for the server to come up.
  absl::StatusOr<trainyard::v1::SimClusterInfo> Info(
      absl::Duration timeout = absl::ZeroDuration());

  // --- Adapter ---
  std::string_view kind() const override { return "sim"; }
  absl::StatusOr<AttemptStatus> Launch(const LaunchRequest& request) override;
  absl::Status Signal(std::string_view name, int signal) override;
  absl::Status Stop(std::string_view name, absl::Duration grace,
                    StopReason reason) override;
  absl::StatusOr<AttemptStatus> Status(std::string_view name) override;
  absl::StatusOr<std::vector<AttemptStatus>> List() override;
  absl::Status Delete(std::string_view name) override;
  absl::StatusOr<std::vector<NodeInventory>> Inventory() override;
  absl::StatusOr<LogChunk> ReadLog(std::string_view name, int64_t offset,
                                   int64_t max_bytes) override;

  // Faults on command.
  absl::Status InjectFault(trainyard::v1::InjectSimFaultRequest::Kind kind,
                           std::string_view target, int exit_code = 0);

 private:
  void Prepare(grpc::ClientContext& context) const;

  SimClusterClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<trainyard::v1::SimClusterService::Stub> stub_;
};

}  // namespace trainyard::dispatcher::sim

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_REMOTE_H_
