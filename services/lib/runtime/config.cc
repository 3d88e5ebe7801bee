#include "services/lib/runtime/config.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, config, "",
          "Optional config file of `flag = value` lines; command-line flags override it.");

namespace trainyard::runtime {

absl::StatusOr<std::vector<std::string>> ParseConfigText(std::string_view text) {
  std::vector<std::string> args;
  std::istringstream in{std::string(text)};
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::string trimmed(absl::StripAsciiWhitespace(line));
    if (trimmed.empty()) continue;
    size_t eq = trimmed.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": want `key = value`, got \"", trimmed, "\""));
    }
    std::string key(absl::StripAsciiWhitespace(trimmed.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(trimmed.substr(eq + 1)));
    while (absl::StartsWith(key, "-")) key.erase(0, 1);
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", number, ": empty key"));
    }
    if (key == "config") {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": a config file cannot name another config file"));
    }
    if (value.size() >= 2 && ((value.front() == '"' && value.back() == '"') ||
                              (value.front() == '\'' && value.back() == '\''))) {
      value = value.substr(1, value.size() - 2);
    }
    args.push_back(absl::StrCat("--", key, "=", value));
  }
  return args;
}

absl::StatusOr<std::vector<std::string>> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<std::vector<std::string>> args = ParseConfigText(buffer.str());
  if (!args.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", path, ": ", args.status().message()));
  }
  return args;
}

std::vector<char*> ParseFlagsWithConfig(int argc, char** argv) {
  std::string config_path;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") break;
    for (std::string_view prefix : {"--config=", "-config="}) {
      if (arg.substr(0, prefix.size()) == prefix) config_path = std::string(arg.substr(prefix.size()));
    }
    if ((arg == "--config" || arg == "-config") && i + 1 < argc) config_path = argv[i + 1];
  }
  // Storage that outlives the returned pointers.
  static std::vector<std::string>* storage = new std::vector<std::string>();
  static std::vector<char*>* spliced = new std::vector<char*>();
  storage->clear();
  if (!config_path.empty()) {
    absl::StatusOr<std::vector<std::string>> args = ReadConfigFile(config_path);
    if (!args.ok()) {
      std::cerr << args.status().message() << "\n";
      std::exit(2);
    }
    *storage = *std::move(args);
  }
  spliced->clear();
  spliced->push_back(argv[0]);
  for (std::string& s : *storage) spliced->push_back(s.data());
  for (int i = 1; i < argc; ++i) spliced->push_back(argv[i]);
  return absl::ParseCommandLine(static_cast<int>(spliced->size()), spliced->data());
}

}  // namespace trainyard::runtime
