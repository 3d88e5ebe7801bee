// Unit tests of the pure parts of the Slurm adapter: settings, JWT, request
// building, state mapping, error classification, node inventory.
#include "services/dispatcher/adapters/slurm/slurm_api.h"

#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"
#include "tests/support/dispatcher/launch_request.h"

namespace trainyard::dispatcher::slurm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

SlurmSettings Settings() {
  absl::StatusOr<SlurmSettings> s = ParseSlurmSettings(R"(
    rest_url = http://127.0.0.1:6820   # slurmrestd
    jwt_key_file = /tmp/key
    user = root
    partition = gpu:ondemand:ondemand
    partition = spot:spot
    gpu_model = H100
  )");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.value_or(SlurmSettings());
}

LaunchRequest Request() {
  LaunchRequest r = AttemptRequest(42, 2, "acme", {"gpu2", "gpu1"}, 2);
  r.spec.mutable_resources()->set_cpu_millis(1500);
  r.spec.mutable_resources()->set_memory_bytes(int64_t{300} << 20);
  r.spec.add_command("python3");
  r.spec.add_command("train.py");
  r.spec.add_command("it's");
  r.spec.mutable_time_limit()->set_seconds(90);
  r.spec.mutable_checkpoint()->set_directory("/shared/ckpt/42");
  (*r.spec.mutable_env())["LR"] = "0.1";
  r.flavor = "gpu";
  r.resume_from = "/shared/ckpt/42/step-7";
  return r;
}

TEST(SlurmSettingsTest, ParsesAndDefaults) {
  SlurmSettings s = Settings();
  EXPECT_EQ(s.api_version, "v0.0.38");
  EXPECT_EQ(s.token_user, "slurm");
  EXPECT_EQ(s.user, "root");
  EXPECT_EQ(s.stop_signal, SIGUSR1);
  ASSERT_EQ(s.partitions.size(), 2u);
  EXPECT_EQ(s.partitions[1].flavor, "spot");
  EXPECT_EQ(s.partitions[1].pool, "spot");
}

TEST(SlurmSettingsTest, BadInputNamesTheKey) {
  auto bad = [](const char* text) {
    absl::StatusOr<SlurmSettings> s = ParseSlurmSettings(text);
    EXPECT_FALSE(s.ok());
    return std::string(s.status().message());
  };
  EXPECT_THAT(bad("jwt_key_file = k\npartition = a:b"), HasSubstr("rest_url"));
  EXPECT_THAT(bad("rest_url = ftp://x\njwt_key_file = k\npartition = a:b"),
              HasSubstr("rest_url"));
  EXPECT_THAT(bad("rest_url = http://x\npartition = a:b"),
              HasSubstr("jwt_key_file"));
  EXPECT_THAT(bad("rest_url = http://x\ntoken = t\npartition = a"),
              HasSubstr("partition"));
  EXPECT_THAT(
      bad("rest_url = http://x\ntoken = t\npartition = a:b\nstop_signal = X"),
      HasSubstr("stop_signal"));
  EXPECT_THAT(bad("rest_url = http://x\ntoken = t\npartition = a:b\nfoo = 1"),
              HasSubstr("foo"));
  EXPECT_THAT(bad("rest_url = http://x\ntoken = t\npartition = a:b\n"
                  "request_timeout = soon"),
              HasSubstr("request_timeout"));
  EXPECT_THAT(bad("rest_url = http://x\ntoken = t\npartition = a:b\n"
                  "container_exec = apptainer exec"),
              HasSubstr("container_exec: must name the image as {image}"));
  EXPECT_THAT(bad("no equals sign"), HasSubstr("line 1"));
  EXPECT_EQ(ParseSignal("SIGTERM"), SIGTERM);
  EXPECT_EQ(ParseSignal("usr1"), SIGUSR1);
  EXPECT_EQ(ParseSignal("12"), 12);
  EXPECT_EQ(ParseSignal("99"), 0);
}

TEST(SlurmApiTest, MintsAnHs256Jwt) {
  const std::string jwt =
      MintJwt("0123456789abcdef0123456789abcdef", "slurm",
              absl::FromUnixSeconds(1000), absl::Seconds(60));
  std::vector<std::string> parts = absl::StrSplit(jwt, '.');
  ASSERT_EQ(parts.size(), 3u);
  std::string header, claims;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(parts[0], &header));
  ASSERT_TRUE(absl::WebSafeBase64Unescape(parts[1], &claims));
  EXPECT_EQ(header, R"({"alg":"HS256","typ":"JWT"})");
  Json c = Json::parse(claims);
  EXPECT_EQ(c["iat"], 1000);
  EXPECT_EQ(c["exp"], 1060);
  EXPECT_EQ(c["sun"], "slurm");
  // RFC 7515 unpadded base64url.
  EXPECT_EQ(jwt.find('='), std::string::npos);
  EXPECT_EQ(parts[2].size(), 43u);  // 32 bytes
}

TEST(SlurmApiTest, BuildsTheSubmitBody) {
  absl::StatusOr<std::string> body = SubmitBody(Request(), Settings());
  ASSERT_TRUE(body.ok()) << body.status();
  Json b = Json::parse(*body);
  const Json& job = b["job"];
  EXPECT_EQ(job["name"], "ty-42-2");
  EXPECT_EQ(job["partition"], "ondemand");
  EXPECT_EQ(job["tasks"], 2);
  EXPECT_EQ(job["tasks_per_node"], 1);
  EXPECT_EQ(job["nodes"], Json::array({2, 2}));
  EXPECT_EQ(job["constraints"], "[gpu2*1&gpu1*1]");
  EXPECT_EQ(job["cpus_per_task"], 2);
  EXPECT_EQ(job["memory_per_node"], 300);
  EXPECT_EQ(job["gres"], "gpu:2");
  EXPECT_EQ(job["time_limit"], 2);  // minutes, rounded up
  EXPECT_FALSE(job.contains("requeue"));
  EXPECT_EQ(job["current_working_directory"], "/tmp");
  EXPECT_EQ(job["standard_output"], "/tmp/ty-42-2.out");
  EXPECT_EQ(job["environment"]["TRAINYARD_JOB_ID"], "42");
  EXPECT_EQ(job["environment"]["TRAINYARD_ATTEMPT"], "2");
  EXPECT_EQ(job["environment"]["TRAINYARD_RESUME_FROM"],
            "/shared/ckpt/42/step-7");
  EXPECT_EQ(job["environment"]["LR"], "0.1");
  EXPECT_TRUE(job["environment"].contains("PATH"));
  std::optional<JobComment> c = ParseComment(job["comment"].get<std::string>());
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->tenant, "acme");
  EXPECT_EQ(c->job_id, 42);
  EXPECT_EQ(c->attempt, 2);
  EXPECT_EQ(c->checkpoint_dir, "/shared/ckpt/42");
  const std::string script = b["script"];
  EXPECT_THAT(script,
              HasSubstr("exec srun --kill-on-bad-exit=1 --gpus-per-task=2 "));
  EXPECT_THAT(script, HasSubstr("'python3' 'train.py' 'it'\\''s'"));
  EXPECT_THAT(script, HasSubstr("TRAINYARD_WORKER_INDEX=\"$SLURM_PROCID\""));
}

TEST(SlurmApiTest, SubmitBodyPlacesSharedNodesAndPicksThePartition) {
  LaunchRequest r = Request();
  r.spec.set_workers(3);
  r.worker_nodes = {"gpu3", "gpu3", "gpu4"};
  r.flavor = "spot";
  Json job = Json::parse(*SubmitBody(r, Settings()))["job"];
  EXPECT_EQ(job["partition"], "spot");
  EXPECT_EQ(job["nodes"], Json::array({2, 2}));
  EXPECT_FALSE(job.contains("tasks_per_node"));  // uneven
  EXPECT_EQ(job["gres"], "gpu:4");               // the busiest node's share
  EXPECT_EQ(job["memory_per_node"], 600);

  r.flavor = "";
  EXPECT_EQ(Json::parse(*SubmitBody(r, Settings()))["job"]["partition"],
            "ondemand");
  SlurmSettings prefixed = Settings();
  prefixed.job_name_prefix = "staging-";
  EXPECT_EQ(Json::parse(*SubmitBody(r, prefixed))["job"]["name"],
            "staging-ty-42-2");
}

TEST(SlurmApiTest, SubmitBodyRefusesWhatSlurmCannotRun) {
  LaunchRequest r = Request();
  r.flavor = "tpu";
  absl::Status s = SubmitBody(r, Settings()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("flavor"));
  r = Request();
  r.spec.clear_command();
  s = SubmitBody(r, Settings()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("spec.command"));
  r = Request();
  r.spec.set_working_dir("relative");
  s = SubmitBody(r, Settings()).status();
  EXPECT_THAT(s.message(), HasSubstr("spec.working_dir"));
  // An image on a cluster that runs none is refused, not ignored.
  r = Request();
  r.spec.set_image("nvcr.io/nvidia/pytorch:24.05-py3");
  s = SubmitBody(r, Settings()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("spec.image"));
  EXPECT_THAT(s.message(), HasSubstr("runs no container images"));
}

TEST(SlurmApiTest, RunsTheImageThroughTheClustersContainerWords) {
  LaunchRequest r = Request();
  r.spec.set_image("nvcr.io/nvidia/pytorch:24.05-py3");
  absl::StatusOr<SlurmSettings> parsed = ParseSlurmSettings(R"(
rest_url = http://127.0.0.1:1
token = t
partition = a100:ondemand
container_srun_args = --container-image={image} --container-mounts=/data:/data
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->container_srun_args,
            (std::vector<std::string>{"--container-image={image}",
                                      "--container-mounts=/data:/data"}));
  SlurmSettings pyxis = Settings();
  pyxis.container_srun_args = parsed->container_srun_args;
  std::string script = Json::parse(*SubmitBody(r, pyxis))["script"];
  EXPECT_THAT(script,
              HasSubstr("--gpus-per-task=2 "
                        "'--container-image=nvcr.io/nvidia/pytorch:24.05-py3' "
                        "'--container-mounts=/data:/data' /bin/bash -c "));
  SlurmSettings apptainer = Settings();
  apptainer.container_exec = {"apptainer", "exec", "docker://{image}"};
  script = Json::parse(*SubmitBody(r, apptainer))["script"];
  EXPECT_THAT(script, HasSubstr("trainyard-worker 'apptainer' 'exec' "
                                "'docker://nvcr.io/nvidia/pytorch:24.05-py3' "
                                "'python3' 'train.py'"));
  // Without an image the words are not used.
  r.spec.clear_image();
  script = Json::parse(*SubmitBody(r, apptainer))["script"];
  EXPECT_THAT(script, Not(HasSubstr("apptainer")));
}

TEST(SlurmApiTest, ExpandsHostlists) {
  EXPECT_THAT(ExpandHostlist("gpu[1-3,5],cpu7"),
              ElementsAre("gpu1", "gpu2", "gpu3", "gpu5", "cpu7"));
  EXPECT_THAT(ExpandHostlist("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(ExpandHostlist(""), ElementsAre());
  EXPECT_THAT(ExpandHostlist("x[3-1]"), ElementsAre("x3-1"));
}

SlurmJob Job(std::string state, int64_t exit_code = 0,
             std::string reason = "None") {
  SlurmJob j;
  j.job_id = 7;
  j.name = "ty-1-1";
  j.state = std::move(state);
  j.exit_code = exit_code;
  j.reason = std::move(reason);
  j.nodes_expr = "gpu[1-2]";
  j.nodes = {"gpu1", "gpu2"};
  j.submit_time = absl::FromUnixSeconds(100);
  j.start_time = absl::FromUnixSeconds(110);
  j.end_time = absl::FromUnixSeconds(200);
  j.time_limit = absl::Minutes(1);
  return j;
}

TEST(SlurmApiTest, MapsStatesExitCodesAndFailureClasses) {
  struct Case {
    SlurmJob job;
    AttemptPhase phase;
    FailureKind failure;
    std::optional<int> exit_code;
  };
  const std::vector<Case> cases = {
      {Job("PENDING"), AttemptPhase::kPending, FailureKind::kNone,
       std::nullopt},
      {Job("CONFIGURING"), AttemptPhase::kPending, FailureKind::kNone,
       std::nullopt},
      {Job("RUNNING"), AttemptPhase::kRunning, FailureKind::kNone,
       std::nullopt},
      {Job("COMPLETING"), AttemptPhase::kRunning, FailureKind::kNone,
       std::nullopt},
      {Job("COMPLETED"), AttemptPhase::kSucceeded, FailureKind::kNone, 0},
      {Job("FAILED", 3 << 8, "NonZeroExitCode"), AttemptPhase::kFailed,
       FailureKind::kUserError, 3},
      {Job("FAILED", 9, "JobLaunchFailure"), AttemptPhase::kFailed,
       FailureKind::kUserError, 137},
      {Job("FAILED", 0, "JobLaunchFailure"), AttemptPhase::kFailed,
       FailureKind::kBackendError, std::nullopt},
      {Job("FAILED", 53, "JobLaunchFailure"), AttemptPhase::kFailed,
       FailureKind::kBackendError, std::nullopt},
      {Job("OUT_OF_MEMORY"), AttemptPhase::kFailed, FailureKind::kUserError,
       137},
      {Job("TIMEOUT"), AttemptPhase::kFailed, FailureKind::kTimeLimit,
       std::nullopt},
      {Job("NODE_FAIL"), AttemptPhase::kFailed, FailureKind::kNodeFailure,
       std::nullopt},
      {Job("BOOT_FAIL"), AttemptPhase::kFailed, FailureKind::kNodeFailure,
       std::nullopt},
      {Job("PREEMPTED"), AttemptPhase::kCancelled, FailureKind::kPreempted,
       std::nullopt},
      {Job("CANCELLED", 15), AttemptPhase::kCancelled, FailureKind::kCancelled,
       std::nullopt},
      {Job("REVOKED"), AttemptPhase::kFailed, FailureKind::kBackendError,
       std::nullopt},
  };
  for (const Case& c : cases) {
    AttemptStatus s = MapJob(c.job);
    EXPECT_EQ(s.phase, c.phase) << c.job.state;
    EXPECT_EQ(s.failure, c.failure) << c.job.state;
    EXPECT_EQ(s.exit_code, c.exit_code) << c.job.state;
    EXPECT_EQ(s.backend_id, "7");
    EXPECT_EQ(s.name, "ty-1-1");
    if (IsTerminal(s.phase)) {
      EXPECT_EQ(s.end_time, absl::FromUnixSeconds(200)) << c.job.state;
    } else {
      EXPECT_FALSE(s.end_time.has_value()) << c.job.state;
    }
  }
  EXPECT_THAT(MapJob(Job("NODE_FAIL")).message, HasSubstr("gpu[1-2]"));
  EXPECT_THAT(MapJob(Job("PENDING", 0, "Resources")).message,
              HasSubstr("Resources"));
  EXPECT_FALSE(MapJob(Job("PENDING")).start_time.has_value());
}

TEST(SlurmApiTest, ParsesJobsAndIgnoresMalformedEntries) {
  absl::StatusOr<std::vector<SlurmJob>> jobs = ParseJobs(R"({
    "errors": [],
    "jobs": [
      {"job_id": 12, "name": "ty-3-1", "job_state": "RUNNING",
       "exit_code": 0, "nodes": "gpu[1-2]", "start_time": 1700000000,
       "end_time": 1700003600, "submit_time": 1699999990, "time_limit": 60,
       "comment": "x", "partition": "ondemand", "state_reason": "None"},
      {"name": "no id"},
      "junk",
      {"job_id": {"set": true, "number": 13}, "name": "ty-4-1",
       "job_state": ["FAILED"], "exit_code": {"set": true, "number": 256},
       "start_time": 0}
    ]})");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job_id, 12);
  EXPECT_THAT((*jobs)[0].nodes, ElementsAre("gpu1", "gpu2"));
  EXPECT_EQ((*jobs)[0].time_limit, absl::Hours(1));
  EXPECT_EQ((*jobs)[1].state, "FAILED");
  EXPECT_EQ((*jobs)[1].exit_code, 256);
  EXPECT_FALSE((*jobs)[1].start_time.has_value());
  EXPECT_FALSE(ParseJobs("not json").ok());
  EXPECT_TRUE(ParseJobs("{}").ok());
}

TEST(SlurmApiTest, ClassifiesErrorsByCodeNotHttpStatus) {
  auto classify = [](int http, const std::string& code) {
    return ClassifyResponse(
        http,
        R"({"errors":[{"error":"e","description":"d","error_number":)" + code +
            "}]}",
        "op");
  };
  EXPECT_TRUE(absl::IsNotFound(classify(500, "2017")));
  EXPECT_TRUE(absl::IsPermissionDenied(classify(500, "2002")));
  EXPECT_TRUE(absl::IsFailedPrecondition(classify(500, "2021")));
  EXPECT_TRUE(absl::IsFailedPrecondition(classify(500, "2000")));
  EXPECT_TRUE(absl::IsUnavailable(classify(500, "1001")));
  EXPECT_TRUE(absl::IsUnavailable(classify(500, "5004")));
  EXPECT_TRUE(absl::IsInvalidArgument(classify(500, "2127")));
  EXPECT_TRUE(absl::IsInternal(classify(500, "-1")));
  EXPECT_TRUE(absl::IsNotFound(classify(200, "2017")))
      << "errors[] wins over a 200";
  EXPECT_TRUE(ClassifyResponse(200, R"({"errors":[]})", "op").ok());
  EXPECT_TRUE(ClassifyResponse(304, "", "op").ok());
  EXPECT_TRUE(absl::IsUnauthenticated(ClassifyResponse(401, "", "op")));
  EXPECT_TRUE(absl::IsUnavailable(ClassifyResponse(503, "", "op")));
  EXPECT_TRUE(absl::IsUnknown(ClassifyResponse(500, "<html>", "op")));
  // The older "error_code" key of submit answers.
  absl::Status s = ClassifyResponse(
      500, R"({"errors":[{"error":"Invalid partition name specified",
               "error_code":2000}]})",
      "submit ty-1-1");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("submit ty-1-1: Invalid partition"));
}

TEST(SlurmApiTest, ParsesGres) {
  EXPECT_EQ(ParseGresGpus("gpu:h100:4").count, 4);
  EXPECT_EQ(ParseGresGpus("gpu:h100:4").type, "h100");
  EXPECT_EQ(ParseGresGpus("gpu:h100:2(IDX:0,2),shard:4").count, 2);
  EXPECT_EQ(ParseGresGpus("gpu:4(S:0-1)").count, 4);
  EXPECT_EQ(ParseGresGpus("gpu:h100:0(IDX:N/A)").count, 0);
  EXPECT_EQ(ParseGresGpus("").count, 0);
  EXPECT_EQ(ParseGresGpus("(null)").count, 0);
}

TEST(SlurmApiTest, ParsesNodesWithStates) {
  absl::StatusOr<std::vector<NodeInventory>> nodes = ParseNodes(
      R"json({"nodes": [
      {"name": "gpu3", "state": "idle", "state_flags": ["DRAIN"],
       "reason": "maint", "partitions": ["spot"], "gres": "gpu:h100:4",
       "gres_used": "gpu:h100:0(IDX:N/A)", "cpus": 4, "real_memory": 4000},
      {"name": "gpu1", "state": "mixed", "state_flags": [],
       "partitions": ["ondemand"], "gres": "gpu:h100:4",
       "gres_used": "gpu:h100:2(IDX:0-1)", "cpus": 4, "alloc_cpus": 2,
       "real_memory": 4000, "alloc_memory": 200,
       "active_features": "ondemand,gpu1"},
      {"name": "gpu2", "state": "down", "state_flags": ["NOT_RESPONDING"],
       "reason": "Not responding", "partitions": ["ondemand"],
       "gres": "gpu:h100:4", "cpus": 4, "real_memory": 4000},
      {"name": "gpu4", "state": "idle", "state_flags": ["FAIL"],
       "partitions": ["spot"], "gres": "gpu:h100:4"},
      {"name": "cpu9", "state": "idle", "partitions": ["other"]}
    ]})json",
      Settings());
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 5u);
  const NodeInventory& cpu9 = (*nodes)[0];
  EXPECT_EQ(cpu9.name, "cpu9");
  EXPECT_EQ(cpu9.pool, "");
  EXPECT_TRUE(cpu9.schedulable);
  const NodeInventory& gpu1 = (*nodes)[1];
  EXPECT_EQ(gpu1.pool, "ondemand");
  EXPECT_EQ(gpu1.flavor, "gpu");
  EXPECT_EQ(gpu1.gpu_model, "H100");
  EXPECT_EQ(gpu1.gpus, 4);
  EXPECT_EQ(gpu1.used_gpus, 2);
  EXPECT_EQ(gpu1.cpu_millis, 4000);
  EXPECT_EQ(gpu1.used_cpu_millis, 2000);
  EXPECT_EQ(gpu1.memory_bytes, int64_t{4000} << 20);
  EXPECT_EQ(gpu1.used_memory_bytes, int64_t{200} << 20);
  EXPECT_TRUE(gpu1.labels.contains("gpu1"));
  EXPECT_TRUE(gpu1.schedulable);
  EXPECT_FALSE(gpu1.failed);
  const NodeInventory& gpu2 = (*nodes)[2];
  EXPECT_TRUE(gpu2.failed);
  EXPECT_FALSE(gpu2.schedulable);
  EXPECT_THAT(gpu2.state_message, HasSubstr("Not responding"));
  const NodeInventory& gpu3 = (*nodes)[3];
  EXPECT_EQ(gpu3.pool, "spot");
  EXPECT_EQ(gpu3.flavor, "spot");
  EXPECT_FALSE(gpu3.failed);
  EXPECT_FALSE(gpu3.schedulable);
  EXPECT_THAT(gpu3.state_message, HasSubstr("DRAIN"));
  EXPECT_TRUE((*nodes)[4].failed);  // FAIL flag
  EXPECT_FALSE(ParseNodes("[", Settings()).ok());
}

TEST(SlurmApiTest, CommentsRoundTripAndForeignOnesAreIgnored) {
  JobComment c{.tenant = "t", .job_id = 5, .attempt = 2, .checkpoint_dir = ""};
  std::optional<JobComment> back = ParseComment(FormatComment(c));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->job_id, 5);
  EXPECT_FALSE(ParseComment("some user comment").has_value());
  EXPECT_FALSE(ParseComment("trainyard:{broken").has_value());
}

}  // namespace
}  // namespace trainyard::dispatcher::slurm
