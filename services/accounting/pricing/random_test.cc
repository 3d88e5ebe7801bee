// Thousands of random attempts against random rate versions and spot prices
// (changes crossing attempt boundaries), compared line by line and in total
// with an independent computation: a line is a maximal run of time inside one
// UTC hour over which the price state (price, the entry it comes from, fresh
// or stale, lost or not) is constant; the state at an instant is found by
// linear scans of the raw entries; each line's cost is price × amount × ms
// rounded half to even in 128 bits. Plus idempotency (running passes then a
// final pass, upserted by key, equal one pass) and allocated + idle = paid.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/accounting/pricing/idle.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing::random_test {
namespace {

constexpr TimeMs kNov = 1'793'491'200'000;  // 2026-11-01T00:00:00Z
constexpr TimeMs kH = kMsPerHour;
constexpr TimeMs kHorizon = 72 * kH;

struct RawRate {
  std::string flavor;
  Resource resource;
  TimeMs t;
  int64_t price;
};
struct RawSpot {
  std::string pool;
  TimeMs t;
  int64_t price;
};

// Half to even, written differently from the library: compare twice the
// remainder with the divisor.
int64_t RoundHalfEven(__int128 num, __int128 den) {
  __int128 q = num / den;
  const __int128 twice = 2 * (num % den);
  if (twice > den || (twice == den && q % 2 == 1)) ++q;
  return static_cast<int64_t>(q);
}

int64_t Unit(Resource r) {
  switch (r) {
    case Resource::kGpu:
      return 3'600'000;
    case Resource::kCpu:
      return int64_t{1000} * 3'600'000;
    case Resource::kMemory:
      return int64_t{1024} * 1024 * 1024 * 3'600'000;
  }
  return 0;
}

struct State {
  int64_t price = 0;
  TimeMs from_entry = -1;
  PriceSource source = PriceSource::kRate;
  bool lost = false;
  bool operator==(const State& o) const {
    return std::tie(price, from_entry, source, lost) ==
           std::tie(o.price, o.from_entry, o.source, o.lost);
  }
};

struct RefLine {
  Resource resource;
  TimeMs start, end;
  int64_t cost, tenant, platform;
  bool lost, gap;
  PriceSource source;
  auto Tuple() const {
    return std::tie(resource, start, end, cost, tenant, platform, lost, gap,
                    source);
  }
  bool operator==(const RefLine& o) const { return Tuple() == o.Tuple(); }
  bool operator<(const RefLine& o) const { return Tuple() < o.Tuple(); }
};

std::string Str(const RefLine& l) {
  return domain::Cat(ResourceLabel(l.resource), " ", l.start - kNov, "-",
                     l.end - kNov, " cost ", l.cost, " tenant ", l.tenant,
                     " platform ", l.platform, l.lost ? " lost" : "",
                     l.gap ? " gap " : " ", PriceSourceLabel(l.source));
}

class Reference {
 public:
  std::vector<RawRate> rates;
  std::vector<RawSpot> spots;

  State StateAt(const std::string& flavor, bool spot, Resource r, TimeMs t,
                TimeMs max_age) const {
    State s;
    if (spot && r == Resource::kGpu) {
      const RawSpot* last = nullptr;
      const RawSpot* first_later = nullptr;
      for (const RawSpot& o : spots) {
        if (o.pool != flavor) continue;
        if (o.t <= t && (last == nullptr || o.t > last->t)) last = &o;
        if (o.t > t && (first_later == nullptr || o.t < first_later->t)) {
          first_later = &o;
        }
      }
      if (last != nullptr) {
        s.price = last->price;
        s.from_entry = last->t;
        s.source = t - last->t < max_age ? PriceSource::kSpot
                                         : PriceSource::kSpotGapCarryForward;
        return s;
      }
      if (first_later != nullptr) {
        s.price = first_later->price;
        s.from_entry = first_later->t;
        s.source = PriceSource::kSpotGapFirstLater;
        return s;
      }
      s.source = PriceSource::kSpotGapOnDemand;
    }
    const RawRate* best = nullptr;
    for (const RawRate& v : rates) {
      if (v.flavor == flavor && v.resource == r && v.t <= t &&
          (best == nullptr || v.t > best->t)) {
        best = &v;
      }
    }
    EXPECT_NE(best, nullptr) << flavor;  // every flavor is priced from kNov
    if (best != nullptr) {
      s.price = best->price;
      s.from_entry = best->t;
    }
    return s;
  }

  // Lines of `amount` units over [a, b).
  std::vector<RefLine> Lines(const std::string& flavor, bool spot, Resource r,
                             int64_t amount, TimeMs a, TimeMs b,
                             std::optional<TimeMs> lost_from,
                             const MeterOptions& options) const {
    std::vector<RefLine> out;
    if (amount == 0 || b <= a) return out;
    // Every instant anything could change (a superset): hours, all entries,
    // all expiries, the lost-work start.
    std::vector<TimeMs> cuts = {a, b};
    for (TimeMs h = a / kH * kH; h < b; h += kH) cuts.push_back(h);
    for (const RawRate& v : rates) cuts.push_back(v.t);
    for (const RawSpot& o : spots) {
      cuts.push_back(o.t);
      cuts.push_back(o.t + options.spot_max_age_ms);
    }
    if (lost_from) cuts.push_back(*lost_from);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<TimeMs> in;
    for (TimeMs t : cuts) {
      if (t >= a && t <= b) in.push_back(t);
    }
    // Maximal runs of a constant state inside one hour.
    TimeMs run_start = in[0];
    State run = StateAt(flavor, spot, r, run_start, options.spot_max_age_ms);
    run.lost = lost_from && run_start >= *lost_from;
    auto close = [&](TimeMs end) {
      RefLine l;
      l.resource = r;
      l.start = run_start;
      l.end = end;
      l.cost = RoundHalfEven(
          static_cast<__int128>(run.price) * amount * (end - run_start),
          Unit(r));
      l.lost = run.lost;
      l.source = run.source;
      l.gap = run.source == PriceSource::kSpotGapCarryForward ||
              run.source == PriceSource::kSpotGapFirstLater ||
              run.source == PriceSource::kSpotGapOnDemand;
      l.tenant = l.cost;
      if (l.lost) {
        switch (options.lost_work_rule) {
          case LostWorkRule::kTenant:
            break;
          case LostWorkRule::kPlatform:
            l.tenant = 0;
            break;
          case LostWorkRule::kSplit:
            l.tenant = RoundHalfEven(
                static_cast<__int128>(l.cost) * options.split_tenant_percent,
                100);
            break;
        }
      }
      l.platform = l.cost - l.tenant;
      out.push_back(l);
    };
    for (size_t i = 1; i + 1 < in.size(); ++i) {
      const TimeMs t = in[i];
      State s = StateAt(flavor, spot, r, t, options.spot_max_age_ms);
      s.lost = lost_from && t >= *lost_from;
      if (s == run && t / kH == run_start / kH) continue;
      close(t);
      run_start = t;
      run = s;
    }
    close(b);
    return out;
  }
};

std::vector<RefLine> FromLedger(const std::vector<LedgerLine>& lines) {
  std::vector<RefLine> out;
  for (const LedgerLine& l : lines) {
    out.push_back({l.resource, l.start, l.end, l.cost_micros,
                   l.tenant_cost_micros, l.platform_cost_micros, l.lost_work,
                   l.spot_price_gap, l.price_source});
  }
  std::sort(out.begin(), out.end());
  return out;
}

class RandomMeterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PriceBook> b = PriceBook::Create("EUR");
    ASSERT_TRUE(b.ok());
    book_.emplace(*std::move(b));
    // On-demand flavors f0..f2 and spot pools s0..s2, every resource priced
    // from kNov with a few later versions (some at the same price: still a
    // new version).
    for (std::string flavor : {"f0", "f1", "f2", "s0", "s1", "s2"}) {
      for (Resource r : kAllResources) {
        std::vector<TimeMs> times = {kNov};
        const int versions = Rand(0, 6);
        for (int i = 0; i < versions; ++i) {
          times.push_back(kNov + Rand64(1, kHorizon));
        }
        std::sort(times.begin(), times.end());
        times.erase(std::unique(times.begin(), times.end()), times.end());
        int64_t price = Rand64(0, 5'000'000'000);
        for (TimeMs t : times) {
          if (Rand(0, 3) != 0) price = Rand64(0, 5'000'000'000);
          AddRate({flavor, r, t, price});
        }
      }
    }
    // s0: dense observations with some long silences; s1: sparse, starting
    // late (first-later gaps); s2: none (on-demand fallback).
    TimeMs t = kNov + Rand64(0, kH);
    while (t < kNov + kHorizon) {
      AddSpot({"s0", t, Rand64(100'000, 3'000'000)});
      t += Rand(0, 9) == 0 ? Rand64(2 * kH, 6 * kH) : Rand64(1, kH);
    }
    for (int i = 0; i < 5; ++i) {
      AddSpot(
          {"s1", kNov + 12 * kH + Rand64(0, kHorizon), Rand64(0, 3'000'000)});
    }
  }

  int Rand(int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }
  int64_t Rand64(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  void AddRate(const RawRate& r) {
    ASSERT_TRUE(
        book_->AddRate({r.flavor, r.resource, {r.price, ""}, r.t}, kNov).ok());
    ref_.rates.push_back(r);
  }
  void AddSpot(const RawSpot& s) {
    if (book_->AddSpotPrice({s.pool, {s.price, "EUR"}, s.t}, kNov).ok()) {
      ref_.spots.push_back(s);  // (a rare duplicate instant is refused)
    }
  }

  AttemptUsage RandomAttempt(int i) {
    static const char* kFlavors[] = {"f0", "f1", "f2", "s0", "s1", "s2"};
    AttemptUsage u;
    u.keys.tenant = domain::Cat("t", Rand(0, 4));
    u.keys.project = "p";
    u.keys.flavor = kFlavors[Rand(0, 5)];
    u.keys.job = domain::Cat("job-", i);
    u.keys.attempt = Rand(0, 3);
    u.spot = u.keys.flavor[0] == 's';
    u.workers = Rand(1, 16);
    u.gpus_per_worker = Rand(0, 3) == 0 ? 0 : Rand(1, 8);
    u.cpu_millis_per_worker = Rand(0, 2) == 0 ? 0 : Rand64(1, 64'000);
    u.memory_bytes_per_worker =
        Rand(0, 2) == 0 ? 0 : Rand64(1, int64_t{1} << 40);
    u.start_time = kNov + Rand64(0, kHorizon - kH);
    TimeMs duration;
    switch (Rand(0, 3)) {
      case 0:
        duration = Rand64(0, 2'000);  // sub-second
        break;
      case 1:
        duration = Rand64(1, 4) * kH;  // whole hours
        break;
      default:
        duration = Rand64(0, 8 * kH);
    }
    const EndReason reasons[] = {
        EndReason::kCompleted,   EndReason::kUserError,
        EndReason::kSpotReclaim, EndReason::kNodeFailure,
        EndReason::kPreemption,  EndReason::kCancelled};
    u.end_reason = reasons[Rand(0, 5)];
    u.end_time = u.start_time + duration;
    switch (Rand(0, 3)) {
      case 0:
        break;  // never checkpointed
      case 1:
        u.last_checkpoint_time = u.start_time - Rand64(0, kH);
        break;
      case 2:
        u.last_checkpoint_time = *u.end_time + Rand64(0, kH);
        break;
      default:
        u.last_checkpoint_time = u.start_time + Rand64(0, duration);
    }
    return u;
  }

  MeterOptions RandomOptions() {
    MeterOptions o;
    const TimeMs ages[] = {2 * kH, 30 * 60'000, 1, 5 * kH};
    o.spot_max_age_ms = ages[Rand(0, 3)];
    o.lost_work_rule = static_cast<LostWorkRule>(Rand(0, 2));
    o.split_tenant_percent = Rand(0, 100);
    return o;
  }

  std::vector<RefLine> Expected(const AttemptUsage& u,
                                const MeterOptions& o) const {
    std::optional<TimeMs> lost_from;
    if (IsInterruption(u.end_reason)) {
      lost_from = std::clamp(u.last_checkpoint_time.value_or(u.start_time),
                             u.start_time, *u.end_time);
    }
    std::vector<RefLine> out;
    for (Resource r : kAllResources) {
      const int64_t per = r == Resource::kGpu   ? u.gpus_per_worker
                          : r == Resource::kCpu ? u.cpu_millis_per_worker
                                                : u.memory_bytes_per_worker;
      for (const RefLine& l :
           ref_.Lines(u.keys.flavor, u.spot, r, per * u.workers, u.start_time,
                      *u.end_time, lost_from, o)) {
        out.push_back(l);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::mt19937_64 rng_{20261127};
  std::optional<PriceBook> book_;
  Reference ref_;
};

TEST_F(RandomMeterTest, LinesAndTotalsMatchAnIndependentComputation) {
  constexpr int kAttempts = 3000;
  int64_t total = 0;
  int64_t want_total = 0;
  int lines_seen = 0;
  int gaps = 0;
  int lost = 0;
  std::vector<LedgerLine> all;
  for (int i = 0; i < kAttempts; ++i) {
    const AttemptUsage u = RandomAttempt(i);
    const MeterOptions o = RandomOptions();
    absl::StatusOr<std::vector<LedgerLine>> lines =
        MeterAttempt(*book_, u, 0, o);
    ASSERT_TRUE(lines.ok()) << lines.status();
    const std::vector<RefLine> got = FromLedger(*lines);
    const std::vector<RefLine> want = Expected(u, o);
    ASSERT_EQ(got.size(), want.size()) << "attempt " << i;
    for (size_t j = 0; j < got.size(); ++j) {
      ASSERT_EQ(got[j], want[j]) << "attempt " << i << "\n got " << Str(got[j])
                                 << "\nwant " << Str(want[j]);
    }
    absl::StatusOr<LineTotals> sums = SumLines(*lines);
    ASSERT_TRUE(sums.ok());
    int64_t want_cost = 0;
    int64_t want_tenant = 0;
    for (const RefLine& l : want) {
      want_cost += l.cost;
      want_tenant += l.tenant;
      gaps += l.gap;
      lost += l.lost;
    }
    EXPECT_EQ(sums->cost_micros, want_cost);
    EXPECT_EQ(sums->tenant_cost_micros, want_tenant);
    EXPECT_EQ(sums->tenant_cost_micros + sums->platform_cost_micros,
              sums->cost_micros);
    // Lost GPU-ms to the millisecond: GPUs × (end - max(start, checkpoint)).
    int64_t want_lost_gpu_ms = 0;
    if (IsInterruption(u.end_reason)) {
      const TimeMs from =
          std::clamp(u.last_checkpoint_time.value_or(u.start_time),
                     u.start_time, *u.end_time);
      want_lost_gpu_ms = u.gpus_per_worker * u.workers * (*u.end_time - from);
    }
    EXPECT_EQ(sums->lost_gpu_ms, want_lost_gpu_ms) << "attempt " << i;
    EXPECT_EQ(sums->gpu_ms,
              u.gpus_per_worker * u.workers * (*u.end_time - u.start_time));
    total += sums->cost_micros;
    want_total += want_cost;
    lines_seen += static_cast<int>(lines->size());
    all.insert(all.end(), lines->begin(), lines->end());
  }
  EXPECT_EQ(total, want_total);
  // The random book really exercised the cases.
  EXPECT_GT(lines_seen, 10'000);
  EXPECT_GT(gaps, 100);
  EXPECT_GT(lost, 100);

  // allocated + idle = paid, for every pool and hour with lines; f2 is
  // reserved.
  const Commitment commitment{"f2",
                              {987'654'321'987, "EUR"},
                              kNov + 7 * kH,
                              kNov + kHorizon - 5 * kH - 12'345};
  ASSERT_TRUE(book_->AddCommitment(commitment, kNov).ok());
  std::map<std::pair<std::string, TimeMs>, int64_t> allocated;
  std::map<std::pair<std::string, TimeMs>, std::map<std::string, int64_t>>
      by_tenant;
  for (const LedgerLine& l : all) {
    allocated[{l.keys.flavor, l.period_start}] += l.cost_micros;
  }
  int64_t commitment_paid = 0;
  for (TimeMs p = kNov; p < kNov + kHorizon + 9 * kH; p += kH) {
    for (std::string pool : {"f0", "f1", "f2", "s0", "s1", "s2"}) {
      const bool spot = pool[0] == 's';
      PoolPeriod pp{pool, spot, p, {}};
      // Random held capacity in two pieces.
      const TimeMs mid = p + Rand64(0, kH);
      const int64_t gpus1 = Rand64(0, 200), gpus2 = Rand64(0, 200);
      const int64_t cpu = Rand64(0, 1'000'000);
      const int64_t mem = Rand64(0, int64_t{1} << 44);
      pp.held = {{p, mid, gpus1, cpu, mem}, {mid, p + kH, gpus2, cpu, mem}};
      absl::StatusOr<IdleLine> idle =
          ComputeIdle(*book_, pp, all, MeterOptions{});
      ASSERT_TRUE(idle.ok()) << idle.status();
      const int64_t want_allocated = allocated[{pool, p}];
      EXPECT_EQ(idle->allocated_micros, want_allocated);
      EXPECT_EQ(idle->allocated_micros + idle->idle_micros, idle->paid_micros);
      int64_t want_paid = 0;
      if (pool == "f2" && p + kH > commitment.start_time &&
          p < commitment.end_time) {
        // C(t) = amount × (t - start) / length, rounded half to even.
        auto c = [&](TimeMs t) {
          t = std::clamp(t, commitment.start_time, commitment.end_time);
          return RoundHalfEven(static_cast<__int128>(commitment.amount.micros) *
                                   (t - commitment.start_time),
                               commitment.end_time - commitment.start_time);
        };
        want_paid = c(p + kH) - c(p);
        commitment_paid += want_paid;
        EXPECT_TRUE(idle->reserved);
      } else {
        EXPECT_FALSE(idle->reserved);
      }
      // Held capacity, less the time the commitment covers (f2 only), at the
      // book's prices.
      for (const CapacityHeld& h : pp.held) {
        std::vector<std::pair<TimeMs, TimeMs>> pieces;
        if (pool == "f2") {
          pieces.emplace_back(h.start_time,
                              std::min(h.end_time, commitment.start_time));
          pieces.emplace_back(std::max(h.start_time, commitment.end_time),
                              h.end_time);
        } else {
          pieces.emplace_back(h.start_time, h.end_time);
        }
        for (const auto& [a, b] : pieces) {
          for (Resource r : kAllResources) {
            const int64_t amount = r == Resource::kGpu   ? h.gpus
                                   : r == Resource::kCpu ? h.cpu_millis
                                                         : h.memory_bytes;
            for (const RefLine& l : ref_.Lines(pool, spot, r, amount, a, b,
                                               std::nullopt, MeterOptions{})) {
              want_paid += l.cost;
            }
          }
        }
      }
      EXPECT_EQ(idle->paid_micros, want_paid) << pool << " " << p - kNov;
      int64_t shared = 0;
      std::vector<IdleShare> shares = ShareIdle(*idle, all);
      for (const IdleShare& s : shares) shared += s.micros;
      if (want_allocated > 0) {
        EXPECT_EQ(shared, idle->idle_micros);
      } else {
        EXPECT_TRUE(shares.empty());
      }
    }
  }
  EXPECT_EQ(commitment_paid, commitment.amount.micros);
}

TEST_F(RandomMeterTest, RunningPassesThenTheFinalPassEqualOnePass) {
  for (int i = 0; i < 1000; ++i) {
    AttemptUsage ended = RandomAttempt(i);
    const MeterOptions o = RandomOptions();
    AttemptUsage running = ended;
    running.end_time.reset();
    running.end_reason = EndReason::kRunning;
    std::map<std::string, LedgerLine> ledger;
    std::map<std::string, std::string> closed;
    const TimeMs step = Rand(0, 1) == 0 ? 60'000 : Rand64(1, 20 * 60'000);
    // Incremental passes from the previous pass's now (or whole ones).
    const bool incremental = Rand(0, 3) != 0;
    TimeMs since = 0;
    for (TimeMs now = ended.start_time - step; now < *ended.end_time;
         now += step) {
      absl::StatusOr<std::vector<LedgerLine>> lines =
          MeterAttemptSince(*book_, running, since, now, o);
      if (incremental) since = now;
      ASSERT_TRUE(lines.ok()) << lines.status();
      for (const LedgerLine& l : *lines) {
        const std::string key = LineKey(l);
        const std::string text =
            domain::Cat(l.start, "-", l.end, ":", l.cost_micros);
        if (!l.open) {
          // A closed line never changes while the attempt runs.
          auto [it, fresh] = closed.try_emplace(key, text);
          EXPECT_EQ(it->second, text) << key;
        } else {
          EXPECT_EQ(l.end, now);
          EXPECT_EQ(closed.count(key), 0u) << key;
        }
        ledger[key] = l;
      }
    }
    absl::StatusOr<std::vector<LedgerLine>> last_pass =
        MeterAttemptSince(*book_, ended, since, 0, o);
    ASSERT_TRUE(last_pass.ok());
    for (const LedgerLine& l : *last_pass) ledger[LineKey(l)] = l;
    absl::StatusOr<std::vector<LedgerLine>> final_lines =
        MeterAttempt(*book_, ended, 0, o);
    ASSERT_TRUE(final_lines.ok());
    std::vector<LedgerLine> merged;
    for (const auto& [key, l] : ledger) merged.push_back(l);
    EXPECT_EQ(FromLedger(merged), FromLedger(*final_lines)) << "attempt " << i;
  }
}

TEST_F(RandomMeterTest, MeteringSinceReturnsTheSameLinesThatEndAfterIt) {
  for (int i = 0; i < 2000; ++i) {
    const AttemptUsage u = RandomAttempt(i);
    const MeterOptions o = RandomOptions();
    const TimeMs since =
        u.start_time + Rand64(-kH, *u.end_time - u.start_time + kH);
    absl::StatusOr<std::vector<LedgerLine>> all = MeterAttempt(*book_, u, 0, o);
    absl::StatusOr<std::vector<LedgerLine>> some =
        MeterAttemptSince(*book_, u, since, 0, o);
    ASSERT_TRUE(all.ok() && some.ok());
    TimeMs keep_after = since;
    if (IsInterruption(u.end_reason)) {
      keep_after = std::min(
          since, std::clamp(u.last_checkpoint_time.value_or(u.start_time),
                            u.start_time, *u.end_time) -
                     1);
    }
    std::vector<LedgerLine> want;
    for (const LedgerLine& l : *all) {
      if (l.end > keep_after) want.push_back(l);
    }
    EXPECT_EQ(FromLedger(*some), FromLedger(want)) << "attempt " << i;
    // The keys are the same too.
    std::vector<std::string> got_keys, want_keys;
    for (const LedgerLine& l : *some) got_keys.push_back(LineKey(l));
    for (const LedgerLine& l : want) want_keys.push_back(LineKey(l));
    EXPECT_EQ(got_keys, want_keys);
  }
}

}  // namespace
}  // namespace trainyard::accounting::pricing::random_test
