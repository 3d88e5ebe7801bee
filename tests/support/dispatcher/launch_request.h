// LaunchRequests for the adapters' tests.
#ifndef TRAINYARD_TESTS_SUPPORT_DISPATCHER_LAUNCH_REQUEST_H_
#define TRAINYARD_TESTS_SUPPORT_DISPATCHER_LAUNCH_REQUEST_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "services/dispatcher/adapters/adapter.h"

namespace trainyard::dispatcher {

// The request of attempt `attempt` of job `job` of `tenant`, named
// BackendJobName(job, attempt): one worker on each of `nodes`, each asking for
// `gpus` GPUs. The rest of the spec, the flavor and the env are the caller's.
inline LaunchRequest AttemptRequest(int64_t job, int32_t attempt,
                                    std::string tenant,
                                    std::vector<std::string> nodes,
                                    int32_t gpus) {
  LaunchRequest r;
  r.name = BackendJobName(job, attempt);
  r.job_id = job;
  r.attempt = attempt;
  r.tenant = std::move(tenant);
  r.spec.set_workers(static_cast<int32_t>(nodes.size()));
  r.spec.mutable_resources()->set_gpus(gpus);
  r.worker_nodes = std::move(nodes);
  return r;
}

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_TESTS_SUPPORT_DISPATCHER_LAUNCH_REQUEST_H_
