// One leader among the processes of a service, and the leader's work loop:
// the scheduler (one per platform), the dispatchers (one per cluster) and any
// other service that must run alone use it.
//
// Until Stop(), a LeaderLoop tries the PostgreSQL session advisory lock of
// `lock_key` every `standby_poll` (storage/postgres/leader.h RunAsLeader).
// Each time it gets the lock it logs "<name>: became the leader", calls the
// service's `became_leader` hook (what a new leader must not trust from
// before), then runs `round` again and again until Stop() or the lock's
// connection is lost, and logs "<name>: no longer the leader". Between rounds
// it waits `interval` (or what the round asks for); a wake-up published on
// one of `wakeup_channels` over Redis ends the wait early. Wake-ups are hints
// (storage/redis/wakeup_subscriber.h): the timer runs the rounds anyway, and
// without Redis it is the only trigger.
//
// Where it lives: it ties storage (the lock of storage/postgres, the wake-ups
// of storage/redis) to the runtime's logging (services/lib/runtime). storage/
// logs nothing through the runtime and services/lib/runtime, the runtime
// library, must not depend on storage, so it is a library of its own between
// them, linked by the services that elect a leader.
#ifndef TRAINYARD_SERVICES_LEADER_LEADER_LOOP_H_
#define TRAINYARD_SERVICES_LEADER_LEADER_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "storage/postgres/pool.h"

namespace trainyard::leader {

struct LeaderLoopOptions {
  // Names the loop in its log lines: "<name>: leader election failed",
  // "<name>: <became_leader_log>", "<name>: <lost_leader_log>".
  std::string name;
  std::string became_leader_log = "became the leader";
  std::string lost_leader_log = "no longer the leader";
  // One more field on each of those lines (e.g. "cluster" = the cluster id);
  // none when `log_key` is empty.
  std::string log_key;
  std::string log_value;

  // Key of the session advisory lock that elects the leader.
  int64_t lock_key = 0;
  // How often a standby tries to become the leader.
  absl::Duration standby_poll = absl::Seconds(1);
  // Redis ("host:port") whose `wakeup_channels` end the wait between rounds
  // early. Empty (or not an address, or no channels): the timer alone.
  std::string redis_addr;
  std::vector<std::string> wakeup_channels;
  // The wait between rounds, unless a round asks for another.
  absl::Duration interval = absl::Seconds(1);
};

// What a round asks of the wait before the next round.
struct NextRound {
  // How long to wait at most; nullopt = the loop's interval.
  std::optional<absl::Duration> wait;
  // Whether a wake-up ends the wait early (a round backing off after a
  // failure says false: then only Stop() does).
  bool wakeable = true;
};

class LeaderLoop {
 public:
  LeaderLoop() = default;
  // Stops the loop (see Stop()).
  ~LeaderLoop();

  LeaderLoop(const LeaderLoop&) = delete;
  LeaderLoop& operator=(const LeaderLoop&) = delete;

  // Runs the loop (above) in a background thread until Stop(). `db` must
  // outlive it. `round` is required, `became_leader` may be null; both run on
  // that thread, never at the same time. Does nothing when already started;
  // after Stop() the loop ends at once.
  void Start(storage::postgres::Database& db, LeaderLoopOptions options,
             std::function<void()> became_leader,
             std::function<NextRound()> round);
  // The same, and `standby` (may be null) runs on that thread after each try
  // for the lock that failed, before the wait (a hot standby keeps its
  // picture of the state current with it).
  void Start(storage::postgres::Database& db, LeaderLoopOptions options,
             std::function<void()> became_leader,
             std::function<NextRound()> round, std::function<void()> standby);
  // Ends the loop (releasing the lock) and waits for it: a running round
  // finishes, and a wait for a wake-up ends at its timeout.
  void Stop();

  bool is_leader() const { return leader_.load(); }

 private:
  void Run(storage::postgres::Database& db);
  // Leads until Stop() or `alive()` is false.
  void Lead(absl::FunctionRef<bool()> alive);
  void LogEvent(const std::string& what, const absl::Status* error) const;

  LeaderLoopOptions options_;
  std::function<void()> became_leader_;
  std::function<NextRound()> round_;
  std::function<void()> standby_;
  std::atomic<bool> leader_{false};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace trainyard::leader

#endif  // TRAINYARD_SERVICES_LEADER_LEADER_LOOP_H_
