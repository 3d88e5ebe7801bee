// The `slurm` dispatcher backend in the adapter registry (registry.h).
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_REGISTRATION_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_REGISTRATION_H_

#include "absl/status/status.h"

namespace trainyard::dispatcher::slurm {

// Registers backend "slurm" (docs/slurm.md): the adapter settings of
// --slurm_config (required), for the cluster --slurm_cluster.
// `trainyard all --backend=slurm` always runs it.
absl::Status RegisterSlurmAdapter();

}  // namespace trainyard::dispatcher::slurm

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_REGISTRATION_H_
