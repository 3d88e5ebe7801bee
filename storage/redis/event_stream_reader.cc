#include "storage/redis/event_stream_reader.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/redis/redis_client.h"

namespace trainyard::storage::redis {
namespace {

using internal::ReplyText;

absl::StatusOr<std::vector<EventStreamReader::StreamEntry>> ParseXread(
    const redisReply* reply, const std::string& stream) {
  const std::string what = absl::StrCat("XREAD ", stream);
  std::vector<EventStreamReader::StreamEntry> entries;
  if (reply->type == REDIS_REPLY_NIL) return entries;  // Timed out.
  if (reply->type == REDIS_REPLY_ERROR) {
    return internal::ErrorReplyStatus(reply, what);
  }
  if (reply->type != REDIS_REPLY_ARRAY) {
    return internal::UnexpectedReply(reply, what);
  }
  for (size_t s = 0; s < reply->elements; ++s) {
    const redisReply* per_stream = reply->element[s];
    if (per_stream->type != REDIS_REPLY_ARRAY || per_stream->elements != 2 ||
        per_stream->element[1]->type != REDIS_REPLY_ARRAY) {
      return internal::UnexpectedReply(per_stream, what);
    }
    const redisReply* list = per_stream->element[1];
    entries.reserve(entries.size() + list->elements);
    for (size_t i = 0; i < list->elements; ++i) {
      const redisReply* item = list->element[i];
      EventStreamReader::StreamEntry entry;
      if (item->type != REDIS_REPLY_ARRAY || item->elements != 2 ||
          item->element[0]->type != REDIS_REPLY_STRING ||
          !internal::ParseStreamIdSeq(ReplyText(item->element[0]),
                                      &entry.seq)) {
        return internal::UnexpectedReply(item, what);
      }
      const redisReply* fields = item->element[1];
      if (fields->type == REDIS_REPLY_ARRAY) {
        for (size_t f = 0; f + 1 < fields->elements; f += 2) {
          if (ReplyText(fields->element[f]) == kStreamPayloadField) {
            entry.payload = std::string(ReplyText(fields->element[f + 1]));
            break;
          }
        }
      }
      entries.push_back(std::move(entry));
    }
  }
  return entries;
}

}  // namespace

EventStreamReader::EventStreamReader(RedisOptions options, std::string stream)
    : options_(std::move(options)), stream_(std::move(stream)) {}

EventStreamReader::~EventStreamReader() = default;

absl::StatusOr<std::vector<EventStreamReader::StreamEntry>>
EventStreamReader::ReadAfter(uint64_t after_seq, int max_entries,
                             absl::Duration block) {
  if (max_entries < 1) {
    return absl::InvalidArgumentError("ReadAfter: max_entries must be >= 1");
  }
  absl::MutexLock lock(&mu_);
  const absl::Time deadline =
      absl::Now() + std::max(block, absl::ZeroDuration());
  // Strictly after every id of the form <after_seq>-N.
  const std::string after_id =
      absl::StrCat(after_seq, "-", std::numeric_limits<uint64_t>::max());
  const std::string count = absl::StrCat(max_entries);
  for (int attempt = 0;; ++attempt) {
    const bool reused = ctx_ != nullptr;
    if (ctx_ == nullptr) {
      absl::Time now = absl::Now();
      if (now < retry_at_) {
        // Wait out the backoff (within our own block budget).
        absl::SleepFor(std::min(retry_at_, deadline) - now);
        now = absl::Now();
        if (now < retry_at_) {
          return absl::UnavailableError(absl::StrCat(
              internal::Describe(options_), " unavailable; reconnecting in ",
              absl::FormatDuration(
                  absl::Ceil(retry_at_ - now, absl::Milliseconds(1)))));
        }
      }
      absl::StatusOr<internal::ContextPtr> ctx = internal::Dial(options_);
      if (!ctx.ok()) {
        retry_at_ = absl::Now() + options_.reconnect_backoff;
        return ctx.status();
      }
      ctx_ = *std::move(ctx);
    }
    const absl::Duration remaining =
        std::max(deadline - absl::Now(), absl::ZeroDuration());
    // XREAD BLOCK 0 would block forever: omit BLOCK when there is no time.
    const int64_t block_ms =
        absl::ToInt64Milliseconds(absl::Ceil(remaining, absl::Milliseconds(1)));
    const std::string block_arg = absl::StrCat(block_ms);
    internal::Cmd cmd = {"XREAD", "COUNT", count};
    if (block_ms > 0) cmd.insert(cmd.end(), {"BLOCK", block_arg});
    cmd.insert(cmd.end(), {"STREAMS", stream_, after_id});
    absl::Status s = internal::SetSocketTimeout(
        ctx_.get(), absl::Milliseconds(block_ms) + options_.command_timeout);
    internal::IoFailure failure = internal::IoFailure::kOther;
    absl::StatusOr<std::vector<internal::ReplyPtr>> replies =
        s.ok() ? internal::Execute(ctx_.get(), options_, {cmd}, &failure)
               : absl::StatusOr<std::vector<internal::ReplyPtr>>(s);
    if (replies.ok()) return ParseXread(replies->front().get(), stream_);
    ctx_.reset();
    if (failure == internal::IoFailure::kClosed && reused && attempt == 0) {
      continue;  // Server closed our idle connection (restart?): redial once.
    }
    retry_at_ = absl::Now() + options_.reconnect_backoff;
    return replies.status();
  }
}

}  // namespace trainyard::storage::redis
