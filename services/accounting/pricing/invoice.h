// Invoices: what one tenant is billed for one UTC calendar month.
//
// An invoice is a report of the tenant's ledger lines of the month grouped by
// project, flavor and resource (BuildReport, or ReportFromRollups from the
// same query: InvoiceQuery), read as invoice lines: the tenant-billed cost,
// the list cost and the lost work the platform absorbs of each (project,
// flavor, resource), and the total. Its lines add up to its total exactly,
// and its total is the report's total tenant cost. Pure and deterministic
// (no I/O). See docs/accounting.md, "Invoices".
#ifndef TRAINYARD_SERVICES_ACCOUNTING_PRICING_INVOICE_H_
#define TRAINYARD_SERVICES_ACCOUNTING_PRICING_INVOICE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "services/accounting/pricing/price_book.h"
#include "services/accounting/pricing/report.h"

namespace trainyard::accounting::pricing {

// "tenants/{tenant}/invoices/{YYYY-MM}", parsed.
struct InvoiceName {
  std::string tenant;
  int year = 0;   // 1970..9999
  int month = 0;  // 1..12
  // The month in UTC: [start, end).
  TimeMs start = 0;
  TimeMs end = 0;
};

// Parses an invoice name whose month has started by `now`. InvalidArgument
// naming `field`: a malformed name or tenant id (INVALID_NAME), a month that
// is not YYYY-MM with a month 01..12 in years 1970..9999, or one that starts
// after `now` (INVALID_VALUE).
absl::StatusOr<InvoiceName> ParseInvoiceName(std::string_view name, TimeMs now,
                                             std::string_view field);

// "tenants/{tenant}/invoices/{YYYY-MM}".
std::string InvoiceNameString(const InvoiceName& name);

// The stable number of the invoice: "INV-{tenant}-{YYYYMM}" (the same for the
// draft and the final invoice of a month).
std::string InvoiceNumber(const InvoiceName& name);

// The report query of the invoice: the month, one period, the tenant only,
// grouped by project, flavor and resource (rollup keys only, so rollups serve
// it).
ReportQuery InvoiceQuery(const InvoiceName& name);

// One line: the tenant's usage of one resource of one flavor in one project.
struct InvoiceLine {
  std::string project;
  std::string flavor;
  Resource resource = Resource::kGpu;
  // Unit-ms of the resource (GPU-ms, millicore-ms, byte-ms), exact.
  __int128 quantity_unit_ms = 0;
  // What the tenant is billed: the lines' tenant cost.
  int64_t cost_micros = 0;
  // The same usage at list price.
  int64_t list_cost_micros = 0;
  // Lost work the platform absorbs (not in cost_micros).
  int64_t platform_cost_micros = 0;
  // All lost work in the line, whoever pays it.
  int64_t lost_work_cost_micros = 0;
  bool spot_price_gap = false;
};

struct Invoice {
  InvoiceName name;
  std::string number;
  std::string currency;
  // FINAL once the month is closed, else DRAFT (the month is open, or has
  // ended but still accrues late ends until it closes).
  bool final = false;
  // Ascending by (project, flavor, resource label).
  std::vector<InvoiceLine> lines;
  // Sums of the lines' fields: total_micros is what the tenant is billed.
  int64_t total_micros = 0;
  int64_t list_cost_micros = 0;
  int64_t platform_cost_micros = 0;
  int64_t lost_work_cost_micros = 0;
};

// The invoice of `name` from `report`, the report of InvoiceQuery(name)
// (report.currency set). `closed_before` is the start of the first open month
// (months before it are closed). InvalidArgument when the report is not of
// that query's shape (rows of three keys, a resource key GPU/CPU/MEMORY);
// OutOfRange on overflow; Internal if the lines' sums differ from the
// report's total (they cannot, for a report of the query).
absl::StatusOr<Invoice> BuildInvoice(const InvoiceName& name,
                                     const Report& report,
                                     TimeMs closed_before);

}  // namespace trainyard::accounting::pricing

#endif  // TRAINYARD_SERVICES_ACCOUNTING_PRICING_INVOICE_H_
