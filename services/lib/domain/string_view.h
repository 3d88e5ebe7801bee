// Bridges std::string_view and absl::string_view.
//
// Debian's Abseil (20220623) is built with ABSL_OPTION_USE_STD_STRING_VIEW 0,
// so absl::string_view is its own class: absl::StrCat, absl::StrSplit,
// absl::Cord, absl::Status(code, msg), Status::SetPayload ... do not accept a
// std::string_view, and Status::message() is not one. Project APIs take
// std::string_view; convert at the boundary.
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_STRING_VIEW_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_STRING_VIEW_H_

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace trainyard::domain {

inline absl::string_view AbslView(std::string_view s) {
  return {s.data(), s.size()};
}
inline std::string_view StdView(absl::string_view s) {
  return {s.data(), s.size()};
}

namespace string_view_internal {
inline absl::string_view CatArg(std::string_view s) { return AbslView(s); }
template <typename T>
const T& CatArg(const T& t) {
  return t;
}
}  // namespace string_view_internal

// absl::StrCat that also takes std::string_view arguments.
template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(string_view_internal::CatArg(args)...);
}

}  // namespace trainyard::domain

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_STRING_VIEW_H_
