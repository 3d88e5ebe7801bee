#include "services/accounting/pricing/invoice.h"

#include <cstdio>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::accounting::pricing {
namespace {
namespace invoice_impl {

using domain::Cat;
using domain::CheckedAdd;
using domain::FieldError;
namespace reason = domain::reason;

constexpr std::string_view kPattern = "tenants/{tenant}/invoices/{YYYY-MM}";
constexpr std::string_view kInvoices = "/invoices/";

// "YYYY-MM" with a year 1970..9999 and a month 01..12.
bool ParseMonth(std::string_view text, int* year, int* month) {
  if (text.size() != 7 || text[4] != '-') return false;
  int y = 0, m = 0;
  for (size_t i = 0; i < 7; ++i) {
    if (i == 4) continue;
    if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) {
      return false;
    }
    (i < 4 ? y : m) = (i < 4 ? y : m) * 10 + (text[i] - '0');
  }
  if (y < 1970 || m < 1 || m > 12) return false;
  *year = y;
  *month = m;
  return true;
}

std::string MonthText(const InvoiceName& name, bool dash) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), dash ? "%04d-%02d" : "%04d%02d", name.year,
                name.month);
  return buf;
}

}  // namespace invoice_impl
}  // namespace

using invoice_impl::kInvoices;
using invoice_impl::kPattern;
using invoice_impl::MonthText;
using invoice_impl::ParseMonth;

absl::StatusOr<InvoiceName> ParseInvoiceName(std::string_view name, TimeMs now,
                                             std::string_view field) {
  const size_t at = name.find(kInvoices);
  if (at == std::string_view::npos || !name.starts_with("tenants/")) {
    return domain::FieldError(
        field, domain::reason::kInvalidName,
        domain::Cat("expected ", kPattern, ", got \"", name, "\""));
  }
  InvoiceName out;
  TY_ASSIGN_OR_RETURN(out.tenant,
                      domain::ParseTenantName(name.substr(0, at), field));
  const std::string_view month = name.substr(at + kInvoices.size());
  if (!ParseMonth(month, &out.year, &out.month)) {
    return domain::FieldError(
        field, domain::reason::kInvalidValue,
        domain::Cat(
            "the month must be YYYY-MM with a month from 01 to 12 and a year "
            "from 1970 to 9999, got \"",
            month, "\""));
  }
  const absl::CivilMonth civil(out.year, out.month);
  out.start = absl::ToUnixMillis(absl::FromCivil(civil, absl::UTCTimeZone()));
  out.end = absl::ToUnixMillis(absl::FromCivil(civil + 1, absl::UTCTimeZone()));
  if (out.start > now) {
    return domain::FieldError(
        field, domain::reason::kInvalidValue,
        domain::Cat("the month ", month,
                    " has not started yet: an invoice is of a month "
                    "that has started (UTC)"));
  }
  return out;
}

std::string InvoiceNameString(const InvoiceName& name) {
  return domain::Cat(domain::TenantName(name.tenant), kInvoices,
                     MonthText(name, /*dash=*/true));
}

std::string InvoiceNumber(const InvoiceName& name) {
  return domain::Cat("INV-", name.tenant, "-", MonthText(name, /*dash=*/false));
}

ReportQuery InvoiceQuery(const InvoiceName& name) {
  ReportQuery q;
  q.start = name.start;
  q.end = name.end;
  q.time_zone = "UTC";
  q.step = Step::kNone;
  q.group_by = {Dimension::kProject, Dimension::kFlavor, Dimension::kResource};
  q.filters[Dimension::kTenant] = name.tenant;
  return q;
}

absl::StatusOr<Invoice> BuildInvoice(const InvoiceName& name,
                                     const Report& report,
                                     TimeMs closed_before) {
  Invoice inv;
  inv.name = name;
  inv.number = InvoiceNumber(name);
  inv.currency = report.currency;
  inv.final = name.end <= closed_before;
  inv.lines.reserve(report.rows.size());
  for (size_t i = 0; i < report.rows.size(); ++i) {
    const ReportRow& row = report.rows[i];
    const std::string field =
        domain::IndexField("report.rows", static_cast<int64_t>(i));
    if (row.keys.size() != 3 || row.period_start != name.start ||
        row.period_end != name.end) {
      return domain::FieldError(
          field, domain::reason::kInconsistent,
          "is not a row of the invoice's query (one period, "
          "keys project, flavor, resource)");
    }
    InvoiceLine line;
    line.project = row.keys[0];
    line.flavor = row.keys[1];
    if (row.keys[2] == ResourceLabel(Resource::kGpu)) {
      line.resource = Resource::kGpu;
      line.quantity_unit_ms = row.gpu_ms;
    } else if (row.keys[2] == ResourceLabel(Resource::kCpu)) {
      line.resource = Resource::kCpu;
      line.quantity_unit_ms = row.cpu_millicore_ms;
    } else if (row.keys[2] == ResourceLabel(Resource::kMemory)) {
      line.resource = Resource::kMemory;
      line.quantity_unit_ms = row.memory_byte_ms;
    } else {
      return domain::FieldError(
          domain::JoinField(field, "keys[2]"), domain::reason::kInconsistent,
          domain::Cat("is not a resource (GPU, CPU, MEMORY): \"", row.keys[2],
                      "\""));
    }
    line.cost_micros = row.tenant_cost_micros;
    line.list_cost_micros = row.list_cost_micros;
    line.platform_cost_micros = row.platform_cost_micros;
    line.lost_work_cost_micros = row.lost_work_cost_micros;
    line.spot_price_gap = row.spot_price_gap;
    TY_ASSIGN_OR_RETURN(inv.total_micros,
                        domain::CheckedAdd(inv.total_micros, line.cost_micros));
    TY_ASSIGN_OR_RETURN(
        inv.list_cost_micros,
        domain::CheckedAdd(inv.list_cost_micros, line.list_cost_micros));
    TY_ASSIGN_OR_RETURN(inv.platform_cost_micros,
                        domain::CheckedAdd(inv.platform_cost_micros,
                                           line.platform_cost_micros));
    TY_ASSIGN_OR_RETURN(inv.lost_work_cost_micros,
                        domain::CheckedAdd(inv.lost_work_cost_micros,
                                           line.lost_work_cost_micros));
    inv.lines.push_back(std::move(line));
  }
  const ReportRow& t = report.total;
  if (inv.total_micros != t.tenant_cost_micros ||
      inv.list_cost_micros != t.list_cost_micros ||
      inv.platform_cost_micros != t.platform_cost_micros ||
      inv.lost_work_cost_micros != t.lost_work_cost_micros) {
    return absl::InternalError(
        domain::Cat("invoice ", InvoiceNameString(name), ": its lines sum to ",
                    inv.total_micros, " billed micros, the report's total is ",
                    t.tenant_cost_micros));
  }
  return inv;
}

}  // namespace trainyard::accounting::pricing
