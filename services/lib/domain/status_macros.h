// Early returns on errors, for functions that return absl::Status or
// absl::StatusOr<T>:
//
//   TY_RETURN_IF_ERROR(CheckNewId("queue_id", id));
//   TY_ASSIGN_OR_RETURN(std::string tenant, ParseTenantName(parent, "parent"));
//   TY_ASSIGN_OR_RETURN(*response, GetObject<Queue>(...));
//
// Pure: depends only on Abseil.
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_STATUS_MACROS_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns `expr` (an absl::Status) from the enclosing function when it is not
// OK.
#define TY_RETURN_IF_ERROR(expr)                \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>): returns its status from the
// enclosing function when it is not OK, else moves its value into `lhs` (a
// declaration, `T name`, or an lvalue). Expands to several statements: not for
// the body of an unbraced `if`.
#define TY_ASSIGN_OR_RETURN(lhs, rexpr) \
  TY_ASSIGN_OR_RETURN_IMPL_(            \
      TY_STATUS_MACROS_CONCAT_(_ty_status_or_, __LINE__), lhs, rexpr)

#define TY_ASSIGN_OR_RETURN_IMPL_(status_or, lhs, rexpr)     \
  auto status_or = (rexpr);                                  \
  if (!status_or.ok()) return std::move(status_or).status(); \
  lhs = *std::move(status_or)

#define TY_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define TY_STATUS_MACROS_CONCAT_(a, b) TY_STATUS_MACROS_CONCAT_INNER_(a, b)

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_STATUS_MACROS_H_
