#include "services/dispatcher/adapters/slurm/slurm_settings.h"

#include <csignal>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/dispatcher/adapters/settings_file.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::slurm {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;
namespace {

absl::Status Bad(std::string_view key, std::string_view message) {
  return BadSetting(key, message);
}

absl::StatusOr<bool> ParseBool(std::string_view key, std::string_view v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return Bad(key, Cat("expected true or false, got \"", v, "\""));
}

absl::StatusOr<absl::Duration> ParsePositiveDuration(std::string_view key,
                                                     std::string_view v) {
  absl::Duration d;
  if (!absl::ParseDuration(AbslView(v), &d) || d <= absl::ZeroDuration() ||
      d == absl::InfiniteDuration()) {
    return Bad(key, Cat("expected a positive duration like \"10s\", "
                        "got \"",
                        v, "\""));
  }
  return d;
}

bool IsSimpleName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
        c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

int ParseSignal(std::string_view s) {
  std::string v = absl::AsciiStrToUpper(AbslView(s));
  absl::string_view name = v;
  absl::ConsumePrefix(&name, "SIG");
  int n = 0;
  if (absl::SimpleAtoi(name, &n)) return n >= 1 && n <= 64 ? n : 0;
  static const std::pair<const char*, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},
      {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
      {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"ALRM", SIGALRM}};
  for (const auto& [n2, sig] : kNames) {
    if (name == n2) return sig;
  }
  return 0;
}

absl::Status ValidateSlurmSettings(const SlurmSettings& s) {
  if (s.rest_url.empty()) return Bad("rest_url", "required");
  if (!absl::StartsWith(s.rest_url, "http://") &&
      !absl::StartsWith(s.rest_url, "https://") &&
      !absl::StartsWith(s.rest_url, "unix:/")) {
    return Bad("rest_url",
               Cat("expected http://host:port, https://host:port or "
                   "unix:/path, got \"",
                   s.rest_url, "\""));
  }
  if (!IsSimpleName(s.api_version) || s.api_version[0] != 'v') {
    return Bad("api_version",
               Cat("expected e.g. v0.0.38, got \"", s.api_version, "\""));
  }
  if (s.jwt_key_file.empty() && s.token.empty()) {
    return Bad("jwt_key_file", "one of jwt_key_file or token is required");
  }
  if (!s.jwt_key_file.empty() && !s.token.empty()) {
    return Bad("token", "set either jwt_key_file or token, not both");
  }
  if (!IsSimpleName(s.token_user)) {
    return Bad("token_user", "required (a user name)");
  }
  if (!s.user.empty() && !IsSimpleName(s.user)) {
    return Bad("user", Cat("not a user name: \"", s.user, "\""));
  }
  if (s.token_lifetime < absl::Seconds(30)) {
    return Bad("token_lifetime", "at least 30s");
  }
  if (s.partitions.empty()) return Bad("partition", "at least one required");
  for (size_t i = 0; i < s.partitions.size(); ++i) {
    const SlurmPartition& p = s.partitions[i];
    const std::string field = Cat("partition[", i, "]");
    if (!IsSimpleName(p.flavor) || !IsSimpleName(p.partition) ||
        (!p.pool.empty() && !IsSimpleName(p.pool))) {
      return Bad(field, "expected flavor:partition[:pool] of simple names");
    }
    for (size_t j = 0; j < i; ++j) {
      if (s.partitions[j].flavor == p.flavor) {
        return Bad(field, Cat("flavor \"", p.flavor, "\" twice"));
      }
    }
  }
  if (s.stop_signal < 1 || s.stop_signal > 64) {
    return Bad("stop_signal", "expected a signal such as USR1 or TERM");
  }
  if (s.working_dir.empty() || s.working_dir[0] != '/') {
    return Bad("working_dir", "an absolute path is required");
  }
  if (!s.output_dir.empty() && s.output_dir[0] != '/') {
    return Bad("output_dir", "must be an absolute path");
  }
  if (!s.job_name_prefix.empty() && !IsSimpleName(s.job_name_prefix)) {
    return Bad("job_name_prefix",
               "letters, digits, '-', '_' and '.' only (at most 64)");
  }
  for (const auto& [key, words] :
       {std::pair<std::string_view, const std::vector<std::string>*>{
            "container_srun_args", &s.container_srun_args},
        {"container_exec", &s.container_exec}}) {
    if (words->empty()) continue;
    bool names_image = false;
    for (const std::string& w : *words)
      names_image |= absl::StrContains(w, "{image}");
    if (!names_image) {
      return Bad(key, "must name the image as {image} in one of its words");
    }
  }
  if (s.connect_timeout <= absl::ZeroDuration()) {
    return Bad("connect_timeout", "must be positive");
  }
  if (s.request_timeout <= absl::ZeroDuration()) {
    return Bad("request_timeout", "must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<SlurmSettings> ParseSlurmSettings(std::string_view text) {
  SlurmSettings s;
  bool partitions_seen = false;
  absl::StatusOr<std::vector<SettingLine>> lines = ParseSettingLines(text);
  if (!lines.ok()) return lines.status();
  for (const SettingLine& setting : *lines) {
    const std::string& key = setting.key;
    const std::string& value = setting.value;
    const int line_no = setting.line;
    if (key == "rest_url") {
      s.rest_url = value;
    } else if (key == "api_version") {
      s.api_version = value;
    } else if (key == "jwt_key_file") {
      s.jwt_key_file = value;
    } else if (key == "token") {
      s.token = value;
    } else if (key == "token_user") {
      s.token_user = value;
    } else if (key == "user") {
      s.user = value;
    } else if (key == "token_lifetime") {
      absl::StatusOr<absl::Duration> d = ParsePositiveDuration(key, value);
      if (!d.ok()) return d.status();
      s.token_lifetime = *d;
    } else if (key == "partition") {
      if (!partitions_seen) s.partitions.clear();
      partitions_seen = true;
      std::vector<std::string> parts = absl::StrSplit(value, ':');
      if (parts.size() < 2 || parts.size() > 3) {
        return Bad(
            key, Cat("expected flavor:partition[:pool], got \"", value, "\""));
      }
      s.partitions.push_back(
          {parts[0], parts[1], parts.size() == 3 ? parts[2] : parts[1]});
    } else if (key == "gpu_model") {
      s.gpu_model = value;
    } else if (key == "stop_signal") {
      s.stop_signal = ParseSignal(value);
      if (s.stop_signal == 0) {
        return Bad(key, Cat("expected a signal such as USR1 or "
                            "TERM, got \"",
                            value, "\""));
      }
    } else if (key == "account") {
      s.account = value;
    } else if (key == "working_dir") {
      s.working_dir = value;
    } else if (key == "output_dir") {
      s.output_dir = value;
    } else if (key == "pin_nodes") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      s.pin_nodes = *b;
    } else if (key == "read_checkpoints") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      s.read_checkpoints = *b;
    } else if (key == "connect_timeout") {
      absl::StatusOr<absl::Duration> d = ParsePositiveDuration(key, value);
      if (!d.ok()) return d.status();
      s.connect_timeout = *d;
    } else if (key == "request_timeout") {
      absl::StatusOr<absl::Duration> d = ParsePositiveDuration(key, value);
      if (!d.ok()) return d.status();
      s.request_timeout = *d;
    } else if (key == "ca_file") {
      s.ca_file = value;
    } else if (key == "insecure_skip_verify") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      s.insecure_skip_verify = *b;
    } else if (key == "job_name_prefix") {
      s.job_name_prefix = value;
    } else if (key == "container_srun_args" || key == "container_exec") {
      std::vector<std::string> words =
          absl::StrSplit(value, ' ', absl::SkipEmpty());
      (key == "container_exec" ? s.container_exec : s.container_srun_args) =
          std::move(words);
    } else if (key == "default_path") {
      s.default_path = value;
    } else {
      return Bad(key, Cat("unknown setting (line ", line_no, ")"));
    }
  }
  if (absl::Status v = ValidateSlurmSettings(s); !v.ok()) return v;
  return s;
}

absl::StatusOr<SlurmSettings> LoadSlurmSettings(const std::string& path) {
  return LoadSettingsFile<SlurmSettings>(path, "slurm", ParseSlurmSettings);
}

}  // namespace trainyard::dispatcher::slurm
