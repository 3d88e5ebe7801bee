// Metering throughput: how many attempts a metering pass turns into ledger
// lines per second, over a real PostgreSQL (docs/accounting.md, "The meter and
// the ledger"; docs/performance.md).
//
//   meter_bench --attempts=20000 --output=perf-results/meter_bench.json
//
// Seeds one tenant with `--attempts` jobs of 1-8 GPUs, each with one attempt
// of 10 minutes to 30 hours on flavor "gpu" (rates for GPU, CPU and memory
// with a change in the middle of the window), a quarter of them still
// running, the rest ended (a tenth by a spot reclaim, with lost work). Then
// it times three passes of the meter (MeterService::RunPass):
//   first    every attempt, from nothing (the backlog after an outage);
//   again    at the same instant: only the running ones, rewriting nothing
//            new (what a pass costs when nothing changed);
//   accrue   an hour later: the running ones, each with a grown open line
//            and the next hour's lines (the steady state).
// Each pass is one transition per attempt metered; the JSON has attempts/s
// and lines/s of each pass. Numbers are measured, never asserted.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "services/accounting/meter_service.h"
#include "storage/postgres/accounting_store.h"
#include "storage/postgres/job_rows.h"
#include "storage/postgres/pool.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/job.pb.h"

ABSL_FLAG(int, attempts, 20000, "attempts to seed");
ABSL_FLAG(int, batch, 200, "attempts per metering transaction");
ABSL_FLAG(std::string, output, "perf-results/meter_bench.json",
          "where to write the JSON (empty: stdout only)");

namespace {

using trainyard::storage::postgres::ArrayLiteral;
namespace pg = trainyard::storage::postgres;
namespace v1 = trainyard::v1;

constexpr int64_t kHourMs = 3'600'000;
// 2026-11-01T00:00:00Z.
constexpr int64_t kWindowStart = 1'793'491'200'000;

google::protobuf::Timestamp Ts(int64_t ms) {
  google::protobuf::Timestamp t;
  t.set_seconds(ms / 1000);
  t.set_nanos(static_cast<int32_t>(ms % 1000) * 1'000'000);
  return t;
}

// Seeds the jobs and their attempts in one transaction per 5,000.
absl::Status Seed(pg::Database& db, int count, int64_t now_ms) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> gpus(1, 8);
  std::uniform_int_distribution<int64_t> minutes(10, 30 * 60);
  std::uniform_int_distribution<int> percent(0, 99);
  for (int from = 0; from < count; from += 5000) {
    const int to = std::min(count, from + 5000);
    ArrayLiteral ids, specs, job_ids, idx, bodies, starts, ends;
    for (int i = from; i < to; ++i) {
      const int64_t id = 1'000'000 + i;
      v1::JobSpec spec;
      spec.set_project("default");
      spec.set_queue("default");
      spec.set_workers(1);
      spec.mutable_resources()->set_gpus(gpus(rng));
      spec.mutable_resources()->set_cpu_millis(8000);
      spec.mutable_resources()->set_memory_bytes(int64_t{64} << 30);
      std::string spec_bytes;
      spec.SerializeToString(&spec_bytes);
      ids.Int(id);
      specs.Bytes(spec_bytes);
      // Running: started within the last 30 hours; ended: somewhere in the
      // window before now.
      const bool running = percent(rng) < 25;
      const int64_t length = minutes(rng) * 60'000 + (i % 1000);
      const int64_t start =
          running
              ? now_ms - length
              : kWindowStart + (i * 7919LL % 20) * kHourMs + (i % 3600) * 1000;
      v1::Attempt attempt;
      attempt.set_index(1);
      attempt.set_cluster("clusters/sim");
      attempt.set_flavor("flavors/gpu");
      *attempt.mutable_start_time() = Ts(start);
      if (!running) {
        *attempt.mutable_end_time() = Ts(start + length);
        if (percent(rng) < 10) {
          attempt.set_failure_class(v1::FAILURE_CLASS_SPOT_RECLAIM);
        }
      }
      std::string body;
      attempt.SerializeToString(&body);
      job_ids.Int(id);
      idx.Int(1);
      bodies.Bytes(body);
      starts.Int(start);
      if (running) {
        ends.Null();
      } else {
        ends.Int(start + length);
      }
    }
    absl::Status s = db.Transact([&](pqxx::work& txn) {
      txn.exec_params(
          "INSERT INTO jobs (id, tenant, queue, project, state, priority, "
          "client_request_id, request_hash, creator, spec) SELECT u.id, "
          "'acme', 'default', 'default', 4, 0, 'bench-' || u.id, '', "
          "'users/bench', u.spec FROM unnest($1::bigint[], $2::bytea[]) AS "
          "u(id, spec)",
          ids.str(), specs.str());
      txn.exec_params(
          "INSERT INTO attempts (job_id, idx, cluster, flavor, body, "
          "start_time, end_time) SELECT u.j, u.i, 'sim', 'gpu', u.b, "
          "to_timestamp(u.s / 1000.0), to_timestamp(u.e / 1000.0) FROM "
          "unnest($1::bigint[], $2::int[], $3::bytea[], $4::bigint[], "
          "$5::bigint[]) AS u(j, i, b, s, e)",
          job_ids.str(), idx.str(), bodies.str(), starts.str(), ends.str());
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const int count = absl::GetFlag(FLAGS_attempts);
  auto harness = trainyard::testing::ApiHarness::Start();
  if (!harness.ok()) {
    std::cerr << "harness: " << harness.status() << "\n";
    return 1;
  }
  if (absl::Status s = (*harness)->SeedTenant("acme"); !s.ok()) {
    std::cerr << "seed tenant: " << s << "\n";
    return 1;
  }
  auto db =
      pg::Database::Open({.url = (*harness)->database_url(), .pool_size = 2});
  if (!db.ok()) {
    std::cerr << "database: " << db.status() << "\n";
    return 1;
  }
  // Now: 40 hours into the window.
  const int64_t now_ms = kWindowStart + 40 * kHourMs;
  if (absl::Status s = Seed(**db, count, now_ms); !s.ok()) {
    std::cerr << "seed: " << s << "\n";
    return 1;
  }
  pg::AccountingStore store(db->get());
  pg::AccountingStore::PriceChange prices;
  for (auto [resource, micros] :
       {std::pair{trainyard::accounting::pricing::Resource::kGpu, 2'000'000},
        std::pair{trainyard::accounting::pricing::Resource::kCpu, 40'000},
        std::pair{trainyard::accounting::pricing::Resource::kMemory, 5'000}}) {
    prices.rates.push_back(
        {.flavor = "gpu",
         .resource = resource,
         .price_per_unit_hour = {.micros = micros, .currency_code = "USD"},
         .effective_time = kWindowStart});
  }
  prices.rates.push_back(
      {.flavor = "gpu",
       .resource = trainyard::accounting::pricing::Resource::kGpu,
       .price_per_unit_hour = {.micros = 2'500'000, .currency_code = "USD"},
       .effective_time = kWindowStart + 12 * kHourMs});
  if (auto s = store.AddPrices(prices, kWindowStart, "", nullptr); !s.ok()) {
    std::cerr << "prices: " << s.status() << "\n";
    return 1;
  }
  trainyard::accounting::MeterServiceOptions options;
  options.postgres_url = (*harness)->database_url();
  options.batch = absl::GetFlag(FLAGS_batch);
  auto meter = trainyard::accounting::MeterService::Create(options);
  if (!meter.ok()) {
    std::cerr << "meter: " << meter.status() << "\n";
    return 1;
  }
  std::string json = absl::StrFormat(
      "{\n  \"benchmark\": \"meter_bench\",\n  \"attempts_seeded\": %d,\n  "
      "\"batch\": %d,\n  \"passes\": [",
      count, options.batch);
  struct Pass {
    const char* name;
    int64_t at_ms;
  };
  const Pass passes[] = {
      {"first", now_ms}, {"again", now_ms}, {"accrue", now_ms + kHourMs}};
  bool first = true;
  for (const Pass& p : passes) {
    const auto start = std::chrono::steady_clock::now();
    auto result = (*meter)->RunPass(absl::FromUnixMillis(p.at_ms));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (!result.ok()) {
      std::cerr << "pass " << p.name << ": " << result.status() << "\n";
      return 1;
    }
    const std::string line = absl::StrFormat(
        "%s    {\"pass\": \"%s\", \"attempts\": %d, \"lines_upserted\": %d, "
        "\"lines_deleted\": %d, \"failed\": %d, \"seconds\": %.3f, "
        "\"attempts_per_second\": %.0f, \"lines_per_second\": %.0f}",
        first ? "\n" : ",\n", p.name, result->attempts, result->lines_upserted,
        result->lines_deleted, result->failed, seconds,
        result->attempts / seconds, result->lines_upserted / seconds);
    first = false;
    json += line;
    std::cout << line << "\n";
    if (result->failed > 0) {
      std::cerr << "pass " << p.name << ": " << result->failed
                << " attempts were not metered\n";
      return 1;
    }
  }
  json += "\n  ]\n}\n";
  const std::string path = absl::GetFlag(FLAGS_output);
  if (!path.empty()) std::ofstream(path) << json;
  return 0;
}
