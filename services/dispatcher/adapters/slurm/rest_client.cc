#include "services/dispatcher/adapters/slurm/rest_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::slurm {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;
namespace {

constexpr size_t kMaxIdleHandles = 8;
// Answers larger than this are refused (a listing of ~100k jobs).
constexpr size_t kMaxBody = size_t{512} << 20;

void GlobalInit() {
  static absl::once_flag once;
  absl::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t Append(char* data, size_t size, size_t n, void* out) {
  auto* body = static_cast<std::string*>(out);
  if (body->size() + size * n > kMaxBody) return 0;  // aborts the transfer
  body->append(data, size * n);
  return size * n;
}

long Millis(absl::Duration d) {
  return static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

}  // namespace

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
  if (sent != nullptr) *sent = false;
  CURL* curl = static_cast<CURL*>(TakeHandle());
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  curl_easy_reset(curl);
  const std::string url = Cat(url_prefix_, path);
  const std::string method_s(method);
  const std::string body_s(body);
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   Millis(options_.connect_timeout));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, Millis(options_.request_timeout));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!unix_socket_.empty()) {
    curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, unix_socket_.c_str());
  }
  if (!options_.ca_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
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
  }
  curl_slist* list = nullptr;
  for (const auto& [name, value] : headers) {
    list = curl_slist_append(list, Cat(name, ": ", value).c_str());
  }
  if (!body_s.empty()) {
    list = curl_slist_append(list, "Content-Type: application/json");
  }
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);

  const CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_off_t connected = 0;
  curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME_T, &connected);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(list);
  const bool reached =
      rc == CURLE_OK || status != 0 ||
      (rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST &&
       rc != CURLE_UNSUPPORTED_PROTOCOL && rc != CURLE_URL_MALFORMAT &&
       !(rc == CURLE_OPERATION_TIMEDOUT && connected == 0));
  if (sent != nullptr) *sent = reached;
  if (rc != CURLE_OK) {
    curl_easy_cleanup(curl);
    const std::string what =
        Cat("slurmrestd ", options_.base_url, ": ", method_s, " ", path, ": ",
            error[0] != '\0' ? error : curl_easy_strerror(rc));
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

}  // namespace trainyard::dispatcher::slurm
