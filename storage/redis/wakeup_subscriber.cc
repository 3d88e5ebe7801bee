#include "storage/redis/wakeup_subscriber.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace trainyard::storage::redis {
namespace {

constexpr absl::Duration kPingInterval = absl::Seconds(1);
// Upper bound of one poll(), so the stop flag is seen even without the pipe.
constexpr absl::Duration kMaxPoll = absl::Milliseconds(200);

bool FlushOutput(redisContext* ctx) {
  internal::ScopedSigpipeBlock no_sigpipe;
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx, &done) != REDIS_OK) return false;
  }
  return true;
}

}  // namespace

WakeupSubscriber::WakeupSubscriber(RedisOptions options,
                                   std::vector<std::string> channels)
    : options_(std::move(options)), channels_(std::move(channels)) {
  if (pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    stop_pipe_[0] = stop_pipe_[1] = -1;  // Falls back to kMaxPoll polling.
  }
  thread_ = std::thread([this] { Loop(); });
}

WakeupSubscriber::~WakeupSubscriber() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (stop_pipe_[1] >= 0) {
    const char byte = 1;
    ssize_t ignored = write(stop_pipe_[1], &byte, 1);
    (void)ignored;
  }
  thread_.join();
  for (int fd : stop_pipe_) {
    if (fd >= 0) close(fd);
  }
}

bool WakeupSubscriber::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&pending_),
                       std::max(timeout, absl::ZeroDuration()));
  const bool woken = pending_;
  pending_ = false;
  return woken;
}

bool WakeupSubscriber::WaitUntilSubscribed(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&subscribed_),
                              std::max(timeout, absl::ZeroDuration()));
}

bool WakeupSubscriber::subscribed() const {
  absl::MutexLock lock(&mu_);
  return subscribed_;
}

int64_t WakeupSubscriber::resubscriptions() const {
  absl::MutexLock lock(&mu_);
  return resubscriptions_;
}

bool WakeupSubscriber::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void WakeupSubscriber::Loop() {
  if (channels_.empty()) return;
  bool after_failure = false;
  while (!Stopping()) {
    absl::StatusOr<internal::ContextPtr> ctx = internal::Dial(options_);
    if (ctx.ok()) {
      if (Session(ctx->get(), after_failure) == SessionEnd::kStopped) break;
    }
    after_failure = true;
    absl::MutexLock lock(&mu_);
    subscribed_ = false;
    // Back off before reconnecting (woken early by the destructor).
    mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                         options_.reconnect_backoff);
  }
  absl::MutexLock lock(&mu_);
  subscribed_ = false;
}

WakeupSubscriber::SessionEnd WakeupSubscriber::Session(
    redisContext* ctx, bool signal_on_subscribe) {
  internal::Cmd subscribe = {"SUBSCRIBE"};
  subscribe.insert(subscribe.end(), channels_.begin(), channels_.end());
  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  for (std::string_view arg : subscribe) {
    argv.push_back(arg.data());
    argvlen.push_back(arg.size());
  }
  if (redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(),
                             argvlen.data()) != REDIS_OK ||
      !FlushOutput(ctx)) {
    return SessionEnd::kFailed;
  }
  size_t confirmed = 0;
  bool subscribed = false;
  // Deadlines for: all subscriptions confirmed, next PING, PONG.
  absl::Time subscribe_deadline = absl::Now() + options_.command_timeout;
  absl::Time next_ping = absl::InfiniteFuture();
  absl::Time pong_deadline = absl::InfiniteFuture();

  while (true) {
    absl::Time now = absl::Now();
    absl::Time wake = std::min(next_ping, pong_deadline);
    if (!subscribed) wake = std::min(wake, subscribe_deadline);
    const absl::Duration wait =
        std::clamp(wake - now, absl::ZeroDuration(), kMaxPoll);
    pollfd fds[2];
    fds[0] = {ctx->fd, POLLIN, 0};
    fds[1] = {stop_pipe_[0], POLLIN, 0};
    const int ready = poll(fds, 2,
                           static_cast<int>(absl::ToInt64Milliseconds(
                               absl::Ceil(wait, absl::Milliseconds(1)))));
    if (Stopping()) return SessionEnd::kStopped;
    if (ready > 0 && fds[0].revents != 0) {
      if (redisBufferRead(ctx) != REDIS_OK) return SessionEnd::kFailed;
      // Everything read at once counts as one wake-up (coalescing).
      bool woken = false;
      bool now_subscribed = false;
      while (true) {
        void* raw = nullptr;
        if (redisGetReplyFromReader(ctx, &raw) != REDIS_OK) {
          return SessionEnd::kFailed;
        }
        if (raw == nullptr) break;
        internal::ReplyPtr reply(static_cast<redisReply*>(raw));
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1) continue;
        const absl::string_view kind = internal::ReplyText(reply->element[0]);
        now = absl::Now();
        if (kind == "subscribe") {
          if (++confirmed == channels_.size() && !subscribed) {
            subscribed = true;
            now_subscribed = true;
            next_ping = now + kPingInterval;
          }
        } else if (kind == "message") {
          woken = true;
        } else if (kind == "pong") {
          pong_deadline = absl::InfiniteFuture();
          next_ping = now + kPingInterval;
        }
      }
      if (woken || now_subscribed) {
        absl::MutexLock lock(&mu_);
        if (now_subscribed) {
          subscribed_ = true;
          if (signal_on_subscribe) {
            woken = true;
            ++resubscriptions_;
          }
        }
        if (woken) pending_ = true;
      }
    }
    now = absl::Now();
    if (!subscribed && now >= subscribe_deadline) return SessionEnd::kFailed;
    if (now >= pong_deadline) return SessionEnd::kFailed;
    if (subscribed && now >= next_ping) {
      const char* ping = "PING";
      const size_t ping_len = 4;
      if (redisAppendCommandArgv(ctx, 1, &ping, &ping_len) != REDIS_OK ||
          !FlushOutput(ctx)) {
        return SessionEnd::kFailed;
      }
      next_ping = absl::InfiniteFuture();
      pong_deadline = now + options_.command_timeout;
    }
  }
}

}  // namespace trainyard::storage::redis
