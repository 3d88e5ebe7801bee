// A small HTTP/1.1 client for the dispatcher's REST backends (slurmrestd, the
// Kubernetes API server), over libcurl: TCP (http://, https://) or a
// unix-domain socket ("unix:/path"), keep-alive connections reused across
// calls, per-call timeouts, TLS with a CA and a client certificate given as
// files or in memory, and streamed answers (a Kubernetes watch) that another
// thread can cancel without the waiting thread polling. Thread-safe.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_HTTP_REST_CLIENT_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_HTTP_REST_CLIENT_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard::dispatcher::http {

struct HttpResponse {
  int status = 0;
  std::string body;
  // The answer's headers, names lower-cased, in the order received (filled
  // only when the call asks for them).
  std::vector<std::pair<std::string, std::string>> headers;

  // The first header named `name` (lower case), or nullopt.
  std::optional<std::string> Header(std::string_view name) const;
};

struct RestClientOptions {
  // "http://host:port", "https://host:port" or "unix:/path".
  std::string base_url;
  absl::Duration connect_timeout = absl::Seconds(3);
  absl::Duration request_timeout = absl::Seconds(15);
  std::string ca_file;
  bool insecure_skip_verify = false;
  // What errors call the server ("slurmrestd", "kubernetes cluster X").
  std::string service = "slurmrestd";
  // PEM CA bundle held in memory (used instead of ca_file when set).
  std::string ca_pem;
  // Client certificate and key (PEM), as files or in memory.
  std::string client_cert_file;
  std::string client_key_file;
  std::string client_cert_pem;
  std::string client_key_pem;
  // The name the server's certificate is checked against when it differs from
  // the host of base_url (kubeconfig's tls-server-name): the URL names this
  // host and the connection goes to base_url's host and port.
  std::string tls_server_name;
};

// Ends a streamed call in progress from another thread. One call at a time
// uses a Canceller; Cancel() before the call starts ends it at once.
class Canceller {
 public:
  Canceller() = default;
  Canceller(const Canceller&) = delete;
  Canceller& operator=(const Canceller&) = delete;
  void Cancel();
  bool cancelled() const;
  // Sleeps for `d` or until Cancel(); returns false when cancelled.
  bool SleepFor(absl::Duration d) const;

 private:
  friend class RestClient;
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  void* multi_ ABSL_GUARDED_BY(mu_) = nullptr;  // CURLM* of the call
};

struct HttpRequest {
  std::string_view method = "GET";
  // Starts with '/', query string included.
  std::string_view path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string_view body;
  std::string_view content_type = "application/json";
  // Overrides RestClientOptions::request_timeout; absl::InfiniteDuration()
  // for none (a stream that ends by itself or by its Canceller).
  std::optional<absl::Duration> timeout;
  bool want_headers = false;
  // When set, the body is handed over piece by piece instead of collected in
  // HttpResponse::body; returning false ends the transfer (the call then
  // returns CANCELLED). `sink` sees the body of a 2xx answer only: another
  // answer's body is collected as usual.
  std::function<bool(std::string_view)> sink;
  // When set, the call waits on a multi handle that Cancel() wakes: a
  // cancelled call returns CANCELLED.
  Canceller* canceller = nullptr;
};

// What a call learnt besides its answer.
struct CallInfo {
  // Whether the request may have reached the server (false only when the
  // connection or the TLS handshake never completed).
  bool sent = false;
  // The TLS handshake failed: the server's certificate did not verify, or the
  // client's certificate or key was refused or unusable.
  bool tls_failure = false;
};

class RestClient {
 public:
  explicit RestClient(RestClientOptions options);
  ~RestClient();
  RestClient(const RestClient&) = delete;
  RestClient& operator=(const RestClient&) = delete;

  // method: "GET", "POST", "DELETE". path starts with '/'. A transport
  // failure (connection refused, timeout, reset) is UNAVAILABLE (or
  // DEADLINE_EXCEEDED); any HTTP answer, whatever its status, is returned.
  // `sent` (optional) tells whether the request may have reached the server
  // (false only when the connection was never made).
  absl::StatusOr<HttpResponse> Call(
      std::string_view method, std::string_view path,
      const std::vector<std::pair<std::string, std::string>>& headers,
      std::string_view body = "", bool* sent = nullptr);

  // The general form. A TLS failure (certificate not verified, handshake) is
  // UNAVAILABLE with curl's reason.
  absl::StatusOr<HttpResponse> Call(const HttpRequest& request,
                                    CallInfo* info = nullptr);

  const RestClientOptions& options() const { return options_; }

 private:
  void* TakeHandle();
  void ReturnHandle(void* handle);

  const RestClientOptions options_;
  std::string url_prefix_;
  std::string unix_socket_;
  std::string connect_to_;  // CURLOPT_CONNECT_TO entry for tls_server_name
  absl::Mutex mu_;
  std::vector<void*> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::dispatcher::http

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_HTTP_REST_CLIENT_H_
