// The scheduler service over a real PostgreSQL and Redis, with jobs submitted
// through the real api (docs/scheduler.md).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/scheduler/scheduler_service.h"
#include "storage/postgres/job_store.h"
#include "storage/postgres/object_store.h"
#include "storage/postgres/pool.h"
#include "storage/postgres/scheduler_store.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/accounting.grpc.pb.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
using scheduler::CycleReport;
using scheduler::SchedulerOptions;
using scheduler::SchedulerService;

// One cycle, then its explanations written (RunCycle leaves them to the
// service's writer thread).
absl::StatusOr<CycleReport> CycleAndFlush(SchedulerService& s) {
  absl::StatusOr<CycleReport> r = s.RunCycle();
  if (!r.ok()) return r;
  if (absl::Status f = s.FlushExplanations(); !f.ok()) return f;
  return r;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ApiHarness>> h = ApiHarness::Start();
    ASSERT_TRUE(h.ok()) << h.status();
    harness_ = std::move(*h);
    ASSERT_TRUE(harness_->SeedTenant("acme").ok());
    token_ = harness_->Token("users/alice", v1::ROLE_TENANT_ADMIN, "acme");
  }

  SchedulerOptions Options() const {
    SchedulerOptions o;
    o.postgres_url = harness_->database_url();
    o.redis_addr = absl::StrCat("127.0.0.1:", harness_->redis()->port());
    o.interval = absl::Milliseconds(200);
    o.standby_poll = absl::Milliseconds(200);
    // Every cycle explains (the tests read explanations after each one);
    // ExplanationsWaitForTheirInterval checks the interval.
    o.explanation_interval = absl::ZeroDuration();
    return o;
  }

  // Submits `workers` × 8-GPU workers; returns the job id.
  int64_t Submit(const std::string& request_id, int workers, int gpus = 8) {
    v1::SubmitJobRequest req = MinimalSubmit("acme", request_id);
    req.mutable_job()->mutable_spec()->set_workers(workers);
    req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(gpus);
    return harness_->SubmitJob(token_, req);
  }

  v1::Job Get(int64_t id) { return harness_->GetJob(token_, "acme", id); }

  v1::ExplainPendingResponse Explain(int64_t id) {
    return harness_->Explain(token_, "acme", id);
  }

  void Cancel(int64_t id) {
    v1::CancelJobRequest req;
    req.set_name(absl::StrCat("tenants/acme/jobs/", id));
    v1::Job cancelled;
    grpc::Status s = harness_->jobs()->Cancel(ApiHarness::Context(token_).get(),
                                              req, &cancelled);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  std::unique_ptr<ApiHarness> harness_;
  std::string token_;
};

TEST_F(SchedulerTest, AdmitsWhatFitsExplainsTheRestAndNeverAppliesTwice) {
  const int64_t a = Submit("a", 1);
  const int64_t b = Submit("b", 1);
  const int64_t c =
      Submit("c", 4);  // 32 GPUs: the cluster has 32, 16 remain after a and b
  EXPECT_EQ(Explain(c).reason(), "AWAITING_SCHEDULER");

  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pending, 3);
  EXPECT_EQ(r->admitted, 2);
  EXPECT_EQ(r->dropped, 0);

  for (int64_t id : {a, b}) {
    const v1::Job job = Get(id);
    EXPECT_EQ(job.state(), v1::JOB_STATE_ADMITTED) << id;
    EXPECT_EQ(job.attempt_count(), 1);
    ASSERT_EQ(job.attempts_size(), 1);
    const v1::Attempt& at = job.attempts(0);
    EXPECT_EQ(at.index(), 1);
    EXPECT_EQ(at.cluster(), "clusters/sim");
    EXPECT_EQ(at.flavor(), "flavors/gpu");
    EXPECT_EQ(at.backend_job_name(), absl::StrCat("ty-", id, "-1"));
    EXPECT_EQ(at.gpu_hour_price().micros(), 2000000);
    ASSERT_EQ(at.placements_size(), 1);
    EXPECT_EQ(at.placements(0).node().rfind("clusters/sim/nodes/n", 0), 0u);
    EXPECT_TRUE(at.has_admit_time());
  }
  // Two 8-GPU workers never share a node.
  EXPECT_NE(Get(a).attempts(0).placements(0).node(),
            Get(b).attempts(0).placements(0).node());

  const v1::ExplainPendingResponse e = Explain(c);
  EXPECT_EQ(e.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(e.reason(), "NO_CAPACITY");
  EXPECT_EQ(e.message(),
            "NO_CAPACITY: free nodes hold 2 of 4 workers (flavor gpu)");
  EXPECT_EQ(e.position_in_queue(), 1);

  // Nothing changed: the next cycle admits nothing and writes nothing.
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->admitted, 0);
  EXPECT_EQ(r->running, 2);
  EXPECT_EQ(r->explanations_written, 0);

  // A cancelled job loses its explanation; the gang still waits.
  const int64_t d = Submit("d", 4);
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Explain(d).reason(), "NO_CAPACITY");
  EXPECT_EQ(Explain(d).position_in_queue(), 2);
  Cancel(c);
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Explain(c).reason(), "NOT_PENDING");
  EXPECT_EQ(Explain(d).position_in_queue(), 1);
}

TEST_F(SchedulerTest, ExplainPendingSaysWhenTheSchedulerEvaluatedTheJob) {
  (void)Submit("a", 2);
  const int64_t gang = Submit("gang", 4);  // 32 GPUs; 16 free after "a"
  const v1::ExplainPendingResponse before = Explain(gang);
  EXPECT_EQ(before.reason(), "AWAITING_SCHEDULER");
  EXPECT_FALSE(before.has_evaluate_time());

  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  // A millisecond of slack either side: the stored time is rounded to the
  // microsecond.
  const absl::Time start = absl::Now() - absl::Milliseconds(1);
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  const absl::Time end = absl::Now() + absl::Milliseconds(1);
  const v1::ExplainPendingResponse e = Explain(gang);
  EXPECT_EQ(e.reason(), "NO_CAPACITY");
  ASSERT_TRUE(e.has_evaluate_time());
  const absl::Time evaluated =
      absl::FromUnixSeconds(e.evaluate_time().seconds()) +
      absl::Nanoseconds(e.evaluate_time().nanos());
  EXPECT_GE(evaluated, start);
  EXPECT_LE(evaluated, end);

  // A job that is no longer pending has no scheduler's reason, nor its time.
  Cancel(gang);
  EXPECT_FALSE(Explain(gang).has_evaluate_time());
}

TEST_F(SchedulerTest, AConfigurationChangeReachesTheNextCycle) {
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t a = Submit("a", 1);
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_ADMITTED);

  // The scheduler reloads the configuration tables only when they changed:
  // stopping the queue must be seen by the very next cycle.
  v1::UpdateQueueRequest update;
  update.mutable_queue()->set_name("tenants/acme/queues/default");
  update.mutable_queue()->set_stop_policy(v1::STOP_POLICY_HOLD);
  update.mutable_update_mask()->add_paths("stop_policy");
  v1::Queue updated;
  grpc::Status u = harness_->queues()->UpdateQueue(
      ApiHarness::Context(harness_->admin_token()).get(), update, &updated);
  ASSERT_TRUE(u.ok()) << u.error_message();
  const int64_t b = Submit("b", 1);
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Get(b).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Explain(b).reason(), "QUEUE_STOPPED");

  // And resuming it too.
  update.mutable_queue()->set_stop_policy(v1::STOP_POLICY_NONE);
  u = harness_->queues()->UpdateQueue(
      ApiHarness::Context(harness_->admin_token()).get(), update, &updated);
  ASSERT_TRUE(u.ok()) << u.error_message();
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Get(b).state(), v1::JOB_STATE_ADMITTED);
}

// A flavor's restart_overhead reaches the expected-cost placement: spot at
// 1.00/GPU-hour with 1.5 reclaims an hour and a 30 min checkpoint interval
// (15 min lost per reclaim) against on-demand "gpu" at 2.00 costs
// 1.00 x (1 + 1.5 x (15 + 10) / 60) = 1.63 with the default 10 min overhead
// (spot wins) and 1.00 x (1 + 1.5 x (15 + 60) / 60) = 2.88 with a 60 min one
// (on-demand wins); the explanation of a job kept waiting on spot names the
// overhead its expected cost counted.
// A job's cost estimate (docs/accounting.md, "A job's cost"): while it waits,
// the expected cost on the flavor the scheduler would try first; once
// admitted, that of its attempt, on the attempt and in the ADMITTED message.
// Checked against the price book's rates worked by hand: per worker 8 GPUs ×
// $3 + 4 cores × $0.04 + 16 GiB × $0.005 = $24.24 an hour.
TEST_F(SchedulerTest, JobsCarryTheSchedulersCostEstimate) {
  std::unique_ptr<v1::AccountingService::Stub> accounting =
      v1::AccountingService::NewStub(harness_->channel());
  for (auto [resource, micros] : {std::pair{v1::RESOURCE_NAME_GPU, 3'000'000},
                                  std::pair{v1::RESOURCE_NAME_CPU, 40'000},
                                  std::pair{v1::RESOURCE_NAME_MEMORY, 5'000}}) {
    v1::AddRateRequest req;
    req.mutable_rate()->set_flavor("gpu");
    req.mutable_rate()->set_resource(resource);
    req.mutable_rate()->mutable_price_per_unit_hour()->set_currency_code("USD");
    req.mutable_rate()->mutable_price_per_unit_hour()->set_micros(micros);
    // In force from now (earlier months may be closed).
    *req.mutable_rate()->mutable_effective_time() =
        google::protobuf::util::TimeUtil::GetCurrentTime();
    v1::Rate out;
    grpc::Status st = accounting->AddRate(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  constexpr int64_t kWorkerHour = 8 * 3'000'000 + 4 * 40'000 + 16 * 5'000;
  // a: 3 workers for an expected 90 minutes (time limit 3 h): admitted.
  v1::SubmitJobRequest req = MinimalSubmit("acme", "a");
  req.mutable_job()->mutable_spec()->set_workers(3);
  req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(8);
  req.mutable_job()->mutable_spec()->mutable_time_limit()->set_seconds(3 *
                                                                       3600);
  req.mutable_job()->mutable_spec()->mutable_expected_runtime()->set_seconds(
      90 * 60);
  const int64_t a = harness_->SubmitJob(token_, req);
  // b: 2 workers, time limit 2 h, no estimate: only 8 GPUs are left, it waits.
  req = MinimalSubmit("acme", "b");
  req.mutable_job()->mutable_spec()->set_workers(2);
  req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(8);
  req.mutable_job()->mutable_spec()->mutable_time_limit()->set_seconds(2 *
                                                                       3600);
  const int64_t b = harness_->SubmitJob(token_, req);
  EXPECT_FALSE(Get(b).cost().has_estimate());  // the scheduler has not seen it

  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(CycleAndFlush(**s).ok());

  const v1::Job got_a = Get(a);
  ASSERT_EQ(got_a.state(), v1::JOB_STATE_ADMITTED);
  EXPECT_EQ(got_a.cost().estimate().micros(), 3 * kWorkerHour * 3 / 2);
  EXPECT_EQ(got_a.cost().estimate().currency_code(), "USD");
  ASSERT_EQ(got_a.attempts_size(), 1);
  EXPECT_EQ(got_a.attempts(0).estimated_cost().micros(),
            3 * kWorkerHour * 3 / 2);
  EXPECT_NE(got_a.state_message().find("expected cost 109.080000 USD"),
            std::string::npos)
      << got_a.state_message();
  EXPECT_EQ(got_a.cost().spent().micros(), 0);  // nothing metered yet

  const v1::Job got_b = Get(b);
  ASSERT_EQ(got_b.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(got_b.cost().estimate().micros(), 2 * kWorkerHour * 2);
}

TEST_F(SchedulerTest, AFlavorsRestartOverheadDecidesTheExpectedCostPlacement) {
  const int64_t seed = Submit("seed", 1, 8);  // Seeds the sim cluster.
  {
    v1::CreateFlavorRequest req;
    req.set_flavor_id("spot");
    req.mutable_flavor()->set_kind(v1::FLAVOR_KIND_SPOT);
    req.mutable_flavor()->set_gpu_model("H100");
    req.mutable_flavor()->mutable_gpu_hour_price()->set_currency_code("USD");
    req.mutable_flavor()->mutable_gpu_hour_price()->set_micros(1000000);
    req.mutable_flavor()->set_reclaim_rate_per_hour(1.5);
    v1::Flavor out;
    grpc::Status st = harness_->clusters()->CreateFlavor(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_FALSE(out.has_restart_overhead());
  }
  {
    v1::CreatePoolRequest req;
    req.set_parent("clusters/sim");
    req.set_pool_id("spot");
    req.mutable_pool()->set_flavor("spot");
    v1::Pool out;
    grpc::Status st = harness_->clusters()->CreatePool(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  {
    v1::ReportNodesRequest req;
    req.set_parent("clusters/sim");
    for (int i = 8; i < 10; ++i) {
      v1::Node* n = req.add_nodes();
      n->set_name(absl::StrCat("clusters/sim/nodes/n", i));
      n->set_pool("spot");
      n->set_state(v1::NODE_STATE_READY);
      n->mutable_capacity()->set_gpus(8);
      n->mutable_capacity()->set_gpu_model("H100");
      n->mutable_capacity()->set_cpu_millis(64000);
      n->mutable_capacity()->set_memory_bytes(int64_t{512} << 30);
    }
    v1::ReportNodesResponse out;
    grpc::Status st = harness_->clusters()->ReportNodes(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  {
    v1::GetQueueRequest get;
    get.set_name("tenants/acme/queues/default");
    v1::Queue queue;
    grpc::Status st = harness_->queues()->GetQueue(
        ApiHarness::Context(harness_->admin_token()).get(), get, &queue);
    ASSERT_TRUE(st.ok()) << st.error_message();
    v1::FlavorQuotas spot = queue.quotas(0);
    spot.set_flavor("spot");
    v1::UpdateQueueRequest update;
    *update.mutable_queue()->mutable_quotas() = queue.quotas();
    *update.mutable_queue()->add_quotas() = spot;
    update.mutable_queue()->set_name(queue.name());
    update.mutable_update_mask()->add_paths("quotas");
    v1::Queue updated;
    st = harness_->queues()->UpdateQueue(
        ApiHarness::Context(harness_->admin_token()).get(), update, &updated);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  auto submit = [&](const std::string& id, v1::SpotPolicy policy, int workers) {
    v1::SubmitJobRequest req = MinimalSubmit("acme", id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_workers(workers);
    spec->mutable_resources()->set_gpus(8);
    spec->set_spot_policy(policy);
    spec->mutable_expected_runtime()->set_seconds(10 * 3600);
    spec->mutable_checkpoint()->set_resumable(true);
    spec->mutable_checkpoint()->set_directory("sim://checkpoints");
    spec->mutable_checkpoint()->mutable_interval()->set_seconds(30 * 60);
    return harness_->SubmitJob(token_, req);
  };

  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t cheap = submit("cheap", v1::SPOT_POLICY_ALLOWED, 1);
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(Get(cheap).state(), v1::JOB_STATE_ADMITTED);
  EXPECT_EQ(Get(cheap).attempts(0).flavor(), "flavors/spot");
  EXPECT_EQ(Get(seed).attempts(0).flavor(), "flavors/gpu");

  // Replacing a reclaimed spot VM takes an hour here.
  v1::UpdateFlavorRequest update;
  update.mutable_flavor()->set_name("flavors/spot");
  update.mutable_flavor()->mutable_restart_overhead()->set_seconds(3600);
  update.mutable_update_mask()->add_paths("restart_overhead");
  v1::Flavor updated;
  grpc::Status st = harness_->clusters()->UpdateFlavor(
      ApiHarness::Context(harness_->admin_token()).get(), update, &updated);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(updated.restart_overhead().seconds(), 3600);
  // Bounded: at most a day, never negative.
  update.mutable_flavor()->mutable_restart_overhead()->set_seconds(-1);
  st = harness_->clusters()->UpdateFlavor(
      ApiHarness::Context(harness_->admin_token()).get(), update, &updated);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  update.mutable_flavor()->mutable_restart_overhead()->set_seconds(86401);
  st = harness_->clusters()->UpdateFlavor(
      ApiHarness::Context(harness_->admin_token()).get(), update, &updated);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const int64_t dear = submit("dear", v1::SPOT_POLICY_ALLOWED, 1);
  // Spot only, more than the one free spot node holds.
  const int64_t waits = submit("waits", v1::SPOT_POLICY_REQUIRED, 2);
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(Get(dear).state(), v1::JOB_STATE_ADMITTED);
  EXPECT_EQ(Get(dear).attempts(0).flavor(), "flavors/gpu");
  const v1::ExplainPendingResponse e = Explain(waits);
  EXPECT_EQ(e.reason(), "NO_CAPACITY");
  EXPECT_NE(
      e.message().find("(flavor spot, restart overhead 3600 s per reclaim)"),
      std::string::npos)
      << e.message();
}

// A job kept off free GPUs that a reservation holds for the head job says so
// in its explanation, naming the job and when it is expected to start. The
// sim cluster has 4 × 8 GPUs: "forever" (no time limit) and "limited" (2 × 8,
// 1 h limit) leave one node free; "head" (3 × 8) can start only once
// "limited" ends, and holds the free node until then; "small" (4 GPUs, no
// limit) would fit there but would delay it.
TEST_F(SchedulerTest, AJobKeptOffReservedGpusNamesTheReservation) {
  auto submit = [&](const std::string& id, int workers, int gpus,
                    int64_t limit_seconds) {
    v1::SubmitJobRequest req = MinimalSubmit("acme", id);
    req.mutable_job()->set_display_name(id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_workers(workers);
    spec->mutable_resources()->set_gpus(gpus);
    if (limit_seconds > 0)
      spec->mutable_time_limit()->set_seconds(limit_seconds);
    return harness_->SubmitJob(token_, req);
  };
  const int64_t forever = submit("forever", 1, 8, 0);
  const int64_t limited = submit("limited", 2, 8, 3600);
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(Get(forever).state(), v1::JOB_STATE_ADMITTED);
  ASSERT_EQ(Get(limited).state(), v1::JOB_STATE_ADMITTED);

  const int64_t head = submit("head", 3, 8, 0);
  const int64_t small = submit("small", 1, 4, 0);
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reservations, 1);
  EXPECT_EQ(Get(head).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Get(small).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Explain(head).reason(), "WAITING_FOR_RESERVATION");
  const v1::ExplainPendingResponse e = Explain(small);
  EXPECT_EQ(e.reason(), "NO_CAPACITY");
  // The reservation starts when "limited" reaches its limit: admit time + 1 h.
  const absl::Time start =
      absl::FromUnixSeconds(Get(limited).attempts(0).admit_time().seconds()) +
      absl::Hours(1);
  const std::string at =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", start, absl::UTCTimeZone());
  EXPECT_NE(e.message().find(absl::StrCat(
                "free capacity (8 GPUs) on flavor gpu is reserved for job ",
                head, " (head), expected to start at ", at)),
            std::string::npos)
      << e.message();
}

TEST_F(SchedulerTest, NoAdmissionsOntoAClusterWhoseDispatcherIsGone) {
  // The seeded cluster "sim"; its dispatcher last reported 3 minutes ago.
  absl::StatusOr<std::unique_ptr<storage::postgres::Database>> db =
      storage::postgres::Database::Open({.url = harness_->database_url()});
  ASSERT_TRUE(db.ok()) << db.status();
  storage::postgres::ObjectStore objects(db->get());
  const int64_t a = Submit("a", 1);  // Seeds the cluster.
  auto beat = [&](absl::Duration ago) {
    absl::StatusOr<storage::postgres::StoredObject> row = objects.Update(
        storage::postgres::ClusterKind(), {"sim"}, 0,
        [&](const storage::postgres::StoredObject& current)
            -> absl::StatusOr<storage::postgres::ObjectStore::Mutation> {
          v1::Cluster cluster;
          if (!cluster.ParseFromString(current.body))
            return absl::InternalError("unreadable cluster");
          cluster.set_health(v1::CLUSTER_HEALTH_HEALTHY);
          *cluster.mutable_heartbeat_time() =
              google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
                  absl::ToUnixMicros(absl::Now() - ago));
          return storage::postgres::ObjectStore::Mutation{
              .body = cluster.SerializeAsString()};
        },
        nullptr);
    ASSERT_TRUE(row.ok()) << row.status();
  };
  beat(absl::Minutes(3));
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->admitted, 0);
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Explain(a).reason(), "NO_CAPACITY");

  // The dispatcher is back: the next cycle admits.
  beat(absl::Seconds(1));
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->admitted, 1);
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_ADMITTED);
}

TEST_F(SchedulerTest, DecisionsAreGuardedByTheJobVersion) {
  const int64_t a = Submit("a", 1);
  absl::StatusOr<std::unique_ptr<storage::postgres::Database>> db =
      storage::postgres::Database::Open(
          {.url = harness_->database_url(), .pool_size = 2});
  ASSERT_TRUE(db.ok()) << db.status();
  storage::postgres::SchedulerStore store(db->get());
  const v1::Job job = Get(a);
  storage::postgres::AdmitDecision admit{
      .tenant = "acme",
      .job_id = a,
      .expected_version = job.version() + 1,  // stale
      .message = "test"};
  admit.attempt.set_cluster("clusters/sim");
  admit.attempt.set_flavor("flavors/gpu");
  admit.attempt.add_placements()->set_node("clusters/sim/nodes/n0");
  absl::StatusOr<storage::postgres::DecisionOutcome> out =
      store.ApplyDecisions({}, {admit});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->admitted.empty());
  EXPECT_EQ(out->dropped, std::vector<int64_t>{a});
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Get(a).attempts_size(), 0);

  admit.expected_version = job.version();
  out = store.ApplyDecisions({}, {admit});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->admitted, std::vector<int64_t>{a});
  // The same decision again (e.g. a retried commit): dropped, not applied
  // twice.
  out = store.ApplyDecisions({}, {admit});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dropped, std::vector<int64_t>{a});
  const v1::Job after = Get(a);
  EXPECT_EQ(after.state(), v1::JOB_STATE_ADMITTED);
  EXPECT_EQ(after.attempt_count(), 1);
  EXPECT_EQ(after.attempts_size(), 1);

  // An admission whose victim cannot be preempted is dropped with it.
  const int64_t b = Submit("b", 1);
  storage::postgres::PreemptDecision victim{.tenant = "acme",
                                            .job_id = a,
                                            .expected_version = 1,
                                            .reason = "PREEMPTED_BY_PRIORITY"};
  storage::postgres::AdmitDecision needs{.tenant = "acme",
                                         .job_id = b,
                                         .expected_version = Get(b).version(),
                                         .victims = {a}};
  needs.attempt = admit.attempt;
  out = store.ApplyDecisions({victim}, {needs});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->preempted.empty());
  EXPECT_EQ(out->dropped, (std::vector<int64_t>{a, b}));
  EXPECT_EQ(Get(b).state(), v1::JOB_STATE_QUEUED);

  // With the right version the ADMITTED victim's admission is revoked (back to
  // QUEUED).
  victim.expected_version = after.version();
  out = store.ApplyDecisions({victim}, {needs});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->preempted, std::vector<int64_t>{a});
  EXPECT_EQ(out->admitted, std::vector<int64_t>{b});
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Get(b).state(), v1::JOB_STATE_ADMITTED);
}

// A new leader's full load (the jobs, attempts and checkpoints each read on a
// connection of its own) gives what the one transaction of the steady
// cycles' reads gives for the same jobs.
TEST_F(SchedulerTest, TheFullLoadReadsWhatTheReadOfTheSameIdsReads) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(Submit(absl::StrCat("j", i), 1));
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->admitted, 4);  // 4 nodes of 8 GPUs, two jobs wait
  absl::StatusOr<std::unique_ptr<storage::postgres::Database>> db =
      storage::postgres::Database::Open(
          {.url = harness_->database_url(), .pool_size = 4});
  ASSERT_TRUE(db.ok()) << db.status();
  storage::postgres::JobStore api(db->get());
  v1::Checkpoint checkpoint;
  checkpoint.set_step(7);
  checkpoint.set_uri("s3://ckpt/7");
  // An admitted job's and a waiting job's checkpoint.
  ASSERT_TRUE(api.ReportCheckpoint("acme", ids[0], checkpoint).ok());
  ASSERT_TRUE(api.ReportCheckpoint("acme", ids[5], checkpoint).ok());
  const int64_t done = Submit("done", 1);
  ASSERT_TRUE(api.Transition("acme", done, Get(done).version(),
                             v1::JOB_STATE_CANCELLED, "CANCELLED", "test")
                  .ok());
  ids.push_back(done);

  storage::postgres::SchedulerStore store(db->get());
  absl::StatusOr<std::vector<storage::postgres::ActiveJob>> all =
      store.LoadActiveJobs(nullptr);
  absl::StatusOr<std::vector<storage::postgres::ActiveJob>> by_id =
      store.LoadActiveJobs(&ids);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_TRUE(by_id.ok()) << by_id.status();
  ASSERT_EQ(all->size(), 6u);  // not the cancelled one
  ASSERT_EQ(by_id->size(), all->size());
  auto by_name = [](std::vector<storage::postgres::ActiveJob>& v) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return a.job.name() < b.job.name();
    });
  };
  by_name(*all);
  by_name(*by_id);
  int with_attempt = 0, with_checkpoint = 0;
  for (size_t i = 0; i < all->size(); ++i) {
    const storage::postgres::ActiveJob& x = (*all)[i];
    const storage::postgres::ActiveJob& y = (*by_id)[i];
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(x.job, y.job))
        << x.job.DebugString() << " vs " << y.job.DebugString();
    ASSERT_EQ(x.attempt.has_value(), y.attempt.has_value()) << x.job.name();
    if (x.attempt.has_value()) {
      ++with_attempt;
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
          *x.attempt, *y.attempt));
    }
    EXPECT_EQ(x.last_checkpoint, y.last_checkpoint) << x.job.name();
    with_checkpoint += x.last_checkpoint.has_value();
  }
  EXPECT_EQ(with_attempt, 4);
  EXPECT_EQ(with_checkpoint, 2);
}

// A new leader starts from the explanations in pending_explanations: it
// rewrites only the rows that differ from what it would write (a new reason at
// once, a new message once the refresh is due, a missing row) and removes the
// rows of jobs that are not pending, leaving the others alone.
TEST_F(SchedulerTest, ANewLeaderWritesOnlyTheExplanationsThatDiffer) {
  const int64_t a = Submit("a", 2);  // 16 of the 32 GPUs: admitted
  std::vector<int64_t> waiting;      // 32 GPUs each: they wait
  for (const char* name : {"b", "c", "d", "e"})
    waiting.push_back(Submit(name, 4));
  const int64_t b = waiting[0], c = waiting[1], d = waiting[2], e = waiting[3];
  {
    absl::StatusOr<std::unique_ptr<SchedulerService>> first =
        SchedulerService::Create(Options());
    ASSERT_TRUE(first.ok()) << first.status();
    absl::StatusOr<CycleReport> r = CycleAndFlush(**first);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->admitted, 1);
    EXPECT_EQ(r->explanations_written, 4);
  }
  const std::string message = Explain(d).message();
  ASSERT_EQ(Explain(b).reason(), "NO_CAPACITY");

  absl::StatusOr<std::unique_ptr<storage::postgres::Database>> db =
      storage::postgres::Database::Open(
          {.url = harness_->database_url(), .pool_size = 2});
  ASSERT_TRUE(db.ok()) << db.status();
  // b: as written, an hour ago; c: another reason, written just now; d: an
  // older message, an hour ago; e: no row; a (admitted): a row left over.
  ASSERT_TRUE((*db)
                  ->Transact([&](pqxx::work& txn) {
                    txn.exec(absl::StrCat(
                        "UPDATE pending_explanations SET update_time = now() - "
                        "interval '1 hour' WHERE job_id IN (",
                        b, ", ", d, ")"));
                    txn.exec(absl::StrCat(
                        "UPDATE pending_explanations SET reason = "
                        "'QUEUE_STOPPED', message = 'QUEUE_STOPPED: old' "
                        "WHERE job_id = ",
                        c));
                    txn.exec(absl::StrCat(
                        "UPDATE pending_explanations SET message = 'old' WHERE "
                        "job_id = ",
                        d));
                    txn.exec(absl::StrCat(
                        "DELETE FROM pending_explanations WHERE job_id = ", e));
                    txn.exec(absl::StrCat(
                        "INSERT INTO pending_explanations (job_id, reason, "
                        "message, position) VALUES (",
                        a, ", 'NO_CAPACITY', 'left over', 1)"));
                    return absl::OkStatus();
                  })
                  .ok());

  absl::StatusOr<std::unique_ptr<SchedulerService>> second =
      SchedulerService::Create(Options());
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<CycleReport> r = CycleAndFlush(**second);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->admitted, 0);
  EXPECT_EQ(r->pending, 4);
  // c, d and e written, a's row removed; b left alone.
  EXPECT_EQ(r->explanations_written, 4);
  for (int64_t id : {c, d, e}) {
    EXPECT_EQ(Explain(id).reason(), "NO_CAPACITY") << id;
    EXPECT_EQ(Explain(id).message(), message) << id;
  }
  int64_t rows_of_a = -1;
  bool b_untouched = false;
  ASSERT_TRUE((*db)
                  ->Read([&](pqxx::read_transaction& txn) {
                    rows_of_a = txn.exec(absl::StrCat(
                        "SELECT count(*) FROM pending_explanations "
                        "WHERE job_id = ",
                        a))[0][0]
                                    .as<int64_t>();
                    b_untouched = txn.exec(absl::StrCat(
                        "SELECT update_time < now() - interval '30 "
                        "minutes' FROM pending_explanations WHERE job_id = ",
                        b))[0][0]
                                      .as<bool>();
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(rows_of_a, 0);
  EXPECT_TRUE(b_untouched) << "b's row was rewritten";
  EXPECT_EQ(Explain(b).message(), message);

  // Nothing changed: the next cycle writes nothing.
  r = CycleAndFlush(**second);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->explanations_written, 0);
}

TEST_F(SchedulerTest, ExplanationsWaitForTheirInterval) {
  SchedulerOptions options = Options();
  options.explanation_interval = absl::Hours(1);
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(options);
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t a = Submit("a", 2);  // 16 of the 32 GPUs: admitted
  const int64_t b = Submit("b", 4);  // 32 GPUs: waits
  absl::StatusOr<CycleReport> r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->admitted, 1);
  EXPECT_EQ(Get(a).state(), v1::JOB_STATE_ADMITTED);
  // A leader's first cycle explains.
  EXPECT_EQ(r->explanations_written, 1);
  EXPECT_EQ(Explain(b).reason(), "NO_CAPACITY");

  // Within the hour: the cycle decides (c fits the 16 GPUs left) and
  // commits, and explains nothing: d has no explanation yet.
  const int64_t c = Submit("c", 2);
  const int64_t d = Submit("d", 4);
  r = CycleAndFlush(**s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->admitted, 1);
  EXPECT_EQ(Get(c).state(), v1::JOB_STATE_ADMITTED);
  EXPECT_EQ(r->pending, 3);  // b, c and d before the cycle
  EXPECT_EQ(r->explanations_written, 0);
  EXPECT_EQ(Explain(d).reason(), "AWAITING_SCHEDULER");

  // A new leader's first cycle explains at once.
  s->reset();
  absl::StatusOr<std::unique_ptr<SchedulerService>> next =
      SchedulerService::Create(options);
  ASSERT_TRUE(next.ok()) << next.status();
  r = CycleAndFlush(**next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->admitted, 0);
  EXPECT_EQ(r->explanations_written, 1);  // d's; b's is as written
  EXPECT_EQ(Explain(d).reason(), "NO_CAPACITY");
  EXPECT_EQ(Explain(d).position_in_queue(), 2);
}

TEST_F(SchedulerTest, AHotStandbyTakesOverWithWhatChangedSince) {
  absl::StatusOr<std::unique_ptr<SchedulerService>> leader =
      SchedulerService::Create(Options());
  absl::StatusOr<std::unique_ptr<SchedulerService>> standby =
      SchedulerService::Create(Options());
  ASSERT_TRUE(leader.ok() && standby.ok());
  const int64_t a = Submit("a", 2);        // 16 of the 32 GPUs
  const int64_t b = Submit("b", 4);        // 32 GPUs: waits
  ASSERT_TRUE((*standby)->Follow().ok());  // reads everything
  absl::StatusOr<CycleReport> r = CycleAndFlush(**leader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->full_load);
  EXPECT_EQ(r->admitted, 1);
  const std::string message_of_b = Explain(b).message();
  ASSERT_EQ(Explain(b).reason(), "NO_CAPACITY");
  const int64_t c = Submit("c", 2);        // fits the 16 GPUs left
  ASSERT_TRUE((*standby)->Follow().ok());  // a admitted, c submitted
  const int64_t d = Submit("d", 4);        // after the standby's last read
  leader->reset();                         // the leader is gone

  (*standby)->BecomeLeader();
  r = CycleAndFlush(**standby);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->full_load);
  EXPECT_EQ(r->jobs_read, 1);  // d, the one change since its last read
  EXPECT_EQ(r->admitted, 1);
  EXPECT_EQ(Get(c).state(), v1::JOB_STATE_ADMITTED);
  EXPECT_EQ(Get(a).attempt_count(), 1) << "a was never admitted twice";
  // The old leader's row of b was read again and stays as it was written
  // (its numbers moved, its reason did not); d's is new.
  EXPECT_EQ(r->explanations_written, 1);
  EXPECT_EQ(Explain(b).message(), message_of_b);
  EXPECT_EQ(Explain(d).reason(), "NO_CAPACITY");

  // Without a hot standby a new leader loads everything.
  SchedulerOptions cold = Options();
  cold.hot_standby = false;
  absl::StatusOr<std::unique_ptr<SchedulerService>> other =
      SchedulerService::Create(cold);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Follow().ok());
  standby->reset();
  (*other)->BecomeLeader();
  r = CycleAndFlush(**other);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->full_load);
  EXPECT_EQ(r->admitted, 0);
  EXPECT_EQ(r->explanations_written, 0);
}

TEST_F(SchedulerTest, OneLeaderAndAStandbyTakesOver) {
  const int64_t a = Submit("a", 1);
  absl::StatusOr<std::unique_ptr<SchedulerService>> first =
      SchedulerService::Create(Options());
  absl::StatusOr<std::unique_ptr<SchedulerService>> second =
      SchedulerService::Create(Options());
  ASSERT_TRUE(first.ok() && second.ok());
  (*first)->Start();
  (*second)->Start();
  auto wait_for = [](auto predicate) {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (!predicate() && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(20));
    return predicate();
  };
  ASSERT_TRUE(wait_for(
      [&] { return (*first)->is_leader() || (*second)->is_leader(); }));
  absl::SleepFor(absl::Milliseconds(600));
  EXPECT_NE((*first)->is_leader(), (*second)->is_leader())
      << "exactly one leader";
  ASSERT_TRUE(
      wait_for([&] { return Get(a).state() == v1::JOB_STATE_ADMITTED; }));

  SchedulerService* leader =
      (*first)->is_leader() ? first->get() : second->get();
  SchedulerService* standby =
      leader == first->get() ? second->get() : first->get();
  EXPECT_EQ(standby->cycles(), 0);
  const absl::Time stopped = absl::Now();
  leader->Shutdown();
  ASSERT_TRUE(wait_for([&] { return standby->is_leader(); }));
  const absl::Duration takeover = absl::Now() - stopped;
  EXPECT_LT(takeover, absl::Seconds(5)) << takeover;

  // The new leader schedules: a job submitted now is admitted (woken by Redis
  // or the timer).
  const int64_t b = Submit("b", 1);
  ASSERT_TRUE(
      wait_for([&] { return Get(b).state() == v1::JOB_STATE_ADMITTED; }));
  EXPECT_EQ(Get(a).attempt_count(), 1) << "a was never admitted twice";
  standby->Shutdown();
}

}  // namespace
}  // namespace trainyard::testing
