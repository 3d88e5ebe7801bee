#include "services/dispatcher/adapters/kubernetes/kube_settings.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/dispatcher/adapters/settings_file.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::kubernetes {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;

namespace {

absl::Status Bad(std::string_view key, std::string_view message) {
  return BadSetting(key, message);
}

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}
bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// [A-Za-z0-9._-]{1,63}, alphanumeric at both ends.
bool IsNamePart(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

bool IsAbsolutePath(std::string_view p) {
  return !p.empty() && p[0] == '/' && !absl::StrContains(AbslView(p), "/../") &&
         !absl::EndsWith(AbslView(p), "/..");
}

// "key=value" into the map; INVALID_ARGUMENT naming `field`.
absl::Status AddLabel(std::string_view field, std::string_view text,
                      std::map<std::string, std::string>* out) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    return Bad(field, Cat("expected key=value, got \"", text, "\""));
  }
  const std::string key(
      absl::StripAsciiWhitespace(AbslView(text.substr(0, eq))));
  const std::string value(
      absl::StripAsciiWhitespace(AbslView(text.substr(eq + 1))));
  (*out)[key] = value;
  return absl::OkStatus();
}

}  // namespace

bool IsDns1123Label(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (absl::string_view part : absl::StrSplit(AbslView(s), '.')) {
    if (part.empty()) return false;
    if (!IsLowerAlnum(part.front()) || !IsLowerAlnum(part.back())) return false;
    for (char c : part) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
  }
  return true;
}

bool IsQualifiedName(std::string_view s) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return IsNamePart(s);
  if (s.find('/', slash + 1) != std::string_view::npos) return false;
  return IsDns1123Subdomain(s.substr(0, slash)) &&
         IsNamePart(s.substr(slash + 1));
}

bool IsLabelValue(std::string_view s) { return s.empty() || IsNamePart(s); }

absl::StatusOr<Toleration> ParseToleration(std::string_view text,
                                           std::string_view field) {
  Toleration t;
  std::string_view rest = text;
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos) {
    t.effect = std::string(rest.substr(colon + 1));
    rest = rest.substr(0, colon);
    if (t.effect != "NoSchedule" && t.effect != "PreferNoSchedule" &&
        t.effect != "NoExecute") {
      return Bad(field, Cat("effect must be NoSchedule, PreferNoSchedule or "
                            "NoExecute, got \"",
                            t.effect, "\""));
    }
  }
  if (rest == "*") rest = "";
  const size_t eq = rest.find('=');
  if (eq == std::string_view::npos) {
    t.key = std::string(rest);
    t.op = "Exists";
  } else {
    t.key = std::string(rest.substr(0, eq));
    t.value = std::string(rest.substr(eq + 1));
    t.op = "Equal";
    if (t.key.empty()) {
      return Bad(field, "a toleration with a value needs a key");
    }
  }
  if (!t.key.empty() && !IsQualifiedName(t.key)) {
    return Bad(field, Cat("\"", t.key, "\" is not a valid taint key"));
  }
  if (!IsLabelValue(t.value)) {
    return Bad(field, Cat("\"", t.value, "\" is not a valid taint value"));
  }
  return t;
}

std::string FormatToleration(const Toleration& t) {
  std::string out = t.key.empty() && t.op == "Exists" ? "*" : t.key;
  if (t.op == "Equal") absl::StrAppend(&out, "=", t.value);
  if (!t.effect.empty()) absl::StrAppend(&out, ":", t.effect);
  return out;
}

std::optional<SpotPreset> ParseSpotPreset(std::string_view name) {
  if (name == "none" || name == "false" || name.empty()) {
    return SpotPreset::kNone;
  }
  if (name == "gke") return SpotPreset::kGke;
  if (name == "karpenter") return SpotPreset::kKarpenter;
  if (name == "eks") return SpotPreset::kEks;
  if (name == "aks") return SpotPreset::kAks;
  return std::nullopt;
}

std::string_view SpotPresetName(SpotPreset preset) {
  switch (preset) {
    case SpotPreset::kNone:
      return "none";
    case SpotPreset::kGke:
      return "gke";
    case SpotPreset::kKarpenter:
      return "karpenter";
    case SpotPreset::kEks:
      return "eks";
    case SpotPreset::kAks:
      return "aks";
  }
  return "none";
}

std::pair<std::string, std::string> SpotPresetLabel(SpotPreset preset) {
  switch (preset) {
    case SpotPreset::kNone:
      return {};
    case SpotPreset::kGke:
      return {"cloud.google.com/gke-spot", "true"};
    case SpotPreset::kKarpenter:
      return {"karpenter.sh/capacity-type", "spot"};
    case SpotPreset::kEks:
      return {"eks.amazonaws.com/capacityType", "SPOT"};
    case SpotPreset::kAks:
      return {"kubernetes.azure.com/scalesetpriority", "spot"};
  }
  return {};
}

std::optional<Toleration> SpotPresetToleration(SpotPreset preset) {
  switch (preset) {
    case SpotPreset::kGke:
      return Toleration{.key = "cloud.google.com/gke-spot",
                        .op = "Equal",
                        .value = "true",
                        .effect = "NoSchedule"};
    case SpotPreset::kAks:
      return Toleration{.key = "kubernetes.azure.com/scalesetpriority",
                        .op = "Equal",
                        .value = "spot",
                        .effect = "NoSchedule"};
    case SpotPreset::kNone:
    case SpotPreset::kKarpenter:
    case SpotPreset::kEks:
      return std::nullopt;
  }
  return std::nullopt;
}

std::map<std::string, std::string> FlavorPlacement::EffectiveNodeSelector()
    const {
  std::map<std::string, std::string> out = node_selector;
  if (spot != SpotPreset::kNone) {
    auto [key, value] = SpotPresetLabel(spot);
    out.emplace(std::move(key), std::move(value));
  }
  return out;
}

std::vector<Toleration> FlavorPlacement::EffectiveTolerations() const {
  std::vector<Toleration> out;
  if (std::optional<Toleration> t = SpotPresetToleration(spot); t) {
    out.push_back(*t);
  }
  for (const Toleration& t : tolerations) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

const FlavorPlacement* FindFlavor(const KubernetesSettings& settings,
                                  std::string_view flavor) {
  if (settings.flavors.empty()) return nullptr;
  if (flavor.empty()) return &settings.flavors.front();
  for (const FlavorPlacement& f : settings.flavors) {
    if (f.flavor == flavor) return &f;
  }
  return nullptr;
}

absl::Status ValidateKubernetesSettings(const KubernetesSettings& s) {
  if (!IsDns1123Label(s.namespace_)) {
    return Bad("namespace",
               Cat("\"", s.namespace_,
                   "\" is not a DNS-1123 label (lower-case letters, digits "
                   "and '-', at most 63)"));
  }
  std::set<std::string> seen;
  for (const FlavorPlacement& f : s.flavors) {
    const std::string field = Cat("flavor.", f.flavor);
    if (!domain::IsValidId(f.flavor)) {
      return Bad(field, Cat("\"", f.flavor, "\" is not a valid flavor id"));
    }
    if (!seen.insert(f.flavor).second) return Bad(field, "given twice");
    for (const auto& [key, value] : f.node_selector) {
      if (!IsQualifiedName(key)) {
        return Bad(Cat(field, ".node_selector"),
                   Cat("\"", key, "\" is not a valid label key"));
      }
      if (!IsLabelValue(value)) {
        return Bad(Cat(field, ".node_selector"),
                   Cat("\"", value, "\" is not a valid label value"));
      }
    }
    for (const Toleration& t : f.tolerations) {
      absl::StatusOr<Toleration> again =
          ParseToleration(FormatToleration(t), Cat(field, ".toleration"));
      if (!again.ok()) return again.status();
      if (t.op != "Equal" && t.op != "Exists") {
        return Bad(Cat(field, ".toleration"),
                   "operator must be Equal or Exists");
      }
      if (t.op == "Exists" && !t.value.empty()) {
        return Bad(Cat(field, ".toleration"), "Exists takes no value");
      }
    }
  }
  for (size_t i = 0; i < s.pool_labels.size(); ++i) {
    if (!IsQualifiedName(s.pool_labels[i])) {
      return Bad("pool_label",
                 Cat("\"", s.pool_labels[i], "\" is not a valid label key"));
    }
  }
  for (const auto& [key, field] :
       {std::pair<const std::string*, std::string_view>{&s.flavor_label,
                                                        "flavor_label"},
        {&s.zone_label, "zone_label"},
        {&s.block_label, "block_label"},
        {&s.rack_label, "rack_label"},
        {&s.gpu_model_label, "gpu_model_label"}}) {
    if (!key->empty() && !IsQualifiedName(*key)) {
      return Bad(field, Cat("\"", *key, "\" is not a valid label key"));
    }
  }
  for (const auto& [pool, flavor] : s.pool_flavors) {
    if (pool.empty() || !domain::IsValidId(flavor)) {
      return Bad("pool_flavor",
                 Cat("expected pool:flavor with a valid flavor id, got \"",
                     pool, ":", flavor, "\""));
    }
  }
  if (!IsQualifiedName(s.gpu_resource)) {
    return Bad("gpu_resource",
               Cat("\"", s.gpu_resource, "\" is not a resource name"));
  }
  if (s.rendezvous_port < 1 || s.rendezvous_port > 65535) {
    return Bad("rendezvous_port", "must be in 1..65535");
  }
  for (const std::string& secret : s.image_pull_secrets) {
    if (!IsDns1123Subdomain(secret)) {
      return Bad("image_pull_secret",
                 Cat("\"", secret, "\" is not a valid Secret name"));
    }
  }
  if (!s.service_account.empty() && !IsDns1123Subdomain(s.service_account)) {
    return Bad("service_account", Cat("\"", s.service_account,
                                      "\" is not a valid ServiceAccount name"));
  }
  if (s.default_grace_period < absl::ZeroDuration() ||
      s.default_grace_period > absl::Hours(24)) {
    return Bad("default_grace_period", "must be between 0s and 24h");
  }
  for (char c : s.default_image) {
    if (static_cast<unsigned char>(c) <= ' ' ||
        static_cast<unsigned char>(c) >= 0x7f) {
      return Bad("default_image",
                 "an image reference has no spaces, control or non-ASCII "
                 "characters");
    }
  }
  for (const auto& [value, model] : s.gpu_models) {
    if (!IsLabelValue(value) || model.empty() ||
        !std::all_of(model.begin(), model.end(), [](char c) {
          return c > ' ' && static_cast<unsigned char>(c) < 0x7f;
        })) {
      return Bad("gpu_model_map", Cat("expected <label value>=<model>, got \"",
                                      value, "=", model, "\""));
    }
  }
  if (s.image_pull_patience < absl::ZeroDuration() ||
      s.image_pull_patience > absl::Hours(24)) {
    return Bad("image_pull_patience", "must be between 0s and 24h");
  }
  if (s.node_lost_after.has_value() &&
      (*s.node_lost_after < absl::ZeroDuration() ||
       *s.node_lost_after > absl::Hours(24))) {
    return Bad("node_lost_after", "must be between 0s and 24h");
  }
  if (!s.priority_class.empty() && !IsDns1123Subdomain(s.priority_class)) {
    return Bad("priority_class", Cat("\"", s.priority_class,
                                     "\" is not a valid PriorityClass name"));
  }
  using Kind = CheckpointVolume::Kind;
  switch (s.checkpoint_volume.kind) {
    case Kind::kNone:
      break;
    case Kind::kHostPath:
      if (!IsAbsolutePath(s.checkpoint_volume.source)) {
        return Bad("checkpoint_volume", "hostPath needs an absolute path");
      }
      break;
    case Kind::kPvc:
      if (!IsDns1123Subdomain(s.checkpoint_volume.source)) {
        return Bad("checkpoint_volume",
                   Cat("\"", s.checkpoint_volume.source,
                       "\" is not a valid PersistentVolumeClaim name"));
      }
      break;
    case Kind::kNfs: {
      const size_t colon = s.checkpoint_volume.source.find(':');
      if (colon == std::string::npos || colon == 0 ||
          !IsAbsolutePath(s.checkpoint_volume.source.substr(colon + 1))) {
        return Bad("checkpoint_volume", "nfs needs server:/path");
      }
      break;
    }
  }
  if (s.checkpoint_volume.kind != Kind::kNone) {
    if (!IsAbsolutePath(s.checkpoint_mount_path) ||
        s.checkpoint_mount_path == "/") {
      return Bad("checkpoint_mount_path",
                 "an absolute path other than / is required with "
                 "checkpoint_volume");
    }
  } else if (!s.checkpoint_mount_path.empty()) {
    return Bad("checkpoint_mount_path", "set without checkpoint_volume");
  }
  return absl::OkStatus();
}

absl::StatusOr<KubernetesSettings> ParseKubernetesSettings(
    std::string_view text) {
  KubernetesSettings s;
  bool pool_labels_seen = false;
  auto flavor = [&s](const std::string& id) -> FlavorPlacement& {
    for (FlavorPlacement& f : s.flavors) {
      if (f.flavor == id) return f;
    }
    s.flavors.push_back({.flavor = id});
    return s.flavors.back();
  };
  absl::StatusOr<std::vector<SettingLine>> lines = ParseSettingLines(text);
  if (!lines.ok()) return lines.status();
  for (const SettingLine& setting : *lines) {
    const std::string& key = setting.key;
    const std::string& value = setting.value;
    const int line_no = setting.line;
    if (absl::StartsWith(key, "flavor.")) {
      // flavor.<id>.<setting>
      const size_t dot = key.rfind('.');
      const std::string id = key.substr(7, dot - 7);
      const std::string what = key.substr(dot + 1);
      if (dot <= 7 || id.empty()) {
        return Bad(key,
                   "expected flavor.<id>.spot, .node_selector or "
                   ".toleration");
      }
      if (what == "spot") {
        if (value == "true") {
          flavor(id).spot_flag = true;
        } else {
          std::optional<SpotPreset> p = ParseSpotPreset(value);
          if (!p.has_value()) {
            return Bad(key, Cat("expected gke, karpenter, eks, aks, true or "
                                "none, got \"",
                                value, "\""));
          }
          flavor(id).spot = *p;
        }
      } else if (what == "node_selector") {
        if (absl::Status st = AddLabel(key, value, &flavor(id).node_selector);
            !st.ok()) {
          return st;
        }
      } else if (what == "toleration") {
        absl::StatusOr<Toleration> t = ParseToleration(value, key);
        if (!t.ok()) return t.status();
        flavor(id).tolerations.push_back(*std::move(t));
      } else {
        return Bad(key, Cat("unknown flavor setting (line ", line_no, ")"));
      }
    } else if (key == "namespace") {
      s.namespace_ = value;
    } else if (key == "pool_label") {
      if (!pool_labels_seen) s.pool_labels.clear();
      pool_labels_seen = true;
      if (value != "none") s.pool_labels.push_back(value);
    } else if (key == "flavor_label") {
      s.flavor_label = value;
    } else if (key == "pool_flavor") {
      const size_t colon = value.rfind(':');
      if (colon == std::string::npos) {
        return Bad(key, Cat("expected pool:flavor, got \"", value, "\""));
      }
      s.pool_flavors[value.substr(0, colon)] = value.substr(colon + 1);
    } else if (key == "zone_label") {
      s.zone_label = value;
    } else if (key == "block_label") {
      s.block_label = value;
    } else if (key == "rack_label") {
      s.rack_label = value;
    } else if (key == "gpu_resource") {
      s.gpu_resource = value;
    } else if (key == "gpu_model_label") {
      s.gpu_model_label = value;
    } else if (key == "gpu_model") {
      s.gpu_model = value;
    } else if (key == "gpu_model_map") {
      if (absl::Status st = AddLabel(key, value, &s.gpu_models); !st.ok()) {
        return st;
      }
    } else if (key == "rendezvous_port") {
      if (!absl::SimpleAtoi(value, &s.rendezvous_port)) {
        return Bad(key, Cat("expected a port number, got \"", value, "\""));
      }
    } else if (key == "image_pull_secret") {
      s.image_pull_secrets.push_back(value);
    } else if (key == "service_account") {
      s.service_account = value;
    } else if (key == "default_grace_period") {
      absl::Duration d;
      if (!absl::ParseDuration(value, &d) || d == absl::InfiniteDuration()) {
        return Bad(
            key, Cat("expected a duration like \"60s\", got \"", value, "\""));
      }
      s.default_grace_period = d;
    } else if (key == "priority_class") {
      s.priority_class = value;
    } else if (key == "default_image") {
      s.default_image = value;
    } else if (key == "image_pull_patience") {
      absl::Duration d;
      if (!absl::ParseDuration(value, &d) || d == absl::InfiniteDuration()) {
        return Bad(key,
                   Cat("expected a duration like \"5m\", got \"", value, "\""));
      }
      s.image_pull_patience = d;
    } else if (key == "node_lost_after") {
      absl::Duration d;
      if (!absl::ParseDuration(value, &d) || d == absl::InfiniteDuration()) {
        return Bad(
            key, Cat("expected a duration like \"60s\", got \"", value, "\""));
      }
      s.node_lost_after = d;
    } else if (key == "checkpoint_volume") {
      using Kind = CheckpointVolume::Kind;
      const size_t colon = value.find(':');
      const std::string kind =
          colon == std::string::npos ? value : value.substr(0, colon);
      const std::string source =
          colon == std::string::npos ? "" : value.substr(colon + 1);
      if (kind == "none") {
        s.checkpoint_volume = {};
      } else if (kind == "hostPath") {
        s.checkpoint_volume = {Kind::kHostPath, source};
      } else if (kind == "pvc") {
        s.checkpoint_volume = {Kind::kPvc, source};
      } else if (kind == "nfs") {
        s.checkpoint_volume = {Kind::kNfs, source};
      } else {
        return Bad(key, Cat("expected hostPath:/dir, pvc:<claim>, "
                            "nfs:<server>:/dir or none, got \"",
                            value, "\""));
      }
    } else if (key == "checkpoint_mount_path") {
      s.checkpoint_mount_path = value;
    } else {
      return Bad(key, Cat("unknown setting (line ", line_no, ")"));
    }
  }
  // A hostPath volume is mounted where it lies unless told otherwise.
  if (s.checkpoint_volume.kind == CheckpointVolume::Kind::kHostPath &&
      s.checkpoint_mount_path.empty()) {
    s.checkpoint_mount_path = s.checkpoint_volume.source;
  }
  if (absl::Status v = ValidateKubernetesSettings(s); !v.ok()) return v;
  return s;
}

absl::StatusOr<KubernetesSettings> LoadKubernetesSettings(
    const std::string& path) {
  return LoadSettingsFile<KubernetesSettings>(path, "kubernetes",
                                              ParseKubernetesSettings);
}

}  // namespace trainyard::dispatcher::kubernetes
