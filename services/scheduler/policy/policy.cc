#include "services/scheduler/policy/policy.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/preemption.h"
#include "services/scheduler/policy/pricing.h"
#include "services/scheduler/policy/quota.h"

namespace trainyard::scheduler::policy {

const char* PendingReasonCode(PendingReason reason) {
  switch (reason) {
    case PendingReason::kQuotaExhausted:
      return "QUOTA_EXHAUSTED";
    case PendingReason::kNoCapacity:
      return "NO_CAPACITY";
    case PendingReason::kNoFitTopology:
      return "NO_FIT_TOPOLOGY";
    case PendingReason::kBlockedByStrictFifo:
      return "BLOCKED_BY_STRICT_FIFO";
    case PendingReason::kNoEligibleFlavor:
      return "NO_ELIGIBLE_FLAVOR";
    case PendingReason::kInvalidSnapshot:
      return "INVALID_SNAPSHOT";
  }
  return "UNKNOWN";
}

const char* PreemptionReasonCode(PreemptionReason reason) {
  switch (reason) {
    case PreemptionReason::kPreemptedByPriority:
      return "PREEMPTED_BY_PRIORITY";
    case PreemptionReason::kReclaimedByCohort:
      return "RECLAIMED_BY_COHORT";
    case PreemptionReason::kFairShare:
      return "FAIR_SHARE";
  }
  return "UNKNOWN";
}

namespace {

// Ordering key of a queue's head job; smaller goes first.
struct HeadKey {
  int64_t neg_priority;  // int64: negating INT32_MIN is safe.
  bool not_aged;
  // Weighted dominant share above nominal; 0 for aged jobs (they go by age).
  double share;
  TimeMicros submit_time;
  JobId job;
  QueueId queue;
  bool operator<(const HeadKey& o) const {
    return std::tie(neg_priority, not_aged, share, submit_time, job, queue) <
           std::tie(o.neg_priority, o.not_aged, o.share, o.submit_time, o.job,
                    o.queue);
  }
};

class Cycle {
 public:
  Cycle(const Snapshot& s, const PolicyConfig& config)
      : s_(s), config_(config), quota_(s), nodes_of_flavor_(s.flavors.size()) {
    free_.reserve(s.nodes.size());
    for (size_t n = 0; n < s.nodes.size(); ++n) {
      const Node& node = s.nodes[n];
      Resources f = node.capacity;
      f -= node.used;
      free_.push_back(f);
      nodes_of_flavor_[node.flavor].push_back(static_cast<NodeId>(n));
      if (node.schedulable) total_ += node.capacity;
    }
    jobs_of_queue_.resize(s.queues.size());
    for (size_t j = 0; j < s.pending.size(); ++j) {
      jobs_of_queue_[s.pending[j].queue].push_back(static_cast<int>(j));
    }
    for (std::vector<int>& jobs : jobs_of_queue_) {
      std::sort(jobs.begin(), jobs.end(), [&](int a, int b) {
        const PendingJob& x = s.pending[a];
        const PendingJob& y = s.pending[b];
        return std::make_tuple(-int64_t{Priority(x)}, x.submit_time, x.id) <
               std::make_tuple(-int64_t{Priority(y)}, y.submit_time, y.id);
      });
    }
  }

  Decisions Run() {
    Decisions out;
    std::vector<size_t> cursor(s_.queues.size(), 0);
    admitted_.assign(s_.pending.size(), false);
    reason_.assign(s_.pending.size(), PendingReason::kNoCapacity);
    message_.assign(s_.pending.size(), std::string());
    std::set<HeadKey> heads;
    for (size_t q = 0; q < s_.queues.size(); ++q) {
      if (!jobs_of_queue_[q].empty()) heads.insert(Key(jobs_of_queue_[q][0]));
    }
    while (!heads.empty()) {
      const HeadKey head = *heads.begin();
      heads.erase(heads.begin());
      const QueueId q = head.queue;
      const int j = jobs_of_queue_[q][cursor[q]++];
      if (TryAdmit(j, out)) {
        admitted_[j] = true;
      } else if (s_.queues[q].strategy == QueueingStrategy::kStrictFifo) {
        const PendingJob& blocker = s_.pending[j];
        for (; cursor[q] < jobs_of_queue_[q].size(); ++cursor[q]) {
          const int k = jobs_of_queue_[q][cursor[q]];
          reason_[k] = PendingReason::kBlockedByStrictFifo;
          message_[k] = absl::StrCat(
              "BLOCKED_BY_STRICT_FIFO: queue ", s_.queues[q].name,
              " is StrictFIFO and job ", blocker.id, " ahead is pending (",
              PendingReasonCode(reason_[j]), ")");
        }
      }
      if (cursor[q] < jobs_of_queue_[q].size())
        heads.insert(Key(jobs_of_queue_[q][cursor[q]]));
    }
    for (size_t q = 0; q < s_.queues.size(); ++q) {
      int32_t position = 0;
      for (int j : jobs_of_queue_[q]) {
        if (admitted_[j]) continue;
        out.pending.push_back({.job = s_.pending[j].id,
                               .queue = static_cast<QueueId>(q),
                               .reason = reason_[j],
                               .message = std::move(message_[j]),
                               .position = ++position});
      }
    }
    return out;
  }

 private:
  int32_t Priority(const PendingJob& j) const {
    return s_.priority_classes[j.priority_class].value;
  }

  // Weighted dominant-resource share of usage above nominal quota: max over
  // resources of (usage above nominal, summed over flavors) / (schedulable
  // capacity of that resource), divided by the queue's weight.
  double Share(QueueId q) const {
    double dominant = 0.0;
    for (Resource r : kAllResources) {
      const int64_t total = total_.Get(r);
      const int64_t above = quota_.AboveNominal(q, r);
      if (above <= 0) continue;
      dominant = std::max(dominant,
                          total > 0 ? static_cast<double>(above) / total
                                    : std::numeric_limits<double>::infinity());
    }
    if (dominant == 0.0) return 0.0;
    const double w = s_.queues[q].weight;
    return w > 0.0 ? dominant / w : std::numeric_limits<double>::infinity();
  }

  HeadKey Key(int j) const {
    const PendingJob& job = s_.pending[j];
    const bool aged = config_.aging_threshold > 0 &&
                      s_.now - job.submit_time >= config_.aging_threshold;
    return {.neg_priority = -int64_t{Priority(job)},
            .not_aged = !aged,
            .share = aged ? 0.0 : Share(job.queue),
            .submit_time = job.submit_time,
            .job = job.id,
            .queue = job.queue};
  }

  std::string QuotaDetail(const PendingJob& job, FlavorId f, Resource r,
                          const Resources& need) const {
    const Queue& queue = s_.queues[job.queue];
    return absl::StrCat("queue ", queue.name, " ", ResourceName(r), " ",
                        quota_.Usage(job.queue, f, r), "/",
                        quota_.Nominal(job.queue, f, r), ", cohort lends ",
                        quota_.CohortLends(job.queue, f, r), ", job needs ",
                        need.Get(r), " (flavor ", s_.flavors[f].name, ")");
  }

  // Admits job j on the first flavor where preempting running work makes it
  // fit (preemption.h); records the preemptions.
  bool TryPreempt(int j, const std::vector<FlavorId>& flavors,
                  Decisions& out) {
    const PendingJob& job = s_.pending[j];
    if (preempted_.empty()) preempted_.assign(s_.running.size(), false);
    const CycleState state{.quota = &quota_,
                           .free = &free_,
                           .nodes_of_flavor = &nodes_of_flavor_,
                           .total = total_,
                           .preempted = &preempted_};
    for (FlavorId f : flavors) {
      std::optional<PreemptionPlan> plan =
          PlanPreemption(s_, config_, state, job, f);
      if (!plan.has_value()) continue;
      const int32_t priority = Priority(job);
      // Victims keep running through their grace period: what they free
      // beyond what the job takes stays unavailable this cycle.
      std::vector<std::pair<NodeId, Resources>> held;
      for (int v : plan->victims) {
        for (NodeId n : s_.running[v].placement) held.emplace_back(n, free_[n]);
      }
      for (size_t k = 0; k < plan->victims.size(); ++k) {
        const RunningAttempt& r = s_.running[plan->victims[k]];
        preempted_[plan->victims[k]] = true;
        ReleaseAttempt(r, quota_, free_);
        const PreemptionReason reason = plan->reasons[k];
        out.preemptions.push_back(
            {.victim = r.job,
             .victim_queue = r.queue,
             .preemptor = job.id,
             .reason = reason,
             .grace_period = config_.preemption_grace_period,
             .message = absl::StrCat(
                 PreemptionReasonCode(reason), ": job ", job.id,
                 " (priority ", priority, ", queue ",
                 s_.queues[job.queue].name, ") preempts job ", r.job,
                 " (priority ", s_.priority_classes[r.priority_class].value,
                 ", queue ", s_.queues[r.queue].name, ") on flavor ",
                 s_.flavors[f].name, "; ", r.resources.gpus,
                 " GPUs lose ", (s_.now - r.last_checkpoint_time.value_or(
                                              r.start_time)) /
                                    1000000,
                 " s since the last checkpoint")});
      }
      Commit(job, f, std::move(plan->placement.worker_nodes), out);
      for (const auto& [n, before] : held) {
        Resources& free = free_[n];
        free.gpus = std::min(free.gpus, before.gpus);
        free.cpu_millis = std::min(free.cpu_millis, before.cpu_millis);
        free.memory_bytes = std::min(free.memory_bytes, before.memory_bytes);
      }
      // Nor may a later job of the cohort tree borrow the quota they free.
      rebalancing_.insert({CohortRoot(s_, job.queue), f});
      return true;
    }
    return false;
  }

  // After a preemption in the cohort tree of `job` on flavor f, later
  // admissions there in this cycle may not borrow (they would take quota the
  // victims still hold and undo the rebalancing). Returns the detail when the
  // job would borrow.
  std::optional<std::string> BorrowsWhileRebalancing(const PendingJob& job,
                                                     FlavorId f,
                                                     const Resources& need) {
    if (rebalancing_.empty() || !s_.queues[job.queue].cohort.has_value() ||
        !rebalancing_.contains({CohortRoot(s_, job.queue), f})) {
      return std::nullopt;
    }
    for (Resource r : kAllResources) {
      if (need.Get(r) > 0 && quota_.Tracks(job.queue, f, r) &&
          quota_.Usage(job.queue, f, r) + need.Get(r) >
              quota_.Nominal(job.queue, f, r)) {
        return absl::StrCat("queue ", s_.queues[job.queue].name, " ",
                            ResourceName(r), " ", quota_.Usage(job.queue, f, r),
                            "/", quota_.Nominal(job.queue, f, r),
                            ", job needs ", need.Get(r),
                            ", cohort lends 0 while preemption frees quota (flavor ",
                            s_.flavors[f].name, ")");
      }
    }
    return std::nullopt;
  }

  void Commit(const PendingJob& job, FlavorId f, std::vector<NodeId> nodes,
              Decisions& out) {
    const Resources need = job.worker.AsResources() * job.workers;
    for (NodeId n : nodes) free_[n] -= job.worker.AsResources();
    quota_.Add(job.queue, f, need);
    bool borrowing = false;
    for (Resource r : kAllResources) {
      if (quota_.Tracks(job.queue, f, r) &&
          quota_.Usage(job.queue, f, r) > quota_.Nominal(job.queue, f, r)) {
        borrowing = true;
      }
    }
    out.admissions.push_back({.job = job.id,
                              .queue = job.queue,
                              .flavor = f,
                              .worker_nodes = std::move(nodes),
                              .borrowing = borrowing});
  }

  bool TryAdmit(int j, Decisions& out) {
    const PendingJob& job = s_.pending[j];
    const Queue& queue = s_.queues[job.queue];
    const std::vector<FlavorId> flavors = CandidateFlavors(s_, job, config_);
    if (flavors.empty()) {
      reason_[j] = PendingReason::kNoEligibleFlavor;
      message_[j] =
          absl::StrCat("NO_ELIGIBLE_FLAVOR: queue ", queue.name,
                       " has no quota for a flavor allowed by spot policy ",
                       SpotPolicyName(job.spot_policy));
      return false;
    }
    const Resources need = job.worker.AsResources() * job.workers;
    std::vector<std::string> details;
    for (FlavorId f : flavors) {
      Resource failed = Resource::kGpu;
      PendingReason reason;
      std::optional<std::string> rebalancing;
      if (!quota_.Fits(job.queue, f, need, &failed)) {
        reason = PendingReason::kQuotaExhausted;
        details.push_back(QuotaDetail(job, f, failed, need));
      } else if (rebalancing = BorrowsWhileRebalancing(job, f, need);
                 rebalancing.has_value()) {
        reason = PendingReason::kQuotaExhausted;
        details.push_back(std::move(*rebalancing));
      } else {
        PlacementResult placement =
            PlaceGang(s_, free_, nodes_of_flavor_, f, job);
        if (placement.failure == PlacementFailure::kNone) {
          Commit(job, f, std::move(placement.worker_nodes), out);
          return true;
        }
        if (placement.failure == PlacementFailure::kNoFitTopology) {
          reason = PendingReason::kNoFitTopology;
          details.push_back(absl::StrCat(
              "no single ",
              job.required_topology == TopologyLevel::kRack ? "rack" : "block",
              " holds ", job.workers, " workers (best holds ",
              placement.best_group_workers, ") (flavor ", s_.flavors[f].name,
              ")"));
        } else {
          reason = PendingReason::kNoCapacity;
          details.push_back(absl::StrCat(
              "free nodes hold ", placement.capacity_workers, " of ",
              job.workers, " workers (flavor ", s_.flavors[f].name, ")"));
        }
      }
      // The most preferred flavor's failure names the reason.
      if (details.size() == 1) reason_[j] = reason;
    }
    if (PreemptionEnabled(queue) && TryPreempt(j, flavors, out)) return true;
    message_[j] = absl::StrCat(PendingReasonCode(reason_[j]), ": ",
                               absl::StrJoin(details, "; "));
    return false;
  }

  const Snapshot& s_;
  const PolicyConfig& config_;
  QuotaTree quota_;
  std::vector<Resources> free_;
  std::vector<std::vector<NodeId>> nodes_of_flavor_;
  Resources total_;
  std::vector<std::vector<int>> jobs_of_queue_;
  std::vector<bool> admitted_;
  std::vector<PendingReason> reason_;
  std::vector<std::string> message_;
  // Per running attempt: preempted in this cycle (sized on first use).
  std::vector<bool> preempted_;
  // (root cohort, flavor) pairs where a preemption happened this cycle.
  std::set<std::pair<int, FlavorId>> rebalancing_;
};

}  // namespace

Decisions Decide(const Snapshot& snapshot, const PolicyConfig& config) {
  if (absl::Status status = ValidateSnapshot(snapshot); !status.ok()) {
    Decisions out;
    const std::string message =
        absl::StrCat("INVALID_SNAPSHOT: ", std::string(status.message()));
    for (const PendingJob& job : snapshot.pending) {
      out.pending.push_back({.job = job.id,
                             .queue = job.queue,
                             .reason = PendingReason::kInvalidSnapshot,
                             .message = message,
                             .position = 0});
    }
    return out;
  }
  return Cycle(snapshot, config).Run();
}

}  // namespace trainyard::scheduler::policy
