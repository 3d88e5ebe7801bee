#include "services/accounting/pricing/spot_csv.h"

#include <csv.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/time/time.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing {
namespace {

using domain::Cat;
namespace reason = domain::reason;

constexpr std::string_view kPoolColumn = "pool";
constexpr std::string_view kTimeColumn = "effective_time";
constexpr std::string_view kPriceColumn = "price_per_gpu_hour";
constexpr std::string_view kCurrencyColumn = "currency";
constexpr std::array<std::string_view, 4> kSpotCsvColumns = {
    kPoolColumn, kTimeColumn, kPriceColumn, kCurrencyColumn};
constexpr std::string_view kSpotCsvColumnList =
    "pool, effective_time, price_per_gpu_hour, currency";

// At most this much of a bad value is quoted back in an error.
std::string_view Excerpt(std::string_view value) { return value.substr(0, 64); }

// "line <line>, <column>: <message>" (or "line <line>: <message>" without a
// column), InvalidArgument, with the column as the field payload.
absl::Status SpotCsvError(int64_t line, std::string_view column,
                          std::string_view reason_code,
                          std::string_view message) {
  if (column.empty()) {
    return absl::InvalidArgumentError(Cat("line ", line, ": ", message));
  }
  return domain::AttachErrorInfo(
      absl::InvalidArgumentError(
          Cat("line ", line, ", ", column, ": ", message)),
      column, reason_code);
}

struct SpotCsvRow {
  int64_t line = 0;
  std::vector<std::string> fields;
};

// What libcsv's callbacks fill in.
struct SpotCsvCollector {
  int64_t row_line = 1;  // the line the row being parsed starts on
  std::vector<std::string> fields;
  std::vector<SpotCsvRow> rows;
};

void OnSpotCsvField(void* data, size_t len, void* collector) {
  auto* c = static_cast<SpotCsvCollector*>(collector);
  c->fields.emplace_back(data == nullptr ? "" : static_cast<const char*>(data),
                         data == nullptr ? 0 : len);
}

void OnSpotCsvRowEnd(int /*terminator*/, void* collector) {
  auto* c = static_cast<SpotCsvCollector*>(collector);
  c->rows.push_back({c->row_line, std::move(c->fields)});
  c->fields.clear();
}

// The column being parsed when a quoting error hit, if the header names it.
std::string_view ColumnInProgress(const SpotCsvCollector& c) {
  if (c.rows.empty() || c.fields.size() >= c.rows.front().fields.size()) {
    return "";
  }
  return c.rows.front().fields[c.fields.size()];
}

// Splits `text` into rows with libcsv in strict mode, feeding it one physical
// line at a time so that every row knows the line it starts on.
absl::StatusOr<std::vector<SpotCsvRow>> ReadSpotCsvRows(std::string_view text) {
  csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0) {
    return absl::ResourceExhaustedError("csv_init failed");
  }
  SpotCsvCollector collector;
  absl::Status status;
  int64_t line = 1;
  size_t pos = 0;
  // Whether a row began on an earlier line and has not ended (a quoted field
  // that spans lines): blank lines between rows begin none.
  bool row_open = false;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    if (!row_open) collector.row_line = line;
    const size_t len = end - pos;
    const size_t rows_before = collector.rows.size();
    if (csv_parse(&parser, text.data() + pos, len, OnSpotCsvField,
                  OnSpotCsvRowEnd, &collector) != len) {
      const int error = csv_error(&parser);
      status = error == CSV_EPARSE
                   ? SpotCsvError(line, ColumnInProgress(collector),
                                  reason::kInvalidValue,
                                  "bad quoting: a quote inside an unquoted "
                                  "field, or text after a closing quote")
                   : SpotCsvError(line, "", reason::kInvalidValue,
                                  csv_strerror(error));
      break;
    }
    if (collector.rows.size() > rows_before) {
      row_open = false;
    } else if (!absl::StripAsciiWhitespace(
                    absl::string_view(text.data() + pos, len))
                    .empty()) {
      row_open = true;
    }
    pos = end;
    ++line;
  }
  if (status.ok() &&
      csv_fini(&parser, OnSpotCsvField, OnSpotCsvRowEnd, &collector) != 0) {
    status = SpotCsvError(collector.row_line, ColumnInProgress(collector),
                          reason::kInvalidValue,
                          "bad quoting: a quoted field is never closed");
  }
  csv_free(&parser);
  if (!status.ok()) return status;
  return std::move(collector.rows);
}

absl::StatusOr<TimeMs> ParseSpotCsvTime(std::string_view value, int64_t line) {
  auto bad = [&](std::string_view why) {
    return SpotCsvError(line, kTimeColumn, reason::kInvalidValue,
                        Cat(why, ", got \"", Excerpt(value), "\""));
  };
  if (value.empty()) {
    return SpotCsvError(line, kTimeColumn, reason::kRequired, "required");
  }
  if (value.back() != 'Z') {
    return bad("must be RFC 3339 in UTC, ending in Z (2026-11-01T00:00:00Z)");
  }
  absl::Time t;
  std::string err;
  if (!absl::ParseTime("%Y-%m-%d%ET%H:%M:%E*SZ", domain::AbslView(value),
                       absl::UTCTimeZone(), &t, &err)) {
    return bad("must be RFC 3339 in UTC (2026-11-01T00:00:00Z)");
  }
  if (t < absl::UnixEpoch() || t >= absl::FromUnixMillis(kMaxTimeMs)) {
    return SpotCsvError(
        line, kTimeColumn, reason::kOutOfRange,
        Cat("must be in years 1970 to 9999, got \"", Excerpt(value), "\""));
  }
  const int64_t ms = absl::ToUnixMillis(t);
  if (absl::FromUnixMillis(ms) != t) {
    return bad("must be a whole millisecond");
  }
  return ms;
}

bool AllDigits(std::string_view s) {
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
  }
  return true;
}

// "2.4567" -> 2,456,700 micros, exactly.
absl::StatusOr<int64_t> ParseSpotCsvPrice(std::string_view value,
                                          int64_t line) {
  if (value.empty()) {
    return SpotCsvError(line, kPriceColumn, reason::kRequired, "required");
  }
  if (value.front() == '-') {
    return SpotCsvError(
        line, kPriceColumn, reason::kOutOfRange,
        Cat("must not be negative, got \"", Excerpt(value), "\""));
  }
  const size_t dot = value.find('.');
  std::string_view whole = value.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos
                                  ? std::string_view()
                                  : value.substr(dot + 1);
  if (whole.empty() || !AllDigits(whole) || !AllDigits(fraction) ||
      (dot != std::string_view::npos && fraction.empty())) {
    return SpotCsvError(line, kPriceColumn, reason::kInvalidValue,
                        Cat("must be a decimal number like 2.4567, got \"",
                            Excerpt(value), "\""));
  }
  if (fraction.size() > 6) {
    return SpotCsvError(
        line, kPriceColumn, reason::kInvalidValue,
        Cat("more than 6 decimals, got \"", Excerpt(value), "\""));
  }
  while (whole.size() > 1 && whole.front() == '0') whole.remove_prefix(1);
  constexpr int64_t kMaxWhole = kMaxPricePerUnitHourMicros / 1'000'000;
  auto too_large = [&] {
    return SpotCsvError(
        line, kPriceColumn, reason::kOutOfRange,
        Cat("must be at most ", kMaxWhole,
            " (one billion per GPU-hour), got \"", Excerpt(value), "\""));
  };
  if (whole.size() > 10) return too_large();  // 10 digits fit easily in int64
  int64_t micros = 0;
  for (char ch : whole) micros = micros * 10 + (ch - '0');
  for (size_t i = 0; i < 6; ++i) {
    micros = micros * 10 + (i < fraction.size() ? fraction[i] - '0' : 0);
  }
  if (micros > kMaxPricePerUnitHourMicros) return too_large();
  return micros;
}

}  // namespace

absl::StatusOr<std::vector<SpotPrice>> ParseSpotPriceCsv(
    std::string_view text) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (text.substr(0, kBom.size()) == kBom) text.remove_prefix(kBom.size());
  absl::StatusOr<std::vector<SpotCsvRow>> rows = ReadSpotCsvRows(text);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) {
    return SpotCsvError(
        1, "", reason::kRequired,
        Cat("empty file: expected a header row naming the columns ",
            kSpotCsvColumnList));
  }

  // The header: each known column once, nothing else.
  const SpotCsvRow& header = rows->front();
  std::map<std::string_view, size_t> index;  // column -> field index
  for (size_t i = 0; i < header.fields.size(); ++i) {
    const std::string& name = header.fields[i];
    bool known = false;
    for (std::string_view column : kSpotCsvColumns) known |= name == column;
    if (!known) {
      return SpotCsvError(
          header.line, "", reason::kInvalidValue,
          Cat("unknown column \"", Excerpt(name),
              "\" in the header: the columns are ", kSpotCsvColumnList));
    }
    if (!index.emplace(name, i).second) {
      return SpotCsvError(header.line, name, reason::kDuplicate,
                          "named twice in the header");
    }
  }
  for (std::string_view column : kSpotCsvColumns) {
    if (!index.contains(column)) {
      return SpotCsvError(header.line, column, reason::kRequired,
                          "missing from the header");
    }
  }

  std::vector<SpotPrice> out;
  out.reserve(rows->size() - 1);
  // (pool, effective_time) -> the line that has it.
  std::map<std::pair<std::string, TimeMs>, int64_t> seen;
  for (size_t r = 1; r < rows->size(); ++r) {
    const SpotCsvRow& row = (*rows)[r];
    if (row.fields.size() != header.fields.size()) {
      return SpotCsvError(row.line, "", reason::kInvalidValue,
                          Cat(row.fields.size(), " fields, expected ",
                              header.fields.size(), " (the header's columns)"));
    }
    SpotPrice price;
    price.flavor = row.fields[index.at(kPoolColumn)];
    if (price.flavor.empty()) {
      return SpotCsvError(row.line, kPoolColumn, reason::kRequired, "required");
    }
    const std::string& time_text = row.fields[index.at(kTimeColumn)];
    absl::StatusOr<TimeMs> time = ParseSpotCsvTime(time_text, row.line);
    if (!time.ok()) return time.status();
    price.effective_time = *time;
    absl::StatusOr<int64_t> micros =
        ParseSpotCsvPrice(row.fields[index.at(kPriceColumn)], row.line);
    if (!micros.ok()) return micros.status();
    price.gpu_hour_price.micros = *micros;
    price.gpu_hour_price.currency_code = row.fields[index.at(kCurrencyColumn)];
    if (!domain::IsKnownCurrency(price.gpu_hour_price.currency_code)) {
      return SpotCsvError(
          row.line, kCurrencyColumn, reason::kInvalidValue,
          Cat("must be an ISO 4217 currency code, e.g. USD, got \"",
              Excerpt(price.gpu_hour_price.currency_code), "\""));
    }
    auto [it, inserted] =
        seen.try_emplace({price.flavor, price.effective_time}, row.line);
    if (!inserted) {
      return SpotCsvError(
          row.line, kTimeColumn, reason::kDuplicate,
          Cat("pool ", Excerpt(price.flavor), " already has a price at ",
              time_text, " on line ", it->second));
    }
    out.push_back(std::move(price));
  }
  return out;
}

absl::Status ImportSpotPrices(PriceBook& book,
                              const std::vector<SpotPrice>& spot_prices,
                              TimeMs closed_before) {
  // AddSpotPrice changes nothing when it refuses, but earlier prices of the
  // list would stay: add them to a copy and keep it only if all went in.
  PriceBook staged = book;
  for (size_t i = 0; i < spot_prices.size(); ++i) {
    absl::Status status = staged.AddSpotPrice(spot_prices[i], closed_before);
    if (!status.ok()) {
      return domain::PrefixField(std::move(status),
                                 Cat("spot_prices[", i, "]"));
    }
  }
  book = std::move(staged);
  return absl::OkStatus();
}

}  // namespace trainyard::accounting::pricing
