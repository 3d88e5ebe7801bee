// kueue_baseline: Kueue's own scheduler performance test
// (test/performance/scheduler/configs/baseline in kubernetes-sigs/kueue),
// reproduced end to end on Trainyard: 5 cohorts × 6 queues,
// nominal quota 20 CPU and borrowing limit 100 CPU per queue, reclaim within
// the cohort Any, within-queue preemption LowerPriority; per queue 350 small
// jobs (1 CPU, 200 ms, priority 50, one every 100 ms), 100 medium (5 CPU,
// 500 ms, priority 100, one every 500 ms) and 50 large (20 CPU, 1 s, priority
// 200, one every 1,200 ms) — 15,000 jobs submitted over gRPC into the real
// api, scheduled by the real scheduler and run by the sim backend's
// dispatcher on the real clock, over PostgreSQL and Redis (all in this
// process, as `trainyard all` runs them). The cluster has 600 CPUs (the sum of
// the nominal quotas), by default on one node: Kueue's runner admits against
// quota only; --nodes=10 adds bin-packing.
//
// It measures the wall time (first submit to last job ended), the average
// time to admission per class (SUBMITTED to ADMITTED events of the outbox)
// and the CPU utilisation (CPU·s of work / (wall × 600 CPUs)), and per 5 s
// the CPUs running each class and those admitted but not yet running, prints
// them and writes them as JSON. It asserts nothing about timings.
//   kueue_baseline --output=perf-results/kueue_baseline.json
//   kueue_baseline --scale=0.02      # 2% of the jobs: a quick smoke run
//   (CTest)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "services/accounting/meter_service.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/sim/sim_adapter.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/dispatcher/dispatcher.h"
#include "services/lib/runtime/metrics.h"
#include "services/scheduler/scheduler_service.h"
#include "storage/postgres/job_store.h"
#include "storage/postgres/pool.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/accounting.grpc.pb.h"

ABSL_FLAG(double, scale, 1.0,
          "Fraction of each queue's jobs to submit (1 = Kueue's 15,000)");
ABSL_FLAG(std::string, output, "perf-results/kueue_baseline.json",
          "JSON result file");
ABSL_FLAG(absl::Duration, schedule_interval, absl::Milliseconds(100),
          "Scheduler timer (it also wakes on every submit)");
ABSL_FLAG(absl::Duration, dispatch_interval, absl::Milliseconds(50),
          "Dispatcher pass interval");
ABSL_FLAG(int64_t, log_tail_bytes, 1 << 20,
          "the dispatcher's --log_tail_bytes: attempts' output copied to "
          "PostgreSQL (0: none)");
ABSL_FLAG(int, nodes, 1,
          "Sim nodes the 600 CPUs are split into (a divisor of 600). Kueue's "
          "baseline admits against quota only (its runner has no nodes): the "
          "default, one node, compares like with like; more nodes add "
          "bin-packing (e.g. --nodes=10: 60-CPU nodes)");
ABSL_FLAG(absl::Duration, explanation_interval, absl::Seconds(1),
          "The scheduler's explanation_interval (as `trainyard scheduler "
          "--explanation_interval`; 0: every cycle explains)");
ABSL_FLAG(bool, hold_borrowing_for_priority, false,
          "PolicyConfig::hold_borrowing_for_priority: a job that finds no room "
          "in its cohort keeps lower-priority jobs from borrowing there for "
          "the rest of the cycle (false: anything that fits goes, as "
          "Kueue's BestEffortFIFO)");
ABSL_FLAG(bool, nominal_before_borrowing, false,
          "PolicyConfig::nominal_before_borrowing: Kueue's ordering across "
          "queues (jobs within their queue's nominal quota before jobs that "
          "borrow, then priority); false: priority first");
ABSL_FLAG(bool, preempt_for_capacity, false,
          "PolicyConfig::preempt_for_capacity: a job within its queue's "
          "nominal quota that finds no node with room preempts lower-priority "
          "jobs of any queue (not in Kueue; matters with --nodes > 1)");
ABSL_FLAG(bool, pg_statements, false,
          "Load pg_stat_statements into the private PostgreSQL and print the "
          "statements that took the most time (a diagnostic)");
ABSL_FLAG(bool, accounting, false,
          "Run the accounting meter beside the scheduler (a CPU-hour rate for "
          "the flavor, a tenant budget with WARN 50 % and HOLD 100 % "
          "thresholds that the scheduler prices every admission against, "
          "and a meter pass every --meter_interval): what accounting adds "
          "to the run");
ABSL_FLAG(absl::Duration, meter_interval, absl::Seconds(5),
          "With --accounting: the meter's pass interval (the service's "
          "default is 30 s)");
ABSL_FLAG(absl::Duration, timeout, absl::Minutes(15),
          "Give up after this long");

namespace {

namespace v1 = ::trainyard::v1;
using trainyard::testing::ApiHarness;

struct JobClass {
  std::string name;
  int64_t cpu_millis;
  absl::Duration duration;
  int priority;
  absl::Duration every;
  int per_queue;
};

const std::vector<JobClass>& Classes() {
  static const auto* classes = new std::vector<JobClass>{
      {"small", 1000, absl::Milliseconds(200), 50, absl::Milliseconds(100),
       350},
      {"medium", 5000, absl::Milliseconds(500), 100, absl::Milliseconds(500),
       100},
      {"large", 20000, absl::Seconds(1), 200, absl::Milliseconds(1200), 50}};
  return *classes;
}

constexpr int kCohorts = 5;
constexpr int kQueuesPerCohort = 6;
constexpr int64_t kNominalCpuMillis = 20000;   // Per queue.
constexpr int64_t kClusterCpuMillis = 600000;  // The sum of the quotas.

#define CHECK_OK(expr)                                          \
  do {                                                          \
    auto _s = (expr);                                           \
    if (!_s.ok()) {                                             \
      std::cerr << #expr << ": " << _s.error_message() << "\n"; \
      return 1;                                                 \
    }                                                           \
  } while (0)

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
  return ApiHarness::Context(token);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const double scale = absl::GetFlag(FLAGS_scale);
  const int node_count = absl::GetFlag(FLAGS_nodes);
  if (node_count < 1 || kClusterCpuMillis % (node_count * 1000) != 0) {
    std::cerr << "--nodes must divide 600 CPUs evenly, got " << node_count
              << "\n";
    return 2;
  }

  if (absl::GetFlag(FLAGS_pg_statements)) {
    setenv("TRAINYARD_PG_SETTINGS",
           "shared_preload_libraries=pg_stat_statements", 1);
  }
  ApiHarness::Options options;
  options.server.default_submit_rate = 100000;
  options.server.default_submit_burst = 100000;
  absl::StatusOr<std::unique_ptr<ApiHarness>> harness =
      ApiHarness::Start(options);
  if (!harness.ok()) {
    std::cerr << "harness: " << harness.status() << "\n";
    return 1;
  }
  ApiHarness& h = **harness;
  const std::string& admin = h.admin_token();
  auto clusters = h.clusters();
  auto queues = h.queues();

  // The platform: a CPU flavor, a sim cluster of 600 CPUs, priorities, cohorts,
  // queues.
  {
    v1::CreateFlavorRequest req;
    req.set_flavor_id("cpu");
    req.mutable_flavor()->set_kind(v1::FLAVOR_KIND_ON_DEMAND);
    req.mutable_flavor()->mutable_cpu_hour_price()->set_currency_code("USD");
    req.mutable_flavor()->mutable_cpu_hour_price()->set_micros(40000);
    v1::Flavor out;
    CHECK_OK(clusters->CreateFlavor(Ctx(admin).get(), req, &out));
  }
  {
    v1::CreateClusterRequest req;
    req.set_cluster_id("sim");
    req.mutable_cluster()->set_backend(v1::BACKEND_KIND_SIM);
    v1::Cluster out;
    CHECK_OK(clusters->CreateCluster(Ctx(admin).get(), req, &out));
  }
  {
    v1::CreatePoolRequest req;
    req.set_parent("clusters/sim");
    req.set_pool_id("main");
    req.mutable_pool()->set_flavor("cpu");
    v1::Pool out;
    CHECK_OK(clusters->CreatePool(Ctx(admin).get(), req, &out));
  }
  for (const JobClass& c : Classes()) {
    v1::CreatePriorityClassRequest req;
    req.set_priority_class_id(c.name);
    req.mutable_priority_class()->set_value(c.priority);
    req.mutable_priority_class()->set_preemptible(true);
    v1::PriorityClass out;
    CHECK_OK(queues->CreatePriorityClass(Ctx(admin).get(), req, &out));
  }
  {
    v1::CreateTenantRequest req;
    req.set_tenant_id("kueue");
    v1::Tenant out;
    CHECK_OK(queues->CreateTenant(Ctx(admin).get(), req, &out));
    v1::CreateProjectRequest p;
    p.set_parent("tenants/kueue");
    p.set_project_id("default");
    v1::Project project;
    CHECK_OK(queues->CreateProject(Ctx(admin).get(), p, &project));
  }
  std::vector<std::string> queue_ids;
  for (int c = 0; c < kCohorts; ++c) {
    v1::CreateCohortRequest cohort;
    cohort.set_cohort_id(absl::StrCat("cohort-", c));
    v1::Cohort out;
    CHECK_OK(queues->CreateCohort(Ctx(admin).get(), cohort, &out));
    for (int q = 0; q < kQueuesPerCohort; ++q) {
      v1::CreateQueueRequest req;
      req.set_parent("tenants/kueue");
      req.set_queue_id(absl::StrCat("q-", c, "-", q));
      v1::Queue* queue = req.mutable_queue();
      queue->set_cohort(cohort.cohort_id());
      v1::FlavorQuotas* fq = queue->add_quotas();
      fq->set_flavor("cpu");
      v1::ResourceQuota* cpu = fq->add_resources();
      cpu->set_resource(v1::RESOURCE_NAME_CPU);
      cpu->set_nominal(kNominalCpuMillis);
      cpu->set_borrowing_limit(100000);
      queue->mutable_preemption()->set_reclaim_within_cohort(
          v1::RECLAIM_WITHIN_COHORT_ANY);
      queue->mutable_preemption()->set_within_queue(
          v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY);
      v1::Queue created;
      CHECK_OK(queues->CreateQueue(Ctx(admin).get(), req, &created));
      queue_ids.push_back(req.queue_id());
    }
  }

  // Accounting: a rate for the flavor's CPU-hours, a tenant budget far above
  // what the run spends (so it never holds work, but every admission is
  // priced against it), and the meter.
  std::unique_ptr<trainyard::accounting::MeterService> meter;
  if (absl::GetFlag(FLAGS_accounting)) {
    auto accounting = v1::AccountingService::NewStub(h.channel());
    v1::AddRateRequest rate;
    rate.mutable_rate()->set_flavor("cpu");
    rate.mutable_rate()->set_resource(v1::RESOURCE_NAME_CPU);
    rate.mutable_rate()->mutable_price_per_unit_hour()->set_currency_code(
        "USD");
    rate.mutable_rate()->mutable_price_per_unit_hour()->set_micros(40000);
    *rate.mutable_rate()->mutable_effective_time() =
        google::protobuf::util::TimeUtil::MillisecondsToTimestamp(
            absl::ToUnixMillis(absl::Now() - absl::Hours(1)));
    v1::Rate rate_out;
    CHECK_OK(accounting->AddRate(Ctx(admin).get(), rate, &rate_out));
    // The jobs' memory is free (every resource a job holds needs a rate).
    rate.mutable_rate()->set_resource(v1::RESOURCE_NAME_MEMORY);
    rate.mutable_rate()->mutable_price_per_unit_hour()->set_micros(0);
    CHECK_OK(accounting->AddRate(Ctx(admin).get(), rate, &rate_out));
    v1::CreateBudgetRequest budget;
    budget.set_parent("tenants/kueue");
    budget.set_budget_id("all");
    budget.mutable_budget()->mutable_monthly_amount()->set_currency_code("USD");
    budget.mutable_budget()->mutable_monthly_amount()->set_micros(
        int64_t{1000000} * 1000000);
    for (auto [percent, action] : {std::pair{50, v1::BUDGET_ACTION_WARN},
                                   std::pair{100, v1::BUDGET_ACTION_HOLD}}) {
      v1::BudgetThreshold* t = budget.mutable_budget()->add_thresholds();
      t->set_percent(percent);
      t->set_action(action);
    }
    v1::Budget budget_out;
    CHECK_OK(accounting->CreateBudget(Ctx(admin).get(), budget, &budget_out));
    trainyard::accounting::MeterServiceOptions mo;
    mo.postgres_url = h.database_url();
    mo.interval = absl::GetFlag(FLAGS_meter_interval);
    absl::StatusOr<std::unique_ptr<trainyard::accounting::MeterService>> m =
        trainyard::accounting::MeterService::Create(mo);
    if (!m.ok()) {
      std::cerr << "meter: " << m.status() << "\n";
      return 1;
    }
    meter = *std::move(m);
  }

  // The sim cluster, its dispatcher and the scheduler.
  v1::SimClusterConfig config;
  config.set_cluster("sim");
  v1::SimPool* pool = config.add_pools();
  pool->set_name("main");
  pool->set_flavor("cpu");
  pool->set_flavor_kind(v1::FLAVOR_KIND_ON_DEMAND);
  v1::SimNodes* nodes = config.add_nodes();
  nodes->set_prefix("n-");
  nodes->set_count(node_count);
  nodes->set_pool("main");
  nodes->set_block("b0");
  nodes->set_rack("r0");
  nodes->mutable_capacity()->set_cpu_millis(kClusterCpuMillis / node_count);
  nodes->mutable_capacity()->set_memory_bytes(int64_t{1} << 40);
  absl::StatusOr<std::unique_ptr<trainyard::dispatcher::sim::SimAdapter>> sim =
      trainyard::dispatcher::sim::SimAdapter::Create(
          config, &trainyard::dispatcher::RealClock::Get());
  if (!sim.ok()) {
    std::cerr << "sim: " << sim.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<trainyard::dispatcher::Dispatcher>>
      dispatcher = trainyard::dispatcher::Dispatcher::Create(
          {.postgres_url = h.database_url(),
           .redis_addr = h.redis()->Address(),
           .cluster = "sim",
           .interval = absl::GetFlag(FLAGS_dispatch_interval),
           .log_tail_bytes = absl::GetFlag(FLAGS_log_tail_bytes)},
          sim->get());
  if (!dispatcher.ok()) {
    std::cerr << "dispatcher: " << dispatcher.status() << "\n";
    return 1;
  }
  // One pass now: the nodes are known before the first submit.
  if (auto pass = (*dispatcher)->RunPass(); !pass.ok()) {
    std::cerr << "dispatcher pass: " << pass.status() << "\n";
    return 1;
  }
  trainyard::scheduler::SchedulerOptions so;
  so.postgres_url = h.database_url();
  so.redis_addr = h.redis()->Address();
  so.interval = absl::GetFlag(FLAGS_schedule_interval);
  so.explanation_interval = absl::GetFlag(FLAGS_explanation_interval);
  so.policy.hold_borrowing_for_priority =
      absl::GetFlag(FLAGS_hold_borrowing_for_priority);
  so.policy.nominal_before_borrowing =
      absl::GetFlag(FLAGS_nominal_before_borrowing);
  so.policy.preempt_for_capacity = absl::GetFlag(FLAGS_preempt_for_capacity);
  absl::StatusOr<std::unique_ptr<trainyard::scheduler::SchedulerService>>
      scheduler = trainyard::scheduler::SchedulerService::Create(so);
  if (!scheduler.ok()) {
    std::cerr << "scheduler: " << scheduler.status() << "\n";
    return 1;
  }
  (*scheduler)->Start();
  (*dispatcher)->Start();
  if (meter != nullptr) meter->Start();

  // Submissions: one thread per class, each slot submitting one job to every
  // queue.
  const std::string token = h.Token("users/bench", v1::ROLE_MEMBER, "kueue");
  absl::Mutex mu;
  std::map<int64_t, int> class_of;  // job id -> class index
  std::map<int64_t, int> queue_of;  // job id -> index in queue_ids
  std::atomic<int> failures{0};
  int64_t total_work_cpu_ms = 0;
  int total_jobs = 0;
  for (const JobClass& c : Classes()) {
    const int n = std::max(1, static_cast<int>(c.per_queue * scale));
    total_jobs += n * static_cast<int>(queue_ids.size());
    total_work_cpu_ms += int64_t{n} * static_cast<int64_t>(queue_ids.size()) *
                         c.cpu_millis * absl::ToInt64Milliseconds(c.duration) /
                         1000;
  }
  const absl::Time start = absl::Now();
  // With --pg_statements: what PostgreSQL's busy backends are doing, sampled
  // every 20 ms (wait event, or CPU when they wait for nothing).
  std::atomic<bool> sampling{absl::GetFlag(FLAGS_pg_statements)};
  std::map<std::string, int64_t> waits;
  struct JoinOnExit {
    std::atomic<bool>& flag;
    std::thread thread;
    ~JoinOnExit() {
      flag = false;
      if (thread.joinable()) thread.join();
    }
  } sampler{
      sampling, std::thread([&] {
        if (!sampling.load()) return;
        absl::StatusOr<std::unique_ptr<trainyard::storage::postgres::Database>>
            sdb = trainyard::storage::postgres::Database::Open(
                {.url = h.database_url(), .pool_size = 1});
        if (!sdb.ok()) return;
        while (sampling.load()) {
          (void)(*sdb)->Read([&](pqxx::read_transaction& txn) {
            for (const pqxx::row& r : txn.exec(
                     "SELECT coalesce(a.wait_event_type || ':' || "
                     "a.wait_event, 'CPU'), left(regexp_replace(a.query, "
                     "'\\s+', ' ', 'g'), 40) || ' ... ' || right(a.query, 90) "
                     "|| coalesce(' <- blocked by ' || b.state || ': ' || "
                     "right(b.query, 90), '') FROM pg_stat_activity a "
                     "LEFT JOIN pg_stat_activity b ON b.pid = "
                     "(pg_blocking_pids(a.pid))[1] WHERE a.state = 'active' "
                     "AND a.pid <> pg_backend_pid() AND a.datname = "
                     "current_database()")) {
              ++waits[absl::StrCat(r[0].c_str(), " | ", r[1].c_str())];
            }
            return absl::OkStatus();
          });
          absl::SleepFor(absl::Milliseconds(20));
        }
      })};
  std::vector<std::thread> submitters;
  for (size_t ci = 0; ci < Classes().size(); ++ci) {
    submitters.emplace_back([&, ci] {
      const JobClass& c = Classes()[ci];
      auto jobs = h.jobs();
      const int n = std::max(1, static_cast<int>(c.per_queue * scale));
      for (int k = 0; k < n; ++k) {
        const absl::Time slot = start + c.every * k;
        absl::SleepFor(slot - absl::Now());
        for (size_t qi = 0; qi < queue_ids.size(); ++qi) {
          const std::string& q = queue_ids[qi];
          v1::SubmitJobRequest req;
          req.set_parent("tenants/kueue");
          req.set_client_request_id(absl::StrCat(c.name, "-", q, "-", k));
          v1::JobSpec* spec = req.mutable_job()->mutable_spec();
          spec->set_project("default");
          spec->set_queue(q);
          spec->set_priority_class(c.name);
          spec->set_workers(1);
          spec->mutable_resources()->set_cpu_millis(c.cpu_millis);
          spec->mutable_resources()->set_memory_bytes(int64_t{1} << 30);
          spec->add_command("sleep");
          (*spec->mutable_env())["SIM_DURATION"] =
              absl::FormatDuration(c.duration);
          v1::SubmitJobResponse resp;
          grpc::Status s = jobs->Submit(Ctx(token).get(), req, &resp);
          if (!s.ok()) {
            if (failures++ < 5)
              std::cerr << "submit: " << s.error_message() << "\n";
            continue;
          }
          const std::string& name = resp.job().name();
          absl::MutexLock l(&mu);
          const int64_t id = std::stoll(name.substr(name.rfind('/') + 1));
          class_of[id] = static_cast<int>(ci);
          queue_of[id] = static_cast<int>(qi);
        }
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  const absl::Time submitted = absl::Now();

  // Wait until every job has ended.
  absl::StatusOr<std::unique_ptr<trainyard::storage::postgres::Database>> db =
      trainyard::storage::postgres::Database::Open(
          {.url = h.database_url(), .pool_size = 2});
  if (!db.ok()) {
    std::cerr << "db: " << db.status() << "\n";
    return 1;
  }
  int64_t open = 1, succeeded = 0;
  absl::Time done = absl::Now();
  while (absl::Now() - start < absl::GetFlag(FLAGS_timeout)) {
    (void)(*db)->Read([&](pqxx::read_transaction& txn) {
      pqxx::row r = txn.exec1(
          "SELECT count(*) FILTER (WHERE state NOT IN (5, 6, 7)), "
          "count(*) FILTER (WHERE state = 5) FROM jobs");
      open = r[0].as<int64_t>();
      succeeded = r[1].as<int64_t>();
      return absl::OkStatus();
    });
    done = absl::Now();
    if (open == 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  sampling = false;
  sampler.thread.join();
  (*dispatcher)->Shutdown();
  (*scheduler)->Shutdown();
  const absl::Duration wall = done - start;
  // With --accounting: the passes the meter ran during the run, and what one
  // last pass leaves in the ledger (every attempt metered to its end).
  int64_t meter_passes = 0;
  int64_t metered_micros = 0;
  if (meter != nullptr) {
    meter->Shutdown();
    meter_passes = meter->passes();
    absl::StatusOr<trainyard::accounting::MeterService::PassResult> last =
        meter->RunPass(absl::Now());
    if (!last.ok() || last->failed > 0) {
      std::cerr << "meter pass: "
                << (last.ok() ? absl::StrCat(last->failed, " attempts failed")
                              : last.status().ToString())
                << "\n";
      return 1;
    }
    absl::Status read = (*db)->Read([&](pqxx::read_transaction& txn) {
      metered_micros = txn.exec1(
                              "SELECT coalesce(sum(cost_micros), 0)::bigint "
                              "FROM usage_lines")[0]
                           .as<int64_t>();
      return absl::OkStatus();
    });
    if (!read.ok()) {
      std::cerr << "ledger: " << read << "\n";
      return 1;
    }
    if (metered_micros <= 0) {
      std::cerr << "accounting: nothing was metered\n";
      return 1;
    }
    std::cerr << "accounting: " << meter_passes << " meter passes, "
              << metered_micros << " micros metered (the work at 0.04 USD "
              << "per CPU-hour: " << total_work_cpu_ms * 40000 / 3600000
              << " micros)\n";
  }

  // Time to admission per class, from the outbox.
  trainyard::storage::postgres::JobStore store(db->get());
  std::map<int64_t, absl::Time> submit_time, admit_time;
  uint64_t after = 0;
  while (true) {
    absl::StatusOr<std::vector<v1::JobEvent>> events =
        store.ReadEvents(after, {}, 10000);
    if (!events.ok() || events->empty()) break;
    for (const v1::JobEvent& e : *events) {
      after = e.sequence();
      const int64_t id = std::stoll(e.job().substr(e.job().rfind('/') + 1));
      const absl::Time t = absl::FromUnixMicros(
          google::protobuf::util::TimeUtil::TimestampToMicroseconds(e.time()));
      if (e.type() == v1::JOB_EVENT_TYPE_SUBMITTED) submit_time.emplace(id, t);
      if (e.type() == v1::JOB_EVENT_TYPE_STATE_CHANGED &&
          e.to_state() == v1::JOB_STATE_ADMITTED) {
        admit_time.emplace(id, t);
      }
    }
  }
  std::vector<double> sum(Classes().size(), 0);
  std::vector<int> count(Classes().size(), 0);
  for (const auto& [id, ci] : class_of) {
    auto s = submit_time.find(id);
    auto a = admit_time.find(id);
    if (s == submit_time.end() || a == admit_time.end()) continue;
    sum[ci] += absl::ToDoubleSeconds(a->second - s->second);
    ++count[ci];
  }
  // Where the CPUs went over time: per 5 s of the run, the CPUs running
  // work of each class (the sim's start to end of every attempt) and the CPUs
  // held by admitted attempts that had not started yet or had ended in the
  // sim but not yet in PostgreSQL (admission to start: the scheduler's and the
  // dispatcher's latency), as averages over the bucket.
  constexpr int64_t kBucketMicros = 5'000'000;
  const int64_t start_us = absl::ToUnixMicros(start);
  const size_t buckets =
      static_cast<size_t>(absl::ToInt64Microseconds(wall) / kBucketMicros) + 1;
  std::vector<std::vector<double>> running_cpu_us(
      Classes().size(), std::vector<double>(buckets, 0));
  std::vector<double> waiting_cpu_us(buckets, 0);
  auto add = [&](std::vector<double>& into, int64_t from, int64_t to,
                 double cpus) {
    from = std::max(from - start_us, int64_t{0});
    to = std::max(to - start_us, from);
    for (int64_t t = from; t < to;) {
      const int64_t b = t / kBucketMicros;
      if (static_cast<size_t>(b) >= buckets) break;
      const int64_t end = std::min(to, (b + 1) * kBucketMicros);
      into[b] += cpus * static_cast<double>(end - t);
      t = end;
    }
  };
  // Quota each queue held (admission to end of each attempt, as Kueue
  // counts a workload's reserved quota), in CPU-microseconds.
  std::vector<double> queue_cpu_us(queue_ids.size(), 0);
  int64_t attempts = 0;
  (void)(*db)->Read([&](pqxx::read_transaction& txn) {
    for (const pqxx::row& r : txn.exec("SELECT job_id, body FROM attempts")) {
      v1::Attempt a;
      if (!a.ParseFromString(trainyard::storage::postgres::BytesOf(r[1])))
        continue;
      auto ci = class_of.find(r[0].as<int64_t>());
      if (ci == class_of.end() || !a.has_admit_time()) continue;
      ++attempts;
      using google::protobuf::util::TimeUtil;
      const double cpus =
          static_cast<double>(Classes()[ci->second].cpu_millis) / 1000.0;
      const int64_t admit = TimeUtil::TimestampToMicroseconds(a.admit_time());
      const int64_t end = a.has_end_time()
                              ? TimeUtil::TimestampToMicroseconds(a.end_time())
                              : admit;
      if (auto qi = queue_of.find(r[0].as<int64_t>()); qi != queue_of.end())
        queue_cpu_us[qi->second] += cpus * static_cast<double>(end - admit);
      if (!a.has_start_time()) {
        add(waiting_cpu_us, admit, end, cpus);
        continue;
      }
      const int64_t begin = TimeUtil::TimestampToMicroseconds(a.start_time());
      add(waiting_cpu_us, admit, begin, cpus);
      add(running_cpu_us[ci->second], begin, end, cpus);
    }
    return absl::OkStatus();
  });
  const double utilisation =
      static_cast<double>(total_work_cpu_ms) / 1000.0 /
      (absl::ToDoubleSeconds(wall) * kClusterCpuMillis / 1000.0);

  std::string json = absl::StrCat(
      "{\n  \"scale\": ", scale, ",\n  \"nodes\": ", node_count,
      ",\n  \"jobs\": ", total_jobs,
      ",\n  \"submit_failures\": ", failures.load(),
      ",\n  \"succeeded\": ", succeeded, ",\n  \"unfinished\": ", open,
      ",\n  \"submit_seconds\": ", absl::ToDoubleSeconds(submitted - start),
      ",\n  \"wall_seconds\": ", absl::ToDoubleSeconds(wall),
      ",\n  \"accounting\": ", meter != nullptr ? "true" : "false",
      ",\n  \"meter_passes\": ", meter_passes,
      ",\n  \"metered_cost_micros\": ", metered_micros,
      ",\n  \"cpu_seconds_of_work\": ", total_work_cpu_ms / 1000,
      ",\n  \"cpu_utilisation\": ", utilisation,
      ",\n  \"avg_time_to_admission_seconds\": {");
  for (size_t ci = 0; ci < Classes().size(); ++ci) {
    absl::StrAppend(&json, ci ? ", " : "", "\"", Classes()[ci].name,
                    "\": ", count[ci] ? sum[ci] / count[ci] : -1);
  }
  absl::StrAppend(&json, "},\n  \"admitted\": {");
  for (size_t ci = 0; ci < Classes().size(); ++ci) {
    absl::StrAppend(&json, ci ? ", " : "", "\"", Classes()[ci].name,
                    "\": ", count[ci]);
  }
  // Kueue's runner reports each ClusterQueue's usage as a share of its
  // nominal quota (its range spec asks a minimum of it).
  absl::StrAppend(&json, "},\n  \"queue_usage_percent_of_nominal\": {");
  double min_usage = 0;
  for (size_t qi = 0; qi < queue_ids.size(); ++qi) {
    const double percent = queue_cpu_us[qi] / absl::ToDoubleMicroseconds(wall) /
                           (kNominalCpuMillis / 1000.0) * 100.0;
    if (qi == 0 || percent < min_usage) min_usage = percent;
    absl::StrAppend(&json, qi ? ", " : "", "\"", queue_ids[qi],
                    "\": ", static_cast<int64_t>(percent * 10 + 0.5) / 10.0);
  }
  std::cerr << "queue usage: lowest " << min_usage
            << " % of nominal quota over the run\n";
  absl::StrAppend(&json, "},\n  \"queue_usage_min_percent_of_nominal\": ",
                  static_cast<int64_t>(min_usage * 10 + 0.5) / 10.0);
  absl::StrAppend(&json, ",\n  \"attempts\": ", attempts,
                  ",\n  \"usage_every_5s\": [");
  std::cerr << "usage (CPUs, mean per 5 s): t small medium large "
               "admitted-not-running\n";
  for (size_t b = 0; b < buckets; ++b) {
    const double span = static_cast<double>(kBucketMicros);
    absl::StrAppend(&json, b ? "," : "", "\n    {\"t\": ", b * 5);
    std::string line = absl::StrCat("usage: ", b * 5);
    for (size_t ci = 0; ci < Classes().size(); ++ci) {
      const double cpus = running_cpu_us[ci][b] / span;
      absl::StrAppend(&json, ", \"", Classes()[ci].name,
                      "\": ", static_cast<int64_t>(cpus + 0.5));
      absl::StrAppend(&line, " ", static_cast<int64_t>(cpus + 0.5));
    }
    const double waiting = waiting_cpu_us[b] / span;
    absl::StrAppend(&json, ", \"admitted_not_running\": ",
                    static_cast<int64_t>(waiting + 0.5), "}");
    std::cerr << line << " " << static_cast<int64_t>(waiting + 0.5) << "\n";
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  std::cout << json;
  // Where the time went: the scheduler's cycle histogram.
  for (const auto& line :
       absl::StrSplit(trainyard::runtime::DefaultMetrics().Render(), '\n')) {
    if (absl::StartsWith(line, "trainyard_scheduler_cycle_seconds_sum") ||
        absl::StartsWith(line, "trainyard_scheduler_cycle_seconds_count") ||
        absl::StartsWith(line, "trainyard_scheduler_decisions_total")) {
      std::cerr << line << "\n";
    }
  }
  // Where PostgreSQL's work went: transactions and row changes per table.
  (void)(*db)->Read([&](pqxx::read_transaction& txn) {
    pqxx::row c = txn.exec1(
        "SELECT xact_commit, xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()");
    std::cerr << "postgres: " << c[0].as<int64_t>() << " commits, "
              << c[1].as<int64_t>() << " rollbacks\n";
    for (const pqxx::row& r : txn.exec(
             "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM "
             "pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 "
             "ORDER BY n_tup_ins + n_tup_upd + n_tup_del DESC")) {
      std::cerr << "postgres: table " << r[0].c_str() << " inserted "
                << r[1].as<int64_t>() << " updated " << r[2].as<int64_t>()
                << " deleted " << r[3].as<int64_t>() << "\n";
    }
    return absl::OkStatus();
  });
  if (absl::GetFlag(FLAGS_pg_statements)) {
    std::vector<std::pair<int64_t, std::string>> top;
    for (const auto& [what, n] : waits) top.emplace_back(n, what);
    std::sort(top.rbegin(), top.rend());
    for (size_t i = 0; i < top.size() && i < 25; ++i) {
      std::cerr << "postgres: sampled " << top[i].first << " x "
                << top[i].second << "\n";
    }
    absl::Status s = (*db)->Transact([&](pqxx::work& txn) {
      txn.exec0("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      for (const pqxx::row& r :
           txn.exec("SELECT calls, round(total_exec_time)::bigint, "
                    "left(regexp_replace(query, '\\s+', ' ', 'g'), 110) "
                    "FROM pg_stat_statements ORDER BY total_exec_time DESC "
                    "LIMIT 20")) {
        std::cerr << "postgres: statement calls " << r[0].c_str() << " ms "
                  << r[1].c_str() << ": " << r[2].c_str() << "\n";
      }
      return absl::OkStatus();
    });
    if (!s.ok()) std::cerr << "pg_stat_statements: " << s << "\n";
  }
  const std::string path = absl::GetFlag(FLAGS_output);
  if (!path.empty()) {
    std::ofstream(path) << json;
  }
  return open == 0 && failures.load() == 0 ? 0 : 1;
}
