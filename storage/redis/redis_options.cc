#include "storage/redis/redis_options.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace trainyard::storage::redis {

absl::StatusOr<RedisOptions> ParseRedisAddress(std::string_view address) {
  const absl::string_view addr(address.data(), address.size());
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid redis address \"", absl::CEscape(addr), "\": ", why,
        " (expected host:port, e.g. 127.0.0.1:6379 or [::1]:6379)"));
  };
  if (addr.empty()) return invalid("empty");
  const size_t colon = addr.rfind(':');
  if (colon == absl::string_view::npos) return invalid("missing :port");
  absl::string_view host = addr.substr(0, colon);
  const absl::string_view port_text = addr.substr(colon + 1);
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return invalid("unterminated [IPv6] host");
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != absl::string_view::npos) {
    return invalid("IPv6 hosts must be bracketed");
  }
  if (host.empty()) return invalid("empty host");
  for (char c : host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        !absl::ascii_isprint(static_cast<unsigned char>(c))) {
      return invalid("host contains whitespace or control characters");
    }
  }
  if (port_text.empty()) return invalid("empty port");
  int port = 0;
  for (char c : port_text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return invalid("port is not a number");
    }
  }
  if (port_text.size() > 5 || !absl::SimpleAtoi(port_text, &port) || port < 1 ||
      port > 65535) {
    return invalid("port out of range 1..65535");
  }
  RedisOptions options;
  options.host = std::string(host);
  options.port = port;
  return options;
}

}  // namespace trainyard::storage::redis
