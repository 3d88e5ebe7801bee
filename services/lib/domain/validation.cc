#include "services/lib/domain/validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/money.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

namespace v1 = ::trainyard::v1;

// --- Small helpers ---

bool IsAlnum(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c));
}

// "\"value\"" for messages: C-escaped and cut to 64 bytes.
std::string Quote(std::string_view value) {
  constexpr size_t kMax = 64;
  std::string out =
      Cat("\"", absl::CHexEscape(AbslView(value.substr(0, kMax))));
  if (value.size() > kMax) out += "...";
  out += "\"";
  return out;
}

bool HasNul(std::string_view s) {
  return s.find('\0') != std::string_view::npos;
}

bool HasControl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

bool HasWhitespaceOrControl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

size_t CountCodePoints(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// Characters of [A-Za-z0-9] plus `extra`, length 1..max.
bool IsTokenOf(std::string_view s, size_t max, std::string_view extra) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [extra](char c) {
    return IsAlnum(c) || extra.find(c) != std::string_view::npos;
  });
}

bool IsFinite(double d) { return std::isfinite(d); }

std::vector<std::string_view> SortedKeys(
    const google::protobuf::Map<std::string, std::string>& map) {
  std::vector<std::string_view> keys;
  keys.reserve(map.size());
  for (const auto& [key, value] : map) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

absl::Status Required(std::string_view field) {
  return FieldError(field, reason::kRequired, "required");
}

absl::Status BadId(std::string_view field, std::string_view value) {
  return FieldError(
      field, reason::kInvalidName,
      Cat("must be 1..63 characters of [a-z0-9-], starting with a letter "
          "and ending with a letter or digit; got ",
          Quote(value)));
}

// A required id.
absl::Status CheckRequiredId(std::string_view field, std::string_view value) {
  if (value.empty()) return Required(field);
  if (!IsValidId(value)) return BadId(field, value);
  return absl::OkStatus();
}

// An optional id.
absl::Status CheckOptionalId(std::string_view field, std::string_view value) {
  if (!value.empty() && !IsValidId(value)) return BadId(field, value);
  return absl::OkStatus();
}

absl::Status CheckEnum(std::string_view field, int value, bool (*is_valid)(int),
                       bool required) {
  if (required && value == 0) return Required(field);
  if (!is_valid(value)) {
    return FieldError(field, reason::kInvalidValue,
                      Cat("unknown value ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckTooLarge(std::string_view field, size_t size, size_t max,
                           std::string_view unit) {
  if (size > max) {
    return FieldError(field, reason::kTooLarge,
                      Cat("must be at most ", max, " ", unit, ", got ", size));
  }
  return absl::OkStatus();
}

// A set duration that must be >= 0 (and <= max when max is given).
absl::StatusOr<absl::Duration> CheckNonNegativeDuration(
    const google::protobuf::Duration& d, std::string_view field,
    absl::Duration max = absl::InfiniteDuration()) {
  absl::StatusOr<absl::Duration> value = ToDuration(d, field);
  if (!value.ok()) return value.status();
  if (*value < absl::ZeroDuration()) {
    return FieldError(
        field, reason::kOutOfRange,
        Cat("must not be negative, got ", absl::FormatDuration(*value)));
  }
  if (*value > max) {
    return FieldError(field, reason::kOutOfRange,
                      Cat("must be at most ", absl::FormatDuration(max),
                          ", got ", absl::FormatDuration(*value)));
  }
  return value;
}

absl::Status CheckNonNegativeFinite(std::string_view field, double value) {
  if (!IsFinite(value) || value < 0) {
    return FieldError(field, reason::kOutOfRange,
                      Cat("must be a finite number >= 0, got ", value));
  }
  return absl::OkStatus();
}

// --- JobSpec parts ---

absl::Status CheckResources(const v1::JobSpec& spec, const Limits& limits) {
  if (!spec.has_resources()) {
    return FieldError(
        "spec.resources", reason::kRequired,
        "required (at least cpu_millis and memory_bytes of each worker)");
  }
  const v1::Resources& r = spec.resources();
  if (r.gpus() < 0) {
    return FieldError("spec.resources.gpus", reason::kOutOfRange,
                      Cat("must not be negative, got ", r.gpus()));
  }
  if (r.gpus() > limits.max_gpus_per_worker) {
    return FieldError("spec.resources.gpus", reason::kOutOfRange,
                      Cat("must be at most ", limits.max_gpus_per_worker,
                          ", got ", r.gpus()));
  }
  if (!IsValidGpuModel(r.gpu_model())) {
    return FieldError("spec.resources.gpu_model", reason::kInvalidValue,
                      Cat("must be 1..64 characters of [A-Za-z0-9._-], got ",
                          Quote(r.gpu_model())));
  }
  if (!r.gpu_model().empty() && r.gpus() == 0) {
    return FieldError("spec.resources.gpu_model", reason::kInconsistent,
                      "must be empty when gpus is 0");
  }
  if (r.cpu_millis() < 1) {
    return FieldError("spec.resources.cpu_millis", reason::kOutOfRange,
                      Cat("must be at least 1 (a worker needs some CPU), got ",
                          r.cpu_millis()));
  }
  if (r.cpu_millis() > limits.max_cpu_millis_per_worker) {
    return FieldError("spec.resources.cpu_millis", reason::kOutOfRange,
                      Cat("must be at most ", limits.max_cpu_millis_per_worker,
                          ", got ", r.cpu_millis()));
  }
  if (r.memory_bytes() < 1) {
    return FieldError("spec.resources.memory_bytes", reason::kOutOfRange,
                      Cat("must be at least 1, got ", r.memory_bytes()));
  }
  if (r.memory_bytes() > limits.max_memory_bytes_per_worker) {
    return FieldError(
        "spec.resources.memory_bytes", reason::kOutOfRange,
        Cat("must be at most ", limits.max_memory_bytes_per_worker, ", got ",
            r.memory_bytes()));
  }
  return absl::OkStatus();
}

absl::Status CheckCommand(const v1::JobSpec& spec, const Limits& limits) {
  constexpr std::string_view kField = "spec.command";
  TY_RETURN_IF_ERROR(CheckTooLarge(kField,
                                   static_cast<size_t>(spec.command_size()),
                                   limits.max_command_entries, "entries"));
  size_t bytes = 0;
  for (const std::string& arg : spec.command()) bytes += arg.size();
  TY_RETURN_IF_ERROR(
      CheckTooLarge(kField, bytes, limits.max_command_bytes, "bytes in all"));
  for (int i = 0; i < spec.command_size(); ++i) {
    if (HasNul(spec.command(i))) {
      return FieldError(IndexField(kField, i), reason::kInvalidValue,
                        "must not contain NUL characters");
    }
  }
  if (spec.command().empty() && spec.image().empty()) {
    return FieldError(kField, reason::kRequired,
                      "required unless image is set");
  }
  return absl::OkStatus();
}

absl::Status CheckEnv(const v1::JobSpec& spec, const Limits& limits) {
  constexpr std::string_view kField = "spec.env";
  TY_RETURN_IF_ERROR(CheckTooLarge(kField, spec.env().size(),
                                   limits.max_env_entries, "entries"));
  size_t bytes = 0;
  for (const auto& [name, value] : spec.env())
    bytes += name.size() + value.size();
  TY_RETURN_IF_ERROR(CheckTooLarge(kField, bytes, limits.max_env_bytes,
                                   "bytes of names and values in all"));
  for (std::string_view name : SortedKeys(spec.env())) {
    if (!IsValidEnvName(name)) {
      return FieldError(KeyField(kField, name), reason::kInvalidName,
                        "names must match [A-Za-z_][A-Za-z0-9_]*");
    }
    if (name.starts_with("TRAINYARD_")) {
      return FieldError(
          KeyField(kField, name), reason::kReservedName,
          "names starting with TRAINYARD_ are reserved for the platform");
    }
    if (HasNul(spec.env().at(std::string(name)))) {
      return FieldError(KeyField(kField, name), reason::kInvalidValue,
                        "value must not contain NUL characters");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTimes(const v1::JobSpec& spec, const Limits& limits) {
  absl::Duration time_limit = absl::InfiniteDuration();
  if (spec.has_time_limit()) {
    absl::StatusOr<absl::Duration> d =
        ToDuration(spec.time_limit(), "spec.time_limit");
    if (!d.ok()) return d.status();
    if (*d <= absl::ZeroDuration()) {
      return FieldError(
          "spec.time_limit", reason::kOutOfRange,
          Cat("must be positive, got ", absl::FormatDuration(*d)));
    }
    if (*d > limits.max_time_limit) {
      return FieldError(
          "spec.time_limit", reason::kOutOfRange,
          Cat("must be at most ", absl::FormatDuration(limits.max_time_limit),
              ", got ", absl::FormatDuration(*d)));
    }
    time_limit = *d;
  }
  if (spec.has_expected_runtime()) {
    absl::StatusOr<absl::Duration> d = CheckNonNegativeDuration(
        spec.expected_runtime(), "spec.expected_runtime",
        limits.max_time_limit);
    if (!d.ok()) return d.status();
    if (*d > time_limit) {
      return FieldError(
          "spec.expected_runtime", reason::kOutOfRange,
          Cat("must not exceed time_limit (", absl::FormatDuration(time_limit),
              "), got ", absl::FormatDuration(*d)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCheckpointPolicy(const v1::JobSpec& spec,
                                   const Limits& limits) {
  if (!spec.has_checkpoint()) return absl::OkStatus();
  const v1::CheckpointPolicy& c = spec.checkpoint();
  TY_RETURN_IF_ERROR(CheckTooLarge("spec.checkpoint.directory",
                                   c.directory().size(), limits.max_uri,
                                   "bytes"));
  if (HasControl(c.directory())) {
    return FieldError("spec.checkpoint.directory", reason::kInvalidValue,
                      "must not contain control characters");
  }
  if (c.has_interval()) {
    TY_RETURN_IF_ERROR(
        CheckNonNegativeDuration(c.interval(), "spec.checkpoint.interval")
            .status());
  }
  if (c.has_grace_period()) {
    TY_RETURN_IF_ERROR(CheckNonNegativeDuration(c.grace_period(),
                                                "spec.checkpoint.grace_period",
                                                limits.max_grace)
                           .status());
  }
  return absl::OkStatus();
}

absl::Status CheckRetryPolicy(const v1::JobSpec& spec) {
  if (!spec.has_retry()) return absl::OkStatus();
  const v1::RetryPolicy& r = spec.retry();
  if (r.max_attempts() < 0 || r.max_attempts() > kMaxRetryAttempts) {
    return FieldError("spec.retry.max_attempts", reason::kOutOfRange,
                      Cat("must be between 0 and ", kMaxRetryAttempts, ", got ",
                          r.max_attempts()));
  }
  absl::Duration initial = absl::ZeroDuration();
  if (r.has_initial_backoff()) {
    absl::StatusOr<absl::Duration> d = CheckNonNegativeDuration(
        r.initial_backoff(), "spec.retry.initial_backoff");
    if (!d.ok()) return d.status();
    initial = *d;
  }
  if (r.has_max_backoff()) {
    absl::StatusOr<absl::Duration> d =
        CheckNonNegativeDuration(r.max_backoff(), "spec.retry.max_backoff");
    if (!d.ok()) return d.status();
    if (r.has_initial_backoff() && initial > *d) {
      return FieldError(
          "spec.retry.initial_backoff", reason::kInconsistent,
          Cat("must not exceed max_backoff (", absl::FormatDuration(*d),
              "), got ", absl::FormatDuration(initial)));
    }
  }
  TY_RETURN_IF_ERROR(
      CheckTooLarge("spec.retry.retryable_exit_codes",
                    static_cast<size_t>(r.retryable_exit_codes_size()),
                    kMaxRetryableExitCodes, "entries"));
  for (int i = 0; i < r.retryable_exit_codes_size(); ++i) {
    const int32_t code = r.retryable_exit_codes(i);
    if (code < 1 || code > 255) {
      return FieldError(IndexField("spec.retry.retryable_exit_codes", i),
                        reason::kOutOfRange,
                        Cat("must be between 1 and 255, got ", code));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckQuotaEntry(const v1::ResourceQuota& q,
                             std::string_view field) {
  if (q.nominal() < 0) {
    return FieldError(JoinField(field, "nominal"), reason::kOutOfRange,
                      Cat("must not be negative, got ", q.nominal()));
  }
  if (q.has_borrowing_limit() && q.borrowing_limit() < 0) {
    return FieldError(JoinField(field, "borrowing_limit"), reason::kOutOfRange,
                      Cat("must not be negative, got ", q.borrowing_limit()));
  }
  if (q.has_lending_limit()) {
    if (q.lending_limit() < 0) {
      return FieldError(JoinField(field, "lending_limit"), reason::kOutOfRange,
                        Cat("must not be negative, got ", q.lending_limit()));
    }
    if (q.lending_limit() > q.nominal()) {
      return FieldError(JoinField(field, "lending_limit"), reason::kOutOfRange,
                        Cat("must not exceed nominal (", q.nominal(), "), got ",
                            q.lending_limit()));
    }
  }
  return absl::OkStatus();
}

bool IsHttpUrl(std::string_view url) {
  return (url.starts_with("http://") && url.size() > 7) ||
         (url.starts_with("https://") && url.size() > 8);
}

absl::Status CheckSlurmSettings(const v1::SlurmSettings& s) {
  if (!s.rest_url().empty()) {
    const bool ok =
        IsHttpUrl(s.rest_url()) ||
        (s.rest_url().starts_with("unix://") && s.rest_url().size() > 7);
    if (!ok || HasWhitespaceOrControl(s.rest_url())) {
      return FieldError("slurm.rest_url", reason::kInvalidValue,
                        Cat("must be an http://, https:// or unix:// URL, got ",
                            Quote(s.rest_url())));
    }
  }
  if (HasWhitespaceOrControl(s.api_version())) {
    return FieldError("slurm.api_version", reason::kInvalidValue,
                      "must not contain spaces or control characters");
  }
  if (HasWhitespaceOrControl(s.user())) {
    return FieldError("slurm.user", reason::kInvalidValue,
                      "must not contain spaces or control characters");
  }
  for (std::string_view flavor : SortedKeys(s.partitions())) {
    const std::string field = KeyField("slurm.partitions", flavor);
    if (!IsValidId(flavor)) return BadId(field, flavor);
    const std::string& partition = s.partitions().at(std::string(flavor));
    if (partition.empty() || HasWhitespaceOrControl(partition)) {
      return FieldError(
          field, reason::kInvalidValue,
          "partition must be non-empty without spaces or control characters");
    }
  }
  const std::string& signal = s.preemption_signal();
  if (!signal.empty() && signal != "USR1" && signal != "TERM") {
    return FieldError("slurm.preemption_signal", reason::kInvalidValue,
                      Cat("must be USR1 or TERM, got ", Quote(signal)));
  }
  return absl::OkStatus();
}

absl::Status CheckKubernetesSettings(const v1::KubernetesSettings& k) {
  if (!k.api_server().empty() &&
      (!IsHttpUrl(k.api_server()) || HasWhitespaceOrControl(k.api_server()))) {
    return FieldError(
        "kubernetes.api_server", reason::kInvalidValue,
        Cat("must be an http:// or https:// URL, got ", Quote(k.api_server())));
  }
  if (!k.namespace_().empty() && !IsValidGeneratedId(k.namespace_())) {
    return FieldError(
        "kubernetes.namespace", reason::kInvalidName,
        Cat("must be a Kubernetes namespace name (1..63 characters of "
            "[a-z0-9-]), got ",
            Quote(k.namespace_())));
  }
  return absl::OkStatus();
}

std::string_view SettingsFieldName(v1::Cluster::SettingsCase c) {
  switch (c) {
    case v1::Cluster::kSlurm:
      return "slurm";
    case v1::Cluster::kKubernetes:
      return "kubernetes";
    case v1::Cluster::kSim:
      return "sim";
    default:
      return "settings";
  }
}

}  // namespace

// --- Predicates ---

bool IsValidPrincipal(std::string_view principal) {
  std::string_view rest;
  if (principal.starts_with("users/")) {
    rest = principal.substr(6);
  } else if (principal.starts_with("serviceAccounts/")) {
    rest = principal.substr(16);
  } else {
    return false;
  }
  return IsTokenOf(rest, 128, "._@+-");
}

bool IsValidEnvName(std::string_view name) {
  if (name.empty()) return false;
  if (absl::ascii_isdigit(static_cast<unsigned char>(name.front())))
    return false;
  return IsTokenOf(name, name.size(), "_");
}

bool IsValidGpuModel(std::string_view model) {
  return model.empty() || IsTokenOf(model, kMaxGpuModelChars, "._-");
}

bool IsValidJobSet(std::string_view job_set) {
  return job_set.empty() || IsTokenOf(job_set, kMaxJobSetChars, "._-");
}

bool IsValidLabelKey(std::string_view key) {
  return IsTokenOf(key, kMaxLabelChars, "._/-");
}

bool IsValidLabelValue(std::string_view value) {
  return value.empty() || IsTokenOf(value, kMaxLabelChars, "._/-");
}

absl::StatusOr<absl::Duration> ToDuration(const google::protobuf::Duration& d,
                                          std::string_view field) {
  constexpr int64_t kMaxSeconds = 315'576'000'000;  // 10,000 years
  const int64_t s = d.seconds();
  const int32_t n = d.nanos();
  const bool ok = s >= -kMaxSeconds && s <= kMaxSeconds && n > -1'000'000'000 &&
                  n < 1'000'000'000 && !((s > 0 && n < 0) || (s < 0 && n > 0));
  if (!ok) {
    return FieldError(
        field, reason::kInvalidValue,
        Cat("is not a valid duration (seconds ", s, ", nanos ", n, ")"));
  }
  return absl::Seconds(s) + absl::Nanoseconds(n);
}

absl::StatusOr<absl::Time> ToTime(const google::protobuf::Timestamp& t,
                                  std::string_view field) {
  constexpr int64_t kMinSeconds = -62'135'596'800;  // 0001-01-01T00:00:00Z
  constexpr int64_t kMaxSeconds = 253'402'300'799;  // 9999-12-31T23:59:59Z
  if (t.seconds() < kMinSeconds || t.seconds() > kMaxSeconds || t.nanos() < 0 ||
      t.nanos() >= 1'000'000'000) {
    return FieldError(field, reason::kInvalidValue,
                      Cat("is not a valid timestamp (seconds ", t.seconds(),
                          ", nanos ", t.nanos(), ")"));
  }
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// --- Jobs ---

absl::Status ValidateJobSpec(const v1::JobSpec& spec, const Limits& limits) {
  TY_RETURN_IF_ERROR(CheckRequiredId("spec.project", spec.project()));
  TY_RETURN_IF_ERROR(CheckRequiredId("spec.queue", spec.queue()));
  TY_RETURN_IF_ERROR(
      CheckOptionalId("spec.priority_class", spec.priority_class()));
  if (spec.workers() < 1) {
    return FieldError("spec.workers", reason::kOutOfRange,
                      spec.workers() == 0
                          ? std::string("must be at least 1")
                          : Cat("must be at least 1, got ", spec.workers()));
  }
  if (spec.workers() > limits.max_workers) {
    return FieldError(
        "spec.workers", reason::kOutOfRange,
        Cat("must be at most ", limits.max_workers, ", got ", spec.workers()));
  }
  TY_RETURN_IF_ERROR(CheckResources(spec, limits));
  TY_RETURN_IF_ERROR(CheckTooLarge("spec.image", spec.image().size(),
                                   limits.max_uri, "bytes"));
  if (HasWhitespaceOrControl(spec.image())) {
    return FieldError("spec.image", reason::kInvalidValue,
                      "must not contain spaces or control characters");
  }
  TY_RETURN_IF_ERROR(CheckCommand(spec, limits));
  TY_RETURN_IF_ERROR(CheckEnv(spec, limits));
  TY_RETURN_IF_ERROR(CheckTooLarge("spec.working_dir",
                                   spec.working_dir().size(),
                                   kMaxWorkingDirBytes, "bytes"));
  if (HasControl(spec.working_dir())) {
    return FieldError("spec.working_dir", reason::kInvalidValue,
                      "must not contain control characters");
  }
  TY_RETURN_IF_ERROR(CheckTimes(spec, limits));
  TY_RETURN_IF_ERROR(CheckEnum("spec.spot_policy", spec.spot_policy(),
                               &v1::SpotPolicy_IsValid,
                               /*required=*/false));
  TY_RETURN_IF_ERROR(CheckCheckpointPolicy(spec, limits));
  TY_RETURN_IF_ERROR(CheckRetryPolicy(spec));
  TY_RETURN_IF_ERROR(CheckEnum("spec.backend", spec.backend(),
                               &v1::BackendPreference_IsValid,
                               /*required=*/false));
  TY_RETURN_IF_ERROR(CheckEnum("spec.topology.required_level",
                               spec.topology().required_level(),
                               &v1::TopologyLevel_IsValid, /*required=*/false));
  TY_RETURN_IF_ERROR(CheckEnum("spec.topology.preferred_level",
                               spec.topology().preferred_level(),
                               &v1::TopologyLevel_IsValid,
                               /*required=*/false));
  if (!IsValidJobSet(spec.job_set())) {
    return FieldError(
        "spec.job_set", reason::kInvalidName,
        Cat("must be at most 128 characters of [A-Za-z0-9._-], got ",
            Quote(spec.job_set())));
  }
  return absl::OkStatus();
}

absl::Status ValidateJob(const v1::Job& job, const Limits& limits) {
  TY_RETURN_IF_ERROR(
      ValidateDisplayName(job.display_name(), limits, "display_name"));
  TY_RETURN_IF_ERROR(ValidateLabels(job.labels(), limits, "labels"));
  if (!job.has_spec()) return Required("spec");
  return ValidateJobSpec(job.spec(), limits);
}

absl::Status ValidateLabels(
    const google::protobuf::Map<std::string, std::string>& labels,
    const Limits& limits, std::string_view field) {
  TY_RETURN_IF_ERROR(
      CheckTooLarge(field, labels.size(), limits.max_labels, "labels"));
  for (std::string_view key : SortedKeys(labels)) {
    if (!IsValidLabelKey(key)) {
      return FieldError(KeyField(field, key), reason::kInvalidName,
                        "keys must be 1..63 characters of [a-zA-Z0-9._/-]");
    }
    if (!IsValidLabelValue(labels.at(std::string(key)))) {
      return FieldError(
          KeyField(field, key), reason::kInvalidValue,
          Cat("values must be at most 63 characters of [a-zA-Z0-9._/-], "
              "got ",
              Quote(labels.at(std::string(key)))));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDisplayName(std::string_view display_name,
                                 const Limits& limits, std::string_view field) {
  TY_RETURN_IF_ERROR(CheckTooLarge(field, CountCodePoints(display_name),
                                   limits.max_display_name, "characters"));
  if (HasControl(display_name)) {
    return FieldError(field, reason::kInvalidValue,
                      "must not contain control characters");
  }
  return absl::OkStatus();
}

absl::Status ValidateClientRequestId(std::string_view client_request_id) {
  constexpr std::string_view kField = "client_request_id";
  if (client_request_id.empty()) return Required(kField);
  TY_RETURN_IF_ERROR(CheckTooLarge(kField, client_request_id.size(),
                                   kMaxClientRequestIdChars, "characters"));
  if (!IsTokenOf(client_request_id, kMaxClientRequestIdChars, "._:-")) {
    return FieldError(kField, reason::kInvalidValue,
                      Cat("must be 1..128 characters of [A-Za-z0-9._:-], got ",
                          Quote(client_request_id)));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpoint(const v1::Checkpoint& checkpoint,
                                absl::Time now) {
  if (checkpoint.attempt() < 0) {
    return FieldError("attempt", reason::kOutOfRange,
                      Cat("must not be negative, got ", checkpoint.attempt()));
  }
  if (checkpoint.step() < 0) {
    return FieldError("step", reason::kOutOfRange,
                      Cat("must not be negative, got ", checkpoint.step()));
  }
  if (checkpoint.uri().empty()) return Required("uri");
  TY_RETURN_IF_ERROR(
      CheckTooLarge("uri", checkpoint.uri().size(), Limits().max_uri, "bytes"));
  if (HasControl(checkpoint.uri())) {
    return FieldError("uri", reason::kInvalidValue,
                      "must not contain control characters");
  }
  if (!checkpoint.has_time()) return Required("time");
  absl::StatusOr<absl::Time> time = ToTime(checkpoint.time(), "time");
  if (!time.ok()) return time.status();
  if (*time > now + kMaxCheckpointClockSkew) {
    return FieldError(
        "time", reason::kOutOfRange,
        Cat("is ", absl::FormatDuration(*time - now),
            " in the future (at most ",
            absl::FormatDuration(kMaxCheckpointClockSkew), " allowed)"));
  }
  TY_RETURN_IF_ERROR(CheckTooLarge("metadata", checkpoint.metadata().size(),
                                   kMaxCheckpointMetadata, "entries"));
  for (std::string_view key : SortedKeys(checkpoint.metadata())) {
    const std::string& value = checkpoint.metadata().at(std::string(key));
    if (key.empty() || key.size() > kMaxCheckpointMetadataKeyBytes ||
        HasControl(key)) {
      return FieldError(KeyField("metadata", key), reason::kInvalidName,
                        "keys must be 1..256 bytes without control characters");
    }
    if (value.size() > kMaxCheckpointMetadataValueBytes || HasNul(value)) {
      return FieldError(
          KeyField("metadata", key), reason::kInvalidValue,
          "values must be at most 4096 bytes without NUL characters");
    }
  }
  return absl::OkStatus();
}

// --- Tenants, projects, queues, cohorts, priority classes ---

absl::Status ValidateTenant(const v1::Tenant& tenant, const Limits& limits) {
  TY_RETURN_IF_ERROR(
      ValidateDisplayName(tenant.display_name(), limits, "display_name"));
  TY_RETURN_IF_ERROR(ValidateLabels(tenant.labels(), limits, "labels"));
  TY_RETURN_IF_ERROR(CheckOptionalId("default_priority_class",
                                     tenant.default_priority_class()));
  TY_RETURN_IF_ERROR(
      CheckNonNegativeFinite("submit_rate_limit", tenant.submit_rate_limit()));
  TY_RETURN_IF_ERROR(
      CheckNonNegativeFinite("submit_burst", tenant.submit_burst()));
  return absl::OkStatus();
}

absl::Status ValidateProject(const v1::Project& project, const Limits& limits) {
  TY_RETURN_IF_ERROR(
      ValidateDisplayName(project.display_name(), limits, "display_name"));
  TY_RETURN_IF_ERROR(ValidateLabels(project.labels(), limits, "labels"));
  return absl::OkStatus();
}

absl::Status ValidateFairShareWeight(double weight, std::string_view field) {
  return CheckNonNegativeFinite(field, weight);
}

double EffectiveFairShareWeight(double weight) {
  return weight == 0 ? 1.0 : weight;
}

absl::Status ValidateFlavorQuotas(
    const google::protobuf::RepeatedPtrField<v1::FlavorQuotas>& quotas,
    std::string_view field) {
  absl::flat_hash_set<std::string_view> flavors;
  for (int i = 0; i < quotas.size(); ++i) {
    const v1::FlavorQuotas& fq = quotas.Get(i);
    const std::string at = IndexField(field, i);
    const std::string flavor_field = JoinField(at, "flavor");
    TY_RETURN_IF_ERROR(CheckRequiredId(flavor_field, fq.flavor()));
    if (!flavors.insert(fq.flavor()).second) {
      return FieldError(flavor_field, reason::kDuplicate,
                        Cat("flavor ", Quote(fq.flavor()), " is listed twice"));
    }
    bool seen[4] = {false, false, false, false};
    for (int j = 0; j < fq.resources_size(); ++j) {
      const v1::ResourceQuota& rq = fq.resources(j);
      const std::string rat = IndexField(JoinField(at, "resources"), j);
      const std::string resource_field = JoinField(rat, "resource");
      TY_RETURN_IF_ERROR(CheckEnum(resource_field, rq.resource(),
                                   &v1::ResourceName_IsValid,
                                   /*required=*/true));
      if (seen[rq.resource()]) {
        return FieldError(
            resource_field, reason::kDuplicate,
            Cat(v1::ResourceName_Name(rq.resource()),
                " is listed twice for flavor ", Quote(fq.flavor())));
      }
      seen[rq.resource()] = true;
      TY_RETURN_IF_ERROR(CheckQuotaEntry(rq, rat));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateQueue(const v1::Queue& queue, const Limits& limits) {
  TY_RETURN_IF_ERROR(
      ValidateDisplayName(queue.display_name(), limits, "display_name"));
  TY_RETURN_IF_ERROR(CheckOptionalId("cohort", queue.cohort()));
  TY_RETURN_IF_ERROR(ValidateFlavorQuotas(queue.quotas(), "quotas"));
  TY_RETURN_IF_ERROR(
      ValidateFairShareWeight(queue.fair_share_weight(), "fair_share_weight"));
  TY_RETURN_IF_ERROR(CheckEnum("queueing_strategy", queue.queueing_strategy(),
                               &v1::QueueingStrategy_IsValid,
                               /*required=*/false));
  const v1::PreemptionPolicy& p = queue.preemption();
  TY_RETURN_IF_ERROR(CheckEnum("preemption.within_queue", p.within_queue(),
                               &v1::WithinQueuePreemption_IsValid,
                               /*required=*/false));
  TY_RETURN_IF_ERROR(
      CheckEnum("preemption.reclaim_within_cohort", p.reclaim_within_cohort(),
                &v1::ReclaimWithinCohort_IsValid, /*required=*/false));
  TY_RETURN_IF_ERROR(CheckEnum("preemption.fair_share", p.fair_share(),
                               &v1::FairSharePreemption_IsValid,
                               /*required=*/false));
  // Borrowing jobs reclaim through the reclaim rule (as Kueue's
  // borrowWithinCohort needs reclaimWithinCohort): without it the threshold
  // would be stored and never read.
  if (p.has_borrow_within_cohort_max_priority() &&
      (p.reclaim_within_cohort() == v1::RECLAIM_WITHIN_COHORT_UNSPECIFIED ||
       p.reclaim_within_cohort() == v1::RECLAIM_WITHIN_COHORT_NEVER)) {
    return FieldError("preemption.borrow_within_cohort_max_priority",
                      reason::kInvalidValue,
                      "needs preemption.reclaim_within_cohort LOWER_PRIORITY "
                      "or ANY");
  }
  const v1::FlavorFungibility& f = queue.flavor_fungibility();
  TY_RETURN_IF_ERROR(CheckEnum("flavor_fungibility.when_can_borrow",
                               f.when_can_borrow(), &v1::FlavorFallback_IsValid,
                               /*required=*/false));
  TY_RETURN_IF_ERROR(
      CheckEnum("flavor_fungibility.when_can_preempt", f.when_can_preempt(),
                &v1::FlavorFallback_IsValid, /*required=*/false));
  TY_RETURN_IF_ERROR(CheckEnum("stop_policy", queue.stop_policy(),
                               &v1::StopPolicy_IsValid,
                               /*required=*/false));
  if (queue.has_min_runtime()) {
    TY_RETURN_IF_ERROR(
        CheckNonNegativeDuration(queue.min_runtime(), "min_runtime").status());
  }
  return absl::OkStatus();
}

absl::Status ValidateCohort(const v1::Cohort& cohort,
                            std::string_view cohort_id) {
  std::string self(cohort_id);
  if (self.empty() && !cohort.name().empty()) {
    absl::StatusOr<std::string> parsed = ParseCohortName(cohort.name(), "name");
    if (parsed.ok()) self = *parsed;
  }
  TY_RETURN_IF_ERROR(CheckOptionalId("parent", cohort.parent()));
  if (!self.empty() && cohort.parent() == self) {
    return FieldError("parent", reason::kInconsistent,
                      "a cohort cannot be its own parent");
  }
  TY_RETURN_IF_ERROR(
      ValidateFairShareWeight(cohort.fair_share_weight(), "fair_share_weight"));
  TY_RETURN_IF_ERROR(ValidateFlavorQuotas(cohort.quotas(), "quotas"));
  return absl::OkStatus();
}

absl::Status ValidatePriorityClass(const v1::PriorityClass& priority_class) {
  if (priority_class.value() < -kMaxPriorityValue ||
      priority_class.value() > kMaxPriorityValue) {
    return FieldError("value", reason::kOutOfRange,
                      Cat("must be between -1000000 and 1000000, got ",
                          priority_class.value()));
  }
  TY_RETURN_IF_ERROR(CheckTooLarge(
      "description", CountCodePoints(priority_class.description()),
      kMaxDescriptionChars, "characters"));
  return absl::OkStatus();
}

// --- Capacity ---

absl::Status ValidateFlavor(const v1::Flavor& flavor) {
  TY_RETURN_IF_ERROR(CheckEnum("kind", flavor.kind(), &v1::FlavorKind_IsValid,
                               /*required=*/true));
  if (!IsValidGpuModel(flavor.gpu_model())) {
    return FieldError("gpu_model", reason::kInvalidValue,
                      Cat("must be 1..64 characters of [A-Za-z0-9._-], got ",
                          Quote(flavor.gpu_model())));
  }
  struct Price {
    std::string_view field;
    const v1::Money* money;
    bool set;
  };
  const Price prices[] = {
      {"gpu_hour_price", &flavor.gpu_hour_price(), flavor.has_gpu_hour_price()},
      {"cpu_hour_price", &flavor.cpu_hour_price(), flavor.has_cpu_hour_price()},
      {"memory_gib_hour_price", &flavor.memory_gib_hour_price(),
       flavor.has_memory_gib_hour_price()},
  };
  std::string_view currency;
  std::string_view currency_field;
  for (const Price& p : prices) {
    if (!p.set) continue;
    TY_RETURN_IF_ERROR(ValidateMoney(*p.money, p.field));
    if (currency.empty()) {
      currency = CurrencyOf(*p.money);
      currency_field = p.field;
    } else if (CurrencyOf(*p.money) != currency) {
      return FieldError(JoinField(p.field, "currency_code"),
                        reason::kInconsistent,
                        Cat("must be the same currency as ", currency_field,
                            " (", currency, "), got ", CurrencyOf(*p.money)));
    }
  }
  TY_RETURN_IF_ERROR(CheckNonNegativeFinite("reclaim_rate_per_hour",
                                            flavor.reclaim_rate_per_hour()));
  if (flavor.kind() != v1::FLAVOR_KIND_SPOT &&
      flavor.reclaim_rate_per_hour() != 0) {
    return FieldError("reclaim_rate_per_hour", reason::kInconsistent,
                      "must be 0 unless kind is FLAVOR_KIND_SPOT");
  }
  if (flavor.has_restart_overhead()) {
    TY_RETURN_IF_ERROR(CheckNonNegativeDuration(flavor.restart_overhead(),
                                                "restart_overhead",
                                                absl::Hours(24))
                           .status());
  }
  return absl::OkStatus();
}

absl::Status ValidateCluster(const v1::Cluster& cluster, const Limits& limits) {
  TY_RETURN_IF_ERROR(
      ValidateDisplayName(cluster.display_name(), limits, "display_name"));
  TY_RETURN_IF_ERROR(CheckEnum("backend", cluster.backend(),
                               &v1::BackendKind_IsValid, /*required=*/true));
  v1::Cluster::SettingsCase expected = v1::Cluster::SETTINGS_NOT_SET;
  switch (cluster.backend()) {
    case v1::BACKEND_KIND_SLURM:
      expected = v1::Cluster::kSlurm;
      break;
    case v1::BACKEND_KIND_KUBERNETES:
      expected = v1::Cluster::kKubernetes;
      break;
    case v1::BACKEND_KIND_SIM:
      expected = v1::Cluster::kSim;
      break;
    default:
      break;
  }
  if (cluster.settings_case() != v1::Cluster::SETTINGS_NOT_SET &&
      cluster.settings_case() != expected) {
    return FieldError(SettingsFieldName(cluster.settings_case()),
                      reason::kInconsistent,
                      Cat("settings do not match backend ",
                          v1::BackendKind_Name(cluster.backend()), "; set ",
                          SettingsFieldName(expected), " instead"));
  }
  switch (cluster.settings_case()) {
    case v1::Cluster::kSlurm:
      TY_RETURN_IF_ERROR(CheckSlurmSettings(cluster.slurm()));
      break;
    case v1::Cluster::kKubernetes:
      TY_RETURN_IF_ERROR(CheckKubernetesSettings(cluster.kubernetes()));
      break;
    case v1::Cluster::kSim:
      TY_RETURN_IF_ERROR(CheckNonNegativeFinite(
          "sim.reclaim_rate_per_hour", cluster.sim().reclaim_rate_per_hour()));
      break;
    default:
      break;
  }
  TY_RETURN_IF_ERROR(ValidateLabels(cluster.labels(), limits, "labels"));
  return absl::OkStatus();
}

absl::Status ValidatePool(const v1::Pool& pool, const Limits& limits) {
  TY_RETURN_IF_ERROR(CheckRequiredId("flavor", pool.flavor()));
  TY_RETURN_IF_ERROR(
      ValidateLabels(pool.node_selector(), limits, "node_selector"));
  return absl::OkStatus();
}

absl::Status ValidateNode(const v1::Node& node, const Limits& limits) {
  TY_RETURN_IF_ERROR(CheckRequiredId("pool", node.pool()));
  if (!node.has_capacity()) return Required("capacity");
  const v1::Resources& c = node.capacity();
  if (c.gpus() < 0) {
    return FieldError("capacity.gpus", reason::kOutOfRange,
                      Cat("must not be negative, got ", c.gpus()));
  }
  if (!IsValidGpuModel(c.gpu_model())) {
    return FieldError("capacity.gpu_model", reason::kInvalidValue,
                      Cat("must be 1..64 characters of [A-Za-z0-9._-], got ",
                          Quote(c.gpu_model())));
  }
  if (c.cpu_millis() <= 0) {
    return FieldError("capacity.cpu_millis", reason::kOutOfRange,
                      Cat("must be positive, got ", c.cpu_millis()));
  }
  if (c.memory_bytes() <= 0) {
    return FieldError("capacity.memory_bytes", reason::kOutOfRange,
                      Cat("must be positive, got ", c.memory_bytes()));
  }
  if (!IsValidLabelValue(node.topology().block())) {
    return FieldError("topology.block", reason::kInvalidValue,
                      "must be at most 63 characters of [a-zA-Z0-9._/-]");
  }
  if (!IsValidLabelValue(node.topology().rack())) {
    return FieldError("topology.rack", reason::kInvalidValue,
                      "must be at most 63 characters of [a-zA-Z0-9._/-]");
  }
  TY_RETURN_IF_ERROR(ValidateLabels(node.labels(), limits, "labels"));
  TY_RETURN_IF_ERROR(CheckEnum("state", node.state(), &v1::NodeState_IsValid,
                               /*required=*/false));
  return absl::OkStatus();
}

// --- Access ---

absl::Status ValidateRoleBinding(const v1::RoleBinding& binding) {
  if (binding.principal().empty()) return Required("principal");
  if (!IsValidPrincipal(binding.principal())) {
    return FieldError(
        "principal", reason::kInvalidName,
        Cat("must be users/{id} or serviceAccounts/{id} with 1..128 "
            "characters of [a-zA-Z0-9._@+-], got ",
            Quote(binding.principal())));
  }
  TY_RETURN_IF_ERROR(
      CheckEnum("role", binding.role(), &v1::Role_IsValid, /*required=*/true));
  if (binding.role() == v1::ROLE_PLATFORM_ADMIN) {
    if (!binding.tenant().empty()) {
      return FieldError(
          "tenant", reason::kInconsistent,
          "must be empty for ROLE_PLATFORM_ADMIN (it spans every tenant)");
    }
    return absl::OkStatus();
  }
  // ROLE_FINANCE without a tenant is the platform's finance role: it reads
  // every tenant's accounting and nothing else.
  if (binding.tenant().empty() && binding.role() != v1::ROLE_FINANCE) {
    return FieldError("tenant", reason::kRequired,
                      Cat("required for ", v1::Role_Name(binding.role())));
  }
  if (binding.tenant().empty()) return absl::OkStatus();
  if (!IsValidId(binding.tenant())) return BadId("tenant", binding.tenant());
  return absl::OkStatus();
}

// --- Text in requests ---

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (1..4), or 0 if none is.
size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t len = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((c & 0xe0) == 0xc0) {
    len = 2, cp = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    len = 3, cp = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceAt(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceAt(s, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

bool IsStorableText(std::string_view s) { return !HasNul(s) && IsValidUtf8(s); }

namespace {

absl::Status CheckText(std::string_view field, std::string_view value) {
  if (HasNul(value)) {
    return FieldError(field, reason::kInvalidValue,
                      "must not contain a NUL byte");
  }
  if (!IsValidUtf8(value)) {
    return FieldError(field, reason::kInvalidValue, "must be valid UTF-8");
  }
  return absl::OkStatus();
}

absl::Status CheckMessageText(const google::protobuf::Message& message,
                              const std::string& prefix);

// One value of `f` (element `index` of a repeated field, -1 for a singular
// one) at `path`.
absl::Status CheckValueText(const google::protobuf::Message& message,
                            const google::protobuf::FieldDescriptor* f,
                            int index, const std::string& path) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message.GetReflection();
  if (f->type() == FieldDescriptor::TYPE_STRING) {
    std::string scratch;
    const std::string& value =
        index < 0 ? r->GetStringReference(message, f, &scratch)
                  : r->GetRepeatedStringReference(message, f, index, &scratch);
    return CheckText(path, value);
  }
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return CheckMessageText(index < 0
                                ? r->GetMessage(message, f)
                                : r->GetRepeatedMessage(message, f, index),
                            path);
  }
  return absl::OkStatus();
}

absl::Status CheckMessageText(const google::protobuf::Message& message,
                              const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string path = JoinField(prefix, f->name());
    if (f->is_map()) {
      const FieldDescriptor* key_field = f->message_type()->map_key();
      const FieldDescriptor* value_field = f->message_type()->map_value();
      for (int i = 0; i < r->FieldSize(message, f); ++i) {
        const google::protobuf::Message& entry =
            r->GetRepeatedMessage(message, f, i);
        const google::protobuf::Reflection* er = entry.GetReflection();
        // Every map of the API is keyed by strings; others are named by
        // their entry's index.
        std::string entry_path = IndexField(path, i);
        if (key_field->type() == FieldDescriptor::TYPE_STRING) {
          const std::string key = er->GetString(entry, key_field);
          entry_path = KeyField(path, key);
          TY_RETURN_IF_ERROR(CheckText(entry_path, key));
        }
        TY_RETURN_IF_ERROR(CheckValueText(entry, value_field, -1, entry_path));
      }
    } else if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(message, f); ++i) {
        TY_RETURN_IF_ERROR(CheckValueText(message, f, i, IndexField(path, i)));
      }
    } else {
      TY_RETURN_IF_ERROR(CheckValueText(message, f, -1, path));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRequestText(const google::protobuf::Message& message) {
  return CheckMessageText(message, "");
}

// --- Pagination ---

absl::StatusOr<int32_t> ResolvePageSize(int32_t page_size,
                                        std::string_view field) {
  if (page_size < 0) {
    return FieldError(field, reason::kOutOfRange,
                      Cat("must not be negative, got ", page_size));
  }
  if (page_size == 0) return kDefaultPageSize;
  return std::min(page_size, kMaxPageSize);
}

}  // namespace trainyard::domain
