// Money in integer micro-units (1 USD = 1,000,000 micros). No floating point
// anywhere: amounts are int64 micros, arithmetic is checked for overflow, and
// text is parsed and printed exactly.
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_MONEY_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_MONEY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainyard/v1/common.pb.h"

namespace trainyard::domain {

// Micros per unit of a currency.
inline constexpr int64_t kMicrosPerUnit = 1'000'000;
// The currency of a Money whose currency_code is empty.
inline constexpr std::string_view kDefaultCurrency = "USD";

// a + b, a - b, a * b; OutOfRangeError on int64 overflow.
absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b);
absl::StatusOr<int64_t> CheckedSub(int64_t a, int64_t b);
absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b);
// a * b / divisor computed exactly in 128 bits and rounded half away from zero,
// e.g. a price per hour × seconds / 3600. InvalidArgument for divisor 0,
// OutOfRange if the result does not fit in int64.
absl::StatusOr<int64_t> MulDivRound(int64_t a, int64_t b, int64_t divisor);
// a * b / divisor computed exactly in 128 bits and rounded half to even (a
// tie goes to the even neighbour: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0,
// -1.5 -> -2): the rounding of ledger lines (docs/accounting.md).
// InvalidArgument for divisor 0, OutOfRange if the result does not fit in
// int64.
absl::StatusOr<int64_t> MulDivRoundHalfEven(int64_t a, int64_t b,
                                            int64_t divisor);

// Three upper-case ASCII letters (ISO 4217 shape; not checked against the
// list).
bool IsValidCurrencyCode(std::string_view code);
// Whether `code` is a current ISO 4217 alphabetic code (List One: "USD",
// "EUR", "JPY", "CHE", "XAU", ...). Case-sensitive: "usd" is not known.
bool IsKnownCurrency(std::string_view code);
// currency_code, or "USD" when it is empty.
std::string_view CurrencyOf(const trainyard::v1::Money& money);

// Sum of two amounts of the same currency (empty counts as USD); the result
// carries the currency spelled out. InvalidArgument on a currency mismatch,
// OutOfRange on overflow.
absl::StatusOr<trainyard::v1::Money> AddMoney(const trainyard::v1::Money& a,
                                              const trainyard::v1::Money& b);

// "USD 12.345678", "USD 12.34", "USD 3.00", "EUR -0.50": the currency (USD when
// empty), a space, the amount with at least 2 and at most 6 decimals (trailing
// zeros past the second are dropped). Exact for every int64.
std::string FormatMoney(const trainyard::v1::Money& money);

// Parses "12.34 USD", "USD 12.34", "-0.5 EUR", "USD 7": an optional '-',
// digits, optionally '.' and 1..6 digits, and a currency code of three
// upper-case letters before or after, separated by spaces. InvalidArgument on
// anything else, including more than 6 decimals and amounts that overflow int64
// micros.
absl::StatusOr<trainyard::v1::Money> ParseMoney(std::string_view text);

// Validation of a Money field: micros >= 0 unless allow_negative, currency_code
// empty or IsValidCurrencyCode. Field errors name "<field>.micros" /
// "<field>.currency_code".
absl::Status ValidateMoney(const trainyard::v1::Money& money,
                           std::string_view field, bool allow_negative = false);

}  // namespace trainyard::domain

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_MONEY_H_
