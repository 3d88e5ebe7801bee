// Invoices: the example of docs/accounting.md ("Invoices"), figure by figure
// (if this test changes, the document changes with it), and the invoice
// name's rules.
#include "services/accounting/pricing/invoice.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/accounting/pricing/meter.h"
#include "services/accounting/pricing/price_book.h"
#include "services/accounting/pricing/report.h"
#include "services/lib/domain/errors.h"

namespace trainyard::accounting::pricing::invoice_test {
namespace {

constexpr TimeMs kNov = 1'793'491'200'000;  // 2026-11-01T00:00:00Z
constexpr TimeMs kDec = 1'796'083'200'000;  // 2026-12-01T00:00:00Z
constexpr TimeMs kJan = 1'798'761'600'000;  // 2027-01-01T00:00:00Z
constexpr TimeMs kNovAt(int day, int h, int m, int s = 0, int ms = 0) {
  return kNov + (day - 1) * 24 * kMsPerHour + h * kMsPerHour + m * 60'000 +
         s * 1000 + ms;
}
constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<LedgerLine> Meter(const PriceBook& book, const AttemptUsage& a,
                              const MeterOptions& options) {
  absl::StatusOr<std::vector<LedgerLine>> lines =
      MeterAttempt(book, a, 0, options);
  EXPECT_TRUE(lines.ok()) << lines.status();
  return lines.ok() ? *lines : std::vector<LedgerLine>{};
}

TEST(InvoiceTest, TheExampleOfTheDocument) {
  absl::StatusOr<PriceBook> created = PriceBook::Create("USD");
  ASSERT_TRUE(created.ok());
  PriceBook& book = *created;
  const TimeMs open = kNov;
  for (const RateVersion& r : std::vector<RateVersion>{
           {"a100", Resource::kGpu, {2'000'000, "USD"}, kNov},
           {"a100", Resource::kCpu, {40'000, "USD"}, kNov},
           {"a100", Resource::kMemory, {5'000, "USD"}, kNov},
           {"a100-spot", Resource::kGpu, {2'500'000, "USD"}, kNov}}) {
    ASSERT_TRUE(book.AddRate(r, open).ok());
  }
  ASSERT_TRUE(
      book.AddSpotPrice({"a100-spot", {950'000, "USD"}, kNovAt(3, 8, 0)}, open)
          .ok());
  MeterOptions options;
  options.lost_work_rule = LostWorkRule::kSplit;
  options.split_tenant_percent = 30;

  std::vector<LedgerLine> ledger;
  auto add = [&](const AttemptUsage& a) {
    std::vector<LedgerLine> lines = Meter(book, a, options);
    ledger.insert(ledger.end(), lines.begin(), lines.end());
  };
  // 1. bolt/train: 2 GPUs, 4 cores, 16 GiB on a100, Nov 3 10:00-11:30.
  AttemptUsage a;
  a.keys = {.tenant = "bolt", .project = "train", .flavor = "a100", .job = "1"};
  a.keys.attempt = 1;
  a.gpus_per_worker = 2;
  a.cpu_millis_per_worker = 4'000;
  a.memory_bytes_per_worker = 16 * kGiB;
  a.start_time = kNovAt(3, 10, 0);
  a.end_time = kNovAt(3, 11, 30);
  a.end_reason = EndReason::kCompleted;
  add(a);
  // 2. bolt/train: 2 spot GPUs on a100-spot, 09:20 to a reclaim at
  // 10:52:30.800, last checkpoint 10:40 (job B of the worked example).
  AttemptUsage b;
  b.keys = {
      .tenant = "bolt", .project = "train", .flavor = "a100-spot", .job = "2"};
  b.keys.attempt = 1;
  b.spot = true;
  b.gpus_per_worker = 2;
  b.start_time = kNovAt(3, 9, 20);
  b.end_time = kNovAt(3, 10, 52, 30, 800);
  b.last_checkpoint_time = kNovAt(3, 10, 40);
  b.end_reason = EndReason::kSpotReclaim;
  add(b);
  // 3. bolt/eval: 1 GPU on a100, Nov 20 14:00-14:45, failed (the tenant's).
  AttemptUsage c;
  c.keys = {.tenant = "bolt", .project = "eval", .flavor = "a100", .job = "3"};
  c.keys.attempt = 1;
  c.gpus_per_worker = 1;
  c.start_time = kNovAt(20, 14, 0);
  c.end_time = kNovAt(20, 14, 45);
  c.end_reason = EndReason::kUserError;
  add(c);
  // 4. bolt/eval: 1 GPU on a100, Nov 30 23:30 to Dec 1 00:30: half in
  // November.
  AttemptUsage d = c;
  d.keys.job = "4";
  d.start_time = kNovAt(30, 23, 30);
  d.end_time = kNovAt(31, 0, 30);
  d.end_reason = EndReason::kCompleted;
  add(d);
  // 5. acme: another tenant, not on bolt's invoice.
  AttemptUsage e = c;
  e.keys.tenant = "acme";
  e.keys.job = "5";
  add(e);

  absl::StatusOr<InvoiceName> name = ParseInvoiceName(
      "tenants/bolt/invoices/2026-11", kNovAt(28, 0, 0), "name");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->start, kNov);
  EXPECT_EQ(name->end, kDec);
  absl::StatusOr<Report> report =
      BuildReport(ledger, InvoiceQuery(*name), &book);
  ASSERT_TRUE(report.ok()) << report.status();
  absl::StatusOr<Invoice> inv = BuildInvoice(*name, *report, kDec);
  ASSERT_TRUE(inv.ok()) << inv.status();

  EXPECT_EQ(inv->number, "INV-bolt-202611");
  EXPECT_EQ(inv->currency, "USD");
  EXPECT_TRUE(inv->final);
  ASSERT_EQ(inv->lines.size(), 5u);
  struct Want {
    std::string project, flavor;
    Resource resource;
    std::string hours, seconds;
    int64_t cost, list, platform, lost;
    bool gap;
  };
  const std::vector<Want> want = {
      // 0.75 h × $2.00 + 0.5 h × $2.00.
      {"eval", "a100", Resource::kGpu, "1.25", "4500", 2'500'000, 2'500'000, 0,
       0, false},
      // 4 cores × 1.5 h × $0.04.
      {"train", "a100", Resource::kCpu, "6", "21600", 240'000, 240'000, 0, 0,
       false},
      // 2 GPUs × 1.5 h × $2.00.
      {"train", "a100", Resource::kGpu, "3", "10800", 6'000'000, 6'000'000, 0,
       0, false},
      // 16 GiB × 1.5 h × $0.005.
      {"train", "a100", Resource::kMemory, "24", "86400", 120'000, 120'000, 0,
       0, false},
      // 1,266,667 + 1,266,667 + 30 % of 396,256; list at $2.50: 3,333,333 +
      // 3,333,333 + 1,042,778.
      {"train", "a100-spot", Resource::kGpu, "3.083777778", "11101.6",
       2'652'211, 7'709'444, 277'379, 396'256, true},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    const InvoiceLine& l = inv->lines[i];
    EXPECT_EQ(l.project, want[i].project);
    EXPECT_EQ(l.flavor, want[i].flavor);
    EXPECT_EQ(l.resource, want[i].resource);
    EXPECT_EQ(UnitHoursDecimal(l.quantity_unit_ms, l.resource), want[i].hours);
    EXPECT_EQ(UnitSecondsDecimal(l.quantity_unit_ms, l.resource),
              want[i].seconds);
    EXPECT_EQ(l.cost_micros, want[i].cost);
    EXPECT_EQ(l.list_cost_micros, want[i].list);
    EXPECT_EQ(l.platform_cost_micros, want[i].platform);
    EXPECT_EQ(l.lost_work_cost_micros, want[i].lost);
    EXPECT_EQ(l.spot_price_gap, want[i].gap);
  }
  EXPECT_EQ(inv->total_micros, 11'512'211);
  EXPECT_EQ(inv->platform_cost_micros, 277'379);
  EXPECT_EQ(inv->list_cost_micros, 16'569'444);
  EXPECT_EQ(inv->lost_work_cost_micros, 396'256);

  // The total against a scan of the ledger: bolt's lines whose charge period
  // starts in November, their tenant parts.
  int64_t billed = 0;
  for (const LedgerLine& l : ledger) {
    if (l.keys.tenant == "bolt" && l.period_start >= kNov &&
        l.period_start < kDec) {
      billed += l.tenant_cost_micros;
    }
  }
  EXPECT_EQ(inv->total_micros, billed);

  // While November is open, or closed only before it: a draft, same figures.
  absl::StatusOr<Invoice> draft = BuildInvoice(*name, *report, kNov);
  ASSERT_TRUE(draft.ok());
  EXPECT_FALSE(draft->final);
  EXPECT_EQ(draft->number, inv->number);
  EXPECT_EQ(draft->total_micros, inv->total_micros);

  // December: job 4's other half.
  absl::StatusOr<InvoiceName> dec = ParseInvoiceName(
      "tenants/bolt/invoices/2026-12", kNovAt(31, 1, 0), "name");
  ASSERT_TRUE(dec.ok()) << dec.status();
  absl::StatusOr<Report> dec_report =
      BuildReport(ledger, InvoiceQuery(*dec), &book);
  ASSERT_TRUE(dec_report.ok());
  absl::StatusOr<Invoice> dec_inv = BuildInvoice(*dec, *dec_report, kDec);
  ASSERT_TRUE(dec_inv.ok());
  EXPECT_FALSE(dec_inv->final);
  ASSERT_EQ(dec_inv->lines.size(), 1u);
  EXPECT_EQ(dec_inv->total_micros, 1'000'000);
  EXPECT_EQ(dec_inv->number, "INV-bolt-202612");
}

TEST(InvoiceTest, AReportOfAnotherShapeIsRefused) {
  absl::StatusOr<InvoiceName> name =
      ParseInvoiceName("tenants/bolt/invoices/2026-11", kDec, "name");
  ASSERT_TRUE(name.ok());
  Report report;
  ReportRow row;
  row.keys = {"train", "a100"};
  row.period_start = kNov;
  row.period_end = kDec;
  report.rows.push_back(row);
  absl::StatusOr<Invoice> inv = BuildInvoice(*name, report, kDec);
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(domain::ErrorField(inv.status()), "report.rows[0]");
  report.rows[0].keys = {"train", "a100", "DISK"};
  inv = BuildInvoice(*name, report, kDec);
  EXPECT_EQ(domain::ErrorField(inv.status()), "report.rows[0].keys[2]");
  // Rows that do not add up to the total.
  report.rows[0].keys = {"train", "a100", "GPU"};
  report.rows[0].tenant_cost_micros = 5;
  inv = BuildInvoice(*name, report, kDec);
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInternal);
}

TEST(InvoiceTest, Names) {
  const TimeMs now = kNovAt(28, 12, 0);
  absl::StatusOr<InvoiceName> n =
      ParseInvoiceName("tenants/acme/invoices/2026-11", now, "name");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->tenant, "acme");
  EXPECT_EQ(n->year, 2026);
  EXPECT_EQ(n->month, 11);
  EXPECT_EQ(InvoiceNameString(*n), "tenants/acme/invoices/2026-11");
  EXPECT_EQ(InvoiceNumber(*n), "INV-acme-202611");
  const ReportQuery q = InvoiceQuery(*n);
  EXPECT_TRUE(ValidateReportQuery(q).ok());
  EXPECT_EQ(q.start, kNov);
  EXPECT_EQ(q.end, kDec);

  // December's end is the next year's first instant; a month that starts
  // exactly now has started.
  n = ParseInvoiceName("tenants/acme/invoices/2026-12", kDec, "name");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->start, kDec);
  EXPECT_EQ(n->end, kJan);
  n = ParseInvoiceName("tenants/acme/invoices/1970-01", now, "name");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->start, 0);

  for (const char* bad :
       {"tenants/acme/invoices/2026-13", "tenants/acme/invoices/2026-00",
        "tenants/acme/invoices/2026-1", "tenants/acme/invoices/26-11",
        "tenants/acme/invoices/2026-11-01", "tenants/acme/invoices/2026/11",
        "tenants/acme/invoices/1969-12", "tenants/acme/invoices/+026-11",
        "tenants/acme/invoices/", "tenants/acme/invoices/2026-12",
        "tenants/acme/invoices/9999-12", "tenants/Acme/invoices/2026-11",
        "tenants/-/invoices/2026-11", "tenants/acme/invoice/2026-11",
        "projects/acme/invoices/2026-11", "tenants//invoices/2026-11", ""}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<InvoiceName> r = ParseInvoiceName(bad, now, "name");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(domain::ErrorField(r.status()), "name");
  }
  // The message says why.
  EXPECT_NE(ParseInvoiceName("tenants/acme/invoices/2026-13", now, "name")
                .status()
                .message()
                .find("01 to 12"),
            std::string::npos);
  EXPECT_NE(ParseInvoiceName("tenants/acme/invoices/2026-12", now, "name")
                .status()
                .message()
                .find("has not started"),
            std::string::npos);
}

}  // namespace
}  // namespace trainyard::accounting::pricing::invoice_test
