// The HTTP server of every Trainyard process: the operational endpoints
// (/healthz, /readyz, /metrics) and the gateway's REST/JSON API and console.
// Built on cpp-httplib (Debian's libcpp-httplib-dev): HTTP/1.1 with keep-alive,
// a fixed pool of worker threads, request size limits, read/write/idle
// timeouts, TLS by option and a graceful Stop(). Why this library and not
// Boost.Beast or libmicrohttpd: docs/architecture.md ("HTTP").
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_HTTP_SERVER_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::runtime {

struct HttpRequest {
  std::string method;
  std::string path;   // decoded, without the query string
  std::string query;  // after '?', undecoded
  // Query parameters, decoded, in order; a key may repeat.
  std::vector<std::pair<std::string, std::string>> params;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string remote_addr;
  int remote_port = 0;

  // The header's value, or "" when absent (`name` in lower case).
  std::string_view Header(std::string_view name) const;
};

// A streamed response body (server-sent events, downloads): Write() sends one
// chunk at once and returns false when the client has gone or the server is
// stopping.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  virtual bool Write(std::string_view data) = 0;
  // True once the server is stopping: end the stream.
  virtual bool Stopping() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Further headers (name, value).
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body is this function's writes, sent chunked as they come
  // (`body` is unused).
  std::function<void(HttpStream&)> stream;
  // `body` gzip-compressed ahead of time (static files): sent instead of
  // compressing `body` per request.
  std::shared_ptr<const std::string> gzip_body;
};

// The server compresses a response body with gzip when the client accepts it,
// the content type is text (JSON, JavaScript, HTML, CSS, SVG, CSV...) and the
// body is at least this long; streams go out as they are. httplib's own
// compression is never used: it prefers brotli at quality 11, which took
// 150 ms for a 66 KB page of jobs.
inline constexpr size_t kGzipMinBytes = 1024;

// The gzip (RFC 1952) form of `data`, at zlib's `level` (1 fastest, 9
// smallest).
std::string Gzip(std::string_view data, int level = 6);

// Whether an Accept-Encoding value accepts gzip ("gzip", "*", not "gzip;q=0").
bool AcceptsGzip(std::string_view accept_encoding);

// Whether responses of this content type are worth compressing.
bool CompressibleType(std::string_view content_type);

// A JSON error body: {"error":{"code":400,"message":"..."}}.
HttpResponse JsonError(int status, std::string_view message);

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// A minimal HTTP/1.1 GET for probes and tests: `address` is "host:port".
// Returns the status and body of the response whatever its status; an error
// only when no response came.
absl::StatusOr<HttpResponse> HttpGet(std::string_view address,
                                     std::string_view path,
                                     absl::Duration timeout = absl::Seconds(5));

// Splits "host:port" (port may be 0 for "any free port"). Only numeric hosts.
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(
    std::string_view address);

struct HttpServerOptions {
  // Worker threads: the requests (streams included) served at once; more wait
  // their turn.
  int threads = 4;
  // A larger request body is refused with 413 before it is read.
  size_t max_body_bytes = 1 << 20;
  // A client that sends nothing for this long mid-request, or cannot take a
  // response, is cut.
  absl::Duration read_timeout = absl::Seconds(10);
  absl::Duration write_timeout = absl::Seconds(10);
  // An idle keep-alive connection is closed after this long, or after this many
  // requests. Stop() waits at most this long for idle connections to close.
  absl::Duration keep_alive_timeout = absl::Seconds(5);
  int keep_alive_max_requests = 100;
  // Both set: HTTPS with this PEM certificate (chain) and key. Neither: plain
  // HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Headers added to every response (security headers, say).
  std::vector<std::pair<std::string, std::string>> default_headers;
};

class HttpServer {
 public:
  // `listen_address` is "host:port", e.g. "127.0.0.1:8081" or "127.0.0.1:0".
  explicit HttpServer(std::string listen_address,
                      HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for an exact path (any method); call before Start().
  void Handle(std::string path, HttpHandler handler);
  // Registers a handler for every path under `prefix` ("/v1/", "/"): the
  // longest registered prefix wins; exact paths win over prefixes.
  void HandlePrefix(std::string prefix, HttpHandler handler);
  // Called (once) when Stop() begins, before in-flight requests are awaited:
  // end streams here.
  void OnStop(std::function<void()> hook);

  absl::Status Start();
  // The bound port (after Start()).
  int port() const { return port_; }
  bool tls() const { return !options_.tls_cert_file.empty(); }
  // Stops accepting, ends streams (Stopping() turns true, OnStop hooks run),
  // waits for the requests in flight to finish.
  void Stop();

 private:
  class Impl;
  HttpResponse Dispatch(const HttpRequest& request) const;

  std::string listen_address_;
  HttpServerOptions options_;
  std::map<std::string, HttpHandler, std::less<>> exact_;
  std::map<std::string, HttpHandler, std::less<>> prefixes_;
  std::vector<std::function<void()>> on_stop_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;
  std::thread listener_;
};

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_HTTP_SERVER_H_
