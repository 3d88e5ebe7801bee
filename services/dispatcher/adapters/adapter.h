// The dispatcher's adapter interface: the one seam between Trainyard and the
// engines that run jobs (docs/architecture.md). Implemented by
//
//   slurm       slurmrestd's REST API (JWT): a batch job named after the
//               attempt (ty-<job>-<attempt>), stopped by a signal and then a
//               kill once the grace period ends (adapters/slurm,
//               docs/slurm.md);
//   kubernetes  the API server: an Indexed Job named after the attempt, its
//               pods pinned to the placed nodes, inventory from Node objects
//               (adapters/kubernetes, docs/kubernetes.md);
//   sim         a virtual cluster running jobs on a clock (adapters/sim,
//               docs/sim.md).
//
// Names. An attempt is addressed by its deterministic backend name
// "ty-<job id>-<attempt>" (BackendJobName), never by the backend's own id, so
// the dispatcher can always look before it creates: after a crash between
// "created in the backend" and "recorded in PostgreSQL", Launch with the same
// request finds the existing attempt and returns it instead of creating a
// second copy. Node names are node ids, the {node} part of
// "clusters/{cluster}/nodes/{node}" (the Slurm node name, the Kubernetes Node
// name).
//
// Errors. Every method is thread-safe and never crashes on bad input:
//   INVALID_ARGUMENT     a malformed request; the message starts with the
//                        field at fault ("worker_nodes[2]: required") and the
//                        status carries domain::FieldError payloads;
//   NOT_FOUND            no attempt of that name in the backend;
//   FAILED_PRECONDITION  a well-formed request the backend's current state
//                        refuses (unknown or full node, signalling an ended
//                        attempt ...);
//   UNAVAILABLE          the backend could not be reached; retry later;
//   INTERNAL / UNKNOWN   the backend answered something unexpected.
// Only UNAVAILABLE (and DEADLINE_EXCEEDED) are worth retrying as-is.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_ADAPTER_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_ADAPTER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::dispatcher {

// --- Backend job names ------------------------------------------------------

// Prefix of every backend job Trainyard owns.
inline constexpr std::string_view kBackendJobNamePrefix = "ty-";

// "ty-<job_id>-<attempt>", e.g. "ty-42-1".
std::string BackendJobName(int64_t job_id, int32_t attempt);

// The parts of a backend job name.
struct BackendJobRef {
  int64_t job_id = 0;
  int32_t attempt = 0;
  friend bool operator==(const BackendJobRef&, const BackendJobRef&) = default;
};
// Inverse of BackendJobName: job_id > 0 and attempt >= 1 in canonical decimal
// (no sign, no leading zeros). INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<BackendJobRef> ParseBackendJobName(
    std::string_view name, std::string_view field = "name");

// --- Launching --------------------------------------------------------------

// Everything an adapter needs to start one attempt of a job. The dispatcher
// builds it from the admitted attempt (job spec, placement, flavor).
struct LaunchRequest {
  // Backend job name; must equal BackendJobName(job_id, attempt). The
  // idempotency key of Launch.
  std::string name;
  // Job id (the {job} of "tenants/{tenant}/jobs/{job}"), > 0.
  int64_t job_id = 0;
  // 1-based attempt number.
  int32_t attempt = 0;
  // Tenant id of the job (a valid id, domain::IsValidId).
  std::string tenant;
  // The job's spec as submitted: workers, per-worker resources, command,
  // image, env, working_dir, time_limit, checkpoint policy ... Adapters read
  // what their backend needs; spec.workers must be >= 1.
  trainyard::v1::JobSpec spec;
  // Node id of each worker, from the scheduler's placement; size ==
  // spec.workers. Several workers may share a node. Adapters pin workers to
  // these nodes (Slurm --nodelist, Kubernetes nodeName / affinity).
  std::vector<std::string> worker_nodes;
  // Flavor id the attempt was admitted on (e.g. "spot-h100"); selects the
  // Slurm partition (SlurmSettings.partitions). Adapters that know their
  // nodes' flavors refuse a placement on nodes of another flavor. May be
  // empty when the cluster has a single flavor.
  std::string flavor;
  // Checkpoint URI the attempt resumes from (TRAINYARD_RESUME_FROM), empty on
  // a fresh start.
  std::string resume_from;
  // Extra environment the dispatcher adds for every worker (API endpoint,
  // token ...). Names must be valid env names (domain::IsValidEnvName); they
  // override spec.env and the variables AttemptEnv sets.
  std::map<std::string, std::string> env;
};

// The environment of every worker of the attempt, in this order of
// precedence (later wins): spec.env, then
//   TRAINYARD_JOB               "tenants/<tenant>/jobs/<job_id>"
//   TRAINYARD_TENANT            tenant id
//   TRAINYARD_JOB_ID            job id
//   TRAINYARD_ATTEMPT           attempt number
//   TRAINYARD_BACKEND_JOB_NAME  request.name
//   TRAINYARD_WORKERS           spec.workers
//   TRAINYARD_CHECKPOINT_DIR    spec.checkpoint.directory (when set)
//   TRAINYARD_RESUME_FROM       resume_from (when set)
// then request.env. The worker index (TRAINYARD_WORKER_INDEX) differs per
// worker; each adapter sets it from its backend (SLURM_PROCID,
// JOB_COMPLETION_INDEX).
std::map<std::string, std::string> AttemptEnv(const LaunchRequest& request);

// The checks every adapter applies before touching its backend: name ==
// BackendJobName(job_id, attempt), job_id > 0, attempt >= 1, tenant a valid
// id, spec.workers >= 1, worker_nodes.size() == spec.workers, every worker
// node a valid node id, resources non-negative, env names valid. Returns
// INVALID_ARGUMENT naming the field ("worker_nodes[1]", "spec.workers",
// "env[\"1X\"]").
absl::Status ValidateLaunchRequest(const LaunchRequest& request);

// --- Attempt state ----------------------------------------------------------

// Where an attempt is in the backend.
enum class AttemptPhase {
  // Accepted by the backend, not started yet (Slurm PENDING/CONFIGURING,
  // Kubernetes pods Pending).
  kPending,
  // Running (also while being stopped inside its grace period).
  kRunning,
  // Ended with exit code 0. Terminal.
  kSucceeded,
  // Ended unsuccessfully: see AttemptStatus::failure. Terminal.
  kFailed,
  // Stopped by Stop() (cancel or preemption). Terminal.
  kCancelled,
};
// "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED".
std::string_view AttemptPhaseName(AttemptPhase phase);
// kSucceeded, kFailed and kCancelled.
bool IsTerminal(AttemptPhase phase);

// Why an attempt ended (kNone while it runs and when it succeeded).
enum class FailureKind {
  kNone,
  // The job's own code failed: non-zero exit, out of memory, killed by a
  // signal it was not sent by Trainyard (Slurm FAILED, OUT_OF_MEMORY).
  kUserError,
  // Trainyard stopped it to make room for other work (Stop with
  // StopReason::kPreemption; Slurm PREEMPTED).
  kPreempted,
  // The provider reclaimed the spot capacity under it.
  kSpotReclaim,
  // A node under it failed (Slurm NODE_FAIL, Kubernetes node lost).
  kNodeFailure,
  // It reached spec.time_limit (Slurm TIMEOUT, activeDeadlineSeconds).
  kTimeLimit,
  // Stopped at a user's or administrator's request (Stop with
  // StopReason::kCancel; Slurm CANCELLED).
  kCancelled,
  // The backend rejected or lost it (submission refused after acceptance,
  // the backend forgot the job).
  kBackendError,
};
// "NONE", "USER_ERROR", "PREEMPTED", "SPOT_RECLAIM", "NODE_FAILURE",
// "TIME_LIMIT", "CANCELLED", "BACKEND_ERROR".
std::string_view FailureKindName(FailureKind kind);
// The API's FailureClass (kNone → FAILURE_CLASS_UNSPECIFIED).
trainyard::v1::FailureClass ToFailureClass(FailureKind kind);

// Whether the platform caused the failure, so the job goes back to QUEUED
// (resuming from its last checkpoint) whatever its retry policy says:
// kPreempted, kSpotReclaim, kNodeFailure and kBackendError. kUserError is
// retried only as its RetryPolicy says (ShouldRetry); kTimeLimit, kCancelled
// and kNone never.
bool Retryable(FailureKind kind);
// Whether an attempt that ended this way counts against
// RetryPolicy.max_attempts: kUserError and kBackendError (so a backend that
// keeps rejecting a job does not loop forever); preemption, spot reclaim and
// node failure do not.
bool CountsAgainstRetryLimit(FailureKind kind);
// The dispatcher's whole retry decision for an ended attempt: kPreempted,
// kSpotReclaim and kNodeFailure → true; kBackendError → counted_attempts <
// max_attempts; kUserError → exit_code is retryable (listed in
// retryable_exit_codes, or any non-zero code when the list is empty; an
// unknown exit code counts as retryable only when the list is empty) and
// counted_attempts < max_attempts; otherwise false. `counted_attempts` is the
// number of attempts so far, this one included, that CountsAgainstRetryLimit;
// max_attempts 0 means 3.
bool ShouldRetry(FailureKind kind, std::optional<int> exit_code,
                 const trainyard::v1::RetryPolicy& policy,
                 int32_t counted_attempts);

// A checkpoint the adapter found (e.g. in the job's checkpoint manifest
// `trainyard-checkpoint.json`, or written by the sim).
struct CheckpointInfo {
  // Training step, monotonic within a job.
  int64_t step = 0;
  // Where it is stored (path or URI).
  std::string uri;
  // When the job wrote it.
  absl::Time time;
  friend bool operator==(const CheckpointInfo&,
                         const CheckpointInfo&) = default;
};

// What the backend knows of one attempt.
struct AttemptStatus {
  // Backend job name ("ty-<job>-<attempt>").
  std::string name;
  // The backend's own id (Slurm job id, Kubernetes uid, "sim-<n>").
  std::string backend_id;
  AttemptPhase phase = AttemptPhase::kPending;
  // Why it ended; kNone unless phase is kFailed or kCancelled.
  FailureKind failure = FailureKind::kNone;
  // Exit code of the job's command (128 + signal when killed by a signal);
  // unset while it runs and when it did not exit by itself (node failure,
  // reclaim, backend error).
  std::optional<int> exit_code;
  // Human-readable detail ("exited with code 3", "node a-0003 failed").
  std::string message;
  // When the backend accepted it.
  absl::Time submit_time = absl::InfinitePast();
  // When it started running; unset while pending (and when it never ran).
  std::optional<absl::Time> start_time;
  // When it ended; unset until it is terminal.
  std::optional<absl::Time> end_time;
  // Whether Stop was called and the attempt is inside its grace period
  // (running towards stop_deadline). Stays set once terminal.
  bool stop_requested = false;
  // When a requested stop takes effect; unset without a stop request.
  std::optional<absl::Time> stop_deadline;
  // Checkpoints found so far, oldest first.
  std::vector<CheckpointInfo> checkpoints;
  // Node id of each worker (the placement it runs on).
  std::vector<std::string> nodes;
};

// --- Nodes ------------------------------------------------------------------

// One node of the cluster as the backend reports it.
struct NodeInventory {
  // Node id (hostname): the {node} of "clusters/{cluster}/nodes/{node}".
  std::string name;
  // Pool id it belongs to; empty if the backend cannot tell (then the
  // dispatcher maps it by labels).
  std::string pool;
  // Flavor id of its pool, if the backend knows it; may be empty.
  std::string flavor;
  // GPU model, e.g. "H100"; empty for CPU-only nodes.
  std::string gpu_model;
  // Capacity.
  int64_t gpus = 0;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  // Allocated to running or pending work (Trainyard's and anyone else's).
  int64_t used_gpus = 0;
  int64_t used_cpu_millis = 0;
  int64_t used_memory_bytes = 0;
  // Topology: rack within block; empty when unknown.
  std::string rack;
  std::string block;
  // Backend labels (Kubernetes node labels, Slurm features as key "").
  std::map<std::string, std::string> labels;
  // Accepts new work (false when drained/cordoned or failed).
  bool schedulable = true;
  // Down: failed, unreachable or reclaimed; work on it is lost. Implies
  // !schedulable.
  bool failed = false;
  // Detail of the state (Slurm reason, "reclaimed", "failed").
  std::string state_message;
};

// The API's Node: name "clusters/<cluster>/nodes/<name>", pool, capacity,
// topology, labels, state (failed → DOWN, !schedulable → DRAINING, else
// READY) and state_message; report_time is left unset.
trainyard::v1::Node ToNodeProto(const NodeInventory& node,
                                std::string_view cluster);
// Whether two inventories of a node give the same API record (ToNodeProto):
// usage and flavor aside, which the record does not hold.
bool SameNodeRecord(const NodeInventory& a, const NodeInventory& b);

// --- The adapter ------------------------------------------------------------

// A piece of an attempt's output (its workers' stdout and stderr as the
// backend keeps them), read by Adapter::ReadLog.
struct LogChunk {
  // Byte offset of `data` in the output: the offset asked for, or later when
  // the backend no longer keeps the bytes asked for.
  int64_t offset = 0;
  std::string data;
  // The output's size when it was read (bytes written so far).
  int64_t size = 0;
};

// Why Stop is called; decides the FailureKind of the stopped attempt.
enum class StopReason {
  // A user or administrator cancelled the job → kCancelled.
  kCancel,
  // The scheduler preempted it → kPreempted (retryable).
  kPreemption,
};

class Adapter {
 public:
  virtual ~Adapter() = default;

  // "slurm", "kubernetes" or "sim".
  virtual std::string_view kind() const = 0;

  // Starts the attempt, idempotently: looks for a backend job named
  // request.name first and, if there is one (in any phase), returns its
  // status without comparing it with the request. Otherwise validates the
  // request (ValidateLaunchRequest + backend checks: known nodes, capacity,
  // flavor), creates the job with AttemptEnv(request) and returns its status
  // (normally kPending or kRunning).
  virtual absl::StatusOr<AttemptStatus> Launch(
      const LaunchRequest& request) = 0;
  // How many Launch calls the dispatcher may make at once, each from a thread
  // of its own, when a pass has several attempts to launch. 1 (the default):
  // one after another. Above 1, Launch must be thread-safe; worth it when a
  // launch mostly waits on the backend's answer.
  virtual int LaunchConcurrency() const { return 1; }

  // Sends POSIX signal `signal` (1..64, e.g. SIGUSR1 = 10 to ask for a
  // checkpoint) to every worker of a running attempt. NOT_FOUND if unknown,
  // FAILED_PRECONDITION if it is not running.
  virtual absl::Status Signal(std::string_view name, int signal) = 0;

  // Stops the attempt: SIGTERM to every worker now, forced stop when `grace`
  // has passed (at once when grace is zero). A pending attempt is removed at
  // once. The attempt ends kCancelled with failure kCancelled or kPreempted
  // (by `reason`), unless it ends by itself inside the grace period.
  // Idempotent: stopping an ended attempt is OK and changes nothing; a second
  // Stop may shorten the deadline (never lengthen it) and a kCancel reason
  // replaces kPreemption. INVALID_ARGUMENT for a negative grace, NOT_FOUND if
  // unknown.
  virtual absl::Status Stop(std::string_view name, absl::Duration grace,
                            StopReason reason) = 0;

  // The attempt's current status. NOT_FOUND if the backend has no attempt of
  // that name (never created, or deleted).
  virtual absl::StatusOr<AttemptStatus> Status(std::string_view name) = 0;

  // Every attempt the backend holds that Trainyard owns (names starting with
  // kBackendJobNamePrefix), ended ones included until Delete, sorted by name.
  // The dispatcher polls it and reconciles it with PostgreSQL; a backend
  // that can watch (Kubernetes resourceVersion) may serve it from a
  // watch-fed cache, so the interface needs no separate Watch.
  virtual absl::StatusOr<std::vector<AttemptStatus>> List() = 0;

  // Forgets an ended attempt once the dispatcher has recorded its outcome
  // (deletes the Kubernetes Job and its pods; nothing for Slurm, whose
  // accounting keeps history; drops the sim's record). OK if unknown;
  // FAILED_PRECONDITION if not ended.
  virtual absl::Status Delete(std::string_view name) = 0;

  // Every node of the cluster with its pool, flavor, topology, capacity,
  // allocation and state, sorted by name.
  virtual absl::StatusOr<std::vector<NodeInventory>> Inventory() = 0;

  // Reads up to `max_bytes` (> 0) of attempt `name`'s output from byte
  // `offset` (>= 0) on; an offset at or past the end gives no data. Pending
  // attempts have an empty output. NOT_FOUND for an unknown (or deleted)
  // attempt; UNIMPLEMENTED where the backend keeps no output;
  // FAILED_PRECONDITION when the output exists but cannot be read from here
  // (the message says where it is and why). The default keeps no output.
  virtual absl::StatusOr<LogChunk> ReadLog(std::string_view name,
                                           int64_t offset, int64_t max_bytes);

  // When the backend's state next changes by itself (an attempt starts or
  // ends, a checkpoint lands), where the adapter knows it in advance (the
  // sim does); the dispatcher then runs its next pass at that moment instead
  // of waiting out its interval. nullopt: not known (the dispatcher polls).
  virtual std::optional<absl::Time> NextChange() { return std::nullopt; }
};

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_ADAPTER_H_
