// One generic implementation of the administrative CRUD methods over the
// ObjectStore kinds (tenants, projects, queues, cohorts, priority classes,
// clusters, flavors, pools, nodes). A kind is described once, by a
// ResourceKind<T>: its names, who may use each verb, its table, its validation
// and reference checks, how violated constraints read; each RPC handler binds
// its request to the kind in a few lines.
//
// The other methods on one named object (GetQueueStatus, SetNodeState,
// RevokeApiToken, DeleteRoleBinding) share the first steps through
// ReadResource and MutateResource; API tokens and role bindings, kept by the
// AuthStore, use a ResourceKind for their names only.
//
// Every method runs on handler.h's path (authenticate, audit, reply), in this
// order:
//   Create  parse the parent (children) → audit tenant → authorize against the
//           parent → check the new id → audit resource → clear output-only
//           fields → validate → check references → insert with the audit row
//           → invalidate the Directory cache
//   Get     parse the name → authorize → read
//   List    the handler's selection (parent, filters, page request) → read one
//           page
//   Update  parse the patch's name → audit resource and tenant → authorize →
//           check the references of the masked fields → read-modify-write
//           (mask, etag, validation of the merged object) with the audit row →
//           invalidate
//   Delete  parse the name → audit resource and tenant → authorize → delete
//           with the audit row → invalidate (and flush the authentication
//           cache where role bindings go with the object)
#ifndef TRAINYARD_SERVICES_API_RESOURCE_HANDLER_H_
#define TRAINYARD_SERVICES_API_RESOURCE_HANDLER_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/field_mask.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "services/api/auth.h"
#include "services/api/context.h"
#include "services/api/handler.h"
#include "services/api/resource_util.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"
#include "storage/postgres/object_store.h"

namespace trainyard::api {

// The key columns of a stored object, in order: {"acme"} for tenants/acme,
// {"acme", "q1"} for tenants/acme/queues/q1.
using ResourceKey = std::vector<std::string>;

// --- Who may do what ---

// What one verb on a kind requires of the caller. The permission messages of
// the platform-admin rules name the action "<verb> <plural><why>" ("create
// queues (their quotas grant capacity)").
struct Access {
  enum class Rule {
    kAnyCaller,         // any authenticated caller
    kTenantRole,        // Require(caller, tenant, permission, resource)
    kPlatformAdmin,     // RequirePlatformAdmin(caller, action)
    kPlatformAdminIn,   // RequirePlatformAdminIn(caller, tenant, action,
                        // resource)
    kAccountingReader,  // Caller::ReadsAccountingOf(tenant), else as
                        // kTenantRole with Permission::kFinance
  };
  Rule rule = Rule::kAnyCaller;
  Permission permission = Permission::kRead;  // kTenantRole
  std::string_view why;
};

// The rule of each verb (List's is the handler's selection).
struct AccessPolicy {
  Access create;
  Access read;
  Access update;
  Access remove;
};

// Reads for any caller, writes for platform admins: the platform's objects.
inline constexpr AccessPolicy kPlatformObjects = {
    .create = {.rule = Access::Rule::kPlatformAdmin},
    .update = {.rule = Access::Rule::kPlatformAdmin},
    .remove = {.rule = Access::Rule::kPlatformAdmin}};

// Applies `access` for `verb` ("create") on an object of the kind named
// `plural`: `tenant` is the tenant the object is in ("" if none), `resource`
// the name a refusal reports.
absl::Status Authorize(const Caller& caller, const Access& access,
                       std::string_view verb, std::string_view plural,
                       std::string_view tenant, std::string_view resource);

// --- Kinds ---

// One kind of administrative object, stored as T in an ObjectStore table
// (`store`; null for the kinds described only by their names).
template <typename T>
struct ResourceKind {
  // The object's field in Create and Update requests ("priority_class"): the
  // prefix of its field errors. A Create names the new id "<field>_id", an
  // Update the object "<field>.name".
  std::string_view field;
  // The kind in permission messages ("priority classes").
  std::string_view plural;
  // Children: the segment under the parent ("projects" in
  // tenants/{t}/projects/{p}).
  std::string_view collection;

  // "tenants/acme/queues/q1" → {"acme", "q1"} (field errors on `field`), and
  // back.
  absl::StatusOr<ResourceKey> (*parse_name)(std::string_view name,
                                            std::string_view field) = nullptr;
  std::string (*name_of)(const ResourceKey& key) = nullptr;
  // Children: the parent's id from a Create's `parent`, and the parent's name.
  // Null for top-level kinds.
  absl::StatusOr<std::string> (*parse_parent)(std::string_view parent,
                                              std::string_view field) = nullptr;
  std::string (*parent_name)(std::string_view id) = nullptr;
  // Whether key[0] is a tenant: the audit rows of writes carry it, and the
  // access rules on a tenant apply to it.
  bool in_tenant = false;

  AccessPolicy access;

  // The table, and the values of its extra columns for an object (null: none).
  const storage::postgres::ObjectKind& (*store)() = nullptr;
  std::vector<std::optional<std::string>> (*extra_columns)(const T& object) =
      nullptr;
  // The top-level fields an Update may change.
  UpdatableFields updatable;

  // The whole object, as a Create gives it or an Update leaves it; errors
  // relative to the object.
  absl::Status (*validate)(const ApiContext& ctx, const ResourceKey& key,
                           const T& object) = nullptr;
  // The objects `object` names exist: all of them on a Create (mask null),
  // those of the fields `mask` covers on an Update (object: the patch). Field
  // errors relative to the request. Optional.
  absl::Status (*check_references)(
      const ApiContext& ctx, const ResourceKey& key, const T& object,
      const google::protobuf::FieldMask* mask) = nullptr;
  // How the constraints a Create or Update (object: as requested) and a
  // Delete may violate read (ExplainStorageError). Optional.
  std::vector<ConstraintMessage> (*write_conflicts)(const ResourceKey& key,
                                                    const T& object) = nullptr;
  std::vector<ConstraintMessage> (*delete_conflicts)(const ResourceKey& key) =
      nullptr;
  // Clears the output-only fields of an object a Create stores. Optional.
  void (*clear_output_only)(T* object) = nullptr;
  // Deleting one deletes role bindings too (ON DELETE CASCADE): the
  // authentication cache is flushed.
  bool delete_drops_bindings = false;
};

// Adapters from core's name functions (names.h) to keys, for
// ResourceKind::parse_name and name_of:
//   .parse_name = &ParseKey<&domain::ParseQueueName>,
//   .name_of = &KeyName<&domain::QueueName>,
inline ResourceKey ToKey(std::string id) { return {std::move(id)}; }
inline ResourceKey ToKey(domain::TenantChildName name) {
  return {std::move(name.tenant), std::move(name.id)};
}
inline ResourceKey ToKey(domain::ClusterChildName name) {
  return {std::move(name.cluster), std::move(name.id)};
}
template <auto Parse>
absl::StatusOr<ResourceKey> ParseKey(std::string_view name,
                                     std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto parsed, Parse(name, field));
  return ToKey(std::move(parsed));
}
template <auto Name>
std::string KeyName(const ResourceKey& key) {
  if constexpr (std::is_invocable_v<decltype(Name), std::string_view>) {
    return Name(key[0]);
  } else {
    return Name(key[0], key[1]);
  }
}

// Whether a write changes `field` (a top-level field): every field on a Create
// (mask null), those `mask` covers on an Update.
inline bool Changes(const google::protobuf::FieldMask* mask,
                    std::string_view field) {
  return mask == nullptr || MaskCovers(*mask, field);
}

// The tenant an object of `kind` with `key` is in ("" for platform objects).
template <typename T>
std::string_view TenantOf(const ResourceKind<T>& kind, const ResourceKey& key) {
  if (!kind.in_tenant || key.empty()) return {};
  return key[0];
}

// --- Storage steps (errors worded by ExplainStorageError) ---

// Reads one object.
template <typename T>
absl::StatusOr<T> GetObject(ApiContext& ctx, const ResourceKind<T>& kind,
                            const ResourceKey& key, std::string_view name) {
  absl::StatusOr<storage::postgres::StoredObject> row =
      ctx.objects->Get(kind.store(), key);
  if (!row.ok()) return ExplainStorageError(row.status(), name);
  return Decode<T>(*row, name);
}

// Every object of `kind` matching `query` (ListAll), decoded and named.
template <typename T>
absl::StatusOr<std::vector<T>> ReadAll(
    ApiContext& ctx, const ResourceKind<T>& kind,
    storage::postgres::ListQuery query = {}) {
  TY_ASSIGN_OR_RETURN(std::vector<storage::postgres::StoredObject> rows,
                      ListAll(ctx.objects, kind.store(), std::move(query)));
  std::vector<T> out;
  out.reserve(rows.size());
  for (const storage::postgres::StoredObject& row : rows) {
    TY_ASSIGN_OR_RETURN(out.emplace_back(),
                        Decode<T>(row, kind.name_of(row.key)));
  }
  return out;
}

// The extra columns of `object` (none when the kind has no extra columns).
template <typename T>
std::vector<std::optional<std::string>> ExtraColumnsOf(
    const ResourceKind<T>& kind, const T& object) {
  if (kind.extra_columns == nullptr) return {};
  return kind.extra_columns(object);
}

// A mutation of the object as stored: its body (server fields cleared) and
// extra columns.
template <typename T>
storage::postgres::ObjectStore::Mutation Stored(const ResourceKind<T>& kind,
                                                T object) {
  ClearServerFields(&object);
  return {object.SerializeAsString(), ExtraColumnsOf(kind, object)};
}

// Inserts `object` with the audit row and returns it as stored.
template <typename T>
absl::StatusOr<T> CreateObject(ApiContext& ctx, const ResourceKind<T>& kind,
                               const ResourceKey& key, std::string_view name,
                               const T& object, MutationAudit& audit,
                               const std::vector<ConstraintMessage>& messages) {
  storage::postgres::ObjectStore::Mutation stored = Stored(kind, object);
  absl::StatusOr<storage::postgres::StoredObject> row = ctx.objects->Create(
      kind.store(), key, stored.extras, stored.body, &audit.record);
  if (!row.ok()) return ExplainStorageError(row.status(), name, messages);
  audit.committed = true;
  return Decode<T>(*row, name);
}

// Read-modify-write of one object with the audit row: compares `etag` (none:
// any version; ABORTED on a mismatch), lets `modify` change the stored object
// (as stored, server fields included) and writes it with its extra columns.
template <typename T>
absl::StatusOr<T> ModifyObject(
    ApiContext& ctx, const ResourceKind<T>& kind, const ResourceKey& key,
    std::string_view name, std::string_view etag,
    absl::FunctionRef<absl::Status(T& object)> modify, MutationAudit& audit,
    const std::vector<ConstraintMessage>& messages = {}) {
  TY_ASSIGN_OR_RETURN(const int64_t expected, ExpectedVersion(etag, name));
  absl::StatusOr<storage::postgres::StoredObject> row = ctx.objects->Update(
      kind.store(), key, expected,
      [&](const storage::postgres::StoredObject& current)
          -> absl::StatusOr<storage::postgres::ObjectStore::Mutation> {
        T object;
        if (!object.ParseFromString(current.body)) {
          return absl::InternalError(StoredBodyError(name));
        }
        TY_RETURN_IF_ERROR(modify(object));
        return storage::postgres::ObjectStore::Mutation{
            object.SerializeAsString(), ExtraColumnsOf(kind, object)};
      },
      &audit.record);
  if (!row.ok()) {
    if (IsEtagMismatch(row.status())) return EtagMismatch(name, etag);
    return ExplainStorageError(row.status(), name, messages);
  }
  audit.committed = true;
  return Decode<T>(*row, name);
}

// Read-modify-write of one object with the audit row: checks the mask,
// compares the etag of `patch`, merges the masked fields of `patch` into the
// stored object, validates the result (kind.validate, prefixed with
// kind.field) and writes it (server fields cleared).
template <typename T>
absl::StatusOr<T> UpdateObject(ApiContext& ctx, const ResourceKind<T>& kind,
                               const ResourceKey& key, std::string_view name,
                               const T& patch,
                               const google::protobuf::FieldMask& mask,
                               MutationAudit& audit,
                               const std::vector<ConstraintMessage>& messages) {
  TY_RETURN_IF_ERROR(CheckUpdateMask(mask, T::descriptor(), kind.updatable));
  return ModifyObject<T>(
      ctx, kind, key, name, patch.etag(),
      [&](T& merged) -> absl::Status {
        ApplyUpdateMask(patch, mask, kind.updatable, &merged);
        ClearServerFields(&merged);
        return domain::PrefixField(kind.validate(ctx, key, merged), kind.field);
      },
      audit, messages);
}

// Marks the Directory cache (and, for `drops_bindings`, the authentication
// cache) stale after a write.
void InvalidateCaches(ApiContext& ctx, bool drops_bindings = false);

// --- The methods ---

template <typename T>
std::vector<ConstraintMessage> WriteConflicts(const ResourceKind<T>& kind,
                                              const ResourceKey& key,
                                              const T& object) {
  if (kind.write_conflicts == nullptr) return {};
  return kind.write_conflicts(key, object);
}

// Create<Kind>(parent, <field>_id, <field>): `parent` is ignored for top-level
// kinds.
template <typename T>
grpc::Status CreateResource(ApiContext* ctx, grpc::ServerContext* context,
                            std::string_view method,
                            const google::protobuf::Message& request,
                            const ResourceKind<T>& kind,
                            std::string_view parent, const std::string& id,
                            const T& object, T* response) {
  const bool child = kind.parse_parent != nullptr;
  std::string resource =
      child ? domain::Cat(parent, "/", kind.collection, "/", id)
            : kind.name_of({id});
  return RunMutation(
      ctx, context, method, request, std::move(resource),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        ResourceKey key;
        std::string parent_name;
        if (child) {
          TY_ASSIGN_OR_RETURN(std::string owner,
                              kind.parse_parent(parent, "parent"));
          parent_name = kind.parent_name(owner);
          key.push_back(std::move(owner));
          audit.record.tenant = TenantOf(kind, key);
        }
        TY_RETURN_IF_ERROR(Authorize(caller, kind.access.create, "create",
                                     kind.plural, TenantOf(kind, key),
                                     parent_name));
        TY_RETURN_IF_ERROR(CheckNewId(domain::Cat(kind.field, "_id"), id));
        key.push_back(id);
        const std::string name = kind.name_of(key);
        audit.record.resource = name;
        audit.record.tenant = TenantOf(kind, key);
        T created = object;
        if (kind.clear_output_only != nullptr) kind.clear_output_only(&created);
        TY_RETURN_IF_ERROR(
            domain::PrefixField(kind.validate(*ctx, key, created), kind.field));
        if (kind.check_references != nullptr) {
          TY_RETURN_IF_ERROR(
              kind.check_references(*ctx, key, created, /*mask=*/nullptr));
        }
        TY_ASSIGN_OR_RETURN(*response,
                            CreateObject(*ctx, kind, key, name, created, audit,
                                         WriteConflicts(kind, key, created)));
        InvalidateCaches(*ctx);
        return absl::OkStatus();
      });
}

// An object a request names: its key and canonical name.
struct NamedObject {
  ResourceKey key;
  std::string name;
};

// A verb on one object ("update") and who may use it: Authorize's rule, and
// the objects a refusal names ("<verb> <plural>": the kind's plural unless
// `plural` is given).
struct Verb {
  std::string_view name;
  Access access;
  std::string_view plural;
};

// Applies `verb` to `object`, of `kind`.
template <typename T>
absl::Status Authorize(const Caller& caller, const ResourceKind<T>& kind,
                       const Verb& verb, const NamedObject& object) {
  return Authorize(caller, verb.access, verb.name,
                   verb.plural.empty() ? kind.plural : verb.plural,
                   TenantOf(kind, object.key), object.name);
}

// Runs a reading handler (`method`, `request`: handler.h's Run) on the object
// of `kind` that `name` names: parses it (field "name"), applies
// kind.access.read, and runs `fn`.
template <typename T>
grpc::Status ReadResource(
    ApiContext* ctx, grpc::ServerContext* context, std::string_view method,
    const google::protobuf::Message& request, const ResourceKind<T>& kind,
    const std::string& name,
    absl::FunctionRef<absl::Status(const Caller&, const NamedObject&)> fn) {
  return Run(
      ctx, context, method, request, [&](const Caller& caller) -> absl::Status {
        TY_ASSIGN_OR_RETURN(ResourceKey key, kind.parse_name(name, "name"));
        const NamedObject object{key, kind.name_of(key)};
        TY_RETURN_IF_ERROR(
            Authorize(caller, kind, {"read", kind.access.read}, object));
        return fn(caller, object);
      });
}

// Runs an audited mutation of the object of `kind` that `name` (the request
// field `field`) names: parses it, records its canonical name and tenant in
// the audit row, and runs `fn`, which authorizes.
template <typename T>
grpc::Status MutateResource(
    ApiContext* ctx, grpc::ServerContext* context, std::string_view method,
    const google::protobuf::Message& request, const ResourceKind<T>& kind,
    const std::string& name, std::string_view field,
    absl::FunctionRef<absl::Status(const Caller&, MutationAudit&,
                                   const NamedObject&)>
        fn) {
  return RunMutation(
      ctx, context, method, request, name,
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        TY_ASSIGN_OR_RETURN(ResourceKey key, kind.parse_name(name, field));
        const NamedObject object{key, kind.name_of(key)};
        audit.record.resource = object.name;
        audit.record.tenant = TenantOf(kind, key);
        return fn(caller, audit, object);
      });
}

// MutateResource for the callers `verb` admits: applies it to the object
// before `fn` runs.
template <typename T>
grpc::Status MutateResource(
    ApiContext* ctx, grpc::ServerContext* context, std::string_view method,
    const google::protobuf::Message& request, const ResourceKind<T>& kind,
    const Verb& verb, const std::string& name, std::string_view field,
    absl::FunctionRef<absl::Status(MutationAudit&, const NamedObject&)> fn) {
  return MutateResource(
      ctx, context, method, request, kind, name, field,
      [&](const Caller& caller, MutationAudit& audit,
          const NamedObject& object) -> absl::Status {
        TY_RETURN_IF_ERROR(Authorize(caller, kind, verb, object));
        return fn(audit, object);
      });
}

// Get<Kind>(name).
template <typename T>
grpc::Status GetResource(ApiContext* ctx, grpc::ServerContext* context,
                         std::string_view method,
                         const google::protobuf::Message& request,
                         const ResourceKind<T>& kind, const std::string& name,
                         T* response) {
  return ReadResource(
      ctx, context, method, request, kind, name,
      [&](const Caller&, const NamedObject& object) -> absl::Status {
        TY_ASSIGN_OR_RETURN(*response,
                            GetObject(*ctx, kind, object.key, object.name));
        return absl::OkStatus();
      });
}

// The query of a page request (page_size, page_token) of `kind`, without
// conditions.
template <typename T, typename Request>
absl::StatusOr<storage::postgres::ListQuery> PageOf(const ResourceKind<T>& kind,
                                                    const Request& request) {
  return PageQuery(request.page_size(), request.page_token(),
                   kind.store().key_columns.size());
}

// The selection of a List without parent or filters: the page asked for.
template <typename T, typename Request>
absl::StatusOr<storage::postgres::ListQuery> PageOnly(
    const ResourceKind<T>& kind, const Caller&, const Request& request) {
  return PageOf(kind, request);
}

// The `parent` of a Create request; "" for top-level kinds, whose requests
// have none.
template <typename Request>
std::string_view ParentOf(const Request& request) {
  if constexpr (requires { request.parent(); }) {
    return request.parent();
  } else {
    return {};
  }
}

// List<Kinds>: `select` checks the request's parent and filters for the caller
// and returns the query of the page asked for (PageOf plus conditions); the
// page's objects go to `out`, the token of the next page to `next_page_token`.
template <typename T>
grpc::Status ListResources(
    ApiContext* ctx, grpc::ServerContext* context, std::string_view method,
    const google::protobuf::Message& request, const ResourceKind<T>& kind,
    absl::FunctionRef<
        absl::StatusOr<storage::postgres::ListQuery>(const Caller&)>
        select,
    google::protobuf::RepeatedPtrField<T>* out, std::string* next_page_token) {
  return Run(
      ctx, context, method, request, [&](const Caller& caller) -> absl::Status {
        TY_ASSIGN_OR_RETURN(storage::postgres::ListQuery query, select(caller));
        TY_ASSIGN_OR_RETURN(storage::postgres::ListPage page,
                            ctx->objects->List(kind.store(), query));
        for (const storage::postgres::StoredObject& row : page.objects) {
          TY_RETURN_IF_ERROR(
              DecodeStored(row, kind.name_of(row.key), out->Add()));
        }
        *next_page_token = NextPageToken(page);
        return absl::OkStatus();
      });
}

// Update<Kind>(<field>, update_mask).
template <typename T>
grpc::Status UpdateResource(ApiContext* ctx, grpc::ServerContext* context,
                            std::string_view method,
                            const google::protobuf::Message& request,
                            const ResourceKind<T>& kind, const T& patch,
                            const google::protobuf::FieldMask& mask,
                            T* response) {
  return MutateResource(
      ctx, context, method, request, kind, {"update", kind.access.update},
      patch.name(), domain::JoinField(kind.field, "name"),
      [&](MutationAudit& audit, const NamedObject& object) -> absl::Status {
        const ResourceKey& key = object.key;
        if (kind.check_references != nullptr) {
          TY_RETURN_IF_ERROR(kind.check_references(*ctx, key, patch, &mask));
        }
        TY_ASSIGN_OR_RETURN(
            *response, UpdateObject(*ctx, kind, key, object.name, patch, mask,
                                    audit, WriteConflicts(kind, key, patch)));
        InvalidateCaches(*ctx);
        return absl::OkStatus();
      });
}

// Delete<Kind>(name).
template <typename T>
grpc::Status DeleteResource(ApiContext* ctx, grpc::ServerContext* context,
                            std::string_view method,
                            const google::protobuf::Message& request,
                            const ResourceKind<T>& kind,
                            const std::string& name) {
  return MutateResource(
      ctx, context, method, request, kind, {"delete", kind.access.remove}, name,
      "name",
      [&](MutationAudit& audit, const NamedObject& object) -> absl::Status {
        std::vector<ConstraintMessage> messages;
        if (kind.delete_conflicts != nullptr) {
          messages = kind.delete_conflicts(object.key);
        }
        absl::Status deleted =
            ctx->objects->Delete(kind.store(), object.key, &audit.record);
        if (!deleted.ok()) {
          return ExplainStorageError(deleted, object.name, messages);
        }
        audit.committed = true;
        InvalidateCaches(*ctx, kind.delete_drops_bindings);
        return absl::OkStatus();
      });
}

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_RESOURCE_HANDLER_H_
