// The `trainyard` services as separate processes against a real Slurm
// cluster (tests/fixtures/local_slurm.h), over their own PostgreSQL and
// Redis (docs/slurm.md, "Tests"):
//
//   - QuickStartRunsAJobOnSlurm: docs/slurm.md's quick start on Slurm, step
//     by step — a cluster started with the quick start's flavors, `trainyard
//     migrate`, one `trainyard all --backend=slurm --slurm_config=
//     DIR/adapter.conf` process, `trainyard apply` of deploy/slurm/
//     demo.textproto and deploy/slurm/cluster.textproto, a job submitted at
//     once (before the dispatcher reported Slurm's nodes) — runs the docs'
//     2-worker job through slurmctld and slurmd to SUCCEEDED: both workers
//     really ran in one Slurm job on the placed node, each with its own GPUs.
//
//   - KilledDispatcherLeavesOneSlurmJobPerAttempt: `trainyard api`,
//     `trainyard scheduler` and `trainyard dispatcher --backend=slurm`, each
//     its own process; a stream of real Slurm jobs is submitted while the
//     dispatcher is killed -9 again and again (seeded: some kills at random
//     moments, some the moment a job is DISPATCHING, i.e. while the
//     dispatcher submits to Slurm, and some by the dispatcher itself through
//     its fault-injection point TRAINYARD_FAULT_KILL_AFTER_LAUNCHES, right
//     after Slurm accepted a job and before the dispatcher recorded it; the
//     first dispatcher always has it) and restarted. Checked: every job ends
//     exactly once (SUCCEEDED, one unbroken event chain), kills did land
//     between "submitted to Slurm" and "recorded" (a job DISPATCHING in
//     PostgreSQL whose Slurm job exists; after every fault-injected kill,
//     the attempt the dying dispatcher named in its log), and Slurm never
//     holds two jobs of one attempt name — sampled after every kill and at
//     the end, where each attempt's recorded Slurm job id is the one Slurm
//     job of its name.
//
// Environment: TRAINYARD_BIN (set by CTest), TRAINYARD_SLURM_CRASH_SEED
// (default 1), TRAINYARD_SLURM_CRASH_JOBS (default 48; 24 under ASan).
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/local_slurm.h"
#include "tests/fixtures/subprocess.h"
#include "tests/fixtures/trainyard_process.h"
#include "tests/integration/process_stack.h"
#include "tests/support/slurm/slurm_suite.h"
#include "trainyard/v1/job.grpc.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
namespace fx = ::trainyard::testing::internal;

#if defined(__SANITIZE_ADDRESS__)
constexpr int kDefaultJobs = 24;
constexpr absl::Duration kChaos = absl::Seconds(25);
#else
constexpr int kDefaultJobs = 48;
constexpr absl::Duration kChaos = absl::Seconds(30);
#endif

// One job of Slurm's, from squeue.
struct SlurmJobRow {
  int64_t id = 0;
  std::string state;
};

class SlurmProcessTest : public SlurmSuite {
 protected:
  static void SetUpTestSuite() {
    // The quick start's flavors (deploy/local/demo.textproto).
    LocalSlurm::Options options;
    options.ondemand_flavor = "on-demand-h100";
    options.spot_flavor = "spot-h100";
    if (!StartSlurm(options)) return;
    absl::StatusOr<std::unique_ptr<LocalPostgres>> pg = LocalPostgres::Start();
    if (!pg.ok()) {
      SuiteFailed(pg.status());
      return;
    }
    pg_ = pg->release();
    absl::StatusOr<std::unique_ptr<LocalRedis>> redis = LocalRedis::Start();
    if (!redis.ok()) {
      SuiteFailed(redis.status());
      return;
    }
    redis_ = redis->release();
  }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
    delete pg_;
    pg_ = nullptr;
    StopSlurm();
  }

  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_NO_FATAL_FAILURE(stack_.SetUp(pg_, redis_, "trainyard-slurmproc-"));
  }

  // Every job Slurm holds (pending, running and ended: the cluster keeps
  // ended jobs for MinJobAge) whose name starts with `prefix`, by name.
  // nullopt when squeue fails.
  std::optional<std::map<std::string, std::vector<SlurmJobRow>>> SlurmJobs(
      const std::string& prefix) {
    absl::StatusOr<std::string> out =
        slurm_->Command({"squeue", "--noheader", "--states=all",
                         "--format=%i|%j|%T", "--array-unique"});
    if (!out.ok()) return std::nullopt;
    std::map<std::string, std::vector<SlurmJobRow>> jobs;
    for (absl::string_view line :
         absl::StrSplit(*out, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      if (f.size() != 3 || !absl::StartsWith(f[1], prefix)) continue;
      SlurmJobRow row;
      if (!absl::SimpleAtoi(f[0], &row.id)) continue;
      row.state = f[2];
      jobs[f[1]].push_back(row);
    }
    return jobs;
  }

  static LocalPostgres* pg_;
  static LocalRedis* redis_;
  ProcessStack stack_;
};

LocalPostgres* SlurmProcessTest::pg_ = nullptr;
LocalRedis* SlurmProcessTest::redis_ = nullptr;

TEST_F(SlurmProcessTest, QuickStartRunsAJobOnSlurm) {
  // docs/slurm.md, "The quick start on Slurm instead of the sim": one
  // process, the adapter settings start.sh wrote (the test's own database,
  // Redis and port instead of the stack's defaults).
  TrainyardService* all = stack_.AddService(
      "all", stack_.Argv({"all", "--backend=slurm",
                          "--slurm_config=" + slurm_->adapter_config(),
                          "--grpc_listen=" + stack_.api_addr()}));
  ASSERT_TRUE(all->Start().ok());
  ASSERT_NO_FATAL_FAILURE(
      stack_.Apply(SourceDir() + "/deploy/local/demo-tenant.textproto", all));
  ASSERT_NO_FATAL_FAILURE(
      stack_.Apply(SourceDir() + "/deploy/slurm/cluster.textproto", all));
  const std::string token = stack_.Token("users/demo", "member", "demo");
  ASSERT_FALSE(token.empty());

  // The docs' job: 2 workers of 2 GPUs, 1 CPU and 100 MiB each; each worker
  // writes where it ran.
  const std::string out = slurm_->work_dir() + "/quickstart";
  std::filesystem::create_directories(out);
  std::filesystem::permissions(out, std::filesystem::perms::all);
  v1::SubmitJobRequest req;
  req.set_parent("tenants/demo");
  req.set_client_request_id("quickstart-1");
  v1::JobSpec* spec = req.mutable_job()->mutable_spec();
  spec->set_project("default");
  spec->set_queue("default");
  spec->set_workers(2);
  spec->mutable_resources()->set_gpus(2);
  spec->mutable_resources()->set_cpu_millis(1000);
  spec->mutable_resources()->set_memory_bytes(int64_t{100} << 20);
  spec->set_working_dir(out);
  spec->add_command("/bin/bash");
  spec->add_command("-c");
  spec->add_command(
      absl::StrCat("echo \"$SLURM_JOB_ID $SLURMD_NODENAME $TRAINYARD_JOB_ID "
                   "$CUDA_VISIBLE_DEVICES\" > ",
                   out, "/worker-$TRAINYARD_WORKER_INDEX; sleep 1"));
  auto jobs = stack_.Jobs();
  v1::SubmitJobResponse submitted;
  grpc::Status s =
      jobs->Submit(ProcessStack::Context(token).get(), req, &submitted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string name = submitted.job().name();
  const std::string id = name.substr(name.rfind('/') + 1);

  const v1::Job job = stack_.AwaitEnd(name, token, absl::Seconds(120));
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED)
      << job.DebugString() << fx::ReadFileTail(all->log(), 3000);

  // One attempt, on one node of the Slurm cluster, recorded with its Slurm
  // job; both workers ran in that job on that node, on different GPUs.
  ASSERT_EQ(job.attempts_size(), 1) << job.DebugString();
  const v1::Attempt& attempt = job.attempts(0);
  EXPECT_EQ(attempt.cluster(), "clusters/slurm");
  EXPECT_EQ(attempt.backend_job_name(), absl::StrCat("ty-", id, "-1"));
  ASSERT_EQ(attempt.placements_size(), 2);
  const std::string placed = attempt.placements(0).node();
  EXPECT_EQ(attempt.placements(1).node(), placed);
  ASSERT_TRUE(absl::StartsWith(placed, "clusters/slurm/nodes/")) << placed;
  const std::string node = placed.substr(placed.rfind('/') + 1);
  std::set<std::string> gpus;
  for (int worker = 0; worker < 2; ++worker) {
    const std::string line =
        internal::ReadFileOrEmpty(absl::StrCat(out, "/worker-", worker));
    std::vector<std::string> f =
        absl::StrSplit(line, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    ASSERT_EQ(f.size(), 4u) << "worker " << worker << " wrote: " << line;
    EXPECT_EQ(f[0], attempt.backend_job_id()) << "worker " << worker;
    EXPECT_EQ(f[1], node) << "worker " << worker;
    EXPECT_EQ(f[2], id) << "worker " << worker;
    gpus.insert(f[3]);
  }
  EXPECT_EQ(gpus.size(), 2u) << "each worker has its own GPUs";
  std::optional<std::map<std::string, std::vector<SlurmJobRow>>> slurm_jobs =
      SlurmJobs(absl::StrCat("ty-", id, "-"));
  ASSERT_TRUE(slurm_jobs.has_value());
  const std::vector<SlurmJobRow>& rows =
      (*slurm_jobs)[absl::StrCat("ty-", id, "-1")];
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(absl::StrCat(rows[0].id), attempt.backend_job_id());
  EXPECT_EQ(rows[0].state, "COMPLETED");
  const JobHistoryCheck histories = CheckJobHistories(stack_.db_url());
  EXPECT_TRUE(histories.problems.empty())
      << absl::StrJoin(histories.problems, "\n");
}

TEST_F(SlurmProcessTest, KilledDispatcherLeavesOneSlurmJobPerAttempt) {
  const uint64_t seed = EnvInt("TRAINYARD_SLURM_CRASH_SEED", 1);
  const int job_count =
      std::max(EnvInt("TRAINYARD_SLURM_CRASH_JOBS", kDefaultJobs), 4);
  std::mt19937_64 rng(seed);
  const absl::Time test_start = absl::Now();

  // This test's jobs are `crash-ty-<job>-<attempt>` in Slurm (the quick
  // start test shares the cluster, and job ids restart with each database);
  // their scripts and output in the cluster's work directory.
  const std::string prefix = "crash-";
  const std::string adapter_conf = stack_.dir() + "/adapter.conf";
  std::ofstream(adapter_conf)
      << internal::ReadFileOrEmpty(slurm_->adapter_config())
      << "\njob_name_prefix = " << prefix
      << "\nworking_dir = " << slurm_->work_dir() << "\n";

  TrainyardService* api = stack_.AddService(
      "api", stack_.Argv({"api", "--grpc_listen=" + stack_.api_addr()}));
  TrainyardService* scheduler = stack_.AddService(
      "scheduler", stack_.Argv({"scheduler", "--schedule_interval=200ms"}));
  TrainyardService* dispatcher = stack_.AddService(
      "dispatcher", stack_.Argv({"dispatcher", "--backend=slurm",
                                 "--slurm_config=" + adapter_conf,
                                 "--dispatch_interval=100ms"}));
  ASSERT_TRUE(api->Start().ok());
  // The quick start's tenant, queue and Slurm cluster (docs/slurm.md).
  ASSERT_NO_FATAL_FAILURE(
      stack_.Apply(SourceDir() + "/deploy/local/demo-tenant.textproto", api));
  ASSERT_NO_FATAL_FAILURE(
      stack_.Apply(SourceDir() + "/deploy/slurm/cluster.textproto", api));
  const std::string token = stack_.Token("users/demo", "member", "demo");
  ASSERT_FALSE(token.empty());
  ASSERT_TRUE(scheduler->Start().ok());
  // The dispatcher's fault-injection point (docs/dispatcher.md, "Crash
  // safety"): started with it, the dispatcher kills itself -9 right after
  // its Nth launch that Slurm accepted, before it records anything of that
  // launch, so the kill lands between "submitted" and "recorded" whatever
  // the machine's speed. The first dispatcher has it (N = 1): jobs arrive
  // at once, so it fires; so do a third of the restarts (N = 1-3).
  auto fault_env = [](int n) {
    return std::vector<std::string>{
        absl::StrCat("TRAINYARD_FAULT_KILL_AFTER_LAUNCHES=", n)};
  };
  bool armed = true;
  ASSERT_TRUE(dispatcher->Start(fault_env(1)).ok());

  // The jobs: 1 worker of 1 GPU (every sixth a 2-worker gang), 1 CPU,
  // 100 MiB, sleeping 0.5-2.5 s; on-demand or spot.
  std::vector<v1::SubmitJobRequest> requests(job_count);
  for (int i = 0; i < job_count; ++i) {
    v1::SubmitJobRequest& req = requests[i];
    req.set_parent("tenants/demo");
    req.set_client_request_id(absl::StrCat("slurm-crash-", seed, "-", i));
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_project("default");
    spec->set_queue("default");
    spec->set_workers(rng() % 6 == 0 ? 2 : 1);
    spec->mutable_resources()->set_gpus(1);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{100} << 20);
    spec->set_spot_policy(v1::SPOT_POLICY_ALLOWED);
    spec->add_command("sleep");
    spec->add_command(absl::StrCat(0.5 + (rng() % 5) * 0.5));
  }

  // Submitter: bursts of 1-6 jobs every 0.2-1.2 s, so that the dispatcher
  // keeps submitting to Slurm while it is killed.
  auto jobs = stack_.Jobs();
  std::atomic<int> submitted{0};
  std::atomic<bool> stop{false};
  std::string submit_error;
  std::thread submitter([&] {
    std::mt19937_64 r(seed * 7 + 1);
    int i = 0;
    while (i < job_count && !stop) {
      const int burst = 1 + r() % 6;
      for (int k = 0; k < burst && i < job_count && !stop; ++k, ++i) {
        for (int tries = 0;; ++tries) {
          v1::SubmitJobResponse response;
          grpc::Status s = jobs->Submit(ProcessStack::Context(token).get(),
                                        requests[i], &response);
          if (s.ok()) break;
          if (tries >= 20 ||
              (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
               s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED)) {
            submit_error = absl::StrCat("Submit ", i, ": ", s.error_code(), " ",
                                        s.error_message());
            stop = true;
            return;
          }
          absl::SleepFor(absl::Milliseconds(100));
        }
        submitted = i + 1;
      }
      absl::SleepFor(absl::Milliseconds(200 + r() % 1000));
    }
  });

  // Chaos: kill -9 the dispatcher (or let the fault point kill it), then
  // look at what it left: jobs DISPATCHING in PostgreSQL whose Slurm job
  // exists (submitted, not recorded) or does not (claimed, not submitted
  // yet), and any attempt name Slurm holds twice. Restart it 0-500 ms later.
  int kills = 0, targeted = 0, submitted_unrecorded = 0,
      claimed_unsubmitted = 0, injected = 0, fired = 0;
  std::vector<std::string> duplicates;
  auto dispatching = [&]() -> std::vector<std::string> {
    std::vector<std::string> names = stack_.Dispatching();
    for (std::string& name : names) name = prefix + name;
    return names;
  };
  auto check_duplicates =
      [&](const std::map<std::string, std::vector<SlurmJobRow>>& slurm_jobs) {
        for (const auto& [name, rows] : slurm_jobs) {
          if (rows.size() > 1) {
            std::string ids;
            for (const SlurmJobRow& r : rows) {
              absl::StrAppend(&ids, " ", r.id, "(", r.state, ")");
            }
            duplicates.push_back(absl::StrCat(name, ":", ids));
          }
        }
      };
  auto all_ended = [&] {
    if (submitted.load() != job_count) return false;
    const JobHistoryCheck now = CheckJobHistories(stack_.db_url());
    return static_cast<int>(now.jobs.size()) == job_count &&
           std::all_of(now.jobs.begin(), now.jobs.end(),
                       [](const auto& e) { return Terminal(e.second.first); });
  };
  // The dispatcher with the fault point armed: waits until it killed itself
  // (true), or up to `limit` when it launched too little meanwhile (false;
  // the caller kills it then). Anything but SIGKILL is a crash of its own.
  auto await_fault = [&](absl::Duration limit) -> bool {
    ++injected;
    for (const absl::Time until = absl::Now() + limit; absl::Now() < until;
         absl::SleepFor(absl::Milliseconds(5))) {
      std::optional<std::string> died = dispatcher->Died();
      if (!died.has_value()) continue;
      EXPECT_TRUE(absl::StrContains(*died, "killed by signal 9")) << *died;
      ++fired;
      return true;
    }
    return false;
  };
  // The attempt the fault point killed the dispatcher after (its last
  // words, in its log): its Slurm job name, or "" when the log lacks it.
  auto fault_attempt = [&]() -> std::string {
    const std::string name =
        ProcessStack::FaultInjectedAttempt(dispatcher->log());
    return name.empty() ? "" : prefix + name;
  };
  // kill -9 (a no-op when the fault point killed it), then what it left. A
  // `fault` kill came right after Slurm accepted the attempt it names in its
  // log, before the dispatcher recorded anything of it: that attempt is
  // DISPATCHING in PostgreSQL and in Slurm.
  auto kill_and_sample = [&](bool fault) {
    dispatcher->Kill();
    ++kills;
    std::vector<std::string> names = dispatching();
    std::optional<std::map<std::string, std::vector<SlurmJobRow>>> slurm_jobs =
        SlurmJobs(prefix);
    ASSERT_TRUE(slurm_jobs.has_value()) << "squeue failed";
    for (const std::string& name : names) {
      if (slurm_jobs->contains(name)) {
        ++submitted_unrecorded;
      } else {
        ++claimed_unsubmitted;
      }
    }
    check_duplicates(*slurm_jobs);
    if (fault) {
      const std::string name = fault_attempt();
      ASSERT_FALSE(name.empty()) << "kill " << kills << ": the fault point "
                                 << "fired without naming its attempt";
      EXPECT_TRUE(std::find(names.begin(), names.end(), name) != names.end())
          << "kill " << kills << ": " << name << " is not DISPATCHING";
      EXPECT_TRUE(slurm_jobs->contains(name))
          << "kill " << kills << ": " << name << " is not in Slurm";
    }
  };
  const absl::Time chaos_end = absl::Now() + kChaos;
  while (absl::Now() < chaos_end && !stop) {
    for (TrainyardService* s : {api, scheduler, dispatcher}) {
      if (s == dispatcher && armed) continue;  // await_fault looks.
      std::optional<std::string> died = s->Died();
      ASSERT_FALSE(died.has_value()) << *died;
    }
    bool fault = false;
    if (armed) {
      // The first dispatcher's launches come for sure (jobs arrive from the
      // start): as long as it takes. A restarted one may find no work left.
      fault = await_fault(kills == 0 ? absl::Seconds(60) : absl::Seconds(5));
    } else if (rng() % 2 == 0) {
      // The moment a job is DISPATCHING (the dispatcher claimed it and is
      // submitting), within 3 s.
      ++targeted;
      for (absl::Time until = absl::Now() + absl::Seconds(3);
           absl::Now() < until && dispatching().empty();) {
        absl::SleepFor(absl::Milliseconds(5));
      }
    } else {
      absl::SleepFor(absl::Milliseconds(100 + rng() % 1400));
    }
    ASSERT_NO_FATAL_FAILURE(kill_and_sample(fault));
    absl::SleepFor(absl::Milliseconds(rng() % 500));
    armed = rng() % 3 == 0;
    ASSERT_TRUE(dispatcher
                    ->Start(armed ? fault_env(1 + static_cast<int>(rng() % 3))
                                  : std::vector<std::string>{})
                    .ok());
    // Let it start (connect, take the cluster's lock, list Slurm) now and
    // then, so that it does work between kills.
    if (rng() % 3 == 0) absl::SleepFor(absl::Seconds(1));
  }
  if (armed && !stop) {
    // The chaos ended with the fault point armed: the last kill, then a
    // dispatcher without it.
    ASSERT_NO_FATAL_FAILURE(kill_and_sample(await_fault(absl::Seconds(5))));
    ASSERT_TRUE(dispatcher->Start().ok());
  }
  const absl::Duration chaos_took = absl::Now() - test_start;

  // Then every job ends, with the dispatcher left alone.
  const absl::Duration limit = absl::Seconds(120);
  bool done = false;
  for (const absl::Time deadline = absl::Now() + limit;
       absl::Now() < deadline && !stop;
       absl::SleepFor(absl::Milliseconds(500))) {
    for (TrainyardService* s : {api, scheduler, dispatcher}) {
      std::optional<std::string> died = s->Died();
      ASSERT_FALSE(died.has_value()) << *died;
    }
    if (all_ended()) {
      done = true;
      break;
    }
  }
  stop = true;
  submitter.join();
  ASSERT_TRUE(submit_error.empty()) << submit_error;
  const JobHistoryCheck histories = CheckJobHistories(stack_.db_url());
  std::map<int, int> by_state;
  for (const auto& [id, job] : histories.jobs) ++by_state[job.first];
  const std::string histogram = ProcessStack::StateHistogram(histories);
  ASSERT_TRUE(done) << "not every job ended within " << limit << ":"
                    << histogram << "\ndispatcher log:\n"
                    << fx::ReadFileTail(dispatcher->log(), 3000)
                    << "\nscheduler log:\n"
                    << fx::ReadFileTail(scheduler->log(), 2000);

  // --- Every job ended exactly once, and succeeded ---
  EXPECT_TRUE(histories.problems.empty())
      << histories.problems.size() << " problems:\n"
      << absl::StrJoin(histories.problems, "\n");
  EXPECT_EQ(static_cast<int>(histories.jobs.size()), job_count);
  EXPECT_EQ(by_state[v1::JOB_STATE_SUCCEEDED], job_count) << histogram;

  // --- Slurm: one job per attempt name, the one PostgreSQL recorded ---
  std::optional<std::map<std::string, std::vector<SlurmJobRow>>> slurm_jobs =
      SlurmJobs(prefix);
  ASSERT_TRUE(slurm_jobs.has_value()) << "squeue failed";
  check_duplicates(*slurm_jobs);
  EXPECT_TRUE(duplicates.empty())
      << "attempt names Slurm holds more than once (" << duplicates.size()
      << "):\n"
      << absl::StrJoin(duplicates, "\n");
  std::set<std::string> recorded;
  pqxx::connection conn(stack_.db_url());
  pqxx::read_transaction txn(conn);
  for (const auto& row : txn.exec("SELECT job_id, idx, body FROM attempts")) {
    v1::Attempt attempt;
    pqxx::binarystring body(row[2]);
    ASSERT_TRUE(attempt.ParseFromString(body.str()));
    const std::string name = absl::StrCat(prefix, "ty-", row[0].as<int64_t>(),
                                          "-", row[1].as<int>());
    recorded.insert(name);
    if (attempt.backend_job_id().empty()) continue;
    EXPECT_EQ(prefix + attempt.backend_job_name(), name);
    auto it = slurm_jobs->find(name);
    ASSERT_NE(it, slurm_jobs->end()) << name << " is not in Slurm";
    ASSERT_EQ(it->second.size(), 1u) << name;
    EXPECT_EQ(absl::StrCat(it->second[0].id), attempt.backend_job_id()) << name;
    EXPECT_EQ(it->second[0].state, "COMPLETED") << name;
  }
  for (const auto& [name, rows] : *slurm_jobs) {
    EXPECT_TRUE(recorded.contains(name))
        << "Slurm job " << name << " belongs to no attempt";
  }

  std::cout << "[slurm crash seed " << seed << "] " << job_count << " jobs in "
            << absl::FormatDuration(absl::Now() - test_start) << " (chaos "
            << absl::FormatDuration(chaos_took) << "):" << histogram
            << "; attempts " << histories.attempt_rows << ", Slurm jobs "
            << slurm_jobs->size() << ", transitions " << histories.transitions
            << "; dispatcher kills " << kills << " (" << targeted
            << " targeted, " << injected << " fault-injected of which " << fired
            << " fired), left DISPATCHING: " << submitted_unrecorded
            << " submitted to Slurm but unrecorded, " << claimed_unsubmitted
            << " claimed but not submitted\n";
  EXPECT_GE(kills, 8);
  // The kills did land between "submitted to Slurm" and "recorded": at least
  // the fault point's (each of which checked it above).
  EXPECT_GT(fired, 0);
  EXPECT_GT(submitted_unrecorded, 0);
}

}  // namespace
}  // namespace trainyard::testing
