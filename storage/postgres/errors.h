#ifndef TRAINYARD_STORAGE_POSTGRES_ERRORS_H_
#define TRAINYARD_STORAGE_POSTGRES_ERRORS_H_

#include <exception>
#include <string>

#include "absl/status/status.h"

namespace trainyard::storage::postgres {

// Maps an exception thrown by libpqxx (or the standard library) to a status:
// unique violation → ALREADY_EXISTS, foreign-key violation →
// FAILED_PRECONDITION, check or not-null violation → INVALID_ARGUMENT,
// serialization failure or deadlock → ABORTED (retryable), lost connection →
// UNAVAILABLE, anything else → INTERNAL. The violated constraint's name, when
// PostgreSQL reports one, is attached as the payload
// "trainyard.dev/constraint".
absl::Status StatusFromException(const std::exception& e);

// The constraint name attached by StatusFromException, or "".
std::string ViolatedConstraint(const absl::Status& status);

}  // namespace trainyard::storage::postgres

#endif  // TRAINYARD_STORAGE_POSTGRES_ERRORS_H_
