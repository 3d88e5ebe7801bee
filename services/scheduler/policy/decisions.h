// What one scheduling cycle decides (Decide() in policy.h, Scheduler::Cycle()
// in incremental.h): admissions, preemptions, reservations, and for every job
// left pending its reason, position and explanation.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_DECISIONS_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_DECISIONS_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

// Why a job stays pending; PendingReasonCode() gives the stable string.
enum class PendingReason : uint8_t {
  kQuotaExhausted,       // QUOTA_EXHAUSTED
  kNoCapacity,           // NO_CAPACITY
  kNoFitTopology,        // NO_FIT_TOPOLOGY
  kBlockedByStrictFifo,  // BLOCKED_BY_STRICT_FIFO
  kNoEligibleFlavor,     // NO_ELIGIBLE_FLAVOR
  kInvalidSnapshot,      // INVALID_SNAPSHOT
  // Nodes are reserved for it from a known time (Decisions::reservations).
  kWaitingForReservation,  // WAITING_FOR_RESERVATION
  // Its expected cost fits in no flavor within its queue's budget and its
  // own (PendingJob::budget).
  kBudgetHold,  // BUDGET_HOLD
};
const char* PendingReasonCode(PendingReason reason);

struct Admission {
  JobId job = 0;
  QueueId queue = 0;
  FlavorId flavor = 0;
  // Node of each worker; size == the job's worker count.
  std::vector<NodeId> worker_nodes;
  // Whether the queue uses more than its nominal quota of this flavor after
  // the admission (it borrows from its cohort).
  bool borrowing = false;
  // Admitted ahead of a reservation onto capacity held for it: the job's
  // time limit ends before the reservation starts (it is stopped then).
  bool backfill = false;
  friend bool operator==(const Admission&, const Admission&) = default;
};

// An immutable explanation, shared by every job that got the same one (the
// jobs of an equivalence class, the jobs behind a StrictFIFO blocker):
// copying one copies a pointer. Compares by text.
class Message {
 public:
  Message() = default;
  explicit Message(std::string text)
      : text_(std::make_shared<const std::string>(std::move(text))) {}
  // Shares ownership of `text` with its owner (the policy keeps the texts of
  // a cycle in one block, so that copies count references on one counter).
  explicit Message(std::shared_ptr<const std::string> text)
      : text_(std::move(text)) {}
  const std::string& str() const { return text_ ? *text_ : Empty(); }
  friend bool operator==(const Message& a, const Message& b) {
    return a.text_ == b.text_ || a.str() == b.str();
  }
  friend bool operator==(const Message& a, std::string_view b) {
    return a.str() == b;
  }
  friend std::ostream& operator<<(std::ostream& os, const Message& m) {
    return os << m.str();
  }

 private:
  static const std::string& Empty();
  std::shared_ptr<const std::string> text_;
};

struct PendingDecision {
  JobId job = 0;
  QueueId queue = 0;
  PendingReason reason = PendingReason::kNoCapacity;
  // "<CODE>: <details>", e.g.
  // "QUOTA_EXHAUSTED: queue research-a gpu 64/64, cohort lends 0, job needs 8
  // (flavor a100)".
  Message message;
  // 1-based position among the jobs of its queue still pending after this
  // cycle, in queue order (0 for INVALID_SNAPSHOT).
  int32_t position = 0;
  friend bool operator==(const PendingDecision&,
                         const PendingDecision&) = default;
};

// Why a running job is preempted; PreemptionReasonCode() gives the string.
enum class PreemptionReason {
  kPreemptedByPriority,  // PREEMPTED_BY_PRIORITY (within its queue)
  kReclaimedByCohort,    // RECLAIMED_BY_COHORT (it borrowed the quota)
  kFairShare,            // FAIR_SHARE
};
const char* PreemptionReasonCode(PreemptionReason reason);

struct Preemption {
  // The victim (a running attempt; the whole gang is preempted).
  JobId victim = 0;
  QueueId victim_queue = 0;
  // The pending job admitted in its place (in Decisions::admissions).
  JobId preemptor = 0;
  PreemptionReason reason = PreemptionReason::kPreemptedByPriority;
  // Time the victim is given to checkpoint before it is stopped.
  TimeMicros grace_period = 0;
  // "<CODE>: <details>" for people.
  std::string message;
  friend bool operator==(const Preemption&, const Preemption&) = default;
};

// Capacity held for a pending gang that cannot start now but can at
// `start_time`, when running attempts with time limits will have ended.
// Later jobs may use the held capacity only if their time limit ends by then
// (backfill), so the reservation is never delayed by them. Its quota (and
// budget) is held from now. Recomputed every cycle.
struct Reservation {
  JobId job = 0;
  QueueId queue = 0;
  FlavorId flavor = 0;
  TimeMicros start_time = 0;
  // Node of each worker (ascending).
  std::vector<NodeId> worker_nodes;
  friend bool operator==(const Reservation&, const Reservation&) = default;
};

struct Decisions {
  // In the order the policy admitted them.
  std::vector<Admission> admissions;
  // Running attempts to stop so that some admissions fit, in decision order.
  // An admission that needs them is only valid once they are gone.
  std::vector<Preemption> preemptions;
  // Every job not admitted, ordered by queue id, then position.
  std::vector<PendingDecision> pending;
  // In the order they were made (highest-ranked job first).
  std::vector<Reservation> reservations;
  friend bool operator==(const Decisions&, const Decisions&) = default;
};

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_DECISIONS_H_
