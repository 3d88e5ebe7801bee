// submit_bench: a gRPC load generator for JobService.Submit.
//
// With --target empty it starts its own stack first, as deployed: a private PostgreSQL with
// fsync on, a private Redis, and the `trainyard all` binary as a separate process (found
// next to this binary, or --server_binary); it seeds a tenant with `trainyard apply` and a
// token with `trainyard token create`. So one command measures durable submits on this
// machine, client included:
//
//   submit_bench --concurrency=64 --duration=20s --output=perf-results/submit.json
//   submit_bench --rate=2000 --concurrency=64 --duration=20s      # open loop at 2,000/s
//
// Against a running server: --target=127.0.0.1:50051 --token=... --tenant=demo.
//
// The client uses gRPC's callback API: --concurrency is the number of requests in flight.
// Closed loop (--rate=0): a new request goes out as soon as one completes. Open loop
// (--rate>0): requests are scheduled at fixed times and latency is measured from the
// scheduled time (also when all slots were busy), so a stalled server cannot hide its
// queueing (no coordinated omission).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "services/lib/runtime/http_server.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/ports.h"
#include "tests/fixtures/subprocess.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/job.grpc.pb.h"

ABSL_FLAG(std::string, target, "", "api address; empty = start a private stack in-process");
ABSL_FLAG(std::string, token, "", "bearer token (with --target)");
ABSL_FLAG(std::string, tenant, "bench", "tenant to submit into");
ABSL_FLAG(int, concurrency, 64, "requests in flight at most");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "measured duration");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2), "unmeasured warm-up before it");
ABSL_FLAG(double, rate, 0, "open-loop target submits/s in total; 0 = closed loop, max speed");
ABSL_FLAG(std::string, output, "", "write results as JSON to this file");
ABSL_FLAG(int, committers, 1, "self-hosted: trainyard --submit_committers");
ABSL_FLAG(std::string, postgres_url, "",
          "self-hosted: use this database instead of a private PostgreSQL");
ABSL_FLAG(std::string, server_binary, "",
          "self-hosted: the trainyard binary (default: next to this binary)");

namespace {

namespace fx = ::trainyard::testing::internal;
using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

// Requests in flight and the results, shared by the issuing thread and gRPC's callbacks.
class Run {
 public:
  Run(int slots, Clock::time_point measure_from) : free_(slots), measure_from_(measure_from) {}

  void Acquire() {
    absl::MutexLock lock(&mu_);
    auto has_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return free_ > 0; };
    mu_.Await(absl::Condition(&has_free));
    --free_;
  }

  void Done(Clock::time_point scheduled, const grpc::Status& s) {
    const Clock::time_point done = Clock::now();
    absl::MutexLock lock(&mu_);
    ++free_;
    if (scheduled < measure_from_) return;
    if (!s.ok()) {
      if (errors_++ == 0) first_error_ = s.error_message();
      return;
    }
    latencies_ms_.push_back(std::chrono::duration<double, std::milli>(done - scheduled).count());
  }

  // Waits until every request has come back.
  void Drain(int slots) {
    absl::MutexLock lock(&mu_);
    auto all_back = [this, slots]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return free_ == slots; };
    mu_.Await(absl::Condition(&all_back));
  }

  std::vector<double> latencies_ms_;
  int64_t errors_ = 0;
  std::string first_error_;

 private:
  absl::Mutex mu_;
  int free_;
  const Clock::time_point measure_from_;
};


std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// PostgreSQL + Redis from the test fixtures and `trainyard all` as a child process.
struct SelfHosted {
  std::unique_ptr<trainyard::testing::LocalRedis> redis;
  std::string binary, dir, db_url, target, token;
  int http_port = 0;
  pid_t server = -1;

  absl::Status RunTool(const std::vector<std::string>& args, std::string* output) {
    const std::string log = absl::StrCat(dir, "/tool.log");
    std::remove(log.c_str());
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::Status s = fx::RunToCompletion({.argv = argv, .log_path = log}, absl::Seconds(60));
    if (output != nullptr) *output = fx::ReadFile(log).value_or("");
    return s;
  }

  static absl::StatusOr<std::unique_ptr<SelfHosted>> Start(const std::string& tenant) {
    auto h = std::make_unique<SelfHosted>();
    h->binary = absl::GetFlag(FLAGS_server_binary);
    if (h->binary.empty()) {
      char self[4096];
      ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
      if (n <= 0) return absl::InternalError("cannot find my own path");
      self[n] = '\0';
      h->binary = Dirname(self) + "/trainyard";
    }
    if (access(h->binary.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("no trainyard binary at ", h->binary,
                                              " (build it, or pass --server_binary)"));
    }
    auto dir = fx::MakeTempDir("trainyard-bench-");
    if (!dir.ok()) return dir.status();
    h->dir = *dir;
    h->db_url = absl::GetFlag(FLAGS_postgres_url);
    if (h->db_url.empty()) {
      auto db = trainyard::testing::SharedPostgres()->CreateDatabase();
      if (!db.ok()) return db.status();
      h->db_url = *db;
    }
    auto redis = trainyard::testing::LocalRedis::Start();
    if (!redis.ok()) return redis.status();
    h->redis = *std::move(redis);
    auto grpc_port = trainyard::testing::PickUnusedPort();
    auto http_port = trainyard::testing::PickUnusedPort();
    if (!grpc_port.ok() || !http_port.ok()) return absl::InternalError("no free port");
    h->http_port = *http_port;
    h->target = absl::StrCat("127.0.0.1:", *grpc_port);
    const std::string pg = "--postgres_url=" + h->db_url;
    std::string out;
    if (absl::Status s = h->RunTool({"migrate", pg}, &out); !s.ok()) return s;
    auto pid = fx::Spawn({.argv = {h->binary, "all", pg, "--redis_addr=" + h->redis->Address(),
                                   "--grpc_listen=" + h->target,
                                   absl::StrCat("--http_listen=127.0.0.1:", *http_port),
                                   absl::StrCat("--submit_committers=",
                                                absl::GetFlag(FLAGS_committers)),
                                   "--log_level=warning"},
                          .log_path = absl::StrCat(h->dir, "/trainyard.log")});
    if (!pid.ok()) return pid.status();
    h->server = *pid;
    bool ready = false;
    for (absl::Time deadline = absl::Now() + absl::Seconds(30); absl::Now() < deadline;) {
      if (h->Get("/readyz").ok()) {
        ready = true;
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!ready) {
      return absl::DeadlineExceededError(
          absl::StrCat("trainyard did not become ready: ",
                       fx::ReadFileTail(absl::StrCat(h->dir, "/trainyard.log"))));
    }
    if (absl::Status s = h->RunTool({"token", "create", pg, "--principal=users/bench-admin",
                                     "--role=platform-admin"},
                                    &out);
        !s.ok()) {
      return s;
    }
    const std::string admin = LastLine(out);
    const std::string bundle = absl::StrCat(h->dir, "/bench.textproto");
    {
      std::ofstream f(bundle);
      f << "cohorts { name: \"cohorts/bench\" }\n"
        << "tenants { name: \"tenants/" << tenant
        << "\" submit_rate_limit: 1000000000 submit_burst: 1000000000 }\n"
        << "projects { name: \"tenants/" << tenant << "/projects/default\" }\n"
        << "queues { name: \"tenants/" << tenant
        << "/queues/default\" cohort: \"bench\" fair_share_weight: 1 }\n";
    }
    if (absl::Status s = h->RunTool({"apply", "-f", bundle, "--target=" + h->target,
                                     "--token=" + admin},
                                    &out);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(s.message(), "\n", out));
    }
    if (absl::Status s = h->RunTool({"token", "create", pg, "--principal=users/bench",
                                     "--role=member", "--tenant=" + tenant},
                                    &out);
        !s.ok()) {
      return s;
    }
    h->token = LastLine(out);
    return h;
  }

  static std::string LastLine(const std::string& text) {
    std::string last;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      last = std::string(line);
    }
    return last;
  }

  absl::StatusOr<std::string> Get(const std::string& path) {
    auto r = trainyard::runtime::HttpGet(absl::StrCat("127.0.0.1:", http_port), path);
    if (!r.ok()) return r.status();
    if (r->status != 200) return absl::UnavailableError(absl::StrCat(path, ": HTTP ", r->status));
    return r->body;
  }

  absl::StatusOr<std::string> Metrics() { return Get("/metrics"); }

  void Stop() {
    if (server > 0) fx::TerminateAndReap(server, SIGTERM, absl::Seconds(10));
    server = -1;
  }
  ~SelfHosted() { Stop(); }
};

struct Call {
  grpc::ClientContext ctx;
  trainyard::v1::SubmitJobRequest req;
  trainyard::v1::SubmitJobResponse resp;
  Clock::time_point scheduled;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Deadlock detection (on in Debian's Abseil build) costs a graph update per lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::unique_ptr<SelfHosted> stack;
  std::string target = absl::GetFlag(FLAGS_target);
  std::string token = absl::GetFlag(FLAGS_token);
  std::string tenant = absl::GetFlag(FLAGS_tenant);
  if (target.empty()) {
    auto started = SelfHosted::Start(tenant);
    if (!started.ok()) {
      std::cerr << "starting the stack: " << started.status() << "\n";
      return 1;
    }
    stack = *std::move(started);
    target = stack->target;
    token = stack->token;
  }

  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  const double rate = absl::GetFlag(FLAGS_rate);
  // A few connections; each multiplexes many calls.
  std::vector<std::unique_ptr<trainyard::v1::JobService::Stub>> stubs;
  for (int i = 0; i < 2; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("bench_channel", i);  // distinct channels, distinct connections
    stubs.push_back(trainyard::v1::JobService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  const std::string authorization = absl::StrCat("Bearer ", token);
  const std::string run_id = absl::StrCat(absl::ToUnixMicros(absl::Now()));

  const auto warmup = absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_warmup));
  const auto duration = absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_duration));
  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_from = start + warmup;
  const Clock::time_point stop = measure_from + duration;
  Run run(concurrency, measure_from);

  const auto interval = rate > 0 ? std::chrono::nanoseconds(static_cast<int64_t>(1e9 / rate))
                                 : std::chrono::nanoseconds(0);
  Clock::time_point next = start;
  for (int64_t seq = 0;; ++seq) {
    Clock::time_point scheduled;
    if (rate > 0) {
      if (next >= stop) break;
      std::this_thread::sleep_until(next);
      scheduled = next;
      next += interval;
      run.Acquire();  // time spent waiting for a slot counts as latency
    } else {
      run.Acquire();
      scheduled = Clock::now();
      if (scheduled >= stop) {
        run.Done(Clock::time_point::min(), grpc::Status::OK);  // give the slot back
        break;
      }
    }
    auto* call = new Call;
    call->scheduled = scheduled;
    call->req = trainyard::testing::MinimalSubmit(tenant, absl::StrCat("bench-", run_id, "-", seq));
    call->ctx.AddMetadata("authorization", authorization);
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stubs[seq % stubs.size()]->async()->Submit(&call->ctx, &call->req, &call->resp,
                                               [call, &run](grpc::Status s) {
                                                 run.Done(call->scheduled, s);
                                                 delete call;
                                               });
  }
  run.Drain(concurrency);

  std::vector<double>& all = run.latencies_ms_;
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
      target, stack ? "true" : "false", concurrency, rate, seconds,
      static_cast<int64_t>(all.size()), run.errors_, throughput, p50, p90, p99, max,
      static_cast<int>(std::thread::hardware_concurrency()));
  std::cout << json;
  if (!run.first_error_.empty()) std::cerr << "first error: " << run.first_error_ << "\n";
  if (!absl::GetFlag(FLAGS_output).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_output));
    out << json;
    if (!out) {
      std::cerr << "cannot write " << absl::GetFlag(FLAGS_output) << "\n";
      return 1;
    }
  }
  if (stack) {
    // Server-side view of the run: group-commit batch sizes and commit times.
    absl::StatusOr<std::string> metrics = stack->Metrics();
    if (metrics.ok()) {
      for (absl::string_view line : absl::StrSplit(*metrics, '\n')) {
        if ((absl::StartsWith(line, "trainyard_submit_batch_size_") ||
             absl::StartsWith(line, "trainyard_submit_commit_seconds_")) &&
            !absl::StrContains(line, "_bucket")) {
          std::cerr << "server: " << line << "\n";
        }
      }
    }
    stack->Stop();
  }
  return all.empty() || run.errors_ > 0 ? 1 : 0;
}
