// Runs a gRPC server with what every Trainyard server carries: server
// reflection, the standard grpc.health.v1 health service, and per-method RPC
// metrics (trainyard_grpc_requests_total{method,code},
// trainyard_grpc_request_seconds{method}).
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_GRPC_SERVER_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_GRPC_SERVER_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "services/lib/runtime/metrics.h"

namespace trainyard::runtime {

struct GrpcServerOptions {
  // "host:port"; port 0 picks a free port (see port()).
  std::string listen_address = "127.0.0.1:50051";
  int max_message_bytes = 16 * 1024 * 1024;
  // Idle request threads kept for the next burst of RPCs (gRPC's MAX_POLLERS).
  int max_idle_threads = 256;
  // TLS: PEM files of the server's certificate chain and private key. Both
  // set: the port serves TLS only; both empty: plaintext. Start() fails with
  // INVALID_ARGUMENT naming the flag when only one is set or a file cannot be
  // read.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Where RPC metrics go; nullptr means DefaultMetrics().
  MetricsRegistry* metrics = nullptr;
};

class GrpcServerRunner {
 public:
  explicit GrpcServerRunner(GrpcServerOptions options);
  ~GrpcServerRunner();
  GrpcServerRunner(const GrpcServerRunner&) = delete;
  GrpcServerRunner& operator=(const GrpcServerRunner&) = delete;

  // Services must outlive the runner. Call before Start().
  void AddService(grpc::Service* service);

  absl::Status Start();
  int port() const { return port_; }
  // Stops accepting RPCs and cancels those still running after `grace`.
  // Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until the server has shut down.
  void Wait();

 private:
  GrpcServerOptions options_;
  std::vector<grpc::Service*> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  bool shut_down_ = false;
};

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_GRPC_SERVER_H_
