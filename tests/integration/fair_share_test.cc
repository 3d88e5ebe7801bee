// Fair share end to end: queues and a cohort made through the api, the real
// scheduler service over PostgreSQL and Redis, the shares read back through
// GetQueueStatus. The reference is Dominant Resource Fairness's own example
// (9 CPUs and 18 GiB; A's jobs <1 CPU, 4 GiB>, B's <3 CPU, 1 GiB>: A three
// jobs, B two, both at a dominant share of 2/3) on a platform that also holds
// 32 GPUs of another flavor and pool.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/scheduler/scheduler_service.h"
#include "tests/integration/api_test_harness.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
using scheduler::SchedulerOptions;
using scheduler::SchedulerService;

constexpr int64_t kGiB = int64_t{1} << 30;

class FairShareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ApiHarness>> h = ApiHarness::Start();
    ASSERT_TRUE(h.ok()) << h.status();
    harness_ = std::move(*h);
    // The sim cluster's four 8-GPU nodes (flavor gpu) and the default queue.
    ASSERT_TRUE(harness_->SeedTenant("acme").ok());
    token_ = harness_->Token("users/alice", v1::ROLE_TENANT_ADMIN, "acme");
    const std::string& admin = harness_->admin_token();
    auto clusters = harness_->clusters();
    auto queues = harness_->queues();
    {
      v1::CreateFlavorRequest req;
      req.set_flavor_id("cpu");
      req.mutable_flavor()->set_kind(v1::FLAVOR_KIND_ON_DEMAND);
      v1::Flavor out;
      ASSERT_TRUE(
          clusters->CreateFlavor(ApiHarness::Context(admin).get(), req, &out)
              .ok());
    }
    {
      v1::CreatePoolRequest req;
      req.set_parent("clusters/sim");
      req.set_pool_id("cpu");
      req.mutable_pool()->set_flavor("cpu");
      v1::Pool out;
      ASSERT_TRUE(
          clusters->CreatePool(ApiHarness::Context(admin).get(), req, &out)
              .ok());
    }
    {
      v1::ReportNodesRequest req;
      req.set_parent("clusters/sim");
      v1::Node* n = req.add_nodes();
      n->set_name("clusters/sim/nodes/c0");
      n->set_pool("cpu");
      n->set_state(v1::NODE_STATE_READY);
      n->mutable_capacity()->set_cpu_millis(9000);
      n->mutable_capacity()->set_memory_bytes(18 * kGiB);
      v1::ReportNodesResponse out;
      grpc::Status s =
          clusters->ReportNodes(ApiHarness::Context(admin).get(), req, &out);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    {
      v1::CreateCohortRequest req;
      req.set_cohort_id("cpu-pool");
      *req.mutable_cohort()->add_quotas() = CpuMemory(9000, 18 * kGiB);
      v1::Cohort out;
      grpc::Status s =
          queues->CreateCohort(ApiHarness::Context(admin).get(), req, &out);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    for (const char* id : {"a", "b"}) {
      v1::CreateQueueRequest req;
      req.set_parent("tenants/acme");
      req.set_queue_id(id);
      req.mutable_queue()->set_cohort("cpu-pool");
      *req.mutable_queue()->add_quotas() = CpuMemory(0, 0);
      req.mutable_queue()->mutable_preemption()->set_fair_share(
          v1::FAIR_SHARE_PREEMPTION_LESS_THAN_OR_EQUAL_TO_FINAL_SHARE);
      v1::Queue out;
      grpc::Status s =
          queues->CreateQueue(ApiHarness::Context(admin).get(), req, &out);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
  }

  static v1::FlavorQuotas CpuMemory(int64_t cpu_millis, int64_t memory) {
    v1::FlavorQuotas q;
    q.set_flavor("cpu");
    v1::ResourceQuota* cpu = q.add_resources();
    cpu->set_resource(v1::RESOURCE_NAME_CPU);
    cpu->set_nominal(cpu_millis);
    v1::ResourceQuota* mem = q.add_resources();
    mem->set_resource(v1::RESOURCE_NAME_MEMORY);
    mem->set_nominal(memory);
    return q;
  }

  SchedulerOptions Options() const {
    SchedulerOptions o;
    o.postgres_url = harness_->database_url();
    o.redis_addr = absl::StrCat("127.0.0.1:", harness_->redis()->port());
    // Every cycle explains and rewrites what changed.
    o.explanation_interval = absl::ZeroDuration();
    o.explanation_refresh = absl::ZeroDuration();
    return o;
  }

  // Five CPU-only jobs into queue a (<1 CPU, 4 GiB>) or b (<3 CPU, 1 GiB>).
  std::vector<int64_t> SubmitFive(const std::string& queue) {
    std::vector<int64_t> ids;
    for (int k = 0; k < 5; ++k) {
      v1::SubmitJobRequest req =
          MinimalSubmit("acme", absl::StrCat(queue, "-", k));
      v1::JobSpec* spec = req.mutable_job()->mutable_spec();
      spec->set_queue(queue);
      spec->mutable_resources()->set_gpus(0);
      spec->mutable_resources()->set_cpu_millis(queue == "a" ? 1000 : 3000);
      spec->mutable_resources()->set_memory_bytes(queue == "a" ? 4 * kGiB
                                                               : kGiB);
      ids.push_back(harness_->SubmitJob(token_, req));
      EXPECT_NE(ids.back(), 0);
    }
    return ids;
  }

  // Cycles (each flushed) until one admits and preempts nothing.
  void Converge(SchedulerService& s) {
    for (int i = 0; i < 10; ++i) {
      absl::StatusOr<scheduler::CycleReport> r = s.RunCycle();
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(s.FlushExplanations().ok());
      if (r->admitted == 0 && r->preempted == 0) return;
    }
    FAIL() << "no fixed point after 10 cycles";
  }

  // Jobs of the queue per state, and its weighted share, from
  // GetQueueStatus.
  v1::QueueStatus Status(const std::string& queue) {
    v1::GetQueueStatusRequest req;
    req.set_name(absl::StrCat("tenants/acme/queues/", queue));
    v1::QueueStatus out;
    grpc::Status s = harness_->queues()->GetQueueStatus(
        ApiHarness::Context(token_).get(), req, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }
  int64_t Admitted(const std::string& queue) {
    const v1::QueueStatus status = Status(queue);
    auto it = status.jobs_by_state().find("ADMITTED");
    return it == status.jobs_by_state().end() ? 0 : it->second;
  }

  // Cohort `id` owning `gpus` GPUs of flavor gpu.
  void GpuCohort(const std::string& id, int64_t gpus) {
    v1::CreateCohortRequest req;
    req.set_cohort_id(id);
    v1::FlavorQuotas* q = req.mutable_cohort()->add_quotas();
    q->set_flavor("gpu");
    q->add_resources()->set_resource(v1::RESOURCE_NAME_GPU);
    q->mutable_resources(0)->set_nominal(gpus);
    v1::Cohort out;
    grpc::Status s = harness_->queues()->CreateCohort(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // Queue `id` of acme in `cohort` with GPU quotas {flavor, nominal}, in
  // that order of preference, edited by `edit`.
  template <typename Edit>
  void GpuQueue(const std::string& id, const std::string& cohort,
                const std::vector<std::pair<std::string, int64_t>>& quotas,
                Edit edit) {
    v1::CreateQueueRequest req;
    req.set_parent("tenants/acme");
    req.set_queue_id(id);
    req.mutable_queue()->set_cohort(cohort);
    for (const auto& [flavor, nominal] : quotas) {
      v1::FlavorQuotas* q = req.mutable_queue()->add_quotas();
      q->set_flavor(flavor);
      q->add_resources()->set_resource(v1::RESOURCE_NAME_GPU);
      q->mutable_resources(0)->set_nominal(nominal);
    }
    edit(*req.mutable_queue());
    v1::Queue out;
    grpc::Status s = harness_->queues()->CreateQueue(
        ApiHarness::Context(harness_->admin_token()).get(), req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // One job of `workers` x `gpus` into `queue`; its id.
  int64_t SubmitGpus(const std::string& queue, const std::string& request_id,
                     int gpus, const std::string& priority_class = "") {
    v1::SubmitJobRequest req = MinimalSubmit("acme", request_id);
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_queue(queue);
    spec->mutable_resources()->set_gpus(gpus);
    spec->set_priority_class(priority_class);
    return harness_->SubmitJob(token_, req);
  }

  v1::Job Get(int64_t id) { return harness_->GetJob(token_, "acme", id); }

  std::unique_ptr<ApiHarness> harness_;
  std::string token_;
};

TEST_F(FairShareTest, TheDrfAllocationWhateverElseThePlatformHolds) {
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  // b fills what it can alone (CPU binds at three), then a arrives and takes
  // its share back by fair-sharing preemption.
  SubmitFive("b");
  Converge(**s);
  EXPECT_EQ(Admitted("b"), 3);
  EXPECT_DOUBLE_EQ(Status("b").weighted_share(), 1.0);  // 9 of 9 CPUs
  const std::vector<int64_t> a_jobs = SubmitFive("a");
  Converge(**s);
  EXPECT_EQ(Admitted("a"), 3);
  // a's last job waits, and says why fair sharing takes nothing more from
  // b: with it a would hold 16 of 18 GiB (0.888) against b's 0.666.
  {
    const v1::ExplainPendingResponse why =
        harness_->Explain(token_, "acme", a_jobs.back());
    EXPECT_NE(why.message().find(
                  "fair-share preemption considered on flavor cpu: its "
                  "queue's share with the job would be 0.888, the highest "
                  "other in its cohort tree is 0.666 (queue acme/b)"),
              std::string::npos)
        << why.message();
  }
  EXPECT_EQ(Admitted("b"), 2);
  EXPECT_EQ(Status("b").jobs_by_state().at("QUEUED"), 3);
  // Both at 2/3 (a: 12 of 18 GiB; b: 6 of 9 CPUs), as published.
  EXPECT_NEAR(Status("a").weighted_share(), 2.0 / 3, 1e-9);
  EXPECT_NEAR(Status("b").weighted_share(), 2.0 / 3, 1e-9);
  // The default queue (GPUs, within its nominal) has none.
  EXPECT_EQ(Status("default").weighted_share(), 0.0);
}

// What each lender lends, through GetQueueStatus, against shares worked by
// hand. Cohort lab (no quota of its own): l1 (6 GPUs), l2 (3), l3 (4 with a
// lending limit of 2) and borrower (0). The borrower's 8-GPU job borrows 8
// of the 11 they can lend: 8*6/11 = 4.36, 8*3/11 = 2.18, 8*2/11 = 1.45 →
// 4, 2, 1 and the last GPU to the largest remainder, l3: 4, 2, 2. Then l1
// runs 2 GPUs itself and can lend 4: 8*4/9 = 3.56, 8*3/9 = 2.67, 8*2/9 =
// 1.78 → 3, 2, 1, the two left to l3 (.78) and l2 (.67): 3, 3, 2.
TEST_F(FairShareTest, EachLenderShowsWhatItLends) {
  GpuCohort("lab", 0);
  auto none = [](v1::Queue&) {};
  GpuQueue("l1", "lab", {{"gpu", 6}}, none);
  GpuQueue("l2", "lab", {{"gpu", 3}}, none);
  GpuQueue("l3", "lab", {{"gpu", 4}}, [](v1::Queue& q) {
    q.mutable_quotas(0)->mutable_resources(0)->set_lending_limit(2);
  });
  GpuQueue("borrower", "lab", {{"gpu", 0}}, none);
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  auto gpu = [&](const std::string& queue) {
    const v1::QueueStatus status = Status(queue);
    for (const v1::FlavorUsage& u : status.usage()) {
      if (u.flavor() == "gpu" && u.resource() == v1::RESOURCE_NAME_GPU) {
        return std::vector<int64_t>{u.used(), u.nominal(), u.borrowed(),
                                    u.lent()};
      }
    }
    ADD_FAILURE() << queue << " has no gpu usage";
    return std::vector<int64_t>{};
  };
  ASSERT_NE(SubmitGpus("borrower", "big", 8), 0);
  Converge(**s);
  // {used, nominal, borrowed, lent}
  EXPECT_EQ(gpu("borrower"), (std::vector<int64_t>{8, 0, 8, 0}));
  EXPECT_EQ(gpu("l1"), (std::vector<int64_t>{0, 6, 0, 4}));
  EXPECT_EQ(gpu("l2"), (std::vector<int64_t>{0, 3, 0, 2}));
  EXPECT_EQ(gpu("l3"), (std::vector<int64_t>{0, 4, 0, 2}));
  ASSERT_NE(SubmitGpus("l1", "own", 2), 0);
  Converge(**s);
  EXPECT_EQ(gpu("l1"), (std::vector<int64_t>{2, 6, 0, 3}));
  EXPECT_EQ(gpu("l2"), (std::vector<int64_t>{0, 3, 0, 3}));
  EXPECT_EQ(gpu("l3"), (std::vector<int64_t>{0, 4, 0, 2}));
  EXPECT_EQ(gpu("borrower"), (std::vector<int64_t>{8, 0, 8, 0}));
}

TEST_F(FairShareTest, FlavorFungibilityIsActedOn) {
  // A second GPU flavor, gpu2, with one 8-GPU node. Queues f1 and f2 list
  // gpu first (nominal 0: only by borrowing from cohort "fung") and gpu2
  // second (nominal 8). TRY_NEXT_FLAVOR (the default) takes gpu2 within
  // nominal; STOP borrows on gpu at once.
  auto clusters = harness_->clusters();
  const std::string& admin = harness_->admin_token();
  {
    v1::CreateFlavorRequest req;
    req.set_flavor_id("gpu2");
    req.mutable_flavor()->set_kind(v1::FLAVOR_KIND_ON_DEMAND);
    req.mutable_flavor()->set_gpu_model("H100");
    // The same price as gpu: the expected cost ties, the queue's order
    // decides (docs/scheduling.md, "Flavor choice").
    req.mutable_flavor()->mutable_gpu_hour_price()->set_currency_code("USD");
    req.mutable_flavor()->mutable_gpu_hour_price()->set_micros(2000000);
    v1::Flavor out;
    ASSERT_TRUE(
        clusters->CreateFlavor(ApiHarness::Context(admin).get(), req, &out)
            .ok());
    v1::CreatePoolRequest pool;
    pool.set_parent("clusters/sim");
    pool.set_pool_id("gpu2");
    pool.mutable_pool()->set_flavor("gpu2");
    v1::Pool created;
    ASSERT_TRUE(
        clusters->CreatePool(ApiHarness::Context(admin).get(), pool, &created)
            .ok());
    v1::ReportNodesRequest nodes;
    nodes.set_parent("clusters/sim");
    v1::Node* n = nodes.add_nodes();
    n->set_name("clusters/sim/nodes/g0");
    n->set_pool("gpu2");
    n->set_state(v1::NODE_STATE_READY);
    n->mutable_capacity()->set_gpus(8);
    n->mutable_capacity()->set_gpu_model("H100");
    n->mutable_capacity()->set_cpu_millis(64000);
    n->mutable_capacity()->set_memory_bytes(512 * kGiB);
    v1::ReportNodesResponse reported;
    ASSERT_TRUE(
        clusters
            ->ReportNodes(ApiHarness::Context(admin).get(), nodes, &reported)
            .ok());
  }
  GpuCohort("fung", 8);
  GpuQueue("f1", "fung", {{"gpu", 0}, {"gpu2", 8}}, [](v1::Queue&) {});
  GpuQueue("f2", "fung", {{"gpu", 0}, {"gpu2", 8}}, [](v1::Queue& q) {
    q.mutable_flavor_fungibility()->set_when_can_borrow(
        v1::FLAVOR_FALLBACK_STOP);
  });
  const int64_t j1 = SubmitGpus("f1", "f1-a", 4);
  const int64_t j2 = SubmitGpus("f2", "f2-a", 4);
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  Converge(**s);
  ASSERT_EQ(Get(j1).attempts_size(), 1);
  EXPECT_EQ(Get(j1).attempts(0).flavor(), "flavors/gpu2");
  ASSERT_EQ(Get(j2).attempts_size(), 1);
  EXPECT_EQ(Get(j2).attempts(0).flavor(), "flavors/gpu");
}

TEST_F(FairShareTest, BorrowWithinCohortIsActedOnAndRefusedWithoutReclaim) {
  ASSERT_TRUE(harness_->SeedPriorityPreemption("acme").ok());
  // Cohort "bw" owns 8 GPUs; v (nominal 0) borrows them all with a low job;
  // p (nominal 0) reclaims for a high job that will borrow, as its
  // borrow_within_cohort_max_priority (50) covers low (10).
  GpuCohort("bw", 8);
  GpuQueue("v", "bw", {{"gpu", 0}}, [](v1::Queue&) {});
  GpuQueue("p", "bw", {{"gpu", 0}}, [](v1::Queue& q) {
    q.mutable_preemption()->set_reclaim_within_cohort(
        v1::RECLAIM_WITHIN_COHORT_LOWER_PRIORITY);
    q.mutable_preemption()->set_borrow_within_cohort_max_priority(50);
  });
  // Without reclaim the threshold would never be read: refused.
  {
    v1::CreateQueueRequest req;
    req.set_parent("tenants/acme");
    req.set_queue_id("bad");
    req.mutable_queue()
        ->mutable_preemption()
        ->set_borrow_within_cohort_max_priority(50);
    v1::Queue out;
    auto context = ApiHarness::Context(harness_->admin_token());
    grpc::Status st = harness_->queues()->CreateQueue(context.get(), req, &out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(ErrorInfoOf(*context).field(),
              "queue.preemption.borrow_within_cohort_max_priority")
        << st.error_message();
  }
  absl::StatusOr<std::unique_ptr<SchedulerService>> s =
      SchedulerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t low = SubmitGpus("v", "v-low", 8, "low");
  Converge(**s);
  EXPECT_EQ(Get(low).state(), v1::JOB_STATE_ADMITTED);
  const int64_t high = SubmitGpus("p", "p-high", 4, "high");
  Converge(**s);
  EXPECT_EQ(Get(high).state(), v1::JOB_STATE_ADMITTED);
  // Not yet dispatched, the low job's admission is revoked: queued again.
  EXPECT_EQ(Get(low).state(), v1::JOB_STATE_QUEUED);
}

}  // namespace
}  // namespace trainyard::testing
