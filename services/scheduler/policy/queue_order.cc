#include "services/scheduler/policy/queue_order.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace trainyard::scheduler::policy::internal {

bool EntryLess(const QueueEntry& a, const QueueEntry& b) {
  return std::tie(a.neg_priority, a.submit_time, a.id) <
         std::tie(b.neg_priority, b.submit_time, b.id);
}

namespace {

// s.pending[index]'s entry, its class not yet set.
QueueEntry EntryWithoutClass(const Snapshot& s, int index) {
  const PendingJob& job = s.pending[index];
  return {
      .neg_priority = -int64_t{s.priority_classes[job.priority_class].value},
      .submit_time = job.submit_time,
      .id = job.id,
      .index = index,
      .job_class = -1};
}

}  // namespace

QueueEntry MakeEntry(const Snapshot& s, const PolicyConfig& config,
                     ClassTable& classes, int index) {
  QueueEntry e = EntryWithoutClass(s, index);
  e.job_class = classes.ClassOf(s, config, s.pending[index]);
  return e;
}

void BuildQueues(const Snapshot& s, const PolicyConfig& config,
                 ClassTable& classes,
                 std::vector<std::vector<QueueEntry>>& jobs) {
  jobs.assign(s.queues.size(), {});
  for (size_t i = 0; i < s.pending.size(); ++i) {
    jobs[s.pending[i].queue].push_back(
        EntryWithoutClass(s, static_cast<int>(i)));
  }
  // Classes are numbered in queue order, so that the per-class records of
  // a queue's jobs (which a cycle reads in that order) lie close together.
  for (std::vector<QueueEntry>& queue : jobs) {
    std::sort(queue.begin(), queue.end(), EntryLess);
    for (QueueEntry& e : queue)
      e.job_class = classes.ClassOf(s, config, s.pending[e.index]);
  }
}

}  // namespace trainyard::scheduler::policy::internal
