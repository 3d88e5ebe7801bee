#include "services/dispatcher/adapters/http/rest_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::http {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;
namespace {

constexpr size_t kMaxIdleHandles = 8;
// Answers larger than this are refused (a listing of ~100k jobs).
constexpr size_t kMaxBody = size_t{512} << 20;
// How long a cancellable call sleeps between looks at its transfer when
// nothing arrives and curl has no timer of its own (Cancel() wakes it).
constexpr int kIdlePollMs = 10 * 60 * 1000;

void GlobalInit() {
  static absl::once_flag once;
  absl::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// What the write and header callbacks of one call share.
struct Transfer {
  CURL* curl = nullptr;
  HttpResponse* response = nullptr;
  const std::function<bool(std::string_view)>* sink = nullptr;
  bool want_headers = false;
  bool sink_stopped = false;
};

size_t Append(char* data, size_t size, size_t n, void* out) {
  auto* t = static_cast<Transfer*>(out);
  const size_t bytes = size * n;
  if (t->sink != nullptr && *t->sink) {
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
      if (!(*t->sink)(std::string_view(data, bytes))) {
        t->sink_stopped = true;
        return 0;  // aborts the transfer
      }
      return bytes;
    }
  }
  std::string& body = t->response->body;
  if (body.size() + bytes > kMaxBody) return 0;  // aborts the transfer
  body.append(data, bytes);
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t n, void* out) {
  auto* t = static_cast<Transfer*>(out);
  const size_t bytes = size * n;
  if (!t->want_headers) return bytes;
  std::string_view line(data, bytes);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
    line.remove_suffix(1);
  }
  if (line.starts_with("HTTP/")) {  // a new answer (after 100 or a redirect)
    t->response->headers.clear();
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return bytes;
  std::string name = absl::AsciiStrToLower(AbslView(line.substr(0, colon)));
  std::string value(
      absl::StripAsciiWhitespace(AbslView(line.substr(colon + 1))));
  t->response->headers.emplace_back(std::move(name), std::move(value));
  return bytes;
}

long Millis(absl::Duration d) {
  return static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

bool IsTlsFailure(CURLcode rc) {
  switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
      return true;
    default:
      return false;
  }
}

void SetBlob(CURL* curl, CURLoption option, const std::string& pem) {
  curl_blob blob{.data = const_cast<char*>(pem.data()),
                 .len = pem.size(),
                 .flags = CURL_BLOB_COPY};
  curl_easy_setopt(curl, option, &blob);
}

}  // namespace

std::optional<std::string> HttpResponse::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::nullopt;
}

void Canceller::Cancel() {
  absl::MutexLock l(&mu_);
  cancelled_ = true;
  if (multi_ != nullptr) curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

bool Canceller::cancelled() const {
  absl::MutexLock l(&mu_);
  return cancelled_;
}

bool Canceller::SleepFor(absl::Duration d) const {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&cancelled_), d);
  return !cancelled_;
}

RestClient::RestClient(RestClientOptions options)
    : options_(std::move(options)) {
  GlobalInit();
  if (absl::StartsWith(options_.base_url, "unix:")) {
    unix_socket_ = options_.base_url.substr(5);
    url_prefix_ = "http://localhost";
  } else {
    url_prefix_ = options_.base_url;
    while (!url_prefix_.empty() && url_prefix_.back() == '/') {
      url_prefix_.pop_back();
    }
  }
  // tls_server_name: the URL names that host (SNI and the certificate check
  // use it) and CONNECT_TO sends the connection to the real one.
  const size_t scheme_end = url_prefix_.find("://");
  if (!options_.tls_server_name.empty() && scheme_end != std::string::npos) {
    const std::string scheme = url_prefix_.substr(0, scheme_end);
    std::string authority = url_prefix_.substr(scheme_end + 3);
    std::string rest;
    if (const size_t slash = authority.find('/'); slash != std::string::npos) {
      rest = authority.substr(slash);
      authority.resize(slash);
    }
    std::string host = authority;
    std::string port = scheme == "http" ? "80" : "443";
    // host:port, [v6]:port
    if (const size_t colon = authority.rfind(':');
        colon != std::string::npos &&
        authority.find(']', colon) == std::string::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    connect_to_ =
        Cat(options_.tls_server_name, ":", port, ":", host, ":", port);
    url_prefix_ = Cat(scheme, "://", options_.tls_server_name, ":", port, rest);
  }
}

RestClient::~RestClient() {
  absl::MutexLock l(&mu_);
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
  idle_.clear();
}

void* RestClient::TakeHandle() {
  {
    absl::MutexLock l(&mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void RestClient::ReturnHandle(void* handle) {
  if (handle == nullptr) return;
  absl::MutexLock l(&mu_);
  if (idle_.size() < kMaxIdleHandles) {
    idle_.push_back(handle);
    return;
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

absl::StatusOr<HttpResponse> RestClient::Call(
    std::string_view method, std::string_view path,
    const std::vector<std::pair<std::string, std::string>>& headers,
    std::string_view body, bool* sent) {
  CallInfo info;
  absl::StatusOr<HttpResponse> r =
      Call({.method = method, .path = path, .headers = headers, .body = body},
           &info);
  if (sent != nullptr) *sent = info.sent;
  return r;
}

absl::StatusOr<HttpResponse> RestClient::Call(const HttpRequest& request,
                                              CallInfo* info) {
  CallInfo ignored;
  if (info == nullptr) info = &ignored;
  *info = CallInfo{};
  if (request.canceller != nullptr && request.canceller->cancelled()) {
    return absl::CancelledError(Cat(options_.service, " ", options_.base_url,
                                    ": ", request.method, " ", request.path,
                                    ": cancelled"));
  }
  CURL* curl = static_cast<CURL*>(TakeHandle());
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  curl_easy_reset(curl);
  const std::string url = Cat(url_prefix_, request.path);
  const std::string method_s(request.method);
  const std::string body_s(request.body);
  HttpResponse response;
  Transfer transfer{.curl = curl,
                    .response = &response,
                    .sink = &request.sink,
                    .want_headers = request.want_headers};
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   Millis(options_.connect_timeout));
  const absl::Duration timeout =
      request.timeout.value_or(options_.request_timeout);
  if (timeout != absl::InfiniteDuration()) {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, Millis(timeout));
  }
  // A long stream notices a peer that vanished without closing.
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!unix_socket_.empty()) {
    curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, unix_socket_.c_str());
  }
  curl_slist* connect_to = nullptr;
  if (!connect_to_.empty()) {
    connect_to = curl_slist_append(connect_to, connect_to_.c_str());
    curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect_to);
  }
  if (!options_.ca_pem.empty()) {
    SetBlob(curl, CURLOPT_CAINFO_BLOB, options_.ca_pem);
  } else if (!options_.ca_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  if (!options_.client_cert_pem.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
    SetBlob(curl, CURLOPT_SSLCERT_BLOB, options_.client_cert_pem);
  } else if (!options_.client_cert_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, options_.client_cert_file.c_str());
  }
  if (!options_.client_key_pem.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");
    SetBlob(curl, CURLOPT_SSLKEY_BLOB, options_.client_key_pem);
  } else if (!options_.client_key_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLKEY, options_.client_key_file.c_str());
  }
  if (options_.insecure_skip_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (method_s == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (method_s == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body_s.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(body_s.size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method_s.c_str());
    if (!body_s.empty()) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body_s.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(body_s.size()));
    }
  }
  curl_slist* list = nullptr;
  for (const auto& [name, value] : request.headers) {
    list = curl_slist_append(list, Cat(name, ": ", value).c_str());
  }
  if (!body_s.empty()) {
    list = curl_slist_append(
        list, Cat("Content-Type: ", request.content_type).c_str());
  }
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);

  CURLcode rc = CURLE_OK;
  bool cancelled = false;
  if (request.canceller == nullptr) {
    rc = curl_easy_perform(curl);
  } else {
    // A multi handle, so that Cancel() can wake the wait (curl_multi_wakeup)
    // and an idle stream sleeps in poll() instead of polling a flag.
    CURLM* multi = curl_multi_init();
    curl_multi_add_handle(multi, curl);
    Canceller& c = *request.canceller;
    {
      absl::MutexLock l(&c.mu_);
      c.multi_ = multi;
      cancelled = c.cancelled_;
    }
    rc = CURLE_RECV_ERROR;
    while (!cancelled) {
      int running = 0;
      if (curl_multi_perform(multi, &running) != CURLM_OK) break;
      if (running == 0) {
        int left = 0;
        while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
          if (m->msg == CURLMSG_DONE) rc = m->data.result;
        }
        break;
      }
      curl_multi_poll(multi, nullptr, 0, kIdlePollMs, nullptr);
      cancelled = c.cancelled();
    }
    {
      absl::MutexLock l(&c.mu_);
      c.multi_ = nullptr;
    }
    curl_multi_remove_handle(multi, curl);
    curl_multi_cleanup(multi);
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_off_t connected = 0;
  curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME_T, &connected);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(curl, CURLOPT_CONNECT_TO, nullptr);
  curl_slist_free_all(list);
  curl_slist_free_all(connect_to);
  info->tls_failure = IsTlsFailure(rc);
  info->sent =
      rc == CURLE_OK || status != 0 ||
      (rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST &&
       rc != CURLE_UNSUPPORTED_PROTOCOL && rc != CURLE_URL_MALFORMAT &&
       !info->tls_failure &&
       !(rc == CURLE_OPERATION_TIMEDOUT && connected == 0));
  const std::string where = Cat(options_.service, " ", options_.base_url, ": ",
                                method_s, " ", request.path);
  if (cancelled || transfer.sink_stopped) {
    curl_easy_cleanup(curl);
    return absl::CancelledError(Cat(where, ": cancelled"));
  }
  if (rc != CURLE_OK) {
    curl_easy_cleanup(curl);
    const std::string what =
        Cat(where, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc));
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      return absl::DeadlineExceededError(what);
    }
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
      return absl::InvalidArgumentError(Cat("rest_url: ", what));
    }
    return absl::UnavailableError(what);
  }
  ReturnHandle(curl);
  response.status = static_cast<int>(status);
  return response;
}

}  // namespace trainyard::dispatcher::http
