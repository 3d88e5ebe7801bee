// The scheduler service: one active leader, elected with a
// PostgreSQL session advisory lock (a standby takes over within
// `standby_poll` of the leader's death, when PostgreSQL drops its session).
// Each cycle refreshes its picture of the platform incrementally (jobs named
// by outbox events since the last cycle; the small configuration tables in
// full), builds the policy's snapshot, calls policy::Decide and commits the
// decisions in one transaction guarded by each job's version (a job that
// changed meanwhile is dropped, never applied twice), then writes the
// explanation of every job it left pending when it changed (ExplainPending
// serves them; a writer thread writes them behind the cycle, which does not
// wait for them). Cycles run on wake-ups (Redis, from submissions and
// completions) and on a timer. See docs/scheduler.md.
#ifndef TRAINYARD_SERVICES_SCHEDULER_SCHEDULER_SERVICE_H_
#define TRAINYARD_SERVICES_SCHEDULER_SCHEDULER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/leader/leader_loop.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/scheduler_state.h"
#include "services/scheduler/snapshot_builder.h"
#include "storage/postgres/accounting_store.h"
#include "storage/postgres/job_store.h"
#include "storage/postgres/object_store.h"
#include "storage/postgres/pool.h"
#include "storage/postgres/scheduler_store.h"
#include "storage/redis/redis_client.h"
#include "trainyard/v1/accounting.pb.h"

namespace trainyard::scheduler {

struct SchedulerOptions {
  std::string postgres_url;
  // Redis for wake-ups; empty = timer only.
  std::string redis_addr = "127.0.0.1:6379";
  // A cycle runs at least this often, and on every wake-up.
  absl::Duration interval = absl::Seconds(1);
  // How often a standby tries to become the leader.
  absl::Duration standby_poll = absl::Seconds(1);
  // A standby follows the outbox as the leader does (Follow(), after each
  // try for the lock), so that when it becomes the leader its first cycle
  // reads only what changed since instead of every active job. false: a new
  // leader loads everything.
  bool hot_standby = true;
  // A hot standby follows at most this often (it tries for the lock every
  // standby_poll): the rarer, the less it reads (a job that changed several
  // times is read once) and the more its first cycle as the leader reads.
  absl::Duration standby_follow_interval = absl::Seconds(5);
  // Key of the session advisory lock that elects the leader.
  int64_t leader_lock_key = 0x7479736368656400;  // "tysched\0"
  // A new leader's full load reads on up to seven connections at once (the
  // jobs in four parts, the checkpoints, the explanations, the
  // configuration).
  int db_pool_size = 8;
  // The scheduler's clock ("now" of its snapshots); tests running the sim on
  // a virtual clock pass the same one. Default: absl::Now.
  std::function<absl::Time()> clock;
  // A pending job's explanation is rewritten at once when its reason changes,
  // and at most this often when only its message does (usage numbers change
  // with every admission).
  absl::Duration explanation_refresh = absl::Seconds(5);
  // At most this many explanations are rewritten per cycle for the refresh
  // alone (a new message, a move between reasons of waiting for resources),
  // those written longest ago first; new reasons, new pending jobs and rows
  // of jobs no longer pending are written regardless. With 100,000 pending
  // jobs whose messages' numbers move every cycle, a 5 s refresh alone asks
  // for up to 20,000 row writes a second, more than PostgreSQL on two cores
  // takes beside the jobs' own writes (docs/performance.md). <= 0: no cap.
  int explanation_refresh_per_cycle = 2000;
  // Pending jobs' explanations are compared with what was written (and the
  // changes handed to the writer) at most this often: a cycle sooner after
  // the last one that did only decides and commits. A new leader's first
  // cycle and the first after a full reload always explain. <= 0: every
  // cycle.
  absl::Duration explanation_interval = absl::Seconds(1);
  // A cluster whose dispatcher's heartbeat is older than this gets no new
  // admissions (DispatcherLiveness; checked against the wall clock, not
  // `clock`). Dispatchers write one at least every 30 s. <= 0: no check.
  absl::Duration dispatcher_timeout = absl::Minutes(2);
  policy::PolicyConfig policy;
};

struct CycleReport {
  int64_t cycle = 0;
  int pending = 0;
  int running = 0;
  int admitted = 0;
  int preempted = 0;
  int reservations = 0;
  // Decisions dropped because their job changed since the snapshot.
  int dropped = 0;
  int explanations_written = 0;
  // Whether the refresh read every active job (a new leader without a
  // followed picture, or after a failed cycle) rather than what changed.
  bool full_load = false;
  // commit = applying the decisions and handing the explanation changes to
  // the writer thread, which writes them behind the cycle; explain = the
  // time the cycle waited for earlier cycles' explanation writes (zero: it
  // does not wait; FlushExplanations() does).
  // load = refresh (reading what changed) + building the snapshot.
  absl::Duration load, refresh, decide, commit, explain;
  // Parts of refresh (wall): reading the events since the last cycle and the
  // jobs they name (jobs, newest attempts, checkpoints), and the
  // configuration (the tables' fingerprints and the tables that changed);
  // how many events and changed jobs were read.
  absl::Duration refresh_events, refresh_jobs, refresh_config;
  int events_read = 0;
  int jobs_read = 0;
  // Parts of commit (wall): the explanations' bookkeeping and building the
  // decisions (this process), then the decisions' transaction: locking the
  // jobs, the writes before the events, waiting for the outbox lock, the
  // events' insert and notify, COMMIT.
  absl::Duration commit_prepare, commit_lock_jobs, commit_writes,
      commit_outbox_wait, commit_events, commit_commit;
};

class SchedulerService {
 public:
  // Connects; starts no thread. RunCycle() may then be called directly
  // (tests), or Start() runs the leader loop.
  static absl::StatusOr<std::unique_ptr<SchedulerService>> Create(
      SchedulerOptions options);
  ~SchedulerService();

  // Starts the leader-election loop in a background thread.
  void Start();
  // Stops the loop (releasing leadership) and waits for it.
  void Shutdown();

  // One cycle now (the caller makes sure only one scheduler runs cycles), as
  // the leader's loop runs it: it returns once the decisions are committed;
  // the cycle's explanation changes are written behind it by the writer
  // thread (call FlushExplanations() to wait for them).
  absl::StatusOr<CycleReport> RunCycle();
  // A standby's round: brings this process's picture of the platform up to
  // date from PostgreSQL as a cycle's refresh does (the first call reads
  // every active job, later ones what the outbox says changed), deciding and
  // writing nothing. The leader loop calls it on a standby when hot_standby
  // is set; tests and benchmarks that run cycles themselves may call it.
  absl::Status Follow();
  // What the leader loop calls when this process becomes the leader (tests
  // and benchmarks that run cycles themselves call it too): a picture kept
  // by Follow() stays (hot_standby), but the policy's is rebuilt and the
  // explanations the old leader wrote are read again; without one, the
  // first cycle loads everything.
  void BecomeLeader();
  // Blocks until every explanation change handed to the writer is written
  // (or the write failed: its error; the next cycle then rewrites every
  // explanation).
  absl::Status FlushExplanations();

  bool is_leader() const { return loop_.is_leader(); }
  int64_t cycles() const { return cycles_.load(); }

 private:
  explicit SchedulerService(SchedulerOptions options);
  // One cycle. Its explanation changes are handed to the writer thread,
  // which writes them while the next cycles run (a cycle waits for nothing
  // but its decisions' commit); changes to the same job coalesce.
  absl::StatusOr<CycleReport> CycleOnce();
  // Appends a preemption (QUEUE_DRAINED) of every ADMITTED or RUNNING job of a
  // queue stopped with STOP_POLICY_HOLD_AND_DRAIN that `d` does not preempt
  // already.
  void DrainStoppedQueues(
      const policy::Decisions& d,
      std::vector<storage::postgres::PreemptDecision>& preemptions) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  void WriteExplanationsLoop();
  absl::Status Refresh(CycleReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // Refresh()'s reload of the configuration tables that changed.
  absl::Status RefreshConfig(CycleReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // Reads the configuration table of kConfigKinds()[kind] into state_.
  absl::Status LoadConfigKind(size_t kind);
  // The price book's current prices and each budget's view (its thresholds
  // and the meter's forecast) into state_, at most once a second unless the
  // budgets changed; a change of prices, of the budgets that limit
  // admission or of those that restrict to spot marks the configuration
  // changed (forecasts alone do not: UpdateBudgets follows them).
  absl::Status RefreshBudgets(bool budgets_changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // The leader loop's round: one cycle, logged.
  leader::NextRound LeadRound();
  // Forgets what this process believes it wrote (explanations and shares),
  // so that the next explaining cycle writes them all again.
  void ForgetWritten() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // ForgetWritten(), and reloads every job and the configuration next cycle.
  void ForgetEverything() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  // Starts explained_ from the rows of pending_explanations.
  void SeedExplained(
      const std::vector<storage::postgres::WrittenExplanation>& written)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);

  const SchedulerOptions options_;
  std::unique_ptr<storage::postgres::Database> db_;
  std::unique_ptr<storage::postgres::SchedulerStore> jobs_;
  // The api's store: LastEventSequence, where a full load starts.
  std::unique_ptr<storage::postgres::JobStore> api_jobs_;
  std::unique_ptr<storage::postgres::ObjectStore> objects_;
  // The price book and the budgets' status.
  std::unique_ptr<storage::postgres::AccountingStore> accounting_;
  // Publishes dispatcher wake-ups (nullptr without Redis).
  std::unique_ptr<storage::redis::RedisClient> redis_;

  absl::Mutex cycle_mu_;
  PlatformState state_ ABSL_GUARDED_BY(cycle_mu_);
  // The policy's incremental picture of state_, and the decisions of the
  // last cycle (kept: a cycle writes over their memory).
  SchedulerState policy_state_ ABSL_GUARDED_BY(cycle_mu_);
  policy::Decisions decisions_ ABSL_GUARDED_BY(cycle_mu_);
  // What the last Refresh() found: jobs with events (ids, repeats possible),
  // whether every job was read anew, whether the configuration changed.
  std::vector<int64_t> changed_ ABSL_GUARDED_BY(cycle_mu_);
  bool jobs_reloaded_ ABSL_GUARDED_BY(cycle_mu_) = false;
  bool config_changed_ ABSL_GUARDED_BY(cycle_mu_) = false;
  bool loaded_ ABSL_GUARDED_BY(cycle_mu_) = false;
  // Set by Follow() and BecomeLeader(): the next cycle rebuilds the
  // policy's picture from state_ (a standby does not keep one).
  bool rebuild_policy_ ABSL_GUARDED_BY(cycle_mu_) = false;
  // Set by BecomeLeader() on a hot standby: the next refresh reads
  // pending_explanations again (what the old leader wrote), and the next
  // cycle explains.
  bool reload_explanations_ ABSL_GUARDED_BY(cycle_mu_) = false;
  bool explain_due_ ABSL_GUARDED_BY(cycle_mu_) = false;
  // When the leader loop's standby hook last ran Follow() (its thread only).
  absl::Time last_follow_ = absl::InfinitePast();
  uint64_t last_seq_ ABSL_GUARDED_BY(cycle_mu_) = 0;
  // ObjectStore::Fingerprints of the configuration tables last loaded, one
  // per kind: only the tables that changed are read again.
  bool config_loaded_ ABSL_GUARDED_BY(cycle_mu_) = false;
  std::vector<std::string> config_fingerprints_ ABSL_GUARDED_BY(cycle_mu_);
  // The budgets as stored (key: tenant, id), and when RefreshBudgets last
  // read prices and statuses.
  std::map<std::pair<std::string, std::string>, trainyard::v1::Budget>
      budget_objects_ ABSL_GUARDED_BY(cycle_mu_);
  absl::Time budgets_read_ ABSL_GUARDED_BY(cycle_mu_) = absl::InfinitePast();
  // What was last written to pending_explanations, per job, so that only
  // changes are written: the reason's code (an index into reasons_) and a
  // hash of the message, not the texts. A full load (a new leader's first
  // cycle, or after a failed one) starts it from the table's rows.
  struct Explained {
    uint64_t message_hash = 0;
    absl::Time written;
    // The last cycle that explained the job (rows of jobs a cycle did not
    // explain are deleted).
    int64_t cycle = 0;
    uint16_t reason = 0;
  };
  absl::flat_hash_map<int64_t, Explained> explained_ ABSL_GUARDED_BY(cycle_mu_);
  int64_t explain_cycle_ ABSL_GUARDED_BY(cycle_mu_) = 0;
  absl::Time last_explained_ ABSL_GUARDED_BY(cycle_mu_) = absl::InfinitePast();
  // The reason codes seen (interned) and whether each is one of waiting for
  // resources (WaitsForResources).
  uint16_t ReasonCode(std::string_view reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cycle_mu_);
  std::vector<std::string> reasons_ ABSL_GUARDED_BY(cycle_mu_);
  std::vector<bool> reason_waits_ ABSL_GUARDED_BY(cycle_mu_);
  absl::flat_hash_map<std::string, uint16_t> reason_codes_
      ABSL_GUARDED_BY(cycle_mu_);

  // Explanation changes not written yet: job -> new row, or nullopt to
  // delete it. A failed write makes the next cycle rewrite everything.
  absl::Mutex writes_mu_;
  absl::flat_hash_map<int64_t, std::optional<storage::postgres::Explanation>>
      writes_ ABSL_GUARDED_BY(writes_mu_);
  // Queues' weighted shares and what they lend not written yet, and what was
  // handed to the writer last (a row is written when it changes).
  absl::flat_hash_map<std::pair<std::string, std::string>,
                      storage::postgres::QueueShareRow>
      share_writes_ ABSL_GUARDED_BY(writes_mu_);
  struct ShareWritten {
    int64_t share = 0;
    std::vector<storage::postgres::QueueLentCell> lent;
  };
  absl::flat_hash_map<std::pair<std::string, std::string>, ShareWritten>
      shares_written_ ABSL_GUARDED_BY(cycle_mu_);
  bool writing_ ABSL_GUARDED_BY(writes_mu_) = false;
  bool writer_stop_ ABSL_GUARDED_BY(writes_mu_) = false;
  absl::Status write_failure_ ABSL_GUARDED_BY(writes_mu_);
  std::thread writer_;

  std::atomic<int64_t> cycles_{0};
  // Last: stopped (by Shutdown()) before the rest goes.
  leader::LeaderLoop loop_;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SERVICES_SCHEDULER_SCHEDULER_SERVICE_H_
