#include "services/accounting/pricing/meter.h"

#include <algorithm>
#include <limits>
#include <string>

#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing {
namespace {

using domain::Cat;
using domain::CheckedAdd;
using domain::FieldError;
using domain::MulDivRoundHalfEven;
namespace reason = domain::reason;

TimeMs HourStart(TimeMs t) { return t - t % kMsPerHour; }  // t >= 0

absl::Status CheckTime(TimeMs t, std::string_view field) {
  if (t < 0 || t >= kMaxTimeMs) {
    return FieldError(field, reason::kOutOfRange,
                      Cat("must be in [0, ", kMaxTimeMs,
                          ") ms since the Unix epoch, got ", t));
  }
  return absl::OkStatus();
}

absl::Status CheckNonNegative(int64_t v, std::string_view field) {
  if (v < 0) {
    return FieldError(field, reason::kOutOfRange,
                      Cat("must not be negative, got ", v));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const MeterOptions& options) {
  if (options.spot_max_age_ms <= 0 || options.spot_max_age_ms >= kMaxTimeMs) {
    return FieldError("options.spot_max_age_ms", reason::kOutOfRange,
                      Cat("must be positive, got ", options.spot_max_age_ms));
  }
  switch (options.lost_work_rule) {
    case LostWorkRule::kTenant:
    case LostWorkRule::kPlatform:
      break;
    case LostWorkRule::kSplit:
      if (options.split_tenant_percent < 0 ||
          options.split_tenant_percent > 100) {
        return FieldError(
            "options.split_tenant_percent", reason::kOutOfRange,
            Cat("must be in 0..100, got ", options.split_tenant_percent));
      }
      break;
    default:
      return FieldError("options.lost_work_rule", reason::kInvalidValue,
                        "must be TENANT, PLATFORM or SPLIT");
  }
  return absl::OkStatus();
}

absl::Status ValidateUsage(const AttemptUsage& u) {
  if (u.keys.tenant.empty()) {
    return FieldError("usage.keys.tenant", reason::kRequired, "required");
  }
  if (u.keys.flavor.empty()) {
    return FieldError("usage.keys.flavor", reason::kRequired, "required");
  }
  if (u.keys.job.empty()) {
    return FieldError("usage.keys.job", reason::kRequired, "required");
  }
  if (u.keys.attempt < 0) {
    return FieldError("usage.keys.attempt", reason::kOutOfRange,
                      Cat("must not be negative, got ", u.keys.attempt));
  }
  if (u.workers < 1) {
    return FieldError("usage.workers", reason::kOutOfRange,
                      Cat("must be at least 1, got ", u.workers));
  }
  TY_RETURN_IF_ERROR(
      CheckNonNegative(u.gpus_per_worker, "usage.gpus_per_worker"));
  TY_RETURN_IF_ERROR(
      CheckNonNegative(u.cpu_millis_per_worker, "usage.cpu_millis_per_worker"));
  TY_RETURN_IF_ERROR(CheckNonNegative(u.memory_bytes_per_worker,
                                      "usage.memory_bytes_per_worker"));
  TY_RETURN_IF_ERROR(CheckTime(u.start_time, "usage.start_time"));
  switch (u.end_reason) {
    case EndReason::kRunning:
      if (u.end_time.has_value()) {
        return FieldError("usage.end_time", reason::kInconsistent,
                          "must be unset while the attempt is running");
      }
      break;
    case EndReason::kCompleted:
    case EndReason::kUserError:
    case EndReason::kSpotReclaim:
    case EndReason::kNodeFailure:
    case EndReason::kPreemption:
    case EndReason::kCancelled:
      if (!u.end_time.has_value()) {
        return FieldError("usage.end_time", reason::kRequired,
                          "required once the attempt has ended");
      }
      TY_RETURN_IF_ERROR(CheckTime(*u.end_time, "usage.end_time"));
      if (*u.end_time < u.start_time) {
        return FieldError("usage.end_time", reason::kOutOfRange,
                          Cat("must not be before start_time ", u.start_time,
                              ", got ", *u.end_time));
      }
      break;
    default:
      return FieldError("usage.end_reason", reason::kInvalidValue,
                        "unknown end reason");
  }
  if (u.last_checkpoint_time.has_value()) {
    TY_RETURN_IF_ERROR(
        CheckTime(*u.last_checkpoint_time, "usage.last_checkpoint_time"));
  }
  return absl::OkStatus();
}

// The observations of an ascending series with effective_time in [lo, hi).
std::pair<size_t, size_t> Range(const std::vector<PriceAt>& series, TimeMs lo,
                                TimeMs hi) {
  auto cmp = [](const PriceAt& p, TimeMs v) { return p.effective_time < v; };
  auto b = std::lower_bound(series.begin(), series.end(), lo, cmp);
  auto e = std::lower_bound(b, series.end(), hi, cmp);
  return {static_cast<size_t>(b - series.begin()),
          static_cast<size_t>(e - series.begin())};
}

// Adds to `cuts` the instants in (from, to) where the price of the usage can
// change. Binary searches: the cost does not grow with the book's history.
void AddPriceCuts(const PriceBook& book, std::string_view flavor, bool spot,
                  Resource resource, TimeMs from, TimeMs to,
                  const MeterOptions& options, std::vector<TimeMs>& cuts) {
  auto add = [&](TimeMs t) {
    if (t > from && t < to) cuts.push_back(t);
  };
  if (spot && resource == Resource::kGpu) {
    const std::vector<PriceAt>& series = book.SpotSeries(flavor);
    if (!series.empty()) {
      // Observations inside the window, and those whose fresh period ends
      // inside it (unless the next observation came first).
      const auto [b, e] = Range(
          series, std::max<TimeMs>(0, from - options.spot_max_age_ms), to);
      for (size_t i = b; i < e; ++i) {
        add(series[i].effective_time);
        const TimeMs stale = series[i].effective_time + options.spot_max_age_ms;
        if (i + 1 == series.size() || stale < series[i + 1].effective_time) {
          add(stale);
        }
      }
      return;
    }
    // No spot prices at all: priced by the GPU rate, cut at its changes.
  }
  const std::vector<PriceAt>& series = book.RateSeries(flavor, resource);
  const auto [b, e] = Range(series, from + 1, to);
  for (size_t i = b; i < e; ++i) add(series[i].effective_time);
}

// The price in force over a span starting at `t` (constant up to the next
// cut).
absl::Status PriceAtInstant(const PriceBook& book, std::string_view flavor,
                            bool spot, Resource resource, TimeMs t,
                            const MeterOptions& options, PricedSpan& span) {
  span.spot_price_gap = false;
  if (spot && resource == Resource::kGpu) {
    const std::vector<PriceAt>& series = book.SpotSeries(flavor);
    if (!series.empty()) {
      span.spot_price_gap = true;
      auto it = std::upper_bound(
          series.begin(), series.end(), t,
          [](TimeMs v, const PriceAt& p) { return v < p.effective_time; });
      if (it == series.begin()) {
        span.unit_price_micros = series.front().micros;
        span.price_source = PriceSource::kSpotGapFirstLater;
        return absl::OkStatus();
      }
      const PriceAt& last = *(it - 1);
      span.unit_price_micros = last.micros;
      if (t < last.effective_time + options.spot_max_age_ms) {
        span.price_source = PriceSource::kSpot;
        span.spot_price_gap = false;
      } else {
        span.price_source = PriceSource::kSpotGapCarryForward;
      }
      return absl::OkStatus();
    }
    span.spot_price_gap = true;
    span.price_source = PriceSource::kSpotGapOnDemand;
  } else {
    span.price_source = PriceSource::kRate;
  }
  std::optional<PriceAt> rate = book.RateAt(flavor, resource, t);
  if (!rate.has_value()) {
    return absl::FailedPreconditionError(
        Cat("no ", ResourceLabel(resource), " rate of flavor ", flavor,
            " is in force at ", t,
            " ms: add a rate version effective at or before it (a rate of 0 "
            "makes the resource free)"));
  }
  span.unit_price_micros = rate->micros;
  return absl::OkStatus();
}

}  // namespace

bool IsInterruption(EndReason reason) {
  return reason == EndReason::kSpotReclaim ||
         reason == EndReason::kNodeFailure || reason == EndReason::kPreemption;
}

std::string_view PriceSourceLabel(PriceSource source) {
  switch (source) {
    case PriceSource::kRate:
      return "RATE";
    case PriceSource::kSpot:
      return "SPOT";
    case PriceSource::kSpotGapCarryForward:
      return "SPOT_GAP_CARRY_FORWARD";
    case PriceSource::kSpotGapFirstLater:
      return "SPOT_GAP_FIRST_LATER";
    case PriceSource::kSpotGapOnDemand:
      return "SPOT_GAP_ON_DEMAND";
  }
  return "UNKNOWN";
}

std::string LineKey(const LedgerLine& line) {
  return Cat(line.keys.job, "/", line.keys.attempt, "/",
             ResourceLabel(line.resource), "/", line.start);
}

int64_t DurationMs(const LedgerLine& line) { return line.end - line.start; }

__int128 Quantity(const LedgerLine& line) {
  return static_cast<__int128>(line.amount) * DurationMs(line);
}

absl::StatusOr<int64_t> LineCost(int64_t price_micros, int64_t amount,
                                 int64_t duration_ms, Resource resource) {
  if (price_micros < 0 || amount < 0 || duration_ms < 0) {
    return absl::InvalidArgumentError(Cat("LineCost: negative input ",
                                          price_micros, " ", amount, " ",
                                          duration_ms));
  }
  const int64_t unit = UnitMsPerUnitHour(resource);
  // price × q / unit with q = amount × duration (up to 2^126): split q into
  // whole unit-hours and a remainder, so that both products stay exact:
  //   price × q / unit = price × (q / unit) + price × (q % unit) / unit.
  // The first term is an integer; the rounding of the sum looks at the
  // remainder of the second and at the parity of the whole floor.
  const __int128 q = static_cast<__int128>(amount) * duration_ms;
  const __int128 whole = q / unit;
  const __int128 rest = q % unit;  // < 2^52
  // whole < 2^64 and price < 2^63: checking whole first keeps the product
  // inside 128 bits.
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  if (whole > kMax || whole * price_micros > kMax) {
    return absl::OutOfRangeError(Cat("money overflow: ", price_micros, " × ",
                                     amount, " × ", duration_ms, " ms / ",
                                     unit));
  }
  const __int128 frac_num = rest * price_micros;  // < 2^115
  __int128 floor = whole * price_micros + frac_num / unit;
  const __int128 r = frac_num % unit;
  if (r > unit - r || (r == unit - r && floor % 2 != 0)) ++floor;
  if (floor > kMax) {
    return absl::OutOfRangeError(Cat("money overflow: ", price_micros, " × ",
                                     amount, " × ", duration_ms, " ms / ",
                                     unit));
  }
  return static_cast<int64_t>(floor);
}

absl::StatusOr<std::vector<PricedSpan>> PriceUsage(
    const PriceBook& book, std::string_view flavor, bool spot,
    Resource resource, int64_t amount, TimeMs from, TimeMs to,
    std::optional<TimeMs> extra_cut, const MeterOptions& options,
    TimeMs since) {
  std::vector<PricedSpan> out;
  if (amount == 0 || to <= from || to <= since) return out;
  // Spans that end at or before `since` are dropped, so no hour before the
  // one holding `since` needs a cut: the span holding `since` starts at that
  // hour or later.
  const TimeMs window = std::max(from, since);
  std::vector<TimeMs> cuts;
  for (TimeMs h = std::max(HourStart(from) + kMsPerHour, HourStart(window));
       h < to; h += kMsPerHour) {
    cuts.push_back(h);
  }
  if (extra_cut.has_value() && *extra_cut > from && *extra_cut < to) {
    cuts.push_back(*extra_cut);
  }
  AddPriceCuts(book, flavor, spot, resource,
               std::max(from, HourStart(window) - 1), to, options, cuts);
  cuts.push_back(to);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  out.reserve(cuts.size());
  TimeMs start = from;
  for (TimeMs end : cuts) {
    if (end <= since || end <= from) {
      start = std::max(start, end);
      continue;
    }
    PricedSpan span;
    span.period_start = HourStart(start);
    span.start = start;
    span.end = end;
    TY_RETURN_IF_ERROR(
        PriceAtInstant(book, flavor, spot, resource, start, options, span));
    TY_ASSIGN_OR_RETURN(
        span.cost_micros,
        LineCost(span.unit_price_micros, amount, end - start, resource));
    out.push_back(span);
    start = end;
  }
  return out;
}

absl::StatusOr<std::vector<LedgerLine>> MeterAttempt(
    const PriceBook& book, const AttemptUsage& usage, TimeMs now,
    const MeterOptions& options) {
  return MeterAttemptSince(book, usage, 0, now, options);
}

absl::StatusOr<std::vector<LedgerLine>> MeterAttemptSince(
    const PriceBook& book, const AttemptUsage& usage, TimeMs since, TimeMs now,
    const MeterOptions& options) {
  TY_RETURN_IF_ERROR(ValidateOptions(options));
  TY_RETURN_IF_ERROR(ValidateUsage(usage));
  const bool running = usage.end_reason == EndReason::kRunning;
  const TimeMs from = usage.start_time;
  const TimeMs to =
      running ? std::min(std::max(now, from), kMaxTimeMs) : *usage.end_time;
  std::optional<TimeMs> lost_from;
  if (IsInterruption(usage.end_reason)) {
    lost_from = std::clamp(usage.last_checkpoint_time.value_or(from), from, to);
    // The cut at the checkpoint splits a line that earlier passes (made while
    // the attempt ran) closed: return it again, with its new end.
    since = std::min(since, *lost_from - 1);
  }
  std::vector<LedgerLine> lines;
  // The first resource with a non-zero amount holds the attempt's first
  // line (amounts were validated non-negative).
  std::optional<Resource> first_resource;
  if (usage.gpus_per_worker > 0) {
    first_resource = Resource::kGpu;
  } else if (usage.cpu_millis_per_worker > 0) {
    first_resource = Resource::kCpu;
  } else if (usage.memory_bytes_per_worker > 0) {
    first_resource = Resource::kMemory;
  }
  for (Resource resource : kAllResources) {
    int64_t per_worker = 0;
    std::string_view field;
    switch (resource) {
      case Resource::kGpu:
        per_worker = usage.gpus_per_worker;
        field = "usage.gpus_per_worker";
        break;
      case Resource::kCpu:
        per_worker = usage.cpu_millis_per_worker;
        field = "usage.cpu_millis_per_worker";
        break;
      case Resource::kMemory:
        per_worker = usage.memory_bytes_per_worker;
        field = "usage.memory_bytes_per_worker";
        break;
    }
    int64_t amount;
    if (__builtin_mul_overflow(per_worker, int64_t{usage.workers}, &amount)) {
      return FieldError(field, reason::kOutOfRange,
                        Cat("times ", usage.workers,
                            " workers overflows int64, got ", per_worker));
    }
    TY_ASSIGN_OR_RETURN(
        std::vector<PricedSpan> spans,
        PriceUsage(book, usage.keys.flavor, usage.spot, resource, amount, from,
                   to, lost_from, options, since));
    for (const PricedSpan& span : spans) {
      LedgerLine& line = lines.emplace_back();
      line.keys = usage.keys;
      line.resource = resource;
      line.spot = usage.spot;
      line.period_start = span.period_start;
      line.start = span.start;
      line.end = span.end;
      line.amount = amount;
      line.unit_price_micros = span.unit_price_micros;
      line.price_source = span.price_source;
      line.spot_price_gap = span.spot_price_gap;
      line.cost_micros = span.cost_micros;
      line.lost_work = lost_from.has_value() && span.start >= *lost_from;
      line.tenant_cost_micros = span.cost_micros;
      if (line.lost_work) {
        switch (options.lost_work_rule) {
          case LostWorkRule::kTenant:
            break;
          case LostWorkRule::kPlatform:
            line.tenant_cost_micros = 0;
            break;
          case LostWorkRule::kSplit: {
            TY_ASSIGN_OR_RETURN(
                line.tenant_cost_micros,
                MulDivRoundHalfEven(span.cost_micros,
                                    options.split_tenant_percent, 100));
            break;
          }
        }
      }
      line.platform_cost_micros = line.cost_micros - line.tenant_cost_micros;
      line.open = running && span.end == to;
      line.attempt_start = resource == first_resource && span.start == from;
      line.list_cost_micros = line.cost_micros;
      if (line.price_source != PriceSource::kRate && line.spot &&
          resource == Resource::kGpu) {
        if (const std::optional<PriceAt> rate =
                book.RateAt(usage.keys.flavor, Resource::kGpu, line.start)) {
          TY_ASSIGN_OR_RETURN(line.list_cost_micros,
                              LineCost(rate->micros, line.amount,
                                       DurationMs(line), Resource::kGpu));
        }
      }
    }
  }
  return lines;
}

absl::Status AddLineTo(LineTotals& t, const LedgerLine& line) {
  TY_ASSIGN_OR_RETURN(t.cost_micros,
                      CheckedAdd(t.cost_micros, line.cost_micros));
  TY_ASSIGN_OR_RETURN(
      t.tenant_cost_micros,
      CheckedAdd(t.tenant_cost_micros, line.tenant_cost_micros));
  TY_ASSIGN_OR_RETURN(
      t.platform_cost_micros,
      CheckedAdd(t.platform_cost_micros, line.platform_cost_micros));
  if (line.lost_work) {
    TY_ASSIGN_OR_RETURN(t.lost_work_cost_micros,
                        CheckedAdd(t.lost_work_cost_micros, line.cost_micros));
  }
  if (line.resource == Resource::kGpu) {
    const __int128 q = Quantity(line);
    if (q > std::numeric_limits<int64_t>::max()) {
      return absl::OutOfRangeError("GPU-ms overflow");
    }
    TY_ASSIGN_OR_RETURN(t.gpu_ms,
                        CheckedAdd(t.gpu_ms, static_cast<int64_t>(q)));
    if (line.lost_work) {
      TY_ASSIGN_OR_RETURN(t.lost_gpu_ms,
                          CheckedAdd(t.lost_gpu_ms, static_cast<int64_t>(q)));
    }
  }
  t.spot_price_gap = t.spot_price_gap || line.spot_price_gap;
  return absl::OkStatus();
}

absl::StatusOr<LineTotals> SumLines(absl::Span<const LedgerLine> lines) {
  LineTotals t;
  for (const LedgerLine& line : lines) {
    TY_RETURN_IF_ERROR(AddLineTo(t, line));
  }
  return t;
}

}  // namespace trainyard::accounting::pricing
