// The real api, scheduler and dispatcher over PostgreSQL driving the
// Kubernetes API test server (tests/fixtures/local_kube.h) through the
// Kubernetes adapter (docs/kubernetes.md): a job submitted to the queue runs
// as an Indexed Job on a node the scheduler chose and succeeds; a job whose
// node dies under it goes back to its queue and its next attempt, on the
// other node, resumes from the checkpoint the first one wrote.
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/kubernetes/kube_adapter.h"
#include "services/dispatcher/dispatcher.h"
#include "services/scheduler/scheduler_service.h"
#include "tests/fixtures/local_kube.h"
#include "tests/integration/api_test_harness.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
namespace kube = ::trainyard::dispatcher::kubernetes;
using dispatcher::Dispatcher;
using Json = nlohmann::json;

class KubeDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why; !LocalKube::Available(&why)) GTEST_SKIP() << why;
    absl::StatusOr<std::unique_ptr<LocalKube>> kube = LocalKube::Start();
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = *std::move(kube);
    ck_root_ = kube_->dir() + "/checkpoints";
    std::filesystem::create_directories(ck_root_);
    // Two 8-GPU nodes of GKE node pool "ondemand".
    absl::StatusOr<std::string> nodes = kube_->Admin(
        "POST", "/nodes",
        R"({"count": 2, "gpus": 8, "gpu_product": "NVIDIA-H100-80GB-HBM3",
            "labels": {"cloud.google.com/gke-nodepool": "ondemand"}})");
    ASSERT_TRUE(nodes.ok()) << nodes.status();

    absl::StatusOr<std::unique_ptr<ApiHarness>> h = ApiHarness::Start();
    ASSERT_TRUE(h.ok()) << h.status();
    harness_ = std::move(*h);
    ASSERT_TRUE(harness_->SeedTenant("acme").ok());
    token_ = harness_->Token("users/alice", v1::ROLE_TENANT_ADMIN, "acme");
    absl::Status seeded = harness_->SeedCluster(
        "kubernetes", v1::BACKEND_KIND_KUBERNETES, {{"ondemand", "gpu"}});
    ASSERT_TRUE(seeded.ok()) << seeded;

    kube::KubernetesAdapterOptions o;
    absl::StatusOr<kube::KubeConfig> config =
        kube::LoadKubeconfig(kube_->kubeconfig_path());
    ASSERT_TRUE(config.ok()) << config.status();
    o.config = *config;
    o.client.cluster = "kubernetes";
    o.client.qps = 0;
    o.settings.checkpoint_volume = {kube::CheckpointVolume::Kind::kHostPath,
                                    ck_root_};
    o.settings.checkpoint_mount_path = ck_root_;
    o.settings.gpu_models = {{"NVIDIA-H100-80GB-HBM3", "H100"}};
    o.settings.pool_flavors = {{"ondemand", "gpu"}};
    absl::StatusOr<std::unique_ptr<kube::KubernetesAdapter>> a =
        kube::KubernetesAdapter::Create(std::move(o));
    ASSERT_TRUE(a.ok()) << a.status();
    adapter_ = *std::move(a);

    scheduler::SchedulerOptions so;
    so.postgres_url = harness_->database_url();
    so.redis_addr = "";
    absl::StatusOr<std::unique_ptr<scheduler::SchedulerService>> s =
        scheduler::SchedulerService::Create(so);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
    absl::StatusOr<std::unique_ptr<Dispatcher>> d = Dispatcher::Create(
        {.postgres_url = harness_->database_url(), .cluster = "kubernetes"},
        adapter_.get());
    ASSERT_TRUE(d.ok()) << d.status();
    dispatcher_ = std::move(*d);
    // The first pass reports the nodes for the scheduler to place on.
    absl::StatusOr<dispatcher::PassReport> p = dispatcher_->RunPass();
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->nodes_reported, 2);
  }

  void TearDown() override {
    dispatcher_.reset();
    adapter_.reset();
  }

  v1::SubmitJobRequest Job(const std::string& request_id) {
    v1::SubmitJobRequest req = MinimalSubmit("acme", request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_image("trainer:1");
    spec->mutable_resources()->set_gpus(4);
    return req;
  }

  v1::Job Get(int64_t id) { return harness_->GetJob(token_, "acme", id); }

  bool RunUntil(const std::function<bool()>& done, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      absl::StatusOr<scheduler::CycleReport> c = scheduler_->RunCycle();
      EXPECT_TRUE(c.ok()) << c.status();
      absl::StatusOr<dispatcher::PassReport> p = dispatcher_->RunPass();
      EXPECT_TRUE(p.ok()) << p.status();
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(200));
    }
    return false;
  }

  void Script(const Json& script) {
    Json body = script;
    body["namespace"] = "trainyard";
    absl::StatusOr<std::string> r =
        kube_->Admin("POST", "/scripts", body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
  }

  std::unique_ptr<LocalKube> kube_;
  std::string ck_root_;
  std::unique_ptr<ApiHarness> harness_;
  std::string token_;
  std::unique_ptr<kube::KubernetesAdapter> adapter_;
  std::unique_ptr<scheduler::SchedulerService> scheduler_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

TEST_F(KubeDispatcherTest, AQueuedJobRunsAsAnIndexedJobAndSucceeds) {
  Script({{"selector", "trainyard.dev/job=1"},
          {"run_seconds", 1},
          {"log", {"hello from the fake kubelet"}}});
  const int64_t id = harness_->SubmitJob(token_, Job("one"));
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(
      RunUntil([&] { return Get(id).state() == v1::JOB_STATE_SUCCEEDED; },
               absl::Seconds(60)))
      << Get(id).DebugString();
  const v1::Job j = Get(id);
  ASSERT_EQ(j.attempts_size(), 1);
  EXPECT_EQ(j.attempts(0).backend_job_name(), "ty-1-1");
  ASSERT_EQ(j.attempts(0).placements_size(), 1);
  EXPECT_TRUE(absl::StartsWith(j.attempts(0).placements(0).node(),
                               "clusters/kubernetes/nodes/node-"))
      << j.attempts(0).placements(0).node();
  EXPECT_EQ(j.attempts(0).exit_code(), 0);
}

TEST_F(KubeDispatcherTest, ALostNodesJobResumesFromItsCheckpointOnTheOther) {
  Script({{"selector", "trainyard.dev/job=1"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"run_seconds", 30}});
  v1::SubmitJobRequest req = Job("resumable");
  v1::JobSpec* spec = req.mutable_job()->mutable_spec();
  spec->mutable_checkpoint()->set_directory(ck_root_ + "/job-1");
  spec->mutable_checkpoint()->set_resumable(true);
  spec->mutable_checkpoint()->mutable_interval()->set_seconds(1);
  const int64_t id = harness_->SubmitJob(token_, req);
  ASSERT_EQ(id, 1);
  // Running, with a checkpoint recorded as its resume point.
  ASSERT_TRUE(RunUntil(
      [&] {
        const v1::Job j = Get(id);
        return j.state() == v1::JOB_STATE_RUNNING && !j.resume_from().empty();
      },
      absl::Seconds(60)))
      << Get(id).DebugString();
  const v1::Job running = Get(id);
  const std::string node = running.attempts(0).placements(0).node();
  const std::string node_id = node.substr(node.rfind('/') + 1);
  // The node goes away (deleted, as a cloud's autoscaler or a crash does).
  absl::StatusOr<std::string> r =
      kube_->Admin("POST", absl::StrCat("/nodes/", node_id, "/delete"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(
      RunUntil([&] { return Get(id).attempts_size() >= 2; }, absl::Seconds(60)))
      << Get(id).DebugString();
  ASSERT_TRUE(RunUntil(
      [&] {
        const v1::Job j = Get(id);
        return j.attempts_size() >= 2 && j.attempts(1).has_start_time() &&
               !j.attempts(1).has_end_time();
      },
      absl::Seconds(60)))
      << Get(id).DebugString();
  const v1::Job j = Get(id);
  EXPECT_EQ(j.attempts(0).failure_class(), v1::FAILURE_CLASS_NODE_FAILURE)
      << j.attempts(0).DebugString();
  // The next attempt runs on the other node, from the first one's last
  // checkpoint.
  EXPECT_NE(j.attempts(1).placements(0).node(), node);
  // At least the checkpoint seen while it ran (a later one may have landed
  // before the node went).
  int64_t seen = 0, resumed = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      running.resume_from().substr(running.resume_from().rfind('-') + 1),
      &seen))
      << running.resume_from();
  ASSERT_TRUE(absl::SimpleAtoi(j.attempts(1).resumed_from().substr(
                                   j.attempts(1).resumed_from().rfind('-') + 1),
                               &resumed))
      << j.attempts(1).resumed_from();
  EXPECT_GE(resumed, seen);
  EXPECT_GT(seen, 0);
  EXPECT_TRUE(
      absl::StartsWith(j.attempts(1).resumed_from(), ck_root_ + "/job-1/step-"))
      << j.attempts(1).resumed_from();
}

}  // namespace
}  // namespace trainyard::testing
