// Raw HTTP/1.1 over a loopback socket, for tests of HTTP servers.
#ifndef TRAINYARD_TESTS_SUPPORT_HTTP_RAW_HTTP_H_
#define TRAINYARD_TESTS_SUPPORT_HTTP_RAW_HTTP_H_

#include <chrono>
#include <string>

namespace trainyard::testing {

// Sends `raw` (request line, headers and body as written) to 127.0.0.1:`port`
// and returns every byte the server sends until it closes the connection or
// is quiet for 5 s (so ask with "Connection: close"). "" when the connection
// is refused. When `first_byte` is given it gets the time from the send to the
// first byte of the answer.
std::string RawHttpExchange(
    int port, const std::string& raw,
    std::chrono::steady_clock::duration* first_byte = nullptr);

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_SUPPORT_HTTP_RAW_HTTP_H_
