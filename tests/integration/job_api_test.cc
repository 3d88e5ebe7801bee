// JobService against a real PostgreSQL and Redis: submission, idempotency,
// validation, rate limits, the outbox and Watch (including a Redis outage),
// checkpoints, explanations.

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/lib/runtime/job_token.h"
#include "tests/integration/api_test_harness.h"

namespace trainyard::testing {
namespace {

using trainyard::v1::Job;
using trainyard::v1::JobEvent;
using trainyard::v1::SubmitJobRequest;
using trainyard::v1::SubmitJobResponse;

class JobApiTest : public ::testing::Test {
 protected:
  void SetUp() override { Init(ApiHarness::Options()); }

  void Init(ApiHarness::Options options) {
    auto h = ApiHarness::Start(std::move(options));
    ASSERT_TRUE(h.ok()) << h.status();
    h_ = *std::move(h);
    ASSERT_TRUE(h_->SeedTenant("acme").ok());
    ASSERT_TRUE(h_->SeedTenant("other").ok());
    member_ = h_->Token("users/alice", trainyard::v1::ROLE_MEMBER, "acme");
    jobs_ = h_->jobs();
  }

  grpc::Status Submit(const SubmitJobRequest& req, SubmitJobResponse* resp,
                      trainyard::v1::ErrorInfo* info = nullptr) {
    auto ctx = ApiHarness::Context(member_);
    grpc::Status s = jobs_->Submit(ctx.get(), req, resp);
    if (info != nullptr) *info = ErrorInfoOf(*ctx);
    return s;
  }

  std::vector<Job> ListAll(const std::string& parent) {
    std::vector<Job> out;
    trainyard::v1::ListJobsRequest req;
    req.set_parent(parent);
    req.set_page_size(7);
    while (true) {
      trainyard::v1::ListJobsResponse resp;
      grpc::Status s =
          jobs_->List(ApiHarness::Context(member_).get(), req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      out.insert(out.end(), resp.jobs().begin(), resp.jobs().end());
      if (resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
    return out;
  }

  static int64_t JobIdOf(const Job& j) {
    return std::stoll(j.name().substr(j.name().rfind('/') + 1));
  }

  std::unique_ptr<ApiHarness> h_;
  std::string member_;
  std::unique_ptr<trainyard::v1::JobService::Stub> jobs_;
};

TEST_F(JobApiTest, SubmitGetListCancel) {
  SubmitJobResponse resp;
  SubmitJobRequest req = MinimalSubmit("acme", "req-1");
  (*req.mutable_job()->mutable_labels())["team"] = "nlp";
  req.mutable_job()->set_display_name("first");
  ASSERT_TRUE(Submit(req, &resp).ok());
  EXPECT_FALSE(resp.deduplicated());
  const Job job = resp.job();
  EXPECT_THAT(job.name(), ::testing::StartsWith("tenants/acme/jobs/"));
  EXPECT_EQ(job.state(), trainyard::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.creator(), "users/alice");
  EXPECT_EQ(job.version(), 1);
  EXPECT_EQ(job.spec().queue(), "default");
  EXPECT_TRUE(job.has_create_time());

  trainyard::v1::GetJobRequest get;
  get.set_name(job.name());
  Job got;
  ASSERT_TRUE(jobs_->Get(ApiHarness::Context(member_).get(), get, &got).ok());
  EXPECT_EQ(got.display_name(), "first");
  EXPECT_EQ(got.labels().at("team"), "nlp");
  EXPECT_EQ(got.spec().command_size(), 2);

  for (int i = 0; i < 15; ++i) {
    ASSERT_TRUE(
        Submit(MinimalSubmit("acme", absl::StrCat("more-", i)), &resp).ok());
  }
  std::vector<Job> all = ListAll("tenants/acme");
  ASSERT_EQ(all.size(), 16u);
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_GT(all[i - 1].name(), "");  // newest first
  std::set<std::string> names;
  for (const auto& j : all) names.insert(j.name());
  EXPECT_EQ(names.size(), 16u);

  trainyard::v1::ListJobsRequest by_label;
  by_label.set_parent("tenants/acme");
  (*by_label.mutable_labels())["team"] = "nlp";
  trainyard::v1::ListJobsResponse labelled;
  ASSERT_TRUE(
      jobs_->List(ApiHarness::Context(member_).get(), by_label, &labelled)
          .ok());
  ASSERT_EQ(labelled.jobs_size(), 1);
  EXPECT_EQ(labelled.jobs(0).name(), job.name());

  trainyard::v1::CancelJobRequest cancel;
  cancel.set_name(job.name());
  cancel.set_reason("changed my mind");
  Job cancelled;
  ASSERT_TRUE(
      jobs_->Cancel(ApiHarness::Context(member_).get(), cancel, &cancelled)
          .ok());
  EXPECT_EQ(cancelled.state(), trainyard::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled.state_reason(), "CANCELLED_BY_USER");
  EXPECT_EQ(cancelled.version(), 2);
  EXPECT_TRUE(cancelled.has_end_time());
  // Idempotent: cancelling again changes nothing.
  Job again;
  ASSERT_TRUE(
      jobs_->Cancel(ApiHarness::Context(member_).get(), cancel, &again).ok());
  EXPECT_EQ(again.version(), 2);

  trainyard::v1::ListJobsRequest by_state;
  by_state.set_parent("tenants/acme");
  by_state.add_states(trainyard::v1::JOB_STATE_CANCELLED);
  trainyard::v1::ListJobsResponse cancelled_list;
  ASSERT_TRUE(
      jobs_->List(ApiHarness::Context(member_).get(), by_state, &cancelled_list)
          .ok());
  ASSERT_EQ(cancelled_list.jobs_size(), 1);
}

TEST_F(JobApiTest, ListFiltersByUserAndCreationTimeAndSortsWithStablePages) {
  const std::string bob =
      h_->Token("users/bob", trainyard::v1::ROLE_MEMBER, "acme");
  std::mt19937 rng(7);
  std::vector<int64_t> bobs;
  for (int i = 0; i < 23; ++i) {
    SubmitJobRequest req = MinimalSubmit("acme", absl::StrCat("sort-", i));
    std::string name = "n";
    for (int k = 0; k < 2; ++k)
      name += static_cast<char>('a' + rng() % 4);  // ties on purpose
    req.mutable_job()->set_display_name(name);
    const bool by_bob = i % 3 == 0;
    int64_t id = h_->SubmitJob(by_bob ? bob : member_, req);
    ASSERT_NE(id, 0);
    if (by_bob) bobs.push_back(id);
  }
  // The oracle: every job as Get reads it, sorted here by each order's (key,
  // id).
  std::vector<Job> all;
  for (const Job& j : ListAll("tenants/acme"))
    all.push_back(h_->GetJob(member_, "acme", JobIdOf(j)));
  ASSERT_EQ(all.size(), 23u);
  // Every page of `req` (4 jobs a page) under `parent` as `token`.
  auto listed = [&](trainyard::v1::ListJobsRequest req,
                    const std::string& parent = "tenants/acme",
                    const std::string* token = nullptr) {
    std::vector<int64_t> ids;
    req.set_parent(parent);
    req.set_page_size(4);
    while (true) {
      trainyard::v1::ListJobsResponse resp;
      grpc::Status s = jobs_->List(
          ApiHarness::Context(token != nullptr ? *token : member_).get(), req,
          &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      for (const Job& j : resp.jobs()) ids.push_back(JobIdOf(j));
      if (resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
    return ids;
  };
  auto expected = [&](auto key, bool desc, auto keep) {
    std::vector<Job> jobs;
    for (const Job& j : all) {
      if (keep(j)) jobs.push_back(j);
    }
    std::sort(jobs.begin(), jobs.end(), [&](const Job& a, const Job& b) {
      auto ka = std::make_pair(key(a), JobIdOf(a));
      auto kb = std::make_pair(key(b), JobIdOf(b));
      return desc ? kb < ka : ka < kb;
    });
    std::vector<int64_t> ids;
    for (const Job& j : jobs) ids.push_back(JobIdOf(j));
    return ids;
  };
  auto every = [](const Job&) { return true; };
  auto by_id = [](const Job&) { return 0; };
  auto by_name = [](const Job& j) { return j.display_name(); };
  auto by_state = [](const Job& j) { return static_cast<int>(j.state()); };
  trainyard::v1::ListJobsRequest req;
  EXPECT_EQ(listed(req), expected(by_id, true, every));
  req.set_order_by("create_time");
  EXPECT_EQ(listed(req), expected(by_id, false, every));
  req.set_order_by("display_name");
  EXPECT_EQ(listed(req), expected(by_name, false, every));
  req.set_order_by("DISPLAY_NAME desc");
  EXPECT_EQ(listed(req), expected(by_name, true, every));
  req.set_order_by("state desc");
  EXPECT_EQ(listed(req), expected(by_state, true, every));

  // Only bob's, newest first.
  trainyard::v1::ListJobsRequest mine;
  mine.set_user("users/bob");
  std::vector<int64_t> want_bob(bobs.rbegin(), bobs.rend());
  EXPECT_EQ(listed(mine), want_bob);

  // A creation window [t10, t17): the jobs whose stored create_time falls in
  // it.
  std::vector<Job> by_creation = all;
  std::sort(by_creation.begin(), by_creation.end(),
            [](const Job& a, const Job& b) { return JobIdOf(a) < JobIdOf(b); });
  const auto from = by_creation[10].create_time();
  const auto to = by_creation[17].create_time();
  auto micros = [](const google::protobuf::Timestamp& t) {
    return t.seconds() * 1000000 + t.nanos() / 1000;
  };
  trainyard::v1::ListJobsRequest window;
  *window.mutable_created_after() = from;
  *window.mutable_created_before() = to;
  window.set_order_by("display_name desc");
  EXPECT_EQ(listed(window), expected(by_name, true, [&](const Job& j) {
              return micros(j.create_time()) >= micros(from) &&
                     micros(j.create_time()) < micros(to);
            }));

  // tenants/-: a platform admin's listing merges one index-ordered page per
  // tenant, in every order; the oracle is both tenants' jobs sorted here.
  const std::string carol =
      h_->Token("users/carol", trainyard::v1::ROLE_MEMBER, "other");
  for (int i = 0; i < 9; ++i) {
    SubmitJobRequest req = MinimalSubmit("other", absl::StrCat("o-", i));
    std::string name = "n";
    for (int k = 0; k < 2; ++k) name += static_cast<char>('a' + rng() % 4);
    req.mutable_job()->set_display_name(name);
    int64_t id = h_->SubmitJob(carol, req);
    ASSERT_NE(id, 0);
    all.push_back(h_->GetJob(carol, "other", id));  // `expected` reads `all`
  }
  auto listed_everywhere = [&](const trainyard::v1::ListJobsRequest& req) {
    return listed(req, "tenants/-", &h_->admin_token());
  };
  auto by_queue = [](const Job& j) { return j.spec().queue(); };
  auto by_priority = [](const Job& j) { return j.priority(); };
  trainyard::v1::ListJobsRequest everywhere;
  EXPECT_EQ(listed_everywhere(everywhere), expected(by_id, true, every));
  for (const auto& [order, desc] :
       std::vector<std::pair<std::string, bool>>{{"create_time", false},
                                                 {"display_name", false},
                                                 {"display_name desc", true},
                                                 {"state desc", true},
                                                 {"queue", false},
                                                 {"priority desc", true}}) {
    everywhere.set_order_by(order);
    std::vector<int64_t> want =
        order.starts_with("create_time")    ? expected(by_id, desc, every)
        : order.starts_with("display_name") ? expected(by_name, desc, every)
        : order.starts_with("state")        ? expected(by_state, desc, every)
        : order.starts_with("queue")        ? expected(by_queue, desc, every)
                                     : expected(by_priority, desc, every);
    EXPECT_EQ(listed_everywhere(everywhere), want) << order;
  }
  EXPECT_EQ(listed_everywhere(everywhere).size(), 32u);

  // A page token of one order is refused with another; an unknown order names
  // the field.
  trainyard::v1::ListJobsRequest first;
  first.set_parent("tenants/acme");
  first.set_page_size(2);
  first.set_order_by("display_name");
  trainyard::v1::ListJobsResponse page;
  ASSERT_TRUE(
      jobs_->List(ApiHarness::Context(member_).get(), first, &page).ok());
  ASSERT_FALSE(page.next_page_token().empty());
  first.set_page_token(page.next_page_token());
  first.set_order_by("queue");
  auto ctx = ApiHarness::Context(member_);
  EXPECT_EQ(jobs_->List(ctx.get(), first, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorInfoOf(*ctx).field(), "page_token");
  trainyard::v1::ListJobsRequest bad;
  bad.set_parent("tenants/acme");
  bad.set_order_by("colour desc");
  auto ctx2 = ApiHarness::Context(member_);
  EXPECT_EQ(jobs_->List(ctx2.get(), bad, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorInfoOf(*ctx2).field(), "order_by");
}

TEST_F(JobApiTest, EightConcurrentIdenticalSubmitsCreateExactlyOneJob) {
  for (int round = 0; round < 5; ++round) {
    const std::string key = absl::StrCat("same-key-", round);
    std::vector<std::thread> threads;
    std::vector<SubmitJobResponse> responses(8);
    std::vector<grpc::Status> statuses(8);
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&, i] {
        auto stub = h_->jobs();
        statuses[i] = stub->Submit(ApiHarness::Context(member_).get(),
                                   MinimalSubmit("acme", key), &responses[i]);
      });
    }
    for (auto& t : threads) t.join();
    std::set<std::string> names;
    int fresh = 0;
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
      names.insert(responses[i].job().name());
      if (!responses[i].deduplicated()) ++fresh;
    }
    EXPECT_EQ(names.size(), 1u) << "round " << round;
    EXPECT_EQ(fresh, 1) << "round " << round;
  }
  EXPECT_EQ(ListAll("tenants/acme").size(), 5u);
}

TEST_F(JobApiTest, ReusedRequestIdWithDifferentJobIsRefused) {
  SubmitJobResponse resp;
  ASSERT_TRUE(Submit(MinimalSubmit("acme", "k"), &resp).ok());
  SubmitJobRequest changed = MinimalSubmit("acme", "k");
  changed.mutable_job()->mutable_spec()->set_workers(2);
  trainyard::v1::ErrorInfo info;
  grpc::Status s = Submit(changed, &resp, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("client_request_id"));
  EXPECT_EQ(ListAll("tenants/acme").size(), 1u);
}

struct BadSubmit {
  std::string name;
  std::function<void(SubmitJobRequest&)> mutate;
  grpc::StatusCode code;
  std::string field;
};

TEST_F(JobApiTest, EveryValidationErrorNamesItsField) {
  const std::vector<BadSubmit> cases = {
      {"zero workers",
       [](auto& r) { r.mutable_job()->mutable_spec()->set_workers(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.workers"},
      {"negative workers",
       [](auto& r) { r.mutable_job()->mutable_spec()->set_workers(-3); },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.workers"},
      {"huge workers",
       [](auto& r) { r.mutable_job()->mutable_spec()->set_workers(1 << 30); },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.workers"},
      {"negative gpus",
       [](auto& r) {
         r.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(-1);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.resources.gpus"},
      {"zero cpu",
       [](auto& r) {
         r.mutable_job()->mutable_spec()->mutable_resources()->set_cpu_millis(
             0);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.resources.cpu_millis"},
      {"huge memory",
       [](auto& r) {
         r.mutable_job()->mutable_spec()->mutable_resources()->set_memory_bytes(
             int64_t{1} << 62);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.resources.memory_bytes"},
      {"gang larger than any cluster",
       [](auto& r) {
         r.mutable_job()->mutable_spec()->set_workers(5);
         r.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(8);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.workers"},
      {"more GPUs than any node",
       [](auto& r) {
         r.mutable_job()->mutable_spec()->mutable_resources()->set_gpus(16);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.resources.gpus"},
      {"unknown queue",
       [](auto& r) { r.mutable_job()->mutable_spec()->set_queue("nope"); },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.queue"},
      {"bad queue name",
       [](auto& r) { r.mutable_job()->mutable_spec()->set_queue("Bad_Q"); },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.queue"},
      {"unknown project",
       [](auto& r) { r.mutable_job()->mutable_spec()->set_project("nope"); },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.project"},
      {"unknown priority class",
       [](auto& r) {
         r.mutable_job()->mutable_spec()->set_priority_class("urgent");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.priority_class"},
      {"oversized command",
       [](auto& r) {
         for (int i = 0; i < 300; ++i)
           r.mutable_job()->mutable_spec()->add_command("x");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.command"},
      {"oversized env",
       [](auto& r) {
         (*r.mutable_job()->mutable_spec()->mutable_env())["BIG"] =
             std::string(70 << 10, 'x');
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.env"},
      {"reserved env name",
       [](auto& r) {
         (*r.mutable_job()->mutable_spec()->mutable_env())["TRAINYARD_X"] = "1";
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.env[\"TRAINYARD_X\"]"},
      {"negative time limit",
       [](auto& r) {
         r.mutable_job()->mutable_spec()->mutable_time_limit()->set_seconds(-5);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "job.spec.time_limit"},
      {"bad parent", [](auto& r) { r.set_parent("tenant/acme"); },
       grpc::StatusCode::INVALID_ARGUMENT, "parent"},
      {"missing request id", [](auto& r) { r.set_client_request_id(""); },
       grpc::StatusCode::INVALID_ARGUMENT, "client_request_id"},
      {"bad request id", [](auto& r) { r.set_client_request_id("has space"); },
       grpc::StatusCode::INVALID_ARGUMENT, "client_request_id"},
      {"missing job", [](auto& r) { r.clear_job(); },
       grpc::StatusCode::INVALID_ARGUMENT, "job"},
  };
  int i = 0;
  for (const BadSubmit& c : cases) {
    SubmitJobRequest req = MinimalSubmit("acme", absl::StrCat("bad-", i++));
    c.mutate(req);
    SubmitJobResponse resp;
    trainyard::v1::ErrorInfo info;
    grpc::Status s = Submit(req, &resp, &info);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_EQ(info.field(), c.field) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), ::testing::StartsWith(c.field + ":"))
        << c.name;
  }
  // Nothing half-written.
  EXPECT_TRUE(ListAll("tenants/acme").empty());
}

TEST_F(JobApiTest, BatchIsAllOrNothingAndNamesTheBadItem) {
  trainyard::v1::SubmitJobBatchRequest batch;
  batch.set_parent("tenants/acme");
  for (int i = 0; i < 10; ++i) {
    *batch.add_requests() = MinimalSubmit("acme", absl::StrCat("b-", i));
    batch.mutable_requests(i)->clear_parent();
  }
  batch.mutable_requests(7)->mutable_job()->mutable_spec()->set_workers(0);
  trainyard::v1::SubmitJobBatchResponse resp;
  auto ctx = ApiHarness::Context(member_);
  grpc::Status s = jobs_->SubmitBatch(ctx.get(), batch, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ErrorInfoOf(*ctx).field(), "requests[7].job.spec.workers");
  EXPECT_TRUE(ListAll("tenants/acme").empty());

  batch.mutable_requests(7)->mutable_job()->mutable_spec()->set_workers(1);
  ASSERT_TRUE(
      jobs_->SubmitBatch(ApiHarness::Context(member_).get(), batch, &resp)
          .ok());
  EXPECT_EQ(resp.responses_size(), 10);
  EXPECT_EQ(ListAll("tenants/acme").size(), 10u);
  // Replaying the batch creates nothing new.
  ASSERT_TRUE(
      jobs_->SubmitBatch(ApiHarness::Context(member_).get(), batch, &resp)
          .ok());
  for (const auto& r : resp.responses()) EXPECT_TRUE(r.deduplicated());
  EXPECT_EQ(ListAll("tenants/acme").size(), 10u);
}

TEST_F(JobApiTest, AnotherTenantsJobsAreInvisible) {
  std::string other_member =
      h_->Token("users/bob", trainyard::v1::ROLE_MEMBER, "other");
  SubmitJobResponse resp;
  ASSERT_TRUE(h_->jobs()
                  ->Submit(ApiHarness::Context(other_member).get(),
                           MinimalSubmit("other", "x"), &resp)
                  .ok());
  trainyard::v1::GetJobRequest get;
  get.set_name(resp.job().name());
  Job job;
  EXPECT_EQ(
      jobs_->Get(ApiHarness::Context(member_).get(), get, &job).error_code(),
      grpc::StatusCode::NOT_FOUND);
  // Guessing the id under one's own tenant does not find it either.
  get.set_name(
      absl::StrCat("tenants/acme/jobs/",
                   resp.job().name().substr(resp.job().name().rfind('/') + 1)));
  EXPECT_EQ(
      jobs_->Get(ApiHarness::Context(member_).get(), get, &job).error_code(),
      grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(ListAll("tenants/-").empty());
}

TEST_F(JobApiTest, RateLimitAnswersResourceExhaustedWithRetryDelay) {
  trainyard::v1::UpdateTenantRequest update;
  update.mutable_tenant()->set_name("tenants/acme");
  update.mutable_tenant()->set_submit_rate_limit(0.5);
  update.mutable_tenant()->set_submit_burst(3);
  update.mutable_update_mask()->add_paths("submit_rate_limit");
  update.mutable_update_mask()->add_paths("submit_burst");
  trainyard::v1::Tenant tenant;
  grpc::Status us = h_->queues()->UpdateTenant(
      ApiHarness::Context(h_->admin_token()).get(), update, &tenant);
  ASSERT_TRUE(us.ok()) << us.error_message();
  absl::SleepFor(absl::Seconds(2.5));  // tenant cache ttl
  int ok = 0;
  grpc::Status last;
  trainyard::v1::ErrorInfo info;
  for (int i = 0; i < 10; ++i) {
    SubmitJobResponse resp;
    last = Submit(MinimalSubmit("acme", absl::StrCat("r-", i)), &resp, &info);
    if (last.ok()) ++ok;
    if (last.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) break;
  }
  EXPECT_LE(ok, 4);
  ASSERT_EQ(last.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << last.error_message();
  // Not a field error, but it carries its reason (docs/api.md, "Errors").
  EXPECT_EQ(info.field(), "");
  EXPECT_EQ(info.reason(), "RATE_LIMITED");
  EXPECT_GT(info.retry_delay().seconds() * 1000 +
                info.retry_delay().nanos() / 1000000,
            0);
}

// Reads events from a Watch until `want` arrived or the deadline passes.
std::vector<JobEvent> WatchEvents(ApiHarness& h, const std::string& token,
                                  trainyard::v1::WatchJobsRequest req,
                                  size_t want, absl::Duration deadline) {
  auto ctx = ApiHarness::Context(token);
  ctx->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline)));
  auto stub = h.jobs();
  auto reader = stub->Watch(ctx.get(), req);
  std::vector<JobEvent> out;
  trainyard::v1::WatchJobsResponse resp;
  while (out.size() < want && reader->Read(&resp)) out.push_back(resp.event());
  ctx->TryCancel();
  return out;
}

TEST_F(JobApiTest, OutboxEventsAreCompleteAndInOrder) {
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) {
    SubmitJobResponse resp;
    ASSERT_TRUE(
        Submit(MinimalSubmit("acme", absl::StrCat("e-", i)), &resp).ok());
    names.push_back(resp.job().name());
  }
  for (int i = 0; i < 40; i += 4) {
    trainyard::v1::CancelJobRequest cancel;
    cancel.set_name(names[i]);
    Job out;
    ASSERT_TRUE(
        jobs_->Cancel(ApiHarness::Context(member_).get(), cancel, &out).ok());
  }
  trainyard::v1::ReportCheckpointRequest cp;
  cp.set_job(names[1]);
  cp.mutable_checkpoint()->set_step(10);
  cp.mutable_checkpoint()->set_uri("file:///ckpt/10");
  *cp.mutable_checkpoint()->mutable_time() =
      google::protobuf::util::TimeUtil::GetCurrentTime();
  trainyard::v1::Checkpoint saved;
  ASSERT_TRUE(
      jobs_->ReportCheckpoint(ApiHarness::Context(member_).get(), cp, &saved)
          .ok());

  trainyard::v1::WatchJobsRequest req;
  req.set_parent("tenants/acme");
  req.set_from_start(true);
  std::vector<JobEvent> events =
      WatchEvents(*h_, member_, req, 51, absl::Seconds(20));
  ASSERT_EQ(events.size(), 51u);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_LT(events[i - 1].sequence(), events[i].sequence());
  }
  std::map<std::string, std::vector<JobEvent>> by_job;
  for (const auto& e : events) by_job[e.job()].push_back(e);
  ASSERT_EQ(by_job.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    const auto& list = by_job[names[i]];
    ASSERT_FALSE(list.empty());
    EXPECT_EQ(list[0].type(), trainyard::v1::JOB_EVENT_TYPE_SUBMITTED);
    EXPECT_EQ(list[0].to_state(), trainyard::v1::JOB_STATE_QUEUED);
    if (i % 4 == 0) {
      ASSERT_EQ(list.size(), 2u);
      EXPECT_EQ(list[1].to_state(), trainyard::v1::JOB_STATE_CANCELLED);
      EXPECT_EQ(list[1].from_state(), trainyard::v1::JOB_STATE_QUEUED);
    }
  }
  EXPECT_EQ(by_job[names[1]].back().type(),
            trainyard::v1::JOB_EVENT_TYPE_CHECKPOINT_REPORTED);
  // The stream equals the outbox.
  auto stored = h_->server()->context()->jobs->ReadEvents(0, {}, 1000);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ((*stored)[i].sequence(), events[i].sequence());
  }

  // Resuming after the 20th event yields exactly the rest.
  req.set_from_start(false);
  req.set_after_sequence(events[19].sequence());
  std::vector<JobEvent> rest =
      WatchEvents(*h_, member_, req, 31, absl::Seconds(20));
  ASSERT_EQ(rest.size(), 31u);
  EXPECT_EQ(rest.front().sequence(), events[20].sequence());
  EXPECT_EQ(rest.back().sequence(), events.back().sequence());
}

TEST_F(JobApiTest, LiveWatchSeesNewEventsAndOnlyItsTenant) {
  std::atomic<bool> done{false};
  std::vector<JobEvent> seen;
  std::thread watcher([&] {
    trainyard::v1::WatchJobsRequest req;
    req.set_parent("tenants/acme");
    seen = WatchEvents(*h_, member_, req, 10, absl::Seconds(20));
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(500));
  std::string other =
      h_->Token("users/bob", trainyard::v1::ROLE_MEMBER, "other");
  for (int i = 0; i < 10; ++i) {
    SubmitJobResponse resp;
    ASSERT_TRUE(
        Submit(MinimalSubmit("acme", absl::StrCat("w-", i)), &resp).ok());
    ASSERT_TRUE(h_->jobs()
                    ->Submit(ApiHarness::Context(other).get(),
                             MinimalSubmit("other", absl::StrCat("w-", i)),
                             &resp)
                    .ok());
  }
  watcher.join();
  ASSERT_EQ(seen.size(), 10u);
  for (const auto& e : seen) EXPECT_EQ(e.tenant(), "acme");
}

class JobApiRedisOutageTest : public JobApiTest {
 protected:
  void SetUp() override {
    ApiHarness::Options options;
    options.private_redis = true;
    Init(options);
  }
};

TEST_F(JobApiRedisOutageTest,
       SubmittersSeeNoErrorAndWatchersGetEveryEventAfterRedisReturns) {
  std::vector<JobEvent> seen;
  std::thread watcher([&] {
    trainyard::v1::WatchJobsRequest req;
    req.set_parent("tenants/acme");
    seen = WatchEvents(*h_, member_, req, 60, absl::Seconds(60));
  });
  absl::SleepFor(absl::Milliseconds(500));
  for (int i = 0; i < 20; ++i) {
    SubmitJobResponse resp;
    ASSERT_TRUE(
        Submit(MinimalSubmit("acme", absl::StrCat("before-", i)), &resp).ok());
  }
  ASSERT_TRUE(h_->redis()->Stop().ok());
  for (int i = 0; i < 30; ++i) {
    SubmitJobResponse resp;
    grpc::Status s =
        Submit(MinimalSubmit("acme", absl::StrCat("during-", i)), &resp);
    ASSERT_TRUE(s.ok()) << "submit with Redis down: " << s.error_message();
  }
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(h_->redis()->Restart().ok());
  for (int i = 0; i < 10; ++i) {
    SubmitJobResponse resp;
    ASSERT_TRUE(
        Submit(MinimalSubmit("acme", absl::StrCat("after-", i)), &resp).ok());
  }
  watcher.join();
  ASSERT_EQ(seen.size(), 60u);
  std::set<uint64_t> seqs;
  for (size_t i = 0; i < seen.size(); ++i) {
    seqs.insert(seen[i].sequence());
    if (i > 0) {
      EXPECT_LT(seen[i - 1].sequence(), seen[i].sequence());
    }
  }
  EXPECT_EQ(seqs.size(), 60u);  // no repeats
}

TEST_F(JobApiTest, ExplainPendingGivesPositionInQueueOrder) {
  trainyard::v1::CreatePriorityClassRequest pc;
  pc.set_priority_class_id("high");
  pc.mutable_priority_class()->set_value(100);
  trainyard::v1::PriorityClass created;
  ASSERT_TRUE(
      h_->queues()
          ->CreatePriorityClass(ApiHarness::Context(h_->admin_token()).get(),
                                pc, &created)
          .ok());
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    SubmitJobResponse resp;
    ASSERT_TRUE(
        Submit(MinimalSubmit("acme", absl::StrCat("p-", i)), &resp).ok());
    names.push_back(resp.job().name());
  }
  SubmitJobRequest urgent = MinimalSubmit("acme", "urgent");
  urgent.mutable_job()->mutable_spec()->set_priority_class("high");
  SubmitJobResponse resp;
  ASSERT_TRUE(Submit(urgent, &resp).ok());
  EXPECT_EQ(resp.job().priority(), 100);
  names.insert(names.begin(), resp.job().name());
  for (int i = 0; i < 4; ++i) {
    trainyard::v1::ExplainPendingRequest req;
    req.set_name(names[i]);
    trainyard::v1::ExplainPendingResponse out;
    ASSERT_TRUE(
        jobs_->ExplainPending(ApiHarness::Context(member_).get(), req, &out)
            .ok());
    EXPECT_EQ(out.position_in_queue(), i + 1) << names[i];
    EXPECT_EQ(out.queue_length(), 4);
    EXPECT_EQ(out.reason(), "AWAITING_SCHEDULER");
  }
}

TEST_F(JobApiTest, ACheckpointOfAnAttemptThatDoesNotExistNamesTheField) {
  SubmitJobResponse resp;
  ASSERT_TRUE(Submit(MinimalSubmit("acme", "no-attempt"), &resp).ok());
  trainyard::v1::ReportCheckpointRequest req;
  req.set_job(resp.job().name());
  req.mutable_checkpoint()->set_attempt(5);  // the job has started none
  req.mutable_checkpoint()->set_step(1);
  req.mutable_checkpoint()->set_uri("s3://b/ckpt-1");
  *req.mutable_checkpoint()->mutable_time() =
      google::protobuf::util::TimeUtil::GetCurrentTime();
  trainyard::v1::Checkpoint saved;
  auto context = ApiHarness::Context(member_);
  grpc::Status s = jobs_->ReportCheckpoint(context.get(), req, &saved);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  const trainyard::v1::ErrorInfo info = ErrorInfoOf(*context);
  EXPECT_EQ(info.field(), "checkpoint.attempt");
  EXPECT_EQ(info.reason(), "OUT_OF_RANGE");
  EXPECT_THAT(s.error_message(),
              ::testing::StartsWith("checkpoint.attempt: job has started 0"));
}

TEST_F(JobApiTest, CheckpointsAreListedNewestFirstAndSetTheResumePoint) {
  SubmitJobResponse resp;
  ASSERT_TRUE(Submit(MinimalSubmit("acme", "ckpt"), &resp).ok());
  for (int step : {100, 300, 200}) {
    trainyard::v1::ReportCheckpointRequest req;
    req.set_job(resp.job().name());
    req.mutable_checkpoint()->set_step(step);
    req.mutable_checkpoint()->set_uri(absl::StrCat("s3://b/ckpt-", step));
    *req.mutable_checkpoint()->mutable_time() =
        google::protobuf::util::TimeUtil::GetCurrentTime();
    trainyard::v1::Checkpoint saved;
    ASSERT_TRUE(
        jobs_->ReportCheckpoint(ApiHarness::Context(member_).get(), req, &saved)
            .ok());
    EXPECT_EQ(saved.job(), resp.job().name());
  }
  trainyard::v1::ListCheckpointsRequest list;
  list.set_job(resp.job().name());
  trainyard::v1::ListCheckpointsResponse out;
  ASSERT_TRUE(
      jobs_->ListCheckpoints(ApiHarness::Context(member_).get(), list, &out)
          .ok());
  ASSERT_EQ(out.checkpoints_size(), 3);
  EXPECT_EQ(out.checkpoints(0).step(), 200);  // newest report first
  trainyard::v1::GetJobRequest get;
  get.set_name(resp.job().name());
  Job job;
  ASSERT_TRUE(jobs_->Get(ApiHarness::Context(member_).get(), get, &job).ok());
  EXPECT_EQ(job.resume_from(), "s3://b/ckpt-300");  // highest step wins

  trainyard::v1::ReportCheckpointRequest bad;
  bad.set_job(resp.job().name());
  bad.mutable_checkpoint()->set_step(-1);
  auto ctx = ApiHarness::Context(member_);
  trainyard::v1::Checkpoint ignored;
  EXPECT_EQ(jobs_->ReportCheckpoint(ctx.get(), bad, &ignored).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(ErrorInfoOf(*ctx).field(), ::testing::StartsWith("checkpoint."));

  trainyard::v1::CancelJobRequest cancel;
  cancel.set_name(resp.job().name());
  ASSERT_TRUE(
      jobs_->Cancel(ApiHarness::Context(member_).get(), cancel, &job).ok());
  trainyard::v1::ReportCheckpointRequest late;
  late.set_job(resp.job().name());
  late.mutable_checkpoint()->set_step(400);
  late.mutable_checkpoint()->set_uri("s3://b/late");
  *late.mutable_checkpoint()->mutable_time() =
      google::protobuf::util::TimeUtil::GetCurrentTime();
  EXPECT_EQ(
      jobs_
          ->ReportCheckpoint(ApiHarness::Context(member_).get(), late, &ignored)
          .error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(JobApiTest, MissingOrBadTokenIsUnauthenticated) {
  SubmitJobResponse resp;
  grpc::ClientContext none;
  EXPECT_EQ(
      jobs_->Submit(&none, MinimalSubmit("acme", "u"), &resp).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(jobs_
                ->Submit(ApiHarness::Context("ty_nope_nope").get(),
                         MinimalSubmit("acme", "u"), &resp)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(jobs_
                ->Submit(ApiHarness::Context(member_ + "x").get(),
                         MinimalSubmit("acme", "u"), &resp)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// --- Hold and release ---

int64_t IdOf(const std::string& job_name) {
  return std::stoll(job_name.substr(job_name.rfind('/') + 1));
}

trainyard::v1::Job HoldOrRelease(trainyard::v1::JobService::Stub& jobs,
                                 const std::string& token,
                                 const std::string& name, bool hold,
                                 const std::string& reason,
                                 grpc::Status* status,
                                 trainyard::v1::ErrorInfo* info = nullptr) {
  auto ctx = ApiHarness::Context(token);
  Job out;
  if (hold) {
    trainyard::v1::HoldJobRequest req;
    req.set_name(name);
    req.set_reason(reason);
    *status = jobs.Hold(ctx.get(), req, &out);
  } else {
    trainyard::v1::ReleaseJobRequest req;
    req.set_name(name);
    req.set_reason(reason);
    *status = jobs.Release(ctx.get(), req, &out);
  }
  if (info != nullptr) *info = ErrorInfoOf(*ctx);
  return out;
}

TEST_F(JobApiTest, HoldAndReleaseKeepThePlaceInLineAndRecordTheActor) {
  std::vector<Job> submitted;
  for (int i = 0; i < 3; ++i) {
    SubmitJobResponse resp;
    ASSERT_TRUE(
        Submit(MinimalSubmit("acme", absl::StrCat("h-", i)), &resp).ok());
    submitted.push_back(resp.job());
  }
  const std::string name = submitted[1].name();
  grpc::Status s;
  Job held = HoldOrRelease(*jobs_, member_, name, true, "maintenance", &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(held.state(), trainyard::v1::JOB_STATE_HELD);
  EXPECT_EQ(held.state_reason(), "HELD_BY_USER");
  EXPECT_EQ(held.state_message(), "held by users/alice: maintenance");

  // Holding a held job again changes nothing (idempotent, like Cancel).
  Job again = HoldOrRelease(*jobs_, member_, name, true, "", &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(again.version(), held.version());

  trainyard::v1::ExplainPendingRequest explain;
  explain.set_name(name);
  trainyard::v1::ExplainPendingResponse why;
  ASSERT_TRUE(
      jobs_->ExplainPending(ApiHarness::Context(member_).get(), explain, &why)
          .ok());
  EXPECT_EQ(why.state(), trainyard::v1::JOB_STATE_HELD);
  EXPECT_EQ(why.reason(), "HELD");
  EXPECT_THAT(why.message(),
              ::testing::HasSubstr("held by users/alice: maintenance"));

  // A tenant admin releases it: back to QUEUED, same submission time, same
  // place in line (second of three).
  const std::string admin =
      h_->Token("users/ada", trainyard::v1::ROLE_TENANT_ADMIN, "acme");
  Job released = HoldOrRelease(*jobs_, admin, name, false, "", &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(released.state(), trainyard::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(released.state_reason(), "RELEASED_BY_USER");
  EXPECT_EQ(released.state_message(), "released by users/ada");
  EXPECT_EQ(released.create_time(), submitted[1].create_time());
  ASSERT_TRUE(
      jobs_->ExplainPending(ApiHarness::Context(member_).get(), explain, &why)
          .ok());
  EXPECT_EQ(why.state(), trainyard::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(why.position_in_queue(), 2);
  EXPECT_EQ(why.queue_length(), 3);
  // Releasing a queued job changes nothing either.
  Job queued = HoldOrRelease(*jobs_, member_, name, false, "", &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(queued.version(), released.version());

  // The outbox has both transitions with their reason and actor.
  trainyard::v1::WatchJobsRequest req;
  req.set_parent("tenants/acme");
  req.set_job(name);
  req.set_from_start(true);
  std::vector<JobEvent> events =
      WatchEvents(*h_, member_, req, 3, absl::Seconds(20));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type(), trainyard::v1::JOB_EVENT_TYPE_SUBMITTED);
  EXPECT_EQ(events[1].type(), trainyard::v1::JOB_EVENT_TYPE_STATE_CHANGED);
  EXPECT_EQ(events[1].from_state(), trainyard::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(events[1].to_state(), trainyard::v1::JOB_STATE_HELD);
  EXPECT_EQ(events[1].reason(), "HELD_BY_USER");
  EXPECT_EQ(events[1].message(), "held by users/alice: maintenance");
  EXPECT_EQ(events[2].from_state(), trainyard::v1::JOB_STATE_HELD);
  EXPECT_EQ(events[2].to_state(), trainyard::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(events[2].reason(), "RELEASED_BY_USER");
  EXPECT_EQ(events[2].message(), "released by users/ada");

  // A held job can be cancelled.
  HoldOrRelease(*jobs_, member_, submitted[2].name(), true, "", &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  trainyard::v1::CancelJobRequest cancel;
  cancel.set_name(submitted[2].name());
  Job cancelled;
  ASSERT_TRUE(
      jobs_->Cancel(ApiHarness::Context(member_).get(), cancel, &cancelled)
          .ok());
  EXPECT_EQ(cancelled.state(), trainyard::v1::JOB_STATE_CANCELLED);
}

TEST_F(JobApiTest, HoldingOrReleasingANonPendingJobNamesItsState) {
  SubmitJobResponse a, b;
  ASSERT_TRUE(Submit(MinimalSubmit("acme", "np-a"), &a).ok());
  ASSERT_TRUE(Submit(MinimalSubmit("acme", "np-b"), &b).ok());
  // a: admitted (as the scheduler would); b: cancelled.
  ASSERT_TRUE(h_->server()
                  ->context()
                  ->jobs
                  ->Transition("acme", IdOf(a.job().name()), 0,
                               trainyard::v1::JOB_STATE_ADMITTED, "ADMITTED",
                               "test")
                  .ok());
  trainyard::v1::CancelJobRequest cancel;
  cancel.set_name(b.job().name());
  Job ignored;
  ASSERT_TRUE(
      jobs_->Cancel(ApiHarness::Context(member_).get(), cancel, &ignored).ok());

  grpc::Status s;
  HoldOrRelease(*jobs_, member_, a.job().name(), true, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("is ADMITTED"));
  HoldOrRelease(*jobs_, member_, b.job().name(), true, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("is CANCELLED"));
  HoldOrRelease(*jobs_, member_, b.job().name(), false, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("is CANCELLED"));
  HoldOrRelease(*jobs_, member_, a.job().name(), false, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("only a HELD job"));

  // Bad input names its field; another tenant's job is invisible; a viewer
  // lacks the role.
  trainyard::v1::ErrorInfo info;
  HoldOrRelease(*jobs_, member_, "tenants/acme/jobz/1", true, "", &s, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "name");
  SubmitJobResponse c;
  ASSERT_TRUE(Submit(MinimalSubmit("acme", "np-c"), &c).ok());
  HoldOrRelease(*jobs_, member_, c.job().name(), true, std::string(1025, 'x'),
                &s, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(info.field(), "reason");
  const std::string stranger =
      h_->Token("users/olga", trainyard::v1::ROLE_MEMBER, "other");
  HoldOrRelease(*jobs_, stranger, c.job().name(), true, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string viewer =
      h_->Token("users/vic", trainyard::v1::ROLE_VIEWER, "acme");
  HoldOrRelease(*jobs_, viewer, c.job().name(), true, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h_->GetJob(member_, "acme", IdOf(c.job().name())).state(),
            trainyard::v1::JOB_STATE_QUEUED);
}

// --- Job tokens (docs/security.md "Job tokens") ---

class JobTokenTest : public JobApiTest {
 protected:
  void SetUp() override {
    absl::StatusOr<std::shared_ptr<const runtime::JobTokenKeys>> keys =
        runtime::JobTokenKeys::FromKeys(
            {std::string(40, 'n'), std::string(40, 'o')});
    ASSERT_TRUE(keys.ok()) << keys.status();
    keys_ = *keys;
    ApiHarness::Options options;
    options.server.job_tokens = keys_;
    Init(std::move(options));
    for (const char* id : {"mine", "sibling"}) {
      SubmitJobResponse resp;
      ASSERT_TRUE(Submit(MinimalSubmit("acme", id), &resp).ok());
      names_.push_back(resp.job().name());
    }
    const std::string olga =
        h_->Token("users/olga", trainyard::v1::ROLE_MEMBER, "other");
    other_ = h_->SubmitJob(olga, MinimalSubmit("other", "theirs"));
    ASSERT_GT(other_, 0);
    token_ = Mint(names_[0], absl::Now() + absl::Hours(1));
  }

  std::string Mint(const std::string& job, absl::Time expires,
                   const std::string& tenant = "acme") {
    return keys_->Mint(
        {.tenant = tenant, .job_id = IdOf(job), .expires = expires});
  }

  grpc::Status Report(const std::string& token, const std::string& job,
                      int64_t step) {
    trainyard::v1::ReportCheckpointRequest req;
    req.set_job(job);
    req.mutable_checkpoint()->set_step(step);
    req.mutable_checkpoint()->set_uri(absl::StrCat("s3://b/ck-", step));
    *req.mutable_checkpoint()->mutable_time() =
        google::protobuf::util::TimeUtil::GetCurrentTime();
    trainyard::v1::Checkpoint saved;
    return jobs_->ReportCheckpoint(ApiHarness::Context(token).get(), req,
                                   &saved);
  }

  std::shared_ptr<const runtime::JobTokenKeys> keys_;
  std::vector<std::string> names_;  // mine, sibling (acme)
  int64_t other_ = 0;               // a job of tenant "other"
  std::string token_;               // scoped to names_[0]
};

TEST_F(JobTokenTest, ReportsCheckpointsAndReadsItsOwnJob) {
  grpc::Status s = Report(token_, names_[0], 10);
  ASSERT_TRUE(s.ok()) << s.error_message();
  trainyard::v1::GetJobRequest get;
  get.set_name(names_[0]);
  Job job;
  s = jobs_->Get(ApiHarness::Context(token_).get(), get, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.resume_from(), "s3://b/ck-10");
  trainyard::v1::ListCheckpointsRequest list;
  list.set_job(names_[0]);
  trainyard::v1::ListCheckpointsResponse checkpoints;
  s = jobs_->ListCheckpoints(ApiHarness::Context(token_).get(), list,
                             &checkpoints);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(checkpoints.checkpoints_size(), 1);
  trainyard::v1::ExplainPendingRequest explain;
  explain.set_name(names_[0]);
  trainyard::v1::ExplainPendingResponse why;
  EXPECT_TRUE(
      jobs_->ExplainPending(ApiHarness::Context(token_).get(), explain, &why)
          .ok());
  // Its own job's events, from "tenants/acme" or "tenants/-".
  for (const char* parent : {"tenants/acme", "tenants/-"}) {
    trainyard::v1::WatchJobsRequest req;
    req.set_parent(parent);
    req.set_job(names_[0]);
    req.set_from_start(true);
    std::vector<JobEvent> events =
        WatchEvents(*h_, token_, req, 2, absl::Seconds(20));
    ASSERT_EQ(events.size(), 2u) << parent;
    EXPECT_EQ(events[1].type(),
              trainyard::v1::JOB_EVENT_TYPE_CHECKPOINT_REPORTED);
  }
  // A token signed with the second (older) key still verifies: rotation.
  absl::StatusOr<std::shared_ptr<const runtime::JobTokenKeys>> old =
      runtime::JobTokenKeys::FromKeys({std::string(40, 'o')});
  ASSERT_TRUE(old.ok());
  const std::string old_token =
      (*old)->Mint({.tenant = "acme",
                    .job_id = IdOf(names_[0]),
                    .expires = absl::Now() + absl::Hours(1)});
  s = Report(old_token, names_[0], 20);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(JobTokenTest, IsRefusedForAnyOtherJobTenantOrMethod) {
  auto expect_denied = [](const grpc::Status& s, const std::string& what,
                          const std::string& message) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << what << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr(message)) << what;
  };
  const std::string scope = "job token of " + names_[0];
  const std::string other_name = absl::StrCat("tenants/other/jobs/", other_);
  expect_denied(Report(token_, names_[1], 1), "sibling's checkpoint",
                "valid for its own job only");
  expect_denied(Report(token_, other_name, 1), "other tenant's checkpoint",
                "valid for its own job only");
  trainyard::v1::GetJobRequest get;
  get.set_name(names_[1]);
  Job job;
  expect_denied(jobs_->Get(ApiHarness::Context(token_).get(), get, &job),
                "Get sibling", "valid for its own job only");
  get.set_name(other_name);
  expect_denied(jobs_->Get(ApiHarness::Context(token_).get(), get, &job),
                "Get other tenant's job", "valid for its own job only");
  SubmitJobResponse submitted;
  expect_denied(jobs_->Submit(ApiHarness::Context(token_).get(),
                              MinimalSubmit("acme", "by-token"), &submitted),
                "Submit", scope);
  trainyard::v1::CancelJobRequest cancel;
  cancel.set_name(names_[0]);
  expect_denied(jobs_->Cancel(ApiHarness::Context(token_).get(), cancel, &job),
                "Cancel own job", scope);
  grpc::Status s;
  HoldOrRelease(*jobs_, token_, names_[0], true, "", &s);
  expect_denied(s, "Hold own job", scope);
  for (const char* parent : {"tenants/acme", "tenants/-"}) {
    trainyard::v1::ListJobsRequest list;
    list.set_parent(parent);
    trainyard::v1::ListJobsResponse listed;
    expect_denied(jobs_->List(ApiHarness::Context(token_).get(), list, &listed),
                  absl::StrCat("List ", parent), scope);
  }
  // Watching the tenant rather than its job.
  trainyard::v1::WatchJobsRequest watch;
  watch.set_parent("tenants/acme");
  watch.set_from_start(true);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + token_);
  auto reader = jobs_->Watch(&ctx, watch);
  trainyard::v1::WatchJobsResponse event;
  EXPECT_FALSE(reader->Read(&event));
  expect_denied(reader->Finish(), "Watch tenant", scope);
  // Other services.
  trainyard::v1::ListQueuesRequest queues;
  queues.set_parent("tenants/acme");
  trainyard::v1::ListQueuesResponse queue_list;
  EXPECT_FALSE(
      h_->queues()
          ->ListQueues(ApiHarness::Context(token_).get(), queues, &queue_list)
          .ok());
  // Nothing was changed by the refused calls.
  EXPECT_EQ(h_->GetJob(member_, "acme", IdOf(names_[0])).state(),
            trainyard::v1::JOB_STATE_QUEUED);
}

TEST_F(JobTokenTest, ExpiredForgedOrUnknownTokensAreUnauthenticated) {
  auto expect_unauthenticated = [&](const std::string& token,
                                    const std::string& message) {
    grpc::Status s = Report(token, names_[0], 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << token << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr(message)) << token;
  };
  expect_unauthenticated(Mint(names_[0], absl::Now() - absl::Seconds(1)),
                         "expired");
  // Signed for another job, then relabelled: the signature no longer matches.
  std::string forged = Mint(names_[1], absl::Now() + absl::Hours(1));
  const std::string sibling_id = absl::StrCat(".", IdOf(names_[1]), ".");
  forged.replace(forged.find(sibling_id), sibling_id.size(),
                 absl::StrCat(".", IdOf(names_[0]), "."));
  expect_unauthenticated(forged, "signature does not match");
  absl::StatusOr<std::shared_ptr<const runtime::JobTokenKeys>> stranger =
      runtime::JobTokenKeys::FromKeys({std::string(40, 'z')});
  ASSERT_TRUE(stranger.ok());
  expect_unauthenticated(
      (*stranger)->Mint({.tenant = "acme",
                         .job_id = IdOf(names_[0]),
                         .expires = absl::Now() + absl::Hours(1)}),
      "unknown key");
  expect_unauthenticated("tyj.acme.1.2", "malformed job token");
}

TEST_F(JobApiTest, JobTokensAreRefusedWithoutAKey) {
  SubmitJobResponse resp;
  ASSERT_TRUE(Submit(MinimalSubmit("acme", "nokey"), &resp).ok());
  std::shared_ptr<const runtime::JobTokenKeys> keys =
      runtime::JobTokenKeys::Random();
  trainyard::v1::GetJobRequest get;
  get.set_name(resp.job().name());
  Job job;
  grpc::Status s = jobs_->Get(
      ApiHarness::Context(keys->Mint({.tenant = "acme",
                                      .job_id = IdOf(resp.job().name()),
                                      .expires = absl::Now() + absl::Hours(1)}))
          .get(),
      get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("not accepted"));
}

}  // namespace
}  // namespace trainyard::testing
