// Trainyard's Redis client.
//
// Redis is never the source of truth in Trainyard (PostgreSQL is): it carries
// event fan-out streams, wake-up notifications and rate-limit buckets. So
// every call here is bounded by the configured timeouts and fails with
// absl::UnavailableError when Redis is down or hung, and the client recovers
// by itself when Redis comes back. Nothing here crashes or blocks a caller
// indefinitely because of Redis.
//
//   RedisClient redis(*ParseRedisAddress("127.0.0.1:6379"));
//   absl::Status s = redis.PublishEvent("ty:events", seq, payload);
//   if (absl::IsAlreadyExists(s)) { /* another relay published it: fine */ }
//
// Event streams: one Redis stream per fan-out topic; the entry id of an event
// is "<seq>-0" where seq (>= 1) is the event's global sequence number, and the
// payload is stored (binary-safe) in the entry's field "p". Ids must increase,
// so re-publishing an event (e.g. by several relays, or after a relay crash)
// is detected by Redis atomically and reported as AlreadyExists.
//
// See also event_stream_reader.h (blocking reads), wakeup_subscriber.h
// (pub/sub wake-ups) and tenant_rate_limiter.h.

#ifndef TRAINYARD_STORAGE_REDIS_REDIS_CLIENT_H_
#define TRAINYARD_STORAGE_REDIS_REDIS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/redis/hiredis_util.h"
#include "storage/redis/redis_options.h"

namespace trainyard::storage::redis {

// Result of a token-bucket check.
struct RateDecision {
  bool allowed = false;
  // When denied: how long until `cost` tokens will be available
  // (absl::InfiniteDuration() if cost exceeds the burst). Zero when allowed.
  absl::Duration retry_after = absl::ZeroDuration();
  // Tokens left in the bucket after this decision.
  double remaining = 0;
};

// The field of a stream entry that holds the event payload.
inline constexpr char kStreamPayloadField[] = "p";
inline constexpr int64_t kDefaultStreamMaxLen = 1000000;

// Thread-safe Redis client with a small connection pool.
//
// Connections are dialled lazily (the constructor does no I/O). A connection
// that fails is dropped, and the idle connections dialled before the failure
// are discarded too. After a failure a circuit breaker opens for
// `reconnect_backoff`: meanwhile calls fail with UNAVAILABLE immediately
// instead of each waiting for connect_timeout; then a single caller probes
// (dials) while the others keep failing fast, and success closes the breaker.
//
// Bounds: a call waits at most command_timeout for a free pooled connection,
// then at most connect_timeout to dial and command_timeout per socket read or
// write. One transparent retry happens only when a pooled connection turns
// out to have been closed by the server (e.g. Redis restarted).
class RedisClient {
 public:
  using RateDecision = redis::RateDecision;

  explicit RedisClient(RedisOptions options);
  ~RedisClient();

  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  const RedisOptions& options() const { return options_; }

  absl::Status Ping();

  // XADD <stream> MAXLEN ~ <maxlen_approx> <seq>-0 p <payload>.
  // AlreadyExists if the stream's last id is >= <seq>-0 (already published);
  // InvalidArgument if seq == 0. maxlen_approx <= 0 disables trimming.
  absl::Status PublishEvent(std::string_view stream, uint64_t seq,
                            std::string_view payload,
                            int64_t maxlen_approx = kDefaultStreamMaxLen);

  // The sequence number of the newest entry of `stream`; 0 when the stream
  // is empty or missing.
  absl::StatusOr<uint64_t> LastEventSeq(std::string_view stream);

  // Publishes several events in one pipelined round trip, in the given order.
  // Returns how many were newly added; events whose id is not greater than
  // the stream's last id at that point are skipped (not an error).
  absl::StatusOr<int> PublishEvents(
      std::string_view stream,
      const std::vector<std::pair<uint64_t, std::string>>& events,
      int64_t maxlen_approx = kDefaultStreamMaxLen);

  // PUBLISH <channel> <message>: a fire-and-forget wake-up (see
  // WakeupSubscriber).
  absl::Status Notify(std::string_view channel, std::string_view message = "");

  // Token bucket (capacity `burst`, refilled at `rate_per_second`) stored in
  // the hash `key`, updated atomically by a Lua script that uses Redis TIME
  // as its clock, so all Trainyard replicas share one bucket. A full bucket
  // expires when idle. InvalidArgument unless rate_per_second > 0,
  // burst > 0 and cost >= 0.
  absl::StatusOr<RateDecision> TakeToken(std::string_view key,
                                         double rate_per_second, double burst,
                                         double cost = 1);

  // Raw command, for tests and operations: Command({"SET", "k", "v"}).
  // String and status replies are returned as is, integers in decimal, nil
  // as nullopt. An error reply is an error status (WRONGTYPE:
  // FailedPrecondition, others: Internal); array replies are Unimplemented.
  absl::StatusOr<std::optional<std::string>> Command(
      const std::vector<std::string>& args);

 private:
  struct Connection {
    internal::ContextPtr ctx;
    uint64_t epoch = 0;
  };

  // Runs the commands (pipelined) on a pooled connection, with the breaker,
  // retry and timeout policy described above.
  absl::StatusOr<std::vector<internal::ReplyPtr>> Run(
      const std::vector<internal::Cmd>& cmds);
  absl::StatusOr<internal::ReplyPtr> RunOne(const internal::Cmd& cmd);

  // Breaker admission: OK (and *probe when this caller is the probe) or a
  // fast UNAVAILABLE.
  absl::Status Admit(bool* probe);
  // Records the outcome of an admitted call.
  void RecordSuccess(bool probe);
  void RecordFailure(bool probe, const absl::Status& status);

  // A pooled connection (idle and healthy, or freshly dialled).
  absl::StatusOr<std::unique_ptr<Connection>> Acquire(bool* reused,
                                                      bool* dial_failed);
  void Release(std::unique_ptr<Connection> conn, bool healthy);

  absl::StatusOr<std::string> ScriptSha();
  absl::StatusOr<RateDecision> ParseRateReply(const redisReply* reply);

  const RedisOptions options_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // Idle + in use + being dialled.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool probe_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::string script_sha_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::storage::redis

#endif  // TRAINYARD_STORAGE_REDIS_REDIS_CLIENT_H_
