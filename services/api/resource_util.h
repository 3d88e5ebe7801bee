// Helpers shared by the administrative services (QueueService, ClusterService,
// AdminService): the plumbing between a gRPC handler and the generic
// ObjectStore — authentication and audit around a handler, server-set fields of
// stored objects, update masks, etags, page tokens, and the translation of
// storage errors into sentences a client can act on.
//
// No business rules live here: validation is services/core, authorization
// services/api/auth.h.
#ifndef TRAINYARD_SERVICES_API_RESOURCE_UTIL_H_
#define TRAINYARD_SERVICES_API_RESOURCE_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/field_mask.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "google/protobuf/timestamp.pb.h"
#include "services/api/auth.h"
#include "services/api/context.h"
#include "storage/postgres/object_store.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/queue.pb.h"

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#ifndef TY_RETURN_IF_ERROR
#define TY_RETURN_IF_ERROR(expr)                \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (false)
#endif

namespace trainyard::api {

// Reason codes (trainyard.v1.ErrorInfo.reason) the administrative services add
// to core's.
namespace reason {
// A field names an object that does not exist ("queue.quotas[0].flavor").
inline constexpr std::string_view kUnknownTenant = "UNKNOWN_TENANT";
inline constexpr std::string_view kUnknownCohort = "UNKNOWN_COHORT";
inline constexpr std::string_view kUnknownFlavor = "UNKNOWN_FLAVOR";
inline constexpr std::string_view kUnknownCluster = "UNKNOWN_CLUSTER";
inline constexpr std::string_view kUnknownPool = "UNKNOWN_POOL";
inline constexpr std::string_view kUnknownPriorityClass =
    "UNKNOWN_PRIORITY_CLASS";
// The object cannot be deleted while others reference it.
inline constexpr std::string_view kInUse = "IN_USE";
// An update_mask path names no field, or a field that cannot be updated.
inline constexpr std::string_view kBadUpdateMask = "INVALID_UPDATE_MASK";
}  // namespace reason

// --- Running handlers ---

// The audit row of one mutation. Handlers fill in `record.resource` and
// `record.tenant` once they know them, pass &record to the storage call (which
// commits it with the change), and set `committed` when that call succeeded.
struct MutationAudit {
  storage::postgres::AuditRecord record;
  bool committed = false;
};

// Runs a mutating handler: authenticates the caller, builds its audit record
// (MakeAudit(caller, method, resource, "", request)), runs `fn`, and when `fn`
// fails before its change committed writes the failure's audit row
// (AuditFailure). Returns Reply(context, ...). Unauthenticated calls are
// refused without an audit row (there is no principal to record).
grpc::Status RunMutation(
    ApiContext* ctx, grpc::ServerContext* context, std::string_view method,
    const google::protobuf::Message& request, std::string resource,
    absl::FunctionRef<absl::Status(const Caller&, MutationAudit&)> fn);

// Runs a reading handler: authenticates the caller and runs `fn`.
grpc::Status RunRead(ApiContext* ctx, grpc::ServerContext* context,
                     absl::FunctionRef<absl::Status(const Caller&)> fn);

// --- Stored objects ---

google::protobuf::Timestamp ToProtoTime(absl::Time t);

// Sets the fields the server owns on an object read from storage, for those of
// them the message has: name, create_time, update_time, etag (the decimal
// version) and report_time (Node: the time of the last write).
void SetServerFields(const storage::postgres::StoredObject& row,
                     std::string_view name, google::protobuf::Message* message);
// Clears the same fields (before an object is stored: the key columns and the
// row carry them).
void ClearServerFields(google::protobuf::Message* message);

// Parses a stored body (INTERNAL if it does not parse) and sets its server
// fields.
absl::Status DecodeStored(const storage::postgres::StoredObject& row,
                          std::string_view name,
                          google::protobuf::Message* message);
template <typename T>
absl::StatusOr<T> Decode(const storage::postgres::StoredObject& row,
                         std::string_view name) {
  T message;
  if (absl::Status s = DecodeStored(row, name, &message); !s.ok()) return s;
  return message;
}

// Values of a kind's extra columns (object_store.h) for an object.
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Tenant& tenant);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Project& project);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Queue& queue);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Cohort& cohort);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::PriorityClass& pc);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Flavor& flavor);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Cluster& cluster);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Pool& pool);
std::vector<std::optional<std::string>> ExtraColumns(
    const trainyard::v1::Node& node);

// `s` in double quotes, C-escaped and cut at 200 bytes, for messages that echo
// input.
std::string Quoted(std::string_view s);

// The id of a Create request ("queue_id"): REQUIRED when empty, INVALID_NAME
// unless `valid` (default core::IsValidId) accepts it.
absl::Status CheckNewId(std::string_view field, std::string_view id,
                        bool (*valid)(std::string_view) = nullptr);

// --- Etags and update masks ---

// The version an Update request expects: 0 ("any") for an empty etag, else the
// etag's decimal version; an etag that is not one of ours can never match, so
// it is ABORTED.
absl::StatusOr<int64_t> ExpectedVersion(std::string_view etag,
                                        std::string_view resource);

// The top-level fields an Update may change; every other field of the message
// is immutable or output only.
struct UpdatableFields {
  std::vector<std::string> fields;
};

// Checks update_mask paths against the message type: a path must name a field
// (nested paths through singular message fields allowed) whose top-level field
// is updatable.
//   unknown  → INVALID_ARGUMENT "update_mask: unknown field \"x\""
//   immutable → INVALID_ARGUMENT "update_mask: field \"name\" cannot be
//   updated"
absl::Status CheckUpdateMask(const google::protobuf::FieldMask& mask,
                             const google::protobuf::Descriptor* descriptor,
                             const UpdatableFields& updatable);
// Copies the masked fields (empty mask: every updatable field) from `patch`
// into `target`, replacing message, repeated and map fields wholesale. The mask
// must have passed CheckUpdateMask.
void ApplyUpdateMask(const google::protobuf::Message& patch,
                     const google::protobuf::FieldMask& mask,
                     const UpdatableFields& updatable,
                     google::protobuf::Message* target);
// Whether an update with this mask changes `field` (a top-level field): true
// for an empty mask.
bool MaskCovers(const google::protobuf::FieldMask& mask,
                std::string_view field);

// --- Lists ---

// A ListQuery for a page request: limit from PageSize(page_size), after_key
// from the token (INVALID_ARGUMENT on "page_token" when it is malformed or has
// not `key_size` parts).
absl::StatusOr<storage::postgres::ListQuery> PageQuery(
    int32_t page_size, const std::string& page_token, size_t key_size);
// Every row matching `query` (its limit and after_key are ignored), read in
// pages of 1000.
absl::StatusOr<std::vector<storage::postgres::StoredObject>> ListAll(
    storage::postgres::ObjectStore* objects,
    const storage::postgres::ObjectKind& kind,
    storage::postgres::ListQuery query);

// The next_page_token of a page: empty on the last one.
std::string NextPageToken(const storage::postgres::ListPage& page);

// --- Storage errors ---

// How to word a violated constraint (its PostgreSQL name) for the client.
struct ConstraintMessage {
  std::string constraint;
  std::string field;        // request field at fault, "" if none
  std::string_view reason;  // ErrorInfo reason
  std::string message;      // the sentence, without the field prefix
};

// Words a storage error for the client, about the object named `resource`:
//   NOT_FOUND            "<resource> not found"
//   ALREADY_EXISTS       "<resource> already exists" (unless a
//   ConstraintMessage matches) FAILED_PRECONDITION  the ConstraintMessage of
//   the violated constraint ("<field>: <message>"
//                        with the field and reason attached), else a generic
//                        sentence naming the constraint
// Other codes (and OK) are returned unchanged.
absl::Status ExplainStorageError(
    absl::Status status, std::string_view resource,
    const std::vector<ConstraintMessage>& messages = {});

// A FieldError (INVALID_ARGUMENT) for a field naming a missing object:
// "<field>: <what> \"<id>\" does not exist".
absl::Status MissingReference(std::string_view field,
                              std::string_view reason_code,
                              std::string_view what, std::string_view id);

// OK if the object exists; MissingReference(field, ...) if not; other errors as
// they are.
absl::Status CheckExists(storage::postgres::ObjectStore* objects,
                         const storage::postgres::ObjectKind& kind,
                         const std::vector<std::string>& key,
                         std::string_view field, std::string_view reason_code,
                         std::string_view what);

// --- Generic CRUD over ObjectStore kinds ---
//
// `name` is the canonical resource name of the object (used in messages and set
// on the result); `messages` word the constraints the operation may violate
// (ExplainStorageError).

// Reads one object.
template <typename T>
absl::StatusOr<T> GetObject(storage::postgres::ObjectStore* objects,
                            const storage::postgres::ObjectKind& kind,
                            const std::vector<std::string>& key,
                            std::string_view name) {
  absl::StatusOr<storage::postgres::StoredObject> row = objects->Get(kind, key);
  if (!row.ok()) return ExplainStorageError(row.status(), name);
  return Decode<T>(*row, name);
}

// Inserts `object` (its server fields cleared) with the audit row, and returns
// it as stored.
template <typename T>
absl::StatusOr<T> CreateObject(
    storage::postgres::ObjectStore* objects,
    const storage::postgres::ObjectKind& kind,
    const std::vector<std::string>& key, std::string_view name, T object,
    MutationAudit& audit, const std::vector<ConstraintMessage>& messages = {}) {
  ClearServerFields(&object);
  absl::StatusOr<storage::postgres::StoredObject> row =
      objects->Create(kind, key, ExtraColumns(object),
                      object.SerializeAsString(), &audit.record);
  if (!row.ok()) return ExplainStorageError(row.status(), name, messages);
  audit.committed = true;
  return Decode<T>(*row, name);
}

// Whether an Update failed because the stored version differs from the expected
// one.
bool IsEtagMismatch(const absl::Status& status);
// Message of a stored body that does not parse.
std::string StoredBodyError(std::string_view name);

// The ABORTED status of an Update whose etag no longer matches.
absl::Status EtagMismatch(std::string_view name, std::string_view etag);

// Read-modify-write of one object: checks the mask, compares the etag of
// `patch` (ABORTED on a mismatch), merges the masked fields of `patch` into the
// stored object, runs `validate` on the merged object (which must report
// request-relative fields), and writes it with the audit row.
template <typename T>
absl::StatusOr<T> UpdateObject(
    storage::postgres::ObjectStore* objects,
    const storage::postgres::ObjectKind& kind,
    const std::vector<std::string>& key, std::string_view name, const T& patch,
    const google::protobuf::FieldMask& mask, const UpdatableFields& updatable,
    absl::FunctionRef<absl::Status(const T&)> validate, MutationAudit& audit,
    const std::vector<ConstraintMessage>& messages = {}) {
  if (absl::Status s = CheckUpdateMask(mask, T::descriptor(), updatable);
      !s.ok())
    return s;
  absl::StatusOr<int64_t> expected = ExpectedVersion(patch.etag(), name);
  if (!expected.ok()) return expected.status();
  absl::StatusOr<storage::postgres::StoredObject> row = objects->Update(
      kind, key, *expected,
      [&](const storage::postgres::StoredObject& current)
          -> absl::StatusOr<storage::postgres::ObjectStore::Mutation> {
        T merged;
        if (!merged.ParseFromString(current.body)) {
          return absl::InternalError(StoredBodyError(name));
        }
        ApplyUpdateMask(patch, mask, updatable, &merged);
        ClearServerFields(&merged);
        if (absl::Status s = validate(merged); !s.ok()) return s;
        return storage::postgres::ObjectStore::Mutation{
            merged.SerializeAsString(), ExtraColumns(merged)};
      },
      &audit.record);
  if (!row.ok()) {
    if (IsEtagMismatch(row.status())) return EtagMismatch(name, patch.etag());
    return ExplainStorageError(row.status(), name, messages);
  }
  audit.committed = true;
  return Decode<T>(*row, name);
}

// Deletes one object with the audit row.
absl::Status DeleteObject(storage::postgres::ObjectStore* objects,
                          const storage::postgres::ObjectKind& kind,
                          const std::vector<std::string>& key,
                          std::string_view name, MutationAudit& audit,
                          const std::vector<ConstraintMessage>& messages = {});

// Decodes a page of objects, naming each from its key.
template <typename T>
absl::Status DecodePage(
    const storage::postgres::ListPage& page,
    absl::FunctionRef<std::string(const std::vector<std::string>&)> name_of,
    google::protobuf::RepeatedPtrField<T>* out) {
  for (const storage::postgres::StoredObject& row : page.objects) {
    if (absl::Status s = DecodeStored(row, name_of(row.key), out->Add());
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

// --- Capacity ---

// Sums ready capacity per flavor: one row per flavor in `flavors` (sorted by
// flavor id), with the READY nodes whose pool offers it. `pool_flavor` maps
// "cluster/pool" to a flavor id. A row's total.gpu_model is the flavor's GPU
// model.
trainyard::v1::CapacitySummary SumReadyCapacity(
    const std::vector<trainyard::v1::Flavor>& flavors,
    const std::vector<std::pair<std::string, std::string>>& pool_flavor,
    const std::vector<trainyard::v1::Node>& nodes);

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_RESOURCE_UTIL_H_
