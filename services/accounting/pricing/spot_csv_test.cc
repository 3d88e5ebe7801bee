#include "services/accounting/pricing/spot_csv.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing::spot_csv_test {
namespace {

// 2026-11-01T00:00:00Z: 20,758 days after the epoch (56 years with 14 leap
// days, then January to October 2026: 304 days) × 86,400,000 ms.
constexpr TimeMs kNov = 1'793'491'200'000;
constexpr TimeMs kH = kMsPerHour;
constexpr TimeMs kDay = 24 * kH;

constexpr std::string_view kHeader =
    "pool,effective_time,price_per_gpu_hour,currency\n";

std::string Describe(const std::vector<SpotPrice>& prices) {
  std::string out;
  for (const SpotPrice& p : prices) {
    out += domain::Cat(p.flavor, "|", p.effective_time, "|",
                       p.gpu_hour_price.micros, "|",
                       p.gpu_hour_price.currency_code, "\n");
  }
  return out;
}

// Parsing `text` fails with InvalidArgument whose message starts with
// `prefix`, naming `column` in the field payload ("" for none).
void ExpectRefused(std::string_view text, std::string_view prefix,
                   std::string_view column) {
  SCOPED_TRACE(text);
  absl::StatusOr<std::vector<SpotPrice>> got = ParseSpotPriceCsv(text);
  ASSERT_FALSE(got.ok()) << Describe(*got);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(domain::StdView(got.status().message()).starts_with(prefix))
      << got.status().message() << "\nexpected to start with: " << prefix;
  EXPECT_EQ(domain::ErrorField(got.status()), column);
}

std::string Row(std::string_view pool, std::string_view time,
                std::string_view price, std::string_view currency = "USD") {
  return domain::Cat(pool, ",", time, ",", price, ",", currency, "\n");
}

TEST(ParseSpotPriceCsv, QuotedFieldsCrlfAnyColumnOrder) {
  const std::string text = domain::Cat(
      "\xEF\xBB\xBF\"currency\",pool,price_per_gpu_hour,effective_time\r\n",
      "USD,\"a100-spot\",2.4567,2026-11-01T00:00:00Z\r\n", "\r\n",
      "USD,\"h100,spot \"\"eu\"\"\",0.000001,2026-11-02T01:30:00.250Z\r\n",
      "\"USD\", a100-spot ,\"10\",2026-11-01T01:00:00Z\r\n",
      "EUR,\"multi\r\nline\",000.5,2026-11-01T00:00:00Z");
  absl::StatusOr<std::vector<SpotPrice>> got = ParseSpotPriceCsv(text);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0].flavor, "a100-spot");
  EXPECT_EQ((*got)[0].effective_time, kNov);
  EXPECT_EQ((*got)[0].gpu_hour_price.micros, 2'456'700);
  EXPECT_EQ((*got)[0].gpu_hour_price.currency_code, "USD");
  EXPECT_EQ((*got)[1].flavor, "h100,spot \"eu\"");
  // One day, 1 h 30 min and 250 ms after Nov 1.
  EXPECT_EQ((*got)[1].effective_time, kNov + 91'800'250);
  EXPECT_EQ((*got)[1].gpu_hour_price.micros, 1);
  EXPECT_EQ((*got)[2].flavor, "a100-spot");  // unquoted: spaces trimmed
  EXPECT_EQ((*got)[2].effective_time, kNov + kH);
  EXPECT_EQ((*got)[2].gpu_hour_price.micros, 10'000'000);
  EXPECT_EQ((*got)[3].flavor, "multi\r\nline");
  EXPECT_EQ((*got)[3].gpu_hour_price.micros, 500'000);
  EXPECT_EQ((*got)[3].gpu_hour_price.currency_code, "EUR");
}

TEST(ParseSpotPriceCsv, LargestPriceAndHeaderOnly) {
  absl::StatusOr<std::vector<SpotPrice>> got = ParseSpotPriceCsv(domain::Cat(
      kHeader, Row("p", "9999-12-31T23:59:59.999Z", "1000000000.000000")));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].gpu_hour_price.micros, 1'000'000'000'000'000);
  EXPECT_EQ((*got)[0].effective_time, kMaxTimeMs - 1);

  got = ParseSpotPriceCsv(kHeader);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
}

TEST(ParseSpotPriceCsv, LineNumbersCountPhysicalLines) {
  // The quoted pool of line 3 spans lines 3 and 4; blank line 5.
  const std::string text =
      domain::Cat("\n", kHeader, "\"two\nlines\",2026-11-01T00:00:00Z,1,USD\n",
                  "\n", Row("a", "2026-11-01T00:00:00Z", "1"),
                  Row("b", "2026-11-01T00:00:00Z", "1"),
                  Row("c", "2026-11-01T00:00:00Z", "1.1234567"));
  ExpectRefused(text,
                "line 8, price_per_gpu_hour: more than 6 decimals, got "
                "\"1.1234567\"",
                "price_per_gpu_hour");
  ExpectRefused(
      domain::Cat(kHeader, "\"two\nlines\",2026-11-01T00:00:00Z,-1,USD\n"),
      "line 2, price_per_gpu_hour: must not be negative", "price_per_gpu_hour");
}

TEST(ParseSpotPriceCsv, RefusesBadFilesNamingTheLine) {
  const std::string ok = Row("a100", "2026-11-01T00:00:00Z", "1");
  ExpectRefused("", "line 1: empty file", "");
  ExpectRefused("\r\n\n", "line 1: empty file", "");
  ExpectRefused("pool,effective_time,price_per_gpu_hour\na,b,c\n",
                "line 1, currency: missing from the header", "currency");
  ExpectRefused("pool,effective_time,price_per_gpu_hour,currency,region\n",
                "line 1: unknown column \"region\"", "");
  ExpectRefused("pool,effective_time,pool,price_per_gpu_hour,currency\n",
                "line 1, pool: named twice in the header", "pool");
  ExpectRefused(domain::Cat(kHeader, ok, "a100,2026-11-01T01:00:00Z,1\n"),
                "line 3: 3 fields, expected 4", "");
  ExpectRefused(domain::Cat(kHeader, ok, Row("b", "2026-11-01T00:00:00Z", "1"),
                            "a,b,c,d,e\n"),
                "line 4: 5 fields, expected 4", "");
}

TEST(ParseSpotPriceCsv, RefusesBadQuoting) {
  const std::string ok = Row("a100", "2026-11-01T00:00:00Z", "1");
  ExpectRefused(
      domain::Cat(kHeader, ok, "a100,\"2026-11-01T01:00:00Z\"x,1,USD\n"),
      "line 3, effective_time: bad quoting", "effective_time");
  ExpectRefused(domain::Cat(kHeader, "a1\"00,2026-11-01T01:00:00Z,1,USD\n"),
                "line 2, pool: bad quoting", "pool");
  ExpectRefused(domain::Cat(kHeader, ok,
                            "\"a100,2026-11-01T01:00:00Z,1,USD\n"
                            "b,2026-11-01T01:00:00Z,1,USD\n"),
                "line 3, pool: bad quoting: a quoted field is never closed",
                "pool");
  ExpectRefused("pool,\"effective_time\"\",price_per_gpu_hour,currency\n",
                "line 1: bad quoting", "");
}

TEST(ParseSpotPriceCsv, RefusesBadValues) {
  const std::string ok = Row("a100", "2026-11-01T00:00:00Z", "1");
  auto refused = [&](std::string_view row, std::string_view prefix,
                     std::string_view column) {
    ExpectRefused(domain::Cat(kHeader, ok, row), prefix, column);
  };
  refused(Row("", "2026-11-01T01:00:00Z", "1"), "line 3, pool: required",
          "pool");
  refused(Row("a", "2026-11-01T01:00:00Z", "-0.5"),
          "line 3, price_per_gpu_hour: must not be negative, got \"-0.5\"",
          "price_per_gpu_hour");
  for (std::string_view bad :
       {"1e3", "1.", ".5", "+1", "1 000", "\"1,5\"", "0x10", "1.2.3"}) {
    refused(Row("a", "2026-11-01T01:00:00Z", bad),
            "line 3, price_per_gpu_hour: must be a decimal number like 2.4567",
            "price_per_gpu_hour");
  }
  refused(Row("a", "2026-11-01T01:00:00Z", ""),
          "line 3, price_per_gpu_hour: required", "price_per_gpu_hour");
  refused(Row("a", "2026-11-01T01:00:00Z", "2.4567891"),
          "line 3, price_per_gpu_hour: more than 6 decimals",
          "price_per_gpu_hour");
  refused(Row("a", "2026-11-01T01:00:00Z", "1000000000.000001"),
          "line 3, price_per_gpu_hour: must be at most 1000000000",
          "price_per_gpu_hour");
  refused(Row("a", "2026-11-01T01:00:00Z", "99999999999999999999999"),
          "line 3, price_per_gpu_hour: must be at most 1000000000",
          "price_per_gpu_hour");
  for (std::string_view bad : {"XYZ", "usd", "", "US"}) {
    refused(Row("a", "2026-11-01T01:00:00Z", "1", bad),
            "line 3, currency: must be an ISO 4217 currency code", "currency");
  }
  for (std::string_view bad :
       {"2026-11-01 01:00:00", "2026-11-01T01:00:00+01:00", "1793491200000"}) {
    refused(Row("a", bad, "1"),
            "line 3, effective_time: must be RFC 3339 in UTC, ending in Z",
            "effective_time");
  }
  for (std::string_view bad : {"2026-13-01T00:00:00Z", "2026-11-01Z",
                               "2026-11-01T25:00:00Z", "yesterdayZ"}) {
    refused(Row("a", bad, "1"),
            "line 3, effective_time: must be RFC 3339 in UTC (",
            "effective_time");
  }
  refused(Row("a", "1969-12-31T23:59:59Z", "1"),
          "line 3, effective_time: must be in years 1970 to 9999",
          "effective_time");
  refused(Row("a", "2026-11-01T01:00:00.0001Z", "1"),
          "line 3, effective_time: must be a whole millisecond",
          "effective_time");
  refused(Row("a", "", "1"), "line 3, effective_time: required",
          "effective_time");
}

TEST(ParseSpotPriceCsv, RefusesDuplicatePoolAndTime) {
  // The same instant spelled twice; another pool at that instant is fine.
  ExpectRefused(domain::Cat(kHeader, Row("a100", "2026-11-01T00:00:00Z", "1"),
                            Row("h100", "2026-11-01T00:00:00Z", "2"),
                            Row("a100", "2026-11-01T01:00:00Z", "3"),
                            Row("a100", "2026-11-01T00:00:00.000Z", "4")),
                "line 5, effective_time: pool a100 already has a price at "
                "2026-11-01T00:00:00.000Z on line 2",
                "effective_time");
}

// The example file of docs/accounting.md ("Loading spot prices from CSV")
// loads, to these hand-read values.
TEST(ParseSpotPriceCsv, ExampleOfTheDocs) {
  const char* root = std::getenv("TRAINYARD_SOURCE_DIR");
  std::ifstream in(
      domain::Cat(root == nullptr ? TRAINYARD_SOURCE_DIR_DEFAULT : root,
                  "/docs/accounting.md"));
  ASSERT_TRUE(in.good());
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const size_t start = text.find("```csv\n");
  ASSERT_NE(start, std::string::npos);
  const size_t end = text.find("```\n", start + 7);
  ASSERT_NE(end, std::string::npos);
  absl::StatusOr<std::vector<SpotPrice>> got = ParseSpotPriceCsv(
      std::string_view(text).substr(start + 7, end - start - 7));
  ASSERT_TRUE(got.ok()) << got.status();
  // Nov 3 is 2 days after Nov 1; 08:00 and 10:00 are 8 h and 10 h later.
  EXPECT_EQ(Describe(*got),
            domain::Cat("a100-spot|", kNov + 2 * kDay + 8 * kH, "|950000|USD\n",
                        "a100-spot|", kNov + 2 * kDay + 10 * kH,
                        "|1102500|USD\n", "h100-spot|",
                        kNov + 2 * kDay + 8 * kH + 500, "|2456700|USD\n"));
}

// Everything a book holds of spot prices.
std::string SpotDump(const PriceBook& book) {
  return Describe(book.AllSpotPrices());
}

PriceBook Book(std::string_view currency = "USD") {
  absl::StatusOr<PriceBook> book = PriceBook::Create(currency);
  EXPECT_TRUE(book.ok()) << book.status();
  return *std::move(book);
}

TEST(ImportSpotPrices, AddsAllOfAParsedFile) {
  absl::StatusOr<std::vector<SpotPrice>> prices = ParseSpotPriceCsv(
      domain::Cat(kHeader, Row("a100-spot", "2026-11-01T01:00:00Z", "0.95"),
                  Row("a100-spot", "2026-11-01T00:00:00Z", "1.25"),
                  Row("h100-spot", "2026-11-02T00:00:00Z", "3")));
  ASSERT_TRUE(prices.ok()) << prices.status();
  PriceBook book = Book();
  ASSERT_TRUE(ImportSpotPrices(book, *prices, kNov).ok());
  const std::vector<PriceAt>& a100 = book.SpotSeries("a100-spot");
  ASSERT_EQ(a100.size(), 2u);
  EXPECT_EQ(a100[0].micros, 1'250'000);
  EXPECT_EQ(a100[0].effective_time, kNov);
  EXPECT_EQ(a100[1].micros, 950'000);
  EXPECT_EQ(a100[1].effective_time, kNov + kH);
  const std::vector<PriceAt>& h100 = book.SpotSeries("h100-spot");
  ASSERT_EQ(h100.size(), 1u);
  EXPECT_EQ(h100[0].micros, 3'000'000);
  EXPECT_EQ(h100[0].effective_time, kNov + kDay);
}

TEST(ImportSpotPrices, AllOrNothing) {
  PriceBook book = Book();
  ASSERT_TRUE(
      book.AddSpotPrice({"a100-spot", {950'000, "USD"}, kNov + kH}, kNov).ok());
  const std::string before = SpotDump(book);
  ASSERT_EQ(before, domain::Cat("a100-spot|", kNov + kH, "|950000|USD\n"));

  struct Case {
    std::string name;
    std::vector<SpotPrice> prices;
    TimeMs closed_before;
    std::string message_prefix;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"the last one is already in the book",
       {{"h100-spot", {1, "USD"}, kNov},
        {"a100-spot", {2, "USD"}, kNov},
        {"a100-spot", {3, "USD"}, kNov + kH}},
       kNov,
       "spot_prices[2].spot_price.effective_time: pool a100-spot already has",
       "spot_prices[2].spot_price.effective_time"},
      {"another currency than the book's",
       {{"h100-spot", {1, "USD"}, kNov}, {"h100-spot", {2, "EUR"}, kNov + kH}},
       kNov,
       "spot_prices[1].spot_price.gpu_hour_price.currency_code: ",
       "spot_prices[1].spot_price.gpu_hour_price.currency_code"},
      {"in a closed month",
       {{"h100-spot", {1, "USD"}, kNov + kDay},
        {"h100-spot", {2, "USD"}, kNov}},
       kNov + kDay,
       "spot_prices[1].spot_price.effective_time: must not be before",
       "spot_prices[1].spot_price.effective_time"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::Status status = ImportSpotPrices(book, c.prices, c.closed_before);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(domain::StdView(status.message()).starts_with(c.message_prefix))
        << status.message();
    EXPECT_EQ(domain::ErrorField(status), c.field);
    EXPECT_EQ(SpotDump(book), before);
  }
  // Each of those lists without its bad price goes in whole.
  ASSERT_TRUE(ImportSpotPrices(book,
                               {{"h100-spot", {1, "USD"}, kNov},
                                {"a100-spot", {2, "USD"}, kNov}},
                               kNov)
                  .ok());
  EXPECT_EQ(SpotDump(book),
            domain::Cat("a100-spot|", kNov, "|2|USD\n", "a100-spot|", kNov + kH,
                        "|950000|USD\n", "h100-spot|", kNov, "|1|USD\n"));
}

}  // namespace
}  // namespace trainyard::accounting::pricing::spot_csv_test
