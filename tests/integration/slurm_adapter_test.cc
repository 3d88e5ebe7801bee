// The Slurm adapter against a real slurmctld + slurmd + slurmrestd
// (tests/fixtures/local_slurm.h): jobs that really run a
// script on one node and as a 2-node gang, cancel, a time-limit kill, user
// errors (non-zero exit, out of memory), a signalled stop with a grace
// period, inventory with node states, a slurmd killed under a running job,
// slurmctld and slurmrestd restarts, and look-before-create across adapter
// instances (a dispatcher that crashed between submit and record).
#include "services/dispatcher/adapters/slurm/slurm_adapter.h"

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"
#include "tests/fixtures/local_slurm.h"
#include "tests/fixtures/subprocess.h"
#include "tests/support/slurm/slurm_suite.h"

namespace trainyard::testing {
namespace {

using dispatcher::AttemptPhase;
using dispatcher::AttemptStatus;
using dispatcher::FailureKind;
using dispatcher::LaunchRequest;
using dispatcher::NodeInventory;
using dispatcher::StopReason;
using dispatcher::slurm::SlurmAdapter;
using dispatcher::slurm::SlurmSettings;
using ::testing::HasSubstr;

// Generous: the machine is small and shared.
constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kEndTimeout = absl::Seconds(90);

class SlurmAdapterTest : public SlurmSuite {
 protected:
  static void SetUpTestSuite() {
    if (!StartSlurm()) return;
    // The time-limit job runs while the other tests do (Slurm's limits are
    // whole minutes): submitted first, checked by the last test.
    std::unique_ptr<SlurmAdapter> a = NewAdapter();
    LaunchRequest r = Request(900, {"sleep", "600"}, {"gpu4"}, "spot");
    r.spec.mutable_time_limit()->set_seconds(60);
    absl::StatusOr<AttemptStatus> s = a->Launch(r);
    if (!s.ok()) SuiteFailed(s.status());
  }

  static void TearDownTestSuite() { StopSlurm(); }

  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    adapter_ = NewAdapter();
  }

  static std::unique_ptr<SlurmAdapter> NewAdapter(
      absl::Duration request_timeout = absl::Seconds(30)) {
    absl::StatusOr<SlurmSettings> settings =
        dispatcher::slurm::LoadSlurmSettings(slurm_->adapter_config());
    EXPECT_TRUE(settings.ok()) << settings.status();
    settings->working_dir = slurm_->work_dir();
    settings->request_timeout = request_timeout;
    absl::StatusOr<std::unique_ptr<SlurmAdapter>> a =
        SlurmAdapter::Create(*settings);
    EXPECT_TRUE(a.ok()) << a.status();
    return std::move(*a);
  }

  static LaunchRequest Request(int64_t job, std::vector<std::string> command,
                               std::vector<std::string> nodes,
                               std::string flavor = "gpu", int attempt = 1) {
    LaunchRequest r;
    r.job_id = job;
    r.attempt = attempt;
    r.name = dispatcher::BackendJobName(job, attempt);
    r.tenant = "acme";
    r.spec.set_workers(static_cast<int>(nodes.size()));
    r.spec.mutable_resources()->set_gpus(2);
    r.spec.mutable_resources()->set_cpu_millis(1000);
    r.spec.mutable_resources()->set_memory_bytes(int64_t{200} << 20);
    for (std::string& c : command) r.spec.add_command(std::move(c));
    r.worker_nodes = std::move(nodes);
    r.flavor = std::move(flavor);
    return r;
  }

  // Polls Status until `done` holds or `timeout` passes; the last status.
  AttemptStatus WaitFor(const std::string& name,
                        const std::function<bool(const AttemptStatus&)>& done,
                        absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    AttemptStatus last;
    while (true) {
      absl::StatusOr<AttemptStatus> s = adapter_->Status(name);
      if (s.ok()) {
        last = *s;
        if (done(last)) return last;
      }
      if (absl::Now() > deadline) {
        ADD_FAILURE() << "timed out waiting for " << name << "; last phase "
                      << dispatcher::AttemptPhaseName(last.phase) << ": "
                      << last.message << " (status "
                      << (s.ok() ? "OK" : s.status().ToString()) << ")";
        return last;
      }
      absl::SleepFor(absl::Milliseconds(300));
    }
  }
  AttemptStatus WaitForEnd(const std::string& name,
                           absl::Duration timeout = kEndTimeout) {
    return WaitFor(
        name, [](const AttemptStatus& s) { return IsTerminal(s.phase); },
        timeout);
  }
  AttemptStatus WaitForRunning(const std::string& name) {
    return WaitFor(
        name,
        [](const AttemptStatus& s) {
          return s.phase == AttemptPhase::kRunning || IsTerminal(s.phase);
        },
        kStartTimeout);
  }

  std::string Work(const std::string& file) {
    return absl::StrCat(slurm_->work_dir(), "/", file);
  }

  std::unique_ptr<SlurmAdapter> adapter_;
};

TEST_F(SlurmAdapterTest, RunsASingleNodeJobToSuccess) {
  const std::string out = Work("single.txt");
  LaunchRequest r =
      Request(1,
              {"/bin/bash", "-c",
               "echo \"$TRAINYARD_JOB_ID $TRAINYARD_ATTEMPT "
               "$TRAINYARD_WORKER_INDEX $TRAINYARD_TENANT $SLURMD_NODENAME "
               "$CUDA_VISIBLE_DEVICES $TRAINYARD_RESUME_FROM\" > " +
                   out},
              {"gpu1"});
  r.resume_from = "/ckpt/step-3";
  absl::StatusOr<AttemptStatus> launched = adapter_->Launch(r);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->name, "ty-1-1");
  EXPECT_FALSE(launched->backend_id.empty());
  AttemptStatus s = WaitForEnd("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded) << s.message;
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(s.backend_id, launched->backend_id);
  EXPECT_THAT(s.nodes, ::testing::ElementsAre("gpu1"));
  EXPECT_TRUE(s.start_time.has_value());
  EXPECT_TRUE(s.end_time.has_value());
  EXPECT_EQ(absl::StripAsciiWhitespace(internal::ReadFileOrEmpty(out)),
            "1 1 0 acme gpu1 0,1 /ckpt/step-3");
  // Listed until deleted; then gone.
  absl::StatusOr<std::vector<AttemptStatus>> list = adapter_->List();
  ASSERT_TRUE(list.ok()) << list.status();
  bool listed = false;
  for (const AttemptStatus& a : *list) listed |= a.name == "ty-1-1";
  EXPECT_TRUE(listed);
  ASSERT_TRUE(adapter_->Delete("ty-1-1").ok());
  EXPECT_TRUE(absl::IsNotFound(adapter_->Status("ty-1-1").status()));
}

// spec.image reaches the worker through the cluster's container words (here
// a stand-in for "apptainer exec docker://{image}" that only exports it), and
// a cluster without them refuses the image instead of running the command
// outside it.
TEST_F(SlurmAdapterTest, RunsTheImageThroughTheContainerWordsOrRefusesIt) {
  const std::string out = Work("image.txt");
  LaunchRequest r =
      Request(31,
              {"/bin/bash", "-c",
               "echo \"$TEST_IMAGE $TRAINYARD_WORKER_INDEX\" > " + out},
              {"gpu1"});
  r.spec.set_image("registry.example/train:1.2");
  absl::StatusOr<AttemptStatus> refused = adapter_->Launch(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("spec.image"));
  EXPECT_TRUE(absl::IsNotFound(adapter_->Status("ty-31-1").status()));

  absl::StatusOr<SlurmSettings> settings =
      dispatcher::slurm::LoadSlurmSettings(slurm_->adapter_config());
  ASSERT_TRUE(settings.ok()) << settings.status();
  settings->working_dir = slurm_->work_dir();
  settings->container_exec = {"/usr/bin/env", "TEST_IMAGE={image}"};
  absl::StatusOr<std::unique_ptr<SlurmAdapter>> with_containers =
      SlurmAdapter::Create(*settings);
  ASSERT_TRUE(with_containers.ok()) << with_containers.status();
  adapter_ = std::move(*with_containers);
  ASSERT_TRUE(adapter_->Launch(r).ok());
  AttemptStatus s = WaitForEnd("ty-31-1");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded) << s.message;
  EXPECT_EQ(absl::StripAsciiWhitespace(internal::ReadFileOrEmpty(out)),
            "registry.example/train:1.2 0");
  ASSERT_TRUE(adapter_->Delete("ty-31-1").ok());
}

TEST_F(SlurmAdapterTest, RunsATwoNodeGangOnThePlacedNodes) {
  const std::string dir = Work("gang");
  std::filesystem::create_directories(dir);
  LaunchRequest r = Request(2,
                            {"/bin/bash", "-c",
                             "echo \"$SLURMD_NODENAME $TRAINYARD_WORKERS\" > " +
                                 dir + "/worker-$TRAINYARD_WORKER_INDEX"},
                            {"gpu2", "gpu1"});
  ASSERT_TRUE(adapter_->Launch(r).ok());
  AttemptStatus s = WaitForEnd("ty-2-1");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded) << s.message;
  EXPECT_THAT(s.nodes, ::testing::UnorderedElementsAre("gpu1", "gpu2"));
  const std::string w0 = internal::ReadFileOrEmpty(dir + "/worker-0");
  const std::string w1 = internal::ReadFileOrEmpty(dir + "/worker-1");
  EXPECT_THAT(w0, HasSubstr(" 2"));
  EXPECT_THAT(w1, HasSubstr(" 2"));
  EXPECT_NE(w0.substr(0, 4), w1.substr(0, 4)) << "one worker per node";
}

TEST_F(SlurmAdapterTest, RelaunchAfterACrashFindsTheJobInsteadOfResubmitting) {
  LaunchRequest r = Request(3, {"sleep", "30"}, {"gpu1"});
  absl::StatusOr<AttemptStatus> first = adapter_->Launch(r);
  ASSERT_TRUE(first.ok()) << first.status();
  // A new dispatcher process (fresh adapter) launches the same attempt: it
  // lists before it creates.
  std::unique_ptr<SlurmAdapter> restarted = NewAdapter();
  absl::StatusOr<AttemptStatus> again = restarted->Launch(r);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->backend_id, first->backend_id);
  EXPECT_EQ(restarted->counters().submits, 0);
  // And the same adapter twice.
  absl::StatusOr<AttemptStatus> third = adapter_->Launch(r);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->backend_id, first->backend_id);
  absl::StatusOr<std::vector<int64_t>> ids =
      restarted->JobIdsNamed("ty-3-1", /*refresh=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 1u);
  ASSERT_TRUE(
      adapter_->Stop("ty-3-1", absl::ZeroDuration(), StopReason::kCancel).ok());
  WaitForEnd("ty-3-1");
}

TEST_F(SlurmAdapterTest, NonZeroExitAndOutOfMemoryAreUserErrors) {
  ASSERT_TRUE(
      adapter_->Launch(Request(4, {"/bin/bash", "-c", "exit 3"}, {"gpu1"}))
          .ok());
  // 100 MiB allowed; the job touches 1 GiB (killed by OverMemoryKill, or by
  // the kernel's OOM killer under cgroups).
  LaunchRequest oom = Request(
      5,
      {"python3", "-c", "import time\nb = bytearray(1 << 30)\ntime.sleep(30)"},
      {"gpu2"});
  oom.spec.mutable_resources()->set_memory_bytes(int64_t{100} << 20);
  ASSERT_TRUE(adapter_->Launch(oom).ok());
  AttemptStatus s = WaitForEnd("ty-4-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_THAT(s.message, HasSubstr("code 3"));
  s = WaitForEnd("ty-5-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed) << s.message;
  EXPECT_EQ(s.failure, FailureKind::kUserError) << s.message;
  EXPECT_NE(s.exit_code.value_or(0), 0);
}

TEST_F(SlurmAdapterTest, CancelStopsARunningJobAndAPendingOneAtOnce) {
  LaunchRequest all = Request(6, {"sleep", "300"}, {"gpu1"});
  all.spec.mutable_resources()->set_gpus(4);
  ASSERT_TRUE(adapter_->Launch(all).ok());
  AttemptStatus s = WaitForRunning("ty-6-1");
  ASSERT_EQ(s.phase, AttemptPhase::kRunning) << s.message;
  // gpu1's 4 GPUs are taken: this one stays pending.
  absl::StatusOr<AttemptStatus> pending =
      adapter_->Launch(Request(7, {"sleep", "1"}, {"gpu1"}));
  ASSERT_TRUE(pending.ok()) << pending.status();
  ASSERT_TRUE(
      adapter_->Stop("ty-7-1", absl::Seconds(60), StopReason::kCancel).ok());
  ASSERT_TRUE(
      adapter_->Stop("ty-6-1", absl::ZeroDuration(), StopReason::kCancel).ok());
  s = WaitForEnd("ty-6-1", absl::Seconds(60));
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled) << s.message;
  EXPECT_EQ(s.failure, FailureKind::kCancelled);
  EXPECT_TRUE(s.stop_requested);
  s = WaitForEnd("ty-7-1", absl::Seconds(60));
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled) << s.message;
  // Stopping an ended attempt is fine; unknown ones are NOT_FOUND.
  EXPECT_TRUE(
      adapter_->Stop("ty-6-1", absl::ZeroDuration(), StopReason::kCancel).ok());
  EXPECT_TRUE(absl::IsNotFound(
      adapter_->Stop("ty-999-1", absl::ZeroDuration(), StopReason::kCancel)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      adapter_->Stop("ty-6-1", absl::Seconds(-1), StopReason::kCancel)));
  EXPECT_TRUE(absl::IsFailedPrecondition(adapter_->Signal("ty-6-1", SIGUSR1)));
}

TEST_F(SlurmAdapterTest, PreemptionSignalsThenStopsAfterTheGracePeriod) {
  const std::string ckpt = Work("ckpt-8");
  std::filesystem::create_directories(ckpt);
  // Checkpoints when signalled (USR1), then keeps running until killed.
  const std::string script = absl::StrCat(
      "trap 'echo \"{\\\"step\\\": 5, \\\"uri\\\": \\\"step-5\\\"}\" > ", ckpt,
      "/trainyard-checkpoint.json; echo signalled >> ", ckpt,
      "/log' USR1\n"
      "echo started >> ",
      ckpt,
      "/log\n"
      "while true; do sleep 0.2; done\n");
  LaunchRequest r = Request(8, {"/bin/bash", "-c", script}, {"gpu2"});
  r.spec.mutable_checkpoint()->set_directory(ckpt);
  ASSERT_TRUE(adapter_->Launch(r).ok());
  ASSERT_EQ(WaitForRunning("ty-8-1").phase, AttemptPhase::kRunning);
  // Give bash time to install its trap.
  WaitFor(
      "ty-8-1",
      [&](const AttemptStatus&) {
        return internal::ReadFileOrEmpty(ckpt + "/log").find("started") !=
               std::string::npos;
      },
      absl::Seconds(30));
  const absl::Time stop = absl::Now();
  ASSERT_TRUE(
      adapter_->Stop("ty-8-1", absl::Seconds(6), StopReason::kPreemption).ok());
  AttemptStatus s = WaitFor(
      "ty-8-1", [](const AttemptStatus& a) { return !a.checkpoints.empty(); },
      absl::Seconds(30));
  EXPECT_EQ(s.phase, AttemptPhase::kRunning) << "inside its grace period";
  EXPECT_TRUE(s.stop_requested);
  ASSERT_FALSE(s.checkpoints.empty());
  EXPECT_EQ(s.checkpoints.back().step, 5);
  EXPECT_EQ(s.checkpoints.back().uri, ckpt + "/step-5");
  s = WaitForEnd("ty-8-1", absl::Seconds(60));
  EXPECT_GE(absl::Now() - stop, absl::Seconds(6));
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled) << s.message;
  EXPECT_EQ(s.failure, FailureKind::kPreempted);
  EXPECT_EQ(dispatcher::Retryable(s.failure), true);
  EXPECT_THAT(internal::ReadFileOrEmpty(ckpt + "/log"), HasSubstr("signalled"));
}

TEST_F(SlurmAdapterTest, InventoryReportsNodesPoolsAndDrains) {
  absl::StatusOr<std::vector<NodeInventory>> nodes = adapter_->Inventory();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 4u);
  EXPECT_EQ((*nodes)[0].name, "gpu1");
  EXPECT_EQ((*nodes)[0].pool, "ondemand");
  EXPECT_EQ((*nodes)[0].flavor, "gpu");
  EXPECT_EQ((*nodes)[3].pool, "spot");
  EXPECT_EQ((*nodes)[3].flavor, "spot");
  for (const NodeInventory& n : *nodes) {
    EXPECT_EQ(n.gpus, 4) << n.name;
    EXPECT_EQ(n.gpu_model, "H100");
    EXPECT_EQ(n.cpu_millis, 4000);
    EXPECT_EQ(n.memory_bytes, int64_t{4000} << 20);
  }
  ASSERT_TRUE(slurm_
                  ->Command({"scontrol", "update", "nodename=gpu3",
                             "state=drain", "reason=maintenance"})
                  .ok());
  nodes = adapter_->Inventory();
  ASSERT_TRUE(nodes.ok());
  EXPECT_FALSE((*nodes)[2].schedulable);
  EXPECT_FALSE((*nodes)[2].failed);
  EXPECT_THAT((*nodes)[2].state_message, HasSubstr("maintenance"));
  ASSERT_TRUE(
      slurm_->Command({"scontrol", "update", "nodename=gpu3", "state=resume"})
          .ok());
  // A placement on an unknown node or on a node of another flavor is refused
  // before Slurm sees it.
  absl::Status s = adapter_->Launch(Request(10, {"true"}, {"gpu9"})).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("worker_nodes[0]"));
  s = adapter_->Launch(Request(11, {"true"}, {"gpu3"}, "gpu")).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  s = adapter_->Launch(Request(12, {}, {"gpu1"})).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("spec.command"));
  LaunchRequest bad = Request(13, {"true"}, {"gpu1"});
  bad.name = "ty-13-7";
  s = adapter_->Launch(bad).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

TEST_F(SlurmAdapterTest, AKilledSlurmdIsANodeFailure) {
  ASSERT_TRUE(adapter_->Launch(Request(14, {"sleep", "300"}, {"gpu2"})).ok());
  ASSERT_EQ(WaitForRunning("ty-14-1").phase, AttemptPhase::kRunning);
  // The node loses power: slurmd and the job's processes die.
  ASSERT_TRUE(slurm_->StopDaemon("slurmd:gpu2", "KILL").ok());
  AttemptStatus s = WaitForEnd("ty-14-1", absl::Seconds(120));
  EXPECT_EQ(s.phase, AttemptPhase::kFailed) << s.message;
  EXPECT_EQ(s.failure, FailureKind::kNodeFailure) << s.message;
  EXPECT_TRUE(dispatcher::Retryable(s.failure));
  absl::StatusOr<std::vector<NodeInventory>> nodes = adapter_->Inventory();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE((*nodes)[1].failed) << (*nodes)[1].state_message;
  EXPECT_FALSE((*nodes)[1].schedulable);
  // Back: the node returns to service by itself (ReturnToService=2).
  ASSERT_TRUE(slurm_->StartDaemon("slurmd:gpu2").ok());
  nodes = adapter_->Inventory();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE((*nodes)[1].schedulable) << (*nodes)[1].state_message;
}

TEST_F(SlurmAdapterTest, SlurmctldRestartLosesNothingAndDuplicatesNothing) {
  const std::string out = Work("survivor.txt");
  const std::string started = Work("survivor-started.txt");
  LaunchRequest r =
      Request(15,
              {"/bin/bash", "-c",
               "echo up > " + started + "; sleep 20; echo done > " + out},
              {"gpu1"});
  ASSERT_TRUE(adapter_->Launch(r).ok());
  ASSERT_EQ(WaitForRunning("ty-15-1").phase, AttemptPhase::kRunning);
  // RUNNING means the batch script started; its `srun` still asks slurmctld
  // for the job step. Stop slurmctld only once the step (the command) runs:
  // an srun that cannot reach slurmctld to create its step gives up with
  // exit code 1, which is not what this test is about.
  WaitFor(
      "ty-15-1",
      [&](const AttemptStatus&) {
        return !internal::ReadFileOrEmpty(started).empty();
      },
      absl::Seconds(30));
  ASSERT_TRUE(slurm_->StopDaemon("slurmctld").ok());
  // Unreachable: errors, never a made-up ending. (Short timeouts: slurmrestd
  // keeps retrying slurmctld.)
  std::unique_ptr<SlurmAdapter> impatient = NewAdapter(absl::Seconds(3));
  absl::StatusOr<std::vector<AttemptStatus>> list = impatient->List();
  EXPECT_FALSE(list.ok());
  std::unique_ptr<SlurmAdapter> fresh = NewAdapter(absl::Seconds(3));
  absl::Status launch = fresh->Launch(Request(16, {"true"}, {"gpu1"})).status();
  EXPECT_FALSE(launch.ok());
  EXPECT_TRUE(absl::IsUnavailable(launch) || absl::IsDeadlineExceeded(launch) ||
              absl::IsInternal(launch))
      << launch;
  ASSERT_TRUE(slurm_->StartDaemon("slurmctld").ok());
  // The running job survived, and relaunching finds it.
  fresh = NewAdapter();
  absl::StatusOr<AttemptStatus> again = fresh->Launch(r);
  ASSERT_TRUE(again.ok()) << again.status();
  AttemptStatus s = WaitForEnd("ty-15-1");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded) << s.message;
  EXPECT_EQ(again->backend_id, s.backend_id);
  absl::StatusOr<std::vector<int64_t>> ids =
      fresh->JobIdsNamed("ty-15-1", /*refresh=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 1u);
  EXPECT_EQ(absl::StripAsciiWhitespace(internal::ReadFileOrEmpty(out)), "done");
}

TEST_F(SlurmAdapterTest, SlurmrestdDownIsUnavailable) {
  ASSERT_TRUE(slurm_->StopDaemon("slurmrestd").ok());
  absl::Status s = adapter_->List().status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::IsUnavailable(adapter_->Inventory().status()));
  EXPECT_TRUE(absl::IsUnavailable(adapter_->Ping()));
  ASSERT_TRUE(slurm_->StartDaemon("slurmrestd").ok());
  EXPECT_TRUE(adapter_->Ping().ok());
  EXPECT_TRUE(adapter_->List().ok());
}

TEST_F(SlurmAdapterTest, ASuppliedTokenWorksAndListingIsOneCallPerPass) {
  absl::StatusOr<std::string> out =
      slurm_->Command({"scontrol", "token", "username=slurm", "lifespan=600"});
  ASSERT_TRUE(out.ok()) << out.status();
  const size_t at = out->find("SLURM_JWT=");
  ASSERT_NE(at, std::string::npos) << *out;
  absl::StatusOr<SlurmSettings> settings =
      dispatcher::slurm::LoadSlurmSettings(slurm_->adapter_config());
  ASSERT_TRUE(settings.ok());
  settings->jwt_key_file.clear();
  settings->token = std::string(
      absl::StripAsciiWhitespace(out->substr(at + strlen("SLURM_JWT="))));
  absl::StatusOr<std::unique_ptr<SlurmAdapter>> a =
      SlurmAdapter::Create(*settings);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Ping().ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*a)->List().ok());
  const SlurmAdapter::Counters c = (*a)->counters();
  EXPECT_EQ(c.polls, 5) << "one jobs?update_time= call per List";
  EXPECT_EQ(c.full_polls, 1) << "only the first lists everything";
  // A wrong token is refused, not mistaken for an empty cluster.
  settings->token = "not-a-token";
  a = SlurmAdapter::Create(*settings);
  ASSERT_TRUE(a.ok());
  absl::Status s = (*a)->List().status();
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(absl::IsUnavailable(s)) << s;
}

// Last: the job submitted in SetUpTestSuite has had its minute.
TEST_F(SlurmAdapterTest, TimeLimitKillIsClassified) {
  AttemptStatus s = WaitForEnd("ty-900-1", absl::Seconds(150));
  EXPECT_EQ(s.phase, AttemptPhase::kFailed) << s.message;
  EXPECT_EQ(s.failure, FailureKind::kTimeLimit) << s.message;
  EXPECT_FALSE(dispatcher::Retryable(s.failure));
  EXPECT_FALSE(s.exit_code.has_value());
}

// slurmrestd's unix-socket mode (rest_url = unix:/path), on a cluster of
// its own (one node).
TEST(SlurmUnixSocketTest, LaunchesThroughAUnixSocket) {
  std::string why;
  if (!LocalSlurm::Available(&why)) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<LocalSlurm>> slurm = LocalSlurm::Start(
      {.ondemand_nodes = 1, .spot_nodes = 0, .rest_unix_socket = true});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  absl::StatusOr<SlurmSettings> settings =
      dispatcher::slurm::LoadSlurmSettings((*slurm)->adapter_config());
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->rest_url, (*slurm)->rest_url());
  ASSERT_EQ(settings->rest_url.rfind("unix:/", 0), 0u) << settings->rest_url;
  settings->working_dir = (*slurm)->work_dir();
  absl::StatusOr<std::unique_ptr<SlurmAdapter>> adapter =
      SlurmAdapter::Create(*settings);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_TRUE((*adapter)->Ping().ok());
  absl::StatusOr<std::vector<NodeInventory>> nodes = (*adapter)->Inventory();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 1u);
  LaunchRequest r;
  r.job_id = 1;
  r.attempt = 1;
  r.name = "ty-1-1";
  r.tenant = "acme";
  r.spec.set_workers(1);
  r.spec.add_command("true");
  r.worker_nodes = {"gpu1"};
  r.flavor = "gpu";
  ASSERT_TRUE((*adapter)->Launch(r).ok());
  const absl::Time deadline = absl::Now() + kEndTimeout;
  absl::StatusOr<AttemptStatus> s;
  do {
    absl::SleepFor(absl::Milliseconds(300));
    s = (*adapter)->Status("ty-1-1");
  } while (absl::Now() < deadline &&
           (!s.ok() || !dispatcher::IsTerminal(s->phase)));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->phase, AttemptPhase::kSucceeded) << s->message;
}

}  // namespace
}  // namespace trainyard::testing
