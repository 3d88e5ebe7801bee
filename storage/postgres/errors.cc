#include "storage/postgres/errors.h"

#include <pqxx/except>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace trainyard::storage::postgres {
namespace {

constexpr char kConstraintPayload[] = "trainyard.dev/constraint";

// PostgreSQL words violations as `... violates <kind> constraint "name"`.
std::string ConstraintFromMessage(const std::string& message) {
  static constexpr char kMarker[] = "constraint \"";
  size_t start = message.find(kMarker);
  if (start == std::string::npos) return "";
  start += sizeof(kMarker) - 1;
  size_t end = message.find('"', start);
  if (end == std::string::npos) return "";
  return message.substr(start, end - start);
}

absl::Status WithConstraint(absl::Status status, const std::string& message) {
  std::string constraint = ConstraintFromMessage(message);
  if (!constraint.empty()) {
    status.SetPayload(kConstraintPayload, absl::Cord(constraint));
  }
  return status;
}

}  // namespace

absl::Status StatusFromException(const std::exception& e) {
  const std::string what = e.what();
  if (dynamic_cast<const pqxx::unique_violation*>(&e)) {
    return WithConstraint(absl::AlreadyExistsError(what), what);
  }
  if (dynamic_cast<const pqxx::foreign_key_violation*>(&e)) {
    return WithConstraint(absl::FailedPreconditionError(what), what);
  }
  if (dynamic_cast<const pqxx::check_violation*>(&e) ||
      dynamic_cast<const pqxx::not_null_violation*>(&e) ||
      dynamic_cast<const pqxx::data_exception*>(&e)) {
    return WithConstraint(absl::InvalidArgumentError(what), what);
  }
  if (dynamic_cast<const pqxx::serialization_failure*>(&e) ||
      dynamic_cast<const pqxx::deadlock_detected*>(&e)) {
    return absl::AbortedError(what);
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&e) ||
      dynamic_cast<const pqxx::in_doubt_error*>(&e)) {
    return absl::UnavailableError(absl::StrCat("database unavailable: ", what));
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    // Class 08 (connection exception), 57P (operator intervention: shutdown)
    // and 53 (insufficient resources) are transient.
    const std::string& state = sql->sqlstate();
    if (state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0 ||
        state.rfind("53", 0) == 0) {
      return absl::UnavailableError(
          absl::StrCat("database unavailable: ", what));
    }
    return absl::InternalError(
        absl::StrCat("database error ", state, ": ", what));
  }
  return absl::InternalError(absl::StrCat("database error: ", what));
}

std::string ViolatedConstraint(const absl::Status& status) {
  auto payload = status.GetPayload(kConstraintPayload);
  return payload ? std::string(*payload) : "";
}

}  // namespace trainyard::storage::postgres
