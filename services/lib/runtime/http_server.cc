#include "services/lib/runtime/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/lib/runtime/logging.h"

namespace trainyard::runtime {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr size_t kMaxBodyBytes = 1024 * 1024;

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

void SendResponse(int fd, const HttpResponse& r) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                                 "\r\nContent-Type: ", r.content_type,
                                 "\r\nContent-Length: ", r.body.size(),
                                 "\r\nConnection: close\r\n\r\n", r.body);
  WriteAll(fd, out);
}

}  // namespace

HttpResponse JsonError(int status, std::string_view message) {
  return HttpResponse{.status = status,
                      .content_type = "application/json",
                      .body = absl::StrCat("{\"error\":{\"code\":", status, ",\"message\":\"",
                                           JsonEscape(message), "\"}}")};
}

absl::StatusOr<std::pair<std::string, int>> ParseHostPort(std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", std::string(address), "\" is not host:port"));
  }
  std::string host(address.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(std::string(address.substr(colon + 1)), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", std::string(address), "\" has a bad port"));
  }
  return std::make_pair(host, port);
}

namespace {

// "host:port" with a numeric IPv4 host (or "localhost") as a socket address.
absl::StatusOr<sockaddr_in> Ipv4Address(std::string_view address) {
  auto hp = ParseHostPort(address);
  if (!hp.ok()) return hp.status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(hp->second));
  if (hp->first == "localhost") hp->first = "127.0.0.1";
  if (inet_pton(AF_INET, hp->first.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", std::string(address), "\": want an IPv4 address"));
  }
  return addr;
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(std::string_view address, std::string_view path,
                                     absl::Duration timeout) {
  absl::StatusOr<sockaddr_in> addr_or = Ipv4Address(address);
  if (!addr_or.ok()) return addr_or.status();
  sockaddr_in addr = *addr_or;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  timeval tv{.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout)),
             .tv_usec = static_cast<suseconds_t>(
                 absl::ToInt64Microseconds(timeout % absl::Seconds(1)))};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::string err = strerror(errno);
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", std::string(address), ": ", err));
  }
  WriteAll(fd, absl::StrCat("GET ", std::string(path), " HTTP/1.1\r\nHost: ",
                            std::string(address), "\r\nConnection: close\r\n\r\n"));
  std::string raw;
  char buf[8192];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  // "HTTP/1.1 200 OK\r\n...headers...\r\n\r\nbody"
  HttpResponse response;
  if (raw.size() < 12 || raw.compare(0, 5, "HTTP/") != 0 ||
      !absl::SimpleAtoi(raw.substr(9, 3), &response.status)) {
    return absl::UnavailableError(absl::StrCat("no HTTP response from ", std::string(address)));
  }
  size_t body = raw.find("\r\n\r\n");
  if (body != std::string::npos) {
    std::string head = absl::AsciiStrToLower(raw.substr(0, body));
    if (size_t ct = head.find("\r\ncontent-type:"); ct != std::string::npos) {
      size_t end = head.find("\r\n", ct + 2);
      response.content_type = std::string(absl::StripAsciiWhitespace(
          raw.substr(ct + 15, end == std::string::npos ? std::string::npos : end - ct - 15)));
    }
    response.body = raw.substr(body + 4);
  }
  return response;
}

HttpServer::HttpServer(std::string listen_address, int workers)
    : listen_address_(std::move(listen_address)), num_workers_(workers < 1 ? 1 : workers) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, HttpHandler handler) {
  handlers_[std::move(path)] = std::move(handler);
}

absl::Status HttpServer::Start() {
  absl::StatusOr<sockaddr_in> addr_or = Ipv4Address(listen_address_);
  if (!addr_or.ok()) return addr_or.status();
  sockaddr_in addr = *addr_or;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::string err = strerror(errno);
    ::close(listen_fd_);
    listen_fd_ = -1;
    return absl::UnavailableError(absl::StrCat("http: cannot listen on ", listen_address_, ": ",
                                               err));
  }
  if (::listen(listen_fd_, 128) != 0) {
    std::string err = strerror(errno);
    ::close(listen_fd_);
    listen_fd_ = -1;
    return absl::UnavailableError(absl::StrCat("http: listen: ", err));
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  for (int i = 0; i < num_workers_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  cv_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  for (int fd : pending_) ::close(fd);
  pending_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd p{.fd = listen_fd_, .events = POLLIN, .revents = 0};
    int ready = ::poll(&p, 1, 100);
    if (ready <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{.tv_sec = 5, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.size() > 256) {
        ::close(fd);
        continue;
      }
      pending_.push_back(fd);
    }
    cv_.notify_one();
  }
}

void HttpServer::WorkerLoop() {
  while (true) {
    int fd = -1;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_.load() || !pending_.empty(); });
      if (pending_.empty()) return;
      fd = pending_.front();
      pending_.pop_front();
    }
    Serve(fd);
    ::close(fd);
  }
}

void HttpServer::Serve(int fd) {
  std::string data;
  size_t header_end = std::string::npos;
  char buf[8192];
  while (header_end == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.append(buf, static_cast<size_t>(n));
    header_end = data.find("\r\n\r\n");
    if (header_end == std::string::npos && data.size() > kMaxHeaderBytes) {
      SendResponse(fd, JsonError(400, "request header too large"));
      return;
    }
  }
  HttpRequest req;
  std::string_view head(data.data(), header_end);
  size_t line_end = head.find("\r\n");
  std::string_view request_line = head.substr(0, line_end);
  size_t sp1 = request_line.find(' ');
  size_t sp2 = request_line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) {
    SendResponse(fd, JsonError(400, "malformed request line"));
    return;
  }
  req.method = std::string(request_line.substr(0, sp1));
  std::string target(request_line.substr(sp1 + 1, sp2 - sp1 - 1));
  size_t q = target.find('?');
  req.path = target.substr(0, q);
  if (q != std::string::npos) req.query = target.substr(q + 1);
  if (line_end != std::string_view::npos) {
    std::string_view rest = head.substr(line_end + 2);
    while (!rest.empty()) {
      size_t e = rest.find("\r\n");
      std::string_view line = rest.substr(0, e);
      size_t colon = line.find(':');
      if (colon != std::string_view::npos) {
        std::string name = absl::AsciiStrToLower(std::string(line.substr(0, colon)));
        std::string value = std::string(absl::StripAsciiWhitespace(std::string(line.substr(colon + 1))));
        req.headers[name] = value;
      }
      if (e == std::string_view::npos) break;
      rest = rest.substr(e + 2);
    }
  }
  size_t content_length = 0;
  if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
    if (!absl::SimpleAtoi(it->second, &content_length)) {
      SendResponse(fd, JsonError(400, "bad Content-Length"));
      return;
    }
    if (content_length > kMaxBodyBytes) {
      SendResponse(fd, JsonError(413, "request body too large"));
      return;
    }
  }
  req.body = data.substr(header_end + 4);
  while (req.body.size() < content_length) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    req.body.append(buf, static_cast<size_t>(n));
  }
  req.body.resize(content_length);

  auto it = handlers_.find(req.path);
  if (it == handlers_.end()) {
    SendResponse(fd, JsonError(404, absl::StrCat("no such path: ", req.path)));
    return;
  }
  HttpResponse response;
  try {
    response = it->second(req);
  } catch (const std::exception& e) {
    Log(LogLevel::kError, "http handler threw", {{"path", req.path}, {"error", e.what()}});
    response = JsonError(500, "internal error");
  }
  SendResponse(fd, response);
}

}  // namespace trainyard::runtime
