#include "services/scheduler/policy/snapshot.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainyard::scheduler::policy {

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kUnknown:
      return "unknown";
    case Backend::kSim:
      return "sim";
    case Backend::kSlurm:
      return "slurm";
    case Backend::kKubernetes:
      return "kubernetes";
  }
  return "?";
}

const char* SpotPolicyName(SpotPolicy p) {
  switch (p) {
    case SpotPolicy::kNever:
      return "never";
    case SpotPolicy::kAllowed:
      return "allowed";
    case SpotPolicy::kPreferred:
      return "preferred";
    case SpotPolicy::kRequired:
      return "required";
    case SpotPolicy::kRequiredByBudget:
      return "required by a budget";
  }
  return "?";
}

const char* ResourceName(Resource r) {
  switch (r) {
    case Resource::kGpu:
      return "gpu";
    case Resource::kCpu:
      return "cpu";
    case Resource::kMemory:
      return "memory";
  }
  return "?";
}

Resources& Resources::operator+=(const Resources& o) {
  gpus += o.gpus;
  cpu_millis += o.cpu_millis;
  memory_bytes += o.memory_bytes;
  return *this;
}

Resources& Resources::operator-=(const Resources& o) {
  gpus -= o.gpus;
  cpu_millis -= o.cpu_millis;
  memory_bytes -= o.memory_bytes;
  return *this;
}

namespace {

bool InRange(int64_t id, size_t size) {
  return id >= 0 && static_cast<size_t>(id) < size;
}

bool NonNegative(const Resources& r) {
  return r.gpus >= 0 && r.cpu_millis >= 0 && r.memory_bytes >= 0;
}

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

// Quota entries of a queue or cohort; `field` is e.g. "queues[2].quotas".
absl::Status ValidateQuotas(const Snapshot& s,
                            const std::vector<FlavorQuota>& quotas,
                            const std::string& field) {
  absl::flat_hash_set<FlavorId> seen;
  for (const FlavorQuota& fq : quotas) {
    if (!InRange(fq.flavor, s.flavors.size())) {
      return Invalid(absl::StrCat(field, ": flavor out of range"));
    }
    if (!seen.insert(fq.flavor).second) {
      return Invalid(absl::StrCat(field, ": flavor ", s.flavors[fq.flavor].name,
                                  " listed twice"));
    }
    for (const auto& rq : fq.resources) {
      if (!rq.has_value()) continue;
      if (rq->nominal < 0 || rq->borrowing_limit.value_or(0) < 0 ||
          rq->lending_limit.value_or(0) < 0) {
        return Invalid(absl::StrCat(field, ": negative quota"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSnapshot(const Snapshot& s) {
  for (size_t i = 0; i < s.flavors.size(); ++i) {
    const Flavor& f = s.flavors[i];
    if (f.price_micros_per_gpu_hour < 0) {
      return Invalid(absl::StrCat("flavors[", i,
                                  "].price_micros_per_gpu_hour: must be >= 0"));
    }
    if (f.price_micros_per_cpu_hour < 0) {
      return Invalid(absl::StrCat("flavors[", i,
                                  "].price_micros_per_cpu_hour: must be >= 0"));
    }
    if (f.price_micros_per_gib_hour < 0) {
      return Invalid(absl::StrCat("flavors[", i,
                                  "].price_micros_per_gib_hour: must be >= 0"));
    }
    if (!std::isfinite(f.reclaim_rate_per_hour) ||
        f.reclaim_rate_per_hour < 0.0) {
      return Invalid(absl::StrCat(
          "flavors[", i, "].reclaim_rate_per_hour: must be finite and >= 0"));
    }
    if (f.restart_overhead_micros.has_value() &&
        *f.restart_overhead_micros < 0) {
      return Invalid(absl::StrCat("flavors[", i,
                                  "].restart_overhead_micros: must be >= 0"));
    }
  }
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const Node& n = s.nodes[i];
    if (!InRange(n.flavor, s.flavors.size())) {
      return Invalid(absl::StrCat("nodes[", i, "].flavor: out of range"));
    }
    if (!NonNegative(n.capacity) || !NonNegative(n.used)) {
      return Invalid(absl::StrCat("nodes[", i, "]: negative resources"));
    }
    if (n.backend > Backend::kKubernetes) {
      return Invalid(absl::StrCat("nodes[", i, "].backend: out of range"));
    }
  }
  for (size_t i = 0; i < s.cohorts.size(); ++i) {
    // Walk up; more steps than cohorts means a cycle.
    std::optional<CohortId> c = static_cast<CohortId>(i);
    size_t steps = 0;
    while (c.has_value()) {
      if (!InRange(*c, s.cohorts.size())) {
        return Invalid(absl::StrCat("cohorts[", i, "].parent: out of range"));
      }
      if (++steps > s.cohorts.size()) {
        return Invalid(absl::StrCat("cohorts[", i, "]: cycle in cohort tree"));
      }
      c = s.cohorts[*c].parent;
    }
    absl::Status quotas = ValidateQuotas(
        s, s.cohorts[i].quotas, absl::StrCat("cohorts[", i, "].quotas"));
    if (!quotas.ok()) return quotas;
  }
  for (size_t i = 0; i < s.queues.size(); ++i) {
    const Queue& q = s.queues[i];
    if (q.cohort.has_value() && !InRange(*q.cohort, s.cohorts.size())) {
      return Invalid(absl::StrCat("queues[", i, "].cohort: out of range"));
    }
    if (!(q.weight >= 0.0)) {
      return Invalid(absl::StrCat("queues[", i, "].weight: must be >= 0"));
    }
    if (q.budget.has_value() && !InRange(*q.budget, s.budgets.size())) {
      return Invalid(absl::StrCat("queues[", i, "].budget: out of range"));
    }
    if (q.min_runtime < 0) {
      return Invalid(absl::StrCat("queues[", i, "].min_runtime: must be >= 0"));
    }
    absl::Status quotas =
        ValidateQuotas(s, q.quotas, absl::StrCat("queues[", i, "].quotas"));
    if (!quotas.ok()) return quotas;
  }
  for (size_t i = 0; i < s.running.size(); ++i) {
    const RunningAttempt& r = s.running[i];
    if (!InRange(r.queue, s.queues.size()) ||
        !InRange(r.flavor, s.flavors.size()) ||
        !InRange(r.priority_class, s.priority_classes.size())) {
      return Invalid(absl::StrCat("running[", i, "]: id out of range"));
    }
    for (NodeId n : r.placement) {
      if (!InRange(n, s.nodes.size())) {
        return Invalid(
            absl::StrCat("running[", i, "].placement: node out of range"));
      }
    }
    if (!NonNegative(r.resources) || !NonNegative(r.worker_resources)) {
      return Invalid(absl::StrCat("running[", i, "]: negative resources"));
    }
    if (r.time_limit_micros < 0) {
      return Invalid(
          absl::StrCat("running[", i, "].time_limit_micros: must be >= 0"));
    }
  }
  absl::flat_hash_set<JobId> ids;
  for (size_t i = 0; i < s.pending.size(); ++i) {
    const PendingJob& j = s.pending[i];
    if (!InRange(j.queue, s.queues.size()) ||
        !InRange(j.priority_class, s.priority_classes.size())) {
      return Invalid(absl::StrCat("pending[", i, "]: id out of range"));
    }
    if (j.budget.has_value() && !InRange(*j.budget, s.budgets.size())) {
      return Invalid(absl::StrCat("pending[", i, "].budget: out of range"));
    }
    if (j.tenant_rate_cap.has_value() &&
        !InRange(*j.tenant_rate_cap, s.budgets.size())) {
      return Invalid(
          absl::StrCat("pending[", i, "].tenant_rate_cap: out of range"));
    }
    if (j.project_rate_cap.has_value() &&
        !InRange(*j.project_rate_cap, s.budgets.size())) {
      return Invalid(
          absl::StrCat("pending[", i, "].project_rate_cap: out of range"));
    }
    if (j.workers < 1) {
      return Invalid(
          absl::StrCat("pending[", i, "].workers: must be at least 1"));
    }
    if (!NonNegative(j.worker.AsResources())) {
      return Invalid(
          absl::StrCat("pending[", i, "].worker: negative resources"));
    }
    if (j.time_limit_micros < 0) {
      return Invalid(
          absl::StrCat("pending[", i, "].time_limit_micros: must be >= 0"));
    }
    if (j.expected_runtime_micros < 0) {
      return Invalid(absl::StrCat("pending[", i,
                                  "].expected_runtime_micros: must be >= 0"));
    }
    if (j.checkpoint_interval_micros < 0) {
      return Invalid(absl::StrCat(
          "pending[", i, "].checkpoint_interval_micros: must be >= 0"));
    }
    if (!ids.insert(j.id).second) {
      return Invalid(absl::StrCat("pending[", i, "]: duplicate job id ", j.id));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainyard::scheduler::policy
