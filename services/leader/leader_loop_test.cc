// LeaderLoop over a real PostgreSQL (the lock) and Redis (the wake-ups).

#include "services/leader/leader_loop.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/postgres/pool.h"
#include "storage/redis/redis_client.h"
#include "storage/redis/redis_options.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"

namespace trainyard::leader {
namespace {

namespace pg = ::trainyard::storage::postgres;

constexpr int64_t kKey = 0x7465737400;

std::unique_ptr<pg::Database> OpenDatabase() {
  absl::StatusOr<std::string> url = testing::SharedPostgres()->CreateDatabase();
  EXPECT_TRUE(url.ok()) << url.status();
  absl::StatusOr<std::unique_ptr<pg::Database>> db =
      pg::Database::Open({.url = *url, .pool_size = 2});
  EXPECT_TRUE(db.ok()) << db.status();
  return std::move(*db);
}

// Waits up to 10 s for `done`.
template <typename Fn>
bool Eventually(Fn done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// A service's side of the loop: counts its terms and rounds.
struct Counted {
  std::atomic<int> terms{0};
  std::atomic<int> rounds{0};
  // What each round asks for (`wait` is set before Start).
  std::optional<absl::Duration> wait;
  std::atomic<bool> wakeable{true};
  LeaderLoop loop;

  void Start(pg::Database& db, LeaderLoopOptions options) {
    loop.Start(
        db, std::move(options), [this] { ++terms; },
        [this] {
          ++rounds;
          return NextRound{.wait = wait, .wakeable = wakeable.load()};
        });
  }
};

LeaderLoopOptions Options() {
  return {.name = "test",
          .lock_key = kKey,
          .standby_poll = absl::Milliseconds(50),
          .interval = absl::Milliseconds(10)};
}

TEST(LeaderLoopTest, OneLeadsAndAStandbyTakesOver) {
  std::unique_ptr<pg::Database> db = OpenDatabase();
  auto a = std::make_unique<Counted>();
  Counted b;
  a->Start(*db, Options());
  ASSERT_TRUE(Eventually([&] { return a->rounds > 3; }));
  b.Start(*db, Options());
  absl::SleepFor(absl::Milliseconds(300));  // Six standby polls.
  EXPECT_TRUE(a->loop.is_leader());
  EXPECT_FALSE(b.loop.is_leader());
  EXPECT_EQ(a->terms, 1);
  EXPECT_EQ(b.terms, 0);
  EXPECT_EQ(b.rounds, 0);

  a.reset();  // Stops, releasing the lock.
  ASSERT_TRUE(Eventually([&] { return b.rounds > 3; }));
  EXPECT_TRUE(b.loop.is_leader());
  EXPECT_EQ(b.terms, 1);
  b.loop.Stop();
  EXPECT_FALSE(b.loop.is_leader());
}

TEST(LeaderLoopTest, ARoundChoosesTheWaitAndStopEndsIt) {
  std::unique_ptr<pg::Database> db = OpenDatabase();
  Counted c;
  c.wait = absl::Hours(1);
  c.wakeable = false;
  LeaderLoopOptions options = Options();
  options.interval = absl::Milliseconds(1);
  c.Start(*db, options);
  ASSERT_TRUE(Eventually([&] { return c.rounds > 0; }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(c.rounds, 1);  // Waiting its hour, not the interval.
  const absl::Time start = absl::Now();
  c.loop.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(c.rounds, 1);
}

TEST(LeaderLoopTest, AWakeupEndsTheWait) {
  std::unique_ptr<pg::Database> db = OpenDatabase();
  testing::LocalRedis* redis = testing::SharedRedis();
  absl::StatusOr<storage::redis::RedisOptions> redis_options =
      storage::redis::ParseRedisAddress(redis->Address());
  ASSERT_TRUE(redis_options.ok()) << redis_options.status();
  storage::redis::RedisClient publisher(*redis_options);

  Counted c;
  c.wait = absl::Hours(1);
  LeaderLoopOptions options = Options();
  options.redis_addr = redis->Address();
  options.wakeup_channels = {"ty:wake:test"};
  c.Start(*db, options);
  ASSERT_TRUE(Eventually([&] { return c.rounds > 0; }));
  // The first subscription itself counts as a wake-up (messages sent before
  // it are lost); then every message does.
  ASSERT_TRUE(Eventually([&] {
    (void)publisher.Notify("ty:wake:test", "hint");
    return c.rounds > 3;
  }));
  EXPECT_EQ(c.terms, 1);
  // A round that backs off is not woken (the round running when this is set
  // may still ask to be, so let it pass first).
  c.wakeable = false;
  auto notify_for = [&](absl::Duration d) {
    for (absl::Time end = absl::Now() + d; absl::Now() < end;) {
      (void)publisher.Notify("ty:wake:test", "hint");
      absl::SleepFor(absl::Milliseconds(10));
    }
  };
  notify_for(absl::Milliseconds(300));
  const int rounds = c.rounds;
  notify_for(absl::Milliseconds(300));
  EXPECT_EQ(c.rounds, rounds);
}

}  // namespace
}  // namespace trainyard::leader
