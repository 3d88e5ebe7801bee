#include "services/dispatcher/adapters/checkpoint_manifest.h"

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher {
namespace {

namespace reason = ::trainyard::domain::reason;
using Json = nlohmann::json;

constexpr size_t kMaxManifestBytes = 64 * 1024;

// A JSON integer (or an integral float) as int64.
std::optional<int64_t> IntOf(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 &&
        d == static_cast<double>(static_cast<int64_t>(d))) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<CheckpointInfo> ParseCheckpointManifest(std::string_view body,
                                                       std::string_view dir) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return domain::FieldError(kCheckpointManifest, reason::kInvalidValue,
                              "not a JSON object");
  }
  CheckpointInfo c;
  std::optional<int64_t> step;
  if (auto it = j.find("step"); it != j.end()) step = IntOf(*it);
  if (!step.has_value() || *step < 0) {
    return domain::FieldError("step", reason::kRequired,
                              "a non-negative integer is required");
  }
  c.step = *step;
  if (auto it = j.find("uri"); it != j.end() && it->is_string()) {
    c.uri = it->get<std::string>();
  }
  if (c.uri.empty()) {
    return domain::FieldError("uri", reason::kRequired, "required");
  }
  if (c.uri[0] != '/' && !absl::StrContains(c.uri, "://")) {
    c.uri = domain::Cat(dir, "/", c.uri);
  }
  c.time = absl::InfinitePast();
  if (auto t = j.find("time"); t != j.end()) {
    std::optional<int64_t> secs = IntOf(*t);
    if (!secs.has_value() && t->is_string()) {
      const std::string text = t->get<std::string>();
      absl::Time parsed;
      std::string err;
      int64_t n = 0;
      if (absl::SimpleAtoi(text, &n)) {
        secs = n;
      } else if (absl::ParseTime(absl::RFC3339_full, text, &parsed, &err)) {
        c.time = parsed;
      }
    }
    if (secs.has_value() && *secs > 0 && *secs < (int64_t{1} << 40)) {
      c.time = absl::FromUnixSeconds(*secs);
    }
  }
  return c;
}

std::optional<std::string> LocalCheckpointDir(std::string_view directory) {
  if (directory.substr(0, 7) == "file://") directory.remove_prefix(7);
  if (directory.empty() || directory[0] != '/') return std::nullopt;
  std::string out(directory);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::optional<CheckpointInfo> ReadCheckpointManifest(
    const std::string& dir, std::optional<absl::Time> not_before) {
  const std::string path = domain::Cat(dir, "/", kCheckpointManifest);
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<size_t>(st.st_size) > kMaxManifestBytes) {
    return std::nullopt;
  }
  const absl::Time mtime = absl::FromUnixSeconds(st.st_mtim.tv_sec) +
                           absl::Nanoseconds(st.st_mtim.tv_nsec);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<CheckpointInfo> c = ParseCheckpointManifest(ss.str(), dir);
  if (!c.ok()) return std::nullopt;
  if (c->time == absl::InfinitePast()) c->time = mtime;
  if (not_before.has_value() && c->time < *not_before - absl::Seconds(1)) {
    return std::nullopt;
  }
  return *std::move(c);
}

}  // namespace trainyard::dispatcher
