// Validation of every API input. Pure functions: each returns OK or the first
// FieldError (errors.h) found, in proto field order, naming the field with its
// proto (snake_case) name, dots, [i] indices and ["key"] map keys, e.g.
// "spec.resources.gpus", "spec.command", "spec.env[\"TRAINYARD_X\"]",
// "quotas[1].resources[0].nominal".
//
// Paths are relative to the message validated; callers that validate a message
// inside a request prefix them with PrefixField ("job.spec.workers",
// "requests[3].job.spec.workers"). ValidateJobSpec reports paths starting with
// "spec." (as a field of Job), so PrefixField(ValidateJobSpec(...), "job")
// gives the request-relative path directly.
//
// Name fields (Queue.name, Node.name ...) are not checked here: Create requests
// carry ids separately and Update requests are parsed with names.h by the
// caller.
//
// Reason codes (errors.h): REQUIRED, OUT_OF_RANGE (numbers and durations),
// TOO_LARGE (strings, lists and maps longer than allowed), INVALID_NAME (ids,
// env and label names), INVALID_VALUE (bad characters, unknown enum values,
// malformed durations/timestamps), DUPLICATE, RESERVED_NAME, INCONSISTENT
// (fields that contradict each other).
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_VALIDATION_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_VALIDATION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/map.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "google/protobuf/timestamp.pb.h"
#include "trainyard/v1/admin.pb.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/common.pb.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/queue.pb.h"

namespace trainyard::domain {

// Platform limits on job submissions (defaults match the API documentation).
struct Limits {
  int32_t max_workers = 4096;
  int32_t max_gpus_per_worker = 64;
  int64_t max_cpu_millis_per_worker = 1'024'000;
  int64_t max_memory_bytes_per_worker = int64_t{16} << 40;  // 16 TiB
  size_t max_command_entries = 256;
  size_t max_command_bytes = 64 << 10;  // 64 KiB
  size_t max_env_entries = 256;
  size_t max_env_bytes = 64 << 10;  // 64 KiB, names + values
  size_t max_labels = 64;
  absl::Duration max_time_limit = absl::Hours(24 * 30);
  absl::Duration max_grace = absl::Hours(1);
  size_t max_display_name = 256;  // characters (UTF-8 code points)
  size_t max_uri = 2048;          // bytes: image, checkpoint directory/uri
};

// Fixed limits that are not configurable.
inline constexpr size_t kMaxWorkingDirBytes = 4096;
inline constexpr size_t kMaxJobSetChars = 128;
inline constexpr size_t kMaxGpuModelChars = 64;
inline constexpr size_t kMaxLabelChars = 63;
inline constexpr size_t kMaxClientRequestIdChars = 128;
inline constexpr int32_t kMaxRetryAttempts = 100;
inline constexpr size_t kMaxRetryableExitCodes = 255;
inline constexpr size_t kMaxCheckpointMetadata = 32;
inline constexpr size_t kMaxCheckpointMetadataKeyBytes = 256;
inline constexpr size_t kMaxCheckpointMetadataValueBytes = 4096;
inline constexpr absl::Duration kMaxCheckpointClockSkew = absl::Minutes(5);
inline constexpr int32_t kMaxPriorityValue = 1'000'000;
inline constexpr size_t kMaxDescriptionChars = 1024;
inline constexpr int32_t kMaxPageSize = 1000;
inline constexpr int32_t kDefaultPageSize = 100;

// --- Predicates shared with other layers ---

// ^(users|serviceAccounts)/[a-zA-Z0-9._@+-]{1,128}$
bool IsValidPrincipal(std::string_view principal);
// ^[A-Za-z_][A-Za-z0-9_]*$ (does not check the TRAINYARD_ reservation).
bool IsValidEnvName(std::string_view name);
// Empty, or [A-Za-z0-9._-]{1,64}.
bool IsValidGpuModel(std::string_view model);
// Empty, or [A-Za-z0-9._-]{1,128}.
bool IsValidJobSet(std::string_view job_set);
// 1..63 characters of [a-zA-Z0-9._/-] (keys); values may also be empty.
bool IsValidLabelKey(std::string_view key);
bool IsValidLabelValue(std::string_view value);

// A google.protobuf.Duration within its documented range (±10,000 years, nanos
// of the same sign as seconds and |nanos| < 1e9), as an absl::Duration;
// FieldError(field, INVALID_VALUE) otherwise.
absl::StatusOr<absl::Duration> ToDuration(const google::protobuf::Duration& d,
                                          std::string_view field);
// A google.protobuf.Timestamp within 0001-01-01..9999-12-31 with 0 <= nanos <
// 1e9.
absl::StatusOr<absl::Time> ToTime(const google::protobuf::Timestamp& t,
                                  std::string_view field);
// Milliseconds since the Unix epoch of a timestamp, floored; unchecked (for
// timestamps that were validated when stored).
inline int64_t UnixMillis(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000 + t.nanos() / 1'000'000;
}

// --- Jobs ---

// The whole JobSpec; fields are reported as "spec.<field>" (see the file
// comment).
absl::Status ValidateJobSpec(const trainyard::v1::JobSpec& spec,
                             const Limits& limits);
// What Submit reads of a Job: display_name, labels, and spec (required).
absl::Status ValidateJob(const trainyard::v1::Job& job, const Limits& limits);
// Labels: at most limits.max_labels; keys 1..63, values 0..63 characters of
// [a-zA-Z0-9._/-]. Fields: `field` for the count, field["key"] for a bad key or
// value.
absl::Status ValidateLabels(
    const google::protobuf::Map<std::string, std::string>& labels,
    const Limits& limits, std::string_view field);
// At most limits.max_display_name characters, no control characters.
absl::Status ValidateDisplayName(std::string_view display_name,
                                 const Limits& limits,
                                 std::string_view field = "display_name");
// Required; 1..128 characters of [A-Za-z0-9._:-]. Field "client_request_id".
absl::Status ValidateClientRequestId(std::string_view client_request_id);
// A reported checkpoint (its `job` field is ignored): attempt >= 0, step >= 0,
// uri required and at most 2048 bytes, time required, valid and not more than 5
// minutes after `now`, metadata at most 32 entries (keys 1..256 bytes, values
// up to 4096 bytes).
absl::Status ValidateCheckpoint(const trainyard::v1::Checkpoint& checkpoint,
                                absl::Time now);

// --- Tenants, projects, queues, cohorts, priority classes ---

absl::Status ValidateTenant(const trainyard::v1::Tenant& tenant,
                            const Limits& limits = Limits());
absl::Status ValidateProject(const trainyard::v1::Project& project,
                             const Limits& limits = Limits());
// fair_share_weight >= 0 and finite (0 means the default, 1); quotas: flavor
// ids valid and unique, resources set and unique per flavor, nominal >= 0,
// borrowing/lending limits >= 0, lending_limit <= nominal; every enum known;
// min_runtime >= 0.
absl::Status ValidateQueue(const trainyard::v1::Queue& queue,
                           const Limits& limits = Limits());
// Same quota and weight rules; parent empty or a valid id other than the
// cohort's own id (`cohort_id` when given, else the id in cohort.name when it
// parses).
absl::Status ValidateCohort(const trainyard::v1::Cohort& cohort,
                            std::string_view cohort_id = "");
// value within ±1,000,000; description at most 1024 characters.
absl::Status ValidatePriorityClass(
    const trainyard::v1::PriorityClass& priority_class);
// Quotas of a queue or cohort (shared rules), reported under `field`
// ("quotas").
absl::Status ValidateFlavorQuotas(const google::protobuf::RepeatedPtrField<
                                      trainyard::v1::FlavorQuotas>& quotas,
                                  std::string_view field);
// A fair-share weight: >= 0 and finite; 0 means the default.
absl::Status ValidateFairShareWeight(double weight, std::string_view field);
// The weight to use: 1 for 0 (unset), else the weight.
double EffectiveFairShareWeight(double weight);

// --- Capacity: flavors, clusters, pools, nodes ---

// kind required; gpu_model empty or valid; prices non-negative with currency
// empty (USD) or three upper-case letters, all prices in one currency;
// reclaim_rate_per_hour >= 0, finite, and 0 unless kind is SPOT;
// restart_overhead, when set, 0 to 24 h.
absl::Status ValidateFlavor(const trainyard::v1::Flavor& flavor);
// backend required and known; the settings oneof, when set, must match the
// backend; Slurm: rest_url http(s):// or unix://, preemption_signal
// empty/USR1/TERM, partition keys valid flavor ids; Kubernetes: api_server
// http(s)://; Sim: reclaim rate >= 0 and finite.
absl::Status ValidateCluster(const trainyard::v1::Cluster& cluster,
                             const Limits& limits = Limits());
// flavor required and valid; node_selector like labels.
absl::Status ValidatePool(const trainyard::v1::Pool& pool,
                          const Limits& limits = Limits());
// pool required and valid; capacity gpus >= 0, cpu_millis > 0, memory_bytes >
// 0, gpu_model valid; state a known enum value; topology block/rack label-like;
// labels.
absl::Status ValidateNode(const trainyard::v1::Node& node,
                          const Limits& limits = Limits());

// --- Access ---

// principal valid; role required and known; tenant empty for PLATFORM_ADMIN and
// a valid id otherwise.
absl::Status ValidateRoleBinding(const trainyard::v1::RoleBinding& binding);

// --- Text in requests ---

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates, or code
// points above U+10FFFF).
bool IsValidUtf8(std::string_view s);
// `s` with every byte that does not belong to a well-formed UTF-8 sequence
// replaced by U+FFFD, one per such byte.
std::string ToValidUtf8(std::string_view s);
// Whether `s` can be stored as PostgreSQL text: valid UTF-8 and no NUL byte
// (PostgreSQL refuses the first and cuts text at the second).
bool IsStorableText(std::string_view s);
// Every string field set in `message`, at any depth (nested and repeated
// messages, map keys and values), is storable text; the first that is not is
// an INVALID_VALUE FieldError naming its path ("description",
// "job.labels[\"team\"]", "requests[2].job.spec.command[0]"): "must not
// contain a NUL byte" or "must be valid UTF-8". bytes fields are not checked.
// The API runs it on every request before its handler (services/api/handler.h).
absl::Status CheckRequestText(const google::protobuf::Message& message);

// --- Pagination ---

// 0 → 100; 1..1000 as is; above 1000 → 1000 (AIP-158 coerces); negative →
// OUT_OF_RANGE.
absl::StatusOr<int32_t> ResolvePageSize(int32_t page_size,
                                        std::string_view field = "page_size");

}  // namespace trainyard::domain

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_VALIDATION_H_
