// Field errors: the one way domain code reports "this input field is wrong".
//
// A field error is an INVALID_ARGUMENT absl::Status whose message starts with
// the path of the field at fault ("spec.workers: must be at least 1") and which
// carries two payloads the API layer turns into trainyard.v1.ErrorInfo:
//   "trainyard.dev/field"   the field path, e.g. "spec.resources.gpus" or
//                           "spec.env[\"X\"]"
//   "trainyard.dev/reason"  a stable machine-readable reason code, e.g.
//                           "OUT_OF_RANGE"
//
// Validators report paths relative to the message they validate; callers that
// embed the message in a larger one compose paths with PrefixField:
//   PrefixField(PrefixField(ValidateJob(job), "job"), "requests[3]")
//   → "requests[3].job.spec.workers: must be at least 1"
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_ERRORS_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_ERRORS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "trainyard/v1/common.pb.h"

namespace trainyard::domain {

// Payload type URLs of field errors.
inline constexpr std::string_view kFieldPayloadUrl = "trainyard.dev/field";
inline constexpr std::string_view kReasonPayloadUrl = "trainyard.dev/reason";

// Reason codes used by core. The API may add its own (RATE_LIMITED ...).
namespace reason {
// A required field is empty or unset.
inline constexpr std::string_view kRequired = "REQUIRED";
// A number or duration is outside its allowed range.
inline constexpr std::string_view kOutOfRange = "OUT_OF_RANGE";
// An id, resource name, env or label name is malformed.
inline constexpr std::string_view kInvalidName = "INVALID_NAME";
// A string, list or map is longer than allowed.
inline constexpr std::string_view kTooLarge = "TOO_LARGE";
// A value is malformed: unknown enum value, bad characters, malformed duration
// or timestamp.
inline constexpr std::string_view kInvalidValue = "INVALID_VALUE";
// A value that must be unique appears twice.
inline constexpr std::string_view kDuplicate = "DUPLICATE";
// A name in a reserved namespace (e.g. env names starting with TRAINYARD_).
inline constexpr std::string_view kReservedName = "RESERVED_NAME";
// Fields that are each fine but contradict each other.
inline constexpr std::string_view kInconsistent = "INCONSISTENT";
// The job names a queue that does not exist (reported by the API).
inline constexpr std::string_view kUnknownQueue = "UNKNOWN_QUEUE";
// No known cluster could ever hold the job's gang (capacity.h).
inline constexpr std::string_view kNoClusterFits = "NO_CLUSTER_FITS";
}  // namespace reason

// InvalidArgumentError("<field>: <message>") with the field and reason
// payloads. With an empty field the message is just <message> (and the field
// payload is empty).
absl::Status FieldError(std::string_view field, std::string_view reason_code,
                        std::string_view message);

// Adds (or replaces) the field and reason payloads on any status, keeping its
// code and message. For errors of other codes that still name a field (e.g.
// FAILED_PRECONDITION). OK stays OK.
absl::Status AttachErrorInfo(absl::Status status, std::string_view field,
                             std::string_view reason_code);

// The field payload, or "" if none.
std::string ErrorField(const absl::Status& status);
// The reason payload, or "" if none.
std::string ErrorReason(const absl::Status& status);
// Whether the status carries a field payload (possibly empty).
bool HasErrorField(const absl::Status& status);

// Rewrites the field of a field error from "spec.workers" to
// "<prefix>.spec.workers", in the payload and at the start of the message;
// "[3].x" style fields are joined without a dot, and an empty field becomes the
// prefix itself. Statuses without a field payload (and OK) are returned
// unchanged, as is everything with an empty prefix.
absl::Status PrefixField(absl::Status status, std::string_view prefix);

// field and reason of a status as the API's ErrorInfo (retry_delay is left
// unset).
trainyard::v1::ErrorInfo ToErrorInfo(const absl::Status& status);

// Helpers to build field paths: JoinField("spec", "workers") == "spec.workers",
// IndexField("command", 3) == "command[3]", KeyField("env", "A") ==
// "env[\"A\"]" (the key is C-escaped, and cut at 128 characters).
std::string JoinField(std::string_view prefix, std::string_view field);
std::string IndexField(std::string_view field, int64_t index);
std::string KeyField(std::string_view field, std::string_view key);

}  // namespace trainyard::domain

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_ERRORS_H_
