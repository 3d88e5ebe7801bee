// Benchmarks of the scheduling policy (docs/scheduling.md) on a seeded
// synthetic snapshot: 10,000 nodes x 8 GPUs, 1,000 queues in 100 cohorts,
// 100,000 pending jobs. `--small` shrinks everything 100x (the CTest smoke
// run).
//   policy_bench --benchmark_out=perf-results/policy_bench.json
//       --benchmark_out_format=json
// It reports times and byte counts; it never asserts them.
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/snapshot.h"
#include "tests/support/policy/fragmentation.h"
#include "tests/support/policy/synthetic.h"

namespace trainyard::scheduler::policy {
namespace {

bool g_small = false;
// Arrivals and completions between two steady-state cycles.
int ChurnPerCycle() { return g_small ? 3 : 300; }

SyntheticSpec Spec() {
  SyntheticSpec spec;
  if (g_small) {
    spec.nodes = 100;
    spec.queues = 10;
    spec.cohorts = 2;
    spec.pending = 1000;
  }
  return spec;
}

const Snapshot& BaseSnapshot() {
  static const Snapshot* snapshot = new Snapshot(MakeSyntheticSnapshot(Spec()));
  return *snapshot;
}

// Bytes allocated from the heap, mmapped blocks (large vectors) included.
int64_t HeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

void SetSizeCounters(benchmark::State& state, const Snapshot& s) {
  state.counters["nodes"] = static_cast<double>(s.nodes.size());
  state.counters["queues"] = static_cast<double>(s.queues.size());
  state.counters["pending"] = static_cast<double>(s.pending.size());
  state.counters["running"] = static_cast<double>(s.running.size());
}

// (a) The full cycle: Decide() on the 100,000-job snapshot.
void BM_DecideFullCycle(benchmark::State& state) {
  const Snapshot& s = BaseSnapshot();
  size_t admitted = 0;
  for (auto _ : state) {
    Decisions d = Decide(s);
    admitted = d.admissions.size();
    benchmark::DoNotOptimize(d);
  }
  SetSizeCounters(state, s);
  state.counters["admitted"] = static_cast<double>(admitted);
}

// The base snapshot with the features that cost most switched on.
//   kBackfill: running attempts end at a time limit 10 min to 8 h from now,
//   pending jobs have limits of 0 (none), 1, 4 or 24 h, and the 200 tenants
//   each have a budget their queues spend (BUDGET_HOLD);
//   kPreemption: every queue preempts (LowerPriority within the queue,
//   reclaim of any borrower, fair share), running work checkpointed 0-2 h ago.
enum class Features { kBackfill, kPreemption };

const Snapshot& FeatureSnapshot(Features features) {
  static const Snapshot* backfill = nullptr;
  static const Snapshot* preemption = nullptr;
  const Snapshot*& slot =
      features == Features::kBackfill ? backfill : preemption;
  if (slot != nullptr) return *slot;
  auto* s = new Snapshot(BaseSnapshot());
  std::mt19937_64 rng(11);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  constexpr int64_t kMinute = int64_t{60} * 1000 * 1000;
  if (features == Features::kBackfill) {
    for (RunningAttempt& r : s->running)
      r.time_limit_micros =
          (s->now - r.start_time) + uniform(10, 480) * kMinute;
    constexpr int64_t kHours[] = {0, 1, 4, 24};
    for (PendingJob& j : s->pending)
      j.time_limit_micros = kHours[uniform(0, 3)] * 60 * kMinute;
    for (int t = 0; t < 200; ++t) {
      s->budgets.push_back({.name = "tenant-" + std::to_string(t),
                            .remaining_micros = uniform(0, 20000) * 1000000});
    }
    for (size_t q = 0; q < s->queues.size(); ++q)
      s->queues[q].budget = static_cast<BudgetId>(q % 200);
  } else {
    for (Queue& q : s->queues) {
      q.within_queue_preemption = WithinQueuePreemption::kLowerPriority;
      q.reclaim_within_cohort = ReclaimWithinCohort::kAny;
      q.fair_share_preemption = true;
    }
    for (RunningAttempt& r : s->running)
      r.last_checkpoint_time = s->now - uniform(0, 120) * kMinute;
  }
  slot = s;
  return *slot;
}

// (a*) Full cycles through the incremental Scheduler with those features.
template <Features kFeatures>
void BM_SchedulerFullCycleWith(benchmark::State& state) {
  Scheduler scheduler(FeatureSnapshot(kFeatures));
  Decisions d;
  for (auto _ : state) {
    d = scheduler.Cycle();
    benchmark::DoNotOptimize(d);
  }
  SetSizeCounters(state, scheduler.snapshot());
  state.counters["admitted"] = static_cast<double>(d.admissions.size());
  state.counters["preempted"] = static_cast<double>(d.preemptions.size());
  state.counters["reservations"] = static_cast<double>(d.reservations.size());
  size_t backfilled = 0, budget_holds = 0;
  for (const Admission& a : d.admissions) backfilled += a.backfill;
  for (const PendingDecision& p : d.pending)
    budget_holds += p.reason == PendingReason::kBudgetHold;
  state.counters["backfilled"] = static_cast<double>(backfilled);
  state.counters["budget_holds"] = static_cast<double>(budget_holds);
}

// (a') The same full cycle through the incremental Scheduler (state built
// from the snapshot beforehand; every Cycle() re-evaluates every job).
void BM_SchedulerFullCycle(benchmark::State& state) {
  Scheduler scheduler(BaseSnapshot());
  size_t admitted = 0;
  for (auto _ : state) {
    Decisions d = scheduler.Cycle();
    admitted = d.admissions.size();
    benchmark::DoNotOptimize(d);
  }
  SetSizeCounters(state, scheduler.snapshot());
  state.counters["admitted"] = static_cast<double>(admitted);
}

// Building the Scheduler's state from a snapshot (once per restart).
void BM_SchedulerBuild(benchmark::State& state) {
  std::unique_ptr<Scheduler> scheduler;
  for (auto _ : state) {
    state.PauseTiming();
    scheduler.reset();
    Snapshot copy = BaseSnapshot();
    state.ResumeTiming();
    scheduler = std::make_unique<Scheduler>(std::move(copy));
    benchmark::DoNotOptimize(scheduler.get());
  }
}

// Applies the last cycle's admissions, then ChurnPerCycle() completions and
// arrivals (seeded), as between two cycles in production.
void Churn(Scheduler& scheduler, const Decisions& last, std::mt19937_64& rng,
           JobId& next_id) {
  for (const Admission& a : last.admissions) scheduler.ApplyAdmission(a);
  const Snapshot& s = scheduler.snapshot();
  for (int i = 0; i < ChurnPerCycle() && !s.running.empty(); ++i) {
    const size_t k =
        std::uniform_int_distribution<size_t>(0, s.running.size() - 1)(rng);
    scheduler.CompleteRunning(s.running[k].job);
  }
  for (int i = 0; i < ChurnPerCycle(); ++i)
    scheduler.AddPending(MakeSyntheticJob(s, next_id++, rng));
  scheduler.SetNow(s.now + int64_t{10} * 1000 * 1000);
}

// (b) Steady state: after a cycle, ChurnPerCycle() arrivals and completions,
// then the next cycle; only the cycle is timed. kSchedulerUnexplained runs
// the cycles the scheduler service runs between two explaining ones (at most
// one a second, --explanation_interval): no pending job's message formatted.
enum class SteadyCycle { kScheduler, kSchedulerUnexplained, kDecide };
template <SteadyCycle kCycle>
void BM_SteadyState(benchmark::State& state) {
  Scheduler scheduler(BaseSnapshot());
  std::mt19937_64 rng(7);
  JobId next_id = 1'000'000'000;
  Decisions last = scheduler.Cycle();
  size_t admitted = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Churn(scheduler, last, rng, next_id);
    state.ResumeTiming();
    // The Scheduler writes over the last cycle's Decisions (reusing their
    // memory), releasing what they held inside the timed cycle.
    if (kCycle == SteadyCycle::kDecide) {
      last = Decide(scheduler.snapshot());
    } else {
      scheduler.Cycle(last, kCycle == SteadyCycle::kScheduler);
    }
    admitted = last.admissions.size();
  }
  SetSizeCounters(state, scheduler.snapshot());
  state.counters["admitted"] = static_cast<double>(admitted);
  state.counters["churn"] = ChurnPerCycle();
}

// (b') Steady state in the scheduler service benchmark's mix
// (tests/perf/scheduler_service_bench.cc): the synthetic platform with no
// running work, every fourth queue light (3 % of the jobs; ReclaimWithinCohort
// Any, reclaiming what the heavy queues borrow), one in four preempting lower
// priorities within itself (LowerPriority), the rest plain. The running set
// is primed as the service primes it (cycles applying their admissions until
// one admits nothing); then, between two timed cycles one second apart:
// the last cycle's admissions, its victims stopped and requeued (a new job of
// the victim's queue), ChurnPerCycle() completions and arrivals. Reports the
// median and 99th percentile of the cycles' wall and thread CPU times as
// counters (p50_ms, cpu_p50_ms, ...): on a shared machine the CPU times are
// the steadier figures.
double ThreadCpuMillis() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 +
         static_cast<double>(t.tv_nsec) / 1e6;
}

bool IsServiceLightQueue(size_t q) { return q % 4 == 3; }

PendingJob ServiceMixJob(const Snapshot& s, JobId id, std::mt19937_64& rng,
                         std::optional<QueueId> queue = std::nullopt) {
  PendingJob job = MakeSyntheticJob(s, id, rng);
  job.name.clear();
  if (queue.has_value()) {
    job.queue = *queue;
    return job;
  }
  const bool light = std::uniform_int_distribution<int>(0, 99)(rng) < 3;
  const size_t groups = (s.queues.size() + 3) / 4;
  for (;;) {
    // A queue of the chosen kind (light: q % 4 == 3).
    const size_t g = std::uniform_int_distribution<size_t>(0, groups - 1)(rng);
    const size_t q =
        light ? 4 * g + 3
              : 4 * g + std::uniform_int_distribution<size_t>(0, 2)(rng);
    if (q < s.queues.size()) {
      job.queue = static_cast<QueueId>(q);
      return job;
    }
  }
}

const Snapshot& ServiceMixSnapshot() {
  static const Snapshot* snapshot = [] {
    SyntheticSpec spec = Spec();
    const int pending = spec.pending;
    spec.pending = 0;
    spec.busy_fraction = 0;
    spec.racks_per_block = std::clamp(spec.nodes / (5 * spec.nodes_per_rack), 1,
                                      spec.racks_per_block);
    auto* s = new Snapshot(MakeSyntheticSnapshot(spec));
    for (size_t q = 0; q < s->queues.size(); ++q) {
      if (IsServiceLightQueue(q)) {
        s->queues[q].reclaim_within_cohort = ReclaimWithinCohort::kAny;
      } else if (q % 4 == 1) {
        s->queues[q].within_queue_preemption =
            WithinQueuePreemption::kLowerPriority;
      }
    }
    std::mt19937_64 rng(5);
    constexpr TimeMicros kTenMinutes = int64_t{600} * 1000 * 1000;
    for (int i = 0; i < pending; ++i) {
      PendingJob job = ServiceMixJob(*s, i + 1, rng);
      job.submit_time = s->now - std::uniform_int_distribution<TimeMicros>(
                                     0, kTenMinutes)(rng);
      s->pending.push_back(std::move(job));
    }
    return s;
  }();
  return *snapshot;
}

// Applies `last` as the service's next refresh would see it: admissions
// running, victims stopped and requeued; then the churn; one second later.
void ServiceMixChurn(Scheduler& scheduler, const Decisions& last,
                     std::mt19937_64& rng, JobId& next_id, int churn) {
  for (const Admission& a : last.admissions) scheduler.ApplyAdmission(a);
  const Snapshot& s = scheduler.snapshot();
  for (const Preemption& p : last.preemptions) {
    if (scheduler.CompleteRunning(p.victim)) {
      PendingJob job = ServiceMixJob(s, next_id++, rng, p.victim_queue);
      job.submit_time = s.now;
      scheduler.AddPending(std::move(job));
    }
  }
  for (int i = 0; i < churn && !s.running.empty(); ++i) {
    const size_t k =
        std::uniform_int_distribution<size_t>(0, s.running.size() - 1)(rng);
    scheduler.CompleteRunning(s.running[k].job);
  }
  for (int i = 0; i < churn; ++i) {
    PendingJob job = ServiceMixJob(s, next_id++, rng);
    job.submit_time = s.now;
    scheduler.AddPending(std::move(job));
  }
  scheduler.SetNow(s.now + int64_t{1000} * 1000);
}

void BM_ServiceMixSteadyState(benchmark::State& state) {
  Scheduler scheduler(ServiceMixSnapshot());
  std::mt19937_64 rng(9);
  JobId next_id = 1'000'000'000;
  Decisions last;
  // Prime the running set (at most 50 cycles).
  for (int i = 0; i < 50; ++i) {
    scheduler.Cycle(last);
    if (last.admissions.empty()) break;
    ServiceMixChurn(scheduler, last, rng, next_id, 0);
  }
  size_t admitted = 0, preempted = 0;
  std::vector<double> millis, cpu_millis;
  for (auto _ : state) {
    state.PauseTiming();
    ServiceMixChurn(scheduler, last, rng, next_id, ChurnPerCycle());
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ThreadCpuMillis();
    scheduler.Cycle(last);
    cpu_millis.push_back(ThreadCpuMillis() - cpu_start);
    millis.push_back(std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count());
    admitted += last.admissions.size();
    preempted += last.preemptions.size();
  }
  SetSizeCounters(state, scheduler.snapshot());
  auto percentile = [](std::vector<double>& v, double p) {
    std::sort(v.begin(), v.end());
    return v.empty()
               ? 0.0
               : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
  };
  state.counters["p50_ms"] = percentile(millis, 0.5);
  state.counters["p99_ms"] = percentile(millis, 0.99);
  state.counters["cpu_p50_ms"] = percentile(cpu_millis, 0.5);
  state.counters["cpu_p99_ms"] = percentile(cpu_millis, 0.99);
  const double cycles = static_cast<double>(std::max<size_t>(1, millis.size()));
  state.counters["admitted_per_cycle"] = static_cast<double>(admitted) / cycles;
  state.counters["preempted_per_cycle"] =
      static_cast<double>(preempted) / cycles;
  state.counters["churn"] = ChurnPerCycle();
}

// Floor for any cycle that returns full Decisions: copying (and freeing) one
// steady-state cycle's Decisions, every pending job's message included.
void BM_DecisionsCopyFloor(benchmark::State& state) {
  Scheduler scheduler(BaseSnapshot());
  std::mt19937_64 rng(7);
  JobId next_id = 1'000'000'000;
  Decisions last = scheduler.Cycle();
  Churn(scheduler, last, rng, next_id);
  last = scheduler.Cycle();
  for (auto _ : state) {
    Decisions copy = last;
    benchmark::DoNotOptimize(copy);
  }
  state.counters["pending"] = static_cast<double>(last.pending.size());
}

// (c) Memory: heap bytes of the snapshot, of the Scheduler's copy and indexes,
// of one cycle's Decisions, and the process's peak RSS.
void BM_Memory(benchmark::State& state) {
  int64_t snapshot_bytes = 0, scheduler_bytes = 0, decisions_bytes = 0;
  for (auto _ : state) {
    const int64_t before = HeapBytes();
    auto snapshot = std::make_unique<Snapshot>(MakeSyntheticSnapshot(Spec()));
    const int64_t with_snapshot = HeapBytes();
    auto scheduler = std::make_unique<Scheduler>(*snapshot);
    const int64_t with_scheduler = HeapBytes();
    Decisions d = scheduler->Cycle();
    const int64_t with_decisions = HeapBytes();
    snapshot_bytes = with_snapshot - before;
    scheduler_bytes = with_scheduler - with_snapshot;
    decisions_bytes = with_decisions - with_scheduler;
    benchmark::DoNotOptimize(d);
  }
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  state.counters["snapshot_bytes"] = static_cast<double>(snapshot_bytes);
  state.counters["scheduler_bytes"] = static_cast<double>(scheduler_bytes);
  state.counters["decisions_bytes"] = static_cast<double>(decisions_bytes);
  state.counters["peak_rss_bytes"] =
      static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// Fragmentation (fragmentation.h) of the snapshot after one full cycle:
// MeasureFragmentation() charging Decide()'s admissions is timed (the cycle
// itself is not); the ratio and whole-free nodes before and after the cycle
// are reported.
void BM_Fragmentation(benchmark::State& state) {
  const Snapshot& s = BaseSnapshot();
  const Decisions d = Decide(s);
  const FragmentationReport before = MeasureFragmentation(s);
  FragmentationReport after;
  for (auto _ : state) {
    after = MeasureFragmentation(s, d.admissions);
    benchmark::DoNotOptimize(after);
  }
  SetSizeCounters(state, s);
  state.counters["admitted"] = static_cast<double>(d.admissions.size());
  state.counters["fragmentation_before"] = before.total.fragmentation;
  state.counters["fragmentation_after"] = after.total.fragmentation;
  state.counters["whole_free_nodes_before"] =
      static_cast<double>(before.total.whole_free_nodes);
  state.counters["whole_free_nodes_after"] =
      static_cast<double>(after.total.whole_free_nodes);
  state.counters["free_gpus_before"] =
      static_cast<double>(before.total.free_gpus);
  state.counters["free_gpus_after"] =
      static_cast<double>(after.total.free_gpus);
  state.counters["skipped_workers"] =
      static_cast<double>(after.skipped_workers);
}

BENCHMARK(BM_DecideFullCycle)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_SchedulerFullCycle)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_TEMPLATE(BM_SchedulerFullCycleWith, Features::kBackfill)
    ->Name("BM_SchedulerFullCycleBackfillBudgets")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_TEMPLATE(BM_SchedulerFullCycleWith, Features::kPreemption)
    ->Name("BM_SchedulerFullCyclePreemption")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK(BM_SchedulerBuild)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK_TEMPLATE(BM_SteadyState, SteadyCycle::kScheduler)
    ->Name("BM_SchedulerSteadyState")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(30);
BENCHMARK_TEMPLATE(BM_SteadyState, SteadyCycle::kSchedulerUnexplained)
    ->Name("BM_SchedulerSteadyStateUnexplained")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(30);
BENCHMARK_TEMPLATE(BM_SteadyState, SteadyCycle::kDecide)
    ->Name("BM_DecideSteadyState")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_ServiceMixSteadyState)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(40);
BENCHMARK(BM_DecisionsCopyFloor)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memory)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Fragmentation)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace trainyard::scheduler::policy

int main(int argc, char** argv) {
  // Our own flag, removed before Google Benchmark parses the rest.
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--small") == 0) {
      trainyard::scheduler::policy::g_small = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
