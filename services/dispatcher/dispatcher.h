// The dispatcher service: one active dispatcher per cluster
// (a PostgreSQL session advisory lock keyed by the cluster), driving one
// Adapter. Each pass:
//   1. reports the backend's node inventory into the nodes table (only what
//      changed), so capacity and node failures reach the scheduler;
//   2. claims ADMITTED attempts of its cluster (ADMITTED → DISPATCHING) and
//      launches them under their deterministic name "ty-<job>-<attempt>",
//      looking before it creates (Adapter::Launch is idempotent), so a crash
//      between the two never yields a second copy;
//   3. follows every attempt it owns: DISPATCHING → RUNNING when it starts;
//      new checkpoints are recorded (the job's resume point); a preemption
//      (PREEMPTING) or a cancel request is executed with Stop (signal, then
//      the job's grace period); an ended attempt is classified (user error,
//      preemption, spot reclaim, node failure, time limit, backend error)
//      and the job goes to SUCCEEDED, FAILED, CANCELLED or back to QUEUED to
//      resume from its last checkpoint (through RECOVERING for platform
//      failures), with its lost work (GPU-seconds since the last checkpoint)
//      recorded on the attempt.
// Every change is one versioned transaction with its event. See
// docs/dispatcher.md.
#ifndef TRAINYARD_SERVICES_DISPATCHER_DISPATCHER_H_
#define TRAINYARD_SERVICES_DISPATCHER_DISPATCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/adapter.h"
#include "services/leader/leader_loop.h"
#include "services/lib/runtime/job_token.h"
#include "storage/postgres/dispatcher_store.h"
#include "storage/postgres/job_store.h"
#include "storage/postgres/object_store.h"
#include "storage/postgres/pool.h"
#include "storage/redis/redis_client.h"

namespace trainyard::dispatcher {

struct DispatcherOptions {
  std::string postgres_url;
  // Redis for waking the scheduler when capacity frees (an attempt ended);
  // empty = the scheduler finds out on its timer.
  std::string redis_addr;
  // Cluster id this dispatcher owns (the {cluster} of "clusters/{cluster}").
  std::string cluster;
  // A pass runs at least this often.
  absl::Duration interval = absl::Milliseconds(500);
  // And sooner when the adapter knows when the backend next changes
  // (Adapter::NextChange(): an attempt ending), but at most this often.
  absl::Duration min_pass_gap = absl::Milliseconds(5);
  absl::Duration standby_poll = absl::Seconds(1);
  // Grace period of a preempted attempt whose job sets none (CheckpointPolicy
  // documents 60 s).
  absl::Duration default_grace = absl::Seconds(60);
  int db_pool_size = 4;

  // What every attempt's workers get to call the api with (docs/security.md
  // "Job tokens"), added to LaunchRequest.env:
  //   TRAINYARD_ADDR   api_advertise_addr (not set when empty);
  //   TRAINYARD_TOKEN  a token scoped to the job, signed with job_tokens'
  //                    first key (not set when job_tokens is null), valid
  //                    for the job's time limit + grace period +
  //                    job_token_margin from launch, or job_token_ttl when
  //                    the job has no time limit.
  std::string api_advertise_addr;
  std::shared_ptr<const runtime::JobTokenKeys> job_tokens;
  absl::Duration job_token_ttl = absl::Hours(24 * 7);
  absl::Duration job_token_margin = absl::Hours(1);

  // Attempts' output (Adapter::ReadLog), copied to PostgreSQL for the api's
  // GetLogs: the newest log_tail_bytes of each attempt are kept (0: no
  // copying), a running attempt's new output at most every log_interval
  // (every pass while it is being preempted or cancelled), and all of it
  // once when the attempt ends.
  int64_t log_tail_bytes = 1 << 20;
  absl::Duration log_interval = absl::Seconds(5);

  // Fault injection, for crash tests only (docs/dispatcher.md, "Crash
  // safety"): when > 0, the process kills itself with SIGKILL right after
  // its Nth successful Adapter::Launch, before the pass records anything of
  // that launch: the backend holds the attempt, PostgreSQL still says
  // DISPATCHING with no backend job id. `trainyard dispatcher` and
  // `trainyard all` set it from $TRAINYARD_FAULT_KILL_AFTER_LAUNCHES.
  // 0 (the default): off.
  int fault_kill_after_launches = 0;
};

// The env the dispatcher adds to an attempt of job tenants/<tenant>/jobs/<id>
// launched at `now` (see DispatcherOptions).
std::map<std::string, std::string> ApiEnv(const DispatcherOptions& options,
                                          const std::string& tenant,
                                          int64_t job_id,
                                          const trainyard::v1::JobSpec& spec,
                                          absl::Time now);

struct PassReport {
  int launched = 0;
  int started = 0;
  int succeeded = 0;
  int failed = 0;
  int requeued = 0;
  int cancelled = 0;
  int stops = 0;
  int checkpoints = 0;
  // Attempts whose output (or why it cannot be read) was copied.
  int logs_copied = 0;
  int nodes_reported = 0;
  // Changes that lost a version race (re-examined next pass).
  int conflicts = 0;
};

class Dispatcher {
 public:
  static absl::StatusOr<std::unique_ptr<Dispatcher>> Create(
      DispatcherOptions options, Adapter* adapter);
  ~Dispatcher();

  // Starts the leader loop (one active dispatcher per cluster).
  void Start();
  void Shutdown();
  // One pass now (the caller makes sure it is the only dispatcher of the
  // cluster).
  absl::StatusOr<PassReport> RunPass();

  bool is_leader() const { return loop_.is_leader(); }

 private:
  Dispatcher(DispatcherOptions options, Adapter* adapter);
  // Records the backend's nodes in ClusterService (those that changed) and
  // returns each node's capacity by full name ("clusters/{c}/nodes/{n}").
  struct NodeCapacity {
    int64_t gpus = 0, cpu_millis = 0, memory_bytes = 0;
  };
  absl::Status ReportInventory(
      PassReport& report,
      absl::flat_hash_map<std::string, NodeCapacity>& capacity);
  // Records whether the backend answered this pass: the cluster's health
  // (HEALTHY / UNHEALTHY with the error, heartbeat_time) when it changes or
  // at least every 30 s, and the trainyard_dispatcher_backend_up gauge.
  void ReportHealth(const absl::Status& backend);
  // Commits the changes the pass deferred and the output it read (one
  // transaction), then does what each applied change asked for (counters,
  // forgetting ended attempts).
  absl::Status Flush(PassReport& report);
  absl::Status Follow(const storage::postgres::ClusterAttempt& a,
                      const AttemptStatus* status, PassReport& report);
  absl::Status Launch(const storage::postgres::ClusterAttempt& a,
                      PassReport& report);
  // What Adapter::Launch gets for attempt `a`.
  LaunchRequest RequestOf(const storage::postgres::ClusterAttempt& a) const;
  // Launches the attempts of `attempts` that are DISPATCHING and that the
  // backend does not list (`listed`), up to Adapter::LaunchConcurrency() at a
  // time, into prelaunched_ (nothing when the adapter takes one at a time).
  void LaunchAtOnce(
      const std::vector<storage::postgres::ClusterAttempt>& attempts,
      const std::map<std::string, const AttemptStatus*>& listed);
  absl::Status RecordCheckpoints(const storage::postgres::ClusterAttempt& a,
                                 const AttemptStatus& status,
                                 PassReport& report);
  // Reads the attempt's new output (DispatcherOptions::log_tail_bytes); Flush
  // writes it with the pass's changes.
  void CopyLog(const storage::postgres::ClusterAttempt& a,
               const AttemptStatus& status);
  absl::Status End(const storage::postgres::ClusterAttempt& a,
                   const AttemptStatus& status, PassReport& report);
  // The message a cancelled job ends with: the user's cancel request
  // ("cancelled by users/alice: <reason>") and that its attempt was stopped;
  // just the latter for an attempt stopped without a request (by the backend).
  absl::StatusOr<std::string> CancelledMessage(
      const storage::postgres::ClusterAttempt& a);
  // The leader loop's hooks: a dispatcher that becomes active forgets what
  // it reported before; a round is one pass, and how long to wait for the
  // next (backing off while passes fail).
  void BecomeActive();
  leader::NextRound LeadRound();

  const DispatcherOptions options_;
  Adapter* const adapter_;
  std::unique_ptr<storage::postgres::Database> db_;
  std::unique_ptr<storage::postgres::DispatcherStore> jobs_;
  // The api's store: Get, ListCheckpoints, ReportCheckpoint.
  std::unique_ptr<storage::postgres::JobStore> api_jobs_;
  std::unique_ptr<storage::postgres::ObjectStore> objects_;
  std::unique_ptr<storage::redis::RedisClient> redis_;

  absl::Mutex mu_;
  // The nodes as last written, by node id (compared with SameNodeRecord).
  absl::flat_hash_map<std::string, NodeInventory> reported_nodes_
      ABSL_GUARDED_BY(mu_);
  std::string last_inventory_error_ ABSL_GUARDED_BY(mu_);
  // Highest checkpoint step recorded per job.
  absl::flat_hash_map<int64_t, int64_t> checkpoint_step_ ABSL_GUARDED_BY(mu_);
  // Health last written to the cluster (0 = not yet) and when.
  int reported_health_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time health_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  // A state change the pass records at its end, with what to do once it is
  // applied.
  struct Deferred {
    storage::postgres::AttemptChange change;
    int PassReport::*counter = nullptr;
    // Backend attempt to Delete (its outcome is recorded).
    std::string forget;
  };
  // Changes of the running pass (only the leader's loop or a test's RunPass
  // touches it; passes never overlap).
  std::vector<Deferred> deferred_;
  // When each followed attempt's output was last copied, by backend name
  // (only the pass touches it).
  absl::flat_hash_map<std::string, absl::Time> log_copied_;
  // Launches LaunchAtOnce made for the running pass, by backend name, which
  // Launch takes instead of launching (only the pass touches it).
  absl::flat_hash_map<std::string, absl::StatusOr<AttemptStatus>> prelaunched_;
  // Output read by the running pass.
  std::vector<storage::postgres::LogAppend> log_appends_;
  // Passes failed in a row while active (only the leader loop touches it).
  int failed_passes_ = 0;
  // Successful launches so far, counted only while
  // options_.fault_kill_after_launches is set (passes never overlap).
  int fault_launches_ = 0;

  // Last: stopped (by Shutdown()) before the rest goes.
  leader::LeaderLoop loop_;
};

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_SERVICES_DISPATCHER_DISPATCHER_H_
