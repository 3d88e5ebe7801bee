// Rollups: the cover of a window by the coarsest aligned UTC buckets, and
// reports summed from hour/day/month rollups of metered lines equal, field
// for field, BuildReport over the same lines (random windows, zones, steps,
// groupings, filters).
#include "services/accounting/pricing/rollup.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"
#include "services/accounting/pricing/report.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing::rollup_test {
namespace {

constexpr TimeMs kH = kMsPerHour;

TimeMs Utc(int y, int m, int d, int h) {
  return absl::ToUnixMillis(
      absl::FromCivil(absl::CivilHour(y, m, d, h), absl::UTCTimeZone()));
}

constexpr RollupGranularity kHour = RollupGranularity::kHour;
constexpr RollupGranularity kDay = RollupGranularity::kDay;
constexpr RollupGranularity kMonth = RollupGranularity::kMonth;

TEST(UtcBuckets, DayAndMonthStarts) {
  EXPECT_EQ(UtcDayStart(Utc(2026, 11, 3, 17) + 5), Utc(2026, 11, 3, 0));
  EXPECT_EQ(UtcMonthStart(Utc(2026, 11, 3, 17)), Utc(2026, 11, 1, 0));
  EXPECT_EQ(UtcMonthStart(Utc(2026, 11, 1, 0)), Utc(2026, 11, 1, 0));
  EXPECT_EQ(NextUtcMonthStart(Utc(2026, 12, 31, 23)), Utc(2027, 1, 1, 0));
  EXPECT_EQ(NextUtcMonthStart(Utc(2028, 2, 1, 0)), Utc(2028, 3, 1, 0));
}

TEST(CoverWithRollups, AWholeMonthIsOneBucket) {
  EXPECT_EQ(CoverWithRollups(Utc(2026, 11, 1, 0), Utc(2026, 12, 1, 0)),
            (std::vector<RollupRange>{
                {kMonth, Utc(2026, 11, 1, 0), Utc(2026, 12, 1, 0)}}));
}

TEST(CoverWithRollups, HoursThenDaysThenMonthsThenDaysThenHours) {
  const TimeMs start = Utc(2026, 10, 30, 5);
  const TimeMs end = Utc(2027, 1, 3, 2);
  EXPECT_EQ(CoverWithRollups(start, end),
            (std::vector<RollupRange>{
                {kHour, start, Utc(2026, 10, 31, 0)},
                {kDay, Utc(2026, 10, 31, 0), Utc(2026, 11, 1, 0)},
                {kMonth, Utc(2026, 11, 1, 0), Utc(2027, 1, 1, 0)},
                {kDay, Utc(2027, 1, 1, 0), Utc(2027, 1, 3, 0)},
                {kHour, Utc(2027, 1, 3, 0), end}}));
  // Inside one day: hours only; across midnight without a whole day: hours.
  EXPECT_EQ(CoverWithRollups(Utc(2026, 11, 3, 4), Utc(2026, 11, 3, 9)),
            (std::vector<RollupRange>{
                {kHour, Utc(2026, 11, 3, 4), Utc(2026, 11, 3, 9)}}));
  EXPECT_EQ(CoverWithRollups(Utc(2026, 11, 3, 20), Utc(2026, 11, 4, 3)),
            (std::vector<RollupRange>{
                {kHour, Utc(2026, 11, 3, 20), Utc(2026, 11, 4, 3)}}));
  EXPECT_TRUE(CoverWithRollups(5 * kH, 5 * kH).empty());
}

TEST(CoverWithRollups, RandomWindowsAreTiledByTheCoarsestBuckets) {
  std::mt19937_64 rng(7);
  const TimeMs base = Utc(2026, 1, 1, 0);
  for (int i = 0; i < 5000; ++i) {
    const TimeMs start =
        base + std::uniform_int_distribution<int64_t>(0, 400 * 24)(rng) * kH;
    const TimeMs end =
        start + std::uniform_int_distribution<int64_t>(1, 366 * 24)(rng) * kH;
    const std::vector<RollupRange> cover = CoverWithRollups(start, end);
    ASSERT_FALSE(cover.empty());
    TimeMs at = start;
    int hours = 0, days = 0, months = 0;
    for (const RollupRange& r : cover) {
      ASSERT_EQ(r.from, at);
      ASSERT_LT(r.from, r.to);
      switch (r.granularity) {
        case kHour:
          ++hours;
          ASSERT_EQ(r.from % kH, 0);
          ASSERT_EQ(r.to % kH, 0);
          // No whole UTC day inside an hour range.
          {
            const TimeMs d = UtcDayStart(r.from) == r.from
                                 ? r.from
                                 : UtcDayStart(r.from) + 24 * kH;
            ASSERT_GT(d + 24 * kH, r.to);
          }
          break;
        case kDay:
          ++days;
          ASSERT_EQ(UtcDayStart(r.from), r.from);
          ASSERT_EQ(UtcDayStart(r.to), r.to);
          // No whole UTC month inside a day range.
          {
            const TimeMs m = UtcMonthStart(r.from) == r.from
                                 ? r.from
                                 : NextUtcMonthStart(r.from);
            ASSERT_GT(NextUtcMonthStart(m), r.to);
          }
          break;
        case kMonth:
          ++months;
          ASSERT_EQ(UtcMonthStart(r.from), r.from);
          ASSERT_EQ(UtcMonthStart(r.to), r.to);
          break;
      }
      at = r.to;
    }
    ASSERT_EQ(at, end);
    ASSERT_LE(hours, 2);
    ASSERT_LE(days, 2);
    ASSERT_LE(months, 1);
  }
}

TEST(RollupsServe, OnlyRollupKeys) {
  ReportQuery q;
  q.group_by = {Dimension::kTenant, Dimension::kResource};
  q.filters[Dimension::kFlavor] = "a100";
  EXPECT_TRUE(RollupsServe(q));
  q.group_by.push_back(Dimension::kJob);
  EXPECT_FALSE(RollupsServe(q));
  q.group_by.pop_back();
  q.filters[Dimension::kJob] = "tenants/t/jobs/1";
  EXPECT_FALSE(RollupsServe(q));
  q.filters.erase(Dimension::kJob);
  q.label_filters["team"] = "x";
  EXPECT_FALSE(RollupsServe(q));
}

// ---------------------------------------------------------------------------
// Reports from rollups of random metered lines equal BuildReport's.

using RollupKey = std::tuple<int, TimeMs, std::string, std::string, std::string,
                             std::string, std::string, std::string, int>;

std::string KeyOf(const RollupKey& k, Dimension d) {
  switch (d) {
    case Dimension::kTenant:
      return std::get<2>(k);
    case Dimension::kProject:
      return std::get<3>(k);
    case Dimension::kQueue:
      return std::get<4>(k);
    case Dimension::kUser:
      return std::get<5>(k);
    case Dimension::kCluster:
      return std::get<6>(k);
    case Dimension::kFlavor:
      return std::get<7>(k);
    case Dimension::kResource:
      return std::string(ResourceLabel(static_cast<Resource>(std::get<8>(k))));
    case Dimension::kJob:
      break;
  }
  return "";
}

void AddLine(RollupSum& s, const LedgerLine& l) {
  ++s.lines;
  s.cost_micros += l.cost_micros;
  s.tenant_cost_micros += l.tenant_cost_micros;
  s.platform_cost_micros += l.platform_cost_micros;
  if (l.lost_work) s.lost_work_cost_micros += l.cost_micros;
  s.list_cost_micros += l.list_cost_micros;
  if (l.resource == Resource::kGpu) {
    s.gpu_ms += Quantity(l);
    if (l.lost_work) s.lost_gpu_ms += Quantity(l);
  }
  if (l.resource == Resource::kCpu) s.cpu_millicore_ms += Quantity(l);
  if (l.resource == Resource::kMemory) s.memory_byte_ms += Quantity(l);
  s.attempts += l.attempt_start ? 1 : 0;
  s.spot_gap_lines += l.spot_price_gap ? 1 : 0;
}

void AddSum(RollupSum& s, const RollupSum& r) {
  s.lines += r.lines;
  s.cost_micros += r.cost_micros;
  s.tenant_cost_micros += r.tenant_cost_micros;
  s.platform_cost_micros += r.platform_cost_micros;
  s.lost_work_cost_micros += r.lost_work_cost_micros;
  s.list_cost_micros += r.list_cost_micros;
  s.gpu_ms += r.gpu_ms;
  s.lost_gpu_ms += r.lost_gpu_ms;
  s.cpu_millicore_ms += r.cpu_millicore_ms;
  s.memory_byte_ms += r.memory_byte_ms;
  s.attempts += r.attempts;
  s.spot_gap_lines += r.spot_gap_lines;
}

void ExpectSameRow(const ReportRow& got, const ReportRow& want) {
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.period_start, want.period_start);
  EXPECT_EQ(got.period_end, want.period_end);
  EXPECT_EQ(got.cost_micros, want.cost_micros);
  EXPECT_EQ(got.tenant_cost_micros, want.tenant_cost_micros);
  EXPECT_EQ(got.platform_cost_micros, want.platform_cost_micros);
  EXPECT_EQ(got.lost_work_cost_micros, want.lost_work_cost_micros);
  EXPECT_EQ(got.list_cost_micros, want.list_cost_micros);
  EXPECT_EQ(got.gpu_ms, want.gpu_ms);
  EXPECT_EQ(got.lost_gpu_ms, want.lost_gpu_ms);
  EXPECT_TRUE(got.cpu_millicore_ms == want.cpu_millicore_ms);
  EXPECT_TRUE(got.memory_byte_ms == want.memory_byte_ms);
  EXPECT_EQ(got.attempts, want.attempts);
  EXPECT_EQ(got.spot_price_gap, want.spot_price_gap);
}

TEST(ReportFromRollups, EqualsBuildReportOverTheLines) {
  std::mt19937_64 rng(20261127);
  auto rand = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const TimeMs base = Utc(2026, 10, 20, 0);
  const TimeMs horizon = 45 * 24 * kH;
  absl::StatusOr<PriceBook> book = PriceBook::Create("USD");
  ASSERT_TRUE(book.ok());
  for (const char* flavor : {"f0", "s0"}) {
    for (Resource r : kAllResources) {
      ASSERT_TRUE(
          book->AddRate({flavor, r, {rand(1, 5'000'000), ""}, 0}, 0).ok());
      ASSERT_TRUE(book->AddRate({flavor,
                                 r,
                                 {rand(1, 5'000'000), ""},
                                 base + rand(0, horizon)},
                                0)
                      .ok());
    }
  }
  for (TimeMs t = base; t < base + horizon; t += rand(1, 6 * kH)) {
    ASSERT_TRUE(
        book->AddSpotPrice({"s0", {rand(1, 3'000'000), ""}, t}, 0).ok());
  }
  std::vector<LedgerLine> lines;
  for (int i = 0; i < 1500; ++i) {
    AttemptUsage u;
    u.keys = {domain::Cat("t", rand(0, 2)),
              domain::Cat("p", rand(0, 3)),
              domain::Cat("u", rand(0, 2)),
              domain::Cat("q", rand(0, 1)),
              domain::Cat("c", rand(0, 1)),
              rand(0, 1) ? "s0" : "f0",
              domain::Cat("jobs/", i),
              0,
              {}};
    u.spot = u.keys.flavor == "s0";
    u.workers = static_cast<int32_t>(rand(1, 3));
    u.gpus_per_worker = rand(0, 2) == 0 ? 0 : rand(1, 8);
    u.cpu_millis_per_worker = rand(0, 1) ? rand(1, 64'000) : 0;
    u.memory_bytes_per_worker = rand(0, 1) ? rand(1, int64_t{1} << 40) : 0;
    u.start_time = base + rand(0, horizon - kH);
    u.end_time =
        u.start_time + (rand(0, 5) == 0 ? rand(0, 60 * kH) : rand(0, 3 * kH));
    u.end_reason =
        rand(0, 3) == 0 ? EndReason::kSpotReclaim : EndReason::kCompleted;
    u.last_checkpoint_time = u.start_time + (*u.end_time - u.start_time) / 2;
    absl::StatusOr<std::vector<LedgerLine>> l =
        MeterAttempt(*book, u, 0, MeterOptions{});
    ASSERT_TRUE(l.ok()) << l.status();
    lines.insert(lines.end(), l->begin(), l->end());
  }
  // The rollups, as the store keeps them: per bucket of each granularity and
  // per rollup key.
  std::map<RollupKey, RollupSum> rollups;
  for (const LedgerLine& l : lines) {
    const TimeMs starts[] = {l.period_start, UtcDayStart(l.period_start),
                             UtcMonthStart(l.period_start)};
    for (int g = 0; g < 3; ++g) {
      AddLine(rollups[{g, starts[g], l.keys.tenant, l.keys.project,
                       l.keys.queue, l.keys.user, l.keys.cluster, l.keys.flavor,
                       static_cast<int>(l.resource)}],
              l);
    }
  }
  const char* zones[] = {"UTC", "America/New_York", "Europe/Berlin",
                         "Asia/Tokyo"};
  const Dimension dims[] = {Dimension::kTenant,  Dimension::kProject,
                            Dimension::kUser,    Dimension::kQueue,
                            Dimension::kCluster, Dimension::kFlavor,
                            Dimension::kResource};
  int rows = 0;
  for (int iteration = 0; iteration < 200; ++iteration) {
    ReportQuery q;
    if (iteration % 10 == 0) {
      q.start = Utc(2026, 11, 1, 0);  // a month
      q.end = Utc(2026, 12, 1, 0);
    } else {
      q.start = base + rand(-24, 40 * 24) * kH;
      q.end = q.start + rand(1, 40 * 24) * kH;
    }
    q.time_zone = zones[rand(0, 3)];
    q.step = static_cast<Step>(rand(0, 3));
    for (Dimension d : dims) {
      if (rand(0, 3) == 0) q.group_by.push_back(d);
    }
    std::shuffle(q.group_by.begin(), q.group_by.end(), rng);
    if (rand(0, 3) == 0) q.filters[Dimension::kTenant] = "t1";
    if (rand(0, 4) == 0) q.filters[Dimension::kResource] = "GPU";
    if (rand(0, 4) == 0) q.filters[Dimension::kFlavor] = "s0";
    SCOPED_TRACE(domain::Cat("query ", iteration, " ", q.time_zone, " step ",
                             static_cast<int>(q.step)));
    absl::StatusOr<std::vector<TimeMs>> bounds = ReportPeriods(q);
    ASSERT_TRUE(bounds.ok()) << bounds.status();
    // What the store's query does: per period, the covering buckets' rows
    // that pass the filters, summed by the grouped keys.
    std::map<std::pair<size_t, std::vector<std::string>>, RollupSum> sums;
    for (size_t p = 0; p + 1 < bounds->size(); ++p) {
      for (const RollupRange& r :
           CoverWithRollups((*bounds)[p], (*bounds)[p + 1])) {
        // The rows of this granularity with starts in [from, to): the map
        // is ordered by (granularity, start, ...).
        const int g = static_cast<int>(r.granularity);
        for (auto it = rollups.lower_bound(
                 RollupKey{g, r.from, "", "", "", "", "", "", 0});
             it != rollups.end() && std::get<0>(it->first) == g &&
             std::get<1>(it->first) < r.to;
             ++it) {
          const auto& [key, sum] = *it;
          bool match = true;
          for (const auto& [d, v] : q.filters) {
            match = match && KeyOf(key, d) == v;
          }
          if (!match) continue;
          std::vector<std::string> keys;
          for (Dimension d : q.group_by) keys.push_back(KeyOf(key, d));
          RollupSum& s = sums[{p, keys}];
          s.period = p;
          s.keys = keys;
          AddSum(s, sum);
        }
      }
    }
    std::vector<RollupSum> flat;
    for (auto& [k, s] : sums) flat.push_back(s);
    std::shuffle(flat.begin(), flat.end(), rng);
    absl::StatusOr<Report> got = ReportFromRollups(q, flat, &*book);
    ASSERT_TRUE(got.ok()) << got.status();
    absl::StatusOr<Report> want = BuildReport(lines, q, &*book);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->currency, want->currency);
    ASSERT_EQ(got->rows.size(), want->rows.size());
    for (size_t i = 0; i < got->rows.size(); ++i) {
      SCOPED_TRACE(domain::Cat("row ", i));
      ExpectSameRow(got->rows[i], want->rows[i]);
    }
    ExpectSameRow(got->total, want->total);
    rows += static_cast<int>(want->rows.size());
  }
  EXPECT_GT(rows, 1000);
}

TEST(ReportFromRollups, RefusesSumsThatDoNotFit) {
  ReportQuery q;
  q.start = Utc(2026, 11, 1, 0);
  q.end = q.start + 2 * kH;
  RollupSum s;
  s.lines = 1;
  s.period = 1;
  EXPECT_EQ(ReportFromRollups(q, {s}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  s.period = 0;
  s.cost_micros = static_cast<__int128>(1) << 63;
  EXPECT_EQ(ReportFromRollups(q, {s}, nullptr).status().code(),
            absl::StatusCode::kOutOfRange);
  s.cost_micros = 5;
  absl::StatusOr<Report> r = ReportFromRollups(q, {s, s}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(r->rows[0].cost_micros, 10);
  EXPECT_EQ(r->total.cost_micros, 10);
}

}  // namespace
}  // namespace trainyard::accounting::pricing::rollup_test
