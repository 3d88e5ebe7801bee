// The backends built into the `trainyard` binary (see registry.h).
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_ALL_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_ALL_H_

#include "absl/status/status.h"

namespace trainyard::dispatcher {

// The backend of a dispatcher whose --backend is not given.
inline constexpr char kDefaultAdapter[] = "sim";

// Registers every built-in backend (sim, slurm) in the adapter registry. The
// first call registers them; every call returns the first call's result.
absl::Status RegisterBuiltinAdapters();

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_ALL_H_
