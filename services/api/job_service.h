#ifndef TRAINYARD_SERVICES_API_JOB_SERVICE_H_
#define TRAINYARD_SERVICES_API_JOB_SERVICE_H_

#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "services/api/context.h"
#include "services/lib/domain/names.h"
#include "trainyard/v1/job.grpc.pb.h"

namespace trainyard::api {

// JobService: submission (validated, rate-limited, idempotent,
// group-committed), reads, cancellation, the event Watch stream, checkpoints,
// and pending explanations. Submit uses gRPC's callback API: the request thread
// hands the job to the group-commit batcher and returns, and the committer
// finishes the RPC, so thousands of submits can wait for one fsync without
// holding a thread each. The other methods are synchronous. Every method runs
// on services/api/handler.h's path (authenticate, run, reply); none writes an
// audit row (a job's changes are recorded in its own history).
class JobServiceImpl final
    : public trainyard::v1::JobService::WithCallbackMethod_Submit<
          trainyard::v1::JobService::Service> {
 public:
  explicit JobServiceImpl(ApiContext* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Submit(
      grpc::CallbackServerContext* context,
      const trainyard::v1::SubmitJobRequest* request,
      trainyard::v1::SubmitJobResponse* response) override;
  grpc::Status SubmitBatch(
      grpc::ServerContext* context,
      const trainyard::v1::SubmitJobBatchRequest* request,
      trainyard::v1::SubmitJobBatchResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context,
                   const trainyard::v1::GetJobRequest* request,
                   trainyard::v1::Job* response) override;
  grpc::Status List(grpc::ServerContext* context,
                    const trainyard::v1::ListJobsRequest* request,
                    trainyard::v1::ListJobsResponse* response) override;
  grpc::Status Cancel(grpc::ServerContext* context,
                      const trainyard::v1::CancelJobRequest* request,
                      trainyard::v1::Job* response) override;
  grpc::Status Hold(grpc::ServerContext* context,
                    const trainyard::v1::HoldJobRequest* request,
                    trainyard::v1::Job* response) override;
  grpc::Status Release(grpc::ServerContext* context,
                       const trainyard::v1::ReleaseJobRequest* request,
                       trainyard::v1::Job* response) override;
  grpc::Status Watch(
      grpc::ServerContext* context,
      const trainyard::v1::WatchJobsRequest* request,
      grpc::ServerWriter<trainyard::v1::WatchJobsResponse>* writer) override;
  grpc::Status ReportCheckpoint(
      grpc::ServerContext* context,
      const trainyard::v1::ReportCheckpointRequest* request,
      trainyard::v1::Checkpoint* response) override;
  grpc::Status ListCheckpoints(
      grpc::ServerContext* context,
      const trainyard::v1::ListCheckpointsRequest* request,
      trainyard::v1::ListCheckpointsResponse* response) override;
  grpc::Status ExplainPending(
      grpc::ServerContext* context,
      const trainyard::v1::ExplainPendingRequest* request,
      trainyard::v1::ExplainPendingResponse* response) override;

 private:
  // Validates one submission and turns it into a storage row; errors name
  // fields relative to the SubmitJobRequest.
  absl::StatusOr<storage::postgres::NewJob> Prepare(
      const Caller& caller, const std::string& tenant,
      const trainyard::v1::SubmitJobRequest& req);
  absl::Status CheckRate(const std::string& tenant, double cost);
  // Who may act on one job: job tokens for their own job (RequireJob), or
  // never (Require).
  enum class JobTokens { kOwnJob, kRefused };
  // Runs a handler on the job that `job` (the request field `field`) names,
  // on which the caller needs `permission`.
  grpc::Status RunOnJob(
      grpc::ServerContext* context, const std::string& job,
      std::string_view field, Permission permission, JobTokens tokens,
      absl::FunctionRef<absl::Status(const Caller&, const domain::JobName&)> fn);
  // Cancel, Hold and Release: the job named `job`, which the caller may write
  // (job tokens may not), a reason of at most 1024 characters, and `change`.
  grpc::Status ChangeJob(grpc::ServerContext* context, const std::string& job,
                         const std::string& reason,
                         absl::FunctionRef<absl::StatusOr<trainyard::v1::Job>(
                             const domain::JobName& name, const Caller& caller)>
                             change,
                         trainyard::v1::Job* response);
  // Hold (hold = true) or Release.
  grpc::Status SetHold(grpc::ServerContext* context, const std::string& job,
                       const std::string& reason, bool hold,
                       trainyard::v1::Job* response);
  // ExplainPending of the job `name`.
  absl::Status Explain(const domain::JobName& name,
                       trainyard::v1::ExplainPendingResponse* response);
  // The events a Watch request selects, for the caller: its tenants, job and
  // filters (`job_name`: the job's name when it names one).
  absl::Status WatchFilter(const Caller& caller,
                           const trainyard::v1::WatchJobsRequest& request,
                           storage::postgres::EventFilter* filter,
                           std::string* job_name);

  ApiContext* ctx_;
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_JOB_SERVICE_H_
