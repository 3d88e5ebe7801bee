// The `slurm` backend: drives a Slurm cluster through slurmrestd's
// REST API (docs/slurm.md).
//
//   Launch   POST job/submit: a batch job named "ty-<job>-<attempt>" whose
//            script runs spec.command on every worker with srun (one task per
//            worker, TRAINYARD_WORKER_INDEX = SLURM_PROCID); partition from
//            the flavor, workers pinned to the placed nodes (feature
//            constraint), GPUs as gres per node, CPUs per task, memory per
//            node, time limit in minutes, the comment carries tenant, job,
//            attempt and checkpoint directory. Looks before it creates: the
//            adapter keeps every Trainyard job of the cluster in a cache
//            filled by a full listing before its first Launch and kept
//            current by List (one `jobs?update_time=` call per pass), so a
//            dispatcher restarted between "submitted" and "recorded" finds
//            the job instead of submitting it again. A submit whose outcome
//            is unknown (timeout, connection lost) forces a full listing
//            before the name is submitted again.
//   Stop     DELETE job/{id}?signal=<stop_signal> (USR1 by default; srun
//            forwards it to every worker), then, once the grace period has
//            passed, DELETE job/{id} (SIGKILL). The forced stop is sent by
//            the first List/Status/Stop call after the deadline (the
//            dispatcher lists every pass). A pending job is cancelled at
//            once. After a Stop, however the job ends, it ends kCancelled
//            with failure kCancelled or kPreempted (a job that checkpoints
//            and exits 0 on the signal did not finish its work).
//   Status/List  from the cache; states mapped by MapJob (slurm_api.h);
//            checkpoints read from `<checkpoint dir>/trainyard-checkpoint.json`
//            when the directory is local (shared file system).
//   Inventory    GET nodes.
//   Delete   forgets an ended job (Slurm keeps its record until MinJobAge).
//
// slurmrestd or slurmctld unreachable: every call fails UNAVAILABLE (or
// DEADLINE_EXCEEDED); nothing is reported ended because of it.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_ADAPTER_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_ADAPTER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/adapter.h"
#include "services/dispatcher/adapters/http/rest_client.h"
#include "services/dispatcher/adapters/slurm/slurm_api.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"

namespace trainyard::dispatcher::slurm {

using ::trainyard::dispatcher::http::HttpResponse;
using ::trainyard::dispatcher::http::RestClient;

class SlurmAdapter : public Adapter {
 public:
  // Validates the settings and reads the JWT key; does not contact Slurm.
  static absl::StatusOr<std::unique_ptr<SlurmAdapter>> Create(
      SlurmSettings settings);
  ~SlurmAdapter() override;

  std::string_view kind() const override { return "slurm"; }
  absl::StatusOr<AttemptStatus> Launch(const LaunchRequest& request) override;
  absl::Status Signal(std::string_view name, int signal) override;
  absl::Status Stop(std::string_view name, absl::Duration grace,
                    StopReason reason) override;
  absl::StatusOr<AttemptStatus> Status(std::string_view name) override;
  absl::StatusOr<std::vector<AttemptStatus>> List() override;
  absl::Status Delete(std::string_view name) override;
  absl::StatusOr<std::vector<NodeInventory>> Inventory() override;
  // Reads the batch script's output file (Slurm's standard_output, written by
  // every task) from the dispatcher's own filesystem: Slurm's REST API serves
  // no output, so the dispatcher needs the cluster's shared filesystem (or
  // runs on a login node). FAILED_PRECONDITION naming the path when the file
  // cannot be read here.
  absl::StatusOr<LogChunk> ReadLog(std::string_view name, int64_t offset,
                                   int64_t max_bytes) override;

  // GET ping: OK when slurmrestd answers and reaches slurmctld.
  absl::Status Ping();
  // Slurm job ids of every job (Trainyard's or not) named `name` in the last
  // listing (a full listing now when `refresh`); for tests and operators.
  absl::StatusOr<std::vector<int64_t>> JobIdsNamed(std::string_view name,
                                                   bool refresh);

  // REST calls made so far, for tests and benchmarks.
  struct Counters {
    int64_t submits = 0;
    int64_t polls = 0;
    int64_t full_polls = 0;
    int64_t not_modified = 0;
    int64_t signals = 0;
    int64_t cancels = 0;
  };
  Counters counters() const;

  const SlurmSettings& settings() const { return settings_; }

 private:
  struct StopRequest {
    absl::Time deadline;
    StopReason reason = StopReason::kPreemption;
    bool killed = false;  // the forced stop was sent
  };

  explicit SlurmAdapter(SlurmSettings settings, std::string key);

  std::string Path(std::string_view rest) const;
  std::vector<std::pair<std::string, std::string>> Headers();
  // One REST call; the answer's errors classified. `sent` as RestClient.
  absl::StatusOr<std::string> Call(std::string_view method,
                                   std::string_view path, std::string_view what,
                                   std::string_view body = "",
                                   bool* sent = nullptr);
  // Refreshes the job cache: `full` lists every job (update_time=0), else
  // only if something changed since the last listing.
  absl::Status Poll(bool full);
  // Sends the forced stop of every stop whose deadline has passed.
  void ProcessDueStops();
  // Reads the checkpoint manifests of the cached jobs.
  void ReadCheckpoints();
  absl::Status Cancel(int64_t job_id, std::optional<int> signal,
                      std::string_view name);
  // The job of `name` (lowest job id of that name; submitted-but-not-yet-
  // listed jobs included), or nullptr.
  const SlurmJob* FindLocked(std::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AttemptStatus StatusOfLocked(const SlurmJob& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SlurmSettings settings_;
  const std::string key_;
  RestClient rest_;

  // Serializes Launch (look, then create) and listings.
  absl::Mutex launch_mu_;
  absl::Mutex poll_mu_;

  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  absl::Time token_expiry_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Whether the cache holds a full listing made by this adapter.
  bool primed_ ABSL_GUARDED_BY(mu_) = false;
  // Start of the last successful listing (for update_time).
  absl::Time last_poll_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Trainyard's jobs by name (several ids when duplicated outside us).
  std::map<std::string, std::vector<SlurmJob>, std::less<>> jobs_
      ABSL_GUARDED_BY(mu_);
  // Submitted by this adapter, not yet seen in a listing.
  std::map<std::string, SlurmJob, std::less<>> submitted_ ABSL_GUARDED_BY(mu_);
  // Names whose submit may or may not have reached slurmctld.
  std::set<std::string, std::less<>> uncertain_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, StopRequest, std::less<>> stops_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<CheckpointInfo>, std::less<>> checkpoints_
      ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> deleted_ ABSL_GUARDED_BY(mu_);
  // Flavor of each node from the last Inventory (for Launch's checks).
  std::map<std::string, std::string, std::less<>> node_flavor_
      ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::dispatcher::slurm

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_ADAPTER_H_
