// Leader election over a PostgreSQL session advisory lock: of the processes
// running RunAsLeader with the same key, at most one leads at a time. The
// lock lives as long as the leader's database session, so when the leader
// dies (or its connection breaks) PostgreSQL releases it and a standby takes
// over at its next try. Used by the scheduler (one per platform) and the
// dispatchers (one per cluster).
#ifndef TRAINYARD_STORAGE_POSTGRES_LEADER_H_
#define TRAINYARD_STORAGE_POSTGRES_LEADER_H_

#include <atomic>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "storage/postgres/pool.h"

namespace trainyard::storage::postgres {

// Until `stop` is notified: tries the lock every `standby_poll`; while it
// holds it, sets `leader` and calls `lead(alive)` once. `lead` does the
// leader's work until `stop` is notified or `alive()` (which checks the lock's
// connection, so also that the lock is still held) returns false, then
// returns; the lock is released and the loop goes on. A failure to reach the
// database (or a lost lock connection) is passed to `on_error`, and the loop
// goes on. After each try that did not get the lock, `standby` runs (a
// standby keeping its picture of the state warm) before the wait.
void RunAsLeader(
    Database& db, int64_t key, absl::Duration standby_poll,
    const absl::Notification& stop, std::atomic<bool>& leader,
    absl::FunctionRef<void(absl::FunctionRef<bool()> alive)> lead,
    absl::FunctionRef<void(const absl::Status&)> on_error,
    absl::FunctionRef<void()> standby = [] {});

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_LEADER_H_
