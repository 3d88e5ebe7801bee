#include "services/dispatcher/adapters/adapter.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "services/dispatcher/adapters/clock.h"
#include "services/lib/domain/errors.h"
#include "tests/support/dispatcher/launch_request.h"

namespace trainyard::dispatcher {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

LaunchRequest ValidRequest() {
  LaunchRequest r = AttemptRequest(42, 2, "acme", {"a-0001", "a-0002"}, 8);
  r.flavor = "spot-h100";
  return r;
}

TEST(BackendJobNameTest, FormatsAndParsesBack) {
  EXPECT_EQ(BackendJobName(42, 1), "ty-42-1");
  absl::StatusOr<BackendJobRef> ref = ParseBackendJobName("ty-42-13");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(*ref, (BackendJobRef{42, 13}));
}

TEST(BackendJobNameTest, RejectsMalformedNames) {
  for (const char* bad : {"", "ty-", "ty-1", "x-1-1", "ty-01-1", "ty-1-01",
                          "ty-0-1", "ty-1-0", "ty--1-1", "ty-1-1-1", "ty-1-x",
                          "ty-99999999999999999999-1", "ty-1-99999999999"}) {
    absl::StatusOr<BackendJobRef> ref = ParseBackendJobName(bad, "attempt");
    ASSERT_FALSE(ref.ok()) << bad;
    EXPECT_EQ(ref.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(domain::ErrorField(ref.status()), "attempt") << bad;
  }
}

TEST(AttemptEnvTest, AddsTrainyardVariablesAndExtrasWin) {
  LaunchRequest r = ValidRequest();
  (*r.spec.mutable_env())["USER_VAR"] = "u";
  (*r.spec.mutable_env())["SHARED"] = "from-spec";
  r.spec.mutable_checkpoint()->set_directory("/ckpt/job42");
  r.resume_from = "/ckpt/job42/step-100";
  r.env["SHARED"] = "from-dispatcher";
  r.env["TRAINYARD_API"] = "127.0.0.1:50051";
  const std::map<std::string, std::string> env = AttemptEnv(r);
  EXPECT_EQ(env.at("USER_VAR"), "u");
  EXPECT_EQ(env.at("SHARED"), "from-dispatcher");
  EXPECT_EQ(env.at("TRAINYARD_JOB"), "tenants/acme/jobs/42");
  EXPECT_EQ(env.at("TRAINYARD_TENANT"), "acme");
  EXPECT_EQ(env.at("TRAINYARD_JOB_ID"), "42");
  EXPECT_EQ(env.at("TRAINYARD_ATTEMPT"), "2");
  EXPECT_EQ(env.at("TRAINYARD_BACKEND_JOB_NAME"), "ty-42-2");
  EXPECT_EQ(env.at("TRAINYARD_WORKERS"), "2");
  EXPECT_EQ(env.at("TRAINYARD_CHECKPOINT_DIR"), "/ckpt/job42");
  EXPECT_EQ(env.at("TRAINYARD_RESUME_FROM"), "/ckpt/job42/step-100");
  EXPECT_EQ(env.at("TRAINYARD_API"), "127.0.0.1:50051");
}

TEST(AttemptEnvTest, OmitsResumeAndCheckpointDirWhenUnset) {
  const std::map<std::string, std::string> env = AttemptEnv(ValidRequest());
  EXPECT_EQ(env.count("TRAINYARD_RESUME_FROM"), 0u);
  EXPECT_EQ(env.count("TRAINYARD_CHECKPOINT_DIR"), 0u);
}

TEST(ValidateLaunchRequestTest, AcceptsValidRequest) {
  EXPECT_TRUE(ValidateLaunchRequest(ValidRequest()).ok());
}

TEST(ValidateLaunchRequestTest, NamesTheFieldAtFault) {
  struct Case {
    std::string field;
    void (*mutate)(LaunchRequest&);
  };
  const std::vector<Case> cases = {
      {"job_id", [](LaunchRequest& r) { r.job_id = 0; }},
      {"attempt", [](LaunchRequest& r) { r.attempt = 0; }},
      {"name", [](LaunchRequest& r) { r.name = ""; }},
      {"name", [](LaunchRequest& r) { r.name = "ty-42-1"; }},
      {"tenant", [](LaunchRequest& r) { r.tenant = "Bad Tenant"; }},
      {"spec.workers", [](LaunchRequest& r) { r.spec.set_workers(0); }},
      {"spec.resources.gpus",
       [](LaunchRequest& r) { r.spec.mutable_resources()->set_gpus(-1); }},
      {"spec.resources.cpu_millis",
       [](LaunchRequest& r) {
         r.spec.mutable_resources()->set_cpu_millis(-1);
       }},
      {"spec.resources.memory_bytes",
       [](LaunchRequest& r) {
         r.spec.mutable_resources()->set_memory_bytes(-5);
       }},
      {"worker_nodes", [](LaunchRequest& r) { r.worker_nodes.pop_back(); }},
      {"worker_nodes[1]", [](LaunchRequest& r) { r.worker_nodes[1] = ""; }},
      {"worker_nodes[0]",
       [](LaunchRequest& r) { r.worker_nodes[0] = "Not A Node"; }},
      {"flavor", [](LaunchRequest& r) { r.flavor = "Spot!"; }},
      {"spec.env[\"1X\"]",
       [](LaunchRequest& r) { (*r.spec.mutable_env())["1X"] = "v"; }},
      {"env[\"A-B\"]", [](LaunchRequest& r) { r.env["A-B"] = "v"; }},
  };
  for (const Case& c : cases) {
    LaunchRequest r = ValidRequest();
    c.mutate(r);
    const absl::Status s = ValidateLaunchRequest(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(domain::ErrorField(s), c.field) << s;
    EXPECT_THAT(std::string(s.message()), StartsWith(c.field + ": ")) << s;
  }
}

TEST(AttemptPhaseTest, NamesAndTerminal) {
  EXPECT_EQ(AttemptPhaseName(AttemptPhase::kPending), "PENDING");
  EXPECT_EQ(AttemptPhaseName(AttemptPhase::kRunning), "RUNNING");
  EXPECT_EQ(AttemptPhaseName(AttemptPhase::kSucceeded), "SUCCEEDED");
  EXPECT_EQ(AttemptPhaseName(AttemptPhase::kFailed), "FAILED");
  EXPECT_EQ(AttemptPhaseName(AttemptPhase::kCancelled), "CANCELLED");
  EXPECT_FALSE(IsTerminal(AttemptPhase::kPending));
  EXPECT_FALSE(IsTerminal(AttemptPhase::kRunning));
  EXPECT_TRUE(IsTerminal(AttemptPhase::kSucceeded));
  EXPECT_TRUE(IsTerminal(AttemptPhase::kFailed));
  EXPECT_TRUE(IsTerminal(AttemptPhase::kCancelled));
}

TEST(FailureKindTest, NamesAndFailureClasses) {
  struct Row {
    FailureKind kind;
    std::string_view name;
    v1::FailureClass failure_class;
    bool retryable;
    bool counted;
  };
  const Row rows[] = {
      {FailureKind::kNone, "NONE", v1::FAILURE_CLASS_UNSPECIFIED, false, false},
      {FailureKind::kUserError, "USER_ERROR", v1::FAILURE_CLASS_USER_ERROR,
       false, true},
      {FailureKind::kPreempted, "PREEMPTED", v1::FAILURE_CLASS_PREEMPTION, true,
       false},
      {FailureKind::kSpotReclaim, "SPOT_RECLAIM",
       v1::FAILURE_CLASS_SPOT_RECLAIM, true, false},
      {FailureKind::kNodeFailure, "NODE_FAILURE",
       v1::FAILURE_CLASS_NODE_FAILURE, true, false},
      {FailureKind::kTimeLimit, "TIME_LIMIT", v1::FAILURE_CLASS_TIME_LIMIT,
       false, false},
      {FailureKind::kCancelled, "CANCELLED", v1::FAILURE_CLASS_CANCELLED, false,
       false},
      {FailureKind::kBackendError, "BACKEND_ERROR",
       v1::FAILURE_CLASS_BACKEND_ERROR, true, true},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(FailureKindName(row.kind), row.name);
    EXPECT_EQ(ToFailureClass(row.kind), row.failure_class) << row.name;
    EXPECT_EQ(Retryable(row.kind), row.retryable) << row.name;
    EXPECT_EQ(CountsAgainstRetryLimit(row.kind), row.counted) << row.name;
  }
}

TEST(ShouldRetryTest, PlatformFailuresAlwaysRetry) {
  v1::RetryPolicy policy;
  policy.set_max_attempts(1);
  for (FailureKind kind : {FailureKind::kPreempted, FailureKind::kSpotReclaim,
                           FailureKind::kNodeFailure}) {
    EXPECT_TRUE(ShouldRetry(kind, std::nullopt, policy, 100))
        << FailureKindName(kind);
  }
}

TEST(ShouldRetryTest, NeverRetriedKinds) {
  const v1::RetryPolicy policy;
  for (FailureKind kind :
       {FailureKind::kNone, FailureKind::kTimeLimit, FailureKind::kCancelled}) {
    EXPECT_FALSE(ShouldRetry(kind, 1, policy, 0)) << FailureKindName(kind);
  }
}

TEST(ShouldRetryTest, UserErrorFollowsPolicy) {
  v1::RetryPolicy policy;  // max_attempts 0 = 3, any non-zero code
  EXPECT_TRUE(ShouldRetry(FailureKind::kUserError, 1, policy, 1));
  EXPECT_TRUE(ShouldRetry(FailureKind::kUserError, 1, policy, 2));
  EXPECT_FALSE(ShouldRetry(FailureKind::kUserError, 1, policy, 3));
  EXPECT_FALSE(ShouldRetry(FailureKind::kUserError, 0, policy, 1));
  EXPECT_TRUE(ShouldRetry(FailureKind::kUserError, std::nullopt, policy, 1));

  policy.set_max_attempts(5);
  policy.add_retryable_exit_codes(3);
  policy.add_retryable_exit_codes(75);
  EXPECT_TRUE(ShouldRetry(FailureKind::kUserError, 75, policy, 4));
  EXPECT_FALSE(ShouldRetry(FailureKind::kUserError, 75, policy, 5));
  EXPECT_FALSE(ShouldRetry(FailureKind::kUserError, 1, policy, 1));
  EXPECT_FALSE(ShouldRetry(FailureKind::kUserError, std::nullopt, policy, 1));
}

TEST(ShouldRetryTest, BackendErrorCountsAgainstTheLimit) {
  v1::RetryPolicy policy;
  policy.set_max_attempts(2);
  EXPECT_TRUE(ShouldRetry(FailureKind::kBackendError, std::nullopt, policy, 1));
  EXPECT_FALSE(
      ShouldRetry(FailureKind::kBackendError, std::nullopt, policy, 2));
}

TEST(ToNodeProtoTest, MapsFieldsAndState) {
  NodeInventory n;
  n.name = "a-0003";
  n.pool = "spot";
  n.flavor = "spot-h100";
  n.gpu_model = "H100";
  n.gpus = 8;
  n.cpu_millis = 96000;
  n.memory_bytes = int64_t{1} << 40;
  n.rack = "r2";
  n.block = "b1";
  n.labels = {{"zone", "z1"}};
  v1::Node proto = ToNodeProto(n, "sim-a");
  EXPECT_EQ(proto.name(), "clusters/sim-a/nodes/a-0003");
  EXPECT_EQ(proto.pool(), "spot");
  EXPECT_EQ(proto.capacity().gpus(), 8);
  EXPECT_EQ(proto.capacity().gpu_model(), "H100");
  EXPECT_EQ(proto.capacity().cpu_millis(), 96000);
  EXPECT_EQ(proto.capacity().memory_bytes(), int64_t{1} << 40);
  EXPECT_EQ(proto.topology().rack(), "r2");
  EXPECT_EQ(proto.topology().block(), "b1");
  EXPECT_EQ(proto.labels().at("zone"), "z1");
  EXPECT_EQ(proto.state(), v1::NODE_STATE_READY);

  n.schedulable = false;
  EXPECT_EQ(ToNodeProto(n, "sim-a").state(), v1::NODE_STATE_DRAINING);
  n.failed = true;
  n.state_message = "reclaimed";
  proto = ToNodeProto(n, "sim-a");
  EXPECT_EQ(proto.state(), v1::NODE_STATE_DOWN);
  EXPECT_EQ(proto.state_message(), "reclaimed");
}

// SameNodeRecord against its reference: the API records themselves.
TEST(ToNodeProtoTest, SameNodeRecordIsWhetherTheRecordsAreEqual) {
  NodeInventory n;
  n.name = "a-0003";
  n.pool = "spot";
  n.gpu_model = "H100";
  n.gpus = 8;
  n.labels = {{"zone", "z1"}, {"rack", "r2"}};
  std::vector<std::function<void(NodeInventory&)>> changes = {
      [](NodeInventory& m) { m.used_gpus = 4; },
      [](NodeInventory& m) { m.used_cpu_millis = 1000; },
      [](NodeInventory& m) { m.flavor = "spot-h100"; },
      [](NodeInventory& m) { m.pool = "ondemand"; },
      [](NodeInventory& m) { m.gpu_model = "A100"; },
      [](NodeInventory& m) { m.gpus = 4; },
      [](NodeInventory& m) { m.cpu_millis = 1; },
      [](NodeInventory& m) { m.memory_bytes = 1; },
      [](NodeInventory& m) { m.rack = "r9"; },
      [](NodeInventory& m) { m.block = "b9"; },
      [](NodeInventory& m) { m.labels["gpu"] = "h100"; },
      [](NodeInventory& m) { m.labels["zone"] = "z2"; },
      [](NodeInventory& m) { m.schedulable = false; },
      [](NodeInventory& m) { m.failed = true; },
      [](NodeInventory& m) { m.state_message = "NotReady"; },
      [](NodeInventory& m) { m.name = "a-0004"; },
  };
  int same = 0;
  for (size_t i = 0; i < changes.size(); ++i) {
    NodeInventory m = n;
    changes[i](m);
    const bool records_equal =
        google::protobuf::util::MessageDifferencer::Equals(ToNodeProto(n, "k"),
                                                           ToNodeProto(m, "k"));
    EXPECT_EQ(SameNodeRecord(n, m), records_equal) << "change " << i;
    same += records_equal;
  }
  EXPECT_EQ(same, 3);  // usage and flavor are not in the record
  EXPECT_TRUE(SameNodeRecord(n, n));
}

TEST(ClockTest, VirtualClockMovesOnlyWhenTold) {
  const absl::Time start = absl::FromUnixSeconds(1'800'000'000);
  VirtualClock clock(start);
  EXPECT_EQ(clock.Now(), start);
  EXPECT_EQ(clock.Advance(absl::Seconds(90)), start + absl::Seconds(90));
  EXPECT_EQ(clock.Now(), start + absl::Seconds(90));
  clock.Advance(-absl::Seconds(30));  // ignored
  EXPECT_EQ(clock.Now(), start + absl::Seconds(90));
  clock.Set(start);
  EXPECT_EQ(clock.Now(), start);
}

TEST(ClockTest, RealClockFollowsNow) {
  const absl::Time before = absl::Now();
  const absl::Time now = RealClock::Get().Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, absl::Now());
}

}  // namespace
}  // namespace trainyard::dispatcher
