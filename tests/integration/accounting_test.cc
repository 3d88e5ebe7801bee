// AccountingService and the meter over a real PostgreSQL: prices added through
// the API (and refused with the field named), attempts metered into ledger
// lines whose sums are checked against hand-computed amounts, re-metering and
// two meters at once writing each line once, a running attempt's cost growing
// pass by pass and shrinking back when its end is recorded late.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/accounting/accounting_service.h"
#include "services/accounting/meter_service.h"
#include "services/accounting/pricing/report.h"
#include "services/accounting/pricing/rollup.h"
#include "services/accounting/reconcile.h"
#include "storage/postgres/accounting_store.h"
#include "storage/postgres/pool.h"
#include "tests/fixtures/ports.h"
#include "tests/fixtures/trainyard_process.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/accounting.grpc.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::testing {
namespace {

namespace v1 = ::trainyard::v1;
using accounting::MeterService;
namespace pricing = ::trainyard::accounting::pricing;

int64_t Ms(int y, int mo, int d, int h, int mi = 0, int s = 0) {
  return absl::ToUnixMillis(absl::FromCivil(
      absl::CivilSecond(y, mo, d, h, mi, s), absl::UTCTimeZone()));
}

google::protobuf::Timestamp Ts(int64_t ms) {
  google::protobuf::Timestamp t;
  t.set_seconds(ms / 1000);
  t.set_nanos(static_cast<int32_t>(ms % 1000) * 1000000);
  return t;
}

class AccountingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The harness's api serves AccountingService (USD until a price says
    // otherwise; months close 5 days after they end).
    absl::StatusOr<std::unique_ptr<ApiHarness>> h = ApiHarness::Start();
    ASSERT_TRUE(h.ok()) << h.status();
    harness_ = std::move(*h);
    ASSERT_TRUE(harness_->SeedTenant("acme").ok());
    stub_ = v1::AccountingService::NewStub(harness_->channel());
    auto db = storage::postgres::Database::Open(
        {.url = harness_->database_url(), .pool_size = 2});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
  }

  std::unique_ptr<MeterService> NewMeter(
      pricing::MeterOptions meter_options = {}) {
    accounting::MeterServiceOptions options;
    options.meter = meter_options;
    options.postgres_url = harness_->database_url();
    options.batch = 2;  // several batches per pass
    auto meter = MeterService::Create(options);
    EXPECT_TRUE(meter.ok()) << meter.status();
    return meter.ok() ? std::move(*meter) : nullptr;
  }

  grpc::Status AddRate(const std::string& token, const std::string& flavor,
                       v1::ResourceName resource, int64_t micros,
                       int64_t effective_ms, v1::ErrorInfo* info = nullptr) {
    v1::AddRateRequest req;
    req.mutable_rate()->set_flavor(flavor);
    req.mutable_rate()->set_resource(resource);
    req.mutable_rate()->mutable_price_per_unit_hour()->set_currency_code("USD");
    req.mutable_rate()->mutable_price_per_unit_hour()->set_micros(micros);
    *req.mutable_rate()->mutable_effective_time() = Ts(effective_ms);
    v1::Rate out;
    auto ctx = ApiHarness::Context(token);
    grpc::Status s = stub_->AddRate(ctx.get(), req, &out);
    if (info != nullptr) *info = ErrorInfoOf(*ctx);
    return s;
  }

  // Flavor "gpu" from `from_ms`: $2 per GPU-hour, $0.01 per core-hour and per
  // GiB-hour.
  void AddFlatRates(int64_t from_ms) {
    for (v1::ResourceName r : {v1::RESOURCE_NAME_GPU, v1::RESOURCE_NAME_CPU,
                               v1::RESOURCE_NAME_MEMORY}) {
      ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", r,
                          r == v1::RESOURCE_NAME_GPU ? 2'000'000 : 10'000,
                          from_ms)
                      .ok());
    }
  }

  // A job of `gpus` GPUs on one worker (4 cores, 16 GiB), and its attempt 1
  // on flavor "gpu" from start to end (none: running), ended by `failure`.
  int64_t JobWithAttempt(
      int gpus, int64_t start_ms, std::optional<int64_t> end_ms,
      v1::FailureClass failure = v1::FAILURE_CLASS_UNSPECIFIED) {
    v1::SubmitJobRequest req =
        MinimalSubmit("acme", absl::StrCat("job-", ++jobs_));
    req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(gpus);
    const int64_t id = harness_->SubmitJob(harness_->admin_token(), req);
    RecordAttempt(id, start_ms, end_ms, failure);
    return id;
  }

  void RecordAttempt(int64_t job_id, int64_t start_ms,
                     std::optional<int64_t> end_ms, v1::FailureClass failure,
                     const std::string& flavor = "gpu") {
    v1::Attempt attempt;
    attempt.set_index(1);
    attempt.set_cluster("clusters/sim");
    attempt.set_flavor(absl::StrCat("flavors/", flavor));
    *attempt.mutable_start_time() = Ts(start_ms);
    if (end_ms.has_value()) *attempt.mutable_end_time() = Ts(*end_ms);
    attempt.set_failure_class(failure);
    std::string body;
    attempt.SerializeToString(&body);
    absl::Status s = db_->Transact([&](pqxx::work& txn) {
      txn.exec_params(
          "INSERT INTO attempts (job_id, idx, cluster, flavor, body, "
          "start_time, end_time) VALUES ($1, 1, 'sim', $5, $2, "
          "to_timestamp($3::bigint / 1000.0), CASE WHEN $4::bigint IS NULL "
          "THEN NULL ELSE to_timestamp($4::bigint / 1000.0) END) ON CONFLICT "
          "(job_id, idx) DO UPDATE SET body = EXCLUDED.body, end_time = "
          "EXCLUDED.end_time",
          job_id, pqxx::binarystring(body), start_ms,
          end_ms.has_value() ? std::optional<int64_t>(*end_ms) : std::nullopt,
          flavor);
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
  }

  std::vector<v1::UsageRecord> Usage(const std::string& job = "") {
    std::vector<v1::UsageRecord> out;
    std::string token;
    do {
      v1::ListUsageRequest req;
      req.set_parent("tenants/acme");
      req.set_job(job);
      req.set_page_size(3);
      req.set_page_token(token);
      v1::ListUsageResponse resp;
      auto ctx = ApiHarness::Context(harness_->admin_token());
      grpc::Status s = stub_->ListUsage(ctx.get(), req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      for (const v1::UsageRecord& r : resp.records()) out.push_back(r);
      token = resp.next_page_token();
    } while (!token.empty());
    return out;
  }

  // The report's FOCUS CSV (ExportReport), chunks joined; empty (and a
  // failure recorded) when the call fails.
  std::string ExportCsv(const std::string& token,
                        const v1::GetReportRequest& report) {
    v1::ExportReportRequest ex;
    *ex.mutable_report() = report;
    ex.set_format(v1::REPORT_FORMAT_CSV);
    auto ctx = ApiHarness::Context(token);
    auto reader = stub_->ExportReport(ctx.get(), ex);
    std::string csv;
    v1::ExportReportResponse chunk;
    while (reader->Read(&chunk)) csv += chunk.data();
    const grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return s.ok() ? csv : std::string();
  }

  static int64_t Cost(const std::vector<v1::UsageRecord>& records,
                      v1::ResourceName resource) {
    int64_t sum = 0;
    for (const v1::UsageRecord& r : records) {
      if (r.resource() == resource) sum += r.cost().micros();
    }
    return sum;
  }

  std::unique_ptr<ApiHarness> harness_;
  std::unique_ptr<v1::AccountingService::Stub> stub_;
  std::unique_ptr<storage::postgres::Database> db_;
  int jobs_ = 0;
  std::map<int64_t, int64_t> starts_;  // attempt starts by job
};

TEST_F(AccountingTest, MetersAttemptsIntoExactLinesOnceWhateverThePasses) {
  const int64_t nov1 = Ms(2026, 11, 1, 0);
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_GPU,
                      2'000'000, nov1)
                  .ok());
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_CPU,
                      40'000, nov1)
                  .ok());
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_MEMORY,
                      5'000, nov1)
                  .ok());
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_GPU,
                      3'000'000, Ms(2026, 11, 10, 12))
                  .ok());

  // Job a: 2 GPUs, 10:30 to 12:30 across the rate change at 12:00:
  // 1.5 h × 2 GPUs × $2 + 0.5 h × 2 × $3 = $6 + $3 = $9.
  // CPU: 4 cores × 2 h × $0.04 = $0.32; memory: 16 GiB × 2 h × $0.005 = $0.16.
  const int64_t a =
      JobWithAttempt(2, Ms(2026, 11, 10, 10, 30), Ms(2026, 11, 10, 12, 30));
  // Job b: 1 GPU from 09:00:00 to 09:00:00.800 (a reclaim 0.8 s in): 800
  // GPU-ms at $2/h = 2,000,000 × 800 / 3,600,000 = 444.44 → 444 micros.
  const int64_t b =
      JobWithAttempt(1, Ms(2026, 11, 10, 9), Ms(2026, 11, 10, 9) + 800,
                     v1::FAILURE_CLASS_SPOT_RECLAIM);
  // Job c: 4 GPUs from 11:00, still running.
  const int64_t c = JobWithAttempt(4, Ms(2026, 11, 10, 11), std::nullopt);

  std::unique_ptr<MeterService> meter = NewMeter();
  ASSERT_NE(meter, nullptr);
  // At 13:00: c has run 2 h, 1 h at $2 and 1 h at $3, × 4 GPUs = $20.
  auto pass = meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 10, 13)));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->attempts, 3);
  EXPECT_EQ(pass->failed, 0);

  const std::string ja = absl::StrCat("tenants/acme/jobs/", a);
  const std::string jb = absl::StrCat("tenants/acme/jobs/", b);
  const std::string jc = absl::StrCat("tenants/acme/jobs/", c);
  EXPECT_EQ(Cost(Usage(ja), v1::RESOURCE_NAME_GPU), 9'000'000);
  EXPECT_EQ(Cost(Usage(ja), v1::RESOURCE_NAME_CPU), 320'000);
  EXPECT_EQ(Cost(Usage(ja), v1::RESOURCE_NAME_MEMORY), 160'000);
  // The job's cost in Get and List: every resource's lines, GPU-hours.
  v1::Job got = harness_->GetJob(harness_->admin_token(), "acme", a);
  EXPECT_EQ(got.cost().spent().micros(), 9'000'000 + 320'000 + 160'000);
  EXPECT_EQ(got.cost().spent().currency_code(), "USD");
  EXPECT_EQ(got.cost().gpu_hours(), "4");  // 2 GPUs × 2 h
  EXPECT_FALSE(got.cost().final());        // the job itself has not ended
  {
    v1::ListJobsRequest list;
    list.set_parent("tenants/acme");
    v1::ListJobsResponse jobs;
    auto lctx = ApiHarness::Context(harness_->admin_token());
    ASSERT_TRUE(harness_->jobs()->List(lctx.get(), list, &jobs).ok());
    int64_t listed = 0;
    for (const v1::Job& j : jobs.jobs()) listed += j.cost().spent().micros();
    int64_t ledger = 0;
    for (const v1::UsageRecord& r : Usage()) ledger += r.cost().micros();
    EXPECT_EQ(listed, ledger);
  }
  std::vector<v1::UsageRecord> rb = Usage(jb);
  EXPECT_EQ(Cost(rb, v1::RESOURCE_NAME_GPU), 444);
  for (const v1::UsageRecord& r : rb) {
    if (r.resource() != v1::RESOURCE_NAME_GPU) continue;
    // No checkpoint: the whole 0.8 s is lost work, to the millisecond.
    EXPECT_TRUE(r.lost_work());
    EXPECT_EQ(r.quantity(), "0.8");
    EXPECT_EQ(r.lost_work_cost().micros(), 444);
  }
  std::vector<v1::UsageRecord> rc = Usage(jc);
  EXPECT_EQ(Cost(rc, v1::RESOURCE_NAME_GPU), 20'000'000);
  bool open = false;
  for (const v1::UsageRecord& r : rc) open = open || r.open();
  EXPECT_TRUE(open);

  // Again at the same instant, and by two meters at once: nothing changes.
  const std::vector<v1::UsageRecord> before = Usage();
  std::unique_ptr<MeterService> other = NewMeter();
  std::thread t1([&] {
    (void)meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 10, 13)));
  });
  std::thread t2([&] {
    (void)other->RunPass(absl::FromUnixMillis(Ms(2026, 11, 10, 13)));
  });
  t1.join();
  t2.join();
  const std::vector<v1::UsageRecord> after = Usage();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].SerializeAsString(), before[i].SerializeAsString()) << i;
  }
  // Ended attempts are final: the second pass metered only the running one.
  pass = meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 10, 13)));
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->attempts, 1);

  // 30 minutes later c has accrued another 0.5 h × 4 × $3 = $6.
  ASSERT_TRUE(
      meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 10, 13, 30))).ok());
  EXPECT_EQ(Cost(Usage(jc), v1::RESOURCE_NAME_GPU), 26'000'000);

  // Its end is recorded late: it ended at 12:15, before the last two
  // passes. The lines beyond 12:15 go, the one that contains it shrinks:
  // 1 h × 4 × $2 + 0.25 h × 4 × $3 = $8 + $3 = $11.
  RecordAttempt(c, Ms(2026, 11, 10, 11), Ms(2026, 11, 10, 12, 15),
                v1::FAILURE_CLASS_UNSPECIFIED);
  pass = meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 10, 14)));
  ASSERT_TRUE(pass.ok());
  EXPECT_GE(pass->lines_deleted, 1);
  rc = Usage(jc);
  EXPECT_EQ(Cost(rc, v1::RESOURCE_NAME_GPU), 11'000'000);
  for (const v1::UsageRecord& r : rc) {
    EXPECT_FALSE(r.open());
    EXPECT_LE(r.end_time().seconds() * 1000, Ms(2026, 11, 10, 12, 15));
  }
  // And it is final now.
  pass = meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 10, 15)));
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->attempts, 0);

  // The ledger the passes wrote equals the attempts recomputed whole.
  storage::postgres::AccountingStore store(db_.get());
  auto book = store.LoadPriceBook("USD");
  ASSERT_TRUE(book.ok());
  auto november = accounting::MonthWindow("2026-11");
  ASSERT_TRUE(november.ok());
  auto reconciled = accounting::Reconcile(store, *book, november->first,
                                          november->second, {});
  ASSERT_TRUE(reconciled.ok()) << reconciled.status();
  EXPECT_TRUE(reconciled->ok()) << absl::StrJoin(reconciled->differences, "\n");
  EXPECT_EQ(reconciled->attempts, 3);
  EXPECT_EQ(reconciled->ledger_micros, reconciled->recomputed_micros);
  EXPECT_EQ(reconciled->ledger_micros,
            9'480'000 + Cost(Usage(jb), v1::RESOURCE_NAME_GPU) +
                Cost(Usage(jb), v1::RESOURCE_NAME_CPU) +
                Cost(Usage(jb), v1::RESOURCE_NAME_MEMORY) + 11'000'000 +
                Cost(Usage(jc), v1::RESOURCE_NAME_CPU) +
                Cost(Usage(jc), v1::RESOURCE_NAME_MEMORY));
  // A line changed behind the meter's back, and one deleted: both named.
  ASSERT_TRUE(db_->Transact([&](pqxx::work& txn) {
                   txn.exec_params(
                       "UPDATE usage_lines SET cost_micros = cost_micros + 1 "
                       "WHERE job_id = $1 AND resource = 0 AND start_ms = $2",
                       a, Ms(2026, 11, 10, 12));
                   txn.exec_params(
                       "DELETE FROM usage_lines WHERE job_id = $1 AND "
                       "resource = 1",
                       c);
                   return absl::OkStatus();
                 })
                  .ok());
  reconciled = accounting::Reconcile(store, *book, november->first,
                                     november->second, {});
  ASSERT_TRUE(reconciled.ok());
  ASSERT_EQ(reconciled->differences.size(), 3u)
      << absl::StrJoin(reconciled->differences, "\n");  // a's GPU, c's 2 CPU
  EXPECT_THAT(
      reconciled->differences,
      ::testing::Contains(::testing::HasSubstr(absl::StrCat(
          ja, "/1/GPU/", Ms(2026, 11, 10, 12), ": ledger cost 3000001"))));
  EXPECT_THAT(
      reconciled->differences,
      ::testing::Contains(::testing::HasSubstr(absl::StrCat(
          jc, "/1/CPU/", Ms(2026, 11, 10, 11), ": missing from the ledger"))));
}

// Reports served from the rollups equal BuildReport over the raw lines, for
// random windows (a month among them), zones, steps, groupings and filters,
// through every kind of pass: first metering, accrual of running attempts,
// late ends that delete and shorten lines, a re-metering of everything by two
// meters at once. After each, a rebuild of the rollups from the lines changes
// nothing: the meter kept them exact.
// The meter's COST_UPDATED events on the job's Watch stream: the first pass
// that meters a running attempt, then at most every cost_event_interval, and
// once more with cost.final when the ended job's attempt is metered for the
// last time; each carries what the ledger then holds for the job.
TEST_F(AccountingTest, CostEventsAccrueAtMostEveryIntervalAndEndFinal) {
  AddFlatRates(Ms(2026, 11, 1, 0));
  const int64_t start = Ms(2026, 11, 10, 10);
  const int64_t job = JobWithAttempt(2, start, std::nullopt);
  const std::string name = absl::StrCat("tenants/acme/jobs/", job);
  accounting::MeterServiceOptions options;
  options.postgres_url = harness_->database_url();
  options.cost_event_interval = absl::Hours(1);
  auto meter = MeterService::Create(options);
  ASSERT_TRUE(meter.ok()) << meter.status();
  auto cost_events = [&] {
    std::vector<v1::JobEvent> out;
    absl::Status s = db_->Transact([&](pqxx::work& txn) {
      for (const pqxx::row& r :
           txn.exec_params("SELECT body FROM job_events WHERE job_id = $1 "
                           "ORDER BY seq",
                           job)) {
        v1::JobEvent e;
        const pqxx::binarystring body(r[0]);
        EXPECT_TRUE(e.ParseFromString(body.str()));
        if (e.type() == v1::JOB_EVENT_TYPE_COST_UPDATED) out.push_back(e);
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  };
  auto pass = [&](int64_t at_ms) {
    auto p = (*meter)->RunPass(absl::FromUnixMillis(at_ms));
    ASSERT_TRUE(p.ok()) << p.status();
  };
  auto ledger = [&] {
    int64_t sum = 0;
    for (const v1::UsageRecord& r : Usage(name)) sum += r.cost().micros();
    return sum;
  };

  // Half an hour in: 2 GPUs × $2 + 4 cores × $0.01 + 16 GiB × $0.01 = $4.20
  // an hour, so $2.10.
  pass(start + 30 * 60'000);
  std::vector<v1::JobEvent> events = cost_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].job(), name);
  EXPECT_EQ(events[0].tenant(), "acme");
  EXPECT_EQ(events[0].queue(), "default");
  EXPECT_EQ(events[0].reason(), "COST_ACCRUED");
  EXPECT_EQ(events[0].cost().spent().micros(), 2'100'000);
  EXPECT_EQ(events[0].cost().spent().currency_code(), "USD");
  EXPECT_EQ(events[0].cost().gpu_hours(), "1");
  EXPECT_FALSE(events[0].cost().final());
  EXPECT_EQ(google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                events[0].time()),
            start + 30 * 60'000);
  // Within the hour: none.
  pass(start + 60 * 60'000);
  EXPECT_EQ(cost_events().size(), 1u);
  // An hour after the first: the next, with what the ledger holds now.
  pass(start + 91 * 60'000);
  events = cost_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].cost().spent().micros(), ledger());
  EXPECT_GT(events[1].cost().spent().micros(), 6'300'000);
  EXPECT_FALSE(events[1].cost().final());

  // The attempt ends at 2 h and the job succeeds: the next pass meters it for
  // the last time, whatever the interval, and the cost is final: $8.40.
  RecordAttempt(job, start, start + 2 * 3600'000,
                v1::FAILURE_CLASS_UNSPECIFIED);
  ASSERT_TRUE(db_->Transact([&](pqxx::work& txn) {
                   txn.exec_params("UPDATE jobs SET state = $2 WHERE id = $1",
                                   job,
                                   static_cast<int>(v1::JOB_STATE_SUCCEEDED));
                   return absl::OkStatus();
                 })
                  .ok());
  pass(start + 125 * 60'000);
  events = cost_events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].reason(), "COST_FINAL");
  EXPECT_TRUE(events[2].cost().final());
  EXPECT_EQ(events[2].cost().spent().micros(), 8'400'000);
  EXPECT_EQ(events[2].cost().spent().micros(), ledger());
  EXPECT_EQ(events[2].cost().gpu_hours(), "4");
  // What Get shows is the same.
  const v1::Job got = harness_->GetJob(harness_->admin_token(), "acme", job);
  EXPECT_EQ(got.cost().spent().micros(), 8'400'000);
  EXPECT_TRUE(got.cost().final());
  // Nothing more to meter: no more events.
  pass(start + 200 * 60'000);
  EXPECT_EQ(cost_events().size(), 3u);
}

// `trainyard accounting` as a process, killed -9 in the middle of its passes
// again and again, then two of them at once: every attempt ends with exactly
// one line per resource, each of the cost worked out here from the rates
// (one UTC hour each: one line per resource, rounded half to even), and the
// rollups (a report) hold the same sum.
TEST_F(AccountingTest, KilledMidPassAndTwoAtOnceTheLedgerHoldsEachLineOnce) {
  ASSERT_FALSE(TrainyardBinary().empty()) << "TRAINYARD_BIN is not set";
  AddFlatRates(Ms(2026, 11, 1, 0));
  constexpr int kJobs = 4000;
  {
    // The jobs go in as fast as they can: no submit rate limit for acme.
    v1::UpdateTenantRequest update;
    update.mutable_tenant()->set_name("tenants/acme");
    update.mutable_tenant()->set_submit_rate_limit(1e6);
    update.mutable_tenant()->set_submit_burst(1e6);
    update.mutable_update_mask()->add_paths("submit_rate_limit");
    update.mutable_update_mask()->add_paths("submit_burst");
    v1::Tenant tenant;
    grpc::Status st = harness_->queues()->UpdateTenant(
        ApiHarness::Context(harness_->admin_token()).get(), update, &tenant);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  // Jobs of 1 to 4 GPUs (4 cores, 16 GiB each), submitted in batches.
  std::vector<int64_t> ids;
  for (int b = 0; b < kJobs / 1000; ++b) {
    v1::SubmitJobBatchRequest batch;
    batch.set_parent("tenants/acme");
    for (int i = 0; i < 1000; ++i) {
      v1::SubmitJobRequest req =
          MinimalSubmit("acme", absl::StrCat("crash-", b * 1000 + i));
      req.set_parent("");
      req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(1 +
                                                                       i % 4);
      *batch.add_requests() = req;
    }
    v1::SubmitJobBatchResponse resp;
    grpc::Status st = harness_->jobs()->SubmitBatch(
        ApiHarness::Context(harness_->admin_token()).get(), batch, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    for (const v1::SubmitJobResponse& r : resp.responses()) {
      int64_t id = 0;
      ASSERT_TRUE(absl::SimpleAtoi(
          std::string(r.job().name().substr(r.job().name().rfind('/') + 1)),
          &id));
      ids.push_back(id);
    }
  }
  // Attempt 1 of job k: from 10:00 + k mod 1800 s, for 60 + k mod 1500 s:
  // inside the hour 10:00-11:00.
  const int64_t h10 = Ms(2026, 11, 10, 10);
  std::map<int64_t, std::pair<int64_t, int64_t>> runs;  // id -> (ms, gpus)
  {
    std::vector<std::string> bodies, starts, ends;
    for (size_t k = 0; k < ids.size(); ++k) {
      const int64_t start = h10 + static_cast<int64_t>(k % 1800) * 1000;
      const int64_t end = start + (60 + static_cast<int64_t>(k % 1500)) * 1000;
      runs[ids[k]] = {end - start, 1 + static_cast<int64_t>(k % 1000) % 4};
      v1::Attempt attempt;
      attempt.set_index(1);
      attempt.set_cluster("clusters/sim");
      attempt.set_flavor("flavors/gpu");
      *attempt.mutable_start_time() = Ts(start);
      *attempt.mutable_end_time() = Ts(end);
      bodies.push_back(attempt.SerializeAsString());
      starts.push_back(absl::StrCat(start));
      ends.push_back(absl::StrCat(end));
    }
    ASSERT_TRUE(db_->Transact([&](pqxx::work& txn) {
                     for (size_t k = 0; k < ids.size(); ++k) {
                       txn.exec_params(
                           "INSERT INTO attempts (job_id, idx, cluster, "
                           "flavor, body, start_time, end_time) VALUES ($1, "
                           "1, 'sim', 'gpu', $2, to_timestamp($3::bigint / "
                           "1000.0), to_timestamp($4::bigint / 1000.0))",
                           ids[k], pqxx::binarystring(bodies[k]), starts[k],
                           ends[k]);
                     }
                     return absl::OkStatus();
                   })
                    .ok());
  }
  auto finals = [&] {
    int64_t n = -1;
    absl::Status s = db_->Transact([&](pqxx::work& txn) {
      n = txn.exec1("SELECT count(*) FROM attempts WHERE metered_final")[0]
              .as<int64_t>();
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    return n;
  };
  auto meter = [&](const std::string& name) {
    absl::StatusOr<int> grpc_port = PickUnusedPort();
    absl::StatusOr<int> http_port = PickUnusedPort();
    EXPECT_TRUE(grpc_port.ok() && http_port.ok());
    return std::make_unique<TrainyardService>(
        name,
        std::vector<std::string>{
            TrainyardBinary(), "accounting",
            "--postgres_url=" + harness_->database_url(),
            absl::StrCat("--redis_addr=127.0.0.1:", harness_->redis()->port()),
            absl::StrCat("--grpc_listen=127.0.0.1:", grpc_port.value_or(0)),
            absl::StrCat("--http_listen=127.0.0.1:", http_port.value_or(0)),
            "--meter_interval=100ms"},
        absl::StrCat(::testing::TempDir(), "/", name, ".log"));
  };
  // Killed -9 while a pass is between its first and its last batch, three
  // times (a pass that ends before the kill lands is simply finished).
  int killed_mid_pass = 0;
  for (int round = 0; round < 3 && finals() < kJobs; ++round) {
    std::unique_ptr<TrainyardService> m = meter(absl::StrCat("meter", round));
    ASSERT_TRUE(m->Start().ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    int64_t done = finals();
    const int64_t before = done;
    while (done == before && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
      done = finals();
    }
    const std::optional<std::string> died = m->Died();
    ASSERT_FALSE(died.has_value()) << *died;
    m->Kill();
    if (finals() < kJobs) ++killed_mid_pass;
  }
  EXPECT_GE(killed_mid_pass, 1) << "every pass ended before its kill";
  // Then two at once until every attempt is metered.
  {
    std::unique_ptr<TrainyardService> a = meter("meter-a");
    std::unique_ptr<TrainyardService> b = meter("meter-b");
    ASSERT_TRUE(a->Start().ok());
    ASSERT_TRUE(b->Start().ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(180);
    while (finals() < kJobs && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    for (TrainyardService* m : {a.get(), b.get()}) {
      const std::optional<std::string> died = m->Died();
      EXPECT_FALSE(died.has_value()) << *died;
    }
  }
  ASSERT_EQ(finals(), kJobs);

  // Each (job, resource) has one line, of the cost worked out here:
  // amount × ms × rate / (unit × 3,600,000), half to even.
  auto half_even = [](__int128 num, __int128 den) {
    __int128 q = num / den, r = num % den;
    if (2 * r > den || (2 * r == den && q % 2 == 1)) ++q;
    return static_cast<int64_t>(q);
  };
  int64_t expected_total = 0;
  std::map<std::pair<int64_t, int>, int64_t> expected;
  for (const auto& [id, run] : runs) {
    const auto [ms, gpus] = run;
    expected[{id, 0}] = half_even(__int128{gpus} * ms * 2'000'000, 3'600'000);
    expected[{id, 1}] =
        half_even(__int128{4000} * ms * 10'000, __int128{1000} * 3'600'000);
    expected[{id, 2}] = half_even(__int128{16} * ms * 10'000, 3'600'000);
    for (int r = 0; r < 3; ++r) expected_total += expected[{id, r}];
  }
  std::map<std::pair<int64_t, int>, std::pair<int64_t, int64_t>> got;
  ASSERT_TRUE(db_->Transact([&](pqxx::work& txn) {
                   for (const pqxx::row& r : txn.exec(
                            "SELECT job_id, resource, count(*), "
                            "sum(cost_micros)::bigint FROM usage_lines GROUP "
                            "BY job_id, resource")) {
                     got[{r[0].as<int64_t>(), r[1].as<int>()}] = {
                         r[2].as<int64_t>(), r[3].as<int64_t>()};
                   }
                   return absl::OkStatus();
                 })
                  .ok());
  ASSERT_EQ(got.size(), expected.size());
  int wrong = 0;
  for (const auto& [key, cost] : expected) {
    auto it = got.find(key);
    if (it == got.end() || it->second != std::pair<int64_t, int64_t>{1, cost}) {
      if (++wrong <= 5) {
        ADD_FAILURE() << "job " << key.first << " resource " << key.second
                      << ": want one line of " << cost << ", got "
                      << (it == got.end()
                              ? std::string("none")
                              : absl::StrCat(it->second.first, " lines of ",
                                             it->second.second));
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  // The report of the month (served from the rollups) holds the same sum.
  v1::GetReportRequest req;
  req.set_parent("tenants/acme");
  *req.mutable_start_time() = Ts(Ms(2026, 11, 1, 0));
  *req.mutable_end_time() = Ts(Ms(2026, 12, 1, 0));
  req.add_group_by(v1::REPORT_DIMENSION_PROJECT);
  v1::Report report;
  auto rctx = ApiHarness::Context(harness_->admin_token());
  grpc::Status st = stub_->GetReport(rctx.get(), req, &report);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(report.total().cost().micros(), expected_total);
  EXPECT_EQ(report.total().attempts(), kJobs);
}

TEST_F(AccountingTest, RollupsEqualTheLinesThroughEveryPass) {
  ASSERT_TRUE(harness_->SeedTenant("bolt").ok());
  const int64_t nov1 = Ms(2026, 11, 1, 0);
  AddFlatRates(nov1);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_GPU,
                      2'500'000, Ms(2026, 11, 15, 7))
                  .ok());
  std::mt19937_64 rng(20261127);
  auto rand = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  constexpr int64_t kH = 3'600'000;
  const int64_t base = nov1;
  std::vector<int64_t> running;
  for (int i = 0; i < 48; ++i) {
    v1::SubmitJobRequest req =
        MinimalSubmit(i % 3 == 0 ? "bolt" : "acme", absl::StrCat("roll-", i));
    req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(
        static_cast<int32_t>(rand(0, 4)));
    const int64_t id = harness_->SubmitJob(harness_->admin_token(), req);
    const int64_t start = base + rand(0, 34 * 24 * kH) + rand(0, 999);
    const int64_t kind = rand(0, 9);
    std::optional<int64_t> end;
    if (kind < 6) {
      end = start + rand(1, kH);  // most are short
    } else if (kind < 8) {
      end = start + rand(kH, 30 * kH);
    } else {
      running.push_back(id);
    }
    RecordAttempt(id, start, end,
                  kind == 5 ? v1::FAILURE_CLASS_PREEMPTION
                            : v1::FAILURE_CLASS_UNSPECIFIED);
    starts_[id] = start;
  }
  ASSERT_FALSE(running.empty());

  storage::postgres::AccountingStore store(db_.get());
  auto digest = [&]() {
    std::string out;
    EXPECT_TRUE(db_->Transact([&](pqxx::work& txn) {
                     out = txn.exec(
                                  "SELECT count(*) || ':' || coalesce(md5("
                                  "string_agg(r::text, ';' ORDER BY "
                                  "granularity, period_start_ms, tenant, "
                                  "project, queue, user_name, cluster, "
                                  "flavor, resource)), '') FROM "
                                  "usage_rollups r")[0][0]
                               .as<std::string>();
                     return absl::OkStatus();
                   })
                    .ok());
    return out;
  };
  int rows_compared = 0;
  auto check = [&](const std::string& stage) {
    SCOPED_TRACE(stage);
    // The rollups the meter kept are those a rebuild makes.
    const std::string kept = digest();
    ASSERT_TRUE(store.RebuildRollups().ok());
    EXPECT_EQ(digest(), kept);
    const char* zones[] = {"UTC", "America/New_York", "Europe/Berlin"};
    const pricing::Dimension dims[] = {
        pricing::Dimension::kTenant,  pricing::Dimension::kProject,
        pricing::Dimension::kUser,    pricing::Dimension::kQueue,
        pricing::Dimension::kCluster, pricing::Dimension::kFlavor,
        pricing::Dimension::kResource};
    for (int i = 0; i < 30; ++i) {
      pricing::ReportQuery q;
      if (i % 6 == 0) {
        q.start = Ms(2026, 11, 1, 0);
        q.end = Ms(2026, 12, 1, 0);
      } else {
        q.start = base + rand(-48, 34 * 24) * kH;
        q.end = q.start + rand(1, 40 * 24) * kH;
      }
      q.time_zone = zones[rand(0, 2)];
      if (i % 6 == 1) q.time_zone = "America/New_York";
      q.step = static_cast<pricing::Step>(rand(0, 3));
      for (pricing::Dimension d : dims) {
        if (rand(0, 2) == 0) q.group_by.push_back(d);
      }
      if (rand(0, 3) == 0) q.filters[pricing::Dimension::kTenant] = "bolt";
      if (rand(0, 3) == 0) q.filters[pricing::Dimension::kResource] = "GPU";
      SCOPED_TRACE(absl::StrCat("query ", i, " [", q.start, ", ", q.end, ") ",
                                q.time_zone, " step ",
                                static_cast<int>(q.step)));
      auto sums = store.SumRollups(q);
      ASSERT_TRUE(sums.ok()) << sums.status();
      auto got = pricing::ReportFromRollups(q, *sums, nullptr);
      ASSERT_TRUE(got.ok()) << got.status();
      auto lines = store.LoadLines("", q.start, q.end);
      ASSERT_TRUE(lines.ok()) << lines.status();
      auto want = pricing::BuildReport(*lines, q, nullptr);
      ASSERT_TRUE(want.ok()) << want.status();
      std::vector<pricing::ReportRow> g = got->rows, w = want->rows;
      g.push_back(got->total);
      w.push_back(want->total);
      ASSERT_EQ(g.size(), w.size());
      for (size_t r = 0; r < g.size(); ++r) {
        SCOPED_TRACE(absl::StrCat("row ", r));
        EXPECT_EQ(g[r].keys, w[r].keys);
        EXPECT_EQ(g[r].period_start, w[r].period_start);
        EXPECT_EQ(g[r].period_end, w[r].period_end);
        EXPECT_EQ(g[r].cost_micros, w[r].cost_micros);
        EXPECT_EQ(g[r].tenant_cost_micros, w[r].tenant_cost_micros);
        EXPECT_EQ(g[r].platform_cost_micros, w[r].platform_cost_micros);
        EXPECT_EQ(g[r].lost_work_cost_micros, w[r].lost_work_cost_micros);
        EXPECT_EQ(g[r].list_cost_micros, w[r].list_cost_micros);
        EXPECT_EQ(g[r].gpu_ms, w[r].gpu_ms);
        EXPECT_EQ(g[r].lost_gpu_ms, w[r].lost_gpu_ms);
        EXPECT_TRUE(g[r].cpu_millicore_ms == w[r].cpu_millicore_ms);
        EXPECT_TRUE(g[r].memory_byte_ms == w[r].memory_byte_ms);
        EXPECT_EQ(g[r].attempts, w[r].attempts);
        EXPECT_EQ(g[r].spot_price_gap, w[r].spot_price_gap);
      }
      rows_compared += static_cast<int>(w.size());
    }
  };

  std::unique_ptr<MeterService> meter = NewMeter();
  ASSERT_NE(meter, nullptr);
  ASSERT_TRUE(meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 24, 0))).ok());
  check("first pass");
  // The running attempts accrue (their open lines grow, new hours come).
  ASSERT_TRUE(
      meter->RunPass(absl::FromUnixMillis(Ms(2026, 12, 2, 17, 30))).ok());
  check("accrual");
  // Late ends: lines past them are deleted, the one holding them shrinks.
  for (int64_t id : running) {
    RecordAttempt(id, starts_[id], starts_[id] + rand(0, 3 * kH),
                  v1::FAILURE_CLASS_NODE_FAILURE);
  }
  auto pass = meter->RunPass(absl::FromUnixMillis(Ms(2026, 12, 3, 0)));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_GT(pass->lines_deleted, 0);
  check("late ends");
  // Everything metered again, by two meters at once: the same rollups.
  const std::string before = digest();
  ASSERT_TRUE(db_->Transact([&](pqxx::work& txn) {
                   txn.exec(
                       "UPDATE attempts SET metered_until_ms = NULL, "
                       "metered_final = false");
                   return absl::OkStatus();
                 })
                  .ok());
  std::unique_ptr<MeterService> other = NewMeter();
  std::thread t1(
      [&] { (void)meter->RunPass(absl::FromUnixMillis(Ms(2026, 12, 3, 0))); });
  std::thread t2(
      [&] { (void)other->RunPass(absl::FromUnixMillis(Ms(2026, 12, 3, 0))); });
  t1.join();
  t2.join();
  EXPECT_EQ(digest(), before);
  check("re-metered");
  EXPECT_GT(rows_compared, 300);

  // Through the API: a month by project (rollups) and by job (raw lines).
  const std::string finance =
      harness_->Token("users/fin", v1::ROLE_FINANCE, "acme");
  int64_t by_project = 0, by_job = 0, attempts_project = 0, attempts_job = 0;
  for (v1::ReportDimension d :
       {v1::REPORT_DIMENSION_PROJECT, v1::REPORT_DIMENSION_JOB}) {
    v1::GetReportRequest req;
    req.set_parent("tenants/acme");
    *req.mutable_start_time() = Ts(Ms(2026, 11, 1, 0));
    *req.mutable_end_time() = Ts(Ms(2026, 12, 1, 0));
    req.add_group_by(d);
    v1::Report report;
    auto ctx = ApiHarness::Context(finance);
    grpc::Status s = stub_->GetReport(ctx.get(), req, &report);
    ASSERT_TRUE(s.ok()) << s.error_message();
    int64_t attempts = 0;
    for (const v1::ReportRow& row : report.rows()) attempts += row.attempts();
    EXPECT_EQ(attempts, report.total().attempts());
    if (d == v1::REPORT_DIMENSION_PROJECT) {
      by_project = report.total().cost().micros();
      attempts_project = attempts;
    } else {
      by_job = report.total().cost().micros();
      attempts_job = attempts;
    }
  }
  EXPECT_GT(by_project, 0);
  EXPECT_EQ(by_project, by_job);
  EXPECT_EQ(attempts_project, attempts_job);
}

TEST_F(AccountingTest, RefusesBadPricesNamingTheFieldAndStoresNothing) {
  const int64_t nov1 = Ms(2026, 11, 1, 0);
  v1::ErrorInfo info;
  grpc::Status s = AddRate(harness_->admin_token(), "gpu",
                           v1::RESOURCE_NAME_GPU, -1, nov1, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "rate.price_per_unit_hour.micros");

  s = AddRate(harness_->admin_token(), "no-such-flavor", v1::RESOURCE_NAME_GPU,
              1, nov1, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "rate.flavor");

  s = AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_UNSPECIFIED, 1,
              nov1, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "rate.resource");

  // A month closed long ago is immutable.
  s = AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_GPU, 1,
              Ms(2020, 1, 1, 0), &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "rate.effective_time");

  // Only platform admins add prices.
  const std::string member =
      harness_->Token("users/m", v1::ROLE_MEMBER, "acme");
  s = AddRate(member, "gpu", v1::RESOURCE_NAME_GPU, 1, nov1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Nothing of the above was stored.
  v1::PriceBook book;
  auto ctx = ApiHarness::Context(member);
  ASSERT_TRUE(stub_->GetPriceBook(ctx.get(), {}, &book).ok());
  EXPECT_EQ(book.rates_size(), 0);

  // One price, then the same instant again: refused.
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_GPU,
                      2'000'000, nov1)
                  .ok());
  s = AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_GPU, 3'000'000,
              nov1, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "rate.effective_time");

  // A commitment: stored and listed; one that ends before it starts is not.
  {
    v1::AddCommitmentRequest req;
    v1::Commitment* c = req.mutable_commitment();
    c->set_flavor("gpu");
    c->mutable_amount()->set_currency_code("USD");
    c->mutable_amount()->set_micros(1'000'000'000);
    *c->mutable_start_time() = Ts(nov1);
    *c->mutable_end_time() = Ts(Ms(2026, 12, 1, 0));
    v1::Commitment out;
    auto ok_ctx = ApiHarness::Context(harness_->admin_token());
    ASSERT_TRUE(stub_->AddCommitment(ok_ctx.get(), req, &out).ok());
    *c->mutable_end_time() = Ts(nov1 - 1000);
    auto bad_ctx = ApiHarness::Context(harness_->admin_token());
    EXPECT_EQ(stub_->AddCommitment(bad_ctx.get(), req, &out).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(ErrorInfoOf(*bad_ctx).field(), "commitment.end_time");
    v1::PriceBook listed;
    auto read_ctx = ApiHarness::Context(member);
    ASSERT_TRUE(stub_->GetPriceBook(read_ctx.get(), {}, &listed).ok());
    ASSERT_EQ(listed.commitments_size(), 1);
    EXPECT_EQ(listed.commitments(0).amount().micros(), 1'000'000'000);
    EXPECT_EQ(listed.currency(), "USD");
  }

  // Members read no usage; another tenant's finance does not see acme.
  v1::ListUsageRequest req;
  req.set_parent("tenants/acme");
  v1::ListUsageResponse resp;
  auto c1 = ApiHarness::Context(member);
  EXPECT_EQ(stub_->ListUsage(c1.get(), req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(harness_->SeedTenant("other").ok());
  const std::string finance =
      harness_->Token("users/f", v1::ROLE_FINANCE, "other");
  auto c2 = ApiHarness::Context(finance);
  EXPECT_EQ(stub_->ListUsage(c2.get(), req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  const std::string acme_finance =
      harness_->Token("users/g", v1::ROLE_FINANCE, "acme");
  auto c3 = ApiHarness::Context(acme_finance);
  EXPECT_TRUE(stub_->ListUsage(c3.get(), req, &resp).ok());
  req.set_page_token("not a token");
  auto c4 = ApiHarness::Context(acme_finance);
  EXPECT_EQ(stub_->ListUsage(c4.get(), req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorInfoOf(*c4).field(), "page_token");
}

// Reports group the ledger's lines by any dimensions and days, add up exactly
// to the lines ListUsage returns, and export as FOCUS CSV whose BilledCost
// column sums to the total.
TEST_F(AccountingTest, ReportsAndFocusExportsAddUpToTheLedger) {
  const int64_t nov1 = Ms(2026, 11, 1, 0);
  AddFlatRates(nov1);
  if (HasFatalFailure()) return;
  // Two jobs on Nov 10 and one on Nov 11 (2 h × 2 GPUs × $2 = $8 of GPU).
  JobWithAttempt(1, Ms(2026, 11, 10, 10), Ms(2026, 11, 10, 11));
  JobWithAttempt(2, Ms(2026, 11, 10, 23), Ms(2026, 11, 11, 1));
  JobWithAttempt(3, Ms(2026, 11, 11, 5), Ms(2026, 11, 11, 5, 20),
                 v1::FAILURE_CLASS_PREEMPTION);
  std::unique_ptr<MeterService> meter = NewMeter();
  ASSERT_NE(meter, nullptr);
  ASSERT_TRUE(meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 12, 0))).ok());
  int64_t ledger = 0;
  for (const v1::UsageRecord& r : Usage()) ledger += r.cost().micros();
  ASSERT_GT(ledger, 0);

  const std::string finance =
      harness_->Token("users/fin", v1::ROLE_FINANCE, "acme");
  v1::GetReportRequest req;
  req.set_parent("tenants/acme");
  *req.mutable_start_time() = Ts(nov1);
  *req.mutable_end_time() = Ts(Ms(2026, 12, 1, 0));
  req.add_group_by(v1::REPORT_DIMENSION_DAY);
  req.add_group_by(v1::REPORT_DIMENSION_RESOURCE);
  v1::Report report;
  auto ctx = ApiHarness::Context(finance);
  grpc::Status s = stub_->GetReport(ctx.get(), req, &report);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(report.total().cost().micros(), ledger);
  EXPECT_EQ(report.currency(), "USD");
  EXPECT_EQ(report.step(), v1::REPORT_STEP_DAY);
  int64_t rows = 0, gpu_10 = 0, gpu_11 = 0;
  for (const v1::ReportRow& row : report.rows()) {
    rows += row.cost().micros();
    ASSERT_EQ(row.keys_size(), 2);
    if (row.keys(1) != "GPU") continue;
    if (row.keys(0) == "2026-11-10") gpu_10 += row.cost().micros();
    if (row.keys(0) == "2026-11-11") gpu_11 += row.cost().micros();
  }
  EXPECT_EQ(rows, ledger);
  // Nov 10: 1 h × 1 GPU + 1 h × 2 GPUs at $2 = $6; Nov 11: 1 h × 2 + 1/3 h
  // × 3 GPUs at $2 = $4 + $2 = $6.
  EXPECT_EQ(gpu_10, 6'000'000);
  EXPECT_EQ(gpu_11, 6'000'000);
  EXPECT_EQ(report.total().gpu_hours(), "6");  // 1 + 4 + 1
  // The preempted job had no checkpoint: its 20 minutes are lost work.
  EXPECT_EQ(report.total().lost_gpu_seconds(), 3 * 20 * 60);

  // FOCUS CSV: the BilledCost column sums to the tenants' total.
  const std::string csv = ExportCsv(finance, req);
  ASSERT_FALSE(csv.empty());
  std::vector<std::string> lines =
      absl::StrSplit(csv, "\r\n", absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u);
  std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  const size_t billed =
      std::find(header.begin(), header.end(), "BilledCost") - header.begin();
  ASSERT_LT(billed, header.size());
  int64_t billed_sum = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> cells = absl::StrSplit(lines[i], ',');
    ASSERT_EQ(cells.size(), header.size()) << lines[i];
    // "12.345678" → micros, exactly.
    std::vector<std::string> parts = absl::StrSplit(cells[billed], '.');
    int64_t whole = 0, frac = 0;
    ASSERT_TRUE(absl::SimpleAtoi(parts[0], &whole));
    std::string digits = parts.size() > 1 ? parts[1] : "";
    digits.resize(6, '0');
    ASSERT_TRUE(absl::SimpleAtoi(digits, &frac));
    billed_sum += whole * 1'000'000 + frac;
  }
  EXPECT_EQ(billed_sum, report.total().tenant_cost().micros());

  // Bad windows and zones are refused, naming the field.
  v1::GetReportRequest bad = req;
  *bad.mutable_end_time() = Ts(nov1);
  auto b1 = ApiHarness::Context(finance);
  EXPECT_EQ(stub_->GetReport(b1.get(), bad, &report).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorInfoOf(*b1).field(), "end_time");
  bad = req;
  bad.set_time_zone("Asia/Kolkata");
  auto b2 = ApiHarness::Context(finance);
  EXPECT_EQ(stub_->GetReport(b2.get(), bad, &report).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorInfoOf(*b2).field(), "time_zone");
  bad = req;
  bad.add_group_by(v1::REPORT_DIMENSION_RESOURCE);
  auto b3 = ApiHarness::Context(finance);
  EXPECT_EQ(stub_->GetReport(b3.get(), bad, &report).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorInfoOf(*b3).field(), "group_by[2]");
  // A member of the tenant reads no report.
  const std::string member =
      harness_->Token("users/mem", v1::ROLE_MEMBER, "acme");
  auto b4 = ApiHarness::Context(member);
  EXPECT_EQ(stub_->GetReport(b4.get(), req, &report).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

// GetInvoice: the month's lines by project, flavor and resource add up to
// its total, which is the tenant cost of GetReport over the month and of an
// independent sum of the ledger's lines (ListUsage); a job that runs into
// December counts its November hours only; lost work split 30/70 shows the
// platform's part apart; refusals name the field; roles as GetReport's.
TEST_F(AccountingTest, InvoiceAddsUpToTheLedgerAndTheReport) {
  const int64_t nov1 = Ms(2026, 11, 1, 0);
  const int64_t dec1 = Ms(2026, 12, 1, 0);
  AddFlatRates(nov1);
  if (HasFatalFailure()) return;
  JobWithAttempt(1, Ms(2026, 11, 10, 10), Ms(2026, 11, 10, 11));
  JobWithAttempt(2, Ms(2026, 11, 10, 23), Ms(2026, 11, 11, 1));
  JobWithAttempt(3, Ms(2026, 11, 11, 5), Ms(2026, 11, 11, 5, 20),
                 v1::FAILURE_CLASS_PREEMPTION);
  JobWithAttempt(1, Ms(2026, 11, 30, 23), Ms(2026, 12, 1, 1));
  pricing::MeterOptions split;
  split.lost_work_rule = pricing::LostWorkRule::kSplit;
  split.split_tenant_percent = 30;
  std::unique_ptr<MeterService> meter = NewMeter(split);
  ASSERT_NE(meter, nullptr);
  ASSERT_TRUE(meter->RunPass(absl::FromUnixMillis(Ms(2026, 12, 2, 0))).ok());

  // The ledger's lines of November (by charge period), summed here.
  int64_t billed = 0, platform = 0, december = 0;
  for (const v1::UsageRecord& r : Usage()) {
    const int64_t period = r.charge_period_start().seconds() * 1000;
    if (period >= nov1 && period < dec1) {
      billed += r.tenant_cost().micros();
      platform += r.platform_cost().micros();
    } else {
      december += r.tenant_cost().micros();
    }
  }
  ASSERT_GT(billed, 0);
  ASSERT_GT(platform, 0);
  ASSERT_GT(december, 0);

  const std::string finance =
      harness_->Token("users/fin", v1::ROLE_FINANCE, "acme");
  v1::GetInvoiceRequest req;
  req.set_name("tenants/acme/invoices/2026-11");
  v1::Invoice inv;
  auto ctx = ApiHarness::Context(finance);
  grpc::Status s = stub_->GetInvoice(ctx.get(), req, &inv);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(inv.name(), "tenants/acme/invoices/2026-11");
  EXPECT_EQ(inv.tenant(), "acme");
  EXPECT_EQ(inv.month(), "2026-11");
  EXPECT_EQ(inv.invoice_number(), "INV-acme-202611");
  EXPECT_EQ(inv.currency(), "USD");
  EXPECT_EQ(inv.billing_period_start().seconds() * 1000, nov1);
  EXPECT_EQ(inv.billing_period_end().seconds() * 1000, dec1);
  // November closes 5 days after it ends (the harness's default).
  const bool closed =
      absl::Now() >= absl::FromUnixMillis(dec1) + absl::Hours(5 * 24);
  EXPECT_EQ(inv.status(),
            closed ? v1::INVOICE_STATUS_FINAL : v1::INVOICE_STATUS_DRAFT);

  // The lines add up to the total, to the micro; the total is the ledger's.
  int64_t lines = 0, lines_platform = 0;
  for (const v1::InvoiceLine& l : inv.lines()) {
    lines += l.cost().micros();
    lines_platform += l.platform_cost().micros();
    EXPECT_EQ(l.cost().currency_code(), "USD");
  }
  EXPECT_EQ(lines, inv.total().micros());
  EXPECT_EQ(lines_platform, inv.platform_cost().micros());
  EXPECT_EQ(inv.total().micros(), billed);
  EXPECT_EQ(inv.platform_cost().micros(), platform);

  // GPU: 1 + 2 × 2 + 3 × 1/3 + 1 (of the last job's 2 h) = 7 GPU-hours at
  // $2 = $14, of which $2 lost work (3 GPUs × 20 min, no checkpoint): the
  // tenant pays 30 % of it.
  ASSERT_EQ(inv.lines_size(), 3);  // project "default", flavor "gpu"
  const v1::InvoiceLine& gpu = inv.lines(1);
  EXPECT_EQ(gpu.project(), "default");
  EXPECT_EQ(gpu.sku(), "gpu/GPU");
  EXPECT_EQ(gpu.resource(), v1::RESOURCE_NAME_GPU);
  EXPECT_EQ(gpu.quantity(), "7");
  EXPECT_EQ(gpu.unit(), "GPU-Hours");
  EXPECT_EQ(gpu.quantity_seconds(), "25200");
  EXPECT_EQ(gpu.cost().micros(), 12'600'000);
  EXPECT_EQ(gpu.platform_cost().micros(), 1'400'000);
  EXPECT_EQ(gpu.lost_work_cost().micros(), 2'000'000);
  EXPECT_EQ(gpu.list_cost().micros(), 14'000'000);
  EXPECT_EQ(inv.lines(0).unit(), "Core-Hours");
  EXPECT_EQ(inv.lines(2).unit(), "GiB-Hours");

  // GetReport over the month: the same tenant cost.
  v1::GetReportRequest rq;
  rq.set_parent("tenants/acme");
  *rq.mutable_start_time() = Ts(nov1);
  *rq.mutable_end_time() = Ts(dec1);
  v1::Report report;
  auto rctx = ApiHarness::Context(finance);
  ASSERT_TRUE(stub_->GetReport(rctx.get(), rq, &report).ok());
  EXPECT_EQ(report.total().tenant_cost().micros(), inv.total().micros());

  // A closed month with no usage: final, empty, zero.
  req.set_name("tenants/acme/invoices/2026-09");
  auto c2 = ApiHarness::Context(harness_->admin_token());
  ASSERT_TRUE(stub_->GetInvoice(c2.get(), req, &inv).ok());
  EXPECT_EQ(inv.status(), v1::INVOICE_STATUS_FINAL);
  EXPECT_EQ(inv.lines_size(), 0);
  EXPECT_EQ(inv.total().micros(), 0);

  // Refusals name the field.
  for (const char* bad :
       {"tenants/acme/invoices/2026-13", "tenants/acme/invoices/2099-01",
        "tenants/acme/invoices/26-11", "tenants/acme/2026-11"}) {
    req.set_name(bad);
    auto b = ApiHarness::Context(finance);
    EXPECT_EQ(stub_->GetInvoice(b.get(), req, &inv).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
    EXPECT_EQ(ErrorInfoOf(*b).field(), "name") << bad;
  }
  // An unknown tenant, to a platform admin and to platform finance.
  req.set_name("tenants/nobody/invoices/2026-11");
  auto b1 = ApiHarness::Context(harness_->admin_token());
  EXPECT_EQ(stub_->GetInvoice(b1.get(), req, &inv).error_code(),
            grpc::StatusCode::NOT_FOUND);
  const std::string platform_finance =
      harness_->Token("users/pf", v1::ROLE_FINANCE, "");
  auto b2 = ApiHarness::Context(platform_finance);
  EXPECT_EQ(stub_->GetInvoice(b2.get(), req, &inv).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Platform finance reads acme's; a member of acme does not.
  req.set_name("tenants/acme/invoices/2026-11");
  auto b3 = ApiHarness::Context(platform_finance);
  EXPECT_TRUE(stub_->GetInvoice(b3.get(), req, &inv).ok());
  EXPECT_EQ(inv.total().micros(), billed);
  const std::string member =
      harness_->Token("users/mem", v1::ROLE_MEMBER, "acme");
  auto b4 = ApiHarness::Context(member);
  EXPECT_EQ(stub_->GetInvoice(b4.get(), req, &inv).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace trainyard::testing

namespace trainyard::testing {
namespace {

// Budgets over the real ledger: CRUD with its refusals, the meter's status
// (spent from the ledger, the forecast with running work until its time
// limit), each threshold notified once (an event on the tenant's Watch
// stream and the webhook's JSON), an edit re-arming the thresholds it no
// longer reaches.
// --- Idle cost ---

// Half-even rounding of n / d (d > 0), in 128 bits: the test's own.
int64_t RoundHalfEven(__int128 n, __int128 d) {
  __int128 q = n / d;
  const __int128 r = n % d;
  if (2 * r > d || (2 * r == d && q % 2 != 0)) ++q;
  return static_cast<int64_t>(q);
}

class IdleTest : public AccountingTest {
 protected:
  static constexpr int64_t kGpuHour = 2'000'000;  // $2 per GPU-hour
  static constexpr int64_t kCoreHour = 40'000;    // $0.04 per core-hour
  static constexpr int64_t kGibHour = 5'000;      // $0.005 per GiB-hour
  static constexpr int64_t kGib = int64_t{1} << 30;

  void SetUp() override {
    AccountingTest::SetUp();
    ASSERT_TRUE(harness_->SeedTenant("bolt").ok());
    auto c = harness_->clusters();
    v1::CreateFlavorRequest flavor;
    flavor.set_flavor_id("idle");
    flavor.mutable_flavor()->set_kind(v1::FLAVOR_KIND_ON_DEMAND);
    flavor.mutable_flavor()->set_gpu_model("A100");
    v1::Flavor made;
    ASSERT_TRUE(
        c->CreateFlavor(ApiHarness::Context(harness_->admin_token()).get(),
                        flavor, &made)
            .ok());
    v1::CreatePoolRequest pool;
    pool.set_parent("clusters/sim");
    pool.set_pool_id("idle");
    pool.mutable_pool()->set_flavor("idle");
    v1::Pool pool_out;
    ASSERT_TRUE(
        c->CreatePool(ApiHarness::Context(harness_->admin_token()).get(), pool,
                      &pool_out)
            .ok());
    for (auto [r, micros] : {std::pair{v1::RESOURCE_NAME_GPU, kGpuHour},
                             std::pair{v1::RESOURCE_NAME_CPU, kCoreHour},
                             std::pair{v1::RESOURCE_NAME_MEMORY, kGibHour}}) {
      ASSERT_TRUE(AddRate(harness_->admin_token(), "idle", r, micros,
                          Ms(2026, 11, 1, 0))
                      .ok());
    }
  }

  // Writes a node of pool "idle" as if at `at_ms` (the trigger's clock is
  // the session setting): `gpus` GPUs, 8 cores and 64 GiB per GPU; `gpus` <
  // 0 deletes it. `state` changes only its state.
  void NodeAt(int64_t at_ms, const std::string& id, int gpus,
              v1::NodeState state = v1::NODE_STATE_READY) {
    v1::Node node;
    node.set_name(absl::StrCat("clusters/sim/nodes/", id));
    node.set_pool("idle");
    node.set_state(state);
    node.mutable_capacity()->set_gpus(std::max(gpus, 0));
    node.mutable_capacity()->set_gpu_model("A100");
    node.mutable_capacity()->set_cpu_millis(int64_t{8000} * std::max(gpus, 0));
    node.mutable_capacity()->set_memory_bytes(64 * kGib * std::max(gpus, 0));
    std::string body;
    node.SerializeToString(&body);
    absl::Status s = db_->Transact([&](pqxx::work& txn) {
      txn.exec(absl::StrCat("SET LOCAL trainyard.capacity_change_ms = '", at_ms,
                            "'"));
      if (gpus < 0) {
        txn.exec_params("DELETE FROM nodes WHERE cluster = 'sim' AND id = $1",
                        id);
      } else {
        txn.exec_params(
            "INSERT INTO nodes (cluster, id, pool, state, body) VALUES "
            "('sim', $1, 'idle', $2, $3) ON CONFLICT (cluster, id) DO UPDATE "
            "SET state = EXCLUDED.state, body = EXCLUDED.body",
            id, static_cast<int>(state), pqxx::binarystring(body));
      }
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
  }

  // A job of `tenant` with `gpus` GPUs (4 cores, 16 GiB) and its attempt on
  // flavor "idle".
  void IdleJob(const std::string& tenant, int gpus, int64_t start_ms,
               int64_t end_ms) {
    v1::SubmitJobRequest req =
        MinimalSubmit(tenant, absl::StrCat("idle-job-", ++jobs_));
    req.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(gpus);
    const int64_t id = harness_->SubmitJob(harness_->admin_token(), req);
    RecordAttempt(id, start_ms, end_ms, v1::FAILURE_CLASS_UNSPECIFIED, "idle");
  }

  // The stored idle lines and shares, as text (to compare passes).
  std::string IdleTables() {
    std::string out;
    absl::Status s = db_->Transact([&](pqxx::work& txn) {
      for (const pqxx::row& r :
           txn.exec("SELECT l.*, coalesce((SELECT string_agg(tenant || '=' || "
                    "micros, ',' ORDER BY tenant) FROM idle_shares s WHERE "
                    "s.period_start_ms = l.period_start_ms AND s.flavor = "
                    "l.flavor), '') FROM idle_lines l ORDER BY 1, 2")) {
        for (const pqxx::field& f : r) absl::StrAppend(&out, f.c_str(), " ");
        out += "\n";
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // Every idle line of flavor "idle" equals an independent computation from
  // the capacity the test wrote (`held`: start, end, gpus; cores and GiB in
  // proportion), the book's flat rates, the commitment of `committed_hour`
  // ($10 for that hour) and the ledger's own lines; the shares sum to the
  // idle cost, each the exact proportional share rounded down or up.
  void ExpectIdleLines(
      const std::vector<std::tuple<int64_t, int64_t, int>>& held,
      const std::vector<int64_t>& hours, int64_t committed_hour) {
    storage::postgres::AccountingStore store(db_.get());
    auto lines = store.LoadIdleLines(hours.front(), hours.back() + 3'600'000);
    ASSERT_TRUE(lines.ok()) << lines.status();
    ASSERT_EQ(lines->size(), hours.size());
    auto shares =
        store.LoadIdleShares(hours.front(), hours.back() + 3'600'000, "idle");
    ASSERT_TRUE(shares.ok()) << shares.status();
    for (size_t i = 0; i < hours.size(); ++i) {
      const int64_t h = hours[i];
      const pricing::IdleLine& line = (*lines)[i];
      SCOPED_TRACE(absl::StrCat("hour ", h));
      EXPECT_EQ(line.pool, "idle");
      EXPECT_EQ(line.period_start, h);
      int64_t paid = 0;
      if (h == committed_hour) {
        paid = 10'000'000;
      } else {
        for (const auto& [from, to, gpus] : held) {
          const __int128 ms = std::max<int64_t>(
              0, std::min(to, h + 3'600'000) - std::max(from, h));
          if (ms == 0) continue;
          paid += RoundHalfEven(ms * gpus * kGpuHour, 3'600'000);
          paid += RoundHalfEven(ms * (8000 * gpus) * kCoreHour,
                                __int128{3'600'000} * 1000);
          paid += RoundHalfEven(ms * (64 * kGib * gpus) * kGibHour,
                                __int128{3'600'000} * kGib);
        }
      }
      std::map<std::string, int64_t> by_tenant;
      int64_t allocated = 0;
      absl::Status s = db_->Transact([&](pqxx::work& txn) {
        for (const pqxx::row& r : txn.exec_params(
                 "SELECT tenant, sum(cost_micros) FROM usage_lines WHERE "
                 "flavor = 'idle' AND period_start_ms = $1 GROUP BY tenant",
                 h)) {
          by_tenant[r[0].as<std::string>()] = r[1].as<int64_t>();
          allocated += r[1].as<int64_t>();
        }
        return absl::OkStatus();
      });
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(line.paid_micros, paid);
      EXPECT_EQ(line.allocated_micros, allocated);
      EXPECT_EQ(line.idle_micros, paid - allocated);
      EXPECT_EQ(line.allocated_micros + line.idle_micros, line.paid_micros);
      EXPECT_EQ(line.reserved, h == committed_hour);
      int64_t shared = 0;
      int count = 0;
      for (const auto& share : *shares) {
        if (share.period_start != h) continue;
        ++count;
        shared += share.micros;
        ASSERT_TRUE(by_tenant.contains(share.tenant)) << share.tenant;
        // floor or ceil of idle × tenant's allocated / allocated.
        const __int128 exact =
            static_cast<__int128>(line.idle_micros) * by_tenant[share.tenant];
        const __int128 scaled = static_cast<__int128>(share.micros) * allocated;
        EXPECT_LT(scaled > exact ? scaled - exact : exact - scaled, allocated)
            << share.tenant;
      }
      EXPECT_EQ(count, static_cast<int>(by_tenant.size()));
      if (allocated > 0) {
        EXPECT_EQ(shared, line.idle_micros);
      }
    }
  }
};

TEST_F(IdleTest, IdleLinesAddUpToWhatThePoolsPaidEveryHour) {
  // The nodes of pool "idle" on 2026-11-03 (8 cores and 64 GiB per GPU).
  const int64_t h9 = Ms(2026, 11, 3, 9);
  NodeAt(h9, "i1", 8);
  NodeAt(Ms(2026, 11, 3, 10, 20), "i2", 4);
  NodeAt(Ms(2026, 11, 3, 11, 45), "i1", 6);                           // resized
  NodeAt(Ms(2026, 11, 3, 11, 50), "i1", 6, v1::NODE_STATE_DRAINING);  // held
  NodeAt(Ms(2026, 11, 3, 12, 30), "i2", -1);                          // removed
  // The capacity history, exactly.
  storage::postgres::AccountingStore store(db_.get());
  auto history = store.CapacityHistory("idle");
  ASSERT_TRUE(history.ok()) << history.status();
  struct Want {
    int64_t start;
    std::optional<int64_t> end;
    int nodes;
    int64_t gpus;
  };
  const std::vector<Want> want = {
      {h9, Ms(2026, 11, 3, 10, 20), 1, 8},
      {Ms(2026, 11, 3, 10, 20), Ms(2026, 11, 3, 11, 45), 2, 12},
      {Ms(2026, 11, 3, 11, 45), Ms(2026, 11, 3, 12, 30), 2, 10},
      {Ms(2026, 11, 3, 12, 30), std::nullopt, 1, 6}};
  ASSERT_EQ(history->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& got = (*history)[i];
    EXPECT_EQ(got.start_ms, want[i].start) << i;
    EXPECT_EQ(got.end_ms, want[i].end) << i;
    EXPECT_EQ(got.nodes, want[i].nodes) << i;
    EXPECT_EQ(got.gpus, want[i].gpus) << i;
    EXPECT_EQ(got.cpu_millis, 8000 * want[i].gpus) << i;
    EXPECT_EQ(got.memory_bytes, 64 * kGib * want[i].gpus) << i;
  }
  // The nodes the harness reported through ReportNodes (4 × 8 GPUs, 64
  // cores, 512 GiB; one write each, so up to four intervals that tile time)
  // are held by flavor "gpu" since then.
  auto gpu = store.CapacityHistory("gpu");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_FALSE(gpu->empty());
  ASSERT_LE(gpu->size(), 4u);
  for (size_t i = 0; i < gpu->size(); ++i) {
    const auto& c = (*gpu)[i];
    EXPECT_EQ(c.gpus, 8 * c.nodes) << i;
    EXPECT_EQ(c.cpu_millis, 64000 * c.nodes) << i;
    EXPECT_EQ(c.memory_bytes, 512 * kGib * c.nodes) << i;
    if (i + 1 < gpu->size()) {
      EXPECT_EQ(c.end_ms, (*gpu)[i + 1].start_ms) << i;
      EXPECT_LT(c.nodes, (*gpu)[i + 1].nodes) << i;
    }
  }
  EXPECT_FALSE(gpu->back().end_ms.has_value());
  EXPECT_EQ(gpu->back().nodes, 4);

  // $10 committed for 13:00-14:00: that hour is paid by the commitment.
  const int64_t h13 = Ms(2026, 11, 3, 13);
  v1::AddCommitmentRequest commit;
  commit.mutable_commitment()->set_flavor("idle");
  commit.mutable_commitment()->mutable_amount()->set_currency_code("USD");
  commit.mutable_commitment()->mutable_amount()->set_micros(10'000'000);
  *commit.mutable_commitment()->mutable_start_time() = Ts(h13);
  *commit.mutable_commitment()->mutable_end_time() = Ts(h13 + 3'600'000);
  v1::Commitment commit_out;
  ASSERT_TRUE(
      stub_
          ->AddCommitment(ApiHarness::Context(harness_->admin_token()).get(),
                          commit, &commit_out)
          .ok());

  IdleJob("acme", 2, Ms(2026, 11, 3, 9, 30), Ms(2026, 11, 3, 11, 10));
  IdleJob("bolt", 1, Ms(2026, 11, 3, 10, 0), Ms(2026, 11, 3, 12, 40));
  IdleJob("acme", 4, Ms(2026, 11, 3, 13, 10), Ms(2026, 11, 3, 13, 40));
  IdleJob("bolt", 3, Ms(2026, 11, 3, 13, 7), Ms(2026, 11, 3, 13, 29));

  auto meter = NewMeter();
  ASSERT_NE(meter, nullptr);
  const absl::Time at = absl::FromUnixMillis(Ms(2026, 11, 3, 14, 5));
  auto pass = meter->RunPass(at);
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->idle_lines, 5);  // hours 9 to 13 of "idle"; "gpu" held none
  const std::vector<std::tuple<int64_t, int64_t, int>> held = {
      {h9, Ms(2026, 11, 3, 10, 20), 8},
      {Ms(2026, 11, 3, 10, 20), Ms(2026, 11, 3, 11, 45), 12},
      {Ms(2026, 11, 3, 11, 45), Ms(2026, 11, 3, 12, 30), 10},
      {Ms(2026, 11, 3, 12, 30), Ms(2026, 11, 3, 15), 6}};
  std::vector<int64_t> hours;
  for (int h = 9; h <= 13; ++h) hours.push_back(Ms(2026, 11, 3, h));
  ExpectIdleLines(held, hours, h13);

  // Another pass changes nothing.
  const std::string before = IdleTables();
  pass = meter->RunPass(at);
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->idle_hours, 0);
  EXPECT_EQ(IdleTables(), before);

  // A line recorded late for a computed hour: that hour alone is computed
  // again.
  IdleJob("bolt", 2, Ms(2026, 11, 3, 10, 5), Ms(2026, 11, 3, 10, 35));
  pass = meter->RunPass(at);
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->idle_hours, 1);
  EXPECT_NE(IdleTables(), before);
  ExpectIdleLines(held, hours, h13);

  // An hour that closes later: computed by the next pass.
  pass = meter->RunPass(absl::FromUnixMillis(Ms(2026, 11, 3, 15, 1)));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->idle_hours, 1);
  hours.push_back(Ms(2026, 11, 3, 14));
  ExpectIdleLines(held, hours, h13);

  // Reports: with the idle cost, the total is what the pool paid.
  auto paid = store.LoadIdleLines(h9, h9 + 6 * 3'600'000, "idle");
  auto shares = store.LoadIdleShares(h9, h9 + 6 * 3'600'000, "idle");
  ASSERT_TRUE(paid.ok() && shares.ok());
  int64_t total_paid = 0, total_idle = 0;
  for (const auto& line : *paid) {
    total_paid += line.paid_micros;
    total_idle += line.idle_micros;
  }
  std::map<std::string, int64_t> share_of;
  for (const auto& share : *shares) share_of[share.tenant] += share.micros;
  std::map<std::string, int64_t> billed;  // lines' tenant cost by tenant
  absl::Status read = db_->Transact([&](pqxx::work& txn) {
    for (const pqxx::row& r : txn.exec(
             "SELECT tenant, sum(tenant_cost_micros) FROM usage_lines WHERE "
             "flavor = 'idle' GROUP BY tenant")) {
      billed[r[0].as<std::string>()] = r[1].as<int64_t>();
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(read.ok()) << read;
  v1::GetReportRequest req;
  req.set_parent("tenants/-");
  *req.mutable_start_time() = Ts(h9);
  *req.mutable_end_time() = Ts(h9 + 6 * 3'600'000);
  req.set_flavor("idle");
  req.add_group_by(v1::REPORT_DIMENSION_TENANT);
  req.add_group_by(v1::REPORT_DIMENSION_FLAVOR);
  auto report = [&](const v1::GetReportRequest& r, const std::string& token,
                    v1::ErrorInfo* info = nullptr) {
    v1::Report out;
    auto ctx = ApiHarness::Context(token);
    grpc::Status s = stub_->GetReport(ctx.get(), r, &out);
    if (info != nullptr) {
      *info = ErrorInfoOf(*ctx);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    } else {
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    return out;
  };
  const std::string admin = harness_->admin_token();
  v1::Report plain = report(req, admin);
  req.set_include_idle(true);
  v1::Report with_idle = report(req, admin);
  EXPECT_EQ(with_idle.total().cost().micros(),
            plain.total().cost().micros() + total_idle);
  EXPECT_EQ(with_idle.total().cost().micros(), total_paid);
  EXPECT_EQ(with_idle.total().idle_cost().micros(), total_idle);
  EXPECT_EQ(with_idle.rows_size(), plain.rows_size() + 1);
  for (const v1::ReportRow& row : with_idle.rows()) {
    if (row.keys(0) != "__idle__") continue;
    EXPECT_EQ(row.keys(1), "idle");
    EXPECT_EQ(row.cost().micros(), total_idle);
    EXPECT_EQ(row.platform_cost().micros(), total_idle);
    EXPECT_EQ(row.tenant_cost().micros(), 0);
  }
  req.set_share_idle(true);
  v1::Report shared = report(req, admin);
  EXPECT_EQ(shared.total().cost().micros(), total_paid);
  int64_t rows = 0;
  for (const v1::ReportRow& row : shared.rows()) {
    rows += row.cost().micros();
    if (row.keys(0) == "__idle__") {
      // Hour 14: nobody used the pool.
      EXPECT_EQ(row.cost().micros(), paid->back().idle_micros);
      continue;
    }
    EXPECT_EQ(row.idle_cost().micros(), share_of[row.keys(0)]) << row.keys(0);
    EXPECT_EQ(row.tenant_cost().micros(),
              billed[row.keys(0)] + share_of[row.keys(0)])
        << row.keys(0);
  }
  EXPECT_EQ(rows, total_paid);
  // A tenant's finance sees its share, and cannot ask for the idle cost.
  const std::string finance =
      harness_->Token("users/fin", v1::ROLE_FINANCE, "bolt");
  req.set_parent("tenants/bolt");
  v1::Report bolt = report(req, finance);
  ASSERT_EQ(bolt.rows_size(), 1);
  EXPECT_EQ(bolt.rows(0).idle_cost().micros(), share_of["bolt"]);
  req.set_share_idle(false);
  v1::ErrorInfo info;
  report(req, finance, &info);
  EXPECT_EQ(info.field(), "include_idle");
  // Shares cannot be grouped by user: refused, not ignored.
  req.set_parent("tenants/-");
  req.set_share_idle(true);
  req.add_group_by(v1::REPORT_DIMENSION_USER);
  report(req, admin, &info);
  EXPECT_EQ(info.field(), "share_idle");

  // FOCUS CSV: the idle row, its x_IdleCost, its cost the platform's.
  req.clear_group_by();
  req.add_group_by(v1::REPORT_DIMENSION_TENANT);
  req.set_share_idle(false);
  const std::string csv = ExportCsv(admin, req);
  EXPECT_NE(csv.find(",x_IdleCost\r\n"), std::string::npos) << csv;
  const std::string idle_text = pricing::MicrosToDecimal(total_idle);
  EXPECT_NE(csv.find(absl::StrCat("\r\n__idle__,")), std::string::npos) << csv;
  EXPECT_NE(
      csv.find(absl::StrCat(",", idle_text, ",false,0,", idle_text, "\r\n")),
      std::string::npos)
      << csv;
}

class BudgetTest : public AccountingTest {
 protected:
  grpc::Status CreateBudget(const std::string& token, const std::string& id,
                            const v1::Budget& budget, v1::Budget* out,
                            v1::ErrorInfo* info = nullptr) {
    v1::CreateBudgetRequest req;
    req.set_parent("tenants/acme");
    req.set_budget_id(id);
    *req.mutable_budget() = budget;
    auto ctx = ApiHarness::Context(token);
    grpc::Status s = stub_->CreateBudget(ctx.get(), req, out);
    if (info != nullptr) *info = ErrorInfoOf(*ctx);
    return s;
  }

  v1::Budget GetBudget(const std::string& name) {
    v1::GetBudgetRequest req;
    req.set_name(name);
    v1::Budget out;
    auto ctx = ApiHarness::Context(harness_->admin_token());
    grpc::Status s = stub_->GetBudget(ctx.get(), req, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }

  // The budget events in the outbox, oldest first.
  std::vector<v1::JobEvent> BudgetEvents() {
    std::vector<v1::JobEvent> out;
    absl::Status s = db_->Transact([&](pqxx::work& txn) {
      for (const pqxx::row& r : txn.exec(
               "SELECT body FROM job_events WHERE job_id = 0 ORDER BY seq")) {
        pqxx::binarystring bytes(r[0]);
        v1::JobEvent e;
        EXPECT_TRUE(e.ParseFromString(bytes.str()));
        out.push_back(e);
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  static v1::Budget Budget(int64_t amount_micros) {
    v1::Budget b;
    b.mutable_monthly_amount()->set_micros(amount_micros);
    b.mutable_monthly_amount()->set_currency_code("USD");
    for (auto [percent, action] :
         {std::pair{50, v1::BUDGET_ACTION_WARN},
          std::pair{80, v1::BUDGET_ACTION_RESTRICT_TO_SPOT},
          std::pair{100, v1::BUDGET_ACTION_HOLD}}) {
      v1::BudgetThreshold* t = b.add_thresholds();
      t->set_percent(percent);
      t->set_action(action);
    }
    return b;
  }
};

TEST_F(BudgetTest, RefusesBadBudgetsNamingTheField) {
  v1::Budget out;
  v1::ErrorInfo info;
  v1::Budget bad = Budget(100'000'000);
  bad.mutable_thresholds(1)->set_percent(50);
  grpc::Status s =
      CreateBudget(harness_->admin_token(), "team", bad, &out, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "budget.thresholds[1].percent");
  bad = Budget(-1);
  s = CreateBudget(harness_->admin_token(), "team", bad, &out, &info);
  EXPECT_EQ(info.field(), "budget.monthly_amount.micros");
  bad = Budget(100);
  bad.set_project("no-such-project");
  s = CreateBudget(harness_->admin_token(), "team", bad, &out, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "budget.project");
  bad = Budget(100);
  bad.mutable_monthly_amount()->set_currency_code("EUR");
  s = CreateBudget(harness_->admin_token(), "team", bad, &out, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "budget.monthly_amount.currency_code");
  // Members may not set budgets; finance may.
  const std::string member =
      harness_->Token("users/m", v1::ROLE_MEMBER, "acme");
  s = CreateBudget(member, "team", Budget(100), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  const std::string finance =
      harness_->Token("users/f", v1::ROLE_FINANCE, "acme");
  ASSERT_TRUE(CreateBudget(finance, "team", Budget(100), &out).ok());
  EXPECT_EQ(out.name(), "tenants/acme/budgets/team");
  // One budget per scope.
  s = CreateBudget(finance, "other", Budget(200), &out, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "budget.project");
  EXPECT_EQ(info.reason(), "BUDGET_EXISTS");
  // A project's budget beside the tenant's is fine.
  v1::Budget project = Budget(50);
  project.set_project("default");
  EXPECT_TRUE(CreateBudget(finance, "default-project", project, &out).ok());
  // A member cannot read them.
  v1::ListBudgetsRequest list;
  list.set_parent("tenants/acme");
  v1::ListBudgetsResponse page;
  auto ctx = ApiHarness::Context(member);
  EXPECT_EQ(stub_->ListBudgets(ctx.get(), list, &page).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  auto fctx = ApiHarness::Context(finance);
  ASSERT_TRUE(stub_->ListBudgets(fctx.get(), list, &page).ok());
  EXPECT_EQ(page.budgets_size(), 2);
}

// The user hourly cap: refused negative or in another currency (naming the
// field), stored with the budget, returned, changed alone by an update mask
// that names it and kept by one that does not.
TEST_F(BudgetTest, UserHourlyCapIsValidatedStoredAndUpdatable) {
  v1::Budget out;
  v1::ErrorInfo info;
  v1::Budget bad = Budget(100'000'000);
  bad.mutable_user_hourly_cap()->set_micros(-1);
  grpc::Status s =
      CreateBudget(harness_->admin_token(), "team", bad, &out, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "budget.user_hourly_cap.micros");
  bad = Budget(100'000'000);
  bad.mutable_user_hourly_cap()->set_micros(10'000'000);
  bad.mutable_user_hourly_cap()->set_currency_code("EUR");
  s = CreateBudget(harness_->admin_token(), "team", bad, &out, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "budget.user_hourly_cap.currency_code");
  // Without the amount's currency, against the price book's.
  bad.mutable_monthly_amount()->clear_currency_code();
  s = CreateBudget(harness_->admin_token(), "team", bad, &out, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "budget.user_hourly_cap.currency_code");

  v1::Budget good = Budget(100'000'000);
  good.mutable_user_hourly_cap()->set_micros(10'000'000);
  good.mutable_user_hourly_cap()->set_currency_code("USD");
  ASSERT_TRUE(CreateBudget(harness_->admin_token(), "team", good, &out).ok());
  EXPECT_EQ(out.user_hourly_cap().micros(), 10'000'000);
  EXPECT_EQ(GetBudget("tenants/acme/budgets/team").user_hourly_cap().micros(),
            10'000'000);

  // Raised alone.
  v1::UpdateBudgetRequest update;
  update.mutable_budget()->set_name("tenants/acme/budgets/team");
  update.mutable_budget()->mutable_user_hourly_cap()->set_micros(25'000'000);
  update.mutable_update_mask()->add_paths("user_hourly_cap");
  v1::Budget updated;
  {
    auto ctx = ApiHarness::Context(harness_->admin_token());
    grpc::Status st = stub_->UpdateBudget(ctx.get(), update, &updated);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  v1::Budget got = GetBudget("tenants/acme/budgets/team");
  EXPECT_EQ(got.user_hourly_cap().micros(), 25'000'000);
  EXPECT_EQ(got.monthly_amount().micros(), 100'000'000);
  EXPECT_EQ(got.thresholds_size(), 3);
  // An update of the amount alone keeps the cap.
  update.mutable_budget()->clear_user_hourly_cap();
  update.mutable_budget()->mutable_monthly_amount()->set_micros(200'000'000);
  update.mutable_update_mask()->Clear();
  update.mutable_update_mask()->add_paths("monthly_amount");
  {
    auto ctx = ApiHarness::Context(harness_->admin_token());
    grpc::Status st = stub_->UpdateBudget(ctx.get(), update, &updated);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  got = GetBudget("tenants/acme/budgets/team");
  EXPECT_EQ(got.user_hourly_cap().micros(), 25'000'000);
  EXPECT_EQ(got.monthly_amount().micros(), 200'000'000);
  // A negative cap by update is refused and changes nothing.
  update.mutable_budget()->mutable_user_hourly_cap()->set_micros(-5);
  update.mutable_update_mask()->Clear();
  update.mutable_update_mask()->add_paths("user_hourly_cap");
  {
    auto ctx = ApiHarness::Context(harness_->admin_token());
    EXPECT_EQ(stub_->UpdateBudget(ctx.get(), update, &updated).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(ErrorInfoOf(*ctx).field(), "budget.user_hourly_cap.micros");
  }
  EXPECT_EQ(GetBudget("tenants/acme/budgets/team").user_hourly_cap().micros(),
            25'000'000);
  // Zero: no cap.
  update.mutable_budget()->mutable_user_hourly_cap()->set_micros(0);
  {
    auto ctx = ApiHarness::Context(harness_->admin_token());
    ASSERT_TRUE(stub_->UpdateBudget(ctx.get(), update, &updated).ok());
  }
  EXPECT_EQ(GetBudget("tenants/acme/budgets/team").user_hourly_cap().micros(),
            0);
}

TEST_F(BudgetTest, TheMeterForecastsAndNotifiesEachThresholdOnce) {
  const int64_t now = absl::ToUnixSeconds(absl::Now()) * 1000;
  const int64_t month = absl::ToUnixMillis(
      absl::FromCivil(absl::CivilMonth(absl::ToCivilSecond(
                          absl::FromUnixMillis(now), absl::UTCTimeZone())),
                      absl::UTCTimeZone()));
  if (now - month < 600'000) GTEST_SKIP() << "too close to a month's start";
  // $1 per GPU-second; CPU and memory free.
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_GPU,
                      3'600'000'000, month)
                  .ok());
  ASSERT_TRUE(
      AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_CPU, 0, month)
          .ok());
  ASSERT_TRUE(AddRate(harness_->admin_token(), "gpu", v1::RESOURCE_NAME_MEMORY,
                      0, month)
                  .ok());
  v1::Budget created;
  ASSERT_TRUE(CreateBudget(harness_->admin_token(), "team", Budget(100'000'000),
                           &created)
                  .ok());
  // Job a ran 30 s: $30. Job b runs since 20 s ago with a 40 s time limit:
  // $20 spent, $20 more expected.
  JobWithAttempt(1, now - 100'000, now - 70'000);
  v1::SubmitJobRequest req = MinimalSubmit("acme", "limited");
  req.mutable_job()->mutable_spec()->mutable_time_limit()->set_seconds(40);
  const int64_t b = harness_->SubmitJob(harness_->admin_token(), req);
  RecordAttempt(b, now - 20'000, std::nullopt, v1::FAILURE_CLASS_UNSPECIFIED);

  std::vector<std::string> sent;
  accounting::MeterServiceOptions options;
  options.postgres_url = harness_->database_url();
  options.notify = [&](const std::string& type, const std::string& json) {
    EXPECT_EQ(type, "budget.threshold_reached");
    sent.push_back(json);
  };
  auto meter = MeterService::Create(options);
  ASSERT_TRUE(meter.ok()) << meter.status();
  auto pass = (*meter)->RunPass(absl::FromUnixMillis(now));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->budgets, 1);
  EXPECT_EQ(pass->notices, 1);

  v1::Budget got = GetBudget("tenants/acme/budgets/team");
  EXPECT_EQ(got.spent().micros(), 50'000'000);
  EXPECT_EQ(got.forecast().micros(), 70'000'000);
  EXPECT_EQ(got.spent().currency_code(), "USD");
  EXPECT_EQ(got.active_action(), v1::BUDGET_ACTION_WARN);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(sent[0], ::testing::HasSubstr("\"threshold_percent\":50"));
  EXPECT_THAT(sent[0], ::testing::HasSubstr("\"forecast\":\"70.00\""));
  std::vector<v1::JobEvent> events = BudgetEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type(), v1::JOB_EVENT_TYPE_BUDGET_THRESHOLD);
  EXPECT_EQ(events[0].reason(), "BUDGET_WARN");
  EXPECT_EQ(events[0].budget(), "tenants/acme/budgets/team");
  EXPECT_EQ(events[0].tenant(), "acme");

  // The same pass again notifies nothing new.
  pass = (*meter)->RunPass(absl::FromUnixMillis(now));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->notices, 0);
  EXPECT_EQ(BudgetEvents().size(), 1u);

  // Lowered to $60: the forecast of $70 passes 80 % ($48) and 100 % ($60).
  v1::UpdateBudgetRequest update;
  update.mutable_budget()->set_name("tenants/acme/budgets/team");
  update.mutable_budget()->mutable_monthly_amount()->set_micros(60'000'000);
  update.mutable_budget()->mutable_monthly_amount()->set_currency_code("USD");
  update.mutable_update_mask()->add_paths("monthly_amount");
  v1::Budget updated;
  {
    auto ctx = ApiHarness::Context(harness_->admin_token());
    ASSERT_TRUE(stub_->UpdateBudget(ctx.get(), update, &updated).ok());
  }
  pass = (*meter)->RunPass(absl::FromUnixMillis(now));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->notices, 2);
  events = BudgetEvents();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].reason(), "BUDGET_RESTRICT_TO_SPOT");
  EXPECT_EQ(events[2].reason(), "BUDGET_HOLD");
  EXPECT_EQ(GetBudget("tenants/acme/budgets/team").active_action(),
            v1::BUDGET_ACTION_HOLD);

  // Raised to $1,000: nothing is reached; the thresholds are armed again.
  update.mutable_budget()->mutable_monthly_amount()->set_micros(1'000'000'000);
  {
    auto ctx = ApiHarness::Context(harness_->admin_token());
    ASSERT_TRUE(stub_->UpdateBudget(ctx.get(), update, &updated).ok());
  }
  pass = (*meter)->RunPass(absl::FromUnixMillis(now));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->notices, 0);
  got = GetBudget("tenants/acme/budgets/team");
  EXPECT_EQ(got.active_action(), v1::BUDGET_ACTION_UNSPECIFIED);
  EXPECT_EQ(got.forecast().micros(), 70'000'000);
}

}  // namespace
}  // namespace trainyard::testing
