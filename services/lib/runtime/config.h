// Optional config files for the `trainyard` binary.
//
// A config file holds `key = value` lines whose keys are flag names (a leading `--` is
// allowed); `#` starts a comment; blank lines are ignored. Flags given on the command line
// win over the file. The file is named with --config=FILE (or --config FILE).
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_CONFIG_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard::runtime {

// Parses the text of a config file into `--key=value` arguments, in file order.
// Errors name the line number.
absl::StatusOr<std::vector<std::string>> ParseConfigText(std::string_view text);

// Reads and parses a config file.
absl::StatusOr<std::vector<std::string>> ReadConfigFile(const std::string& path);

// Parses the command line with Abseil after splicing in the config file's flags (before the
// command-line ones, so the command line wins). Returns the positional arguments, argv[0]
// first, as absl::ParseCommandLine does. Exits with status 2 on a bad config file.
std::vector<char*> ParseFlagsWithConfig(int argc, char** argv);

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_CONFIG_H_
