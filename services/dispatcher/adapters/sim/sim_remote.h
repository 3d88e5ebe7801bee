// The sim cluster as a process of its own: SimClusterServer serves a
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

class SimClusterServer final
    : public trainyard::v1::SimClusterService::Service {
 public:
  // `sim` must outlive the server.
  explicit SimClusterServer(SimAdapter* sim) : sim_(sim) {}

  grpc::Status GetSimCluster(grpc::ServerContext* context,
                             const trainyard::v1::GetSimClusterRequest* request,
                             trainyard::v1::SimClusterInfo* response) override;
  grpc::Status LaunchAttempt(grpc::ServerContext* context,
                             const trainyard::v1::SimLaunchRequest* request,
                             trainyard::v1::SimAttempt* response) override;
  grpc::Status SignalAttempt(
      grpc::ServerContext* context,
      const trainyard::v1::SignalSimAttemptRequest* request,
      google::protobuf::Empty* response) override;
  grpc::Status StopAttempt(grpc::ServerContext* context,
                           const trainyard::v1::StopSimAttemptRequest* request,
                           google::protobuf::Empty* response) override;
  grpc::Status GetAttempt(grpc::ServerContext* context,
                          const trainyard::v1::GetSimAttemptRequest* request,
                          trainyard::v1::SimAttempt* response) override;
  grpc::Status ListAttempts(
      grpc::ServerContext* context,
      const trainyard::v1::ListSimAttemptsRequest* request,
      trainyard::v1::ListSimAttemptsResponse* response) override;
  grpc::Status DeleteAttempt(
      grpc::ServerContext* context,
      const trainyard::v1::DeleteSimAttemptRequest* request,
      google::protobuf::Empty* response) override;
  grpc::Status ListSimNodes(
      grpc::ServerContext* context,
      const trainyard::v1::ListSimNodesRequest* request,
      trainyard::v1::ListSimNodesResponse* response) override;
  grpc::Status InjectFault(grpc::ServerContext* context,
                           const trainyard::v1::InjectSimFaultRequest* request,
                           google::protobuf::Empty* response) override;

 private:
  // Fills attempt.env from SimAdapter::LaunchEnv (nothing if it is gone).
  void AddEnv(trainyard::v1::SimAttempt& attempt);

  SimAdapter* sim_;
  absl::Mutex mu_;
  // Creations per backend name, since the process started.
  absl::flat_hash_map<std::string, int> created_ ABSL_GUARDED_BY(mu_);
  int64_t attempts_created_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t launches_refused_ ABSL_GUARDED_BY(mu_) = 0;
};

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
