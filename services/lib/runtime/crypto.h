// Cryptographic helpers over OpenSSL: randomness for API tokens, SHA-256 for storing them.
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_CRYPTO_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_CRYPTO_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace trainyard::runtime {

// `n` bytes from a cryptographically secure generator (aborts if none is available).
std::string RandomBytes(size_t n);

// `n` characters drawn uniformly from [A-Za-z0-9] by a secure generator.
std::string RandomToken(size_t n);

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// Lower-case hex HMAC-SHA256 of `data` under `key`.
std::string HmacSha256Hex(std::string_view key, std::string_view data);

// Compares without an early exit, so timing does not reveal the first difference.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_CRYPTO_H_
