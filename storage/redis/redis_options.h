// Connection options for Trainyard's Redis clients.

#ifndef TRAINYARD_STORAGE_REDIS_REDIS_OPTIONS_H_
#define TRAINYARD_STORAGE_REDIS_REDIS_OPTIONS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::storage::redis {

struct RedisOptions {
  // Host name or IP address. Prefer an IP address: name resolution is not
  // bounded by connect_timeout.
  std::string host = "127.0.0.1";
  int port = 6379;
  // Bound on establishing a TCP connection.
  absl::Duration connect_timeout = absl::Milliseconds(200);
  // Bound on each socket read/write of a command (socket timeout).
  absl::Duration command_timeout = absl::Milliseconds(500);
  // Maximum number of pooled connections of a RedisClient.
  int pool_size = 4;
  // After a failure, how long callers fail fast before the next reconnect
  // attempt.
  absl::Duration reconnect_backoff = absl::Milliseconds(250);
};

// Parses "host:port" (IPv6 as "[::1]:6379") into RedisOptions with the other
// fields at their defaults. InvalidArgument, naming the problem, otherwise.
absl::StatusOr<RedisOptions> ParseRedisAddress(std::string_view address);

}  // namespace trainyard::storage::redis

#endif  // TRAINYARD_STORAGE_REDIS_REDIS_OPTIONS_H_
