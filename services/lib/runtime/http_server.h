// A small HTTP/1.1 server for operational endpoints (/healthz, /readyz, /metrics).
// One request per connection (Connection: close); requests are handled by a fixed pool of
// worker threads so a slow client cannot stall a scrape.
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_HTTP_SERVER_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_HTTP_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::runtime {

struct HttpRequest {
  std::string method;
  std::string path;   // without the query string
  std::string query;  // after '?', undecoded
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// A JSON error body: {"error":{"code":400,"message":"..."}}.
HttpResponse JsonError(int status, std::string_view message);

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// A minimal HTTP/1.1 GET for probes and tests: `address` is "host:port" (IPv4). Returns the
// status and body of the response whatever its status; an error only when no response came.
absl::StatusOr<HttpResponse> HttpGet(std::string_view address, std::string_view path,
                                     absl::Duration timeout = absl::Seconds(5));

// Splits "host:port" (port may be 0 for "any free port"). Only numeric hosts.
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(std::string_view address);

class HttpServer {
 public:
  // `listen_address` is "host:port", e.g. "127.0.0.1:8081" or "127.0.0.1:0".
  explicit HttpServer(std::string listen_address, int workers = 2);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for an exact path; call before Start().
  void Handle(std::string path, HttpHandler handler);

  absl::Status Start();
  // The bound port (after Start()).
  int port() const { return port_; }
  void Stop();

 private:
  void AcceptLoop();
  void WorkerLoop();
  void Serve(int fd);

  std::string listen_address_;
  int num_workers_;
  std::map<std::string, HttpHandler, std::less<>> handlers_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> pending_;
};

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_HTTP_SERVER_H_
