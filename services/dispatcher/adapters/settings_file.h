// The `key = value` settings files of the backends (the Slurm adapter's
// --slurm_config, the Kubernetes adapter's --kube_settings): one setting a
// line, `#` starts a comment, blank lines are skipped, whitespace around
// keys and values is dropped. Each backend interprets its own keys.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SETTINGS_FILE_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SETTINGS_FILE_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::dispatcher {

struct SettingLine {
  std::string key;
  std::string value;
  // 1-based line number.
  int line = 0;
};

// The settings of `text`, in order. INVALID_ARGUMENT "line N: expected `key =
// value`" for a line without '='.
absl::StatusOr<std::vector<SettingLine>> ParseSettingLines(
    std::string_view text);

// INVALID_ARGUMENT "<key>: <message>".
absl::Status BadSetting(std::string_view key, std::string_view message);

// Reads file `path` and parses it with `parse`: NOT_FOUND "<what> settings
// file <path> cannot be read", or parse's error with "<path>: " before it.
template <typename Settings>
absl::StatusOr<Settings> LoadSettingsFile(
    const std::string& path, std::string_view what,
    const std::function<absl::StatusOr<Settings>(std::string_view)>& parse);

// The file's text (NOT_FOUND as above), and a status with "<path>: " before
// its message: the two halves of LoadSettingsFile.
absl::StatusOr<std::string> ReadSettingsFile(const std::string& path,
                                             std::string_view what);
absl::Status InSettingsFile(const std::string& path, const absl::Status& s);

template <typename Settings>
absl::StatusOr<Settings> LoadSettingsFile(
    const std::string& path, std::string_view what,
    const std::function<absl::StatusOr<Settings>(std::string_view)>& parse) {
  absl::StatusOr<std::string> text = ReadSettingsFile(path, what);
  if (!text.ok()) return text.status();
  absl::StatusOr<Settings> s = parse(*text);
  if (!s.ok()) return InSettingsFile(path, s.status());
  return s;
}

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SETTINGS_FILE_H_
