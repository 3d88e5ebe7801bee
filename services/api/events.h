#ifndef TRAINYARD_SERVICES_API_EVENTS_H_
#define TRAINYARD_SERVICES_API_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/postgres/job_store.h"
#include "storage/redis/event_stream_reader.h"
#include "storage/redis/redis_client.h"
#include "storage/redis/wakeup_subscriber.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::api {

// Redis stream that mirrors the job-event outbox; entry ids are event sequence
// numbers.
inline constexpr char kEventStream[] = "ty:events";
// Redis channel that wakes the scheduler when work arrives.
inline constexpr const char* kSchedulerWakeup =
    storage::redis::kSchedulerWakeupChannel;

// Copies committed outbox rows from PostgreSQL to the Redis stream, in sequence
// order. Wakes on PostgreSQL NOTIFY (and every second). Several relays may run
// (one per api replica): a republished id is refused by Redis, so each event
// lands once. While Redis is down it waits; when Redis returns (even empty,
// after a restart) it resumes from the stream's last id.
class EventRelay {
 public:
  EventRelay(storage::postgres::Database* db, storage::postgres::JobStore* jobs,
             storage::redis::RedisClient* redis);
  ~EventRelay();
  void Start();
  void Stop();
  // Events published so far by this relay (for tests and metrics).
  uint64_t published() const { return published_.load(); }

 private:
  void Loop();
  storage::postgres::Database* db_;
  storage::postgres::JobStore* jobs_;
  storage::redis::RedisClient* redis_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> published_{0};
  std::thread thread_;
};

// Fans events out to the Watch streams of this process: one reader follows the
// Redis stream and keeps the latest events in memory; watchers read from that
// buffer, and from PostgreSQL when they are behind it or see a gap. With Redis
// down nothing new arrives live; watchers receive everything once it is back.
class EventHub {
 public:
  EventHub(storage::redis::RedisOptions redis_options,
           storage::postgres::JobStore* jobs, size_t capacity = 20000);
  ~EventHub();
  void Start();
  void Stop();

  struct Read {
    std::vector<trainyard::v1::JobEvent>
        events;  // seq > after, ascending, contiguous in hub
    bool behind =
        false;  // `after` is older than the buffer: read PostgreSQL first
  };
  // Waits up to `timeout` for events after `after`.
  Read Wait(uint64_t after, absl::Duration timeout, size_t max = 1000);
  // Highest sequence the hub has seen.
  uint64_t last() const;

 private:
  void Loop();
  storage::redis::RedisOptions redis_options_;
  storage::postgres::JobStore* jobs_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<trainyard::v1::JobEvent> buffer_ ABSL_GUARDED_BY(mu_);
  uint64_t last_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_EVENTS_H_
