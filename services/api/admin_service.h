// trainyard.v1.AdminService: API tokens, role bindings, the audit log, WhoAmI.
//
//   CreateApiToken     principal "" = the caller. A token for another principal
//   needs
//                      platform-admin, or tenant-admin in every tenant where
//                      that principal holds bindings (it must hold at least
//                      one, none of them platform-admin). ttl unset = 90 days,
//                      at most 365 days. The secret is returned once; only its
//                      hash is stored.
//   ListApiTokens      principal "" = the caller's; another principal, or "-"
//   for all, needs
//                      platform-admin.
//   RevokeApiToken     own tokens, or platform-admin (others' tokens are
//   NOT_FOUND to other
//                      callers). Takes effect at once on this replica.
//   CreateRoleBinding  platform-admin: any; tenant-admin: bindings in its
//   tenants, never
//                      ROLE_PLATFORM_ADMIN.
//   ListRoleBindings   platform-admin: all; others: the bindings of the tenants
//   they
//                      administer plus their own.
//   DeleteRoleBinding  same rights as CreateRoleBinding on the binding's tenant
//   and role. ListAuditLog       platform-admin: all (optionally one tenant);
//   tenant-admin: `tenant` must
//                      be set to a tenant it administers.
//   WhoAmI             the caller and its bindings.
//
// Mutations write an audit row and, where roles or tokens change, flush the
// authentication cache of this replica.
#ifndef TRAINYARD_SERVICES_API_ADMIN_SERVICE_H_
#define TRAINYARD_SERVICES_API_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "services/api/context.h"
#include "trainyard/v1/admin.grpc.pb.h"

namespace trainyard::api {

class AdminServiceImpl final : public trainyard::v1::AdminService::Service {
 public:
  explicit AdminServiceImpl(ApiContext* ctx) : ctx_(ctx) {}

  grpc::Status CreateApiToken(
      grpc::ServerContext* context,
      const trainyard::v1::CreateApiTokenRequest* request,
      trainyard::v1::CreateApiTokenResponse* response) override;
  grpc::Status ListApiTokens(
      grpc::ServerContext* context,
      const trainyard::v1::ListApiTokensRequest* request,
      trainyard::v1::ListApiTokensResponse* response) override;
  grpc::Status RevokeApiToken(
      grpc::ServerContext* context,
      const trainyard::v1::RevokeApiTokenRequest* request,
      trainyard::v1::ApiToken* response) override;
  grpc::Status CreateRoleBinding(
      grpc::ServerContext* context,
      const trainyard::v1::CreateRoleBindingRequest* request,
      trainyard::v1::RoleBinding* response) override;
  grpc::Status ListRoleBindings(
      grpc::ServerContext* context,
      const trainyard::v1::ListRoleBindingsRequest* request,
      trainyard::v1::ListRoleBindingsResponse* response) override;
  grpc::Status DeleteRoleBinding(
      grpc::ServerContext* context,
      const trainyard::v1::DeleteRoleBindingRequest* request,
      google::protobuf::Empty* response) override;
  grpc::Status ListAuditLog(
      grpc::ServerContext* context,
      const trainyard::v1::ListAuditLogRequest* request,
      trainyard::v1::ListAuditLogResponse* response) override;
  grpc::Status WhoAmI(grpc::ServerContext* context,
                      const trainyard::v1::WhoAmIRequest* request,
                      trainyard::v1::Caller* response) override;

 private:
  ApiContext* ctx_;
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_ADMIN_SERVICE_H_
