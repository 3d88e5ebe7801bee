// The `sim` dispatcher backend in the adapter registry (registry.h).
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_REGISTRATION_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_REGISTRATION_H_

#include "absl/status/status.h"

namespace trainyard::dispatcher::sim {

// Registers backend "sim" (flags --sim_config, --sim_target; one of them is
// required): the cluster --sim_config describes, run in this process on the
// real clock, or the `trainyard sim-cluster` serving at --sim_target (whose
// cluster id comes from the sim cluster itself; creating the adapter waits up
// to 30 s for it to answer). `trainyard all` runs it only given --sim_config.
absl::Status RegisterSimAdapter();

}  // namespace trainyard::dispatcher::sim

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SIM_SIM_REGISTRATION_H_
