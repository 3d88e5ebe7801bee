// The worked example of docs/accounting.md, figure by figure: if this test
// changes, the document changes with it.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/accounting/pricing/idle.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"

namespace trainyard::accounting::pricing::worked_example_test {
namespace {

constexpr TimeMs kNov = 1'793'491'200'000;    // 2026-11-01T00:00:00Z
constexpr TimeMs kDay = 2 * 24 * kMsPerHour;  // 2026-11-03
constexpr TimeMs kAt(int h, int m, int s = 0, int ms = 0) {
  return kNov + kDay + h * kMsPerHour + m * 60'000 + s * 1000 + ms;
}
constexpr int64_t kGiB = int64_t{1} << 30;

struct Figures {
  std::vector<int64_t> costs;
  int64_t tenant = 0;
  int64_t platform = 0;
  int64_t lost_gpu_ms = 0;
  int64_t total = 0;
};

Figures Of(const std::vector<LedgerLine>& lines) {
  Figures f;
  for (const LedgerLine& l : lines) f.costs.push_back(l.cost_micros);
  absl::StatusOr<LineTotals> t = SumLines(lines);
  EXPECT_TRUE(t.ok());
  f.tenant = t->tenant_cost_micros;
  f.platform = t->platform_cost_micros;
  f.lost_gpu_ms = t->lost_gpu_ms;
  f.total = t->cost_micros;
  return f;
}

TEST(WorkedExampleTest, TheFiguresOfTheDocument) {
  absl::StatusOr<PriceBook> created = PriceBook::Create("USD");
  ASSERT_TRUE(created.ok());
  PriceBook& book = *created;
  const TimeMs open = kNov;  // October is closed
  ASSERT_TRUE(
      book.AddRate({"a100", Resource::kGpu, {2'000'000, "USD"}, kNov}, open)
          .ok());
  ASSERT_TRUE(
      book.AddRate({"a100", Resource::kGpu, {3'000'000, "USD"}, kAt(10, 30)},
                   open)
          .ok());
  ASSERT_TRUE(
      book.AddRate({"a100", Resource::kCpu, {40'000, "USD"}, kNov}, open).ok());
  ASSERT_TRUE(
      book.AddRate({"a100", Resource::kMemory, {5'000, "USD"}, kNov}, open)
          .ok());
  ASSERT_TRUE(
      book.AddSpotPrice({"a100-spot", {950'000, "USD"}, kAt(8, 0)}, open).ok());

  MeterOptions options;  // spot prices fresh for 2 h
  options.lost_work_rule = LostWorkRule::kSplit;
  options.split_tenant_percent = 30;

  // Job A: acme, 2 workers × (4 GPUs, 16 cores, 64 GiB), 10:00-11:15.
  AttemptUsage a;
  a.keys = {.tenant = "acme", .flavor = "a100", .job = "a", .attempt = 1};
  a.workers = 2;
  a.gpus_per_worker = 4;
  a.cpu_millis_per_worker = 16'000;
  a.memory_bytes_per_worker = 64 * kGiB;
  a.start_time = kAt(10, 0);
  a.end_time = kAt(11, 15);
  a.end_reason = EndReason::kCompleted;
  absl::StatusOr<std::vector<LedgerLine>> a_lines =
      MeterAttempt(book, a, 0, options);
  ASSERT_TRUE(a_lines.ok());
  Figures fa = Of(*a_lines);
  EXPECT_EQ(fa.costs,
            (std::vector<int64_t>{8'000'000, 12'000'000, 6'000'000, 1'280'000,
                                  320'000, 640'000, 160'000}));
  EXPECT_EQ(fa.total, 28'400'000);

  // Job B: bolt, 2 spot GPUs, 09:20 to a reclaim at 10:52:30.800, last
  // checkpoint 10:40.
  AttemptUsage b;
  b.keys = {.tenant = "bolt", .flavor = "a100-spot", .job = "b", .attempt = 1};
  b.spot = true;
  b.gpus_per_worker = 2;
  b.start_time = kAt(9, 20);
  b.end_time = kAt(10, 52, 30, 800);
  b.last_checkpoint_time = kAt(10, 40);
  b.end_reason = EndReason::kSpotReclaim;
  absl::StatusOr<std::vector<LedgerLine>> b_lines =
      MeterAttempt(book, b, 0, options);
  ASSERT_TRUE(b_lines.ok());
  ASSERT_EQ(b_lines->size(), 3u);
  EXPECT_EQ((*b_lines)[0].price_source, PriceSource::kSpot);
  EXPECT_EQ((*b_lines)[1].price_source, PriceSource::kSpotGapCarryForward);
  EXPECT_TRUE((*b_lines)[1].spot_price_gap);
  EXPECT_TRUE((*b_lines)[2].lost_work);
  EXPECT_EQ((*b_lines)[2].start, kAt(10, 40));
  Figures fb = Of(*b_lines);
  EXPECT_EQ(fb.costs, (std::vector<int64_t>{1'266'667, 1'266'667, 396'256}));
  EXPECT_EQ(fb.total, 2'929'590);
  EXPECT_EQ(fb.lost_gpu_ms, 1'501'600);
  EXPECT_EQ((*b_lines)[2].tenant_cost_micros, 118'877);
  EXPECT_EQ((*b_lines)[2].platform_cost_micros, 277'379);
  EXPECT_EQ(fb.tenant, 2'652'211);
  EXPECT_EQ(fb.platform, 277'379);

  // Job C: cobalt, 1 GPU, 10:45-11:00.
  AttemptUsage c;
  c.keys = {.tenant = "cobalt", .flavor = "a100", .job = "c", .attempt = 1};
  c.gpus_per_worker = 1;
  c.start_time = kAt(10, 45);
  c.end_time = kAt(11, 0);
  c.end_reason = EndReason::kCompleted;
  absl::StatusOr<std::vector<LedgerLine>> c_lines =
      MeterAttempt(book, c, 0, options);
  ASSERT_TRUE(c_lines.ok());
  EXPECT_EQ(Of(*c_lines).costs, (std::vector<int64_t>{750'000}));

  // Idle of a100 in 10:00-11:00: 16 GPUs, 64 cores, 512 GiB held.
  std::vector<LedgerLine> all = *a_lines;
  all.insert(all.end(), b_lines->begin(), b_lines->end());
  all.insert(all.end(), c_lines->begin(), c_lines->end());
  absl::StatusOr<IdleLine> idle =
      ComputeIdle(book,
                  {"a100",
                   false,
                   kAt(10, 0),
                   {{kAt(0, 0), kAt(23, 0), 16, 64'000, 512 * kGiB}}},
                  all, options);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(idle->paid_micros, 45'120'000);
  EXPECT_EQ(idle->allocated_micros, 22'670'000);
  EXPECT_EQ(idle->idle_micros, 22'450'000);
  std::vector<IdleShare> shares = ShareIdle(*idle, all);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].tenant, "acme");
  EXPECT_EQ(shares[0].micros, 21'707'278);
  EXPECT_EQ(shares[1].tenant, "cobalt");
  EXPECT_EQ(shares[1].micros, 742'722);

  // A reserved pool: $7,200 committed for November (720 h) is $10 an hour.
  ASSERT_TRUE(
      book.AddCommitment(
              {"h100", {7'200'000'000, "USD"}, kNov, kNov + 720 * kMsPerHour},
              open)
          .ok());
  idle = ComputeIdle(book, {"h100", false, kAt(10, 0), {}}, all, options);
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(idle->paid_micros, 10'000'000);
  EXPECT_EQ(idle->idle_micros, 10'000'000);
}

}  // namespace
}  // namespace trainyard::accounting::pricing::worked_example_test
