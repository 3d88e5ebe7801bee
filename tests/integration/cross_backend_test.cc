// One queue over two backends, end to end: the real api, scheduler and two
// dispatchers over one PostgreSQL, one driving a real Slurm cluster
// (tests/fixtures/local_slurm.h) through the Slurm adapter, the other the
// Kubernetes API test server (tests/fixtures/local_kube.h) through the
// Kubernetes adapter. Tenant acme's default queue has quota on flavors of
// both clusters:
//
//   flavor     kind       $/GPU-h  cluster     pool      nodes
//   gpu        on-demand  2.00     slurm       ondemand  gpu1 (4 GPUs)
//   k8s-gpu    on-demand  3.00     kubernetes  ondemand  od-0 (4 GPUs), some
//   tests k8s-spot   spot       0.50     kubernetes  spot      spot-0 (4 GPUs),
//   some tests
//
// and both clusters' workers share one checkpoint filesystem (the Slurm
// jobs' directory, mounted into the pods as a hostPath at the same path).
//   - jobs that may run on either go to the cheaper flavor first and spill
//     to the other backend when it is full; a job bound to Slurm
//     (JobSpec.backend) waits for Slurm, saying so, while Kubernetes is free;
//   - a job preempted on Slurm (it checkpoints on the signal) resumes on
//     Kubernetes from that checkpoint;
//   - a job whose Kubernetes spot node is reclaimed, or that is preempted
//     on Kubernetes (it checkpoints on SIGTERM), resumes on Slurm from that
//     checkpoint, every step after it done once.
// The jobs on Slurm run tests/support/slurm/train_script.h; on Kubernetes
// the test server's fake kubelet plays them by script, checkpointing the
// same way.
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/kubernetes/kube_adapter.h"
#include "services/dispatcher/adapters/slurm/slurm_adapter.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"
#include "services/dispatcher/dispatcher.h"
#include "services/scheduler/scheduler_service.h"
#include "tests/fixtures/local_kube.h"
#include "tests/fixtures/local_slurm.h"
#include "tests/fixtures/subprocess.h"
#include "tests/integration/api_test_harness.h"
#include "tests/integration/dispatch_loop.h"
#include "tests/support/kube/kube_support.h"
#include "tests/support/slurm/slurm_suite.h"
#include "tests/support/slurm/train_script.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
namespace kube = ::trainyard::dispatcher::kubernetes;
using dispatcher::Dispatcher;
using dispatcher::slurm::SlurmAdapter;
using Json = nlohmann::json;

constexpr char kSlurmNode[] = "clusters/slurm/nodes/gpu1";

class CrossBackendTest : public SlurmSuite {
 protected:
  static void SetUpTestSuite() {
    // One on-demand node of 4 GPUs, partition ondemand = flavor gpu.
    LocalSlurm::Options o;
    o.ondemand_nodes = 1;
    o.spot_nodes = 0;
    if (!StartSlurm(o)) return;
  }
  static void TearDownTestSuite() { StopSlurm(); }

  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    if (std::string why; !LocalKube::Available(&why)) GTEST_SKIP() << why;
    absl::StatusOr<std::unique_ptr<LocalKube>> k = LocalKube::Start();
    ASSERT_TRUE(k.ok()) << k.status();
    kube_ = *std::move(k);

    absl::StatusOr<std::unique_ptr<ApiHarness>> h = ApiHarness::Start();
    ASSERT_TRUE(h.ok()) << h.status();
    harness_ = std::move(*h);
    ASSERT_TRUE(harness_->SeedTenant("acme").ok());
    token_ = harness_->Token("users/alice", v1::ROLE_TENANT_ADMIN, "acme");
    absl::Status made =
        harness_->CreateFlavor("k8s-gpu", v1::FLAVOR_KIND_ON_DEMAND, 3000000);
    ASSERT_TRUE(made.ok()) << made;
    made = harness_->CreateFlavor("k8s-spot", v1::FLAVOR_KIND_SPOT, 500000,
                                  /*reclaim_rate_per_hour=*/0.1);
    ASSERT_TRUE(made.ok()) << made;
    absl::Status seeded = harness_->SeedCluster("slurm", v1::BACKEND_KIND_SLURM,
                                                {{"ondemand", "gpu"}});
    ASSERT_TRUE(seeded.ok()) << seeded;
    seeded =
        harness_->SeedCluster("kubernetes", v1::BACKEND_KIND_KUBERNETES,
                              {{"ondemand", "k8s-gpu"}, {"spot", "k8s-spot"}});
    ASSERT_TRUE(seeded.ok()) << seeded;
    for (const char* flavor : {"k8s-gpu", "k8s-spot"}) {
      made = harness_->AddQueueQuota("acme", "default", flavor);
      ASSERT_TRUE(made.ok()) << made;
    }

    // Every test has a database of its own (job ids restart at 1) but they
    // share the Slurm cluster: a name prefix and a checkpoint root per test.
    static int tests = 0;
    const std::string prefix = absl::StrCat("x", ++tests, "-");
    ck_root_ = absl::StrCat(slurm_->work_dir(), "/", prefix, "checkpoints");
    std::filesystem::create_directories(ck_root_);

    absl::StatusOr<dispatcher::slurm::SlurmSettings> settings =
        dispatcher::slurm::LoadSlurmSettings(slurm_->adapter_config());
    ASSERT_TRUE(settings.ok()) << settings.status();
    settings->working_dir = slurm_->work_dir();
    settings->job_name_prefix = prefix;
    // Every job here names an image, as Kubernetes needs: on Slurm a
    // container runtime runs it (Apptainer's "apptainer exec docker://{image}"
    // in production). The testbed has none; env stands in for it.
    settings->container_exec = {"env", "TRAINYARD_TEST_IMAGE={image}"};
    absl::StatusOr<std::unique_ptr<SlurmAdapter>> sa =
        SlurmAdapter::Create(*settings);
    ASSERT_TRUE(sa.ok()) << sa.status();
    slurm_adapter_ = *std::move(sa);

    // The shared checkpoint filesystem, at the same path in the pods.
    absl::StatusOr<kube::KubernetesAdapterOptions> ko =
        TestAdapterOptions(*kube_, "kubernetes", ck_root_);
    ASSERT_TRUE(ko.ok()) << ko.status();
    ko->settings.pool_flavors = {{"ondemand", "k8s-gpu"}, {"spot", "k8s-spot"}};
    absl::StatusOr<std::unique_ptr<kube::KubernetesAdapter>> ka =
        kube::KubernetesAdapter::Create(*std::move(ko));
    ASSERT_TRUE(ka.ok()) << ka.status();
    kube_adapter_ = *std::move(ka);

    absl::StatusOr<std::unique_ptr<scheduler::SchedulerService>> s =
        TestScheduler(harness_->database_url());
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
    absl::StatusOr<std::unique_ptr<Dispatcher>> d =
        TestDispatcher(harness_->database_url(), "slurm", slurm_adapter_.get());
    ASSERT_TRUE(d.ok()) << d.status();
    slurm_dispatcher_ = std::move(*d);
    d = TestDispatcher(harness_->database_url(), "kubernetes",
                       kube_adapter_.get());
    ASSERT_TRUE(d.ok()) << d.status();
    kube_dispatcher_ = std::move(*d);
  }

  void TearDown() override {
    slurm_dispatcher_.reset();
    kube_dispatcher_.reset();
    kube_adapter_.reset();
    slurm_adapter_.reset();
    // Leave the shared Slurm cluster empty for the next test.
    if (slurm_ != nullptr) {
      (void)slurm_->Command({"scancel", "--quiet", "--user=root"});
    }
  }

  // Kubernetes nodes of 4 H100s in GKE node pool `pool`.
  void AddKubeNode(const std::string& name, const std::string& pool,
                   bool spot) {
    const Json body = {{"names", {name}},
                       {"gpus", 4},
                       {"spot", spot},
                       {"gpu_product", kTestGpuProduct},
                       {"labels", {{"cloud.google.com/gke-nodepool", pool}}}};
    absl::StatusOr<std::string> r = kube_->Admin("POST", "/nodes", body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
  }

  // The first passes of both dispatchers report their nodes.
  void ReportNodes(int kube_nodes) {
    absl::StatusOr<dispatcher::PassReport> p = slurm_dispatcher_->RunPass();
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->nodes_reported, 1);
    p = kube_dispatcher_->RunPass();
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->nodes_reported, kube_nodes);
  }

  void Script(const Json& script) {
    absl::Status added = AddPodScript(*kube_, script);
    ASSERT_TRUE(added.ok()) << added;
  }

  // A job of one worker with 4 GPUs.
  v1::SubmitJobRequest Job(const std::string& request_id) {
    v1::SubmitJobRequest req = MinimalSubmit("acme", request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_image("trainer:1");
    spec->mutable_resources()->set_gpus(4);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{200} << 20);
    spec->mutable_time_limit()->set_seconds(600);
    return req;
  }

  v1::SubmitJobRequest Sleep(const std::string& request_id, int seconds) {
    v1::SubmitJobRequest req = Job(request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->clear_command();
    spec->add_command("sleep");
    spec->add_command(absl::StrCat(seconds));
    return req;
  }

  // kTrainScript (steps of half a second) for `steps` steps after where it
  // resumes, checkpointing into <root>/job-<n> every
  // `every` steps (and when stopped), resumable.
  v1::SubmitJobRequest TrainJob(const std::string& request_id, int n, int steps,
                                int every) {
    v1::SubmitJobRequest req = Job(request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->clear_command();
    spec->add_command("/bin/bash");
    spec->add_command("-c");
    spec->add_command(kTrainScript);
    (*spec->mutable_env())["STEPS"] = absl::StrCat(steps);
    (*spec->mutable_env())["STEP_SECONDS"] = "0.5";
    (*spec->mutable_env())["EVERY"] = absl::StrCat(every);
    spec->mutable_checkpoint()->set_directory(Dir(n));
    std::filesystem::create_directories(Dir(n));
    spec->mutable_checkpoint()->set_resumable(true);
    spec->mutable_checkpoint()->mutable_interval()->set_seconds(1);
    spec->mutable_checkpoint()->mutable_grace_period()->set_seconds(20);
    return req;
  }

  std::string Dir(int n) const { return absl::StrCat(ck_root_, "/job-", n); }

  v1::Job Get(int64_t id) { return harness_->GetJob(token_, "acme", id); }

  bool RunUntil(const std::function<bool()>& done, absl::Duration timeout) {
    return ::trainyard::testing::RunUntil(
        *scheduler_, {slurm_dispatcher_.get(), kube_dispatcher_.get()}, done,
        timeout, absl::Milliseconds(300));
  }
  // Rounds until job `id` runs with a checkpoint recorded as its resume
  // point; the failure shows the job and its log in the shared directory.
  ::testing::AssertionResult RunsWithACheckpoint(int64_t id,
                                                 absl::Duration timeout) {
    if (RunUntil(
            [&] {
              const v1::Job j = Get(id);
              return j.state() == v1::JOB_STATE_RUNNING &&
                     !j.resume_from().empty();
            },
            timeout)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << Get(id).DebugString()
           << internal::ReadFileOrEmpty(Dir(id) + "/log");
  }

  // Rounds until every job of `ids` has SUCCEEDED.
  ::testing::AssertionResult AllSucceed(const std::vector<int64_t>& ids,
                                        absl::Duration timeout) {
    auto done = [&] {
      for (int64_t id : ids) {
        if (Get(id).state() != v1::JOB_STATE_SUCCEEDED) return false;
      }
      return true;
    };
    if (RunUntil(done, timeout)) return ::testing::AssertionSuccess();
    ::testing::AssertionResult failure = ::testing::AssertionFailure();
    for (int64_t id : ids) {
      failure << Get(id).DebugString()
              << internal::ReadFileOrEmpty(Dir(id) + "/log");
    }
    return failure;
  }

  // Attempt `attempt`'s output as the api serves it (GetLogs), complete.
  std::string AttemptLog(int64_t id, int attempt) {
    v1::GetJobLogsRequest req;
    req.set_name(absl::StrCat("tenants/acme/jobs/", id));
    req.set_attempt(attempt);
    v1::JobLogs logs;
    grpc::Status s = harness_->jobs()->GetLogs(
        ApiHarness::Context(token_).get(), req, &logs);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(logs.complete()) << logs.DebugString();
    EXPECT_EQ(logs.unavailable_reason(), "") << logs.DebugString();
    return logs.text();
  }

  std::unique_ptr<LocalKube> kube_;
  std::string ck_root_;
  std::unique_ptr<ApiHarness> harness_;
  std::string token_;
  std::unique_ptr<SlurmAdapter> slurm_adapter_;
  std::unique_ptr<kube::KubernetesAdapter> kube_adapter_;
  std::unique_ptr<scheduler::SchedulerService> scheduler_;
  std::unique_ptr<Dispatcher> slurm_dispatcher_;
  std::unique_ptr<Dispatcher> kube_dispatcher_;
};

TEST_F(CrossBackendTest, CheaperBackendFirstThenSpillAndABoundJobWaitsForIts) {
  ASSERT_NO_FATAL_FAILURE(AddKubeNode("od-0", "ondemand", false));
  ASSERT_NO_FATAL_FAILURE(ReportNodes(1));
  // 1 may run anywhere: Slurm's gpu at $2.00 beats k8s-gpu at $3.00.
  // (1 and 3 run long enough for the scheduler to explain 2 meanwhile: it
  // writes explanations at most once a second.)
  const int64_t first = harness_->SubmitJob(token_, Sleep("first", 8));
  // 2 must run on Slurm: it waits for gpu1, though od-0 is free.
  v1::SubmitJobRequest bound = Sleep("bound", 1);
  bound.mutable_job()->mutable_spec()->set_backend(
      v1::BACKEND_PREFERENCE_SLURM);
  const int64_t on_slurm = harness_->SubmitJob(token_, bound);
  // 3 may run anywhere: Slurm is full, so it spills to Kubernetes.
  Script({{"selector", "trainyard.dev/job=3"}, {"run_seconds", 8}});
  const int64_t spills = harness_->SubmitJob(token_, Sleep("spills", 1));
  ASSERT_EQ(first, 1);
  ASSERT_EQ(on_slurm, 2);
  ASSERT_EQ(spills, 3);

  // 2 waits, saying why, while 1 runs on Slurm and 3 on Kubernetes.
  ASSERT_TRUE(RunUntil(
      [&] {
        return Get(first).state() == v1::JOB_STATE_RUNNING &&
               Get(spills).state() == v1::JOB_STATE_RUNNING &&
               absl::StrContains(
                   harness_->Explain(token_, "acme", on_slurm).message(),
                   "slurm nodes only (the job's backend)");
      },
      absl::Seconds(60)))
      << Get(first).DebugString() << Get(spills).DebugString()
      << harness_->Explain(token_, "acme", on_slurm).DebugString();
  EXPECT_EQ(Get(on_slurm).state(), v1::JOB_STATE_QUEUED);
  const v1::ExplainPendingResponse why =
      harness_->Explain(token_, "acme", on_slurm);
  EXPECT_EQ(why.reason(), "NO_CAPACITY") << why.DebugString();
  // Its only candidate is Slurm's flavor (k8s-gpu is offered on Kubernetes
  // alone), and gpu1 is taken.
  EXPECT_EQ(why.message(),
            "NO_CAPACITY: free nodes hold 0 of 1 workers (flavor gpu); "
            "counting slurm nodes only (the job's backend)");

  ASSERT_TRUE(AllSucceed({first, on_slurm, spills}, absl::Seconds(90)));
  const v1::Job j1 = Get(first), j2 = Get(on_slurm), j3 = Get(spills);
  for (const v1::Job* j : {&j1, &j2, &j3}) {
    ASSERT_EQ(j->attempts_size(), 1) << j->DebugString();
    ASSERT_EQ(j->attempts(0).placements_size(), 1) << j->DebugString();
  }
  EXPECT_EQ(j1.attempts(0).flavor(), "flavors/gpu");
  EXPECT_EQ(j1.attempts(0).placements(0).node(), kSlurmNode);
  EXPECT_EQ(j3.attempts(0).flavor(), "flavors/k8s-gpu");
  EXPECT_EQ(j3.attempts(0).placements(0).node(),
            "clusters/kubernetes/nodes/od-0");
  EXPECT_EQ(j2.attempts(0).flavor(), "flavors/gpu");
  EXPECT_EQ(j2.attempts(0).placements(0).node(), kSlurmNode);
  // 2 started on gpu1 once 1 had left it.
  EXPECT_GE(google::protobuf::util::TimeUtil::TimestampToMicroseconds(
                j2.attempts(0).start_time()),
            google::protobuf::util::TimeUtil::TimestampToMicroseconds(
                j1.attempts(0).end_time()));
}

TEST_F(CrossBackendTest,
       AJobPreemptedOnSlurmResumesOnKubernetesFromItsCheckpoint) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());
  ASSERT_NO_FATAL_FAILURE(AddKubeNode("od-0", "ondemand", false));
  ASSERT_NO_FATAL_FAILURE(ReportNodes(1));
  // On Kubernetes the job trains for 2 s, checkpointing 10 steps at a time.
  Script({{"selector", "trainyard.dev/job=1"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"run_seconds", 2}});
  // The victim: low priority, on Slurm (the cheaper), until stopped.
  v1::SubmitJobRequest low = TrainJob("low", 1, 600, 2);
  low.mutable_job()->mutable_spec()->set_priority_class("low");
  const int64_t victim = harness_->SubmitJob(token_, low);
  ASSERT_EQ(victim, 1);
  ASSERT_TRUE(RunsWithACheckpoint(victim, absl::Seconds(90)));
  EXPECT_EQ(Get(victim).attempts(0).placements(0).node(), kSlurmNode);

  // A high-priority job that must run on Slurm: the scheduler preempts the
  // victim there; it checkpoints on the signal, and its next attempt goes
  // to the free Kubernetes node.
  v1::SubmitJobRequest high = Sleep("high", 2);
  high.mutable_job()->mutable_spec()->set_priority_class("high");
  high.mutable_job()->mutable_spec()->set_backend(v1::BACKEND_PREFERENCE_SLURM);
  const int64_t preemptor = harness_->SubmitJob(token_, high);
  ASSERT_TRUE(AllSucceed({victim, preemptor}, absl::Seconds(120)));

  const v1::Job v = Get(victim);
  ASSERT_EQ(v.attempts_size(), 2) << v.DebugString();
  const v1::Attempt& on_slurm = v.attempts(0);
  const v1::Attempt& on_kube = v.attempts(1);
  EXPECT_EQ(on_slurm.failure_class(), v1::FAILURE_CLASS_PREEMPTION);
  EXPECT_EQ(on_slurm.placements(0).node(), kSlurmNode);
  EXPECT_EQ(on_kube.placements(0).node(), "clusters/kubernetes/nodes/od-0");
  EXPECT_EQ(on_kube.flavor(), "flavors/k8s-gpu");
  EXPECT_EQ(Get(preemptor).attempts(0).placements(0).node(), kSlurmNode);

  // The checkpoint the script wrote when signalled, in the shared
  // directory, is where the Kubernetes attempt resumed.
  const std::string log = internal::ReadFileOrEmpty(Dir(1) + "/log");
  int64_t last = -1;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    int64_t step = 0;
    if (absl::ConsumePrefix(&line, "checkpoint ") &&
        absl::SimpleAtoi(line.substr(0, line.find(' ')), &step)) {
      last = step;
    }
  }
  ASSERT_GT(last, 0) << log;
  EXPECT_EQ(on_kube.resumed_from(), absl::StrCat(Dir(1), "/step-", last));
  EXPECT_EQ(internal::ReadFileOrEmpty(on_kube.resumed_from()),
            absl::StrCat(last, "\n"));
  // The pod started from it and trained on: its checkpoints go on from that
  // step, 10 at a time (its log as the dispatcher kept it).
  const std::string pod_log = AttemptLog(victim, 2);
  EXPECT_TRUE(absl::StrContains(
      pod_log, absl::StrCat("resuming from ", on_kube.resumed_from())))
      << pod_log;
  const std::vector<int64_t> steps = FakeCheckpointSteps(pod_log);
  ASSERT_FALSE(steps.empty()) << pod_log;
  EXPECT_EQ(steps[0], last + 10) << pod_log;
}

TEST_F(CrossBackendTest, AJobReclaimedOnKubernetesSpotResumesOnSlurm) {
  ASSERT_NO_FATAL_FAILURE(AddKubeNode("spot-0", "spot", true));
  ASSERT_NO_FATAL_FAILURE(ReportNodes(1));
  // On Kubernetes the job trains until stopped, checkpointing every 0.3 s
  // and on SIGTERM.
  Script({{"selector", "trainyard.dev/job=1"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"checkpoint_on_term", true},
          {"run_seconds", nullptr}});
  // 4 steps more on Slurm, wherever it starts from.
  const int64_t id = harness_->SubmitJob(token_, TrainJob("spot", 1, 4, 2));
  ASSERT_EQ(id, 1);
  // k8s-spot ($0.50, 0.1 reclaims/h) is the cheapest: the job runs there.
  ASSERT_TRUE(RunsWithACheckpoint(id, absl::Seconds(60)));
  const v1::Job running = Get(id);
  EXPECT_EQ(running.attempts(0).placements(0).node(),
            "clusters/kubernetes/nodes/spot-0");
  EXPECT_EQ(running.attempts(0).flavor(), "flavors/k8s-spot");

  // The cloud reclaims the node: SIGTERM (the worker checkpoints), the pod
  // fails a second later, the node is gone after two.
  absl::StatusOr<std::string> r =
      kube_->Admin("POST", "/nodes/spot-0/reclaim",
                   R"({"notice_seconds": 2, "pod_grace_seconds": 1})");
  ASSERT_TRUE(r.ok()) << r.status();
  // The pod's log while it is still there: its last checkpoint, written on
  // SIGTERM.
  absl::StatusOr<std::string> worker_log =
      WorkerLog(*kube_, running.attempts(0).backend_job_name());
  ASSERT_TRUE(worker_log.ok()) << worker_log.status();
  const std::string& pod_log = *worker_log;
  EXPECT_TRUE(absl::StrContains(pod_log, "received SIGTERM (node shutdown)"))
      << pod_log;
  const std::vector<int64_t> steps = FakeCheckpointSteps(pod_log);
  ASSERT_FALSE(steps.empty()) << pod_log;
  const int64_t last = steps.back();
  ASSERT_TRUE(AllSucceed({id}, absl::Seconds(90)));

  const v1::Job j = Get(id);
  ASSERT_EQ(j.attempts_size(), 2) << j.DebugString();
  EXPECT_EQ(j.attempts(0).failure_class(), v1::FAILURE_CLASS_SPOT_RECLAIM);
  // The Slurm attempt resumed from the pod's last checkpoint and did the 4
  // steps after it, once each.
  const v1::Attempt& on_slurm = j.attempts(1);
  EXPECT_EQ(on_slurm.placements(0).node(), kSlurmNode);
  EXPECT_EQ(on_slurm.flavor(), "flavors/gpu");
  EXPECT_EQ(on_slurm.resumed_from(), absl::StrCat(Dir(1), "/step-", last));
  EXPECT_EQ(on_slurm.exit_code(), 0);
  EXPECT_EQ(internal::ReadFileOrEmpty(Dir(1) + "/out"),
            absl::StrCat(last + 1, " 2\n", last + 2, " 2\n", last + 3, " 2\n",
                         last + 4, " 2\n"));
  EXPECT_TRUE(absl::StrContains(
      internal::ReadFileOrEmpty(Dir(1) + "/log"),
      absl::StrCat("attempt 2 starts after step ", last, "\n")));
}

// The reverse of the preemption above: preempted by Trainyard on Kubernetes
// (a graceful delete: SIGTERM, on which it checkpoints), the job resumes on
// Slurm.
TEST_F(CrossBackendTest,
       AJobPreemptedOnKubernetesResumesOnSlurmFromItsCheckpoint) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());
  ASSERT_NO_FATAL_FAILURE(AddKubeNode("spot-0", "spot", true));
  ASSERT_NO_FATAL_FAILURE(ReportNodes(1));
  // The victim checkpoints on SIGTERM and takes a second to exit.
  Script({{"selector", "trainyard.dev/job=1"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"checkpoint_on_term", true},
          {"term_seconds", 1},
          {"run_seconds", nullptr}});
  Script({{"selector", "trainyard.dev/job=2"}, {"run_seconds", 2}});
  // The victim: low priority, on k8s-spot (the cheapest), 4 steps more on
  // Slurm.
  v1::SubmitJobRequest low = TrainJob("low", 1, 4, 2);
  low.mutable_job()->mutable_spec()->set_priority_class("low");
  const int64_t victim = harness_->SubmitJob(token_, low);
  ASSERT_EQ(victim, 1);
  ASSERT_TRUE(RunsWithACheckpoint(victim, absl::Seconds(60)));
  EXPECT_EQ(Get(victim).attempts(0).placements(0).node(),
            "clusters/kubernetes/nodes/spot-0");

  // A high-priority job that must run on Kubernetes and may use spot.
  v1::SubmitJobRequest high = Sleep("high", 2);
  high.mutable_job()->mutable_spec()->set_priority_class("high");
  high.mutable_job()->mutable_spec()->set_backend(
      v1::BACKEND_PREFERENCE_KUBERNETES);
  high.mutable_job()->mutable_spec()->set_spot_policy(v1::SPOT_POLICY_REQUIRED);
  const int64_t preemptor = harness_->SubmitJob(token_, high);
  ASSERT_EQ(preemptor, 2);
  ASSERT_TRUE(AllSucceed({victim, preemptor}, absl::Seconds(120)));

  const v1::Job v = Get(victim);
  ASSERT_EQ(v.attempts_size(), 2) << v.DebugString();
  EXPECT_EQ(v.attempts(0).failure_class(), v1::FAILURE_CLASS_PREEMPTION);
  EXPECT_EQ(Get(preemptor).attempts(0).placements(0).node(),
            "clusters/kubernetes/nodes/spot-0");
  // The pod's last checkpoint, written on SIGTERM, is where Slurm resumed.
  // (Its output as the dispatcher kept it, read while it was being stopped.)
  const std::string pod_log = AttemptLog(victim, 1);
  EXPECT_TRUE(absl::StrContains(pod_log, "trainyard-fake: received SIGTERM"))
      << pod_log;
  const std::vector<int64_t> steps = FakeCheckpointSteps(pod_log);
  ASSERT_FALSE(steps.empty()) << pod_log;
  const int64_t last = steps.back();
  const v1::Attempt& on_slurm = v.attempts(1);
  EXPECT_EQ(on_slurm.placements(0).node(), kSlurmNode);
  EXPECT_EQ(on_slurm.resumed_from(), absl::StrCat(Dir(1), "/step-", last));
  EXPECT_EQ(internal::ReadFileOrEmpty(Dir(1) + "/out"),
            absl::StrCat(last + 1, " 2\n", last + 2, " 2\n", last + 3, " 2\n",
                         last + 4, " 2\n"));
}

}  // namespace
}  // namespace trainyard::testing
