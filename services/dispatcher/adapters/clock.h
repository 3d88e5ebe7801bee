// Where the dispatcher and its adapters read the time: the real clock in
// production and the quick start, a virtual clock in tests and the simulator.
// Code that must be deterministic takes a Clock& instead of calling
// absl::Now().
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_CLOCK_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard::dispatcher {

// A source of the current time (UTC). Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// absl::Now().
class RealClock final : public Clock {
 public:
  absl::Time Now() const override;
  // A process-wide instance.
  static RealClock& Get();
};

// A clock that moves only when told to. Thread-safe.
class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(absl::Time start = absl::UnixEpoch());

  absl::Time Now() const override;
  // Moves the clock forward by d; a negative d is ignored (the clock never
  // goes back through Advance). Returns the new time.
  absl::Time Advance(absl::Duration d);
  // Sets the time, in either direction. Users of a clock that goes back (the
  // sim adapter) treat it as "no time passed".
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_CLOCK_H_
