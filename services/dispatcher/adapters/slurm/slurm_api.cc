#include "services/dispatcher/adapters/slurm/slurm_api.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::slurm {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;

namespace v1 = ::trainyard::v1;

namespace {

using Json = nlohmann::json;
namespace reason = ::trainyard::domain::reason;

constexpr size_t kMaxHosts = 100000;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr std::string_view kCommentPrefix = "trainyard:";

Json Parse(std::string_view body) {
  return Json::parse(body.begin(), body.end(), nullptr,
                     /*allow_exceptions=*/false);
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const Json* Field(const Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

std::string Str(const Json& o, const char* key) {
  const Json* f = Field(o, key);
  return f != nullptr && f->is_string() ? f->get<std::string>() : "";
}

// Integers as v0.0.38 prints them, and as later versions do ({"set": true,
// "number": N}); nullopt for null, absent, unset or not a number.
std::optional<int64_t> IntOf(const Json& f) {
  if (f.is_number_integer()) return f.get<int64_t>();
  if (f.is_number_unsigned()) {
    const uint64_t u = f.get<uint64_t>();
    return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
  }
  if (f.is_number_float()) {
    const double d = f.get<double>();
    if (!(d > -9.2e18 && d < 9.2e18)) return std::nullopt;
    return static_cast<int64_t>(d);
  }
  if (f.is_object()) {
    const Json* set = Field(f, "set");
    if (set != nullptr && set->is_boolean() && !set->get<bool>()) {
      return std::nullopt;
    }
    const Json* n = Field(f, "number");
    if (n != nullptr) return IntOf(*n);
  }
  return std::nullopt;
}

std::optional<int64_t> Int(const Json& o, const char* key) {
  const Json* f = Field(o, key);
  return f == nullptr ? std::nullopt : IntOf(*f);
}

std::optional<absl::Time> TimeField(const Json& o, const char* key) {
  std::optional<int64_t> t = Int(o, key);
  if (!t.has_value() || *t <= 0 || *t >= int64_t{1} << 40) return std::nullopt;
  return absl::FromUnixSeconds(*t);
}

std::vector<std::string> StringList(const Json& o, const char* key) {
  std::vector<std::string> out;
  const Json* f = Field(o, key);
  if (f == nullptr) return out;
  if (f->is_array()) {
    for (const Json& e : *f) {
      if (e.is_string()) out.push_back(e.get<std::string>());
    }
  } else if (f->is_string()) {
    for (absl::string_view part : absl::StrSplit(
             f->get<std::string>(), absl::ByAnyChar(",+"), absl::SkipEmpty())) {
      out.emplace_back(part);
    }
  }
  return out;
}

std::string Upper(std::string_view s) {
  return absl::AsciiStrToUpper(AbslView(s));
}

// Exit code from a raw wait status: 128 + signal when killed.
int ExitCodeOf(int64_t raw) {
  const int sig = static_cast<int>(raw & 0x7f);
  if (sig != 0) return 128 + sig;
  return static_cast<int>((raw >> 8) & 0xff);
}

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits at commas outside parentheses and brackets.
std::vector<std::string> SplitTopLevel(std::string_view s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') depth = std::max(0, depth - 1);
    if (c == ',' && depth == 0) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

}  // namespace

// --- Auth -------------------------------------------------------------------

std::string MintJwt(std::string_view key, std::string_view user, absl::Time now,
                    absl::Duration lifetime) {
  const int64_t iat = absl::ToUnixSeconds(now);
  const int64_t exp =
      iat + std::max<int64_t>(1, absl::ToInt64Seconds(lifetime));
  Json claims = {{"iat", iat}, {"exp", exp}, {"sun", std::string(user)}};
  const std::string header = absl::WebSafeBase64Escape(
      absl::string_view(R"({"alg":"HS256","typ":"JWT"})"));
  const std::string payload = absl::WebSafeBase64Escape(Dump(claims));
  const std::string signing_input = Cat(header, ".", payload);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(signing_input.data()),
       signing_input.size(), mac, &mac_len);
  return Cat(
      signing_input, ".",
      absl::WebSafeBase64Escape(absl::string_view(
          reinterpret_cast<const char*>(mac), static_cast<size_t>(mac_len))));
}

// --- Errors -----------------------------------------------------------------

std::vector<SlurmError> ParseErrors(std::string_view body) {
  std::vector<SlurmError> out;
  const Json j = Parse(body);
  const Json* errors = Field(j, "errors");
  if (errors == nullptr || !errors->is_array()) return out;
  for (const Json& e : *errors) {
    if (!e.is_object()) continue;
    SlurmError err;
    std::optional<int64_t> code = Int(e, "error_number");
    if (!code.has_value()) code = Int(e, "error_code");
    err.code = code.has_value() && *code > -1000000 && *code < 1000000
                   ? static_cast<int>(*code)
                   : 0;
    err.error = Str(e, "error");
    err.description = Str(e, "description");
    out.push_back(std::move(err));
  }
  return out;
}

absl::Status ClassifyResponse(int http_status, std::string_view body,
                              std::string_view what) {
  const std::vector<SlurmError> errors = ParseErrors(body);
  const bool ok_status =
      (http_status >= 200 && http_status < 300) || http_status == 304;
  if (ok_status && errors.empty()) return absl::OkStatus();
  std::string detail;
  for (const SlurmError& e : errors) {
    if (!detail.empty()) detail += "; ";
    absl::StrAppend(&detail, e.error.empty() ? "error" : e.error);
    if (!e.description.empty() && e.description != e.error) {
      absl::StrAppend(&detail, " (", e.description, ")");
    }
    absl::StrAppend(&detail, " [", e.code, "]");
  }
  if (detail.empty()) {
    const std::string_view snippet = body.substr(0, 200);
    detail = Cat("HTTP ", http_status, snippet.empty() ? "" : ": ", snippet);
  }
  const std::string message = Cat(what, ": ", detail);
  // The most telling code decides: not-found and auth first, then
  // unavailability, then refusals.
  std::set<int> codes;
  for (const SlurmError& e : errors) codes.insert(e.code);
  if (codes.contains(kSlurmInvalidJobId)) return absl::NotFoundError(message);
  if (codes.contains(kSlurmAccessDenied) || codes.contains(1007) ||
      http_status == 403) {
    return absl::PermissionDeniedError(message);
  }
  if (http_status == 401) return absl::UnauthenticatedError(message);
  for (int c : codes) {
    if ((c >= 1001 && c <= 1004) || (c >= 5000 && c < 6000) || c == 110 ||
        c == 111 || c == 2027 /* in standby mode */) {
      return absl::UnavailableError(message);
    }
  }
  if (codes.contains(2127) || codes.contains(9001) || codes.contains(9000)) {
    return absl::InvalidArgumentError(message);
  }
  for (int c : codes) {
    if (c >= 2000 && c < 3000) return absl::FailedPreconditionError(message);
  }
  if (http_status == 502 || http_status == 503 || http_status == 504) {
    return absl::UnavailableError(message);
  }
  if (errors.empty() && !body.empty() && Parse(body).is_discarded()) {
    return absl::UnknownError(message);
  }
  return absl::InternalError(message);
}

// --- Jobs -------------------------------------------------------------------

std::vector<std::string> ExpandHostlist(std::string_view expr) {
  std::vector<std::string> out;
  for (const std::string& part : SplitTopLevel(expr)) {
    const size_t open = part.find('[');
    const size_t close = part.rfind(']');
    if (open == std::string::npos || close == std::string::npos ||
        close < open) {
      out.push_back(part);
      continue;
    }
    const std::string prefix = part.substr(0, open);
    const std::string suffix = part.substr(close + 1);
    for (absl::string_view range : absl::StrSplit(
             absl::string_view(part).substr(open + 1, close - open - 1), ',',
             absl::SkipEmpty())) {
      const size_t dash = range.find('-');
      absl::string_view lo = range.substr(0, dash);
      absl::string_view hi =
          dash == absl::string_view::npos ? lo : range.substr(dash + 1);
      int64_t a = 0, b = 0;
      if (!absl::SimpleAtoi(lo, &a) || !absl::SimpleAtoi(hi, &b) || a < 0 ||
          b < a) {
        out.push_back(Cat(prefix, range, suffix));
        continue;
      }
      for (int64_t i = a; i <= b && out.size() < kMaxHosts; ++i) {
        std::string num = Cat(i);
        if (num.size() < lo.size()) {
          num.insert(0, lo.size() - num.size(), '0');
        }
        out.push_back(Cat(prefix, num, suffix));
      }
    }
    if (out.size() >= kMaxHosts) break;
  }
  return out;
}

absl::StatusOr<std::vector<SlurmJob>> ParseJobs(std::string_view body) {
  const Json j = Parse(body);
  if (!j.is_object()) {
    return absl::InternalError(
        Cat("slurmrestd answered something that is not a JSON object: ",
            body.substr(0, 200)));
  }
  std::vector<SlurmJob> out;
  const Json* jobs = Field(j, "jobs");
  if (jobs == nullptr || !jobs->is_array()) return out;
  out.reserve(jobs->size());
  for (const Json& e : *jobs) {
    if (!e.is_object()) continue;
    SlurmJob job;
    std::optional<int64_t> id = Int(e, "job_id");
    if (!id.has_value() || *id <= 0) continue;
    job.job_id = *id;
    job.name = Str(e, "name");
    std::vector<std::string> states = StringList(e, "job_state");
    job.state = states.empty() ? "" : Upper(states.front());
    job.reason = Str(e, "state_reason");
    job.description = Str(e, "state_description");
    job.exit_code = Int(e, "exit_code").value_or(0);
    job.derived_exit_code = Int(e, "derived_exit_code").value_or(0);
    job.partition = Str(e, "partition");
    job.comment = Str(e, "comment");
    job.standard_output = Str(e, "standard_output");
    job.nodes_expr = Str(e, "nodes");
    job.nodes = ExpandHostlist(job.nodes_expr);
    job.submit_time = TimeField(e, "submit_time");
    job.start_time = TimeField(e, "start_time");
    job.end_time = TimeField(e, "end_time");
    if (std::optional<int64_t> limit = Int(e, "time_limit");
        limit.has_value() && *limit > 0 && *limit < (int64_t{1} << 31)) {
      job.time_limit = absl::Minutes(*limit);
    }
    out.push_back(std::move(job));
  }
  return out;
}

bool IsTerminalSlurmState(std::string_view state) {
  static const std::set<std::string_view> kTerminal = {
      "COMPLETED", "FAILED",        "CANCELLED",   "TIMEOUT",
      "NODE_FAIL", "PREEMPTED",     "BOOT_FAIL",   "DEADLINE",
      "REVOKED",   "OUT_OF_MEMORY", "SPECIAL_EXIT"};
  return kTerminal.contains(state);
}

AttemptStatus MapJob(const SlurmJob& job) {
  AttemptStatus s;
  s.name = job.name;
  s.backend_id = Cat(job.job_id);
  s.submit_time = job.submit_time.value_or(absl::InfinitePast());
  s.nodes = job.nodes;
  const std::string& st = job.state;
  const std::string why =
      job.reason.empty() || job.reason == "None" ? "" : job.reason;
  auto end = [&](AttemptPhase phase, FailureKind failure,
                 std::optional<int> exit_code, std::string message) {
    s.phase = phase;
    s.failure = failure;
    s.exit_code = exit_code;
    s.message = std::move(message);
    s.start_time = job.start_time;
    s.end_time = job.end_time.value_or(absl::Now());
    if (s.start_time.has_value() && *s.start_time > *s.end_time) {
      s.start_time = s.end_time;
    }
  };
  static const std::set<std::string_view> kPending = {
      "PENDING",     "CONFIGURING",   "REQUEUED",     "REQUEUE_HOLD",
      "REQUEUE_FED", "RESV_DEL_HOLD", "POWER_UP_NODE"};
  static const std::set<std::string_view> kRunning = {
      "RUNNING", "SUSPENDED", "COMPLETING", "SIGNALING",
      "STOPPED", "STAGE_OUT", "RESIZING",   "UPDATE_DB"};
  const int code = ExitCodeOf(job.exit_code);
  if (kPending.contains(st)) {
    s.phase = AttemptPhase::kPending;
    s.message = why.empty() ? "pending" : Cat("pending: ", why);
  } else if (kRunning.contains(st)) {
    s.phase = AttemptPhase::kRunning;
    s.start_time = job.start_time;
    s.message = st == "RUNNING" ? "running" : absl::AsciiStrToLower(st);
  } else if (st == "COMPLETED") {
    if (code == 0) {
      end(AttemptPhase::kSucceeded, FailureKind::kNone, 0,
          "exited with code 0");
    } else {
      end(AttemptPhase::kFailed, FailureKind::kUserError, code,
          Cat("exited with code ", code));
    }
  } else if (st == "FAILED" || st == "SPECIAL_EXIT") {
    const bool launch =
        absl::StrContains(why, "Launch") || absl::StrContains(why, "launch");
    // A launch failure carries no real exit status (Slurm reports e.g.
    // "signal 53"): the job's command never ran.
    const int64_t sig = job.exit_code & 0x7f;
    if (launch && (job.exit_code == 0 || sig >= 32)) {
      end(AttemptPhase::kFailed, FailureKind::kBackendError, std::nullopt,
          Cat("Slurm could not launch it: ", why));
    } else {
      std::string message = (job.exit_code & 0x7f) != 0
                                ? Cat("killed by signal ", job.exit_code & 0x7f,
                                      " (exit code ", code, ")")
                                : Cat("exited with code ", code);
      if (!why.empty() && why != "NonZeroExitCode") {
        absl::StrAppend(&message, "; ", why);
      }
      end(AttemptPhase::kFailed, FailureKind::kUserError, code,
          std::move(message));
    }
  } else if (st == "OUT_OF_MEMORY") {
    end(AttemptPhase::kFailed, FailureKind::kUserError, code == 0 ? 137 : code,
        "out of memory");
  } else if (st == "TIMEOUT" || st == "DEADLINE") {
    end(AttemptPhase::kFailed, FailureKind::kTimeLimit, std::nullopt,
        st == "TIMEOUT" ? Cat("reached its time limit of ",
                              absl::FormatDuration(job.time_limit))
                        : "reached its deadline");
  } else if (st == "NODE_FAIL" || st == "BOOT_FAIL") {
    end(AttemptPhase::kFailed, FailureKind::kNodeFailure, std::nullopt,
        Cat(st == "NODE_FAIL" ? "node failure" : "node boot failure",
            job.nodes_expr.empty() ? "" : " on ", job.nodes_expr));
  } else if (st == "PREEMPTED") {
    end(AttemptPhase::kCancelled, FailureKind::kPreempted, std::nullopt,
        "preempted by Slurm");
  } else if (st == "CANCELLED") {
    end(AttemptPhase::kCancelled, FailureKind::kCancelled, std::nullopt,
        why.empty() ? "cancelled in Slurm" : Cat("cancelled in Slurm: ", why));
  } else if (IsTerminalSlurmState(st)) {
    end(AttemptPhase::kFailed, FailureKind::kBackendError, std::nullopt,
        Cat("Slurm state ", st));
  } else {
    // Unknown (newer Slurm): not ended as far as we can tell.
    s.phase = job.start_time.has_value() ? AttemptPhase::kRunning
                                         : AttemptPhase::kPending;
    s.start_time = job.start_time;
    s.message = Cat("Slurm state ", st);
  }
  return s;
}

std::string FormatComment(const JobComment& c) {
  Json j = {{"tenant", c.tenant}, {"job", c.job_id}, {"attempt", c.attempt}};
  if (!c.checkpoint_dir.empty()) j["checkpoint_dir"] = c.checkpoint_dir;
  return Cat(kCommentPrefix, Dump(j));
}

std::optional<JobComment> ParseComment(std::string_view comment) {
  if (comment.substr(0, kCommentPrefix.size()) != kCommentPrefix) {
    return std::nullopt;
  }
  comment.remove_prefix(kCommentPrefix.size());
  const Json j = Parse(comment);
  if (!j.is_object()) return std::nullopt;
  JobComment c;
  c.tenant = Str(j, "tenant");
  c.job_id = Int(j, "job").value_or(0);
  c.attempt = static_cast<int32_t>(
      std::clamp<int64_t>(Int(j, "attempt").value_or(0), 0, 1 << 30));
  c.checkpoint_dir = Str(j, "checkpoint_dir");
  return c;
}

std::string BatchScript(const LaunchRequest& request,
                        const SlurmSettings& settings) {
  const std::string& image = request.spec.image();
  // The container words, with the image in place of "{image}".
  auto append_words = [&](std::string& out,
                          const std::vector<std::string>& words) {
    if (image.empty()) return;
    for (const std::string& w : words) {
      absl::StrAppend(&out, " ",
                      ShellQuote(absl::StrReplaceAll(w, {{"{image}", image}})));
    }
  };
  std::string script = Cat(
      "#!/bin/bash\n# Trainyard attempt ", request.name,
      " (generated; one task per worker)\n", "exec srun --kill-on-bad-exit=1",
      request.spec.resources().gpus() > 0
          ? Cat(" --gpus-per-task=", request.spec.resources().gpus())
          : std::string());
  append_words(script, settings.container_srun_args);
  absl::StrAppend(
      &script,
      " /bin/bash -c "
      "'export TRAINYARD_WORKER_INDEX=\"$SLURM_PROCID\"; exec \"$@\"' "
      "trainyard-worker");
  append_words(script, settings.container_exec);
  for (const std::string& arg : request.spec.command()) {
    absl::StrAppend(&script, " ", ShellQuote(arg));
  }
  script += "\n";
  return script;
}

absl::StatusOr<std::string> SubmitBody(const LaunchRequest& request,
                                       const SlurmSettings& settings) {
  const v1::JobSpec& spec = request.spec;
  if (spec.command().empty()) {
    return domain::FieldError("spec.command", reason::kRequired,
                              "the Slurm backend runs a command; none given");
  }
  if (!spec.image().empty() && settings.container_srun_args.empty() &&
      settings.container_exec.empty()) {
    return domain::FieldError(
        "spec.image", reason::kInvalidValue,
        "this Slurm cluster runs no container images (its settings set "
        "neither container_srun_args nor container_exec)");
  }
  if (!spec.working_dir().empty() && spec.working_dir()[0] != '/') {
    return domain::FieldError("spec.working_dir", reason::kInvalidValue,
                              "must be an absolute path on the Slurm nodes");
  }
  const SlurmPartition* partition = nullptr;
  if (request.flavor.empty()) {
    partition = &settings.partitions.front();
  } else {
    for (const SlurmPartition& p : settings.partitions) {
      if (p.flavor == request.flavor) partition = &p;
    }
  }
  if (partition == nullptr) {
    return domain::AttachErrorInfo(
        absl::FailedPreconditionError(
            Cat("flavor: \"", request.flavor,
                "\" has no Slurm partition in this cluster")),
        "flavor", reason::kInvalidValue);
  }
  // Workers per node, in placement order.
  std::vector<std::string> nodes;
  std::map<std::string, int> per_node;
  for (const std::string& n : request.worker_nodes) {
    if (per_node[n]++ == 0) nodes.push_back(n);
  }
  int max_per_node = 0;
  int min_per_node = std::numeric_limits<int>::max();
  for (const auto& [n, count] : per_node) {
    max_per_node = std::max(max_per_node, count);
    min_per_node = std::min(min_per_node, count);
  }
  const int workers = std::max(1, spec.workers());
  if (nodes.empty()) {  // validated before; keep Slurm's own choice
    max_per_node = min_per_node = 1;
  }

  Json env = Json::object();
  for (const auto& [k, v] : AttemptEnv(request)) env[k] = v;
  if (!env.contains("PATH")) env["PATH"] = settings.default_path;
  const std::string working_dir =
      spec.working_dir().empty() ? settings.working_dir : spec.working_dir();
  const std::string out_dir =
      settings.output_dir.empty() ? working_dir : settings.output_dir;

  Json job = {
      {"name", Cat(settings.job_name_prefix, request.name)},
      {"partition", partition->partition},
      {"environment", env},
      {"current_working_directory", working_dir},
      {"standard_output", Cat(out_dir, "/", request.name, ".out")},
      {"tasks", workers},
      // No "requeue": Slurm 22.05's v0.0.38 parser turns `"requeue": false`
      // into true. The cluster's JobRequeue=0 keeps Slurm from requeueing
      // (deploy/slurm, docs/slurm.md): Trainyard requeues itself.
      {"comment",
       FormatComment({.tenant = request.tenant,
                      .job_id = request.job_id,
                      .attempt = request.attempt,
                      .checkpoint_dir = spec.checkpoint().directory()})},
  };
  if (!nodes.empty()) {
    const int n = static_cast<int>(nodes.size());
    job["nodes"] = Json::array({n, n});
    if (max_per_node == min_per_node) job["tasks_per_node"] = max_per_node;
    if (settings.pin_nodes) {
      if (n == 1) {
        job["constraints"] = nodes.front();
      } else {
        std::vector<std::string> parts;
        for (const std::string& node : nodes) {
          parts.push_back(Cat(node, "*1"));
        }
        job["constraints"] = Cat("[", absl::StrJoin(parts, "&"), "]");
      }
    }
  }
  if (spec.resources().cpu_millis() > 0) {
    job["cpus_per_task"] = CeilDiv(spec.resources().cpu_millis(), 1000);
  }
  if (spec.resources().memory_bytes() > 0) {
    job["memory_per_node"] =
        CeilDiv(spec.resources().memory_bytes(), kMiB) * max_per_node;
  }
  if (spec.resources().gpus() > 0) {
    job["gres"] = Cat("gpu:", int64_t{spec.resources().gpus()} * max_per_node);
  }
  if (spec.has_time_limit() && spec.time_limit().seconds() > 0) {
    job["time_limit"] = CeilDiv(spec.time_limit().seconds(), 60);
  }
  if (!settings.account.empty()) job["account"] = settings.account;
  Json body = {{"script", BatchScript(request, settings)}, {"job", job}};
  return Dump(body);
}

// --- Nodes ------------------------------------------------------------------

GresGpus ParseGresGpus(std::string_view gres) {
  GresGpus out;
  for (const std::string& entry : SplitTopLevel(gres)) {
    absl::string_view e = entry;
    if (size_t paren = e.find('('); paren != absl::string_view::npos) {
      e = e.substr(0, paren);
    }
    std::vector<absl::string_view> parts = absl::StrSplit(e, ':');
    if (parts.empty() || parts[0] != "gpu") continue;
    int64_t count = 1;
    std::string type;
    if (parts.size() >= 3) {
      type = std::string(parts[1]);
      if (!absl::SimpleAtoi(parts[2], &count)) count = 0;
    } else if (parts.size() == 2) {
      if (!absl::SimpleAtoi(parts[1], &count)) {
        type = std::string(parts[1]);
        count = 1;
      }
    }
    out.count += std::max<int64_t>(0, count);
    if (out.type.empty()) out.type = type;
  }
  return out;
}

absl::StatusOr<std::vector<NodeInventory>> ParseNodes(
    std::string_view body, const SlurmSettings& settings) {
  const Json j = Parse(body);
  if (!j.is_object()) {
    return absl::InternalError(
        Cat("slurmrestd answered something that is not a JSON object: ",
            body.substr(0, 200)));
  }
  std::vector<NodeInventory> out;
  const Json* nodes = Field(j, "nodes");
  if (nodes == nullptr || !nodes->is_array()) return out;
  for (const Json& e : *nodes) {
    if (!e.is_object()) continue;
    NodeInventory n;
    n.name = Str(e, "name");
    if (n.name.empty()) continue;
    const std::vector<std::string> partitions = StringList(e, "partitions");
    for (const SlurmPartition& p : settings.partitions) {
      if (std::find(partitions.begin(), partitions.end(), p.partition) !=
          partitions.end()) {
        n.pool = p.pool.empty() ? p.partition : p.pool;
        n.flavor = p.flavor;
        break;
      }
    }
    const GresGpus gpus = ParseGresGpus(Str(e, "gres"));
    n.gpus = gpus.count;
    n.gpu_model =
        !settings.gpu_model.empty() ? settings.gpu_model : Upper(gpus.type);
    n.used_gpus = ParseGresGpus(Str(e, "gres_used")).count;
    n.cpu_millis = Int(e, "cpus").value_or(0) * 1000;
    n.memory_bytes = Int(e, "real_memory").value_or(0) * kMiB;
    n.used_cpu_millis = Int(e, "alloc_cpus").value_or(0) * 1000;
    n.used_memory_bytes = Int(e, "alloc_memory").value_or(0) * kMiB;
    for (const std::string& f : StringList(e, "active_features")) {
      n.labels[f] = "";
    }
    if (!partitions.empty()) {
      n.labels["slurm.partitions"] = absl::StrJoin(partitions, ",");
    }
    // State: "idle", "down" ... plus flags (state_flags, or "+FLAG" suffixes).
    std::vector<std::string> state = StringList(e, "state");
    std::string base = state.empty() ? "UNKNOWN" : Upper(state.front());
    std::set<std::string> flags;
    for (size_t i = 1; i < state.size(); ++i) flags.insert(Upper(state[i]));
    for (const std::string& f : StringList(e, "state_flags")) {
      flags.insert(Upper(f));
    }
    if (base == "DRAINED" || base == "DRAINING") {
      flags.insert("DRAIN");
      base = "IDLE";
    }
    const std::string why = Str(e, "reason");
    const bool down = base == "DOWN" || base == "ERROR" || base == "FUTURE" ||
                      flags.contains("FAIL") || flags.contains("FAILING");
    const bool unusable =
        down || base == "UNKNOWN" || flags.contains("DRAIN") ||
        flags.contains("NOT_RESPONDING") || flags.contains("MAINT") ||
        flags.contains("REBOOT_REQUESTED") || flags.contains("REBOOT_ISSUED") ||
        flags.contains("POWERED_DOWN") || flags.contains("POWERING_DOWN") ||
        flags.contains("POWER_DOWN");
    n.failed = down;
    n.schedulable = !unusable;
    std::string state_text = base;
    for (const std::string& f : flags) absl::StrAppend(&state_text, "+", f);
    n.state_message = why.empty() ? state_text : Cat(state_text, ": ", why);
    out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end(),
            [](const NodeInventory& a, const NodeInventory& b) {
              return a.name < b.name;
            });
  return out;
}

}  // namespace trainyard::dispatcher::slurm
