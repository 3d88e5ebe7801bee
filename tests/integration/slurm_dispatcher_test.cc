// The real api, scheduler and dispatcher over PostgreSQL driving a real Slurm
// cluster through the Slurm adapter (docs/slurm.md): a checkpointing gang
// preempted by Trainyard with a signal checkpoints in its grace period and
// its next attempt resumes from that checkpoint with no step lost; a
// dispatcher that dies between "submitted" and "recorded" leaves one Slurm
// job, found again by its successor.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/slurm/slurm_adapter.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"
#include "services/dispatcher/dispatcher.h"
#include "services/scheduler/scheduler_service.h"
#include "tests/fixtures/local_slurm.h"
#include "tests/fixtures/subprocess.h"
#include "tests/integration/api_test_harness.h"
#include "tests/integration/dispatch_loop.h"
#include "tests/support/slurm/slurm_suite.h"
#include "tests/support/slurm/train_script.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
using dispatcher::Dispatcher;
using dispatcher::slurm::SlurmAdapter;

// Parses a training script's output, one "<step> <attempt>" line per step
// done, into the attempts that did each step.
void AttemptsOfStep(const std::string& path,
                    std::map<int, std::set<int>>& attempts_of_step) {
  for (absl::string_view line : absl::StrSplit(internal::ReadFileOrEmpty(path),
                                               '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    int step = 0, attempt = 0;
    ASSERT_EQ(f.size(), 2u) << line;
    ASSERT_TRUE(absl::SimpleAtoi(f[0], &step) &&
                absl::SimpleAtoi(f[1], &attempt));
    attempts_of_step[step].insert(attempt);
  }
}

class SlurmDispatcherTest : public SlurmSuite {
 protected:
  static void SetUpTestSuite() {
    if (!StartSlurm()) return;
  }
  static void TearDownTestSuite() { StopSlurm(); }

  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    absl::StatusOr<std::unique_ptr<ApiHarness>> h = ApiHarness::Start();
    ASSERT_TRUE(h.ok()) << h.status();
    harness_ = std::move(*h);
    ASSERT_TRUE(harness_->SeedTenant("acme").ok());
    token_ = harness_->Token("users/alice", v1::ROLE_TENANT_ADMIN, "acme");
    ASSERT_NO_FATAL_FAILURE(DefineSlurmCluster());

    static int tests = 0;
    prefix_ = absl::StrCat("t", ++tests, "-");
    adapter_ = NewAdapter(prefix_);
    absl::StatusOr<std::unique_ptr<scheduler::SchedulerService>> s =
        TestScheduler(harness_->database_url());
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
    dispatcher_ = NewDispatcher(adapter_.get());
    // The first pass reports the Slurm nodes for the scheduler to place on.
    absl::StatusOr<dispatcher::PassReport> p = dispatcher_->RunPass();
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->nodes_reported, 4);
  }

  void TearDown() override {
    dispatcher_.reset();
    // Leave the shared cluster empty for the next test.
    if (slurm_ != nullptr) {
      (void)slurm_->Command({"scancel", "--quiet", "--user=root"});
    }
  }

  static std::unique_ptr<SlurmAdapter> NewAdapter(const std::string& prefix) {
    absl::StatusOr<dispatcher::slurm::SlurmSettings> settings =
        dispatcher::slurm::LoadSlurmSettings(slurm_->adapter_config());
    EXPECT_TRUE(settings.ok()) << settings.status();
    settings->working_dir = slurm_->work_dir();
    // Every test has a database of its own (job ids restart at 1) but they
    // share the cluster: a name prefix per test keeps their jobs apart.
    settings->job_name_prefix = prefix;
    absl::StatusOr<std::unique_ptr<SlurmAdapter>> a =
        SlurmAdapter::Create(*settings);
    EXPECT_TRUE(a.ok()) << a.status();
    return std::move(*a);
  }

  std::unique_ptr<Dispatcher> NewDispatcher(SlurmAdapter* adapter) {
    absl::StatusOr<std::unique_ptr<Dispatcher>> d =
        TestDispatcher(harness_->database_url(), "slurm", adapter);
    EXPECT_TRUE(d.ok()) << d.status();
    return std::move(*d);
  }

  // Cluster "slurm" with pool "ondemand" of flavor "gpu" (the harness's
  // on-demand H100 flavor) and pool "spot" of flavor "spot"; the harness's
  // sim cluster is reported down so that work goes to Slurm.
  void DefineSlurmCluster() {
    absl::Status spot =
        harness_->CreateFlavor("spot", v1::FLAVOR_KIND_SPOT, 700000);
    ASSERT_TRUE(spot.ok()) << spot;
    absl::Status slurm =
        harness_->SeedCluster("slurm", v1::BACKEND_KIND_SLURM,
                              {{"ondemand", "gpu"}, {"spot", "spot"}});
    ASSERT_TRUE(slurm.ok()) << slurm;
  }

  v1::SubmitJobRequest TrainJob(const std::string& request_id, int workers,
                                const std::string& dir, int total, int every) {
    v1::SubmitJobRequest req = MinimalSubmit("acme", request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_workers(workers);
    spec->mutable_resources()->set_gpus(4);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{200} << 20);
    spec->clear_command();
    spec->add_command("/bin/bash");
    spec->add_command("-c");
    spec->add_command(kTrainScript);
    (*spec->mutable_env())["TOTAL"] = absl::StrCat(total);
    (*spec->mutable_env())["EVERY"] = absl::StrCat(every);
    spec->mutable_checkpoint()->set_directory(dir);
    spec->mutable_checkpoint()->set_resumable(true);
    spec->mutable_checkpoint()->mutable_interval()->set_seconds(every);
    spec->mutable_checkpoint()->mutable_grace_period()->set_seconds(20);
    spec->mutable_time_limit()->set_seconds(600);
    return req;
  }

  v1::Job Get(int64_t id) { return harness_->GetJob(token_, "acme", id); }

  // Scheduler cycles and dispatcher passes until `done` or `timeout`.
  bool RunUntil(const std::function<bool()>& done, absl::Duration timeout) {
    return ::trainyard::testing::RunUntil(*scheduler_, *dispatcher_, done,
                                          timeout, absl::Milliseconds(400));
  }

  std::unique_ptr<ApiHarness> harness_;
  std::string token_;
  std::string prefix_;
  std::unique_ptr<SlurmAdapter> adapter_;
  std::unique_ptr<scheduler::SchedulerService> scheduler_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

TEST_F(SlurmDispatcherTest,
       PreemptedGangCheckpointsInItsGraceAndResumesWithNoStepLost) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());

  // The victim: a 2-node gang taking all on-demand GPUs (2 × 4), 24 steps,
  // a checkpoint every 5.
  const std::string dir = slurm_->work_dir() + "/train";
  std::filesystem::create_directories(dir);
  constexpr int kTotal = 24;
  v1::SubmitJobRequest low = TrainJob("low", 2, dir, kTotal, 5);
  low.mutable_job()->mutable_spec()->set_priority_class("low");
  const int64_t victim = harness_->SubmitJob(token_, low);
  ASSERT_GT(victim, 0);
  // Running, past its first checkpoint (step 5), and a few steps beyond.
  ASSERT_TRUE(RunUntil(
      [&] {
        const v1::Job j = Get(victim);
        return j.state() == v1::JOB_STATE_RUNNING && !j.resume_from().empty() &&
               internal::ReadFileOrEmpty(dir + "/out").find("\n7 1\n") !=
                   std::string::npos;
      },
      absl::Seconds(90)))
      << Get(victim).DebugString() << internal::ReadFileOrEmpty(dir + "/log");
  ASSERT_EQ(Get(victim).attempts(0).placements_size(), 2);

  // A high-priority job needs one node: the scheduler preempts the gang; the
  // dispatcher signals it (USR1), it checkpoints and exits in its grace.
  v1::SubmitJobRequest high = MinimalSubmit("acme", "high");
  high.mutable_job()->mutable_spec()->set_priority_class("high");
  high.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(4);
  high.mutable_job()->mutable_spec()->mutable_resources()->set_cpu_millis(1000);
  high.mutable_job()->mutable_spec()->mutable_resources()->set_memory_bytes(
      int64_t{200} << 20);
  high.mutable_job()->mutable_spec()->clear_command();
  high.mutable_job()->mutable_spec()->add_command("sleep");
  high.mutable_job()->mutable_spec()->add_command("2");
  const int64_t preemptor = harness_->SubmitJob(token_, high);
  ASSERT_TRUE(RunUntil(
      [&] {
        return Get(victim).state() == v1::JOB_STATE_QUEUED ||
               Get(victim).attempts_size() > 1;
      },
      absl::Seconds(90)))
      << Get(victim).DebugString();
  v1::Job v = Get(victim);
  ASSERT_GE(v.attempts_size(), 1);
  EXPECT_EQ(v.attempts(0).failure_class(), v1::FAILURE_CLASS_PREEMPTION);
  // The checkpoint it wrote when signalled is the resume point.
  const std::string resume = v.resume_from();
  ASSERT_FALSE(resume.empty());
  int64_t resumed_step = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(resume.substr(resume.rfind('-') + 1), &resumed_step))
      << resume;
  EXPECT_GE(resumed_step, 7) << "the checkpoint taken in the grace period";
  EXPECT_NE(resumed_step % 5, 0) << internal::ReadFileOrEmpty(dir + "/log");

  // The preemptor runs and succeeds; the victim's next attempt resumes from
  // the checkpoint and finishes.
  ASSERT_TRUE(RunUntil(
      [&] {
        return Get(victim).state() == v1::JOB_STATE_SUCCEEDED &&
               Get(preemptor).state() == v1::JOB_STATE_SUCCEEDED;
      },
      absl::Seconds(150)))
      << Get(victim).DebugString() << Get(preemptor).DebugString()
      << internal::ReadFileOrEmpty(dir + "/log");
  v = Get(victim);
  ASSERT_EQ(v.attempts_size(), 2);
  EXPECT_EQ(v.attempts(1).resumed_from(), resume);
  EXPECT_EQ(v.attempts(1).exit_code(), 0);

  // Every step exactly once: attempt 1 did 1..K (K = its last checkpoint),
  // attempt 2 did K+1..TOTAL — nothing lost, nothing redone.
  std::map<int, std::set<int>> attempts_of_step;
  ASSERT_NO_FATAL_FAILURE(AttemptsOfStep(dir + "/out", attempts_of_step));
  ASSERT_EQ(attempts_of_step.size(), static_cast<size_t>(kTotal))
      << internal::ReadFileOrEmpty(dir + "/out");
  for (int step = 1; step <= kTotal; ++step) {
    ASSERT_TRUE(attempts_of_step.contains(step)) << "step " << step << " lost";
    EXPECT_EQ(attempts_of_step[step],
              std::set<int>{step <= resumed_step ? 1 : 2})
        << "step " << step;
  }
  EXPECT_EQ(v.attempts(0).lost_gpu_seconds() >= 0, true);

  // Each attempt's output (Slurm's output file, copied by the dispatcher)
  // holds what the script said on stdout: in order, the lines of its log.
  std::string said;
  for (int attempt : {1, 2}) {
    v1::GetJobLogsRequest req;
    req.set_name(v.name());
    req.set_attempt(attempt);
    v1::JobLogs logs;
    grpc::Status s = harness_->jobs()->GetLogs(
        ApiHarness::Context(token_).get(), req, &logs);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(logs.backend_job_name(),
              v.attempts(attempt - 1).backend_job_name());
    EXPECT_TRUE(logs.complete()) << logs.DebugString();
    EXPECT_EQ(logs.unavailable_reason(), "") << logs.DebugString();
    EXPECT_EQ(logs.start_offset(), 0);
    EXPECT_EQ(logs.end_offset(), static_cast<int64_t>(logs.text().size()));
    for (absl::string_view line : absl::StrSplit(logs.text(), '\n')) {
      if (absl::StartsWith(line, "attempt ") ||
          absl::StartsWith(line, "checkpoint ") || line == "finished") {
        absl::StrAppend(&said, line, "\n");
      }
    }
  }
  EXPECT_EQ(said, internal::ReadFileOrEmpty(dir + "/log"));
}

// A dispatcher that takes over while a victim is inside its grace period
// (the Slurm adapter keeps stop requests in memory) continues the grace
// period from the preemption instead of starting a new one.
TEST_F(SlurmDispatcherTest, ATakeoverInsideTheGracePeriodKeepsItsDeadline) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());
  auto job = [](const std::string& id, const std::string& priority, int gpus,
                const std::string& script) {
    v1::SubmitJobRequest req = MinimalSubmit("acme", id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_priority_class(priority);
    spec->set_workers(2);
    spec->mutable_resources()->set_gpus(gpus);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{200} << 20);
    spec->clear_command();
    spec->add_command("/bin/bash");
    spec->add_command("-c");
    spec->add_command(script);
    spec->mutable_checkpoint()->mutable_grace_period()->set_seconds(20);
    return req;
  };
  // The victim ignores the checkpoint signal: only the deadline stops it.
  // Each of its two tasks marks that its trap is set, so that no signal can
  // reach a task before (Slurm says RUNNING when the tasks start, and a task
  // signalled before its trap dies of the signal: a user error, not a stop).
  const std::string marks = slurm_->work_dir() + "/stubborn";
  std::filesystem::remove_all(marks);
  std::filesystem::create_directories(marks);
  const int64_t victim = harness_->SubmitJob(
      token_, job("stubborn", "low", 4,
                  absl::StrCat("trap '' USR1 TERM; touch ", marks,
                               "/trapped-$SLURM_PROCID; sleep 300")));
  ASSERT_TRUE(RunUntil(
      [&] {
        return Get(victim).state() == v1::JOB_STATE_RUNNING &&
               std::filesystem::exists(marks + "/trapped-0") &&
               std::filesystem::exists(marks + "/trapped-1");
      },
      absl::Seconds(60)))
      << Get(victim).DebugString();
  const int64_t preemptor =
      harness_->SubmitJob(token_, job("urgent", "high", 4, "sleep 1"));
  ASSERT_TRUE(
      RunUntil([&] { return Get(victim).state() == v1::JOB_STATE_PREEMPTING; },
               absl::Seconds(60)))
      << Get(victim).DebugString();
  const absl::Time preempted = absl::Now();
  // Signalled by this dispatcher; 12 s into the 20 s grace it is replaced.
  ASSERT_TRUE(dispatcher_->RunPass().ok());
  absl::SleepFor(absl::Seconds(12) - (absl::Now() - preempted));
  dispatcher_.reset();
  adapter_ = NewAdapter(prefix_);
  dispatcher_ = NewDispatcher(adapter_.get());
  ASSERT_TRUE(
      RunUntil([&] { return Get(victim).state() == v1::JOB_STATE_QUEUED; },
               absl::Seconds(60)))
      << Get(victim).DebugString();
  const absl::Duration stopped_after = absl::Now() - preempted;
  // The deadline is 20 s after the preemption; the cancel then takes the
  // test cluster's KillWait (5 s: the job ignores TERM too) and a poll, about
  // 28 s in all. A grace period restarted by the new dispatcher would end at
  // 12 + 20 s, and the job about 39 s after the preemption.
  EXPECT_LT(stopped_after, absl::Seconds(34));
  EXPECT_GE(stopped_after, absl::Seconds(18));
  EXPECT_EQ(Get(victim).attempts(0).failure_class(),
            v1::FAILURE_CLASS_PREEMPTION);
  ASSERT_TRUE(RunUntil(
      [&] { return Get(preemptor).state() == v1::JOB_STATE_SUCCEEDED; },
      absl::Seconds(60)))
      << Get(preemptor).DebugString();
}

TEST_F(SlurmDispatcherTest, ADispatcherDeadBetweenSubmitAndRecordLeavesOneJob) {
  v1::SubmitJobRequest req = MinimalSubmit("acme", "once");
  req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(1);
  req.mutable_job()->mutable_spec()->mutable_resources()->set_cpu_millis(1000);
  req.mutable_job()->mutable_spec()->mutable_resources()->set_memory_bytes(
      int64_t{200} << 20);
  req.mutable_job()->mutable_spec()->clear_command();
  req.mutable_job()->mutable_spec()->add_command("sleep");
  req.mutable_job()->mutable_spec()->add_command("3");
  const int64_t id = harness_->SubmitJob(token_, req);
  ASSERT_TRUE(scheduler_->RunCycle().ok());
  absl::StatusOr<dispatcher::PassReport> p = dispatcher_->RunPass();
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->launched, 1);
  // The first dispatcher dies before it sees the job start (it recorded only
  // DISPATCHING); a new process with a new adapter takes over.
  dispatcher_.reset();
  adapter_ = NewAdapter(prefix_);
  dispatcher_ = NewDispatcher(adapter_.get());
  ASSERT_TRUE(
      RunUntil([&] { return Get(id).state() == v1::JOB_STATE_SUCCEEDED; },
               absl::Seconds(60)))
      << Get(id).DebugString();
  EXPECT_EQ(adapter_->counters().submits, 0) << "it looked before creating";
  absl::StatusOr<std::vector<int64_t>> ids =
      adapter_->JobIdsNamed(absl::StrCat("ty-", id, "-1"), /*refresh=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 1u);
  EXPECT_EQ(Get(id).attempts_size(), 1);
}

TEST_F(SlurmDispatcherTest,
       AKilledNodeIsANodeFailureAndTheJobResumesElsewhere) {
  const std::string dir = slurm_->work_dir() + "/nodefail";
  std::filesystem::create_directories(dir);
  constexpr int kTotal = 14;
  const int64_t id =
      harness_->SubmitJob(token_, TrainJob("nodefail", 1, dir, kTotal, 4));
  ASSERT_TRUE(RunUntil(
      [&] {
        const v1::Job j = Get(id);
        return j.state() == v1::JOB_STATE_RUNNING && !j.resume_from().empty();
      },
      absl::Seconds(90)))
      << Get(id).DebugString() << internal::ReadFileOrEmpty(dir + "/log");
  v1::Job job = Get(id);
  const std::string placed = job.attempts(0).placements(0).node();
  const std::string node = placed.substr(placed.rfind('/') + 1);
  // The node loses power: slurmd and the job's processes die. Slurm notices
  // (SlurmdTimeout), ends the job NODE_FAIL and marks the node DOWN.
  ASSERT_TRUE(slurm_->StopDaemon("slurmd:" + node, "KILL").ok());
  ASSERT_TRUE(RunUntil(
      [&] {
        const v1::Job j = Get(id);
        return j.attempts_size() > 1 && j.state() == v1::JOB_STATE_RUNNING;
      },
      absl::Seconds(120)))
      << Get(id).DebugString();
  job = Get(id);
  EXPECT_EQ(job.attempts(0).failure_class(), v1::FAILURE_CLASS_NODE_FAILURE);
  EXPECT_NE(job.attempts(1).placements(0).node(), placed)
      << "the scheduler no longer places work on the failed node";
  const std::string resume = job.attempts(1).resumed_from();
  ASSERT_FALSE(resume.empty());
  int64_t resumed_step = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(resume.substr(resume.rfind('-') + 1), &resumed_step));
  ASSERT_TRUE(
      RunUntil([&] { return Get(id).state() == v1::JOB_STATE_SUCCEEDED; },
               absl::Seconds(90)))
      << Get(id).DebugString() << internal::ReadFileOrEmpty(dir + "/log");
  // Nothing lost: every step done; those after the resume point by the
  // second attempt (work since the last checkpoint was redone).
  std::map<int, std::set<int>> attempts_of_step;
  ASSERT_NO_FATAL_FAILURE(AttemptsOfStep(dir + "/out", attempts_of_step));
  for (int step = 1; step <= kTotal; ++step) {
    ASSERT_TRUE(attempts_of_step.contains(step)) << "step " << step << " lost";
    if (step > resumed_step) {
      EXPECT_TRUE(attempts_of_step[step].contains(2)) << "step " << step;
    }
  }
  ASSERT_TRUE(slurm_->StartDaemon("slurmd:" + node).ok());
}

TEST_F(SlurmDispatcherTest, AnUnreachableBackendChangesNothingAndIsUnhealthy) {
  v1::SubmitJobRequest req = MinimalSubmit("acme", "steady");
  v1::JobSpec* spec = req.mutable_job()->mutable_spec();
  spec->mutable_resources()->set_gpus(1);
  spec->mutable_resources()->set_cpu_millis(1000);
  spec->mutable_resources()->set_memory_bytes(int64_t{200} << 20);
  spec->clear_command();
  spec->add_command("sleep");
  spec->add_command("20");
  const int64_t id = harness_->SubmitJob(token_, req);
  ASSERT_TRUE(RunUntil([&] { return Get(id).state() == v1::JOB_STATE_RUNNING; },
                       absl::Seconds(60)));
  auto health = [&] {
    v1::GetClusterRequest get;
    get.set_name("clusters/slurm");
    v1::Cluster cluster;
    grpc::Status s = harness_->clusters()->GetCluster(
        ApiHarness::Context(harness_->admin_token()).get(), get, &cluster);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return cluster;
  };
  EXPECT_EQ(health().health(), v1::CLUSTER_HEALTH_HEALTHY);

  ASSERT_TRUE(slurm_->StopDaemon("slurmrestd").ok());
  const int64_t version = Get(id).version();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<dispatcher::PassReport> p = dispatcher_->RunPass();
    EXPECT_TRUE(absl::IsUnavailable(p.status())) << p.status();
  }
  v1::Cluster c = health();
  EXPECT_EQ(c.health(), v1::CLUSTER_HEALTH_UNHEALTHY);
  EXPECT_FALSE(c.health_message().empty());
  EXPECT_TRUE(c.has_heartbeat_time());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(id).version(), version) << "nothing recorded while blind";

  ASSERT_TRUE(slurm_->StartDaemon("slurmrestd").ok());
  ASSERT_TRUE(dispatcher_->RunPass().ok());
  EXPECT_EQ(health().health(), v1::CLUSTER_HEALTH_HEALTHY);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
}

}  // namespace
}  // namespace trainyard::testing
