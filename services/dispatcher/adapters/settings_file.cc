#include "services/dispatcher/adapters/settings_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;

absl::StatusOr<std::vector<SettingLine>> ParseSettingLines(
    std::string_view text) {
  std::vector<SettingLine> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(AbslView(text), '\n')) {
    ++line_no;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          Cat("line ", line_no, ": expected `key = value`"));
    }
    out.push_back(
        {.key = std::string(absl::StripAsciiWhitespace(line.substr(0, eq))),
         .value = std::string(absl::StripAsciiWhitespace(line.substr(eq + 1))),
         .line = line_no});
  }
  return out;
}

absl::Status BadSetting(std::string_view key, std::string_view message) {
  return absl::InvalidArgumentError(Cat(key, ": ", message));
}

absl::StatusOr<std::string> ReadSettingsFile(const std::string& path,
                                             std::string_view what) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        Cat(what, " settings file ", path, " cannot be read"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status InSettingsFile(const std::string& path, const absl::Status& s) {
  return absl::Status(s.code(), Cat(path, ": ", s.message()));
}

}  // namespace trainyard::dispatcher
