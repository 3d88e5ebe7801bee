#include "services/dispatcher/adapters/all.h"

#include "absl/base/call_once.h"
#include "services/dispatcher/adapters/kubernetes/kube_registration.h"
#include "services/dispatcher/adapters/sim/sim_registration.h"
#include "services/dispatcher/adapters/slurm/slurm_registration.h"

namespace trainyard::dispatcher {

absl::Status RegisterBuiltinAdapters() {
  static absl::once_flag once;
  static absl::Status* result = new absl::Status;  // Never destroyed.
  absl::call_once(once, [] {
    // One line per backend; a new backend adds its own here.
    for (absl::Status s :
         {sim::RegisterSimAdapter(), slurm::RegisterSlurmAdapter(),
          kubernetes::RegisterKubernetesAdapter()}) {
      if (result->ok()) *result = s;
    }
  });
  return *result;
}

}  // namespace trainyard::dispatcher
