// WebhookSender against real HTTP receivers on loopback: the runtime's
// HttpServer (recording requests, answering scripted statuses), a raw socket
// responder where an answer needs a header HttpServer cannot send
// (Retry-After), a closed port and a listener that never accepts. Signatures
// are checked with OpenSSL's HMAC directly, not with the library's helper.
#include "services/accounting/webhook.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/lib/runtime/http_server.h"
#include "services/lib/runtime/metrics.h"

namespace trainyard::accounting {
namespace {

using runtime::HttpRequest;
using runtime::HttpResponse;
using runtime::HttpServer;
using runtime::MetricsRegistry;
using ::testing::HasSubstr;
using SteadyTime = std::chrono::steady_clock::time_point;

// "sha256=" + hex HMAC-SHA256(secret, timestamp + "." + body), straight from
// OpenSSL.
std::string IndependentSignature(const std::string& secret,
                                 const std::string& timestamp,
                                 const std::string& body) {
  std::string message = timestamp + "." + body;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       mac, &len);
  std::string out = "sha256=";
  char hex[3];
  for (unsigned int i = 0; i < len; ++i) {
    snprintf(hex, sizeof(hex), "%02x", mac[i]);
    out += hex;
  }
  return out;
}

bool WaitUntil(const std::function<bool()>& done,
               absl::Duration timeout = absl::Seconds(5)) {
  absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

std::string Header(const HttpRequest& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "<absent>" : it->second;
}

// An HttpServer on 127.0.0.1:0 whose /hook records each request and answers the
// scripted statuses in turn, then 200. While held, answers wait (the request is
// recorded first).
class Receiver {
 public:
  struct Received {
    HttpRequest request;
    SteadyTime at;
  };

  Receiver() : server_("127.0.0.1:0", {.threads = 2}) {
    server_.Handle("/hook",
                   [this](const HttpRequest& r) { return OnRequest(r); });
  }
  ~Receiver() {
    Release();
    server_.Stop();
  }

  absl::Status Start() { return server_.Start(); }
  std::string url() const {
    return absl::StrCat("http://127.0.0.1:", server_.port(), "/hook");
  }

  void Script(std::vector<int> statuses) {
    std::lock_guard<std::mutex> lock(mu_);
    script_.assign(statuses.begin(), statuses.end());
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  bool WaitForRequests(size_t n, absl::Duration timeout = absl::Seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return received_.size() >= n; });
  }
  std::vector<Received> received() const {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  HttpResponse OnRequest(const HttpRequest& r) {
    std::unique_lock<std::mutex> lock(mu_);
    received_.push_back({r, std::chrono::steady_clock::now()});
    int status = 200;
    if (!script_.empty()) {
      status = script_.front();
      script_.pop_front();
    }
    cv_.notify_all();
    cv_.wait(lock, [this] { return !held_; });
    return HttpResponse{.status = status,
                        .content_type = "application/json",
                        .body = R"({"ok":true})"};
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> script_;
  bool held_ = false;
  std::vector<Received> received_;
  HttpServer
      server_;  // last: stopped (its handlers joined) before the rest goes
};

// A listening socket on 127.0.0.1 with a free port; -1 on failure.
int Listen(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// Answers each connection with the next of the given raw HTTP responses (then
// stops answering), recording the raw request and when it arrived.
class RawResponder {
 public:
  struct Received {
    std::string raw;  // head and body
    SteadyTime at;
  };

  explicit RawResponder(std::vector<std::string> responses)
      : responses_(std::move(responses)) {
    fd_ = Listen(&port_);
    if (fd_ >= 0) thread_ = std::thread([this] { Loop(); });
  }
  ~RawResponder() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  std::string url() const {
    return absl::StrCat("http://127.0.0.1:", port_, "/hook");
  }
  std::vector<Received> received() const {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  void Loop() {
    size_t next = 0;
    while (!stop_ && next < responses_.size()) {
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      timeval tv{.tv_sec = 5, .tv_usec = 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      std::string raw = ReadRequest(c);
      {
        std::lock_guard<std::mutex> lock(mu_);
        received_.push_back({raw, std::chrono::steady_clock::now()});
      }
      const std::string& out = responses_[next++];
      (void)::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  // Reads the head and a Content-Length body.
  static std::string ReadRequest(int c) {
    std::string data;
    char buf[4096];
    size_t want = std::string::npos;
    while (want == std::string::npos || data.size() < want) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      data.append(buf, static_cast<size_t>(n));
      size_t head_end = data.find("\r\n\r\n");
      if (want == std::string::npos && head_end != std::string::npos) {
        std::string head = absl::AsciiStrToLower(data.substr(0, head_end));
        size_t length = 0;
        if (size_t cl = head.find("\r\ncontent-length:");
            cl != std::string::npos) {
          size_t end = head.find("\r\n", cl + 2);
          (void)absl::SimpleAtoi(
              absl::StripAsciiWhitespace(head.substr(cl + 17, end - cl - 17)),
              &length);
        }
        want = head_end + 4 + length;
      }
    }
    return data;
  }

  std::vector<std::string> responses_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<Received> received_;
  std::thread thread_;
};

// The value of header `name` (lower case) in a raw request, or "".
std::string RawHeader(const std::string& raw, const std::string& name) {
  for (absl::string_view line :
       absl::StrSplit(raw.substr(0, raw.find("\r\n\r\n")), "\r\n")) {
    size_t colon = line.find(':');
    if (colon != absl::string_view::npos &&
        absl::AsciiStrToLower(line.substr(0, colon)) == name) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

// Small backoffs so that retries take milliseconds.
WebhookOptions FastOptions(std::string url, MetricsRegistry* metrics) {
  return WebhookOptions{.url = std::move(url),
                        .timeout = absl::Seconds(3),
                        .max_attempts = 6,
                        .initial_backoff = absl::Milliseconds(5),
                        .max_backoff = absl::Milliseconds(20),
                        .queue_capacity = 100,
                        .stop_grace = absl::Seconds(2),
                        .metrics = metrics};
}

std::unique_ptr<WebhookSender> MustCreate(WebhookOptions options) {
  absl::StatusOr<std::unique_ptr<WebhookSender>> sender =
      WebhookSender::Create(options);
  EXPECT_TRUE(sender.ok()) << sender.status();
  return sender.ok() ? std::move(*sender) : nullptr;
}

double CounterValue(MetricsRegistry& metrics, const std::string& result) {
  std::string text = "\n" + metrics.Render();
  std::string key =
      result.empty()
          ? std::string("\ntrainyard_webhook_attempts_total ")
          : absl::StrCat("\ntrainyard_webhook_deliveries_total{result=\"",
                         result, "\"} ");
  size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  size_t end = text.find('\n', at + key.size());
  double v = -1;
  if (!absl::SimpleAtod(text.substr(at + key.size(), end - at - key.size()),
                        &v))
    return -1;
  return v;
}

constexpr char kBody[] =
    R"({"event":"budget.threshold_crossed","tenant":"ml-research","budget":"q4-gpu",)"
    R"("threshold_percent":90,"spent_micros":910000000,"limit_micros":1000000000})";

TEST(WebhookSenderTest, SignedPostCarriesHeadersBodyAndVerifiableSignature) {
  Receiver rx;
  ASSERT_TRUE(rx.Start().ok());
  MetricsRegistry metrics;
  WebhookOptions options = FastOptions(rx.url(), &metrics);
  options.secret = "whsec_budget-hook";
  std::unique_ptr<WebhookSender> sender = MustCreate(options);
  ASSERT_NE(sender, nullptr);

  int64_t before = absl::ToUnixSeconds(absl::Now());
  absl::StatusOr<std::string> id =
      sender->Enqueue("budget.threshold_crossed", kBody);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitUntil([&] { return sender->stats().delivered == 1; }));
  int64_t after = absl::ToUnixSeconds(absl::Now());

  std::vector<Receiver::Received> got = rx.received();
  ASSERT_EQ(got.size(), 1u);
  const HttpRequest& r = got[0].request;
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/hook");
  EXPECT_EQ(r.body, kBody);
  EXPECT_EQ(Header(r, "content-type"), "application/json");
  EXPECT_EQ(Header(r, "user-agent"), "trainyard-webhook/1");
  EXPECT_EQ(Header(r, "x-trainyard-event"), "budget.threshold_crossed");
  EXPECT_EQ(Header(r, "x-trainyard-delivery"), *id);
  EXPECT_EQ(id->size(), 36u);
  EXPECT_EQ(Header(r, "x-trainyard-attempt"), "1");
  std::string timestamp = Header(r, "x-trainyard-timestamp");
  int64_t ts = 0;
  ASSERT_TRUE(absl::SimpleAtoi(timestamp, &ts)) << timestamp;
  EXPECT_GE(ts, before);
  EXPECT_LE(ts, after);

  std::string signature = Header(r, "x-trainyard-signature");
  EXPECT_EQ(signature,
            IndependentSignature("whsec_budget-hook", timestamp, kBody));
  EXPECT_EQ(WebhookSignature("whsec_budget-hook", timestamp, kBody), signature);
  // The check can fail: another key, a tampered body or another timestamp do
  // not verify.
  EXPECT_NE(signature, IndependentSignature("whsec_other", timestamp, kBody));
  EXPECT_NE(signature, IndependentSignature("whsec_budget-hook", timestamp,
                                            std::string(kBody) + " "));
  EXPECT_NE(signature, IndependentSignature("whsec_budget-hook",
                                            std::to_string(ts - 1), kBody));

  WebhookSender::Stats stats = sender->stats();
  EXPECT_EQ(stats.attempts, 1u);
  EXPECT_EQ(stats.failed, 0u);
  EXPECT_EQ(stats.dropped, 0u);
  EXPECT_EQ(CounterValue(metrics, "delivered"), 1);
  EXPECT_EQ(CounterValue(metrics, "failed"), 0);
  EXPECT_EQ(CounterValue(metrics, "dropped"), 0);
  EXPECT_EQ(CounterValue(metrics, ""), 1);
}

TEST(WebhookSenderTest, WithoutSecretSendsUnsignedInOrderWithDistinctIds) {
  Receiver rx;
  ASSERT_TRUE(rx.Start().ok());
  MetricsRegistry metrics;
  std::unique_ptr<WebhookSender> sender =
      MustCreate(FastOptions(rx.url(), &metrics));
  ASSERT_NE(sender, nullptr);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<std::string> id =
        sender->Enqueue("budget.test", absl::StrCat("{\"n\":", i, "}"));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  ASSERT_TRUE(WaitUntil([&] { return sender->stats().delivered == 5; }));
  std::vector<Receiver::Received> got = rx.received();
  ASSERT_EQ(got.size(), 5u);
  std::set<std::string> distinct;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i].request.body, absl::StrCat("{\"n\":", i, "}"));
    EXPECT_EQ(Header(got[i].request, "x-trainyard-delivery"), ids[i]);
    EXPECT_EQ(got[i].request.headers.count("x-trainyard-signature"), 0u);
    distinct.insert(ids[i]);
  }
  EXPECT_EQ(distinct.size(), 5u);
}

TEST(WebhookSenderTest, RetriesServerErrorsAndTimeoutsUnderOneDeliveryId) {
  Receiver rx;
  ASSERT_TRUE(rx.Start().ok());
  rx.Script({500, 408, 503});
  MetricsRegistry metrics;
  WebhookOptions options = FastOptions(rx.url(), &metrics);
  options.secret = "k";
  std::unique_ptr<WebhookSender> sender = MustCreate(options);
  ASSERT_NE(sender, nullptr);
  absl::StatusOr<std::string> id = sender->Enqueue("budget.exceeded", kBody);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(WaitUntil([&] { return sender->stats().delivered == 1; }));

  std::vector<Receiver::Received> got = rx.received();
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < got.size(); ++i) {
    const HttpRequest& r = got[i].request;
    EXPECT_EQ(Header(r, "x-trainyard-delivery"), *id) << i;
    EXPECT_EQ(Header(r, "x-trainyard-attempt"), std::to_string(i + 1));
    EXPECT_EQ(r.body, kBody);
    // Each attempt is signed over its own timestamp.
    EXPECT_EQ(
        Header(r, "x-trainyard-signature"),
        IndependentSignature("k", Header(r, "x-trainyard-timestamp"), kBody));
  }
  WebhookSender::Stats stats = sender->stats();
  EXPECT_EQ(stats.attempts, 4u);
  EXPECT_EQ(stats.failed, 0u);
  EXPECT_EQ(CounterValue(metrics, ""), 4);
  EXPECT_EQ(CounterValue(metrics, "delivered"), 1);
}

std::string RawAnswer(int status, const std::string& extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, " X\r\n", extra_headers,
                      "Content-Length: 0\r\nConnection: close\r\n\r\n");
}

TEST(WebhookSenderTest, HonoursRetryAfterOn429) {
  RawResponder rx({RawAnswer(429, "Retry-After: 1\r\n"), RawAnswer(204)});
  ASSERT_TRUE(rx.ok());
  MetricsRegistry metrics;
  std::unique_ptr<WebhookSender> sender =
      MustCreate(FastOptions(rx.url(), &metrics));
  ASSERT_NE(sender, nullptr);
  absl::StatusOr<std::string> id = sender->Enqueue("budget.exceeded", kBody);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(WaitUntil([&] { return sender->stats().delivered == 1; }));
  std::vector<RawResponder::Received> got = rx.received();
  ASSERT_EQ(got.size(), 2u);
  // The backoff alone would wait at most 20 ms.
  EXPECT_GE(got[1].at - got[0].at, std::chrono::seconds(1));
  EXPECT_EQ(RawHeader(got[0].raw, "x-trainyard-delivery"), *id);
  EXPECT_EQ(RawHeader(got[1].raw, "x-trainyard-delivery"), *id);
  EXPECT_EQ(RawHeader(got[1].raw, "x-trainyard-attempt"), "2");
}

TEST(WebhookSenderTest, CapsRetryAfter) {
  RawResponder rx({RawAnswer(503, "Retry-After: 3600\r\n"), RawAnswer(200)});
  ASSERT_TRUE(rx.ok());
  MetricsRegistry metrics;
  WebhookOptions options = FastOptions(rx.url(), &metrics);
  options.max_retry_after = absl::Milliseconds(200);
  std::unique_ptr<WebhookSender> sender = MustCreate(options);
  ASSERT_NE(sender, nullptr);
  ASSERT_TRUE(sender->Enqueue("budget.exceeded", kBody).ok());
  ASSERT_TRUE(WaitUntil([&] { return sender->stats().delivered == 1; }));
  std::vector<RawResponder::Received> got = rx.received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GE(got[1].at - got[0].at, std::chrono::milliseconds(200));
}

TEST(WebhookSenderTest, DoesNotRetryOtherClientErrors) {
  Receiver rx;
  ASSERT_TRUE(rx.Start().ok());
  rx.Script({400});
  MetricsRegistry metrics;
  std::unique_ptr<WebhookSender> sender =
      MustCreate(FastOptions(rx.url(), &metrics));
  ASSERT_NE(sender, nullptr);
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::string> refused =
      sender->Enqueue("budget.exceeded", "{\"n\":1}");
  absl::StatusOr<std::string> next =
      sender->Enqueue("budget.exceeded", "{\"n\":2}");
  ASSERT_TRUE(refused.ok() && next.ok());
  // Deliveries are in order, so once the second is delivered the first was not
  // retried.
  bool delivered = WaitUntil([&] { return sender->stats().delivered == 1; });
  sender->Stop();
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(delivered);
  std::vector<Receiver::Received> got = rx.received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].request.body, "{\"n\":1}");
  EXPECT_EQ(got[1].request.body, "{\"n\":2}");
  WebhookSender::Stats stats = sender->stats();
  EXPECT_EQ(stats.failed, 1u);
  EXPECT_EQ(stats.attempts, 2u);
  EXPECT_EQ(CounterValue(metrics, "failed"), 1);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("\"delivery\":\"", *refused, "\"")));
  EXPECT_THAT(log, HasSubstr("\"status\":400"));
}

TEST(WebhookSenderTest, GivesUpAfterMaxAttemptsAgainstAClosedPort) {
  int port = 0;
  int fd = Listen(&port);
  ASSERT_GE(fd, 0);
  ::close(fd);  // nothing listens there now: connections are refused
  MetricsRegistry metrics;
  WebhookOptions options =
      FastOptions(absl::StrCat("http://127.0.0.1:", port, "/hook"), &metrics);
  options.max_attempts = 3;
  std::unique_ptr<WebhookSender> sender = MustCreate(options);
  ASSERT_NE(sender, nullptr);
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::string> id = sender->Enqueue("budget.exceeded", kBody);
  bool failed = WaitUntil([&] { return sender->stats().failed == 1; });
  sender->Stop();  // the worker has written its log lines
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(failed);
  WebhookSender::Stats stats = sender->stats();
  EXPECT_EQ(stats.attempts, 3u);
  EXPECT_EQ(stats.delivered, 0u);
  EXPECT_EQ(CounterValue(metrics, "failed"), 1);
  EXPECT_EQ(CounterValue(metrics, ""), 3);
  // One structured line: the give-up, with the delivery id and the last error.
  std::string give_up;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "giving up")) give_up = std::string(line);
  }
  EXPECT_THAT(give_up, HasSubstr(absl::StrCat("\"delivery\":\"", *id, "\"")));
  EXPECT_THAT(give_up, HasSubstr("\"attempts\":3"));
  EXPECT_THAT(give_up, HasSubstr("\"last_error\":\"curl: "));
  EXPECT_THAT(give_up, HasSubstr("\"level\":\"error\""));
}

TEST(WebhookSenderTest, RefusesBadUrlsAndOptionsAtCreate) {
  for (const char* url :
       {"", "ftp://example.com/hook", "file:///etc/passwd", "http://",
        "https:///hook", "example.com/hook", "http://exa mple.com/",
        "gopher://example.com/", "http//example.com"}) {
    absl::StatusOr<std::unique_ptr<WebhookSender>> sender =
        WebhookSender::Create(WebhookOptions{.url = url});
    ASSERT_FALSE(sender.ok()) << url;
    EXPECT_EQ(sender.status().code(), absl::StatusCode::kInvalidArgument)
        << url;
    EXPECT_THAT(sender.status().message(), HasSubstr("webhook_url")) << url;
  }
  MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<WebhookSender>> ok =
      WebhookSender::Create(WebhookOptions{
          .url = "https://user:pw@hooks.example.com:8443/budget?token=abc",
          .metrics = &metrics});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->redacted_url(), "https://hooks.example.com:8443/budget");

  auto refused_field = [&](WebhookOptions o) {
    o.url = "http://127.0.0.1:9/hook";
    o.metrics = &metrics;
    absl::StatusOr<std::unique_ptr<WebhookSender>> s = WebhookSender::Create(o);
    return s.ok() ? std::string("accepted") : std::string(s.status().message());
  };
  EXPECT_THAT(refused_field({.max_attempts = 0}),
              HasSubstr("webhook_max_attempts"));
  EXPECT_THAT(refused_field({.timeout = absl::ZeroDuration()}),
              HasSubstr("webhook_timeout"));
  EXPECT_THAT(refused_field({.queue_capacity = 0}),
              HasSubstr("webhook_queue_capacity"));
  EXPECT_THAT(refused_field({.initial_backoff = absl::Seconds(-1)}),
              HasSubstr("webhook_initial_backoff"));
}

TEST(WebhookSenderTest, RefusesEventTypesThatCannotBeAHeader) {
  MetricsRegistry metrics;
  std::unique_ptr<WebhookSender> sender =
      MustCreate(FastOptions("http://127.0.0.1:9/hook", &metrics));
  ASSERT_NE(sender, nullptr);
  EXPECT_EQ(sender->Enqueue("budget\r\nX-Evil: 1", "{}").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sender->Enqueue("", "{}").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sender->stats().queued, 0u);
}

TEST(WebhookSenderTest, FullQueueDropsTheOldest) {
  Receiver rx;
  ASSERT_TRUE(rx.Start().ok());
  rx.Hold();
  MetricsRegistry metrics;
  WebhookOptions options = FastOptions(rx.url(), &metrics);
  options.queue_capacity = 2;
  std::unique_ptr<WebhookSender> sender = MustCreate(options);
  ASSERT_NE(sender, nullptr);
  ASSERT_TRUE(sender->Enqueue("budget.test", "{\"n\":0}").ok());
  ASSERT_TRUE(rx.WaitForRequests(1));  // n=0 is in flight, its answer held
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(
        sender->Enqueue("budget.test", absl::StrCat("{\"n\":", i, "}")).ok());
  }
  WebhookSender::Stats stats = sender->stats();
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_EQ(stats.queued, 2u);
  EXPECT_EQ(CounterValue(metrics, "dropped"), 2);
  rx.Release();
  ASSERT_TRUE(WaitUntil([&] { return sender->stats().delivered == 3; }));
  std::vector<Receiver::Received> got = rx.received();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].request.body, "{\"n\":0}");
  EXPECT_EQ(got[1].request.body, "{\"n\":3}");
  EXPECT_EQ(got[2].request.body, "{\"n\":4}");
}

TEST(WebhookSenderTest, StopDeliversWhatIsQueuedThenRefuses) {
  Receiver rx;
  ASSERT_TRUE(rx.Start().ok());
  MetricsRegistry metrics;
  std::unique_ptr<WebhookSender> sender =
      MustCreate(FastOptions(rx.url(), &metrics));
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(
        sender->Enqueue("budget.test", absl::StrCat("{\"n\":", i, "}")).ok());
  }
  sender->Stop(absl::Seconds(5));
  EXPECT_EQ(sender->stats().delivered, 20u);
  std::vector<Receiver::Received> got = rx.received();
  ASSERT_EQ(got.size(), 20u);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(got[i].request.body, absl::StrCat("{\"n\":", i, "}"));
  EXPECT_EQ(sender->Enqueue("budget.test", "{}").status().code(),
            absl::StatusCode::kFailedPrecondition);
  sender->Stop();  // again: returns at once
}

TEST(WebhookSenderTest, StopIsBoundedWhenTheReceiverHangs) {
  int port = 0;
  int fd =
      Listen(&port);  // accepts connections (the kernel does) but never answers
  ASSERT_GE(fd, 0);
  MetricsRegistry metrics;
  WebhookOptions options =
      FastOptions(absl::StrCat("http://127.0.0.1:", port, "/hook"), &metrics);
  options.timeout = absl::Seconds(30);
  std::unique_ptr<WebhookSender> sender = MustCreate(options);
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(sender->Enqueue("budget.test", "{}").ok());
  absl::SleepFor(absl::Milliseconds(100));  // the first is in flight
  absl::Time start = absl::Now();
  sender->Stop(absl::Milliseconds(300));
  absl::Duration took = absl::Now() - start;
  ::close(fd);
  EXPECT_GE(took, absl::Milliseconds(300));
  // libcurl checks its progress callback about once a second.
  EXPECT_LT(took, absl::Seconds(3));
  WebhookSender::Stats stats = sender->stats();
  EXPECT_EQ(stats.dropped, 3u);
  EXPECT_EQ(stats.delivered + stats.failed, 0u);
  EXPECT_EQ(CounterValue(metrics, "dropped"), 3);
}

TEST(WebhookSenderTest, ConcurrentEnqueueAndStop) {
  Receiver rx;
  ASSERT_TRUE(rx.Start().ok());
  MetricsRegistry metrics;
  WebhookOptions options = FastOptions(rx.url(), &metrics);
  options.queue_capacity = 1000;
  std::unique_ptr<WebhookSender> sender = MustCreate(options);
  ASSERT_NE(sender, nullptr);
  std::vector<std::thread> producers;
  std::mutex ids_mu;
  std::set<std::string> ids;
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        absl::StatusOr<std::string> id = sender->Enqueue(
            "budget.test", absl::StrCat("{\"t\":", t, ",\"i\":", i, "}"));
        if (id.ok()) {
          std::lock_guard<std::mutex> lock(ids_mu);
          ids.insert(*id);
        }
      }
    });
  }
  for (std::thread& p : producers) p.join();
  std::thread other([&] { sender->Stop(absl::Seconds(5)); });
  sender->Stop(absl::Seconds(5));
  other.join();
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(sender->stats().delivered, 100u);
  std::set<std::string> received;
  for (const Receiver::Received& r : rx.received()) {
    received.insert(Header(r.request, "x-trainyard-delivery"));
  }
  EXPECT_EQ(received, ids);
}

}  // namespace
}  // namespace trainyard::accounting
