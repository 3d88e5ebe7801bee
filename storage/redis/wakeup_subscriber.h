// Coalesced wake-ups over Redis pub/sub (see RedisClient::Notify).

#ifndef TRAINYARD_STORAGE_REDIS_WAKEUP_SUBSCRIBER_H_
#define TRAINYARD_STORAGE_REDIS_WAKEUP_SUBSCRIBER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/redis/hiredis_util.h"
#include "storage/redis/redis_options.h"

namespace trainyard::storage::redis {

// Channel that wakes the scheduler: the api publishes on every submit, a
// dispatcher when attempts end (hints only; the outbox is the truth).
inline constexpr char kSchedulerWakeupChannel[] = "ty:wake:scheduler";

// Channel that wakes the dispatcher of one cluster: the scheduler publishes
// after it admits or preempts work there (a hint, like the scheduler's).
inline std::string DispatcherWakeupChannel(std::string_view cluster) {
  return std::string("ty:wake:dispatcher:").append(cluster);
}

// Subscribes to channels on a dedicated connection owned by a background
// thread, which reconnects and resubscribes transparently (after
// reconnect_backoff) whenever the connection fails, and PINGs an idle
// connection every second to detect a hung server.
//
// Wake-ups are hints: Redis pub/sub is fire-and-forget, so a consumer must
// still re-check the source of truth (PostgreSQL) when woken, and poll it
// periodically anyway. Because messages published while disconnected are
// lost, every successful (re)subscription after a connection failure also
// counts as a wake-up.
//
// Thread-safe. The destructor stops the thread (waiting at most about
// connect_timeout for an in-flight connect).
class WakeupSubscriber {
 public:
  // `channels` must not be empty (with none, it never subscribes).
  WakeupSubscriber(RedisOptions options, std::vector<std::string> channels);
  ~WakeupSubscriber();

  WakeupSubscriber(const WakeupSubscriber&) = delete;
  WakeupSubscriber& operator=(const WakeupSubscriber&) = delete;

  // Waits up to `timeout` for a wake-up. Returns true if any message (or
  // resubscription) arrived since the previous Wait() returned; all of them
  // are consumed together.
  bool Wait(absl::Duration timeout);

  // Waits up to `timeout` until all channels are subscribed on a live
  // connection. Messages published before that are not seen.
  bool WaitUntilSubscribed(absl::Duration timeout);

  bool subscribed() const;
  // Number of times a live subscription was lost and re-established.
  int64_t resubscriptions() const;

 private:
  enum class SessionEnd { kStopped, kFailed };

  void Loop();
  SessionEnd Session(redisContext* ctx, bool signal_on_subscribe);
  bool Stopping() const;

  const RedisOptions options_;
  const std::vector<std::string> channels_;
  int stop_pipe_[2] = {-1, -1};

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t resubscriptions_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;  // Last: starts after everything else is initialized.
};

}  // namespace trainyard::storage::redis

#endif  // TRAINYARD_STORAGE_REDIS_WAKEUP_SUBSCRIBER_H_
