// KubernetesAdapter against the Kubernetes API test server
// (tests/fixtures/local_kube.h): a gang launched once however often Launch is
// called, run by the fake kubelet to its end on the placed nodes, counted in
// the inventory, forgotten by Delete; an OOMKilled worker; a preemption that
// checkpoints in its grace period; a spot node reclaimed under an attempt.
#include "services/dispatcher/adapters/kubernetes/kube_adapter.h"

#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fixtures/local_kube.h"
#include "tests/support/kube/kube_support.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::trainyard::testing::AddPodScript;
using ::trainyard::testing::kTestGpuProduct;
using ::trainyard::testing::LocalKube;
using ::trainyard::testing::TestAdapterOptions;
using Json = nlohmann::json;

class KubeAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why; !LocalKube::Available(&why)) GTEST_SKIP() << why;
    absl::StatusOr<std::unique_ptr<LocalKube>> kube = LocalKube::Start();
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = *std::move(kube);
    ck_root_ = kube_->dir() + "/checkpoints";
    std::filesystem::create_directories(ck_root_);
  }

  // Nodes node-0.. of 8 GPUs; spot ones carry the Karpenter spot label.
  void AddNodes(int count, bool spot = false, int start = 0) {
    Json body = {{"count", count},
                 {"start", start},
                 {"gpus", 8},
                 {"gpu_product", kTestGpuProduct}};
    if (spot) body["spot"] = true;
    absl::StatusOr<std::string> r = kube_->Admin("POST", "/nodes", body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
  }
  void Script(const Json& script) {
    absl::Status added = AddPodScript(*kube_, script);
    ASSERT_TRUE(added.ok()) << added;
  }

  std::unique_ptr<KubernetesAdapter> Adapter(
      absl::Duration image_pull_patience = absl::Minutes(5)) {
    absl::StatusOr<KubernetesAdapterOptions> options =
        TestAdapterOptions(*kube_, "local", ck_root_);
    EXPECT_TRUE(options.ok()) << options.status();
    if (!options.ok()) return nullptr;
    KubernetesAdapterOptions& o = *options;
    o.settings.image_pull_patience = image_pull_patience;
    FlavorPlacement spot;
    spot.flavor = "spot-h100";
    spot.spot = SpotPreset::kKarpenter;
    FlavorPlacement on_demand;
    on_demand.flavor = "on-demand-h100";
    o.settings.flavors = {on_demand, spot};
    absl::StatusOr<std::unique_ptr<KubernetesAdapter>> a =
        KubernetesAdapter::Create(std::move(o));
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *std::move(a) : nullptr;
  }

  LaunchRequest Request(int64_t job, int workers,
                        std::vector<std::string> nodes,
                        std::string flavor = "on-demand-h100") {
    LaunchRequest r;
    r.job_id = job;
    r.attempt = 1;
    r.name = BackendJobName(job, 1);
    r.tenant = "acme";
    r.flavor = flavor;
    r.spec.set_workers(workers);
    r.spec.set_image("trainer:1");
    r.spec.add_command("python");
    r.spec.add_command("train.py");
    r.spec.mutable_resources()->set_gpus(4);
    r.spec.mutable_resources()->set_cpu_millis(8000);
    r.spec.mutable_resources()->set_memory_bytes(int64_t{32} << 30);
    r.spec.mutable_checkpoint()->set_directory(
        absl::StrCat(ck_root_, "/job-", job));
    r.spec.mutable_checkpoint()->mutable_grace_period()->set_seconds(5);
    r.worker_nodes = std::move(nodes);
    return r;
  }

  // Polls List() until `done` holds for attempt `name` (or 30 s pass).
  AttemptStatus WaitFor(KubernetesAdapter& a, const std::string& name,
                        const std::function<bool(const AttemptStatus&)>& done,
                        const std::string& what) {
    AttemptStatus last;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      absl::StatusOr<std::vector<AttemptStatus>> list = a.List();
      EXPECT_TRUE(list.ok()) << list.status();
      if (list.ok()) {
        for (const AttemptStatus& s : *list) {
          if (s.name != name) continue;
          last = s;
          if (done(s)) return s;
        }
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    ADD_FAILURE() << "timed out waiting for " << name << " to be " << what
                  << "; last phase " << AttemptPhaseName(last.phase) << ": "
                  << last.message;
    return last;
  }

  int CountJobs() {
    absl::StatusOr<LocalKube::Response> r =
        kube_->Request("GET", "/apis/batch/v1/namespaces/trainyard/jobs");
    EXPECT_TRUE(r.ok());
    return r.ok() ? static_cast<int>(Json::parse(r->body)["items"].size()) : -1;
  }

  std::unique_ptr<LocalKube> kube_;
  std::string ck_root_;
};

TEST_F(KubeAdapterTest, AGangRunsOnItsNodesOnceAndIsForgotten) {
  AddNodes(3);
  Script({{"selector", "trainyard.dev/job=7"}, {"run_seconds", 2}});
  std::unique_ptr<KubernetesAdapter> a = Adapter();
  ASSERT_NE(a, nullptr);
  const LaunchRequest req = Request(7, 2, {"node-1", "node-2"});
  absl::StatusOr<AttemptStatus> first = a->Launch(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->name, "ty-7-1");
  // Launch again (a dispatcher that did not record the first): the same
  // attempt, still one Job.
  absl::StatusOr<AttemptStatus> again = a->Launch(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->backend_id, first->backend_id);
  EXPECT_EQ(CountJobs(), 1);
  // Two workers: the headless Service that names them.
  absl::StatusOr<LocalKube::Response> service =
      kube_->Request("GET", "/api/v1/namespaces/trainyard/services/ty-7-1");
  ASSERT_TRUE(service.ok());
  EXPECT_EQ(service->code, 200);

  const AttemptStatus running = WaitFor(
      *a, "ty-7-1",
      [](const AttemptStatus& s) { return s.phase == AttemptPhase::kRunning; },
      "running");
  EXPECT_THAT(running.nodes, ElementsAre("node-1", "node-2"));
  // 4 GPUs of each placed node are in use, none of node-0's.
  absl::StatusOr<std::vector<NodeInventory>> nodes = a->Inventory();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].used_gpus, 0);
  EXPECT_EQ((*nodes)[1].used_gpus, 4);
  EXPECT_EQ((*nodes)[2].used_gpus, 4);
  EXPECT_EQ((*nodes)[1].gpus, 8);
  EXPECT_EQ((*nodes)[1].gpu_model, "H100");
  // Not ended: Delete refuses.
  EXPECT_EQ(a->Delete("ty-7-1").code(), absl::StatusCode::kFailedPrecondition);

  const AttemptStatus done = WaitFor(
      *a, "ty-7-1", [](const AttemptStatus& s) { return IsTerminal(s.phase); },
      "ended");
  EXPECT_EQ(done.phase, AttemptPhase::kSucceeded) << done.message;
  ASSERT_TRUE(a->Delete("ty-7-1").ok());
  absl::StatusOr<LocalKube::Response> job =
      kube_->Request("GET", "/apis/batch/v1/namespaces/trainyard/jobs/ty-7-1");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->code, 404);
  absl::StatusOr<LocalKube::Response> svc =
      kube_->Request("GET", "/api/v1/namespaces/trainyard/services/ty-7-1");
  ASSERT_TRUE(svc.ok());
  EXPECT_EQ(svc->code, 404);
  EXPECT_EQ(a->Status("ty-7-1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(a->Delete("ty-7-1").ok());  // unknown: OK
}

TEST_F(KubeAdapterTest, AnOomKilledWorkerIsTheUsersError) {
  AddNodes(1);
  Script({{"selector", "trainyard.dev/job=8"},
          {"run_seconds", 1},
          {"reason", "OOMKilled"}});
  std::unique_ptr<KubernetesAdapter> a = Adapter();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Launch(Request(8, 1, {"node-0"})).ok());
  const AttemptStatus s = WaitFor(
      *a, "ty-8-1", [](const AttemptStatus& s) { return IsTerminal(s.phase); },
      "ended");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.exit_code, 137);
  EXPECT_THAT(s.message, HasSubstr("OOMKilled"));
  // One worker: its Job is the one object created, no Service.
  absl::StatusOr<LocalKube::Response> service =
      kube_->Request("GET", "/api/v1/namespaces/trainyard/services/ty-8-1");
  ASSERT_TRUE(service.ok());
  EXPECT_EQ(service->code, 404);
}

TEST_F(KubeAdapterTest, AnImageThatCannotBePulledIsTheUsersErrorInTime) {
  AddNodes(1);
  std::unique_ptr<KubernetesAdapter> a = Adapter(absl::Seconds(2));
  ASSERT_NE(a, nullptr);
  LaunchRequest req = Request(12, 1, {"node-0"});
  req.spec.set_image("registry.example/does-not-exist:1");
  ASSERT_TRUE(a->Launch(req).ok());
  // Still waiting on the pull within the patience: not ended.
  const AttemptStatus waiting = WaitFor(
      *a, "ty-12-1", [](const AttemptStatus&) { return true; }, "listed");
  EXPECT_FALSE(IsTerminal(waiting.phase)) << waiting.message;
  const AttemptStatus s = WaitFor(
      *a, "ty-12-1", [](const AttemptStatus& s) { return IsTerminal(s.phase); },
      "ended");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_THAT(s.message, HasSubstr("worker 0 cannot start"));
  EXPECT_THAT(s.message, ::testing::AnyOf(HasSubstr("ErrImagePull"),
                                          HasSubstr("ImagePullBackOff")));
  EXPECT_THAT(s.message, HasSubstr("does-not-exist"));
}

TEST_F(KubeAdapterTest, APreemptionCheckpointsInItsGracePeriod) {
  AddNodes(1);
  Script({{"selector", "trainyard.dev/job=9"},
          {"checkpoint_every", 0.3},
          {"checkpoint_on_term", true},
          {"term_seconds", 0.5},
          {"term_exit_code", 0}});
  std::unique_ptr<KubernetesAdapter> a = Adapter();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Launch(Request(9, 1, {"node-0"})).ok());
  WaitFor(
      *a, "ty-9-1",
      [](const AttemptStatus& s) { return !s.checkpoints.empty(); },
      "checkpointed");
  ASSERT_TRUE(
      a->Stop("ty-9-1", absl::Seconds(5), StopReason::kPreemption).ok());
  const AttemptStatus s = WaitFor(
      *a, "ty-9-1", [](const AttemptStatus& s) { return IsTerminal(s.phase); },
      "ended");
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled) << s.message;
  EXPECT_EQ(s.failure, FailureKind::kPreempted);
  EXPECT_TRUE(s.stop_requested);
  ASSERT_FALSE(s.checkpoints.empty());
  EXPECT_EQ(s.checkpoints.back().uri,
            absl::StrCat(ck_root_, "/job-9/step-", s.checkpoints.back().step));
  // Stopping an ended attempt changes nothing.
  EXPECT_TRUE(
      a->Stop("ty-9-1", absl::ZeroDuration(), StopReason::kCancel).ok());
  absl::StatusOr<LogChunk> log = a->ReadLog("ty-9-1", 0, 1 << 20);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_THAT(log->data, HasSubstr("checkpoint step-"));
}

TEST_F(KubeAdapterTest, AReclaimedSpotNodeIsASpotReclaim) {
  AddNodes(1, /*spot=*/true);
  Script({{"selector", "trainyard.dev/job=10"}});
  std::unique_ptr<KubernetesAdapter> a = Adapter();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Launch(Request(10, 1, {"node-0"}, "spot-h100")).ok());
  WaitFor(
      *a, "ty-10-1",
      [](const AttemptStatus& s) { return s.phase == AttemptPhase::kRunning; },
      "running");
  absl::StatusOr<std::string> r =
      kube_->Admin("POST", "/nodes/node-0/reclaim",
                   R"({"notice_seconds": 1, "pod_grace_seconds": 0.5})");
  ASSERT_TRUE(r.ok()) << r.status();
  const AttemptStatus s = WaitFor(
      *a, "ty-10-1", [](const AttemptStatus& s) { return IsTerminal(s.phase); },
      "ended");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed) << s.message;
  EXPECT_EQ(s.failure, FailureKind::kSpotReclaim) << s.message;
}

TEST_F(KubeAdapterTest, SignalIsRefusedAndBadRequestsNameTheirField) {
  AddNodes(1);
  std::unique_ptr<KubernetesAdapter> a = Adapter();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->Signal("ty-1-1", 10).code(), absl::StatusCode::kUnimplemented);
  LaunchRequest bad = Request(11, 2, {"node-0"});
  absl::StatusOr<AttemptStatus> s = a->Launch(bad);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("worker_nodes"));
  EXPECT_EQ(CountJobs(), 0);
  EXPECT_EQ(a->Stop("ty-99-1", absl::Seconds(1), StopReason::kCancel).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard::dispatcher::kubernetes
