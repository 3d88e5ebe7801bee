// Structured logging: one JSON object per line on stderr.
//
//   Log(LogLevel::kInfo, "api serving", {{"grpc", "127.0.0.1:50051"}, {"jobs", 12}});
//   => {"ts":"2026-11-23T07:00:00.123456Z","level":"info","component":"api",
//       "msg":"api serving","grpc":"127.0.0.1:50051","jobs":12}
//
// Lines are written with one write(2) so concurrent threads never interleave.
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_LOGGING_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_LOGGING_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::runtime {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug" | "info" | "warning" (or "warn") | "error", case-insensitive.
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view text);
std::string_view LogLevelName(LogLevel level);

// Process-wide settings; safe to call at any time.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
void SetLogComponent(std::string_view component);

// One key/value of a log line; the value keeps its JSON type.
class LogField {
 public:
  LogField(std::string_view key, std::string_view value);
  LogField(std::string_view key, const std::string& value)
      : LogField(key, std::string_view(value)) {}
  LogField(std::string_view key, const char* value)
      : LogField(key, std::string_view(value == nullptr ? "" : value)) {}
  LogField(std::string_view key, bool value);
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  LogField(std::string_view key, T value)
      : key_(key), json_(std::to_string(value)) {}
  LogField(std::string_view key, double value);
  LogField(std::string_view key, const absl::Status& value);
  LogField(std::string_view key, absl::Duration value);

  const std::string& key() const { return key_; }
  // The value already rendered as JSON.
  const std::string& json() const { return json_; }

 private:
  std::string key_;
  std::string json_;
};

// Escapes `text` for use inside a JSON string literal (without the quotes).
std::string JsonEscape(std::string_view text);

// Renders one line (without the newline); exposed for tests.
std::string FormatLogLine(absl::Time time, LogLevel level, std::string_view component,
                          std::string_view message, std::initializer_list<LogField> fields);

void Log(LogLevel level, std::string_view message, std::initializer_list<LogField> fields = {});

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_LOGGING_H_
