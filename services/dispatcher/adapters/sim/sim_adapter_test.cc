#include "services/dispatcher/adapters/sim/sim_adapter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/lib/domain/errors.h"
#include "tests/support/dispatcher/launch_request.h"

namespace trainyard::dispatcher::sim {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr int64_t kTiB = int64_t{1} << 40;

// Two on-demand nodes (od-0001, od-0002 in rack r1) and two spot nodes
// (sp-0001, sp-0002 in rack r2), 8 H100 each; no random faults.
constexpr char kConfig[] = R"pb(
  cluster: "sim-t"
  pools {
    name: "od"
    flavor: "on-demand-h100"
    flavor_kind: FLAVOR_KIND_ON_DEMAND
    gpu_hour_price_micros: 4000000
  }
  pools {
    name: "spot"
    flavor: "spot-h100"
    flavor_kind: FLAVOR_KIND_SPOT
    gpu_hour_price_micros: 1500000
  }
  nodes {
    prefix: "od-"
    count: 2
    pool: "od"
    rack: "r1"
    block: "b1"
    capacity {
      gpus: 8
      gpu_model: "H100"
      cpu_millis: 96000
      memory_bytes: 1099511627776
    }
  }
  nodes {
    prefix: "sp-"
    count: 2
    pool: "spot"
    rack: "r2"
    block: "b1"
    capacity {
      gpus: 8
      gpu_model: "H100"
      cpu_millis: 96000
      memory_bytes: 1099511627776
    }
    labels { key: "zone" value: "z1" }
  }
  default_job_duration { seconds: 120 }
)pb";

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

v1::SimClusterConfig Config(std::string_view text = kConfig) {
  absl::StatusOr<v1::SimClusterConfig> config = ParseSimConfig(text, "test");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : v1::SimClusterConfig();
}

// A request for job `job` attempt 1 with one worker per node in `nodes`, each
// asking for `gpus` H100s, and the given env.
LaunchRequest Request(int64_t job, std::vector<std::string> nodes,
                      int32_t gpus = 8,
                      std::map<std::string, std::string> env = {}) {
  LaunchRequest r = AttemptRequest(job, 1, "acme", std::move(nodes), gpus);
  r.spec.mutable_resources()->set_gpu_model("H100");
  r.spec.mutable_resources()->set_cpu_millis(8000);
  r.spec.mutable_resources()->set_memory_bytes(int64_t{64} << 30);
  for (const auto& [k, v] : env) (*r.spec.mutable_env())[k] = v;
  return r;
}

class SimAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(kConfig); }

  void Build(std::string_view text) {
    absl::StatusOr<std::unique_ptr<SimAdapter>> sim =
        SimAdapter::Create(Config(text), &clock_);
    ASSERT_TRUE(sim.ok()) << sim.status();
    sim_ = std::move(*sim);
  }

  AttemptStatus Launch(const LaunchRequest& r) {
    absl::StatusOr<AttemptStatus> s = sim_->Launch(r);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : AttemptStatus();
  }

  AttemptStatus StatusOf(std::string_view name) {
    absl::StatusOr<AttemptStatus> s = sim_->Status(name);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : AttemptStatus();
  }

  NodeInventory NodeOf(std::string_view name) {
    absl::StatusOr<std::vector<NodeInventory>> nodes = sim_->Inventory();
    EXPECT_TRUE(nodes.ok()) << nodes.status();
    if (nodes.ok()) {
      for (const NodeInventory& n : *nodes) {
        if (n.name == name) return n;
      }
    }
    ADD_FAILURE() << "no node " << name;
    return NodeInventory();
  }

  void Advance(absl::Duration d) { clock_.Advance(d); }

  VirtualClock clock_{kStart};
  std::unique_ptr<SimAdapter> sim_;
};

// --- Config ---------------------------------------------------------------

TEST(SimConfigTest, ParsesAndExpandsNodes) {
  const v1::SimClusterConfig config = Config();
  EXPECT_EQ(config.cluster(), "sim-t");
  std::vector<std::string> names;
  for (const ExpandedNode& n : ExpandNodes(config)) names.push_back(n.name);
  EXPECT_THAT(names, ElementsAre("od-0001", "od-0002", "sp-0001", "sp-0002"));
}

TEST(SimConfigTest, SyntaxErrorNamesFileAndLine) {
  absl::StatusOr<v1::SimClusterConfig> config = ParseSimConfig(
      "cluster: \"x\"\n"
      "pools { name: \"p\" }\n"
      "nodes { name: \"n1\" pool: \"p\" capacity { gpus: eight } }\n",
      "cluster.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              StartsWith("cluster.textproto:3:"));
}

TEST(SimConfigTest, UnknownFieldNamesLine) {
  absl::StatusOr<v1::SimClusterConfig> config =
      ParseSimConfig("cluster: \"x\"\n\nbogus: 1\n", "c.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              StartsWith("c.textproto:3:"));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("bogus"));
}

constexpr char kPools[] =
    "cluster: \"x\"\n"
    "pools { name: \"p\" flavor: \"f\" flavor_kind: FLAVOR_KIND_ON_DEMAND }\n";

TEST(SimConfigTest, DuplicateNodeNamesTheSecondEntry) {
  absl::StatusOr<v1::SimClusterConfig> config = ParseSimConfig(
      absl::StrCat(kPools, "nodes { name: \"n-0002\" pool: \"p\" }\n",
                   "nodes { prefix: \"n-\" count: 3 pool: "
                   "\"p\" }\n"),
      "c.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(config.status().message());
  EXPECT_THAT(message, StartsWith("c.textproto:4:"));
  EXPECT_THAT(message, HasSubstr("nodes[1].prefix: duplicate node \"n-0002\""));
  EXPECT_EQ(domain::ErrorField(config.status()), "nodes[1].prefix");
  EXPECT_EQ(domain::ErrorReason(config.status()), domain::reason::kDuplicate);
}

TEST(SimConfigTest, UnknownPool) {
  absl::StatusOr<v1::SimClusterConfig> config = ParseSimConfig(
      absl::StrCat(kPools, "nodes {\n  name: \"n1\"\n  pool: \"gpu\"\n}\n"),
      "c.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              StartsWith("c.textproto:5:"));
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("nodes[0].pool: unknown pool \"gpu\""));
}

TEST(SimConfigTest, SemanticErrors) {
  struct Case {
    std::string text;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"pools { name: \"p\" flavor: \"f\" flavor_kind: FLAVOR_KIND_SPOT }",
       "cluster"},
      {"cluster: \"x\" nodes { name: \"n\" pool: \"p\" }", "pools"},
      {"cluster: \"x\" pools { name: \"p\" flavor: \"f\" }",
       "pools[0].flavor_kind"},
      {absl::StrCat(kPools,
                    "pools { name: \"p\" flavor: \"g\" flavor_kind: "
                    "FLAVOR_KIND_SPOT }"),
       "pools[1].name"},
      {"cluster: \"x\" pools { name: \"p\" flavor: \"f\" flavor_kind: "
       "FLAVOR_KIND_ON_DEMAND reclaim_rate_per_hour: 0.1 } nodes { name: "
       "\"n\" pool: \"p\" }",
       "pools[0].reclaim_rate_per_hour"},
      {"cluster: \"x\" pools { name: \"p\" flavor: \"f\" flavor_kind: "
       "FLAVOR_KIND_ON_DEMAND gpu_hour_price_micros: -1 }",
       "pools[0].gpu_hour_price_micros"},
      {kPools, "nodes"},
      {absl::StrCat(kPools, "nodes { pool: \"p\" }"), "nodes[0]"},
      {absl::StrCat(kPools,
                    "nodes { name: \"n\" prefix: \"m\" count: 1 "
                    "pool: \"p\" }"),
       "nodes[0]"},
      {absl::StrCat(kPools, "nodes { prefix: \"m\" pool: \"p\" }"),
       "nodes[0].count"},
      {absl::StrCat(kPools, "nodes { name: \"N_1\" pool: \"p\" }"),
       "nodes[0].name"},
      {absl::StrCat(kPools,
                    "nodes { name: \"n\" pool: \"p\" capacity { "
                    "gpus: -8 } }"),
       "nodes[0].capacity.gpus"},
      {absl::StrCat(kPools,
                    "nodes { name: \"n\" pool: \"p\" capacity { "
                    "memory_bytes: -1 } }"),
       "nodes[0].capacity.memory_bytes"},
      {absl::StrCat(kPools,
                    "nodes { name: \"n\" pool: \"p\" } faults { "
                    "node_failure_rate_per_hour: -1 }"),
       "faults.node_failure_rate_per_hour"},
      {absl::StrCat(kPools,
                    "nodes { name: \"n\" pool: \"p\" } "
                    "default_job_duration { seconds: -5 }"),
       "default_job_duration"},
      {absl::StrCat(kPools,
                    "nodes { name: \"n\" pool: \"p\" } "
                    "default_job_duration { seconds: 400000000 }"),
       "default_job_duration"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<v1::SimClusterConfig> config = ParseSimConfig(c.text, "c");
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(domain::ErrorField(config.status()), c.field) << config.status();
    EXPECT_THAT(std::string(config.status().message()),
                HasSubstr(c.field + ": "));
  }
}

TEST(SimConfigTest, LoadMissingFileIsNotFound) {
  absl::StatusOr<v1::SimClusterConfig> config =
      LoadSimConfig("/nonexistent/sim.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("/nonexistent/sim.textproto"));
}

TEST(SimConfigTest, ExampleConfigOfTheQuickStartLoads) {
  const char* root = std::getenv("TRAINYARD_SOURCE_DIR");
  const std::string path =
      absl::StrCat(root == nullptr ? TRAINYARD_SOURCE_DIR_DEFAULT : root,
                   "/deploy/local/sim-cluster.textproto");
  absl::StatusOr<v1::SimClusterConfig> config = LoadSimConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  VirtualClock clock(kStart);
  absl::StatusOr<std::unique_ptr<SimAdapter>> sim =
      SimAdapter::Create(*config, &clock);
  ASSERT_TRUE(sim.ok()) << sim.status();
  absl::StatusOr<std::vector<NodeInventory>> nodes = (*sim)->Inventory();
  ASSERT_TRUE(nodes.ok());
  ASSERT_THAT(*nodes, SizeIs(8));
  int spot = 0;
  std::set<std::string> racks;
  for (const NodeInventory& n : *nodes) {
    EXPECT_EQ(n.gpus, 8);
    EXPECT_EQ(n.gpu_model, "H100");
    spot += n.pool == "spot" ? 1 : 0;
    racks.insert(n.rack);
  }
  EXPECT_EQ(spot, 4);
  EXPECT_GE(racks.size(), 2u);
}

TEST(SimConfigTest, CreateRejectsInvalidConfigAndNullClock) {
  VirtualClock clock(kStart);
  EXPECT_EQ(SimAdapter::Create(v1::SimClusterConfig(), &clock).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SimAdapter::Create(Config(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SimCheckpointUriTest, RoundTrip) {
  EXPECT_EQ(SimCheckpointUri("ty-1-2", 90), "sim://ty-1-2/step-90");
  EXPECT_EQ(ParseSimCheckpointUri("sim://ty-1-2/step-90"), 90);
  EXPECT_EQ(ParseSimCheckpointUri("s3://b/step-90"), std::nullopt);
  EXPECT_EQ(ParseSimCheckpointUri("sim://ty-1-2/step-"), std::nullopt);
  EXPECT_EQ(ParseSimCheckpointUri("sim://ty-1-2/step-9x"), std::nullopt);
}

// --- Running ----------------------------------------------------------------

TEST_F(SimAdapterTest, RunsToSuccessAtTheExactDuration) {
  const AttemptStatus launched =
      Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "90s"}}));
  EXPECT_EQ(launched.name, "ty-1-1");
  EXPECT_EQ(launched.phase, AttemptPhase::kRunning);
  EXPECT_EQ(launched.submit_time, kStart);
  EXPECT_EQ(launched.start_time, kStart);
  EXPECT_THAT(launched.nodes, ElementsAre("od-0001"));
  EXPECT_THAT(launched.backend_id, StartsWith("sim-"));

  Advance(absl::Seconds(89));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
  Advance(absl::Seconds(1));
  const AttemptStatus done = StatusOf("ty-1-1");
  EXPECT_EQ(done.phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(done.failure, FailureKind::kNone);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_EQ(done.end_time, kStart + absl::Seconds(90));
}

TEST_F(SimAdapterTest, EndTimeIsExactWhenObservedLate) {
  Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "90s"}}));
  Advance(absl::Hours(5));
  const AttemptStatus done = StatusOf("ty-1-1");
  EXPECT_EQ(done.phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(done.end_time, kStart + absl::Seconds(90));
}

TEST_F(SimAdapterTest, DefaultDurationComesFromTheConfig) {
  Launch(Request(1, {"od-0001"}));
  Advance(absl::Seconds(119));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
  Advance(absl::Seconds(1));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kSucceeded);
}

TEST_F(SimAdapterTest, ExitCodeFailsAsUserError) {
  Launch(Request(1, {"od-0001"}, 8,
                 {{"SIM_DURATION", "30s"}, {"SIM_EXIT_CODE", "3"}}));
  Advance(absl::Seconds(30));
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_THAT(s.message, HasSubstr("code 3"));
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(30));
}

TEST_F(SimAdapterTest, TimeLimitStopsTheAttempt) {
  LaunchRequest r = Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "90s"}});
  r.spec.mutable_time_limit()->set_seconds(30);
  Launch(r);
  Advance(absl::Seconds(29));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
  Advance(absl::Seconds(10));
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kTimeLimit);
  EXPECT_EQ(s.exit_code, std::nullopt);
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(30));
}

TEST_F(SimAdapterTest, FinishingExactlyAtTheTimeLimitSucceeds) {
  LaunchRequest r = Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "30s"}});
  r.spec.mutable_time_limit()->set_seconds(30);
  Launch(r);
  Advance(absl::Minutes(1));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kSucceeded);
}

TEST_F(SimAdapterTest, LaunchDelayKeepsTheAttemptPending) {
  Build(absl::StrCat(kConfig, "launch_delay { seconds: 5 }"));
  const AttemptStatus launched =
      Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "10s"}}));
  EXPECT_EQ(launched.phase, AttemptPhase::kPending);
  EXPECT_EQ(launched.start_time, std::nullopt);
  Advance(absl::Seconds(5));
  AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kRunning);
  EXPECT_EQ(s.start_time, kStart + absl::Seconds(5));
  Advance(absl::Seconds(10));
  s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(15));
}

TEST_F(SimAdapterTest, LaunchIsIdempotent) {
  const LaunchRequest r = Request(1, {"od-0001"}, 4);
  const AttemptStatus first = Launch(r);
  Advance(absl::Seconds(10));
  const AttemptStatus second = Launch(r);
  EXPECT_EQ(second.backend_id, first.backend_id);
  EXPECT_EQ(second.start_time, first.start_time);
  absl::StatusOr<std::vector<AttemptStatus>> all = sim_->List();
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, SizeIs(1));
  EXPECT_EQ(NodeOf("od-0001").used_gpus, 4);
  // Even a different request under the same name returns the existing one.
  LaunchRequest other = r;
  other.worker_nodes = {"od-0002"};
  EXPECT_THAT(Launch(other).nodes, ElementsAre("od-0001"));
  EXPECT_EQ(NodeOf("od-0002").used_gpus, 0);
}

TEST_F(SimAdapterTest, CapacityIsEnforcedAndReleased) {
  Launch(Request(1, {"od-0001"}, 6, {{"SIM_DURATION", "60s"}}));
  EXPECT_EQ(NodeOf("od-0001").used_gpus, 6);
  EXPECT_EQ(NodeOf("od-0001").used_cpu_millis, 8000);

  absl::StatusOr<AttemptStatus> refused =
      sim_->Launch(Request(2, {"od-0002", "od-0001"}, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(domain::ErrorField(refused.status()), "worker_nodes[1]");
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("od-0001"));
  // Nothing was allocated by the refused launch.
  EXPECT_EQ(NodeOf("od-0002").used_gpus, 0);
  EXPECT_EQ(sim_->Status("ty-2-1").status().code(),
            absl::StatusCode::kNotFound);

  // Two workers on one node are summed.
  absl::StatusOr<AttemptStatus> two =
      sim_->Launch(Request(3, {"od-0002", "od-0002"}, 5));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(domain::ErrorField(two.status()), "worker_nodes[1]");
  EXPECT_TRUE(sim_->Launch(Request(4, {"od-0002", "od-0002"}, 4)).ok());
  EXPECT_EQ(NodeOf("od-0002").used_gpus, 8);

  Advance(absl::Seconds(60));
  EXPECT_EQ(NodeOf("od-0001").used_gpus, 0);
  EXPECT_EQ(NodeOf("od-0001").used_cpu_millis, 0);
  EXPECT_TRUE(sim_->Launch(Request(2, {"od-0001", "od-0001"}, 4)).ok());
}

TEST_F(SimAdapterTest, RefusesUnknownNodesOtherFlavorsAndModels) {
  absl::StatusOr<AttemptStatus> s = sim_->Launch(Request(1, {"zz-0001"}));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(domain::ErrorField(s.status()), "worker_nodes[0]");
  EXPECT_EQ(domain::ErrorReason(s.status()), "UNKNOWN_NODE");

  LaunchRequest r = Request(2, {"sp-0001"});
  r.flavor = "on-demand-h100";
  s = sim_->Launch(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(domain::ErrorReason(s.status()), "FLAVOR_MISMATCH");
  r.flavor = "spot-h100";
  EXPECT_TRUE(sim_->Launch(r).ok());

  r = Request(3, {"od-0001"});
  r.spec.mutable_resources()->set_gpu_model("A100");
  s = sim_->Launch(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(domain::ErrorReason(s.status()), "GPU_MODEL_MISMATCH");
}

TEST_F(SimAdapterTest, RejectsMalformedRequests) {
  LaunchRequest r = Request(1, {"od-0001"});
  r.name = "ty-1-2";
  absl::StatusOr<AttemptStatus> s = sim_->Launch(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(domain::ErrorField(s.status()), "name");

  r = Request(1, {"od-0001"});
  r.spec.set_workers(2);
  EXPECT_EQ(domain::ErrorField(sim_->Launch(r).status()), "worker_nodes");

  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"SIM_DURATION", "soon"},
           {"SIM_DURATION", "-5s"},
           {"SIM_DURATION", "100000h"},
           {"SIM_EXIT_CODE", "256"},
           {"SIM_EXIT_CODE", "x"},
           {"SIM_CHECKPOINT_EVERY", "0s"},
           {"SIM_CHECKPOINT_EVERY", "1ms"}}) {
    s = sim_->Launch(Request(1, {"od-0001"}, 8, {{key, value}}));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument)
        << key << "=" << value;
    EXPECT_EQ(domain::ErrorField(s.status()),
              absl::StrCat("spec.env[\"", key, "\"]"));
  }
  // Extra env from the dispatcher is read too, and named as such.
  r = Request(1, {"od-0001"});
  r.env["SIM_EXIT_CODE"] = "-1";
  EXPECT_EQ(domain::ErrorField(sim_->Launch(r).status()),
            "env[\"SIM_EXIT_CODE\"]");
  absl::StatusOr<std::vector<AttemptStatus>> all = sim_->List();
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, IsEmpty());
}

// --- Checkpoints and stopping
// ---------------------------------------------------

TEST_F(SimAdapterTest, RecordsPeriodicCheckpoints) {
  Launch(Request(1, {"od-0001"}, 8,
                 {{"SIM_DURATION", "100s"}, {"SIM_CHECKPOINT_EVERY", "30s"}}));
  Advance(absl::Seconds(45));
  EXPECT_THAT(StatusOf("ty-1-1").checkpoints,
              ElementsAre(CheckpointInfo{30, "sim://ty-1-1/step-30",
                                         kStart + absl::Seconds(30)}));
  Advance(absl::Minutes(10));
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_THAT(s.checkpoints,
              ElementsAre(CheckpointInfo{30, "sim://ty-1-1/step-30",
                                         kStart + absl::Seconds(30)},
                          CheckpointInfo{60, "sim://ty-1-1/step-60",
                                         kStart + absl::Seconds(60)},
                          CheckpointInfo{90, "sim://ty-1-1/step-90",
                                         kStart + absl::Seconds(90)}));
}

TEST_F(SimAdapterTest, AnAttemptsOutputIsItsOwnEvents) {
  Launch(Request(1, {"od-0001"}, 8,
                 {{"SIM_DURATION", "100s"}, {"SIM_CHECKPOINT_EVERY", "30s"}}));
  Launch(Request(2, {"od-0002"}, 8, {{"SIM_DURATION", "10s"}}));
  Advance(absl::Seconds(45));
  const std::string first =
      "2027-01-15T08:00:00Z LAUNCHED ty-1-1 od-0001\n"
      "2027-01-15T08:00:00Z STARTED ty-1-1\n"
      "2027-01-15T08:00:30Z CHECKPOINT ty-1-1 sim://ty-1-1/step-30\n";
  absl::StatusOr<LogChunk> all = sim_->ReadLog("ty-1-1", 0, 1 << 20);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data, first);
  EXPECT_EQ(all->offset, 0);
  EXPECT_EQ(all->size, static_cast<int64_t>(first.size()));
  absl::StatusOr<LogChunk> part = sim_->ReadLog("ty-1-1", 10, 5);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->data, first.substr(10, 5));
  EXPECT_EQ(part->offset, 10);
  absl::StatusOr<LogChunk> past = sim_->ReadLog("ty-1-1", 1000, 5);
  ASSERT_TRUE(past.ok()) << past.status();
  EXPECT_EQ(past->data, "");
  EXPECT_EQ(past->offset, static_cast<int64_t>(first.size()));
  absl::StatusOr<LogChunk> other = sim_->ReadLog("ty-2-1", 0, 1 << 20);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->data,
            "2027-01-15T08:00:00Z LAUNCHED ty-2-1 od-0002\n"
            "2027-01-15T08:00:00Z STARTED ty-2-1\n"
            "2027-01-15T08:00:10Z SUCCEEDED ty-2-1\n");

  Advance(absl::Minutes(2));
  all = sim_->ReadLog("ty-1-1", 0, 1 << 20);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data,
            first +
                "2027-01-15T08:01:00Z CHECKPOINT ty-1-1 sim://ty-1-1/step-60\n"
                "2027-01-15T08:01:30Z CHECKPOINT ty-1-1 sim://ty-1-1/step-90\n"
                "2027-01-15T08:01:40Z SUCCEEDED ty-1-1\n");
  EXPECT_EQ(sim_->ReadLog("ty-1-1", -1, 5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sim_->ReadLog("ty-1-1", 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(sim_->Delete("ty-1-1").ok());
  EXPECT_EQ(sim_->ReadLog("ty-1-1", 0, 5).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SimAdapterTest, CheckpointIntervalDefaultsToTheSpecPolicy) {
  LaunchRequest r = Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "50s"}});
  r.spec.mutable_checkpoint()->mutable_interval()->set_seconds(20);
  Launch(r);
  Advance(absl::Minutes(1));
  const AttemptStatus s = StatusOf("ty-1-1");
  ASSERT_THAT(s.checkpoints, SizeIs(2));
  EXPECT_EQ(s.checkpoints[1].step, 40);
}

TEST_F(SimAdapterTest, ResumingFromASimCheckpointShortensTheRun) {
  LaunchRequest r =
      Request(1, {"od-0001"}, 8,
              {{"SIM_DURATION", "90s"}, {"SIM_CHECKPOINT_EVERY", "20s"}});
  r.attempt = 2;
  r.name = "ty-1-2";
  r.resume_from = "sim://ty-1-1/step-60";
  Launch(r);
  Advance(absl::Seconds(29));
  EXPECT_EQ(StatusOf("ty-1-2").phase, AttemptPhase::kRunning);
  Advance(absl::Seconds(1));
  const AttemptStatus s = StatusOf("ty-1-2");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_THAT(s.checkpoints,
              ElementsAre(CheckpointInfo{80, "sim://ty-1-2/step-80",
                                         kStart + absl::Seconds(20)}));
}

TEST_F(SimAdapterTest, ResumingPastTheEndOfTheWorkEndsAtOnce) {
  LaunchRequest r =
      Request(1, {"od-0001"}, 8,
              {{"SIM_DURATION", "90s"}, {"SIM_CHECKPOINT_EVERY", "10s"}});
  r.resume_from = "sim://ty-1-0/step-9223372036854775807";
  const AttemptStatus s = Launch(r);
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(s.end_time, kStart);
  EXPECT_THAT(s.checkpoints, IsEmpty());
}

TEST_F(SimAdapterTest, StopWithGraceRecordsAFinalCheckpoint) {
  Launch(Request(1, {"od-0001"}, 8,
                 {{"SIM_DURATION", "1h"}, {"SIM_CHECKPOINT_EVERY", "30s"}}));
  Advance(absl::Seconds(45));
  ASSERT_TRUE(
      sim_->Stop("ty-1-1", absl::Seconds(20), StopReason::kPreemption).ok());
  AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kRunning);
  EXPECT_TRUE(s.stop_requested);
  EXPECT_EQ(s.stop_deadline, kStart + absl::Seconds(65));
  ASSERT_THAT(s.checkpoints, SizeIs(2));
  EXPECT_EQ(s.checkpoints.back(), (CheckpointInfo{45, "sim://ty-1-1/step-45",
                                                  kStart + absl::Seconds(45)}));

  Advance(absl::Seconds(19));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
  EXPECT_EQ(NodeOf("od-0001").used_gpus, 8);
  Advance(absl::Seconds(1));
  s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled);
  EXPECT_EQ(s.failure, FailureKind::kPreempted);
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(65));
  // No periodic checkpoint inside the grace period (60s would have been one).
  EXPECT_THAT(s.checkpoints, SizeIs(2));
  EXPECT_EQ(NodeOf("od-0001").used_gpus, 0);
}

TEST_F(SimAdapterTest, StopWithoutGraceCancelsAtOnce) {
  Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "1h"}}));
  Advance(absl::Seconds(10));
  ASSERT_TRUE(
      sim_->Stop("ty-1-1", absl::ZeroDuration(), StopReason::kCancel).ok());
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled);
  EXPECT_EQ(s.failure, FailureKind::kCancelled);
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(10));
  // Without checkpointing there is no final checkpoint.
  EXPECT_THAT(s.checkpoints, IsEmpty());
  // Stopping an ended attempt is OK and changes nothing.
  EXPECT_TRUE(
      sim_->Stop("ty-1-1", absl::Seconds(5), StopReason::kPreemption).ok());
  EXPECT_EQ(StatusOf("ty-1-1").failure, FailureKind::kCancelled);
}

TEST_F(SimAdapterTest, StopOfAPendingAttemptCancelsItAtOnce) {
  Build(absl::StrCat(kConfig, "launch_delay { seconds: 30 }"));
  Launch(Request(1, {"od-0001"}));
  ASSERT_TRUE(
      sim_->Stop("ty-1-1", absl::Minutes(5), StopReason::kPreemption).ok());
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled);
  EXPECT_EQ(s.failure, FailureKind::kPreempted);
  EXPECT_EQ(s.start_time, std::nullopt);
  EXPECT_EQ(NodeOf("od-0001").used_gpus, 0);
}

TEST_F(SimAdapterTest, AttemptEndingInsideItsGraceSucceeds) {
  Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "60s"}}));
  Advance(absl::Seconds(50));
  ASSERT_TRUE(
      sim_->Stop("ty-1-1", absl::Seconds(30), StopReason::kPreemption).ok());
  Advance(absl::Seconds(30));
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(60));
}

TEST_F(SimAdapterTest, SecondStopShortensTheDeadlineAndCancelWins) {
  Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "1h"}}));
  ASSERT_TRUE(
      sim_->Stop("ty-1-1", absl::Minutes(5), StopReason::kPreemption).ok());
  Advance(absl::Seconds(10));
  ASSERT_TRUE(sim_->Stop("ty-1-1", absl::Hours(1), StopReason::kCancel).ok());
  EXPECT_EQ(StatusOf("ty-1-1").stop_deadline, kStart + absl::Minutes(5));
  ASSERT_TRUE(
      sim_->Stop("ty-1-1", absl::Seconds(20), StopReason::kCancel).ok());
  EXPECT_EQ(StatusOf("ty-1-1").stop_deadline, kStart + absl::Seconds(30));
  Advance(absl::Seconds(20));
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled);
  EXPECT_EQ(s.failure, FailureKind::kCancelled);
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(30));
}

TEST_F(SimAdapterTest, StopErrors) {
  EXPECT_EQ(sim_->Stop("ty-9-1", absl::Seconds(1), StopReason::kCancel).code(),
            absl::StatusCode::kNotFound);
  Launch(Request(1, {"od-0001"}));
  const absl::Status s =
      sim_->Stop("ty-1-1", absl::Seconds(-1), StopReason::kCancel);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(domain::ErrorField(s), "grace");
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
}

TEST_F(SimAdapterTest, Signals) {
  Launch(Request(1, {"od-0001"}, 8,
                 {{"SIM_DURATION", "1h"}, {"SIM_CHECKPOINT_EVERY", "10m"}}));
  Advance(absl::Seconds(42));
  ASSERT_TRUE(sim_->Signal("ty-1-1", SIGUSR1).ok());
  EXPECT_THAT(StatusOf("ty-1-1").checkpoints,
              ElementsAre(CheckpointInfo{42, "sim://ty-1-1/step-42",
                                         kStart + absl::Seconds(42)}));
  ASSERT_TRUE(sim_->Signal("ty-1-1", SIGHUP).ok());  // ignored
  EXPECT_THAT(StatusOf("ty-1-1").checkpoints, SizeIs(1));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);

  EXPECT_EQ(domain::ErrorField(sim_->Signal("ty-1-1", 0)), "signal");
  EXPECT_EQ(sim_->Signal("ty-1-1", 65).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sim_->Signal("ty-9-1", SIGTERM).code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(sim_->Signal("ty-1-1", SIGKILL).ok());
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.exit_code, 137);
  EXPECT_EQ(sim_->Signal("ty-1-1", SIGTERM).code(),
            absl::StatusCode::kFailedPrecondition);
}

// --- Faults on command -------------------------------------------------------

TEST_F(SimAdapterTest, FailNodeFailsItsAttemptsUntilRecovered) {
  Launch(Request(1, {"od-0001", "od-0002"}, 4, {{"SIM_DURATION", "1h"}}));
  Launch(Request(2, {"od-0002"}, 4, {{"SIM_DURATION", "1h"}}));
  Advance(absl::Minutes(3));
  ASSERT_TRUE(sim_->FailNode("od-0001").ok());
  AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kNodeFailure);
  EXPECT_EQ(s.exit_code, std::nullopt);
  EXPECT_THAT(s.message, HasSubstr("od-0001"));
  EXPECT_EQ(s.end_time, kStart + absl::Minutes(3));
  EXPECT_EQ(StatusOf("ty-2-1").phase, AttemptPhase::kRunning);
  // The failed gang's other worker released od-0002 too.
  EXPECT_EQ(NodeOf("od-0002").used_gpus, 4);

  NodeInventory n = NodeOf("od-0001");
  EXPECT_TRUE(n.failed);
  EXPECT_FALSE(n.schedulable);
  EXPECT_EQ(n.state_message, "failed");
  EXPECT_EQ(n.used_gpus, 0);
  absl::StatusOr<AttemptStatus> refused = sim_->Launch(Request(3, {"od-0001"}));
  EXPECT_EQ(domain::ErrorReason(refused.status()), "NODE_DOWN");

  EXPECT_TRUE(sim_->FailNode("od-0001").ok());  // idempotent
  Advance(absl::Hours(10));
  EXPECT_TRUE(NodeOf("od-0001").failed);  // command faults wait for Recover
  ASSERT_TRUE(sim_->RecoverNode("od-0001").ok());
  n = NodeOf("od-0001");
  EXPECT_FALSE(n.failed);
  EXPECT_TRUE(n.schedulable);
  EXPECT_TRUE(sim_->Launch(Request(3, {"od-0001"})).ok());
  EXPECT_EQ(sim_->FailNode("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sim_->RecoverNode("nope").code(), absl::StatusCode::kNotFound);
}

TEST_F(SimAdapterTest, ReclaimNodeAndPool) {
  Launch(Request(1, {"sp-0001"}, 8, {{"SIM_DURATION", "1h"}}));
  Launch(Request(2, {"sp-0002"}, 8, {{"SIM_DURATION", "1h"}}));
  Launch(Request(3, {"od-0001"}, 8, {{"SIM_DURATION", "1h"}}));
  Advance(absl::Minutes(1));

  ASSERT_TRUE(sim_->ReclaimNode("sp-0001").ok());
  AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kSpotReclaim);
  EXPECT_EQ(NodeOf("sp-0001").state_message, "reclaimed");
  EXPECT_TRUE(NodeOf("sp-0001").failed);
  EXPECT_EQ(StatusOf("ty-2-1").phase, AttemptPhase::kRunning);

  EXPECT_EQ(sim_->ReclaimNode("od-0001").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sim_->ReclaimPool("od").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sim_->ReclaimPool("gpu").code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(sim_->ReclaimPool("spot").ok());
  EXPECT_EQ(StatusOf("ty-2-1").failure, FailureKind::kSpotReclaim);
  EXPECT_EQ(StatusOf("ty-3-1").phase, AttemptPhase::kRunning);
  EXPECT_TRUE(NodeOf("sp-0002").failed);
  ASSERT_TRUE(sim_->RecoverNode("sp-0001").ok());
  EXPECT_FALSE(NodeOf("sp-0001").failed);
  EXPECT_TRUE(NodeOf("sp-0002").failed);
}

TEST_F(SimAdapterTest, CrashJob) {
  Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "1h"}}));
  Advance(absl::Seconds(5));
  EXPECT_EQ(domain::ErrorField(sim_->CrashJob("ty-1-1", 0)), "exit_code");
  EXPECT_EQ(sim_->CrashJob("ty-9-1", 1).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(sim_->CrashJob("ty-1-1", 42).ok());
  const AttemptStatus s = StatusOf("ty-1-1");
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.exit_code, 42);
  EXPECT_EQ(s.end_time, kStart + absl::Seconds(5));
  EXPECT_EQ(sim_->CrashJob("ty-1-1", 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SimAdapterTest, CordonedNodeRefusesNewWorkButKeepsRunningWork) {
  Launch(Request(1, {"od-0001"}, 4, {{"SIM_DURATION", "1h"}}));
  ASSERT_TRUE(sim_->SetNodeSchedulable("od-0001", false).ok());
  NodeInventory n = NodeOf("od-0001");
  EXPECT_FALSE(n.schedulable);
  EXPECT_FALSE(n.failed);
  EXPECT_EQ(n.state_message, "cordoned");
  EXPECT_EQ(
      domain::ErrorReason(sim_->Launch(Request(2, {"od-0001"}, 4)).status()),
      "NODE_UNSCHEDULABLE");
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
  ASSERT_TRUE(sim_->SetNodeSchedulable("od-0001", true).ok());
  EXPECT_TRUE(sim_->Launch(Request(2, {"od-0001"}, 4)).ok());
  EXPECT_EQ(sim_->SetNodeSchedulable("nope", true).code(),
            absl::StatusCode::kNotFound);
}

// --- Listing ---------------------------------------------------------------

TEST_F(SimAdapterTest, StatusListDeleteAndNotFound) {
  EXPECT_EQ(sim_->Status("ty-1-1").status().code(),
            absl::StatusCode::kNotFound);
  Launch(Request(2, {"od-0001"}, 1, {{"SIM_DURATION", "10s"}}));
  Launch(Request(1, {"od-0001"}, 1, {{"SIM_DURATION", "1h"}}));
  absl::StatusOr<std::vector<AttemptStatus>> all = sim_->List();
  ASSERT_TRUE(all.ok());
  ASSERT_THAT(*all, SizeIs(2));
  EXPECT_EQ((*all)[0].name, "ty-1-1");
  EXPECT_EQ((*all)[1].name, "ty-2-1");

  EXPECT_EQ(sim_->Delete("ty-1-1").code(),
            absl::StatusCode::kFailedPrecondition);
  Advance(absl::Seconds(10));
  EXPECT_EQ(StatusOf("ty-2-1").phase, AttemptPhase::kSucceeded);
  ASSERT_TRUE(sim_->Delete("ty-2-1").ok());
  EXPECT_EQ(sim_->Status("ty-2-1").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(sim_->Delete("ty-2-1").ok());
  all = sim_->List();
  ASSERT_TRUE(all.ok());
  ASSERT_THAT(*all, SizeIs(1));
  EXPECT_EQ((*all)[0].name, "ty-1-1");
}

TEST_F(SimAdapterTest, InventoryReportsEveryNode) {
  Launch(Request(1, {"sp-0002"}, 3));
  absl::StatusOr<std::vector<NodeInventory>> nodes = sim_->Inventory();
  ASSERT_TRUE(nodes.ok());
  ASSERT_THAT(*nodes, SizeIs(4));
  const NodeInventory& n = (*nodes)[3];
  EXPECT_EQ(n.name, "sp-0002");
  EXPECT_EQ(n.pool, "spot");
  EXPECT_EQ(n.flavor, "spot-h100");
  EXPECT_EQ(n.gpu_model, "H100");
  EXPECT_EQ(n.gpus, 8);
  EXPECT_EQ(n.cpu_millis, 96000);
  EXPECT_EQ(n.memory_bytes, kTiB);
  EXPECT_EQ(n.used_gpus, 3);
  EXPECT_EQ(n.used_memory_bytes, int64_t{64} << 30);
  EXPECT_EQ(n.rack, "r2");
  EXPECT_EQ(n.block, "b1");
  EXPECT_EQ(n.labels.at("zone"), "z1");
  EXPECT_TRUE(n.schedulable);
  EXPECT_FALSE(n.failed);
  EXPECT_EQ((*nodes)[0].name, "od-0001");
  EXPECT_EQ((*nodes)[0].rack, "r1");
  EXPECT_EQ(sim_->kind(), "sim");
  EXPECT_EQ(sim_->cluster(), "sim-t");
}

TEST_F(SimAdapterTest, ClockGoingBackIsNoProgress) {
  Launch(Request(1, {"od-0001"}, 8, {{"SIM_DURATION", "60s"}}));
  Advance(absl::Seconds(50));
  sim_->Tick();
  clock_.Set(kStart);
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
  clock_.Set(kStart + absl::Seconds(55));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kRunning);
  clock_.Set(kStart + absl::Seconds(60));
  EXPECT_EQ(StatusOf("ty-1-1").phase, AttemptPhase::kSucceeded);
}

TEST_F(SimAdapterTest, EventsAreLoggedInTimeOrder) {
  Launch(Request(1, {"od-0001"}, 8,
                 {{"SIM_DURATION", "70s"}, {"SIM_CHECKPOINT_EVERY", "30s"}}));
  Advance(absl::Minutes(5));
  std::vector<std::string> lines;
  for (const SimEvent& e : sim_->DrainEvents()) {
    lines.push_back(FormatSimEvent(e));
  }
  EXPECT_THAT(lines, ElementsAre("2027-01-15T08:00:00Z LAUNCHED ty-1-1 od-0001",
                                 "2027-01-15T08:00:00Z STARTED ty-1-1",
                                 "2027-01-15T08:00:30Z CHECKPOINT ty-1-1 "
                                 "sim://ty-1-1/step-30",
                                 "2027-01-15T08:01:00Z CHECKPOINT ty-1-1 "
                                 "sim://ty-1-1/step-60",
                                 "2027-01-15T08:01:10Z SUCCEEDED ty-1-1"));
  EXPECT_THAT(sim_->DrainEvents(), IsEmpty());
}

// --- Random faults ---------------------------------------------------------

constexpr char kFaults[] = R"pb(
  node_failure_rate_per_hour: 0.05
  spot_reclaim_rate_per_hour: 0.2
  job_crash_rate_per_hour: 0.1
  node_repair_time { seconds: 1800 }
)pb";

// Runs a fixed scenario for 48 virtual hours observed every `step` and
// returns the formatted events.
std::vector<std::string> RunScenario(uint64_t seed, absl::Duration step) {
  VirtualClock clock(kStart);
  absl::StatusOr<std::unique_ptr<SimAdapter>> sim = SimAdapter::Create(
      Config(absl::StrCat(kConfig, "faults { seed: ", seed, kFaults, " }")),
      &clock);
  EXPECT_TRUE(sim.ok()) << sim.status();
  if (!sim.ok()) return {};
  int64_t job = 1;
  for (const char* node : {"od-0001", "od-0002", "sp-0001", "sp-0002"}) {
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE((*sim)
                      ->Launch(Request(job++, {node}, 2,
                                       {{"SIM_DURATION", "40h"},
                                        {"SIM_CHECKPOINT_EVERY", "1h"}}))
                      .ok());
    }
  }
  const absl::Time end = kStart + absl::Hours(48);
  while (clock.Now() < end) {
    clock.Advance(std::min(step, end - clock.Now()));
    (*sim)->Tick();
  }
  std::vector<std::string> lines;
  for (const SimEvent& e : (*sim)->DrainEvents()) {
    if (e.type != SimEventType::kCheckpoint) lines.push_back(FormatSimEvent(e));
  }
  return lines;
}

int Count(const std::vector<std::string>& lines, std::string_view what) {
  int n = 0;
  for (const std::string& line : lines) {
    n += line.find(what) != std::string::npos ? 1 : 0;
  }
  return n;
}

TEST(SimRandomFaultsTest, ReproducibleForASeed) {
  const std::vector<std::string> a = RunScenario(7, absl::Minutes(10));
  const std::vector<std::string> b = RunScenario(7, absl::Minutes(10));
  EXPECT_EQ(a, b);
  // The scenario does exercise every kind of random fault.
  EXPECT_GT(Count(a, "NODE_FAILED"), 0);
  EXPECT_GT(Count(a, "NODE_RECLAIMED"), 0);
  EXPECT_GT(Count(a, "NODE_RECOVERED"), 0);
  EXPECT_GT(Count(a, "USER_ERROR: crashed"), 0);
  EXPECT_EQ(Count(a, "NODE_RECLAIMED od-"), 0);  // only spot nodes
}

TEST(SimRandomFaultsTest, DifferentSeedsGiveDifferentEvents) {
  EXPECT_NE(RunScenario(7, absl::Minutes(10)),
            RunScenario(8, absl::Minutes(10)));
}

TEST(SimRandomFaultsTest, IndependentOfHowOftenTheClockIsObserved) {
  EXPECT_EQ(RunScenario(11, absl::Minutes(1)), RunScenario(11, absl::Hours(7)));
}

TEST(SimRandomFaultsTest, NoFaultsWithoutRates) {
  VirtualClock clock(kStart);
  absl::StatusOr<std::unique_ptr<SimAdapter>> sim =
      SimAdapter::Create(Config(), &clock);
  ASSERT_TRUE(sim.ok());
  ASSERT_TRUE(
      (*sim)
          ->Launch(Request(1, {"sp-0001"}, 8, {{"SIM_DURATION", "1000h"}}))
          .ok());
  clock.Advance(absl::Hours(999));
  absl::StatusOr<AttemptStatus> s = (*sim)->Status("ty-1-1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->phase, AttemptPhase::kRunning);
}

TEST(SimRandomFaultsTest, PoolRateOverridesTheFaultsDefault) {
  // A very high reclaim rate on the spot pool only: its nodes are reclaimed
  // quickly, the on-demand nodes never.
  std::string text = kConfig;
  const std::string marker = "gpu_hour_price_micros: 1500000";
  text.replace(text.find(marker), marker.size(),
               absl::StrCat(marker, " reclaim_rate_per_hour: 100"));
  VirtualClock clock(kStart);
  absl::StatusOr<std::unique_ptr<SimAdapter>> sim =
      SimAdapter::Create(Config(text), &clock);
  ASSERT_TRUE(sim.ok());
  ASSERT_TRUE(
      (*sim)
          ->Launch(Request(1, {"sp-0001"}, 8, {{"SIM_DURATION", "10h"}}))
          .ok());
  clock.Advance(absl::Hours(1));
  absl::StatusOr<AttemptStatus> s = (*sim)->Status("ty-1-1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->failure, FailureKind::kSpotReclaim);
  absl::StatusOr<std::vector<NodeInventory>> nodes = (*sim)->Inventory();
  ASSERT_TRUE(nodes.ok());
  for (const NodeInventory& n : *nodes) {
    EXPECT_EQ(n.failed, n.pool == "spot") << n.name;
  }
}

// --- Concurrency
// ---------------------------------------------------------------

TEST_F(SimAdapterTest, ThreadSafetySmoke) {
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 40;
  std::atomic<int> launched{0};
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done.load()) {
      clock_.Advance(absl::Seconds(1));
      sim_->Tick();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  const std::vector<std::string> nodes = {"od-0001", "od-0002", "sp-0001",
                                          "sp-0002"};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kJobsPerThread; ++k) {
        const int64_t job = 1 + t * kJobsPerThread + k;
        const std::string& node = nodes[job % nodes.size()];
        absl::StatusOr<AttemptStatus> s = sim_->Launch(
            Request(job, {node}, 1,
                    {{"SIM_DURATION", "20s"}, {"SIM_CHECKPOINT_EVERY", "5s"}}));
        if (!s.ok()) {
          // Only capacity may refuse a launch here.
          EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition)
              << s.status();
          continue;
        }
        launched.fetch_add(1);
        const std::string name = BackendJobName(job, 1);
        EXPECT_TRUE(sim_->Status(name).ok());
        if (k % 3 == 0) {
          EXPECT_TRUE(
              sim_->Stop(name, absl::Seconds(2), StopReason::kPreemption).ok());
        }
        if (k % 7 == 0) {
          EXPECT_TRUE(sim_->Inventory().ok());
          EXPECT_TRUE(sim_->List().ok());
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  done.store(true);
  ticker.join();

  clock_.Advance(absl::Minutes(5));
  absl::StatusOr<std::vector<AttemptStatus>> all = sim_->List();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(static_cast<int>(all->size()), launched.load());
  EXPECT_GT(launched.load(), 0);
  for (const AttemptStatus& s : *all) {
    EXPECT_TRUE(IsTerminal(s.phase)) << s.name;
  }
  absl::StatusOr<std::vector<NodeInventory>> inventory = sim_->Inventory();
  ASSERT_TRUE(inventory.ok());
  for (const NodeInventory& n : *inventory) {
    EXPECT_EQ(n.used_gpus, 0) << n.name;
    EXPECT_EQ(n.used_cpu_millis, 0) << n.name;
  }
}

}  // namespace
}  // namespace trainyard::dispatcher::sim
