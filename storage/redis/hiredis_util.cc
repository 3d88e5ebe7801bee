#include "storage/redis/hiredis_util.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainyard::storage::redis::internal {
namespace {

timeval ClampedTimeval(absl::Duration d) {
  if (d < absl::Milliseconds(1)) d = absl::Milliseconds(1);
  return absl::ToTimeval(d);
}

}  // namespace

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask_);
  was_blocked_ = sigismember(&old_mask_, SIGPIPE) == 1;
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (!was_pending_) {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe_set;
      sigemptyset(&pipe_set);
      sigaddset(&pipe_set, SIGPIPE);
      const timespec zero = {0, 0};
      while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
  }
  if (!was_blocked_) pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::string Describe(const RedisOptions& options) {
  if (options.host.find(':') != std::string::npos) {
    return absl::StrCat("redis [", options.host, "]:", options.port);
  }
  return absl::StrCat("redis ", options.host, ":", options.port);
}

absl::Status SetSocketTimeout(redisContext* ctx, absl::Duration timeout) {
  if (redisSetTimeout(ctx, ClampedTimeval(timeout)) != REDIS_OK) {
    return absl::UnavailableError(
        absl::StrCat("cannot set redis socket timeout: ", ctx->errstr));
  }
  return absl::OkStatus();
}

absl::StatusOr<ContextPtr> Dial(const RedisOptions& options) {
  ContextPtr ctx(
      redisConnectWithTimeout(options.host.c_str(), options.port,
                              ClampedTimeval(options.connect_timeout)));
  if (ctx == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", Describe(options),
                     ": out of memory allocating a redis context"));
  }
  if (ctx->err != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ", Describe(options), ": ", ctx->errstr));
  }
  // Don't leak the socket into child processes (servers started by tests,
  // tools exec'ed by services).
  const int flags = fcntl(ctx->fd, F_GETFD);
  if (flags >= 0) fcntl(ctx->fd, F_SETFD, flags | FD_CLOEXEC);
  redisEnableKeepAlive(ctx.get());
  if (absl::Status s = SetSocketTimeout(ctx.get(), options.command_timeout);
      !s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ", Describe(options), ": ", s.message()));
  }
  return ctx;
}

IoFailure ClassifyFailure(const redisContext* ctx, int saved_errno) {
  switch (ctx->err) {
    case 0:
      return IoFailure::kNone;
    case REDIS_ERR_EOF:
      return IoFailure::kClosed;
    case REDIS_ERR_IO:
      if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ||
          saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS) {
        return IoFailure::kTimeout;
      }
      if (saved_errno == ECONNRESET || saved_errno == EPIPE ||
          saved_errno == ECONNABORTED || saved_errno == ENOTCONN) {
        return IoFailure::kClosed;
      }
      return IoFailure::kOther;
    default:
      return IoFailure::kOther;
  }
}

absl::Status ConnectionError(const RedisOptions& options,
                             const redisContext* ctx, IoFailure failure) {
  const char* kind = failure == IoFailure::kTimeout  ? "timed out"
                     : failure == IoFailure::kClosed ? "connection closed"
                                                     : "connection error";
  std::string detail = ctx->errstr[0] != '\0' ? ctx->errstr : "";
  if (failure == IoFailure::kTimeout) {
    detail = absl::StrCat("no reply within ",
                          absl::FormatDuration(options.command_timeout));
  }
  return absl::UnavailableError(
      absl::StrCat(Describe(options), ": ", kind, ": ", detail));
}

absl::StatusOr<std::vector<ReplyPtr>> Execute(redisContext* ctx,
                                              const RedisOptions& options,
                                              const std::vector<Cmd>& cmds,
                                              IoFailure* failure) {
  *failure = IoFailure::kNone;
  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  for (const Cmd& cmd : cmds) {
    argv.clear();
    argvlen.clear();
    for (std::string_view arg : cmd) {
      argv.push_back(arg.data());
      argvlen.push_back(arg.size());
    }
    if (redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(),
                               argvlen.data()) != REDIS_OK) {
      *failure = IoFailure::kOther;
      return ConnectionError(options, ctx, *failure);
    }
  }
  std::vector<ReplyPtr> replies;
  replies.reserve(cmds.size());
  ScopedSigpipeBlock no_sigpipe;
  for (size_t i = 0; i < cmds.size(); ++i) {
    void* reply = nullptr;
    errno = 0;
    if (redisGetReply(ctx, &reply) != REDIS_OK || reply == nullptr) {
      const int saved_errno = errno;
      *failure = ClassifyFailure(ctx, saved_errno);
      if (*failure == IoFailure::kNone) *failure = IoFailure::kOther;
      return ConnectionError(options, ctx, *failure);
    }
    replies.emplace_back(static_cast<redisReply*>(reply));
  }
  return replies;
}

bool IdleConnectionLooksHealthy(const redisContext* ctx) {
  if (ctx == nullptr || ctx->err != 0 || ctx->fd < 0) return false;
  pollfd pfd;
  pfd.fd = ctx->fd;
  pfd.events = POLLIN;
  pfd.revents = 0;
  const int ready = poll(&pfd, 1, 0);
  return ready == 0;
}

absl::string_view ReplyText(const redisReply* reply) {
  if (reply == nullptr || reply->str == nullptr) return absl::string_view();
  return absl::string_view(reply->str, static_cast<size_t>(reply->len));
}

absl::Status ErrorReplyStatus(const redisReply* reply, absl::string_view what) {
  const absl::string_view text = ReplyText(reply);
  const std::string message = absl::StrCat(what, ": redis error: ", text);
  if (absl::StartsWith(text, "WRONGTYPE")) {
    return absl::FailedPreconditionError(message);
  }
  if (absl::StartsWith(text, "NOSCRIPT")) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

absl::Status UnexpectedReply(const redisReply* reply, absl::string_view what) {
  return absl::InternalError(absl::StrCat(
      what, ": unexpected redis reply (type ", reply ? reply->type : -1, ")"));
}

bool ParseStreamIdSeq(absl::string_view id, uint64_t* seq) {
  const size_t dash = id.find('-');
  return absl::SimpleAtoi(id.substr(0, dash), seq);
}

}  // namespace trainyard::storage::redis::internal
