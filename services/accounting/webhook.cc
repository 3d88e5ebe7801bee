#include "services/accounting/webhook.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/runtime/crypto.h"
#include "services/lib/runtime/logging.h"

namespace trainyard::accounting {
namespace {

using runtime::Log;
using runtime::LogLevel;

constexpr char kUserAgent[] = "trainyard-webhook/1";
// How much of a refusing answer's body goes into the error (and the log line).
constexpr size_t kMaxErrorBody = 200;
constexpr size_t kMaxEventTypeLength = 200;

void GlobalInit() {
  static absl::once_flag once;
  absl::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// A random (version 4) UUID.
std::string NewDeliveryId() {
  std::string b = runtime::RandomBytes(16);
  b[6] = static_cast<char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<char>((b[8] & 0x3f) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    auto c = static_cast<unsigned char>(b[i]);
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

// The URL's parts, or why it is not an http(s) URL with a host.
struct ParsedUrl {
  std::string scheme;
  std::string host;
  std::string port;  // empty when implicit
  std::string path;
};

absl::StatusOr<ParsedUrl> ParseWebhookUrl(const std::string& url) {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook_url: \"", url, "\" ", why));
  };
  if (url.empty()) return refuse("is empty; want an http:// or https:// URL");
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return refuse("contains a space or control character");
    }
  }
  // libcurl reads "https:///hook" as host "hook"; an empty authority is refused
  // here.
  size_t authority = url.find("://");
  if (authority == std::string::npos) {
    return refuse("is not an absolute http:// or https:// URL");
  }
  authority += 3;
  std::string_view host_port = std::string_view(url).substr(
      authority, url.find_first_of("/?#", authority) - authority);
  if (size_t at = host_port.rfind('@'); at != std::string_view::npos) {
    host_port.remove_prefix(at + 1);
  }
  if (host_port.empty() || host_port.front() == ':')
    return refuse("has no host");
  CURLU* u = curl_url();
  if (u == nullptr)
    return absl::ResourceExhaustedError("curl_url: out of memory");
  ParsedUrl parsed;
  auto get = [&](CURLUPart part, std::string* out) {
    char* value = nullptr;
    CURLUcode rc = curl_url_get(u, part, &value, 0);
    if (rc == CURLUE_OK && value != nullptr) *out = value;
    curl_free(value);
    return rc;
  };
  CURLUcode rc =
      curl_url_set(u, CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME);
  absl::Status status;
  if (rc != CURLUE_OK) {
    status = refuse(absl::StrCat("is not a URL (", curl_url_strerror(rc), ")"));
  } else if (get(CURLUPART_SCHEME, &parsed.scheme) != CURLUE_OK ||
             (parsed.scheme != "http" && parsed.scheme != "https")) {
    status = refuse("is not an http:// or https:// URL");
  } else if (get(CURLUPART_HOST, &parsed.host) != CURLUE_OK ||
             parsed.host.empty()) {
    status = refuse("has no host");
  } else {
    get(CURLUPART_PORT, &parsed.port);
    get(CURLUPART_PATH, &parsed.path);
  }
  curl_url_cleanup(u);
  if (!status.ok()) return status;
  return parsed;
}

long Millis(absl::Duration d) {
  return static_cast<long>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, int64_t{1} << 40));
}

size_t KeepSomeBody(char* data, size_t size, size_t n, void* out) {
  auto* body = static_cast<std::string*>(out);
  size_t bytes = size * n;
  if (body->size() < kMaxErrorBody) {
    body->append(data, std::min(bytes, kMaxErrorBody - body->size()));
  }
  return bytes;  // the rest is read and discarded
}

// Records a Retry-After in whole seconds (the HTTP-date form is ignored: the
// backoff applies).
size_t ReadHeader(char* data, size_t size, size_t n, void* out) {
  auto* retry_after = static_cast<std::optional<absl::Duration>*>(out);
  size_t bytes = size * n;
  absl::string_view line(data, bytes);
  if (absl::StartsWith(line, "HTTP/")) {
    retry_after->reset();  // a new answer (after a 1xx)
  } else if (absl::StartsWithIgnoreCase(line, "retry-after:")) {
    int64_t seconds = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(12)),
                         &seconds) &&
        seconds >= 0) {
      *retry_after = absl::Seconds(seconds);
    }
  }
  return bytes;
}

int AbortIfStopped(void* flag, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::atomic<bool>*>(flag)->load() ? 1 : 0;
}

std::chrono::nanoseconds Chrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(
      std::clamp(d, absl::ZeroDuration(), absl::Hours(24 * 365)));
}

}  // namespace

std::string WebhookSignature(std::string_view secret,
                             std::string_view timestamp,
                             std::string_view body) {
  return absl::StrCat(
      "sha256=",
      runtime::HmacSha256Hex(secret, domain::Cat(timestamp, ".", body)));
}

absl::StatusOr<std::unique_ptr<WebhookSender>> WebhookSender::Create(
    WebhookOptions options) {
  GlobalInit();
  absl::StatusOr<ParsedUrl> url = ParseWebhookUrl(options.url);
  if (!url.ok()) return url.status();
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("webhook_timeout: must be positive");
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        "webhook_max_attempts: must be at least 1");
  }
  if (options.initial_backoff < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "webhook_initial_backoff: must not be negative");
  }
  if (options.max_backoff < options.initial_backoff) {
    return absl::InvalidArgumentError(
        "webhook_max_backoff: must not be below webhook_initial_backoff");
  }
  if (options.max_retry_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "webhook_max_retry_after: must not be negative");
  }
  if (options.queue_capacity < 1) {
    return absl::InvalidArgumentError(
        "webhook_queue_capacity: must be at least 1");
  }
  if (options.stop_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "webhook_stop_grace: must not be negative");
  }
  std::string redacted =
      absl::StrCat(url->scheme, "://", url->host, url->port.empty() ? "" : ":",
                   url->port, url->path);
  return std::unique_ptr<WebhookSender>(
      new WebhookSender(std::move(options), std::move(redacted)));
}

namespace {
runtime::Counter& DeliveriesCounter(runtime::MetricsRegistry* registry,
                                    const char* result) {
  return registry->GetCounter(
      "trainyard_webhook_deliveries_total",
      "Webhook deliveries by outcome (delivered, failed: refused or "
      "given up, dropped: queue full or unsent at stop).",
      {{"result", result}});
}
runtime::MetricsRegistry* Registry(runtime::MetricsRegistry* r) {
  return r != nullptr ? r : &runtime::DefaultMetrics();
}
}  // namespace

WebhookSender::WebhookSender(WebhookOptions options, std::string redacted_url)
    : options_(std::move(options)),
      redacted_url_(std::move(redacted_url)),
      delivered_counter_(
          DeliveriesCounter(Registry(options_.metrics), "delivered")),
      failed_counter_(DeliveriesCounter(Registry(options_.metrics), "failed")),
      dropped_counter_(
          DeliveriesCounter(Registry(options_.metrics), "dropped")),
      attempts_counter_(
          Registry(options_.metrics)
              ->GetCounter("trainyard_webhook_attempts_total",
                           "Webhook HTTP attempts (retries included).")) {
  std::string seed = runtime::RandomBytes(sizeof(uint64_t));
  uint64_t s = 0;
  std::memcpy(&s, seed.data(), sizeof(s));
  rng_.seed(s);
  worker_ = std::thread([this] { Run(); });
}

WebhookSender::~WebhookSender() { Stop(options_.stop_grace); }

absl::StatusOr<std::string> WebhookSender::Enqueue(std::string event_type,
                                                   std::string json_body) {
  if (event_type.empty() || event_type.size() > kMaxEventTypeLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "webhook event type: want 1 to ", kMaxEventTypeLength, " characters"));
  }
  for (char c : event_type) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "webhook event type: want printable ASCII only");
    }
  }
  Delivery delivery{.id = NewDeliveryId(),
                    .event_type = std::move(event_type),
                    .body = std::move(json_body)};
  std::string id = delivery.id;
  std::optional<Delivery> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) {
      return absl::FailedPreconditionError("webhook sender is stopped");
    }
    if (queue_.size() >= options_.queue_capacity) {
      dropped = std::move(queue_.front());
      queue_.pop_front();
      ++stats_.dropped;
    }
    queue_.push_back(std::move(delivery));
  }
  cv_.notify_all();
  if (dropped.has_value()) {
    dropped_counter_.Increment();
    Log(LogLevel::kWarning, "webhook queue full, dropped the oldest delivery",
        {{"delivery", dropped->id},
         {"event", dropped->event_type},
         {"url", redacted_url_},
         {"queue_capacity", options_.queue_capacity}});
  }
  return id;
}

void WebhookSender::Stop(absl::Duration grace) {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  if (!worker_.joinable()) return;
  auto deadline = std::chrono::steady_clock::now() + Chrono(grace);
  {
    std::unique_lock<std::mutex> lock(mu_);
    accepting_ = false;
    cv_.notify_all();
    if (!done_cv_.wait_until(lock, deadline, [this] { return worker_done_; })) {
      abort_ = true;
      cv_.notify_all();
    }
  }
  worker_.join();
}

WebhookSender::Stats WebhookSender::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.queued = queue_.size();
  return s;
}

void WebhookSender::Run() {
  std::string in_flight;  // the delivery cut off by Stop, if any
  while (true) {
    Delivery delivery;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [this] { return abort_ || !accepting_ || !queue_.empty(); });
      if (abort_ || queue_.empty()) break;
      delivery = std::move(queue_.front());
      queue_.pop_front();
    }
    if (Deliver(delivery) == Outcome::kAborted) {
      in_flight = delivery.id;
      break;
    }
  }
  size_t abandoned = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned = queue_.size() + (in_flight.empty() ? 0 : 1);
    queue_.clear();
    stats_.dropped += abandoned;
  }
  if (abandoned > 0) {
    dropped_counter_.Increment(static_cast<double>(abandoned));
    Log(LogLevel::kWarning, "webhook sender stopped with undelivered events",
        {{"dropped", abandoned},
         {"in_flight_delivery", in_flight},
         {"url", redacted_url_}});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    worker_done_ = true;
  }
  done_cv_.notify_all();
}

WebhookSender::Outcome WebhookSender::Deliver(const Delivery& delivery) {
  for (int attempt = 1;; ++attempt) {
    AttemptResult r = Attempt(delivery, attempt);
    if (r.aborted) return Outcome::kAborted;
    attempts_counter_.Increment();
    if (r.delivered) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.attempts;
        ++stats_.delivered;
      }
      delivered_counter_.Increment();
      Log(LogLevel::kDebug, "webhook delivered",
          {{"delivery", delivery.id},
           {"event", delivery.event_type},
           {"attempt", attempt},
           {"status", static_cast<int64_t>(r.status)}});
      return Outcome::kDelivered;
    }
    bool give_up = !r.retryable || attempt >= options_.max_attempts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.attempts;
      if (give_up) ++stats_.failed;
    }
    if (!r.retryable) {
      failed_counter_.Increment();
      Log(LogLevel::kError, "webhook refused by the receiver, not retried",
          {{"delivery", delivery.id},
           {"event", delivery.event_type},
           {"attempt", attempt},
           {"status", static_cast<int64_t>(r.status)},
           {"last_error", r.error},
           {"url", redacted_url_}});
      return Outcome::kFailed;
    }
    if (give_up) {
      failed_counter_.Increment();
      Log(LogLevel::kError, "webhook delivery failed, giving up",
          {{"delivery", delivery.id},
           {"event", delivery.event_type},
           {"attempts", attempt},
           {"last_error", r.error},
           {"url", redacted_url_}});
      return Outcome::kFailed;
    }
    absl::Duration wait =
        r.retry_after.has_value()
            ? std::min(*r.retry_after, options_.max_retry_after)
            : Backoff(attempt);
    Log(LogLevel::kInfo, "webhook attempt failed, will retry",
        {{"delivery", delivery.id},
         {"event", delivery.event_type},
         {"attempt", attempt},
         {"error", r.error},
         {"retry_in", wait}});
    if (!SleepUnlessAborted(wait)) return Outcome::kAborted;
  }
}

absl::Duration WebhookSender::Backoff(int failed_attempts) {
  // initial * 2^(failed_attempts - 1), capped.
  absl::Duration ceiling = options_.initial_backoff;
  for (int i = 1; i < failed_attempts && ceiling < options_.max_backoff; ++i)
    ceiling *= 2;
  ceiling = std::min(ceiling, options_.max_backoff);
  int64_t max_ns = absl::ToInt64Nanoseconds(ceiling);
  if (max_ns <= 0) return absl::ZeroDuration();
  std::uniform_int_distribution<int64_t> full_jitter(0, max_ns);
  return absl::Nanoseconds(full_jitter(rng_));
}

bool WebhookSender::SleepUnlessAborted(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, Chrono(d), [this] { return abort_.load(); });
}

WebhookSender::AttemptResult WebhookSender::Attempt(const Delivery& delivery,
                                                    int attempt) {
  AttemptResult result;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    result.retryable = true;
    result.error = "curl_easy_init failed";
    return result;
  }
  // Made per attempt: a receiver may refuse old timestamps.
  std::string timestamp = absl::StrCat(absl::ToUnixSeconds(absl::Now()));
  curl_slist* headers = nullptr;
  auto add = [&headers](const std::string& line) {
    headers = curl_slist_append(headers, line.c_str());
  };
  add("Content-Type: application/json");
  add(absl::StrCat("X-Trainyard-Event: ", delivery.event_type));
  add(absl::StrCat("X-Trainyard-Delivery: ", delivery.id));
  add(absl::StrCat("X-Trainyard-Attempt: ", attempt));
  add(absl::StrCat("X-Trainyard-Timestamp: ", timestamp));
  if (!options_.secret.empty()) {
    add(absl::StrCat(
        "X-Trainyard-Signature: ",
        WebhookSignature(options_.secret, timestamp, delivery.body)));
  }
  add("Expect:");  // no 100-continue round trip for larger bodies

  char error[CURL_ERROR_SIZE] = {0};
  std::string body;
  curl_easy_setopt(curl, CURLOPT_URL, options_.url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, Millis(options_.timeout));
  curl_easy_setopt(curl, CURLOPT_USERAGENT, kUserAgent);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, delivery.body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                   static_cast<curl_off_t>(delivery.body.size()));
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &KeepSomeBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &ReadHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &result.retry_after);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &AbortIfStopped);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &abort_);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);

  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK)
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  curl_easy_cleanup(curl);
  curl_slist_free_all(headers);

  if (rc != CURLE_OK) {
    if (rc == CURLE_ABORTED_BY_CALLBACK && abort_.load()) {
      result.aborted = true;
      return result;
    }
    // Connection errors, timeouts, TLS failures: all retried.
    result.retryable = true;
    result.error = absl::StrCat(
        "curl: ", error[0] != '\0' ? error : curl_easy_strerror(rc));
    return result;
  }
  long s = result.status;
  if (s >= 200 && s < 300) {
    result.delivered = true;
    return result;
  }
  result.retryable = s == 408 || s == 429 || (s >= 500 && s < 600);
  if (s != 429 && s != 503) result.retry_after.reset();
  result.error = absl::StrCat("HTTP ", s, body.empty() ? "" : ": ", body);
  return result;
}

}  // namespace trainyard::accounting
