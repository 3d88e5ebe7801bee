#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "services/api/handler.h"
#include "services/api/resource_handler.h"
#include "services/api/resource_util.h"
#include "services/api/services.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"
#include "trainyard/v1/admin.grpc.pb.h"

namespace trainyard::api {
namespace {

namespace pg = storage::postgres;
namespace v1 = trainyard::v1;

// Token lifetimes (admin.proto, CreateApiTokenRequest.ttl).
constexpr absl::Duration kDefaultTokenTtl = absl::Hours(24 * 90);
constexpr absl::Duration kMaxTokenTtl = absl::Hours(24 * 365);

// API tokens and role bindings live in the AuthStore, not an ObjectStore
// table: only their names go through ResourceKind (MutateResource); their
// writes, and who may make them, are the methods' own.
constexpr ResourceKind<v1::ApiToken> kApiTokens = {
    .plural = "API tokens",
    .parse_name = &ParseKey<&domain::ParseApiTokenName>,
    .name_of = &KeyName<&domain::ApiTokenName>,
};
constexpr ResourceKind<v1::RoleBinding> kRoleBindings = {
    .plural = "role bindings",
    .parse_name = &ParseKey<&domain::ParseRoleBindingName>,
    .name_of = &KeyName<&domain::RoleBindingName>,
};

// A page request of a listing keyed by int64 ids: its size, and the id of the
// token's single key part (0 without a token; INVALID_ARGUMENT on page_token
// when malformed).
struct IdPage {
  int limit = 0;
  int64_t id = 0;
};
absl::StatusOr<IdPage> ParseIdPage(int32_t page_size,
                                   const std::string& token) {
  IdPage page;
  TY_ASSIGN_OR_RETURN(page.limit, PageSize(page_size));
  if (token.empty()) return page;
  TY_ASSIGN_OR_RETURN(const std::vector<std::string> key, PageKey(token, 1));
  if (!absl::SimpleAtoi(key[0], &page.id) || page.id <= 0) {
    return PageTokenError();
  }
  return page;
}

// The numeric id of "roleBindings/{id}" (0 if it is not a number the store can
// hold).
int64_t BindingId(const std::string& name) {
  absl::StatusOr<std::string> id = domain::ParseRoleBindingName(name, "name");
  int64_t out = 0;
  if (!id.ok() || !absl::SimpleAtoi(*id, &out) || out <= 0) return 0;
  return out;
}

absl::Status NotFound(std::string_view name) {
  return absl::NotFoundError(domain::Cat(name, " not found"));
}

// The lifetime a CreateApiToken request asks for.
absl::StatusOr<absl::Duration> TokenTtl(
    const v1::CreateApiTokenRequest& request) {
  if (!request.has_ttl()) return kDefaultTokenTtl;
  TY_ASSIGN_OR_RETURN(const absl::Duration ttl,
                      domain::ToDuration(request.ttl(), "ttl"));
  if (ttl <= absl::ZeroDuration() || ttl > kMaxTokenTtl) {
    return domain::FieldError(
        "ttl", domain::reason::kOutOfRange,
        domain::Cat("must be more than 0 and at most 365 days, got ",
                    absl::FormatDuration(ttl)));
  }
  return ttl;
}

// An optional time filter of a request (`field` when set).
absl::StatusOr<std::optional<absl::Time>> OptionalTime(
    bool set, const google::protobuf::Timestamp& time, std::string_view field) {
  if (!set) return std::nullopt;
  TY_ASSIGN_OR_RETURN(const absl::Time t, domain::ToTime(time, field));
  return t;
}

// A change of tokens or role bindings committed with its audit row: takes
// effect at once on this replica (the authentication cache is flushed).
absl::Status AuthChanged(ApiContext& ctx, MutationAudit& audit) {
  audit.committed = true;
  ctx.auth->InvalidateAll();
  return absl::OkStatus();
}

// A listing's optional `tenant` filter: empty, or a valid tenant id.
absl::Status CheckTenantFilter(const std::string& tenant) {
  if (tenant.empty()) return absl::OkStatus();
  return CheckNewId("tenant", tenant);
}

absl::Status CheckPrincipal(std::string_view field,
                            const std::string& principal) {
  if (domain::IsValidPrincipal(principal)) return absl::OkStatus();
  return domain::FieldError(
      field, domain::reason::kInvalidName,
      domain::Cat("must be users/{id} or serviceAccounts/{id} with 1..128 "
                  "characters of [a-zA-Z0-9._@+-], got ",
                  Quoted(principal)));
}

// Whether `caller` may create tokens for `principal` (someone else):
// platform-admin, or tenant-admin of every tenant where `principal` holds a
// binding (at least one, none of them platform-wide).
absl::Status CheckTokenAuthority(pg::AuthStore* store, const Caller& caller,
                                 const std::string& principal) {
  if (caller.platform_admin) return absl::OkStatus();
  absl::StatusOr<std::vector<v1::RoleBinding>> bindings =
      store->BindingsOf(principal);
  if (!bindings.ok()) return bindings.status();
  if (bindings->empty()) {
    return absl::PermissionDeniedError(domain::Cat(
        caller.principal, " needs role platform-admin to create tokens for ",
        principal, ", which holds no role bindings"));
  }
  for (const v1::RoleBinding& b : *bindings) {
    if (b.role() == v1::ROLE_PLATFORM_ADMIN) {
      return absl::PermissionDeniedError(domain::Cat(
          caller.principal, " needs role platform-admin to create tokens for ",
          principal, ", a platform-admin"));
    }
    if (!caller.Can(b.tenant(), Permission::kAdminTenant)) {
      // Name the tenant only to a caller who can see it.
      if (!caller.Sees(b.tenant())) {
        return absl::PermissionDeniedError(domain::Cat(
            caller.principal, " needs role tenant-admin in every tenant where ",
            principal,
            " holds a role (or platform-admin) to create tokens for them"));
      }
      return absl::PermissionDeniedError(
          domain::Cat(caller.principal, " needs role tenant-admin in tenant ",
                      b.tenant(), " (or platform-admin) to create tokens for ",
                      principal, ", who holds a role there"));
    }
  }
  return absl::OkStatus();
}

// Whether `caller` may create or delete a binding of `role` in `tenant`.
absl::Status CheckBindingAuthority(const Caller& caller, v1::Role role,
                                   const std::string& tenant,
                                   std::string_view verb) {
  if (caller.platform_admin) return absl::OkStatus();
  if (role == v1::ROLE_PLATFORM_ADMIN || tenant.empty()) {
    return absl::PermissionDeniedError(domain::Cat(
        caller.principal, " needs role platform-admin to ", verb,
        " platform-wide bindings (ROLE_PLATFORM_ADMIN, ROLE_FINANCE without "
        "a tenant)"));
  }
  return Require(caller, tenant, Permission::kAdminTenant,
                 domain::TenantName(tenant));
}

class AdminServiceImpl final : public ApiService<v1::AdminService> {
 public:
  using ApiService::ApiService;

  TY_RPC(CreateApiToken, v1::CreateApiTokenRequest,
         v1::CreateApiTokenResponse) {
    return RunMutation(
        ctx_, context, Method("CreateApiToken"), *request, "apiTokens",
        [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
          const std::string principal = request->principal().empty()
                                            ? caller.principal
                                            : request->principal();
          TY_RETURN_IF_ERROR(CheckPrincipal("principal", principal));
          if (principal != caller.principal) {
            TY_RETURN_IF_ERROR(
                CheckTokenAuthority(ctx_->auth_store, caller, principal));
          }
          TY_ASSIGN_OR_RETURN(const absl::Duration ttl, TokenTtl(*request));
          if (request->description().size() > domain::kMaxDescriptionChars) {
            return domain::FieldError(
                "description", domain::reason::kTooLarge,
                domain::Cat("must be at most ", domain::kMaxDescriptionChars,
                            " bytes, got ", request->description().size()));
          }
          NewToken token = GenerateToken();
          audit.record.resource = domain::ApiTokenName(token.id);
          TY_ASSIGN_OR_RETURN(
              *response->mutable_token(),
              Committed(audit, ctx_->auth_store->CreateToken(
                                   token.id, principal, token.hash,
                                   request->description(), caller.principal,
                                   absl::Now() + ttl, &audit.record)));
          response->set_secret(token.secret);
          return absl::OkStatus();
        });
  }

  TY_RPC(ListApiTokens, v1::ListApiTokensRequest, v1::ListApiTokensResponse) {
    return Run(
        ctx_, context, Method("ListApiTokens"), *request,
        [&](const Caller& caller) -> absl::Status {
          std::string principal = request->principal();
          if (principal.empty()) {
            principal = caller.principal;
          } else if (principal == domain::kAllId) {
            TY_RETURN_IF_ERROR(
                RequirePlatformAdmin(caller, "list every principal's tokens"));
            principal.clear();
          } else if (principal != caller.principal) {
            TY_RETURN_IF_ERROR(CheckPrincipal("principal", principal));
            TY_RETURN_IF_ERROR(RequirePlatformAdmin(
                caller, "list another principal's tokens"));
          }
          TY_ASSIGN_OR_RETURN(const int limit, PageSize(request->page_size()));
          std::string after_id;
          if (!request->page_token().empty()) {
            TY_ASSIGN_OR_RETURN(
                const std::vector<std::string> key,
                PageKey(request->page_token(), 1, &domain::IsValidGeneratedId));
            after_id = key[0];
          }
          bool more = false;
          TY_ASSIGN_OR_RETURN(
              std::vector<v1::ApiToken> tokens,
              ctx_->auth_store->ListTokens(principal, after_id, limit, &more));
          for (v1::ApiToken& token : tokens) {
            *response->add_tokens() = std::move(token);
          }
          if (more && response->tokens_size() > 0) {
            absl::StatusOr<std::string> last = domain::ParseApiTokenName(
                response->tokens(response->tokens_size() - 1).name(), "name");
            if (!last.ok()) return absl::InternalError(last.status().message());
            response->set_next_page_token(pg::EncodePageToken({*last}));
          }
          return absl::OkStatus();
        });
  }

  TY_RPC(RevokeApiToken, v1::RevokeApiTokenRequest, v1::ApiToken) {
    return MutateResource(
        ctx_, context, Method("RevokeApiToken"), *request, kApiTokens,
        request->name(), "name",
        [&](const Caller& caller, MutationAudit& audit,
            const NamedObject& token) -> absl::Status {
          const std::string& id = token.key[0];
          absl::StatusOr<pg::TokenRecord> record =
              ctx_->auth_store->GetToken(id);
          if (!record.ok())
            return ExplainStorageError(record.status(), token.name);
          if (record->token.principal() != caller.principal &&
              !caller.platform_admin) {
            // Other principals' tokens are not visible.
            return NotFound(token.name);
          }
          absl::StatusOr<v1::ApiToken> revoked =
              ctx_->auth_store->RevokeToken(id, &audit.record);
          if (!revoked.ok()) {
            return ExplainStorageError(revoked.status(), token.name);
          }
          *response = *std::move(revoked);
          return AuthChanged(*ctx_, audit);
        });
  }

  TY_RPC(CreateRoleBinding, v1::CreateRoleBindingRequest, v1::RoleBinding) {
    return RunMutation(
        ctx_, context, Method("CreateRoleBinding"), *request, "roleBindings",
        [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
          const v1::RoleBinding& binding = request->role_binding();
          TY_RETURN_IF_ERROR(domain::PrefixField(
              domain::ValidateRoleBinding(binding), "role_binding"));
          audit.record.tenant = binding.tenant();
          TY_RETURN_IF_ERROR(CheckBindingAuthority(caller, binding.role(),
                                                   binding.tenant(), "create"));
          absl::StatusOr<v1::RoleBinding> created =
              ctx_->auth_store->CreateRoleBinding(binding, caller.principal,
                                                  &audit.record);
          if (absl::IsFailedPrecondition(created.status())) {
            return domain::AttachErrorInfo(created.status(),
                                           "role_binding.tenant",
                                           reason::kUnknownTenant);
          }
          if (!created.ok()) return created.status();
          *response = *std::move(created);
          return AuthChanged(*ctx_, audit);
        });
  }

  TY_RPC(ListRoleBindings, v1::ListRoleBindingsRequest,
         v1::ListRoleBindingsResponse) {
    return Run(
        ctx_, context, Method("ListRoleBindings"), *request,
        [&](const Caller& caller) -> absl::Status {
          const std::string& tenant = request->tenant();
          const std::string& principal = request->principal();
          TY_RETURN_IF_ERROR(CheckTenantFilter(tenant));
          if (!principal.empty()) {
            TY_RETURN_IF_ERROR(CheckPrincipal("principal", principal));
          }
          TY_ASSIGN_OR_RETURN(
              const IdPage page,
              ParseIdPage(request->page_size(), request->page_token()));

          std::vector<v1::RoleBinding> bindings;
          bool more = false;
          // Appends the first page.limit bindings of `who` (any: "") after
          // page.id, in `tenants` when set.
          auto add = [&](const std::string& who,
                         const std::optional<std::vector<std::string>>& tenants)
              -> absl::Status {
            bool part_more = false;
            TY_ASSIGN_OR_RETURN(
                std::vector<v1::RoleBinding> part,
                ctx_->auth_store->ListRoleBindings(
                    tenant, who, tenants, page.id, page.limit, &part_more));
            more = more || part_more;
            for (v1::RoleBinding& b : part) bindings.push_back(std::move(b));
            return absl::OkStatus();
          };
          if (caller.platform_admin) {
            TY_RETURN_IF_ERROR(add(principal, std::nullopt));
          } else {
            // The bindings of the tenants the caller administers, plus the
            // caller's own: two keyset queries merged by id (each returns the
            // first page.limit after page.id, so the first page.limit of their
            // union are among them).
            std::vector<std::string> administered;
            for (const std::string& t : caller.VisibleTenants()) {
              if ((tenant.empty() || t == tenant) &&
                  caller.Can(t, Permission::kAdminTenant)) {
                administered.push_back(t);
              }
            }
            if (!administered.empty()) {
              TY_RETURN_IF_ERROR(add(principal, administered));
            }
            if (principal.empty() || principal == caller.principal) {
              TY_RETURN_IF_ERROR(add(caller.principal, std::nullopt));
            }
            std::sort(bindings.begin(), bindings.end(),
                      [](const v1::RoleBinding& a, const v1::RoleBinding& b) {
                        return BindingId(a.name()) < BindingId(b.name());
                      });
            bindings.erase(std::unique(bindings.begin(), bindings.end(),
                                       [](const v1::RoleBinding& a,
                                          const v1::RoleBinding& b) {
                                         return a.name() == b.name();
                                       }),
                           bindings.end());
            if (bindings.size() > static_cast<size_t>(page.limit)) {
              bindings.resize(page.limit);
              more = true;
            }
          }
          for (v1::RoleBinding& b : bindings) {
            *response->add_role_bindings() = std::move(b);
          }
          if (more && response->role_bindings_size() > 0) {
            const int64_t last = BindingId(
                response->role_bindings(response->role_bindings_size() - 1)
                    .name());
            response->set_next_page_token(
                pg::EncodePageToken({domain::Cat(last)}));
          }
          return absl::OkStatus();
        });
  }

  TY_RPC(DeleteRoleBinding, v1::DeleteRoleBindingRequest,
         google::protobuf::Empty) {
    return MutateResource(
        ctx_, context, Method("DeleteRoleBinding"), *request, kRoleBindings,
        request->name(), "name",
        [&](const Caller& caller, MutationAudit& audit,
            const NamedObject& binding_name) -> absl::Status {
          const std::string& name = binding_name.name;
          const int64_t id = BindingId(name);
          if (id == 0) return NotFound(name);
          absl::StatusOr<v1::RoleBinding> binding =
              ctx_->auth_store->GetRoleBinding(id);
          if (!binding.ok()) return ExplainStorageError(binding.status(), name);
          audit.record.tenant = binding->tenant();
          absl::Status allowed = CheckBindingAuthority(
              caller, binding->role(), binding->tenant(), "delete");
          if (absl::IsNotFound(allowed)) return NotFound(name);
          TY_RETURN_IF_ERROR(allowed);
          absl::Status deleted =
              ctx_->auth_store->DeleteRoleBinding(id, &audit.record);
          if (!deleted.ok()) return ExplainStorageError(deleted, name);
          return AuthChanged(*ctx_, audit);
        });
  }

  TY_RPC(ListAuditLog, v1::ListAuditLogRequest, v1::ListAuditLogResponse) {
    return Run(
        ctx_, context, Method("ListAuditLog"), *request,
        [&](const Caller& caller) -> absl::Status {
          const std::string& tenant = request->tenant();
          TY_RETURN_IF_ERROR(CheckTenantFilter(tenant));
          if (!caller.platform_admin) {
            if (tenant.empty()) {
              return absl::PermissionDeniedError(domain::Cat(
                  caller.principal,
                  " needs role platform-admin to read the whole audit log; "
                  "set tenant to a "
                  "tenant it administers"));
            }
            TY_RETURN_IF_ERROR(Require(caller, tenant, Permission::kAdminTenant,
                                       domain::TenantName(tenant)));
          }
          TY_ASSIGN_OR_RETURN(
              const std::optional<absl::Time> start,
              OptionalTime(request->has_start_time(), request->start_time(),
                           "start_time"));
          TY_ASSIGN_OR_RETURN(const std::optional<absl::Time> end,
                              OptionalTime(request->has_end_time(),
                                           request->end_time(), "end_time"));
          TY_ASSIGN_OR_RETURN(
              const IdPage page,
              ParseIdPage(request->page_size(), request->page_token()));
          bool more = false;
          TY_ASSIGN_OR_RETURN(
              std::vector<v1::AuditEntry> entries,
              ctx_->auth_store->ListAudit(tenant, request->principal(), start,
                                          end, page.id, page.limit, &more));
          for (v1::AuditEntry& e : entries)
            *response->add_entries() = std::move(e);
          if (more && response->entries_size() > 0) {
            response->set_next_page_token(pg::EncodePageToken({domain::Cat(
                response->entries(response->entries_size() - 1).id())}));
          }
          return absl::OkStatus();
        });
  }

  TY_RPC(WhoAmI, v1::WhoAmIRequest, v1::Caller) {
    return Run(ctx_, context, Method("WhoAmI"), *request,
               [&](const Caller& caller) -> absl::Status {
                 TY_ASSIGN_OR_RETURN(
                     std::vector<v1::RoleBinding> bindings,
                     ctx_->auth_store->BindingsOf(caller.principal));
                 response->set_principal(caller.principal);
                 for (v1::RoleBinding& b : bindings) {
                   *response->add_bindings() = std::move(b);
                 }
                 return absl::OkStatus();
               });
  }
};

}  // namespace

std::unique_ptr<grpc::Service> NewAdminService(ApiContext* ctx) {
  return std::make_unique<AdminServiceImpl>(ctx);
}

}  // namespace trainyard::api
