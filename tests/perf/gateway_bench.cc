// What the REST/JSON gateway adds to a call: the same reads through gRPC
// directly and through the gateway (HTTP/1.1 keep-alive, JSON), alternated call
// by call over one api (real PostgreSQL and Redis), and the difference of the
// medians. Writes JSON to --output.
//
//   gateway_bench [--calls=2000] [--output=perf-results/gateway_bench.json]
//                 [--max_overhead_ms=2]   (exit 1 when a median overhead is
//                 larger; 0: no check)
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/gateway/gateway.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/job.grpc.pb.h"

ABSL_FLAG(int, calls, 2000, "calls of each kind (each way)");
ABSL_FLAG(std::string, output, "perf-results/gateway_bench.json",
          "JSON output; empty: none");
ABSL_FLAG(
    double, max_overhead_ms, 2.0,
    "fail when the gateway's median overhead exceeds this (0: report only)");

namespace {

using Clock = std::chrono::steady_clock;

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

struct Pair {
  std::string name;
  std::vector<double> grpc_ms, rest_ms;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using trainyard::testing::ApiHarness;
  auto api = ApiHarness::Start();
  if (!api.ok()) {
    std::fprintf(stderr, "api: %s\n",
                 std::string(api.status().message()).c_str());
    return 1;
  }
  if (!(*api)->SeedTenant("acme").ok()) return 1;
  const std::string token =
      (*api)->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  for (int i = 0; i < 50; ++i) {
    if ((*api)->SubmitJob(token, trainyard::testing::MinimalSubmit(
                                     "acme", absl::StrCat("b", i))) == 0) {
      return 1;
    }
  }
  trainyard::gateway::GatewayOptions options;
  options.listen_address = "127.0.0.1:0";
  options.channel = (*api)->channel();
  auto gateway = trainyard::gateway::Gateway::Start(std::move(options));
  if (!gateway.ok()) return 1;
  auto stub = trainyard::v1::JobService::NewStub((*api)->channel());
  httplib::Client http("127.0.0.1", (*gateway)->port());
  http.set_keep_alive(true);
  http.set_tcp_nodelay(true);  // as browsers do
  http.set_bearer_token_auth(token);

  Pair get{"GetJob"}, list{"ListJobs (50 jobs)"};
  const int calls = absl::GetFlag(FLAGS_calls);
  for (int i = -50; i < calls; ++i) {  // 50 warm-up rounds
    bool keep = i >= 0;
    {
      auto ctx = ApiHarness::Context(token);
      trainyard::v1::GetJobRequest req;
      req.set_name("tenants/acme/jobs/1");
      trainyard::v1::Job job;
      auto t0 = Clock::now();
      grpc::Status s = stub->Get(ctx.get(), req, &job);
      double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!s.ok()) return 1;
      if (keep) get.grpc_ms.push_back(ms);
      t0 = Clock::now();
      auto r = http.Get("/v1/tenants/acme/jobs/1");
      ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!r || r->status != 200) return 1;
      if (keep) get.rest_ms.push_back(ms);
    }
    {
      auto ctx = ApiHarness::Context(token);
      trainyard::v1::ListJobsRequest req;
      req.set_parent("tenants/acme");
      req.set_page_size(50);
      trainyard::v1::ListJobsResponse resp;
      auto t0 = Clock::now();
      grpc::Status s = stub->List(ctx.get(), req, &resp);
      double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!s.ok() || resp.jobs_size() != 50) return 1;
      if (keep) list.grpc_ms.push_back(ms);
      t0 = Clock::now();
      auto r = http.Get("/v1/tenants/acme/jobs?pageSize=50");
      ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!r || r->status != 200) return 1;
      if (keep) list.rest_ms.push_back(ms);
    }
  }
  (*gateway)->Stop();

  bool within = true;
  std::string json = "{\"calls\":" + std::to_string(calls) + ",\"results\":[";
  for (const Pair* p : {&get, &list}) {
    double g50 = Quantile(p->grpc_ms, 0.5), r50 = Quantile(p->rest_ms, 0.5);
    double g99 = Quantile(p->grpc_ms, 0.99), r99 = Quantile(p->rest_ms, 0.99);
    double overhead = r50 - g50;
    std::printf(
        "%-20s gRPC p50 %.3f ms p99 %.3f ms | gateway p50 %.3f ms p99 %.3f ms "
        "| "
        "overhead p50 %.3f ms\n",
        p->name.c_str(), g50, g99, r50, r99, overhead);
    if (absl::GetFlag(FLAGS_max_overhead_ms) > 0 &&
        overhead > absl::GetFlag(FLAGS_max_overhead_ms)) {
      within = false;
    }
    absl::StrAppend(
        &json, p == &get ? "" : ",",
        absl::StrFormat(
            "{\"call\":\"%s\",\"grpc_p50_ms\":%.3f,\"grpc_p99_ms\":%.3f,"
            "\"gateway_p50_ms\":%.3f,\"gateway_p99_ms\":%.3f,"
            "\"overhead_p50_ms\":%.3f}",
            p->name, g50, g99, r50, r99, overhead));
  }
  json += "]}\n";
  if (const std::string out = absl::GetFlag(FLAGS_output); !out.empty()) {
    std::filesystem::path path(out);
    if (path.has_parent_path())
      std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << json;
  }
  if (!within) {
    std::printf("the gateway's median overhead is over %.1f ms\n",
                absl::GetFlag(FLAGS_max_overhead_ms));
    return 1;
  }
  return 0;
}
