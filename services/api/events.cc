#include "services/api/events.h"

#include <algorithm>
#include <pqxx/pqxx>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/lib/runtime/logging.h"

namespace trainyard::api {
namespace {

using runtime::Log;
using runtime::LogLevel;

// Receives the outbox NOTIFY on a dedicated connection.
class Listener : public pqxx::notification_receiver {
 public:
  explicit Listener(pqxx::connection_base& conn)
      : pqxx::notification_receiver(conn, storage::postgres::kEventChannel) {}
  void operator()(const std::string&, int) override {}
};

}  // namespace

EventRelay::EventRelay(storage::postgres::Database* db,
                       storage::postgres::JobStore* jobs,
                       storage::redis::RedisClient* redis)
    : db_(db), jobs_(jobs), redis_(redis) {}

EventRelay::~EventRelay() { Stop(); }

void EventRelay::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void EventRelay::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void EventRelay::Loop() {
  std::unique_ptr<pqxx::connection> listen_conn;
  std::unique_ptr<Listener> listener;
  std::optional<uint64_t> cursor;  // last sequence known to be in the stream
  bool redis_was_down = false;
  while (!stop_) {
    // A connection that LISTENs, so that commits wake us at once.
    if (listen_conn == nullptr) {
      try {
        listen_conn = std::make_unique<pqxx::connection>(db_->options().url);
        listener = std::make_unique<Listener>(*listen_conn);
      } catch (const std::exception& e) {
        listener.reset();
        listen_conn.reset();
      }
    }
    if (!cursor) {
      absl::StatusOr<uint64_t> last = redis_->LastEventSeq(kEventStream);
      if (!last.ok()) {
        if (!redis_was_down) {
          Log(LogLevel::kWarning,
              "event relay: redis unavailable; events stay in the outbox",
              {{"error", last.status()}});
        }
        redis_was_down = true;
        absl::SleepFor(absl::Milliseconds(250));
        continue;
      }
      if (redis_was_down) Log(LogLevel::kInfo, "event relay: redis is back");
      redis_was_down = false;
      cursor = *last;
      if (*last == 0) {
        // Empty stream (new, or Redis restarted without data): publish recent
        // history so that hubs waiting after an older sequence see it; older
        // events are read from PostgreSQL.
        absl::StatusOr<uint64_t> newest = jobs_->LastEventSequence();
        if (newest.ok() && *newest > 10000) cursor = *newest - 10000;
      }
    }
    absl::StatusOr<std::vector<trainyard::v1::JobEvent>> events =
        jobs_->ReadEvents(*cursor, {}, 1000);
    if (!events.ok()) {
      absl::SleepFor(absl::Milliseconds(250));
      continue;
    }
    if (!events->empty()) {
      std::vector<std::pair<uint64_t, std::string>> entries;
      entries.reserve(events->size());
      for (const auto& e : *events)
        entries.emplace_back(e.sequence(), e.SerializeAsString());
      absl::StatusOr<int> added = redis_->PublishEvents(kEventStream, entries);
      if (!added.ok()) {
        cursor
            .reset();  // re-read the stream's position when Redis answers again
        continue;
      }
      published_ += *added;
      cursor = events->back().sequence();
      if (events->size() == 1000) continue;
    }
    // Wait for a commit notification, at most a second (also covers missed
    // notifications).
    if (listen_conn != nullptr) {
      try {
        listen_conn->await_notification(1, 0);
      } catch (const std::exception& e) {
        listener.reset();
        listen_conn.reset();
      }
    } else {
      absl::SleepFor(absl::Milliseconds(200));
    }
  }
}

EventHub::EventHub(storage::redis::RedisOptions redis_options,
                   storage::postgres::JobStore* jobs, size_t capacity)
    : redis_options_(std::move(redis_options)),
      jobs_(jobs),
      capacity_(capacity) {}

EventHub::~EventHub() { Stop(); }

void EventHub::Start() {
  absl::StatusOr<uint64_t> newest = jobs_->LastEventSequence();
  {
    absl::MutexLock lock(&mu_);
    last_ = newest.ok() ? *newest : 0;
  }
  thread_ = std::thread([this] { Loop(); });
}

void EventHub::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

uint64_t EventHub::last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

void EventHub::Loop() {
  storage::redis::EventStreamReader reader(redis_options_, kEventStream);
  while (true) {
    uint64_t after;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      after = last_;
    }
    auto entries = reader.ReadAfter(after, 1000, absl::Milliseconds(500));
    if (!entries.ok()) {
      absl::SleepFor(absl::Milliseconds(250));
      continue;
    }
    if (entries->empty()) continue;
    absl::MutexLock lock(&mu_);
    for (auto& entry : *entries) {
      if (entry.seq <= last_) continue;
      trainyard::v1::JobEvent e;
      if (!e.ParseFromString(entry.payload)) continue;
      e.set_sequence(entry.seq);
      buffer_.push_back(std::move(e));
      last_ = entry.seq;
    }
    while (buffer_.size() > capacity_) buffer_.pop_front();
  }
}

EventHub::Read EventHub::Wait(uint64_t after, absl::Duration timeout,
                              size_t max) {
  Read out;
  absl::MutexLock lock(&mu_);
  auto has_news = [this, after]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || last_ > after;
  };
  mu_.AwaitWithTimeout(absl::Condition(&has_news), timeout);
  if (last_ <= after) return out;
  if (buffer_.empty() || buffer_.front().sequence() > after + 1) {
    // The watcher is older than what the buffer keeps (or the hub started after
    // it); only PostgreSQL has what lies in between.
    out.behind = true;
    return out;
  }
  auto it =
      std::upper_bound(buffer_.begin(), buffer_.end(), after,
                       [](uint64_t seq, const trainyard::v1::JobEvent& e) {
                         return seq < e.sequence();
                       });
  for (; it != buffer_.end() && out.events.size() < max; ++it)
    out.events.push_back(*it);
  return out;
}

}  // namespace trainyard::api
