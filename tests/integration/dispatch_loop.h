// The loop the dispatcher integration tests over a real backend share
// (slurm_dispatcher_test, kube_dispatcher_test, cross_backend_test): the
// real scheduler and dispatchers in the test process, driven round by round
// instead of by their leader loops, so that a test can look at the state
// between rounds.
#ifndef TRAINYARD_TESTS_INTEGRATION_DISPATCH_LOOP_H_
#define TRAINYARD_TESTS_INTEGRATION_DISPATCH_LOOP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "services/dispatcher/dispatcher.h"
#include "services/scheduler/scheduler_service.h"

namespace trainyard::testing {

// The scheduler over the database at `database_url` without Redis, driven
// by RunUntil.
inline absl::StatusOr<std::unique_ptr<scheduler::SchedulerService>>
TestScheduler(const std::string& database_url) {
  scheduler::SchedulerOptions so;
  so.postgres_url = database_url;
  so.redis_addr = "";
  return scheduler::SchedulerService::Create(so);
}

// The dispatcher of cluster `cluster` over `adapter`, driven by RunUntil.
inline absl::StatusOr<std::unique_ptr<dispatcher::Dispatcher>> TestDispatcher(
    const std::string& database_url, const std::string& cluster,
    dispatcher::Adapter* adapter) {
  return dispatcher::Dispatcher::Create(
      {.postgres_url = database_url, .cluster = cluster}, adapter);
}

// Rounds of one scheduler cycle and one pass of each dispatcher (each
// expected to succeed), `pause` apart, until `done` returns true after a
// round (true) or `timeout` has passed (false).
inline bool RunUntil(scheduler::SchedulerService& scheduler,
                     const std::vector<dispatcher::Dispatcher*>& dispatchers,
                     const std::function<bool()>& done, absl::Duration timeout,
                     absl::Duration pause) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    absl::StatusOr<scheduler::CycleReport> c = scheduler.RunCycle();
    EXPECT_TRUE(c.ok()) << c.status();
    for (dispatcher::Dispatcher* d : dispatchers) {
      absl::StatusOr<dispatcher::PassReport> p = d->RunPass();
      EXPECT_TRUE(p.ok()) << p.status();
    }
    if (done()) return true;
    absl::SleepFor(pause);
  }
  return false;
}

// The same with one dispatcher.
inline bool RunUntil(scheduler::SchedulerService& scheduler,
                     dispatcher::Dispatcher& dispatcher,
                     const std::function<bool()>& done, absl::Duration timeout,
                     absl::Duration pause) {
  return RunUntil(scheduler, std::vector<dispatcher::Dispatcher*>{&dispatcher},
                  done, timeout, pause);
}

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_INTEGRATION_DISPATCH_LOOP_H_
