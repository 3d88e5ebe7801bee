#include "storage/redis/redis_client.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::storage::redis {
namespace {

using internal::AsAbsl;
using internal::Cmd;
using internal::ReplyPtr;

// Token bucket. KEYS[1] = bucket hash {tokens, ts}; ARGV = rate, burst, cost.
// Returns {allowed (0/1), remaining tokens, retry-after seconds (-1: never)}
// with the numbers as strings (Lua numbers would be truncated to integers).
constexpr char kTokenBucketScript[] = R"lua(
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
if tokens > burst then
  tokens = burst
end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
local allowed = 0
local retry = 0
if cost <= tokens then
  tokens = tokens - cost
  allowed = 1
elseif cost > burst then
  retry = -1
else
  retry = (cost - tokens) / rate
end
-- Full precision: Lua's tostring keeps 14 significant digits, which rounds the
-- timestamp to 0.1 ms and let concurrent callers gain refill time (over-grant).
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.6f', ts))
local ttl_ms = math.ceil((burst / rate) * 1000) + 1000
if ttl_ms > 2592000000 then
  ttl_ms = 2592000000
end
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl_ms))
return {allowed, tostring(tokens), tostring(retry)}
)lua";

std::string FormatDouble(double value) {
  return absl::StrFormat("%.17g", value);
}

absl::Status XaddStatus(const redisReply* reply, std::string_view stream,
                        uint64_t seq) {
  if (reply->type == REDIS_REPLY_STRING) return absl::OkStatus();
  if (reply->type == REDIS_REPLY_ERROR) {
    if (absl::StrContains(internal::ReplyText(reply), "equal or smaller")) {
      return absl::AlreadyExistsError(
          absl::StrCat("event ", seq, " already published to stream ",
                       AsAbsl(stream), " (its last id is not smaller)"));
    }
    return internal::ErrorReplyStatus(reply,
                                      absl::StrCat("XADD ", AsAbsl(stream)));
  }
  return internal::UnexpectedReply(reply,
                                   absl::StrCat("XADD ", AsAbsl(stream)));
}

}  // namespace

RedisClient::RedisClient(RedisOptions options)
    : options_([&] {
        options.pool_size = std::max(options.pool_size, 1);
        options.connect_timeout =
            std::max(options.connect_timeout, absl::Milliseconds(1));
        options.command_timeout =
            std::max(options.command_timeout, absl::Milliseconds(1));
        options.reconnect_backoff =
            std::max(options.reconnect_backoff, absl::ZeroDuration());
        return std::move(options);
      }()) {}

RedisClient::~RedisClient() = default;

// --- Circuit breaker --------------------------------------------------------

absl::Status RedisClient::Admit(bool* probe) {
  *probe = false;
  absl::MutexLock lock(&mu_);
  if (consecutive_failures_ == 0) return absl::OkStatus();
  const absl::Time now = absl::Now();
  if (probe_in_flight_ || now < retry_at_) {
    return absl::UnavailableError(absl::StrCat(
        internal::Describe(options_), " unavailable (", consecutive_failures_,
        " consecutive failure(s); ",
        probe_in_flight_
            ? "reconnecting now"
            : absl::StrCat("next attempt in ",
                           absl::FormatDuration(absl::Ceil(
                               retry_at_ - now, absl::Milliseconds(1)))),
        "): ", last_error_));
  }
  probe_in_flight_ = true;
  *probe = true;
  return absl::OkStatus();
}

void RedisClient::RecordSuccess(bool probe) {
  absl::MutexLock lock(&mu_);
  if (probe || consecutive_failures_ > 0) {
    consecutive_failures_ = 0;
    probe_in_flight_ = false;
    retry_at_ = absl::InfinitePast();
  }
}

void RedisClient::RecordFailure(bool probe, const absl::Status& status) {
  std::vector<std::unique_ptr<Connection>> stale;
  {
    absl::MutexLock lock(&mu_);
    ++consecutive_failures_;
    retry_at_ = absl::Now() + options_.reconnect_backoff;
    if (probe) probe_in_flight_ = false;
    last_error_ = std::string(status.message());
    // Connections dialled before the failure are suspect: drop them.
    ++epoch_;
    open_ -= static_cast<int>(idle_.size());
    stale.swap(idle_);
  }
}

// --- Pool -------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RedisClient::Connection>> RedisClient::Acquire(
    bool* reused, bool* dial_failed) {
  *reused = false;
  *dial_failed = false;
  std::vector<std::unique_ptr<Connection>> dropped;  // Freed after unlock.
  mu_.Lock();
  const absl::Time deadline = absl::Now() + options_.command_timeout;
  while (true) {
    while (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      if (conn->epoch == epoch_ &&
          internal::IdleConnectionLooksHealthy(conn->ctx.get())) {
        mu_.Unlock();
        *reused = true;
        return conn;
      }
      --open_;
      dropped.push_back(std::move(conn));
    }
    if (open_ < options_.pool_size) break;
    auto can_acquire = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !idle_.empty() || open_ < options_.pool_size;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&can_acquire), deadline)) {
      mu_.Unlock();
      return absl::UnavailableError(absl::StrCat(
          internal::Describe(options_), ": all ", options_.pool_size,
          " pooled connections stayed busy for ",
          absl::FormatDuration(options_.command_timeout)));
    }
  }
  ++open_;
  const uint64_t epoch = epoch_;
  mu_.Unlock();
  dropped.clear();
  absl::StatusOr<internal::ContextPtr> ctx = internal::Dial(options_);
  if (!ctx.ok()) {
    absl::MutexLock lock(&mu_);
    --open_;
    *dial_failed = true;
    return ctx.status();
  }
  auto conn = std::make_unique<Connection>();
  conn->ctx = *std::move(ctx);
  conn->epoch = epoch;
  return conn;
}

void RedisClient::Release(std::unique_ptr<Connection> conn, bool healthy) {
  absl::MutexLock lock(&mu_);
  if (healthy && conn->epoch == epoch_ && conn->ctx->err == 0) {
    idle_.push_back(std::move(conn));
    return;
  }
  --open_;
  conn.reset();
}

absl::StatusOr<std::vector<ReplyPtr>> RedisClient::Run(
    const std::vector<Cmd>& cmds) {
  bool probe = false;
  if (absl::Status s = Admit(&probe); !s.ok()) return s;
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    bool dial_failed = false;
    absl::StatusOr<std::unique_ptr<Connection>> conn =
        Acquire(&reused, &dial_failed);
    if (!conn.ok()) {
      if (dial_failed) {
        RecordFailure(probe, conn.status());
      } else if (probe) {
        absl::MutexLock lock(&mu_);
        probe_in_flight_ = false;  // Let the next caller probe.
      }
      return conn.status();
    }
    internal::IoFailure failure = internal::IoFailure::kNone;
    absl::StatusOr<std::vector<ReplyPtr>> replies =
        internal::Execute((*conn)->ctx.get(), options_, cmds, &failure);
    if (replies.ok()) {
      Release(*std::move(conn), /*healthy=*/true);
      RecordSuccess(probe);
      return replies;
    }
    Release(*std::move(conn), /*healthy=*/false);
    if (failure == internal::IoFailure::kClosed && reused && attempt == 0) {
      // The server closed a pooled connection (e.g. it restarted). Other
      // idle connections from before are likely dead too; retry once on a
      // fresh one.
      absl::MutexLock lock(&mu_);
      ++epoch_;
      continue;
    }
    RecordFailure(probe, replies.status());
    return replies.status();
  }
}

absl::StatusOr<ReplyPtr> RedisClient::RunOne(const Cmd& cmd) {
  absl::StatusOr<std::vector<ReplyPtr>> replies = Run({cmd});
  if (!replies.ok()) return replies.status();
  return std::move(replies->front());
}

// --- Commands ---------------------------------------------------------------

absl::Status RedisClient::Ping() {
  absl::StatusOr<ReplyPtr> reply = RunOne({"PING"});
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_STATUS &&
      internal::ReplyText(reply->get()) == "PONG") {
    return absl::OkStatus();
  }
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    return internal::ErrorReplyStatus(reply->get(), "PING");
  }
  return internal::UnexpectedReply(reply->get(), "PING");
}

absl::Status RedisClient::PublishEvent(std::string_view stream, uint64_t seq,
                                       std::string_view payload,
                                       int64_t maxlen_approx) {
  if (seq == 0) {
    return absl::InvalidArgumentError("event sequence numbers start at 1");
  }
  const std::string id = absl::StrCat(seq, "-0");
  const std::string maxlen = absl::StrCat(maxlen_approx);
  Cmd cmd = {"XADD", stream};
  if (maxlen_approx > 0) {
    cmd.insert(cmd.end(), {"MAXLEN", "~", maxlen});
  }
  cmd.insert(cmd.end(), {id, kStreamPayloadField, payload});
  absl::StatusOr<ReplyPtr> reply = RunOne(cmd);
  if (!reply.ok()) return reply.status();
  return XaddStatus(reply->get(), stream, seq);
}

absl::StatusOr<int> RedisClient::PublishEvents(
    std::string_view stream,
    const std::vector<std::pair<uint64_t, std::string>>& events,
    int64_t maxlen_approx) {
  if (events.empty()) return 0;
  std::vector<std::string> ids;
  ids.reserve(events.size());
  for (const auto& [seq, payload] : events) {
    if (seq == 0) {
      return absl::InvalidArgumentError("event sequence numbers start at 1");
    }
    ids.push_back(absl::StrCat(seq, "-0"));
  }
  const std::string maxlen = absl::StrCat(maxlen_approx);
  std::vector<Cmd> cmds;
  cmds.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    Cmd cmd = {"XADD", stream};
    if (maxlen_approx > 0) {
      cmd.insert(cmd.end(), {"MAXLEN", "~", maxlen});
    }
    cmd.insert(cmd.end(), {ids[i], kStreamPayloadField, events[i].second});
    cmds.push_back(std::move(cmd));
  }
  absl::StatusOr<std::vector<ReplyPtr>> replies = Run(cmds);
  if (!replies.ok()) return replies.status();
  int added = 0;
  for (size_t i = 0; i < replies->size(); ++i) {
    absl::Status s = XaddStatus((*replies)[i].get(), stream, events[i].first);
    if (s.ok()) {
      ++added;
    } else if (!absl::IsAlreadyExists(s)) {
      return s;
    }
  }
  return added;
}

absl::StatusOr<uint64_t> RedisClient::LastEventSeq(std::string_view stream) {
  absl::StatusOr<ReplyPtr> reply =
      RunOne({"XREVRANGE", stream, "+", "-", "COUNT", "1"});
  if (!reply.ok()) return reply.status();
  const redisReply* r = reply->get();
  const std::string what = absl::StrCat("XREVRANGE ", AsAbsl(stream));
  if (r->type == REDIS_REPLY_ERROR) return internal::ErrorReplyStatus(r, what);
  if (r->type != REDIS_REPLY_ARRAY) return internal::UnexpectedReply(r, what);
  if (r->elements == 0) return uint64_t{0};
  const redisReply* entry = r->element[0];
  uint64_t seq = 0;
  if (entry->type != REDIS_REPLY_ARRAY || entry->elements < 1 ||
      entry->element[0]->type != REDIS_REPLY_STRING ||
      !internal::ParseStreamIdSeq(internal::ReplyText(entry->element[0]),
                                  &seq)) {
    return internal::UnexpectedReply(entry, what);
  }
  return seq;
}

absl::Status RedisClient::Notify(std::string_view channel,
                                 std::string_view message) {
  absl::StatusOr<ReplyPtr> reply = RunOne({"PUBLISH", channel, message});
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_INTEGER) return absl::OkStatus();
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    return internal::ErrorReplyStatus(reply->get(), "PUBLISH");
  }
  return internal::UnexpectedReply(reply->get(), "PUBLISH");
}

absl::StatusOr<std::string> RedisClient::ScriptSha() {
  {
    absl::MutexLock lock(&mu_);
    if (!script_sha_.empty()) return script_sha_;
  }
  absl::StatusOr<ReplyPtr> reply =
      RunOne({"SCRIPT", "LOAD", kTokenBucketScript});
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    return internal::ErrorReplyStatus(reply->get(), "SCRIPT LOAD");
  }
  if ((*reply)->type != REDIS_REPLY_STRING) {
    return internal::UnexpectedReply(reply->get(), "SCRIPT LOAD");
  }
  std::string sha(internal::ReplyText(reply->get()));
  absl::MutexLock lock(&mu_);
  script_sha_ = sha;
  return sha;
}

absl::StatusOr<RateDecision> RedisClient::ParseRateReply(
    const redisReply* reply) {
  constexpr char kWhat[] = "rate limit script";
  if (reply->type == REDIS_REPLY_ERROR) {
    return internal::ErrorReplyStatus(reply, kWhat);
  }
  double remaining = 0;
  double retry_seconds = 0;
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
      reply->element[0]->type != REDIS_REPLY_INTEGER ||
      reply->element[1]->type != REDIS_REPLY_STRING ||
      reply->element[2]->type != REDIS_REPLY_STRING ||
      !absl::SimpleAtod(internal::ReplyText(reply->element[1]), &remaining) ||
      !absl::SimpleAtod(internal::ReplyText(reply->element[2]),
                        &retry_seconds)) {
    return internal::UnexpectedReply(reply, kWhat);
  }
  RateDecision decision;
  decision.allowed = reply->element[0]->integer == 1;
  decision.remaining = remaining;
  if (!decision.allowed) {
    decision.retry_after =
        retry_seconds < 0
            ? absl::InfiniteDuration()
            : absl::Ceil(absl::Seconds(retry_seconds), absl::Microseconds(1));
  }
  return decision;
}

absl::StatusOr<RateDecision> RedisClient::TakeToken(std::string_view key,
                                                    double rate_per_second,
                                                    double burst, double cost) {
  if (!(std::isfinite(rate_per_second) && rate_per_second > 0) ||
      !(std::isfinite(burst) && burst > 0) ||
      !(std::isfinite(cost) && cost >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TakeToken needs rate_per_second > 0, burst > 0, cost >= 0; got rate=",
        rate_per_second, " burst=", burst, " cost=", cost));
  }
  absl::StatusOr<std::string> sha = ScriptSha();
  if (!sha.ok()) return sha.status();
  const std::string rate_arg = FormatDouble(rate_per_second);
  const std::string burst_arg = FormatDouble(burst);
  const std::string cost_arg = FormatDouble(cost);
  absl::StatusOr<ReplyPtr> reply =
      RunOne({"EVALSHA", *sha, "1", key, rate_arg, burst_arg, cost_arg});
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_ERROR &&
      absl::StartsWith(internal::ReplyText(reply->get()), "NOSCRIPT")) {
    // Script cache flushed (e.g. Redis restarted): EVAL loads it again under
    // the same SHA.
    reply = RunOne(
        {"EVAL", kTokenBucketScript, "1", key, rate_arg, burst_arg, cost_arg});
    if (!reply.ok()) return reply.status();
  }
  return ParseRateReply(reply->get());
}

absl::StatusOr<std::optional<std::string>> RedisClient::Command(
    const std::vector<std::string>& args) {
  if (args.empty()) return absl::InvalidArgumentError("empty redis command");
  Cmd cmd(args.begin(), args.end());
  absl::StatusOr<ReplyPtr> reply = RunOne(cmd);
  if (!reply.ok()) return reply.status();
  const redisReply* r = reply->get();
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return std::optional<std::string>(std::string(internal::ReplyText(r)));
    case REDIS_REPLY_INTEGER:
      return std::optional<std::string>(absl::StrCat(r->integer));
    case REDIS_REPLY_NIL:
      return std::optional<std::string>();
    case REDIS_REPLY_ERROR:
      return internal::ErrorReplyStatus(r, args[0]);
    default:
      return absl::UnimplementedError(absl::StrCat(
          args[0], ": array replies are not supported by Command()"));
  }
}

}  // namespace trainyard::storage::redis
