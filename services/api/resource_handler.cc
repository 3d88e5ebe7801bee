#include "services/api/resource_handler.h"

namespace trainyard::api {

absl::Status Authorize(const Caller& caller, const Access& access,
                       std::string_view verb, std::string_view plural,
                       std::string_view tenant, std::string_view resource) {
  switch (access.rule) {
    case Access::Rule::kAnyCaller:
      return absl::OkStatus();
    case Access::Rule::kTenantRole:
      return Require(caller, tenant, access.permission, resource);
    case Access::Rule::kAccountingReader:
      if (caller.ReadsAccountingOf(tenant)) return absl::OkStatus();
      return Require(caller, tenant, Permission::kFinance, resource);
    case Access::Rule::kPlatformAdmin:
      return RequirePlatformAdmin(caller,
                                  domain::Cat(verb, " ", plural, access.why));
    case Access::Rule::kPlatformAdminIn:
      return RequirePlatformAdminIn(
          caller, tenant, domain::Cat(verb, " ", plural, access.why), resource);
  }
  return absl::InternalError("unknown access rule");
}

void InvalidateCaches(ApiContext& ctx, bool drops_bindings) {
  if (ctx.directory != nullptr) ctx.directory->Invalidate();
  if (drops_bindings) ctx.auth->InvalidateAll();
}

}  // namespace trainyard::api
