// A job's whole life through the real api, scheduler and dispatcher over
// PostgreSQL and Redis, run by the sim backend on a virtual clock
// (docs/dispatcher.md): dispatch, checkpoints, success, node failure and
// recovery from the last checkpoint, retries of user errors, preemption with
// a grace period.
#include "services/dispatcher/dispatcher.h"

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "absl/time/civil_time.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/accounting/meter_service.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/sim/sim_adapter.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/lib/runtime/job_token.h"
#include "services/scheduler/scheduler_service.h"
#include "storage/postgres/dispatcher_store.h"
#include "storage/postgres/pool.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/accounting.grpc.pb.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
using dispatcher::Dispatcher;
using dispatcher::VirtualClock;
using dispatcher::sim::SimAdapter;

// The harness's cluster "sim": pool "main" (flavor "gpu"), nodes n0..n3 with
// 8 H100 each, racks r0 (n0, n1) and r1 (n2, n3) of block b0.
std::string SimConfig() {
  // Node n$0 in rack r$1 (absl::Substitute).
  constexpr char kNode[] = R"pb(
    nodes {
      name: "n$0"
      pool: "main"
      block: "b0"
      rack: "r$1"
      capacity {
        gpus: 8
        gpu_model: "H100"
        cpu_millis: 64000
        memory_bytes: 549755813888
      }
    }
  )pb";
  std::string config = R"pb(
    cluster: "sim"
    pools {
      name: "main"
      flavor: "gpu"
      flavor_kind: FLAVOR_KIND_ON_DEMAND
      gpu_hour_price_micros: 2000000
    }
  )pb";
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&config, absl::Substitute(kNode, i, i / 2));
  }
  return config;
}

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The api and the dispatcher share the job token keys, as `trainyard all`
    // does.
    keys_ = runtime::JobTokenKeys::Random();
    ApiHarness::Options options;
    options.server.job_tokens = keys_;
    absl::StatusOr<std::unique_ptr<ApiHarness>> h =
        ApiHarness::Start(std::move(options));
    ASSERT_TRUE(h.ok()) << h.status();
    harness_ = std::move(*h);
    ASSERT_TRUE(harness_->SeedTenant("acme").ok());
    token_ = harness_->Token("users/alice", v1::ROLE_TENANT_ADMIN, "acme");
    absl::StatusOr<v1::SimClusterConfig> config =
        dispatcher::sim::ParseSimConfig(SimConfig(), "test");
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<std::unique_ptr<SimAdapter>> sim =
        SimAdapter::Create(*config, &clock_);
    ASSERT_TRUE(sim.ok()) << sim.status();
    sim_ = std::move(*sim);
    scheduler::SchedulerOptions so;
    so.postgres_url = harness_->database_url();
    so.redis_addr = "";
    so.clock = [this] { return clock_.Now(); };
    // Every cycle explains (Explain() reads explanations after a Step()).
    so.explanation_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<scheduler::SchedulerService>> s =
        scheduler::SchedulerService::Create(so);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
    absl::StatusOr<std::unique_ptr<Dispatcher>> d =
        Dispatcher::Create({.postgres_url = harness_->database_url(),
                            .cluster = "sim",
                            .api_advertise_addr = harness_->target(),
                            .job_tokens = keys_,
                            .log_interval = absl::ZeroDuration()},
                           sim_.get());
    ASSERT_TRUE(d.ok()) << d.status();
    dispatcher_ = std::move(*d);
  }

  // JobService.GetLogs of attempt `attempt` of job `id` from `offset`.
  grpc::Status Logs(int64_t id, int32_t attempt, int64_t offset,
                    v1::JobLogs* out) {
    v1::GetJobLogsRequest req;
    req.set_name(absl::StrCat("tenants/acme/jobs/", id));
    req.set_attempt(attempt);
    req.set_offset(offset);
    return harness_->jobs()->GetLogs(ApiHarness::Context(token_).get(), req,
                                     out);
  }

  // The sim's events of attempt `name` since the last call (others are
  // dropped), as the lines of its output.
  std::string SimOutput(const std::string& name) {
    std::string out;
    for (const dispatcher::sim::SimEvent& e : sim_->DrainEvents()) {
      if (e.subject == name) {
        absl::StrAppend(&out, dispatcher::sim::FormatSimEvent(e), "\n");
      }
    }
    return out;
  }

  v1::SubmitJobRequest Job(const std::string& request_id, int workers,
                           const std::string& duration,
                           const std::string& checkpoint_every = "") {
    v1::SubmitJobRequest req = MinimalSubmit("acme", request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_workers(workers);
    spec->mutable_resources()->set_gpus(8);
    (*spec->mutable_env())["SIM_DURATION"] = duration;
    if (!checkpoint_every.empty()) {
      (*spec->mutable_env())["SIM_CHECKPOINT_EVERY"] = checkpoint_every;
      spec->mutable_checkpoint()->set_resumable(true);
      spec->mutable_checkpoint()->set_directory("sim://checkpoints");
    }
    return req;
  }

  int64_t Submit(const v1::SubmitJobRequest& req) {
    return harness_->SubmitJob(token_, req);
  }

  v1::Job Get(int64_t id) { return harness_->GetJob(token_, "acme", id); }

  // GetQueueStatus of acme's default queue: usage by (flavor, resource).
  std::map<std::pair<std::string, int>, v1::FlavorUsage> Usage() {
    v1::GetQueueStatusRequest req;
    req.set_name("tenants/acme/queues/default");
    v1::QueueStatus status;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    grpc::Status s = harness_->queues()->GetQueueStatus(&ctx, req, &status);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::map<std::pair<std::string, int>, v1::FlavorUsage> out;
    for (const v1::FlavorUsage& u : status.usage()) {
      out[{u.flavor(), u.resource()}] = u;
    }
    return out;
  }

  // Updates `paths` of acme's default queue to what `queue` has.
  void UpdateQueue(v1::Queue queue, const std::vector<std::string>& paths) {
    v1::UpdateQueueRequest req;
    queue.set_name("tenants/acme/queues/default");
    *req.mutable_queue() = std::move(queue);
    for (const std::string& p : paths) req.mutable_update_mask()->add_paths(p);
    v1::Queue out;
    grpc::Status s = harness_->queues()->UpdateQueue(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // What ExplainPending says once the scheduler's explanations are written.
  v1::ExplainPendingResponse Explain(int64_t id) {
    absl::Status flushed = scheduler_->FlushExplanations();
    EXPECT_TRUE(flushed.ok()) << flushed;
    return harness_->Explain(token_, "acme", id);
  }

  // One scheduler cycle, then one dispatcher pass.
  void Step() {
    absl::StatusOr<scheduler::CycleReport> c = scheduler_->RunCycle();
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<dispatcher::PassReport> p = dispatcher_->RunPass();
    ASSERT_TRUE(p.ok()) << p.status();
    last_pass_ = *p;
  }

  // Starts now: the scheduler compares attempt start times with its own clock.
  VirtualClock clock_{absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()))};
  std::shared_ptr<const runtime::JobTokenKeys> keys_;
  std::unique_ptr<ApiHarness> harness_;
  std::string token_;
  std::unique_ptr<SimAdapter> sim_;
  std::unique_ptr<scheduler::SchedulerService> scheduler_;
  std::unique_ptr<Dispatcher> dispatcher_;
  dispatcher::PassReport last_pass_;
};

TEST_F(DispatcherTest, RunsAJobToSuccessRecordingCheckpoints) {
  const int64_t id = Submit(Job("a", 1, "60s", "20s"));
  Step();  // admitted; dispatched; the sim starts it at once
  EXPECT_EQ(last_pass_.nodes_reported, 4);
  EXPECT_EQ(last_pass_.launched, 1);
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_TRUE(job.attempts(0).has_start_time());
  EXPECT_FALSE(job.attempts(0).backend_job_id().empty());
  // The queue's usage: the running job's 8 GPUs of its 64 on flavor gpu, and
  // its CPU (no quota on CPU: nominal 0, nothing borrowed).
  std::map<std::pair<std::string, int>, v1::FlavorUsage> usage = Usage();
  const auto gpu_key =
      std::make_pair(std::string("gpu"), int{v1::RESOURCE_NAME_GPU});
  const auto cpu_key =
      std::make_pair(std::string("gpu"), int{v1::RESOURCE_NAME_CPU});
  auto gpu_usage = [&] { return usage[gpu_key]; };
  auto cpu_usage = [&] { return usage[cpu_key]; };
  ASSERT_TRUE(usage.contains(gpu_key));
  EXPECT_EQ(gpu_usage().used(), 8);
  EXPECT_EQ(gpu_usage().nominal(), 64);
  EXPECT_EQ(gpu_usage().borrowed(), 0);
  EXPECT_EQ(cpu_usage().used(), 4000);
  EXPECT_EQ(cpu_usage().borrowed(), 0);

  clock_.Advance(absl::Seconds(45));
  Step();
  EXPECT_EQ(last_pass_.nodes_reported, 0)
      << "unchanged inventory is not rewritten";
  EXPECT_EQ(last_pass_.checkpoints, 2);
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  // The sim numbers steps by seconds of progress: checkpoints at 20 s and 40 s.
  EXPECT_EQ(job.resume_from(), dispatcher::sim::SimCheckpointUri(
                                   absl::StrCat("ty-", id, "-1"), 40));

  clock_.Advance(absl::Seconds(20));
  Step();
  EXPECT_EQ(last_pass_.succeeded, 1);
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.attempts(0).exit_code(), 0);
  EXPECT_TRUE(job.attempts(0).has_end_time());
  EXPECT_EQ(job.attempts(0).lost_gpu_seconds(), 0);
  usage = Usage();
  EXPECT_EQ(gpu_usage().used(), 0);
  EXPECT_FALSE(usage.contains(cpu_key));
  // The backend forgot it once recorded.
  EXPECT_TRUE(
      absl::IsNotFound(sim_->Status(absl::StrCat("ty-", id, "-1")).status()));
}

TEST_F(DispatcherTest, CopiesEachAttemptsOutputForGetLogs) {
  const int64_t queued = Submit(Job("waits", 1, "60s"));
  {
    v1::HoldJobRequest hold;
    hold.set_name(absl::StrCat("tenants/acme/jobs/", queued));
    v1::Job held;
    ASSERT_TRUE(harness_->jobs()
                    ->Hold(ApiHarness::Context(token_).get(), hold, &held)
                    .ok());
  }
  const int64_t id = Submit(Job("logs", 1, "60s", "20s"));
  const std::string name = absl::StrCat("ty-", id, "-1");
  Step();  // dispatched; the sim starts it at once
  Step();  // the first pass that lists it copies its output
  std::string expected = SimOutput(name);
  ASSERT_THAT(expected, ::testing::HasSubstr("STARTED " + name));
  v1::JobLogs logs;
  ASSERT_TRUE(Logs(id, 0, 0, &logs).ok());
  EXPECT_EQ(logs.job(), absl::StrCat("tenants/acme/jobs/", id));
  EXPECT_EQ(logs.attempt(), 1);
  EXPECT_EQ(logs.backend_job_name(), name);
  EXPECT_EQ(logs.text(), expected);
  EXPECT_EQ(logs.start_offset(), 0);
  EXPECT_EQ(logs.end_offset(), static_cast<int64_t>(expected.size()));
  EXPECT_FALSE(logs.complete());
  EXPECT_TRUE(logs.unavailable_reason().empty());
  EXPECT_TRUE(logs.has_update_time());

  // Two checkpoints later: following from the end gives only what is new.
  clock_.Advance(absl::Seconds(45));
  Step();
  const int64_t followed_from = logs.end_offset();
  const std::string more = SimOutput(name);
  ASSERT_THAT(more, ::testing::HasSubstr("CHECKPOINT " + name));
  expected += more;
  ASSERT_TRUE(Logs(id, 1, followed_from, &logs).ok());
  EXPECT_EQ(logs.start_offset(), followed_from);
  EXPECT_EQ(logs.text(), more);
  EXPECT_EQ(logs.end_offset(), static_cast<int64_t>(expected.size()));

  // Its end: all of it, complete, and it stays after the sim forgot it.
  clock_.Advance(absl::Seconds(20));
  Step();
  Step();
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(absl::IsNotFound(sim_->Status(name).status()));
  expected += SimOutput(name);
  ASSERT_THAT(expected, ::testing::HasSubstr("SUCCEEDED " + name));
  ASSERT_TRUE(Logs(id, 0, 0, &logs).ok());
  EXPECT_EQ(logs.text(), expected);
  EXPECT_TRUE(logs.complete());
  // An offset past the end gives nothing.
  ASSERT_TRUE(Logs(id, 0, logs.end_offset() + 10, &logs).ok());
  EXPECT_EQ(logs.text(), "");
  EXPECT_EQ(logs.start_offset(), logs.end_offset());

  // A job that has not run has no attempt to read.
  ASSERT_TRUE(Logs(queued, 0, 0, &logs).ok());
  EXPECT_EQ(logs.attempt(), 0);
  EXPECT_THAT(logs.unavailable_reason(), ::testing::HasSubstr("not run yet"));

  // Bad input names its field.
  struct Bad {
    int32_t attempt;
    int64_t offset;
    const char* field;
  } bad[] = {{-1, 0, "attempt"}, {2, 0, "attempt"}, {0, -5, "offset"}};
  for (const Bad& b : bad) {
    grpc::Status s = Logs(id, b.attempt, b.offset, &logs);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << b.attempt << " " << b.offset;
    EXPECT_THAT(s.error_message(), ::testing::StartsWith(b.field));
  }
}

TEST_F(DispatcherTest, KeepsOnlyTheNewestOutputAsTold) {
  constexpr int64_t kKeep = 64;
  absl::StatusOr<std::unique_ptr<Dispatcher>> d =
      Dispatcher::Create({.postgres_url = harness_->database_url(),
                          .cluster = "sim",
                          .log_tail_bytes = kKeep,
                          .log_interval = absl::ZeroDuration()},
                         sim_.get());
  ASSERT_TRUE(d.ok()) << d.status();
  dispatcher_ = std::move(*d);
  const int64_t id = Submit(Job("tail", 1, "30s", "5s"));
  const std::string name = absl::StrCat("ty-", id, "-1");
  Step();
  Step();
  v1::JobLogs logs;
  ASSERT_TRUE(Logs(id, 0, 0, &logs).ok());
  std::string expected = SimOutput(name);
  ASSERT_GT(expected.size(), static_cast<size_t>(kKeep));
  EXPECT_EQ(logs.end_offset(), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(logs.start_offset(), logs.end_offset() - kKeep);
  EXPECT_EQ(logs.text(), expected.substr(expected.size() - kKeep));
  // More than kKeep bytes arrive between two copies: the bytes between are
  // skipped, the newest kKeep kept.
  clock_.Advance(absl::Seconds(31));
  Step();
  expected += SimOutput(name);
  ASSERT_TRUE(Logs(id, 0, 0, &logs).ok());
  EXPECT_TRUE(logs.complete());
  EXPECT_EQ(logs.end_offset(), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(logs.text(), expected.substr(expected.size() - kKeep));

  // An append at a size that is not the stored one (another dispatcher wrote
  // meanwhile), or to a complete output, changes nothing.
  absl::StatusOr<std::unique_ptr<storage::postgres::Database>> db =
      storage::postgres::Database::Open({.url = harness_->database_url()});
  ASSERT_TRUE(db.ok()) << db.status();
  storage::postgres::DispatcherStore store(db->get());
  const int64_t size = logs.end_offset();
  for (const int64_t at : {size - 1, size}) {
    absl::StatusOr<int> applied = store.AppendLogs({{.job_id = id,
                                                     .attempt = 1,
                                                     .expected_size = at,
                                                     .offset = at,
                                                     .data = "late\n"}},
                                                   kKeep);
    ASSERT_TRUE(applied.ok()) << applied.status();
    EXPECT_EQ(*applied, 0) << at;
  }
  v1::JobLogs again;
  ASSERT_TRUE(Logs(id, 0, 0, &again).ok());
  EXPECT_EQ(again.text(), logs.text());
  EXPECT_EQ(again.end_offset(), size);

  EXPECT_EQ(Dispatcher::Create({.postgres_url = harness_->database_url(),
                                .cluster = "sim",
                                .log_tail_bytes = -1},
                               sim_.get())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DispatcherTest,
       NodeFailureRequeuesAndTheNextAttemptResumesFromTheCheckpoint) {
  const int64_t id = Submit(Job("a", 1, "600s", "30s"));
  Step();
  v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  const std::string node = job.attempts(0).placements(0).node();
  clock_.Advance(absl::Seconds(70));  // checkpoints at 30 s and 60 s
  Step();
  const std::string checkpoint =
      dispatcher::sim::SimCheckpointUri(absl::StrCat("ty-", id, "-1"), 60);
  ASSERT_EQ(Get(id).resume_from(), checkpoint);

  ASSERT_TRUE(sim_->FailNode(node.substr(node.rfind('/') + 1)).ok());
  ASSERT_TRUE(dispatcher_->RunPass().ok());
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.state_reason(), "RECOVERED");
  EXPECT_EQ(job.attempts(0).failure_class(), v1::FAILURE_CLASS_NODE_FAILURE);
  // 8 GPUs × the 10 s since the checkpoint at 60 s.
  EXPECT_EQ(job.attempts(0).lost_gpu_seconds(), 80);

  // The failed node is reported DOWN; the next attempt goes elsewhere and
  // resumes from the checkpoint.
  Step();
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_NE(job.attempts(1).placements(0).node(), node);
  EXPECT_EQ(job.attempts(1).resumed_from(), checkpoint);
  EXPECT_EQ(job.attempt_count(), 2);
}

// A dispatcher killed between recording a node failure (RECOVERING) and
// requeueing the job: the next pass, by whichever dispatcher leads, finishes
// the requeue, and the backend forgets the ended attempt nobody follows.
TEST_F(DispatcherTest, ARunningJobCancelledEndsWithTheReasonAndWhoGaveIt) {
  const int64_t id = Submit(Job("cancel", 1, "600s"));
  Step();
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  v1::CancelJobRequest cancel;
  cancel.set_name(absl::StrCat("tenants/acme/jobs/", id));
  cancel.set_reason("wrong dataset");
  v1::Job requested;
  grpc::Status s = harness_->jobs()->Cancel(ApiHarness::Context(token_).get(),
                                            cancel, &requested);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(requested.cancel_requested());
  // The dispatcher stops the attempt, then records the end it sees.
  for (int i = 0; i < 5 && Get(id).state() != v1::JOB_STATE_CANCELLED; ++i) {
    clock_.Advance(absl::Seconds(1));
    Step();
  }
  const v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  const std::string said = "cancelled by users/alice: wrong dataset";
  EXPECT_THAT(job.state_message(), ::testing::HasSubstr(said));
  EXPECT_THAT(job.state_message(),
              ::testing::HasSubstr(absl::StrCat("ty-", id, "-1 was stopped")));
  // So does the event of the change, which `yard events` and Watch show.
  v1::WatchJobsRequest watch;
  watch.set_parent("tenants/acme");
  watch.set_job(cancel.name());
  watch.set_from_start(true);
  auto ctx = ApiHarness::Context(token_);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(20));
  auto reader = harness_->jobs()->Watch(ctx.get(), watch);
  v1::WatchJobsResponse event;
  bool seen = false;
  while (!seen && reader->Read(&event)) {
    if (event.event().type() == v1::JOB_EVENT_TYPE_STATE_CHANGED &&
        event.event().to_state() == v1::JOB_STATE_CANCELLED) {
      seen = true;
      EXPECT_THAT(event.event().message(), ::testing::HasSubstr(said));
    }
  }
  ctx->TryCancel();
  EXPECT_TRUE(seen) << "no event of the change to CANCELLED";
}

TEST_F(DispatcherTest, AttemptsGetTheApiAddressAndATokenScopedToTheirJob) {
  v1::SubmitJobRequest req = Job("tok", 1, "600s");
  req.mutable_job()->mutable_spec()->mutable_time_limit()->set_seconds(3600);
  const int64_t id = Submit(req);
  const int64_t sibling = Submit(Job("tok-sibling", 1, "600s"));
  Step();
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  absl::StatusOr<std::map<std::string, std::string>> env =
      sim_->LaunchEnv(absl::StrCat("ty-", id, "-1"));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ((*env)["TRAINYARD_ADDR"], harness_->target());
  EXPECT_EQ((*env)["TRAINYARD_JOB"], absl::StrCat("tenants/acme/jobs/", id));
  const std::string token = (*env)["TRAINYARD_TOKEN"];
  EXPECT_THAT(token, ::testing::StartsWith(absl::StrCat("tyj.acme.", id, ".")));
  // Valid for the time limit + the default 60 s grace + the 1 h margin.
  absl::StatusOr<runtime::JobTokenClaims> claims =
      keys_->Verify(token, absl::Now());
  ASSERT_TRUE(claims.ok()) << claims.status();
  const absl::Duration left = claims->expires - absl::Now();
  EXPECT_GT(left, absl::Hours(2) + absl::Seconds(60) - absl::Minutes(1));
  EXPECT_LE(left, absl::Hours(2) + absl::Seconds(60));
  // A job without a time limit: the 7-day TTL.
  absl::StatusOr<std::map<std::string, std::string>> sibling_env =
      sim_->LaunchEnv(absl::StrCat("ty-", sibling, "-1"));
  ASSERT_TRUE(sibling_env.ok()) << sibling_env.status();
  claims = keys_->Verify((*sibling_env)["TRAINYARD_TOKEN"], absl::Now());
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->job_id, sibling);
  EXPECT_GT(claims->expires - absl::Now(), absl::Hours(24 * 7 - 1));

  // The worker's view: only the injected token, against the api.
  v1::ReportCheckpointRequest report;
  report.set_job(absl::StrCat("tenants/acme/jobs/", id));
  report.mutable_checkpoint()->set_step(7);
  report.mutable_checkpoint()->set_uri("s3://ckpt/step-7");
  *report.mutable_checkpoint()->mutable_time() =
      google::protobuf::util::TimeUtil::GetCurrentTime();
  v1::Checkpoint saved;
  grpc::Status s = harness_->jobs()->ReportCheckpoint(
      ApiHarness::Context(token).get(), report, &saved);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(saved.attempt(), 1);
  EXPECT_EQ(Get(id).resume_from(), "s3://ckpt/step-7");
  // ... and not for the job next to it.
  report.set_job(absl::StrCat("tenants/acme/jobs/", sibling));
  s = harness_->jobs()->ReportCheckpoint(ApiHarness::Context(token).get(),
                                         report, &saved);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << s.error_message();
}

TEST_F(DispatcherTest, AHeldJobIsNeverAdmittedUntilReleased) {
  const int64_t held = Submit(Job("held", 1, "60s"));
  const v1::Job submitted = Get(held);
  {
    v1::HoldJobRequest req;
    req.set_name(submitted.name());
    req.set_reason("waiting for data");
    v1::Job out;
    grpc::Status s =
        harness_->jobs()->Hold(ApiHarness::Context(token_).get(), req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const int64_t other = Submit(Job("other", 1, "60s"));
  // Plenty of free capacity and several cycles: only the other job runs.
  for (int i = 0; i < 3; ++i) {
    Step();
    clock_.Advance(absl::Seconds(5));
  }
  EXPECT_EQ(Get(other).state(), v1::JOB_STATE_RUNNING);
  v1::Job job = Get(held);
  EXPECT_EQ(job.state(), v1::JOB_STATE_HELD);
  EXPECT_EQ(job.attempt_count(), 0);
  EXPECT_EQ(job.attempts_size(), 0);
  {
    v1::ReleaseJobRequest req;
    req.set_name(submitted.name());
    v1::Job out;
    grpc::Status s =
        harness_->jobs()->Release(ApiHarness::Context(token_).get(), req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(out.state(), v1::JOB_STATE_QUEUED);
    EXPECT_EQ(out.create_time(), submitted.create_time());
  }
  Step();
  job = Get(held);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.attempt_count(), 1);
}

TEST_F(DispatcherTest, FinishesARequeueADeadDispatcherLeftHalfDone) {
  const int64_t id = Submit(Job("a", 1, "600s", "30s"));
  Step();
  v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  const std::string node = job.attempts(0).placements(0).node();
  const std::string name = absl::StrCat("ty-", id, "-1");
  clock_.Advance(absl::Seconds(40));
  Step();
  ASSERT_TRUE(sim_->FailNode(node.substr(node.rfind('/') + 1)).ok());

  // What the dead dispatcher wrote: the first of its two transactions.
  absl::StatusOr<std::unique_ptr<storage::postgres::Database>> db =
      storage::postgres::Database::Open({.url = harness_->database_url()});
  ASSERT_TRUE(db.ok()) << db.status();
  storage::postgres::DispatcherStore store(db->get());
  absl::StatusOr<v1::Job> half =
      store.ChangeAttempt({.tenant = "acme",
                           .job_id = id,
                           .expected_version = Get(id).version(),
                           .to = v1::JOB_STATE_RECOVERING,
                           .reason = "NODE_FAILURE",
                           .message = "node failed",
                           .end_time = clock_.Now(),
                           .failure_class = v1::FAILURE_CLASS_NODE_FAILURE});
  ASSERT_TRUE(half.ok()) << half.status();
  ASSERT_TRUE(sim_->Status(name).ok()) << "the backend still has it";

  ASSERT_TRUE(dispatcher_->RunPass().ok());
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.state_reason(), "RECOVERED");
  EXPECT_EQ(job.state_message(),
            absl::StrCat("the next attempt resumes from ",
                         dispatcher::sim::SimCheckpointUri(name, 30)));
  EXPECT_TRUE(absl::IsNotFound(sim_->Status(name).status()))
      << "the ended attempt nobody follows is forgotten";

  Step();
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.attempt_count(), 2);
}

TEST_F(DispatcherTest, UserErrorsAreRetriedAsThePolicySaysThenFail) {
  v1::SubmitJobRequest req = Job("a", 1, "10s");
  (*req.mutable_job()->mutable_spec()->mutable_env())["SIM_EXIT_CODE"] = "3";
  req.mutable_job()->mutable_spec()->mutable_retry()->set_max_attempts(2);
  req.mutable_job()
      ->mutable_spec()
      ->mutable_retry()
      ->mutable_initial_backoff()
      ->set_seconds(20);
  const int64_t id = Submit(req);
  Step();
  clock_.Advance(absl::Seconds(15));
  Step();  // attempt 1 fails with exit 3 (at 10 s): retried after its backoff
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.state_reason(), "RETRYING");
  Step();  // 5 s after the failure: still waiting out the 20 s (±10 %) backoff
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Get(id).attempt_count(), 1);
  clock_.Advance(absl::Seconds(20));
  Step();  // attempt 2 admitted and started
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(15));
  Step();
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.state_reason(), "USER_ERROR");
  ASSERT_EQ(job.attempts_size(), 2);
  for (const v1::Attempt& a : job.attempts()) {
    EXPECT_EQ(a.failure_class(), v1::FAILURE_CLASS_USER_ERROR);
    EXPECT_EQ(a.exit_code(), 3);
  }
}

TEST_F(DispatcherTest,
       PreemptionStopsTheVictimAfterItsGraceThenStartsThePreemptor) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());

  // The low-priority gang takes the whole cluster (4 × 8 GPUs).
  v1::SubmitJobRequest low = Job("low", 4, "3600s", "60s");
  low.mutable_job()->mutable_spec()->set_priority_class("low");
  low.mutable_job()
      ->mutable_spec()
      ->mutable_checkpoint()
      ->mutable_grace_period()
      ->set_seconds(30);
  const int64_t victim = Submit(low);
  Step();
  ASSERT_EQ(Get(victim).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(130));  // checkpoints at 60 s and 120 s
  Step();

  v1::SubmitJobRequest high = Job("high", 1, "60s");
  high.mutable_job()->mutable_spec()->set_priority_class("high");
  const int64_t preemptor = Submit(high);
  Step();  // the scheduler preempts the gang; the dispatcher signals it
  EXPECT_EQ(Get(victim).state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_EQ(Get(victim).state_reason(), "PREEMPTED_BY_PRIORITY");
  const std::string why = Get(victim).state_message();
  EXPECT_THAT(why, ::testing::HasSubstr(absl::StrCat(
                       "job ", preemptor, " (priority 100, queue acme/")));
  EXPECT_EQ(Get(preemptor).state(), v1::JOB_STATE_ADMITTED)
      << "waits for the victim's nodes";
  EXPECT_EQ(last_pass_.stops, 1);

  clock_.Advance(absl::Seconds(10));  // inside the 30 s grace period
  Step();
  EXPECT_EQ(Get(victim).state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_EQ(Get(preemptor).state(), v1::JOB_STATE_ADMITTED);

  clock_.Advance(absl::Seconds(25));  // past the grace period
  Step();
  v1::Job v = Get(victim);
  EXPECT_EQ(v.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(v.state_reason(), "PREEMPTED");
  EXPECT_EQ(v.attempts(0).failure_class(), v1::FAILURE_CLASS_PREEMPTION);
  // The attempt keeps who preempted it and why, then the backend's word.
  EXPECT_EQ(v.attempts(0).message(),
            absl::StrCat(why, " (stopped (preemption))"));
  // The sim writes a final checkpoint when it is signalled: it resumes from
  // there.
  EXPECT_FALSE(v.resume_from().empty());
  Step();
  EXPECT_EQ(Get(preemptor).state(), v1::JOB_STATE_RUNNING);
  // The victim waits behind the preemptor (not enough room for the gang).
  EXPECT_EQ(Get(victim).state(), v1::JOB_STATE_QUEUED);
}

TEST_F(DispatcherTest,
       APreemptorStartsWhenItsNodeHasRoomNotAfterTheVictimsGrace) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());
  auto job = [&](const std::string& id, const std::string& priority, int gpus,
                 const std::string& duration) {
    v1::SubmitJobRequest req = Job(id, 1, duration);
    req.mutable_job()->mutable_spec()->set_priority_class(priority);
    req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(gpus);
    return req;
  };
  // n0: a 6-GPU job ending in 60 s and the 2-GPU victim-to-be (best fit puts
  // it beside the first); n1..n3: whole-node jobs nobody may preempt.
  const int64_t ending = Submit(job("ending", "high", 6, "60s"));
  Step();
  v1::SubmitJobRequest low = job("victim", "low", 2, "3600s");
  low.mutable_job()
      ->mutable_spec()
      ->mutable_checkpoint()
      ->mutable_grace_period()
      ->set_seconds(300);
  const int64_t victim = Submit(low);
  for (int i = 0; i < 3; ++i)
    Submit(job(absl::StrCat("fill", i), "high", 8, "3600s"));
  Step();
  Step();
  const std::string node = Get(ending).attempts(0).placements(0).node();
  ASSERT_EQ(Get(victim).state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(Get(victim).attempts(0).placements(0).node(), node);

  // The preemptor takes the victim's 2 GPUs on that node; the node is full
  // until the victim stops (its grace period is 300 s) or the other job
  // there ends.
  const int64_t preemptor = Submit(job("preemptor", "high", 2, "3600s"));
  Step();
  ASSERT_EQ(Get(victim).state(), v1::JOB_STATE_PREEMPTING);
  ASSERT_EQ(Get(preemptor).state(), v1::JOB_STATE_ADMITTED);
  ASSERT_EQ(Get(preemptor).attempts(0).placements(0).node(), node);

  // The 6-GPU job ends: the node has room for the preemptor beside the
  // stopping victim, so it starts without waiting out the grace period; so
  // does a 4-GPU job placed in the rest of the node.
  clock_.Advance(absl::Seconds(61));
  Step();
  ASSERT_EQ(Get(ending).state(), v1::JOB_STATE_SUCCEEDED);
  Step();
  EXPECT_EQ(Get(preemptor).state(), v1::JOB_STATE_RUNNING);
  const int64_t beside = Submit(job("beside", "high", 4, "3600s"));
  Step();
  Step();
  EXPECT_EQ(Get(beside).attempts(0).placements(0).node(), node);
  EXPECT_EQ(Get(beside).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(victim).state(), v1::JOB_STATE_PREEMPTING);

  // After the grace period the victim is stopped.
  clock_.Advance(absl::Seconds(300));
  Step();
  const v1::Job v = Get(victim);
  ASSERT_GE(v.attempts_size(), 1);
  EXPECT_EQ(v.attempts(0).failure_class(), v1::FAILURE_CLASS_PREEMPTION);
}

// Queue.min_runtime protects a job that has run less than it from
// preemption: the low-priority gang that has run 48 s of the queue's 600 s
// keeps running; once it has run 600 s the high-priority job preempts it.
TEST_F(DispatcherTest, TheQueuesMinimumRuntimeHoldsOffPreemption) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());
  v1::Queue queue;
  queue.mutable_min_runtime()->set_seconds(600);
  UpdateQueue(queue, {"min_runtime"});

  v1::SubmitJobRequest low = Job("low", 4, "3600s", "60s");
  low.mutable_job()->mutable_spec()->set_priority_class("low");
  const int64_t victim = Submit(low);
  Step();
  ASSERT_EQ(Get(victim).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(48));

  v1::SubmitJobRequest high = Job("high", 1, "60s");
  high.mutable_job()->mutable_spec()->set_priority_class("high");
  const int64_t preemptor = Submit(high);
  Step();
  Step();
  EXPECT_EQ(Get(victim).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(preemptor).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Explain(preemptor).reason(), "NO_CAPACITY");

  clock_.Advance(absl::Seconds(600 - 48));
  Step();
  EXPECT_EQ(Get(victim).state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_EQ(Get(victim).state_reason(), "PREEMPTED_BY_PRIORITY");
  EXPECT_EQ(Get(preemptor).state(), v1::JOB_STATE_ADMITTED);
}

// STOP_POLICY_HOLD keeps running jobs; STOP_POLICY_HOLD_AND_DRAIN preempts
// them (grace period, then back to QUEUED) and admits nothing until the
// stop policy is NONE again, when they run again.
TEST_F(DispatcherTest, HoldAndDrainStopsTheQueuesRunningJobsUntilResumed) {
  auto job = [&](const std::string& id) {
    v1::SubmitJobRequest req = Job(id, 1, "3600s", "60s");
    req.mutable_job()
        ->mutable_spec()
        ->mutable_checkpoint()
        ->mutable_grace_period()
        ->set_seconds(30);
    return Submit(req);
  };
  const int64_t a = job("a");
  const int64_t b = job("b");
  Step();
  ASSERT_EQ(Get(a).state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(Get(b).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(70));

  v1::Queue queue;
  queue.set_stop_policy(v1::STOP_POLICY_HOLD);
  UpdateQueue(queue, {"stop_policy"});
  Step();
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(b).state(), v1::JOB_STATE_RUNNING);

  queue.set_stop_policy(v1::STOP_POLICY_HOLD_AND_DRAIN);
  UpdateQueue(queue, {"stop_policy"});
  const int64_t c = job("c");
  Step();  // the scheduler preempts both; the dispatcher signals them
  for (int64_t id : {a, b}) {
    EXPECT_EQ(Get(id).state(), v1::JOB_STATE_PREEMPTING) << id;
    EXPECT_EQ(Get(id).state_reason(), "QUEUE_DRAINED") << id;
  }
  EXPECT_EQ(last_pass_.stops, 2);
  clock_.Advance(absl::Seconds(10));  // inside the 30 s grace period
  Step();
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_PREEMPTING);
  clock_.Advance(absl::Seconds(25));  // past it
  Step();
  Step();
  for (int64_t id : {a, b}) {
    const v1::Job stopped = Get(id);
    EXPECT_EQ(stopped.state(), v1::JOB_STATE_QUEUED) << id;
    EXPECT_EQ(stopped.attempts(0).failure_class(),
              v1::FAILURE_CLASS_PREEMPTION);
    EXPECT_FALSE(stopped.resume_from().empty());
    EXPECT_EQ(Explain(id).reason(), "QUEUE_STOPPED");
  }
  EXPECT_EQ(Get(c).state(), v1::JOB_STATE_QUEUED);

  queue.set_stop_policy(v1::STOP_POLICY_NONE);
  UpdateQueue(queue, {"stop_policy"});
  Step();
  Step();
  for (int64_t id : {a, b, c}) {
    const v1::Job resumed = Get(id);
    EXPECT_EQ(resumed.state(), v1::JOB_STATE_RUNNING) << id;
  }
  EXPECT_EQ(Get(a).attempt_count(), 2);
}

}  // namespace
}  // namespace trainyard::testing

namespace trainyard::testing {
namespace {

// Budgets acting on the scheduler, end to end on the sim backend and the
// meter: GPU-hours at $3,600 ($1 per GPU-second), CPU and memory free; jobs
// of 8 GPUs for 60 s with a 60 s time limit, each expected to cost $480.
class BudgetDispatchTest : public DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    accounting_ = v1::AccountingService::NewStub(harness_->channel());
    const int64_t month = absl::ToUnixMillis(
        absl::FromCivil(absl::CivilMonth(absl::ToCivilSecond(
                            clock_.Now(), absl::UTCTimeZone())),
                        absl::UTCTimeZone()));
    for (auto [resource, micros] :
         {std::pair{v1::RESOURCE_NAME_GPU, int64_t{3'600'000'000}},
          std::pair{v1::RESOURCE_NAME_CPU, int64_t{0}},
          std::pair{v1::RESOURCE_NAME_MEMORY, int64_t{0}}}) {
      v1::AddRateRequest req;
      req.mutable_rate()->set_flavor("gpu");
      req.mutable_rate()->set_resource(resource);
      req.mutable_rate()->mutable_price_per_unit_hour()->set_micros(micros);
      req.mutable_rate()->mutable_price_per_unit_hour()->set_currency_code(
          "USD");
      *req.mutable_rate()->mutable_effective_time() =
          google::protobuf::util::TimeUtil::MillisecondsToTimestamp(month);
      v1::Rate out;
      grpc::Status st = accounting_->AddRate(
          ApiHarness::Context(harness_->admin_token()).get(), req, &out);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
    accounting::MeterServiceOptions mo;
    mo.postgres_url = harness_->database_url();
    auto meter = accounting::MeterService::Create(mo);
    ASSERT_TRUE(meter.ok()) << meter.status();
    meter_ = std::move(*meter);
  }

  void SetBudget(int64_t amount_micros, bool create) {
    v1::Budget b;
    b.mutable_monthly_amount()->set_micros(amount_micros);
    for (auto [percent, action] : {std::pair{50, v1::BUDGET_ACTION_WARN},
                                   std::pair{100, v1::BUDGET_ACTION_HOLD}}) {
      v1::BudgetThreshold* t = b.add_thresholds();
      t->set_percent(percent);
      t->set_action(action);
    }
    v1::Budget out;
    grpc::Status st;
    if (create) {
      v1::CreateBudgetRequest req;
      req.set_parent("tenants/acme");
      req.set_budget_id("acme");
      *req.mutable_budget() = b;
      st = accounting_->CreateBudget(ApiHarness::Context(token_).get(), req,
                                     &out);
    } else {
      v1::UpdateBudgetRequest req;
      b.set_name("tenants/acme/budgets/acme");
      *req.mutable_budget() = b;
      req.mutable_update_mask()->add_paths("monthly_amount");
      st = accounting_->UpdateBudget(ApiHarness::Context(token_).get(), req,
                                     &out);
    }
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  v1::Budget GetBudget() {
    v1::GetBudgetRequest req;
    req.set_name("tenants/acme/budgets/acme");
    v1::Budget out;
    grpc::Status st =
        accounting_->GetBudget(ApiHarness::Context(token_).get(), req, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }

  v1::SubmitJobRequest Priced(const std::string& id, const std::string& run) {
    v1::SubmitJobRequest req = Job(id, 1, run);
    req.mutable_job()->mutable_spec()->mutable_time_limit()->set_seconds(60);
    return req;
  }

  void Meter() {
    auto pass = meter_->RunPass(clock_.Now());
    ASSERT_TRUE(pass.ok()) << pass.status();
  }

  std::unique_ptr<v1::AccountingService::Stub> accounting_;
  std::unique_ptr<accounting::MeterService> meter_;
};

TEST_F(BudgetDispatchTest, ABudgetHoldsNewWorkBeforeAnOverrunUntilRaised) {
  SetBudget(1'000'000'000, /*create=*/true);  // $1,000, hold at 100 %
  std::vector<int64_t> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(Submit(Priced(absl::StrCat("b", i), "60s")));
  }
  // $480 + $480 fit in $1,000; a third would make $1,440.
  Step();
  EXPECT_EQ(Get(ids[0]).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(ids[1]).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(ids[2]).state(), v1::JOB_STATE_QUEUED);
  v1::ExplainPendingResponse why = Explain(ids[2]);
  EXPECT_EQ(why.reason(), "BUDGET_HOLD") << why.message();
  EXPECT_THAT(why.message(),
              ::testing::HasSubstr("budget tenants/acme/budgets/acme has "
                                   "40.000000 left, expected cost"));
  Meter();
  // Nothing metered yet beyond the start; the forecast is the two jobs.
  EXPECT_EQ(GetBudget().forecast().micros(), 960'000'000);
  EXPECT_EQ(GetBudget().active_action(), v1::BUDGET_ACTION_WARN);

  clock_.Advance(absl::Seconds(61));
  Step();  // both succeed
  EXPECT_EQ(Get(ids[0]).state(), v1::JOB_STATE_SUCCEEDED);
  Meter();
  v1::Budget budget = GetBudget();
  EXPECT_EQ(budget.spent().micros(), 960'000'000);
  EXPECT_EQ(budget.forecast().micros(), 960'000'000);
  Step();
  EXPECT_EQ(Get(ids[2]).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Explain(ids[3]).reason(), "BUDGET_HOLD");

  // Raised to $2,000: both admitted at once (the edit acts without a pass).
  SetBudget(2'000'000'000, /*create=*/false);
  Step();
  EXPECT_EQ(Get(ids[2]).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(ids[3]).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(61));
  Step();
  Meter();
  // Never overrun: four jobs of $480.
  EXPECT_EQ(GetBudget().spent().micros(), 1'920'000'000);
}

// The bound, over random work: jobs run for random times up
// to their time limits, against a budget lowered while work runs. Whatever
// the draw, what the month spends is at most the budget's HOLD limit plus
// the expected cost of the work already running when the limit was lowered
// (the work admitted after it fits in what was left).
TEST_F(BudgetDispatchTest,
       SpendingNeverPassesTheLimitByMoreThanTheRunningWork) {
  std::mt19937 rng(20261127);
  SetBudget(3'000'000'000, /*create=*/true);  // $3,000
  std::vector<int64_t> ids;
  int64_t expected_running = 0;
  for (int i = 0; i < 12; ++i) {
    const int run = std::uniform_int_distribution<int>(10, 60)(rng);
    ids.push_back(Submit(Priced(absl::StrCat("r", i), absl::StrCat(run, "s"))));
  }
  Step();
  for (int64_t id : ids) {
    if (Get(id).state() == v1::JOB_STATE_RUNNING)
      expected_running += 480'000'000;
  }
  ASSERT_GT(expected_running, 0);
  // Lowered while that work runs: $1,000 is already less than it will cost.
  Meter();
  SetBudget(1'000'000'000, /*create=*/false);
  for (int round = 0; round < 20; ++round) {
    clock_.Advance(absl::Seconds(15));
    Step();
    Meter();
  }
  const int64_t spent = GetBudget().spent().micros();
  EXPECT_LE(spent, 1'000'000'000 + expected_running);
  // And nothing was admitted after the limit was lowered.
  int ran = 0;
  for (int64_t id : ids) {
    if (Get(id).state() != v1::JOB_STATE_QUEUED) ++ran;
  }
  EXPECT_EQ(int64_t{ran} * 480'000'000, expected_running);
}

// A user's hourly spend cap: $60,000/h in the tenant, jobs of 8 GPUs at
// $3,600 per GPU-hour ($28,800/h each). Two of alice's run; her third waits
// with the cap named; bob, under the same cap of his own, is not held by
// hers; when one of alice's ends her third starts; raising the cap releases
// a fourth at once (without a meter pass).
TEST_F(BudgetDispatchTest, AUserHourlyCapHoldsThatUsersNewWorkOnly) {
  v1::Budget b;
  b.mutable_monthly_amount()->set_micros(1'000'000'000'000);  // not binding
  v1::BudgetThreshold* t = b.add_thresholds();
  t->set_percent(100);
  t->set_action(v1::BUDGET_ACTION_HOLD);
  b.mutable_user_hourly_cap()->set_micros(60'000'000'000);
  {
    v1::CreateBudgetRequest req;
    req.set_parent("tenants/acme");
    req.set_budget_id("acme");
    *req.mutable_budget() = b;
    v1::Budget out;
    grpc::Status st =
        accounting_->CreateBudget(ApiHarness::Context(token_).get(), req, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  const std::string bob = harness_->Token("users/bob", v1::ROLE_MEMBER, "acme");
  const int64_t a0 = Submit(Priced("a0", "30s"));
  const int64_t a1 = Submit(Priced("a1", "60s"));
  const int64_t a2 = Submit(Priced("a2", "60s"));
  const int64_t b0 = harness_->SubmitJob(bob, Priced("b0", "60s"));
  Step();
  EXPECT_EQ(Get(a0).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(a1).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(b0).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(a2).state(), v1::JOB_STATE_QUEUED);
  v1::ExplainPendingResponse why = Explain(a2);
  EXPECT_EQ(why.reason(), "BUDGET_HOLD") << why.message();
  EXPECT_THAT(why.message(),
              ::testing::HasSubstr(
                  "user alice's hourly spend cap of 60000.000000/h in budget "
                  "tenants/acme/budgets/acme: 57600.000000/h running, this "
                  "job needs 28800.000000/h"));

  // a0 ends: alice runs $28,800/h, and a2 fits.
  clock_.Advance(absl::Seconds(31));
  Step();
  EXPECT_EQ(Get(a0).state(), v1::JOB_STATE_SUCCEEDED);
  Step();
  EXPECT_EQ(Get(a2).state(), v1::JOB_STATE_RUNNING);
  const int64_t a3 = Submit(Priced("a3", "60s"));
  Step();
  EXPECT_EQ(Get(a3).state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(Explain(a3).message(),
              ::testing::HasSubstr("57600.000000/h running"));

  // Raised to $90,000/h: a3 starts in the next cycle.
  {
    v1::UpdateBudgetRequest req;
    req.mutable_budget()->set_name("tenants/acme/budgets/acme");
    req.mutable_budget()->mutable_user_hourly_cap()->set_micros(90'000'000'000);
    req.mutable_update_mask()->add_paths("user_hourly_cap");
    v1::Budget out;
    grpc::Status st =
        accounting_->UpdateBudget(ApiHarness::Context(token_).get(), req, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  Step();
  EXPECT_EQ(Get(a3).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(b0).state(), v1::JOB_STATE_RUNNING);
}

}  // namespace
}  // namespace trainyard::testing
