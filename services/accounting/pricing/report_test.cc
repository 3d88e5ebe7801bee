// Reports and their FOCUS exports: query validation (each error naming its
// field), a hand-computed report, time zones (DST days of 23 and 25 hours,
// months; +05:30 days refused), randomized reports of thousands of metered
// attempts checked against an independent grouping, and the CSV / JSON
// exports parsed back and summed to the report's total exactly.
#include "services/accounting/pricing/report.h"

#include <csv.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing::report_test {
namespace {

constexpr TimeMs kH = kMsPerHour;
constexpr TimeMs kNov = 1'793'491'200'000;  // 2026-11-01T00:00:00Z
constexpr TimeMs kNov3 = kNov + 2 * 24 * kH;
constexpr TimeMs kNov4 = kNov3 + 24 * kH;
constexpr TimeMs kNov5 = kNov4 + 24 * kH;

// A UTC civil hour in ms (the expected boundaries are written in UTC).
TimeMs Utc(int y, int m, int d, int h) {
  return absl::ToUnixMillis(
      absl::FromCivil(absl::CivilHour(y, m, d, h), absl::UTCTimeZone()));
}

// ---------------------------------------------------------------------------
// Validation.

ReportQuery Day(TimeMs start) {
  ReportQuery q;
  q.start = start;
  q.end = start + 24 * kH;
  return q;
}

void ExpectFieldError(const ReportQuery& q, std::string_view field,
                      std::string_view needle = "") {
  const absl::Status s = ValidateReportQuery(q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(domain::ErrorField(s), field) << s;
  EXPECT_TRUE(domain::StdView(s.message()).starts_with(domain::Cat(field, ":")))
      << s;
  EXPECT_NE(domain::StdView(s.message()).find(needle), std::string_view::npos)
      << s << "\nexpected to contain: " << needle;
  // BuildReport refuses the same query the same way.
  absl::StatusOr<Report> r = BuildReport({}, q, nullptr);
  EXPECT_EQ(r.status(), s);
}

TEST(ValidateReportQuery, AcceptsAGoodQuery) {
  ReportQuery q = Day(kNov3);
  q.time_zone = "America/New_York";
  q.step = Step::kDay;
  q.group_by = {Dimension::kTenant, Dimension::kResource};
  q.filters = {{Dimension::kResource, "GPU"}, {Dimension::kQueue, "q1"}};
  q.label_filters = {{"team", "x"}};
  EXPECT_TRUE(ValidateReportQuery(q).ok()) << ValidateReportQuery(q);
  // 366 days is the most.
  q.end = q.start + 366 * 24 * kH;
  EXPECT_TRUE(ValidateReportQuery(q).ok()) << ValidateReportQuery(q);
}

TEST(ValidateReportQuery, EachErrorNamesItsField) {
  ReportQuery q = Day(kNov3);
  q.end = q.start;
  ExpectFieldError(q, "end_time", "must be after start_time");
  q.end = q.start - kH;
  ExpectFieldError(q, "end_time", "must be after start_time");

  q = Day(kNov3);
  q.end = q.start + 366 * 24 * kH + kH;
  ExpectFieldError(q, "end_time", "exceeds a year per call");

  q = Day(kNov3);
  q.start = -kH;
  ExpectFieldError(q, "start_time", "must be in [0, ");
  q = Day(kNov3);
  q.end = kMaxTimeMs;
  ExpectFieldError(q, "end_time", "must be in [0, ");

  q = Day(kNov3);
  q.start += 1;
  ExpectFieldError(q, "start_time", "must be a whole UTC hour");
  q = Day(kNov3);
  q.end -= 30 * 60'000;
  ExpectFieldError(q, "end_time", "ledger lines are cut at UTC hours");

  for (const char* zone : {"Mars/Olympus_Mons", "", "localtime"}) {
    q = Day(kNov3);
    q.time_zone = zone;
    ExpectFieldError(q, "time_zone", "unknown time zone");
  }

  q = Day(kNov3);
  q.step = static_cast<Step>(7);
  ExpectFieldError(q, "step", "must be NONE, HOUR, DAY or MONTH");

  q = Day(kNov3);
  q.group_by = {Dimension::kTenant, Dimension::kUser, Dimension::kTenant};
  ExpectFieldError(q, "group_by[2]", "dimension tenant is repeated");
  q.group_by = {static_cast<Dimension>(42)};
  ExpectFieldError(q, "group_by[0]", "unknown dimension 42");

  q = Day(kNov3);
  q.filters = {{Dimension::kResource, "GPUS"}};
  ExpectFieldError(q, "filters[\"resource\"]", "must be GPU, CPU or MEMORY");
  q.filters = {{static_cast<Dimension>(-1), "x"}};
  ExpectFieldError(q, "filters", "unknown dimension -1");
}

TEST(ValidateReportQuery, HalfHourZonesSplitOnlyAtUtcHours) {
  ReportQuery q = Day(kNov3);
  q.time_zone = "Asia/Kolkata";  // +05:30: midnight is 18:30 UTC
  q.step = Step::kDay;
  ExpectFieldError(q, "time_zone", "are not whole UTC hours");
  const absl::Status s = ValidateReportQuery(q);
  EXPECT_NE(domain::StdView(s.message())
                .find("its midnight of 2026-11-04 is 2026-11-03T18:30:00Z"),
            std::string_view::npos)
      << s;
  q.step = Step::kMonth;
  q.end = q.start + 60 * 24 * kH;
  ExpectFieldError(q, "time_zone", "ledger lines are cut at UTC hours");
  // Without a local boundary inside the window nothing is split: fine.
  q.end = q.start + 2 * 24 * kH;
  EXPECT_TRUE(ValidateReportQuery(q).ok()) << ValidateReportQuery(q);
  // Hours are UTC hours in every zone; NONE splits nothing.
  q.step = Step::kHour;
  EXPECT_TRUE(ValidateReportQuery(q).ok());
  q.step = Step::kNone;
  EXPECT_TRUE(ValidateReportQuery(q).ok());
}

// ---------------------------------------------------------------------------
// Time zones.

TEST(ReportPeriods, NewYorkDaysOf23And25Hours) {
  ReportQuery q;
  q.time_zone = "America/New_York";
  q.step = Step::kDay;
  // 2026-03-08: clocks go from 02:00 EST to 03:00 EDT: a day of 23 hours.
  q.start = Utc(2026, 3, 7, 5);  // Mar 7 00:00 EST
  q.end = Utc(2026, 3, 10, 4);   // Mar 10 00:00 EDT
  absl::StatusOr<std::vector<TimeMs>> p = ReportPeriods(q);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (std::vector<TimeMs>{q.start, Utc(2026, 3, 8, 5),
                                     Utc(2026, 3, 9, 4), q.end}));
  EXPECT_EQ((*p)[2] - (*p)[1], 23 * kH);
  // 2026-11-01: 02:00 EDT back to 01:00 EST: 25 hours.
  q.start = Utc(2026, 11, 1, 4);  // Nov 1 00:00 EDT
  q.end = Utc(2026, 11, 3, 5);    // Nov 3 00:00 EST
  p = ReportPeriods(q);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (std::vector<TimeMs>{q.start, Utc(2026, 11, 2, 5), q.end}));
  EXPECT_EQ((*p)[1] - (*p)[0], 25 * kH);
  // A window that does not start at a local midnight: the first and last
  // periods are cut to it.
  q.start = Utc(2026, 3, 7, 12);
  q.end = Utc(2026, 3, 8, 12);
  p = ReportPeriods(q);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<TimeMs>{q.start, Utc(2026, 3, 8, 5), q.end}));
}

TEST(ReportPeriods, NewYorkMonths) {
  ReportQuery q;
  q.time_zone = "America/New_York";
  q.step = Step::kMonth;
  q.start = Utc(2026, 2, 1, 5);  // Feb 1 00:00 EST
  q.end = Utc(2026, 12, 1, 5);   // Dec 1 00:00 EST
  absl::StatusOr<std::vector<TimeMs>> p = ReportPeriods(q);
  ASSERT_TRUE(p.ok()) << p.status();
  // EST (-5) until Mar 8, EDT (-4) until Nov 1 (its midnight is still EDT).
  EXPECT_EQ(*p, (std::vector<TimeMs>{
                    q.start, Utc(2026, 3, 1, 5), Utc(2026, 4, 1, 4),
                    Utc(2026, 5, 1, 4), Utc(2026, 6, 1, 4), Utc(2026, 7, 1, 4),
                    Utc(2026, 8, 1, 4), Utc(2026, 9, 1, 4), Utc(2026, 10, 1, 4),
                    Utc(2026, 11, 1, 4), q.end}));
  q.step = Step::kHour;
  q.start = Utc(2026, 3, 8, 5);
  q.end = Utc(2026, 3, 8, 8);
  p = ReportPeriods(q);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<TimeMs>{q.start, q.start + kH, q.start + 2 * kH,
                                     q.end}));
}

LedgerLine GpuLine(TimeMs period_start, std::string tenant, int64_t cost) {
  LedgerLine l;
  l.keys.tenant = std::move(tenant);
  l.keys.flavor = "a100";
  l.keys.job = domain::Cat("jobs/", period_start);
  l.period_start = period_start;
  l.start = period_start;
  l.end = period_start + kH;
  l.amount = 1;
  l.unit_price_micros = cost;
  l.cost_micros = cost;
  l.tenant_cost_micros = cost;
  l.list_cost_micros = cost;
  l.attempt_start = true;  // each line is its own job's one attempt
  return l;
}

TEST(BuildReport, LinesGoToTheirLocalDay) {
  ReportQuery q;
  q.time_zone = "America/New_York";
  q.step = Step::kDay;
  q.start = Utc(2026, 3, 7, 5);
  q.end = Utc(2026, 3, 10, 4);
  const std::vector<LedgerLine> lines = {
      GpuLine(Utc(2026, 3, 7, 4), "t", 1),    // Mar 6 23:00 EST: outside
      GpuLine(Utc(2026, 3, 7, 5), "t", 10),   // Mar 7 00:00 EST
      GpuLine(Utc(2026, 3, 8, 4), "t", 20),   // Mar 7 23:00 EST
      GpuLine(Utc(2026, 3, 8, 5), "t", 40),   // Mar 8 00:00 EST
      GpuLine(Utc(2026, 3, 9, 3), "t", 80),   // Mar 8 23:00 EDT
      GpuLine(Utc(2026, 3, 9, 4), "t", 160),  // Mar 9 00:00 EDT
      GpuLine(Utc(2026, 3, 10, 4), "t", 1),   // Mar 10 00:00 EDT: outside
  };
  absl::StatusOr<Report> r = BuildReport(lines, q, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 3u);
  EXPECT_EQ(r->rows[0].cost_micros, 10 + 20);
  EXPECT_EQ(r->rows[1].cost_micros, 40 + 80);
  EXPECT_EQ(r->rows[1].period_end - r->rows[1].period_start, 23 * kH);
  EXPECT_EQ(r->rows[2].cost_micros, 160);
  EXPECT_EQ(r->total.cost_micros, 310);
  EXPECT_EQ(r->total.gpu_ms, 5 * kH);
  EXPECT_EQ(r->total.attempts, 5);
  EXPECT_EQ(r->currency, "");
}

TEST(BuildReport, RefusesALineOutsideItsChargePeriod) {
  std::vector<LedgerLine> lines = {GpuLine(kNov3, "t", 1),
                                   GpuLine(kNov3, "t", 1)};
  lines[1].end = kNov3 + kH + 1;
  absl::StatusOr<Report> r = BuildReport(lines, Day(kNov3), nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(domain::ErrorField(r.status()), "lines[1].end") << r.status();
  lines[1] = GpuLine(kNov3 + 1, "t", 1);
  r = BuildReport(lines, Day(kNov3), nullptr);
  EXPECT_EQ(domain::ErrorField(r.status()), "lines[1].period_start");
}

TEST(BuildReport, OverflowIsOutOfRange) {
  std::vector<LedgerLine> lines = {GpuLine(kNov3, "t", 1),
                                   GpuLine(kNov3 + kH, "t", 1)};
  lines[0].cost_micros = lines[0].tenant_cost_micros =
      std::numeric_limits<int64_t>::max();
  absl::StatusOr<Report> r = BuildReport(lines, Day(kNov3), nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange) << r.status();
}

// ---------------------------------------------------------------------------
// Decimal text.

TEST(ReportDecimals, MoneyAndQuantities) {
  EXPECT_EQ(MicrosToDecimal(12'345'678), "12.345678");
  EXPECT_EQ(MicrosToDecimal(3'000'000), "3.00");
  EXPECT_EQ(MicrosToDecimal(500'000), "0.50");
  EXPECT_EQ(MicrosToDecimal(1), "0.000001");
  EXPECT_EQ(MicrosToDecimal(0), "0.00");
  EXPECT_EQ(MicrosToDecimal(-500'000), "-0.50");
  EXPECT_EQ(MicrosToDecimal(std::numeric_limits<int64_t>::min()),
            "-9223372036854.775808");
  EXPECT_EQ(UnitHoursDecimal(1'800'000, Resource::kGpu), "0.5");
  EXPECT_EQ(UnitHoursDecimal(7'200'000, Resource::kGpu), "2");
  EXPECT_EQ(UnitHoursDecimal(0, Resource::kGpu), "0");
  // 1,000 / 3,600,000 = 0.000277777…: up at the 9th decimal.
  EXPECT_EQ(UnitHoursDecimal(1'000, Resource::kGpu), "0.000277778");
  // 1 GPU-ms = 0.000000277… GPU-hours.
  EXPECT_EQ(UnitHoursDecimal(1, Resource::kGpu), "0.000000278");
  // 1,500 millicores for 1 h = 1.5 core-hours.
  EXPECT_EQ(UnitHoursDecimal(1'500 * kH, Resource::kCpu), "1.5");
  // Memory ties: 2^27 × 9 byte-ms = 312.5 × 10^-9 GiB-hours -> 312 (even);
  // three times that, 937.5 -> 938.
  const __int128 tie = (__int128{1} << 27) * 9;
  EXPECT_EQ(UnitHoursDecimal(tie, Resource::kMemory), "0.000000312");
  EXPECT_EQ(UnitHoursDecimal(3 * tie, Resource::kMemory), "0.000000938");
  // 2^70 byte-ms (beyond int64) = 2^40 × 3,600,000^-1 GiB-hours
  // = 305,419.896604444…
  EXPECT_EQ(UnitHoursDecimal(__int128{1} << 70, Resource::kMemory),
            "305419.896604444");
  // 1 TiB for a year of 365 days = 1024 × 8760 GiB-hours.
  EXPECT_EQ(
      UnitHoursDecimal(static_cast<__int128>(int64_t{1} << 40) * (8760 * kH),
                       Resource::kMemory),
      "8970240");
}

TEST(ReportDecimals, EffectiveGpuHourPrice) {
  ReportRow row;
  EXPECT_EQ(*EffectiveGpuHourPriceMicros(row), 0);
  row.cost_micros = 10;
  row.gpu_ms = 3 * kH;  // 10 / 3 = 3.33 -> 3
  EXPECT_EQ(*EffectiveGpuHourPriceMicros(row), 3);
  row.cost_micros = 5;
  row.gpu_ms = 2 * kH;  // 2.5 -> 2 (even)
  EXPECT_EQ(*EffectiveGpuHourPriceMicros(row), 2);
  row.cost_micros = 7;  // 3.5 -> 4
  EXPECT_EQ(*EffectiveGpuHourPriceMicros(row), 4);
  row.cost_micros = std::numeric_limits<int64_t>::max();
  row.gpu_ms = 1;
  EXPECT_EQ(EffectiveGpuHourPriceMicros(row).status().code(),
            absl::StatusCode::kOutOfRange);
}

// ---------------------------------------------------------------------------
// CSV parsed back with libcsv (strict), independently of the writer.

struct CsvRows {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> current;
};

void OnField(void* data, size_t len, void* p) {
  static_cast<CsvRows*>(p)->current.emplace_back(static_cast<char*>(data), len);
}
void OnRowEnd(int, void* p) {
  auto* r = static_cast<CsvRows*>(p);
  r->rows.push_back(std::move(r->current));
  r->current.clear();
}

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  csv_parser parser;
  EXPECT_EQ(csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI), 0);
  CsvRows out;
  EXPECT_EQ(
      csv_parse(&parser, text.data(), text.size(), OnField, OnRowEnd, &out),
      text.size())
      << csv_strerror(csv_error(&parser));
  EXPECT_EQ(csv_fini(&parser, OnField, OnRowEnd, &out), 0);
  csv_free(&parser);
  return out.rows;
}

// "12.345678", "-0.50", "3.00" -> micros, in integers.
int64_t DecimalToMicros(std::string_view s) {
  bool negative = false;
  if (!s.empty() && s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  int64_t whole = 0;
  int64_t frac = 0;
  int frac_digits = 0;
  bool dot = false;
  for (char c : s) {
    if (c == '.') {
      EXPECT_FALSE(dot) << s;
      dot = true;
      continue;
    }
    EXPECT_TRUE(c >= '0' && c <= '9') << s;
    if (dot) {
      frac = frac * 10 + (c - '0');
      ++frac_digits;
    } else {
      whole = whole * 10 + (c - '0');
    }
  }
  EXPECT_TRUE(dot && frac_digits >= 2 && frac_digits <= 6) << s;
  for (int i = frac_digits; i < 6; ++i) frac *= 10;
  const int64_t v = whole * 1'000'000 + frac;
  return negative ? -v : v;
}

// The parsed CSV as one map per row, checking the header.
std::vector<std::map<std::string, std::string>> CsvRecords(
    const std::string& text) {
  const std::vector<std::vector<std::string>> rows = ParseCsv(text);
  std::vector<std::map<std::string, std::string>> out;
  if (rows.empty()) {
    ADD_FAILURE() << "no header";
    return out;
  }
  EXPECT_EQ(rows[0], FocusColumns());
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].size(), FocusColumns().size()) << "row " << i;
    std::map<std::string, std::string> record;
    for (size_t c = 0; c < rows[i].size() && c < FocusColumns().size(); ++c) {
      record[FocusColumns()[c]] = rows[i][c];
    }
    out.push_back(std::move(record));
  }
  return out;
}

// ---------------------------------------------------------------------------
// A hand-computed report.

class HandReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PriceBook> b = PriceBook::Create("USD");
    ASSERT_TRUE(b.ok());
    book_.emplace(*std::move(b));
    // a100: $2.00 per GPU-hour, $0.04 per core-hour. a100-spot's list
    // (on-demand) GPU rate: $2.50. Spot: $1.00 observed Nov 3 08:00, fresh
    // until 10:00.
    for (const RateVersion& r : std::vector<RateVersion>{
             {"a100", Resource::kGpu, {2'000'000, "USD"}, kNov},
             {"a100", Resource::kCpu, {40'000, "USD"}, kNov},
             {"a100", Resource::kMemory, {5'000, "USD"}, kNov},
             {"a100-spot", Resource::kGpu, {2'500'000, "USD"}, kNov},
             {"a100-spot", Resource::kCpu, {40'000, "USD"}, kNov},
             {"a100-spot", Resource::kMemory, {5'000, "USD"}, kNov}}) {
      ASSERT_TRUE(book_->AddRate(r, kNov).ok());
    }
    ASSERT_TRUE(book_
                    ->AddSpotPrice(
                        {"a100-spot", {1'000'000, "USD"}, kNov3 + 8 * kH}, kNov)
                    .ok());

    MeterOptions platform_pays;
    platform_pays.lost_work_rule = LostWorkRule::kPlatform;
    // Job A (acme): 2 GPUs and 8 cores on a100, Nov 3 22:00 - Nov 4 01:30.
    AttemptUsage a;
    a.keys = {"acme", "p1", "users/a", "q1", "c1", "a100", "jobs/a", 0, {}};
    a.gpus_per_worker = 2;
    a.cpu_millis_per_worker = 8'000;
    a.start_time = kNov3 + 22 * kH;
    a.end_time = kNov4 + 90 * 60'000;
    a.end_reason = EndReason::kCompleted;
    Meter(a, platform_pays);
    // Job B (bolt): 1 spot GPU on a100-spot, Nov 3 08:30 - 10:30, reclaimed;
    // last checkpoint 10:00: 10:00-10:30 is lost work, paid by the platform.
    AttemptUsage b_usage;
    b_usage.keys = {"bolt",      "p2",     "users/b", "q1", "c1",
                    "a100-spot", "jobs/b", 1,         {}};
    b_usage.spot = true;
    b_usage.gpus_per_worker = 1;
    b_usage.start_time = kNov3 + 8 * kH + 30 * 60'000;
    b_usage.end_time = kNov3 + 10 * kH + 30 * 60'000;
    b_usage.last_checkpoint_time = kNov3 + 10 * kH;
    b_usage.end_reason = EndReason::kSpotReclaim;
    Meter(b_usage, platform_pays);
    // Job C (bolt): 1 GPU on a100, Nov 4 00:00 - 01:00, label team=x.
    AttemptUsage c;
    c.keys = {"bolt", "p2",     "users/c", "q2",           "c1",
              "a100", "jobs/c", 0,         {{"team", "x"}}};
    c.gpus_per_worker = 1;
    c.start_time = kNov4;
    c.end_time = kNov4 + kH;
    c.end_reason = EndReason::kCompleted;
    Meter(c, platform_pays);
  }

  void Meter(const AttemptUsage& u, const MeterOptions& o) {
    absl::StatusOr<std::vector<LedgerLine>> l = MeterAttempt(*book_, u, 0, o);
    ASSERT_TRUE(l.ok()) << l.status();
    lines_.insert(lines_.end(), l->begin(), l->end());
  }

  ReportQuery TwoDays() const {
    ReportQuery q;
    q.start = kNov3;
    q.end = kNov5;
    return q;
  }

  std::optional<PriceBook> book_;
  std::vector<LedgerLine> lines_;
};

TEST_F(HandReportTest, DaysByTenant) {
  ReportQuery q = TwoDays();
  q.step = Step::kDay;
  q.group_by = {Dimension::kTenant};
  absl::StatusOr<Report> r = BuildReport(lines_, q, &*book_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->currency, "USD");
  ASSERT_EQ(r->rows.size(), 4u);
  const ReportRow& a3 = r->rows[0];
  const ReportRow& b3 = r->rows[1];
  const ReportRow& a4 = r->rows[2];
  const ReportRow& b4 = r->rows[3];

  // Nov 3, acme (job A, 22:00-24:00): GPU 2 × 1 h × $2.00 = $4.00 per hour,
  // two hours: $8.00; CPU 8 cores × 1 h × $0.04 = $0.32 per hour: $0.64.
  EXPECT_EQ(a3.keys, std::vector<std::string>{"acme"});
  EXPECT_EQ(a3.period_start, kNov3);
  EXPECT_EQ(a3.period_end, kNov4);
  EXPECT_EQ(a3.cost_micros, 8'640'000);
  EXPECT_EQ(a3.tenant_cost_micros, 8'640'000);
  EXPECT_EQ(a3.list_cost_micros, 8'640'000);  // rate-priced: list = cost
  EXPECT_EQ(a3.gpu_ms, 2 * 2 * kH);           // 14,400,000
  EXPECT_EQ(a3.cpu_millicore_ms, __int128{8'000} * 2 * kH);
  EXPECT_EQ(a3.memory_byte_ms, 0);
  EXPECT_EQ(a3.attempts, 1);
  EXPECT_FALSE(a3.spot_price_gap);
  // $8.64 over 4 GPU-hours: $2.16.
  EXPECT_EQ(*EffectiveGpuHourPriceMicros(a3), 2'160'000);

  // Nov 3, bolt (job B): 08:30-09:00 0.5 h × $1.00 = $0.50 (fresh spot),
  // 09:00-10:00 $1.00, 10:00-10:30 $0.50 (stale: carried forward, a gap; lost
  // work, the platform's). Cost $2.00, tenant $1.50, platform $0.50. List: 2 h
  // at the a100-spot GPU rate $2.50 = $5.00.
  EXPECT_EQ(b3.keys, std::vector<std::string>{"bolt"});
  EXPECT_EQ(b3.cost_micros, 2'000'000);
  EXPECT_EQ(b3.tenant_cost_micros, 1'500'000);
  EXPECT_EQ(b3.platform_cost_micros, 500'000);
  EXPECT_EQ(b3.lost_work_cost_micros, 500'000);
  EXPECT_EQ(b3.list_cost_micros, 5'000'000);
  EXPECT_EQ(b3.gpu_ms, 2 * kH);
  EXPECT_EQ(b3.lost_gpu_ms, kH / 2);  // 1,800,000
  EXPECT_TRUE(b3.spot_price_gap);
  EXPECT_EQ(b3.attempts, 1);
  EXPECT_EQ(*EffectiveGpuHourPriceMicros(b3), 1'000'000);

  // Nov 4, acme (job A, 00:00-01:30): GPU $4.00 + 2 × 0.5 h × $2.00 = $6.00;
  // CPU $0.32 + 8 × 0.5 × $0.04 = $0.48. $6.48 over 3 GPU-hours.
  EXPECT_EQ(a4.keys, std::vector<std::string>{"acme"});
  EXPECT_EQ(a4.period_start, kNov4);
  EXPECT_EQ(a4.period_end, kNov5);
  EXPECT_EQ(a4.cost_micros, 6'480'000);
  EXPECT_EQ(a4.gpu_ms, 2 * 3 * kH / 2);  // 10,800,000
  EXPECT_EQ(a4.cpu_millicore_ms, __int128{8'000} * 3 * kH / 2);
  // Job A started on Nov 3: it counts there, not again on Nov 4.
  EXPECT_EQ(a4.attempts, 0);

  // Nov 4, bolt (job C): 1 × 1 h × $2.00.
  EXPECT_EQ(b4.keys, std::vector<std::string>{"bolt"});
  EXPECT_EQ(b4.cost_micros, 2'000'000);
  EXPECT_EQ(b4.list_cost_micros, 2'000'000);
  EXPECT_EQ(b4.gpu_ms, kH);

  // Total: 8.64 + 2.00 + 6.48 + 2.00 = $19.12; tenants $18.62; list 8.64 +
  // 5.00 + 6.48 + 2.00 = $22.12; 10 GPU-hours, 28 core-hours; 3 attempts.
  const ReportRow& t = r->total;
  EXPECT_TRUE(t.keys.empty());
  EXPECT_EQ(t.period_start, kNov3);
  EXPECT_EQ(t.period_end, kNov5);
  EXPECT_EQ(t.cost_micros, 19'120'000);
  EXPECT_EQ(t.tenant_cost_micros, 18'620'000);
  EXPECT_EQ(t.platform_cost_micros, 500'000);
  EXPECT_EQ(t.lost_work_cost_micros, 500'000);
  EXPECT_EQ(t.list_cost_micros, 22'120'000);
  EXPECT_EQ(t.gpu_ms, 10 * kH);
  EXPECT_EQ(t.lost_gpu_ms, kH / 2);
  EXPECT_EQ(t.cpu_millicore_ms, __int128{8'000} * 7 * kH / 2);
  EXPECT_EQ(t.attempts, 3);
  EXPECT_TRUE(t.spot_price_gap);
  EXPECT_EQ(*EffectiveGpuHourPriceMicros(t), 1'912'000);  // 19.12 / 10

  // Without a price book: the same sums (list cost is the lines', set when
  // they were metered), no currency.
  absl::StatusOr<Report> plain = BuildReport(lines_, q, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->total.list_cost_micros, 22'120'000);
  EXPECT_EQ(plain->currency, "");
  EXPECT_EQ(FocusCsv(*plain, q).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(domain::ErrorField(FocusCsv(*plain, q).status()), "currency");
}

TEST_F(HandReportTest, FlavorAndResourceWithFocusCsv) {
  ReportQuery q = TwoDays();
  q.group_by = {Dimension::kFlavor, Dimension::kResource};
  absl::StatusOr<Report> r = BuildReport(lines_, q, &*book_);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 3u);
  // a100 CPU: $0.64 + $0.48 = $1.12 for 8 cores × 3.5 h = 28 core-hours.
  EXPECT_EQ(r->rows[0].keys, (std::vector<std::string>{"a100", "CPU"}));
  EXPECT_EQ(r->rows[0].cost_micros, 1'120'000);
  // a100 GPU: A 7 GPU-hours ($14.00), C 1 ($2.00).
  EXPECT_EQ(r->rows[1].keys, (std::vector<std::string>{"a100", "GPU"}));
  EXPECT_EQ(r->rows[1].cost_micros, 16'000'000);
  EXPECT_EQ(r->rows[1].attempts, 2);
  EXPECT_EQ(r->rows[2].keys, (std::vector<std::string>{"a100-spot", "GPU"}));

  absl::StatusOr<std::string> csv = FocusCsv(*r, q);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_TRUE(csv->starts_with(
      "BillingAccountId,SubAccountId,ChargePeriodStart,ChargePeriodEnd,"
      "BillingPeriodStart,BillingPeriodEnd,BilledCost,EffectiveCost,ListCost,"
      "BillingCurrency,ConsumedQuantity,ConsumedUnit,PricingQuantity,"
      "PricingUnit,ResourceId,ServiceName,SkuId,ChargeCategory,Tags,"
      "x_LostWorkCost,x_PlatformCost,x_SpotPriceGap,x_Attempts,x_IdleCost\r\n"))
      << *csv;
  // The first row, whole: the Tags JSON is quoted (it holds commas and
  // quotes). No attempt starts on CPU: job A's first line is a GPU line.
  EXPECT_NE(csv->find("\r\n,,2026-11-03T00:00:00Z,2026-11-05T00:00:00Z,"
                      "2026-11-03T00:00:00Z,2026-11-05T00:00:00Z,1.12,1.12,"
                      "1.12,USD,28,Core-Hours,28,Core-Hours,,Trainyard,"
                      "a100/CPU,Usage,\"{\"\"flavor\"\":\"\"a100\"\",\"\""
                      "resource\"\":\"\"CPU\"\"}\",0.00,0.00,false,0,0.00\r\n"),
            std::string::npos)
      << *csv;
  const std::vector<std::map<std::string, std::string>> rec = CsvRecords(*csv);
  ASSERT_EQ(rec.size(), 3u);
  EXPECT_EQ(rec[1].at("ConsumedQuantity"), "8");
  EXPECT_EQ(rec[1].at("ConsumedUnit"), "GPU-Hours");
  EXPECT_EQ(rec[1].at("SkuId"), "a100/GPU");
  EXPECT_EQ(rec[1].at("BilledCost"), "16.00");
  EXPECT_EQ(rec[2].at("SkuId"), "a100-spot/GPU");
  EXPECT_EQ(rec[2].at("ConsumedQuantity"), "2");
  EXPECT_EQ(rec[2].at("BilledCost"), "1.50");
  EXPECT_EQ(rec[2].at("EffectiveCost"), "1.50");
  EXPECT_EQ(rec[2].at("ListCost"), "5.00");
  EXPECT_EQ(rec[2].at("x_LostWorkCost"), "0.50");
  EXPECT_EQ(rec[2].at("x_PlatformCost"), "0.50");
  EXPECT_EQ(rec[2].at("x_SpotPriceGap"), "true");
  EXPECT_EQ(rec[2].at("Tags"), R"({"flavor":"a100-spot","resource":"GPU"})");
  int64_t billed = 0;
  for (const auto& row : rec) billed += DecimalToMicros(row.at("BilledCost"));
  EXPECT_EQ(billed, r->total.tenant_cost_micros);
}

TEST_F(HandReportTest, FiltersAndHours) {
  ReportQuery q = TwoDays();
  q.filters = {{Dimension::kTenant, "bolt"}};
  q.label_filters = {{"team", "x"}};
  absl::StatusOr<Report> r = BuildReport(lines_, q, &*book_);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 1u);  // job C only
  EXPECT_EQ(r->rows[0].keys, std::vector<std::string>{});
  EXPECT_EQ(r->total.cost_micros, 2'000'000);
  q.filters = {{Dimension::kResource, "CPU"}};
  q.label_filters.clear();
  r = BuildReport(lines_, q, &*book_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->total.cost_micros, 1'120'000);
  EXPECT_EQ(r->total.gpu_ms, 0);

  // Hours by user: B 08, 09, 10; A 22, 23, 00, 01; C 00.
  q = TwoDays();
  q.step = Step::kHour;
  q.group_by = {Dimension::kUser};
  r = BuildReport(lines_, q, &*book_);
  ASSERT_TRUE(r.ok());
  std::vector<std::pair<TimeMs, std::string>> got;
  for (const ReportRow& row : r->rows) {
    EXPECT_EQ(row.period_end - row.period_start, kH);
    got.emplace_back(row.period_start - kNov3, row.keys[0]);
  }
  EXPECT_EQ(
      got, (std::vector<std::pair<TimeMs, std::string>>{{8 * kH, "users/b"},
                                                        {9 * kH, "users/b"},
                                                        {10 * kH, "users/b"},
                                                        {22 * kH, "users/a"},
                                                        {23 * kH, "users/a"},
                                                        {24 * kH, "users/a"},
                                                        {24 * kH, "users/c"},
                                                        {25 * kH, "users/a"}}));
  // A window of one day holds only that day's lines: Nov 4 is $6.48 + $2.00.
  q = Day(kNov4);
  r = BuildReport(lines_, q, &*book_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->total.cost_micros, 8'480'000);
}

TEST_F(HandReportTest, FocusJsonAndQuotedKeys) {
  // Keys with a comma, quotes and a leading space survive the CSV.
  for (LedgerLine& l : lines_) {
    if (l.keys.job == "jobs/c") l.keys.user = R"( users/"c",x)";
  }
  ReportQuery q = TwoDays();
  q.step = Step::kDay;
  q.group_by = {Dimension::kTenant, Dimension::kProject, Dimension::kUser,
                Dimension::kJob};
  absl::StatusOr<Report> r = BuildReport(lines_, q, &*book_);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::string> csv = FocusCsv(*r, q);
  ASSERT_TRUE(csv.ok()) << csv.status();
  const std::vector<std::map<std::string, std::string>> rec = CsvRecords(*csv);
  ASSERT_EQ(rec.size(), r->rows.size());
  ASSERT_EQ(rec.size(), 4u);
  EXPECT_EQ(rec[3].at("BillingAccountId"), "bolt");
  EXPECT_EQ(rec[3].at("SubAccountId"), "p2");
  EXPECT_EQ(rec[3].at("ResourceId"), "jobs/c");
  EXPECT_EQ(rec[3].at("ChargePeriodStart"), "2026-11-04T00:00:00Z");
  EXPECT_EQ(rec[3].at("ChargePeriodEnd"), "2026-11-05T00:00:00Z");
  EXPECT_EQ(rec[3].at("ConsumedQuantity"), "");
  EXPECT_EQ(rec[3].at("SkuId"), "");
  EXPECT_EQ(nlohmann::json::parse(rec[3].at("Tags")),
            nlohmann::json({{"job", "jobs/c"},
                            {"project", "p2"},
                            {"tenant", "bolt"},
                            {"user", R"( users/"c",x)"}}));

  absl::StatusOr<std::string> json = FocusJson(*r, q);
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json j = nlohmann::json::parse(*json);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 4u);
  const nlohmann::json& b3 = j[1];  // Nov 3, bolt, job B
  EXPECT_EQ(b3.size(), FocusColumns().size());
  EXPECT_EQ(b3["BillingAccountId"], "bolt");
  EXPECT_EQ(b3["BilledCost"], "1.50");
  EXPECT_EQ(b3["ListCost"], "5.00");
  EXPECT_EQ(b3["BillingCurrency"], "USD");
  EXPECT_EQ(b3["x_SpotPriceGap"], true);
  EXPECT_EQ(b3["x_Attempts"], 1);
  EXPECT_TRUE(b3["ConsumedQuantity"].is_null());
  EXPECT_TRUE(b3["SkuId"].is_null());
  EXPECT_EQ(b3["Tags"]["user"], "users/b");
  EXPECT_EQ(b3["ServiceName"], "Trainyard");
  EXPECT_EQ(b3["ChargeCategory"], "Usage");
  int64_t billed = 0;
  for (const nlohmann::json& row : j) {
    billed += DecimalToMicros(row["BilledCost"].get<std::string>());
  }
  EXPECT_EQ(billed, r->total.tenant_cost_micros);
  // A query that is not the report's is refused.
  q.group_by.pop_back();
  EXPECT_EQ(domain::ErrorField(FocusJson(*r, q).status()), "rows[0].keys");
}

// ---------------------------------------------------------------------------
// Randomized: thousands of metered attempts, random queries, an independent
// grouping.

constexpr TimeMs kBase = kNov - 2 * 24 * kH;  // 2026-10-30T00:00:00Z
constexpr TimeMs kHorizon = 5 * 24 * kH;

struct RawRate {
  std::string flavor;
  Resource resource;
  TimeMs t;
  int64_t price;
};

int64_t RoundHalfEven(__int128 num, __int128 den) {
  __int128 q = num / den;
  const __int128 twice = 2 * (num % den);
  if (twice > den || (twice == den && q % 2 == 1)) ++q;
  return static_cast<int64_t>(q);
}

class RandomReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PriceBook> b = PriceBook::Create("EUR");
    ASSERT_TRUE(b.ok());
    book_.emplace(*std::move(b));
    for (std::string flavor : {"f0", "f1", "s0", "s1"}) {
      for (Resource r : kAllResources) {
        std::vector<TimeMs> times = {kBase - 24 * kH};
        for (int i = Rand(0, 4); i > 0; --i) {
          times.push_back(kBase + Rand64(1, kHorizon));
        }
        std::sort(times.begin(), times.end());
        times.erase(std::unique(times.begin(), times.end()), times.end());
        for (TimeMs t : times) {
          const RawRate raw{flavor, r, t, Rand64(0, 5'000'000'000)};
          ASSERT_TRUE(book_->AddRate({flavor, r, {raw.price, ""}, t}, 0).ok());
          rates_.push_back(raw);
        }
      }
    }
    // s0 has spot prices (with silences: gaps); s1 has none (on-demand).
    for (TimeMs t = kBase + Rand64(0, kH); t < kBase + kHorizon;
         t += Rand(0, 6) == 0 ? Rand64(2 * kH, 5 * kH) : Rand64(1, kH)) {
      ASSERT_TRUE(
          book_->AddSpotPrice({"s0", {Rand64(100'000, 3'000'000), ""}, t}, 0)
              .ok());
    }
    const char* flavors[] = {"f0", "f1", "s0", "s1"};
    for (int i = 0; i < 2000; ++i) {
      AttemptUsage u;
      u.keys.tenant = domain::Cat("t", Rand(0, 3));
      u.keys.project = domain::Cat("p", Rand(0, 2));
      u.keys.user = domain::Cat("users/u", Rand(0, 4));
      u.keys.queue = domain::Cat("q", Rand(0, 2));
      u.keys.cluster = domain::Cat("c", Rand(0, 1));
      u.keys.flavor = flavors[Rand(0, 3)];
      u.keys.job = domain::Cat("jobs/", Rand(0, 1500));  // some retried
      u.keys.attempt = Rand(0, 2);
      if (Rand(0, 2) == 0) u.keys.labels["team"] = Rand(0, 1) ? "a" : "b";
      if (Rand(0, 3) == 0) u.keys.labels["env"] = "prod";
      u.spot = u.keys.flavor[0] == 's';
      u.workers = Rand(1, 4);
      u.gpus_per_worker = Rand(0, 3) == 0 ? 0 : Rand(1, 8);
      u.cpu_millis_per_worker = Rand(0, 2) == 0 ? 0 : Rand64(1, 64'000);
      u.memory_bytes_per_worker =
          Rand(0, 2) == 0 ? 0 : Rand64(1, int64_t{1} << 40);
      u.start_time = kBase + Rand64(0, kHorizon - kH);
      u.end_time = u.start_time +
                   (Rand(0, 4) == 0 ? Rand64(0, 2'000) : Rand64(0, 10 * kH));
      const EndReason reasons[] = {
          EndReason::kCompleted, EndReason::kSpotReclaim,
          EndReason::kNodeFailure, EndReason::kCancelled};
      u.end_reason = reasons[Rand(0, 3)];
      if (Rand(0, 1) == 0) {
        u.last_checkpoint_time =
            u.start_time + Rand64(0, *u.end_time - u.start_time);
      }
      MeterOptions o;
      o.lost_work_rule = static_cast<LostWorkRule>(Rand(0, 2));
      o.split_tenant_percent = Rand(0, 100);
      absl::StatusOr<std::vector<LedgerLine>> l = MeterAttempt(*book_, u, 0, o);
      ASSERT_TRUE(l.ok()) << l.status();
      // Exactly one line starts the attempt: the earliest of its first
      // resource (lines come by resource, then start), at its start.
      int starts = 0;
      for (size_t j = 0; j < l->size(); ++j) {
        const LedgerLine& line = (*l)[j];
        const bool first = j == 0;
        EXPECT_EQ(line.attempt_start, first)
            << "attempt " << i << " line " << j;
        if (first) {
          EXPECT_EQ(line.start, u.start_time);
        }
        starts += line.attempt_start;
      }
      EXPECT_EQ(starts, l->empty() ? 0 : 1);
      lines_.insert(lines_.end(), l->begin(), l->end());
    }
    // Shuffled: the report must not depend on the order of its input.
    std::shuffle(lines_.begin(), lines_.end(), rng_);
  }

  int Rand(int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }
  int64_t Rand64(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  ReportQuery RandomQuery() {
    ReportQuery q;
    q.start = kBase + Rand64(-24, 5 * 24) * kH;
    q.end = q.start + Rand64(1, 6 * 24) * kH;
    const char* zones[] = {"UTC", "America/New_York", "Europe/Berlin",
                           "Australia/Sydney", "Asia/Tokyo"};
    q.time_zone = zones[Rand(0, 4)];
    q.step = static_cast<Step>(Rand(0, 3));
    std::vector<Dimension> dims = {Dimension::kTenant,  Dimension::kProject,
                                   Dimension::kUser,    Dimension::kQueue,
                                   Dimension::kCluster, Dimension::kFlavor,
                                   Dimension::kJob,     Dimension::kResource};
    std::shuffle(dims.begin(), dims.end(), rng_);
    dims.resize(Rand(0, 4));
    q.group_by = dims;
    if (Rand(0, 3) == 0) q.filters[Dimension::kTenant] = "t1";
    if (Rand(0, 4) == 0) q.filters[Dimension::kResource] = "GPU";
    if (Rand(0, 4) == 0) q.filters[Dimension::kFlavor] = "s0";
    if (Rand(0, 3) == 0) q.label_filters["team"] = "a";
    return q;
  }

  std::mt19937_64 rng_{20261127};
  std::optional<PriceBook> book_;
  std::vector<RawRate> rates_;
  std::vector<LedgerLine> lines_;
};

// Written apart from report.cc: the key by a chain of ifs, the list price by
// a linear scan of the raw rate versions.
std::string KeyOf(const LedgerLine& l, Dimension d) {
  if (d == Dimension::kTenant) return l.keys.tenant;
  if (d == Dimension::kProject) return l.keys.project;
  if (d == Dimension::kUser) return l.keys.user;
  if (d == Dimension::kQueue) return l.keys.queue;
  if (d == Dimension::kCluster) return l.keys.cluster;
  if (d == Dimension::kFlavor) return l.keys.flavor;
  if (d == Dimension::kJob) return l.keys.job;
  return std::string(ResourceLabel(l.resource));
}

int64_t ListCostOf(const LedgerLine& l, const std::vector<RawRate>& rates) {
  if (!(l.spot && l.resource == Resource::kGpu) ||
      l.price_source == PriceSource::kRate) {
    return l.cost_micros;
  }
  const RawRate* best = nullptr;
  for (const RawRate& r : rates) {
    if (r.flavor == l.keys.flavor && r.resource == Resource::kGpu &&
        r.t <= l.start && (best == nullptr || r.t > best->t)) {
      best = &r;
    }
  }
  if (best == nullptr) return l.cost_micros;
  return RoundHalfEven(
      static_cast<__int128>(best->price) * l.amount * (l.end - l.start),
      3'600'000);
}

struct Expected {
  std::vector<LedgerLine> lines;
  int64_t list = 0;
  __int128 cpu = 0;
  __int128 memory = 0;
  int64_t attempts = 0;  // attempts that started in the row
};

void ExpectRowIs(const ReportRow& got, const Expected& want,
                 const std::string& what) {
  SCOPED_TRACE(what);
  absl::StatusOr<LineTotals> t = SumLines(want.lines);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(got.cost_micros, t->cost_micros);
  EXPECT_EQ(got.tenant_cost_micros, t->tenant_cost_micros);
  EXPECT_EQ(got.platform_cost_micros, t->platform_cost_micros);
  EXPECT_EQ(got.lost_work_cost_micros, t->lost_work_cost_micros);
  EXPECT_EQ(got.gpu_ms, t->gpu_ms);
  EXPECT_EQ(got.lost_gpu_ms, t->lost_gpu_ms);
  EXPECT_EQ(got.spot_price_gap, t->spot_price_gap);
  EXPECT_EQ(got.list_cost_micros, want.list);
  EXPECT_TRUE(got.cpu_millicore_ms == want.cpu);
  EXPECT_TRUE(got.memory_byte_ms == want.memory);
  EXPECT_EQ(got.attempts, want.attempts);
}

void Accumulate(Expected& e, const LedgerLine& l,
                const std::vector<RawRate>& rates) {
  e.lines.push_back(l);
  e.list += ListCostOf(l, rates);
  if (l.resource == Resource::kCpu) e.cpu += Quantity(l);
  if (l.resource == Resource::kMemory) e.memory += Quantity(l);
  e.attempts += l.attempt_start ? 1 : 0;
}

TEST_F(RandomReportTest, RowsSumToTheTotalAndMatchAnIndependentGrouping) {
  ASSERT_GT(lines_.size(), 20'000u);
  int rows_checked = 0;
  int nonempty = 0;
  std::set<Step> steps_seen;
  for (int iteration = 0; iteration < 60; ++iteration) {
    const ReportQuery q = RandomQuery();
    const std::string what =
        domain::Cat("query ", iteration, ": [", q.start - kBase, ", ",
                    q.end - kBase, ") ", q.time_zone, " step ",
                    static_cast<int>(q.step), " groups ", q.group_by.size());
    SCOPED_TRACE(what);
    absl::StatusOr<Report> r = BuildReport(lines_, q, &*book_);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::StatusOr<std::vector<TimeMs>> bounds = ReportPeriods(q);
    ASSERT_TRUE(bounds.ok());
    steps_seen.insert(q.step);

    // Independently: select by linear checks, find the period by a linear
    // scan of the boundaries, group in a map.
    Expected total;
    std::map<std::pair<TimeMs, std::vector<std::string>>, Expected> groups;
    for (const LedgerLine& l : lines_) {
      if (l.period_start < q.start || l.period_start >= q.end) continue;
      bool match = true;
      for (const auto& [d, v] : q.filters) match = match && KeyOf(l, d) == v;
      for (const auto& [name, v] : q.label_filters) {
        match = match && l.keys.labels.contains(name) &&
                l.keys.labels.at(name) == v;
      }
      if (!match) continue;
      TimeMs period = -1;
      for (size_t i = 0; i + 1 < bounds->size(); ++i) {
        if ((*bounds)[i] <= l.period_start &&
            l.period_start < (*bounds)[i + 1]) {
          period = (*bounds)[i];
        }
      }
      ASSERT_GE(period, 0);
      std::vector<std::string> keys;
      for (Dimension d : q.group_by) keys.push_back(KeyOf(l, d));
      Accumulate(total, l, rates_);
      Accumulate(groups[{period, keys}], l, rates_);
    }
    ExpectRowIs(r->total, total, "total");
    EXPECT_EQ(r->total.period_start, q.start);
    EXPECT_EQ(r->total.period_end, q.end);
    ASSERT_EQ(r->rows.size(), groups.size());
    nonempty += !groups.empty();

    // Row by row, in the same order; and the rows add up to the total.
    ReportRow sum;
    auto it = groups.begin();
    for (size_t i = 0; i < r->rows.size(); ++i, ++it) {
      const ReportRow& row = r->rows[i];
      EXPECT_EQ(row.period_start, it->first.first);
      EXPECT_EQ(row.keys, it->first.second);
      const auto b =
          std::find(bounds->begin(), bounds->end(), row.period_start);
      ASSERT_NE(b, bounds->end());
      EXPECT_EQ(row.period_end, *(b + 1));
      ExpectRowIs(row, it->second, domain::Cat("row ", i));
      ++rows_checked;
      sum.cost_micros += row.cost_micros;
      sum.tenant_cost_micros += row.tenant_cost_micros;
      sum.platform_cost_micros += row.platform_cost_micros;
      sum.lost_work_cost_micros += row.lost_work_cost_micros;
      sum.list_cost_micros += row.list_cost_micros;
      sum.gpu_ms += row.gpu_ms;
      sum.lost_gpu_ms += row.lost_gpu_ms;
      sum.cpu_millicore_ms += row.cpu_millicore_ms;
      sum.memory_byte_ms += row.memory_byte_ms;
      sum.attempts += row.attempts;
      sum.spot_price_gap = sum.spot_price_gap || row.spot_price_gap;
    }
    EXPECT_EQ(sum.cost_micros, r->total.cost_micros);
    EXPECT_EQ(sum.tenant_cost_micros, r->total.tenant_cost_micros);
    EXPECT_EQ(sum.platform_cost_micros, r->total.platform_cost_micros);
    EXPECT_EQ(sum.lost_work_cost_micros, r->total.lost_work_cost_micros);
    EXPECT_EQ(sum.list_cost_micros, r->total.list_cost_micros);
    EXPECT_EQ(sum.gpu_ms, r->total.gpu_ms);
    EXPECT_EQ(sum.lost_gpu_ms, r->total.lost_gpu_ms);
    EXPECT_TRUE(sum.cpu_millicore_ms == r->total.cpu_millicore_ms);
    EXPECT_TRUE(sum.memory_byte_ms == r->total.memory_byte_ms);
    EXPECT_EQ(sum.spot_price_gap, r->total.spot_price_gap);
    // Each attempt counts once, in the row of its first line.
    EXPECT_EQ(sum.attempts, r->total.attempts);
    EXPECT_EQ(r->total.tenant_cost_micros + r->total.platform_cost_micros,
              r->total.cost_micros);

    // The CSV export, parsed back, bills exactly the total.
    if (iteration % 3 == 0) {
      absl::StatusOr<std::string> csv = FocusCsv(*r, q);
      ASSERT_TRUE(csv.ok()) << csv.status();
      const auto rec = CsvRecords(*csv);
      ASSERT_EQ(rec.size(), r->rows.size());
      int64_t billed = 0;
      int64_t platform = 0;
      int64_t list = 0;
      for (const auto& row : rec) {
        billed += DecimalToMicros(row.at("BilledCost"));
        platform += DecimalToMicros(row.at("x_PlatformCost"));
        list += DecimalToMicros(row.at("ListCost"));
        EXPECT_EQ(row.at("BillingCurrency"), "EUR");
      }
      EXPECT_EQ(billed, r->total.tenant_cost_micros);
      EXPECT_EQ(platform, r->total.platform_cost_micros);
      EXPECT_EQ(list, r->total.list_cost_micros);
    }
  }
  // The random queries really exercised the cases.
  EXPECT_EQ(steps_seen.size(), 4u);
  EXPECT_GT(nonempty, 30);
  EXPECT_GT(rows_checked, 2'000);
}

// ---------------------------------------------------------------------------
// Idle cost in reports.

TEST(AddIdle, RefusesWhatIdleCostCannotHonourNamingTheField) {
  ReportQuery q = Day(kNov3);
  q.include_idle = true;
  q.filters[Dimension::kProject] = "p1";
  ExpectFieldError(q, "include_idle", "cannot be filtered by project");
  q.filters = {{Dimension::kTenant, "acme"}};
  ExpectFieldError(q, "include_idle", "no tenant's");
  q.filters = {{Dimension::kFlavor, "a100"}};
  q.label_filters["team"] = "x";
  ExpectFieldError(q, "include_idle", "job labels");
  q.label_filters.clear();
  EXPECT_TRUE(ValidateReportQuery(q).ok());
  q.group_by = {Dimension::kUser};  // idle rows: an empty user
  EXPECT_TRUE(ValidateReportQuery(q).ok());
  q.share_idle = true;
  ExpectFieldError(q, "share_idle", "cannot be grouped by user");
  q.group_by = {Dimension::kTenant, Dimension::kFlavor};
  q.filters[Dimension::kTenant] = "acme";
  EXPECT_TRUE(ValidateReportQuery(q).ok());
  q.filters[Dimension::kQueue] = "q";
  ExpectFieldError(q, "share_idle", "cannot be filtered by queue");
}

// Hand-computed: a100 idle $5 at 10:00 (shared acme $3, bolt $2) and $3 at
// 11:00 (a spot gap; no usage, so no shares); h100 idle -$1 at 10:00 (all
// acme's).
TEST(AddIdle, AddsIdleRowsOrSharesToTheirRowsAndTheTotal) {
  const TimeMs h10 = kNov3 + 10 * kH, h11 = kNov3 + 11 * kH;
  const std::vector<IdleLine> idle = {
      {.pool = "a100", .period_start = h10, .idle_micros = 5'000'000},
      {.pool = "h100", .period_start = h10, .idle_micros = -1'000'000},
      {.pool = "a100",
       .period_start = h11,
       .idle_micros = 3'000'000,
       .spot_price_gap = true},
      // Outside the window.
      {.pool = "a100", .period_start = h10 + 24 * kH, .idle_micros = 7}};
  const std::vector<IdleShareLine> shares = {{.pool = "a100",
                                              .period_start = h10,
                                              .tenant = "acme",
                                              .micros = 3'000'000},
                                             {.pool = "a100",
                                              .period_start = h10,
                                              .tenant = "bolt",
                                              .micros = 2'000'000},
                                             {.pool = "h100",
                                              .period_start = h10,
                                              .tenant = "acme",
                                              .micros = -1'000'000}};
  ReportQuery q = Day(kNov3);
  q.group_by = {Dimension::kTenant, Dimension::kFlavor};
  q.include_idle = true;
  struct Want {
    std::vector<std::string> keys;
    int64_t cost, tenant, platform;
    bool gap;
  };
  auto check = [&](const ReportQuery& query, const std::vector<Want>& want,
                   int64_t total) {
    absl::StatusOr<Report> r = BuildReport({}, query, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(AddIdle(idle, shares, query, *r).ok());
    ASSERT_EQ(r->rows.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const ReportRow& row = r->rows[i];
      EXPECT_EQ(row.keys, want[i].keys) << i;
      EXPECT_EQ(row.cost_micros, want[i].cost) << i;
      EXPECT_EQ(row.idle_cost_micros, want[i].cost) << i;
      EXPECT_EQ(row.tenant_cost_micros, want[i].tenant) << i;
      EXPECT_EQ(row.platform_cost_micros, want[i].platform) << i;
      EXPECT_EQ(row.spot_price_gap, want[i].gap) << i;
      EXPECT_EQ(row.period_start, query.start) << i;
    }
    EXPECT_EQ(r->total.cost_micros, total);
    EXPECT_EQ(r->total.idle_cost_micros, total);
  };
  check(q,
        {{{"__idle__", "a100"}, 8'000'000, 0, 8'000'000, true},
         {{"__idle__", "h100"}, -1'000'000, 0, -1'000'000, false}},
        7'000'000);
  q.share_idle = true;
  check(q,
        {{{"__idle__", "a100"}, 3'000'000, 0, 3'000'000, true},
         {{"acme", "a100"}, 3'000'000, 3'000'000, 0, false},
         {{"acme", "h100"}, -1'000'000, -1'000'000, 0, false},
         {{"bolt", "a100"}, 2'000'000, 2'000'000, 0, false}},
        7'000'000);
  q.filters[Dimension::kTenant] = "acme";
  check(q,
        {{{"acme", "a100"}, 3'000'000, 3'000'000, 0, false},
         {{"acme", "h100"}, -1'000'000, -1'000'000, 0, false}},
        2'000'000);
  q.filters = {{Dimension::kFlavor, "a100"}};
  q.group_by = {Dimension::kTenant};
  check(q,
        {{{"__idle__"}, 3'000'000, 0, 3'000'000, true},
         {{"acme"}, 3'000'000, 3'000'000, 0, false},
         {{"bolt"}, 2'000'000, 2'000'000, 0, false}},
        8'000'000);
  // Hours: the rows of each period.
  ReportQuery hourly = Day(kNov3);
  hourly.step = Step::kHour;
  hourly.group_by = {Dimension::kFlavor};
  hourly.include_idle = true;
  absl::StatusOr<Report> r = BuildReport({}, hourly, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(AddIdle(idle, shares, hourly, *r).ok());
  ASSERT_EQ(r->rows.size(), 3u);
  EXPECT_EQ(r->rows[0].period_start, h10);
  EXPECT_EQ(r->rows[0].keys, std::vector<std::string>{"a100"});
  EXPECT_EQ(r->rows[0].cost_micros, 5'000'000);
  EXPECT_EQ(r->rows[1].keys, std::vector<std::string>{"h100"});
  EXPECT_EQ(r->rows[2].period_start, h11);
  EXPECT_EQ(r->rows[2].period_end, h11 + kH);
  EXPECT_EQ(r->rows[2].cost_micros, 3'000'000);
}

}  // namespace
}  // namespace trainyard::accounting::pricing::report_test
