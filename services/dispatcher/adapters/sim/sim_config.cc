#include "services/dispatcher/adapters/sim/sim_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"

namespace trainyard::dispatcher::sim {
namespace {

using ::google::protobuf::TextFormat;
using ::trainyard::domain::Cat;
using ::trainyard::domain::FieldError;
namespace reason = ::trainyard::domain::reason;
namespace v1 = ::trainyard::v1;

constexpr int32_t kMaxNodesPerEntry = 100'000;

// One step of a field path: a field of the enclosing message and, for
// repeated fields, the element index (-1 for singular fields).
struct PathElem {
  std::string field;
  int index = -1;
};

// A semantic error: the field path (for locating it in the text) and the
// FieldError status.
struct ConfigError {
  std::vector<PathElem> path;
  absl::Status status;
};

std::string PathString(const std::vector<PathElem>& path) {
  std::string out;
  for (const PathElem& e : path) {
    if (!out.empty()) out += '.';
    out += e.field;
    if (e.index >= 0) out += Cat("[", e.index, "]");
  }
  return out;
}

ConfigError Error(std::vector<PathElem> path, std::string_view reason_code,
                  std::string_view message) {
  absl::Status status = FieldError(PathString(path), reason_code, message);
  return ConfigError{std::move(path), std::move(status)};
}

std::string QuotedEscaped(std::string_view s) {
  return Cat("\"", absl::CHexEscape(domain::AbslView(s.substr(0, 128))), "\"");
}

bool BadRate(double rate) { return !std::isfinite(rate) || rate < 0; }

std::optional<ConfigError> CheckDuration(const google::protobuf::Duration& d,
                                         std::vector<PathElem> path) {
  absl::StatusOr<absl::Duration> value = domain::ToDuration(d, PathString(path));
  if (!value.ok()) {
    return Error(std::move(path), reason::kInvalidValue, "malformed duration");
  }
  if (*value < absl::ZeroDuration()) {
    return Error(std::move(path), reason::kOutOfRange, "must not be negative");
  }
  return std::nullopt;
}

std::string GeneratedName(const v1::SimNodes& entry, int i) {
  const int first = entry.first_index() > 0 ? entry.first_index() : 1;
  return absl::StrFormat("%s%04d", entry.prefix(), first + i);
}

std::optional<ConfigError> Check(const v1::SimClusterConfig& config) {
  if (config.cluster().empty()) {
    return Error({{"cluster"}}, reason::kRequired, "required");
  }
  if (!domain::IsValidId(config.cluster())) {
    return Error({{"cluster"}}, reason::kInvalidName,
                 Cat("invalid cluster id ", QuotedEscaped(config.cluster())));
  }
  if (config.pools().empty()) {
    return Error({{"pools"}}, reason::kRequired, "at least one pool required");
  }
  absl::flat_hash_map<std::string, int> pools;  // name → index
  for (int i = 0; i < config.pools_size(); ++i) {
    const v1::SimPool& pool = config.pools(i);
    const auto at = [i](const char* field) {
      return std::vector<PathElem>{{"pools", i}, {field}};
    };
    if (pool.name().empty()) {
      return Error(at("name"), reason::kRequired, "required");
    }
    if (!domain::IsValidId(pool.name())) {
      return Error(at("name"), reason::kInvalidName,
                   Cat("invalid pool id ", QuotedEscaped(pool.name())));
    }
    if (auto [it, inserted] = pools.emplace(pool.name(), i); !inserted) {
      return Error(at("name"), reason::kDuplicate,
                   Cat("duplicate pool ", QuotedEscaped(pool.name()),
                       " (also pools[", it->second, "])"));
    }
    if (pool.flavor().empty()) {
      return Error(at("flavor"), reason::kRequired, "required");
    }
    if (!domain::IsValidId(pool.flavor())) {
      return Error(at("flavor"), reason::kInvalidName,
                   Cat("invalid flavor id ", QuotedEscaped(pool.flavor())));
    }
    if (pool.flavor_kind() == v1::FLAVOR_KIND_UNSPECIFIED) {
      return Error(at("flavor_kind"), reason::kRequired,
                   "required (FLAVOR_KIND_ON_DEMAND, FLAVOR_KIND_RESERVED or "
                   "FLAVOR_KIND_SPOT)");
    }
    if (!v1::FlavorKind_IsValid(pool.flavor_kind())) {
      return Error(at("flavor_kind"), reason::kInvalidValue,
                   Cat("unknown flavor kind ", pool.flavor_kind()));
    }
    if (pool.gpu_hour_price_micros() < 0) {
      return Error(at("gpu_hour_price_micros"), reason::kOutOfRange,
                   "must not be negative");
    }
    if (BadRate(pool.reclaim_rate_per_hour())) {
      return Error(at("reclaim_rate_per_hour"), reason::kOutOfRange,
                   "must be a finite number >= 0");
    }
    if (pool.reclaim_rate_per_hour() > 0 &&
        pool.flavor_kind() != v1::FLAVOR_KIND_SPOT) {
      return Error(at("reclaim_rate_per_hour"), reason::kInconsistent,
                   "only spot pools are reclaimed");
    }
  }

  if (config.nodes().empty()) {
    return Error({{"nodes"}}, reason::kRequired, "at least one node required");
  }
  absl::flat_hash_map<std::string, int> names;  // node name → entry index
  for (int i = 0; i < config.nodes_size(); ++i) {
    const v1::SimNodes& entry = config.nodes(i);
    const auto at = [i](const char* field) {
      return std::vector<PathElem>{{"nodes", i}, {field}};
    };
    const bool named = !entry.name().empty();
    const bool generated = !entry.prefix().empty() || entry.count() != 0;
    if (named == generated) {
      return Error({{"nodes", i}}, reason::kInconsistent,
                   "set either name, or prefix and count");
    }
    if (generated) {
      if (entry.prefix().empty()) {
        return Error(at("prefix"), reason::kRequired, "required with count");
      }
      if (entry.count() < 1 || entry.count() > kMaxNodesPerEntry) {
        return Error(at("count"), reason::kOutOfRange,
                     Cat("must be between 1 and ", kMaxNodesPerEntry));
      }
      if (entry.first_index() < 0) {
        return Error(at("first_index"), reason::kOutOfRange,
                     "must not be negative");
      }
    } else if (entry.first_index() != 0) {
      return Error(at("first_index"), reason::kInconsistent,
                   "only with prefix and count");
    }
    if (entry.pool().empty()) {
      return Error(at("pool"), reason::kRequired, "required");
    }
    if (!pools.contains(entry.pool())) {
      return Error(at("pool"), reason::kInvalidValue,
                   Cat("unknown pool ", QuotedEscaped(entry.pool())));
    }
    const v1::Resources& cap = entry.capacity();
    const auto cap_at = [i](const char* field) {
      return std::vector<PathElem>{{"nodes", i}, {"capacity"}, {field}};
    };
    if (cap.gpus() < 0) {
      return Error(cap_at("gpus"), reason::kOutOfRange, "must not be negative");
    }
    if (cap.cpu_millis() < 0) {
      return Error(cap_at("cpu_millis"), reason::kOutOfRange,
                   "must not be negative");
    }
    if (cap.memory_bytes() < 0) {
      return Error(cap_at("memory_bytes"), reason::kOutOfRange,
                   "must not be negative");
    }
    if (!domain::IsValidGpuModel(cap.gpu_model())) {
      return Error(cap_at("gpu_model"), reason::kInvalidValue,
                   Cat("invalid GPU model ", QuotedEscaped(cap.gpu_model())));
    }
    const int count = named ? 1 : entry.count();
    for (int k = 0; k < count; ++k) {
      const std::string name = named ? entry.name() : GeneratedName(entry, k);
      const char* field = named ? "name" : "prefix";
      if (!domain::IsValidNodeId(name)) {
        return Error(at(field), reason::kInvalidName,
                     Cat("invalid node name ", QuotedEscaped(name)));
      }
      if (auto [it, inserted] = names.emplace(name, i); !inserted) {
        return Error(at(field), reason::kDuplicate,
                     Cat("duplicate node ", QuotedEscaped(name),
                         " (also nodes[", it->second, "])"));
      }
    }
  }

  const v1::SimFaults& faults = config.faults();
  const auto fault_at = [](const char* field) {
    return std::vector<PathElem>{{"faults"}, {field}};
  };
  if (BadRate(faults.spot_reclaim_rate_per_hour())) {
    return Error(fault_at("spot_reclaim_rate_per_hour"), reason::kOutOfRange,
                 "must be a finite number >= 0");
  }
  if (BadRate(faults.node_failure_rate_per_hour())) {
    return Error(fault_at("node_failure_rate_per_hour"), reason::kOutOfRange,
                 "must be a finite number >= 0");
  }
  if (BadRate(faults.job_crash_rate_per_hour())) {
    return Error(fault_at("job_crash_rate_per_hour"), reason::kOutOfRange,
                 "must be a finite number >= 0");
  }
  if (auto e = CheckDuration(faults.node_repair_time(),
                             fault_at("node_repair_time"))) {
    return e;
  }
  if (auto e = CheckDuration(config.default_job_duration(),
                             {{"default_job_duration"}})) {
    return e;
  }
  if (absl::StatusOr<absl::Duration> d =
          domain::ToDuration(config.default_job_duration(), "");
      d.ok() && *d > kMaxJobDuration) {
    return Error(
        {{"default_job_duration"}}, reason::kOutOfRange,
        Cat("must be at most ", absl::FormatDuration(kMaxJobDuration)));
  }
  if (auto e = CheckDuration(config.launch_delay(), {{"launch_delay"}})) {
    return e;
  }
  return std::nullopt;
}

// The text position of `path` in a parse, or of its nearest enclosing
// message that appears in the text; line -1 if none.
TextFormat::ParseLocation Locate(const TextFormat::ParseInfoTree& root,
                                 const std::vector<PathElem>& path) {
  TextFormat::ParseLocation best;
  const TextFormat::ParseInfoTree* tree = &root;
  const google::protobuf::Descriptor* descriptor =
      v1::SimClusterConfig::descriptor();
  for (const PathElem& e : path) {
    if (tree == nullptr || descriptor == nullptr) break;
    const google::protobuf::FieldDescriptor* field =
        descriptor->FindFieldByName(e.field);
    if (field == nullptr) break;
    const int index = field->is_repeated() ? e.index : -1;
    if (field->is_repeated() && index < 0) {
      // The repeated field as a whole: its first element, if any.
      TextFormat::ParseLocation loc = tree->GetLocation(field, 0);
      if (loc.line >= 0) best = loc;
      break;
    }
    TextFormat::ParseLocation loc = tree->GetLocation(field, index);
    if (loc.line < 0) break;
    best = loc;
    if (field->cpp_type() !=
        google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      break;
    }
    tree = tree->GetTreeForNested(field, index);
    descriptor = field->message_type();
  }
  return best;
}

// Keeps the first error the text-format parser reports.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!has_error_) {
      has_error_ = true;
      line_ = line;
      column_ = column;
      message_ = message;
    }
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber,
                  const std::string&) override {}

  bool has_error() const { return has_error_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  bool has_error_ = false;
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

std::string Position(std::string_view source, int line, int column) {
  if (line < 0) return Cat(source, ": ");
  return Cat(source, ":", line + 1, ":", column + 1, ": ");
}

}  // namespace

absl::Status ValidateSimConfig(const v1::SimClusterConfig& config) {
  std::optional<ConfigError> error = Check(config);
  return error.has_value() ? error->status : absl::OkStatus();
}

absl::StatusOr<v1::SimClusterConfig> ParseSimConfig(std::string_view text,
                                                    std::string_view source) {
  v1::SimClusterConfig config;
  TextFormat::Parser parser;
  FirstErrorCollector errors;
  TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(std::string(text), &config)) {
    const std::string message =
        errors.has_error() ? errors.message() : "malformed text format";
    return absl::InvalidArgumentError(
        Cat(Position(source, errors.has_error() ? errors.line() : -1,
                     errors.column()),
            message));
  }
  std::optional<ConfigError> error = Check(config);
  if (error.has_value()) {
    const TextFormat::ParseLocation loc = Locate(tree, error->path);
    return domain::AttachErrorInfo(
        absl::InvalidArgumentError(Cat(Position(source, loc.line, loc.column),
                                       domain::StdView(error->status.message()))),
        PathString(error->path), domain::ErrorReason(error->status));
  }
  return config;
}

absl::StatusOr<v1::SimClusterConfig> LoadSimConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        Cat("cannot read sim config ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::NotFoundError(
        Cat("cannot read sim config ", path, ": ", std::strerror(errno)));
  }
  return ParseSimConfig(text.str(), path);
}

std::vector<ExpandedNode> ExpandNodes(const v1::SimClusterConfig& config) {
  std::vector<ExpandedNode> out;
  for (int i = 0; i < config.nodes_size(); ++i) {
    const v1::SimNodes& entry = config.nodes(i);
    if (!entry.name().empty()) {
      out.push_back({entry.name(), i});
      continue;
    }
    for (int k = 0; k < entry.count(); ++k) {
      out.push_back({GeneratedName(entry, k), i});
    }
  }
  return out;
}

}  // namespace trainyard::dispatcher::sim
