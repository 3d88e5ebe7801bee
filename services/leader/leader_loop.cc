#include "services/leader/leader_loop.h"

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "services/lib/runtime/logging.h"
#include "storage/postgres/leader.h"
#include "storage/redis/redis_options.h"
#include "storage/redis/wakeup_subscriber.h"

namespace trainyard::leader {

using runtime::Log;
using runtime::LogLevel;

LeaderLoop::~LeaderLoop() { Stop(); }

void LeaderLoop::Start(storage::postgres::Database& db,
                       LeaderLoopOptions options,
                       std::function<void()> became_leader,
                       std::function<NextRound()> round) {
  Start(db, std::move(options), std::move(became_leader), std::move(round),
        nullptr);
}

void LeaderLoop::Start(storage::postgres::Database& db,
                       LeaderLoopOptions options,
                       std::function<void()> became_leader,
                       std::function<NextRound()> round,
                       std::function<void()> standby) {
  if (thread_.joinable()) return;
  options_ = std::move(options);
  became_leader_ = std::move(became_leader);
  round_ = std::move(round);
  standby_ = std::move(standby);
  thread_ = std::thread([this, &db] { Run(db); });
}

void LeaderLoop::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void LeaderLoop::Run(storage::postgres::Database& db) {
  storage::postgres::RunAsLeader(
      db, options_.lock_key, options_.standby_poll, stop_, leader_,
      [&](absl::FunctionRef<bool()> alive) { Lead(alive); },
      [&](const absl::Status& s) { LogEvent("leader election failed", &s); },
      [&] {
        if (standby_) standby_();
      });
}

void LeaderLoop::Lead(absl::FunctionRef<bool()> alive) {
  LogEvent(options_.became_leader_log, nullptr);
  if (became_leader_) became_leader_();
  std::unique_ptr<storage::redis::WakeupSubscriber> wakeups;
  if (!options_.redis_addr.empty() && !options_.wakeup_channels.empty()) {
    absl::StatusOr<storage::redis::RedisOptions> redis =
        storage::redis::ParseRedisAddress(options_.redis_addr);
    if (redis.ok()) {
      wakeups = std::make_unique<storage::redis::WakeupSubscriber>(
          *redis, options_.wakeup_channels);
    }
  }
  while (!stop_.HasBeenNotified() && alive()) {
    const NextRound next = round_();
    const absl::Duration wait = next.wait.value_or(options_.interval);
    if (wakeups != nullptr && next.wakeable) {
      wakeups->Wait(wait);
    } else {
      stop_.WaitForNotificationWithTimeout(wait);
    }
  }
  LogEvent(options_.lost_leader_log, nullptr);
}

// Log() takes its fields as an initializer list: one call per combination.
void LeaderLoop::LogEvent(const std::string& what,
                          const absl::Status* error) const {
  const LogLevel level =
      error != nullptr ? LogLevel::kWarning : LogLevel::kInfo;
  const std::string message = absl::StrCat(options_.name, ": ", what);
  const bool labelled = !options_.log_key.empty();
  if (labelled && error != nullptr) {
    Log(level, message,
        {{options_.log_key, options_.log_value}, {"error", *error}});
  } else if (labelled) {
    Log(level, message, {{options_.log_key, options_.log_value}});
  } else if (error != nullptr) {
    Log(level, message, {{"error", *error}});
  } else {
    Log(level, message);
  }
}

}  // namespace trainyard::leader
