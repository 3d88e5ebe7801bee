#include "services/accounting/pricing/idle.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing::idle_test {
namespace {

constexpr TimeMs kNov = 1'793'491'200'000;  // 2026-11-01T00:00:00Z
constexpr TimeMs kH = kMsPerHour;
constexpr TimeMs kMin = 60'000;
constexpr TimeMs kAt(int h, int m) { return kNov + h * kH + m * kMin; }

PriceBook Book() {
  absl::StatusOr<PriceBook> book = PriceBook::Create("USD");
  EXPECT_TRUE(book.ok()) << book.status();
  return *std::move(book);
}

LedgerLine Line(std::string tenant, std::string pool, TimeMs period,
                int64_t cost) {
  LedgerLine l;
  l.keys.tenant = std::move(tenant);
  l.keys.flavor = std::move(pool);
  l.period_start = period;
  l.start = period;
  l.end = period + kH;
  l.cost_micros = cost;
  l.tenant_cost_micros = cost;
  return l;
}

std::vector<LedgerLine> Meter(const PriceBook& book, std::string tenant,
                              std::string pool, int64_t gpus, TimeMs start,
                              TimeMs end) {
  AttemptUsage u;
  u.keys.tenant = tenant;
  u.keys.flavor = pool;
  u.keys.job = tenant + "-job";
  u.gpus_per_worker = gpus;
  u.start_time = start;
  u.end_time = end;
  u.end_reason = EndReason::kCompleted;
  absl::StatusOr<std::vector<LedgerLine>> lines =
      MeterAttempt(book, u, end, MeterOptions{});
  EXPECT_TRUE(lines.ok()) << lines.status();
  return *lines;
}

TEST(IdleTest, CommitmentPartsSumExactlyToTheCommitment) {
  // 1,000,000 micros over 10:20-13:20 (180 min). C(t) = round(1e6 × min/180):
  // C(11:00) = 222,222.2 -> 222,222; C(12:00) = 555,555.6 -> 555,556;
  // C(13:00) = 888,888.9 -> 888,889; C(13:20) = 1,000,000.
  const Commitment c{"res", {1'000'000, ""}, kAt(10, 20), kAt(13, 20)};
  EXPECT_EQ(*CommitmentPart(c, kAt(10, 0), kAt(11, 0)), 222'222);
  EXPECT_EQ(*CommitmentPart(c, kAt(11, 0), kAt(12, 0)), 333'334);
  EXPECT_EQ(*CommitmentPart(c, kAt(12, 0), kAt(13, 0)), 333'333);
  EXPECT_EQ(*CommitmentPart(c, kAt(13, 0), kAt(14, 0)), 111'111);
  EXPECT_EQ(*CommitmentPart(c, kAt(9, 0), kAt(10, 0)), 0);
  EXPECT_EQ(*CommitmentPart(c, kAt(0, 0), kAt(20, 0)), 1'000'000);
  // Any partition, here by the millisecond over an odd amount.
  const Commitment odd{"res", {999'999'937, ""}, kAt(0, 7), kAt(0, 7) + 7'919};
  int64_t sum = 0;
  for (TimeMs t = odd.start_time; t < odd.end_time; t += 13) {
    sum += *CommitmentPart(odd, t, t + 13);
  }
  EXPECT_EQ(sum, 999'999'937);
}

TEST(IdleTest, ReservedPoolIdleIsTheCommitmentPartMinusAllocated) {
  PriceBook book = Book();
  // $720 for 30 days (720 h) = $1.00 an hour.
  ASSERT_TRUE(book.AddCommitment(
                      {"res", {720'000'000, ""}, kNov, kNov + 720 * kH}, kNov)
                  .ok());
  ASSERT_TRUE(
      book.AddRate({"res", Resource::kGpu, {1'200'000, ""}, kNov}, kNov).ok());
  std::vector<LedgerLine> lines =
      Meter(book, "acme", "res", 1, kAt(10, 0), kAt(10, 30));  // $0.60
  absl::StatusOr<IdleLine> idle =
      ComputeIdle(book, {"res", false, kAt(10, 0), {}}, lines, MeterOptions{});
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_TRUE(idle->reserved);
  EXPECT_EQ(idle->paid_micros, 1'000'000);
  EXPECT_EQ(idle->allocated_micros, 600'000);
  EXPECT_EQ(idle->idle_micros, 400'000);
  // Over a day the parts sum to 24 × $1.
  int64_t paid = 0;
  for (int h = 0; h < 24; ++h) {
    paid +=
        ComputeIdle(book, {"res", false, kAt(h, 0), {}}, {}, {})->paid_micros;
  }
  EXPECT_EQ(paid, 24'000'000);
}

TEST(IdleTest, CapacityHeldAfterACommitmentEndsIsPaidAtTheRates) {
  PriceBook book = Book();
  // 5,400,000 micros for 09:00-10:30: 3,600,000 an hour.
  ASSERT_TRUE(
      book.AddCommitment({"res", {5'400'000, ""}, kAt(9, 0), kAt(10, 30)}, kNov)
          .ok());
  ASSERT_TRUE(
      book.AddRate({"res", Resource::kGpu, {2'000'000, ""}, kNov}, kNov).ok());
  // 2 GPUs held all hour: 10:00-10:30 is the commitment's (1,800,000);
  // 10:30-11:00 is paid at the rate, 2 × 0.5 h × $2 = 2,000,000.
  absl::StatusOr<IdleLine> idle = ComputeIdle(
      book, {"res", false, kAt(10, 0), {{kAt(8, 0), kAt(12, 0), 2, 0, 0}}}, {},
      MeterOptions{});
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_TRUE(idle->reserved);
  EXPECT_EQ(idle->paid_micros, 3'800'000);
  // In the hour before, the commitment covers everything.
  idle = ComputeIdle(
      book, {"res", false, kAt(9, 0), {{kAt(8, 0), kAt(12, 0), 2, 0, 0}}}, {},
      MeterOptions{});
  EXPECT_EQ(idle->paid_micros, 3'600'000);
}

TEST(IdleTest, OnDemandPoolIdleIsHeldCapacityMinusAllocated) {
  PriceBook book = Book();
  ASSERT_TRUE(
      book.AddRate({"a100", Resource::kGpu, {2'000'000, ""}, kNov}, kNov).ok());
  ASSERT_TRUE(book.AddRate({"a100", Resource::kCpu, {0, ""}, kNov}, kNov).ok());
  std::vector<LedgerLine> lines =
      Meter(book, "acme", "a100", 2, kAt(10, 0), kAt(11, 0));  // $4
  for (const LedgerLine& l :
       Meter(book, "bolt", "a100", 1, kAt(10, 15), kAt(10, 45))) {  // $1
    lines.push_back(l);
  }
  lines.push_back(Line("acme", "a100", kAt(11, 0), 5));   // another period
  lines.push_back(Line("acme", "other", kAt(10, 0), 7));  // another pool
  // 8 GPUs and 64 cores all hour: paid 8 × $2 (CPU is free here).
  PoolPeriod pp{
      "a100", false, kAt(10, 0), {{kAt(9, 0), kAt(12, 0), 8, 64'000, 0}}};
  absl::StatusOr<IdleLine> idle = ComputeIdle(book, pp, lines, MeterOptions{});
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_FALSE(idle->reserved);
  EXPECT_EQ(idle->paid_micros, 16'000'000);
  EXPECT_EQ(idle->allocated_micros, 5'000'000);
  EXPECT_EQ(idle->idle_micros, 11'000'000);
  EXPECT_EQ(idle->allocated_micros + idle->idle_micros, idle->paid_micros);

  // Shared by allocated cost 4 : 1.
  std::vector<IdleShare> shares = ShareIdle(*idle, lines);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].tenant, "acme");
  EXPECT_EQ(shares[0].micros, 8'800'000);
  EXPECT_EQ(shares[1].tenant, "bolt");
  EXPECT_EQ(shares[1].micros, 2'200'000);

  // A node added at 10:30: 4 GPUs for the first half, 8 for the second.
  pp.held = {{kAt(10, 0), kAt(10, 30), 4, 0, 0},
             {kAt(10, 30), kAt(11, 0), 8, 0, 0}};
  idle = ComputeIdle(book, pp, lines, MeterOptions{});
  EXPECT_EQ(idle->paid_micros, 12'000'000);
  EXPECT_EQ(idle->idle_micros, 7'000'000);
}

TEST(IdleTest, SpotPoolCapacityInAGapIsFlagged) {
  PriceBook book = Book();
  ASSERT_TRUE(book.AddSpotPrice({"s", {1'000'000, ""}, kAt(6, 0)}, kNov).ok());
  absl::StatusOr<IdleLine> idle = ComputeIdle(
      book, {"s", true, kAt(7, 0), {{kAt(7, 0), kAt(8, 0), 2, 0, 0}}}, {},
      MeterOptions{});
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_FALSE(idle->spot_price_gap);
  EXPECT_EQ(idle->paid_micros, 2'000'000);
  idle = ComputeIdle(book,
                     {"s", true, kAt(8, 0), {{kAt(8, 0), kAt(9, 0), 2, 0, 0}}},
                     {}, MeterOptions{});
  EXPECT_TRUE(idle->spot_price_gap);  // stale after 08:00, carried forward
  EXPECT_EQ(idle->paid_micros, 2'000'000);
}

TEST(IdleTest, ShareIdleUsesLargestRemainders) {
  IdleLine idle;
  idle.pool = "p";
  idle.period_start = kAt(1, 0);
  idle.idle_micros = 10;
  std::vector<LedgerLine> lines = {
      Line("c", "p", kAt(1, 0), 5), Line("a", "p", kAt(1, 0), 5),
      Line("b", "p", kAt(1, 0), 3), Line("b", "p", kAt(1, 0), 2)};
  // 10/3 each: 3, 3, 3 and one micro left over, to the smallest tenant id.
  std::vector<IdleShare> shares = ShareIdle(idle, lines);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_EQ(shares[0].tenant, "a");
  EXPECT_EQ(shares[0].micros, 4);
  EXPECT_EQ(shares[1].micros, 3);
  EXPECT_EQ(shares[2].micros, 3);
  // Weights 1 : 2 : 7 of 11 micros: exact 1.1, 2.2, 7.7 -> 1, 2, 7 and the
  // left-over micro to the largest remainder (0.7, tenant z).
  lines = {Line("x", "p", kAt(1, 0), 1), Line("y", "p", kAt(1, 0), 2),
           Line("z", "p", kAt(1, 0), 7)};
  idle.idle_micros = 11;
  shares = ShareIdle(idle, lines);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_EQ(shares[0].micros, 1);
  EXPECT_EQ(shares[1].micros, 2);
  EXPECT_EQ(shares[2].micros, 8);
  // Negative idle (over-recovery) is shared the same way.
  idle.idle_micros = -11;
  shares = ShareIdle(idle, lines);
  EXPECT_EQ(shares[0].micros + shares[1].micros + shares[2].micros, -11);
  EXPECT_EQ(shares[2].micros, -8);
  // Nothing allocated: nothing to share by.
  EXPECT_TRUE(ShareIdle(idle, {}).empty());
}

TEST(IdleTest, BadPoolPeriodNamesTheField) {
  PriceBook book = Book();
  absl::StatusOr<IdleLine> idle =
      ComputeIdle(book, {"", false, kAt(1, 0), {}}, {}, {});
  EXPECT_EQ(domain::ErrorField(idle.status()), "pool_period.pool");
  idle = ComputeIdle(book, {"p", false, kAt(1, 0) + 1, {}}, {}, {});
  EXPECT_EQ(domain::ErrorField(idle.status()), "pool_period.period_start");
  idle = ComputeIdle(
      book, {"p", false, kAt(1, 0), {{kAt(1, 0), kAt(2, 0), -1, 0, 0}}}, {},
      {});
  EXPECT_EQ(domain::ErrorField(idle.status()), "pool_period.held[0]");
  // Capacity with no price: an error, not a free pool.
  idle = ComputeIdle(
      book, {"p", false, kAt(1, 0), {{kAt(1, 0), kAt(2, 0), 1, 0, 0}}}, {}, {});
  EXPECT_EQ(idle.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace trainyard::accounting::pricing::idle_test
