#include "services/dispatcher/adapters/adapter.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "absl/strings/numbers.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"

namespace trainyard::dispatcher {
namespace {

using ::trainyard::domain::Cat;
using ::trainyard::domain::FieldError;
namespace reason = ::trainyard::domain::reason;

constexpr int32_t kDefaultMaxAttempts = 3;

// Canonical decimal: digits only, no leading zero (except "0" itself).
bool IsCanonicalDecimal(std::string_view s) {
  if (s.empty() || s.size() > 19) return false;
  if (!std::all_of(s.begin(), s.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return s.size() == 1 || s[0] != '0';
}

std::string Quoted(std::string_view s) {
  constexpr size_t kMax = 64;
  std::string out = "\"";
  for (char c : s.substr(0, kMax)) {
    if (std::isprint(static_cast<unsigned char>(c))) {
      out += c;
    } else {
      out += '?';
    }
  }
  if (s.size() > kMax) out += "...";
  out += '"';
  return out;
}

}  // namespace

std::string BackendJobName(int64_t job_id, int32_t attempt) {
  return Cat(kBackendJobNamePrefix, job_id, "-", attempt);
}

absl::StatusOr<BackendJobRef> ParseBackendJobName(std::string_view name,
                                                  std::string_view field) {
  const auto bad = [&] {
    return FieldError(field, reason::kInvalidName,
                      Cat("expected ty-<job>-<attempt>, got ", Quoted(name)));
  };
  if (name.substr(0, kBackendJobNamePrefix.size()) != kBackendJobNamePrefix) {
    return bad();
  }
  std::string_view rest = name.substr(kBackendJobNamePrefix.size());
  const size_t dash = rest.find('-');
  if (dash == std::string_view::npos) return bad();
  const std::string_view job = rest.substr(0, dash);
  const std::string_view attempt = rest.substr(dash + 1);
  if (!IsCanonicalDecimal(job) || !IsCanonicalDecimal(attempt)) return bad();
  BackendJobRef ref;
  if (!absl::SimpleAtoi(domain::AbslView(job), &ref.job_id) ||
      !absl::SimpleAtoi(domain::AbslView(attempt), &ref.attempt) ||
      ref.job_id <= 0 || ref.attempt <= 0) {
    return bad();
  }
  return ref;
}

std::map<std::string, std::string> AttemptEnv(const LaunchRequest& request) {
  std::map<std::string, std::string> env(request.spec.env().begin(),
                                         request.spec.env().end());
  env["TRAINYARD_JOB"] =
      domain::JobResourceName(request.tenant, request.job_id);
  env["TRAINYARD_TENANT"] = request.tenant;
  env["TRAINYARD_JOB_ID"] = Cat(request.job_id);
  env["TRAINYARD_ATTEMPT"] = Cat(request.attempt);
  env["TRAINYARD_BACKEND_JOB_NAME"] = request.name;
  env["TRAINYARD_WORKERS"] = Cat(request.spec.workers());
  if (!request.spec.checkpoint().directory().empty()) {
    env["TRAINYARD_CHECKPOINT_DIR"] = request.spec.checkpoint().directory();
  }
  if (!request.resume_from.empty()) {
    env["TRAINYARD_RESUME_FROM"] = request.resume_from;
  }
  for (const auto& [key, value] : request.env) env[key] = value;
  return env;
}

absl::Status ValidateLaunchRequest(const LaunchRequest& request) {
  if (request.job_id <= 0) {
    return FieldError("job_id", reason::kOutOfRange, "must be positive");
  }
  if (request.attempt <= 0) {
    return FieldError("attempt", reason::kOutOfRange, "must be at least 1");
  }
  if (request.name.empty()) {
    return FieldError("name", reason::kRequired, "required");
  }
  const std::string expected = BackendJobName(request.job_id, request.attempt);
  if (request.name != expected) {
    return FieldError(
        "name", reason::kInconsistent,
        Cat("must be ", Quoted(expected), " for job ", request.job_id,
            " attempt ", request.attempt, ", got ", Quoted(request.name)));
  }
  if (!domain::IsValidId(request.tenant)) {
    return FieldError("tenant", reason::kInvalidName,
                      Cat("invalid tenant id ", Quoted(request.tenant)));
  }
  const int32_t workers = request.spec.workers();
  if (workers < 1) {
    return FieldError("spec.workers", reason::kOutOfRange,
                      "must be at least 1");
  }
  const trainyard::v1::Resources& res = request.spec.resources();
  if (res.gpus() < 0) {
    return FieldError("spec.resources.gpus", reason::kOutOfRange,
                      "must not be negative");
  }
  if (res.cpu_millis() < 0) {
    return FieldError("spec.resources.cpu_millis", reason::kOutOfRange,
                      "must not be negative");
  }
  if (res.memory_bytes() < 0) {
    return FieldError("spec.resources.memory_bytes", reason::kOutOfRange,
                      "must not be negative");
  }
  if (request.worker_nodes.size() != static_cast<size_t>(workers)) {
    return FieldError("worker_nodes", reason::kInconsistent,
                      Cat("has ", request.worker_nodes.size(),
                          " entries; spec.workers is ", workers));
  }
  for (size_t i = 0; i < request.worker_nodes.size(); ++i) {
    const std::string& node = request.worker_nodes[i];
    const std::string field = Cat("worker_nodes[", i, "]");
    if (node.empty()) return FieldError(field, reason::kRequired, "required");
    if (!domain::IsValidNodeId(node)) {
      return FieldError(field, reason::kInvalidName,
                        Cat("invalid node id ", Quoted(node)));
    }
  }
  if (!request.flavor.empty() && !domain::IsValidId(request.flavor)) {
    return FieldError("flavor", reason::kInvalidName,
                      Cat("invalid flavor id ", Quoted(request.flavor)));
  }
  for (const auto& [key, value] : request.spec.env()) {
    if (!domain::IsValidEnvName(key)) {
      return FieldError(Cat("spec.env[", Quoted(key), "]"),
                        reason::kInvalidName, "invalid environment name");
    }
  }
  for (const auto& [key, value] : request.env) {
    if (!domain::IsValidEnvName(key)) {
      return FieldError(Cat("env[", Quoted(key), "]"), reason::kInvalidName,
                        "invalid environment name");
    }
  }
  return absl::OkStatus();
}

std::string_view AttemptPhaseName(AttemptPhase phase) {
  switch (phase) {
    case AttemptPhase::kPending:
      return "PENDING";
    case AttemptPhase::kRunning:
      return "RUNNING";
    case AttemptPhase::kSucceeded:
      return "SUCCEEDED";
    case AttemptPhase::kFailed:
      return "FAILED";
    case AttemptPhase::kCancelled:
      return "CANCELLED";
  }
  return "UNKNOWN";
}

bool IsTerminal(AttemptPhase phase) {
  return phase == AttemptPhase::kSucceeded || phase == AttemptPhase::kFailed ||
         phase == AttemptPhase::kCancelled;
}

std::string_view FailureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kNone:
      return "NONE";
    case FailureKind::kUserError:
      return "USER_ERROR";
    case FailureKind::kPreempted:
      return "PREEMPTED";
    case FailureKind::kSpotReclaim:
      return "SPOT_RECLAIM";
    case FailureKind::kNodeFailure:
      return "NODE_FAILURE";
    case FailureKind::kTimeLimit:
      return "TIME_LIMIT";
    case FailureKind::kCancelled:
      return "CANCELLED";
    case FailureKind::kBackendError:
      return "BACKEND_ERROR";
  }
  return "UNKNOWN";
}

trainyard::v1::FailureClass ToFailureClass(FailureKind kind) {
  switch (kind) {
    case FailureKind::kNone:
      return trainyard::v1::FAILURE_CLASS_UNSPECIFIED;
    case FailureKind::kUserError:
      return trainyard::v1::FAILURE_CLASS_USER_ERROR;
    case FailureKind::kPreempted:
      return trainyard::v1::FAILURE_CLASS_PREEMPTION;
    case FailureKind::kSpotReclaim:
      return trainyard::v1::FAILURE_CLASS_SPOT_RECLAIM;
    case FailureKind::kNodeFailure:
      return trainyard::v1::FAILURE_CLASS_NODE_FAILURE;
    case FailureKind::kTimeLimit:
      return trainyard::v1::FAILURE_CLASS_TIME_LIMIT;
    case FailureKind::kCancelled:
      return trainyard::v1::FAILURE_CLASS_CANCELLED;
    case FailureKind::kBackendError:
      return trainyard::v1::FAILURE_CLASS_BACKEND_ERROR;
  }
  return trainyard::v1::FAILURE_CLASS_UNSPECIFIED;
}

bool Retryable(FailureKind kind) {
  switch (kind) {
    case FailureKind::kPreempted:
    case FailureKind::kSpotReclaim:
    case FailureKind::kNodeFailure:
    case FailureKind::kBackendError:
      return true;
    case FailureKind::kNone:
    case FailureKind::kUserError:
    case FailureKind::kTimeLimit:
    case FailureKind::kCancelled:
      return false;
  }
  return false;
}

bool CountsAgainstRetryLimit(FailureKind kind) {
  return kind == FailureKind::kUserError || kind == FailureKind::kBackendError;
}

bool ShouldRetry(FailureKind kind, std::optional<int> exit_code,
                 const trainyard::v1::RetryPolicy& policy,
                 int32_t counted_attempts) {
  const int32_t max_attempts =
      policy.max_attempts() > 0 ? policy.max_attempts() : kDefaultMaxAttempts;
  switch (kind) {
    case FailureKind::kPreempted:
    case FailureKind::kSpotReclaim:
    case FailureKind::kNodeFailure:
      return true;
    case FailureKind::kBackendError:
      return counted_attempts < max_attempts;
    case FailureKind::kUserError: {
      if (counted_attempts >= max_attempts) return false;
      const auto& codes = policy.retryable_exit_codes();
      if (codes.empty()) return !exit_code.has_value() || *exit_code != 0;
      return exit_code.has_value() &&
             std::find(codes.begin(), codes.end(), *exit_code) != codes.end();
    }
    case FailureKind::kNone:
    case FailureKind::kTimeLimit:
    case FailureKind::kCancelled:
      return false;
  }
  return false;
}

trainyard::v1::Node ToNodeProto(const NodeInventory& node,
                                std::string_view cluster) {
  trainyard::v1::Node out;
  out.set_name(domain::NodeName(cluster, node.name));
  out.set_pool(node.pool);
  trainyard::v1::Resources* capacity = out.mutable_capacity();
  capacity->set_gpus(static_cast<int32_t>(
      std::min<int64_t>(node.gpus, std::numeric_limits<int32_t>::max())));
  capacity->set_gpu_model(node.gpu_model);
  capacity->set_cpu_millis(node.cpu_millis);
  capacity->set_memory_bytes(node.memory_bytes);
  out.mutable_topology()->set_block(node.block);
  out.mutable_topology()->set_rack(node.rack);
  for (const auto& [key, value] : node.labels) {
    (*out.mutable_labels())[key] = value;
  }
  if (node.failed) {
    out.set_state(trainyard::v1::NODE_STATE_DOWN);
  } else if (!node.schedulable) {
    out.set_state(trainyard::v1::NODE_STATE_DRAINING);
  } else {
    out.set_state(trainyard::v1::NODE_STATE_READY);
  }
  out.set_state_message(node.state_message);
  return out;
}

bool SameNodeRecord(const NodeInventory& a, const NodeInventory& b) {
  auto record = [](const NodeInventory& n) {
    return std::tie(n.name, n.pool, n.gpu_model, n.gpus, n.cpu_millis,
                    n.memory_bytes, n.rack, n.block, n.labels, n.schedulable,
                    n.failed, n.state_message);
  };
  return record(a) == record(b);
}

absl::StatusOr<LogChunk> Adapter::ReadLog(std::string_view name,
                                          int64_t /*offset*/,
                                          int64_t /*max_bytes*/) {
  return absl::UnimplementedError(
      Cat("the ", kind(), " backend keeps no output of ", name));
}

}  // namespace trainyard::dispatcher
