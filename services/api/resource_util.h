// Helpers shared by the administrative services (QueueService, ClusterService,
// AdminService): the plumbing between a handler and the generic ObjectStore —
// server-set fields of stored objects, update masks, etags, page tokens, and
// the translation of storage errors into sentences a client can act on. The
// handlers themselves run on services/api/handler.h, the CRUD methods on
// services/api/resource_handler.h.
//
// No business rules live here: validation is services/lib/domain, authorization
// services/api/auth.h.
#ifndef TRAINYARD_SERVICES_API_RESOURCE_UTIL_H_
#define TRAINYARD_SERVICES_API_RESOURCE_UTIL_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/field_mask.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"
#include "storage/postgres/object_store.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/queue.pb.h"

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
// The tenant is over its submit rate limit (RESOURCE_EXHAUSTED, with the
// retry delay).
inline constexpr std::string_view kRateLimited = "RATE_LIMITED";
}  // namespace reason

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

// An extra column holding an optional id: NULL when `id` is empty.
std::optional<std::string> NullIfEmpty(const std::string& id);

// `s` in double quotes, C-escaped and cut at 200 bytes, for messages that echo
// input.
std::string Quoted(std::string_view s);

// The id of a Create request ("queue_id"): REQUIRED when empty, INVALID_NAME
// unless `valid` (default domain::IsValidId) accepts it.
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
using UpdatableFields = std::span<const std::string_view>;

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

// The one check of every page_token the API takes: INVALID_ARGUMENT on
// "page_token" (INVALID_VALUE) for a token that is not one of ours.
absl::Status PageTokenError();
// The key a page_token carries: `key_size` parts of storable text (the
// decoding refuses others, storage/postgres/object_store.h), each accepted by
// `valid` when given; else PageTokenError().
absl::StatusOr<std::vector<std::string>> PageKey(
    const std::string& page_token, size_t key_size,
    bool (*valid)(std::string_view) = nullptr);
// A ListQuery for a page request: limit from PageSize(page_size), after_key
// from the token (PageKey with `key_size` parts).
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

// The wording of a foreign key that a write violates by naming a missing
// object: "<field>: <what> \"<id>\" does not exist".
ConstraintMessage UnknownReference(std::string constraint, std::string field,
                                   std::string_view reason_code,
                                   std::string_view what, std::string_view id);
// The wording of a foreign key that keeps an object from being deleted while
// others reference it (reason IN_USE, no field).
ConstraintMessage InUse(std::string constraint, std::string message);

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

// Whether an Update failed because the stored version differs from the expected
// one.
bool IsEtagMismatch(const absl::Status& status);
// Message of a stored body that does not parse.
std::string StoredBodyError(std::string_view name);

// The ABORTED status of an Update whose etag no longer matches.
absl::Status EtagMismatch(std::string_view name, std::string_view etag);

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
