#include "services/dispatcher/adapters/clock.h"

namespace trainyard::dispatcher {

absl::Time RealClock::Now() const { return absl::Now(); }

RealClock& RealClock::Get() {
  static RealClock* const clock = new RealClock();
  return *clock;
}

VirtualClock::VirtualClock(absl::Time start) : now_(start) {}

absl::Time VirtualClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

absl::Time VirtualClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  if (d > absl::ZeroDuration()) now_ += d;
  return now_;
}

void VirtualClock::Set(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

}  // namespace trainyard::dispatcher
