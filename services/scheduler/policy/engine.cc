// The cycle driver (engine.h): takes the best queue head until every queue is
// exhausted, attempts each job (quota, placement, preemption, reservation),
// reuses the failures of equivalence classes, and takes speculative runs.
// Its parts: queue_order.h (the order and the heap of heads), job_classes.h
// (classes and their failure records), engine_state.h (the state a cycle
// changes), placement_index.h, backfill.h, cycle_preemption.h and
// explanation.h.
#include "services/scheduler/policy/engine.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/scheduler/policy/backfill.h"
#include "services/scheduler/policy/cycle_preemption.h"
#include "services/scheduler/policy/engine_state.h"
#include "services/scheduler/policy/explanation.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/preemption.h"

namespace trainyard::scheduler::policy::internal {
namespace {

// One cycle (engine.h).
class Engine final : public CycleRunner {
 public:
  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One cycle. `s` must be valid; `running_quota` charges its running work;
  // `jobs` lists each queue's pending jobs in queue order with classes from
  // `classes`. State from an earlier Run() only lends its memory, except the
  // placement indexes (kept while the nodes are the same but for their use)
  // and the classes' last explanations (kept while the class table is).
  void Run(const Snapshot& s, const PolicyConfig& config,
           const QuotaTree& running_quota,
           const std::vector<std::vector<QueueEntry>>& jobs,
           const ClassTable& classes, Decisions& out, bool explain) override {
    Reset(s, config, running_quota, jobs, classes);
    explain_ = explain;
    Run(out);
  }

 private:
  void Reset(const Snapshot& s, const PolicyConfig& config,
             const QuotaTree& running_quota,
             const std::vector<std::vector<QueueEntry>>& jobs,
             const ClassTable& classes) {
    jobs_of_queue_ = &jobs;
    if (state_.Reset(s, config, running_quota, classes)) {
      // The cycle counter wrapped around: failures of earlier cycles are no
      // longer valid.
      for (ClassFailure& failure : failures_) failure.cycle = 0;
    }
    // Explanations depend only on the class and its records, and names do
    // not change while the class table is the same: keep them, and their
    // block, unless the block has grown well past what a cycle needs (then
    // it is freed once the last Decisions using it are).
    const size_t block_limit = 65536 + 2 * classes.size();
    if (texts_generation_ != classes.generation() || !texts_.has_block() ||
        texts_.size() > block_limit) {
      failures_.clear();
      kept_.clear();
      texts_generation_ = classes.generation();
      texts_.Renew();
    }
    failures_.resize(classes.size());
    kept_.resize(classes.size());
    // Per-job state is indexed by slot: the job's position in the
    // concatenation of the queues' orders, so a queue's jobs are contiguous.
    all_flavors_.resize(s.flavors.size());
    for (size_t f = 0; f < all_flavors_.size(); ++f)
      all_flavors_[f] = static_cast<FlavorId>(f);
    offset_.assign(s.queues.size() + 1, 0);
    for (size_t q = 0; q < s.queues.size(); ++q)
      offset_[q + 1] = offset_[q] + jobs[q].size();
    reservations_.Reset();
    preemption_.Reset();
  }

  void Run(Decisions& out) {
    out.admissions.clear();
    out.preemptions.clear();
    out.reservations.clear();
    std::vector<size_t>& cursor = cursor_;
    cursor.assign(state_.s->queues.size(), 0);
    admitted_.assign(state_.s->pending.size(), 0);
    reason_.assign(state_.s->pending.size(), PendingReason::kNoCapacity);
    message_.assign(state_.s->pending.size(), Message());
    // A min-heap (kHeapArity-ary) of queue heads: keys are unique (job ids
    // are), so the smallest is well defined. The processed head is replaced in
    // place by its queue's next job (one sift-down instead of a pop and a
    // push).
    std::vector<HeadKey>& heads = heads_;
    heads.clear();
    heads.reserve(state_.s->queues.size());
    for (size_t q = 0; q < state_.s->queues.size(); ++q) {
      if (!(*jobs_of_queue_)[q].empty())
        heads.push_back(Key((*jobs_of_queue_)[q][0], static_cast<QueueId>(q)));
    }
    MakeHeap(heads);
    BeginRuns();
    while (!heads.empty()) {
      const HeadKey head = heads.front();
      const QueueId q = head.queue;
      const QueueEntry& entry = (*jobs_of_queue_)[q][cursor[q]];
      const size_t j = offset_[q] + cursor[q]++;
      // Whatever its run holds comes before this job: confirmed.
      run_begin_[q] = cursor[q];
      const uint64_t events_before = state_.events;
      const Outcome outcome = TryAdmit(entry, head.job_class, q, j, out);
      if (state_.events != events_before) {
        pops_since_event_ = 0;
        RewindRuns(head);
      } else {
        ++pops_since_event_;
      }
      if (outcome == Outcome::kAdmitted) {
        admitted_[j] = 1;
      } else if (state_.s->queues[q].strategy ==
                 QueueingStrategy::kStrictFifo) {
        const Message message =
            explain_ ? texts_.New(absl::StrCat(
                           "BLOCKED_BY_STRICT_FIFO: queue ",
                           state_.s->queues[q].name, " is StrictFIFO and job ",
                           heads.front().job, " ahead is pending (",
                           PendingReasonCode(reason_[j]), ")"))
                     : Message();
        for (; cursor[q] < (*jobs_of_queue_)[q].size(); ++cursor[q]) {
          const size_t k = offset_[q] + cursor[q];
          reason_[k] = PendingReason::kBlockedByStrictFifo;
          message_[k] = message;
        }
      } else if (speculate_ && pops_since_event_ >= quiet_pops_ &&
                 2 * taken_back_ <= scanned_ + quiet_pops_) {
        ScanRun(q, out);
      }
      if (cursor[q] < (*jobs_of_queue_)[q].size()) {
        const QueueEntry& next = (*jobs_of_queue_)[q][cursor[q]];
        // It is popped about one round of all queues later: fetch what its
        // attempt reads now, so that it is in cache by then.
        // (Not the PendingJob: a failed attempt reads the class's
        // representative instead.)
        __builtin_prefetch(&failures_[next.job_class]);
        __builtin_prefetch(&message_[offset_[q] + cursor[q]], 1);
        heads.front() = Key(next, q);
      } else {
        heads.front() = heads.back();
        heads.pop_back();
      }
      if (!heads.empty()) SiftDown(heads, 0);
      // One of the root's children is usually the head after next.
      if (heads.size() > kHeapArity) {
        for (size_t h = 1; h <= kHeapArity; ++h) {
          Prefetch(heads[h].job_class);
          // Its queue's next entry, which becomes the queue's head then.
          const QueueId hq = heads[h].queue;
          __builtin_prefetch(&(*jobs_of_queue_)[hq].data()[cursor[hq] + 1]);
          // And what a failed attempt reads of its queue: its quota
          // availability and its budget epoch.
          __builtin_prefetch(&state_.available[static_cast<size_t>(hq) *
                                               state_.s->flavors.size()]);
          __builtin_prefetch(&state_.budget_epoch[hq]);
        }
      }
    }
    // Written over out.pending's old entries where it has them: its memory
    // (several MB) is reused rather than allocated again, which in a
    // long-running process often means fresh pages, each a page fault.
    std::vector<PendingDecision>& pending = out.pending;
    const size_t count = state_.s->pending.size() - out.admissions.size();
    if (pending.size() > count) pending.resize(count);
    pending.reserve(count);
    size_t k = 0;
    for (size_t q = 0; q < state_.s->queues.size(); ++q) {
      int32_t position = 0;
      for (size_t j = offset_[q]; j < offset_[q + 1]; ++j) {
        if (admitted_[j]) continue;
        PendingDecision decision{.job = (*jobs_of_queue_)[q][j - offset_[q]].id,
                                 .queue = static_cast<QueueId>(q),
                                 .reason = reason_[j],
                                 .message = std::move(message_[j]),
                                 .position = ++position};
        if (k < pending.size()) {
          pending[k] = std::move(decision);
        } else {
          pending.push_back(std::move(decision));
        }
        ++k;
      }
    }
  }

 private:
  // Fetches what an attempt for a job of the class reads first: its
  // failure record and its representative (queue, gang, shape).
  void Prefetch(int32_t job_class) const {
    __builtin_prefetch(&failures_[job_class]);
    __builtin_prefetch(state_.classes->InfoAddress(job_class));
    const char* job = reinterpret_cast<const char*>(
        &state_.classes->RepresentativeOf(job_class));
    __builtin_prefetch(job + offsetof(PendingJob, queue));
    __builtin_prefetch(job + offsetof(PendingJob, required_topology));
  }

  // --- Speculative runs ---
  //
  // Most of a cycle's attempts fail, and once admissions stop (in the
  // steady state, after the first fifth of the attempts) every failure
  // leaves the state as it was. A queue's next jobs would then fail exactly
  // as they do now, whenever their turn comes, as long as the state does not
  // change before it: ScanRun() takes them at once, from the queue's own
  // (contiguous) order, without a round through the heap of heads each, and
  // stops at the first one whose attempt would change the state (it is made
  // in order). The jobs taken form the queue's run. Keys grow along a
  // queue's order (HeadKey; not with nominal_before_borrowing, where the
  // borrowing flag depends on the class), so the heap pops jobs in
  // ascending key order: when an attempt changes the state, a run's jobs
  // with keys below that attempt's key came before it, and the others are
  // taken back (RewindRuns) and attempted again in order, in the new state.
  // A run is confirmed when its queue's next head is popped.
  // So every job gets the decision and explanation it gets without runs;
  // PolicyConfig::use_equivalence_classes = false turns runs off too, which
  // the property tests compare against.

  struct SpecRun {
    QueueId queue;
    // The state its jobs saw (RunStamp) and the share its keys had.
    uint64_t stamp;
    uint32_t flavor_mask;
    uint32_t quota_mask;
    uint64_t index_mask;
    int64_t share;
  };

  void BeginRuns() {
    speculate_ = state_.config->use_equivalence_classes &&
                 !state_.config->nominal_before_borrowing &&
                 state_.s->flavors.size() <= 32;
    run_begin_.assign(state_.s->queues.size(), 0);
    run_of_queue_.assign(state_.s->queues.size(), -1);
    runs_.clear();
    pops_since_event_ = 0;
    quiet_pops_ = std::max<size_t>(heads_.size(), 16);
    scanned_ = taken_back_ = 0;
  }

  // The state the jobs of a run of q depend on: as EngineState::Stamp(), over
  // the flavors and placement indexes of the run (the union of its failures'
  // masks).
  uint64_t RunStamp(const SpecRun& run) const {
    const QueueId q = run.queue;
    uint64_t stamp = 0;
    for (uint64_t mask = run.quota_mask; mask != 0; mask &= mask - 1)
      stamp +=
          state_.QuotaEpoch(state_.root_of_queue[q], __builtin_ctzll(mask));
    for (uint64_t mask = run.flavor_mask; mask != 0; mask &= mask - 1)
      stamp += state_.flavor_epoch[__builtin_ctzll(mask)];
    for (uint64_t mask = run.index_mask; mask != 0; mask &= mask - 1)
      stamp += state_.indexes.ById(__builtin_ctzll(mask)).epoch();
    return stamp + state_.budget_epoch[q];
  }

  // Takes q's next jobs (after the one just attempted in order) while each
  // fails without changing the state.
  void ScanRun(QueueId q, Decisions& out) {
    const std::vector<QueueEntry>& jobs = (*jobs_of_queue_)[q];
    size_t c = cursor_[q];
    uint32_t mask = 0;
    uint32_t quota_mask = 0;
    uint64_t index_mask = 0;
    while (c < jobs.size()) {
      const QueueEntry& e = jobs[c];
      if (c + 1 < jobs.size()) Prefetch(jobs[c + 1].job_class);
      if (TryAdmit(e, e.job_class, q, offset_[q] + c, out,
                   /*speculative=*/true) != Outcome::kFailed) {
        break;
      }
      const ClassFailure& failure = failures_[e.job_class];
      mask |= failure.flavor_mask;
      quota_mask |= failure.quota_mask;
      index_mask |= failure.index_mask;
      ++c;
    }
    if (c == cursor_[q]) return;
    run_begin_[q] = cursor_[q];
    scanned_ += c - cursor_[q];
    cursor_[q] = c;
    if (run_of_queue_[q] < 0) {
      run_of_queue_[q] = static_cast<int32_t>(runs_.size());
      runs_.push_back({.queue = q});
    }
    SpecRun& run = runs_[run_of_queue_[q]];
    run.flavor_mask = mask;
    run.quota_mask = quota_mask;
    run.index_mask = index_mask;
    run.stamp = RunStamp(run);
    run.share = state_.CachedShare(q);
  }

  // The attempt of `head` changed the state: every run whose jobs depend on
  // what changed gives back its jobs that come after `head`.
  void RewindRuns(const HeadKey& head) {
    size_t kept = 0;

    for (size_t i = 0; i < runs_.size(); ++i) {
      const SpecRun run = runs_[i];
      const QueueId q = run.queue;
      if (run_begin_[q] == cursor_[q]) {  // confirmed
        run_of_queue_[q] = -1;
        continue;
      }
      if (RunStamp(run) == run.stamp) {
        run_of_queue_[q] = static_cast<int32_t>(kept);
        runs_[kept++] = run;
        continue;
      }
      run_of_queue_[q] = -1;
      const std::vector<QueueEntry>& jobs = (*jobs_of_queue_)[q];
      // The run's first job whose key (as it was) exceeds the head's.
      const auto first_after = std::partition_point(
          jobs.begin() + static_cast<std::ptrdiff_t>(run_begin_[q]),
          jobs.begin() + static_cast<std::ptrdiff_t>(cursor_[q]),
          [&](const QueueEntry& e) {
            return KeyWithShare(e, q, run.share) < head;
          });
      const size_t back = static_cast<size_t>(first_after - jobs.begin());
      taken_back_ += cursor_[q] - back;
      const bool in_heap = cursor_[q] < jobs.size();
      cursor_[q] = back;
      run_begin_[q] = back;
      if (back == jobs.size()) continue;  // all of it came before
      const HeadKey key = Key(jobs[back], q);
      size_t h = heads_.size();
      if (in_heap) {
        for (h = 1; h < heads_.size() && heads_[h].queue != q; ++h) {
        }
      }
      if (h == heads_.size()) heads_.push_back(key);
      heads_[h] = key;
      SiftUpBelowRoot(heads_, h);
    }
    runs_.resize(kept);
  }

  // A preemption lowered queue q's usage, and so its share: its head moves
  // up in the order (fair share) at once, not at its next turn. Called while
  // the preemptor's queue is the root of heads_.
  void RefreshHead(QueueId q) {
    if (cursor_[q] >= (*jobs_of_queue_)[q].size()) return;
    for (size_t i = 1; i < heads_.size(); ++i) {
      if (heads_[i].queue != q) continue;
      const HeadKey key = Key((*jobs_of_queue_)[q][cursor_[q]], q);
      if (key < heads_[i]) {
        heads_[i] = key;
        SiftUpBelowRoot(heads_, i);
      }
      return;
    }
  }

  // Whether a job of `job_class` in queue q would borrow: no candidate
  // flavor takes it within q's nominal quota at q's current usage
  // (PolicyConfig::nominal_before_borrowing). A job without candidate
  // flavors counts as borrowing (it fails either way).
  bool Borrows(int32_t job_class, QueueId q) const {
    const PendingJob& job = state_.classes->RepresentativeOf(job_class);
    const Resources need = job.worker.AsResources() * job.workers;
    for (FlavorId f : state_.classes->FlavorsOf(job_class)) {
      if (!state_.OverNominal(q, f, need)) return false;
    }
    return true;
  }

  HeadKey Key(const QueueEntry& e, QueueId q) {
    return KeyWithShare(e, q, state_.CachedShare(q));
  }

  // Key() when q's share is `share`.
  HeadKey KeyWithShare(const QueueEntry& e, QueueId q, int64_t share) const {
    const bool aged =
        state_.config->aging_threshold > 0 &&
        state_.s->now - e.submit_time >= state_.config->aging_threshold;
    return {.major = HeadKey::Major(state_.config->nominal_before_borrowing &&
                                        Borrows(e.job_class, q),
                                    e.neg_priority, !aged),
            .share = aged ? 0 : share,
            .submit_time = e.submit_time,
            .job = e.id,
            .queue = q,
            .job_class = e.job_class};
  }

  enum class Outcome : uint8_t {
    kAdmitted,
    kFailed,
    // Speculative only: the attempt would change the state (admit, preempt,
    // reserve, hold quota) or count a reservation search; it must be made in
    // order.
    kDeferred,
  };

  // Admits the job of `entry` (of class `job_class`) or explains why not.
  // A speculative attempt (see ScanRun) changes no cycle state: it either
  // fails exactly as an attempt in order would in the same state, or is
  // deferred before it changes anything.
  Outcome TryAdmit(const QueueEntry& entry, int32_t job_class, QueueId q,
                   size_t j, Decisions& out, bool speculative = false) {
    // A class that failed in the same state fails again the same way; this
    // check does not touch the (cold) PendingJob.
    ClassFailure& failure = failures_[job_class];
    if (failure.cycle == state_.cycle &&
        state_.config->use_equivalence_classes &&
        failure.stamp == state_.Stamp(*failure.flavors, failure.skip, q)) {
      if (failure.searched) {
        // The search count must grow in order (Reservations::CanSearch()).
        if (speculative) return Outcome::kDeferred;
        reservations_.StartSearch();
      }
      reason_[j] = failure.reason;
      if (explain_) message_[j] = failure.message;
      return Outcome::kFailed;
    }
    if (speculative && state_.config->hold_borrowing_for_priority)
      return Outcome::kDeferred;
    // Its kept details are compared at the end (TextOf).
    const char* kept = reinterpret_cast<const char*>(&kept_[job_class]);
    for (size_t line = 0; line < sizeof(KeptDetails); line += 64)
      __builtin_prefetch(kept + line);
    // Everything a failed attempt, an admission or a preemption plan reads of
    // the job is the same for every job of its class: evaluate the class's
    // compact representative, and touch the job itself only to backfill or
    // reserve (or where the borrowing hold reads its priority class).
    auto actual = [&]() -> const PendingJob& {
      return state_.s->pending[entry.index];
    };
    const PendingJob& job = state_.config->hold_borrowing_for_priority
                                ? actual()
                                : state_.classes->RepresentativeOf(job_class);
    const Queue& queue = state_.s->queues[job.queue];
    const std::vector<FlavorId>& flavors = state_.classes->FlavorsOf(job_class);
    // What a failure depends on: the quota of the queue's tree on its
    // candidate flavors, but fair-share preemption compares the queues'
    // usage on every flavor, so there the quota of the tree on all of them
    // (and the capacity of all: a preemption plan reads it).
    const std::vector<FlavorId>& stamped =
        queue.fair_share_preemption && !flavors.empty() ? all_flavors_
                                                        : flavors;
    // The epochs before the attempt (HoldBorrowingFor may bump the quota
    // epoch during it).
    const uint64_t quota_sum = state_.QuotaSum(stamped, job.queue);
    // Positions in `flavors` where it got to placement, and where that went
    // through a placement index (with no reservation about: then the
    // failure depends on the index's counts alone).
    uint64_t placed = 0;
    uint64_t indexed = 0;
    const int32_t shape = state_.classes->ShapeOf(job_class);
    // Why each flavor failed, as a compact record; the text is formatted
    // from it only when the class's last record differs (TextOf).
    std::vector<Detail>& details = details_;
    details.clear();
    if (flavors.empty()) {
      reason_[j] = PendingReason::kNoEligibleFlavor;
      details.push_back({.kind = Detail::kNoEligibleFlavor});
      message_[j] = TextOf(failure, job_class, job, reason_[j], details);
      Remember(failure, flavors, placed, indexed, shape, job.queue, quota_sum);
      return Outcome::kFailed;
    }
    const Resources need = job.worker.AsResources() * job.workers;
    auto add_detail = [&](Detail detail) {
      if (details.empty()) reason_[j] = ReasonOf(detail.kind);
      details.push_back(detail);
    };
    // Flavors within budget (preemption may free quota and capacity, not
    // money) and flavors where only capacity is missing (a reservation may
    // wait for it).
    std::vector<FlavorId>& affordable = affordable_;
    std::vector<FlavorId>& reservable = reservable_;
    affordable.clear();
    reservable.clear();
    // Flavor fungibility: the first flavor that takes the job only by
    // borrowing, while later ones are tried within nominal quota.
    std::optional<FlavorId> borrow_flavor;
    std::vector<NodeId> borrow_nodes;
    // Whether a flavor that needs preemption is preempted on at once.
    const bool preempt_now = !queue.try_next_when_preempting &&
                             PreemptionEnabled(queue, *state_.config);
    if (speculative && preempt_now) return Outcome::kDeferred;
    for (size_t i = 0; i < flavors.size(); ++i) {
      const FlavorId f = flavors[i];
      Resource failed = Resource::kGpu;
      int64_t cost = 0;
      BudgetId refused = 0;
      if (!state_.Affordable(job, f, &cost, &refused)) {
        add_detail({.kind = Detail::kBudget,
                    .flavor = f,
                    .a = state_.budget_remaining[refused],
                    .b = cost,
                    .c = refused});
        continue;
      }
      affordable.push_back(f);
      // With a flavor taken by borrowing already, only one within nominal
      // quota can still win: a later one that borrows too is not placed.
      if (borrow_flavor.has_value() &&
          state_.OverNominal(job.queue, f, need).has_value()) {
        continue;
      }
      if (!state_.FitsQuota(job.queue, f, need, &failed)) {
        Detail detail{.kind = Detail::kQuota,
                      .resource = static_cast<uint8_t>(failed),
                      .flavor = f,
                      .a = state_.quota->Usage(job.queue, f, failed),
                      .b = state_.quota->Nominal(job.queue, f, failed),
                      .c = state_.quota->CohortLends(
                          job.queue, f, failed,
                          state_.AvailableQuota(job.queue, f, failed))};
        if (state_.quota->CohortLimitAbove(job.queue, f, failed)) {
          const QuotaTree::Binding binding =
              state_.BindingLimit(job.queue, f, failed, need.Get(failed));
          detail.limit = static_cast<uint8_t>(binding.kind);
          detail.limit_cohort = binding.cohort;
        }
        add_detail(detail);
        preemption_.HoldBorrowingFor(job, f, need);
      } else if (preemption_.BorrowsWhileRebalancing(job, f, need)) {
        add_detail(OverNominalDetail(Detail::kRebalancing, job, f, need, 0));
      } else if (const int32_t* held =
                     preemption_.BorrowsWhileHeld(job, f, need)) {
        add_detail(OverNominalDetail(Detail::kHeld, job, f, need, *held));
      } else {
        placed |= i < 64 ? uint64_t{1} << i : 0;
        PlacementResult placement = state_.Place(f, job, shape);
        if (i < 64 && reservations_.empty() &&
            state_.IndexOf(f, shape) != nullptr)
          indexed |= uint64_t{1} << i;
        if (placement.failure == PlacementFailure::kNone) {
          if (speculative) return Outcome::kDeferred;
          if (queue.try_next_when_borrowing &&
              state_.OverNominal(job.queue, f, need).has_value()) {
            if (!borrow_flavor.has_value()) {
              borrow_flavor = f;
              borrow_nodes = std::move(placement.worker_nodes);
            }
            continue;
          }
          state_.Admit(job, entry.id, f, std::move(placement.worker_nodes),
                       out);
          return Outcome::kAdmitted;
        }
        if (!reservations_.empty()) {
          if (speculative) return Outcome::kDeferred;
          if (reservations_.TryBackfill(actual(), f, out))
            return Outcome::kAdmitted;
        }
        reservable.push_back(f);
        if (placement.failure == PlacementFailure::kNoFitCluster) {
          add_detail({.kind = Detail::kNoFitCluster,
                      .flavor = f,
                      .a = placement.best_group_workers});
        } else if (placement.failure == PlacementFailure::kNoFitTopology) {
          add_detail({.kind = Detail::kNoFitTopology,
                      .flavor = f,
                      .a = placement.best_group_workers});
        } else {
          add_detail({.kind = Detail::kNoCapacity,
                      .flavor = f,
                      .a = placement.capacity_workers});
        }
        // Free capacity held for a reservation is not free to this job: say
        // for whom, and from when.
        if (!reservations_.empty()) {
          if (std::optional<Reservations::HeldFor> held =
                  reservations_.HeldOn(f, job.worker.AsResources())) {
            const int64_t gpus = std::clamp<int64_t>(
                held->held.gpus, 0, std::numeric_limits<int32_t>::max());
            add_detail({.kind = Detail::kReservedFor,
                        .flavor = f,
                        .a = (gpus << 32) | held->pending_index,
                        .b = state_.s->pending[held->pending_index].id,
                        .c = held->start_time});
          }
        }
      }
      if (preempt_now && !borrow_flavor.has_value()) {
        victim_queues_.clear();
        if (preemption_.TryPreempt(job, entry.id, {f}, out, victim_queues_)) {
          for (QueueId vq : victim_queues_) RefreshHead(vq);
          return Outcome::kAdmitted;
        }
      }
    }
    if (borrow_flavor.has_value()) {
      // No later flavor took it within nominal quota: borrow on the first.
      state_.Admit(job, entry.id, *borrow_flavor, std::move(borrow_nodes), out);
      return Outcome::kAdmitted;
    }
    if (PreemptionEnabled(queue, *state_.config)) {
      if (speculative) {
        // A failed search changes nothing (PlanPreemption restores what it
        // tries): a speculative attempt goes on where no plan exists. Not
        // with fair-share preemption, whose shares read the queues' usage
        // on every flavor, beyond what a run's stamp covers.
        if (queue.fair_share_preemption ||
            preemption_.CanPreempt(job, affordable)) {
          return Outcome::kDeferred;
        }
      } else {
        victim_queues_.clear();
        // (With preempt_now every flavor was tried already, in the loop.)
        if (!preempt_now && preemption_.TryPreempt(job, entry.id, affordable,
                                                   out, victim_queues_)) {
          // The victims' queues' shares went down: their heads move up now.
          for (QueueId vq : victim_queues_) RefreshHead(vq);
          return Outcome::kAdmitted;
        }
      }
      if (!speculative && queue.fair_share_preemption && !affordable.empty())
        add_detail(FairShareDetail(job, affordable.front(), need));
      // A preemption plan reads the capacity of every flavor.
      placed = ~uint64_t{0};
      indexed = 0;
    }
    bool searched = false;
    if (!reservable.empty() && reservations_.CanSearch()) {
      if (speculative) return Outcome::kDeferred;
      std::string& message = scratch_;
      message.clear();
      AppendDetails(*state_.s, *state_.config, binding_limit_, job, details,
                    message);
      if (reservations_.TryReserve(actual(), reservable, message, out,
                                   &searched)) {
        // Not remembered: the reservation changed the state, and the next
        // job of the class may get one of its own.
        reason_[j] = PendingReason::kWaitingForReservation;
        if (explain_) message_[j] = texts_.New(message);
        return Outcome::kFailed;
      }
    }
    message_[j] = TextOf(failure, job_class, job, reason_[j], details);
    // (With fair-share preemption the search ran: `placed` covers every
    // position and `indexed` none, whichever list is stamped.)
    Remember(failure, stamped, placed, indexed, shape, job.queue, quota_sum);
    failure.searched = searched;
    return Outcome::kFailed;
  }

  // Why fair-share preemption found no victim for `job` on f (the first
  // flavor it may afford): its queue's share with the job against the
  // highest share of another queue of its cohort tree.
  Detail FairShareDetail(const PendingJob& job, FlavorId f,
                         const Resources& need) {
    QuotaTree& quota = *state_.quota;
    quota.Add(job.queue, f, need);
    const int64_t mine_with = QueueShare(*state_.s, quota, job.queue);
    Resources negative;
    negative -= need;
    quota.Add(job.queue, f, negative);
    Detail detail{.kind = Detail::kFairShareRefused,
                  .flavor = f,
                  .a = mine_with,
                  .c = -1};
    for (QueueId q : state_.queues_of_root[state_.root_of_queue[job.queue]]) {
      if (q == job.queue) continue;
      const int64_t share = state_.CachedShare(q);
      if (share > detail.b) {
        detail.b = share;
        detail.c = q;
      }
    }
    return detail;
  }

  // The detail of a job that may not borrow on f (rebalancing and held
  // details): its first resource above nominal quota.
  Detail OverNominalDetail(Detail::Kind kind, const PendingJob& job, FlavorId f,
                           const Resources& need, int64_t priority) const {
    Detail detail{.kind = kind, .has_resource = false, .flavor = f};
    if (std::optional<Resource> r = state_.OverNominal(job.queue, f, need)) {
      detail.has_resource = true;
      detail.resource = static_cast<uint8_t>(*r);
      detail.a = state_.quota->Usage(job.queue, f, *r);
      detail.b = state_.quota->Nominal(job.queue, f, *r);
      detail.c = priority;
    }
    return detail;
  }

  // The explanation of a failure of class c with these details: the class's
  // last one (kept across cycles while the class table is the same) when its
  // records are equal, so that most failures format and allocate nothing.
  // In a cycle that does not explain, only the reason is kept (the text
  // stays that of the kept details while the reason is the same).
  Message TextOf(ClassFailure& failure, int32_t job_class,
                 const PendingJob& job, PendingReason reason,
                 const std::vector<Detail>& details) {
    if (!explain_) {
      if (failure.reason != reason) failure.text_valid = false;
      failure.reason = reason;
      return Message();
    }
    if (failure.text_valid && failure.reason == reason &&
        failure.num_details == details.size() &&
        std::equal(details.begin(), details.end(), kept_[job_class].details)) {
      return failure.message;
    }
    std::string& message = scratch_;
    message.clear();
    AppendDetails(*state_.s, *state_.config, binding_limit_, job, details,
                  message);
    failure.reason = reason;
    failure.message = texts_.New(message);
    failure.text_valid = details.size() <= kKeptDetails;
    if (failure.text_valid) {
      failure.num_details = static_cast<uint8_t>(details.size());
      std::copy(details.begin(), details.end(), kept_[job_class].details);
    }
    return failure.message;
  }

  // Remembers a failure whose reason and message TextOf() just set: it
  // depends on the capacity of the flavors at positions in `placed`
  // (through the placement index at positions in `indexed`), and
  // `quota_sum` was EngineState::QuotaSum(flavors, q) when it was attempted.
  void Remember(ClassFailure& failure, const std::vector<FlavorId>& flavors,
                uint64_t placed, uint64_t indexed, int32_t shape, QueueId q,
                uint64_t quota_sum) {
    failure.cycle = state_.cycle;
    failure.flavors = &flavors;
    failure.skip = ~placed;
    failure.stamp = state_.StampWith(flavors, failure.skip, q, quota_sum);
    failure.quota_mask = 0;
    for (FlavorId f : flavors) {
      if (f < 32) failure.quota_mask |= uint32_t{1} << f;
    }
    failure.flavor_mask = 0;
    failure.index_mask = 0;
    for (size_t i = 0; i < flavors.size() && i < 64; ++i) {
      if ((placed >> i & 1) == 0) continue;
      const int32_t id = (indexed >> i & 1) != 0
                             ? state_.IndexOf(flavors[i], shape)->id
                             : int32_t{-1};
      if (id >= 0 && id < 64) {
        failure.index_mask |= uint64_t{1} << id;
      } else if (flavors[i] < 32) {
        failure.flavor_mask |= uint32_t{1} << flavors[i];
      }
    }
    failure.searched = false;
  }

  EngineState state_;
  // Whether this cycle formats its pending jobs' explanations (Run()).
  bool explain_ = true;
  Reservations reservations_{state_};
  CyclePreemption preemption_{state_};
  const std::vector<std::vector<QueueEntry>>* jobs_of_queue_ = nullptr;
  // Per class (ClassTable): its failure record.
  std::vector<ClassFailure> failures_;
  std::vector<KeptDetails> kept_;
  // Per queue: the slot of its first job (Reset()).
  std::vector<size_t> offset_;
  // Per slot: admitted, or why not.
  std::vector<uint8_t> admitted_;
  std::vector<PendingReason> reason_;
  std::vector<Message> message_;
  // The heap of queue heads (queue_order.h).
  std::vector<HeadKey> heads_;
  // Per queue: its next job in Run().
  std::vector<size_t> cursor_;
  std::string scratch_;
  // EngineState::BindingLimit(), for AppendDetails().
  std::function<QuotaTree::Binding(QueueId, FlavorId, Resource, int64_t)>
      binding_limit_ = [this](QueueId q, FlavorId f, Resource r, int64_t want) {
        return state_.BindingLimit(q, f, r, want);
      };
  std::vector<Detail> details_;
  std::vector<FlavorId> affordable_, reservable_;
  // Every flavor, in id order (failures of fair-share preempting classes
  // are stamped with it).
  std::vector<FlavorId> all_flavors_;
  std::vector<QueueId> victim_queues_;
  // The texts of explanations.
  MessageStore texts_;
  // ClassTable::generation() of the classes failures_ describes.
  uint64_t texts_generation_ = 0;
  // Speculative runs (ScanRun).
  bool speculate_ = false;
  size_t pops_since_event_ = 0;
  // Pops without a change of the state before runs are scanned.
  size_t quiet_pops_ = 0;
  // Jobs taken into runs and taken back, in this cycle. A job taken back
  // cost its scan for nothing: runs are scanned only while at most half of
  // what they took was taken back.
  size_t scanned_ = 0, taken_back_ = 0;
  // Per queue: where its run begins (== its cursor without one), and its
  // index in runs_ (-1 without one).
  std::vector<size_t> run_begin_;
  std::vector<int32_t> run_of_queue_;
  std::vector<SpecRun> runs_;
};

}  // namespace

std::unique_ptr<CycleRunner> NewCycleRunner() {
  return std::make_unique<Engine>();
}

Decisions RunCycle(const Snapshot& s, const PolicyConfig& config,
                   const QuotaTree& running_quota,
                   const std::vector<std::vector<QueueEntry>>& jobs,
                   const ClassTable& classes) {
  Decisions out;
  Engine().Run(s, config, running_quota, jobs, classes, out, true);
  return out;
}

}  // namespace trainyard::scheduler::policy::internal
