// scheduler_service_bench: the scheduler SERVICE (services/scheduler) at
// scale, over a real PostgreSQL, driven only through its public API
// (SchedulerService::Create / RunCycle / CycleReport) and through the
// database, so that the same benchmark measures any build of it.
//
// It starts a private PostgreSQL, Redis and api server (tests/integration's
// ApiHarness) and loads, through the api (gRPC; the very code paths and rows
// a deployment writes):
//   - the platform of policy_bench's synthetic snapshot (the synthetic.h
//     generator): four flavors, --nodes sim nodes of 8 GPUs in racks of 16
//     and blocks of up to 128 (one flavor per block), split by block over
//     --clusters sim clusters, 0.5 % of them draining; --queues queues (200
//     tenants at most) in --cohorts cohorts (every tenth a root), each with GPU
//     quota for 2-3 flavors, some with borrowing or lending limits; priority
//     classes low, default and high (high not preemptible);
//   - --jobs pending jobs (SubmitBatch, 250 a call, several clients), shaped
//     as MakeSyntheticJob makes them (gangs of 1-64 GPUs, some pinned to a
//     GPU model, some needing one rack or block, all spot policies), 3 % of
//     them in the quarter of the queues that are "light" (little demand for
//     their nominal quota, which they lend, and reclaim from borrowers when
//     their own jobs come: ReclaimWithinCohort Any), the rest in "heavy"
//     queues that want more than their nominal quota and borrow (a third of
//     them, every fourth queue, preempt lower priorities within themselves);
//   - each cluster's dispatcher heartbeat (Cluster.heartbeat_time, written
//     as the dispatcher's ReportHealth writes it, again every
//     --heartbeat_interval).
// Then it primes the running set: a scheduler cycle admits what fits (in
// this process) and the dispatcher's writes follow (ADMITTED -> DISPATCHING
// -> RUNNING through DispatcherStore::ChangeAttempts, as a dispatcher records
// them), until a cycle admits nothing (at most --prime_cycles).
//
// Measured: the scheduler runs as a separate process (this binary with
// --serve), as `trainyard scheduler` does: with --cadence=wakeup (the
// default) after each cycle it waits --interval or until a wake-up arrives
// on Redis (the api publishes one on every submit), as the leader loop does,
// so under churn cycles follow each other back to back; with
// --cadence=timer it calls RunCycle() every --interval (the next cycle
// starts at once when one overruns). Meanwhile this
// process applies the churn concurrently through PostgreSQL: --rate arrivals
// per second through the api (SubmitBatch per tenant, 4 clients) and, as the
// dispatchers would record them, --rate completions per second (RUNNING ->
// SUCCEEDED of random running jobs), the claims and starts of what the
// scheduler admitted, and the requeues of what it preempted (PREEMPTING ->
// QUEUED, the victim stopped at once). Per cycle: the wall time of
// RunCycle() (refresh from PostgreSQL, snapshot, decide, the decisions'
// commit; builds before the explanations moved behind the cycle also waited
// for the explanations' writes, CycleReport::explain) and CycleReport's
// parts, the scheduler process's CPU time; p50/p99/max over --cycles cycles
// after --warmup; the scheduler process's peak RSS (VmHWM); the wait, after
// the last cycle, for the explanation writes still behind the service
// (FlushExplanations). Then a leader takeover: a fresh scheduler process,
// Create + its first RunCycle on the loaded database (it reloads every active
// job and rewrites every explanation that changed), with its peak RSS and
// that flush. Everything goes to --out as JSON. It asserts nothing about
// timings.
//
//   scheduler_service_bench                      # 100,000 jobs, 10,000 nodes
//   scheduler_service_bench --jobs=10000 --nodes=1000
//   scheduler_service_bench --smoke --out=       # seconds (CTest)
//   tests/perf/run_scheduler_service_bench.sh    # the documented sizes
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "services/lib/runtime/malloc_tuning.h"
#include "services/scheduler/scheduler_service.h"
#include "storage/postgres/dispatcher_store.h"
#include "storage/postgres/job_store.h"
#include "storage/postgres/object_store.h"
#include "storage/postgres/pool.h"
#include "storage/postgres/scheduler_store.h"
#include "storage/redis/redis_options.h"
#include "storage/redis/wakeup_subscriber.h"
#include "tests/fixtures/subprocess.h"
#include "tests/integration/api_test_harness.h"
#include "tests/support/policy/synthetic.h"

ABSL_FLAG(int, jobs, 100000, "Pending jobs loaded before the run");
ABSL_FLAG(int, nodes, 10000, "Sim nodes of 8 GPUs");
ABSL_FLAG(int, clusters, 1, "Sim clusters the nodes are split into (by block)");
ABSL_FLAG(int, queues, 1000, "Queues (spread over at most 200 tenants)");
ABSL_FLAG(int, cohorts, 100, "Cohorts (every tenth is a root)");
ABSL_FLAG(double, rate, 300, "Arrivals per second, and completions per second");
ABSL_FLAG(int, cycles, 60, "Measured scheduler cycles");
ABSL_FLAG(int, warmup, 10, "Cycles run before the measured ones");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1),
          "Scheduler cycle interval (a cycle starts this long after the "
          "previous one started, or at once when that one overran)");
ABSL_FLAG(std::string, cadence, "wakeup",
          "When the scheduler process runs its next cycle: wakeup = as "
          "`trainyard scheduler` (after a cycle it waits --interval, or less "
          "when a wake-up arrives on Redis); timer = every --interval");
ABSL_FLAG(absl::Duration, explanation_interval, absl::Seconds(1),
          "The scheduler's explanation_interval (as `trainyard scheduler "
          "--explanation_interval`; 0: every cycle explains)");
ABSL_FLAG(bool, hot_standby, true,
          "Also run a hot standby scheduler process beside the measured one "
          "(it follows the outbox, as `trainyard scheduler` standbys do) and "
          "measure its first cycle once it takes over");
ABSL_FLAG(int, prime_cycles, 5,
          "At most this many cycles admit the initial running set");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(30),
          "How often each cluster's dispatcher heartbeat is written (a "
          "dispatcher writes one at least every 30 s; each changes the "
          "configuration tables the scheduler watches)");
ABSL_FLAG(absl::Duration, churn_tick, absl::Milliseconds(100),
          "How often the churn writers act (arrivals and completions are "
          "spread over the ticks)");
ABSL_FLAG(int, arrival_clients, 4, "Concurrent api clients for arrivals");
ABSL_FLAG(int, load_clients, 4, "Concurrent api clients loading the jobs");
ABSL_FLAG(uint64_t, seed, 42, "Seed of the synthetic platform and jobs");
ABSL_FLAG(bool, smoke, false,
          "Tiny sizes (400 jobs, 64 nodes, 20 queues, 4 cohorts, rate 50, 3 "
          "cycles after 1): proves it works in seconds");
ABSL_FLAG(std::string, out, "perf-results/scheduler_service_bench.json",
          "JSON result file (empty: stdout only)");
ABSL_FLAG(std::string, label, "",
          "Free text stored in the JSON (e.g. the commit measured)");
ABSL_FLAG(absl::Duration, child_timeout, absl::Minutes(90),
          "Give up on a scheduler process after this long");
// The scheduler process (internal: this binary runs itself with these).
ABSL_FLAG(bool, serve, false,
          "Internal: be the scheduler process (Create, then --cycles cycles "
          "every --interval), writing its samples to --serve_out");
ABSL_FLAG(std::string, postgres_url, "", "Internal: with --serve");
ABSL_FLAG(std::string, redis_addr, "", "Internal: with --serve");
ABSL_FLAG(std::string, standby_file, "",
          "Internal: with --serve, follow as a hot standby (Follow() every "
          "second) until this file exists, then become the leader");
ABSL_FLAG(std::string, serve_out, "", "Internal: with --serve");

namespace {

namespace v1 = ::trainyard::v1;
namespace pg = ::trainyard::storage::postgres;
namespace policy = ::trainyard::scheduler::policy;
namespace fixtures = ::trainyard::testing::internal;
using trainyard::scheduler::CycleReport;
using trainyard::scheduler::SchedulerOptions;
using trainyard::scheduler::SchedulerService;
using trainyard::testing::ApiHarness;

constexpr int kMaxTenants = 200;
constexpr size_t kSubmitBatch = 250;
// Every fourth queue (q % 4 == 3) is light: 3 % of the jobs go there.
constexpr int kLightPercent = 3;
bool IsLightQueue(int q) { return q % 4 == 3; }

// --- Process figures --------------------------------------------------------

// A "Key:   123 kB" line of /proc/self/status, in bytes (0 if absent).
int64_t ProcStatusBytes(std::string_view key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0 || line.size() <= key.size() ||
        line[key.size()] != ':') {
      continue;
    }
    int64_t kb = 0;
    std::istringstream(line.substr(key.size() + 1)) >> kb;
    return kb * 1024;
  }
  return 0;
}

int64_t CpuMicros() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (int64_t{u.ru_utime.tv_sec} + u.ru_stime.tv_sec) * 1000000 +
         u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

// --- One cycle's figures ----------------------------------------------------

struct Sample {
  // Microseconds: RunCycle()'s wall time, CycleReport's parts, the
  // scheduler process's CPU time during the call.
  int64_t wall = 0, load = 0, refresh = 0, decide = 0, commit = 0, explain = 0,
          cpu = 0;
  // Start of the call, from the first cycle's start.
  int64_t start = 0;
  int64_t pending = 0, running = 0, admitted = 0, preempted = 0, dropped = 0,
          reservations = 0, explanations = 0;
  // CycleReport's parts of refresh and commit (microseconds; builds before
  // 2026-11-27 report none) and the refresh's events and changed jobs.
  int64_t refresh_events = 0, refresh_jobs = 0, refresh_config = 0,
          events_read = 0, jobs_read = 0, commit_prepare = 0,
          commit_lock_jobs = 0, commit_writes = 0, commit_outbox_wait = 0,
          commit_events = 0, commit_commit = 0;
};

// The parts, by their JSON names (durations in ms, counts as they are).
struct Part {
  const char* name;
  int64_t Sample::*field;
  bool duration;
};
const std::vector<Part>& Parts() {
  static const std::vector<Part> parts = {
      {"refresh_events_ms", &Sample::refresh_events, true},
      {"refresh_jobs_ms", &Sample::refresh_jobs, true},
      {"refresh_config_ms", &Sample::refresh_config, true},
      {"events_read", &Sample::events_read, false},
      {"jobs_read", &Sample::jobs_read, false},
      {"commit_prepare_ms", &Sample::commit_prepare, true},
      {"commit_lock_jobs_ms", &Sample::commit_lock_jobs, true},
      {"commit_writes_ms", &Sample::commit_writes, true},
      {"commit_outbox_wait_ms", &Sample::commit_outbox_wait, true},
      {"commit_events_ms", &Sample::commit_events, true},
      {"commit_commit_ms", &Sample::commit_commit, true},
  };
  return parts;
}

Sample FromReport(const CycleReport& r) {
  Sample s;
  s.load = absl::ToInt64Microseconds(r.load);
  s.refresh = absl::ToInt64Microseconds(r.refresh);
  s.decide = absl::ToInt64Microseconds(r.decide);
  s.commit = absl::ToInt64Microseconds(r.commit);
  s.explain = absl::ToInt64Microseconds(r.explain);
  s.pending = r.pending;
  s.running = r.running;
  s.admitted = r.admitted;
  s.preempted = r.preempted;
  s.dropped = r.dropped;
  s.reservations = r.reservations;
  s.explanations = r.explanations_written;
  s.refresh_events = absl::ToInt64Microseconds(r.refresh_events);
  s.refresh_jobs = absl::ToInt64Microseconds(r.refresh_jobs);
  s.refresh_config = absl::ToInt64Microseconds(r.refresh_config);
  s.events_read = r.events_read;
  s.jobs_read = r.jobs_read;
  s.commit_prepare = absl::ToInt64Microseconds(r.commit_prepare);
  s.commit_lock_jobs = absl::ToInt64Microseconds(r.commit_lock_jobs);
  s.commit_writes = absl::ToInt64Microseconds(r.commit_writes);
  s.commit_outbox_wait = absl::ToInt64Microseconds(r.commit_outbox_wait);
  s.commit_events = absl::ToInt64Microseconds(r.commit_events);
  s.commit_commit = absl::ToInt64Microseconds(r.commit_commit);
  return s;
}

// The scheduler process's samples travel as text lines.
std::string SampleLine(const Sample& s) {
  std::string line = absl::StrCat(
      "cycle ", s.start, " ", s.wall, " ", s.load, " ", s.refresh, " ",
      s.decide, " ", s.commit, " ", s.explain, " ", s.cpu, " ", s.pending, " ",
      s.running, " ", s.admitted, " ", s.preempted, " ", s.dropped, " ",
      s.reservations, " ", s.explanations);
  for (const Part& p : Parts()) absl::StrAppend(&line, " ", s.*p.field);
  line.push_back('\n');
  return line;
}

bool ParseSample(const std::vector<std::string>& f, Sample* s) {
  if (f.size() != 16 + Parts().size()) return false;
  for (size_t i = 0; i < Parts().size(); ++i) {
    if (!absl::SimpleAtoi(f[16 + i], &(s->*Parts()[i].field))) return false;
  }
  int64_t* fields[] = {&s->start,   &s->wall,         &s->load,
                       &s->refresh, &s->decide,       &s->commit,
                       &s->explain, &s->cpu,          &s->pending,
                       &s->running, &s->admitted,     &s->preempted,
                       &s->dropped, &s->reservations, &s->explanations};
  for (size_t i = 0; i < 15; ++i) {
    if (!absl::SimpleAtoi(f[i + 1], fields[i])) return false;
  }
  return true;
}

// One timed RunCycle().
absl::StatusOr<Sample> TimedCycle(SchedulerService& service) {
  const int64_t cpu = CpuMicros();
  const absl::Time start = absl::Now();
  absl::StatusOr<CycleReport> report = service.RunCycle();
  const absl::Time end = absl::Now();
  if (!report.ok()) return report.status();
  Sample s = FromReport(*report);
  s.wall = absl::ToInt64Microseconds(end - start);
  s.cpu = CpuMicros() - cpu;
  return s;
}

SchedulerOptions ServiceOptions(const std::string& url,
                                const std::string& redis_addr) {
  SchedulerOptions o;
  o.postgres_url = url;
  // For the dispatchers' wake-ups it publishes ("": none); its cycles are
  // run by Serve(), not by its leader loop.
  o.redis_addr = redis_addr;
  o.explanation_interval = absl::GetFlag(FLAGS_explanation_interval);
  o.interval = absl::GetFlag(FLAGS_interval);
  return o;
}

// --serve: the scheduler process. Writes "create <us>", one "cycle ..." line
// per cycle, "flush <us>" (the wait, after the last cycle, for the
// explanation writes the service still had behind it), then "rss <VmHWM
// bytes> <VmRSS bytes>" (or "error <text>").
int Serve() {
  std::ofstream out(absl::GetFlag(FLAGS_serve_out));
  const int64_t create_cpu = CpuMicros();
  const absl::Time create_start = absl::Now();
  absl::StatusOr<std::unique_ptr<SchedulerService>> service =
      SchedulerService::Create(ServiceOptions(absl::GetFlag(FLAGS_postgres_url),
                                              absl::GetFlag(FLAGS_redis_addr)));
  if (!service.ok()) {
    out << "error " << service.status() << "\n";
    return 1;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  out << "tunables " << (tunables != nullptr ? tunables : "") << "\n";
  out << "create " << absl::ToInt64Microseconds(absl::Now() - create_start)
      << " " << CpuMicros() - create_cpu << "\n";
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  // --cadence=wakeup: the leader loop's wait (services/leader/leader_loop.cc).
  std::unique_ptr<trainyard::storage::redis::WakeupSubscriber> wakeups;
  if (!absl::GetFlag(FLAGS_redis_addr).empty()) {
    absl::StatusOr<trainyard::storage::redis::RedisOptions> redis =
        trainyard::storage::redis::ParseRedisAddress(
            absl::GetFlag(FLAGS_redis_addr));
    if (!redis.ok()) {
      out << "error " << redis.status() << "\n";
      return 1;
    }
    wakeups = std::make_unique<trainyard::storage::redis::WakeupSubscriber>(
        *redis, std::vector<std::string>{
                    trainyard::storage::redis::kSchedulerWakeupChannel});
    if (!wakeups->WaitUntilSubscribed(absl::Seconds(10))) {
      out << "error no subscription to the wake-ups\n";
      return 1;
    }
  }
  if (const std::string file = absl::GetFlag(FLAGS_standby_file);
      !file.empty()) {
    // A hot standby, as the leader loop runs one (a try for the lock every
    // standby_poll, 1 s; Follow() at most every standby_follow_interval),
    // until the leader is gone.
    const absl::Duration follow_every =
        SchedulerOptions().standby_follow_interval;
    int64_t follows = 0, last_us = 0;
    absl::Time last_follow = absl::InfinitePast();
    while (!std::filesystem::exists(file)) {
      const absl::Time f = absl::Now();
      if (f - last_follow < follow_every) {
        absl::SleepFor(absl::Seconds(1));
        continue;
      }
      last_follow = f;
      if (absl::Status s = (*service)->Follow(); !s.ok()) {
        out << "error " << s << "\n";
        return 1;
      }
      last_us = absl::ToInt64Microseconds(absl::Now() - f);
      ++follows;
      absl::SleepFor(absl::Seconds(1));
    }
    out << "follow " << follows << " " << last_us << "\n";
    (*service)->BecomeLeader();
  }
  const absl::Time first = absl::Now();
  absl::Time next = first;
  for (int i = 0; i < absl::GetFlag(FLAGS_cycles); ++i) {
    if (wakeups != nullptr) {
      if (i > 0) wakeups->Wait(interval);
    } else {
      absl::SleepFor(next - absl::Now());
    }
    const absl::Time start = absl::Now();
    next = start + interval;
    absl::StatusOr<Sample> s = TimedCycle(**service);
    if (!s.ok()) {
      out << "error " << s.status() << "\n";
      return 1;
    }
    s->start = absl::ToInt64Microseconds(start - first);
    out << SampleLine(*s) << std::flush;
  }
  // VmHWM is folded from per-thread counters lazily: never below VmRSS.
  const absl::Time flush_start = absl::Now();
  if (absl::Status f = (*service)->FlushExplanations(); !f.ok()) {
    out << "error " << f << "\n";
    return 1;
  }
  out << "flush " << absl::ToInt64Microseconds(absl::Now() - flush_start)
      << "\n";
  const int64_t rss = ProcStatusBytes("VmRSS");
  out << "rss " << std::max(ProcStatusBytes("VmHWM"), rss) << " " << rss
      << "\n";
  return 0;
}

struct ServeResult {
  int64_t create_us = 0, create_cpu_us = 0;
  std::vector<Sample> cycles;
  int64_t peak_rss = 0, rss = 0;
  // The explanation writes still behind the service after its last cycle.
  int64_t flush_us = 0;
  // The scheduler process's GLIBC_TUNABLES ("" when unset).
  std::string tunables;
  // A hot standby's Follow() calls before it took over, and the last one's
  // wall time.
  int64_t follows = 0, last_follow_us = 0;
};

// A scheduler process started by StartScheduler.
struct SchedulerProcess {
  pid_t pid = 0;
  std::string name, out_path, log_path;
  int cycles = 0;
};

// Starts this binary as a scheduler process for `cycles` cycles; with a
// `standby_file`, it first follows as a hot standby until that file exists.
absl::StatusOr<SchedulerProcess> StartScheduler(
    const std::string& url, const std::string& redis_addr,
    const std::string& dir, const std::string& name, int cycles,
    const std::string& standby_file = "") {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::InternalError("readlink /proc/self/exe");
  self[n] = '\0';
  const std::string out_path = absl::StrCat(dir, "/", name, ".samples");
  const std::string log_path = absl::StrCat(dir, "/", name, ".log");
  fixtures::SpawnOptions spawn;
  spawn.argv = {
      self,
      "--serve",
      absl::StrCat("--postgres_url=", url),
      absl::StrCat("--cycles=", cycles),
      absl::StrCat("--interval=",
                   absl::FormatDuration(absl::GetFlag(FLAGS_interval))),
      absl::StrCat("--serve_out=", out_path),
      absl::StrCat("--redis_addr=", redis_addr),
      absl::StrCat(
          "--explanation_interval=",
          absl::FormatDuration(absl::GetFlag(FLAGS_explanation_interval)))};
  if (!standby_file.empty()) {
    spawn.argv.push_back(absl::StrCat("--standby_file=", standby_file));
  }
  spawn.log_path = log_path;
  spawn.working_dir = dir;
  absl::StatusOr<pid_t> pid = fixtures::Spawn(spawn);
  if (!pid.ok()) return pid.status();
  return SchedulerProcess{.pid = *pid,
                          .name = name,
                          .out_path = out_path,
                          .log_path = log_path,
                          .cycles = cycles};
}

// Waits for a scheduler process and reads what it wrote.
absl::StatusOr<ServeResult> FinishScheduler(const SchedulerProcess& p) {
  const std::string& name = p.name;
  const std::string& out_path = p.out_path;
  const std::string& log_path = p.log_path;
  const int cycles = p.cycles;
  absl::StatusOr<int> status =
      fixtures::WaitForExit(p.pid, absl::GetFlag(FLAGS_child_timeout));
  if (!status.ok()) {
    fixtures::TerminateAndReap(p.pid, SIGKILL, absl::ZeroDuration());
    return absl::DeadlineExceededError(
        absl::StrCat(name, ": scheduler process still running after ",
                     absl::FormatDuration(absl::GetFlag(FLAGS_child_timeout))));
  }
  ServeResult result;
  std::string error;
  std::ifstream in(out_path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.empty()) continue;
    if (f[0] == "create" && f.size() == 3) {
      (void)absl::SimpleAtoi(f[1], &result.create_us);
      (void)absl::SimpleAtoi(f[2], &result.create_cpu_us);
    } else if (f[0] == "cycle") {
      Sample s;
      if (ParseSample(f, &s)) result.cycles.push_back(s);
    } else if (f[0] == "flush" && f.size() == 2) {
      (void)absl::SimpleAtoi(f[1], &result.flush_us);
    } else if (f[0] == "rss" && f.size() == 3) {
      (void)absl::SimpleAtoi(f[1], &result.peak_rss);
      (void)absl::SimpleAtoi(f[2], &result.rss);
    } else if (f[0] == "follow" && f.size() == 3) {
      (void)absl::SimpleAtoi(f[1], &result.follows);
      (void)absl::SimpleAtoi(f[2], &result.last_follow_us);
    } else if (f[0] == "tunables") {
      result.tunables = line.substr(std::min(line.size(), size_t{9}));
    } else if (f[0] == "error") {
      error = line;
    }
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0 ||
      static_cast<int>(result.cycles.size()) != cycles) {
    return absl::InternalError(absl::StrCat(
        name, ": scheduler process ", fixtures::DescribeWaitStatus(*status),
        ", ", result.cycles.size(), " of ", cycles, " cycles; ", error,
        "\nlog tail:\n", fixtures::ReadFileTail(log_path)));
  }
  return result;
}

// --- Statistics -------------------------------------------------------------

struct Stats {
  double p50 = 0, p99 = 0, max = 0, mean = 0;
};

// Nearest-rank percentiles of microsecond values, in milliseconds.
Stats Summarize(std::vector<int64_t> us) {
  Stats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto rank = [&](double p) {
    const size_t k = static_cast<size_t>(
        std::ceil(p / 100.0 * static_cast<double>(us.size())));
    return static_cast<double>(us[std::clamp<size_t>(k, 1, us.size()) - 1]) /
           1000.0;
  };
  s.p50 = rank(50);
  s.p99 = rank(99);
  s.max = static_cast<double>(us.back()) / 1000.0;
  double sum = 0;
  for (int64_t v : us) sum += static_cast<double>(v);
  s.mean = sum / static_cast<double>(us.size()) / 1000.0;
  return s;
}

std::string Ms(double ms) { return absl::StrFormat("%.3f", ms); }

std::string StatsJson(const Stats& s) {
  return absl::StrCat("{\"p50\": ", Ms(s.p50), ", \"p99\": ", Ms(s.p99),
                      ", \"max\": ", Ms(s.max), ", \"mean\": ", Ms(s.mean),
                      "}");
}

// The timing fields of a set of cycles, as JSON and as a summary line.
std::string CyclesJson(const std::vector<Sample>& cycles) {
  std::vector<std::pair<const char*, int64_t Sample::*>> fields = {
      {"wall_ms", &Sample::wall},       {"load_ms", &Sample::load},
      {"refresh_ms", &Sample::refresh}, {"decide_ms", &Sample::decide},
      {"commit_ms", &Sample::commit},   {"explain_ms", &Sample::explain},
      {"cpu_ms", &Sample::cpu}};
  std::string json = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    std::vector<int64_t> v;
    for (const Sample& s : cycles) v.push_back(s.*fields[i].second);
    absl::StrAppend(&json, i ? ", " : "", "\"", fields[i].first,
                    "\": ", StatsJson(Summarize(v)));
  }
  // load + decide + commit: what the leader's loop waits for (it leaves the
  // explanations to their writer thread).
  std::vector<int64_t> v;
  for (const Sample& s : cycles) v.push_back(s.load + s.decide + s.commit);
  absl::StrAppend(&json,
                  ", \"load_decide_commit_ms\": ", StatsJson(Summarize(v)));
  for (const Part& p : Parts()) {
    v.clear();
    for (const Sample& s : cycles) v.push_back(s.*p.field);
    Stats st = Summarize(v);
    if (!p.duration) {
      // Summarize() gives milliseconds of microseconds; counts as they are.
      st.p50 *= 1000;
      st.p99 *= 1000;
      st.max *= 1000;
      st.mean *= 1000;
    }
    absl::StrAppend(&json, ", \"", p.name, "\": ", StatsJson(st));
  }
  int64_t admitted = 0, preempted = 0, dropped = 0, explanations = 0;
  for (const Sample& s : cycles) {
    admitted += s.admitted;
    preempted += s.preempted;
    dropped += s.dropped;
    explanations += s.explanations;
  }
  absl::StrAppend(&json, ", \"admitted\": ", admitted,
                  ", \"preempted\": ", preempted, ", \"dropped\": ", dropped,
                  ", \"explanations_written\": ", explanations, "}");
  return json;
}

std::string SampleJson(const Sample& s) {
  return absl::StrCat(
      "{\"start_ms\": ", Ms(static_cast<double>(s.start) / 1000),
      ", \"wall_ms\": ", Ms(static_cast<double>(s.wall) / 1000),
      ", \"load_ms\": ", Ms(static_cast<double>(s.load) / 1000),
      ", \"refresh_ms\": ", Ms(static_cast<double>(s.refresh) / 1000),
      ", \"decide_ms\": ", Ms(static_cast<double>(s.decide) / 1000),
      ", \"commit_ms\": ", Ms(static_cast<double>(s.commit) / 1000),
      ", \"explain_ms\": ", Ms(static_cast<double>(s.explain) / 1000),
      ", \"cpu_ms\": ", Ms(static_cast<double>(s.cpu) / 1000),
      ", \"pending\": ", s.pending, ", \"running\": ", s.running,
      ", \"admitted\": ", s.admitted, ", \"preempted\": ", s.preempted,
      ", \"dropped\": ", s.dropped, ", \"reservations\": ", s.reservations,
      ", \"explanations_written\": ", s.explanations,
      absl::StrJoin(Parts(), "",
                    [&](std::string* out, const Part& p) {
                      absl::StrAppend(
                          out, ", \"", p.name, "\": ",
                          p.duration
                              ? Ms(static_cast<double>(s.*p.field) / 1000)
                              : absl::StrCat(s.*p.field));
                    }),
      "}");
}

std::string SampleSummary(const Sample& s) {
  return absl::StrFormat(
      "wall %.1f ms (load %.1f, refresh %.1f, decide %.1f, commit %.1f, "
      "explain %.1f; cpu %.1f), pending %d, running %d, admitted %d, "
      "preempted %d, dropped %d",
      s.wall / 1e3, s.load / 1e3, s.refresh / 1e3, s.decide / 1e3,
      s.commit / 1e3, s.explain / 1e3, s.cpu / 1e3, s.pending, s.running,
      s.admitted, s.preempted, s.dropped);
}

// --- The platform -----------------------------------------------------------

absl::Status Grpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(std::string(what), ": ", s.error_message()));
}

// One call of the api as `token`; the response is dropped.
template <typename Stub, typename Request, typename Response>
absl::Status Call(Stub& stub,
                  grpc::Status (Stub::*rpc)(grpc::ClientContext*,
                                            const Request&, Response*),
                  const std::string& token, const Request& req,
                  std::string_view what) {
  Response out;
  return Grpc((stub.*rpc)(ApiHarness::Context(token).get(), req, &out), what);
}

struct Platform {
  policy::Snapshot snapshot;  // Platform only: no jobs.
  int tenants = 0;
  std::vector<std::string> clusters;
  int blocks = 0;
};

// The synthetic snapshot's platform (no running or pending work), with racks
// of 16 nodes and blocks of up to 8 racks (fewer on small clusters, so that
// every flavor has nodes).
Platform MakePlatform() {
  policy::SyntheticSpec spec;
  spec.nodes = absl::GetFlag(FLAGS_nodes);
  spec.queues = absl::GetFlag(FLAGS_queues);
  spec.cohorts = absl::GetFlag(FLAGS_cohorts);
  spec.pending = 0;
  spec.busy_fraction = 0;
  spec.seed = absl::GetFlag(FLAGS_seed);
  spec.racks_per_block = std::clamp(spec.nodes / (5 * spec.nodes_per_rack), 1,
                                    spec.racks_per_block);
  Platform p;
  p.snapshot = policy::MakeSyntheticSnapshot(spec);
  p.tenants = std::min(kMaxTenants, spec.queues);
  for (int c = 0; c < absl::GetFlag(FLAGS_clusters); ++c)
    p.clusters.push_back(absl::StrCat("sim-", c));
  for (const policy::Node& n : p.snapshot.nodes)
    p.blocks = std::max(p.blocks, n.block + 1);
  return p;
}

const std::string& ClusterOfBlock(const Platform& p, int block) {
  const size_t c = static_cast<size_t>(block) * p.clusters.size() /
                   static_cast<size_t>(std::max(1, p.blocks));
  return p.clusters[std::min(c, p.clusters.size() - 1)];
}

std::string ModelName(const policy::Snapshot& s, policy::GpuModelId id) {
  return id == policy::kAnyGpuModel ? "" : s.gpu_model_names[id];
}

// Flavors, clusters, pools, nodes, priority classes, tenants, projects,
// cohorts and queues, through the api.
absl::Status CreatePlatform(ApiHarness& h, const Platform& p) {
  const std::string& admin = h.admin_token();
  auto clusters = h.clusters();
  auto queues = h.queues();
  // The first failure stops the calls that follow.
  absl::Status status;
  auto call = [&](auto& stub, auto rpc, const auto& req,
                  std::string_view what) {
    if (status.ok()) status = Call(stub, rpc, admin, req, what);
  };
  const policy::Snapshot& s = p.snapshot;
  for (const policy::Flavor& f : s.flavors) {
    v1::CreateFlavorRequest req;
    req.set_flavor_id(f.name);
    v1::Flavor* flavor = req.mutable_flavor();
    flavor->set_kind(
        f.kind == policy::FlavorKind::kReserved ? v1::FLAVOR_KIND_RESERVED
        : f.kind == policy::FlavorKind::kSpot   ? v1::FLAVOR_KIND_SPOT
                                                : v1::FLAVOR_KIND_ON_DEMAND);
    flavor->set_gpu_model(f.name.substr(0, f.name.find('-')));
    flavor->mutable_gpu_hour_price()->set_currency_code("USD");
    flavor->mutable_gpu_hour_price()->set_micros(f.price_micros_per_gpu_hour);
    flavor->set_reclaim_rate_per_hour(f.reclaim_rate_per_hour);
    call(*clusters, &v1::ClusterService::Stub::CreateFlavor, req, f.name);
  }
  for (const std::string& c : p.clusters) {
    v1::CreateClusterRequest req;
    req.set_cluster_id(c);
    req.mutable_cluster()->set_backend(v1::BACKEND_KIND_SIM);
    call(*clusters, &v1::ClusterService::Stub::CreateCluster, req, c);
    for (const policy::Flavor& f : s.flavors) {
      v1::CreatePoolRequest pool;
      pool.set_parent(absl::StrCat("clusters/", c));
      pool.set_pool_id(f.name);
      pool.mutable_pool()->set_flavor(f.name);
      call(*clusters, &v1::ClusterService::Stub::CreatePool, pool, f.name);
    }
  }
  for (const policy::PriorityClass& pc : s.priority_classes) {
    v1::CreatePriorityClassRequest req;
    req.set_priority_class_id(pc.name);
    req.mutable_priority_class()->set_value(static_cast<int32_t>(pc.value));
    req.mutable_priority_class()->set_preemptible(pc.preemptible);
    call(*queues, &v1::QueueService::Stub::CreatePriorityClass, req, pc.name);
  }
  for (int t = 0; t < p.tenants; ++t) {
    v1::CreateTenantRequest req;
    req.set_tenant_id(absl::StrCat("tenant-", t));
    call(*queues, &v1::QueueService::Stub::CreateTenant, req, req.tenant_id());
    v1::CreateProjectRequest project;
    project.set_parent(absl::StrCat("tenants/", req.tenant_id()));
    project.set_project_id("default");
    call(*queues, &v1::QueueService::Stub::CreateProject, project, "project");
  }
  for (const policy::Cohort& c : s.cohorts) {
    v1::CreateCohortRequest req;
    req.set_cohort_id(c.name);
    if (c.parent.has_value())
      req.mutable_cohort()->set_parent(s.cohorts[*c.parent].name);
    call(*queues, &v1::QueueService::Stub::CreateCohort, req, c.name);
  }
  for (size_t q = 0; q < s.queues.size(); ++q) {
    const policy::Queue& queue = s.queues[q];
    v1::CreateQueueRequest req;
    req.set_parent(absl::StrCat("tenants/", queue.tenant));
    req.set_queue_id(queue.name);
    v1::Queue* out = req.mutable_queue();
    if (queue.cohort.has_value())
      out->set_cohort(s.cohorts[*queue.cohort].name);
    out->set_fair_share_weight(queue.weight);
    out->set_queueing_strategy(queue.strategy ==
                                       policy::QueueingStrategy::kStrictFifo
                                   ? v1::QUEUEING_STRATEGY_STRICT_FIFO
                                   : v1::QUEUEING_STRATEGY_BEST_EFFORT_FIFO);
    for (const policy::FlavorQuota& fq : queue.quotas) {
      v1::FlavorQuotas* quota = out->add_quotas();
      quota->set_flavor(s.flavors[fq.flavor].name);
      const std::optional<policy::ResourceQuota>& gpu =
          fq.resources[static_cast<int>(policy::Resource::kGpu)];
      if (!gpu.has_value()) continue;
      v1::ResourceQuota* rq = quota->add_resources();
      rq->set_resource(v1::RESOURCE_NAME_GPU);
      rq->set_nominal(gpu->nominal);
      if (gpu->borrowing_limit.has_value())
        rq->set_borrowing_limit(*gpu->borrowing_limit);
      if (gpu->lending_limit.has_value())
        rq->set_lending_limit(*gpu->lending_limit);
    }
    if (IsLightQueue(static_cast<int>(q))) {
      out->mutable_preemption()->set_reclaim_within_cohort(
          v1::RECLAIM_WITHIN_COHORT_ANY);
    } else if (q % 4 == 1) {
      out->mutable_preemption()->set_within_queue(
          v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY);
    }
    call(*queues, &v1::QueueService::Stub::CreateQueue, req, queue.name);
  }
  return status;
}

// The nodes, as a dispatcher's inventory reports them (ReportNodes, 1,000 a
// call, `clients` calls at a time).
absl::Status ReportNodes(ApiHarness& h, const Platform& p, int clients) {
  const policy::Snapshot& s = p.snapshot;
  std::vector<v1::ReportNodesRequest> requests;
  for (const std::string& c : p.clusters) {
    v1::ReportNodesRequest* req = nullptr;
    for (const policy::Node& n : s.nodes) {
      if (ClusterOfBlock(p, n.block) != c) continue;
      if (req == nullptr || req->nodes_size() == 1000) {
        requests.emplace_back();
        req = &requests.back();
        req->set_parent(absl::StrCat("clusters/", c));
      }
      v1::Node* node = req->add_nodes();
      node->set_name(absl::StrCat("clusters/", c, "/nodes/", n.name));
      node->set_pool(s.flavors[n.flavor].name);
      node->mutable_capacity()->set_gpus(static_cast<int32_t>(n.capacity.gpus));
      node->mutable_capacity()->set_gpu_model(ModelName(s, n.gpu_model));
      node->mutable_capacity()->set_cpu_millis(n.capacity.cpu_millis);
      node->mutable_capacity()->set_memory_bytes(n.capacity.memory_bytes);
      node->mutable_topology()->set_block(absl::StrCat("b", n.block));
      node->mutable_topology()->set_rack(absl::StrCat("r", n.rack));
      node->set_state(n.schedulable ? v1::NODE_STATE_READY
                                    : v1::NODE_STATE_DRAINING);
      if (!n.schedulable) node->set_state_message("drained for maintenance");
    }
  }
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status failure;
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      auto stub = h.clusters();
      for (size_t i = next++; i < requests.size(); i = next++) {
        v1::ReportNodesResponse resp;
        auto ctx = ApiHarness::Context(h.admin_token());
        ctx->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::minutes(10));
        absl::Status st =
            Grpc(stub->ReportNodes(ctx.get(), requests[i], &resp), "nodes");
        if (!st.ok()) {
          absl::MutexLock l(&mu);
          failure.Update(st);
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return failure;
}

// --- Jobs -------------------------------------------------------------------

// Submissions shaped as MakeSyntheticJob makes them, with the light/heavy
// queue skew.
class JobFactory {
 public:
  JobFactory(const Platform& p, uint64_t seed) : p_(p), rng_(seed) {
    for (size_t q = 0; q < p.snapshot.queues.size(); ++q) {
      (IsLightQueue(static_cast<int>(q)) ? light_ : heavy_)
          .push_back(static_cast<int>(q));
    }
    if (light_.empty()) light_ = heavy_;
  }

  // The tenant and the request of job number `n` (unique in the run).
  std::pair<std::string, v1::SubmitJobRequest> Make(int64_t n) {
    const policy::Snapshot& s = p_.snapshot;
    const policy::PendingJob job = policy::MakeSyntheticJob(s, n, rng_);
    const std::vector<int>& pick =
        std::uniform_int_distribution<int>(0, 99)(rng_) < kLightPercent
            ? light_
            : heavy_;
    const int q =
        pick[std::uniform_int_distribution<size_t>(0, pick.size() - 1)(rng_)];
    const policy::Queue& queue = s.queues[q];
    v1::SubmitJobRequest req;
    req.set_parent(absl::StrCat("tenants/", queue.tenant));
    req.set_client_request_id(absl::StrCat("bench-", n));
    v1::Job* out = req.mutable_job();
    out->set_display_name(job.name);
    v1::JobSpec* spec = out->mutable_spec();
    spec->set_project("default");
    spec->set_queue(queue.name);
    spec->set_priority_class(s.priority_classes[job.priority_class].name);
    spec->set_workers(job.workers);
    spec->mutable_resources()->set_gpus(static_cast<int32_t>(job.worker.gpus));
    spec->mutable_resources()->set_gpu_model(
        ModelName(s, job.worker.gpu_model));
    spec->mutable_resources()->set_cpu_millis(job.worker.cpu_millis);
    spec->mutable_resources()->set_memory_bytes(job.worker.memory_bytes);
    spec->set_image("registry.example.com/train:latest");
    spec->add_command("python");
    spec->add_command("train.py");
    using Spot = policy::SpotPolicy;
    spec->set_spot_policy(
        job.spot_policy == Spot::kNever       ? v1::SPOT_POLICY_NEVER
        : job.spot_policy == Spot::kAllowed   ? v1::SPOT_POLICY_ALLOWED
        : job.spot_policy == Spot::kPreferred ? v1::SPOT_POLICY_PREFERRED
                                              : v1::SPOT_POLICY_REQUIRED);
    if (job.required_topology == policy::TopologyLevel::kRack)
      spec->mutable_topology()->set_required_level(v1::TOPOLOGY_LEVEL_RACK);
    if (job.required_topology == policy::TopologyLevel::kBlock)
      spec->mutable_topology()->set_required_level(v1::TOPOLOGY_LEVEL_BLOCK);
    return {queue.tenant, std::move(req)};
  }

 private:
  const Platform& p_;
  std::mt19937_64 rng_;
  std::vector<int> light_, heavy_;
};

// Submits per-tenant batches through one api client.
class Submitter {
 public:
  explicit Submitter(ApiHarness& h) : h_(h), stub_(h.jobs()) {}

  void Add(std::string tenant, v1::SubmitJobRequest req) {
    std::vector<v1::SubmitJobRequest>& b = batches_[tenant];
    b.push_back(std::move(req));
    if (b.size() >= kSubmitBatch) (void)Flush(tenant);
  }
  // Submits every tenant's batch; returns the first error.
  absl::Status FlushAll() {
    absl::Status status;
    for (auto& [tenant, batch] : batches_) {
      if (!batch.empty()) status.Update(Flush(tenant));
    }
    return status.ok() ? failure_ : status;
  }
  int64_t submitted() const { return submitted_; }
  absl::Status failure() const { return failure_; }

 private:
  absl::Status Flush(const std::string& tenant) {
    std::vector<v1::SubmitJobRequest>& batch = batches_[tenant];
    v1::SubmitJobBatchRequest req;
    req.set_parent(absl::StrCat("tenants/", tenant));
    for (v1::SubmitJobRequest& r : batch) *req.add_requests() = std::move(r);
    batch.clear();
    v1::SubmitJobBatchResponse resp;
    absl::Status st =
        Grpc(stub_->SubmitBatch(ApiHarness::Context(h_.admin_token()).get(),
                                req, &resp),
             "SubmitBatch");
    if (st.ok()) {
      submitted_ += resp.responses_size();
    } else {
      failure_.Update(st);
    }
    return st;
  }

  ApiHarness& h_;
  std::unique_ptr<v1::JobService::Stub> stub_;
  absl::flat_hash_map<std::string, std::vector<v1::SubmitJobRequest>> batches_;
  int64_t submitted_ = 0;
  absl::Status failure_;
};

// --- The dispatchers' writes -----------------------------------------------

// What the dispatchers of the sim clusters record, through the DispatcherStore
// as they record it: the claim (ADMITTED -> DISPATCHING) and start (RUNNING) of
// every admission, the end of every preempted attempt (PREEMPTING ->
// QUEUED), completions (RUNNING -> SUCCEEDED), and each cluster's heartbeat.
// It learns of admissions and preemptions from the outbox (the job events),
// as cheaply as it can: the dispatcher's own reads are not what is measured.
class Dispatchers {
 public:
  struct Counts {
    int64_t started = 0, requeued = 0, completed = 0, conflicts = 0;
  };

  static absl::StatusOr<std::unique_ptr<Dispatchers>> Create(
      const std::string& url, std::vector<std::string> clusters,
      uint64_t seed) {
    absl::StatusOr<std::unique_ptr<pg::Database>> db =
        pg::Database::Open({.url = url, .pool_size = 2, .custom_plans = true});
    if (!db.ok()) return db.status();
    auto d = std::unique_ptr<Dispatchers>(new Dispatchers(std::move(*db)));
    d->clusters_ = std::move(clusters);
    {
      absl::MutexLock l(&d->mu_);
      d->rng_.seed(seed);
    }
    absl::StatusOr<uint64_t> seq = d->events_.LastEventSequence();
    if (!seq.ok()) return seq.status();
    d->after_ = *seq;
    return d;
  }

  // Each cluster's dispatcher heartbeat, as Dispatcher::ReportHealth writes
  // it.
  absl::Status Heartbeat() {
    const absl::Time now = absl::Now();
    for (const std::string& c : clusters_) {
      absl::StatusOr<pg::StoredObject> row = objects_.Update(
          pg::ClusterKind(), {c}, 0,
          [&](const pg::StoredObject& current)
              -> absl::StatusOr<pg::ObjectStore::Mutation> {
            v1::Cluster cluster;
            if (!cluster.ParseFromString(current.body))
              return absl::InternalError("unreadable cluster record");
            cluster.set_health(v1::CLUSTER_HEALTH_HEALTHY);
            cluster.set_health_message("");
            *cluster.mutable_heartbeat_time() =
                google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
                    absl::ToUnixMicros(now));
            return pg::ObjectStore::Mutation{.body =
                                                 cluster.SerializeAsString()};
          },
          nullptr);
      if (!row.ok()) return row.status();
    }
    return absl::OkStatus();
  }

  // Follows what the scheduler decided since the last call.
  absl::Status Follow() {
    std::vector<int64_t> ids;
    absl::flat_hash_set<int64_t> seen;
    while (true) {
      absl::StatusOr<std::vector<v1::JobEvent>> events =
          events_.ReadEvents(after_, {}, 10000);
      if (!events.ok()) return events.status();
      for (const v1::JobEvent& e : *events) {
        after_ = e.sequence();
        if (e.type() != v1::JOB_EVENT_TYPE_STATE_CHANGED) continue;
        if (e.to_state() != v1::JOB_STATE_ADMITTED &&
            e.to_state() != v1::JOB_STATE_PREEMPTING) {
          continue;
        }
        const int64_t id = std::stoll(e.job().substr(e.job().rfind('/') + 1));
        if (seen.insert(id).second) ids.push_back(id);
      }
      if (events->size() < 10000) break;
    }
    if (ids.empty()) return absl::OkStatus();
    absl::StatusOr<std::vector<pg::ActiveJob>> active =
        active_.LoadActiveJobs(&ids);
    if (!active.ok()) return active.status();
    const absl::Time now = absl::Now();
    std::vector<pg::AttemptChange> requeues, claims;
    for (const pg::ActiveJob& a : *active) {
      if (!a.attempt.has_value()) continue;
      const int64_t id = IdOf(a.job);
      const std::string name = a.attempt->backend_job_name();
      if (a.job.state() == v1::JOB_STATE_PREEMPTING) {
        // The victim stopped at once (no grace): back in line.
        int64_t lost = 0;
        if (a.attempt->has_start_time()) {
          lost = Gpus(a.job) *
                 std::max<int64_t>(
                     0, absl::ToInt64Seconds(
                            now - absl::FromUnixMicros(
                                      google::protobuf::util::TimeUtil::
                                          TimestampToMicroseconds(
                                              a.attempt->start_time()))));
        }
        requeues.push_back(
            {.tenant = a.job.tenant(),
             .job_id = id,
             .expected_version = a.job.version(),
             .to = v1::JOB_STATE_QUEUED,
             .reason = "PREEMPTED",
             .message = absl::StrCat(name,
                                     " was preempted; the next attempt "
                                     "resumes from the start (no checkpoint)"),
             .end_time = now,
             .failure_class = v1::FAILURE_CLASS_PREEMPTION,
             .lost_gpu_seconds = lost,
             .attempt_message = "stopped by the scheduler",
             .backend_job_id = absl::StrCat("sim-", name)});
        absl::MutexLock l(&mu_);
        running_.Remove(id);
      } else if (a.job.state() == v1::JOB_STATE_ADMITTED) {
        claims.push_back(
            {.tenant = a.job.tenant(),
             .job_id = id,
             .expected_version = a.job.version(),
             .to = v1::JOB_STATE_DISPATCHING,
             .reason = "DISPATCHING",
             .message = absl::StrCat("submitting ", name, " to ",
                                     ClusterId(a.attempt->cluster()))});
      }
    }
    if (absl::Status s = Apply(requeues, &Counts::requeued, nullptr); !s.ok())
      return s;
    // Claimed in one transaction, then started (the dispatcher records the
    // start with the rest of its next pass).
    std::vector<v1::Job> claimed;
    if (absl::Status s = Apply(claims, nullptr, &claimed); !s.ok()) return s;
    std::vector<pg::AttemptChange> starts;
    for (const v1::Job& job : claimed) {
      const std::string name =
          absl::StrCat("ty-", IdOf(job), "-", job.attempt_count());
      starts.push_back({.tenant = job.tenant(),
                        .job_id = IdOf(job),
                        .expected_version = job.version(),
                        .to = v1::JOB_STATE_RUNNING,
                        .reason = "STARTED",
                        .message = absl::StrCat(name, " started"),
                        .start_time = absl::Now(),
                        .backend_job_id = absl::StrCat("sim-", name)});
    }
    std::vector<v1::Job> started;
    if (absl::Status s = Apply(starts, &Counts::started, &started); !s.ok())
      return s;
    absl::MutexLock l(&mu_);
    for (const v1::Job& job : started) {
      running_.Put(IdOf(job), {.tenant = job.tenant(),
                               .version = job.version(),
                               .name = absl::StrCat("ty-", IdOf(job), "-",
                                                    job.attempt_count())});
    }
    return absl::OkStatus();
  }

  // Ends `n` running jobs, picked at random, successfully.
  absl::Status Complete(int n) {
    std::vector<pg::AttemptChange> ends;
    const absl::Time now = absl::Now();
    {
      absl::MutexLock l(&mu_);
      for (int i = 0; i < n && running_.size() > 0; ++i) {
        const auto [id, job] = running_.TakeRandom(rng_);
        ends.push_back(
            {.tenant = job.tenant,
             .job_id = id,
             .expected_version = job.version,
             .to = v1::JOB_STATE_SUCCEEDED,
             .reason = "SUCCEEDED",
             .message = absl::StrCat(job.name, " finished successfully"),
             .end_time = now,
             .exit_code = 0,
             .backend_job_id = absl::StrCat("sim-", job.name)});
      }
    }
    return Apply(ends, &Counts::completed, nullptr);
  }

  Counts counts() {
    absl::MutexLock l(&mu_);
    return counts_;
  }
  size_t running() {
    absl::MutexLock l(&mu_);
    return running_.size();
  }

 private:
  struct RunningJob {
    std::string tenant;
    int64_t version = 0;
    // The attempt's backend job name.
    std::string name;
  };
  // Running jobs, with O(1) random picks.
  class RunningSet {
   public:
    void Put(int64_t id, RunningJob job) {
      auto [it, inserted] = index_.try_emplace(id, ids_.size());
      if (inserted) {
        ids_.push_back(id);
        jobs_.push_back(std::move(job));
      } else {
        jobs_[it->second] = std::move(job);
      }
    }
    void Remove(int64_t id) {
      auto it = index_.find(id);
      if (it == index_.end()) return;
      const size_t at = it->second;
      index_.erase(it);
      if (at + 1 != ids_.size()) {
        ids_[at] = ids_.back();
        jobs_[at] = std::move(jobs_.back());
        index_[ids_[at]] = at;
      }
      ids_.pop_back();
      jobs_.pop_back();
    }
    std::pair<int64_t, RunningJob> TakeRandom(std::mt19937_64& rng) {
      const size_t at =
          std::uniform_int_distribution<size_t>(0, ids_.size() - 1)(rng);
      std::pair<int64_t, RunningJob> out{ids_[at], jobs_[at]};
      Remove(out.first);
      return out;
    }
    size_t size() const { return ids_.size(); }

   private:
    std::vector<int64_t> ids_;
    std::vector<RunningJob> jobs_;
    absl::flat_hash_map<int64_t, size_t> index_;
  };

  explicit Dispatchers(std::unique_ptr<pg::Database> db)
      : db_(std::move(db)),
        jobs_(db_.get()),
        events_(db_.get()),
        active_(db_.get()),
        objects_(db_.get()) {}

  static int64_t IdOf(const v1::Job& job) {
    return std::stoll(job.name().substr(job.name().rfind('/') + 1));
  }
  static int64_t Gpus(const v1::Job& job) {
    return int64_t{job.spec().resources().gpus()} *
           std::max(1, job.spec().workers());
  }
  static std::string ClusterId(const std::string& name) {
    return name.substr(name.rfind('/') + 1);
  }

  // Records `changes` in transactions of at most 1,000 (as a dispatcher's
  // pass does), counting those applied in `applied` and returning the jobs
  // in `saved`; a change refused because the job changed meanwhile is a
  // conflict.
  absl::Status Apply(const std::vector<pg::AttemptChange>& changes,
                     int64_t Counts::*applied, std::vector<v1::Job>* saved) {
    for (size_t begin = 0; begin < changes.size(); begin += 1000) {
      std::vector<pg::AttemptChange> chunk(
          changes.begin() + static_cast<std::ptrdiff_t>(begin),
          changes.begin() + static_cast<std::ptrdiff_t>(
                                std::min(changes.size(), begin + 1000)));
      absl::StatusOr<std::vector<absl::StatusOr<v1::Job>>> results =
          jobs_.ChangeAttempts(chunk);
      if (!results.ok()) return results.status();
      for (absl::StatusOr<v1::Job>& r : *results) {
        if (!r.ok()) {
          absl::MutexLock l(&mu_);
          ++counts_.conflicts;
          continue;
        }
        if (applied != nullptr) {
          absl::MutexLock l(&mu_);
          ++(counts_.*applied);
        }
        if (saved != nullptr) saved->push_back(*std::move(r));
      }
    }
    return absl::OkStatus();
  }

  std::unique_ptr<pg::Database> db_;
  pg::DispatcherStore jobs_;
  // Events (the outbox), read as the api's Watch reads them.
  pg::JobStore events_;
  // Active jobs with their attempts, as the scheduler reads them.
  pg::SchedulerStore active_;
  pg::ObjectStore objects_;
  std::vector<std::string> clusters_;
  uint64_t after_ = 0;  // Follow()'s alone.
  // Follow() and Complete() run on different threads.
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  RunningSet running_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

// --- The churn ---------------------------------------------------------------

// Arrivals through the api and the dispatchers' writes, each on its own
// threads, from Start() to Stop().
class Churn {
 public:
  Churn(ApiHarness& h, const Platform& p, Dispatchers& d,
        std::atomic<int64_t>& next_job)
      : h_(h), p_(p), d_(d), next_job_(next_job) {}
  ~Churn() { (void)Stop(); }

  void Start(double rate) {
    start_ = absl::Now();
    const absl::Duration tick = absl::GetFlag(FLAGS_churn_tick);
    const int clients = std::max(1, absl::GetFlag(FLAGS_arrival_clients));
    for (int c = 0; c < clients; ++c) {
      threads_.emplace_back([this, c, clients, rate, tick] {
        JobFactory factory(p_, absl::GetFlag(FLAGS_seed) * 7919 + 101 + c);
        Submitter submitter(h_);
        int64_t made = 0;
        while (!stop_.WaitForNotificationWithTimeout(tick)) {
          const double due =
              rate / clients * absl::ToDoubleSeconds(absl::Now() - start_);
          for (; made < static_cast<int64_t>(due); ++made) {
            auto [tenant, req] = factory.Make(next_job_++);
            submitter.Add(std::move(tenant), std::move(req));
          }
          (void)submitter.FlushAll();
        }
        absl::MutexLock l(&mu_);
        arrived_ += submitter.submitted();
        if (!submitter.failure().ok()) failure_.Update(submitter.failure());
      });
    }
    // The dispatchers: following the scheduler's decisions (and the
    // heartbeats) on one thread, completions on another, so that a long
    // pass of one does not bunch the other.
    threads_.emplace_back([this, tick] {
      const absl::Duration heartbeat = absl::GetFlag(FLAGS_heartbeat_interval);
      absl::Time last_heartbeat = absl::InfinitePast();
      while (!stop_.WaitForNotificationWithTimeout(tick)) {
        absl::Status s;
        if (absl::Now() - last_heartbeat >= heartbeat) {
          s.Update(d_.Heartbeat());
          last_heartbeat = absl::Now();
        }
        s.Update(d_.Follow());
        Fail(s);
      }
    });
    threads_.emplace_back([this, rate, tick] {
      int64_t completed = 0;
      while (!stop_.WaitForNotificationWithTimeout(tick)) {
        const double due = rate * absl::ToDoubleSeconds(absl::Now() - start_);
        const int n = static_cast<int>(static_cast<int64_t>(due) - completed);
        Fail(d_.Complete(n));
        completed += n;
      }
    });
  }

  // Stops the writers; returns their first error.
  absl::Status Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    if (stopped_ == absl::InfinitePast()) stopped_ = absl::Now();
    absl::MutexLock l(&mu_);
    return failure_;
  }

  void Fail(const absl::Status& s) {
    if (s.ok()) return;
    absl::MutexLock l(&mu_);
    failure_.Update(s);
  }
  int64_t arrived() {
    absl::MutexLock l(&mu_);
    return arrived_;
  }
  double seconds() const { return absl::ToDoubleSeconds(stopped_ - start_); }

 private:
  ApiHarness& h_;
  const Platform& p_;
  Dispatchers& d_;
  std::atomic<int64_t>& next_job_;
  absl::Time start_, stopped_ = absl::InfinitePast();
  absl::Notification stop_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  int64_t arrived_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

#define CHECK_OK(expr)                                     \
  do {                                                     \
    if (absl::Status _s = (expr); !_s.ok()) {              \
      std::cerr << #expr << ": " << _s.ToString() << "\n"; \
      return 1;                                            \
    }                                                      \
  } while (0)

double Seconds(absl::Time since) {
  return absl::ToDoubleSeconds(absl::Now() - since);
}

int Bench() {
  if (absl::GetFlag(FLAGS_smoke)) {
    absl::SetFlag(&FLAGS_jobs, 400);
    absl::SetFlag(&FLAGS_nodes, 64);
    absl::SetFlag(&FLAGS_queues, 20);
    absl::SetFlag(&FLAGS_cohorts, 4);
    absl::SetFlag(&FLAGS_rate, 50);
    absl::SetFlag(&FLAGS_cycles, 3);
    absl::SetFlag(&FLAGS_warmup, 1);
    absl::SetFlag(&FLAGS_prime_cycles, 2);
  }
  const int jobs = absl::GetFlag(FLAGS_jobs);
  const double rate = absl::GetFlag(FLAGS_rate);
  const int cycles = absl::GetFlag(FLAGS_cycles);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  if (jobs < 0 || absl::GetFlag(FLAGS_nodes) < 1 ||
      absl::GetFlag(FLAGS_queues) < 1 || absl::GetFlag(FLAGS_cohorts) < 0 ||
      absl::GetFlag(FLAGS_clusters) < 1 || cycles < 1 || warmup < 0 ||
      rate < 0) {
    std::cerr << "flags out of range\n";
    return 2;
  }
  const std::string started_at =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  const std::string load_before = LoadAverage();
  absl::StatusOr<std::string> dir = fixtures::MakeTempDir("trainyard-svcb-");
  CHECK_OK(dir.status());

  // The stack: PostgreSQL, Redis, the api.
  absl::Time t = absl::Now();
  ApiHarness::Options options;
  options.server.default_submit_rate = 1e9;
  options.server.default_submit_burst = 1e9;
  absl::StatusOr<std::unique_ptr<ApiHarness>> harness =
      ApiHarness::Start(options);
  CHECK_OK(harness.status());
  ApiHarness& h = **harness;
  const std::string url = h.database_url();
  const std::string cadence = absl::GetFlag(FLAGS_cadence);
  if (cadence != "wakeup" && cadence != "timer") {
    std::cerr << "--cadence: wakeup or timer, not " << cadence << "\n";
    return 1;
  }
  // The scheduler process's Redis: its wake-ups and the ones it publishes.
  const std::string redis_addr =
      cadence == "wakeup"
          ? absl::StrCat(h.redis()->host(), ":", h.redis()->port())
          : "";

  // The platform.
  const Platform platform = MakePlatform();
  CHECK_OK(CreatePlatform(h, platform));
  const double platform_seconds = Seconds(t);
  t = absl::Now();
  CHECK_OK(ReportNodes(h, platform, absl::GetFlag(FLAGS_load_clients)));
  const double nodes_seconds = Seconds(t);
  std::cerr << "platform: " << platform.snapshot.flavors.size() << " flavors, "
            << platform.clusters.size() << " clusters, "
            << platform.snapshot.nodes.size() << " nodes (" << platform.blocks
            << " blocks), " << platform.snapshot.queues.size() << " queues of "
            << platform.tenants << " tenants, "
            << platform.snapshot.cohorts.size()
            << " cohorts; nodes reported in " << nodes_seconds << " s\n";
  absl::StatusOr<std::unique_ptr<Dispatchers>> dispatchers =
      Dispatchers::Create(url, platform.clusters, absl::GetFlag(FLAGS_seed));
  CHECK_OK(dispatchers.status());
  CHECK_OK((*dispatchers)->Heartbeat());

  // The pending jobs.
  t = absl::Now();
  std::atomic<int64_t> next_job{1};
  {
    const int clients = std::max(1, absl::GetFlag(FLAGS_load_clients));
    std::vector<std::thread> threads;
    absl::Mutex mu;
    absl::Status failure;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        JobFactory factory(platform, absl::GetFlag(FLAGS_seed) + 1 + c);
        Submitter submitter(h);
        const int share = jobs / clients + (c < jobs % clients ? 1 : 0);
        for (int i = 0; i < share && submitter.failure().ok(); ++i) {
          auto [tenant, req] = factory.Make(next_job++);
          submitter.Add(std::move(tenant), std::move(req));
        }
        absl::Status s = submitter.FlushAll();
        absl::MutexLock l(&mu);
        failure.Update(s);
      });
    }
    for (std::thread& th : threads) th.join();
    CHECK_OK(failure);
  }
  const double jobs_seconds = Seconds(t);
  std::cerr << "loaded " << jobs << " jobs in " << jobs_seconds << " s ("
            << static_cast<int64_t>(jobs / std::max(jobs_seconds, 1e-3))
            << "/s)\n";
  // As a long-running database would be: statistics and visibility maps
  // current (autovacuum's work, done now instead of during the run).
  t = absl::Now();
  try {
    pqxx::connection conn(url);
    pqxx::nontransaction txn(conn);
    txn.exec0("VACUUM ANALYZE");
  } catch (const std::exception& e) {
    std::cerr << "VACUUM ANALYZE: " << e.what() << "\n";
    return 1;
  }
  const double vacuum_seconds = Seconds(t);

  // The running set: cycles admit what fits, the dispatchers start it.
  std::vector<Sample> prime;
  t = absl::Now();
  {
    absl::StatusOr<std::unique_ptr<SchedulerService>> service =
        SchedulerService::Create(ServiceOptions(url, ""));
    CHECK_OK(service.status());
    for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_prime_cycles)); ++i) {
      // Loading took a while: the dispatchers are alive.
      CHECK_OK((*dispatchers)->Heartbeat());
      absl::StatusOr<Sample> s = TimedCycle(**service);
      CHECK_OK(s.status());
      prime.push_back(*s);
      std::cerr << "prime cycle " << i + 1 << ": " << SampleSummary(*s) << "\n";
      CHECK_OK((*dispatchers)->Follow());
      if (s->admitted == 0) break;
    }
  }
  malloc_trim(0);
  const double prime_seconds = Seconds(t);
  std::cerr << "running: " << (*dispatchers)->running() << " jobs\n";

  // The measured run, then the takeover, with the churn going on.
  Churn churn(h, platform, **dispatchers, next_job);
  churn.Start(rate);
  const std::string load_during = LoadAverage();
  // A hot standby follows while the leader runs its cycles, and takes over
  // when the leader is gone (the file below).
  const std::string leader_gone = absl::StrCat(*dir, "/leader-gone");
  absl::StatusOr<SchedulerProcess> standby_process =
      absl::GetFlag(FLAGS_hot_standby)
          ? StartScheduler(url, redis_addr, *dir, "hot-standby", 1, leader_gone)
          : absl::StatusOr<SchedulerProcess>(SchedulerProcess{});
  CHECK_OK(standby_process.status());
  absl::StatusOr<SchedulerProcess> steady_process =
      StartScheduler(url, redis_addr, *dir, "steady", warmup + cycles);
  CHECK_OK(steady_process.status());
  absl::StatusOr<ServeResult> steady = FinishScheduler(*steady_process);
  std::optional<absl::StatusOr<ServeResult>> hot;
  if (absl::GetFlag(FLAGS_hot_standby)) {
    std::ofstream(leader_gone) << "\n";
    hot = FinishScheduler(*standby_process);
  }
  const std::string load_after = LoadAverage();
  absl::StatusOr<ServeResult> takeover =
      steady.ok() ? [&]() -> absl::StatusOr<ServeResult> {
    absl::StatusOr<SchedulerProcess> p =
        StartScheduler(url, redis_addr, *dir, "takeover", 1);
    if (!p.ok()) return p.status();
    return FinishScheduler(*p);
  }()
      : steady;
  absl::Status churn_status = churn.Stop();
  CHECK_OK(steady.status());
  CHECK_OK(takeover.status());
  if (hot.has_value()) CHECK_OK(hot->status());
  CHECK_OK(churn_status);
  const Dispatchers::Counts counts = (*dispatchers)->counts();

  const std::vector<Sample> measured(steady->cycles.begin() + warmup,
                                     steady->cycles.end());
  for (size_t i = 0; i < steady->cycles.size(); ++i) {
    std::cerr << (static_cast<int>(i) < warmup ? "warm-up" : "cycle") << " "
              << i + 1 << ": " << SampleSummary(steady->cycles[i]) << "\n";
  }
  const Sample& first = takeover->cycles.front();
  std::cerr << "takeover: create "
            << static_cast<double>(takeover->create_us) / 1000
            << " ms, first cycle " << SampleSummary(first) << "\n";
  if (hot.has_value()) {
    std::cerr << "hot standby takeover: " << (*hot)->follows
              << " follows (the last "
              << static_cast<double>((*hot)->last_follow_us) / 1000
              << " ms), first cycle " << SampleSummary((*hot)->cycles.front())
              << "\n";
  }

  const Stats wall = Summarize([&] {
    std::vector<int64_t> v;
    for (const Sample& s : measured) v.push_back(s.wall);
    return v;
  }());
  std::cerr << absl::StrFormat(
      "steady state over %d cycles: wall p50 %.1f ms, p99 %.1f ms, max %.1f "
      "ms; scheduler peak RSS %.1f MiB; takeover (create + first cycle) %.1f "
      "ms, peak RSS %.1f MiB\n",
      measured.size(), wall.p50, wall.p99, wall.max,
      static_cast<double>(steady->peak_rss) / (1 << 20),
      static_cast<double>(takeover->create_us + first.wall) / 1000,
      static_cast<double>(takeover->peak_rss) / (1 << 20));
  std::cerr << "steady state parts, p50:";
  for (const Part& p : Parts()) {
    std::vector<int64_t> v;
    for (const Sample& s : measured) v.push_back(s.*p.field);
    const Stats st = Summarize(v);
    std::cerr << " " << p.name << " " << (p.duration ? st.p50 : st.p50 * 1000);
  }
  std::cerr << "\n";

  std::string json = absl::StrCat(
      "{\n  \"benchmark\": \"scheduler_service_bench\",\n  \"label\": \"",
      absl::GetFlag(FLAGS_label), "\",\n  \"started_at\": \"", started_at,
      "\",\n  \"machine\": {\"cpus\": ", std::thread::hardware_concurrency(),
      ", \"loadavg_before\": \"", load_before,
      "\", \"loadavg_churn_start\": \"", load_during,
      "\", \"loadavg_after_steady\": \"", load_after, "\"}",
      ",\n  \"parameters\": {\"jobs\": ", jobs,
      ", \"nodes\": ", platform.snapshot.nodes.size(),
      ", \"gpus_per_node\": 8, \"clusters\": ", platform.clusters.size(),
      ", \"queues\": ", platform.snapshot.queues.size(),
      ", \"tenants\": ", platform.tenants,
      ", \"cohorts\": ", platform.snapshot.cohorts.size(),
      ", \"rate_per_second\": ", rate, ", \"cycles\": ", cycles,
      ", \"warmup\": ", warmup, ", \"cadence\": \"", cadence,
      "\", \"explanation_interval_ms\": ",
      absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_explanation_interval)),
      ", \"interval_ms\": ",
      absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_interval)),
      ", \"heartbeat_interval_s\": ",
      absl::ToDoubleSeconds(absl::GetFlag(FLAGS_heartbeat_interval)),
      ", \"seed\": ", absl::GetFlag(FLAGS_seed),
      ", \"smoke\": ", absl::GetFlag(FLAGS_smoke) ? "true" : "false", "}",
      ",\n  \"load\": {\"platform_s\": ", Ms(platform_seconds),
      ", \"nodes_s\": ", Ms(nodes_seconds), ", \"jobs_s\": ", Ms(jobs_seconds),
      ", \"jobs_per_s\": ",
      static_cast<int64_t>(jobs / std::max(jobs_seconds, 1e-3)),
      ", \"vacuum_analyze_s\": ", Ms(vacuum_seconds),
      ", \"prime_s\": ", Ms(prime_seconds),
      ", \"running_after_prime\": ", prime.empty() ? 0 : prime.back().running,
      "},\n  \"prime_cycles\": [");
  for (size_t i = 0; i < prime.size(); ++i)
    absl::StrAppend(&json, i ? ",\n    " : "\n    ", SampleJson(prime[i]));
  absl::StrAppend(
      &json, "\n  ],\n  \"steady\": ", CyclesJson(measured),
      ",\n  \"scheduler_process\": {\"create_ms\": ",
      Ms(static_cast<double>(steady->create_us) / 1000),
      ", \"peak_rss_bytes\": ", steady->peak_rss,
      ", \"rss_bytes_at_end\": ", steady->rss, ", \"explanations_flush_ms\": ",
      Ms(static_cast<double>(steady->flush_us) / 1000),
      ", \"glibc_tunables\": \"", steady->tunables, "\"}",
      ",\n  \"takeover\": {\"create_ms\": ",
      Ms(static_cast<double>(takeover->create_us) / 1000),
      ", \"first_cycle\": ", SampleJson(first), ", \"create_plus_first_ms\": ",
      Ms(static_cast<double>(takeover->create_us + first.wall) / 1000),
      ", \"peak_rss_bytes\": ", takeover->peak_rss,
      ", \"explanations_flush_ms\": ",
      Ms(static_cast<double>(takeover->flush_us) / 1000), "}",
      hot.has_value()
          ? absl::StrCat(
                ",\n  \"hot_standby_takeover\": {\"follows\": ",
                (*hot)->follows, ", \"last_follow_ms\": ",
                Ms(static_cast<double>((*hot)->last_follow_us) / 1000),
                ", \"first_cycle\": ", SampleJson((*hot)->cycles.front()),
                ", \"peak_rss_bytes\": ", (*hot)->peak_rss, "}")
          : std::string(),
      ",\n  \"churn\": {\"seconds\": ", Ms(churn.seconds()),
      ", \"arrivals\": ", churn.arrived(), ", \"arrivals_per_s\": ",
      Ms(static_cast<double>(churn.arrived()) / churn.seconds()),
      ", \"completions\": ", counts.completed, ", \"completions_per_s\": ",
      Ms(static_cast<double>(counts.completed) / churn.seconds()),
      ", \"started\": ", counts.started,
      ", \"preempted_requeued\": ", counts.requeued,
      ", \"conflicts\": ", counts.conflicts, "}", ",\n  \"cycles\": [");
  for (size_t i = 0; i < steady->cycles.size(); ++i) {
    absl::StrAppend(&json, i ? ",\n    " : "\n    ",
                    SampleJson(steady->cycles[i]));
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  std::cout << json;
  // The scheduler processes' samples and logs are kept only on failure.
  std::error_code ignored;
  std::filesystem::remove_all(*dir, ignored);
  const std::string path = absl::GetFlag(FLAGS_out);
  if (!path.empty()) {
    std::ofstream out(path);
    out << json;
    if (!out) {
      std::cerr << "cannot write " << path << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::GetFlag(FLAGS_serve)) {
    // As `trainyard` does (the same process, executed again at most once).
    trainyard::runtime::UseHugePageMalloc(argv);
    return Serve();
  }
  return Bench();
}
