// Blocking reads of a Trainyard event stream (see RedisClient::PublishEvent).

#ifndef TRAINYARD_STORAGE_REDIS_EVENT_STREAM_READER_H_
#define TRAINYARD_STORAGE_REDIS_EVENT_STREAM_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/redis/hiredis_util.h"
#include "storage/redis/redis_options.h"

namespace trainyard::storage::redis {

// Reads one stream with XREAD BLOCK on a dedicated connection (not from a
// RedisClient pool, whose connections must never block). Thread-safe, but
// calls are serialized: use one reader per consuming thread.
//
// When Redis is down, ReadAfter() returns UNAVAILABLE; the next call
// reconnects. While the previous connect attempt failed less than
// reconnect_backoff ago, a call first waits out the backoff (but never longer
// than its `block`), so a consumer looping on ReadAfter() does not spin.
class EventStreamReader {
 public:
  struct StreamEntry {
    uint64_t seq = 0;
    std::string payload;

    friend bool operator==(const StreamEntry&, const StreamEntry&) = default;
  };

  EventStreamReader(RedisOptions options, std::string stream);
  ~EventStreamReader();

  EventStreamReader(const EventStreamReader&) = delete;
  EventStreamReader& operator=(const EventStreamReader&) = delete;

  // Up to `max_entries` entries with seq > after_seq, oldest first. Waits up
  // to `block` for the first one (block <= 0: doesn't wait) and returns an
  // empty vector if none arrived. Entries without a payload field have an
  // empty payload. InvalidArgument if max_entries < 1.
  absl::StatusOr<std::vector<StreamEntry>> ReadAfter(uint64_t after_seq,
                                                     int max_entries,
                                                     absl::Duration block);

  const std::string& stream() const { return stream_; }

 private:
  const RedisOptions options_;
  const std::string stream_;

  absl::Mutex mu_;
  internal::ContextPtr ctx_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace trainyard::storage::redis

#endif  // TRAINYARD_STORAGE_REDIS_EVENT_STREAM_READER_H_
