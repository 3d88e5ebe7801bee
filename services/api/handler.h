// The one path every API handler takes (JobService, QueueService,
// ClusterService, AdminService): authenticate the caller, admit the call (the
// rules that hold for every method, below), run the handler's body (which
// authorizes and does the work, and reports through an absl::Status), write
// the audit row of a refused or failed mutation, and turn the status into the
// gRPC reply (Reply: the ErrorInfo trailer; INTERNAL details are logged, not
// returned).
//
// Admission, before any body runs:
//   * a job token may call only the methods of auth.h's kJobTokenMethods
//     (PERMISSION_DENIED naming the token's job);
//   * every string field of the request is valid UTF-8 without NUL bytes
//     (domain::CheckRequestText: INVALID_ARGUMENT naming the field), so no
//     handler can store text that PostgreSQL would refuse or cut short.
//
// Unauthenticated calls are refused before the body runs, without an audit row
// (there is no principal to record).
#ifndef TRAINYARD_SERVICES_API_HANDLER_H_
#define TRAINYARD_SERVICES_API_HANDLER_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "services/api/auth.h"
#include "services/api/context.h"
#include "services/lib/domain/status_macros.h"
#include "storage/postgres/object_store.h"

namespace trainyard::api {

// The audit row of one mutation. Handlers fill in `record.resource` and
// `record.tenant` once they know them, pass &record to the storage call (which
// commits it with the change), and mark it `committed` when that call
// succeeded (Committed).
struct MutationAudit {
  storage::postgres::AuditRecord record;
  bool committed = false;
};

// Runs a handler that writes no audit row (reads; JobService, whose changes
// the job's own history records): authenticates the caller, admits the call
// (`method`: the full RPC name, see ApiService::Method; `request`: its
// message), runs `fn`, and returns Reply(context, status).
grpc::Status Run(ApiContext* ctx, grpc::ServerContextBase* context,
                 std::string_view method,
                 const google::protobuf::Message& request,
                 absl::FunctionRef<absl::Status(const Caller&)> fn);

// Runs an audited mutation: authenticates the caller, builds its audit record
// (MakeAudit(caller, method, resource, "", request)), admits the call, runs
// `fn`, and when the call is refused or `fn` fails before its change committed
// writes the failure's audit row (AuditFailure). Returns Reply(context,
// status).
grpc::Status RunMutation(
    ApiContext* ctx, grpc::ServerContextBase* context, std::string_view method,
    const google::protobuf::Message& request, std::string resource,
    absl::FunctionRef<absl::Status(const Caller&, MutationAudit&)> fn);

// The base of the API's service classes: the gRPC service `Base` (by default
// Grpc::Service; JobService adds callback methods), the handlers' ApiContext,
// and Method, the full name of one of the service's RPCs ("CreateQueue" →
// "/trainyard.v1.QueueService/CreateQueue"), which audit rows record.
template <typename Grpc, typename Base = typename Grpc::Service>
class ApiService : public Base {
 public:
  explicit ApiService(ApiContext* ctx) : ctx_(ctx) {}

 protected:
  static std::string Method(std::string_view rpc) {
    return std::string("/") + Grpc::service_full_name() + "/" +
           std::string(rpc);
  }

  ApiContext* ctx_;
};

// Declares, in a service class, the handler of the unary RPC `Rpc` that takes
// a `Request` and answers a `Response`; its parameters are `context`,
// `request` and `response`:
//   TY_RPC(GetCapacity, v1::GetCapacityRequest, v1::CapacitySummary) {
//     return Run(ctx_, context, Method("GetCapacity"), *request, ...);
//   }
#define TY_RPC(Rpc, Request, Response)                                   \
  grpc::Status Rpc(grpc::ServerContext* context, const Request* request, \
                   [[maybe_unused]] Response* response) override

// `result` of a storage call that carried `audit.record`; marks the record
// committed when the call succeeded.
template <typename T>
absl::StatusOr<T> Committed(MutationAudit& audit, absl::StatusOr<T> result) {
  if (result.ok()) audit.committed = true;
  return result;
}
absl::Status Committed(MutationAudit& audit, absl::Status result);

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_HANDLER_H_
