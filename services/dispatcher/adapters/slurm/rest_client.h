// A small HTTP/1.1 client for slurmrestd (libcurl): TCP (http://, https://)
// or a unix-domain socket ("unix:/path"), keep-alive connections reused
// across calls, per-call timeouts. Thread-safe.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_REST_CLIENT_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_REST_CLIENT_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard::dispatcher::slurm {

struct HttpResponse {
  int status = 0;
  std::string body;
};

struct RestClientOptions {
  // "http://host:port", "https://host:port" or "unix:/path".
  std::string base_url;
  absl::Duration connect_timeout = absl::Seconds(3);
  absl::Duration request_timeout = absl::Seconds(15);
  std::string ca_file;
  bool insecure_skip_verify = false;
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

 private:
  void* TakeHandle();
  void ReturnHandle(void* handle);

  const RestClientOptions options_;
  std::string url_prefix_;
  std::string unix_socket_;
  absl::Mutex mu_;
  std::vector<void*> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::dispatcher::slurm

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_REST_CLIENT_H_
