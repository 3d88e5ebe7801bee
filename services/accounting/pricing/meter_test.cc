#include "services/accounting/pricing/meter.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing::meter_test {
namespace {

using ::testing::ElementsAre;

// 2026-11-01T00:00:00Z, the first open month; kAt(h, m, s, ms) is that day.
constexpr TimeMs kNov = 1'793'491'200'000;
constexpr TimeMs kH = kMsPerHour;
constexpr TimeMs kMin = 60'000;
constexpr TimeMs kAt(int h, int m, int s = 0, int ms = 0) {
  return kNov + h * kH + m * kMin + s * 1000 + ms;
}
constexpr int64_t kGiB = int64_t{1} << 30;

PriceBook Book() {
  absl::StatusOr<PriceBook> book = PriceBook::Create("USD");
  EXPECT_TRUE(book.ok()) << book.status();
  return *std::move(book);
}

void AddRate(PriceBook& book, const std::string& flavor, Resource r,
             int64_t micros, TimeMs t) {
  absl::Status st = book.AddRate({flavor, r, {micros, ""}, t}, kNov);
  ASSERT_TRUE(st.ok()) << st;
}

void AddSpot(PriceBook& book, const std::string& flavor, int64_t micros,
             TimeMs t) {
  absl::Status st = book.AddSpotPrice({flavor, {micros, ""}, t}, kNov);
  ASSERT_TRUE(st.ok()) << st;
}

AttemptUsage Usage(std::string flavor, int64_t gpus, TimeMs start,
                   std::optional<TimeMs> end,
                   EndReason reason = EndReason::kCompleted) {
  AttemptUsage u;
  u.keys.tenant = "acme";
  u.keys.project = "vision";
  u.keys.user = "ana";
  u.keys.queue = "research";
  u.keys.cluster = "east";
  u.keys.flavor = std::move(flavor);
  u.keys.job = "tenants/acme/jobs/j1";
  u.keys.attempt = 1;
  u.gpus_per_worker = gpus;
  u.start_time = start;
  u.end_time = end;
  u.end_reason = end.has_value() ? reason : EndReason::kRunning;
  return u;
}

std::vector<LedgerLine> Meter(const PriceBook& book, const AttemptUsage& u,
                              TimeMs now = kMaxTimeMs - 1,
                              const MeterOptions& options = {}) {
  absl::StatusOr<std::vector<LedgerLine>> lines =
      MeterAttempt(book, u, now, options);
  EXPECT_TRUE(lines.ok()) << lines.status();
  return lines.ok() ? *lines : std::vector<LedgerLine>{};
}

// "GPU 10:00:00.000-10:30:00.000 x8 @2000000 = 8000000 [flags]" with times
// relative to kNov.
std::string Clock(TimeMs t) {
  const TimeMs d = t - kNov;
  return absl::StrFormat("%02d:%02d:%02d.%03d", d / kH, d % kH / kMin,
                         d % kMin / 1000, d % 1000);
}
std::string Describe(const LedgerLine& l) {
  std::string out = domain::Cat(ResourceLabel(l.resource), " ", Clock(l.start),
                                "-", Clock(l.end), " x", l.amount, " @",
                                l.unit_price_micros, " = ", l.cost_micros);
  if (l.spot_price_gap) out += domain::Cat(" gap");
  if (l.price_source != PriceSource::kRate) {
    out += domain::Cat(" ", PriceSourceLabel(l.price_source));
  }
  if (l.lost_work) {
    out += domain::Cat(" lost(tenant ", l.tenant_cost_micros, ", platform ",
                       l.platform_cost_micros, ")");
  }
  if (l.open) out += domain::Cat(" open");
  return out;
}
std::vector<std::string> Describe(const std::vector<LedgerLine>& lines) {
  std::vector<std::string> out;
  for (const LedgerLine& l : lines) out.push_back(Describe(l));
  return out;
}

int64_t Total(const std::vector<LedgerLine>& lines) {
  absl::StatusOr<LineTotals> t = SumLines(lines);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? t->cost_micros : -1;
}

TEST(MeterTest, RateChangeInTheMiddleOfAJobAndHourBoundaries) {
  PriceBook book = Book();
  AddRate(book, "a100", Resource::kGpu, 2'000'000, kNov);         // $2/GPU-h
  AddRate(book, "a100", Resource::kGpu, 3'000'000, kAt(10, 30));  // then $3
  AddRate(book, "a100", Resource::kCpu, 40'000, kNov);    // $0.04/core-h
  AddRate(book, "a100", Resource::kMemory, 5'000, kNov);  // $0.005/GiB-h
  AttemptUsage u = Usage("a100", 4, kAt(10, 0), kAt(11, 15));
  u.workers = 2;
  u.cpu_millis_per_worker = 16'000;       // 32 cores in all
  u.memory_bytes_per_worker = 64 * kGiB;  // 128 GiB in all
  std::vector<LedgerLine> lines = Meter(book, u);
  // 8 GPUs: 0.5 h × $2 × 8 = $8; 0.5 h × $3 × 8 = $12; 0.25 h × $3 × 8 = $6.
  // 32 cores × $0.04: 1 h = $1.28, 0.25 h = $0.32.
  // 128 GiB × $0.005: 1 h = $0.64, 0.25 h = $0.16.
  EXPECT_THAT(
      Describe(lines),
      ElementsAre("GPU 10:00:00.000-10:30:00.000 x8 @2000000 = 8000000",
                  "GPU 10:30:00.000-11:00:00.000 x8 @3000000 = 12000000",
                  "GPU 11:00:00.000-11:15:00.000 x8 @3000000 = 6000000",
                  "CPU 10:00:00.000-11:00:00.000 x32000 @40000 = 1280000",
                  "CPU 11:00:00.000-11:15:00.000 x32000 @40000 = 320000",
                  "MEMORY 10:00:00.000-11:00:00.000 x137438953472 @5000 = "
                  "640000",
                  "MEMORY 11:00:00.000-11:15:00.000 x137438953472 @5000 = "
                  "160000"));
  EXPECT_EQ(Total(lines), 28'400'000);  // $28.40
  EXPECT_EQ(lines[0].period_start, kAt(10, 0));
  EXPECT_EQ(lines[1].period_start, kAt(10, 0));
  EXPECT_EQ(lines[2].period_start, kAt(11, 0));
  EXPECT_EQ(lines[0].keys.project, "vision");
  EXPECT_EQ(LineKey(lines[1]),
            domain::Cat("tenants/acme/jobs/j1/1/GPU/", kAt(10, 30)));
  EXPECT_EQ(Quantity(lines[5]), static_cast<__int128>(128 * kGiB) * kH);
  for (const LedgerLine& l : lines) {
    EXPECT_FALSE(l.lost_work);
    EXPECT_FALSE(l.open);
    EXPECT_EQ(l.tenant_cost_micros, l.cost_micros);
    EXPECT_EQ(l.platform_cost_micros, 0);
  }
}

TEST(MeterTest, EachLineIsRoundedOnceHalfToEven) {
  PriceBook book = Book();
  AddRate(book, "a", Resource::kGpu, 2'500'000, kNov);  // $2.50/GPU-h
  // 09:59:59 to 10:00:01.5 on one GPU: 1000 ms = 694.44 micro -> 694, and
  // 1500 ms = 1041.67 -> 1042. Total 1736 (the unsplit 2500 ms would be
  // 1736.11: lines are what is billed).
  std::vector<LedgerLine> lines =
      Meter(book, Usage("a", 1, kAt(9, 59, 59), kAt(10, 0, 1, 500)));
  EXPECT_THAT(Describe(lines),
              ElementsAre("GPU 09:59:59.000-10:00:00.000 x1 @2500000 = 694",
                          "GPU 10:00:00.000-10:00:01.500 x1 @2500000 = 1042"));
  EXPECT_EQ(Total(lines), 1736);

  // Ties: 1 micro per GPU-hour for half an hour on 1, 3 and 5 GPUs is 0.5,
  // 1.5 and 2.5 micro: 0, 2 and 2.
  PriceBook tiny = Book();
  AddRate(tiny, "t", Resource::kGpu, 1, kNov);
  for (auto [gpus, want] :
       {std::pair<int64_t, int64_t>{1, 0}, {3, 2}, {5, 2}, {7, 4}}) {
    std::vector<LedgerLine> l =
        Meter(tiny, Usage("t", gpus, kAt(3, 0), kAt(3, 30)));
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0].cost_micros, want) << gpus << " GPUs";
  }
}

TEST(MeterTest, ReclaimAfterEightHundredMillisecondsLosesEightHundredGpuMs) {
  PriceBook book = Book();
  AddSpot(book, "a100-spot", 1'800'000, kAt(9, 0));  // $1.80/GPU-h, fresh
  AttemptUsage u = Usage("a100-spot", 1, kAt(10, 0), kAt(10, 0, 0, 800),
                         EndReason::kSpotReclaim);
  u.spot = true;
  std::vector<LedgerLine> lines = Meter(book, u);
  // 1,800,000 × 800 / 3,600,000 = 400 micro exactly.
  EXPECT_THAT(Describe(lines),
              ElementsAre("GPU 10:00:00.000-10:00:00.800 x1 @1800000 = 400 "
                          "SPOT lost(tenant 400, platform 0)"));
  absl::StatusOr<LineTotals> t = SumLines(lines);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->gpu_ms, 800);
  EXPECT_EQ(t->lost_gpu_ms, 800);
  EXPECT_EQ(t->lost_work_cost_micros, 400);
  EXPECT_FALSE(t->spot_price_gap);
}

TEST(MeterTest, LostWorkStartsAtTheLastCheckpoint) {
  PriceBook book = Book();
  AddRate(book, "a", Resource::kGpu, 2'000'000, kNov);
  AttemptUsage u =
      Usage("a", 2, kAt(10, 0), kAt(11, 10), EndReason::kNodeFailure);
  u.last_checkpoint_time = kAt(10, 40);
  std::vector<LedgerLine> lines = Meter(book, u);
  // 2 GPUs × $2: 40 min = 2.666667, 20 min = 1.333333, 10 min = 0.666667.
  EXPECT_THAT(
      Describe(lines),
      ElementsAre(
          "GPU 10:00:00.000-10:40:00.000 x2 @2000000 = 2666667",
          "GPU 10:40:00.000-11:00:00.000 x2 @2000000 = 1333333 lost(tenant "
          "1333333, platform 0)",
          "GPU 11:00:00.000-11:10:00.000 x2 @2000000 = 666667 lost(tenant "
          "666667, platform 0)"));
  absl::StatusOr<LineTotals> t = SumLines(lines);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->lost_gpu_ms, 2 * 30 * kMin);
  EXPECT_EQ(t->lost_work_cost_micros, 2'000'000);
  EXPECT_EQ(t->cost_micros, 4'666'667);

  // A checkpoint before the start counts from the start; after the end, no
  // work is lost.
  u.last_checkpoint_time = kAt(9, 0);
  t = SumLines(Meter(book, u));
  EXPECT_EQ(t->lost_gpu_ms, 2 * 70 * kMin);
  u.last_checkpoint_time = kAt(12, 0);
  t = SumLines(Meter(book, u));
  EXPECT_EQ(t->lost_gpu_ms, 0);
  // Preemption is lost work too; user errors and cancellations are not.
  u.last_checkpoint_time.reset();
  for (auto [reason, lost] : {std::pair{EndReason::kPreemption, 2 * 70 * kMin},
                              std::pair{EndReason::kSpotReclaim, 2 * 70 * kMin},
                              std::pair{EndReason::kUserError, TimeMs{0}},
                              std::pair{EndReason::kCancelled, TimeMs{0}},
                              std::pair{EndReason::kCompleted, TimeMs{0}}}) {
    u.end_reason = reason;
    t = SumLines(Meter(book, u));
    EXPECT_EQ(t->lost_gpu_ms, lost) << static_cast<int>(reason);
    EXPECT_EQ(t->cost_micros, 4'666'667);
  }
}

TEST(MeterTest, LostWorkRules) {
  PriceBook book = Book();
  AddRate(book, "a", Resource::kGpu, 3'600'000, kNov);  // 1 micro per GPU-ms
  AttemptUsage u =
      Usage("a", 1, kAt(10, 0), kAt(10, 0, 3, 1), EndReason::kSpotReclaim);
  u.last_checkpoint_time = kAt(10, 0, 2);  // 1001 ms lost
  MeterOptions options;
  options.lost_work_rule = LostWorkRule::kSplit;
  options.split_tenant_percent = 50;
  // 1001 × 50 % = 500.5 -> 500 (even); the platform gets the other 501.
  EXPECT_THAT(Describe(Meter(book, u, 0, options)),
              ElementsAre("GPU 10:00:00.000-10:00:02.000 x1 @3600000 = 2000",
                          "GPU 10:00:02.000-10:00:03.001 x1 @3600000 = 1001 "
                          "lost(tenant 500, platform 501)"));
  options.split_tenant_percent = 33;  // 330.33 -> 330, 671
  std::vector<LedgerLine> lines = Meter(book, u, 0, options);
  EXPECT_EQ(lines[1].tenant_cost_micros, 330);
  EXPECT_EQ(lines[1].platform_cost_micros, 671);
  options.split_tenant_percent = 0;
  lines = Meter(book, u, 0, options);
  EXPECT_EQ(lines[1].tenant_cost_micros, 0);
  EXPECT_EQ(lines[1].platform_cost_micros, 1001);
  options.lost_work_rule = LostWorkRule::kPlatform;
  lines = Meter(book, u, 0, options);
  EXPECT_EQ(lines[1].tenant_cost_micros, 0);
  EXPECT_EQ(lines[1].platform_cost_micros, 1001);
  EXPECT_EQ(lines[0].tenant_cost_micros, 2000);  // not lost: the tenant's
  options.lost_work_rule = LostWorkRule::kTenant;
  lines = Meter(book, u, 0, options);
  EXPECT_EQ(lines[1].tenant_cost_micros, 1001);
  EXPECT_EQ(lines[1].platform_cost_micros, 0);
  // Every percent: parts are exact and sum to the line.
  options.lost_work_rule = LostWorkRule::kSplit;
  for (int p = 0; p <= 100; ++p) {
    options.split_tenant_percent = p;
    for (const LedgerLine& l : Meter(book, u, 0, options)) {
      EXPECT_EQ(l.tenant_cost_micros + l.platform_cost_micros, l.cost_micros);
      EXPECT_GE(l.platform_cost_micros, 0);
    }
  }
}

TEST(MeterTest, SpotGapIsPricedByCarryForwardAndFlagged) {
  PriceBook book = Book();
  AddSpot(book, "s", 1'000'000, kAt(8, 0));    // fresh until 10:00
  AddSpot(book, "s", 2'000'000, kAt(11, 15));  // fresh until 13:15
  AttemptUsage u = Usage("s", 1, kAt(9, 30), kAt(11, 30));
  u.spot = true;
  std::vector<LedgerLine> lines = Meter(book, u);
  EXPECT_THAT(
      Describe(lines),
      ElementsAre("GPU 09:30:00.000-10:00:00.000 x1 @1000000 = 500000 SPOT",
                  "GPU 10:00:00.000-11:00:00.000 x1 @1000000 = 1000000 gap "
                  "SPOT_GAP_CARRY_FORWARD",
                  "GPU 11:00:00.000-11:15:00.000 x1 @1000000 = 250000 gap "
                  "SPOT_GAP_CARRY_FORWARD",
                  "GPU 11:15:00.000-11:30:00.000 x1 @2000000 = 500000 SPOT"));
  absl::StatusOr<LineTotals> t = SumLines(lines);
  EXPECT_TRUE(t->spot_price_gap);

  // Before the first observation: the first later one, flagged.
  u.start_time = kAt(7, 30);
  u.end_time = kAt(8, 30);
  EXPECT_THAT(
      Describe(Meter(book, u)),
      ElementsAre("GPU 07:30:00.000-08:00:00.000 x1 @1000000 = 500000 gap "
                  "SPOT_GAP_FIRST_LATER",
                  "GPU 08:00:00.000-08:30:00.000 x1 @1000000 = 500000 SPOT"));

  // A shorter max age makes the same observations stale sooner.
  MeterOptions options;
  options.spot_max_age_ms = 10 * kMin;
  EXPECT_THAT(
      Describe(Meter(book, u, 0, options)),
      ElementsAre("GPU 07:30:00.000-08:00:00.000 x1 @1000000 = 500000 gap "
                  "SPOT_GAP_FIRST_LATER",
                  "GPU 08:00:00.000-08:10:00.000 x1 @1000000 = 166667 SPOT",
                  "GPU 08:10:00.000-08:30:00.000 x1 @1000000 = 333333 gap "
                  "SPOT_GAP_CARRY_FORWARD"));

  // A pool without spot prices: its on-demand GPU rate, always flagged; CPU
  // of a spot attempt is priced by the flavor's CPU rate, not flagged.
  PriceBook no_spot = Book();
  AddRate(no_spot, "s", Resource::kGpu, 4'000'000, kNov);
  AddRate(no_spot, "s", Resource::kCpu, 10'000, kNov);
  u.cpu_millis_per_worker = 1000;
  EXPECT_THAT(
      Describe(Meter(no_spot, u)),
      ElementsAre("GPU 07:30:00.000-08:00:00.000 x1 @4000000 = 2000000 gap "
                  "SPOT_GAP_ON_DEMAND",
                  "GPU 08:00:00.000-08:30:00.000 x1 @4000000 = 2000000 gap "
                  "SPOT_GAP_ON_DEMAND",
                  "CPU 07:30:00.000-08:00:00.000 x1000 @10000 = 5000",
                  "CPU 08:00:00.000-08:30:00.000 x1000 @10000 = 5000"));
  // And neither spot prices nor a rate: an error, never a silent zero.
  PriceBook empty = Book();
  absl::StatusOr<std::vector<LedgerLine>> none =
      MeterAttempt(empty, u, 0, MeterOptions{});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(none.status().message(), "GPU rate of flavor s"))
      << none.status();
}

TEST(MeterTest, RunningAttemptIsMeteredUpToNowAndItsLastLineIsOpen) {
  PriceBook book = Book();
  AddRate(book, "a", Resource::kGpu, 3'600'000, kNov);
  AttemptUsage u = Usage("a", 1, kAt(10, 59), std::nullopt);
  EXPECT_THAT(Describe(Meter(book, u, kAt(10, 59, 30))),
              ElementsAre("GPU 10:59:00.000-10:59:30.000 x1 @3600000 = 30000 "
                          "open"));
  EXPECT_THAT(Describe(Meter(book, u, kAt(11, 0, 30))),
              ElementsAre("GPU 10:59:00.000-11:00:00.000 x1 @3600000 = 60000",
                          "GPU 11:00:00.000-11:00:30.000 x1 @3600000 = 30000 "
                          "open"));
  EXPECT_TRUE(Meter(book, u, kAt(10, 0)).empty());  // now before the start
}

// Upsert by key, as the ledger does.
void Upsert(std::map<std::string, LedgerLine>& ledger,
            const std::vector<LedgerLine>& lines) {
  for (const LedgerLine& l : lines) ledger[LineKey(l)] = l;
}

TEST(MeterTest, MeteringAgainIsIdempotentAndOnlyTheOpenLineGrows) {
  PriceBook book = Book();
  AddRate(book, "a", Resource::kGpu, 2'000'000, kNov);
  AddRate(book, "a", Resource::kGpu, 2'100'000, kAt(12, 20));
  AddRate(book, "a", Resource::kCpu, 30'000, kNov);
  AttemptUsage running = Usage("a", 2, kAt(10, 17, 3, 9), std::nullopt);
  running.cpu_millis_per_worker = 1500;
  AttemptUsage ended = running;
  ended.end_time = kAt(13, 5, 0, 1);
  ended.end_reason = EndReason::kSpotReclaim;
  ended.last_checkpoint_time = kAt(12, 50);

  // Every 60 s while it runs, then once when it has ended.
  std::map<std::string, LedgerLine> ledger;
  std::vector<LedgerLine> previous;
  for (TimeMs now = kAt(10, 17); now < *ended.end_time; now += kMin) {
    std::vector<LedgerLine> lines = Meter(book, running, now);
    // Lines closed before reappear unchanged.
    std::map<std::string, std::string> by_key;
    for (const LedgerLine& l : lines) by_key[LineKey(l)] = Describe(l);
    for (const LedgerLine& l : previous) {
      if (l.open) continue;
      EXPECT_EQ(by_key[LineKey(l)], Describe(l));
    }
    Upsert(ledger, lines);
    Upsert(ledger, lines);  // a second pass changes nothing
    previous = lines;
  }
  Upsert(ledger, Meter(book, ended));
  // The ledger equals metering the ended attempt once. (A running pass
  // cannot know about the lost-work cut at the checkpoint: its line that
  // spans 12:50 keeps its key, 12:20, and is replaced by the final pass.)
  std::vector<LedgerLine> once = Meter(book, ended);
  std::vector<std::string> want = Describe(once);
  std::vector<std::string> got;
  for (const auto& [key, l] : ledger) got.push_back(Describe(l));
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(ledger.size(), once.size());
}

TEST(MeterTest, BadUsageNamesTheField) {
  PriceBook book = Book();
  AddRate(book, "a", Resource::kGpu, 1, kNov);
  struct Case {
    std::function<void(AttemptUsage&, MeterOptions&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](AttemptUsage& u, MeterOptions&) { u.keys.tenant.clear(); },
       "usage.keys.tenant"},
      {[](AttemptUsage& u, MeterOptions&) { u.keys.flavor.clear(); },
       "usage.keys.flavor"},
      {[](AttemptUsage& u, MeterOptions&) { u.keys.job.clear(); },
       "usage.keys.job"},
      {[](AttemptUsage& u, MeterOptions&) { u.keys.attempt = -1; },
       "usage.keys.attempt"},
      {[](AttemptUsage& u, MeterOptions&) { u.workers = 0; }, "usage.workers"},
      {[](AttemptUsage& u, MeterOptions&) { u.gpus_per_worker = -1; },
       "usage.gpus_per_worker"},
      {[](AttemptUsage& u, MeterOptions&) { u.cpu_millis_per_worker = -1; },
       "usage.cpu_millis_per_worker"},
      {[](AttemptUsage& u, MeterOptions&) { u.memory_bytes_per_worker = -1; },
       "usage.memory_bytes_per_worker"},
      {[](AttemptUsage& u, MeterOptions&) {
         u.memory_bytes_per_worker = INT64_MAX / 2;
         u.workers = 3;
       },
       "usage.memory_bytes_per_worker"},
      {[](AttemptUsage& u, MeterOptions&) { u.start_time = -1; },
       "usage.start_time"},
      {[](AttemptUsage& u, MeterOptions&) { u.end_time = u.start_time - 1; },
       "usage.end_time"},
      {[](AttemptUsage& u, MeterOptions&) { u.end_time.reset(); },
       "usage.end_time"},
      {[](AttemptUsage& u, MeterOptions&) {
         u.end_reason = EndReason::kRunning;
       },
       "usage.end_time"},
      {[](AttemptUsage& u, MeterOptions&) {
         u.end_reason = static_cast<EndReason>(42);
       },
       "usage.end_reason"},
      {[](AttemptUsage& u, MeterOptions&) { u.last_checkpoint_time = -5; },
       "usage.last_checkpoint_time"},
      {[](AttemptUsage&, MeterOptions& o) { o.spot_max_age_ms = 0; },
       "options.spot_max_age_ms"},
      {[](AttemptUsage&, MeterOptions& o) {
         o.lost_work_rule = LostWorkRule::kSplit;
         o.split_tenant_percent = 101;
       },
       "options.split_tenant_percent"},
      {[](AttemptUsage&, MeterOptions& o) {
         o.lost_work_rule = static_cast<LostWorkRule>(9);
       },
       "options.lost_work_rule"},
  };
  for (const Case& c : cases) {
    AttemptUsage u = Usage("a", 1, kAt(1, 0), kAt(2, 0));
    MeterOptions options;
    c.edit(u, options);
    absl::StatusOr<std::vector<LedgerLine>> lines =
        MeterAttempt(book, u, kAt(3, 0), options);
    ASSERT_FALSE(lines.ok()) << c.field;
    EXPECT_EQ(lines.status().code(), absl::StatusCode::kInvalidArgument)
        << c.field;
    EXPECT_EQ(domain::ErrorField(lines.status()), c.field) << lines.status();
  }
}

TEST(MeterTest, HugeAmountsAreExactOrOutOfRange) {
  PriceBook book = Book();
  AddRate(book, "m", Resource::kMemory, 1'000, kNov);  // $0.001 per GiB-hour
  AddRate(book, "m", Resource::kGpu, kMaxPricePerUnitHourMicros, kNov);
  // 1024 workers × 1 TiB for an hour: 2^50 bytes × 3.6e6 ms does not fit in
  // int64 byte-ms, but the cost is exact: 2^20 GiB-h × 1000 = 1,048,576,000.
  AttemptUsage u = Usage("m", 0, kAt(1, 0), kAt(2, 0));
  u.workers = 1024;
  u.memory_bytes_per_worker = int64_t{1} << 40;
  std::vector<LedgerLine> lines = Meter(book, u);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].cost_micros, 1'048'576'000);
  EXPECT_EQ(Quantity(lines[0]), static_cast<__int128>(int64_t{1} << 50) * kH);
  // 10^7 GPUs for an hour at the largest price overflows int64 micros.
  u.workers = 1;
  u.memory_bytes_per_worker = 0;
  u.gpus_per_worker = 10'000'000;
  absl::StatusOr<std::vector<LedgerLine>> big =
      MeterAttempt(book, u, 0, MeterOptions{});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kOutOfRange) << big.status();
}

TEST(MeterTest, LineCostMatchesMulDivOnSmallQuantities) {
  for (int64_t price : {0, 1, 7, 2'500'000, 999'999'999}) {
    for (int64_t amount : {1, 3, 1000}) {
      for (int64_t ms : {1, 999, 1800, 3'600'000}) {
        for (Resource r : kAllResources) {
          absl::StatusOr<int64_t> want = domain::MulDivRoundHalfEven(
              price, amount * ms, UnitMsPerUnitHour(r));
          absl::StatusOr<int64_t> got = LineCost(price, amount, ms, r);
          ASSERT_TRUE(got.ok());
          EXPECT_EQ(*got, *want);
        }
      }
    }
  }
}

}  // namespace
}  // namespace trainyard::accounting::pricing::meter_test
