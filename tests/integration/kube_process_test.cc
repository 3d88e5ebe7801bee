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
//     dispatcher always has it) and restarted (dispatcher_chaos.h). Checked:
//     every job ends exactly once, SUCCEEDED; the kills did land between
//     "created" and "recorded"; and a watch on the server's Jobs from the start
//     saw one Job (one uid) per attempt name, the one the attempt recorded.
//
// Environment: TRAINYARD_BIN (set by CTest), TRAINYARD_KUBE_CRASH_SEED
// (default 1), TRAINYARD_KUBE_CRASH_JOBS (default 16).
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/kubernetes/kube_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_config.h"
#include "services/dispatcher/adapters/kubernetes/kube_watch.h"
#include "tests/fixtures/local_kube.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/subprocess.h"
#include "tests/fixtures/trainyard_process.h"
#include "tests/integration/dispatcher_chaos.h"
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
  DispatcherChaos chaos;
  DispatcherChaosOptions options;
  options.label = "kube";
  options.seed = EnvInt("TRAINYARD_KUBE_CRASH_SEED", 1);
  const int job_count = std::max(EnvInt("TRAINYARD_KUBE_CRASH_JOBS", 16), 4);
  std::mt19937_64 rng(options.seed);

  // The quick start's server, its pods training 1.5 s.
  ASSERT_NO_FATAL_FAILURE(
      StartKube({"--run-seconds", "1.5", "--checkpoint-every", "0.5"}));
  DispatcherChaosServices services;
  ASSERT_NO_FATAL_FAILURE(SetUpDispatcherChaos(
      &stack_, SourceDir() + "/deploy/kubernetes/testserver/cluster.textproto",
      {"--backend=kubernetes", "--kubeconfig=" + kube_dir_ + "/kubeconfig",
       "--kube_settings=" + kube_dir_ + "/settings.conf"},
      &services, &options));

  // 1 worker of 1 GPU (every sixth a 2-worker gang), on-demand or spot;
  // submitted in bursts of 1-4, so that the dispatcher keeps launching
  // while it is killed.
  AddChaosRequests(
      job_count, int64_t{1} << 30, rng,
      [](v1::JobSpec* spec) { spec->add_command("train"); }, &options);
  options.max_burst = 4;

  // The chaos (dispatcher_chaos.h) for kChaos and at least kMinKills kills,
  // then every job ends within 90 s. After every kill: the jobs DISPATCHING
  // whose Job the server holds (created, not recorded) or not (claimed, not
  // created yet).
  options.chaos = kChaos;
  options.min_kills = kMinKills;
  options.chaos_until_min_kills = true;
  options.final_limit = absl::Seconds(90);
  options.final_poll = absl::Milliseconds(300);
  options.on_backend = "on the server";
  options.launched = "created on the server";
  options.unlaunched = "created";
  options.backend_jobs = [this] { return ServerJobs(); };
  ASSERT_NO_FATAL_FAILURE(
      RunDispatcherChaos(&stack_, services, options, rng, &chaos));

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
  std::map<std::string, v1::Attempt> recorded;
  ASSERT_NO_FATAL_FAILURE(stack_.Attempts("", &recorded));
  for (const auto& [name, attempt] : recorded) {
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

  ExpectDispatcherChaosCounters(options, chaos,
                                absl::StrCat("Jobs ", uids.size()));
}

}  // namespace
}  // namespace trainyard::testing
