#include "services/lib/domain/money.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

// ISO 4217 List One (current codes), sorted: the alphabetic codes of
// Debian's iso-codes 4.15 table with the later amendments applied (HRK
// withdrawn 2023 when Croatia adopted the euro; ZWG added 2024; XCG added 2025,
// replacing ANG). Codes still listed during a withdrawal transition (CUC, SLL,
// ZWL) are kept. Includes the fund codes (BOV, CHE, ...), the precious metals
// and X-codes of List One (XAU, XDR, XTS, XXX, ...).
constexpr std::string_view kIso4217Codes[] = {
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD",
    "BDT", "BGN", "BHD", "BIF", "BMD", "BND", "BOB", "BOV", "BRL", "BSD", "BTN",
    "BWP", "BYN", "BZD", "CAD", "CDF", "CHE", "CHF", "CHW", "CLF", "CLP", "CNY",
    "COP", "COU", "CRC", "CUC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD",
    "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD",
    "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD",
    "IRR", "ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW",
    "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "LYD", "MAD", "MDL",
    "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MXV",
    "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN",
    "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR",
    "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SLL", "SOS", "SRD", "SSP",
    "STN", "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD",
    "TWD", "TZS", "UAH", "UGX", "USD", "USN", "UYI", "UYU", "UYW", "UZS", "VED",
    "VES", "VND", "VUV", "WST", "XAF", "XAG", "XAU", "XBA", "XBB", "XBC", "XBD",
    "XCD", "XCG", "XDR", "XOF", "XPD", "XPF", "XPT", "XSU", "XTS", "XUA", "XXX",
    "YER", "ZAR", "ZMW", "ZWG", "ZWL",
};

absl::Status Overflow(std::string_view op, int64_t a, int64_t b) {
  return absl::OutOfRangeError(Cat("money overflow: ", a, " ", op, " ", b));
}

absl::Status ParseError(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(Cat(
      "cannot parse money \"", text.substr(0, 64), "\": ", why,
      " (expected e.g. \"12.34 USD\" or \"USD 12.34\", at most 6 decimals)"));
}

// Parses "[-]digits[.digits]" exactly into micros.
absl::StatusOr<int64_t> ParseAmount(std::string_view full, std::string_view s) {
  bool negative = false;
  if (!s.empty() && s.front() == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  std::string_view whole = s;
  std::string_view frac;
  bool has_point = false;
  if (size_t dot = s.find('.'); dot != std::string_view::npos) {
    has_point = true;
    whole = s.substr(0, dot);
    frac = s.substr(dot + 1);
  }
  if (whole.empty())
    return ParseError(full, "missing digits before the decimal point");
  if (has_point && frac.empty())
    return ParseError(full, "missing digits after the point");
  if (frac.size() > 6) return ParseError(full, "more than 6 decimals");
  // Accumulate as a negative number so that the most negative int64 is
  // representable.
  int64_t acc = 0;
  auto push = [&](char c) -> bool {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    return !__builtin_mul_overflow(acc, 10, &acc) &&
           !__builtin_sub_overflow(acc, c - '0', &acc);
  };
  for (char c : whole) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return ParseError(full, "not a number");
    }
    if (!push(c)) return ParseError(full, "amount out of range");
  }
  for (size_t i = 0; i < 6; ++i) {
    const char c = i < frac.size() ? frac[i] : '0';
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return ParseError(full, "not a number");
    }
    if (!push(c)) return ParseError(full, "amount out of range");
  }
  if (negative) return acc;
  if (acc == std::numeric_limits<int64_t>::min()) {
    return ParseError(full, "amount out of range");
  }
  return -acc;
}

}  // namespace

absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) return Overflow("+", a, b);
  return out;
}

absl::StatusOr<int64_t> CheckedSub(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_sub_overflow(a, b, &out)) return Overflow("-", a, b);
  return out;
}

absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return Overflow("*", a, b);
  return out;
}

namespace {

// a * b / divisor exactly in 128 bits, rounded to nearest: ties away from
// zero, or to even with `half_even`.
absl::StatusOr<int64_t> MulDivRounded(int64_t a, int64_t b, int64_t divisor,
                                      bool half_even) {
  if (divisor == 0) return absl::InvalidArgumentError("division by zero");
  const __int128 product =
      static_cast<__int128>(a) * b;  // cannot overflow 128 bits
  const bool negative = (product < 0) != (divisor < 0);
  const unsigned __int128 num = product < 0
                                    ? -static_cast<unsigned __int128>(product)
                                    : static_cast<unsigned __int128>(product);
  const unsigned __int128 den = divisor < 0
                                    ? -static_cast<unsigned __int128>(divisor)
                                    : static_cast<unsigned __int128>(divisor);
  unsigned __int128 q = num / den;
  const unsigned __int128 r = num % den;
  // Compare r with den - r instead of 2r with den: no overflow.
  const bool tie = r == den - r && r != 0;
  if (r > den - r || (tie && (!half_even || (q & 1) != 0))) ++q;
  const unsigned __int128 limit =
      negative
          ? static_cast<unsigned __int128>(
                std::numeric_limits<int64_t>::max()) +
                1
          : static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max());
  if (q > limit) {
    return absl::OutOfRangeError(
        Cat("money overflow: ", a, " * ", b, " / ", divisor));
  }
  if (negative) return static_cast<int64_t>(-static_cast<__int128>(q));
  return static_cast<int64_t>(q);
}

}  // namespace

absl::StatusOr<int64_t> MulDivRound(int64_t a, int64_t b, int64_t divisor) {
  return MulDivRounded(a, b, divisor, /*half_even=*/false);
}

absl::StatusOr<int64_t> MulDivRoundHalfEven(int64_t a, int64_t b,
                                            int64_t divisor) {
  return MulDivRounded(a, b, divisor, /*half_even=*/true);
}

bool IsKnownCurrency(std::string_view code) {
  return std::binary_search(std::begin(kIso4217Codes), std::end(kIso4217Codes),
                            code);
}

bool IsValidCurrencyCode(std::string_view code) {
  if (code.size() != 3) return false;
  for (char c : code) {
    if (c < 'A' || c > 'Z') return false;
  }
  return true;
}

std::string_view CurrencyOf(const trainyard::v1::Money& money) {
  return money.currency_code().empty() ? kDefaultCurrency
                                       : money.currency_code();
}

absl::StatusOr<trainyard::v1::Money> AddMoney(const trainyard::v1::Money& a,
                                              const trainyard::v1::Money& b) {
  if (CurrencyOf(a) != CurrencyOf(b)) {
    return absl::InvalidArgumentError(
        Cat("cannot add ", CurrencyOf(a), " and ", CurrencyOf(b)));
  }
  absl::StatusOr<int64_t> sum = CheckedAdd(a.micros(), b.micros());
  if (!sum.ok()) return sum.status();
  trainyard::v1::Money out;
  out.set_currency_code(std::string(CurrencyOf(a)));
  out.set_micros(*sum);
  return out;
}

std::string FormatMoney(const trainyard::v1::Money& money) {
  const int64_t micros = money.micros();
  const bool negative = micros < 0;
  // Magnitude as unsigned, exact for the most negative int64 too.
  const uint64_t mag = negative ? uint64_t{0} - static_cast<uint64_t>(micros)
                                : static_cast<uint64_t>(micros);
  const uint64_t units = mag / static_cast<uint64_t>(kMicrosPerUnit);
  std::string frac =
      absl::StrFormat("%06d", mag % static_cast<uint64_t>(kMicrosPerUnit));
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return Cat(CurrencyOf(money), " ", negative ? "-" : "", units, ".", frac);
}

absl::StatusOr<trainyard::v1::Money> ParseMoney(std::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(
      absl::StripAsciiWhitespace(AbslView(text)), ' ', absl::SkipEmpty());
  if (parts.size() != 2)
    return ParseError(text, "expected an amount and a currency");
  std::string_view amount = StdView(parts[0]);
  std::string_view currency = StdView(parts[1]);
  if (IsValidCurrencyCode(amount)) std::swap(amount, currency);
  if (!IsValidCurrencyCode(currency)) {
    return ParseError(text, "currency must be three upper-case letters");
  }
  absl::StatusOr<int64_t> micros = ParseAmount(text, amount);
  if (!micros.ok()) return micros.status();
  trainyard::v1::Money out;
  out.set_currency_code(std::string(currency));
  out.set_micros(*micros);
  return out;
}

absl::Status ValidateMoney(const trainyard::v1::Money& money,
                           std::string_view field, bool allow_negative) {
  if (!money.currency_code().empty() &&
      !IsValidCurrencyCode(money.currency_code())) {
    return FieldError(JoinField(field, "currency_code"), reason::kInvalidValue,
                      "must be three upper-case letters (ISO 4217), e.g. USD");
  }
  if (!allow_negative && money.micros() < 0) {
    return FieldError(JoinField(field, "micros"), reason::kOutOfRange,
                      Cat("must not be negative, got ", money.micros()));
  }
  return absl::OkStatus();
}

}  // namespace trainyard::domain
