// The `sim` backend: a virtual cluster that "runs" jobs on a Clock, for the
// quick start (real clock), the simulator and tests (virtual clock). It
// behaves like a real engine seen through the Adapter interface: it enforces
// node capacity, runs attempts for a duration, checkpoints, honours time
// limits, grace periods and signals, and suffers node failures, spot reclaims
// and crashes — on command or at random. See docs/sim.md.
//
// Jobs. What an attempt does comes from its environment (AttemptEnv: spec.env
// then LaunchRequest.env):
//   SIM_DURATION          run time, absl::ParseDuration syntax ("90s",
//                         "1h30m"), at most kMaxJobDuration; default
//                         config.default_job_duration.
//                         This is the job's total work: an attempt resuming
//                         from "sim://<name>/step-<n>" (resume_from) has n
//                         seconds of it done already.
//   SIM_EXIT_CODE         exit code at the end of the run (0..255, default
//                         0); non-zero → kFailed / kUserError.
//   SIM_CHECKPOINT_EVERY  checkpoint interval (at least 1s); default
//                         spec.checkpoint.interval (raised to 1s); none if
//                         neither is set.
// A checkpoint's step is the job's progress in whole seconds of work, its uri
// "sim://<attempt name>/step-<step>"; checkpoints fall strictly inside the
// run (not at its end), and an attempt keeps its last kMaxCheckpoints.
// Malformed values are refused by Launch with INVALID_ARGUMENT naming
// spec.env["SIM_..."] (or env["SIM_..."]).
//
// Time. The sim never reads the time by itself: every public method first
// processes everything that became due up to clock.Now() (Tick() does only
// that), in time order, as a discrete-event simulation: attempt starts
// (after config.launch_delay), checkpoints, ends, time limits, grace
// deadlines, random faults and node repairs. Events at the same instant are
// processed attempt events first (by launch order), then node events (by node
// name); within an attempt: start, checkpoint, end of run, time limit, crash,
// grace deadline. Outcomes therefore depend only on the instants at which the
// clock is observed together with the calls made, never on wall time. A clock
// that goes back is treated as "no time passed".
//
// Stop(name, grace, reason). A running attempt gets SIGTERM semantics: if it
// checkpoints it records one final checkpoint at once (progress so far), then
// keeps running until now + grace, when it ends kCancelled with failure
// kCancelled (StopReason::kCancel) or kPreempted (kPreemption) — unless it ends
// by itself first. grace 0 stops it at once; a pending attempt is cancelled at
// once without a checkpoint.
//
// Signal(name, signal). SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 make a
// checkpointing attempt record a checkpoint now; SIGKILL ends it at once as
// kFailed / kUserError with exit code 137; other signals are ignored. Every
// signal is logged as an event.
//
// Capacity. Launch refuses (FAILED_PRECONDITION naming worker_nodes[i]) a
// worker on an unknown, down or unschedulable node, on a node of another
// flavor than request.flavor (when set) or GPU model than the spec asks for,
// or on a node without room for all workers placed on it (GPUs, CPU and
// memory per worker, summed). An attempt holds its resources from Launch until
// it ends.
//
// Faults on command: FailNode (attempts on it fail with kNodeFailure),
// ReclaimNode / ReclaimPool (spot only; kSpotReclaim), CrashJob (kUserError
// with the given exit code). A failed or reclaimed node is down (failed and
// unschedulable in Inventory, refused by Launch) until RecoverNode.
//
// Random faults (config.faults): every node draws its next failure and (spot
// nodes) next reclaim time from exponential distributions with the configured
// rates per hour, and every attempt draws its crash time when it starts; each
// from its own std::mt19937_64 seeded with (faults.seed, its name). So a seed
// gives the same events for the same clock observations and calls, and the
// fault times of one node or attempt do not depend on the others. A node
// downed at random comes back after faults.node_repair_time (never when 0)
// and then draws new fault times.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_ADAPTER_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_ADAPTER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/adapter.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "trainyard/v1/sim.pb.h"

namespace trainyard::dispatcher::sim {

// Environment variables read by the sim.
inline constexpr std::string_view kDurationEnv = "SIM_DURATION";
inline constexpr std::string_view kExitCodeEnv = "SIM_EXIT_CODE";
inline constexpr std::string_view kCheckpointEveryEnv = "SIM_CHECKPOINT_EVERY";

// Run time of jobs without SIM_DURATION when the config sets none.
inline constexpr absl::Duration kDefaultJobDuration = absl::Minutes(1);
// Exit code of a random crash.
inline constexpr int kCrashExitCode = 1;
// Events kept for DrainEvents; older ones are dropped.
inline constexpr size_t kMaxEvents = 1 << 16;
// Checkpoints kept per attempt (the latest ones).
inline constexpr size_t kMaxCheckpoints = 64;
// Output kept per attempt (its newest bytes).
inline constexpr size_t kMaxOutputBytes = 256 << 10;
// Shortest checkpoint interval.
inline constexpr absl::Duration kMinCheckpointInterval = absl::Seconds(1);

// "sim://<attempt>/step-<step>".
std::string SimCheckpointUri(std::string_view attempt, int64_t step);
// The step of a sim checkpoint URI; nullopt for anything else.
std::optional<int64_t> ParseSimCheckpointUri(std::string_view uri);

// What happened in the sim, for logs, the simulator and tests.
enum class SimEventType {
  kLaunched,       // subject: attempt; detail: its nodes
  kStarted,        // subject: attempt
  kCheckpoint,     // subject: attempt; detail: uri
  kSucceeded,      // subject: attempt
  kFailed,         // subject: attempt; detail: failure kind and message
  kCancelled,      // subject: attempt; detail: failure kind
  kStopRequested,  // subject: attempt; detail: grace and reason
  kSignalled,      // subject: attempt; detail: signal number
  kNodeFailed,     // subject: node; detail: "random" or "command"
  kNodeReclaimed,  // subject: node; detail: "random" or "command"
  kNodeRecovered,  // subject: node
  kNodeCordoned,   // subject: node
  kNodeUncordoned  // subject: node
};
// "LAUNCHED", "STARTED", ... "NODE_UNCORDONED".
std::string_view SimEventTypeName(SimEventType type);

struct SimEvent {
  absl::Time time;
  SimEventType type = SimEventType::kLaunched;
  // Attempt or node name.
  std::string subject;
  std::string detail;
  friend bool operator==(const SimEvent&, const SimEvent&) = default;
};
// "2026-01-01T00:01:30Z NODE_FAILED a-0003 random".
std::string FormatSimEvent(const SimEvent& event);

class SimAdapter final : public Adapter {
 public:
  // Validates `config` (ValidateSimConfig) and builds the cluster, all nodes
  // up, at clock.Now(). `clock` must outlive the adapter.
  static absl::StatusOr<std::unique_ptr<SimAdapter>> Create(
      trainyard::v1::SimClusterConfig config, const Clock* clock);

  SimAdapter(const SimAdapter&) = delete;
  SimAdapter& operator=(const SimAdapter&) = delete;

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
  // An attempt's output is its own events (launch, start, checkpoints,
  // signals, stop requests, its end), one FormatSimEvent line each.
  absl::StatusOr<LogChunk> ReadLog(std::string_view name, int64_t offset,
                                   int64_t max_bytes) override;
  // The first event of the agenda (an attempt starting, checkpointing or
  // ending; a node failing or recovering).
  std::optional<absl::Time> NextChange() override;

  // --- Simulation ---
  // Processes everything due up to clock.Now().
  void Tick();
  // The cluster id of the config.
  const std::string& cluster() const { return config_.cluster(); }
  const trainyard::v1::SimClusterConfig& config() const { return config_; }

  // --- Faults on command (each first Tick()s) ---
  // Fails the node: every attempt on it ends kFailed / kNodeFailure. OK and
  // nothing happens if it is already down; NOT_FOUND if unknown.
  absl::Status FailNode(std::string_view node);
  // Reclaims a spot node: every attempt on it ends kFailed / kSpotReclaim.
  // FAILED_PRECONDITION for a node of a non-spot pool; OK if already down.
  absl::Status ReclaimNode(std::string_view node);
  // ReclaimNode on every node of a spot pool that is up, by name.
  // NOT_FOUND if unknown, FAILED_PRECONDITION if not a spot pool.
  absl::Status ReclaimPool(std::string_view pool);
  // Brings a down node back (schedulable unless cordoned) and draws its next
  // random fault times from now. OK if it is up.
  absl::Status RecoverNode(std::string_view node);
  // Cordons (false) or uncordons (true) a node: running attempts go on, new
  // launches are refused. NOT_FOUND if unknown.
  absl::Status SetNodeSchedulable(std::string_view node, bool schedulable);
  // Crashes a pending or running attempt with `exit_code` (1..255): kFailed /
  // kUserError. NOT_FOUND if unknown, FAILED_PRECONDITION if it has ended.
  absl::Status CrashJob(std::string_view name, int exit_code);

  // The environment every worker of attempt `name` was launched with
  // (AttemptEnv of its LaunchRequest), as a node agent would see it; NOT_FOUND
  // if unknown (or deleted). The sim runs no processes: tests play the worker
  // with it.
  absl::StatusOr<std::map<std::string, std::string>> LaunchEnv(
      std::string_view name);

  // Returns the events since the last call (at most kMaxEvents, oldest
  // first) and forgets them.
  std::vector<SimEvent> DrainEvents();

 private:
  enum class NodeDown { kUp, kFailed, kReclaimed };

  // What Inventory reports (name, pool, flavor, capacity, allocation,
  // topology, labels; its schedulable, failed and state_message are derived
  // there from `cordoned` and `down`), and the simulation's own state.
  struct Node : NodeInventory {
    trainyard::v1::FlavorKind flavor_kind =
        trainyard::v1::FLAVOR_KIND_UNSPECIFIED;
    bool cordoned = false;
    NodeDown down = NodeDown::kUp;
    // Random fault rates per hour (0: none).
    double failure_rate = 0;
    double reclaim_rate = 0;
    // Random draws made so far for failures / reclaims (the k-th draw uses a
    // generator seeded with (seed, purpose, name, k)).
    uint64_t failure_draws = 0;
    uint64_t reclaim_draws = 0;
    // Next random failure / reclaim while up; repair time while down after a
    // random fault. InfiniteFuture when none.
    absl::Time next_failure = absl::InfiniteFuture();
    absl::Time next_reclaim = absl::InfiniteFuture();
    absl::Time repair_at = absl::InfiniteFuture();
    // Attempts holding resources here, by sequence number.
    std::set<uint64_t> attempts;
    // Its key in the agenda, if any.
    std::optional<absl::Time> agenda_time;
  };

  struct Attempt {
    uint64_t seq = 0;
    AttemptStatus status;
    // AttemptEnv of the launch request.
    std::map<std::string, std::string> env;
    // Per-worker demand and the node index of each worker.
    int64_t gpus = 0;
    int64_t cpu_millis = 0;
    int64_t memory_bytes = 0;
    std::vector<int> node_indexes;
    bool holds_resources = false;
    // When it starts running (pending until then).
    absl::Time start_at;
    // Work done before this attempt (resumed progress) and work left.
    int64_t initial_progress_s = 0;
    absl::Duration remaining;
    int exit_code = 0;
    absl::Duration checkpoint_every;  // zero: does not checkpoint
    int64_t periodic_checkpoints = 0;
    absl::Duration time_limit;  // zero: none
    absl::Time crash_at = absl::InfiniteFuture();
    StopReason stop_reason = StopReason::kCancel;
    // Its key in the agenda, if any.
    std::optional<absl::Time> agenda_time;
    // Its output (ReadLog): its events as FormatSimEvent lines; the last
    // kMaxOutputBytes are kept, from byte `output_start` of the output on.
    std::string output;
    int64_t output_start = 0;
  };

  // Agenda entries: (time, 0 = attempt / 1 = node, attempt seq / node index).
  using AgendaKey = std::tuple<absl::Time, int, uint64_t>;

  SimAdapter(trainyard::v1::SimClusterConfig config, const Clock* clock);

  void AdvanceLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProcessAttemptLocked(Attempt& a, absl::Time t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProcessNodeLocked(int index, absl::Time t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<absl::Time> NextAttemptEvent(const Attempt& a) const;
  absl::Time NextNodeEvent(const Node& n) const;
  void ScheduleAttemptLocked(Attempt& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleNodeLocked(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndAttemptLocked(Attempt& a, absl::Time t, AttemptPhase phase,
                        FailureKind failure, std::optional<int> exit_code,
                        std::string message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckpointLocked(Attempt& a, absl::Time t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DownNodeLocked(int index, absl::Time t, NodeDown why, bool random)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecoverNodeLocked(int index, absl::Time t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DrawNodeFaultsLocked(Node& n, absl::Time t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogLocked(absl::Time t, SimEventType type, std::string subject,
                 std::string detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int> FindNodeLocked(std::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const trainyard::v1::SimClusterConfig config_;
  const Clock* const clock_;
  const absl::Duration default_duration_;
  const absl::Duration launch_delay_;
  const absl::Duration repair_time_;
  const double crash_rate_;
  const uint64_t seed_;

  mutable absl::Mutex mu_;
  // The latest instant processed.
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  // Sorted by name.
  std::vector<Node> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> node_index_ ABSL_GUARDED_BY(mu_);
  // By name; std::map keeps element addresses stable.
  std::map<std::string, Attempt, std::less<>> attempts_ ABSL_GUARDED_BY(mu_);
  // The attempt named `name`, or NOT_FOUND.
  absl::StatusOr<Attempt*> FindAttemptLocked(std::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<uint64_t, Attempt*> by_seq_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<AgendaKey> agenda_ ABSL_GUARDED_BY(mu_);
  std::deque<SimEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::dispatcher::sim

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_ADAPTER_H_
