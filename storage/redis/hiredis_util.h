// Internal helpers over the synchronous hiredis API shared by RedisClient,
// EventStreamReader and WakeupSubscriber. Not part of the public API.

#ifndef TRAINYARD_STORAGE_REDIS_HIREDIS_UTIL_H_
#define TRAINYARD_STORAGE_REDIS_HIREDIS_UTIL_H_

#include <hiredis/hiredis.h>
#include <signal.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/redis/redis_options.h"

namespace trainyard::storage::redis::internal {

// Debian's Abseil has its own absl::string_view (not std::string_view).
inline absl::string_view AsAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* ctx) const { redisFree(ctx); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

// One command as binary-safe arguments (views must outlive the call).
using Cmd = std::vector<std::string_view>;

// How a command failed at the connection level.
enum class IoFailure {
  kNone,
  // The server closed the connection / reset it (e.g. it restarted): a fresh
  // connection may well succeed.
  kClosed,
  // No reply within the socket timeout: the server is hung or overloaded.
  kTimeout,
  // Anything else (protocol error, out of memory, ...).
  kOther,
};

// Blocks SIGPIPE in the current thread for its lifetime, and discards a
// SIGPIPE raised meanwhile by writing to a closed socket (hiredis uses
// write(2), not send(MSG_NOSIGNAL)), so a Redis restart can never kill the
// process through the default SIGPIPE action. Process-wide signal dispositions
// are left alone.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_mask_;
  bool was_blocked_ = false;
  bool was_pending_ = false;
};

// "redis 127.0.0.1:6379".
std::string Describe(const RedisOptions& options);

// Connects within options.connect_timeout and sets the socket read/write
// timeout to options.command_timeout, TCP keep-alive and close-on-exec.
// UNAVAILABLE on failure.
absl::StatusOr<ContextPtr> Dial(const RedisOptions& options);

// Sets SO_RCVTIMEO/SO_SNDTIMEO (at least 1 ms).
absl::Status SetSocketTimeout(redisContext* ctx, absl::Duration timeout);

// Sends the commands in one pipelined round trip and reads one reply per
// command. Error replies are returned as replies (REDIS_REPLY_ERROR), not as a
// status; a connection-level failure is UNAVAILABLE, sets *failure and leaves
// the context unusable.
absl::StatusOr<std::vector<ReplyPtr>> Execute(redisContext* ctx,
                                              const RedisOptions& options,
                                              const std::vector<Cmd>& cmds,
                                              IoFailure* failure);

// Classifies ctx->err (with the errno observed right after the failure).
IoFailure ClassifyFailure(const redisContext* ctx, int saved_errno);

// UNAVAILABLE status describing a connection-level failure of `ctx`.
absl::Status ConnectionError(const RedisOptions& options,
                             const redisContext* ctx, IoFailure failure);

// Whether an idle pooled connection looks usable: no error recorded and
// nothing readable (a readable idle socket means EOF/reset or junk).
bool IdleConnectionLooksHealthy(const redisContext* ctx);

// The text of a string/status/error reply.
absl::string_view ReplyText(const redisReply* reply);

// Status for an error reply: WRONGTYPE -> FailedPrecondition, NOSCRIPT ->
// NotFound, others -> Internal. `what` names the operation.
absl::Status ErrorReplyStatus(const redisReply* reply, absl::string_view what);

// INTERNAL "unexpected reply" status.
absl::Status UnexpectedReply(const redisReply* reply, absl::string_view what);

// Parses the millisecond part of a stream id "<ms>-<seq>".
bool ParseStreamIdSeq(absl::string_view id, uint64_t* seq);

}  // namespace trainyard::storage::redis::internal

#endif  // TRAINYARD_STORAGE_REDIS_HIREDIS_UTIL_H_
