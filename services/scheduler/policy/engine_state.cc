#include "services/scheduler/policy/engine_state.h"

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace trainyard::scheduler::policy::internal {

bool EngineState::Reset(const Snapshot& snapshot,
                        const PolicyConfig& policy_config,
                        const QuotaTree& running_quota,
                        const ClassTable& job_classes) {
  s = &snapshot;
  config = &policy_config;
  if (quota.has_value()) {
    *quota = running_quota;
  } else {
    quota.emplace(running_quota);
  }
  const size_t num_flavors = s->flavors.size();
  // The placement indexes of the last cycle describe its `free` at its end:
  // kept, and brought up to date node by node, while the nodes are the same
  // but for their use.
  const bool keep_indexes = indexes.BeginCycle(*s);
  free.resize(s->nodes.size());
  total = Resources{};
  // Whether an index updated here is no longer usable.
  bool unusable = false;
  for (size_t n = 0; n < s->nodes.size(); ++n) {
    const Node& node = s->nodes[n];
    Resources node_free = node.capacity;
    node_free -= node.used;
    if (node.schedulable) total += node.capacity;
    if (keep_indexes && !(node_free == free[n])) {
      if (!indexes.Set(node.flavor, static_cast<NodeId>(n), node_free))
        unusable = true;
    }
    free[n] = node_free;
  }
  if (unusable) indexes.DropUnusable();
  // Quota epochs are per root of the cohort tree.
  root_of_queue.resize(s->queues.size());
  for (size_t q = 0; q < s->queues.size(); ++q) {
    const auto& cohort = s->queues[q].cohort;
    if (!cohort.has_value()) {
      root_of_queue[q] = static_cast<int>(s->cohorts.size() + q);
      continue;
    }
    CohortId c = *cohort;
    while (s->cohorts[c].parent.has_value()) c = *s->cohorts[c].parent;
    root_of_queue[q] = c;
  }
  queues_of_root.resize(s->cohorts.size() + s->queues.size());
  for (std::vector<QueueId>& queues : queues_of_root) queues.clear();
  for (size_t q = 0; q < s->queues.size(); ++q)
    queues_of_root[root_of_queue[q]].push_back(static_cast<QueueId>(q));
  quota_epoch.assign((s->cohorts.size() + s->queues.size()) * num_flavors, 0);
  flavor_epoch.assign(num_flavors, 0);
  classes = &job_classes;
  // Records of earlier cycles are no longer valid.
  bool wrapped = false;
  if (++cycle == 0) {
    for (QuotaAvailable& a : available) a.cycle = 0;
    cycle = 1;
    wrapped = true;
  }
  available.resize(s->queues.size() * num_flavors);
  indexes.ForgetLookups(classes->num_shapes(), num_flavors);
  share.assign(s->queues.size(), 0.0);
  share_valid.assign(s->queues.size(), false);
  budget_remaining.clear();
  for (const Budget& b : s->budgets)
    budget_remaining.push_back(b.remaining_micros);
  budget_epoch.assign(s->queues.size(), 0);
  queues_of_budget.resize(s->budgets.size());
  for (std::vector<QueueId>& queues : queues_of_budget) queues.clear();
  for (size_t q = 0; q < s->queues.size(); ++q) {
    if (const std::optional<BudgetId>& b = s->queues[q].budget; b.has_value())
      queues_of_budget[*b].push_back(static_cast<QueueId>(q));
  }
  // (A queue listed twice for a budget gets two bumps: still a change.)
  for (const auto& [b, q] : classes->JobBudgetQueues()) {
    if (static_cast<size_t>(b) < queues_of_budget.size() &&
        static_cast<size_t>(q) < s->queues.size()) {
      queues_of_budget[b].push_back(q);
    }
  }
  awaited_attempts.clear();
  preempted.clear();
  return wrapped;
}

void EngineState::Admit(const PendingJob& job, JobId id, FlavorId f,
                        std::vector<NodeId> nodes, Decisions& out) {
  Commit(job, f, nodes);
  bool borrowing = false;
  for (Resource r : kAllResources) {
    if (quota->Tracks(job.queue, f, r) &&
        quota->Usage(job.queue, f, r) > quota->Nominal(job.queue, f, r)) {
      borrowing = true;
    }
  }
  out.admissions.push_back({.job = id,
                            .queue = job.queue,
                            .flavor = f,
                            .worker_nodes = std::move(nodes),
                            .borrowing = borrowing});
}

void EngineState::Commit(const PendingJob& job, FlavorId f,
                         const std::vector<NodeId>& nodes) {
  const Resources worker = job.worker.AsResources();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeId n = nodes[i];
    free[n] -= worker;
    if (i + 1 < nodes.size() && nodes[i + 1] == n) continue;
    indexes.Update(f, n, free[n]);
  }
  quota->Add(job.queue, f, worker * job.workers);
  Spend(job, f);
  share_valid[job.queue] = false;
  ++flavor_epoch[f];
  ++QuotaEpoch(root_of_queue[job.queue], f);
  ++events;
}

}  // namespace trainyard::scheduler::policy::internal
