#include "storage/postgres/leader.h"

#include <exception>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"

namespace trainyard::storage::postgres {

void RunAsLeader(Database& db, int64_t key, absl::Duration standby_poll,
                 const absl::Notification& stop, std::atomic<bool>& leader,
                 absl::FunctionRef<void(absl::FunctionRef<bool()> alive)> lead,
                 absl::FunctionRef<void(const absl::Status&)> on_error,
                 absl::FunctionRef<void()> standby) {
  while (!stop.HasBeenNotified()) {
    bool got_lock = false;
    absl::Status s = db.WithConnection([&](pqxx::connection& conn) {
      pqxx::nontransaction lock(conn);
      if (!lock.exec_params1("SELECT pg_try_advisory_lock($1)", key)[0]
               .as<bool>()) {
        return absl::OkStatus();
      }
      got_lock = true;
      leader = true;
      absl::Status lost;
      lead([&] {
        try {
          lock.exec("SELECT 1");
          return true;
        } catch (const std::exception& e) {
          lost = absl::UnavailableError(
              absl::StrCat("leader lock connection lost: ", e.what()));
          return false;
        }
      });
      leader = false;
      if (!lost.ok()) return lost;
      try {
        lock.exec_params("SELECT pg_advisory_unlock($1)", key);
      } catch (const std::exception&) {
        // The session is gone, and the lock with it.
      }
      return absl::OkStatus();
    });
    leader = false;
    if (!s.ok()) on_error(s);
    if (!got_lock && !stop.HasBeenNotified()) standby();
    stop.WaitForNotificationWithTimeout(standby_poll);
  }
}

}  // namespace trainyard::storage::postgres
