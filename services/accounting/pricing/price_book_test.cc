#include "services/accounting/pricing/price_book.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing::price_book_test {
namespace {

// 2026-11-01T00:00:00Z: the first open month in these tests.
constexpr TimeMs kNov = 1'793'491'200'000;
constexpr TimeMs kH = kMsPerHour;

PriceBook Book() {
  absl::StatusOr<PriceBook> book = PriceBook::Create("USD");
  EXPECT_TRUE(book.ok()) << book.status();
  return *std::move(book);
}

RateVersion Rate(std::string flavor, Resource r, int64_t micros, TimeMs t,
                 std::string currency = "") {
  return {std::move(flavor), r, {micros, std::move(currency)}, t};
}

// Everything a book holds, for "unchanged" checks.
std::string Dump(const PriceBook& book) {
  std::string out;
  for (const RateVersion& r : book.AllRates()) {
    out += domain::Cat("R ", r.flavor, " ", ResourceLabel(r.resource), " ",
                       r.price_per_unit_hour.micros, " ",
                       r.price_per_unit_hour.currency_code, " ",
                       r.effective_time, "\n");
  }
  for (const SpotPrice& s : book.AllSpotPrices()) {
    out += domain::Cat("S ", s.flavor, " ", s.gpu_hour_price.micros, " ",
                       s.effective_time, "\n");
  }
  for (const Commitment& c : book.AllCommitments()) {
    out += domain::Cat("C ", c.flavor, " ", c.amount.micros, " ", c.start_time,
                       " ", c.end_time, "\n");
  }
  return out;
}

TEST(PriceBookTest, CreateNeedsAKnownCurrency) {
  EXPECT_TRUE(PriceBook::Create("EUR").ok());
  for (const char* bad : {"", "usd", "ABC", "US", "HRK"}) {
    absl::StatusOr<PriceBook> book = PriceBook::Create(bad);
    ASSERT_FALSE(book.ok()) << bad;
    EXPECT_EQ(book.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(domain::ErrorField(book.status()), "currency");
  }
}

TEST(PriceBookTest, RateVersionsAreLookedUpByTime) {
  PriceBook book = Book();
  ASSERT_TRUE(
      book.AddRate(Rate("a100", Resource::kGpu, 2'000'000, kNov + 2 * kH), kNov)
          .ok());
  ASSERT_TRUE(
      book.AddRate(Rate("a100", Resource::kGpu, 3'000'000, kNov, "USD"), kNov)
          .ok());  // out of order is fine
  ASSERT_TRUE(
      book.AddRate(Rate("a100", Resource::kCpu, 40'000, kNov), kNov).ok());
  EXPECT_FALSE(book.RateAt("a100", Resource::kGpu, kNov - 1).has_value());
  EXPECT_EQ(book.RateAt("a100", Resource::kGpu, kNov)->micros, 3'000'000);
  EXPECT_EQ(book.RateAt("a100", Resource::kGpu, kNov + 2 * kH - 1)->micros,
            3'000'000);
  EXPECT_EQ(book.RateAt("a100", Resource::kGpu, kNov + 2 * kH)->micros,
            2'000'000);
  EXPECT_EQ(book.RateAt("a100", Resource::kGpu, kNov + 2 * kH)->effective_time,
            kNov + 2 * kH);
  EXPECT_EQ(book.RateAt("a100", Resource::kCpu, kNov + 100 * kH)->micros,
            40'000);
  EXPECT_FALSE(book.RateAt("a100", Resource::kMemory, kNov).has_value());
  EXPECT_FALSE(book.RateAt("h100", Resource::kGpu, kNov).has_value());
  EXPECT_EQ(book.RateChanges("a100", Resource::kGpu),
            (std::vector<TimeMs>{kNov, kNov + 2 * kH}));
  std::vector<RateVersion> all = book.AllRates();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].price_per_unit_hour.currency_code, "USD");
}

TEST(PriceBookTest, SpotSeriesAndCommitments) {
  PriceBook book = Book();
  ASSERT_TRUE(
      book.AddSpotPrice({"a100-spot", {900'000, ""}, kNov + kH}, kNov).ok());
  ASSERT_TRUE(
      book.AddSpotPrice({"a100-spot", {800'000, "USD"}, kNov}, kNov).ok());
  const std::vector<PriceAt>& series = book.SpotSeries("a100-spot");
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].effective_time, kNov);
  EXPECT_EQ(series[0].micros, 800'000);
  EXPECT_EQ(series[1].micros, 900'000);
  EXPECT_TRUE(book.SpotSeries("other").empty());

  ASSERT_TRUE(book.AddCommitment(
                      {"h100", {720'000'000, ""}, kNov, kNov + 720 * kH}, kNov)
                  .ok());
  ASSERT_EQ(book.Commitments("h100").size(), 1u);
  EXPECT_TRUE(book.Commitments("a100").empty());
}

struct BadRate {
  RateVersion rate;
  std::string field;
};

TEST(PriceBookTest, BadRatesNameTheFieldAndChangeNothing) {
  PriceBook book = Book();
  ASSERT_TRUE(
      book.AddRate(Rate("a100", Resource::kGpu, 2'000'000, kNov + kH), kNov)
          .ok());
  const std::string before = Dump(book);
  const std::vector<BadRate> cases = {
      {Rate("", Resource::kGpu, 1, kNov + 5 * kH), "rate.flavor"},
      {Rate("a100", static_cast<Resource>(7), 1, kNov + 5 * kH),
       "rate.resource"},
      {Rate("a100", Resource::kGpu, -1, kNov + 5 * kH),
       "rate.price_per_unit_hour.micros"},
      {Rate("a100", Resource::kGpu, kMaxPricePerUnitHourMicros + 1,
            kNov + 5 * kH),
       "rate.price_per_unit_hour.micros"},
      {Rate("a100", Resource::kGpu, INT64_MAX, kNov + 5 * kH),
       "rate.price_per_unit_hour.micros"},
      {Rate("a100", Resource::kGpu, 1, kNov + 5 * kH, "XYZ"),
       "rate.price_per_unit_hour.currency_code"},
      {Rate("a100", Resource::kGpu, 1, kNov + 5 * kH, "usd"),
       "rate.price_per_unit_hour.currency_code"},
      {Rate("a100", Resource::kGpu, 1, kNov + 5 * kH, "EUR"),
       "rate.price_per_unit_hour.currency_code"},
      // Same flavor, resource and instant as the existing version: overlap.
      {Rate("a100", Resource::kGpu, 3'000'000, kNov + kH),
       "rate.effective_time"},
      // Backdated into a closed month.
      {Rate("a100", Resource::kGpu, 1, kNov - 1), "rate.effective_time"},
      {Rate("a100", Resource::kCpu, 1, kNov - 30 * 24 * kH),
       "rate.effective_time"},
      {Rate("a100", Resource::kCpu, 1, kMaxTimeMs), "rate.effective_time"},
  };
  for (const BadRate& c : cases) {
    absl::Status st = book.AddRate(c.rate, kNov);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(domain::ErrorField(st), c.field) << st;
    EXPECT_TRUE(absl::StartsWith(st.message(), c.field + ": ")) << st;
    EXPECT_EQ(Dump(book), before) << c.field;
  }
  absl::Status negative =
      book.AddRate(Rate("a100", Resource::kGpu, -1, kNov + 5 * kH), kNov);
  EXPECT_EQ(negative.message(),
            "rate.price_per_unit_hour.micros: must not be negative, got -1");
  // The boundaries themselves are fine: the first open instant, the cap, 0.
  EXPECT_TRUE(book.AddRate(Rate("a100", Resource::kCpu, 0, kNov), kNov).ok());
  EXPECT_TRUE(book.AddRate(Rate("a100", Resource::kMemory,
                                kMaxPricePerUnitHourMicros, kNov),
                           kNov)
                  .ok());
  // Another resource or flavor at the same instant is not an overlap.
  EXPECT_TRUE(
      book.AddRate(Rate("h100", Resource::kGpu, 1, kNov + kH), kNov).ok());
}

TEST(PriceBookTest, BadSpotPricesAndCommitmentsNameTheFieldAndChangeNothing) {
  PriceBook book = Book();
  ASSERT_TRUE(book.AddSpotPrice({"spot", {1, ""}, kNov + kH}, kNov).ok());
  ASSERT_TRUE(
      book.AddCommitment({"res", {100, ""}, kNov, kNov + 10 * kH}, kNov).ok());
  const std::string before = Dump(book);
  struct SpotCase {
    SpotPrice spot;
    std::string field;
  };
  for (const SpotCase& c : std::vector<SpotCase>{
           {{"", {1, ""}, kNov + 2 * kH}, "spot_price.flavor"},
           {{"spot", {-5, ""}, kNov + 2 * kH},
            "spot_price.gpu_hour_price.micros"},
           {{"spot", {kMaxPricePerUnitHourMicros + 1, ""}, kNov + 2 * kH},
            "spot_price.gpu_hour_price.micros"},
           {{"spot", {1, "QQQ"}, kNov + 2 * kH},
            "spot_price.gpu_hour_price.currency_code"},
           {{"spot", {1, "GBP"}, kNov + 2 * kH},
            "spot_price.gpu_hour_price.currency_code"},
           {{"spot", {2, ""}, kNov + kH}, "spot_price.effective_time"},
           {{"spot", {2, ""}, kNov - kH}, "spot_price.effective_time"},
           {{"spot", {2, ""}, -1}, "spot_price.effective_time"},
       }) {
    absl::Status st = book.AddSpotPrice(c.spot, kNov);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(domain::ErrorField(st), c.field) << st;
    EXPECT_EQ(Dump(book), before) << c.field;
  }
  struct CommitCase {
    Commitment commitment;
    std::string field;
  };
  for (const CommitCase& c : std::vector<CommitCase>{
           {{"", {1, ""}, kNov, kNov + kH}, "commitment.flavor"},
           {{"res", {-1, ""}, kNov, kNov + kH}, "commitment.amount.micros"},
           {{"res", {1, "JPY"}, kNov, kNov + kH},
            "commitment.amount.currency_code"},
           {{"res", {1, "EURO"}, kNov, kNov + kH},
            "commitment.amount.currency_code"},
           {{"res", {1, ""}, kNov - 1, kNov + kH}, "commitment.start_time"},
           {{"res", {1, ""}, kNov + kH, kNov + kH}, "commitment.end_time"},
           {{"res", {1, ""}, kNov + kH, kNov}, "commitment.end_time"},
       }) {
    absl::Status st = book.AddCommitment(c.commitment, kNov);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(domain::ErrorField(st), c.field) << st;
    EXPECT_EQ(Dump(book), before) << c.field;
  }
}

TEST(PriceBookTest, UnitsPerUnitHour) {
  EXPECT_EQ(UnitMsPerUnitHour(Resource::kGpu), 3'600'000);
  EXPECT_EQ(UnitMsPerUnitHour(Resource::kCpu), 3'600'000'000);
  EXPECT_EQ(UnitMsPerUnitHour(Resource::kMemory), 3'865'470'566'400'000);
}

}  // namespace
}  // namespace trainyard::accounting::pricing::price_book_test
