#include "services/api/handler.h"

#include <utility>

#include "services/api/status.h"

namespace trainyard::api {

grpc::Status Run(ApiContext* ctx, grpc::ServerContextBase* context,
                 absl::FunctionRef<absl::Status(const Caller&)> fn) {
  absl::StatusOr<Caller> caller = ctx->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  return Reply(context, fn(*caller));
}

grpc::Status RunMutation(
    ApiContext* ctx, grpc::ServerContextBase* context, std::string_view method,
    const google::protobuf::Message& request, std::string resource,
    absl::FunctionRef<absl::Status(const Caller&, MutationAudit&)> fn) {
  return Run(ctx, context, [&](const Caller& caller) {
    MutationAudit audit{MakeAudit(caller, method, resource, "", request)};
    absl::Status status = fn(caller, audit);
    if (!status.ok() && !audit.committed) {
      AuditFailure(*ctx, audit.record, status);
    }
    return status;
  });
}

absl::Status Committed(MutationAudit& audit, absl::Status result) {
  if (result.ok()) audit.committed = true;
  return result;
}

}  // namespace trainyard::api
