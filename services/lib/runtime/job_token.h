// Job-scoped API tokens (docs/security.md "Job tokens"): the dispatcher mints
// one for every attempt it launches (TRAINYARD_TOKEN in the workers'
// environment) and the api verifies it without a database round trip.
//
//   tyj.<tenant>.<job id>.<expiry, unix seconds>.<key id>.<mac>
//
// <mac> is the lower-case hex HMAC-SHA256 of everything before ".<mac>" under
// the key named by <key id> (the first 8 hex digits of the key's SHA-256). The
// api and the dispatchers share the keys through a key file
// (--job_token_key_file): one key per line, the first signs, every one
// verifies, so a key is rotated by putting the new key first, keeping the old
// one below it until the tokens it signed have expired, then removing it.
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_JOB_TOKEN_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_JOB_TOKEN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::runtime {

// Prefix of every job token ("ty_" starts personal tokens).
inline constexpr std::string_view kJobTokenPrefix = "tyj.";

// Keys shorter than this are refused.
inline constexpr size_t kMinJobTokenKeyBytes = 32;

// What a job token grants: the job tenants/<tenant>/jobs/<job_id> until
// `expires`.
struct JobTokenClaims {
  std::string tenant;
  int64_t job_id = 0;
  absl::Time expires;
};

// Whether `token` has the job-token prefix.
bool IsJobToken(std::string_view token);

// The signing and verification keys. Immutable and thread-safe.
class JobTokenKeys {
 public:
  // `keys[0]` signs, all verify. INVALID_ARGUMENT naming `field` when there is
  // none, one is shorter than kMinJobTokenKeyBytes, or two are equal.
  static absl::StatusOr<std::shared_ptr<const JobTokenKeys>> FromKeys(
      std::vector<std::string> keys, std::string_view field = "keys");
  // Reads a key file: one key per line (surrounding white space ignored),
  // blank lines and lines starting with '#' skipped. NOT_FOUND if it cannot
  // be read, INVALID_ARGUMENT as FromKeys (naming the file).
  static absl::StatusOr<std::shared_ptr<const JobTokenKeys>> FromFile(
      const std::string& path);
  // One fresh random key: for `trainyard all` without a key file (its api and
  // dispatcher share the process; tokens die with it).
  static std::shared_ptr<const JobTokenKeys> Random();

  // A token for `claims` signed with the first key. claims.tenant must be a
  // valid id and claims.job_id > 0 (the caller's responsibility).
  std::string Mint(const JobTokenClaims& claims) const;
  // The claims of a well-formed token signed by one of the keys and not
  // expired at `now`; UNAUTHENTICATED otherwise ("malformed job token", "job
  // token signed with an unknown key", "job token signature does not match",
  // "job token for tenants/t/jobs/5 expired at ...").
  absl::StatusOr<JobTokenClaims> Verify(std::string_view token,
                                        absl::Time now) const;

  // Key id of the signing key.
  const std::string& signing_key_id() const { return ids_[0]; }

 private:
  JobTokenKeys() = default;
  std::vector<std::string> keys_;
  std::vector<std::string> ids_;
};

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_JOB_TOKEN_H_
