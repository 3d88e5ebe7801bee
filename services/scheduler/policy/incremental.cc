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

bool Scheduler::RemovePending(JobId id) {
  int index = -1;
  if (built_) {
    auto it = pending_index_.find(id);
    if (it != pending_index_.end()) index = it->second;
  } else {
    for (size_t i = 0; i < s_.pending.size(); ++i) {
      if (s_.pending[i].id == id) {
        index = static_cast<int>(i);
        break;
      }
    }
  }
  if (index < 0) return false;
  ErasePending(index);
  return true;
}

bool Scheduler::ApplyAdmission(const Admission& a) {
  int index = -1;
  for (size_t i = 0; !built_ && i < s_.pending.size(); ++i) {
    if (s_.pending[i].id == a.job) index = static_cast<int>(i);
  }
  if (built_) {
    auto it = pending_index_.find(a.job);
    if (it != pending_index_.end()) index = it->second;
  }
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
  int index = -1;
  for (size_t i = 0; !built_ && i < s_.running.size(); ++i) {
    if (s_.running[i].job == id) index = static_cast<int>(i);
  }
  if (built_) {
    auto it = running_index_.find(id);
    if (it != running_index_.end()) index = it->second;
  }
  if (index < 0) return false;
  RunningAttempt& a = s_.running[index];
  for (size_t i = 0; i < a.placement.size(); ++i)
    s_.nodes[a.placement[i]].used -= WorkerShare(a, i);
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

Decisions Scheduler::Cycle() {
  Decisions out;
  Cycle(out);
  return out;
}

void Scheduler::Cycle(Decisions& out) {
  if (!built_) {
    // Decide() explains an invalid snapshot.
    if (!ValidateSnapshot(s_).ok()) {
      out = Decide(s_, config_);
      return;
    }
    Rebuild();
  }
  if (runner_ == nullptr) runner_ = internal::NewCycleRunner();
  runner_->Run(s_, config_, *running_quota_, jobs_of_queue_, classes_, out);
}

}  // namespace trainyard::scheduler::policy
