#ifndef TRAINYARD_TESTS_INTEGRATION_API_TEST_HARNESS_H_
#define TRAINYARD_TESTS_INTEGRATION_API_TEST_HARNESS_H_

// An api server in the test process over a real PostgreSQL (fresh database per
// harness) and a real Redis (shared per test binary, or private when the test
// stops it), on free loopback ports, plus helpers to mint tokens and seed
// tenants.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "services/api/server.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "trainyard/v1/admin.grpc.pb.h"
#include "trainyard/v1/admin.pb.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/job.grpc.pb.h"
#include "trainyard/v1/queue.grpc.pb.h"

namespace trainyard::testing {

class ApiHarness {
 public:
  struct Options {
    // Start a Redis of this harness's own (so the test may stop and restart
    // it).
    bool private_redis = false;
    // Override the api server options (urls and ports are filled in by the
    // harness).
    api::ApiServerOptions server;
  };
  static absl::StatusOr<std::unique_ptr<ApiHarness>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<ApiHarness>> Start() {
    return Start(Options());
  }
  ~ApiHarness();

  api::ApiServer* server() { return server_.get(); }
  LocalRedis* redis() { return redis_; }
  const std::string& database_url() const { return database_url_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  std::string target() const;

  // A new token for `principal`, bound to `role` in `tenant` (created directly
  // in the database, like `trainyard token create`). role ROLE_UNSPECIFIED = no
  // binding.
  std::string Token(const std::string& principal, trainyard::v1::Role role,
                    const std::string& tenant = "");
  // A platform-admin token (users/root).
  const std::string& admin_token() const { return admin_token_; }

  // Creates tenant `tenant` with project "default" and queue "default" (cohort
  // "pool", flavor "gpu" nominal 64 GPUs) and, once per harness, a sim cluster
  // of 4 nodes × 8 GPUs.
  absl::Status SeedTenant(const std::string& tenant);
  // (Re)reports the sim cluster's nodes n0..n3 (8 H100 each, pool "main", racks
  // r0 and r1 of block b0) in `state`: SeedTenant reports them READY; tests
  // that send work elsewhere report them DOWN.
  absl::Status ReportSimNodes(trainyard::v1::NodeState state);
  // Creates cluster `id` of `backend` with `pools` (pool id, flavor) and
  // reports the sim cluster's nodes DOWN, so that work goes to it.
  absl::Status SeedCluster(
      const std::string& id, trainyard::v1::BackendKind backend,
      const std::vector<std::pair<std::string, std::string>>& pools);
  // Creates flavor `id` of `kind` for H100s at `gpu_hour_micros` USD per
  // GPU-hour, with `reclaim_rate_per_hour` (spot).
  absl::Status CreateFlavor(const std::string& id,
                            trainyard::v1::FlavorKind kind,
                            int64_t gpu_hour_micros,
                            double reclaim_rate_per_hour = 0);
  // Creates pool `pool` of cluster `cluster` offering `flavor`.
  absl::Status CreatePool(const std::string& cluster, const std::string& pool,
                          const std::string& flavor);
  // Gives `tenant`'s queue `queue` quota on `flavor`: as much as on its first
  // flavor.
  absl::Status AddQueueQuota(const std::string& tenant,
                             const std::string& queue,
                             const std::string& flavor);
  // Creates priority classes "low" (10) and "high" (100), both preemptible,
  // and makes `tenant`'s default queue preempt lower priority within itself.
  absl::Status SeedPriorityPreemption(const std::string& tenant);

  // Submits `request` as `token` and returns the new job's id (0, with a test
  // failure, if the call fails).
  int64_t SubmitJob(const std::string& token,
                    const trainyard::v1::SubmitJobRequest& request);
  // tenants/{tenant}/jobs/{id} with its attempts (JOB_VIEW_FULL), read as
  // `token` (an empty Job, with a test failure, if the call fails).
  trainyard::v1::Job GetJob(const std::string& token, const std::string& tenant,
                            int64_t id);
  // ExplainPending of tenants/{tenant}/jobs/{id} as `token` (an empty
  // response, with a test failure, if the call fails).
  trainyard::v1::ExplainPendingResponse Explain(const std::string& token,
                                                const std::string& tenant,
                                                int64_t id);
  // A client context carrying the bearer token.
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token);

  std::unique_ptr<trainyard::v1::JobService::Stub> jobs();
  std::unique_ptr<trainyard::v1::QueueService::Stub> queues();
  std::unique_ptr<trainyard::v1::ClusterService::Stub> clusters();
  std::unique_ptr<trainyard::v1::AdminService::Stub> admin();

  // Calls the unary RPC `method` (by descriptor: a table over the api's
  // methods) with the serialized `request` as `token`; the reply's ErrorInfo
  // goes to `info` and its serialized response to `response` (either may be
  // null).
  grpc::Status CallUnary(const std::string& token,
                         const google::protobuf::MethodDescriptor& method,
                         const std::string& request,
                         trainyard::v1::ErrorInfo* info = nullptr,
                         std::string* response = nullptr);
  // Every method of the services the api serves (JobService, QueueService,
  // ClusterService, AdminService).
  static std::vector<const google::protobuf::MethodDescriptor*> ApiMethods();

 private:
  ApiHarness() = default;
  std::unique_ptr<LocalRedis> own_redis_;
  LocalRedis* redis_ = nullptr;
  std::string database_url_;
  std::unique_ptr<api::ApiServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::string admin_token_;
  bool cluster_seeded_ = false;
};

// The ErrorInfo a failed call carried in its trailing metadata.
trainyard::v1::ErrorInfo ErrorInfoOf(const grpc::ClientContext& context);

// A minimal valid submission into tenants/{tenant}, queue and project
// "default".
trainyard::v1::SubmitJobRequest MinimalSubmit(
    const std::string& tenant, const std::string& client_request_id);

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_INTEGRATION_API_TEST_HARNESS_H_
