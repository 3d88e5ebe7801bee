// Spot prices from CSV: the pure reader behind the spot price import (the
// `trainyard accounting import-spot-prices` command, once built). RFC 4180
// CSV, parsed by libcsv; no I/O. See docs/accounting.md, "Loading spot prices
// from CSV".
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_SPOT_CSV_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_SPOT_CSV_H_

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/accounting/pricing/price_book.h"

namespace trainyard::accounting::pricing {

// Parses a CSV file of spot prices, all or nothing.
//
// The first row is a header naming exactly the four columns, in any order:
//   pool                the spot pool (SpotPrice::flavor), not empty
//   effective_time      RFC 3339 in UTC ending in "Z", e.g.
//                       2026-11-01T00:00:00Z or 2026-11-01T00:00:00.250Z
//                       (whole milliseconds), in years 1970-9999
//   price_per_gpu_hour  a decimal: digits, optionally '.' and 1 to 6 digits
//                       (2.4567); not negative, at most
//                       kMaxPricePerUnitHourMicros micros; read exactly
//   currency            an ISO 4217 code (IsKnownCurrency), e.g. USD
// A column that is not one of these, or one named twice, is refused. Every
// other row is one observation. Fields may be quoted ("a,b", "say ""x""");
// unquoted fields have surrounding spaces and tabs trimmed; rows end in LF or
// CRLF; blank lines are skipped; a UTF-8 byte order mark at the start is
// skipped. A header with no rows gives an empty list.
//
// Every error is InvalidArgument naming the line of the file (1-based; a row
// whose quoted field spans lines is named by its first line) and the column,
// e.g. "line 7, price_per_gpu_hour: more than 6 decimals, got \"2.1234567\"",
// with the column as the field payload (errors.h). Refused: an empty file, a
// header missing a column, an unknown or repeated column, a row with another
// number of fields than the header, bad quoting, a bad value in any field, and
// two rows of the same pool and effective_time.
absl::StatusOr<std::vector<SpotPrice>> ParseSpotPriceCsv(std::string_view text);

// Adds every spot price to `book` (PriceBook::AddSpotPrice with
// `closed_before`), all or none: on the first price the book refuses, returns
// its error with the field prefixed by the price's index, e.g.
// "spot_prices[3].spot_price.effective_time: ...", and `book` is unchanged.
absl::Status ImportSpotPrices(PriceBook& book,
                              const std::vector<SpotPrice>& spot_prices,
                              TimeMs closed_before);

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_SPOT_CSV_H_
