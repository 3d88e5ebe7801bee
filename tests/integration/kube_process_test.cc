// The `trainyard` services as separate processes against the Kubernetes API
// test server started as the quick start starts it
// (deploy/kubernetes/testserver/start.sh), over their own PostgreSQL and
// Redis (docs/kubernetes.md, "Running it"):
//
//   - QuickStartRunsAJobOnKubernetes: docs/kubernetes.md's quick start step
//     by step — start.sh (nodes and pod script through the server's admin
//     API), `trainyard migrate`, one `trainyard all --backend=kubernetes
//     --kubeconfig=DIR/kubeconfig --kube_settings=DIR/settings.conf`
//     process, `trainyard apply` of deploy/kubernetes/testserver/
//     demo.textproto and cluster.textproto, `yard submit -f DIR/job.yaml`,
//     `yard wait`, `yard logs`, `yard checkpoints` (and `kubectl get` where
//     kubectl is installed) — runs the 2-worker job to SUCCEEDED as one Indexed
//     Job of two pods on the placed nodes, with the checkpoints its pods wrote.
//
//   - KilledDispatcherLeavesOneKubernetesJobPerAttempt: `trainyard api`,
//     `trainyard scheduler` and `trainyard dispatcher --backend=kubernetes`,
//     each its own process; jobs are submitted while the dispatcher is killed
//     -9 again and again (seeded: at random moments, the moment a job is
//     DISPATCHING, and by the dispatcher itself through its fault-injection
//     point TRAINYARD_FAULT_KILL_AFTER_LAUNCHES, right after the API server
//     accepted the Job and before the dispatcher recorded it; the first
//     dispatcher always has it) and restarted. Checked: every job ends
//     exactly once, SUCCEEDED; the kills did land between "created" and
//     "recorded"; and a watch on the server's Jobs from the start saw one Job
//     (one uid) per attempt name, the one the attempt recorded.
//
// Environment: TRAINYARD_BIN (set by CTest), TRAINYARD_KUBE_CRASH_SEED
// (default 1), TRAINYARD_KUBE_CRASH_JOBS (default 16).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "services/dispatcher/adapters/kubernetes/kube_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_config.h"
#include "services/dispatcher/adapters/kubernetes/kube_watch.h"
#include "tests/fixtures/local_kube.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/subprocess.h"
#include "tests/fixtures/trainyard_process.h"
#include "tests/integration/process_stack.h"
#include "trainyard/v1/job.grpc.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
namespace fx = ::trainyard::testing::internal;
namespace kube = ::trainyard::dispatcher::kubernetes;
using Json = nlohmann::json;

constexpr absl::Duration kChaos = absl::Seconds(15);
constexpr int kMinKills = 6;
constexpr char kJobs[] = "/apis/batch/v1/namespaces/trainyard/jobs";
constexpr char kPods[] = "/api/v1/namespaces/trainyard/pods";

std::string Label(const Json& object, const std::string& key) {
  const Json& labels = object["metadata"].value("labels", Json::object());
  return labels.contains(key) ? labels[key].get<std::string>() : "";
}

// Every Job and pod of namespace trainyard the server ever showed, from a
// watch started before the dispatcher: each Job name's uids (a second uid is
// a second Job for one attempt), and each object's last state.
class ServerHistory {
 public:
  explicit ServerHistory(kube::KubeClient* client)
      : jobs_(client, kJobs, {},
              [this](kube::EventType, const Json& job) {
                absl::MutexLock l(&mu_);
                const std::string name = job["metadata"]["name"];
                job_uids_[name].insert(job["metadata"]["uid"]);
                last_job_[name] = job;
              }),
        pods_(client, kPods, {}, [this](kube::EventType, const Json& pod) {
          absl::MutexLock l(&mu_);
          last_pod_[pod["metadata"]["name"].get<std::string>()] = pod;
        }) {}

  bool Start() {
    jobs_.Start();
    pods_.Start();
    return jobs_.WaitForSync(absl::Seconds(30)) &&
           pods_.WaitForSync(absl::Seconds(30));
  }

  std::map<std::string, std::set<std::string>> JobUids() const {
    absl::MutexLock l(&mu_);
    return job_uids_;
  }
  std::optional<Json> LastJob(const std::string& name) const {
    absl::MutexLock l(&mu_);
    auto it = last_job_.find(name);
    if (it == last_job_.end()) return std::nullopt;
    return it->second;
  }
  // The last state of every pod of Job `name`, by pod name.
  std::map<std::string, Json> PodsOf(const std::string& name) const {
    absl::MutexLock l(&mu_);
    std::map<std::string, Json> pods;
    for (const auto& [pod_name, pod] : last_pod_) {
      if (Label(pod, "batch.kubernetes.io/job-name") == name) {
        pods[pod_name] = pod;
      }
    }
    return pods;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::set<std::string>> job_uids_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Json> last_job_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Json> last_pod_ ABSL_GUARDED_BY(mu_);
  // Last: stopped (by their destructors) before the maps go.
  kube::Informer jobs_;
  kube::Informer pods_;
};

class KubeProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    // What the test server needs (python3, jsonschema, openssl, schemas).
    if (!LocalKube::Available(&why)) {
      skip_reason_ = new std::string(why);
      return;
    }
    absl::StatusOr<std::unique_ptr<LocalPostgres>> pg = LocalPostgres::Start();
    if (!pg.ok()) {
      start_error_ = new std::string(pg.status().ToString());
      return;
    }
    pg_ = pg->release();
    absl::StatusOr<std::unique_ptr<LocalRedis>> redis = LocalRedis::Start();
    if (!redis.ok()) {
      start_error_ = new std::string(redis.status().ToString());
      return;
    }
    redis_ = redis->release();
  }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_NO_FATAL_FAILURE(stack_.SetUp(pg_, redis_, "trainyard-kubeproc-"));
    kube_dir_ = stack_.dir() + "/kube";
  }

  void TearDown() override {
    history_.reset();
    client_.reset();
    if (started_) {
      fx::SpawnOptions stop;
      stop.argv = {"/bin/bash", Script("stop.sh"), "--state-dir", kube_dir_};
      stop.log_path = kube_dir_ + "-stop.log";
      EXPECT_TRUE(fx::RunToCompletion(stop, absl::Seconds(30)).ok());
    }
  }

  static std::string Script(const std::string& name) {
    return SourceDir() + "/deploy/kubernetes/testserver/" + name;
  }

  // `bash deploy/kubernetes/testserver/start.sh` into the test's dir (a free
  // port; stopped with the test binary at the latest), then a watch of its
  // Jobs and pods.
  void StartKube(const std::vector<std::string>& options) {
    fx::SpawnOptions start;
    start.argv = {"/bin/bash",   Script("start.sh"),
                  "--state-dir", kube_dir_,
                  "--port",      "0",
                  "--watch-pid", absl::StrCat(getpid())};
    for (const std::string& o : options) start.argv.push_back(o);
    start.log_path = kube_dir_ + "-start.log";
    started_ = true;
    absl::Status s = fx::RunToCompletion(start, absl::Seconds(60));
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<kube::KubeConfig> config =
        kube::LoadKubeconfig(kube_dir_ + "/kubeconfig");
    ASSERT_TRUE(config.ok()) << config.status();
    client_ = std::make_unique<kube::KubeClient>(
        *config, kube::KubeClientOptions{.qps = 0});
    history_ = std::make_unique<ServerHistory>(client_.get());
    ASSERT_TRUE(history_->Start()) << "the watch of the test server's Jobs "
                                      "and pods did not sync";
  }

  // The Job names (attempts) the server holds now; nullopt when the list
  // failed.
  std::optional<std::set<std::string>> ServerJobs() {
    absl::StatusOr<Json> list = client_->List(kJobs, {});
    if (!list.ok()) {
      ADD_FAILURE() << list.status();
      return std::nullopt;
    }
    std::set<std::string> names;
    for (const Json& job : (*list)["items"]) {
      names.insert(job["metadata"]["name"].get<std::string>());
    }
    return names;
  }

  // A command of the docs (yard, kubectl) run to completion with `env`: its
  // output, or a failure naming it.
  std::string Command(std::vector<std::string> argv,
                      std::vector<std::string> env) {
    fx::SpawnOptions spawn;
    spawn.argv = std::move(argv);
    spawn.env = std::move(env);
    spawn.log_path =
        absl::StrCat(stack_.dir(), "/command-", ++commands_, ".log");
    absl::Status s = fx::RunToCompletion(spawn, absl::Seconds(120));
    EXPECT_TRUE(s.ok()) << absl::StrJoin(spawn.argv, " ") << ": " << s;
    return fx::ReadFileOrEmpty(spawn.log_path);
  }
  std::string Yard(const std::vector<std::string>& args,
                   const std::string& token) {
    std::vector<std::string> argv = {SourceDir() + "/clients/python/bin/yard"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Command(argv, {"TRAINYARD_ADDR=" + stack_.api_addr(),
                          "TRAINYARD_TOKEN=" + token});
  }

  inline static LocalPostgres* pg_ = nullptr;
  inline static LocalRedis* redis_ = nullptr;
  inline static std::string* skip_reason_ = nullptr;
  inline static std::string* start_error_ = nullptr;
  ProcessStack stack_;
  std::string kube_dir_;
  bool started_ = false;
  int commands_ = 0;
  std::unique_ptr<kube::KubeClient> client_;
  std::unique_ptr<ServerHistory> history_;
};

TEST_F(KubeProcessTest, QuickStartRunsAJobOnKubernetes) {
  // docs/kubernetes.md, "A quick start against the test server": the server
  // as start.sh starts it (its defaults), one `trainyard all` process with
  // the kubeconfig and settings start.sh wrote (the test's own database,
  // Redis and port instead of the stack's defaults).
  ASSERT_NO_FATAL_FAILURE(StartKube({}));
  TrainyardService* all = stack_.AddService(
      "all", stack_.Argv({"all", "--backend=kubernetes",
                          "--kubeconfig=" + kube_dir_ + "/kubeconfig",
                          "--kube_settings=" + kube_dir_ + "/settings.conf",
                          "--grpc_listen=" + stack_.api_addr()}));
  ASSERT_TRUE(all->Start().ok());
  ASSERT_NO_FATAL_FAILURE(
      stack_.Apply(SourceDir() + "/deploy/local/demo-tenant.textproto", all));
  ASSERT_NO_FATAL_FAILURE(stack_.Apply(
      SourceDir() + "/deploy/kubernetes/testserver/cluster.textproto", all));
  const std::string token = stack_.Token("users/demo", "member", "demo");
  ASSERT_FALSE(token.empty());

  // The job start.sh wrote: 2 workers of 4 GPUs, checkpointing into
  // DIR/checkpoints/kube-quickstart.
  const std::string submitted =
      Yard({"submit", "-f", kube_dir_ + "/job.yaml"}, token);
  ASSERT_TRUE(absl::StrContains(submitted, "submitted tenants/demo/jobs/1"))
      << submitted;
  const std::string waited = Yard({"wait", "1", "--timeout", "120"}, token);
  const v1::Job job =
      stack_.AwaitEnd("tenants/demo/jobs/1", token, absl::Seconds(10));
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED)
      << waited << job.DebugString() << fx::ReadFileTail(all->log(), 3000);

  // Worker 0's log, copied by the dispatcher: the fake kubelet's lines.
  const std::string logs = Yard({"logs", "1"}, token);
  EXPECT_TRUE(absl::StrContains(logs, "trainyard-fake: started on gpu-"))
      << logs;
  EXPECT_TRUE(absl::StrContains(logs, "checkpoint step-100 written")) << logs;

  // One attempt, recorded with its Job; two workers placed on nodes of the
  // cluster.
  ASSERT_EQ(job.attempts_size(), 1) << job.DebugString();
  const v1::Attempt& attempt = job.attempts(0);
  EXPECT_EQ(attempt.cluster(), "clusters/kubernetes");
  EXPECT_EQ(attempt.backend_job_name(), "ty-1-1");
  ASSERT_EQ(attempt.placements_size(), 2);
  std::vector<std::string> placed;
  for (const auto& p : attempt.placements()) {
    ASSERT_TRUE(absl::StartsWith(p.node(), "clusters/kubernetes/nodes/gpu-"))
        << p.node();
    placed.push_back(p.node().substr(p.node().rfind('/') + 1));
  }

  // The server held one Job ty-1-1 (one uid, the attempt's), Indexed, 2
  // completions at parallelism 2, labelled with the job; its two pods, one
  // per completion index, ran on the placed nodes and succeeded.
  const std::map<std::string, std::set<std::string>> uids = history_->JobUids();
  ASSERT_TRUE(uids.contains("ty-1-1"));
  EXPECT_EQ(uids.at("ty-1-1"), std::set<std::string>{attempt.backend_job_id()});
  std::optional<Json> k8s_job = history_->LastJob("ty-1-1");
  ASSERT_TRUE(k8s_job.has_value());
  const Json& spec = (*k8s_job)["spec"];
  EXPECT_EQ(spec["completionMode"], "Indexed");
  EXPECT_EQ(spec["completions"], 2);
  EXPECT_EQ(spec["parallelism"], 2);
  EXPECT_EQ(spec["backoffLimit"], 0);
  EXPECT_EQ(Label(*k8s_job, "trainyard.dev/tenant"), "demo");
  EXPECT_EQ(Label(*k8s_job, "trainyard.dev/job"), "1");
  EXPECT_EQ(Label(*k8s_job, "trainyard.dev/attempt"), "1");
  const std::map<std::string, Json> pods = history_->PodsOf("ty-1-1");
  ASSERT_EQ(pods.size(), 2u) << Json(pods).dump();
  std::set<std::string> indexes;
  for (const auto& [name, pod] : pods) {
    const std::string index =
        Label(pod, "batch.kubernetes.io/job-completion-index");
    indexes.insert(index);
    const std::string node = pod["spec"].value("nodeName", "");
    EXPECT_EQ(node, placed[index == "1" ? 1 : 0]) << name;
    EXPECT_EQ(pod["status"].value("phase", ""), "Succeeded") << name;
  }
  EXPECT_EQ(indexes, (std::set<std::string>{"0", "1"}));

  // Its checkpoints. start.sh's pod script (its defaults: 10 s of training,
  // a checkpoint every 2 s, 100 steps each) makes each pod write steps 100,
  // 200, 300, 400 and, unless it exits first, 500 into the job's manifest
  // with uri "step-N", which the dispatcher reads as a path in the job's
  // checkpoint directory. Both pods write the same manifest: its last step is
  // 400 or 500. The dispatcher recorded steps it read, newest first.
  const std::string ck_dir = kube_dir_ + "/checkpoints/kube-quickstart";
  const Json manifest =
      Json::parse(fx::ReadFileOrEmpty(ck_dir + "/trainyard-checkpoint.json"),
                  nullptr, false);
  ASSERT_TRUE(manifest.is_object()) << "no checkpoint manifest";
  const int64_t final_step = manifest.value("step", int64_t{0});
  EXPECT_TRUE(final_step == 400 || final_step == 500) << manifest.dump();
  const Json checkpoints = Json::parse(
      Yard({"checkpoints", "1", "-o", "json"}, token), nullptr, false);
  ASSERT_TRUE(checkpoints.is_array() && !checkpoints.empty())
      << checkpoints.dump();
  int64_t newer = 600;
  for (const Json& cp : checkpoints) {
    const int64_t step = std::stoll(cp.value("step", std::string("0")));
    EXPECT_TRUE(step > 0 && step % 100 == 0) << cp.dump();
    EXPECT_LT(step, newer) << "newest first: " << checkpoints.dump();
    EXPECT_EQ(cp.value("uri", ""), absl::StrCat(ck_dir, "/step-", step))
        << cp.dump();
    EXPECT_EQ(cp.value("attempt", 0), 1) << cp.dump();
    newer = step;
  }

  // kubectl, where installed, sees the same server through the kubeconfig.
  if (fx::FindInPath("kubectl").ok()) {
    const std::string nodes = Command(
        {*fx::FindInPath("kubectl"), "get", "nodes"},
        {"KUBECONFIG=" + kube_dir_ + "/kubeconfig", "HOME=" + stack_.dir()});
    for (const char* node :
         {"gpu-od-0", "gpu-od-1", "gpu-spot-0", "gpu-spot-1"}) {
      EXPECT_TRUE(absl::StrContains(nodes, node)) << nodes;
    }
  }
  const JobHistoryCheck histories = CheckJobHistories(stack_.db_url());
  EXPECT_TRUE(histories.problems.empty())
      << absl::StrJoin(histories.problems, "\n");
}

TEST_F(KubeProcessTest, KilledDispatcherLeavesOneKubernetesJobPerAttempt) {
  const uint64_t seed = EnvInt("TRAINYARD_KUBE_CRASH_SEED", 1);
  const int job_count = std::max(EnvInt("TRAINYARD_KUBE_CRASH_JOBS", 16), 4);
  std::mt19937_64 rng(seed);
  const absl::Time test_start = absl::Now();

  // The quick start's server, its pods training 1.5 s.
  ASSERT_NO_FATAL_FAILURE(
      StartKube({"--run-seconds", "1.5", "--checkpoint-every", "0.5"}));
  const std::string kubeconfig = kube_dir_ + "/kubeconfig";
  TrainyardService* api = stack_.AddService(
      "api", stack_.Argv({"api", "--grpc_listen=" + stack_.api_addr()}));
  TrainyardService* scheduler = stack_.AddService(
      "scheduler", stack_.Argv({"scheduler", "--schedule_interval=200ms"}));
  TrainyardService* dispatcher = stack_.AddService(
      "dispatcher",
      stack_.Argv({"dispatcher", "--backend=kubernetes",
                   "--kubeconfig=" + kubeconfig,
                   "--kube_settings=" + kube_dir_ + "/settings.conf",
                   "--dispatch_interval=100ms"}));
  ASSERT_TRUE(api->Start().ok());
  ASSERT_NO_FATAL_FAILURE(
      stack_.Apply(SourceDir() + "/deploy/local/demo-tenant.textproto", api));
  ASSERT_NO_FATAL_FAILURE(stack_.Apply(
      SourceDir() + "/deploy/kubernetes/testserver/cluster.textproto", api));
  const std::string token = stack_.Token("users/demo", "member", "demo");
  ASSERT_FALSE(token.empty());
  ASSERT_TRUE(scheduler->Start().ok());
  // The fault-injection point (docs/dispatcher.md, "Crash safety"): the
  // dispatcher kills itself -9 right after its Nth launch the API server
  // accepted, before recording it. The first dispatcher has it (N = 1), so
  // do a third of the restarts (N = 1-3).
  auto fault_env = [](int n) {
    return std::vector<std::string>{
        absl::StrCat("TRAINYARD_FAULT_KILL_AFTER_LAUNCHES=", n)};
  };
  bool armed = true;
  ASSERT_TRUE(dispatcher->Start(fault_env(1)).ok());

  // 1 worker of 1 GPU (every sixth a 2-worker gang), on-demand or spot.
  std::vector<v1::SubmitJobRequest> requests(job_count);
  for (int i = 0; i < job_count; ++i) {
    v1::SubmitJobRequest& req = requests[i];
    req.set_parent("tenants/demo");
    req.set_client_request_id(absl::StrCat("kube-crash-", seed, "-", i));
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_project("default");
    spec->set_queue("default");
    spec->set_workers(rng() % 6 == 0 ? 2 : 1);
    spec->mutable_resources()->set_gpus(1);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{1} << 30);
    spec->set_spot_policy(v1::SPOT_POLICY_ALLOWED);
    spec->add_command("train");
  }

  // Submitter: bursts of 1-4 jobs every 0.2-1.2 s, so that the dispatcher
  // keeps launching while it is killed.
  auto jobs = stack_.Jobs();
  std::atomic<int> submitted{0};
  std::atomic<bool> stop{false};
  std::string submit_error;
  std::thread submitter([&] {
    std::mt19937_64 r(seed * 7 + 1);
    int i = 0;
    while (i < job_count && !stop) {
      const int burst = 1 + r() % 4;
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

  int kills = 0, targeted = 0, created_unrecorded = 0, claimed_uncreated = 0,
      injected = 0, fired = 0;
  auto all_ended = [&] {
    if (submitted.load() != job_count) return false;
    const JobHistoryCheck now = CheckJobHistories(stack_.db_url());
    return static_cast<int>(now.jobs.size()) == job_count &&
           std::all_of(now.jobs.begin(), now.jobs.end(),
                       [](const auto& e) { return Terminal(e.second.first); });
  };
  // The dispatcher with the fault point armed: waits until it killed itself
  // (true), or up to `limit` (false; the caller kills it then).
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
  // kill -9, then what it left: jobs DISPATCHING whose Job the server holds
  // (created, not recorded) or not (claimed, not created yet). A `fault`
  // kill came right after the server accepted the Job of the attempt the
  // dispatcher named in its log: DISPATCHING, and on the server.
  auto kill_and_sample = [&](bool fault) {
    dispatcher->Kill();
    ++kills;
    const std::vector<std::string> names = stack_.Dispatching();
    std::optional<std::set<std::string>> on_server = ServerJobs();
    ASSERT_TRUE(on_server.has_value());
    for (const std::string& name : names) {
      if (on_server->contains(name)) {
        ++created_unrecorded;
      } else {
        ++claimed_uncreated;
      }
    }
    if (fault) {
      const std::string name =
          ProcessStack::FaultInjectedAttempt(dispatcher->log());
      ASSERT_FALSE(name.empty()) << "kill " << kills << ": the fault point "
                                 << "fired without naming its attempt";
      EXPECT_TRUE(std::find(names.begin(), names.end(), name) != names.end())
          << "kill " << kills << ": " << name << " is not DISPATCHING";
      EXPECT_TRUE(on_server->contains(name))
          << "kill " << kills << ": " << name << " is not on the server";
    }
  };
  // For kChaos, and at least kMinKills kills (a fault-armed dispatcher that
  // finds no work waits 5 s for its launch before it is killed).
  const absl::Time chaos_end = absl::Now() + kChaos;
  while ((absl::Now() < chaos_end || kills < kMinKills) && !stop) {
    for (TrainyardService* s : {api, scheduler, dispatcher}) {
      if (s == dispatcher && armed) continue;  // await_fault looks.
      std::optional<std::string> died = s->Died();
      ASSERT_FALSE(died.has_value()) << *died;
    }
    bool fault = false;
    if (armed) {
      fault = await_fault(kills == 0 ? absl::Seconds(60) : absl::Seconds(5));
    } else if (rng() % 2 == 0) {
      // The moment a job is DISPATCHING, within 3 s.
      ++targeted;
      for (absl::Time until = absl::Now() + absl::Seconds(3);
           absl::Now() < until && stack_.Dispatching().empty();) {
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
    if (rng() % 3 == 0) absl::SleepFor(absl::Seconds(1));
  }
  if (armed && !stop) {
    ASSERT_NO_FATAL_FAILURE(kill_and_sample(await_fault(absl::Seconds(5))));
    ASSERT_TRUE(dispatcher->Start().ok());
  }
  const absl::Duration chaos_took = absl::Now() - test_start;

  // Then every job ends, with the dispatcher left alone.
  const absl::Duration limit = absl::Seconds(90);
  bool done = false;
  for (const absl::Time deadline = absl::Now() + limit;
       absl::Now() < deadline && !stop;
       absl::SleepFor(absl::Milliseconds(300))) {
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
  const std::string histogram = ProcessStack::StateHistogram(histories);
  ASSERT_TRUE(done) << "not every job ended within " << limit << ":"
                    << histogram << "\ndispatcher log:\n"
                    << fx::ReadFileTail(dispatcher->log(), 3000);

  // --- Every job ended exactly once, and succeeded ---
  EXPECT_TRUE(histories.problems.empty())
      << histories.problems.size() << " problems:\n"
      << absl::StrJoin(histories.problems, "\n");
  EXPECT_EQ(static_cast<int>(histories.jobs.size()), job_count);
  int succeeded = 0;
  for (const auto& [id, job] : histories.jobs) {
    if (job.first == v1::JOB_STATE_SUCCEEDED) ++succeeded;
  }
  EXPECT_EQ(succeeded, job_count) << histogram;

  // --- One Job per attempt name, ever: the one PostgreSQL recorded ---
  const std::map<std::string, std::set<std::string>> uids = history_->JobUids();
  std::vector<std::string> duplicates;
  for (const auto& [name, set] : uids) {
    if (set.size() > 1) {
      duplicates.push_back(absl::StrCat(name, ": ", absl::StrJoin(set, " ")));
    }
  }
  EXPECT_TRUE(duplicates.empty())
      << "attempt names the server held more than one Job of ("
      << duplicates.size() << "):\n"
      << absl::StrJoin(duplicates, "\n");
  std::set<std::string> recorded;
  pqxx::connection conn(stack_.db_url());
  pqxx::read_transaction txn(conn);
  for (const auto& row : txn.exec("SELECT job_id, idx, body FROM attempts")) {
    v1::Attempt attempt;
    pqxx::binarystring body(row[2]);
    ASSERT_TRUE(attempt.ParseFromString(body.str()));
    const std::string name =
        absl::StrCat("ty-", row[0].as<int64_t>(), "-", row[1].as<int>());
    recorded.insert(name);
    if (attempt.backend_job_id().empty()) continue;
    EXPECT_EQ(attempt.backend_job_name(), name);
    auto it = uids.find(name);
    ASSERT_NE(it, uids.end()) << name << " was never on the server";
    EXPECT_EQ(it->second, std::set<std::string>{attempt.backend_job_id()})
        << name;
  }
  for (const auto& [name, set] : uids) {
    EXPECT_TRUE(recorded.contains(name))
        << "Job " << name << " belongs to no attempt";
  }

  std::cout << "[kube crash seed " << seed << "] " << job_count << " jobs in "
            << absl::FormatDuration(absl::Now() - test_start) << " (chaos "
            << absl::FormatDuration(chaos_took) << "):" << histogram
            << "; attempts " << histories.attempt_rows << ", Jobs "
            << uids.size() << ", transitions " << histories.transitions
            << "; dispatcher kills " << kills << " (" << targeted
            << " targeted, " << injected << " fault-injected of which " << fired
            << " fired), left DISPATCHING: " << created_unrecorded
            << " created on the server but unrecorded, " << claimed_uncreated
            << " claimed but not created\n";
  EXPECT_GE(kills, kMinKills);
  EXPECT_GT(fired, 0);
  EXPECT_GT(created_unrecorded, 0);
}

}  // namespace
}  // namespace trainyard::testing
