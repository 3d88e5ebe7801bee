#ifndef TRAINYARD_SERVICES_API_SERVER_H_
#define TRAINYARD_SERVICES_API_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/api/context.h"
#include "services/lib/runtime/job_token.h"

namespace trainyard::api {

struct ApiServerOptions {
  // gRPC listen address; port 0 picks a free port.
  std::string grpc_listen = "127.0.0.1:50051";
  // TLS for the gRPC port: PEM certificate chain and key files (both or
  // neither; see runtime::GrpcServerOptions).
  std::string tls_cert_file;
  std::string tls_key_file;
  // HTTP listen address for /metrics, /healthz, /readyz; empty disables it.
  std::string http_listen = "127.0.0.1:8081";
  std::string postgres_url;
  std::string redis_addr = "127.0.0.1:6379";
  int db_pool_size = 16;
  // Apply migrations at start (under the advisory lock; idempotent).
  bool migrate = true;
  // How long Start tries again while PostgreSQL cannot be reached
  // (storage/postgres/migrate.h MigrateWhenReachable); zero: one try.
  absl::Duration database_wait = absl::ZeroDuration();
  // Per-tenant submit rate when the tenant sets none (jobs/s) and its burst.
  double default_submit_rate = 500;
  double default_submit_burst = 1000;
  // Lifetime of cached tokens, queues, tenants, capacity.
  absl::Duration cache_ttl = absl::Seconds(2);
  // Keys that verify job-scoped tokens (the dispatcher signs them with the
  // same keys); null = job tokens are refused.
  std::shared_ptr<const runtime::JobTokenKeys> job_tokens;
  // Group commit settings of Submit.
  int submit_batch = 256;
  int submit_committers = 2;
  // Whether to serve the api's own services (JobService, QueueService,
  // ClusterService, AdminService) with the outbox relay and the Watch hub.
  // `trainyard accounting` serves only `more_services` over the same context.
  bool serve_core = true;
  // More services served on the same port over the same context (the
  // accounting process's AccountingService), built once the context is.
  std::vector<std::function<std::unique_ptr<grpc::Service>(ApiContext*)>>
      more_services;
  // Names this process in its log lines ("api serving", ...).
  std::string log_name = "api";
};

// The api service: JobService, QueueService, ClusterService and AdminService
// over PostgreSQL and Redis, the outbox relay and the Watch hub, with metrics,
// health and readiness.
class ApiServer {
 public:
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(
      const ApiServerOptions& options);
  ~ApiServer();

  int grpc_port() const;
  int http_port() const;
  ApiContext* context();
  // Stops accepting RPCs, lets running ones finish (up to `grace`), stops
  // background threads.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until Shutdown().
  void Wait();

  struct Impl;

 private:
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_SERVER_H_
