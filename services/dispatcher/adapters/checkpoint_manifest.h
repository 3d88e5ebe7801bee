// The checkpoint manifest a job writes in its checkpoint directory, read by
// the adapters of backends whose workers share a filesystem with the
// dispatcher (Slurm, Kubernetes with a shared checkpoint volume):
//
//   <dir>/trainyard-checkpoint.json   {"step": 1200, "uri": "step-1200",
//                                      "time": 1700000000}
//
// `uri` may be relative to the directory; `time` (unix seconds, as a number
// or a string, or RFC 3339) defaults to the file's modification time.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_CHECKPOINT_MANIFEST_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_CHECKPOINT_MANIFEST_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/adapter.h"

namespace trainyard::dispatcher {

inline constexpr std::string_view kCheckpointManifest =
    "trainyard-checkpoint.json";

// Parses a checkpoint manifest; a relative uri is resolved against `dir`; a
// missing or unreadable time is InfinitePast. INVALID_ARGUMENT naming the
// field otherwise.
absl::StatusOr<CheckpointInfo> ParseCheckpointManifest(std::string_view body,
                                                       std::string_view dir);

// The local directory of a checkpoint directory setting ("/x", "file:///x"),
// without trailing slashes, or nullopt for remote URIs and relative paths.
std::optional<std::string> LocalCheckpointDir(std::string_view directory);

// Reads `<dir>/trainyard-checkpoint.json` (at most 64 KiB, a regular file):
// the checkpoint it names, its time defaulting to the file's modification
// time; nullopt when there is none, it cannot be read or parsed, or it was
// written before `not_before` less a second (a manifest of an earlier
// attempt).
std::optional<CheckpointInfo> ReadCheckpointManifest(
    const std::string& dir, std::optional<absl::Time> not_before);

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_CHECKPOINT_MANIFEST_H_
