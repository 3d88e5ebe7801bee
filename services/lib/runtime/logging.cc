#include "services/lib/runtime/logging.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::runtime {
namespace {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
std::mutex component_mu;
std::string& Component() {
  static std::string* component = new std::string("trainyard");
  return *component;
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(std::string_view text) {
  const std::string lower = absl::AsciiStrToLower(std::string(text));
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level \"", std::string(text),
                   "\" (want debug, info, warning or error)"));
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

void SetMinLogLevel(LogLevel level) { min_level.store(static_cast<int>(level)); }

LogLevel MinLogLevel() { return static_cast<LogLevel>(min_level.load()); }

void SetLogComponent(std::string_view component) {
  std::lock_guard<std::mutex> lock(component_mu);
  Component() = std::string(component);
}

std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

LogField::LogField(std::string_view key, std::string_view value)
    : key_(key), json_(absl::StrCat("\"", JsonEscape(value), "\"")) {}

LogField::LogField(std::string_view key, bool value) : key_(key), json_(value ? "true" : "false") {}

LogField::LogField(std::string_view key, double value) : key_(key) {
  json_ = std::isfinite(value) ? absl::StrFormat("%.17g", value) : "null";
}

LogField::LogField(std::string_view key, const absl::Status& value)
    : LogField(key, std::string_view(value.ToString())) {}

LogField::LogField(std::string_view key, absl::Duration value)
    : LogField(key, std::string_view(absl::FormatDuration(value))) {}

std::string FormatLogLine(absl::Time time, LogLevel level, std::string_view component,
                          std::string_view message, std::initializer_list<LogField> fields) {
  std::string line = absl::StrCat(
      "{\"ts\":\"", absl::FormatTime("%Y-%m-%d%ET%H:%M:%E6SZ", time, absl::UTCTimeZone()),
      "\",\"level\":\"", std::string(LogLevelName(level)), "\",\"component\":\"",
      JsonEscape(component), "\",\"msg\":\"", JsonEscape(message), "\"");
  for (const LogField& f : fields) {
    absl::StrAppend(&line, ",\"", JsonEscape(f.key()), "\":", f.json());
  }
  line += "}";
  return line;
}

void Log(LogLevel level, std::string_view message, std::initializer_list<LogField> fields) {
  if (static_cast<int>(level) < min_level.load(std::memory_order_relaxed)) return;
  std::string component;
  {
    std::lock_guard<std::mutex> lock(component_mu);
    component = Component();
  }
  std::string line = FormatLogLine(absl::Now(), level, component, message, fields);
  line += "\n";
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace trainyard::runtime
