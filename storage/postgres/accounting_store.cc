#include "storage/postgres/accounting_store.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <pqxx/pqxx>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "services/accounting/pricing/report.h"
#include "services/accounting/pricing/rollup.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/validation.h"
#include "storage/postgres/errors.h"
#include "storage/postgres/job_rows.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::storage::postgres {
namespace {

using pricing::LedgerLine;
using pricing::TimeMs;

// The advisory lock (transaction-scoped) that serializes changes of the price
// book, so that two writers cannot both pass the checks against the same
// book.
constexpr int64_t kPriceBookLock = 0x7472636b70726963;  // "trckpric"

constexpr char kLineColumns[] =
    "job_id, attempt, resource, start_ms, end_ms, period_start_ms, tenant, "
    "project, queue, user_name, cluster, flavor, spot, amount, "
    "unit_price_micros, price_source, spot_price_gap, cost_micros, lost_work, "
    "tenant_cost_micros, platform_cost_micros, open, list_cost_micros, "
    "attempt_start";

// kLineColumns of the table aliased `alias`.
std::string QualifiedLineColumns(const std::string& alias) {
  std::vector<std::string> columns = absl::StrSplit(kLineColumns, ", ");
  for (std::string& c : columns) c = absl::StrCat(alias, ".", c);
  return absl::StrJoin(columns, ", ");
}

LedgerLine RowToLine(const pqxx::row& r) {
  LedgerLine line;
  const int64_t job_id = r[0].as<int64_t>();
  line.keys.attempt = r[1].as<int32_t>();
  line.resource = static_cast<pricing::Resource>(r[2].as<int>());
  line.start = r[3].as<int64_t>();
  line.end = r[4].as<int64_t>();
  line.period_start = r[5].as<int64_t>();
  line.keys.tenant = r[6].as<std::string>();
  line.keys.project = r[7].as<std::string>();
  line.keys.queue = r[8].as<std::string>();
  line.keys.user = r[9].as<std::string>();
  line.keys.cluster = r[10].as<std::string>();
  line.keys.flavor = r[11].as<std::string>();
  line.keys.job = JobName(line.keys.tenant, job_id);
  line.spot = r[12].as<bool>();
  line.amount = r[13].as<int64_t>();
  line.unit_price_micros = r[14].as<int64_t>();
  line.price_source = static_cast<pricing::PriceSource>(r[15].as<int>());
  line.spot_price_gap = r[16].as<bool>();
  line.cost_micros = r[17].as<int64_t>();
  line.lost_work = r[18].as<bool>();
  line.tenant_cost_micros = r[19].as<int64_t>();
  line.platform_cost_micros = r[20].as<int64_t>();
  line.open = r[21].as<bool>();
  line.list_cost_micros = r[22].as<int64_t>();
  line.attempt_start = r[23].as<bool>();
  return line;
}

std::map<std::string, std::string> LabelsOf(const std::string& json_text) {
  std::map<std::string, std::string> labels;
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (!j.is_object()) return labels;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.value().is_string())
      labels[it.key()] = it.value().get<std::string>();
  }
  return labels;
}

// What the meter reads of an attempt (CandidateOf), up to "WHERE ".
constexpr char kCandidateSelect[] =
    "SELECT a.job_id, a.idx, a.cluster, a.flavor, a.body, "
    "a.metered_until_ms, j.tenant, j.project, j.queue, j.creator, "
    "j.labels::text, j.spec, f.body, (SELECT (extract(epoch FROM "
    "max(c.report_time)) * 1000)::bigint FROM checkpoints c WHERE c.job_id "
    "= a.job_id AND c.attempt = a.idx) FROM attempts a JOIN jobs j ON j.id "
    "= a.job_id LEFT JOIN flavors f ON f.id = a.flavor WHERE ";

// An attempt row of acct_candidates (or acct_attempts_in) as the meter reads
// it.
absl::StatusOr<MeterCandidate> CandidateOf(const pqxx::row& r) {
  MeterCandidate c;
  c.job_id = r[0].as<int64_t>();
  c.attempt = r[1].as<int32_t>();
  c.cluster = r[2].as<std::string>();
  c.flavor = r[3].as<std::string>();
  trainyard::v1::Attempt attempt;
  if (!attempt.ParseFromString(BytesOf(r[4]))) {
    return absl::DataLossError(absl::StrCat("attempt ", c.attempt, " of job ",
                                            c.job_id, " does not decode"));
  }
  if (!r[5].is_null()) c.metered_until_ms = r[5].as<int64_t>();
  c.tenant = r[6].as<std::string>();
  c.project = r[7].as<std::string>();
  c.queue = r[8].as<std::string>();
  c.user = r[9].as<std::string>();
  c.labels = LabelsOf(r[10].as<std::string>());
  trainyard::v1::JobSpec spec;
  if (!spec.ParseFromString(BytesOf(r[11]))) {
    return absl::DataLossError(
        absl::StrCat("the spec of job ", c.job_id, " does not decode"));
  }
  c.workers = std::max(1, spec.workers());
  c.gpus_per_worker = spec.resources().gpus();
  c.cpu_millis_per_worker = spec.resources().cpu_millis();
  c.memory_bytes_per_worker = spec.resources().memory_bytes();
  if (!r[12].is_null()) {
    trainyard::v1::Flavor flavor;
    if (flavor.ParseFromString(BytesOf(r[12]))) {
      c.spot_flavor = flavor.kind() == trainyard::v1::FLAVOR_KIND_SPOT;
    }
  }
  if (!r[13].is_null()) c.last_checkpoint_ms = r[13].as<int64_t>();
  c.started = attempt.has_start_time();
  c.start_ms = domain::UnixMillis(attempt.start_time());
  if (spec.has_time_limit()) {
    c.time_limit_ms = spec.time_limit().seconds() * 1000 +
                      spec.time_limit().nanos() / 1'000'000;
  }
  if (attempt.has_end_time()) c.end_ms = domain::UnixMillis(attempt.end_time());
  c.failure_class = attempt.failure_class();

  return c;
}

// Every attempt a prepared candidate statement returns (CandidateOf), in one
// read transaction.
template <typename... Params>
absl::StatusOr<std::vector<MeterCandidate>> ReadCandidates(
    Database* db, const char* statement, const Params&... params) {
  std::vector<MeterCandidate> out;
  absl::Status s = db->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r : txn.exec_prepared(statement, params...)) {
      absl::StatusOr<MeterCandidate> c = CandidateOf(r);
      if (!c.ok()) return c.status();
      out.push_back(*std::move(c));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

// Adds the stored rates, spot prices and commitments to `book`. They were
// checked when added, so they go in as they are (no month is closed to them);
// one the book refuses means the tables were changed behind the store's back.
template <typename Txn>
absl::Status LoadStoredPrices(Txn& txn, pricing::PriceBook& book) {
  for (const pqxx::row& r : txn.exec_prepared("acct_rates")) {
    absl::Status added = book.AddRate(
        {.flavor = r[0].as<std::string>(),
         .resource = static_cast<pricing::Resource>(r[1].as<int>()),
         .price_per_unit_hour = {.micros = r[3].as<int64_t>()},
         .effective_time = r[2].as<int64_t>()},
        /*closed_before=*/0);
    if (!added.ok()) return absl::DataLossError(added.message());
  }
  for (const pqxx::row& r : txn.exec_prepared("acct_spot")) {
    absl::Status added =
        book.AddSpotPrice({.flavor = r[0].as<std::string>(),
                           .gpu_hour_price = {.micros = r[2].as<int64_t>()},
                           .effective_time = r[1].as<int64_t>()},
                          0);
    if (!added.ok()) return absl::DataLossError(added.message());
  }
  for (const pqxx::row& r : txn.exec_prepared("acct_commitments")) {
    absl::Status added =
        book.AddCommitment({.flavor = r[0].as<std::string>(),
                            .amount = {.micros = r[3].as<int64_t>()},
                            .start_time = r[1].as<int64_t>(),
                            .end_time = r[2].as<int64_t>()},
                           0);
    if (!added.ok()) return absl::DataLossError(added.message());
  }
  return absl::OkStatus();
}

// The advisory lock (transaction-scoped) that serializes changes of the
// rollups, from a batch's first rollup statement (or a rebuild's) to its
// commit: two meters' batches, or a batch and a bulk rebuild, take turns, and
// each sees the lines the other committed.
constexpr int64_t kRollupLock = 0x7472636b726f6c6c;  // "trckroll"

TimeMs HourOf(TimeMs t) { return t - t % pricing::kMsPerHour; }

// A rollup row's key columns and sums (migration 0007_usage_rollups.sql).
constexpr char kRollupKeys[] =
    "tenant, project, queue, user_name, cluster, flavor, resource";
const std::vector<std::string>& RollupSumColumns() {
  static const std::vector<std::string>* const kColumns =
      new std::vector<std::string>{"lines",
                                   "cost_micros",
                                   "tenant_cost_micros",
                                   "platform_cost_micros",
                                   "lost_work_cost_micros",
                                   "list_cost_micros",
                                   "quantity",
                                   "lost_quantity",
                                   "attempts",
                                   "spot_gap_lines"};
  return *kColumns;
}
// The sums of the lines of a group, in RollupSumColumns's order.
constexpr char kLineAggregates[] =
    "count(*), sum(cost_micros), sum(tenant_cost_micros), "
    "sum(platform_cost_micros), coalesce(sum(cost_micros) FILTER (WHERE "
    "lost_work), 0), sum(list_cost_micros), sum(amount::numeric * (end_ms - "
    "start_ms)), coalesce(sum(amount::numeric * (end_ms - start_ms)) FILTER "
    "(WHERE lost_work), 0), count(*) FILTER (WHERE attempt_start), count(*) "
    "FILTER (WHERE spot_price_gap)";

// The hour rollups of the lines whose period is in `where` (SQL on
// usage_lines): period_start_ms, the keys, the sums.
std::string HourRollupSelect(const std::string& where) {
  return absl::StrCat("SELECT period_start_ms, ", kRollupKeys, ", ",
                      kLineAggregates, " FROM usage_lines ", where,
                      " GROUP BY period_start_ms, ", kRollupKeys);
}

// Day and month rollups from the hour rollups.
std::string DayMonthFromHours() {
  std::vector<std::string> sums;
  for (const std::string& c : RollupSumColumns()) {
    sums.push_back(absl::StrCat("sum(", c, ")"));
  }
  return absl::StrCat(
      "INSERT INTO usage_rollups SELECT g.g, CASE WHEN g.g = 1 THEN "
      "r.period_start_ms - r.period_start_ms % 86400000 ELSE "
      "utc_month_start_ms(r.period_start_ms) END, ",
      kRollupKeys, ", ", absl::StrJoin(sums, ", "),
      " FROM usage_rollups r CROSS JOIN (VALUES (1::smallint), (2::smallint)) "
      "AS g(g) WHERE r.granularity = 0 GROUP BY 1, 2, ",
      kRollupKeys);
}

// The statement that adds $5 (1 or -1) times the lines with the keys ($1
// job, $2 attempt, $3 resource, $4 start) to the rollups of their hours, days
// and months.
std::string RollupApplyStatement() {
  const std::vector<std::string>& sums = RollupSumColumns();
  std::vector<std::string> signed_sums, set;
  for (const std::string& c : sums) {
    signed_sums.push_back(absl::StrCat("$5::int * sum(h.", c, ")"));
    set.push_back(absl::StrCat(c, " = usage_rollups.", c, " + EXCLUDED.", c));
  }
  return absl::StrCat(
      "WITH h (period_start_ms, ", kRollupKeys, ", ", absl::StrJoin(sums, ", "),
      ") AS (SELECT period_start_ms, ", kRollupKeys, ", ", kLineAggregates,
      " FROM usage_lines u JOIN unnest($1::bigint[], $2::int[], "
      "$3::smallint[], $4::bigint[]) AS k(j, a, r, s) ON u.job_id = k.j AND "
      "u.attempt = k.a AND u.resource = k.r AND u.start_ms = k.s GROUP BY "
      "period_start_ms, ",
      kRollupKeys,
      ") INSERT INTO usage_rollups (granularity, period_start_ms, ",
      kRollupKeys, ", ", absl::StrJoin(sums, ", "),
      ") SELECT g.g, CASE g.g WHEN 0 THEN h.period_start_ms WHEN 1 THEN "
      "h.period_start_ms - h.period_start_ms % 86400000 ELSE "
      "utc_month_start_ms(h.period_start_ms) END, ",
      kRollupKeys, ", ", absl::StrJoin(signed_sums, ", "),
      " FROM h CROSS JOIN (VALUES (0::smallint), (1::smallint), "
      "(2::smallint)) AS g(g) GROUP BY 1, 2, ",
      kRollupKeys, " ORDER BY 1, 2, ", kRollupKeys,
      " ON CONFLICT (granularity, period_start_ms, ", kRollupKeys,
      ") DO UPDATE SET ", absl::StrJoin(set, ", "));
}

// Line keys, as four arrays.
struct LineKeys {
  ArrayLiteral jobs, attempts, resources, starts;
  size_t size = 0;
  void Add(int64_t job, int32_t attempt, int resource, TimeMs start) {
    jobs.Int(job);
    attempts.Int(attempt);
    resources.Int(resource);
    starts.Int(start);
    ++size;
  }
};

// Adds `sign` times the stored lines with `keys` to the rollups.
void ApplyToRollups(pqxx::work& txn, const LineKeys& keys, int sign) {
  if (keys.size == 0) return;
  txn.exec_prepared("acct_rollup_apply", keys.jobs.str(), keys.attempts.str(),
                    keys.resources.str(), keys.starts.str(), sign);
}

// A numeric's integer text as __int128 (rollup sums are integers).
absl::StatusOr<__int128> Int128Of(const pqxx::field& f) {
  if (f.is_null()) return 0;
  std::string_view v(f.c_str(), f.size());
  bool negative = false;
  if (!v.empty() && v.front() == '-') {
    negative = true;
    v.remove_prefix(1);
  }
  if (v.empty()) return absl::DataLossError("rollup: empty number");
  __int128 out = 0;
  for (char c : v) {
    if (c < '0' || c > '9' ||
        out > (std::numeric_limits<__int128>::max() - 9) / 10) {
      return absl::DataLossError(
          absl::StrCat("rollup: not an integer that fits: ", f.c_str()));
    }
    out = out * 10 + (c - '0');
  }
  return negative ? -out : out;
}

// The rollup column of a report dimension ("" for kJob).
const char* RollupColumn(pricing::Dimension d) {
  switch (d) {
    case pricing::Dimension::kTenant:
      return "tenant";
    case pricing::Dimension::kProject:
      return "project";
    case pricing::Dimension::kUser:
      return "user_name";
    case pricing::Dimension::kQueue:
      return "queue";
    case pricing::Dimension::kCluster:
      return "cluster";
    case pricing::Dimension::kFlavor:
      return "flavor";
    case pricing::Dimension::kResource:
      return "resource";
    case pricing::Dimension::kJob:
      break;
  }
  return "";
}

}  // namespace

AccountingStore::AccountingStore(Database* db) : db_(db) {
  db_->Prepare("acct_currency",
               "SELECT currency FROM accounting_settings WHERE id = 1");
  db_->Prepare("acct_set_currency",
               "INSERT INTO accounting_settings (id, currency) VALUES (1, $1) "
               "ON CONFLICT (id) DO NOTHING");
  db_->Prepare("acct_rates",
               "SELECT flavor, resource, effective_ms, price_micros FROM "
               "price_rates ORDER BY flavor, resource, effective_ms");
  db_->Prepare("acct_spot",
               "SELECT flavor, effective_ms, price_micros FROM spot_prices "
               "ORDER BY flavor, effective_ms");
  db_->Prepare("acct_commitments",
               "SELECT flavor, start_ms, end_ms, amount_micros FROM "
               "commitments ORDER BY id");
  db_->Prepare("acct_insert_rates",
               "INSERT INTO price_rates (flavor, resource, effective_ms, "
               "price_micros) SELECT * FROM unnest($1::text[], "
               "$2::smallint[], $3::bigint[], $4::bigint[])");
  db_->Prepare("acct_insert_spot",
               "INSERT INTO spot_prices (flavor, effective_ms, price_micros) "
               "SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])");
  db_->Prepare("acct_insert_commitments",
               "INSERT INTO commitments (flavor, start_ms, end_ms, "
               "amount_micros) SELECT * FROM unnest($1::text[], $2::bigint[], "
               "$3::bigint[], $4::bigint[])");
  db_->Prepare(
      "acct_candidates",
      absl::StrCat(kCandidateSelect,
                   "a.start_time IS NOT NULL AND NOT a.metered_final AND "
                   "(a.job_id, a.idx) > ($1, $2) "
                   "ORDER BY a.job_id, a.idx LIMIT $3 FOR UPDATE OF a SKIP "
                   "LOCKED"));
  db_->Prepare(
      "acct_attempts_in",
      absl::StrCat(
          kCandidateSelect,
          "a.start_time IS NOT NULL AND a.start_time < to_timestamp($2::bigint "
          "/ 1000.0) AND "
          "(a.end_time IS NULL OR a.end_time > to_timestamp($1::bigint "
          "/ 1000.0)) ORDER BY a.job_id, a.idx"));
  db_->Prepare("acct_old_keys",
               "SELECT u.job_id, u.attempt, u.resource, u.start_ms FROM "
               "usage_lines u JOIN unnest($1::bigint[], $2::int[], "
               "$3::bigint[]) AS w(j, a, f) ON u.job_id = w.j AND u.attempt = "
               "w.a AND u.start_ms >= w.f");
  db_->Prepare(
      "acct_upsert_lines",
      absl::StrCat(
          "INSERT INTO usage_lines (", kLineColumns,
          ") SELECT * FROM unnest($1::bigint[], $2::int[], $3::smallint[], "
          "$4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], "
          "$9::text[], $10::text[], $11::text[], $12::text[], $13::bool[], "
          "$14::bigint[], $15::bigint[], $16::smallint[], $17::bool[], "
          "$18::bigint[], $19::bool[], $20::bigint[], $21::bigint[], "
          "$22::bool[], $23::bigint[], $24::bool[]) ON CONFLICT (job_id, "
          "attempt, resource, start_ms) DO "
          "UPDATE SET end_ms = EXCLUDED.end_ms, period_start_ms = "
          "EXCLUDED.period_start_ms, tenant = EXCLUDED.tenant, project = "
          "EXCLUDED.project, queue = EXCLUDED.queue, user_name = "
          "EXCLUDED.user_name, cluster = EXCLUDED.cluster, flavor = "
          "EXCLUDED.flavor, spot = EXCLUDED.spot, amount = EXCLUDED.amount, "
          "unit_price_micros = EXCLUDED.unit_price_micros, price_source = "
          "EXCLUDED.price_source, spot_price_gap = EXCLUDED.spot_price_gap, "
          "cost_micros = EXCLUDED.cost_micros, lost_work = "
          "EXCLUDED.lost_work, tenant_cost_micros = "
          "EXCLUDED.tenant_cost_micros, platform_cost_micros = "
          "EXCLUDED.platform_cost_micros, open = EXCLUDED.open, "
          "list_cost_micros = EXCLUDED.list_cost_micros, attempt_start = "
          "EXCLUDED.attempt_start"));
  db_->Prepare("acct_delete_lines",
               "DELETE FROM usage_lines WHERE (job_id, attempt, resource, "
               "start_ms) IN (SELECT * FROM unnest($1::bigint[], $2::int[], "
               "$3::smallint[], $4::bigint[]))");
  db_->Prepare("acct_job_costs", JobCostsQuery());
  db_->Prepare("acct_cursors",
               "UPDATE attempts SET metered_until_ms = u.m, metered_final = "
               "u.f FROM unnest($1::bigint[], $2::int[], $3::bigint[], "
               "$4::bool[]) AS u(j, i, m, f) WHERE attempts.job_id = u.j AND "
               "attempts.idx = u.i");
  db_->Prepare(
      "acct_list_lines",
      absl::StrCat(
          "SELECT ", kLineColumns,
          " FROM usage_lines WHERE ($1 = '' OR tenant = $1) AND ($2 = 0 OR "
          "job_id = $2) AND period_start_ms >= $3 AND period_start_ms < $4 "
          "AND (job_id, attempt, resource, start_ms) > ($5, $6, $7, $8) "
          "ORDER BY job_id, attempt, resource, start_ms LIMIT $9"));
  db_->Prepare(
      "acct_load_lines",
      absl::StrCat(
          "SELECT ", QualifiedLineColumns("u"),
          ", coalesce(j.labels::text, '{}') FROM usage_lines u LEFT "
          "JOIN jobs j ON j.id = u.job_id WHERE ($1 = '' OR u.tenant = $1) AND "
          "u.period_start_ms >= $2 AND u.period_start_ms < $3"));
  db_->Prepare("acct_rates_at",
               "SELECT DISTINCT ON (flavor, resource) flavor, resource, "
               "price_micros FROM price_rates WHERE effective_ms <= $1 ORDER "
               "BY flavor, resource, effective_ms DESC");
  db_->Prepare("acct_spot_at",
               "SELECT DISTINCT ON (flavor) flavor, price_micros FROM "
               "spot_prices WHERE effective_ms <= $1 ORDER BY flavor, "
               "effective_ms DESC");
  db_->Prepare("acct_budgets",
               "SELECT tenant, id, project, version, body FROM budgets ORDER "
               "BY tenant, id");
  db_->Prepare("acct_budget_status",
               "SELECT tenant, id, month_start_ms, spent_micros, "
               "forecast_micros, active_action, notified_percent, "
               "budget_version, status_ms FROM budget_status WHERE ($1 = '' "
               "OR tenant = $1) ORDER BY tenant, id");
  db_->Prepare("acct_cost_by_project",
               "SELECT tenant, project, sum(tenant_cost_micros)::bigint FROM "
               "usage_lines WHERE period_start_ms >= $1 AND period_start_ms < "
               "$2 AND tenant IN (SELECT DISTINCT tenant FROM budgets) GROUP "
               "BY tenant, project");
  db_->Prepare(
      "acct_open_budgeted",
      absl::StrCat(kCandidateSelect,
                   "a.end_time IS NULL AND j.tenant IN (SELECT DISTINCT tenant "
                   "FROM budgets) ORDER BY a.job_id, a.idx"));
  db_->Prepare(
      "acct_upsert_budget_status",
      "INSERT INTO budget_status (tenant, id, month_start_ms, spent_micros, "
      "forecast_micros, active_action, notified_percent, budget_version, "
      "status_ms) SELECT u.* FROM unnest($1::text[], $2::text[], "
      "$3::bigint[], $4::bigint[], $5::bigint[], $6::smallint[], $7::int[], "
      "$8::bigint[], $9::bigint[]) AS u(t, i, m, s, f, a, n, v, at) JOIN "
      "budgets b ON b.tenant = u.t AND b.id = u.i ON CONFLICT (tenant, id) DO "
      "UPDATE SET month_start_ms = EXCLUDED.month_start_ms, spent_micros = "
      "EXCLUDED.spent_micros, forecast_micros = EXCLUDED.forecast_micros, "
      "active_action = EXCLUDED.active_action, notified_percent = "
      "EXCLUDED.notified_percent, budget_version = EXCLUDED.budget_version, "
      "status_ms = EXCLUDED.status_ms");
  db_->Prepare("acct_rollup_apply", RollupApplyStatement());
  // Rollup rows left without lines, of the hours $1 and their days and
  // months.
  db_->Prepare("acct_rollup_prune",
               "DELETE FROM usage_rollups WHERE lines = 0 AND ((granularity = "
               "0 AND period_start_ms = ANY($1::bigint[])) OR (granularity = 1 "
               "AND period_start_ms IN (SELECT h - h % 86400000 FROM "
               "unnest($1::bigint[]) AS h)) OR (granularity = 2 AND "
               "period_start_ms IN (SELECT utc_month_start_ms(h) FROM "
               "unnest($1::bigint[]) AS h)))");
  // Idle cost (migration 0008_idle_cost.sql).
  db_->Prepare("acct_idle_lower",
               "UPDATE idle_state SET computed_until_ms = least("
               "computed_until_ms, $1::bigint - $1::bigint % 3600000)");
  db_->Prepare(
      "acct_idle_dirty",
      "INSERT INTO idle_dirty_hours SELECT h FROM unnest($1::bigint[]) "
      "AS h WHERE h < (SELECT computed_until_ms FROM idle_state) ON "
      "CONFLICT DO NOTHING");
  db_->Prepare("acct_idle_state",
               "SELECT computed_until_ms FROM idle_state FOR UPDATE");
  db_->Prepare("acct_idle_dirty_hours",
               "SELECT period_start_ms FROM idle_dirty_hours WHERE "
               "period_start_ms < $1");
  db_->Prepare(
      "acct_idle_capacity",
      "SELECT flavor, start_ms, coalesce(end_ms, $2), gpus, "
      "cpu_millis, memory_bytes FROM pool_capacity WHERE start_ms < $2 "
      "AND (end_ms IS NULL OR end_ms > $1) ORDER BY flavor, start_ms");
  db_->Prepare("acct_idle_flavors", "SELECT id, body FROM flavors");
  db_->Prepare("acct_idle_allocated",
               "SELECT period_start_ms, flavor, tenant, sum(cost_micros) FROM "
               "usage_rollups WHERE granularity = 0 AND period_start_ms = "
               "ANY($1::bigint[]) GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");
  db_->Prepare(
      "acct_idle_clear",
      "DELETE FROM idle_lines WHERE period_start_ms = ANY($1::bigint[])");
  db_->Prepare(
      "acct_idle_insert_lines",
      "INSERT INTO idle_lines (period_start_ms, flavor, reserved, paid_micros, "
      "allocated_micros, idle_micros, spot_price_gap) SELECT * FROM "
      "unnest($1::bigint[], $2::text[], $3::boolean[], $4::bigint[], "
      "$5::bigint[], $6::bigint[], $7::boolean[])");
  db_->Prepare("acct_idle_insert_shares",
               "INSERT INTO idle_shares (period_start_ms, flavor, tenant, "
               "micros) SELECT * FROM unnest($1::bigint[], $2::text[], "
               "$3::text[], $4::bigint[])");
  db_->Prepare(
      "acct_idle_done",
      "WITH d AS (DELETE FROM idle_dirty_hours WHERE period_start_ms = "
      "ANY($1::bigint[])) UPDATE idle_state SET computed_until_ms = $2");
  db_->Prepare("acct_idle_lines",
               "SELECT period_start_ms, flavor, reserved, paid_micros, "
               "allocated_micros, idle_micros, spot_price_gap FROM idle_lines "
               "WHERE period_start_ms >= $1 AND period_start_ms < $2 AND ($3 = "
               "'' OR flavor = $3) ORDER BY period_start_ms, flavor");
  db_->Prepare(
      "acct_idle_shares",
      "SELECT period_start_ms, flavor, tenant, micros FROM idle_shares "
      "WHERE period_start_ms >= $1 AND period_start_ms < $2 AND ($3 = "
      "'' OR flavor = $3) AND ($4 = '' OR tenant = $4) ORDER BY "
      "period_start_ms, flavor, tenant");
  db_->Prepare("acct_capacity_history",
               "SELECT flavor, start_ms, end_ms, nodes, gpus, cpu_millis, "
               "memory_bytes FROM pool_capacity WHERE flavor = $1 ORDER BY "
               "start_ms");
  PrepareJobRowStatements(db_);
}

absl::StatusOr<std::string> AccountingStore::Currency(
    std::string_view default_currency) {
  std::string out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    pqxx::result currency = txn.exec_prepared("acct_currency");
    out = currency.empty() ? std::string(default_currency)
                           : currency[0][0].as<std::string>();
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<pricing::PriceBook> AccountingStore::LoadPriceBook(
    std::string_view default_currency) {
  std::optional<pricing::PriceBook> book;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    pqxx::result currency = txn.exec_prepared("acct_currency");
    absl::StatusOr<pricing::PriceBook> created = pricing::PriceBook::Create(
        currency.empty() ? default_currency : currency[0][0].as<std::string>());
    if (!created.ok()) return created.status();
    if (absl::Status loaded = LoadStoredPrices(txn, *created); !loaded.ok())
      return loaded;
    book = *std::move(created);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return *std::move(book);
}

absl::StatusOr<pricing::PriceBook> AccountingStore::AddPrices(
    const PriceChange& change, TimeMs closed_before,
    std::string_view field_prefix, const AuditRecord* audit) {
  // The first price's currency decides the book's when none is stored.
  std::string first_currency;
  if (!change.rates.empty()) {
    first_currency = change.rates[0].price_per_unit_hour.currency_code;
  } else if (!change.spot_prices.empty()) {
    first_currency = change.spot_prices[0].gpu_hour_price.currency_code;
  } else if (!change.commitments.empty()) {
    first_currency = change.commitments[0].amount.currency_code;
  }
  std::optional<pricing::PriceBook> result;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    txn.exec_params("SELECT pg_advisory_xact_lock($1)", kPriceBookLock);
    pqxx::result currency = txn.exec_prepared("acct_currency");
    const bool new_book = currency.empty();
    std::string book_currency =
        new_book ? first_currency : currency[0][0].as<std::string>();
    absl::StatusOr<pricing::PriceBook> created =
        pricing::PriceBook::Create(book_currency);
    if (!created.ok()) {
      return domain::FieldError(
          absl::StrCat(std::string(field_prefix),
                       change.rates.empty()
                           ? (change.spot_prices.empty()
                                  ? "commitment.amount.currency_code"
                                  : "spot_price.gpu_hour_price.currency_code")
                           : "rate.price_per_unit_hour.currency_code"),
          "INVALID_CURRENCY",
          absl::StrCat("must be an ISO 4217 currency code, got \"",
                       book_currency, "\""));
    }
    pricing::PriceBook book = *std::move(created);
    TY_RETURN_IF_ERROR(LoadStoredPrices(txn, book));
    // Each entry through the book's checks; an error names the entry.
    auto prefixed = [&](const absl::Status& st, std::string_view list, size_t i,
                        size_t n) -> absl::Status {
      return domain::PrefixField(
          st, n > 1 ? domain::JoinField(
                          field_prefix,
                          domain::IndexField(list, static_cast<int64_t>(i)))
                    : std::string(field_prefix));
    };
    ArrayLiteral rate_flavors, rate_resources, rate_times, rate_prices;
    for (size_t i = 0; i < change.rates.size(); ++i) {
      const pricing::RateVersion& rate = change.rates[i];
      if (absl::Status st = book.AddRate(rate, closed_before); !st.ok())
        return prefixed(st, "rates", i, change.rates.size());
      rate_flavors.Text(rate.flavor);
      rate_resources.Int(static_cast<int>(rate.resource));
      rate_times.Int(rate.effective_time);
      rate_prices.Int(rate.price_per_unit_hour.micros);
    }
    ArrayLiteral spot_flavors, spot_times, spot_prices;
    for (size_t i = 0; i < change.spot_prices.size(); ++i) {
      const pricing::SpotPrice& spot = change.spot_prices[i];
      if (absl::Status st = book.AddSpotPrice(spot, closed_before); !st.ok())
        return prefixed(st, "spot_prices", i, change.spot_prices.size());
      spot_flavors.Text(spot.flavor);
      spot_times.Int(spot.effective_time);
      spot_prices.Int(spot.gpu_hour_price.micros);
    }
    ArrayLiteral c_flavors, c_starts, c_ends, c_amounts;
    for (size_t i = 0; i < change.commitments.size(); ++i) {
      const pricing::Commitment& c = change.commitments[i];
      if (absl::Status st = book.AddCommitment(c, closed_before); !st.ok())
        return prefixed(st, "commitments", i, change.commitments.size());
      c_flavors.Text(c.flavor);
      c_starts.Int(c.start_time);
      c_ends.Int(c.end_time);
      c_amounts.Int(c.amount.micros);
    }
    if (new_book) txn.exec_prepared("acct_set_currency", book_currency);
    if (!change.rates.empty()) {
      txn.exec_prepared("acct_insert_rates", rate_flavors.str(),
                        rate_resources.str(), rate_times.str(),
                        rate_prices.str());
    }
    if (!change.spot_prices.empty()) {
      txn.exec_prepared("acct_insert_spot", spot_flavors.str(),
                        spot_times.str(), spot_prices.str());
    }
    if (!change.commitments.empty()) {
      txn.exec_prepared("acct_insert_commitments", c_flavors.str(),
                        c_starts.str(), c_ends.str(), c_amounts.str());
    }
    // What was paid from the earliest instant a new price applies to may have
    // changed: the idle lines from its hour on are computed again.
    std::optional<TimeMs> earliest;
    auto earlier = [&](TimeMs t) {
      if (!earliest.has_value() || t < *earliest) earliest = t;
    };
    for (const auto& r : change.rates) earlier(r.effective_time);
    for (const auto& p : change.spot_prices) earlier(p.effective_time);
    for (const auto& c : change.commitments) earlier(c.start_time);
    if (earliest.has_value()) txn.exec_prepared("acct_idle_lower", *earliest);
    if (audit != nullptr) InsertAudit(txn, *audit);
    result = std::move(book);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return *std::move(result);
}

namespace {

// The cost events of a metering batch (CostEvents), appended to the outbox
// last, as AppendEvents asks.
void WriteCostEvents(
    pqxx::work& txn,
    const std::vector<std::pair<MeterCandidate, MeterWrite>>& writes,
    const CostEvents& cost_events) {
  std::vector<int64_t> due;
  for (const auto& [c, w] : writes) {
    if (cost_events.due(c.job_id, w.final)) due.push_back(c.job_id);
  }
  if (due.empty()) return;
  std::sort(due.begin(), due.end());
  due.erase(std::unique(due.begin(), due.end()), due.end());
  std::vector<PendingEvent> events;
  for (const pqxx::row& r : txn.exec_prepared("acct_job_costs", IdArray(due))) {
    trainyard::v1::JobEvent e;
    if (!SetJobCost(r, e.mutable_cost())) continue;
    const int64_t id = r[kJobCostId].as<int64_t>();
    const std::string tenant = r[kJobCostTenant].as<std::string>();
    e.set_type(trainyard::v1::JOB_EVENT_TYPE_COST_UPDATED);
    e.set_job(JobName(tenant, id));
    e.set_tenant(tenant);
    e.set_queue(r[kJobCostQueue].as<std::string>());
    e.set_job_set(r[kJobCostJobSet].as<std::string>());
    const trainyard::v1::JobCost& cost = e.cost();
    e.set_reason(cost.final() ? "COST_FINAL" : "COST_ACCRUED");
    e.set_message(absl::StrCat(
        "spent ", pricing::MicrosToDecimal(cost.spent().micros()), " ",
        cost.spent().currency_code(), " (lost work ",
        pricing::MicrosToDecimal(cost.lost_work().micros()), "), ",
        cost.gpu_hours(), " GPU-hours", cost.final() ? ", final" : ""));
    *e.mutable_time() = ToTimestamp(cost_events.time);
    events.push_back({tenant, id, std::move(e)});
  }
  AppendEvents(txn, events);
}

}  // namespace

absl::StatusOr<MeterBatchResult> AccountingStore::MeterBatch(
    int64_t after_job_id, int32_t after_attempt, int limit,
    absl::FunctionRef<absl::StatusOr<MeterWrite>(const MeterCandidate&)>
        meter,
    const CostEvents* cost_events) {
  MeterBatchResult result;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    result = MeterBatchResult();
    pqxx::result rows = txn.exec_prepared("acct_candidates", after_job_id,
                                          after_attempt, limit);
    // What `meter` made of each attempt it could meter.
    std::vector<std::pair<MeterCandidate, MeterWrite>> writes;
    for (const pqxx::row& r : rows) {
      absl::StatusOr<MeterCandidate> decoded = CandidateOf(r);
      if (!decoded.ok()) return decoded.status();
      result.last_job_id = decoded->job_id;
      result.last_attempt = decoded->attempt;
      absl::StatusOr<MeterWrite> write = meter(*decoded);
      if (!write.ok()) {
        result.failed.emplace_back(JobName(decoded->tenant, decoded->job_id),
                                   write.status());
        continue;
      }
      writes.emplace_back(*std::move(decoded), *std::move(write));
    }
    if (writes.empty()) return absl::OkStatus();
    // Every attempt's stored lines from its replace_from on, in one query:
    // those the new lines no longer cover are deleted.
    using Key = std::tuple<int64_t, int32_t, int, int64_t>;
    std::set<Key> stale;
    {
      ArrayLiteral jobs, attempts, froms;
      for (const auto& [c, w] : writes) {
        jobs.Int(c.job_id);
        attempts.Int(c.attempt);
        froms.Int(w.replace_from);
      }
      for (const pqxx::row& old : txn.exec_prepared(
               "acct_old_keys", jobs.str(), attempts.str(), froms.str())) {
        stale.emplace(old[0].as<int64_t>(), old[1].as<int32_t>(),
                      old[2].as<int>(), old[3].as<int64_t>());
      }
    }
    ArrayLiteral cols[24];
    // The keys of the lines the batch writes, and of the stored lines it
    // overwrites or deletes.
    LineKeys written, replaced;
    size_t lines = 0;
    ArrayLiteral cursor_jobs, cursor_attempts, cursor_until, cursor_final;
    // The charge periods (UTC hours) of every line written or deleted, whose
    // rollups may be left without lines. A line's period is the hour of its
    // start.
    std::set<TimeMs> touched_hours;
    for (const Key& k : stale) touched_hours.insert(HourOf(std::get<3>(k)));
    for (const auto& [c, w] : writes) {
      for (const LedgerLine& line : w.lines) {
        const bool stored =
            stale.erase({c.job_id, c.attempt, static_cast<int>(line.resource),
                         line.start}) > 0;
        // The line overwrites a stored one: one of the stored lines from
        // replace_from on, or possibly one that starts before it (the line
        // that holds replace_from, or earlier ones an interruption's cut
        // brings back).
        if (stored || line.start < w.replace_from) {
          replaced.Add(c.job_id, c.attempt, static_cast<int>(line.resource),
                       line.start);
        }
        written.Add(c.job_id, c.attempt, static_cast<int>(line.resource),
                    line.start);
        cols[0].Int(c.job_id);
        cols[1].Int(c.attempt);
        cols[2].Int(static_cast<int>(line.resource));
        cols[3].Int(line.start);
        cols[4].Int(line.end);
        cols[5].Int(line.period_start);
        cols[6].Text(c.tenant);
        cols[7].Text(c.project);
        cols[8].Text(c.queue);
        cols[9].Text(c.user);
        cols[10].Text(c.cluster);
        cols[11].Text(c.flavor);
        cols[12].Bool(line.spot);
        cols[13].Int(line.amount);
        cols[14].Int(line.unit_price_micros);
        cols[15].Int(static_cast<int>(line.price_source));
        cols[16].Bool(line.spot_price_gap);
        cols[17].Int(line.cost_micros);
        cols[18].Bool(line.lost_work);
        cols[19].Int(line.tenant_cost_micros);
        cols[20].Int(line.platform_cost_micros);
        cols[21].Bool(line.open);
        cols[22].Int(line.list_cost_micros);
        cols[23].Bool(line.attempt_start);
        touched_hours.insert(HourOf(line.start));
        ++lines;
      }
      cursor_jobs.Int(c.job_id);
      cursor_attempts.Int(c.attempt);
      cursor_until.Int(w.metered_until_ms);
      cursor_final.Bool(w.final);
      ++result.attempts;
    }
    // The rollups move by what the batch changes: minus the stored lines it
    // overwrites or deletes, plus the lines it writes (below), under
    // kRollupLock to the commit. Exact whatever changed, and the work of the
    // batch's own lines only.
    for (const auto& [job, attempt, resource, start] : stale) {
      replaced.Add(job, attempt, resource, start);
    }
    if (replaced.size > 0 || written.size > 0) {
      txn.exec_params("SELECT pg_advisory_xact_lock($1)", kRollupLock);
    }
    ApplyToRollups(txn, replaced, -1);
    if (lines > 0) {
      txn.exec_prepared(
          "acct_upsert_lines", cols[0].str(), cols[1].str(), cols[2].str(),
          cols[3].str(), cols[4].str(), cols[5].str(), cols[6].str(),
          cols[7].str(), cols[8].str(), cols[9].str(), cols[10].str(),
          cols[11].str(), cols[12].str(), cols[13].str(), cols[14].str(),
          cols[15].str(), cols[16].str(), cols[17].str(), cols[18].str(),
          cols[19].str(), cols[20].str(), cols[21].str(), cols[22].str(),
          cols[23].str());
      result.lines_upserted = static_cast<int>(lines);
    }
    if (!stale.empty()) {
      ArrayLiteral jobs, attempts, resources, starts;
      for (const auto& [job, attempt, resource, start] : stale) {
        jobs.Int(job);
        attempts.Int(attempt);
        resources.Int(resource);
        starts.Int(start);
      }
      txn.exec_prepared("acct_delete_lines", jobs.str(), attempts.str(),
                        resources.str(), starts.str());
      result.lines_deleted = static_cast<int>(stale.size());
    }
    ApplyToRollups(txn, written, 1);
    if (!touched_hours.empty()) {
      ArrayLiteral hours;
      for (TimeMs h : touched_hours) hours.Int(h);
      txn.exec_prepared("acct_rollup_prune", hours.str());
      // Hours whose idle lines were computed already are computed again.
      txn.exec_prepared("acct_idle_dirty", hours.str());
    }
    txn.exec_prepared("acct_cursors", cursor_jobs.str(), cursor_attempts.str(),
                      cursor_until.str(), cursor_final.str());
    if (cost_events != nullptr) WriteCostEvents(txn, writes, *cost_events);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return result;
}

absl::Status AccountingStore::RebuildRollups() {
  return db_->Transact([&](pqxx::work& txn) -> absl::Status {
    txn.exec_params("SELECT pg_advisory_xact_lock($1)", kRollupLock);
    txn.exec("DELETE FROM usage_rollups");
    txn.exec(absl::StrCat("INSERT INTO usage_rollups SELECT 0, h.* FROM (",
                          HourRollupSelect(""), ") h"));
    txn.exec(DayMonthFromHours());
    // Every hour with lines may have new allocations: its idle line too.
    txn.exec(
        "UPDATE idle_state SET computed_until_ms = least(computed_until_ms, "
        "coalesce((SELECT min(period_start_ms) FROM usage_lines), "
        "computed_until_ms))");
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<pricing::RollupSum>> AccountingStore::SumRollups(
    const pricing::ReportQuery& q) {
  if (!pricing::RollupsServe(q)) {
    return absl::InvalidArgumentError(
        "rollups cannot serve a query by job or labels");
  }
  TY_ASSIGN_OR_RETURN(const std::vector<TimeMs> bounds,
                      pricing::ReportPeriods(q));
  ArrayLiteral grans, froms, tos, periods;
  for (size_t p = 0; p + 1 < bounds.size(); ++p) {
    for (const pricing::RollupRange& r :
         pricing::CoverWithRollups(bounds[p], bounds[p + 1])) {
      grans.Int(static_cast<int>(r.granularity));
      froms.Int(r.from);
      tos.Int(r.to);
      periods.Int(static_cast<int64_t>(p));
    }
  }
  // Filters: one value and one flag per rollup dimension, in this order.
  const pricing::Dimension kFiltered[] = {
      pricing::Dimension::kTenant,  pricing::Dimension::kProject,
      pricing::Dimension::kUser,    pricing::Dimension::kQueue,
      pricing::Dimension::kCluster, pricing::Dimension::kFlavor};
  ArrayLiteral values, set;
  std::vector<std::string> where;
  for (size_t i = 0; i < std::size(kFiltered); ++i) {
    auto it = q.filters.find(kFiltered[i]);
    values.Text(it == q.filters.end() ? "" : it->second);
    set.Bool(it != q.filters.end());
    where.push_back(absl::StrCat("(NOT ($6::bool[])[", i + 1, "] OR r.",
                                 RollupColumn(kFiltered[i]), " = ($5::text[])[",
                                 i + 1, "])"));
  }
  int resource = -1;
  if (auto it = q.filters.find(pricing::Dimension::kResource);
      it != q.filters.end()) {
    for (pricing::Resource r : pricing::kAllResources) {
      if (pricing::ResourceLabel(r) == it->second)
        resource = static_cast<int>(r);
    }
    // An unknown resource matches nothing (ValidateReportQuery refuses it).
    if (resource < 0) resource = 99;
  }
  where.push_back("($7::int < 0 OR r.resource = $7::int)");
  std::vector<std::string> group = {"p.idx"};
  for (pricing::Dimension d : q.group_by) {
    group.push_back(absl::StrCat("r.", RollupColumn(d)));
  }
  const std::string sql = absl::StrCat(
      "SELECT ", absl::StrJoin(group, ", "),
      ", sum(r.lines), sum(r.cost_micros), sum(r.tenant_cost_micros), "
      "sum(r.platform_cost_micros), sum(r.lost_work_cost_micros), "
      "sum(r.list_cost_micros), sum(r.quantity) FILTER (WHERE r.resource = "
      "0), sum(r.lost_quantity) FILTER (WHERE r.resource = 0), "
      "sum(r.quantity) FILTER (WHERE r.resource = 1), sum(r.quantity) FILTER "
      "(WHERE r.resource = 2), sum(r.attempts), sum(r.spot_gap_lines) FROM "
      "unnest($1::smallint[], $2::bigint[], $3::bigint[], $4::int[]) AS p(g, "
      "f, t, idx) JOIN usage_rollups r ON r.granularity = p.g AND "
      "r.period_start_ms >= p.f AND r.period_start_ms < p.t WHERE ",
      absl::StrJoin(where, " AND "), " GROUP BY ", absl::StrJoin(group, ", "));
  std::vector<pricing::RollupSum> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    pqxx::result rows =
        txn.exec_params(sql, grans.str(), froms.str(), tos.str(), periods.str(),
                        values.str(), set.str(), resource);
    out.reserve(rows.size());
    for (const pqxx::row& r : rows) {
      pricing::RollupSum& sum = out.emplace_back();
      sum.period = r[0].as<size_t>();
      int c = 1;
      for (pricing::Dimension d : q.group_by) {
        if (d == pricing::Dimension::kResource) {
          sum.keys.emplace_back(pricing::ResourceLabel(
              static_cast<pricing::Resource>(r[c].as<int>())));
        } else {
          sum.keys.push_back(r[c].as<std::string>());
        }
        ++c;
      }
      __int128* fields[] = {&sum.lines,
                            &sum.cost_micros,
                            &sum.tenant_cost_micros,
                            &sum.platform_cost_micros,
                            &sum.lost_work_cost_micros,
                            &sum.list_cost_micros,
                            &sum.gpu_ms,
                            &sum.lost_gpu_ms,
                            &sum.cpu_millicore_ms,
                            &sum.memory_byte_ms,
                            &sum.attempts,
                            &sum.spot_gap_lines};
      for (__int128* f : fields) {
        TY_ASSIGN_OR_RETURN(*f, Int128Of(r[c]));
        ++c;
      }
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<MeterCandidate>> AccountingStore::AttemptsIn(
    TimeMs start_ms, TimeMs end_ms) {
  return ReadCandidates(db_, "acct_attempts_in", start_ms, end_ms);
}

absl::StatusOr<UsagePage> AccountingStore::ListLines(
    const std::string& tenant, int64_t job_id, TimeMs start_ms, TimeMs end_ms,
    const std::string& after, int limit) {
  int64_t a_job = -1, a_start = std::numeric_limits<int64_t>::min();
  int32_t a_attempt = 0, a_resource = 0;
  if (!after.empty()) {
    std::vector<std::string> parts = absl::StrSplit(after, ':');
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &a_job) ||
        !absl::SimpleAtoi(parts[1], &a_attempt) ||
        !absl::SimpleAtoi(parts[2], &a_resource) ||
        !absl::SimpleAtoi(parts[3], &a_start)) {
      return domain::FieldError("page_token", "INVALID_VALUE",
                                "is not a page token of this list");
    }
  }
  UsagePage page;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    page = UsagePage();
    pqxx::result rows =
        txn.exec_prepared("acct_list_lines", tenant, job_id, start_ms, end_ms,
                          a_job, a_attempt, a_resource, a_start, limit + 1);
    for (const pqxx::row& r : rows) {
      if (static_cast<int>(page.lines.size()) == limit) {
        const pqxx::row& last = rows[limit - 1];
        page.next_after =
            absl::StrCat(last[0].as<int64_t>(), ":", last[1].as<int32_t>(), ":",
                         last[2].as<int>(), ":", last[3].as<int64_t>());
        break;
      }
      page.lines.push_back(RowToLine(r));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return page;
}

absl::StatusOr<std::vector<LedgerLine>> AccountingStore::LoadLines(
    const std::string& tenant, TimeMs start_ms, TimeMs end_ms) {
  std::vector<LedgerLine> lines;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    lines.clear();
    for (const pqxx::row& r :
         txn.exec_prepared("acct_load_lines", tenant, start_ms, end_ms)) {
      LedgerLine line = RowToLine(r);
      line.keys.labels = LabelsOf(r[24].as<std::string>());
      lines.push_back(std::move(line));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return lines;
}

absl::StatusOr<std::map<std::string, CurrentPrices>> AccountingStore::PricesAt(
    TimeMs at) {
  std::map<std::string, CurrentPrices> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r : txn.exec_prepared("acct_rates_at", at)) {
      CurrentPrices& p = out[r[0].as<std::string>()];
      const int64_t price = r[2].as<int64_t>();
      switch (static_cast<pricing::Resource>(r[1].as<int>())) {
        case pricing::Resource::kGpu:
          p.gpu_hour = price;
          break;
        case pricing::Resource::kCpu:
          p.cpu_hour = price;
          break;
        case pricing::Resource::kMemory:
          p.gib_hour = price;
          break;
      }
    }
    for (const pqxx::row& r : txn.exec_prepared("acct_spot_at", at)) {
      out[r[0].as<std::string>()].spot_gpu_hour = r[1].as<int64_t>();
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<StoredBudget>> AccountingStore::LoadBudgets() {
  std::vector<StoredBudget> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r : txn.exec_prepared("acct_budgets")) {
      out.push_back({.tenant = r[0].as<std::string>(),
                     .id = r[1].as<std::string>(),
                     .project = r[2].as<std::string>(),
                     .version = r[3].as<int64_t>(),
                     .body = BytesOf(r[4])});
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<BudgetStatusRow>> AccountingStore::LoadBudgetStatus(
    const std::string& tenant) {
  std::vector<BudgetStatusRow> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r : txn.exec_prepared("acct_budget_status", tenant)) {
      out.push_back({.tenant = r[0].as<std::string>(),
                     .id = r[1].as<std::string>(),
                     .month_start_ms = r[2].as<int64_t>(),
                     .spent_micros = r[3].as<int64_t>(),
                     .forecast_micros = r[4].as<int64_t>(),
                     .active_action = r[5].as<int32_t>(),
                     .notified_percent = r[6].as<int32_t>(),
                     .budget_version = r[7].as<int64_t>(),
                     .status_ms = r[8].as<int64_t>()});
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::map<std::pair<std::string, std::string>, int64_t>>
AccountingStore::TenantCostByProject(TimeMs start_ms, TimeMs end_ms) {
  std::map<std::pair<std::string, std::string>, int64_t> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r :
         txn.exec_prepared("acct_cost_by_project", start_ms, end_ms)) {
      out[{r[0].as<std::string>(), r[1].as<std::string>()}] =
          r[2].as<int64_t>();
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<MeterCandidate>>
AccountingStore::OpenBudgetedAttempts() {
  return ReadCandidates(db_, "acct_open_budgeted");
}

absl::Status AccountingStore::WriteBudgetStatus(
    const std::vector<BudgetStatusRow>& rows,
    const std::vector<PendingEvent>& events) {
  if (rows.empty() && events.empty()) return absl::OkStatus();
  return db_->Transact([&](pqxx::work& txn) -> absl::Status {
    ArrayLiteral tenants, ids, months, spent, forecast, actions, notified,
        versions, at;
    for (const BudgetStatusRow& r : rows) {
      tenants.Text(r.tenant);
      ids.Text(r.id);
      months.Int(r.month_start_ms);
      spent.Int(r.spent_micros);
      forecast.Int(r.forecast_micros);
      actions.Int(r.active_action);
      notified.Int(r.notified_percent);
      versions.Int(r.budget_version);
      at.Int(r.status_ms);
    }
    if (!rows.empty()) {
      txn.exec_prepared("acct_upsert_budget_status", tenants.str(), ids.str(),
                        months.str(), spent.str(), forecast.str(),
                        actions.str(), notified.str(), versions.str(),
                        at.str());
    }
    if (!events.empty()) AppendEvents(txn, events);
    return absl::OkStatus();
  });
}

absl::StatusOr<IdlePassResult> AccountingStore::IdlePass(
    TimeMs closed_until, int max_hours, std::string_view default_currency,
    absl::FunctionRef<absl::StatusOr<IdleWrite>(const pricing::PriceBook&,
                                                const IdleInput&)>
        compute) {
  IdlePassResult result;
  absl::Status s = db_->Transact([&](pqxx::work& txn) -> absl::Status {
    result = IdlePassResult();
    // The cursor's row first: node changes and prices (which lower it) wait
    // for this pass, or have committed before what it reads.
    pqxx::result state = txn.exec_prepared("acct_idle_state");
    if (state.empty()) return absl::DataLossError("idle_state has no row");
    const TimeMs cursor = state[0][0].as<int64_t>();
    txn.exec_params("SELECT pg_advisory_xact_lock($1)", kRollupLock);
    std::set<TimeMs> hours;
    for (const pqxx::row& r :
         txn.exec_prepared("acct_idle_dirty_hours", closed_until)) {
      hours.insert(r[0].as<int64_t>());
    }
    TimeMs until = cursor;
    for (int i = 0;
         i < max_hours && until + pricing::kMsPerHour <= closed_until;
         ++i, until += pricing::kMsPerHour) {
      hours.insert(until);
    }
    if (hours.empty()) return absl::OkStatus();
    pqxx::result currency = txn.exec_prepared("acct_currency");
    TY_ASSIGN_OR_RETURN(
        pricing::PriceBook book,
        pricing::PriceBook::Create(currency.empty()
                                       ? default_currency
                                       : currency[0][0].as<std::string>()));
    TY_RETURN_IF_ERROR(LoadStoredPrices(txn, book));
    IdleInput input;
    input.hours.assign(hours.begin(), hours.end());
    ArrayLiteral hour_array;
    for (TimeMs h : input.hours) hour_array.Int(h);
    for (const pqxx::row& r :
         txn.exec_prepared("acct_idle_capacity", input.hours.front(),
                           input.hours.back() + pricing::kMsPerHour)) {
      input.held[r[0].as<std::string>()].push_back(
          {.start_time = r[1].as<int64_t>(),
           .end_time = r[2].as<int64_t>(),
           .gpus = r[3].as<int64_t>(),
           .cpu_millis = r[4].as<int64_t>(),
           .memory_bytes = r[5].as<int64_t>()});
    }
    for (const pqxx::row& r : txn.exec_prepared("acct_idle_flavors")) {
      trainyard::v1::Flavor flavor;
      if (flavor.ParseFromString(BytesOf(r[1])) &&
          flavor.kind() == trainyard::v1::FLAVOR_KIND_SPOT) {
        input.spot.insert(r[0].as<std::string>());
      }
    }
    for (const pqxx::row& r :
         txn.exec_prepared("acct_idle_allocated", hour_array.str())) {
      LedgerLine line;
      line.period_start = r[0].as<int64_t>();
      line.keys.flavor = r[1].as<std::string>();
      line.keys.tenant = r[2].as<std::string>();
      line.cost_micros = r[3].as<int64_t>();
      input.allocated.push_back(std::move(line));
    }
    TY_ASSIGN_OR_RETURN(IdleWrite write, compute(book, input));
    txn.exec_prepared("acct_idle_clear", hour_array.str());
    if (!write.lines.empty()) {
      ArrayLiteral c[7];
      for (const pricing::IdleLine& l : write.lines) {
        c[0].Int(l.period_start);
        c[1].Text(l.pool);
        c[2].Bool(l.reserved);
        c[3].Int(l.paid_micros);
        c[4].Int(l.allocated_micros);
        c[5].Int(l.idle_micros);
        c[6].Bool(l.spot_price_gap);
      }
      txn.exec_prepared("acct_idle_insert_lines", c[0].str(), c[1].str(),
                        c[2].str(), c[3].str(), c[4].str(), c[5].str(),
                        c[6].str());
    }
    if (!write.shares.empty()) {
      ArrayLiteral c[4];
      for (const IdleShareRow& share : write.shares) {
        c[0].Int(share.period_start);
        c[1].Text(share.pool);
        c[2].Text(share.tenant);
        c[3].Int(share.micros);
      }
      txn.exec_prepared("acct_idle_insert_shares", c[0].str(), c[1].str(),
                        c[2].str(), c[3].str());
    }
    txn.exec_prepared("acct_idle_done", hour_array.str(),
                      std::max(cursor, until));
    result.hours = static_cast<int>(input.hours.size());
    result.lines = static_cast<int>(write.lines.size());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return result;
}

absl::StatusOr<std::vector<pricing::IdleLine>> AccountingStore::LoadIdleLines(
    TimeMs start_ms, TimeMs end_ms, const std::string& flavor) {
  std::vector<pricing::IdleLine> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r :
         txn.exec_prepared("acct_idle_lines", start_ms, end_ms, flavor)) {
      out.push_back({.pool = r[1].as<std::string>(),
                     .period_start = r[0].as<int64_t>(),
                     .reserved = r[2].as<bool>(),
                     .paid_micros = r[3].as<int64_t>(),
                     .allocated_micros = r[4].as<int64_t>(),
                     .idle_micros = r[5].as<int64_t>(),
                     .spot_price_gap = r[6].as<bool>()});
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<IdleShareRow>> AccountingStore::LoadIdleShares(
    TimeMs start_ms, TimeMs end_ms, const std::string& flavor,
    const std::string& tenant) {
  std::vector<IdleShareRow> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r : txn.exec_prepared("acct_idle_shares", start_ms,
                                                end_ms, flavor, tenant)) {
      out.push_back({.pool = r[1].as<std::string>(),
                     .period_start = r[0].as<int64_t>(),
                     .tenant = r[2].as<std::string>(),
                     .micros = r[3].as<int64_t>()});
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<CapacityInterval>> AccountingStore::CapacityHistory(
    const std::string& flavor) {
  std::vector<CapacityInterval> out;
  absl::Status s = db_->Read([&](pqxx::read_transaction& txn) -> absl::Status {
    out.clear();
    for (const pqxx::row& r :
         txn.exec_prepared("acct_capacity_history", flavor)) {
      CapacityInterval c{.flavor = r[0].as<std::string>(),
                         .start_ms = r[1].as<int64_t>(),
                         .nodes = r[3].as<int32_t>(),
                         .gpus = r[4].as<int64_t>(),
                         .cpu_millis = r[5].as<int64_t>(),
                         .memory_bytes = r[6].as<int64_t>()};
      if (!r[2].is_null()) c.end_ms = r[2].as<int64_t>();
      out.push_back(std::move(c));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace trainyard::storage::postgres
