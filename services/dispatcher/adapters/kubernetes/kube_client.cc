#include "services/dispatcher/adapters/kubernetes/kube_client.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::kubernetes {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;

namespace {

// A watch line longer than this ends the stream (a pod is a few KiB).
constexpr size_t kMaxLine = size_t{64} << 20;

bool Idempotent(std::string_view method) { return method != "POST"; }

std::string Escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The string at `key` of a JSON object, "" when absent or not a string.
std::string StringAt(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

std::mutex& JitterMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

TokenBucket::TokenBucket(double qps, int burst, const Clock& clock)
    : qps_(qps),
      burst_(std::max(1, burst)),
      clock_(clock),
      tokens_(burst_),
      last_(clock.Now()) {}

absl::Duration TokenBucket::Reserve() {
  if (qps_ <= 0) return absl::ZeroDuration();
  absl::MutexLock l(&mu_);
  const absl::Time now = clock_.Now();
  if (now > last_) {
    tokens_ =
        std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
  tokens_ -= 1;
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

std::string Snippet(std::string_view body, size_t max) {
  std::string out;
  for (char c : body.substr(0, max)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  if (body.size() > max) out += "...";
  return out;
}

absl::Status StatusFromAnswer(std::string_view cluster,
                              std::string_view request, int http_code,
                              std::string_view body) {
  std::string reason;
  std::string detail;
  const nlohmann::json j =
      nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_object() && StringAt(j, "kind") == "Status") {
    reason = StringAt(j, "reason");
    detail = StringAt(j, "message");
    auto details = j.find("details");
    if (details != j.end() && details->is_object()) {
      auto causes = details->find("causes");
      if (causes != details->end() && causes->is_array()) {
        std::vector<std::string> parts;
        for (const nlohmann::json& c : *causes) {
          const std::string field = StringAt(c, "field");
          const std::string message = StringAt(c, "message");
          if (field.empty() && message.empty()) continue;
          parts.push_back(field.empty() ? message : Cat(field, ": ", message));
        }
        if (!parts.empty()) {
          detail = Cat(detail, detail.empty() ? "" : " ", "[",
                       absl::StrJoin(parts, "; "), "]");
        }
      }
    }
    if (reason.empty() && detail.empty()) {
      detail = Cat("a Status without reason or message: ", Snippet(body));
    }
  } else if (body.empty()) {
    detail = "empty answer";
  } else {
    detail =
        Cat("the answer is not a Kubernetes Status: \"", Snippet(body), "\"");
  }
  const std::string message =
      Cat("kubernetes cluster ", cluster, ": ", request, ": HTTP ", http_code,
          reason.empty() ? "" : Cat(" ", reason), ": ", detail);
  switch (http_code) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 409:
      if (reason == "AlreadyExists") return absl::AlreadyExistsError(message);
      return absl::AbortedError(message);
    case 410:
      return absl::OutOfRangeError(Cat(message, " (resourceVersion expired)"));
    case 429:
      return absl::ResourceExhaustedError(message);
    case 408:
      return absl::UnavailableError(message);
    default:
      break;
  }
  if (http_code >= 500) return absl::UnavailableError(message);
  return absl::UnknownError(message);
}

bool IsExpired(const absl::Status& status) {
  return absl::IsOutOfRange(status);
}

KubeClient::KubeClient(KubeConfig config, KubeClientOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock::Get()),
      limiter_(options_.qps, options_.burst, clock_),
      token_(config_),
      rest_({.base_url = config_.server,
             .connect_timeout = options_.connect_timeout,
             .request_timeout = options_.timeout,
             .insecure_skip_verify = config_.insecure_skip_tls_verify,
             .service = Cat("kubernetes cluster ", options_.cluster),
             .ca_pem = config_.ca_pem,
             .client_cert_pem = config_.client_cert_pem,
             .client_key_pem = config_.client_key_pem,
             .tls_server_name = config_.tls_server_name}) {}

KubeClient::~KubeClient() = default;

int64_t KubeClient::requests_sent() const {
  absl::MutexLock l(&mu_);
  return requests_sent_;
}

int64_t KubeClient::retries() const {
  absl::MutexLock l(&mu_);
  return retries_;
}

std::string KubeClient::Url(std::string_view path, const Query& query) {
  std::string url(path);
  char sep = url.find('?') == std::string::npos ? '?' : '&';
  for (const auto& [k, v] : query) {
    url += sep;
    url += Escape(k);
    url += '=';
    url += Escape(v);
    sep = '&';
  }
  return url;
}

absl::Duration KubeClient::Backoff(int attempt) const {
  absl::Duration d = options_.initial_backoff;
  for (int i = 0; i < attempt && d < options_.max_backoff; ++i) d *= 2;
  d = std::min(d, options_.max_backoff);
  double jitter = 0;
  if (options_.jitter) {
    jitter = options_.jitter();
  } else {
    std::lock_guard<std::mutex> l(JitterMutex());
    static absl::BitGen gen;
    jitter = absl::Uniform(gen, 0.0, 1.0);
  }
  return d * (1.0 - jitter / 2);
}

bool KubeClient::Wait(absl::Duration d, http::Canceller* canceller) {
  if (d > absl::ZeroDuration()) {
    if (options_.sleeper) {
      options_.sleeper(d);
    } else if (canceller != nullptr) {
      return canceller->SleepFor(d);
    } else {
      absl::SleepFor(d);
    }
  }
  return canceller == nullptr || !canceller->cancelled();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
KubeClient::Headers(std::string_view accept) {
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Accept", std::string(accept)}, {"User-Agent", "trainyard-dispatcher"}};
  absl::StatusOr<std::string> token = token_.Get();
  if (!token.ok()) {
    return absl::Status(token.status().code(),
                        Cat("kubernetes cluster ", options_.cluster, ": ",
                            token.status().message()));
  }
  if (!token->empty())
    headers.emplace_back("Authorization", Cat("Bearer ", *token));
  return headers;
}

absl::StatusOr<KubeClient::Raw> KubeClient::Exchange(
    std::string_view method, std::string_view path, const Query& query,
    std::string_view body, std::string_view content_type,
    std::string_view accept, http::Canceller* canceller) {
  const std::string url = Url(path, query);
  const std::string request = Cat(method, " ", url);
  const absl::Status cancelled = absl::CancelledError(Cat(
      "kubernetes cluster ", options_.cluster, ": ", request, ": cancelled"));
  for (int attempt = 0;; ++attempt) {
    if (!Wait(limiter_.Reserve(), canceller)) return cancelled;
    TY_ASSIGN_OR_RETURN(auto headers, Headers(accept));
    {
      absl::MutexLock l(&mu_);
      ++requests_sent_;
    }
    http::CallInfo info;
    absl::StatusOr<http::HttpResponse> r =
        rest_.Call({.method = method,
                    .path = url,
                    .headers = std::move(headers),
                    .body = body,
                    .content_type = content_type,
                    .want_headers = true,
                    .canceller = canceller},
                   &info);
    absl::Status error;
    bool retryable = false;
    std::optional<absl::Duration> wait;
    if (!r.ok()) {
      if (absl::IsCancelled(r.status())) return r.status();
      if (info.tls_failure || absl::IsInvalidArgument(r.status())) {
        return absl::UnavailableError(r.status().message());
      }
      error = absl::UnavailableError(r.status().message());
      retryable = Idempotent(method) || !info.sent;
    } else if (r->status >= 200 && r->status < 300) {
      return Raw{.code = r->status,
                 .body = std::move(r->body),
                 .headers = std::move(r->headers)};
    } else {
      error = StatusFromAnswer(options_.cluster, request, r->status, r->body);
      if (r->status == 429 || (r->status >= 500 && Idempotent(method))) {
        retryable = true;
        int64_t seconds = 0;
        if (std::optional<std::string> after = r->Header("retry-after");
            after.has_value() && absl::SimpleAtoi(AbslView(*after), &seconds) &&
            seconds >= 0) {
          wait = std::min(absl::Seconds(seconds), options_.max_retry_after);
        }
      }
    }
    if (!retryable || attempt >= options_.max_retries) {
      if (attempt == 0) return error;
      return absl::Status(error.code(), Cat(error.message(), " (after ",
                                            attempt + 1, " tries)"));
    }
    if (!Wait(wait.value_or(Backoff(attempt)), canceller)) return cancelled;
    absl::MutexLock l(&mu_);
    ++retries_;
  }
}

absl::StatusOr<KubeResponse> KubeClient::Request(std::string_view method,
                                                 std::string_view path,
                                                 const Query& query,
                                                 const nlohmann::json* body,
                                                 std::string_view content_type,
                                                 http::Canceller* canceller) {
  const std::string payload = body != nullptr ? body->dump() : "";
  TY_ASSIGN_OR_RETURN(Raw raw,
                      Exchange(method, path, query, payload, content_type,
                               "application/json", canceller));
  KubeResponse response{.http_code = raw.code,
                        .headers = std::move(raw.headers)};
  if (raw.body.empty()) return response;
  response.body =
      nlohmann::json::parse(raw.body.begin(), raw.body.end(), nullptr, false);
  if (response.body.is_discarded()) {
    return absl::InternalError(
        Cat("kubernetes cluster ", options_.cluster, ": ", method, " ",
            Url(path, query), ": HTTP ", raw.code, " answer is not JSON: \"",
            Snippet(raw.body), "\""));
  }
  return response;
}

absl::StatusOr<nlohmann::json> KubeClient::Get(std::string_view path,
                                               const Query& query) {
  TY_ASSIGN_OR_RETURN(KubeResponse r, Request("GET", path, query));
  return std::move(r.body);
}

absl::StatusOr<nlohmann::json> KubeClient::List(std::string_view path,
                                                const ListOptions& options,
                                                http::Canceller* canceller) {
  Query query;
  if (!options.label_selector.empty()) {
    query.emplace_back("labelSelector", options.label_selector);
  }
  if (!options.field_selector.empty()) {
    query.emplace_back("fieldSelector", options.field_selector);
  }
  if (options.limit > 0) query.emplace_back("limit", Cat(options.limit));
  if (!options.continue_token.empty()) {
    query.emplace_back("continue", options.continue_token);
  }
  if (!options.resource_version.empty()) {
    query.emplace_back("resourceVersion", options.resource_version);
  }
  TY_ASSIGN_OR_RETURN(KubeResponse r, Request("GET", path, query, nullptr,
                                              "application/json", canceller));
  return std::move(r.body);
}

absl::StatusOr<nlohmann::json> KubeClient::Create(
    std::string_view path, const nlohmann::json& object) {
  TY_ASSIGN_OR_RETURN(
      KubeResponse r,
      Request("POST", path, {{"fieldValidation", "Strict"}}, &object));
  return std::move(r.body);
}

absl::StatusOr<nlohmann::json> KubeClient::Patch(std::string_view path,
                                                 const nlohmann::json& patch) {
  TY_ASSIGN_OR_RETURN(KubeResponse r,
                      Request("PATCH", path, {{"fieldValidation", "Strict"}},
                              &patch, "application/merge-patch+json"));
  return std::move(r.body);
}

absl::StatusOr<nlohmann::json> KubeClient::Delete(
    std::string_view path, std::optional<int64_t> grace_period_seconds) {
  nlohmann::json options = {{"apiVersion", "v1"},
                            {"kind", "DeleteOptions"},
                            {"propagationPolicy", "Background"}};
  if (grace_period_seconds.has_value()) {
    options["gracePeriodSeconds"] = *grace_period_seconds;
  }
  TY_ASSIGN_OR_RETURN(KubeResponse r, Request("DELETE", path, {}, &options));
  return std::move(r.body);
}

absl::StatusOr<std::string> KubeClient::GetText(std::string_view path,
                                                const Query& query) {
  TY_ASSIGN_OR_RETURN(Raw raw, Exchange("GET", path, query, "", "",
                                        "text/plain, */*", nullptr));
  return std::move(raw.body);
}

absl::Status KubeClient::Stream(
    std::string_view path, const Query& query,
    const std::function<bool(std::string_view)>& on_line,
    http::Canceller* canceller) {
  const std::string url = Url(path, query);
  if (!Wait(limiter_.Reserve(), canceller)) {
    return absl::CancelledError(Cat("kubernetes cluster ", options_.cluster,
                                    ": GET ", url, ": cancelled"));
  }
  TY_ASSIGN_OR_RETURN(auto headers, Headers("application/json"));
  {
    absl::MutexLock l(&mu_);
    ++requests_sent_;
  }
  std::string pending;
  bool stopped = false;
  bool overflow = false;
  auto sink = [&](std::string_view chunk) {
    size_t start = 0;
    while (true) {
      const size_t nl = chunk.find('\n', start);
      if (nl == std::string_view::npos) break;
      std::string_view piece = chunk.substr(start, nl - start);
      start = nl + 1;
      std::string_view line = piece;
      if (!pending.empty()) {
        pending.append(piece);
        line = pending;
      }
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
        line.remove_suffix(1);
      }
      bool go_on = line.empty() || on_line(line);
      pending.clear();
      if (!go_on) {
        stopped = true;
        return false;
      }
    }
    pending.append(chunk.substr(start));
    if (pending.size() > kMaxLine) {
      overflow = true;
      return false;
    }
    return true;
  };
  http::CallInfo info;
  absl::StatusOr<http::HttpResponse> r =
      rest_.Call({.method = "GET",
                  .path = url,
                  .headers = std::move(headers),
                  .timeout = absl::InfiniteDuration(),
                  .sink = sink,
                  .canceller = canceller},
                 &info);
  if (stopped) return absl::OkStatus();
  if (overflow) {
    return absl::ResourceExhaustedError(
        Cat("kubernetes cluster ", options_.cluster, ": GET ", url,
            ": a line of the stream is longer than ", kMaxLine, " bytes"));
  }
  if (!r.ok()) {
    if (absl::IsCancelled(r.status())) return r.status();
    return absl::UnavailableError(r.status().message());
  }
  if (r->status < 200 || r->status >= 300) {
    return StatusFromAnswer(options_.cluster, Cat("GET ", url), r->status,
                            r->body);
  }
  return absl::OkStatus();
}

}  // namespace trainyard::dispatcher::kubernetes
