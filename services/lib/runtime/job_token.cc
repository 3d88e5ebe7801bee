#include "services/lib/runtime/job_token.h"

#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "services/lib/runtime/crypto.h"

namespace trainyard::runtime {
namespace {

std::string KeyId(std::string_view key) { return Sha256Hex(key).substr(0, 8); }

// Canonical decimal: digits only, no leading zero, not empty.
bool ParseCanonical(absl::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 18 || (s.size() > 1 && s[0] == '0')) {
    return false;
  }
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(s, out);
}

bool IsTenantLike(absl::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

bool IsJobToken(std::string_view token) {
  return token.starts_with(kJobTokenPrefix);
}

absl::StatusOr<std::shared_ptr<const JobTokenKeys>> JobTokenKeys::FromKeys(
    std::vector<std::string> keys, std::string_view field) {
  if (keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": no job token key"));
  }
  auto out = std::shared_ptr<JobTokenKeys>(new JobTokenKeys());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].size() < kMinJobTokenKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(field), ": key ", i + 1, " has ",
                       keys[i].size(), " bytes; job token keys need at least ",
                       kMinJobTokenKeyBytes, " (e.g. `openssl rand -hex 32`)"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (keys[j] == keys[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(field), ": keys ", j + 1, " and ", i + 1,
                         " are the same"));
      }
    }
    out->ids_.push_back(KeyId(keys[i]));
  }
  out->keys_ = std::move(keys);
  return std::shared_ptr<const JobTokenKeys>(std::move(out));
}

absl::StatusOr<std::shared_ptr<const JobTokenKeys>> JobTokenKeys::FromFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read job token key file ", path));
  }
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || key[0] == '#') continue;
    keys.emplace_back(key);
  }
  return FromKeys(std::move(keys), path);
}

std::shared_ptr<const JobTokenKeys> JobTokenKeys::Random() {
  absl::StatusOr<std::shared_ptr<const JobTokenKeys>> keys =
      FromKeys({RandomToken(48)});
  return *keys;  // a 48-character key is always accepted
}

std::string JobTokenKeys::Mint(const JobTokenClaims& claims) const {
  const std::string body = absl::StrCat(
      std::string(kJobTokenPrefix), claims.tenant, ".", claims.job_id, ".",
      absl::ToUnixSeconds(claims.expires), ".", ids_[0]);
  return absl::StrCat(body, ".", HmacSha256Hex(keys_[0], body));
}

absl::StatusOr<JobTokenClaims> JobTokenKeys::Verify(std::string_view token,
                                                    absl::Time now) const {
  const absl::Status malformed =
      absl::UnauthenticatedError("malformed job token");
  if (!IsJobToken(token)) return malformed;
  const absl::string_view view(token.data(), token.size());
  const size_t mac_dot = view.rfind('.');
  const absl::string_view body = view.substr(0, mac_dot);
  const absl::string_view mac = view.substr(mac_dot + 1);
  std::vector<absl::string_view> parts = absl::StrSplit(body, '.');
  // "tyj", tenant, job, expiry, key id.
  if (parts.size() != 5 || mac.size() != 64) return malformed;
  JobTokenClaims claims;
  int64_t expires = 0;
  if (!IsTenantLike(parts[1]) || !ParseCanonical(parts[2], &claims.job_id) ||
      claims.job_id <= 0 || !ParseCanonical(parts[3], &expires)) {
    return malformed;
  }
  claims.tenant = std::string(parts[1]);
  claims.expires = absl::FromUnixSeconds(expires);
  const std::string_view key_id(parts[4].data(), parts[4].size());
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (ids_[i] != key_id) continue;
    const std::string_view body_view(body.data(), body.size());
    if (!ConstantTimeEquals(HmacSha256Hex(keys_[i], body_view),
                            std::string_view(mac.data(), mac.size()))) {
      return absl::UnauthenticatedError("job token signature does not match");
    }
    if (now >= claims.expires) {
      return absl::UnauthenticatedError(
          absl::StrCat("job token for tenants/", claims.tenant, "/jobs/",
                       claims.job_id, " expired at ",
                       absl::FormatTime(claims.expires, absl::UTCTimeZone())));
    }
    return claims;
  }
  return absl::UnauthenticatedError(
      "job token signed with an unknown key (rotated out of the api's "
      "--job_token_key_file?)");
}

}  // namespace trainyard::runtime
