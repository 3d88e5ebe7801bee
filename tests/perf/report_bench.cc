// Reports from rollups vs from raw lines, over a real PostgreSQL
// (docs/accounting.md, "Rollups"; docs/performance.md, "Reports from
// rollups").
//
//   report_bench --attempts=5000000 --output=perf-results/report_bench.json
//
// Seeds a private PostgreSQL with one month (November 2026, UTC) of ledger
// lines of `--attempts` attempts of `--tenants` tenants and `--projects`
// projects (each project belongs to one tenant, has two users and runs on one
// of four flavors, a fifth of them spot): most attempts are short (88%: 1 to
// 50 minutes), some run 1 to 4 hours (10%) and a few 6 to 24 hours (2%); each
// is cut at UTC hours into GPU (9 in 10 attempts), CPU and memory lines, 1 in
// 20 ends with lost work split with the platform, spot GPU lines carry a list
// cost and some a price gap. The lines are written by SQL (generate_series),
// then the rollups are built by AccountingStore::RebuildRollups (the
// statements of migration 0007), then both tables are analyzed. Then it times
// the month's report grouped by project, as GetReport builds it:
//   rollups  SumRollups + ReportFromRollups (median of --runs);
//   raw      LoadLines + BuildReport over every line of the month (median of
//            --raw_runs; only while the month has at most --raw_max_lines
//            lines: they are held in memory), and checks that both reports
//            are the same, row by row and field by field;
//   raw_sql  the same sums by one GROUP BY over the lines in SQL (median of
//            --raw_runs), checked against the rollup report's rows.
// Numbers are measured, never asserted; a disagreement is an error (exit 1).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "services/accounting/pricing/report.h"
#include "services/accounting/pricing/rollup.h"
#include "storage/postgres/accounting_store.h"
#include "storage/postgres/migrate.h"
#include "storage/postgres/pool.h"
#include "tests/fixtures/local_postgres.h"

ABSL_FLAG(int64_t, attempts, 5'000'000, "attempts in the month");
ABSL_FLAG(int, tenants, 1000, "tenants");
ABSL_FLAG(int, projects, 10000, "projects (each of one tenant)");
ABSL_FLAG(int, runs, 7, "timed runs of the rollup report");
ABSL_FLAG(int, raw_runs, 3, "timed runs of each raw report");
ABSL_FLAG(int64_t, raw_max_lines, 8'000'000,
          "largest month whose lines LoadLines + BuildReport may hold");
ABSL_FLAG(std::string, output, "perf-results/report_bench.json",
          "where to write the JSON (empty: stdout only)");

namespace {

namespace pg = trainyard::storage::postgres;
namespace pricing = trainyard::accounting::pricing;
using Clock = std::chrono::steady_clock;

constexpr int64_t kHourMs = 3'600'000;

int64_t Ms(int y, int m, int d) {
  return absl::ToUnixMillis(
      absl::FromCivil(absl::CivilDay(y, m, d), absl::UTCTimeZone()));
}

double Seconds(Clock::time_point from) {
  return std::chrono::duration<double>(Clock::now() - from).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The lines of attempts [from, to). Every value is a function of the
// attempt's number (hashint8 with a salt), so the seed is the same each run.
std::string SeedStatement(int64_t from, int64_t to, int64_t month_start,
                          int64_t month_ms, int tenants, int projects) {
  return absl::StrFormat(
      R"sql(
INSERT INTO usage_lines (job_id, attempt, resource, start_ms, end_ms, period_start_ms, tenant,
  project, queue, user_name, cluster, flavor, spot, amount, unit_price_micros, price_source,
  spot_price_gap, cost_micros, lost_work, tenant_cost_micros, platform_cost_micros, open,
  list_cost_micros, attempt_start)
WITH a AS (
  SELECT i AS job_id, p, p %% %d AS t, (p %% 5) AS fl,
         %d + (abs(hashint8(i * 4 + 1)) %% (%d / 1000)) * 1000 AS s,
         CASE WHEN abs(hashint8(i * 4 + 2)) %% 100 < 88
                THEN 60000 + abs(hashint8(i * 4 + 3)) %% 2940000
              WHEN abs(hashint8(i * 4 + 2)) %% 100 < 98
                THEN 3600000 + abs(hashint8(i * 4 + 3)) %% 10800000
              ELSE 21600000 + abs(hashint8(i * 4 + 3)) %% 64800000 END AS d,
         CASE WHEN i %% 10 = 0 THEN 0 ELSE 1 + abs(hashint8(i * 4 + 4)) %% 8 END AS gpus,
         i %% 20 = 0 AS lost
  FROM (SELECT i, abs(hashint8(i)) %% %d AS p FROM generate_series(%d, %d) AS i) x
), pieces AS (
  SELECT a.*, r.res, h.hr * 3600000 AS period,
         greatest(a.s, h.hr * 3600000) AS ls, least(a.s + a.d, (h.hr + 1) * 3600000) AS le,
         h.hr = (a.s + a.d - 1) / 3600000 AS last_hour, h.hr = a.s / 3600000 AS first_hour,
         CASE r.res WHEN 0 THEN a.gpus WHEN 1 THEN a.gpus * 8000 + 4000
                    ELSE (a.gpus + 1) * 68719476736 END AS amount,
         CASE r.res WHEN 0 THEN 2000000 WHEN 1 THEN 40000 ELSE 5000 END AS price,
         CASE r.res WHEN 0 THEN 3600000::numeric WHEN 1 THEN 3600000000::numeric
                    ELSE 3865470566400000::numeric END AS unit
  FROM a CROSS JOIN (VALUES (0), (1), (2)) AS r(res)
  CROSS JOIN LATERAL generate_series(a.s / 3600000, (a.s + a.d - 1) / 3600000) AS h(hr)
  WHERE r.res > 0 OR a.gpus > 0
), priced AS (
  SELECT *, (price::numeric * amount * (le - ls) / unit)::bigint AS cost,
         fl = 4 AND res = 0 AS spot_gpu, lost AND last_hour AS lost_line
  FROM pieces
)
SELECT job_id, 1, res, ls, le, period, 't' || t, 'p' || p, 'default',
       'users/u' || (p * 2 + job_id %% 2), 'c' || (p %% 2),
       (ARRAY['a100', 'h100', 'l4', 'a10', 'a100-spot'])[fl + 1], fl = 4, amount,
       CASE WHEN spot_gpu THEN price / 2 ELSE price END, CASE WHEN spot_gpu THEN 1 ELSE 0 END,
       spot_gpu AND job_id %% 7 = 0, CASE WHEN spot_gpu THEN cost / 2 ELSE cost END,
       lost_line, CASE WHEN lost_line THEN (CASE WHEN spot_gpu THEN cost / 2 ELSE cost END) / 2
                       ELSE CASE WHEN spot_gpu THEN cost / 2 ELSE cost END END,
       CASE WHEN lost_line THEN (CASE WHEN spot_gpu THEN cost / 2 ELSE cost END)
                                - (CASE WHEN spot_gpu THEN cost / 2 ELSE cost END) / 2
            ELSE 0 END,
       false, cost, first_hour AND res = CASE WHEN gpus > 0 THEN 0 ELSE 1 END
FROM priced
)sql",
      tenants, month_start, month_ms, projects, from, to - 1);
}

bool SameRow(const pricing::ReportRow& a, const pricing::ReportRow& b) {
  return a.keys == b.keys && a.period_start == b.period_start &&
         a.period_end == b.period_end && a.cost_micros == b.cost_micros &&
         a.tenant_cost_micros == b.tenant_cost_micros &&
         a.platform_cost_micros == b.platform_cost_micros &&
         a.lost_work_cost_micros == b.lost_work_cost_micros &&
         a.list_cost_micros == b.list_cost_micros && a.gpu_ms == b.gpu_ms &&
         a.lost_gpu_ms == b.lost_gpu_ms &&
         a.cpu_millicore_ms == b.cpu_millicore_ms &&
         a.memory_byte_ms == b.memory_byte_ms && a.attempts == b.attempts &&
         a.spot_price_gap == b.spot_price_gap;
}

int Run() {
  const int64_t attempts = absl::GetFlag(FLAGS_attempts);
  const int tenants = absl::GetFlag(FLAGS_tenants);
  const int projects = absl::GetFlag(FLAGS_projects);
  trainyard::testing::LocalPostgres::Options options;
  options.fsync = false;
  options.settings = {{"shared_buffers", "2GB"},
                      {"work_mem", "256MB"},
                      {"maintenance_work_mem", "1GB"},
                      {"max_wal_size", "16GB"},
                      {"max_parallel_workers_per_gather", "2"}};
  auto server = trainyard::testing::LocalPostgres::Start(options);
  if (!server.ok()) {
    std::cerr << "postgres: " << server.status() << "\n";
    return 1;
  }
  auto url = (*server)->CreateDatabase();
  if (!url.ok()) {
    std::cerr << url.status() << "\n";
    return 1;
  }
  if (auto m = pg::Migrate(*url); !m.ok()) {
    std::cerr << "migrate: " << m.status() << "\n";
    return 1;
  }
  auto db = pg::Database::Open({.url = *url, .pool_size = 2});
  if (!db.ok()) {
    std::cerr << db.status() << "\n";
    return 1;
  }
  pg::AccountingStore store(db->get());
  const int64_t month_start = Ms(2026, 11, 1);
  const int64_t month_end = Ms(2026, 12, 1);

  // Seed: lines without their secondary indexes, then the indexes, then the
  // rollups.
  const Clock::time_point seed_start = Clock::now();
  absl::Status s = (*db)->Transact([&](pqxx::work& txn) {
    txn.exec("DROP INDEX usage_lines_by_period");
    txn.exec("DROP INDEX usage_lines_by_tenant");
    return absl::OkStatus();
  });
  constexpr int64_t kChunk = 250'000;
  for (int64_t from = 0; from < attempts && s.ok(); from += kChunk) {
    const int64_t to = std::min(attempts, from + kChunk);
    s = (*db)->Transact([&](pqxx::work& txn) {
      txn.exec(SeedStatement(from, to, month_start, month_end - month_start,
                             tenants, projects));
      return absl::OkStatus();
    });
    std::cerr << "seeded " << to << " attempts, " << Seconds(seed_start)
              << " s\n";
  }
  if (s.ok()) {
    s = (*db)->Transact([&](pqxx::work& txn) {
      txn.exec(
          "CREATE INDEX usage_lines_by_period ON usage_lines "
          "(period_start_ms)");
      txn.exec(
          "CREATE INDEX usage_lines_by_tenant ON usage_lines (tenant, "
          "period_start_ms)");
      return absl::OkStatus();
    });
  }
  const double seed_lines_s = Seconds(seed_start);
  const Clock::time_point rollup_start = Clock::now();
  if (s.ok()) s = store.RebuildRollups();
  const double rebuild_s = Seconds(rollup_start);
  int64_t lines = 0, month_lines = 0, rollup_rows = 0, month_rollup_rows = 0;
  if (s.ok()) {
    pqxx::connection conn(*url);
    pqxx::nontransaction n(conn);
    n.exec("VACUUM ANALYZE usage_lines");
    n.exec("VACUUM ANALYZE usage_rollups");
    lines = n.exec("SELECT count(*) FROM usage_lines")[0][0].as<int64_t>();
    month_lines = n.exec_params(
                       "SELECT count(*) FROM usage_lines WHERE "
                       "period_start_ms >= $1 AND period_start_ms "
                       "< $2",
                       month_start, month_end)[0][0]
                      .as<int64_t>();
    rollup_rows =
        n.exec("SELECT count(*) FROM usage_rollups")[0][0].as<int64_t>();
    month_rollup_rows =
        n.exec("SELECT count(*) FROM usage_rollups WHERE granularity = 2")[0][0]
            .as<int64_t>();
  }
  if (!s.ok()) {
    std::cerr << "seed: " << s << "\n";
    return 1;
  }
  std::cerr << lines << " lines (" << month_lines << " in the month), "
            << rollup_rows << " rollup rows, seeded in " << Seconds(seed_start)
            << " s\n";

  pricing::ReportQuery q;
  q.start = month_start;
  q.end = month_end;
  q.group_by = {pricing::Dimension::kProject};

  // From the rollups, as GetReport builds it.
  std::vector<double> rollup_s;
  pricing::Report from_rollups;
  for (int i = 0; i < absl::GetFlag(FLAGS_runs); ++i) {
    const Clock::time_point t = Clock::now();
    auto sums = store.SumRollups(q);
    if (!sums.ok()) {
      std::cerr << sums.status() << "\n";
      return 1;
    }
    auto r = pricing::ReportFromRollups(q, *sums, nullptr);
    if (!r.ok()) {
      std::cerr << r.status() << "\n";
      return 1;
    }
    rollup_s.push_back(Seconds(t));
    from_rollups = *std::move(r);
  }
  bool agree = true;
  // From the raw lines in SQL: the same sums per project.
  std::vector<double> raw_sql_s;
  for (int i = 0; i < absl::GetFlag(FLAGS_raw_runs); ++i) {
    std::map<std::string, std::vector<std::string>> by_project;
    const Clock::time_point t = Clock::now();
    s = (*db)->Read([&](pqxx::read_transaction& txn) {
      for (const pqxx::row& r : txn.exec_params(
               "SELECT project, sum(cost_micros), sum(tenant_cost_micros), "
               "sum(list_cost_micros), coalesce(sum(amount::numeric * "
               "(end_ms - start_ms)) FILTER (WHERE resource = 0), 0), "
               "count(*) FILTER (WHERE attempt_start) FROM usage_lines WHERE "
               "period_start_ms >= $1 AND period_start_ms < $2 GROUP BY "
               "project",
               month_start, month_end)) {
        by_project[r[0].as<std::string>()] = {
            r[1].as<std::string>(), r[2].as<std::string>(),
            r[3].as<std::string>(), r[4].as<std::string>(),
            r[5].as<std::string>()};
      }
      return absl::OkStatus();
    });
    raw_sql_s.push_back(Seconds(t));
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    if (i == 0) {
      bool same = by_project.size() == from_rollups.rows.size();
      for (const pricing::ReportRow& row : from_rollups.rows) {
        auto it = by_project.find(row.keys[0]);
        same = same && it != by_project.end() &&
               it->second == std::vector<std::string>{
                                 absl::StrCat(row.cost_micros),
                                 absl::StrCat(row.tenant_cost_micros),
                                 absl::StrCat(row.list_cost_micros),
                                 absl::StrCat(row.gpu_ms),
                                 absl::StrCat(row.attempts)};
      }
      std::cerr << "raw SQL sums " << (same ? "agree" : "DISAGREE") << "\n";
      agree = agree && same;
    }
  }
  // From the raw lines, as GetReport built it before rollups.
  std::vector<double> raw_s;
  const bool raw = month_lines <= absl::GetFlag(FLAGS_raw_max_lines);
  for (int i = 0; raw && i < absl::GetFlag(FLAGS_raw_runs); ++i) {
    const Clock::time_point t = Clock::now();
    auto loaded = store.LoadLines("", q.start, q.end);
    if (!loaded.ok()) {
      std::cerr << loaded.status() << "\n";
      return 1;
    }
    auto r = pricing::BuildReport(*loaded, q, nullptr);
    if (!r.ok()) {
      std::cerr << r.status() << "\n";
      return 1;
    }
    raw_s.push_back(Seconds(t));
    if (i == 0) {
      bool same = r->rows.size() == from_rollups.rows.size() &&
                  SameRow(r->total, from_rollups.total);
      for (size_t j = 0; same && j < r->rows.size(); ++j) {
        same = SameRow(r->rows[j], from_rollups.rows[j]);
      }
      std::cerr << "raw report " << (same ? "agrees" : "DISAGREES") << "\n";
      agree = agree && same;
    }
  }

  const std::string json = absl::StrFormat(
      "{\n  \"bench\": \"report_bench\",\n  \"attempts\": %d,\n  "
      "\"tenants\": %d,\n  \"projects\": %d,\n  \"lines\": %d,\n  "
      "\"month_lines\": %d,\n  \"rollup_rows\": %d,\n  "
      "\"month_rollup_rows\": %d,\n  \"report_rows\": %d,\n  "
      "\"seed_lines_s\": %.1f,\n  \"rebuild_rollups_s\": %.1f,\n  "
      "\"rollup_report_median_s\": %.4f,\n  \"rollup_runs\": %d,\n  "
      "\"raw_sql_median_s\": %.3f,\n  \"raw_report_median_s\": %s,\n  "
      "\"raw_runs\": %d,\n  \"total_cost_micros\": %d,\n  "
      "\"total_attempts\": %d,\n  \"agree\": %s\n}\n",
      attempts, tenants, projects, lines, month_lines, rollup_rows,
      month_rollup_rows, from_rollups.rows.size(), seed_lines_s, rebuild_s,
      Median(rollup_s), rollup_s.size(), Median(raw_sql_s),
      raw ? absl::StrFormat("%.3f", Median(raw_s)) : "null",
      raw ? raw_s.size() : raw_sql_s.size(), from_rollups.total.cost_micros,
      from_rollups.total.attempts, agree ? "true" : "false");
  std::cout << json;
  const std::string output = absl::GetFlag(FLAGS_output);
  if (!output.empty()) std::ofstream(output) << json;
  return agree ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Run();
}
