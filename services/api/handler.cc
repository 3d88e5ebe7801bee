#include "services/api/handler.h"

#include <utility>

#include "services/api/status.h"
#include "services/lib/domain/validation.h"

namespace trainyard::api {

namespace {

// Authenticates the caller and replies with what `body` returns.
grpc::Status Authenticated(
    ApiContext* ctx, grpc::ServerContextBase* context,
    absl::FunctionRef<absl::Status(const Caller&)> body) {
  absl::StatusOr<Caller> caller = ctx->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  return Reply(context, body(*caller));
}

// The rules every method keeps (handler.h, "Admission").
absl::Status Admit(const Caller& caller, std::string_view method,
                   const google::protobuf::Message& request) {
  TY_RETURN_IF_ERROR(AllowJobTokenMethod(caller, method));
  return domain::CheckRequestText(request);
}

}  // namespace

grpc::Status Run(ApiContext* ctx, grpc::ServerContextBase* context,
                 std::string_view method,
                 const google::protobuf::Message& request,
                 absl::FunctionRef<absl::Status(const Caller&)> fn) {
  return Authenticated(ctx, context, [&](const Caller& caller) {
    TY_RETURN_IF_ERROR(Admit(caller, method, request));
    return fn(caller);
  });
}

grpc::Status RunMutation(
    ApiContext* ctx, grpc::ServerContextBase* context, std::string_view method,
    const google::protobuf::Message& request, std::string resource,
    absl::FunctionRef<absl::Status(const Caller&, MutationAudit&)> fn) {
  return Authenticated(ctx, context, [&](const Caller& caller) {
    MutationAudit audit{MakeAudit(caller, method, resource, "", request)};
    absl::Status status = Admit(caller, method, request);
    if (status.ok()) status = fn(caller, audit);
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
