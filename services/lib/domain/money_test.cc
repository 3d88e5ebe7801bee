#include "services/lib/domain/money.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "services/lib/domain/errors.h"

namespace trainyard::domain {
namespace {

using trainyard::v1::Money;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

Money M(std::string currency, int64_t micros) {
  Money m;
  m.set_currency_code(currency);
  m.set_micros(micros);
  return m;
}

TEST(FormatMoneyTest, Cases) {
  const std::pair<Money, std::string> cases[] = {
      {M("USD", 12'345'678), "USD 12.345678"},
      {M("", 12'340'000), "USD 12.34"},
      {M("EUR", -500'000), "EUR -0.50"},
      {M("USD", 0), "USD 0.00"},
      {M("USD", 3'000'000), "USD 3.00"},
      {M("USD", 1), "USD 0.000001"},
      {M("USD", -1), "USD -0.000001"},
      {M("USD", 10'100'000), "USD 10.10"},
      {M("USD", 10'120'300), "USD 10.1203"},
      {M("USD", kMax), "USD 9223372036854.775807"},
      {M("USD", kMin), "USD -9223372036854.775808"},
  };
  for (const auto& [money, want] : cases) EXPECT_EQ(FormatMoney(money), want);
}

TEST(ParseMoneyTest, Good) {
  const std::pair<std::string, Money> cases[] = {
      {"12.34 USD", M("USD", 12'340'000)},
      {"USD 12.34", M("USD", 12'340'000)},
      {"-0.5 EUR", M("EUR", -500'000)},
      {"EUR -0.5", M("EUR", -500'000)},
      {"USD 7", M("USD", 7'000'000)},
      {"  USD   1.000001 ", M("USD", 1'000'001)},
      {"USD 0.000001", M("USD", 1)},
      {"USD 007.10", M("USD", 7'100'000)},
      {"USD 9223372036854.775807", M("USD", kMax)},
      {"USD -9223372036854.775808", M("USD", kMin)},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<Money> got = ParseMoney(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(got->currency_code(), want.currency_code()) << text;
    EXPECT_EQ(got->micros(), want.micros()) << text;
  }
}

TEST(ParseMoneyTest, Bad) {
  for (const std::string& bad :
       std::vector<std::string>{"",
                                "12.34",
                                "USD",
                                "12.3456789 USD",
                                "USD 9223372036854.775808",
                                "USD -9223372036854.775809",
                                "USD 99999999999999999999",
                                "usd 1",
                                "Usd 1",
                                "USDX 1",
                                "USD 1.",
                                "USD .5",
                                "USD 1e3",
                                "USD 1,000",
                                "USD EUR",
                                "1 2",
                                "USD +1",
                                "USD --1",
                                "USD 1.2.3",
                                "USD - 1",
                                "USD 1 EUR",
                                "USD\t1x",
                                "USD 0x10"}) {
    absl::StatusOr<Money> got = ParseMoney(bad);
    ASSERT_FALSE(got.ok()) << "\"" << bad << "\" parsed as " << got->micros();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(MoneyTest, RoundTrip) {
  for (int64_t micros :
       {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{999'999},
        int64_t{1'000'000}, int64_t{-1'234'567}, int64_t{12'345'678'901}, kMax,
        kMin, kMax - 1, kMin + 1}) {
    for (const std::string& currency :
         std::vector<std::string>{"USD", "EUR", "JPY"}) {
      const Money m = M(currency, micros);
      absl::StatusOr<Money> back = ParseMoney(FormatMoney(m));
      ASSERT_TRUE(back.ok()) << FormatMoney(m) << ": " << back.status();
      EXPECT_EQ(back->micros(), micros);
      EXPECT_EQ(back->currency_code(), currency);
    }
  }
}

TEST(CheckedTest, AddSubMul) {
  EXPECT_EQ(*CheckedAdd(2, 3), 5);
  EXPECT_EQ(*CheckedAdd(kMax, 0), kMax);
  EXPECT_EQ(CheckedAdd(kMax, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(CheckedAdd(kMin, -1).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*CheckedSub(0, kMax), -kMax);
  EXPECT_FALSE(CheckedSub(kMin, 1).ok());
  EXPECT_FALSE(CheckedSub(0, kMin).ok());
  EXPECT_EQ(*CheckedMul(3'600, 1'000'000), 3'600'000'000);
  EXPECT_EQ(*CheckedMul(-4, 5), -20);
  EXPECT_EQ(CheckedMul(kMax, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(CheckedMul(kMin, -1).ok());
  EXPECT_FALSE(CheckedMul(int64_t{1} << 32, int64_t{1} << 31).ok());
}

TEST(CheckedTest, MulDivRound) {
  EXPECT_EQ(*MulDivRound(1, 1, 2), 1);    // 0.5 → 1
  EXPECT_EQ(*MulDivRound(-1, 1, 2), -1);  // -0.5 → -1
  EXPECT_EQ(*MulDivRound(1, 1, 3), 0);
  EXPECT_EQ(*MulDivRound(10, 1, 3), 3);
  EXPECT_EQ(*MulDivRound(20, 1, 3), 7);
  EXPECT_EQ(*MulDivRound(20, 1, -3), -7);
  EXPECT_EQ(*MulDivRound(-20, -1, -3), -7);
  // $2.50/hour for 90 s = $0.0625.
  EXPECT_EQ(*MulDivRound(2'500'000, 90, 3'600), 62'500);
  // 128-bit intermediate.
  EXPECT_EQ(*MulDivRound(kMax, 2, 2), kMax);
  EXPECT_EQ(*MulDivRound(kMin, 1, 1), kMin);
  EXPECT_EQ(MulDivRound(kMax, 3, 2).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(MulDivRound(kMin, -1, 1).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(MulDivRound(1, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckedTest, MulDivRoundHalfEven) {
  // Ties go to the even neighbour, on both sides of zero.
  EXPECT_EQ(*MulDivRoundHalfEven(1, 1, 2), 0);    // 0.5 → 0
  EXPECT_EQ(*MulDivRoundHalfEven(3, 1, 2), 2);    // 1.5 → 2
  EXPECT_EQ(*MulDivRoundHalfEven(5, 1, 2), 2);    // 2.5 → 2
  EXPECT_EQ(*MulDivRoundHalfEven(7, 1, 2), 4);    // 3.5 → 4
  EXPECT_EQ(*MulDivRoundHalfEven(-1, 1, 2), 0);   // -0.5 → 0
  EXPECT_EQ(*MulDivRoundHalfEven(-3, 1, 2), -2);  // -1.5 → -2
  EXPECT_EQ(*MulDivRoundHalfEven(3, 1, -2), -2);  // -1.5 → -2
  // Not ties: nearest.
  EXPECT_EQ(*MulDivRoundHalfEven(1, 1, 3), 0);
  EXPECT_EQ(*MulDivRoundHalfEven(2, 1, 3), 1);
  EXPECT_EQ(*MulDivRoundHalfEven(-2, 1, 3), -1);
  EXPECT_EQ(*MulDivRoundHalfEven(51, 1, 100), 1);
  EXPECT_EQ(*MulDivRoundHalfEven(149, 1, 100), 1);
  EXPECT_EQ(*MulDivRoundHalfEven(150, 1, 100), 2);
  EXPECT_EQ(*MulDivRoundHalfEven(250, 1, 100), 2);
  EXPECT_EQ(*MulDivRoundHalfEven(251, 1, 100), 3);
  // $2.00/GPU-hour for 900 GPU-ms: 2,000,000 × 900 / 3,600,000 = 500 exactly.
  EXPECT_EQ(*MulDivRoundHalfEven(2'000'000, 900, 3'600'000), 500);
  // 1 micro/hour for 30 min = 0.5 micro → 0; for 90 min = 1.5 micro → 2.
  EXPECT_EQ(*MulDivRoundHalfEven(1, 1'800'000, 3'600'000), 0);
  EXPECT_EQ(*MulDivRoundHalfEven(1, 5'400'000, 3'600'000), 2);
  // 128-bit intermediate and the int64 edges.
  EXPECT_EQ(*MulDivRoundHalfEven(kMax, kMax, kMax), kMax);
  EXPECT_EQ(*MulDivRoundHalfEven(kMin, 1, 1), kMin);
  EXPECT_EQ(*MulDivRoundHalfEven(kMin, 2, 2), kMin);
  EXPECT_EQ(MulDivRoundHalfEven(kMax, 3, 2).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(MulDivRoundHalfEven(kMin, -1, 1).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(MulDivRoundHalfEven(1, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckedTest, MulDivRoundHalfEvenMatchesAReference) {
  // Against an independent formulation on small numbers: the candidates
  // floor and floor + 1, the closer one, the even one on a tie.
  for (int64_t a = -40; a <= 40; ++a) {
    for (int64_t d = -7; d <= 7; ++d) {
      if (d == 0) continue;
      const int64_t n = d < 0 ? -a : a;
      const int64_t den = d < 0 ? -d : d;
      int64_t fl = n / den;
      if (n % den != 0 && n < 0) --fl;
      const int64_t twice_frac = 2 * (n - fl * den);  // in [0, 2 den)
      int64_t want = fl;
      if (twice_frac > den || (twice_frac == den && fl % 2 != 0)) want = fl + 1;
      EXPECT_EQ(*MulDivRoundHalfEven(a, 1, d), want) << a << " / " << d;
    }
  }
}

TEST(MoneyTest, IsKnownCurrency) {
  for (const char* code : {"USD", "EUR", "JPY", "GBP", "CHF", "CHE", "XAU",
                           "VES", "SLE", "ZWG", "XCG", "AED", "ZMW"}) {
    EXPECT_TRUE(IsKnownCurrency(code)) << code;
  }
  // Well-formed but not (or no longer) ISO 4217, or not upper case.
  for (const char* code :
       {"ABC", "ZZZ", "HRK", "DEM", "FRF", "usd", "US", "USDT", "", "BTC"}) {
    EXPECT_FALSE(IsKnownCurrency(code)) << code;
  }
  EXPECT_TRUE(IsValidCurrencyCode("ABC"));  // the shape check stays lenient
}

TEST(MoneyTest, AddMoney) {
  absl::StatusOr<Money> sum = AddMoney(M("USD", 1), M("", 2));
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->currency_code(), "USD");
  EXPECT_EQ(sum->micros(), 3);
  EXPECT_EQ(AddMoney(M("USD", 1), M("EUR", 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddMoney(M("USD", kMax), M("USD", 1)).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(MoneyTest, Currency) {
  EXPECT_TRUE(IsValidCurrencyCode("USD"));
  EXPECT_FALSE(IsValidCurrencyCode("usd"));
  EXPECT_FALSE(IsValidCurrencyCode("US"));
  EXPECT_FALSE(IsValidCurrencyCode("USDX"));
  EXPECT_FALSE(IsValidCurrencyCode(""));
  EXPECT_EQ(CurrencyOf(M("", 0)), "USD");
  EXPECT_EQ(CurrencyOf(M("EUR", 0)), "EUR");
}

TEST(MoneyTest, ValidateMoney) {
  EXPECT_TRUE(ValidateMoney(M("", 0), "price").ok());
  EXPECT_TRUE(ValidateMoney(M("EUR", 5), "price").ok());
  absl::Status neg = ValidateMoney(M("USD", -1), "price");
  EXPECT_EQ(ErrorField(neg), "price.micros");
  EXPECT_EQ(ErrorReason(neg), "OUT_OF_RANGE");
  EXPECT_TRUE(
      ValidateMoney(M("USD", -1), "price", /*allow_negative=*/true).ok());
  absl::Status cur = ValidateMoney(M("dollars", 1), "price");
  EXPECT_EQ(ErrorField(cur), "price.currency_code");
  EXPECT_EQ(ErrorReason(cur), "INVALID_VALUE");
}

}  // namespace
}  // namespace trainyard::domain
