// The dispatcher's Kubernetes API client: JSON requests over HTTPS (libcurl,
// through http::RestClient) with the credentials of a KubeConfig, client-side
// rate limiting (a token bucket shared by every request of a client, as
// client-go's flowcontrol), retries, and Kubernetes Status answers mapped to
// absl::Status. Streams (watches) go through Stream(). Thread-safe.
// docs/kubernetes.md describes the behaviour.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_CLIENT_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/http/rest_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_config.h"

namespace trainyard::dispatcher::kubernetes {

// A token bucket: `qps` tokens a second, at most `burst` stored; each request
// takes one, and waits when none is left until its own arrives (requests are
// served in the order they asked, as golang.org/x/time/rate's Reserve, which
// client-go's default limiter is). Thread-safe; time from `clock`.
class TokenBucket {
 public:
  // qps <= 0: no limit.
  TokenBucket(double qps, int burst, const Clock& clock);

  // Takes a token: how long the caller must wait before sending (zero when a
  // token was available).
  absl::Duration Reserve();

 private:
  const double qps_;
  const double burst_;
  const Clock& clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

// A query parameter list, in order.
using Query = std::vector<std::pair<std::string, std::string>>;

struct KubeResponse {
  int http_code = 0;
  // The parsed body (null for an empty body).
  nlohmann::json body;
  // Lower-case names.
  std::vector<std::pair<std::string, std::string>> headers;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;  // 0: the server's default (no pagination)
  std::string continue_token;
  std::string resource_version;
};

struct KubeClientOptions {
  // Names the cluster in every message ("prod-a").
  std::string cluster = "kubernetes";
  // client-go's defaults; the dispatcher raises them.
  double qps = 5;
  int burst = 10;
  absl::Duration connect_timeout = absl::Seconds(5);
  // One request's limit (not a stream's: see Stream).
  absl::Duration timeout = absl::Seconds(30);
  // Retries after the first try (429, 5xx, connection failures).
  int max_retries = 5;
  // Exponential backoff between retries: initial, doubled up to max, with
  // jitter (each wait is drawn from [d/2, d]).
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(10);
  // A 429's Retry-After is honoured up to this.
  absl::Duration max_retry_after = absl::Seconds(30);
  // Time and waiting, replaceable in tests (nullptr: the real clock, and a
  // sleep).
  const Clock* clock = nullptr;
  std::function<void(absl::Duration)> sleeper;
  // Jitter in [0, 1): nullptr: random. Tests fix it.
  std::function<double()> jitter;
};

// Maps a Kubernetes answer that is not 2xx to an absl::Status. `request` is
// "GET /api/v1/..." and `cluster` the cluster's label, both named in the
// message with the Status' reason and message (or a snippet of a body that is
// not a Status: an HTML page from a proxy, truncated):
//   400, 422  INVALID_ARGUMENT (with the causes' fields)
//   401       UNAUTHENTICATED     403  PERMISSION_DENIED
//   404       NOT_FOUND
//   409       ALREADY_EXISTS when the reason is AlreadyExists, else ABORTED
//             (Conflict: a stale resourceVersion)
//   410       OUT_OF_RANGE "resourceVersion expired" (IsExpired)
//   429       RESOURCE_EXHAUSTED
//   5xx, 408  UNAVAILABLE (504 Timeout included: the caller retries later)
//   other     UNKNOWN
absl::Status StatusFromAnswer(std::string_view cluster,
                              std::string_view request, int http_code,
                              std::string_view body);

// Whether `status` says a resourceVersion is too old (410 Gone, or an ERROR
// watch event with code 410).
bool IsExpired(const absl::Status& status);

// A short printable excerpt of a body for messages.
std::string Snippet(std::string_view body, size_t max = 200);

class KubeClient {
 public:
  KubeClient(KubeConfig config, KubeClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  // One request: waits for the rate limiter, sends, retries, parses the JSON
  // answer. Retries:
  //   429: after Retry-After (capped by max_retry_after; backoff when absent),
  //     every verb (the server did not process the request).
  //   5xx, connection failures, timeouts: with backoff, for GET, PUT, PATCH,
  //     DELETE (idempotent); POST only when the request did not reach the
  //     server (the connection or TLS handshake failed). A POST that may have
  //     arrived is not repeated: the caller looks before creating again (a
  //     create of an existing name answers ALREADY_EXISTS).
  //   409 and every other 4xx: never.
  // A TLS failure (certificate not verified) is not retried: UNAVAILABLE
  // naming the cluster and curl's reason.
  // `canceller` (optional) ends the request and its retry waits from another
  // thread: CANCELLED.
  absl::StatusOr<KubeResponse> Request(
      std::string_view method, std::string_view path, const Query& query = {},
      const nlohmann::json* body = nullptr,
      std::string_view content_type = "application/json",
      http::Canceller* canceller = nullptr);

  absl::StatusOr<nlohmann::json> Get(std::string_view path,
                                     const Query& query = {});
  // One page of a list (pass its metadata.continue back for the next).
  absl::StatusOr<nlohmann::json> List(std::string_view path,
                                      const ListOptions& options = {},
                                      http::Canceller* canceller = nullptr);
  // POST with fieldValidation=Strict (an unknown or duplicate field is an
  // error, not silently dropped).
  absl::StatusOr<nlohmann::json> Create(std::string_view path,
                                        const nlohmann::json& object);
  // A JSON merge patch (application/merge-patch+json), fieldValidation=Strict.
  absl::StatusOr<nlohmann::json> Patch(std::string_view path,
                                       const nlohmann::json& patch);
  // DELETE with propagationPolicy Background (dependents are collected after
  // the object goes). grace_period: nullopt for the object's own.
  absl::StatusOr<nlohmann::json> Delete(
      std::string_view path,
      std::optional<int64_t> grace_period_seconds = std::nullopt);
  // A text answer (a pod's log).
  absl::StatusOr<std::string> GetText(std::string_view path,
                                      const Query& query = {});

  // A streamed GET (a watch): each complete line of a 2xx body goes to
  // `on_line` as it arrives; `on_line` returning false ends the stream
  // (OK). The stream has no overall timeout (the server's timeoutSeconds ends
  // it) and is not retried: the caller reconnects. A line cut by the end of
  // the stream is dropped. Returns OK when the server ended the stream,
  // CANCELLED when `canceller` did, else the error (a non-2xx answer as
  // StatusFromAnswer).
  absl::Status Stream(std::string_view path, const Query& query,
                      const std::function<bool(std::string_view)>& on_line,
                      http::Canceller* canceller);

  const std::string& cluster() const { return options_.cluster; }
  const KubeConfig& config() const { return config_; }
  const KubeClientOptions& options() const { return options_; }

  // Requests sent (tries, retries included) and retries, since construction.
  int64_t requests_sent() const;
  int64_t retries() const;

  // Path and query as the request line carries them (values escaped).
  static std::string Url(std::string_view path, const Query& query);

  // The wait before retry `attempt` (0 for the first retry): initial_backoff
  // doubled per attempt, capped at max_backoff, times (1 - jitter/2).
  absl::Duration Backoff(int attempt) const;

 private:
  struct Raw {
    int code = 0;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
  };
  // The rate-limited, retried exchange; a non-2xx answer is an error.
  absl::StatusOr<Raw> Exchange(std::string_view method, std::string_view path,
                               const Query& query, std::string_view body,
                               std::string_view content_type,
                               std::string_view accept,
                               http::Canceller* canceller);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Headers(
      std::string_view accept);
  // Waits (the sleeper, or until `canceller` fires); false when cancelled.
  bool Wait(absl::Duration d, http::Canceller* canceller);

  const KubeConfig config_;
  const KubeClientOptions options_;
  const Clock& clock_;
  TokenBucket limiter_;
  BearerToken token_;
  http::RestClient rest_;
  mutable absl::Mutex mu_;
  int64_t requests_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard::dispatcher::kubernetes

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_CLIENT_H_
