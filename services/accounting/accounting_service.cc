#include "services/accounting/accounting_service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "services/accounting/budgets.h"
#include "services/accounting/pricing/budget.h"
#include "services/accounting/pricing/invoice.h"
#include "services/accounting/pricing/report.h"
#include "services/accounting/pricing/rollup.h"
#include "services/api/auth.h"
#include "services/api/handler.h"
#include "services/api/resource_handler.h"
#include "services/api/resource_methods.h"
#include "services/api/resource_util.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/validation.h"
#include "storage/postgres/accounting_store.h"
#include "storage/postgres/object_store.h"
#include "trainyard/v1/accounting.grpc.pb.h"

namespace trainyard::accounting {
namespace {

namespace pg = storage::postgres;
namespace v1 = trainyard::v1;
using api::Access;
using api::Caller;
using api::MutationAudit;
using api::ResourceKey;
using api::ResourceKind;
using pricing::TimeMs;

absl::StatusOr<pricing::Resource> ResourceOf(v1::ResourceName r,
                                             std::string_view field) {
  switch (r) {
    case v1::RESOURCE_NAME_GPU:
      return pricing::Resource::kGpu;
    case v1::RESOURCE_NAME_CPU:
      return pricing::Resource::kCpu;
    case v1::RESOURCE_NAME_MEMORY:
      return pricing::Resource::kMemory;
    default:
      return domain::FieldError(field, "INVALID_VALUE",
                                "must be RESOURCE_NAME_GPU, RESOURCE_NAME_CPU "
                                "or RESOURCE_NAME_MEMORY");
  }
}

v1::ResourceName ResourceNameOf(pricing::Resource r) {
  switch (r) {
    case pricing::Resource::kGpu:
      return v1::RESOURCE_NAME_GPU;
    case pricing::Resource::kCpu:
      return v1::RESOURCE_NAME_CPU;
    case pricing::Resource::kMemory:
      return v1::RESOURCE_NAME_MEMORY;
  }
  return v1::RESOURCE_NAME_UNSPECIFIED;
}

// A required timestamp, in whole milliseconds since the epoch.
absl::StatusOr<TimeMs> MsOf(const google::protobuf::Timestamp& t, bool set,
                            std::string_view field) {
  if (!set) return domain::FieldError(field, "REQUIRED", "is required");
  if (t.nanos() < 0 || t.nanos() > 999'999'999 || t.seconds() < 0 ||
      t.seconds() >= pricing::kMaxTimeMs / 1000) {
    return domain::FieldError(field, "INVALID_VALUE",
                              "must be a time from 1970 to 9999");
  }
  if (t.nanos() % 1'000'000 != 0) {
    return domain::FieldError(field, "INVALID_VALUE",
                              "must be a whole millisecond");
  }
  return domain::UnixMillis(t);
}

google::protobuf::Timestamp TimestampOf(TimeMs ms) {
  google::protobuf::Timestamp t;
  t.set_seconds(ms / 1000);
  t.set_nanos(static_cast<int32_t>(ms % 1000) * 1'000'000);
  return t;
}

v1::Money MoneyOf(int64_t micros, const std::string& currency) {
  v1::Money m;
  m.set_micros(micros);
  m.set_currency_code(currency);
  return m;
}

// Unit-ms in a unit-second of the resource.
__int128 UnitMsPerUnitSecond(pricing::Resource r) {
  return pricing::UnitMsPerUnitHour(r) / 3600;
}

v1::UsageRecord RecordOf(const pricing::LedgerLine& line,
                         const std::string& currency) {
  v1::UsageRecord r;
  r.set_job(line.keys.job);
  r.set_attempt(line.keys.attempt);
  r.set_tenant(line.keys.tenant);
  r.set_project(line.keys.project);
  r.set_queue(line.keys.queue);
  r.set_user(line.keys.user);
  r.set_cluster(line.keys.cluster);
  r.set_flavor(line.keys.flavor);
  r.set_resource(ResourceNameOf(line.resource));
  *r.mutable_start_time() = TimestampOf(line.start);
  *r.mutable_end_time() = TimestampOf(line.end);
  const __int128 quantity = pricing::Quantity(line);
  const __int128 per_second = UnitMsPerUnitSecond(line.resource);
  r.set_quantity_seconds(static_cast<int64_t>(quantity / per_second));
  r.set_quantity(pricing::UnitSecondsDecimal(quantity, line.resource));
  *r.mutable_cost() = MoneyOf(line.cost_micros, currency);
  *r.mutable_lost_work_cost() =
      MoneyOf(line.lost_work ? line.cost_micros : 0, currency);
  if (line.lost_work) {
    r.set_lost_work_attribution(
        line.platform_cost_micros == 0 ? v1::LOST_WORK_ATTRIBUTION_TENANT
        : line.tenant_cost_micros == 0 ? v1::LOST_WORK_ATTRIBUTION_PLATFORM
                                       : v1::LOST_WORK_ATTRIBUTION_SPLIT);
  }
  *r.mutable_charge_period_start() = TimestampOf(line.period_start);
  r.set_amount(line.amount);
  *r.mutable_unit_price() = MoneyOf(line.unit_price_micros, currency);
  r.set_price_source(std::string(pricing::PriceSourceLabel(line.price_source)));
  r.set_spot_price_gap(line.spot_price_gap);
  r.set_spot(line.spot);
  *r.mutable_tenant_cost() = MoneyOf(line.tenant_cost_micros, currency);
  *r.mutable_platform_cost() = MoneyOf(line.platform_cost_micros, currency);
  r.set_open(line.open);
  r.set_lost_work(line.lost_work);
  return r;
}

v1::PriceBook BookProto(const pricing::PriceBook& book) {
  v1::PriceBook out;
  for (const pricing::RateVersion& rate : book.AllRates()) {
    v1::Rate* r = out.add_rates();
    r->set_flavor(rate.flavor);
    r->set_resource(ResourceNameOf(rate.resource));
    *r->mutable_price_per_unit_hour() =
        MoneyOf(rate.price_per_unit_hour.micros, book.currency());
    *r->mutable_effective_time() = TimestampOf(rate.effective_time);
  }
  for (const pricing::SpotPrice& spot : book.AllSpotPrices()) {
    v1::SpotPrice* s = out.add_spot_prices();
    s->set_flavor(spot.flavor);
    *s->mutable_gpu_hour_price() =
        MoneyOf(spot.gpu_hour_price.micros, book.currency());
    *s->mutable_effective_time() = TimestampOf(spot.effective_time);
  }
  for (const pricing::Commitment& c : book.AllCommitments()) {
    v1::Commitment* out_c = out.add_commitments();
    out_c->set_flavor(c.flavor);
    *out_c->mutable_amount() = MoneyOf(c.amount.micros, book.currency());
    *out_c->mutable_start_time() = TimestampOf(c.start_time);
    *out_c->mutable_end_time() = TimestampOf(c.end_time);
  }
  out.set_currency(book.currency());
  return out;
}

// The flavor must exist: a rate for a misspelt flavor would price nothing.
absl::Status CheckFlavor(api::ApiContext& ctx, const std::string& flavor,
                         std::string_view field) {
  if (flavor.empty()) {
    return domain::FieldError(field, "REQUIRED", "is required");
  }
  absl::StatusOr<pg::StoredObject> got =
      ctx.objects->Get(pg::FlavorKind(), {flavor});
  if (got.ok()) return absl::OkStatus();
  if (absl::IsNotFound(got.status())) {
    return domain::FieldError(
        field, "UNKNOWN_FLAVOR",
        absl::StrCat("flavor \"", flavor, "\" does not exist"));
  }
  return got.status();
}

// The tenant of a "tenants/{t}" or "tenants/-" parent ("" for all), after
// checking that the caller may read its accounting.
absl::StatusOr<std::string> FinanceTenant(const Caller& caller,
                                          const std::string& parent) {
  TY_ASSIGN_OR_RETURN(std::string tenant,
                      domain::ParseTenantParent(parent, "parent"));
  if (tenant == domain::kAllId) {
    if (caller.platform_admin || caller.platform_finance) return std::string();
    return absl::PermissionDeniedError(absl::StrCat(
        caller.principal,
        " needs role finance without a tenant (platform finance) or "
        "platform-admin to read the accounting of every tenant"));
  }
  if (caller.ReadsAccountingOf(tenant)) return tenant;
  TY_RETURN_IF_ERROR(api::Require(caller, tenant, api::Permission::kFinance,
                                  domain::TenantName(tenant)));
  return tenant;
}

// --- Budgets ---

constexpr std::string_view kBudgetFields[] = {"project", "monthly_amount",
                                              "thresholds", "user_hourly_cap"};

constexpr Access kBudgetWriters = {.rule = Access::Rule::kTenantRole,
                                   .permission = api::Permission::kFinance};

absl::Status ValidateBudget(const api::ApiContext&, const ResourceKey&,
                            const v1::Budget& budget) {
  if (!budget.project().empty()) {
    TY_RETURN_IF_ERROR(api::CheckNewId("project", budget.project()));
  }
  const std::string& currency = budget.monthly_amount().currency_code();
  if (!currency.empty() && !domain::IsKnownCurrency(currency)) {
    return domain::FieldError("monthly_amount.currency_code", "INVALID_VALUE",
                              "must be an ISO 4217 code such as USD");
  }
  // The cap is money of the same budget: in the amount's currency.
  const std::string& cap_currency = budget.user_hourly_cap().currency_code();
  if (!cap_currency.empty() && !currency.empty() && cap_currency != currency) {
    return domain::FieldError(
        "user_hourly_cap.currency_code", "CURRENCY_MISMATCH",
        absl::StrCat("is ", cap_currency, "; the monthly amount is in ",
                     currency));
  }
  return pricing::ValidateBudgetRule(RuleOf(budget));
}

// The project exists, its scope has no other budget, and the amount and the
// user hourly cap are in the book's currency.
absl::Status CheckBudgetReferences(const api::ApiContext& ctx,
                                   const ResourceKey& key,
                                   const v1::Budget& budget,
                                   const google::protobuf::FieldMask* mask) {
  if (api::Changes(mask, "project")) {
    if (!budget.project().empty()) {
      TY_RETURN_IF_ERROR(api::CheckExists(
          ctx.objects, pg::ProjectKind(), {key[0], budget.project()},
          "budget.project", "UNKNOWN_PROJECT", "project"));
    }
    pg::ListQuery query;
    query.equals = {{"tenant", key[0]}, {"project", budget.project()}};
    query.limit = 2;
    TY_ASSIGN_OR_RETURN(pg::ListPage page,
                        ctx.objects->List(pg::BudgetKind(), query));
    for (const pg::StoredObject& other : page.objects) {
      if (other.key[1] == key[1]) continue;
      return domain::FieldError(
          "budget.project", "BUDGET_EXISTS",
          absl::StrCat(budget.project().empty()
                           ? std::string("the tenant")
                           : absl::StrCat("project ", budget.project()),
                       " already has budget ",
                       domain::BudgetName(key[0], other.key[1])));
    }
  }
  for (const char* field : {"monthly_amount", "user_hourly_cap"}) {
    if (!api::Changes(mask, field)) continue;
    const std::string& currency =
        std::string_view(field) == "monthly_amount"
            ? budget.monthly_amount().currency_code()
            : budget.user_hourly_cap().currency_code();
    if (currency.empty()) continue;
    pg::AccountingStore store(ctx.db);
    TY_ASSIGN_OR_RETURN(std::string book_currency, store.Currency("USD"));
    if (currency != book_currency) {
      return domain::FieldError(
          absl::StrCat("budget.", field, ".currency_code"), "CURRENCY_MISMATCH",
          absl::StrCat("is ", currency, "; the price book is in ",
                       book_currency));
    }
  }
  return absl::OkStatus();
}

void ClearBudgetOutputs(v1::Budget* budget) {
  budget->clear_spent();
  budget->clear_forecast();
  budget->clear_active_action();
}

constexpr ResourceKind<v1::Budget> kBudgets = {
    .field = "budget",
    .plural = "budgets",
    .collection = "budgets",
    .parse_name = &api::ParseKey<&domain::ParseBudgetName>,
    .name_of = &api::KeyName<&domain::BudgetName>,
    .parse_parent = &domain::ParseTenantName,
    .parent_name = &domain::TenantName,
    .in_tenant = true,
    .access = {.create = kBudgetWriters,
               .read = {.rule = Access::Rule::kAccountingReader},
               .update = kBudgetWriters,
               .remove = kBudgetWriters},
    .store = &pg::BudgetKind,
    .extra_columns = [](const v1::Budget& budget)
        -> std::vector<std::optional<std::string>> {
      return {budget.project()};
    },
    .updatable = kBudgetFields,
    .validate = &ValidateBudget,
    .check_references = &CheckBudgetReferences,
    .write_conflicts = [](const ResourceKey& key, const v1::Budget& budget)
        -> std::vector<api::ConstraintMessage> {
      return {
          api::UnknownReference("budgets_tenant_fkey", "parent",
                                "UNKNOWN_TENANT", "tenant", key[0]),
          {.constraint = "budgets_scope",
           .field = "budget.project",
           .reason = "BUDGET_EXISTS",
           .message = absl::StrCat("the scope already has a budget (project \"",
                                   budget.project(), "\")")}};
    },
    .clear_output_only = &ClearBudgetOutputs,
};

// Budgets of one tenant, or ("tenants/-") of every tenant whose accounting
// the caller reads.
absl::StatusOr<pg::ListQuery> SelectBudgets(
    const ResourceKind<v1::Budget>& kind, const Caller& caller,
    const v1::ListBudgetsRequest& request) {
  TY_ASSIGN_OR_RETURN(std::string tenant,
                      FinanceTenant(caller, request.parent()));
  TY_ASSIGN_OR_RETURN(pg::ListQuery query, api::PageOf(kind, request));
  if (!tenant.empty()) query.equals.emplace_back("tenant", tenant);
  return query;
}

// A requested report: the pure query, the report built from the ledger's
// lines, and where the DAY dimension's key goes in each row (-1: none).
struct BuiltReport {
  pricing::ReportQuery query;
  pricing::Report report;
  int day_position = -1;
  v1::ReportStep step = v1::REPORT_STEP_UNSPECIFIED;
};

absl::StatusOr<pricing::Dimension> DimensionOf(v1::ReportDimension d,
                                               std::string_view field) {
  switch (d) {
    case v1::REPORT_DIMENSION_TENANT:
      return pricing::Dimension::kTenant;
    case v1::REPORT_DIMENSION_PROJECT:
      return pricing::Dimension::kProject;
    case v1::REPORT_DIMENSION_QUEUE:
      return pricing::Dimension::kQueue;
    case v1::REPORT_DIMENSION_USER:
      return pricing::Dimension::kUser;
    case v1::REPORT_DIMENSION_FLAVOR:
      return pricing::Dimension::kFlavor;
    case v1::REPORT_DIMENSION_CLUSTER:
      return pricing::Dimension::kCluster;
    case v1::REPORT_DIMENSION_JOB:
      return pricing::Dimension::kJob;
    case v1::REPORT_DIMENSION_RESOURCE:
      return pricing::Dimension::kResource;
    default:
      return domain::FieldError(field, "INVALID_VALUE",
                                "must be a known report dimension");
  }
}

// The report of a valid query `q` of `tenant` ("" = every tenant), with the
// book's currency. A query by rollup keys alone sums the rollups
// (docs/accounting.md, "Rollups"); one by job or labels reads the raw lines.
absl::StatusOr<pricing::Report> ReportOf(pg::AccountingStore& store,
                                         const std::string& default_currency,
                                         const std::string& tenant,
                                         const pricing::ReportQuery& q) {
  // Lines carry their list cost: the report needs the book's currency only.
  TY_ASSIGN_OR_RETURN(const std::string currency,
                      store.Currency(default_currency));
  absl::StatusOr<pricing::Report> report;
  if (pricing::RollupsServe(q)) {
    TY_ASSIGN_OR_RETURN(std::vector<pricing::RollupSum> sums,
                        store.SumRollups(q));
    report = pricing::ReportFromRollups(q, sums, nullptr);
  } else {
    TY_ASSIGN_OR_RETURN(std::vector<pricing::LedgerLine> lines,
                        store.LoadLines(tenant, q.start, q.end));
    report = pricing::BuildReport(lines, q, nullptr);
  }
  if (!report.ok()) return report.status();
  report->currency = currency;
  return report;
}

absl::StatusOr<BuiltReport> BuildRequestedReport(
    pg::AccountingStore& store, const std::string& default_currency,
    const std::string& tenant, const v1::GetReportRequest& request,
    std::string_view prefix) {
  auto field = [&](std::string_view name) {
    return domain::JoinField(prefix, name);
  };
  BuiltReport built;
  pricing::ReportQuery& q = built.query;
  TY_ASSIGN_OR_RETURN(q.start,
                      MsOf(request.start_time(), request.has_start_time(),
                           field("start_time")));
  TY_ASSIGN_OR_RETURN(q.end, MsOf(request.end_time(), request.has_end_time(),
                                  field("end_time")));
  q.time_zone = request.time_zone().empty() ? "UTC" : request.time_zone();
  built.step = request.step();
  switch (request.step()) {
    case v1::REPORT_STEP_UNSPECIFIED:
      q.step = pricing::Step::kNone;
      break;
    case v1::REPORT_STEP_HOUR:
      q.step = pricing::Step::kHour;
      break;
    case v1::REPORT_STEP_DAY:
      q.step = pricing::Step::kDay;
      break;
    case v1::REPORT_STEP_MONTH:
      q.step = pricing::Step::kMonth;
      break;
    default:
      return domain::FieldError(field("step"), "INVALID_VALUE",
                                "must be a known report step");
  }
  for (int i = 0; i < request.group_by_size(); ++i) {
    const std::string f = field(domain::IndexField("group_by", i));
    if (request.group_by(i) == v1::REPORT_DIMENSION_DAY) {
      if (built.day_position >= 0) {
        return domain::FieldError(f, "INVALID_VALUE", "is repeated");
      }
      if (q.step != pricing::Step::kNone && q.step != pricing::Step::kDay) {
        return domain::FieldError(
            f, "INVALID_VALUE",
            "REPORT_DIMENSION_DAY needs step REPORT_STEP_DAY or none");
      }
      q.step = pricing::Step::kDay;
      built.step = v1::REPORT_STEP_DAY;
      built.day_position = i;
      continue;
    }
    TY_ASSIGN_OR_RETURN(pricing::Dimension d,
                        DimensionOf(request.group_by(i), f));
    if (std::find(q.group_by.begin(), q.group_by.end(), d) !=
        q.group_by.end()) {
      return domain::FieldError(f, "INVALID_VALUE", "is repeated");
    }
    q.group_by.push_back(d);
  }
  if (!tenant.empty()) q.filters[pricing::Dimension::kTenant] = tenant;
  if (!request.project().empty())
    q.filters[pricing::Dimension::kProject] = request.project();
  if (!request.queue().empty())
    q.filters[pricing::Dimension::kQueue] = request.queue();
  if (!request.user().empty())
    q.filters[pricing::Dimension::kUser] = request.user();
  if (!request.cluster().empty())
    q.filters[pricing::Dimension::kCluster] = request.cluster();
  if (!request.flavor().empty())
    q.filters[pricing::Dimension::kFlavor] = request.flavor();
  if (!request.job().empty()) {
    TY_ASSIGN_OR_RETURN(domain::JobName job,
                        domain::ParseJobName(request.job(), field("job")));
    if (!tenant.empty() && job.tenant != tenant) {
      return domain::FieldError(field("job"), "INVALID_VALUE",
                                "is not a job of the report's tenant");
    }
    q.filters[pricing::Dimension::kJob] = job.ToString();
  }
  for (const auto& [name, value] : request.labels()) {
    q.label_filters[name] = value;
  }
  q.include_idle = request.include_idle();
  q.share_idle = request.share_idle();
  if (absl::Status s = pricing::ValidateReportQuery(q); !s.ok()) {
    return domain::PrefixField(s, prefix);
  }
  absl::StatusOr<pricing::Report> report =
      ReportOf(store, default_currency, tenant, q);
  if (!report.ok()) return domain::PrefixField(report.status(), prefix);
  built.report = *std::move(report);
  if (q.include_idle || q.share_idle) {
    // The idle lines the meter stored (docs/accounting.md, "Idle cost").
    auto flavor = q.filters.find(pricing::Dimension::kFlavor);
    const std::string pool = flavor == q.filters.end() ? "" : flavor->second;
    TY_ASSIGN_OR_RETURN(std::vector<pricing::IdleLine> idle,
                        store.LoadIdleLines(q.start, q.end, pool));
    std::vector<pricing::IdleShareLine> shares;
    if (q.share_idle) {
      TY_ASSIGN_OR_RETURN(shares, store.LoadIdleShares(q.start, q.end, pool));
    }
    if (absl::Status s = pricing::AddIdle(idle, shares, q, built.report);
        !s.ok()) {
      return domain::PrefixField(s, prefix);
    }
  }
  return built;
}

absl::StatusOr<v1::ReportRow> RowProto(const pricing::ReportRow& row,
                                       const BuiltReport& built,
                                       const absl::TimeZone& zone) {
  const std::string& currency = built.report.currency;
  v1::ReportRow out;
  for (size_t i = 0; i <= row.keys.size(); ++i) {
    if (static_cast<int>(i) == built.day_position) {
      out.add_keys(absl::FormatCivilTime(absl::CivilDay(
          absl::ToCivilDay(absl::FromUnixMillis(row.period_start), zone))));
    }
    if (i < row.keys.size()) out.add_keys(row.keys[i]);
  }
  out.set_gpu_seconds(row.gpu_ms / 1000);
  out.set_cpu_seconds(static_cast<int64_t>(row.cpu_millicore_ms / 1'000'000));
  out.set_memory_gib_seconds(static_cast<int64_t>(
      row.memory_byte_ms / (static_cast<__int128>(1) << 30) / 1000));
  *out.mutable_cost() = MoneyOf(row.cost_micros, currency);
  *out.mutable_lost_work_cost() = MoneyOf(row.lost_work_cost_micros, currency);
  out.set_attempts(row.attempts);
  *out.mutable_period_start() = TimestampOf(row.period_start);
  *out.mutable_period_end() = TimestampOf(row.period_end);
  *out.mutable_tenant_cost() = MoneyOf(row.tenant_cost_micros, currency);
  *out.mutable_platform_cost() = MoneyOf(row.platform_cost_micros, currency);
  *out.mutable_list_cost() = MoneyOf(row.list_cost_micros, currency);
  out.set_lost_gpu_seconds(row.lost_gpu_ms / 1000);
  out.set_gpu_hours(
      pricing::UnitHoursDecimal(row.gpu_ms, pricing::Resource::kGpu));
  TY_ASSIGN_OR_RETURN(int64_t effective,
                      pricing::EffectiveGpuHourPriceMicros(row));
  *out.mutable_effective_gpu_hour_price() = MoneyOf(effective, currency);
  out.set_spot_price_gap(row.spot_price_gap);
  *out.mutable_idle_cost() = MoneyOf(row.idle_cost_micros, currency);
  return out;
}

v1::Invoice InvoiceProto(const pricing::Invoice& invoice) {
  const std::string& currency = invoice.currency;
  v1::Invoice out;
  out.set_name(pricing::InvoiceNameString(invoice.name));
  out.set_tenant(invoice.name.tenant);
  out.set_month(out.name().substr(out.name().rfind('/') + 1));
  out.set_invoice_number(invoice.number);
  out.set_currency(currency);
  *out.mutable_billing_period_start() = TimestampOf(invoice.name.start);
  *out.mutable_billing_period_end() = TimestampOf(invoice.name.end);
  out.set_status(invoice.final ? v1::INVOICE_STATUS_FINAL
                               : v1::INVOICE_STATUS_DRAFT);
  for (const pricing::InvoiceLine& line : invoice.lines) {
    v1::InvoiceLine* l = out.add_lines();
    l->set_project(line.project);
    l->set_flavor(line.flavor);
    l->set_resource(ResourceNameOf(line.resource));
    l->set_sku(absl::StrCat(
        line.flavor, "/", std::string(pricing::ResourceLabel(line.resource))));
    l->set_quantity(
        pricing::UnitHoursDecimal(line.quantity_unit_ms, line.resource));
    l->set_unit(std::string(pricing::PricingUnit(line.resource)));
    l->set_quantity_seconds(
        pricing::UnitSecondsDecimal(line.quantity_unit_ms, line.resource));
    *l->mutable_cost() = MoneyOf(line.cost_micros, currency);
    *l->mutable_list_cost() = MoneyOf(line.list_cost_micros, currency);
    *l->mutable_platform_cost() = MoneyOf(line.platform_cost_micros, currency);
    *l->mutable_lost_work_cost() =
        MoneyOf(line.lost_work_cost_micros, currency);
    l->set_spot_price_gap(line.spot_price_gap);
  }
  *out.mutable_total() = MoneyOf(invoice.total_micros, currency);
  *out.mutable_list_cost() = MoneyOf(invoice.list_cost_micros, currency);
  *out.mutable_platform_cost() =
      MoneyOf(invoice.platform_cost_micros, currency);
  *out.mutable_lost_work_cost() =
      MoneyOf(invoice.lost_work_cost_micros, currency);
  return out;
}

class AccountingServiceImpl final
    : public api::ApiService<v1::AccountingService> {
 public:
  AccountingServiceImpl(api::ApiContext* ctx, AccountingServiceOptions options)
      : ApiService(ctx), options_(std::move(options)), store_(ctx->db) {}

  TY_RPC(GetPriceBook, v1::GetPriceBookRequest, v1::PriceBook) {
    return Run(ctx_, context, Method("GetPriceBook"), *request,
               [&](const Caller&) -> absl::Status {
                 TY_ASSIGN_OR_RETURN(pricing::PriceBook book,
                                     store_.LoadPriceBook(options_.currency));
                 *response = BookProto(book);
                 return absl::OkStatus();
               });
  }

  TY_RPC(AddRate, v1::AddRateRequest, v1::Rate) {
    const v1::Rate& rate = request->rate();
    return AddPrice(
        context, "AddRate", *request, rate.flavor(), "rates", "rate",
        [&](pg::AccountingStore::PriceChange& change) -> absl::Status {
          TY_ASSIGN_OR_RETURN(pricing::Resource resource,
                              ResourceOf(rate.resource(), "rate.resource"));
          TY_ASSIGN_OR_RETURN(TimeMs effective, MsOf(rate.effective_time(),
                                                     rate.has_effective_time(),
                                                     "rate.effective_time"));
          change.rates.push_back(
              {.flavor = rate.flavor(),
               .resource = resource,
               .price_per_unit_hour =
                   {.micros = rate.price_per_unit_hour().micros(),
                    .currency_code =
                        rate.price_per_unit_hour().currency_code()},
               .effective_time = effective});
          return absl::OkStatus();
        },
        [&](const std::string& currency) {
          *response = rate;
          response->mutable_price_per_unit_hour()->set_currency_code(currency);
        });
  }

  TY_RPC(AddSpotPrice, v1::AddSpotPriceRequest, v1::SpotPrice) {
    const v1::SpotPrice& spot = request->spot_price();
    return AddPrice(
        context, "AddSpotPrice", *request, spot.flavor(), "spot prices",
        "spot_price",
        [&](pg::AccountingStore::PriceChange& change) -> absl::Status {
          TY_ASSIGN_OR_RETURN(
              TimeMs effective,
              MsOf(spot.effective_time(), spot.has_effective_time(),
                   "spot_price.effective_time"));
          change.spot_prices.push_back(
              {.flavor = spot.flavor(),
               .gpu_hour_price = {.micros = spot.gpu_hour_price().micros(),
                                  .currency_code =
                                      spot.gpu_hour_price().currency_code()},
               .effective_time = effective});
          return absl::OkStatus();
        },
        [&](const std::string& currency) {
          *response = spot;
          response->mutable_gpu_hour_price()->set_currency_code(currency);
        });
  }

  TY_RPC(AddCommitment, v1::AddCommitmentRequest, v1::Commitment) {
    const v1::Commitment& c = request->commitment();
    return AddPrice(
        context, "AddCommitment", *request, c.flavor(), "commitments",
        "commitment",
        [&](pg::AccountingStore::PriceChange& change) -> absl::Status {
          TY_ASSIGN_OR_RETURN(TimeMs start,
                              MsOf(c.start_time(), c.has_start_time(),
                                   "commitment.start_time"));
          TY_ASSIGN_OR_RETURN(TimeMs end, MsOf(c.end_time(), c.has_end_time(),
                                               "commitment.end_time"));
          change.commitments.push_back(
              {.flavor = c.flavor(),
               .amount = {.micros = c.amount().micros(),
                          .currency_code = c.amount().currency_code()},
               .start_time = start,
               .end_time = end});
          return absl::OkStatus();
        },
        [&](const std::string& currency) {
          *response = c;
          response->mutable_amount()->set_currency_code(currency);
        });
  }

  TY_RPC(GetReport, v1::GetReportRequest, v1::Report) {
    return Run(ctx_, context, Method("GetReport"), *request,
               [&](const Caller& caller) -> absl::Status {
                 TY_ASSIGN_OR_RETURN(std::string tenant,
                                     FinanceTenant(caller, request->parent()));
                 TY_ASSIGN_OR_RETURN(
                     BuiltReport built,
                     BuildRequestedReport(store_, options_.currency, tenant,
                                          *request, ""));
                 absl::TimeZone zone;
                 if (!absl::LoadTimeZone(built.query.time_zone, &zone)) {
                   return domain::FieldError("time_zone", "INVALID_VALUE",
                                             "is not a known time zone");
                 }
                 for (int d : request->group_by()) {
                   response->add_group_by(static_cast<v1::ReportDimension>(d));
                 }
                 for (const pricing::ReportRow& row : built.report.rows) {
                   TY_ASSIGN_OR_RETURN(*response->add_rows(),
                                       RowProto(row, built, zone));
                 }
                 BuiltReport whole = built;
                 whole.day_position = -1;
                 TY_ASSIGN_OR_RETURN(*response->mutable_total(),
                                     RowProto(built.report.total, whole, zone));
                 *response->mutable_generate_time() =
                     TimestampOf(absl::ToUnixMillis(absl::Now()));
                 response->set_currency(built.report.currency);
                 response->set_step(built.step);
                 response->set_time_zone(built.query.time_zone);
                 return absl::OkStatus();
               });
  }

  TY_RPC(GetInvoice, v1::GetInvoiceRequest, v1::Invoice) {
    return Run(
        ctx_, context, Method("GetInvoice"), *request,
        [&](const Caller& caller) -> absl::Status {
          const absl::Time now = absl::Now();
          TY_ASSIGN_OR_RETURN(
              pricing::InvoiceName name,
              pricing::ParseInvoiceName(request->name(),
                                        absl::ToUnixMillis(now), "name"));
          TY_RETURN_IF_ERROR(
              FinanceTenant(caller, domain::TenantName(name.tenant)).status());
          // Platform finance and admins see every tenant: an unknown one is
          // NOT_FOUND, not an empty invoice.
          absl::StatusOr<pg::StoredObject> tenant =
              ctx_->objects->Get(pg::TenantKind(), {name.tenant});
          if (absl::IsNotFound(tenant.status())) {
            return absl::NotFoundError(absl::StrCat(
                "tenant ", domain::TenantName(name.tenant), " not found"));
          }
          TY_RETURN_IF_ERROR(tenant.status());
          TY_ASSIGN_OR_RETURN(pricing::Report report,
                              ReportOf(store_, options_.currency, name.tenant,
                                       pricing::InvoiceQuery(name)));
          TY_ASSIGN_OR_RETURN(
              pricing::Invoice invoice,
              pricing::BuildInvoice(name, report,
                                    ClosedBefore(now, options_.close_after)));
          *response = InvoiceProto(invoice);
          *response->mutable_generate_time() =
              TimestampOf(absl::ToUnixMillis(now));
          return absl::OkStatus();
        });
  }

  grpc::Status ExportReport(
      grpc::ServerContext* context, const v1::ExportReportRequest* request,
      grpc::ServerWriter<v1::ExportReportResponse>* writer) override {
    return Run(ctx_, context, Method("ExportReport"), *request,
               [&](const Caller& caller) -> absl::Status {
                 TY_ASSIGN_OR_RETURN(
                     std::string tenant,
                     FinanceTenant(caller, request->report().parent()));
                 TY_ASSIGN_OR_RETURN(
                     BuiltReport built,
                     BuildRequestedReport(store_, options_.currency, tenant,
                                          request->report(), "report"));
                 std::string text;
                 switch (request->format()) {
                   case v1::REPORT_FORMAT_CSV: {
                     TY_ASSIGN_OR_RETURN(
                         text, pricing::FocusCsv(built.report, built.query));
                     break;
                   }
                   case v1::REPORT_FORMAT_UNSPECIFIED:
                   case v1::REPORT_FORMAT_JSON: {
                     TY_ASSIGN_OR_RETURN(
                         text, pricing::FocusJson(built.report, built.query));
                     break;
                   }
                   default:
                     return domain::FieldError(
                         "format", "INVALID_VALUE",
                         "must be REPORT_FORMAT_CSV or REPORT_FORMAT_JSON");
                 }
                 constexpr size_t kChunk = 64 * 1024;
                 for (size_t at = 0; at < text.size() || at == 0;
                      at += kChunk) {
                   v1::ExportReportResponse chunk;
                   chunk.set_data(text.substr(at, kChunk));
                   if (!writer->Write(chunk)) {
                     return absl::CancelledError("the client went away");
                   }
                   if (text.empty()) break;
                 }
                 return absl::OkStatus();
               });
  }

  TY_RPC(ListUsage, v1::ListUsageRequest, v1::ListUsageResponse) {
    return Run(
        ctx_, context, Method("ListUsage"), *request,
        [&](const Caller& caller) -> absl::Status {
          TY_ASSIGN_OR_RETURN(std::string tenant,
                              FinanceTenant(caller, request->parent()));
          TY_ASSIGN_OR_RETURN(int limit, api::PageSize(request->page_size()));
          int64_t job_id = 0;
          if (!request->job().empty()) {
            TY_ASSIGN_OR_RETURN(domain::JobName job,
                                domain::ParseJobName(request->job(), "job"));
            if (!tenant.empty() && job.tenant != tenant) {
              return domain::FieldError(
                  "job", "INVALID_VALUE",
                  absl::StrCat("is not a job of ", request->parent()));
            }
            job_id = job.job_id;
          }
          TimeMs start = 0, end = pricing::kMaxTimeMs;
          if (request->has_start_time()) {
            TY_ASSIGN_OR_RETURN(
                start, MsOf(request->start_time(), true, "start_time"));
          }
          if (request->has_end_time()) {
            TY_ASSIGN_OR_RETURN(end,
                                MsOf(request->end_time(), true, "end_time"));
          }
          if (end <= start) {
            return domain::FieldError("end_time", "INVALID_VALUE",
                                      "must be after start_time");
          }
          std::string after;
          if (!request->page_token().empty()) {
            TY_ASSIGN_OR_RETURN(std::vector<std::string> key,
                                api::PageKey(request->page_token(), 1));
            after = key[0];
          }
          TY_ASSIGN_OR_RETURN(
              pg::UsagePage page,
              store_.ListLines(tenant, job_id, start, end, after, limit));
          TY_ASSIGN_OR_RETURN(std::string currency,
                              store_.Currency(options_.currency));
          for (const pricing::LedgerLine& line : page.lines) {
            *response->add_records() = RecordOf(line, currency);
          }
          if (!page.next_after.empty()) {
            response->set_next_page_token(
                pg::EncodePageToken({page.next_after}));
          }
          return absl::OkStatus();
        });
  }

  // --- Budgets: the generic object methods, with the meter's status ---

  TY_RPC(CreateBudget, v1::CreateBudgetRequest, v1::Budget) {
    grpc::Status st = api::CreateResource(
        ctx_, context, Method("CreateBudget"), *request, kBudgets,
        request->parent(), request->budget_id(), request->budget(), response);
    if (st.ok()) AddStatus({response});
    return st;
  }

  TY_RPC(GetBudget, v1::GetBudgetRequest, v1::Budget) {
    grpc::Status st =
        api::GetResource(ctx_, context, Method("GetBudget"), *request, kBudgets,
                         request->name(), response);
    if (st.ok()) AddStatus({response});
    return st;
  }

  TY_RPC(ListBudgets, v1::ListBudgetsRequest, v1::ListBudgetsResponse) {
    grpc::Status st = api::ListResources(
        ctx_, context, Method("ListBudgets"), *request, kBudgets,
        [&](const Caller& caller) {
          return SelectBudgets(kBudgets, caller, *request);
        },
        response->mutable_budgets(), response->mutable_next_page_token());
    if (st.ok()) {
      std::vector<v1::Budget*> budgets;
      for (v1::Budget& b : *response->mutable_budgets()) budgets.push_back(&b);
      AddStatus(budgets);
    }
    return st;
  }

  TY_RPC(UpdateBudget, v1::UpdateBudgetRequest, v1::Budget) {
    grpc::Status st = api::UpdateResource(ctx_, context, Method("UpdateBudget"),
                                          *request, kBudgets, request->budget(),
                                          request->update_mask(), response);
    if (st.ok()) AddStatus({response});
    return st;
  }

  TY_DELETE_METHOD(Budget, kBudgets)

 private:
  // Fills the output-only fields from the meter's last status of each budget
  // (nothing until the meter has seen it; zero spent in a month it has not
  // seen yet). Best effort: the object itself is already read.
  void AddStatus(const std::vector<v1::Budget*>& budgets) {
    if (budgets.empty()) return;
    std::string tenant;
    if (budgets.size() == 1) {
      absl::StatusOr<domain::TenantChildName> name =
          domain::ParseBudgetName(budgets[0]->name(), "name");
      if (name.ok()) tenant = name->tenant;
    }
    absl::StatusOr<std::vector<pg::BudgetStatusRow>> rows =
        store_.LoadBudgetStatus(tenant);
    absl::StatusOr<std::string> book_currency =
        store_.Currency(options_.currency);
    if (!rows.ok() || !book_currency.ok()) return;
    const TimeMs month = pricing::MonthStartMs(absl::ToUnixMillis(absl::Now()));
    for (v1::Budget* b : budgets) {
      const std::string& currency = b->monthly_amount().currency_code().empty()
                                        ? *book_currency
                                        : b->monthly_amount().currency_code();
      b->mutable_monthly_amount()->set_currency_code(currency);
      for (const pg::BudgetStatusRow& row : *rows) {
        if (domain::BudgetName(row.tenant, row.id) != b->name()) continue;
        const bool current = row.month_start_ms == month;
        *b->mutable_spent() = MoneyOf(current ? row.spent_micros : 0, currency);
        *b->mutable_forecast() =
            MoneyOf(current ? row.forecast_micros : 0, currency);
        b->set_active_action(
            current ? static_cast<v1::BudgetAction>(row.active_action)
                    : v1::BUDGET_ACTION_UNSPECIFIED);
      }
    }
  }

  // The path of every price book addition: platform-admin only, the flavor
  // must exist (`entry`.flavor), `fill` reads the request into the change,
  // AddPrices checks it against the stored book and stores it with the audit
  // row, and `respond` writes the reply with the book's currency.
  grpc::Status AddPrice(
      grpc::ServerContext* context, std::string_view rpc,
      const google::protobuf::Message& request, const std::string& flavor,
      std::string_view what, std::string_view entry,
      absl::FunctionRef<absl::Status(pg::AccountingStore::PriceChange&)> fill,
      absl::FunctionRef<void(const std::string&)> respond) {
    return RunMutation(
        ctx_, context, Method(std::string(rpc)), request,
        absl::StrCat("flavors/", flavor),
        [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
          TY_RETURN_IF_ERROR(api::RequirePlatformAdmin(
              caller,
              absl::StrCat("add ", std::string(what), " to the price book")));
          TY_RETURN_IF_ERROR(
              CheckFlavor(*ctx_, flavor, domain::JoinField(entry, "flavor")));
          pg::AccountingStore::PriceChange change;
          TY_RETURN_IF_ERROR(fill(change));
          TY_ASSIGN_OR_RETURN(
              pricing::PriceBook book,
              api::Committed(audit, store_.AddPrices(change, ClosedNow(), "",
                                                     &audit.record)));
          respond(book.currency());
          return absl::OkStatus();
        });
  }

  TimeMs ClosedNow() const {
    return ClosedBefore(absl::Now(), options_.close_after);
  }

  const AccountingServiceOptions options_;
  pg::AccountingStore store_;
};

}  // namespace

TimeMs ClosedBefore(absl::Time now, absl::Duration close_after) {
  const absl::CivilMonth month(
      absl::ToCivilSecond(now - close_after, absl::UTCTimeZone()));
  return absl::ToUnixMillis(absl::FromCivil(month, absl::UTCTimeZone()));
}

std::unique_ptr<grpc::Service> NewAccountingService(
    api::ApiContext* ctx, AccountingServiceOptions options) {
  return std::make_unique<AccountingServiceImpl>(ctx, std::move(options));
}

}  // namespace trainyard::accounting
