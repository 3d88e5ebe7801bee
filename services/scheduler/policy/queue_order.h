// Ordering (docs/scheduling.md, "Ordering"): each queue's pending jobs in
// queue order, and the heap of queue heads a cycle takes the best job from.
// Internal to the policy library (engine.h).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_QUEUE_ORDER_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_QUEUE_ORDER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "services/scheduler/policy/job_classes.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// A pending job in its queue's order: priority (descending), submit time, id;
// `index` is its position in Snapshot::pending.
struct QueueEntry {
  int64_t neg_priority;
  TimeMicros submit_time;
  JobId id;
  int index;
  // Equivalence class: jobs with equal class keys get equal decisions in
  // equal states.
  int32_t job_class;
};

bool EntryLess(const QueueEntry& a, const QueueEntry& b);

QueueEntry MakeEntry(const Snapshot& s, const PolicyConfig& config,
                     ClassTable& classes, int index);

// Every queue's pending jobs in queue order.
void BuildQueues(const Snapshot& s, const PolicyConfig& config,
                 ClassTable& classes,
                 std::vector<std::vector<QueueEntry>>& jobs);

// Children per node of the heap of queue heads (4 measured no faster than 2
// in BM_SchedulerSteadyState).
constexpr size_t kHeapArity = 2;

// A queue head's place in the cycle's order.
struct HeadKey {
  // The leading keys packed into one integer, smallest first: whether the
  // job would borrow (PolicyConfig::nominal_before_borrowing; always 0
  // without it), then its negated priority, then not aged (0 = aged).
  uint64_t major;
  // The queue's weighted share (QuotaTree::Share).
  int64_t share;
  TimeMicros submit_time;
  // Unique among heads: it decides every tie (the queue never has to).
  JobId job;
  QueueId queue;
  // Not compared: the job's class, so that what its attempt reads can be
  // prefetched from the heap alone.
  int32_t job_class;
  static uint64_t Major(bool borrows, int64_t neg_priority, bool not_aged) {
    // Priority values are 32-bit: neg_priority + 2^31 is in [1, 2^32].
    return (uint64_t{borrows} << 40) |
           (static_cast<uint64_t>(neg_priority + (int64_t{1} << 31)) << 1) |
           uint64_t{not_aged};
  }
  bool operator<(const HeadKey& o) const {
    if (major != o.major) return major < o.major;
    if (share < o.share) return true;
    if (o.share < share) return false;
    if (submit_time != o.submit_time) return submit_time < o.submit_time;
    return job < o.job;
  }
};

// The heap of queue heads is a min-heap (kHeapArity-ary) of HeadKeys: keys
// are unique (job ids are), so the smallest is well defined.

// Moves heap[i] down to its place.
inline void SiftDown(std::vector<HeadKey>& heap, size_t i) {
  const size_t n = heap.size();
  const HeadKey moving = heap[i];
  while (true) {
    const size_t first = kHeapArity * i + 1;
    if (first >= n) break;
    size_t child = first;
    const size_t last = std::min(first + kHeapArity, n);
    for (size_t c = first + 1; c < last; ++c) {
      if (heap[c] < heap[child]) child = c;
    }
    if (!(heap[child] < moving)) break;
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = moving;
}

// Makes a heap of `heap`.
inline void MakeHeap(std::vector<HeadKey>& heap) {
  // Every node with a child, deepest first (none in a heap of 0 or 1).
  for (size_t i = heap.size() < 2 ? 0 : (heap.size() - 2) / kHeapArity + 1;
       i-- > 0;) {
    SiftDown(heap, i);
  }
}

// Moves heap[i] (i > 0, whose key just decreased) up, but never into the
// root: the root is the head being processed, which the cycle replaces and
// sifts down next, and that restores the heap (its subtrees stay heaps).
inline void SiftUpBelowRoot(std::vector<HeadKey>& heap, size_t i) {
  const HeadKey moving = heap[i];
  while (i > 0) {
    const size_t parent = (i - 1) / kHeapArity;
    if (parent == 0 || !(moving < heap[parent])) break;
    heap[i] = heap[parent];
    i = parent;
  }
  heap[i] = moving;
}

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_QUEUE_ORDER_H_
