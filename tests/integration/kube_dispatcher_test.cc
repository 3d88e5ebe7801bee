// The real api, scheduler and dispatcher over PostgreSQL driving the
// Kubernetes API test server (tests/fixtures/local_kube.h) through the
// Kubernetes adapter (docs/kubernetes.md), checked through the api (the job,
// its attempts, its Watch events, the nodes the dispatcher reported) and the
// test server (its Jobs, pods, Events and request log):
//   - a queued job runs as an Indexed Job on a node the scheduler chose and
//     succeeds;
//   - a job whose node is deleted, goes NotReady past node_lost_after, or is
//     a spot node reclaimed under it loses its attempt to the platform, goes
//     back to its queue and its next attempt, on another node, resumes from
//     the first one's last checkpoint; the events say why, with Kubernetes'
//     reason and message;
//   - watches cut and compacted (410 Gone) under running jobs, the API server
//     throttling (429), failing (5xx) and restarting: every job succeeds once,
//     each attempt is one Job, and no transition is missed or repeated;
//   - a cancelled job's Job is suspended and its pods deleted;
//   - an OOMKilled worker fails the job as the user's error.
#include <filesystem>
#include <functional>
#include <map>
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
#include "services/dispatcher/dispatcher.h"
#include "services/lib/domain/job_state.h"
#include "services/scheduler/scheduler_service.h"
#include "tests/fixtures/local_kube.h"
#include "tests/fixtures/subprocess.h"
#include "tests/integration/api_test_harness.h"
#include "tests/integration/dispatch_loop.h"
#include "tests/support/kube/kube_support.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
namespace kube = ::trainyard::dispatcher::kubernetes;
using dispatcher::Dispatcher;
using google::protobuf::util::TimeUtil;
using Json = nlohmann::json;

// The adapter's node_lost_after: how long a worker stays on a NotReady node
// before Kubernetes evicts it (short, for the test).
constexpr absl::Duration kNodeLostAfter = absl::Seconds(2);

// What the adapter's informers list and watch.
constexpr const char* kInformerPaths[] = {
    "/apis/batch/v1/namespaces/trainyard/jobs", "/api/v1/pods",
    "/api/v1/nodes"};

absl::Time TimeOf(const google::protobuf::Timestamp& t) {
  return absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(t));
}

// A job's transitions as "FROM>TO" (">QUEUED" for its submission), in the
// order of its events.
std::vector<std::string> Transitions(const std::vector<v1::JobEvent>& events) {
  std::vector<std::string> out;
  for (const v1::JobEvent& e : events) {
    if (e.type() == v1::JOB_EVENT_TYPE_SUBMITTED) {
      out.push_back(
          absl::StrCat(">", std::string(domain::StateName(e.to_state()))));
    } else if (e.type() == v1::JOB_EVENT_TYPE_STATE_CHANGED) {
      out.push_back(absl::StrCat(std::string(domain::StateName(e.from_state())),
                                 ">",
                                 std::string(domain::StateName(e.to_state()))));
    }
  }
  return out;
}

// The transitions of one attempt that ran to `end` without trouble.
std::vector<std::string> OneAttempt(const std::string& end) {
  return {">QUEUED", "QUEUED>ADMITTED", "ADMITTED>DISPATCHING",
          "DISPATCHING>RUNNING", absl::StrCat("RUNNING>", end)};
}

// The transitions of a job whose first attempt was lost to the platform and
// whose second succeeded.
std::vector<std::string> RecoveredOnce() {
  return {">QUEUED",
          "QUEUED>ADMITTED",
          "ADMITTED>DISPATCHING",
          "DISPATCHING>RUNNING",
          "RUNNING>RECOVERING",
          "RECOVERING>QUEUED",
          "QUEUED>ADMITTED",
          "ADMITTED>DISPATCHING",
          "DISPATCHING>RUNNING",
          "RUNNING>SUCCEEDED"};
}

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

class KubeDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why; !LocalKube::Available(&why)) GTEST_SKIP() << why;
    // --verbose: the server logs every request (method, path, code), which
    // the tests count.
    LocalKube::Options ko;
    ko.extra_args = {"--verbose"};
    absl::StatusOr<std::unique_ptr<LocalKube>> kube = LocalKube::Start(ko);
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

    absl::StatusOr<kube::KubernetesAdapterOptions> o =
        TestAdapterOptions(*kube_, "kubernetes", ck_root_);
    ASSERT_TRUE(o.ok()) << o.status();
    // Pool "spot" exists only in the spot test (AddSpotPool).
    o->settings.pool_flavors = {{"ondemand", "gpu"}, {"spot", "spot"}};
    o->settings.node_lost_after = kNodeLostAfter;
    absl::StatusOr<std::unique_ptr<kube::KubernetesAdapter>> a =
        kube::KubernetesAdapter::Create(*std::move(o));
    ASSERT_TRUE(a.ok()) << a.status();
    adapter_ = *std::move(a);

    absl::StatusOr<std::unique_ptr<scheduler::SchedulerService>> s =
        TestScheduler(harness_->database_url());
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
    absl::StatusOr<std::unique_ptr<Dispatcher>> d =
        TestDispatcher(harness_->database_url(), "kubernetes", adapter_.get());
    ASSERT_TRUE(d.ok()) << d.status();
    dispatcher_ = std::move(*d);
    // The first pass reports the nodes for the scheduler to place on.
    absl::StatusOr<dispatcher::PassReport> p = dispatcher_->RunPass();
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->nodes_reported, 2);
    // Unchanged nodes are not written again (their labels, a map, compare
    // equal).
    p = dispatcher_->RunPass();
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->nodes_reported, 0);
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

  // A job that checkpoints into <checkpoints>/job-<n> and may resume.
  v1::SubmitJobRequest ResumableJob(const std::string& request_id, int n) {
    v1::SubmitJobRequest req = Job(request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->mutable_checkpoint()->set_directory(
        absl::StrCat(ck_root_, "/job-", n));
    spec->mutable_checkpoint()->set_resumable(true);
    spec->mutable_checkpoint()->mutable_interval()->set_seconds(1);
    return req;
  }

  v1::Job Get(int64_t id) { return harness_->GetJob(token_, "acme", id); }

  bool RunUntil(const std::function<bool()>& done, absl::Duration timeout) {
    return ::trainyard::testing::RunUntil(*scheduler_, *dispatcher_, done,
                                          timeout, absl::Milliseconds(200));
  }

  void Script(const Json& script) {
    absl::Status added = AddPodScript(*kube_, script);
    ASSERT_TRUE(added.ok()) << added;
  }

  // The job's events from the api's Watch (from the start of its history),
  // up to the one that ends it.
  std::vector<v1::JobEvent> Events(int64_t id) {
    auto ctx = ApiHarness::Context(token_);
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(20));
    v1::WatchJobsRequest req;
    req.set_parent("tenants/acme");
    req.set_job(absl::StrCat("tenants/acme/jobs/", id));
    req.set_from_start(true);
    auto stub = harness_->jobs();
    auto reader = stub->Watch(ctx.get(), req);
    std::vector<v1::JobEvent> out;
    v1::WatchJobsResponse resp;
    while (reader->Read(&resp)) {
      out.push_back(resp.event());
      if (resp.event().type() == v1::JOB_EVENT_TYPE_STATE_CHANGED &&
          Terminal(resp.event().to_state())) {
        break;
      }
    }
    ctx->TryCancel();
    return out;
  }

  // The STATE_CHANGED event into `to` of attempt `attempt`.
  static v1::JobEvent EventTo(const std::vector<v1::JobEvent>& events,
                              v1::JobState to, int attempt) {
    for (const v1::JobEvent& e : events) {
      if (e.type() == v1::JOB_EVENT_TYPE_STATE_CHANGED && e.to_state() == to &&
          e.attempt() == attempt) {
        return e;
      }
    }
    ADD_FAILURE() << "no event into " << domain::StateName(to)
                  << " for attempt " << attempt;
    return {};
  }

  // Node `node` (its id) as the dispatcher reported it to ClusterService.
  v1::Node Node(const std::string& node) {
    v1::GetNodeRequest req;
    req.set_name(absl::StrCat("clusters/kubernetes/nodes/", node));
    v1::Node out;
    grpc::Status s = harness_->clusters()->GetNode(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }

  // A GET of the test server's API: the parsed answer (null unless 200).
  Json KubeGet(const std::string& path) {
    absl::StatusOr<LocalKube::Response> r = kube_->Request("GET", path);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->code != 200) return nullptr;
    return Json::parse(r->body, nullptr, false);
  }

  // The pods of attempt `name` (label trainyard.dev/name) on the server.
  Json Pods(const std::string& name) {
    Json list =
        KubeGet(absl::StrCat("/api/v1/namespaces/trainyard/"
                             "pods?labelSelector=trainyard.dev%2Fname%3D",
                             name));
    return list.is_object() ? list["items"] : Json::array();
  }

  // The log of attempt `name`'s worker 0 as the fake kubelet wrote it.
  std::string PodLog(const std::string& name) {
    absl::StatusOr<std::string> log = WorkerLog(*kube_, name);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? *log : "";
  }

  // The step of the last checkpoint a pod's log says it wrote (-1: none).
  static int64_t LastCheckpointInLog(const std::string& log) {
    const std::vector<int64_t> steps = FakeCheckpointSteps(log);
    return steps.empty() ? -1 : steps.back();
  }

  // Requests the server answered with `code` whose request line starts with
  // `prefix` (e.g. "POST /apis/batch/v1/namespaces/trainyard/jobs?"),
  // watches left out unless `watches`.
  int Requests(absl::string_view prefix, int code, bool watches = false) {
    int n = 0;
    const std::string log = internal::ReadFileOrEmpty(kube_->log_path());
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      // HH:MM:SS "METHOD PATH HTTP/1.1" CODE SIZE
      const size_t open = line.find('"');
      const size_t close = line.rfind('"');
      if (open == absl::string_view::npos || close <= open) continue;
      const absl::string_view request = line.substr(open + 1, close - open - 1);
      if (!absl::StartsWith(request, prefix)) continue;
      if (!watches && absl::StrContains(request, "watch=true")) continue;
      int got = 0;
      const absl::string_view rest = line.substr(close + 2);
      if (absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &got) &&
          got == code) {
        ++n;
      }
    }
    return n;
  }

  // Lists by the adapter's informers after their first ones.
  int Relists() {
    int lists = 0;
    for (const char* path : kInformerPaths) {
      lists += Requests(absl::StrCat("GET ", path, "?"), 200);
    }
    return lists - 3;
  }

  // Kubernetes Events with `reason` on the server, by involved object name.
  std::map<std::string, int> KubeEvents(const std::string& reason) {
    std::map<std::string, int> out;
    Json list = KubeGet("/api/v1/namespaces/trainyard/events");
    if (!list.is_object()) return out;
    for (const Json& e : list["items"]) {
      if (e.value("reason", "") == reason) {
        ++out[e["involvedObject"].value("name", "")];
      }
    }
    return out;
  }

  // Flavor "spot" (FLAVOR_KIND_SPOT), pool "spot" of the cluster and quota
  // for it in acme's default queue.
  void AddSpotPool() {
    absl::Status s =
        harness_->CreateFlavor("spot", v1::FLAVOR_KIND_SPOT, 700000);
    ASSERT_TRUE(s.ok()) << s;
    s = harness_->CreatePool("kubernetes", "spot", "spot");
    ASSERT_TRUE(s.ok()) << s;
    s = harness_->AddQueueQuota("acme", "default", "spot");
    ASSERT_TRUE(s.ok()) << s;
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
  // Kubernetes' reason and message: PodGC failed the pod of a deleted node.
  EXPECT_EQ(j.attempts(0).message(),
            absl::StrCat("worker 0: node ", node_id,
                         " lost (DeletionByPodGC: PodGC: node no longer "
                         "exists)"));
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

TEST_F(KubeDispatcherTest,
       ANodeNotReadyPastNodeLostAfterLosesTheAttemptAndTheJobResumesElsewhere) {
  // The first attempt trains until stopped, checkpointing; the second
  // (newest script wins) finishes after a second.
  Script({{"selector", "trainyard.dev/job=1"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"run_seconds", nullptr}});
  Script({{"selector", "trainyard.dev/job=1,trainyard.dev/attempt=2"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"run_seconds", 1}});
  const int64_t id = harness_->SubmitJob(token_, ResumableJob("notready", 1));
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(RunUntil(
      [&] {
        const v1::Job j = Get(id);
        return j.state() == v1::JOB_STATE_RUNNING && !j.resume_from().empty();
      },
      absl::Seconds(60)))
      << Get(id).DebugString();
  const std::string node = Get(id).attempts(0).placements(0).node();
  const std::string lost = node.substr(node.rfind('/') + 1);
  const std::string other = lost == "node-0" ? "node-1" : "node-0";

  // The node stops answering (Ready Unknown): the kubelet there writes no
  // more checkpoints, so the last one in its log is where the job resumes.
  const absl::Time not_ready = absl::Now();
  absl::StatusOr<std::string> r =
      kube_->Admin("POST", absl::StrCat("/nodes/", lost, "/notready"),
                   R"({"status": "Unknown"})");
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t last_step = LastCheckpointInLog(PodLog("ty-1-1"));
  ASSERT_GT(last_step, 0);

  // Within node_lost_after the attempt still runs (as read by every look
  // that starts before it has passed), and the node is reported down
  // (nothing new is placed there).
  int looks = 0;
  ASSERT_TRUE(RunUntil(
      [&] {
        const absl::Time now = absl::Now();
        const v1::Job j = Get(id);
        if (now < not_ready + kNodeLostAfter) {
          ++looks;
          EXPECT_EQ(j.state(), v1::JOB_STATE_RUNNING) << j.DebugString();
          EXPECT_EQ(j.attempts_size(), 1);
        }
        return now >= not_ready + kNodeLostAfter - absl::Milliseconds(400);
      },
      absl::Seconds(10)));
  EXPECT_GE(looks, 1);
  const v1::Node down = Node(lost);
  EXPECT_EQ(down.state(), v1::NODE_STATE_DOWN) << down.DebugString();
  EXPECT_TRUE(absl::StrContains(down.state_message(),
                                "Ready Unknown: NodeStatusUnknown"))
      << down.state_message();
  EXPECT_EQ(Node(other).state(), v1::NODE_STATE_READY);

  // Then Kubernetes evicts the worker; the job recovers on the other node.
  ASSERT_TRUE(
      RunUntil([&] { return Get(id).state() == v1::JOB_STATE_SUCCEEDED; },
               absl::Seconds(60)))
      << Get(id).DebugString();
  const v1::Job j = Get(id);
  ASSERT_EQ(j.attempts_size(), 2) << j.DebugString();
  const v1::Attempt& first = j.attempts(0);
  EXPECT_EQ(first.failure_class(), v1::FAILURE_CLASS_NODE_FAILURE);
  EXPECT_EQ(first.message(),
            absl::StrCat("worker 0: node ", lost,
                         " lost (DeletionByTaintManager: Taint manager: "
                         "deleting due to NoExecute taint)"));
  // Not before node_lost_after (Kubernetes' times are whole seconds).
  EXPECT_GT(TimeOf(first.end_time()),
            not_ready + kNodeLostAfter - absl::Seconds(1))
      << first.DebugString();
  // No checkpoint after the node went: at least the time it stayed lost is
  // lost work, for each of its 4 GPUs.
  EXPECT_GE(first.lost_gpu_seconds(),
            4 * absl::ToInt64Seconds(kNodeLostAfter - absl::Seconds(1)));
  const v1::Attempt& second = j.attempts(1);
  EXPECT_EQ(second.placements(0).node(),
            absl::StrCat("clusters/kubernetes/nodes/", other));
  EXPECT_EQ(second.resumed_from(),
            absl::StrCat(ck_root_, "/job-1/step-", last_step));
  EXPECT_EQ(second.failure_class(), v1::FAILURE_CLASS_UNSPECIFIED);
  EXPECT_EQ(second.exit_code(), 0);

  // The events: one loss, one recovery, with Kubernetes' reason and message.
  const std::vector<v1::JobEvent> events = Events(id);
  EXPECT_EQ(Transitions(events), RecoveredOnce());
  const v1::JobEvent lost_event = EventTo(events, v1::JOB_STATE_RECOVERING, 1);
  EXPECT_EQ(lost_event.reason(), "NODE_FAILURE");
  EXPECT_EQ(lost_event.message(),
            absl::StrCat("ty-1-1: worker 0: node ", lost,
                         " lost (DeletionByTaintManager: Taint manager: "
                         "deleting due to NoExecute taint)"));
  EXPECT_EQ(EventTo(events, v1::JOB_STATE_QUEUED, 1).message(),
            absl::StrCat("after NODE_FAILURE the next attempt resumes from ",
                         ck_root_, "/job-1/step-", last_step));

  // The node comes back: reported ready again.
  r = kube_->Admin("POST", absl::StrCat("/nodes/", lost, "/ready"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(
      RunUntil([&] { return Node(lost).state() == v1::NODE_STATE_READY; },
               absl::Seconds(10)))
      << Node(lost).DebugString();
}

TEST_F(KubeDispatcherTest,
       ASpotNodeReclaimedUnderAJobResumesItFromItsShutdownCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(AddSpotPool());
  absl::StatusOr<std::string> added =
      kube_->Admin("POST", "/nodes",
                   R"({"names": ["spot-0", "spot-1"], "gpus": 8, "spot": true,
          "gpu_product": "NVIDIA-H100-80GB-HBM3",
          "labels": {"cloud.google.com/gke-nodepool": "spot"}})");
  ASSERT_TRUE(added.ok()) << added.status();
  // The first attempt checkpoints when it gets SIGTERM; the second finishes.
  Script({{"selector", "trainyard.dev/job=1"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"checkpoint_on_term", true},
          {"run_seconds", nullptr}});
  Script({{"selector", "trainyard.dev/job=1,trainyard.dev/attempt=2"},
          {"checkpoint_every", 0.3},
          {"checkpoint_steps", 10},
          {"run_seconds", 1}});
  v1::SubmitJobRequest req = ResumableJob("spot", 1);
  req.mutable_job()->mutable_spec()->set_spot_policy(v1::SPOT_POLICY_REQUIRED);
  const int64_t id = harness_->SubmitJob(token_, req);
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(RunUntil(
      [&] {
        const v1::Job j = Get(id);
        return j.state() == v1::JOB_STATE_RUNNING && !j.resume_from().empty();
      },
      absl::Seconds(60)))
      << Get(id).DebugString();
  const std::string node = Get(id).attempts(0).placements(0).node();
  const std::string reclaimed = node.substr(node.rfind('/') + 1);
  ASSERT_TRUE(reclaimed == "spot-0" || reclaimed == "spot-1") << node;
  const std::string other = reclaimed == "spot-0" ? "spot-1" : "spot-0";

  // The cloud reclaims the node: SIGTERM now (the worker checkpoints), the
  // pod fails a second later, the node goes after two.
  absl::StatusOr<std::string> r =
      kube_->Admin("POST", absl::StrCat("/nodes/", reclaimed, "/reclaim"),
                   R"({"notice_seconds": 2, "pod_grace_seconds": 1})");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string log = PodLog("ty-1-1");
  ASSERT_TRUE(absl::StrContains(log, "received SIGTERM (node shutdown)"))
      << log;
  const int64_t last_step = LastCheckpointInLog(log);
  ASSERT_GT(last_step, 0) << log;

  ASSERT_TRUE(
      RunUntil([&] { return Get(id).state() == v1::JOB_STATE_SUCCEEDED; },
               absl::Seconds(60)))
      << Get(id).DebugString();
  const v1::Job j = Get(id);
  ASSERT_EQ(j.attempts_size(), 2) << j.DebugString();
  const v1::Attempt& first = j.attempts(0);
  EXPECT_EQ(first.failure_class(), v1::FAILURE_CLASS_SPOT_RECLAIM);
  const std::string why = absl::StrCat(
      "worker 0: node ", reclaimed,
      " shut down (spot capacity reclaimed) (TerminationByKubelet: Pod was "
      "terminated in response to imminent node shutdown.)");
  EXPECT_EQ(first.message(), why);
  // The shutdown checkpoint bounds the work lost to the pod's grace
  // (a second, plus Kubernetes' whole-second times), for 4 GPUs.
  EXPECT_LE(first.lost_gpu_seconds(), 4 * 3) << first.DebugString();
  const v1::Attempt& second = j.attempts(1);
  EXPECT_EQ(second.placements(0).node(),
            absl::StrCat("clusters/kubernetes/nodes/", other));
  EXPECT_EQ(second.flavor(), "flavors/spot");
  EXPECT_EQ(second.resumed_from(),
            absl::StrCat(ck_root_, "/job-1/step-", last_step));
  EXPECT_EQ(second.exit_code(), 0);

  const std::vector<v1::JobEvent> events = Events(id);
  EXPECT_EQ(Transitions(events), RecoveredOnce());
  const v1::JobEvent lost_event = EventTo(events, v1::JOB_STATE_RECOVERING, 1);
  EXPECT_EQ(lost_event.reason(), "SPOT_RECLAIM");
  EXPECT_EQ(lost_event.message(), absl::StrCat("ty-1-1: ", why));

  // The reclaimed node is gone from the cluster: reported down.
  ASSERT_TRUE(
      RunUntil([&] { return Node(reclaimed).state() == v1::NODE_STATE_DOWN; },
               absl::Seconds(10)))
      << Node(reclaimed).DebugString();
}

TEST_F(KubeDispatcherTest,
       WatchesCutAndCompactedUnderRunningJobsMissAndRepeatNoTransition) {
  Script({{"selector", "trainyard.dev/name"}, {"run_seconds", 2}});
  constexpr int kJobs = 4;  // 4 × 4 GPUs: all run at once on the 2 nodes
  for (int i = 1; i <= kJobs; ++i) {
    ASSERT_EQ(harness_->SubmitJob(token_, Job(absl::StrCat("cut-", i))), i);
  }
  // Every third round, every watch is cut and every resourceVersion before
  // now is compacted: the informers' next watches get 410 Gone and list
  // again.
  int round = 0, cuts = 0;
  ASSERT_TRUE(RunUntil(
      [&] {
        if (++round % 3 == 0) {
          EXPECT_TRUE(kube_->Admin("POST", "/compact").ok());
          EXPECT_TRUE(kube_->Admin("POST", "/cut-watches").ok());
          ++cuts;
        }
        for (int i = 1; i <= kJobs; ++i) {
          if (Get(i).state() != v1::JOB_STATE_SUCCEEDED) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  ASSERT_GE(cuts, 3);
  for (int i = 1; i <= kJobs; ++i) {
    SCOPED_TRACE(absl::StrCat("job ", i));
    const v1::Job j = Get(i);
    ASSERT_EQ(j.attempts_size(), 1) << j.DebugString();
    EXPECT_EQ(j.attempts(0).exit_code(), 0);
    EXPECT_EQ(j.attempts(0).failure_class(), v1::FAILURE_CLASS_UNSPECIFIED);
    EXPECT_EQ(Transitions(Events(i)), OneAttempt("SUCCEEDED"));
  }
  // At each cut at least one informer (the kinds not written last) was
  // behind the compaction and lists again (after the last cut, maybe only
  // now); each attempt was one Job with one pod.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Relists() < cuts && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GE(Relists(), cuts);
  EXPECT_EQ(Requests("POST /apis/batch/v1/namespaces/trainyard/jobs?", 201),
            kJobs);
  std::map<std::string, int> pods_created = KubeEvents("SuccessfulCreate");
  for (int i = 1; i <= kJobs; ++i) {
    EXPECT_EQ(pods_created[absl::StrCat("ty-", i, "-1")], 1) << i;
  }
}

TEST_F(KubeDispatcherTest,
       ThrottlingFailingAndRestartingApiServerLosesAndRepeatsNothing) {
  Script({{"selector", "trainyard.dev/name"}, {"run_seconds", 4}});
  // The first create of a Job is answered 503 (a create the client does not
  // repeat: the next pass looks for the Job before creating it again);
  // the other requests get twice 429 (Retry-After 1 s), then 500 and an
  // HTML 502 (retried by the client).
  for (const char* fault : {R"({"status": 503, "count": 1,
            "path_prefix": "/apis/batch/v1/namespaces/trainyard/jobs"})",
                            R"({"status": 429, "count": 2, "retry_after": 1})",
                            R"({"status": 500, "count": 1})",
                            R"({"html": true, "status": 502, "count": 1})"}) {
    ASSERT_TRUE(kube_->Admin("POST", "/faults", fault).ok());
  }
  constexpr int kJobs = 4;
  for (int i = 1; i <= kJobs; ++i) {
    ASSERT_EQ(harness_->SubmitJob(token_, Job(absl::StrCat("fault-", i))), i);
  }
  // Every job started (4 s runs: normally all run at once).
  int running = 0;
  ASSERT_TRUE(RunUntil(
      [&] {
        running = 0;
        for (int i = 1; i <= kJobs; ++i) {
          const v1::JobState s = Get(i).state();
          if (s != v1::JOB_STATE_RUNNING && s != v1::JOB_STATE_SUCCEEDED) {
            return false;
          }
          running += s == v1::JOB_STATE_RUNNING;
        }
        return true;
      },
      absl::Seconds(60)));
  ASSERT_GE(running, 1);
  // Mid-run the API server restarts (its watches must list again), and
  // throttles once more.
  ASSERT_TRUE(kube_->Restart().ok());
  ASSERT_TRUE(kube_
                  ->Admin("POST", "/faults",
                          R"({"status": 429, "count": 1, "retry_after": 1})")
                  .ok());
  ASSERT_TRUE(
      kube_->Admin("POST", "/faults", R"({"status": 504, "count": 2})").ok());
  ASSERT_TRUE(RunUntil(
      [&] {
        for (int i = 1; i <= kJobs; ++i) {
          if (!Terminal(Get(i).state())) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  for (int i = 1; i <= kJobs; ++i) {
    SCOPED_TRACE(absl::StrCat("job ", i));
    const v1::Job j = Get(i);
    EXPECT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED);
    ASSERT_EQ(j.attempts_size(), 1) << j.DebugString();
    EXPECT_EQ(j.attempts(0).exit_code(), 0);
    EXPECT_EQ(j.attempts(0).lost_gpu_seconds(), 0);
    // Its one pod ran its whole script (Kubernetes' times are whole
    // seconds).
    EXPECT_GE(
        TimeOf(j.attempts(0).end_time()) - TimeOf(j.attempts(0).start_time()),
        absl::Seconds(3))
        << j.attempts(0).DebugString();
    EXPECT_EQ(Transitions(Events(i)), OneAttempt("SUCCEEDED"));
  }
  // Every fault was served; each attempt was created once, as one pod.
  EXPECT_EQ(Requests("", 429, true), 2 + 1);
  EXPECT_EQ(Requests("", 503, true), 1);
  EXPECT_EQ(Requests("POST /apis/batch/v1/namespaces/trainyard/jobs?", 503), 1);
  EXPECT_EQ(Requests("", 500, true), 1);
  EXPECT_EQ(Requests("", 502, true), 1);
  EXPECT_EQ(Requests("", 504, true), 2);
  // After the restart the watches behind its resourceVersion were refused
  // (410) and each of those informers listed again. (A watch that falls
  // behind the server's window of events, as a slow one may on a loaded
  // machine, is told so by an ERROR event in its stream and lists again
  // too: the log shows no 410 for that one, so at least as many lists.)
  int gone = 0;
  for (const char* path : kInformerPaths) {
    gone += Requests(absl::StrCat("GET ", path, "?"), 410, /*watches=*/true);
  }
  EXPECT_GE(gone, 1);
  EXPECT_GE(Relists(), gone);
  EXPECT_EQ(Requests("POST /apis/batch/v1/namespaces/trainyard/jobs?", 201),
            kJobs);
  std::map<std::string, int> pods_created = KubeEvents("SuccessfulCreate");
  for (int i = 1; i <= kJobs; ++i) {
    EXPECT_EQ(pods_created[absl::StrCat("ty-", i, "-1")], 1) << i;
  }
}

TEST_F(KubeDispatcherTest, ACancelledJobsJobIsSuspendedAndItsPodsDeleted) {
  Script({{"selector", "trainyard.dev/job=1"}, {"run_seconds", nullptr}});
  const int64_t id = harness_->SubmitJob(token_, Job("cancel"));
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(RunUntil([&] { return Get(id).state() == v1::JOB_STATE_RUNNING; },
                       absl::Seconds(60)))
      << Get(id).DebugString();
  ASSERT_EQ(Pods("ty-1-1").size(), 1u);
  v1::CancelJobRequest cancel;
  cancel.set_name("tenants/acme/jobs/1");
  cancel.set_reason("not needed");
  v1::Job out;
  grpc::Status c =
      harness_->jobs()->Cancel(ApiHarness::Context(token_).get(), cancel, &out);
  ASSERT_TRUE(c.ok()) << c.error_message();
  // Until the job is recorded cancelled (and its Job deleted), the Job is
  // seen suspended with the stop's reason.
  bool suspended = false;
  std::string stop_reason;
  ASSERT_TRUE(RunUntil(
      [&] {
        const Json job =
            KubeGet("/apis/batch/v1/namespaces/trainyard/jobs/ty-1-1");
        if (job.is_object() && job["spec"].value("suspend", false)) {
          suspended = true;
          stop_reason = job["metadata"]["annotations"].value(
              std::string(kube::kAnnotationStopReason), "");
        }
        return Get(id).state() == v1::JOB_STATE_CANCELLED;
      },
      absl::Seconds(30)))
      << Get(id).DebugString();
  EXPECT_TRUE(suspended);
  EXPECT_EQ(stop_reason, "cancel");
  const v1::Job j = Get(id);
  ASSERT_EQ(j.attempts_size(), 1);
  EXPECT_EQ(j.attempts(0).failure_class(), v1::FAILURE_CLASS_CANCELLED);
  EXPECT_EQ(j.attempts(0).message(), "cancelled by Trainyard");
  EXPECT_EQ(j.state_message(),
            "cancelled by users/alice: not needed; ty-1-1 was stopped");
  // Nothing of it is left on the server: no pod, no Job, no Service.
  EXPECT_EQ(Pods("ty-1-1").size(), 0u);
  EXPECT_TRUE(
      KubeGet("/apis/batch/v1/namespaces/trainyard/jobs/ty-1-1").is_null());
  EXPECT_TRUE(
      KubeGet("/api/v1/namespaces/trainyard/services/ty-1-1").is_null());
  EXPECT_EQ(Transitions(Events(id)), OneAttempt("CANCELLED"));
}

TEST_F(KubeDispatcherTest, AnOOMKilledWorkerFailsTheJobAsTheUsersError) {
  Script({{"selector", "trainyard.dev/job=1"},
          {"run_seconds", 3},
          {"reason", "OOMKilled"}});
  v1::SubmitJobRequest req = Job("oom");
  req.mutable_job()->mutable_spec()->mutable_retry()->set_max_attempts(1);
  const int64_t id = harness_->SubmitJob(token_, req);
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(
      RunUntil([&] { return Terminal(Get(id).state()); }, absl::Seconds(60)))
      << Get(id).DebugString();
  const v1::Job j = Get(id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_FAILED);
  ASSERT_EQ(j.attempts_size(), 1);
  EXPECT_EQ(j.attempts(0).failure_class(), v1::FAILURE_CLASS_USER_ERROR);
  EXPECT_EQ(j.attempts(0).exit_code(), 137);
  EXPECT_EQ(j.attempts(0).message(), "worker 0 OOMKilled (exit 137)");
  const std::vector<v1::JobEvent> events = Events(id);
  EXPECT_EQ(Transitions(events), OneAttempt("FAILED"));
  const v1::JobEvent failed = EventTo(events, v1::JOB_STATE_FAILED, 1);
  EXPECT_EQ(failed.reason(), "USER_ERROR");
  EXPECT_EQ(failed.message(), "ty-1-1: worker 0 OOMKilled (exit 137)");
}

}  // namespace
}  // namespace trainyard::testing
