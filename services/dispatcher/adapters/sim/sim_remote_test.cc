#include "services/dispatcher/adapters/sim/sim_remote.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/sim/sim_adapter.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/lib/runtime/grpc_server.h"
#include "tests/support/dispatcher/launch_request.h"

namespace trainyard::dispatcher::sim {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// One on-demand node and one spot node, 8 GPUs each; no random faults.
constexpr char kConfig[] = R"pb(
  cluster: "sim-r"
  pools {
    name: "od"
    flavor: "on-demand"
    flavor_kind: FLAVOR_KIND_ON_DEMAND
    gpu_hour_price_micros: 4000000
  }
  pools {
    name: "spot"
    flavor: "spot"
    flavor_kind: FLAVOR_KIND_SPOT
    gpu_hour_price_micros: 1500000
  }
  nodes {
    prefix: "od-"
    count: 1
    pool: "od"
    rack: "r1"
    capacity { gpus: 8 cpu_millis: 64000 memory_bytes: 549755813888 }
  }
  nodes {
    prefix: "sp-"
    count: 1
    pool: "spot"
    rack: "r2"
    capacity { gpus: 8 cpu_millis: 64000 memory_bytes: 549755813888 }
    labels { key: "zone" value: "z1" }
  }
  default_job_duration { seconds: 60 }
)pb";

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

LaunchRequest Request(int64_t job, std::string node, int32_t gpus,
                      std::string flavor = "") {
  LaunchRequest r = AttemptRequest(job, 1, "acme", {std::move(node)}, gpus);
  r.spec.mutable_resources()->set_cpu_millis(1000);
  r.spec.mutable_checkpoint()->mutable_interval()->set_seconds(10);
  (*r.spec.mutable_env())["SIM_DURATION"] = "45s";
  r.flavor = std::move(flavor);
  r.resume_from = "";
  r.env["EXTRA"] = "1";
  return r;
}

class SimRemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<v1::SimClusterConfig> config =
        ParseSimConfig(kConfig, "test");
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<std::unique_ptr<SimAdapter>> sim =
        SimAdapter::Create(*config, &clock_);
    ASSERT_TRUE(sim.ok()) << sim.status();
    sim_ = std::move(*sim);
    service_ = NewSimClusterServer(sim_.get());
    runtime::GrpcServerOptions options;
    options.listen_address = "127.0.0.1:0";
    server_ = std::make_unique<runtime::GrpcServerRunner>(options);
    server_->AddService(service_.get());
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<SimClusterClient>(SimClusterClientOptions{
        .target = absl::StrCat("127.0.0.1:", server_->port())});
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ZeroDuration());
  }

  VirtualClock clock_{kStart};
  std::unique_ptr<SimAdapter> sim_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<runtime::GrpcServerRunner> server_;
  std::unique_ptr<SimClusterClient> client_;
};

TEST_F(SimRemoteTest, InfoNamesTheClusterAndCountsNothingYet) {
  absl::StatusOr<v1::SimClusterInfo> info = client_->Info(absl::Seconds(5));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->cluster(), "sim-r");
  EXPECT_EQ(info->config().pools_size(), 2);
  EXPECT_EQ(info->attempts_created(), 0);
  EXPECT_EQ(info->active_attempts(), 0);
  EXPECT_THAT(info->duplicate_launches(), IsEmpty());
}

TEST_F(SimRemoteTest, LaunchRunsAndCheckpointsLikeTheLocalSim) {
  absl::StatusOr<AttemptStatus> launched =
      client_->Launch(Request(7, "od-0001", 4, "on-demand"));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->name, "ty-7-1");
  EXPECT_EQ(launched->submit_time, kStart);
  EXPECT_THAT(launched->nodes, ElementsAre("od-0001"));

  clock_.Advance(absl::Seconds(25));
  absl::StatusOr<AttemptStatus> running = client_->Status("ty-7-1");
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->phase, AttemptPhase::kRunning);
  ASSERT_TRUE(running->start_time.has_value());
  EXPECT_FALSE(running->end_time.has_value());
  EXPECT_FALSE(running->exit_code.has_value());
  // The same status the sim itself reports, through the wire and back.
  absl::StatusOr<AttemptStatus> local = sim_->Status("ty-7-1");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(running->checkpoints, local->checkpoints);
  EXPECT_EQ(running->checkpoints.size(), 2u);  // steps 10 and 20

  absl::StatusOr<std::vector<NodeInventory>> nodes = client_->Inventory();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "od-0001");
  EXPECT_EQ((*nodes)[0].used_gpus, 4);
  EXPECT_EQ((*nodes)[0].rack, "r1");
  EXPECT_EQ((*nodes)[1].labels.at("zone"), "z1");
  EXPECT_EQ((*nodes)[1].flavor, "spot");
  // Its output, through the wire: what the sim itself reads, from an offset.
  absl::StatusOr<LogChunk> out = client_->ReadLog("ty-7-1", 5, 1 << 20);
  absl::StatusOr<LogChunk> local_out = sim_->ReadLog("ty-7-1", 5, 1 << 20);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(local_out.ok());
  EXPECT_EQ(out->data, local_out->data);
  EXPECT_EQ(out->offset, 5);
  EXPECT_EQ(out->size, local_out->size);
  EXPECT_THAT(out->data, ::testing::HasSubstr("CHECKPOINT ty-7-1"));
  EXPECT_EQ(client_->ReadLog("ty-8-1", 0, 10).status().code(),
            absl::StatusCode::kNotFound);

  clock_.Advance(absl::Minutes(1));
  absl::StatusOr<AttemptStatus> done = client_->Status("ty-7-1");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_TRUE(done->end_time.has_value());
}

TEST_F(SimRemoteTest, RelaunchFindsTheAttemptAndIsNotCountedTwice) {
  ASSERT_TRUE(client_->Launch(Request(1, "od-0001", 8)).ok());
  // A dispatcher that crashed before recording the launch asks again.
  absl::StatusOr<AttemptStatus> again =
      client_->Launch(Request(1, "od-0001", 8));
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<v1::SimClusterInfo> info = client_->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->attempts_created(), 1);
  EXPECT_EQ(info->active_attempts(), 1);
  EXPECT_THAT(info->duplicate_launches(), IsEmpty());

  // Deleting a finished attempt and creating it again is a double dispatch,
  // and the server says so.
  ASSERT_TRUE(
      client_->Stop("ty-1-1", absl::ZeroDuration(), StopReason::kCancel).ok());
  ASSERT_TRUE(client_->Delete("ty-1-1").ok());
  ASSERT_TRUE(client_->Launch(Request(1, "od-0001", 8)).ok());
  info = client_->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->attempts_created(), 2);
  EXPECT_THAT(info->duplicate_launches(), ElementsAre("ty-1-1"));
}

TEST_F(SimRemoteTest, ErrorsKeepTheirCodesAndFields) {
  ASSERT_TRUE(client_->Launch(Request(1, "od-0001", 8)).ok());
  absl::StatusOr<AttemptStatus> full =
      client_->Launch(Request(2, "od-0001", 1));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(full.status().message(), HasSubstr("worker_nodes[0]"));

  LaunchRequest bad = Request(3, "od-0001", 1);
  bad.name = "ty-3-2";
  absl::StatusOr<AttemptStatus> invalid = client_->Launch(bad);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(invalid.status().message(), HasSubstr("name"));

  EXPECT_EQ(client_->Status("ty-99-1").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      client_->Stop("ty-1-1", absl::Seconds(-1), StopReason::kCancel).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client_
          ->InjectFault(v1::InjectSimFaultRequest::KIND_UNSPECIFIED, "od-0001")
          .code(),
      absl::StatusCode::kInvalidArgument);
  absl::Status no_target =
      client_->InjectFault(v1::InjectSimFaultRequest::FAIL_NODE, "");
  EXPECT_EQ(no_target.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_target.message(), HasSubstr("target: required"));
  EXPECT_EQ(
      client_->InjectFault(v1::InjectSimFaultRequest::RECLAIM_NODE, "od-0001")
          .code(),
      absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<v1::SimClusterInfo> info = client_->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->launches_refused(), 1);
  EXPECT_EQ(info->attempts_created(), 1);
}

TEST_F(SimRemoteTest, StopWithGraceAndInjectedFaults) {
  ASSERT_TRUE(client_->Launch(Request(1, "od-0001", 2)).ok());
  ASSERT_TRUE(client_->Launch(Request(2, "sp-0001", 2)).ok());
  ASSERT_TRUE(client_->Launch(Request(3, "sp-0001", 2)).ok());
  clock_.Advance(absl::Seconds(5));

  ASSERT_TRUE(
      client_->Stop("ty-1-1", absl::Seconds(30), StopReason::kPreemption).ok());
  absl::StatusOr<AttemptStatus> stopping = client_->Status("ty-1-1");
  ASSERT_TRUE(stopping.ok());
  EXPECT_TRUE(stopping->stop_requested);
  EXPECT_EQ(stopping->phase, AttemptPhase::kRunning);
  ASSERT_TRUE(stopping->stop_deadline.has_value());
  EXPECT_EQ(*stopping->stop_deadline, clock_.Now() + absl::Seconds(30));

  ASSERT_TRUE(
      client_
          ->InjectFault(v1::InjectSimFaultRequest::CRASH_ATTEMPT, "ty-2-1", 3)
          .ok());
  ASSERT_TRUE(
      client_->InjectFault(v1::InjectSimFaultRequest::RECLAIM_POOL, "spot")
          .ok());
  clock_.Advance(absl::Seconds(31));

  absl::StatusOr<std::vector<AttemptStatus>> all = client_->List();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].phase, AttemptPhase::kCancelled);
  EXPECT_EQ((*all)[0].failure, FailureKind::kPreempted);
  EXPECT_EQ((*all)[1].phase, AttemptPhase::kFailed);
  EXPECT_EQ((*all)[1].failure, FailureKind::kUserError);
  EXPECT_EQ((*all)[1].exit_code, 3);
  EXPECT_EQ((*all)[2].failure, FailureKind::kSpotReclaim);

  absl::StatusOr<std::vector<NodeInventory>> nodes = client_->Inventory();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE((*nodes)[1].failed);
  EXPECT_FALSE((*nodes)[1].schedulable);
  ASSERT_TRUE(
      client_->InjectFault(v1::InjectSimFaultRequest::RECOVER_NODE, "sp-0001")
          .ok());
  nodes = client_->Inventory();
  ASSERT_TRUE(nodes.ok());
  EXPECT_FALSE((*nodes)[1].failed);
}

TEST_F(SimRemoteTest, AStopWithoutAReasonIsRefusedNamingIt) {
  ASSERT_TRUE(client_->Launch(Request(1, "od-0001", 1)).ok());
  auto stub = v1::SimClusterService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::StopSimAttemptRequest request;
  request.set_name("ty-1-1");
  google::protobuf::Empty out;
  grpc::Status s = stub->StopAttempt(&context, request, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("reason:"));
  absl::StatusOr<AttemptStatus> still = client_->Status("ty-1-1");
  ASSERT_TRUE(still.ok());
  EXPECT_FALSE(still->stop_requested);
}

TEST(SimRemoteClientTest, UnreachableServerIsUnavailable) {
  SimClusterClient client(
      {.target = "127.0.0.1:1", .rpc_timeout = absl::Seconds(2)});
  absl::StatusOr<std::vector<AttemptStatus>> list = client.List();
  EXPECT_EQ(list.status().code(), absl::StatusCode::kUnavailable)
      << list.status();
  EXPECT_THAT(list.status().message(), HasSubstr("sim cluster"));
}

}  // namespace
}  // namespace trainyard::dispatcher::sim
