// Backfill and reservations within a cycle (docs/scheduling.md, "Backfill
// and reservations"): the first jobs of the cycle that fit quota but not
// capacity get capacity reserved from when running attempts reach their time
// limits; later jobs may use the held capacity only if they end before the
// reservation starts. Internal to the policy library (engine.h).
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_BACKFILL_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_BACKFILL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "services/scheduler/policy/decisions.h"
#include "services/scheduler/policy/engine_state.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy::internal {

// The reservations of one cycle, made and used against `state`.
class Reservations {
 public:
  explicit Reservations(EngineState& state) : state_(state) {}
  Reservations(const Reservations&) = delete;
  Reservations& operator=(const Reservations&) = delete;

  // Starts a cycle: no reservations, no searches.
  void Reset() {
    reservations_.clear();
    searches_ = 0;
    ends_built_ = false;
    awaited_.clear();
  }

  // Whether no reservation was made in this cycle.
  bool empty() const { return reservations_.empty(); }

  // Whether the limits allow another reservation search.
  bool CanSearch() const {
    return static_cast<int32_t>(reservations_.size()) <
               state_.config->max_reservations &&
           searches_ < state_.config->max_reservation_searches;
  }

  // Counts a reservation search if the limits allow one.
  bool StartSearch() {
    if (!CanSearch()) return false;
    ++searches_;
    return true;
  }

  // Places `job` on f using also capacity held by reservations it ends
  // before; admits it as backfill.
  bool TryBackfill(const PendingJob& job, FlavorId f, Decisions& out);

  // The first reservation made this cycle that holds free capacity on f now
  // of what a worker of this shape needs (GPUs, where it needs any; else any
  // resource it needs), for explanations: its job's index in
  // Snapshot::pending, its start and what it holds on f.
  struct HeldFor {
    int32_t pending_index = 0;
    TimeMicros start_time = 0;
    Resources held;
  };
  std::optional<HeldFor> HeldOn(FlavorId f, const Resources& worker) const;

  // Reserves capacity for `job` on the flavor (of `flavors`, which fit its
  // quota and budget) where it can start earliest; appends the explanation
  // to `message` (which holds why it cannot start now). `searched` is set
  // when a search was counted.
  bool TryReserve(const PendingJob& job, const std::vector<FlavorId>& flavors,
                  std::string& message, Decisions& out, bool* searched);

 private:
  struct Hold {
    NodeId node;
    Resources amount;
  };
  struct ReservationState {
    FlavorId flavor;
    TimeMicros start_time;
    // The reserved job's index in Snapshot::pending.
    int32_t pending_index;
    // Free capacity taken now, usable only by jobs that end by start_time.
    std::vector<Hold> held;
  };

  // Reservations on f that a job with this time limit ends before.
  std::vector<ReservationState*> EligibleReservations(const PendingJob& job,
                                                      FlavorId f);

  // Running attempts on f with a time limit: (end, index), by end, then job
  // id.
  const std::vector<std::pair<TimeMicros, int>>& EndsOf(FlavorId f);

  // Where `job` could be placed on f once the first k attempts of EndsOf(f)
  // have ended, keeping what earlier reservations still wait for.
  PlacementResult Probe(const PendingJob& job, FlavorId f, size_t k);

  EngineState& state_;
  std::vector<ReservationState> reservations_;
  int32_t searches_ = 0;
  // Per flavor (built on first use): running attempts with time limits.
  std::vector<std::vector<std::pair<TimeMicros, int>>> ends_of_flavor_;
  bool ends_built_ = false;
  // Per node (sized on first use): what reservations wait to be released.
  std::vector<Resources> awaited_;
  std::vector<Resources> probe_free_;
};

}  // namespace trainyard::scheduler::policy::internal

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_BACKFILL_H_
