// Explanations of pending jobs (PendingDecision::message): why each candidate
// flavor failed, recorded compactly as a Detail, and formatted into text only
// when a class's records change (the cycle keeps each class's last text;
// job_classes.h, ClassFailure). Internal to the policy library (engine.h).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_EXPLANATION_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_EXPLANATION_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/policy_config.h"
#include "services/scheduler/policy/quota.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// Why one candidate flavor failed, compactly: an explanation's text is a
// function of the job's class and its details (AppendDetails).
struct Detail {
  enum Kind : uint8_t {
    kNoEligibleFlavor,
    kBudget,         // a: budget remaining, b: expected cost (hourly
                     // price for Budget::hourly), c: budget
    kQuota,          // a: usage, b: nominal, c: cohort lends; limit*
    kRebalancing,    // a: usage, b: nominal
    kHeld,           // a: usage, b: nominal, c: holding priority
    kNoFitCluster,   // a: best group's workers
    kNoFitTopology,  // a: best group's workers
    kNoCapacity,     // a: workers the free nodes hold
    // Follows a placement failure on `flavor` while a reservation holds free
    // capacity there: a: GPUs it holds (high 32 bits, at most INT32_MAX) and
    // the reserved job's index in Snapshot::pending (low 32 bits; for its
    // name), b: its id (so that equal details name the same job), c: when
    // the reservation starts.
    kReservedFor,
    // Follows the flavor failures of a job whose queue preempts for fair
    // share when no plan was found: a: its queue's share with the job, b:
    // the highest share of another queue of its cohort tree (billionths,
    // QuotaTree::Share), c: that queue (-1: none borrows).
    kFairShareRefused,
  };
  Kind kind = kNoEligibleFlavor;
  // For kRebalancing and kHeld: whether some resource exceeds the nominal
  // quota (the detail is empty otherwise).
  bool has_resource = true;
  // The resource (kQuota, kRebalancing, kHeld); the job needs
  // AsResources() * workers of it.
  uint8_t resource = 0;
  // kQuota: the limit that binds (QuotaTree::Binding::Kind) and its cohort
  // (-1: none), where a cohort on the queue's path has a borrowing limit
  // (QuotaTree::CohortLimitAbove()), else kNone and -1. The text names the
  // limit (AppendDetails, from the tree as it is when the detail is made);
  // without such a cohort it follows from `a` and the settings alone, so
  // that equal details give equal texts.
  uint8_t limit = 0;
  FlavorId flavor = 0;
  CohortId limit_cohort = -1;
  int64_t a = 0, b = 0, c = 0;
  friend bool operator==(const Detail&, const Detail&) = default;
};

// The pending reason a failure with this first detail gives.
inline PendingReason ReasonOf(Detail::Kind kind) {
  switch (kind) {
    case Detail::kNoEligibleFlavor:
      return PendingReason::kNoEligibleFlavor;
    case Detail::kBudget:
      return PendingReason::kBudgetHold;
    case Detail::kQuota:
    case Detail::kRebalancing:
    case Detail::kHeld:
      return PendingReason::kQuotaExhausted;
    case Detail::kNoFitCluster:
    case Detail::kNoFitTopology:
      return PendingReason::kNoFitTopology;
    case Detail::kNoCapacity:
    case Detail::kReservedFor:
    case Detail::kFairShareRefused:
      return PendingReason::kNoCapacity;
  }
  return PendingReason::kNoCapacity;
}

// "<CODE of the first detail>: <detail>; <detail>..." for a job of the
// class of `job` (its representative) in `s`. Each detail names its flavor;
// one with reclaims (reclaim_rate_per_hour > 0) also the restart overhead its
// expected cost counted per reclaim (RestartOverhead(), pricing.h).
// `binding_limit` is QuotaTree::BindingLimit() (or a cache of it) in the
// quota state the details were made in, for the limit that binds a kQuota
// detail.
using BindingLimitFn = absl::FunctionRef<QuotaTree::Binding(
    QueueId q, FlavorId f, Resource r, int64_t want)>;
void AppendDetails(const Snapshot& s, const PolicyConfig& config,
                   BindingLimitFn binding_limit, const PendingJob& job,
                   const std::vector<Detail>& details, std::string& out);

// The texts of explanations, in blocks: every Message of a block shares the
// block's reference count (one hot counter instead of a cold one per text),
// and the block lives while a Message of it does.
class MessageStore {
 public:
  // A message whose text is stored in the current block (Renew() must have
  // been called once).
  Message New(std::string text) {
    block_->texts.push_back(std::move(text));
    return Message(
        std::shared_ptr<const std::string>(block_, &block_->texts.back()));
  }
  // Whether there is a current block.
  bool has_block() const { return block_ != nullptr; }
  // Texts in the current block.
  size_t size() const { return block_->texts.size(); }
  // Starts a new block (the last one is freed once no Message uses it).
  void Renew() { block_ = std::make_shared<TextBlock>(); }

 private:
  struct TextBlock {
    std::deque<std::string> texts;
  };
  std::shared_ptr<TextBlock> block_;
};

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_EXPLANATION_H_
