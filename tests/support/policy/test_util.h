// Test helpers: a small builder for snapshots, and the snapshot after a
// cycle's decisions take effect (ApplyDecisions).
#ifndef TRAINYARD_TESTS_SUPPORT_POLICY_TEST_UTIL_H_
#define TRAINYARD_TESTS_SUPPORT_POLICY_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::testing {

inline constexpr int64_t kGiB = int64_t{1} << 30;
inline constexpr TimeMicros kHour = int64_t{3600} * 1000 * 1000;
inline constexpr TimeMicros kMinute = kHour / 60;

class SnapshotBuilder {
 public:
  SnapshotBuilder() {
    s_.now = 1000 * kHour;
    s_.priority_classes.push_back({.name = "default", .value = 0});
  }

  Snapshot& snapshot() { return s_; }
  const Snapshot& Build() const { return s_; }

  FlavorId AddFlavor(std::string name,
                     FlavorKind kind = FlavorKind::kOnDemand) {
    s_.flavors.push_back({.name = std::move(name), .kind = kind});
    return static_cast<FlavorId>(s_.flavors.size() - 1);
  }

  NodeId AddNode(FlavorId flavor, int64_t gpus, TopologyLabel block = kNoLabel,
                 TopologyLabel rack = kNoLabel,
                 GpuModelId model = kAnyGpuModel) {
    const NodeId id = static_cast<NodeId>(s_.nodes.size());
    s_.nodes.push_back({.name = "node-" + std::to_string(id),
                        .flavor = flavor,
                        .gpu_model = model,
                        .capacity = {gpus, 64000, 512 * kGiB},
                        .block = block,
                        .rack = rack});
    return id;
  }

  // `count` nodes alike (AddNode); the id of the first.
  NodeId AddNodes(int count, FlavorId flavor, int64_t gpus,
                  TopologyLabel block = kNoLabel,
                  TopologyLabel rack = kNoLabel) {
    const NodeId first = static_cast<NodeId>(s_.nodes.size());
    for (int i = 0; i < count; ++i) AddNode(flavor, gpus, block, rack);
    return first;
  }

  CohortId AddCohort(std::string name,
                     std::optional<CohortId> parent = std::nullopt) {
    s_.cohorts.push_back({.name = std::move(name), .parent = parent});
    return static_cast<CohortId>(s_.cohorts.size() - 1);
  }

  QueueId AddQueue(
      std::string name, std::optional<CohortId> cohort = std::nullopt,
      QueueingStrategy strategy = QueueingStrategy::kBestEffortFifo,
      double weight = 1.0) {
    s_.queues.push_back({.name = std::move(name),
                         .tenant = "t",
                         .cohort = cohort,
                         .weight = weight,
                         .strategy = strategy});
    return static_cast<QueueId>(s_.queues.size() - 1);
  }

  // GPU quota only (CPU and memory are not limited by quota).
  void AddGpuQuota(QueueId q, FlavorId f, int64_t nominal,
                   std::optional<int64_t> borrowing_limit = std::nullopt,
                   std::optional<int64_t> lending_limit = std::nullopt) {
    FlavorQuota fq{.flavor = f};
    fq.resources[static_cast<int>(Resource::kGpu)] =
        ResourceQuota{.nominal = nominal,
                      .borrowing_limit = borrowing_limit,
                      .lending_limit = lending_limit};
    s_.queues[q].quotas.push_back(fq);
  }

  // A queue (in `cohort`, if any) with a GPU quota of flavor `f`: AddQueue
  // then AddGpuQuota.
  QueueId AddGpuQueue(std::string name, std::optional<CohortId> cohort,
                      FlavorId f, int64_t nominal,
                      std::optional<int64_t> borrowing_limit = std::nullopt,
                      std::optional<int64_t> lending_limit = std::nullopt) {
    const QueueId q = AddQueue(std::move(name), cohort);
    AddGpuQuota(q, f, nominal, borrowing_limit, lending_limit);
    return q;
  }

  PriorityClassId AddPriority(std::string name, int32_t value) {
    s_.priority_classes.push_back({.name = std::move(name), .value = value});
    return static_cast<PriorityClassId>(s_.priority_classes.size() - 1);
  }

  // A pending gang of `workers` x `gpus` GPUs (1 CPU, 1 GiB each).
  PendingJob& AddJob(JobId id, QueueId q, int32_t workers, int64_t gpus,
                     TimeMicros submit_time = 0) {
    s_.pending.push_back(
        {.id = id,
         .name = "job-" + std::to_string(id),
         .queue = q,
         .submit_time = submit_time,
         .workers = workers,
         .worker = {.gpus = gpus, .cpu_millis = 1000, .memory_bytes = kGiB}});
    return s_.pending.back();
  }

  // Running work of `gpus` GPUs on `node` charged to queue q / flavor f.
  void AddRunning(JobId id, QueueId q, FlavorId f, NodeId node, int64_t gpus) {
    s_.nodes[node].used.gpus += gpus;
    s_.running.push_back({.job = id,
                          .queue = q,
                          .flavor = f,
                          .placement = {node},
                          .resources = {.gpus = gpus}});
  }

  // Running work charged to quota only (no node).
  void AddRunningQuotaOnly(JobId id, QueueId q, FlavorId f, int64_t gpus) {
    s_.running.push_back(
        {.job = id, .queue = q, .flavor = f, .resources = {.gpus = gpus}});
  }

 private:
  Snapshot s_;
};

// The ids of the admitted jobs, in the order of the admissions.
inline std::vector<JobId> Admitted(const Decisions& d) {
  std::vector<JobId> ids;
  for (const Admission& a : d.admissions) ids.push_back(a.job);
  return ids;
}

// The decision that left `job` pending, or null.
inline const PendingDecision* PendingOf(const Decisions& d, JobId job) {
  for (const PendingDecision& p : d.pending) {
    if (p.job == job) return &p;
  }
  return nullptr;
}

// The admission of `job`, or null.
inline const Admission* AdmissionOf(const Decisions& d, JobId job) {
  for (const Admission& a : d.admissions) {
    if (a.job == job) return &a;
  }
  return nullptr;
}

// The ids of the admitted jobs, sorted (for tests where the order of the
// admissions does not matter).
inline std::vector<JobId> SortedAdmitted(const Decisions& d) {
  std::vector<JobId> ids;
  for (const Admission& a : d.admissions) ids.push_back(a.job);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The snapshot after the decisions take effect: victims leave their nodes
// and wait again (one worker per placement entry, or one worker for
// quota-only work; submitted when they had started), admissions run from now.
inline Snapshot ApplyDecisions(const Snapshot& s, const Decisions& d) {
  Snapshot next = s;
  std::set<JobId> victims;
  for (const Preemption& p : d.preemptions) victims.insert(p.victim);
  std::map<JobId, const PendingJob*> pending;
  for (const PendingJob& j : s.pending) pending[j.id] = &j;
  next.running.clear();
  for (const RunningAttempt& r : s.running) {
    if (!victims.count(r.job)) {
      next.running.push_back(r);
      continue;
    }
    const int64_t k = std::max<int64_t>(1, r.placement.size());
    const Resources worker{r.resources.gpus / k, r.resources.cpu_millis / k,
                           r.resources.memory_bytes / k};
    for (NodeId n : r.placement) next.nodes[n].used -= worker;
    next.pending.push_back({.id = r.job,
                            .queue = r.queue,
                            .priority_class = r.priority_class,
                            .submit_time = r.start_time,
                            .workers = static_cast<int32_t>(k),
                            .worker = {.gpus = worker.gpus,
                                       .cpu_millis = worker.cpu_millis,
                                       .memory_bytes = worker.memory_bytes}});
  }
  std::set<JobId> admitted;
  for (const Admission& a : d.admissions) {
    const PendingJob& j = *pending.at(a.job);
    admitted.insert(j.id);
    for (NodeId n : a.worker_nodes)
      next.nodes[n].used += j.worker.AsResources();
    next.running.push_back({.job = j.id,
                            .queue = j.queue,
                            .flavor = a.flavor,
                            .priority_class = j.priority_class,
                            .placement = a.worker_nodes,
                            .resources = j.worker.AsResources() * j.workers,
                            .start_time = s.now});
  }
  std::erase_if(next.pending,
                [&](const PendingJob& j) { return admitted.count(j.id) > 0; });
  return next;
}

}  // namespace trainyard::scheduler::policy::testing

#endif  // TRAINYARD_TESTS_SUPPORT_POLICY_TEST_UTIL_H_
