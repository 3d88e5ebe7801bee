// The pure half of the Slurm adapter: building slurmrestd requests (batch
// script, job description, JWT) and mapping its answers (jobs, nodes, errors)
// to the Adapter's types. No I/O; unit-tested in slurm_api_test.cc.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_API_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/adapter.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"

namespace trainyard::dispatcher::slurm {

// --- Auth -------------------------------------------------------------------

// An HS256 JWT as slurmctld's auth/jwt accepts it: header {"alg":"HS256",
// "typ":"JWT"}, claims {"iat", "exp", "sun"}.
std::string MintJwt(std::string_view key, std::string_view user, absl::Time now,
                    absl::Duration lifetime);

// --- Errors -----------------------------------------------------------------

// Slurm error numbers the adapter classifies (slurm_errno.h).
inline constexpr int kSlurmInvalidPartition = 2000;
inline constexpr int kSlurmAccessDenied = 2002;
inline constexpr int kSlurmInvalidJobId = 2017;
inline constexpr int kSlurmAlreadyDone = 2021;
inline constexpr int kSlurmJobPending = 2024;
inline constexpr int kSlurmInvalidFeature = 2029;

// One entry of a response's errors[] array.
struct SlurmError {
  int code = 0;  // error_number (or error_code)
  std::string error;
  std::string description;
};

// The absl::Status of a slurmrestd answer: OK for a 2xx/304 without errors;
// otherwise classified by the Slurm error code (not the HTTP status):
//   2017 invalid job id → NOT_FOUND; 2002 access denied, 1007 auth →
//   PERMISSION_DENIED; 2021 already done, 2024 pending → FAILED_PRECONDITION;
//   2000 bad partition, 2029 bad feature and other 2xxx (a well-formed request
//   the cluster refuses) → FAILED_PRECONDITION;
//   1001-1004, 5000-5999, 110/111 (slurmctld unreachable, timeouts) →
//   UNAVAILABLE; 2127 and 9001 (request the plugin could not parse) →
//   INVALID_ARGUMENT; HTTP 401/403 → UNAUTHENTICATED / PERMISSION_DENIED;
//   HTTP 502-504 → UNAVAILABLE; anything else → INTERNAL (UNKNOWN for a body
//   that is not JSON).
// `what` prefixes the message ("submit ty-1-1").
absl::Status ClassifyResponse(int http_status, std::string_view body,
                              std::string_view what);
// The errors[] array of a body (empty when absent or not JSON).
std::vector<SlurmError> ParseErrors(std::string_view body);

// --- Jobs -------------------------------------------------------------------

// What the adapter reads of one Slurm job.
struct SlurmJob {
  int64_t job_id = 0;
  std::string name;
  // Base state or flag name as v0.0.38 prints it ("PENDING", "COMPLETING" ...).
  std::string state;
  std::string reason;       // state_reason
  std::string description;  // state_description
  // Raw wait status of the batch script (exit code << 8 | signal).
  int64_t exit_code = 0;
  int64_t derived_exit_code = 0;
  std::string partition;
  std::string comment;
  // Path of the batch script's stdout (and stderr) file, as Slurm reports it.
  std::string standard_output;
  // Nodes as a hostlist expression ("gpu[1-2]") and expanded.
  std::string nodes_expr;
  std::vector<std::string> nodes;
  std::optional<absl::Time> submit_time;
  std::optional<absl::Time> start_time;
  std::optional<absl::Time> end_time;
  absl::Duration time_limit = absl::ZeroDuration();
};

// Parses the body of GET jobs / GET job/{id}. Jobs whose entries are
// malformed are skipped; a body that is not a JSON object is INTERNAL.
absl::StatusOr<std::vector<SlurmJob>> ParseJobs(std::string_view body);

// "gpu[1-3,5],cpu7" → gpu1 gpu2 gpu3 gpu5 cpu7 (zero padding kept). At most
// 100000 names; malformed parts are kept verbatim.
std::vector<std::string> ExpandHostlist(std::string_view expr);

// Base states that end a job.
bool IsTerminalSlurmState(std::string_view state);

// A Slurm job as an AttemptStatus (no stop request, no checkpoints): state,
// exit code (128 + signal when killed), failure class and message:
//   PENDING CONFIGURING REQUEUED REQUEUE_HOLD REQUEUE_FED RESV_DEL_HOLD →
//   kPending RUNNING SUSPENDED COMPLETING SIGNALING STOPPED STAGE_OUT RESIZING
//   → kRunning COMPLETED (exit 0) → kSucceeded; COMPLETED with a non-zero code
//   → kUserError FAILED → kUserError (a launch failure without exit code:
//   kBackendError) OUT_OF_MEMORY → kUserError (exit 137 unless Slurm has one)
//   TIMEOUT DEADLINE → kTimeLimit; NODE_FAIL BOOT_FAIL → kNodeFailure
//   PREEMPTED → kCancelled phase, kPreempted; CANCELLED → kCancelled
//   REVOKED and unknown terminal states → kBackendError
AttemptStatus MapJob(const SlurmJob& job);

// The comment Trainyard puts on its jobs: who they belong to, and where the
// adapter looks for checkpoints.
struct JobComment {
  std::string tenant;
  int64_t job_id = 0;
  int32_t attempt = 0;
  std::string checkpoint_dir;
};
std::string FormatComment(const JobComment& c);
// nullopt when the comment is not Trainyard's.
std::optional<JobComment> ParseComment(std::string_view comment);

// The batch script: runs spec.command on every worker with srun (one task
// per worker), TRAINYARD_WORKER_INDEX = SLURM_PROCID, each worker bound to
// its own spec.resources.gpus GPUs (--gpus-per-task). srun forwards the stop
// signal to every worker.
std::string BatchScript(const LaunchRequest& request,
                        const SlurmSettings& settings);

// The JSON body of POST job/submit. FAILED_PRECONDITION naming `flavor` for
// a flavor without a partition; INVALID_ARGUMENT naming the field for what
// Slurm cannot express (empty spec.command, a relative working_dir).
absl::StatusOr<std::string> SubmitBody(const LaunchRequest& request,
                                       const SlurmSettings& settings);

// --- Nodes ------------------------------------------------------------------

// Parses GET nodes into inventory: capacity from cpus/real_memory/gres,
// allocation from alloc_cpus/alloc_memory/gres_used, pool and flavor from the
// first partition the settings map, state: down/error/future base state or a
// FAIL or NOT_RESPONDING flag → failed; DRAIN, MAINT, REBOOT, POWER flags →
// not schedulable. Sorted by name.
absl::StatusOr<std::vector<NodeInventory>> ParseNodes(
    std::string_view body, const SlurmSettings& settings);

// "gpu:h100:4(S:0),shard:2" → the GPU count (4) and type ("h100"); for
// gres_used the count before "(IDX:...)".
struct GresGpus {
  int64_t count = 0;
  std::string type;
};
GresGpus ParseGresGpus(std::string_view gres);

}  // namespace trainyard::dispatcher::slurm

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_API_H_
