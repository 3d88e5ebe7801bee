// trainyard.v1.AccountingService: the price book, the metered usage lines and
// reports, served over the api's context (authentication, the handler path,
// audit rows) by `trainyard accounting` and `trainyard all`.
//
// Who may do what:
//   GetPriceBook   any authenticated caller (prices are platform facts).
//   AddRate, AddSpotPrice, AddCommitment
//                  platform-admin; checked against the stored book (negative
//                  or overflowing prices, unknown or mixed currencies, an
//                  effective time already taken or in a closed month are
//                  INVALID_ARGUMENT naming the field, and nothing is stored).
//   ListUsage, GetReport, ExportReport
//                  finance or tenant-admin of the tenant ("tenants/{t}"),
//                  platform finance (ROLE_FINANCE without a tenant) or
//                  platform-admin (these two also "tenants/-": every tenant).
//   GetInvoice     as GetReport, of one tenant
//                  ("tenants/{t}/invoices/{YYYY-MM}"):
//                  a bad name or a month that has not started is
//                  INVALID_ARGUMENT naming "name", an unknown tenant NOT_FOUND.
//                  DRAFT until the month is closed (close_after), then FINAL.
//   CreateBudget, UpdateBudget, DeleteBudget
//                  finance or tenant-admin of the tenant, or platform-admin.
//   GetBudget, ListBudgets
//                  as ListUsage; with the meter's status of the month
//                  (spent, forecast, active_action).
#ifndef TRAINYARD_SERVICES_ACCOUNTING_ACCOUNTING_SERVICE_H_
#define TRAINYARD_SERVICES_ACCOUNTING_ACCOUNTING_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "services/accounting/pricing/price_book.h"
#include "services/api/context.h"

namespace trainyard::accounting {

struct AccountingServiceOptions {
  // The book's currency while no price is stored.
  std::string currency = "USD";
  // A month is closed (its prices immutable) once this long has passed
  // since it ended.
  absl::Duration close_after = absl::Hours(24 * 5);
};

// The start of the first month that is still open at `now`: months that ended
// more than `close_after` before `now` are closed.
pricing::TimeMs ClosedBefore(absl::Time now, absl::Duration close_after);

std::unique_ptr<grpc::Service> NewAccountingService(
    api::ApiContext* ctx, AccountingServiceOptions options);

}  // namespace trainyard::accounting

#endif  // TRAINYARD_SERVICES_ACCOUNTING_ACCOUNTING_SERVICE_H_
