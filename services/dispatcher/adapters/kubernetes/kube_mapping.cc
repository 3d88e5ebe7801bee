#include "services/dispatcher/adapters/kubernetes/kube_mapping.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/dispatcher/adapters/checkpoint_manifest.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"

namespace trainyard::dispatcher::kubernetes {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;
using Json = nlohmann::json;

namespace v1 = ::trainyard::v1;
namespace reason = ::trainyard::domain::reason;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMi = int64_t{1} << 20;
constexpr int64_t kGi = int64_t{1} << 30;
constexpr size_t kMaxMessage = 300;

// The per-worker variables BuildJob sets; the same names from spec.env or
// request.env are dropped.
constexpr std::string_view kWorkerIndexEnv = "TRAINYARD_WORKER_INDEX";
const std::set<std::string_view>& RendezvousEnvNames() {
  static const auto* names = new std::set<std::string_view>{
      kWorkerIndexEnv, "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  return *names;
}

// --- JSON access -------------------------------------------------------------

const Json* Field(const Json& o, std::string_view key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(std::string(key));
  return it == o.end() ? nullptr : &*it;
}

const Json* Path(const Json& o, std::initializer_list<std::string_view> keys) {
  const Json* cur = &o;
  for (std::string_view k : keys) {
    cur = Field(*cur, k);
    if (cur == nullptr) return nullptr;
  }
  return cur;
}

std::string Str(const Json* f) {
  return f != nullptr && f->is_string() ? f->get<std::string>() : "";
}
std::string Str(const Json& o, std::initializer_list<std::string_view> keys) {
  return Str(Path(o, keys));
}

std::optional<int64_t> Int(const Json* f) {
  if (f == nullptr) return std::nullopt;
  // Unsigned first: nlohmann's is_number_integer() holds for both.
  if (f->is_number_unsigned()) {
    const uint64_t u = f->get<uint64_t>();
    return u > static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(u);
  }
  if (f->is_number_integer()) return f->get<int64_t>();
  return std::nullopt;
}

std::optional<absl::Time> TimeOf(const Json* f) {
  const std::string s = Str(f);
  if (s.empty()) return std::nullopt;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, s, &t, &err)) return std::nullopt;
  return t;
}

// The condition of `type` in status.conditions, or nullptr.
const Json* Condition(const Json& o, std::string_view type) {
  const Json* conds = Path(o, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return nullptr;
  for (const Json& c : *conds) {
    if (Str(Field(c, "type")) == type) return &c;
  }
  return nullptr;
}
bool ConditionTrue(const Json* c) {
  return c != nullptr && Str(Field(*c, "status")) == "True";
}

// At most kMaxMessage bytes, cut at a UTF-8 character boundary.
std::string Clip(std::string_view s) {
  if (s.size() <= kMaxMessage) return std::string(s);
  size_t cut = kMaxMessage;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return Cat(s.substr(0, cut), "...");
}

// "Reason: message", either part optional.
std::string ReasonMessage(std::string_view why, std::string_view message) {
  if (why.empty()) return Clip(message);
  if (message.empty()) return std::string(why);
  return Cat(why, ": ", Clip(message));
}

// `path` relative to `root` when it lies strictly under it with no "." or
// ".." components; nullopt otherwise.
std::optional<std::string> RelativeUnder(std::string_view path,
                                         std::string_view root) {
  std::string prefix(root);
  if (prefix.back() != '/') prefix += '/';
  if (path.size() <= prefix.size() || path.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  const std::string_view rel = path.substr(prefix.size());
  for (absl::string_view part : absl::StrSplit(AbslView(rel), '/')) {
    if (part.empty() || part == "." || part == "..") return std::nullopt;
  }
  return std::string(rel);
}

Json TolerationJson(const Toleration& t) {
  Json j = Json::object();
  if (!t.key.empty()) j["key"] = t.key;
  j["operator"] = t.op;
  if (t.op == "Equal") j["value"] = t.value;
  if (!t.effect.empty()) j["effect"] = t.effect;
  return j;
}

bool Tolerates(const Toleration& t, std::string_view key,
               std::string_view value, std::string_view effect) {
  if (!t.effect.empty() && t.effect != effect) return false;
  if (t.key.empty()) return t.op == "Exists";
  if (t.key != key) return false;
  return t.op == "Exists" || t.value == value;
}

// Whether node labels (or a pod's node selector) mark spot capacity by one
// of the providers' conventions.
bool HasSpotLabel(const Json* labels) {
  if (labels == nullptr || !labels->is_object()) return false;
  for (SpotPreset p : {SpotPreset::kGke, SpotPreset::kKarpenter,
                       SpotPreset::kEks, SpotPreset::kAks}) {
    const auto [key, value] = SpotPresetLabel(p);
    if (Str(Field(*labels, key)) == value) return true;
  }
  return false;
}
bool HasSpotLabel(const std::map<std::string, std::string>& labels) {
  for (SpotPreset p : {SpotPreset::kGke, SpotPreset::kKarpenter,
                       SpotPreset::kEks, SpotPreset::kAks}) {
    const auto [key, value] = SpotPresetLabel(p);
    auto it = labels.find(key);
    if (it != labels.end() && it->second == value) return true;
  }
  return false;
}

}  // namespace

// --- Stop annotations --------------------------------------------------------

std::string_view StopReasonValue(StopReason r) {
  return r == StopReason::kPreemption ? "preemption" : "cancel";
}

std::optional<StopReason> ParseStopReasonValue(std::string_view value) {
  if (value == "cancel") return StopReason::kCancel;
  if (value == "preemption") return StopReason::kPreemption;
  return std::nullopt;
}

// --- Quantities --------------------------------------------------------------

absl::StatusOr<int64_t> ParseQuantity(std::string_view text, int scale) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(Cat("quantity \"", text, "\": ", why));
  };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  std::string digits;
  int frac = 0;
  bool dot = false;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      digits += c;
      if (dot) ++frac;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (digits.empty()) return bad("expected a number");
  const std::string_view suffix = s.substr(i);
  int exp10 = 0;
  int exp2 = 0;
  static const std::pair<std::string_view, int> kBinary[] = {
      {"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  static const std::pair<std::string_view, int> kDecimal[] = {
      {"", 0},  {"n", -9}, {"u", -6}, {"m", -3}, {"k", 3},
      {"M", 6}, {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};
  bool known = false;
  for (const auto& [name, e] : kBinary) {
    if (suffix == name) exp2 = e, known = true;
  }
  for (const auto& [name, e] : kDecimal) {
    if (suffix == name) exp10 = e, known = true;
  }
  if (!known) {
    if (suffix.size() < 2 || (suffix[0] != 'e' && suffix[0] != 'E')) {
      return bad(Cat("unknown suffix \"", suffix, "\""));
    }
    std::string_view e = suffix.substr(1);
    bool e_negative = false;
    if (e[0] == '+' || e[0] == '-') {
      e_negative = e[0] == '-';
      e.remove_prefix(1);
    }
    if (e.empty() || e.size() > 4 ||
        !std::all_of(e.begin(), e.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      return bad(Cat("malformed exponent \"", suffix, "\""));
    }
    int n = 0;
    for (char c : e) n = n * 10 + (c - '0');
    exp10 = e_negative ? -n : n;
  }
  const size_t lead = digits.find_first_not_of('0');
  if (lead == std::string::npos) return 0;
  digits.erase(0, lead);
  int p = exp10 + scale - frac;
  while (digits.size() > 1 && digits.back() == '0') {
    digits.pop_back();
    ++p;
  }
  if (digits.size() > 19) return bad("more than 19 significant digits");
  unsigned __int128 n = 0;
  for (char c : digits) n = n * 10 + static_cast<unsigned>(c - '0');
  n <<= exp2;  // n < 10^19 < 2^64, so n * 2^60 < 2^124
  const auto max = static_cast<unsigned __int128>(kMax);
  if (p >= 0) {
    for (int k = 0; k < p; ++k) {
      n *= 10;
      if (n > max) return bad("too large");
    }
  } else if (-p > 38) {
    n = 1;  // 0 < value < 1: rounded up
  } else {
    unsigned __int128 d = 1;
    for (int k = 0; k < -p; ++k) d *= 10;
    n = (n + d - 1) / d;
  }
  if (n > max) return bad("too large");
  const auto v = static_cast<int64_t>(n);
  return negative ? -v : v;
}

absl::StatusOr<int64_t> QuantityOf(const Json& value, int scale) {
  if (value.is_string()) return ParseQuantity(value.get<std::string>(), scale);
  if (value.is_number()) return ParseQuantity(value.dump(), scale);
  return absl::InvalidArgumentError(
      Cat("quantity: expected a string, got ", value.type_name()));
}

std::string CpuQuantity(int64_t millis) {
  if (millis % 1000 == 0) return Cat(millis / 1000);
  return Cat(millis, "m");
}

std::string MemoryQuantity(int64_t bytes) {
  if (bytes != 0 && bytes % kGi == 0) return Cat(bytes / kGi, "Gi");
  if (bytes != 0 && bytes % kMi == 0) return Cat(bytes / kMi, "Mi");
  return Cat(bytes);
}

// --- Launching ---------------------------------------------------------------

namespace {

Json Labels(const LaunchRequest& request) {
  Json labels = {{std::string(kLabelTenant), request.tenant},
                 {std::string(kLabelJob), Cat(request.job_id)},
                 {std::string(kLabelAttempt), Cat(request.attempt)},
                 {std::string(kLabelName), request.name}};
  if (!request.spec.project().empty()) {
    labels[std::string(kLabelProject)] = request.spec.project();
  }
  if (!request.flavor.empty()) {
    labels[std::string(kLabelFlavor)] = request.flavor;
  }
  return labels;
}

// Label values, and text that must be UTF-8 to be sent as JSON.
absl::Status CheckLabelsAndText(const LaunchRequest& request) {
  if (!request.spec.project().empty() &&
      !IsLabelValue(request.spec.project())) {
    return domain::FieldError("spec.project", reason::kInvalidName,
                              "not usable as a Kubernetes label value");
  }
  const auto text = [](std::string_view field,
                       std::string_view value) -> absl::Status {
    if (domain::IsValidUtf8(value)) return absl::OkStatus();
    return domain::FieldError(field, reason::kInvalidValue, "not valid UTF-8");
  };
  const v1::JobSpec& spec = request.spec;
  for (const auto& [field, value] :
       {std::pair<std::string_view, std::string_view>{"spec.image",
                                                      spec.image()},
        {"spec.working_dir", spec.working_dir()},
        {"spec.checkpoint.directory", spec.checkpoint().directory()},
        {"resume_from", request.resume_from}}) {
    if (absl::Status st = text(field, value); !st.ok()) return st;
  }
  for (int i = 0; i < spec.command_size(); ++i) {
    if (absl::Status st =
            text(domain::IndexField("spec.command", i), spec.command(i));
        !st.ok()) {
      return st;
    }
  }
  for (const auto& [key, value] : spec.env()) {
    if (absl::Status st = text(domain::KeyField("spec.env", key), value);
        !st.ok()) {
      return st;
    }
  }
  for (const auto& [key, value] : request.env) {
    if (absl::Status st = text(domain::KeyField("env", key), value); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// The worker-nodes annotation is left out beyond this size (annotations
// have 256 KiB in all).
constexpr size_t kMaxWorkerNodesAnnotation = 64 * 1024;

int64_t CeilSeconds(const google::protobuf::Duration& d) {
  return d.seconds() + (d.nanos() > 0 ? 1 : 0);
}

}  // namespace

absl::StatusOr<Json> BuildJob(const LaunchRequest& request,
                              const KubernetesSettings& settings) {
  if (absl::Status st = ValidateLaunchRequest(request); !st.ok()) return st;
  if (absl::Status st = CheckLabelsAndText(request); !st.ok()) return st;
  const v1::JobSpec& spec = request.spec;
  const FlavorPlacement* placement = FindFlavor(settings, request.flavor);
  if (placement == nullptr && !settings.flavors.empty()) {
    return domain::AttachErrorInfo(
        absl::FailedPreconditionError(
            Cat("flavor: \"", request.flavor,
                "\" is not placed by this Kubernetes cluster's settings")),
        "flavor", reason::kInvalidValue);
  }
  const std::string image =
      spec.image().empty() ? settings.default_image : spec.image();
  if (image.empty()) {
    return domain::FieldError(
        "spec.image", reason::kRequired,
        "Kubernetes runs every worker in a container image; none is given "
        "and this cluster's settings name no default_image");
  }
  if (!spec.working_dir().empty() && spec.working_dir()[0] != '/') {
    return domain::FieldError("spec.working_dir", reason::kInvalidValue,
                              "must be an absolute path in the container");
  }
  if (spec.time_limit().seconds() < 0 || spec.time_limit().nanos() < 0) {
    return domain::FieldError("spec.time_limit", reason::kOutOfRange,
                              "must not be negative");
  }
  const v1::CheckpointPolicy& checkpoint = spec.checkpoint();
  if (checkpoint.grace_period().seconds() < 0 ||
      checkpoint.grace_period().nanos() < 0) {
    return domain::FieldError("spec.checkpoint.grace_period",
                              reason::kOutOfRange, "must not be negative");
  }
  // The checkpoint directory: a local path is the job's directory on the
  // shared checkpoint filesystem, mounted (only it) at the same path.
  std::optional<std::string> mount_dir;
  std::string sub_path;
  if (std::optional<std::string> local =
          LocalCheckpointDir(checkpoint.directory());
      local.has_value()) {
    if (settings.checkpoint_volume.kind == CheckpointVolume::Kind::kNone) {
      return domain::FieldError(
          "spec.checkpoint.directory", reason::kInvalidValue,
          Cat("\"", checkpoint.directory(),
              "\" is a local path, but this Kubernetes cluster mounts no "
              "shared checkpoint filesystem (settings checkpoint_volume); "
              "use a path the job's image reaches by itself as a URI"));
    }
    std::optional<std::string> rel =
        RelativeUnder(*local, settings.checkpoint_mount_path);
    if (!rel.has_value()) {
      return domain::FieldError(
          "spec.checkpoint.directory", reason::kInvalidValue,
          Cat("\"", checkpoint.directory(), "\" must be a directory under ",
              settings.checkpoint_mount_path,
              ", the shared checkpoint filesystem of this Kubernetes cluster"));
    }
    mount_dir = *local;
    sub_path = *rel;
  }
  if (std::optional<std::string> resume =
          LocalCheckpointDir(request.resume_from);
      resume.has_value() &&
      (!mount_dir.has_value() ||
       (*resume != *mount_dir && !RelativeUnder(*resume, *mount_dir)))) {
    return domain::FieldError(
        "resume_from", reason::kInvalidValue,
        Cat("\"", request.resume_from,
            "\" is a local path outside the job's mounted checkpoint "
            "directory; the workers could not read it"));
  }

  const int32_t workers = spec.workers();
  const std::string& name = request.name;
  const Json labels = Labels(request);
  // The pods carry the job's name; the Job also where each worker was
  // placed, its checkpoint directory and whether it is spot.
  const Json pod_annotations = {
      {std::string(kAnnotationJobName),
       domain::JobResourceName(request.tenant, request.job_id)}};
  Json annotations = pod_annotations;
  if (std::string placed = absl::StrJoin(request.worker_nodes, ",");
      placed.size() <= kMaxWorkerNodesAnnotation) {
    annotations[std::string(kAnnotationWorkerNodes)] = std::move(placed);
  }
  if (!checkpoint.directory().empty()) {
    annotations[std::string(kAnnotationCheckpointDir)] = checkpoint.directory();
  }
  const bool spot = placement != nullptr && placement->is_spot();
  if (spot) annotations[std::string(kAnnotationSpot)] = "true";

  // Environment: the attempt's, then the per-worker rendezvous variables.
  Json env = Json::array();
  for (const auto& [key, value] : AttemptEnv(request)) {
    if (RendezvousEnvNames().contains(key)) continue;
    env.push_back({{"name", key}, {"value", value}});
  }
  const Json index_ref = {
      {"fieldRef",
       {{"fieldPath",
         Cat("metadata.annotations['", kCompletionIndexAnnotation, "']")}}}};
  env.push_back(
      {{"name", std::string(kWorkerIndexEnv)}, {"valueFrom", index_ref}});
  env.push_back({{"name", "RANK"}, {"valueFrom", index_ref}});
  env.push_back({{"name", "WORLD_SIZE"}, {"value", Cat(workers)}});
  env.push_back({{"name", "MASTER_ADDR"},
                 {"value", NeedsService(request) ? Cat(name, "-0.", name)
                                                 : std::string("127.0.0.1")}});
  env.push_back(
      {{"name", "MASTER_PORT"}, {"value", Cat(settings.rendezvous_port)}});

  Json container = {{"name", std::string(kWorkerContainer)}, {"image", image}};
  if (!spec.command().empty()) {
    container["command"] = Json(
        std::vector<std::string>(spec.command().begin(), spec.command().end()));
  }
  if (!spec.working_dir().empty()) container["workingDir"] = spec.working_dir();
  container["env"] = std::move(env);
  Json quantities = Json::object();
  const v1::Resources& res = spec.resources();
  if (res.gpus() > 0) quantities[settings.gpu_resource] = Cat(res.gpus());
  if (res.cpu_millis() > 0) quantities["cpu"] = CpuQuantity(res.cpu_millis());
  if (res.memory_bytes() > 0) {
    quantities["memory"] = MemoryQuantity(res.memory_bytes());
  }
  if (!quantities.empty()) {
    container["resources"] = {{"requests", quantities}, {"limits", quantities}};
  }
  container["ports"] =
      Json::array({{{"name", "rendezvous"},
                    {"containerPort", settings.rendezvous_port},
                    {"protocol", "TCP"}}});
  if (mount_dir.has_value()) {
    container["volumeMounts"] =
        Json::array({{{"name", std::string(kCheckpointVolume)},
                      {"mountPath", *mount_dir},
                      {"subPath", sub_path}}});
  }

  // Placement: the distinct nodes in placement order, workers per node.
  std::vector<std::string> nodes;
  std::map<std::string, int> per_node;
  for (const std::string& n : request.worker_nodes) {
    if (per_node[n]++ == 0) nodes.push_back(n);
  }
  int max_per_node = 0;
  int min_per_node = workers;
  for (const auto& [n, count] : per_node) {
    max_per_node = std::max(max_per_node, count);
    min_per_node = std::min(min_per_node, count);
  }
  const Json own_pods = {{"matchLabels", {{std::string(kLabelName), name}}}};
  Json affinity = {
      {"nodeAffinity",
       {{"requiredDuringSchedulingIgnoredDuringExecution",
         {{"nodeSelectorTerms",
           Json::array(
               {{{"matchFields", Json::array({{{"key", "metadata.name"},
                                               {"operator", "In"},
                                               {"values", nodes}}})}}})}}}}}};
  if (workers > 1 && max_per_node == 1) {
    affinity["podAntiAffinity"] = {
        {"requiredDuringSchedulingIgnoredDuringExecution",
         Json::array({{{"labelSelector", own_pods},
                       {"topologyKey", "kubernetes.io/hostname"}}})}};
  }

  Json pod_spec = {
      {"restartPolicy", "Never"},
      {"enableServiceLinks", false},
      {"terminationGracePeriodSeconds",
       checkpoint.has_grace_period() &&
               (checkpoint.grace_period().seconds() > 0 ||
                checkpoint.grace_period().nanos() > 0)
           ? CeilSeconds(checkpoint.grace_period())
           : absl::ToInt64Seconds(
                 absl::Ceil(settings.default_grace_period, absl::Seconds(1)))},
      {"affinity", std::move(affinity)},
  };
  if (NeedsService(request)) pod_spec["subdomain"] = name;
  if (nodes.size() > 1 && max_per_node > 1 && max_per_node == min_per_node) {
    pod_spec["topologySpreadConstraints"] =
        Json::array({{{"maxSkew", 1},
                      {"topologyKey", "kubernetes.io/hostname"},
                      {"whenUnsatisfiable", "DoNotSchedule"},
                      {"labelSelector", own_pods}}});
  }
  if (placement != nullptr) {
    const std::map<std::string, std::string> selector =
        placement->EffectiveNodeSelector();
    if (!selector.empty()) pod_spec["nodeSelector"] = selector;
  }
  Json tolerations = Json::array();
  if (placement != nullptr) {
    for (const Toleration& t : placement->EffectiveTolerations()) {
      tolerations.push_back(TolerationJson(t));
    }
  }
  if (res.gpus() > 0) {
    tolerations.push_back(TolerationJson({.key = settings.gpu_resource,
                                          .op = "Exists",
                                          .value = "",
                                          .effect = "NoSchedule"}));
  }
  if (settings.node_lost_after.has_value()) {
    const int64_t seconds = absl::ToInt64Seconds(
        absl::Ceil(*settings.node_lost_after, absl::Seconds(1)));
    for (const char* key :
         {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}) {
      tolerations.push_back({{"key", key},
                             {"operator", "Exists"},
                             {"effect", "NoExecute"},
                             {"tolerationSeconds", seconds}});
    }
  }
  if (!tolerations.empty()) pod_spec["tolerations"] = std::move(tolerations);
  if (!settings.service_account.empty()) {
    pod_spec["serviceAccountName"] = settings.service_account;
  }
  if (!settings.image_pull_secrets.empty()) {
    Json secrets = Json::array();
    for (const std::string& s : settings.image_pull_secrets) {
      secrets.push_back({{"name", s}});
    }
    pod_spec["imagePullSecrets"] = std::move(secrets);
  }
  if (!settings.priority_class.empty()) {
    pod_spec["priorityClassName"] = settings.priority_class;
  }
  pod_spec["containers"] = Json::array({std::move(container)});
  if (mount_dir.has_value()) {
    Json volume = {{"name", std::string(kCheckpointVolume)}};
    const CheckpointVolume& v = settings.checkpoint_volume;
    switch (v.kind) {
      case CheckpointVolume::Kind::kHostPath:
        // "Directory": a node without the shared filesystem fails the pod
        // instead of checkpointing to its own disk.
        volume["hostPath"] = {{"path", v.source}, {"type", "Directory"}};
        break;
      case CheckpointVolume::Kind::kPvc:
        volume["persistentVolumeClaim"] = {{"claimName", v.source}};
        break;
      case CheckpointVolume::Kind::kNfs: {
        const size_t colon = v.source.find(':');
        volume["nfs"] = {{"server", v.source.substr(0, colon)},
                         {"path", v.source.substr(colon + 1)}};
        break;
      }
      case CheckpointVolume::Kind::kNone:
        break;
    }
    pod_spec["volumes"] = Json::array({std::move(volume)});
  }

  Json job_spec = {
      {"completionMode", "Indexed"},
      {"completions", workers},
      {"parallelism", workers},
      {"backoffLimit", 0},
  };
  if (spec.has_time_limit() &&
      (spec.time_limit().seconds() > 0 || spec.time_limit().nanos() > 0)) {
    job_spec["activeDeadlineSeconds"] = CeilSeconds(spec.time_limit());
  }
  job_spec["template"] = {
      {"metadata", {{"labels", labels}, {"annotations", pod_annotations}}},
      {"spec", std::move(pod_spec)}};
  return Json{{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata",
               {{"name", name},
                {"namespace", settings.namespace_},
                {"labels", labels},
                {"annotations", annotations}}},
              {"spec", std::move(job_spec)}};
}

bool NeedsService(const LaunchRequest& request) {
  return request.spec.workers() > 1;
}

absl::StatusOr<Json> BuildService(const LaunchRequest& request,
                                  const KubernetesSettings& settings,
                                  std::string_view owner_job_uid) {
  if (absl::Status st = ValidateLaunchRequest(request); !st.ok()) return st;
  if (absl::Status st = CheckLabelsAndText(request); !st.ok()) return st;
  Json metadata = {{"name", request.name},
                   {"namespace", settings.namespace_},
                   {"labels", Labels(request)}};
  if (!owner_job_uid.empty()) {
    metadata["ownerReferences"] =
        Json::array({{{"apiVersion", "batch/v1"},
                      {"kind", "Job"},
                      {"name", request.name},
                      {"uid", std::string(owner_job_uid)},
                      {"controller", true},
                      {"blockOwnerDeletion", true}}});
  }
  return Json{
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", std::move(metadata)},
      {"spec",
       {{"clusterIP", "None"},
        {"selector", {{std::string(kLabelName), request.name}}},
        {"publishNotReadyAddresses", true},
        {"ports", Json::array({{{"name", "rendezvous"},
                                {"port", settings.rendezvous_port},
                                {"targetPort", settings.rendezvous_port},
                                {"protocol", "TCP"}}})}}}};
}

// --- Attempt state -----------------------------------------------------------

namespace {

// What the mapping reads of one pod.
struct PodView {
  const Json* pod = nullptr;
  int index = -1;
  std::string phase;
  bool deleting = false;
  std::string reason;   // status.reason
  std::string message;  // status.message
  std::string node;     // spec.nodeName
  std::optional<absl::Time> created;
  std::optional<absl::Time> scheduled;
  // DisruptionTarget condition (True).
  std::string disruption;
  std::string disruption_message;
  // The worker container.
  bool started = false;
  std::optional<absl::Time> started_at;
  bool terminated = false;
  std::optional<int64_t> exit_code;
  std::string terminated_reason;
  std::string terminated_message;
  std::optional<absl::Time> finished_at;
  std::string waiting_reason;
  std::string waiting_message;
  // PodScheduled False.
  std::string unscheduled;
  bool spot_selector = false;
};

int IndexOf(const Json& pod) {
  for (const char* where : {"annotations", "labels"}) {
    const std::string v = Str(
        pod, {"metadata", where, std::string_view(kCompletionIndexAnnotation)});
    int i = 0;
    if (!v.empty() && absl::SimpleAtoi(v, &i) && i >= 0) return i;
  }
  return -1;
}

PodView ViewOf(const Json& pod) {
  PodView v;
  v.pod = &pod;
  v.index = IndexOf(pod);
  v.phase = Str(pod, {"status", "phase"});
  v.deleting = Path(pod, {"metadata", "deletionTimestamp"}) != nullptr &&
               !Path(pod, {"metadata", "deletionTimestamp"})->is_null();
  v.reason = Str(pod, {"status", "reason"});
  v.message = Str(pod, {"status", "message"});
  v.node = Str(pod, {"spec", "nodeName"});
  v.created = TimeOf(Path(pod, {"metadata", "creationTimestamp"}));
  if (const Json* c = Condition(pod, "PodScheduled"); c != nullptr) {
    if (ConditionTrue(c)) {
      v.scheduled = TimeOf(Field(*c, "lastTransitionTime"));
    } else {
      v.unscheduled =
          ReasonMessage(Str(Field(*c, "reason")), Str(Field(*c, "message")));
    }
  }
  if (const Json* c = Condition(pod, "DisruptionTarget"); ConditionTrue(c)) {
    v.disruption = Str(Field(*c, "reason"));
    v.disruption_message = Str(Field(*c, "message"));
  }
  v.spot_selector = HasSpotLabel(Path(pod, {"spec", "nodeSelector"}));
  const Json* statuses = Path(pod, {"status", "containerStatuses"});
  const Json* worker = nullptr;
  if (statuses != nullptr && statuses->is_array()) {
    for (const Json& cs : *statuses) {
      if (Str(Field(cs, "name")) == kWorkerContainer) worker = &cs;
    }
    if (worker == nullptr && !statuses->empty()) worker = &(*statuses)[0];
  }
  if (worker != nullptr) {
    if (const Json* r = Path(*worker, {"state", "running"}); r != nullptr) {
      v.started = true;
      v.started_at = TimeOf(Field(*r, "startedAt"));
    }
    if (const Json* t = Path(*worker, {"state", "terminated"}); t != nullptr) {
      v.terminated = true;
      v.exit_code = Int(Field(*t, "exitCode"));
      v.terminated_reason = Str(Field(*t, "reason"));
      v.terminated_message = Str(Field(*t, "message"));
      v.started_at = TimeOf(Field(*t, "startedAt"));
      v.finished_at = TimeOf(Field(*t, "finishedAt"));
      // A container that never started (StartError) still "terminates".
      v.started = v.started_at.has_value();
    }
    if (const Json* w = Path(*worker, {"state", "waiting"}); w != nullptr) {
      v.waiting_reason = Str(Field(*w, "reason"));
      v.waiting_message = Str(Field(*w, "message"));
    }
  }
  return v;
}

bool PodEnded(const PodView& p) {
  return p.phase == "Succeeded" || p.phase == "Failed";
}

struct Verdict {
  FailureKind kind = FailureKind::kBackendError;
  std::optional<int> exit_code;
  std::string message;
};

// Waiting reasons that mean the worker cannot start: at once, or after the
// image pull patience.
bool IsFatalWaiting(std::string_view r) {
  return r == "InvalidImageName" || r == "CreateContainerConfigError";
}
bool IsRetriedWaiting(std::string_view r) {
  return r == "ErrImagePull" || r == "ImagePullBackOff" ||
         r == "CreateContainerError" || r == "RunContainerError" ||
         r == "ErrImageNeverPull";
}

std::string WorkerName(const PodView& p) {
  return p.index >= 0 ? Cat("worker ", p.index) : std::string("a worker");
}

std::string OnNode(const PodView& p) {
  return p.node.empty() ? "" : Cat(" on node ", p.node);
}

// The platform's hand in a pod's end, if any: (rank, verdict); a lower rank
// is more telling.
std::optional<std::pair<int, Verdict>> PlatformCause(
    const PodView& p, bool spot, const std::vector<NodeInventory>* nodes) {
  const FailureKind lost =
      spot ? FailureKind::kSpotReclaim : FailureKind::kNodeFailure;
  const std::string who = WorkerName(p);
  const std::string detail =
      ReasonMessage(p.disruption.empty() ? p.reason : p.disruption,
                    p.disruption.empty() ? p.message : p.disruption_message);
  const bool evicted = p.reason == "Evicted";
  if ((p.disruption == "TerminationByKubelet" && !evicted) ||
      p.reason == "Terminated" || p.reason == "Shutdown") {
    return std::pair{
        spot ? 0 : 1,
        Verdict{
            lost, std::nullopt,
            Cat(who, ": node ", p.node.empty() ? "?" : p.node, " shut down",
                spot ? " (spot capacity reclaimed)" : "", " (", detail, ")")}};
  }
  if (p.disruption == "DeletionByTaintManager" ||
      p.disruption == "DeletionByPodGC" || p.reason == "NodeLost") {
    return std::pair{
        1, Verdict{lost, std::nullopt,
                   Cat(who, ": node ", p.node.empty() ? "?" : p.node, " lost (",
                       detail, ")")}};
  }
  if (nodes != nullptr && !p.node.empty() && !p.terminated && !PodEnded(p)) {
    auto it =
        std::lower_bound(nodes->begin(), nodes->end(), p.node,
                         [](const NodeInventory& n, const std::string& name) {
                           return n.name < name;
                         });
    const bool gone = it == nodes->end() || it->name != p.node;
    if (gone || it->failed) {
      const bool node_spot = !gone && HasSpotLabel(it->labels);
      return std::pair{
          1, Verdict{spot || node_spot ? FailureKind::kSpotReclaim
                                       : FailureKind::kNodeFailure,
                     std::nullopt,
                     Cat(who, ": node ", p.node,
                         gone ? " is gone"
                              : Cat(" failed (", it->state_message, ")"))}};
    }
  }
  if (evicted) {
    return std::pair{
        2, Verdict{FailureKind::kNodeFailure, std::nullopt,
                   Cat(who, " evicted by the kubelet", OnNode(p), " (",
                       ReasonMessage(p.reason, p.message), ")")}};
  }
  if (p.disruption == "EvictionByEvictionAPI") {
    return std::pair{
        2, Verdict{lost, std::nullopt,
                   Cat(who, " evicted", OnNode(p),
                       spot ? " (spot capacity reclaimed)" : " (node drained)",
                       " (", detail, ")")}};
  }
  if (p.disruption == "PreemptionByScheduler") {
    return std::pair{3, Verdict{FailureKind::kPreempted, std::nullopt,
                                Cat(who, " preempted by kube-scheduler",
                                    OnNode(p), " (", detail, ")")}};
  }
  if (p.phase == "Failed" &&
      (absl::StartsWith(p.reason, "OutOf") ||
       p.reason == "UnexpectedAdmissionError" || p.reason == "NodeAffinity")) {
    return std::pair{
        4, Verdict{FailureKind::kBackendError, std::nullopt,
                   Cat(who, " refused by the kubelet", OnNode(p), " (",
                       ReasonMessage(p.reason, p.message), ")")}};
  }
  return std::nullopt;
}

// The worker's own failure, if it has one.
std::optional<Verdict> UserCause(const PodView& p) {
  const std::string who = WorkerName(p);
  if (p.terminated && p.terminated_reason == "OOMKilled") {
    const int code = p.exit_code.has_value() && *p.exit_code != 0
                         ? static_cast<int>(*p.exit_code)
                         : 137;
    return Verdict{FailureKind::kUserError, code,
                   Cat(who, " OOMKilled (exit ", code, ")")};
  }
  if (p.terminated && p.exit_code.has_value() && *p.exit_code != 0) {
    const int code =
        static_cast<int>(std::clamp<int64_t>(*p.exit_code, -255, 255));
    std::string message = Cat(who, " exited with code ", code);
    if (!p.terminated_reason.empty() && p.terminated_reason != "Error") {
      absl::StrAppend(&message, " (",
                      ReasonMessage(p.terminated_reason, p.terminated_message),
                      ")");
    } else if (!p.terminated_message.empty()) {
      absl::StrAppend(&message, ": ", Clip(p.terminated_message));
    }
    return Verdict{FailureKind::kUserError, code, std::move(message)};
  }
  if (IsFatalWaiting(p.waiting_reason) || IsRetriedWaiting(p.waiting_reason)) {
    return Verdict{
        FailureKind::kUserError, std::nullopt,
        Cat(who, " ", ReasonMessage(p.waiting_reason, p.waiting_message))};
  }
  return std::nullopt;
}

}  // namespace

AttemptStatus AttemptFromObjects(const Json& job, const std::vector<Json>& pods,
                                 absl::Time now,
                                 const std::vector<NodeInventory>* nodes,
                                 absl::Duration image_pull_patience) {
  AttemptStatus s;
  s.name = Str(job, {"metadata", "name"});
  s.backend_id = Str(job, {"metadata", "uid"});
  s.submit_time = TimeOf(Path(job, {"metadata", "creationTimestamp"}))
                      .value_or(absl::InfinitePast());
  const Json* annotations = Path(job, {"metadata", "annotations"});
  const auto annotation = [&](std::string_view key) {
    return annotations == nullptr ? std::string()
                                  : Str(Field(*annotations, key));
  };
  const std::optional<StopReason> stop =
      ParseStopReasonValue(annotation(kAnnotationStopReason));
  s.stop_requested = stop.has_value();
  if (s.stop_requested) {
    s.stop_deadline =
        TimeOf(Path(job, {"metadata", "annotations",
                          std::string_view(kAnnotationStopDeadline)}));
  }

  // Workers and their pods (the newest of each index decides its state).
  const std::vector<std::string> placed =
      annotation(kAnnotationWorkerNodes).empty()
          ? std::vector<std::string>()
          : std::vector<std::string>(
                absl::StrSplit(annotation(kAnnotationWorkerNodes), ','));
  int workers = static_cast<int>(std::clamp<int64_t>(
      Int(Path(job, {"spec", "completions"})).value_or(0), 0, 100000));
  if (workers == 0) workers = static_cast<int>(placed.size());
  std::vector<PodView> views;
  views.reserve(pods.size());
  for (const Json& pod : pods) views.push_back(ViewOf(pod));
  std::sort(views.begin(), views.end(), [](const PodView& a, const PodView& b) {
    if (a.index != b.index) return a.index < b.index;
    return a.created.value_or(absl::InfinitePast()) <
           b.created.value_or(absl::InfinitePast());
  });
  std::vector<const PodView*> current(workers, nullptr);
  for (const PodView& v : views) {
    if (v.index >= 0 && v.index < workers) current[v.index] = &v;
  }
  s.nodes.resize(workers);
  bool spot = annotation(kAnnotationSpot) == "true";
  for (int i = 0; i < workers; ++i) {
    if (current[i] != nullptr && !current[i]->node.empty()) {
      s.nodes[i] = current[i]->node;
    } else if (static_cast<size_t>(i) < placed.size()) {
      s.nodes[i] = placed[i];
    }
    if (current[i] != nullptr && current[i]->spot_selector) spot = true;
    if (nodes != nullptr && !s.nodes[i].empty()) {
      auto it =
          std::lower_bound(nodes->begin(), nodes->end(), s.nodes[i],
                           [](const NodeInventory& n, const std::string& name) {
                             return n.name < name;
                           });
      if (it != nodes->end() && it->name == s.nodes[i] &&
          HasSpotLabel(it->labels)) {
        spot = true;
      }
    }
  }

  // Start: when the last worker started, once every worker has.
  std::optional<absl::Time> start;
  bool all_started = workers > 0;
  for (int i = 0; i < workers; ++i) {
    const PodView* p = current[i];
    if (p == nullptr || !p->started) {
      all_started = false;
      break;
    }
    const absl::Time t =
        p->started_at.value_or(p->created.value_or(s.submit_time));
    if (!start.has_value() || t > *start) start = t;
  }
  if (!all_started) start.reset();

  // The terminal conditions, or the ones that announce them: from
  // Kubernetes 1.31 on, Failed and Complete wait for every pod to be gone
  // (a pod on a dead node may take long), while FailureTarget and
  // SuccessCriteriaMet come as soon as the outcome is decided.
  const Json* complete = Condition(job, "Complete");
  if (!ConditionTrue(complete)) complete = Condition(job, "SuccessCriteriaMet");
  const Json* failed = Condition(job, "Failed");
  if (!ConditionTrue(failed)) failed = Condition(job, "FailureTarget");
  const auto end_at = [&](const Json* condition) {
    std::optional<absl::Time> t;
    if (condition != nullptr)
      t = TimeOf(Field(*condition, "lastTransitionTime"));
    if (!t.has_value() && condition == complete) {
      t = TimeOf(Path(job, {"status", "completionTime"}));
    }
    if (!t.has_value()) {
      for (const PodView& v : views) {
        if (v.finished_at.has_value() &&
            (!t.has_value() || *v.finished_at > *t)) {
          t = v.finished_at;
        }
      }
    }
    return t.value_or(now);
  };
  const auto finish = [&](AttemptPhase phase, FailureKind kind,
                          std::optional<int> exit_code, std::string message,
                          absl::Time end) {
    s.phase = phase;
    s.failure = kind;
    s.exit_code = exit_code;
    s.message = std::move(message);
    s.end_time = end;
    s.start_time = start;
    if (s.start_time.has_value() && *s.start_time > end) s.start_time = end;
    return s;
  };

  if (ConditionTrue(complete)) {
    return finish(AttemptPhase::kSucceeded, FailureKind::kNone, 0,
                  workers == 1
                      ? "exited with code 0"
                      : Cat("all ", workers, " workers exited with code 0"),
                  end_at(complete));
  }
  bool any_active = false;
  for (const PodView& v : views) any_active |= !PodEnded(v);
  if (stop.has_value()) {
    const bool suspended = Path(job, {"spec", "suspend"}) != nullptr &&
                           Path(job, {"spec", "suspend"})->is_boolean() &&
                           Path(job, {"spec", "suspend"})->get<bool>();
    const bool past_deadline =
        s.stop_deadline.has_value() && now >= *s.stop_deadline;
    if (ConditionTrue(failed) ||
        (!any_active && (suspended || past_deadline))) {
      const bool preempted = *stop == StopReason::kPreemption;
      return finish(
          AttemptPhase::kCancelled,
          preempted ? FailureKind::kPreempted : FailureKind::kCancelled,
          std::nullopt,
          preempted ? "preempted by Trainyard" : "cancelled by Trainyard",
          ConditionTrue(failed) ? end_at(failed) : end_at(nullptr));
    }
  }

  if (ConditionTrue(failed)) {
    const std::string job_reason = Str(Field(*failed, "reason"));
    const std::string job_message = Str(Field(*failed, "message"));
    const absl::Time end = end_at(failed);
    if (job_reason == "DeadlineExceeded") {
      const std::optional<int64_t> deadline =
          Int(Path(job, {"spec", "activeDeadlineSeconds"}));
      return finish(
          AttemptPhase::kFailed, FailureKind::kTimeLimit, std::nullopt,
          Cat("reached its time limit",
              deadline.has_value()
                  ? Cat(" of ", absl::FormatDuration(absl::Seconds(*deadline)))
                  : "",
              " (", ReasonMessage(job_reason, job_message), ")"),
          end);
    }
    // The platform's hand in any pod outranks the workers' own exits (a
    // worker whose peer's node died exits non-zero too).
    std::optional<std::pair<int, Verdict>> platform;
    for (const PodView& v : views) {
      std::optional<std::pair<int, Verdict>> c = PlatformCause(v, spot, nodes);
      if (c.has_value() &&
          (!platform.has_value() || c->first < platform->first)) {
        platform = std::move(c);
      }
    }
    if (platform.has_value()) {
      Verdict& v = platform->second;
      return finish(AttemptPhase::kFailed, v.kind, v.exit_code,
                    std::move(v.message), end);
    }
    // The first worker to fail by itself.
    const PodView* first = nullptr;
    std::optional<Verdict> user;
    for (const PodView& v : views) {
      std::optional<Verdict> c = UserCause(v);
      if (!c.has_value()) continue;
      const absl::Time t = v.finished_at.value_or(absl::InfiniteFuture());
      if (first == nullptr ||
          t < first->finished_at.value_or(absl::InfiniteFuture())) {
        first = &v;
        user = std::move(c);
      }
    }
    if (user.has_value()) {
      return finish(AttemptPhase::kFailed, user->kind, user->exit_code,
                    std::move(user->message), end);
    }
    for (int i = 0; i < workers; ++i) {
      if (current[i] == nullptr) {
        return finish(
            AttemptPhase::kFailed,
            spot ? FailureKind::kSpotReclaim : FailureKind::kNodeFailure,
            std::nullopt,
            Cat("worker ", i, "'s pod is gone",
                s.nodes[i].empty() ? "" : Cat(" from node ", s.nodes[i]),
                " (its node was removed?); the Job failed: ",
                ReasonMessage(job_reason, job_message)),
            end);
      }
    }
    for (const PodView& v : views) {
      if (v.phase == "Failed") {
        return finish(AttemptPhase::kFailed, FailureKind::kBackendError,
                      std::nullopt,
                      Cat(WorkerName(v), " failed", OnNode(v), ": ",
                          ReasonMessage(v.reason.empty() ? "Failed" : v.reason,
                                        v.message)),
                      end);
      }
    }
    return finish(AttemptPhase::kFailed, FailureKind::kBackendError,
                  std::nullopt,
                  Cat("the Job failed: ",
                      ReasonMessage(job_reason.empty() ? "Failed" : job_reason,
                                    job_message)),
                  end);
  }

  // Not ended: a worker that cannot start ends the attempt.
  if (!stop.has_value()) {
    for (int i = 0; i < workers; ++i) {
      const PodView* p = current[i];
      if (p == nullptr || PodEnded(*p)) continue;
      const absl::Time since =
          p->scheduled.value_or(p->created.value_or(s.submit_time));
      if (IsFatalWaiting(p->waiting_reason) ||
          (IsRetriedWaiting(p->waiting_reason) &&
           now - since >= image_pull_patience)) {
        return finish(AttemptPhase::kFailed, FailureKind::kUserError,
                      std::nullopt,
                      Cat(WorkerName(*p), " cannot start: ",
                          ReasonMessage(p->waiting_reason, p->waiting_message)),
                      now);
      }
    }
  }

  if (all_started) {
    s.phase = AttemptPhase::kRunning;
    s.start_time = start;
    s.message = s.stop_requested
                    ? Cat("stopping (", StopReasonValue(*stop), ")")
                    : "running";
    return s;
  }
  s.phase = AttemptPhase::kPending;
  std::vector<std::string> waiting;
  std::string why;
  for (int i = 0; i < workers; ++i) {
    const PodView* p = current[i];
    if (p != nullptr && p->started) continue;
    waiting.push_back(Cat(i));
    if (!why.empty()) continue;
    if (p == nullptr) {
      why = "no pod yet";
    } else if (!p->unscheduled.empty()) {
      why = p->unscheduled;
    } else if (!p->waiting_reason.empty()) {
      why = ReasonMessage(p->waiting_reason, p->waiting_message);
    } else {
      why = p->phase.empty() ? "Pending" : p->phase;
    }
  }
  // At most 8 workers named.
  std::string named = absl::StrJoin(
      waiting.begin(), waiting.begin() + std::min<size_t>(8, waiting.size()),
      ", ");
  if (waiting.size() > 8) {
    absl::StrAppend(&named, " ... (", waiting.size(), " in all)");
  }
  s.message = waiting.empty()
                  ? "pending"
                  : Cat("pending: worker", waiting.size() == 1 ? " " : "s ",
                        named, ": ", why);
  return s;
}

// --- Nodes -------------------------------------------------------------------

namespace {

int64_t QuantityOr0(const Json* f, int scale) {
  if (f == nullptr) return 0;
  absl::StatusOr<int64_t> q = QuantityOf(*f, scale);
  return q.ok() ? std::max<int64_t>(0, *q) : 0;
}

PodRequests ContainerRequests(const Json& c, std::string_view gpu_resource) {
  const Json* requests = Path(c, {"resources", "requests"});
  const Json* limits = Path(c, {"resources", "limits"});
  const auto get = [&](std::string_view r, int scale) {
    const Json* f = requests != nullptr ? Field(*requests, r) : nullptr;
    if (f == nullptr && limits != nullptr) f = Field(*limits, r);
    return QuantityOr0(f, scale);
  };
  return {.gpus = get(gpu_resource, 0),
          .cpu_millis = get("cpu", 3),
          .memory_bytes = get("memory", 0)};
}

int64_t SatAdd(int64_t a, int64_t b) { return a > kMax - b ? kMax : a + b; }

PodRequests Add(PodRequests a, const PodRequests& b) {
  return {SatAdd(a.gpus, b.gpus), SatAdd(a.cpu_millis, b.cpu_millis),
          SatAdd(a.memory_bytes, b.memory_bytes)};
}
PodRequests Max(const PodRequests& a, const PodRequests& b) {
  return {std::max(a.gpus, b.gpus), std::max(a.cpu_millis, b.cpu_millis),
          std::max(a.memory_bytes, b.memory_bytes)};
}

}  // namespace

PodRequests PodEffectiveRequests(const Json& pod,
                                 std::string_view gpu_resource) {
  PodRequests regular;
  if (const Json* cs = Path(pod, {"spec", "containers"});
      cs != nullptr && cs->is_array()) {
    for (const Json& c : *cs)
      regular = Add(regular, ContainerRequests(c, gpu_resource));
  }
  // Init containers run one at a time, next to the sidecars (restartPolicy
  // Always) started before them; sidecars keep running with the containers.
  PodRequests sidecars;
  PodRequests init_peak;
  if (const Json* cs = Path(pod, {"spec", "initContainers"});
      cs != nullptr && cs->is_array()) {
    for (const Json& c : *cs) {
      const PodRequests r = ContainerRequests(c, gpu_resource);
      if (Str(Field(c, "restartPolicy")) == "Always") {
        sidecars = Add(sidecars, r);
        init_peak = Max(init_peak, sidecars);
      } else {
        init_peak = Max(init_peak, Add(sidecars, r));
      }
    }
  }
  PodRequests out = Max(Add(regular, sidecars), init_peak);
  if (const Json* overhead = Path(pod, {"spec", "overhead"});
      overhead != nullptr) {
    out =
        Add(out, {.gpus = QuantityOr0(Field(*overhead, gpu_resource), 0),
                  .cpu_millis = QuantityOr0(Field(*overhead, "cpu"), 3),
                  .memory_bytes = QuantityOr0(Field(*overhead, "memory"), 0)});
  }
  return out;
}

void CompactForeignPod(Json& pod) {
  if (!pod.is_object()) return;
  if (const Json* labels = Path(pod, {"metadata", "labels"});
      labels != nullptr && labels->is_object() &&
      labels->contains(std::string(kLabelName))) {
    return;
  }
  auto keep = [](const Json& from, std::initializer_list<const char*> keys) {
    Json out = Json::object();
    if (!from.is_object()) return out;
    for (const char* k : keys) {
      if (auto it = from.find(k); it != from.end()) out[k] = *it;
    }
    return out;
  };
  Json compact = Json::object();
  if (auto it = pod.find("metadata"); it != pod.end()) {
    compact["metadata"] =
        keep(*it, {"name", "namespace", "uid", "resourceVersion",
                   "creationTimestamp", "deletionTimestamp"});
  }
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    Json s = keep(*spec, {"nodeName", "overhead"});
    for (const char* list : {"containers", "initContainers"}) {
      auto cs = spec->find(list);
      if (cs == spec->end() || !cs->is_array()) continue;
      Json out = Json::array();
      for (const Json& c : *cs) {
        out.push_back(keep(c, {"name", "resources", "restartPolicy"}));
      }
      s[list] = std::move(out);
    }
    compact["spec"] = std::move(s);
  }
  if (auto it = pod.find("status"); it != pod.end()) {
    compact["status"] = keep(*it, {"phase"});
  }
  pod = std::move(compact);
}

NodeInventory NodeFromObject(const Json& node,
                             const std::vector<const Json*>& pods,
                             const KubernetesSettings& settings) {
  NodeInventory n;
  n.name = Str(node, {"metadata", "name"});
  if (const Json* labels = Path(node, {"metadata", "labels"});
      labels != nullptr && labels->is_object()) {
    for (const auto& [key, value] : labels->items()) {
      if (value.is_string()) n.labels[key] = value.get<std::string>();
    }
  }
  const auto label = [&](const std::string& key) -> std::string {
    if (key.empty()) return "";
    auto it = n.labels.find(key);
    return it == n.labels.end() ? "" : it->second;
  };
  const Json* alloc = Path(node, {"status", "allocatable"});
  if (alloc != nullptr) {
    n.gpus = QuantityOr0(Field(*alloc, settings.gpu_resource), 0);
    n.cpu_millis = QuantityOr0(Field(*alloc, "cpu"), 3);
    n.memory_bytes = QuantityOr0(Field(*alloc, "memory"), 0);
  }
  if (n.gpus > 0) {
    if (!settings.gpu_model.empty()) {
      n.gpu_model = settings.gpu_model;
    } else {
      const std::string product = label(settings.gpu_model_label);
      auto it = settings.gpu_models.find(product);
      n.gpu_model = it != settings.gpu_models.end() ? it->second : product;
    }
  }
  const std::string zone = label(settings.zone_label);
  n.block = settings.block_label.empty() ? zone : label(settings.block_label);
  n.rack = label(settings.rack_label);
  for (const std::string& key : settings.pool_labels) {
    n.pool = label(key);
    if (!n.pool.empty()) break;
  }
  n.flavor = label(settings.flavor_label);
  if (n.flavor.empty() && !n.pool.empty()) {
    auto it = settings.pool_flavors.find(n.pool);
    if (it != settings.pool_flavors.end()) n.flavor = it->second;
  }

  // State.
  std::vector<std::string> why;
  const Json* deletion = Path(node, {"metadata", "deletionTimestamp"});
  const bool deleting = deletion != nullptr && !deletion->is_null();
  const Json* ready = Condition(node, "Ready");
  const std::string ready_status =
      ready == nullptr ? "" : Str(Field(*ready, "status"));
  if (deleting) why.push_back("being deleted");
  if (ready_status == "False" || ready_status == "Unknown") {
    why.push_back(Cat(ready_status == "False" ? "NotReady" : "Ready Unknown",
                      ": ",
                      ReasonMessage(Str(Field(*ready, "reason")),
                                    Str(Field(*ready, "message")))));
  }
  n.failed = deleting || ready_status == "False" || ready_status == "Unknown";
  bool usable = !n.failed;
  if (ready_status.empty()) {
    usable = false;
    why.push_back("no Ready condition yet");
  }
  if (const Json* u = Path(node, {"spec", "unschedulable"});
      u != nullptr && u->is_boolean() && u->get<bool>()) {
    usable = false;
    why.push_back("cordoned");
  }
  // Taints the node's flavor (any flavor, for a node of none) tolerates.
  std::vector<Toleration> tolerations;
  const FlavorPlacement* own =
      n.flavor.empty() ? nullptr : FindFlavor(settings, n.flavor);
  for (const FlavorPlacement& f : settings.flavors) {
    if (own != nullptr && &f != own) continue;
    for (Toleration& t : f.EffectiveTolerations()) tolerations.push_back(t);
  }
  if (const Json* taints = Path(node, {"spec", "taints"});
      taints != nullptr && taints->is_array()) {
    for (const Json& t : *taints) {
      const std::string key = Str(Field(t, "key"));
      const std::string value = Str(Field(t, "value"));
      const std::string effect = Str(Field(t, "effect"));
      if (effect != "NoSchedule" && effect != "NoExecute") continue;
      // Reported above (cordon, Ready), or tolerated by every GPU pod.
      if (key == "node.kubernetes.io/unschedulable" ||
          key == "node.kubernetes.io/not-ready" ||
          key == "node.kubernetes.io/unreachable" ||
          key == settings.gpu_resource) {
        continue;
      }
      if (std::any_of(tolerations.begin(), tolerations.end(),
                      [&](const Toleration& tol) {
                        return Tolerates(tol, key, value, effect);
                      })) {
        continue;
      }
      usable = false;
      why.push_back(
          Cat("tainted ", key, value.empty() ? "" : "=", value, ":", effect));
    }
  }
  n.schedulable = usable;
  n.state_message = why.empty() ? "Ready" : absl::StrJoin(why, "; ");

  for (const Json* pod : pods) {
    if (pod == nullptr || Str(*pod, {"spec", "nodeName"}) != n.name) continue;
    const std::string phase = Str(*pod, {"status", "phase"});
    if (phase == "Succeeded" || phase == "Failed") continue;
    const PodRequests r = PodEffectiveRequests(*pod, settings.gpu_resource);
    n.used_gpus = SatAdd(n.used_gpus, r.gpus);
    n.used_cpu_millis = SatAdd(n.used_cpu_millis, r.cpu_millis);
    n.used_memory_bytes = SatAdd(n.used_memory_bytes, r.memory_bytes);
  }
  return n;
}

}  // namespace trainyard::dispatcher::kubernetes
