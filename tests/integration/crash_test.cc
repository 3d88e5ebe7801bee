// Crash safety: 1,000 jobs flow through the real services —
// `trainyard api`, `trainyard scheduler` and `trainyard dispatcher`, each its
// own process, dispatching to a `trainyard sim-cluster` on the real clock with
// random spot reclaims and node failures — while a chaos loop kills -9 a
// random service at random points and restarts it, and PostgreSQL (immediate
// shutdown, then crash recovery) and Redis (restarted empty) are restarted
// mid-run. Several seeds. At the end:
//
//   - every job ended exactly once, in the state its spec decides (jobs that
//     exit non-zero FAILED after their retries, cancelled ones CANCELLED,
//     every other SUCCEEDED — platform failures are always retried);
//   - no attempt was dispatched twice (the sim cluster counts creations per
//     backend name), nothing is left running or holding a node;
//   - the outbox is complete: each job's events form an unbroken chain of
//     transitions from SUBMITTED to its final state;
//   - while it ran, sampled many times, capacity held in PostgreSQL never
//     exceeded a node (the accounting the scheduler admits against equals
//     what the attempts hold), and each job's attempt rows match its count.
//
// Environment: TRAINYARD_BIN (set by CTest), TRAINYARD_CRASH_SEEDS (default
// "1 2 3"; "1" under ASan), TRAINYARD_CRASH_JOBS (default 1000).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/substitute.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "services/dispatcher/adapters/sim/sim_remote.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/ports.h"
#include "tests/fixtures/subprocess.h"
#include "tests/fixtures/trainyard_process.h"
#include "trainyard/v1/job.grpc.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
namespace fx = ::trainyard::testing::internal;

// Three seeds; one under the sanitizers, which make every process several
// times slower.
#if defined(__SANITIZE_ADDRESS__)
constexpr char kDefaultSeeds[] = "1";
#else
constexpr char kDefaultSeeds[] = "1 2 3";
#endif

std::vector<uint64_t> Seeds() {
  const char* env = std::getenv("TRAINYARD_CRASH_SEEDS");
  std::vector<uint64_t> seeds;
  for (absl::string_view part : absl::StrSplit(
           env == nullptr ? kDefaultSeeds : env, ' ', absl::SkipEmpty())) {
    uint64_t seed = 0;
    if (absl::SimpleAtoi(part, &seed)) seeds.push_back(seed);
  }
  return seeds;
}

int JobCount() {
  const char* env = std::getenv("TRAINYARD_CRASH_JOBS");
  int n = 1000;
  if (env != nullptr && !absl::SimpleAtoi(env, &n)) n = 1000;
  return std::max(n, 10);
}

bool Terminal(int state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// 12 on-demand and 12 spot nodes of 8 GPUs. Spot nodes are reclaimed and any
// node fails at random (seeded), and come back after 3 s.
std::string SimConfig(uint64_t seed) {
  return absl::StrCat(
      R"pb(
        cluster: "crash"
        pools {
          name: "ondemand"
          flavor: "on-demand"
          flavor_kind: FLAVOR_KIND_ON_DEMAND
          gpu_hour_price_micros: 4000000
        }
        pools {
          name: "spot"
          flavor: "spot"
          flavor_kind: FLAVOR_KIND_SPOT
          gpu_hour_price_micros: 1500000
          reclaim_rate_per_hour: 60
        }
        nodes {
          prefix: "od-"
          count: 12
          pool: "ondemand"
          block: "b1"
          rack: "r1"
          capacity { gpus: 8 cpu_millis: 64000 memory_bytes: 549755813888 }
        }
        nodes {
          prefix: "sp-"
          count: 12
          pool: "spot"
          block: "b2"
          rack: "r2"
          capacity { gpus: 8 cpu_millis: 64000 memory_bytes: 549755813888 }
        }
        faults { seed:)pb",
      seed, R"pb(
      node_failure_rate_per_hour: 20
      node_repair_time { seconds: 3 }
    }
              default_job_duration { seconds: 2 }
    launch_delay { nanos: 200000000 }
  )pb");
}

// Flavors, the cluster and its pools, two tenants with two queues each in one
// cohort (quota 24 GPUs of each flavor per queue, borrowing up to 72 more),
// preemption by priority within each tenant's queue a.
std::string Bundle() {
  std::string bundle = R"pb(
    priority_classes { name: "priorityClasses/low" value: 0 preemptible: true }
    priority_classes {
      name: "priorityClasses/high"
      value: 100
      preemptible: true
    }
    flavors {
      name: "flavors/on-demand"
      kind: FLAVOR_KIND_ON_DEMAND
      gpu_hour_price { currency_code: "USD" micros: 4000000 }
    }
    flavors {
      name: "flavors/spot"
      kind: FLAVOR_KIND_SPOT
      gpu_hour_price { currency_code: "USD" micros: 1500000 }
      reclaim_rate_per_hour: 60
    }
    clusters { name: "clusters/crash" backend: BACKEND_KIND_SIM }
    pools { name: "clusters/crash/pools/ondemand" flavor: "on-demand" }
    pools { name: "clusters/crash/pools/spot" flavor: "spot" }
    cohorts { name: "cohorts/all" fair_share_weight: 1 }
    tenants { name: "tenants/t1" default_priority_class: "low" }
    projects { name: "tenants/t1/projects/default" }
    tenants { name: "tenants/t2" default_priority_class: "low" }
    projects { name: "tenants/t2/projects/default" }
  )pb";
  // Queue $1 of tenant $0, of fair-share weight $2 ($3: its preemption; $4,
  // $5: its quotas).
  constexpr char kQueue[] = R"pb(
    queues {
      name: "tenants/$0/queues/$1"
      cohort: "all"
      fair_share_weight: $2 $3 $4 $5
    }
  )pb";
  constexpr char kQuota[] = R"pb(
    quotas {
      flavor: "$0"
      resources { resource: RESOURCE_NAME_GPU nominal: 24 borrowing_limit: 72 }
    }
  )pb";
  const std::string on_demand = absl::Substitute(kQuota, "on-demand");
  const std::string spot = absl::Substitute(kQuota, "spot");
  constexpr char kPreemptLower[] =
      "preemption { within_queue: WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY }";
  absl::StrAppend(
      &bundle,
      absl::Substitute(kQueue, "t1", "a", 1, kPreemptLower, on_demand, spot),
      absl::Substitute(kQueue, "t1", "b", 1, "", on_demand, spot),
      absl::Substitute(kQueue, "t2", "a", 2, kPreemptLower, on_demand, spot),
      absl::Substitute(kQueue, "t2", "b", 1, "", on_demand, spot));
  return bundle;
}

// The services the chaos loop kills and restarts, and the one-shot
// commands, come from tests/fixtures/trainyard_process.h.
using Service = TrainyardService;

// What the test asked of one job, to check how it ended.
struct Plan {
  std::string request_id;
  std::string tenant;
  bool exits_non_zero = false;
  bool cancel = false;
  int64_t id = 0;  // once submitted
};

class CrashTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(TrainyardBinary().empty())
        << "TRAINYARD_BIN is not set (run through ctest)";
    absl::StatusOr<std::string> dir = fx::MakeTempDir("trainyard-crash-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    absl::StatusOr<std::unique_ptr<LocalPostgres>> pg = LocalPostgres::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
    absl::StatusOr<std::string> url = pg_->CreateDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    db_url_ = *url;
    absl::StatusOr<std::unique_ptr<LocalRedis>> redis = LocalRedis::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = std::move(*redis);
  }

  void TearDown() override {
    for (Service* s :
         {dispatcher_.get(), scheduler_.get(), api_.get(), sim_.get()}) {
      if (s != nullptr) s->Kill();
    }
  }

  CommandResult Run(const std::vector<std::string>& args) {
    static std::atomic<int> counter{0};
    return RunTrainyard(args, absl::StrCat(dir_, "/run-", ++counter, ".log"));
  }

  std::string Token(const std::string& principal, const std::string& role,
                    const std::string& tenant = "") {
    static std::atomic<int> counter{0};
    absl::StatusOr<std::string> token =
        CreateToken(db_url_, absl::StrCat(dir_, "/token-", ++counter, ".log"),
                    principal, role, tenant);
    EXPECT_TRUE(token.ok()) << token.status();
    return token.value_or("");
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", "Bearer " + token);
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    return ctx;
  }

  // Jobs by id: state, attempt_count. Empty on a database error (PostgreSQL
  // may be restarting).
  std::map<int64_t, std::pair<int, int>> JobStates() {
    std::map<int64_t, std::pair<int, int>> out;
    try {
      pqxx::connection conn(db_url_);
      pqxx::read_transaction txn(conn);
      for (const auto& row :
           txn.exec("SELECT id, state, attempt_count FROM jobs")) {
        out[row[0].as<int64_t>()] = {row[1].as<int>(), row[2].as<int>()};
      }
    } catch (const std::exception&) {
      out.clear();
    }
    return out;
  }

  // Capacity held according to PostgreSQL must fit every node, counted two
  // ways: what runs there (DISPATCHING, RUNNING, PREEMPTING: the attempts the
  // backend holds) and what the scheduler admits against (ADMITTED,
  // DISPATCHING, RUNNING; a preemptor is admitted onto its victims' nodes
  // while they stop, and the dispatcher launches it only once they are gone).
  // Returns the first violation; nullopt when both fit (or the database is
  // unreachable right now).
  std::optional<std::string> CapacityViolation() {
    try {
      pqxx::connection conn(db_url_);
      pqxx::read_transaction txn(conn);
      pqxx::result rows = txn.exec(
          "SELECT j.id, j.spec, a.body, j.state FROM jobs j JOIN attempts a "
          "ON a.job_id = j.id AND a.idx = j.attempt_count "
          "WHERE j.state IN (2, 3, 4, 8)");
      for (const bool physical : {true, false}) {
        std::map<std::string, int64_t> used;
        std::map<std::string, std::string> who;
        for (const auto& row : rows) {
          const int state = row[3].as<int>();
          if (physical ? state == v1::JOB_STATE_ADMITTED
                       : state == v1::JOB_STATE_PREEMPTING) {
            continue;
          }
          v1::JobSpec spec;
          v1::Attempt attempt;
          pqxx::binarystring spec_bytes(row[1]);
          pqxx::binarystring attempt_bytes(row[2]);
          if (!spec.ParseFromString(spec_bytes.str()) ||
              !attempt.ParseFromString(attempt_bytes.str())) {
            return absl::StrCat("job ", row[0].as<int64_t>(),
                                ": unreadable spec or attempt");
          }
          for (const v1::WorkerPlacement& p : attempt.placements()) {
            used[p.node()] += spec.resources().gpus();
            absl::StrAppend(&who[p.node()], " job ", row[0].as<int64_t>(), "#",
                            attempt.index(), " ", v1::JobState_Name(state), " ",
                            spec.resources().gpus(), " GPUs;");
          }
        }
        for (const auto& [node, gpus] : used) {
          if (gpus > 8) {
            return absl::StrCat(physical ? "running: " : "admitted: ", node,
                                " holds ", gpus, " GPUs of 8:", who[node]);
          }
        }
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
    return std::nullopt;
  }

  std::string dir_;
  std::string db_url_;
  std::unique_ptr<LocalPostgres> pg_;
  std::unique_ptr<LocalRedis> redis_;
  std::unique_ptr<Service> sim_, api_, scheduler_, dispatcher_;
};

TEST_P(CrashTest, JobsEndExactlyOnceThroughKillsAndRestarts) {
  const uint64_t seed = GetParam();
  const int job_count = JobCount();
  std::mt19937_64 rng(seed);
  const absl::Time test_start = absl::Now();

  ASSERT_EQ(Run({"migrate", "--postgres_url=" + db_url_}).exit_code, 0);
  const std::string admin = Token("users/admin", "platform-admin");
  ASSERT_FALSE(admin.empty());

  const std::string sim_path = dir_ + "/sim.textproto";
  const std::string bundle_path = dir_ + "/bundle.textproto";
  std::ofstream(sim_path) << SimConfig(seed);
  std::ofstream(bundle_path) << Bundle();

  absl::StatusOr<int> api_port = PickUnusedPort();
  absl::StatusOr<int> sim_port = PickUnusedPort();
  ASSERT_TRUE(api_port.ok() && sim_port.ok());
  const std::string api_addr = absl::StrCat("127.0.0.1:", *api_port);
  const std::string sim_addr = absl::StrCat("127.0.0.1:", *sim_port);
  const std::vector<std::string> common = {
      "--postgres_url=" + db_url_, "--redis_addr=" + redis_->Address(),
      "--http_listen=", "--log_level=warning"};
  auto argv = [&](std::vector<std::string> head) {
    head.insert(head.begin(), TrainyardBinary());
    head.insert(head.end(), common.begin(), common.end());
    return head;
  };
  sim_ =
      std::make_unique<Service>("sim-cluster",
                                argv({"sim-cluster", "--sim_config=" + sim_path,
                                      "--grpc_listen=" + sim_addr}),
                                dir_ + "/sim.log");
  api_ = std::make_unique<Service>(
      "api", argv({"api", "--grpc_listen=" + api_addr}), dir_ + "/api.log");
  scheduler_ = std::make_unique<Service>(
      "scheduler",
      // Dispatchers are killed and restarted within seconds: none may count
      // as gone (they report at least every 30 s).
      argv({"scheduler", "--schedule_interval=200ms",
            "--dispatcher_timeout=90s"}),
      dir_ + "/scheduler.log");
  dispatcher_ =
      std::make_unique<Service>("dispatcher",
                                argv({"dispatcher", "--sim_target=" + sim_addr,
                                      "--dispatch_interval=100ms"}),
                                dir_ + "/dispatcher.log");
  ASSERT_TRUE(sim_->Start().ok());
  ASSERT_TRUE(api_->Start().ok());

  // Wait for the api, then load the bundle.
  CommandResult applied;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30);
       absl::Now() < deadline;) {
    applied = Run({"apply", "-f", bundle_path, "--target=" + api_addr,
                   "--token=" + admin});
    if (applied.exit_code == 0) break;
    ASSERT_FALSE(api_->Died().has_value());
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const std::map<std::string, std::string> tokens = {
      {"t1", Token("users/alice", "member", "t1")},
      {"t2", Token("users/bob", "member", "t2")}};
  ASSERT_TRUE(scheduler_->Start().ok());
  ASSERT_TRUE(dispatcher_->Start().ok());

  // The jobs: 1-2 workers of 1-8 GPUs, 1-3 s of work, checkpoints every
  // second; some prefer spot; 5 % exit 3 (retried once, then FAILED); 5 % are
  // cancelled at a random moment.
  std::vector<Plan> plans(job_count);
  std::vector<v1::SubmitJobRequest> requests(job_count);
  for (int i = 0; i < job_count; ++i) {
    Plan& plan = plans[i];
    plan.tenant = (rng() % 2 == 0) ? "t1" : "t2";
    plan.request_id = absl::StrCat("crash-", seed, "-", i);
    plan.exits_non_zero = rng() % 20 == 0;
    plan.cancel = rng() % 20 == 1;
    v1::SubmitJobRequest& req = requests[i];
    req.set_parent("tenants/" + plan.tenant);
    req.set_client_request_id(plan.request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_project("default");
    spec->set_queue(rng() % 2 == 0 ? "a" : "b");
    spec->set_priority_class(rng() % 4 == 0 ? "high" : "low");
    spec->set_workers(rng() % 8 == 0 ? 2 : 1);
    const int gpus_choices[] = {1, 1, 2, 2, 4, 8};
    spec->mutable_resources()->set_gpus(gpus_choices[rng() % 6]);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{8} << 30);
    spec->add_command("train");
    spec->set_spot_policy(rng() % 3 == 0 ? v1::SPOT_POLICY_PREFERRED
                                         : v1::SPOT_POLICY_ALLOWED);
    (*spec->mutable_env())["SIM_DURATION"] =
        absl::StrCat(1000 + rng() % 2000, "ms");
    (*spec->mutable_env())["SIM_CHECKPOINT_EVERY"] = "1s";
    spec->mutable_checkpoint()->set_resumable(true);
    spec->mutable_checkpoint()->mutable_interval()->set_seconds(1);
    if (plan.exits_non_zero) {
      (*spec->mutable_env())["SIM_EXIT_CODE"] = "3";
      spec->mutable_retry()->set_max_attempts(2);
      spec->mutable_retry()->mutable_initial_backoff()->set_nanos(100000000);
    }
  }

  auto channel =
      grpc::CreateChannel(api_addr, grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  std::atomic<int> submitted{0};
  std::atomic<int> submit_retries{0};
  std::atomic<bool> stop_clients{false};
  std::mutex plans_mu;

  // Submitter: every job, retried (same client_request_id) until the api
  // answers; the api dies under it many times.
  std::thread submitter([&] {
    std::mt19937_64 r(seed * 7 + 1);
    for (int i = 0; i < job_count && !stop_clients; ++i) {
      for (;;) {
        if (stop_clients) return;
        v1::SubmitJobResponse response;
        grpc::Status s = jobs->Submit(Context(tokens.at(plans[i].tenant)).get(),
                                      requests[i], &response);
        if (s.ok()) {
          const std::string& name = response.job().name();
          std::lock_guard<std::mutex> lock(plans_mu);
          plans[i].id = std::stoll(name.substr(name.rfind('/') + 1));
          break;
        }
        if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
            s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
            s.error_code() != grpc::StatusCode::INTERNAL &&
            s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ADD_FAILURE() << "Submit " << plans[i].request_id << ": "
                        << s.error_code() << " " << s.error_message();
          stop_clients = true;
          return;
        }
        ++submit_retries;
        absl::SleepFor(absl::Milliseconds(50));
      }
      submitted = i + 1;
      // About 1,000 jobs in 10 s, in bursts.
      if (r() % 20 == 0) absl::SleepFor(absl::Milliseconds(100 + r() % 300));
    }
  });

  // Canceller: cancels the planned jobs at random moments once submitted.
  std::thread canceller([&] {
    std::mt19937_64 r(seed * 13 + 5);
    std::vector<int> pending;
    for (int i = 0; i < job_count; ++i) {
      if (plans[i].cancel) pending.push_back(i);
    }
    while (!pending.empty() && !stop_clients) {
      absl::SleepFor(absl::Milliseconds(50 + r() % 200));
      const size_t k = r() % pending.size();
      const int i = pending[k];
      int64_t id;
      {
        std::lock_guard<std::mutex> lock(plans_mu);
        id = plans[i].id;
      }
      if (id == 0) continue;
      v1::CancelJobRequest req;
      req.set_name(absl::StrCat("tenants/", plans[i].tenant, "/jobs/", id));
      req.set_reason("crash test");
      v1::Job out;
      grpc::Status s =
          jobs->Cancel(Context(tokens.at(plans[i].tenant)).get(), req, &out);
      if (s.ok() || s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        pending.erase(pending.begin() + k);
      }
    }
  });

  // Chaos: kill -9 a random service every 0.3-1.5 s and restart it after
  // 0-700 ms; restart PostgreSQL (crash) and Redis once each; sample the
  // capacity invariant in between.
  std::vector<Service*> victims = {api_.get(), scheduler_.get(),
                                   dispatcher_.get()};
  std::map<std::string, int> kills;
  int pg_restarts = 0, redis_restarts = 0, samples = 0;
  std::vector<std::string> violations;
  const absl::Duration limit = absl::Seconds(300);
  const absl::Time deadline = absl::Now() + limit;
  bool done = false;
  int rounds = 0;
  while (absl::Now() < deadline && !stop_clients) {
    for (Service* s :
         {sim_.get(), api_.get(), scheduler_.get(), dispatcher_.get()}) {
      std::optional<std::string> died = s->Died();
      ASSERT_FALSE(died.has_value()) << *died;
    }
    if (std::optional<std::string> v = CapacityViolation()) {
      violations.push_back(*v);
    }
    ++samples;
    const bool all_submitted = submitted.load() == job_count;
    if (all_submitted) {
      std::map<int64_t, std::pair<int, int>> states = JobStates();
      if (static_cast<int>(states.size()) == job_count &&
          std::all_of(states.begin(), states.end(),
                      [](const auto& e) { return Terminal(e.second.first); })) {
        done = true;
        break;
      }
    }
    ++rounds;
    // Chaos only while work is flowing; later rounds let the system finish.
    const bool chaos = absl::Now() < test_start + absl::Seconds(60);
    if (chaos && rounds == 8) {
      ASSERT_TRUE(pg_->Crash().ok());
      absl::SleepFor(absl::Milliseconds(300 + rng() % 700));
      absl::Status restarted = pg_->Restart();
      ASSERT_TRUE(restarted.ok()) << restarted;
      ++pg_restarts;
    } else if (chaos && rounds == 14) {
      absl::Status restarted = redis_->Restart();
      ASSERT_TRUE(restarted.ok()) << restarted;
      ++redis_restarts;
    } else if (chaos) {
      Service* victim = victims[rng() % victims.size()];
      victim->Kill();
      ++kills[victim->name()];
      absl::SleepFor(absl::Milliseconds(rng() % 700));
      ASSERT_TRUE(victim->Start().ok());
    }
    absl::SleepFor(absl::Milliseconds(300 + rng() % 1200));
  }
  stop_clients = true;
  submitter.join();
  canceller.join();

  std::map<int64_t, std::pair<int, int>> states = JobStates();
  std::map<int, int> by_state;
  for (const auto& [id, s] : states) ++by_state[s.first];
  std::string histogram;
  for (const auto& [state, n] : by_state) {
    absl::StrAppend(&histogram, " ", v1::JobState_Name(state), "=", n);
  }
  ASSERT_TRUE(done) << "not every job ended within " << limit << ":"
                    << histogram << "\nscheduler log:\n"
                    << fx::ReadFileTail(scheduler_->log(), 3000)
                    << "\ndispatcher log:\n"
                    << fx::ReadFileTail(dispatcher_->log(), 3000);
  EXPECT_TRUE(violations.empty())
      << violations.size()
      << " capacity violations, first: " << violations.front();

  // Let the dispatcher finish forgetting ended attempts in the sim.
  absl::SleepFor(absl::Seconds(1));

  // --- How each job ended ---
  ASSERT_EQ(static_cast<int>(states.size()), job_count);
  std::set<int64_t> ids;
  int cancelled = 0, failed = 0;
  for (const Plan& plan : plans) {
    ASSERT_NE(plan.id, 0) << plan.request_id;
    ASSERT_TRUE(ids.insert(plan.id).second)
        << "two requests got job " << plan.id;
    const int state = states.at(plan.id).first;
    if (state == v1::JOB_STATE_CANCELLED) {
      ++cancelled;
      EXPECT_TRUE(plan.cancel) << "job " << plan.id << " cancelled unasked";
    } else if (plan.exits_non_zero) {
      ++failed;
      EXPECT_EQ(state, v1::JOB_STATE_FAILED) << "job " << plan.id;
    } else {
      EXPECT_EQ(state, v1::JOB_STATE_SUCCEEDED)
          << "job " << plan.id << " ended " << v1::JobState_Name(state);
    }
  }

  // --- The outbox: one unbroken chain per job, one terminal event;
  // attempts: rows match counts, every one ended ---
  const JobHistoryCheck histories = CheckJobHistories(db_url_);
  EXPECT_TRUE(histories.problems.empty())
      << histories.problems.size() << " problems, first: "
      << absl::StrJoin(histories.problems.begin(),
                       histories.problems.begin() +
                           std::min<size_t>(histories.problems.size(), 5),
                       "\n");
  const int64_t transitions = histories.transitions;
  const int64_t attempt_rows = histories.attempt_rows;

  pqxx::connection conn(db_url_);
  pqxx::read_transaction txn(conn);
  // How the attempts ended: the faults really happened.
  std::map<std::string, int> endings;
  for (const auto& row : txn.exec("SELECT body FROM attempts")) {
    v1::Attempt attempt;
    pqxx::binarystring body(row[0]);
    ASSERT_TRUE(attempt.ParseFromString(body.str()));
    ++endings[v1::FailureClass_Name(attempt.failure_class())];
  }
  std::string ending_summary;
  for (const auto& [name, n] : endings) {
    absl::StrAppend(&ending_summary, " ", name, "=", n);
  }
  EXPECT_GT(endings["FAILURE_CLASS_SPOT_RECLAIM"] +
                endings["FAILURE_CLASS_NODE_FAILURE"],
            0)
      << ending_summary;

  // --- The cluster: no double dispatch, nothing left behind ---
  dispatcher::sim::SimClusterClient sim_client({.target = sim_addr});
  absl::StatusOr<v1::SimClusterInfo> info = sim_client.Info(absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->duplicate_launches().empty())
      << "dispatched twice: "
      << absl::StrJoin(info->duplicate_launches(), ", ");
  EXPECT_EQ(info->active_attempts(), 0);
  EXPECT_LE(info->attempts_created(), attempt_rows);
  absl::StatusOr<std::vector<dispatcher::NodeInventory>> nodes =
      sim_client.Inventory();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  for (const dispatcher::NodeInventory& n : *nodes) {
    EXPECT_EQ(n.used_gpus, 0) << n.name;
  }

  std::cout << "[crash seed " << seed << "] " << job_count << " jobs in "
            << absl::FormatDuration(absl::Now() - test_start) << ":"
            << histogram << "; attempts " << attempt_rows << " ("
            << info->attempts_created() << " launched), transitions "
            << transitions << "; kills api=" << kills["api"]
            << " scheduler=" << kills["scheduler"]
            << " dispatcher=" << kills["dispatcher"] << ", postgres restarts "
            << pg_restarts << ", redis restarts " << redis_restarts
            << ", submit retries " << submit_retries << ", launches refused "
            << info->launches_refused() << ", capacity samples " << samples
            << "; attempt endings" << ending_summary << "\n";
  EXPECT_GT(kills["api"] + kills["scheduler"] + kills["dispatcher"], 10);
  EXPECT_EQ(pg_restarts, 1);
  EXPECT_EQ(redis_restarts, 1);
  EXPECT_GT(attempt_rows, job_count - cancelled)
      << "no job was retried: the faults did not happen";
  EXPECT_GT(failed, 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, CrashTest, ::testing::ValuesIn(Seeds()),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return absl::StrCat("seed", info.param);
                         });

}  // namespace
}  // namespace trainyard::testing
