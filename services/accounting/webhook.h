// A signed webhook sender for the chargeback system's notifications (budget
// thresholds and the like): JSON events POSTed to one URL, in order, from a
// background thread, signed with HMAC-SHA256 and retried with exponential
// backoff. See docs/accounting.md ("Webhooks").
//
//   absl::StatusOr<std::unique_ptr<WebhookSender>> sender =
//       WebhookSender::Create({.url = "https://hooks.example.com/budget",
//       .secret = key});
//   if (!sender.ok()) return sender.status();
//   (*sender)->Enqueue("budget.threshold_crossed",
//   R"({"tenant":"ml-research",...})");
//
// Each attempt is an HTTP POST with these headers:
//   Content-Type: application/json
//   User-Agent: trainyard-webhook/1
//   X-Trainyard-Event: <event type>
//   X-Trainyard-Delivery: <delivery id, the same on every attempt of one
//   delivery> X-Trainyard-Attempt: <1, 2, ...> X-Trainyard-Timestamp: <unix
//   seconds of this attempt> X-Trainyard-Signature: sha256=<hex
//   HMAC-SHA256(secret, "<timestamp>.<body>")>  (with a secret)
// The timestamp and the signature are made afresh for every attempt, so a
// receiver can refuse old timestamps (replays) without refusing retries.
//
// Outcomes: 2xx is delivered. Connection errors, timeouts, 408, 429 and 5xx are
// retried (a Retry-After in seconds on 429 or 503 replaces the backoff, capped
// at 300 s); any other status is permanent (not retried). After max_attempts
// the delivery is given up with an error log line naming the delivery id and
// the last error.
#ifndef TRAINYARD_SERVICES_ACCOUNTING_WEBHOOK_H_
#define TRAINYARD_SERVICES_ACCOUNTING_WEBHOOK_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/lib/runtime/metrics.h"

namespace trainyard::accounting {

struct WebhookOptions {
  // http:// or https:// with a host. Redirects are not followed; no proxy is
  // used.
  std::string url;
  // The HMAC-SHA256 key; empty sends unsigned requests (no
  // X-Trainyard-Signature).
  std::string secret;
  // Limit of one attempt (connect, send, answer).
  absl::Duration timeout = absl::Seconds(5);
  // Attempts per delivery, the first included (>= 1).
  int max_attempts = 6;
  // The wait before the second attempt is drawn from [0, initial_backoff]
  // ("full jitter"); each further retry doubles the upper end, up to
  // max_backoff.
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(60);
  // A receiver's Retry-After is obeyed up to this.
  absl::Duration max_retry_after = absl::Seconds(300);
  // Deliveries waiting to be sent (the one being sent not counted); when full,
  // Enqueue drops the oldest waiting one.
  size_t queue_capacity = 1000;
  // What the destructor passes to Stop().
  absl::Duration stop_grace = absl::Seconds(5);
  // Where the counters are registered; null means runtime::DefaultMetrics()
  // (what /metrics serves). Must outlive the sender.
  runtime::MetricsRegistry* metrics = nullptr;
};

// The X-Trainyard-Signature value for `body` sent at `timestamp` (decimal unix
// seconds, as in X-Trainyard-Timestamp): "sha256=" and the lower-case hex
// HMAC-SHA256 under `secret` of
// "<timestamp>.<body>". Receivers compare it with the header in constant time.
std::string WebhookSignature(std::string_view secret,
                             std::string_view timestamp, std::string_view body);

class WebhookSender {
 public:
  // Counts since Create (this sender only; the registry's counters add up all
  // senders).
  struct Stats {
    uint64_t delivered = 0;  // answered 2xx
    uint64_t failed =
        0;  // refused (permanent status) or given up after max_attempts
    uint64_t dropped =
        0;  // pushed out of a full queue, or still unsent when Stop gave up
    uint64_t attempts = 0;  // HTTP attempts made
    size_t queued = 0;      // waiting now (not counting one being sent)
  };

  // Refuses a URL that is not http(s) with a host (the error names
  // `webhook_url`) and out-of-range options (each error names its field,
  // `webhook_...`). Starts the sender thread.
  static absl::StatusOr<std::unique_ptr<WebhookSender>> Create(
      WebhookOptions options);

  // Stop(options.stop_grace).
  ~WebhookSender();
  WebhookSender(const WebhookSender&) = delete;
  WebhookSender& operator=(const WebhookSender&) = delete;

  // Queues one delivery and returns at once with its delivery id.
  // FailedPrecondition after Stop(); InvalidArgument for an event type that is
  // empty or not printable ASCII (it goes into a header).
  absl::StatusOr<std::string> Enqueue(std::string event_type,
                                      std::string json_body);

  // Stops accepting, keeps delivering what is queued (retries included) for at
  // most `grace`, then abandons the rest (counted as dropped, logged) and
  // returns. An attempt in flight at the deadline is aborted, which libcurl
  // notices within about a second. Returns at once when the sender already
  // stopped. Thread-safe; concurrent callers all return after the stop.
  void Stop(absl::Duration grace);
  void Stop() { Stop(options_.stop_grace); }

  Stats stats() const;

  // The URL without user info, query or fragment, for log lines.
  const std::string& redacted_url() const { return redacted_url_; }

 private:
  struct Delivery {
    std::string id;
    std::string event_type;
    std::string body;
  };
  struct AttemptResult {
    bool delivered = false;
    bool retryable = false;
    bool aborted = false;
    long status = 0;  // HTTP status, 0 when no answer
    std::string error;
    std::optional<absl::Duration>
        retry_after;  // the answer's Retry-After, if any
  };
  enum class Outcome { kDelivered, kFailed, kAborted };

  WebhookSender(WebhookOptions options, std::string redacted_url);
  void Run();
  Outcome Deliver(const Delivery& delivery);
  AttemptResult Attempt(const Delivery& delivery, int attempt);
  absl::Duration Backoff(int failed_attempts);
  // Waits up to `d`; false when aborted meanwhile.
  bool SleepUnlessAborted(absl::Duration d);

  const WebhookOptions options_;
  const std::string redacted_url_;
  runtime::Counter& delivered_counter_;
  runtime::Counter& failed_counter_;
  runtime::Counter& dropped_counter_;
  runtime::Counter& attempts_counter_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // the worker waits on it: work, stop or abort
  std::condition_variable done_cv_;  // Stop waits on it: the worker finished
  std::deque<Delivery> queue_;
  bool accepting_ = true;
  std::atomic<bool> abort_{
      false};  // set under mu_; read by libcurl's progress callback too
  bool worker_done_ = false;
  Stats stats_;

  std::mt19937_64 rng_;  // the worker's only

  std::mutex stop_mu_;  // one Stop at a time; the thread is joined once
  std::thread worker_;
};

}  // namespace trainyard::accounting

#endif  // TRAINYARD_SERVICES_ACCOUNTING_WEBHOOK_H_
