#include "services/scheduler/policy/incremental.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "services/scheduler/policy/engine.h"
#include "services/scheduler/policy/preemption.h"

namespace trainyard::scheduler::policy {

using internal::EntryLess;

Scheduler::Scheduler(Snapshot snapshot, PolicyConfig config)
    : s_(std::move(snapshot)), config_(config) {
  if (ValidateSnapshot(s_).ok()) Rebuild();
}

Scheduler::~Scheduler() = default;

void Scheduler::Rebuild() {
  running_quota_.emplace(s_);
  pending_index_.clear();
  running_index_.clear();
  classes_.clear();
  for (size_t i = 0; i < s_.pending.size(); ++i)
    pending_index_[s_.pending[i].id] = static_cast<int>(i);
  for (size_t i = 0; i < s_.running.size(); ++i)
    running_index_[s_.running[i].job] = static_cast<int>(i);
  internal::BuildQueues(s_, config_, classes_, jobs_of_queue_);
  built_ = true;
}

std::vector<int64_t> Scheduler::QueueShares() const {
  std::vector<int64_t> shares(s_.queues.size(), 0);
  if (!built_ || !running_quota_.has_value() ||
      running_quota_->QueueCount() != static_cast<int>(s_.queues.size())) {
    return shares;
  }
  for (size_t q = 0; q < shares.size(); ++q)
    shares[q] = QueueShare(s_, *running_quota_, static_cast<QueueId>(q));
  return shares;
}

std::optional<QuotaTree::Lent> Scheduler::QueueLent() const {
  if (!built_ || !running_quota_.has_value() ||
      running_quota_->QueueCount() != static_cast<int>(s_.queues.size())) {
    return std::nullopt;
  }
  return running_quota_->LentByQueue();
}

Scheduler::QueueEntry Scheduler::EntryOf(int index) {
  return internal::MakeEntry(s_, config_, classes_, index);
}

void Scheduler::InsertEntry(int index) {
  const QueueEntry e = EntryOf(index);
  std::vector<QueueEntry>& jobs = jobs_of_queue_[s_.pending[index].queue];
  jobs.insert(std::lower_bound(jobs.begin(), jobs.end(), e, EntryLess), e);
}

std::vector<Scheduler::QueueEntry>::iterator Scheduler::FindEntry(int index) {
  const QueueEntry e = EntryOf(index);
  std::vector<QueueEntry>& jobs = jobs_of_queue_[s_.pending[index].queue];
  return std::lower_bound(jobs.begin(), jobs.end(), e, EntryLess);
}

bool Scheduler::PendingJobValid(const PendingJob& job) const {
  auto in_range = [](int64_t id, size_t size) {
    return id >= 0 && static_cast<size_t>(id) < size;
  };
  return in_range(job.queue, s_.queues.size()) &&
         in_range(job.priority_class, s_.priority_classes.size()) &&
         (!job.budget.has_value() ||
          in_range(*job.budget, s_.budgets.size())) &&
         (!job.tenant_rate_cap.has_value() ||
          in_range(*job.tenant_rate_cap, s_.budgets.size())) &&
         (!job.project_rate_cap.has_value() ||
          in_range(*job.project_rate_cap, s_.budgets.size())) &&
         job.workers > 0 && job.worker.gpus >= 0 &&
         job.worker.cpu_millis >= 0 && job.worker.memory_bytes >= 0 &&
         job.time_limit_micros >= 0 && job.expected_runtime_micros >= 0 &&
         job.checkpoint_interval_micros >= 0 &&
         !pending_index_.contains(job.id);
}

void Scheduler::AddPending(PendingJob job) {
  if (built_ && !PendingJobValid(job)) built_ = false;
  s_.pending.push_back(std::move(job));
  if (!built_) return;
  const int index = static_cast<int>(s_.pending.size() - 1);
  pending_index_[s_.pending[index].id] = index;
  InsertEntry(index);
}

void Scheduler::ErasePending(int index) {
  const int last = static_cast<int>(s_.pending.size() - 1);
  if (built_) {
    auto it = FindEntry(index);
    jobs_of_queue_[s_.pending[index].queue].erase(it);
    pending_index_.erase(s_.pending[index].id);
    if (index != last) {
      FindEntry(last)->index = index;
      pending_index_[s_.pending[last].id] = index;
    }
  }
  if (index != last) s_.pending[index] = std::move(s_.pending[last]);
  s_.pending.pop_back();
}

int Scheduler::PendingIndex(JobId id) const {
  if (built_) {
    auto it = pending_index_.find(id);
    return it == pending_index_.end() ? -1 : it->second;
  }
  for (size_t i = 0; i < s_.pending.size(); ++i) {
    if (s_.pending[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

int Scheduler::RunningIndex(JobId id) const {
  if (built_) {
    auto it = running_index_.find(id);
    return it == running_index_.end() ? -1 : it->second;
  }
  for (size_t i = 0; i < s_.running.size(); ++i) {
    if (s_.running[i].job == id) return static_cast<int>(i);
  }
  return -1;
}

bool Scheduler::RemovePending(JobId id) {
  const int index = PendingIndex(id);
  if (index < 0) return false;
  ErasePending(index);
  return true;
}

bool Scheduler::ApplyAdmission(const Admission& a) {
  const int index = PendingIndex(a.job);
  if (index < 0) return false;
  const PendingJob& job = s_.pending[index];
  const Resources worker = job.worker.AsResources();
  RunningAttempt attempt{.job = job.id,
                         .queue = job.queue,
                         .flavor = a.flavor,
                         .priority_class = job.priority_class,
                         .placement = a.worker_nodes,
                         .resources = worker * job.workers,
                         .start_time = s_.now,
                         .time_limit_micros = job.time_limit_micros};
  for (NodeId n : a.worker_nodes) s_.nodes[n].used += worker;
  ErasePending(index);
  if (built_) {
    running_quota_->Add(attempt.queue, attempt.flavor, attempt.resources);
    running_index_[attempt.job] = static_cast<int>(s_.running.size());
  }
  s_.running.push_back(std::move(attempt));
  return true;
}

bool Scheduler::CompleteRunning(JobId id) {
  const int index = RunningIndex(id);
  if (index < 0) return false;
  RunningAttempt& a = s_.running[index];
  ChargeNodes(a, -1);
  const int last = static_cast<int>(s_.running.size() - 1);
  if (built_) {
    Resources release = a.resources;
    release = release * -1;
    running_quota_->Add(a.queue, a.flavor, release);
    running_index_.erase(id);
    if (index != last) running_index_[s_.running[last].job] = index;
  }
  if (index != last) s_.running[index] = std::move(s_.running[last]);
  s_.running.pop_back();
  return true;
}

void Scheduler::ChargeNodes(const RunningAttempt& a, int64_t sign) {
  for (size_t i = 0; i < a.placement.size(); ++i) {
    const NodeId n = a.placement[i];
    if (n >= 0 && static_cast<size_t>(n) < s_.nodes.size())
      s_.nodes[n].used += WorkerShare(a, i) * sign;
  }
}

bool Scheduler::RunningValid(const RunningAttempt& r) const {
  auto in_range = [](int64_t id, size_t size) {
    return id >= 0 && static_cast<size_t>(id) < size;
  };
  for (NodeId n : r.placement) {
    if (!in_range(n, s_.nodes.size())) return false;
  }
  auto non_negative = [](const Resources& x) {
    return x.gpus >= 0 && x.cpu_millis >= 0 && x.memory_bytes >= 0;
  };
  return in_range(r.queue, s_.queues.size()) &&
         in_range(r.flavor, s_.flavors.size()) &&
         in_range(r.priority_class, s_.priority_classes.size()) &&
         non_negative(r.resources) && non_negative(r.worker_resources) &&
         r.time_limit_micros >= 0;
}

bool Scheduler::AddRunning(RunningAttempt a) {
  if (RunningIndex(a.job) >= 0) return false;
  ChargeNodes(a, 1);
  // An invalid attempt makes Cycle() explain the invalid snapshot, as
  // Decide() would.
  if (built_ && !RunningValid(a)) built_ = false;
  if (built_) {
    running_quota_->Add(a.queue, a.flavor, a.resources);
    running_index_[a.job] = static_cast<int>(s_.running.size());
  }
  s_.running.push_back(std::move(a));
  return true;
}

bool Scheduler::UpdateRunning(RunningAttempt attempt) {
  if (!CompleteRunning(attempt.job)) return false;
  return AddRunning(std::move(attempt));
}

bool Scheduler::SetLastCheckpoint(JobId id, std::optional<TimeMicros> time) {
  const int index = RunningIndex(id);
  if (index < 0) return false;
  s_.running[index].last_checkpoint_time = time;
  return true;
}

bool Scheduler::UpdatePending(PendingJob job) {
  if (!RemovePending(job.id)) return false;
  AddPending(std::move(job));
  return true;
}

void Scheduler::SetNode(NodeId id, Node node) {
  node.used = s_.nodes[id].used;
  s_.nodes[id] = std::move(node);
}

void Scheduler::SetFlavor(FlavorId id, Flavor flavor) {
  s_.flavors[id] = std::move(flavor);
  built_ = false;
}

void Scheduler::SetQueue(QueueId id, Queue queue) {
  s_.queues[id] = std::move(queue);
  built_ = false;
}

void Scheduler::SetCohort(CohortId id, Cohort cohort) {
  s_.cohorts[id] = std::move(cohort);
  built_ = false;
}

void Scheduler::SetBudget(BudgetId id, Budget budget) {
  s_.budgets[id] = std::move(budget);
  built_ = false;
}

BudgetId Scheduler::AddBudget(Budget budget) {
  s_.budgets.push_back(std::move(budget));
  return static_cast<BudgetId>(s_.budgets.size() - 1);
}

PriorityClassId Scheduler::AddPriorityClass(PriorityClass priority_class) {
  s_.priority_classes.push_back(std::move(priority_class));
  return static_cast<PriorityClassId>(s_.priority_classes.size() - 1);
}

GpuModelId Scheduler::AddGpuModelName(std::string name) {
  s_.gpu_model_names.push_back(std::move(name));
  return static_cast<GpuModelId>(s_.gpu_model_names.size() - 1);
}

Decisions Scheduler::Cycle() {
  Decisions out;
  Cycle(out);
  return out;
}

void Scheduler::Cycle(Decisions& out, bool explain) {
  if (!built_) {
    // Decide() explains an invalid snapshot.
    if (!ValidateSnapshot(s_).ok()) {
      out = Decide(s_, config_);
      return;
    }
    Rebuild();
  }
  if (runner_ == nullptr) runner_ = internal::NewCycleRunner();
  runner_->Run(s_, config_, *running_quota_, jobs_of_queue_, classes_, out,
               explain);
}

}  // namespace trainyard::scheduler::policy
