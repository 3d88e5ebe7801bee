// submit_bench: a gRPC load generator for JobService.Submit.
//
// With --target empty it starts its own stack first (a private PostgreSQL with fsync on, a
// private Redis, and the api server in this process) and seeds a tenant, so one command
// measures durable submits on this machine, client included:
//
//   submit_bench --concurrency=64 --duration=20s --output=perf-results/submit.json
//   submit_bench --rate=2000 --concurrency=64 --duration=20s      # open loop at 2,000/s
//
// Against a running server: --target=127.0.0.1:50051 --token=... --tenant=demo.
// Closed loop (--rate=0): each worker sends as fast as answers come. Open loop (--rate>0):
// requests are scheduled at fixed times and latency is measured from the scheduled time, so a
// stalled server cannot hide its queueing (no coordinated omission).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/job.grpc.pb.h"

ABSL_FLAG(std::string, target, "", "api address; empty = start a private stack in-process");
ABSL_FLAG(std::string, token, "", "bearer token (with --target)");
ABSL_FLAG(std::string, tenant, "bench", "tenant to submit into");
ABSL_FLAG(int, concurrency, 32, "concurrent client workers (one channel each 8 workers)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "measured duration");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2), "unmeasured warm-up before it");
ABSL_FLAG(double, rate, 0, "open-loop target submits/s in total; 0 = closed loop, max speed");
ABSL_FLAG(std::string, output, "", "write results as JSON to this file");

namespace {

using Clock = std::chrono::steady_clock;

struct WorkerResult {
  std::vector<double> latencies_ms;
  int64_t errors = 0;
  std::string first_error;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::unique_ptr<trainyard::testing::ApiHarness> harness;
  std::string target = absl::GetFlag(FLAGS_target);
  std::string token = absl::GetFlag(FLAGS_token);
  const std::string tenant = absl::GetFlag(FLAGS_tenant);
  if (target.empty()) {
    trainyard::testing::ApiHarness::Options options;
    options.server.default_submit_rate = 1e9;
    options.server.default_submit_burst = 1e9;
    options.server.db_pool_size = 8;
    auto h = trainyard::testing::ApiHarness::Start(options);
    if (!h.ok()) {
      std::cerr << "starting the stack: " << h.status() << "\n";
      return 1;
    }
    harness = *std::move(h);
    if (auto s = harness->SeedTenant(tenant); !s.ok()) {
      std::cerr << "seeding: " << s << "\n";
      return 1;
    }
    target = harness->target();
    token = harness->Token("users/bench", trainyard::v1::ROLE_MEMBER, tenant);
  }

  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  const double rate = absl::GetFlag(FLAGS_rate);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < (concurrency + 7) / 8; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("bench_channel", i);  // distinct channels, distinct connections
    channels.push_back(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  }

  const auto warmup = absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_warmup));
  const auto duration = absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_duration));
  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_from = start + warmup;
  const Clock::time_point stop = measure_from + duration;
  std::atomic<int64_t> sequence{0};
  std::vector<WorkerResult> results(concurrency);
  std::vector<std::thread> workers;
  const std::string run_id = absl::StrCat(absl::ToUnixMicros(absl::Now()));
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&, w] {
      auto stub = trainyard::v1::JobService::NewStub(channels[w / 8]);
      WorkerResult& r = results[w];
      const auto interval = rate > 0 ? std::chrono::nanoseconds(static_cast<int64_t>(
                                           1e9 * concurrency / rate))
                                     : std::chrono::nanoseconds(0);
      Clock::time_point next = start + interval * w / concurrency;
      while (true) {
        Clock::time_point scheduled = Clock::now();
        if (rate > 0) {
          if (next > scheduled) std::this_thread::sleep_until(next);
          scheduled = next;
          next += interval;
        }
        if (scheduled >= stop) break;
        auto req = trainyard::testing::MinimalSubmit(
            tenant, absl::StrCat("bench-", run_id, "-", sequence.fetch_add(1)));
        trainyard::v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        grpc::Status s = stub->Submit(&ctx, req, &resp);
        const Clock::time_point done = Clock::now();
        if (scheduled < measure_from) continue;
        if (!s.ok()) {
          if (r.errors++ == 0) r.first_error = s.error_message();
          continue;
        }
        r.latencies_ms.push_back(
            std::chrono::duration<double, std::milli>(done - scheduled).count());
      }
    });
  }
  for (auto& t : workers) t.join();

  std::vector<double> all;
  int64_t errors = 0;
  std::string first_error;
  for (auto& r : results) {
    all.insert(all.end(), r.latencies_ms.begin(), r.latencies_ms.end());
    errors += r.errors;
    if (first_error.empty()) first_error = r.first_error;
  }
  const double seconds = std::chrono::duration<double>(duration).count();
  const double throughput = static_cast<double>(all.size()) / seconds;
  const double p50 = Percentile(all, 0.50), p90 = Percentile(all, 0.90),
               p99 = Percentile(all, 0.99), max = Percentile(all, 1.0);
  const std::string json = absl::StrFormat(
      "{\n  \"benchmark\": \"submit\",\n  \"target\": \"%s\",\n  \"self_hosted\": %s,\n"
      "  \"concurrency\": %d,\n  \"target_rate_per_s\": %.0f,\n  \"duration_s\": %.1f,\n"
      "  \"submits\": %d,\n  \"errors\": %d,\n  \"submits_per_s\": %.1f,\n"
      "  \"latency_ms\": {\"p50\": %.2f, \"p90\": %.2f, \"p99\": %.2f, \"max\": %.2f},\n"
      "  \"hardware_threads\": %d\n}\n",
      target, harness ? "true" : "false", concurrency, rate, seconds,
      static_cast<int64_t>(all.size()), errors, throughput, p50, p90, p99, max,
      static_cast<int>(std::thread::hardware_concurrency()));
  std::cout << json;
  if (!first_error.empty()) std::cerr << "first error: " << first_error << "\n";
  if (!absl::GetFlag(FLAGS_output).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_output));
    out << json;
    if (!out) {
      std::cerr << "cannot write " << absl::GetFlag(FLAGS_output) << "\n";
      return 1;
    }
  }
  if (harness) harness->server()->Shutdown(absl::Seconds(1));
  return all.empty() ? 1 : 0;
}
