#include "services/scheduler/policy/backfill.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/preemption.h"

namespace trainyard::scheduler::policy::internal {

bool Reservations::TryBackfill(const PendingJob& job, FlavorId f,
                               Decisions& out) {
  if (reservations_.empty()) return false;
  std::vector<ReservationState*> eligible = EligibleReservations(job, f);
  if (eligible.empty()) return false;
  for (ReservationState* r : eligible) {
    for (const Hold& h : r->held) state_.free[h.node] += h.amount;
  }
  PlacementResult placement = PlaceGang(
      *state_.s, state_.free, state_.indexes.nodes_of_flavor(), f, job);
  for (ReservationState* r : eligible) {
    for (const Hold& h : r->held) state_.free[h.node] -= h.amount;
  }
  if (placement.failure != PlacementFailure::kNone) return false;
  // Each worker takes held capacity first (only short jobs can use it),
  // from the earliest reservation first; Commit() takes the rest from the
  // free capacity.
  const Resources worker = job.worker.AsResources();
  for (NodeId n : placement.worker_nodes) {
    Resources want = worker;
    for (ReservationState* r : eligible) {
      for (Hold& h : r->held) {
        if (h.node != n) continue;
        for (Resource res : kAllResources) {
          const int64_t take = std::min(want.Get(res), h.amount.Get(res));
          h.amount.Mutable(res) -= take;
          want.Mutable(res) -= take;
          state_.free[n].Mutable(res) += take;
        }
      }
    }
  }
  state_.Admit(job, job.id, f, std::move(placement.worker_nodes), out);
  out.admissions.back().backfill = true;
  return true;
}

bool Reservations::TryReserve(const PendingJob& job,
                              const std::vector<FlavorId>& flavors,
                              std::string& message, Decisions& out,
                              bool* searched) {
  if (!StartSearch()) return false;
  *searched = true;
  std::optional<FlavorId> best;
  TimeMicros best_start = 0;
  size_t best_ended = 0;
  std::vector<NodeId> best_nodes;
  for (FlavorId f : flavors) {
    const size_t m = EndsOf(f).size();
    if (m == 0) continue;
    PlacementResult all = Probe(job, f, m);
    if (all.failure != PlacementFailure::kNone) continue;
    // Fitting is monotone in the capacity released: binary search for the
    // fewest ended attempts.
    size_t lo = 1, hi = m;
    std::vector<NodeId> nodes = std::move(all.worker_nodes);
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      PlacementResult p = Probe(job, f, mid);
      if (p.failure == PlacementFailure::kNone) {
        hi = mid;
        nodes = std::move(p.worker_nodes);
      } else {
        lo = mid + 1;
      }
    }
    const TimeMicros start = EndsOf(f)[hi - 1].first;
    if (!best.has_value() || start < best_start) {
      best = f;
      best_start = start;
      best_ended = hi;
      best_nodes = std::move(nodes);
    }
  }
  if (!best.has_value()) return false;
  const FlavorId f = *best;
  // Hold what is free now on the chosen nodes (up to the gang's need there)
  // and remember the rest as awaited.
  if (awaited_.empty()) awaited_.assign(state_.free.size(), Resources{});
  ReservationState reservation{
      .flavor = f,
      .start_time = best_start,
      .pending_index = static_cast<int32_t>(&job - state_.s->pending.data())};
  const Resources worker = job.worker.AsResources();
  for (size_t i = 0; i < best_nodes.size();) {
    const NodeId n = best_nodes[i];
    int64_t count = 0;
    while (i < best_nodes.size() && best_nodes[i] == n) {
      ++count;
      ++i;
    }
    const Resources need_here = worker * count;
    Resources held;
    for (Resource r : kAllResources) {
      held.Mutable(r) =
          std::clamp<int64_t>(state_.free[n].Get(r), 0, need_here.Get(r));
    }
    state_.free[n] -= held;
    Resources wait = need_here;
    wait -= held;
    awaited_[n] += wait;
    reservation.held.push_back({.node = n, .amount = held});
    state_.indexes.Update(f, n, state_.free[n]);
  }
  // The attempts whose end it waits for may not be preempted later in the
  // cycle: the preemptor would take what they release.
  if (state_.awaited_attempts.empty())
    state_.awaited_attempts.assign(state_.s->running.size(), false);
  for (size_t k = 0; k < best_ended; ++k) {
    const int a = EndsOf(f)[k].second;
    for (NodeId n : state_.s->running[a].placement) {
      if (std::binary_search(best_nodes.begin(), best_nodes.end(), n)) {
        state_.awaited_attempts[a] = true;
        break;
      }
    }
  }
  reservations_.push_back(std::move(reservation));
  state_.quota->Add(job.queue, f, worker * job.workers);
  state_.Spend(job, f);
  state_.share_valid[job.queue] = false;
  ++state_.flavor_epoch[f];
  // Backfill on f is now possible: failures that depended on f's indexes
  // alone do not hold any more.
  state_.indexes.Touch(f);
  ++state_.QuotaEpoch(state_.root_of_queue[job.queue], f);
  ++state_.events;
  const std::string previous = message;
  message = absl::StrCat(
      "WAITING_FOR_RESERVATION: ", job.workers, " workers reserved on flavor ",
      state_.s->flavors[f].name, " from ",
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMicros(best_start),
                       absl::UTCTimeZone()),
      " (in ", (best_start - state_.s->now) / 1000000,
      " s), when running jobs reach their time limits; now: ", previous);
  out.reservations.push_back({.job = job.id,
                              .queue = job.queue,
                              .flavor = f,
                              .start_time = best_start,
                              .worker_nodes = std::move(best_nodes)});
  return true;
}

std::optional<Reservations::HeldFor> Reservations::HeldOn(
    FlavorId f, const Resources& worker) const {
  for (const ReservationState& r : reservations_) {
    if (r.flavor != f) continue;
    Resources held;
    for (const Hold& h : r.held) held += h.amount;
    bool matters = false;
    for (Resource res : kAllResources) {
      if (worker.gpus > 0 && res != Resource::kGpu) continue;
      matters |= worker.Get(res) > 0 && held.Get(res) > 0;
    }
    if (!matters) continue;
    return HeldFor{.pending_index = r.pending_index,
                   .start_time = r.start_time,
                   .held = held};
  }
  return std::nullopt;
}

std::vector<Reservations::ReservationState*> Reservations::EligibleReservations(
    const PendingJob& job, FlavorId f) {
  std::vector<ReservationState*> eligible;
  if (job.time_limit_micros <= 0) return eligible;
  for (ReservationState& r : reservations_) {
    if (r.flavor == f &&
        state_.s->now <= r.start_time - job.time_limit_micros) {
      eligible.push_back(&r);
    }
  }
  // Earliest start first: the holds fewer jobs can use go first.
  std::sort(eligible.begin(), eligible.end(),
            [](const ReservationState* a, const ReservationState* b) {
              return a->start_time < b->start_time;
            });
  return eligible;
}

const std::vector<std::pair<TimeMicros, int>>& Reservations::EndsOf(
    FlavorId f) {
  if (!ends_built_) {
    ends_built_ = true;
    ends_of_flavor_.resize(state_.s->flavors.size());
    for (auto& ends : ends_of_flavor_) ends.clear();
    for (size_t i = 0; i < state_.s->running.size(); ++i) {
      const RunningAttempt& r = state_.s->running[i];
      if (r.time_limit_micros <= 0 || r.placement.empty()) continue;
      ends_of_flavor_[r.flavor].emplace_back(
          std::max(state_.s->now, r.start_time + r.time_limit_micros),
          static_cast<int>(i));
    }
    // By end, then job id (not by index: decisions never depend on the order
    // of Snapshot::running).
    const std::vector<RunningAttempt>& running = state_.s->running;
    for (auto& ends : ends_of_flavor_) {
      std::sort(ends.begin(), ends.end(),
                [&](const std::pair<TimeMicros, int>& a,
                    const std::pair<TimeMicros, int>& b) {
                  if (a.first != b.first) return a.first < b.first;
                  return running[a.second].job < running[b.second].job;
                });
    }
  }
  return ends_of_flavor_[f];
}

PlacementResult Reservations::Probe(const PendingJob& job, FlavorId f,
                                    size_t k) {
  const std::vector<std::pair<TimeMicros, int>>& ends = EndsOf(f);
  if (probe_free_.size() != state_.free.size())
    probe_free_.resize(state_.free.size());
  for (NodeId n : state_.indexes.nodes_of_flavor()[f]) {
    probe_free_[n] = state_.free[n];
    if (!awaited_.empty()) probe_free_[n] -= awaited_[n];
  }
  for (size_t i = 0; i < k; ++i) {
    const int a = ends[i].second;
    if (!state_.preempted.empty() && state_.preempted[a]) continue;
    const RunningAttempt& r = state_.s->running[a];
    for (size_t w = 0; w < r.placement.size(); ++w)
      probe_free_[r.placement[w]] += WorkerShare(r, w);
  }
  return PlaceGang(*state_.s, probe_free_, state_.indexes.nodes_of_flavor(), f,
                   job);
}

}  // namespace trainyard::scheduler::policy::internal
