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
//     first dispatcher always has it) and restarted (dispatcher_chaos.h).
//     Checked: every job ends exactly once (SUCCEEDED, one unbroken event
//     chain), kills did land between "submitted to Slurm" and "recorded" (a job
//     DISPATCHING in PostgreSQL whose Slurm job exists; after every
//     fault-injected kill, the attempt the dying dispatcher named in its log),
//     and Slurm never holds two jobs of one attempt name — sampled after every
//     kill and at the end, where each attempt's recorded Slurm job id is the
//     one Slurm job of its name.
//
// Environment: TRAINYARD_BIN (set by CTest), TRAINYARD_SLURM_CRASH_SEED
// (default 1), TRAINYARD_SLURM_CRASH_JOBS (default 48; 24 under ASan).
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
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
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/local_slurm.h"
#include "tests/fixtures/subprocess.h"
#include "tests/fixtures/trainyard_process.h"
#include "tests/integration/dispatcher_chaos.h"
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
  DispatcherChaos chaos;
  DispatcherChaosOptions options;
  options.label = "slurm";
  options.seed = EnvInt("TRAINYARD_SLURM_CRASH_SEED", 1);
  const int job_count =
      std::max(EnvInt("TRAINYARD_SLURM_CRASH_JOBS", kDefaultJobs), 4);
  std::mt19937_64 rng(options.seed);

  // This test's jobs are `crash-ty-<job>-<attempt>` in Slurm (the quick
  // start test shares the cluster, and job ids restart with each database);
  // their scripts and output in the cluster's work directory.
  const std::string prefix = "crash-";
  const std::string adapter_conf = stack_.dir() + "/adapter.conf";
  std::ofstream(adapter_conf)
      << internal::ReadFileOrEmpty(slurm_->adapter_config())
      << "\njob_name_prefix = " << prefix
      << "\nworking_dir = " << slurm_->work_dir() << "\n";

  // The quick start's tenant, queue and Slurm cluster (docs/slurm.md).
  DispatcherChaosServices services;
  ASSERT_NO_FATAL_FAILURE(SetUpDispatcherChaos(
      &stack_, SourceDir() + "/deploy/slurm/cluster.textproto",
      {"--backend=slurm", "--slurm_config=" + adapter_conf}, &services,
      &options));

  // The jobs: 1 worker of 1 GPU (every sixth a 2-worker gang), 1 CPU,
  // 100 MiB, sleeping 0.5-2.5 s; on-demand or spot. Submitted in bursts of
  // 1-6, so that the dispatcher keeps submitting to Slurm while it is
  // killed.
  AddChaosRequests(
      job_count, int64_t{100} << 20, rng,
      [&rng](v1::JobSpec* spec) {
        spec->add_command("sleep");
        spec->add_command(absl::StrCat(0.5 + (rng() % 5) * 0.5));
      },
      &options);
  options.max_burst = 6;

  // The chaos (dispatcher_chaos.h) for kChaos, then every job ends within
  // 120 s. After every kill: the jobs DISPATCHING in PostgreSQL whose Slurm
  // job exists (submitted, not recorded) or does not (claimed, not
  // submitted yet), and any attempt name Slurm holds twice.
  options.chaos = kChaos;
  options.min_kills = 8;
  options.final_limit = absl::Seconds(120);
  options.final_poll = absl::Milliseconds(500);
  options.name_prefix = prefix;
  options.on_backend = "in Slurm";
  options.launched = "submitted to Slurm";
  options.unlaunched = "submitted";
  std::vector<std::string> duplicates;
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
  options.backend_jobs = [&]() -> std::optional<std::set<std::string>> {
    std::optional<std::map<std::string, std::vector<SlurmJobRow>>> slurm_jobs =
        SlurmJobs(prefix);
    if (!slurm_jobs.has_value()) {
      ADD_FAILURE() << "squeue failed";
      return std::nullopt;
    }
    check_duplicates(*slurm_jobs);
    std::set<std::string> names;
    for (const auto& [name, rows] : *slurm_jobs) names.insert(name);
    return names;
  };
  ASSERT_NO_FATAL_FAILURE(
      RunDispatcherChaos(&stack_, services, options, rng, &chaos));

  // --- Slurm: one job per attempt name, the one PostgreSQL recorded ---
  std::optional<std::map<std::string, std::vector<SlurmJobRow>>> slurm_jobs =
      SlurmJobs(prefix);
  ASSERT_TRUE(slurm_jobs.has_value()) << "squeue failed";
  check_duplicates(*slurm_jobs);
  EXPECT_TRUE(duplicates.empty())
      << "attempt names Slurm holds more than once (" << duplicates.size()
      << "):\n"
      << absl::StrJoin(duplicates, "\n");
  std::map<std::string, v1::Attempt> recorded;
  ASSERT_NO_FATAL_FAILURE(stack_.Attempts(prefix, &recorded));
  for (const auto& [name, attempt] : recorded) {
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

  ExpectDispatcherChaosCounters(
      options, chaos, absl::StrCat("Slurm jobs ", slurm_jobs->size()));
}

}  // namespace
}  // namespace trainyard::testing
