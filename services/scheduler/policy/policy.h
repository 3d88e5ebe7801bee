// The scheduling policy: Decide(const Snapshot&) -> Decisions, a pure and
// deterministic function (same snapshot => identical decisions). See
// docs/scheduling.md for the rules. The decision types are in decisions.h,
// the settings in policy_config.h.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_POLICY_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_POLICY_H_

#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

// One cycle's decisions for `snapshot`; an invalid snapshot (ValidateSnapshot)
// leaves every job pending with INVALID_SNAPSHOT.
Decisions Decide(const Snapshot& snapshot, const PolicyConfig& config = {});

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_POLICY_H_
