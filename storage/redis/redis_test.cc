// Integration tests of the Redis layer against a real redis-server
// (tests/fixtures LocalRedis).

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/redis/event_stream_reader.h"
#include "storage/redis/redis_client.h"
#include "storage/redis/redis_options.h"
#include "storage/redis/tenant_rate_limiter.h"
#include "storage/redis/wakeup_subscriber.h"
#include "tests/fixtures/local_redis.h"

namespace trainyard::storage::redis {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::trainyard::testing::LocalRedis;
using ::trainyard::testing::SharedRedis;
using StreamEntry = EventStreamReader::StreamEntry;

// Generous bound for "fails fast"; the configured timeouts are 200/500 ms.
constexpr absl::Duration kFast = absl::Seconds(1);

RedisOptions OptionsFor(const LocalRedis& server) {
  absl::StatusOr<RedisOptions> options = ParseRedisAddress(server.Address());
  EXPECT_TRUE(options.ok()) << options.status();
  return options.value_or(RedisOptions());
}

// A fresh name for keys, streams and channels: unique per call (tests may be
// repeated against the same shared server) and naming the test.
std::string Unique(absl::string_view what) {
  static const int64_t kRun = absl::ToUnixNanos(absl::Now());
  static std::atomic<int> counter{0};
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat("test:", kRun, ".", counter++, ":",
                      info->test_suite_name(), ".", info->name(), ":", what);
}

std::optional<std::string> Cmd(RedisClient& client,
                               const std::vector<std::string>& args) {
  absl::StatusOr<std::optional<std::string>> reply = client.Command(args);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? *reply : std::nullopt;
}

// Retries `fn` until it returns OK or `timeout` passes; returns the last
// status.
template <typename F>
absl::Status Eventually(F fn, absl::Duration timeout = absl::Seconds(5)) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status status = fn();
  while (!status.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    status = fn();
  }
  return status;
}

// --- ParseRedisAddress ------------------------------------------------------

TEST(ParseRedisAddressTest, AcceptsHostPort) {
  absl::StatusOr<RedisOptions> options = ParseRedisAddress("10.1.2.3:7000");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->host, "10.1.2.3");
  EXPECT_EQ(options->port, 7000);
  EXPECT_EQ(options->connect_timeout, absl::Milliseconds(200));
  EXPECT_EQ(options->command_timeout, absl::Milliseconds(500));
  EXPECT_EQ(options->pool_size, 4);

  options = ParseRedisAddress("redis.internal:6379");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->host, "redis.internal");

  options = ParseRedisAddress("[::1]:6380");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->host, "::1");
  EXPECT_EQ(options->port, 6380);
}

TEST(ParseRedisAddressTest, RejectsMalformedAddresses) {
  for (const char* bad :
       {"", "localhost", "localhost:", ":6379", "host:0", "host:65536",
        "host:12ab", "host:-1", "host: 1", "::1:6379", "[::1:6379", "[]:1",
        "ho st:1", "host:999999"}) {
    absl::StatusOr<RedisOptions> options = ParseRedisAddress(bad);
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << bad << "\"";
    EXPECT_THAT(options.status().message(), HasSubstr("expected host:port"));
  }
}

// --- RedisClient basics -----------------------------------------------------

TEST(RedisClientTest, PingAndBinarySafeCommands) {
  RedisClient client(OptionsFor(*SharedRedis()));
  ASSERT_TRUE(client.Ping().ok());

  const std::string key = Unique("k");
  const std::string binary("a\0b\r\n*1\r\n\xff", 10);
  EXPECT_EQ(Cmd(client, {"SET", key, binary}), "OK");
  EXPECT_EQ(Cmd(client, {"GET", key}), binary);
  EXPECT_EQ(Cmd(client, {"STRLEN", key}), "10");
  EXPECT_EQ(Cmd(client, {"GET", Unique("missing")}), std::nullopt);
  EXPECT_EQ(Cmd(client, {"INCRBY", Unique("n"), "41"}), "41");

  EXPECT_EQ(client.Command({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string list = Unique("list");
  EXPECT_EQ(Cmd(client, {"RPUSH", list, "x"}), "1");
  EXPECT_EQ(client.Command({"GET", list}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.Command({"LRANGE", list, "0", "-1"}).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(client.Command({"NOSUCHCOMMAND"}).status().code(),
            absl::StatusCode::kInternal);
}

TEST(RedisClientTest, PublishAndReadInOrder) {
  const LocalRedis& server = *SharedRedis();
  RedisClient client(OptionsFor(server));
  const std::string stream = Unique("events");
  std::vector<StreamEntry> published;
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    std::string payload = absl::StrCat("event-", seq, std::string("\0\r\n", 3));
    ASSERT_TRUE(client.PublishEvent(stream, seq, payload).ok()) << seq;
    published.push_back({seq, payload});
  }
  absl::StatusOr<uint64_t> last = client.LastEventSeq(stream);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, 5u);

  EventStreamReader reader(OptionsFor(server), stream);
  absl::StatusOr<std::vector<StreamEntry>> all =
      reader.ReadAfter(0, 100, absl::ZeroDuration());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, published);

  absl::StatusOr<std::vector<StreamEntry>> some =
      reader.ReadAfter(2, 2, absl::Milliseconds(100));
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_THAT(*some, ElementsAre(published[2], published[3]));

  // Gaps in the sequence are fine; the reader sees exactly what's there.
  ASSERT_TRUE(client.PublishEvent(stream, 9, "nine").ok());
  absl::StatusOr<std::vector<StreamEntry>> tail =
      reader.ReadAfter(5, 100, absl::ZeroDuration());
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_THAT(*tail, ElementsAre(StreamEntry{9, "nine"}));
  EXPECT_EQ(reader.ReadAfter(0, 0, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RedisClientTest, RepublishIsAlreadyExistsAndBatchSkipsPresentIds) {
  RedisClient client(OptionsFor(*SharedRedis()));
  const std::string stream = Unique("events");
  ASSERT_TRUE(client.PublishEvent(stream, 3, "three").ok());
  ASSERT_TRUE(client.PublishEvent(stream, 5, "five").ok());

  absl::Status again = client.PublishEvent(stream, 5, "five");
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_EQ(client.PublishEvent(stream, 4, "late").code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(client.PublishEvent(stream, 0, "zero").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Cmd(client, {"XLEN", stream}), "2");

  // Two relays publishing overlapping batches: each id lands exactly once.
  std::vector<std::pair<uint64_t, std::string>> batch = {
      {4, "four"}, {5, "five"}, {6, "six"}, {7, "seven"}};
  absl::StatusOr<int> added = client.PublishEvents(stream, batch);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 2);
  added = client.PublishEvents(stream, batch);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 0);
  EXPECT_EQ(client.PublishEvents(stream, {}).value_or(-1), 0);
  EXPECT_EQ(client.PublishEvents(stream, {{0, "bad"}}).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(client.LastEventSeq(stream).value_or(0), 7u);
  EXPECT_EQ(Cmd(client, {"XLEN", stream}), "4");
  EventStreamReader reader(OptionsFor(*SharedRedis()), stream);
  absl::StatusOr<std::vector<StreamEntry>> all =
      reader.ReadAfter(0, 100, absl::ZeroDuration());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(*all,
              ElementsAre(StreamEntry{3, "three"}, StreamEntry{5, "five"},
                          StreamEntry{6, "six"}, StreamEntry{7, "seven"}));
}

TEST(RedisClientTest, LastEventSeqOfMissingStreamIsZero) {
  RedisClient client(OptionsFor(*SharedRedis()));
  absl::StatusOr<uint64_t> last = client.LastEventSeq(Unique("nothing"));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, 0u);

  const std::string not_a_stream = Unique("string");
  EXPECT_EQ(Cmd(client, {"SET", not_a_stream, "x"}), "OK");
  EXPECT_EQ(client.LastEventSeq(not_a_stream).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.PublishEvent(not_a_stream, 1, "x").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RedisClientTest, MaxLenTrimsApproximately) {
  RedisClient client(OptionsFor(*SharedRedis()));
  const std::string stream = Unique("events");
  std::vector<std::pair<uint64_t, std::string>> batch;
  for (uint64_t seq = 1; seq <= 1000; ++seq) {
    batch.emplace_back(seq, absl::StrCat("payload ", seq));
  }
  absl::StatusOr<int> added =
      client.PublishEvents(stream, batch, /*maxlen_approx=*/100);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 1000);
  int64_t len = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(Cmd(client, {"XLEN", stream}).value_or(""), &len));
  EXPECT_GE(len, 100);
  EXPECT_LE(len, 300);  // "~": whole macro nodes (100 entries) are trimmed.
  EXPECT_EQ(client.LastEventSeq(stream).value_or(0), 1000u);
}

TEST(EventStreamReaderTest, BlockingReadTimesOutWithNoEntries) {
  RedisClient client(OptionsFor(*SharedRedis()));
  const std::string stream = Unique("events");
  ASSERT_TRUE(client.PublishEvent(stream, 1, "one").ok());
  EventStreamReader reader(OptionsFor(*SharedRedis()), stream);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<StreamEntry>> entries =
      reader.ReadAfter(1, 10, absl::Milliseconds(200));
  const absl::Duration elapsed = absl::Now() - start;
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
  EXPECT_GE(elapsed, absl::Milliseconds(190));
  EXPECT_LT(elapsed, kFast);
}

TEST(EventStreamReaderTest, BlockingReadReturnsAsSoonAsPublished) {
  const std::string stream = Unique("events");
  EventStreamReader reader(OptionsFor(*SharedRedis()), stream);
  std::thread publisher([&] {
    absl::SleepFor(absl::Milliseconds(100));
    RedisClient client(OptionsFor(*SharedRedis()));
    EXPECT_TRUE(client.PublishEvent(stream, 42, "late news").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<StreamEntry>> entries =
      reader.ReadAfter(0, 10, absl::Seconds(10));
  const absl::Duration elapsed = absl::Now() - start;
  publisher.join();
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(*entries, ElementsAre(StreamEntry{42, "late news"}));
  EXPECT_LT(elapsed, absl::Seconds(5));
}

// --- Rate limiting ----------------------------------------------------------

TEST(RedisClientTest, TakeTokenAllowsBurstThenDeniesThenRefills) {
  RedisClient client(OptionsFor(*SharedRedis()));
  const std::string key = Unique("bucket");
  constexpr double kRate = 5;  // tokens per second: one every 200 ms
  constexpr double kBurst = 5;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<RateDecision> d = client.TakeToken(key, kRate, kBurst);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->allowed) << i;
    EXPECT_EQ(d->retry_after, absl::ZeroDuration());
    // The bucket refills a little between calls.
    EXPECT_NEAR(d->remaining, kBurst - 1 - i, 0.5) << i;
  }
  absl::StatusOr<RateDecision> denied = client.TakeToken(key, kRate, kBurst);
  ASSERT_TRUE(denied.ok()) << denied.status();
  ASSERT_FALSE(denied->allowed);
  EXPECT_LT(denied->remaining, 1);
  // retry_after is exactly the time to refill the missing fraction of a token.
  EXPECT_GT(denied->retry_after, absl::ZeroDuration());
  EXPECT_LE(denied->retry_after, absl::Milliseconds(200));
  EXPECT_NEAR(absl::ToDoubleSeconds(denied->retry_after),
              (1 - denied->remaining) / kRate, 1e-5);

  // The bucket expires once it would be full again (burst / rate + 1 s).
  int64_t pttl = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Cmd(client, {"PTTL", key}).value_or(""), &pttl));
  EXPECT_GT(pttl, 1000);
  EXPECT_LE(pttl, 2000);

  absl::SleepFor(denied->retry_after + absl::Milliseconds(5));
  absl::StatusOr<RateDecision> refilled = client.TakeToken(key, kRate, kBurst);
  ASSERT_TRUE(refilled.ok()) << refilled.status();
  EXPECT_TRUE(refilled->allowed);
  absl::StatusOr<RateDecision> again = client.TakeToken(key, kRate, kBurst);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->allowed) << "only one token refilled";
}

TEST(RedisClientTest, TakeTokenCostsAndInvalidArguments) {
  RedisClient client(OptionsFor(*SharedRedis()));
  const std::string key = Unique("bucket");
  absl::StatusOr<RateDecision> d = client.TakeToken(key, 1, 10, 7);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->allowed);
  EXPECT_NEAR(d->remaining, 3, 0.1);
  d = client.TakeToken(key, 1, 10, 5);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->allowed);
  EXPECT_GT(d->retry_after, absl::Milliseconds(1800));
  EXPECT_LE(d->retry_after, absl::Seconds(2));
  d = client.TakeToken(key, 1, 10, 11);  // More than the bucket can hold.
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->retry_after, absl::InfiniteDuration());

  EXPECT_EQ(client.TakeToken(key, 0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.TakeToken(key, 1, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.TakeToken(key, 1, 1, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RedisClientTest, TakeTokenIsAtomicAcrossThreadsAndClients) {
  const std::string key = Unique("bucket");
  RedisClient a(OptionsFor(*SharedRedis()));
  RedisClient b(OptionsFor(*SharedRedis()));
  std::atomic<int> allowed{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      RedisClient& client = t % 2 == 0 ? a : b;
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<RateDecision> d = client.TakeToken(key, 0.001, 50);
        if (!d.ok()) {
          ++errors;
        } else if (d->allowed) {
          ++allowed;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(allowed.load(), 50);
}

TEST(TenantRateLimiterTest, UsesRedisBucketPerTenant) {
  RedisClient client(OptionsFor(*SharedRedis()));
  TenantRateLimiter limiter(&client, /*default_rate_per_second=*/0.01,
                            /*default_burst=*/2);
  const std::string tenant = Unique("tenant");
  limiter.SetLimit(tenant + "-big", 0.01, 4);
  limiter.SetLimit(tenant + "-suspended", 0, 0);
  EXPECT_TRUE(limiter.Check(tenant).allowed);
  EXPECT_TRUE(limiter.Check(tenant).allowed);
  RateDecision denied = limiter.Check(tenant);
  EXPECT_FALSE(denied.allowed);
  EXPECT_GT(denied.retry_after, absl::Seconds(90));  // 1 token at 0.01/s.
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(limiter.Check(tenant + "-big").allowed) << i;
  }
  EXPECT_FALSE(limiter.Check(tenant + "-big").allowed);
  RateDecision suspended = limiter.Check(tenant + "-suspended");
  EXPECT_FALSE(suspended.allowed);
  EXPECT_EQ(suspended.retry_after, absl::InfiniteDuration());

  // The state lives in Redis, shared with other replicas.
  EXPECT_EQ(Cmd(client, {"EXISTS", TenantRateLimiter::KeyFor(tenant)}), "1");
  TenantRateLimiter other_replica(&client, 0.01, 2);
  EXPECT_FALSE(other_replica.Check(tenant).allowed);
  EXPECT_EQ(limiter.fallback_decisions(), 0);
}

TEST(TenantRateLimiterTest, LeasesTokensForHighLimitsWithoutExceedingThem) {
  EXPECT_EQ(TenantRateLimiter::LeaseSize(5, 6), 0);        // low limits: exact, no lease
  EXPECT_EQ(TenantRateLimiter::LeaseSize(1000, 1000), 50);  // 50 ms of rate
  EXPECT_EQ(TenantRateLimiter::LeaseSize(1000, 40), 10);    // at most a quarter of burst

  RedisClient client(OptionsFor(*SharedRedis()));
  const std::string tenant = Unique("leased");
  TenantRateLimiter limiter(&client, /*default_rate_per_second=*/1000, /*default_burst=*/200);
  const std::string key = TenantRateLimiter::KeyFor(tenant);
  ASSERT_TRUE(limiter.Check(tenant).allowed);
  // One round trip took this request's token plus a lease of 50; Redis shows 149 left.
  double in_redis = 0;
  ASSERT_TRUE(absl::SimpleAtod(Cmd(client, {"HGET", key, "tokens"}).value_or(""), &in_redis));
  EXPECT_NEAR(in_redis, 149, 2);
  // The next 50 come from the lease without touching Redis.
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(limiter.Check(tenant).allowed) << i;
  double after = 0;
  ASSERT_TRUE(absl::SimpleAtod(Cmd(client, {"HGET", key, "tokens"}).value_or(""), &after));
  EXPECT_NEAR(after, 149, 2);

  // Never more than the limit: two replicas hammering one tenant for 300 ms admit at most
  // burst + rate × elapsed.
  TenantRateLimiter other(&client, 1000, 200);
  const std::string hot = Unique("hot");
  std::atomic<int> allowed{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      TenantRateLimiter& l = t % 2 == 0 ? limiter : other;
      while (absl::Now() - start < absl::Milliseconds(300)) {
        if (l.Check(hot).allowed) ++allowed;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(limiter.fallback_decisions() + other.fallback_decisions(), 0);
  // The bucket refills on Redis's clock, so allow a few tokens of timing slack; a leasing
  // bug would overshoot by whole leases (50 tokens each).
  EXPECT_LE(allowed.load(), 200 + 1000 * elapsed + 25);
  EXPECT_GT(allowed.load(), 200);  // and it does admit what the limit allows
}

// --- Outages ----------------------------------------------------------------

class RedisOutageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<LocalRedis>> server = LocalRedis::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<LocalRedis> server_;
};

// Runs fn, expects UNAVAILABLE within kFast.
template <typename F>
void ExpectFastUnavailable(F fn, absl::string_view what) {
  const absl::Time start = absl::Now();
  absl::Status status = fn();
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable)
      << what << ": " << status;
  EXPECT_LT(elapsed, kFast) << what;
}

TEST_F(RedisOutageTest, StoppedRedisFailsFastAndRestartRecovers) {
  RedisClient client(OptionsFor(*server_));
  const std::string stream = "ty:events";
  ASSERT_TRUE(client.Ping().ok());
  ASSERT_TRUE(client.PublishEvent(stream, 1, "one").ok());
  ASSERT_TRUE(client.TakeToken("bucket", 1, 5).ok());  // Loads the script.
  EventStreamReader reader(OptionsFor(*server_), stream);
  ASSERT_TRUE(reader.ReadAfter(0, 10, absl::ZeroDuration()).ok());

  ASSERT_TRUE(server_->Stop().ok());

  ExpectFastUnavailable([&] { return client.Ping(); }, "Ping");
  ExpectFastUnavailable([&] { return client.PublishEvent(stream, 2, "two"); },
                        "PublishEvent");
  ExpectFastUnavailable(
      [&] {
        return client.PublishEvents(stream, {{3, "x"}}).status();
      },
      "PublishEvents");
  ExpectFastUnavailable([&] { return client.LastEventSeq(stream).status(); },
                        "LastEventSeq");
  ExpectFastUnavailable([&] { return client.Notify("ch"); }, "Notify");
  ExpectFastUnavailable(
      [&] { return client.TakeToken("bucket", 1, 5).status(); }, "TakeToken");
  ExpectFastUnavailable(
      [&] {
        return client.Command({"GET", "k"}).status();
      },
      "Command");
  ExpectFastUnavailable(
      [&] { return reader.ReadAfter(1, 10, absl::Milliseconds(300)).status(); },
      "ReadAfter");
  // Many callers while down: the circuit breaker answers without waiting.
  const absl::Time start = absl::Now();
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(client.Ping().code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_LT(absl::Now() - start, kFast);

  // Same client, same reader: they work again once Redis is back.
  ASSERT_TRUE(server_->Restart().ok());
  const absl::Time restarted = absl::Now();
  ASSERT_TRUE(Eventually([&] { return client.Ping(); }).ok());
  EXPECT_LT(absl::Now() - restarted, absl::Seconds(2));
  // Redis came back empty (no persistence): relays republish from seq 1.
  EXPECT_EQ(client.LastEventSeq(stream).value_or(99), 0u);
  ASSERT_TRUE(client.PublishEvent(stream, 1, "one again").ok());
  // The script cache was lost too: NOSCRIPT falls back to EVAL.
  absl::StatusOr<RateDecision> d = client.TakeToken("bucket", 1, 5);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->allowed);
  absl::StatusOr<std::vector<StreamEntry>> entries;
  ASSERT_TRUE(Eventually([&] {
                entries = reader.ReadAfter(0, 10, absl::Milliseconds(100));
                return entries.status();
              }).ok())
      << entries.status();
  EXPECT_THAT(*entries, ElementsAre(StreamEntry{1, "one again"}));
}

TEST_F(RedisOutageTest, ServerClosedPooledConnectionsAreReplacedTransparently) {
  RedisClient client(OptionsFor(*server_));
  ASSERT_TRUE(client.Ping().ok());
  // Kill every client connection (e.g. Redis' timeout, a proxy, a restart).
  RedisClient killer(OptionsFor(*server_));
  ASSERT_TRUE(killer.Command({"CLIENT", "KILL", "TYPE", "normal"}).ok());
  // No error surfaces: the dead pooled connection is detected and redialled.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(client.Ping().ok()) << i;
  }
}

TEST_F(RedisOutageTest, HungRedisTimesOutThenFailsFastAndRecovers) {
  RedisOptions options = OptionsFor(*server_);
  options.command_timeout = absl::Milliseconds(300);
  RedisClient client(options);
  ASSERT_TRUE(client.Ping().ok());
  ASSERT_TRUE(server_->Pause().ok());

  absl::Time start = absl::Now();
  EXPECT_EQ(client.Ping().code(), absl::StatusCode::kUnavailable);
  absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, absl::Milliseconds(250));  // Waited command_timeout...
  EXPECT_LT(elapsed, kFast);                    // ...and not more.

  start = absl::Now();
  absl::Status fast = client.Ping();
  EXPECT_EQ(fast.code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100)) << fast;
  EXPECT_THAT(fast.message(), HasSubstr("timed out"));

  ASSERT_TRUE(server_->Resume().ok());
  EXPECT_TRUE(Eventually([&] { return client.Ping(); }).ok());
}

TEST_F(RedisOutageTest, ReaderBlockedWhileRedisStopsReturnsUnavailable) {
  EventStreamReader reader(OptionsFor(*server_), "ty:events");
  ASSERT_TRUE(reader.ReadAfter(0, 1, absl::ZeroDuration()).ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(server_->Stop().ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<StreamEntry>> entries =
      reader.ReadAfter(0, 1, absl::Seconds(30));
  const absl::Duration elapsed = absl::Now() - start;
  stopper.join();
  EXPECT_EQ(entries.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(elapsed, absl::Seconds(2));
}

TEST_F(RedisOutageTest, TenantRateLimiterFallsBackLocallyAndReturns) {
  RedisClient client(OptionsFor(*server_));
  TenantRateLimiter limiter(&client, /*default_rate_per_second=*/5,
                            /*default_burst=*/3);
  ASSERT_TRUE(limiter.Check("acme").allowed);
  EXPECT_EQ(limiter.fallback_decisions(), 0);

  ASSERT_TRUE(server_->Stop().ok());
  // Neither blocked nor unlimited: the local bucket has the same parameters.
  const absl::Time start = absl::Now();
  int allowed = 0;
  for (int i = 0; i < 3; ++i) allowed += limiter.Check("acme").allowed;
  RateDecision denied = limiter.Check("acme");
  EXPECT_LT(absl::Now() - start, kFast);
  EXPECT_EQ(allowed, 3);
  EXPECT_FALSE(denied.allowed);
  EXPECT_GT(denied.retry_after, absl::ZeroDuration());
  EXPECT_LE(denied.retry_after, absl::Milliseconds(200));  // 1 token at 5/s.
  EXPECT_EQ(limiter.fallback_decisions(), 4);
  // The local bucket refills too.
  absl::SleepFor(denied.retry_after + absl::Milliseconds(5));
  EXPECT_TRUE(limiter.Check("acme").allowed);

  ASSERT_TRUE(server_->Restart().ok());
  ASSERT_TRUE(Eventually([&] { return client.Ping(); }).ok());
  const int64_t fallbacks = limiter.fallback_decisions();
  EXPECT_TRUE(limiter.Check("acme").allowed);  // Fresh bucket in Redis.
  EXPECT_EQ(limiter.fallback_decisions(), fallbacks) << "back on Redis";
  EXPECT_EQ(Cmd(client, {"EXISTS", TenantRateLimiter::KeyFor("acme")}), "1");
}

// --- Wake-ups ---------------------------------------------------------------

TEST(WakeupSubscriberTest, NotifyWakesWaiterAndCoalesces) {
  const std::string channel = Unique("wake");
  RedisClient client(OptionsFor(*SharedRedis()));
  WakeupSubscriber subscriber(OptionsFor(*SharedRedis()),
                              {channel, channel + "-2"});
  ASSERT_TRUE(subscriber.WaitUntilSubscribed(absl::Seconds(5)));
  EXPECT_TRUE(subscriber.subscribed());
  EXPECT_FALSE(subscriber.Wait(absl::ZeroDuration()));

  ASSERT_TRUE(client.Notify(channel, "job 17").ok());
  const absl::Time start = absl::Now();
  EXPECT_TRUE(subscriber.Wait(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_FALSE(subscriber.Wait(absl::Milliseconds(50))) << "consumed";

  // Several notifications (on either channel) coalesce into one wake-up.
  // (Published by one script so that they are all delivered before Wait()
  // can return.)
  EXPECT_EQ(Cmd(client, {"EVAL",
                         "redis.call('PUBLISH', KEYS[1], 'a') "
                         "redis.call('PUBLISH', KEYS[2], 'b') "
                         "redis.call('PUBLISH', KEYS[1], 'c') return 3",
                         "2", channel, channel + "-2"}),
            "3");
  EXPECT_TRUE(subscriber.Wait(absl::Seconds(5)));
  EXPECT_FALSE(subscriber.Wait(absl::Milliseconds(100)));

  // Other channels don't wake it.
  ASSERT_TRUE(client.Notify(channel + "-other").ok());
  EXPECT_FALSE(subscriber.Wait(absl::Milliseconds(100)));
  EXPECT_EQ(subscriber.resubscriptions(), 0);
}

TEST_F(RedisOutageTest, WakeupSubscriberSurvivesRestart) {
  RedisClient client(OptionsFor(*server_));
  WakeupSubscriber subscriber(OptionsFor(*server_), {"ty:wake"});
  ASSERT_TRUE(subscriber.WaitUntilSubscribed(absl::Seconds(5)));
  ASSERT_TRUE(client.Notify("ty:wake").ok());
  EXPECT_TRUE(subscriber.Wait(absl::Seconds(5)));

  ASSERT_TRUE(server_->Stop().ok());
  // Waiting while Redis is down is bounded and reports no wake-up.
  const absl::Time start = absl::Now();
  EXPECT_FALSE(subscriber.Wait(absl::Milliseconds(300)));
  EXPECT_LT(absl::Now() - start, kFast);
  EXPECT_FALSE(subscriber.subscribed());

  ASSERT_TRUE(server_->Restart().ok());
  ASSERT_TRUE(subscriber.WaitUntilSubscribed(absl::Seconds(5)));
  EXPECT_EQ(subscriber.resubscriptions(), 1);
  // Notifications sent during the outage were lost, so resubscribing is
  // itself a wake-up.
  EXPECT_TRUE(subscriber.Wait(absl::ZeroDuration()));
  EXPECT_FALSE(subscriber.Wait(absl::Milliseconds(50)));

  ASSERT_TRUE(Eventually([&] { return client.Notify("ty:wake"); }).ok());
  EXPECT_TRUE(subscriber.Wait(absl::Seconds(5)));
}

TEST(WakeupSubscriberTest, StartsAndStopsPromptlyWithoutRedis) {
  RedisOptions options;
  options.port = 1;  // Nothing listens there.
  const absl::Time start = absl::Now();
  {
    WakeupSubscriber subscriber(options, {"ty:wake"});
    EXPECT_FALSE(subscriber.WaitUntilSubscribed(absl::Milliseconds(100)));
    EXPECT_FALSE(subscriber.Wait(absl::Milliseconds(100)));
  }
  EXPECT_LT(absl::Now() - start, kFast);
}

}  // namespace
}  // namespace trainyard::storage::redis
