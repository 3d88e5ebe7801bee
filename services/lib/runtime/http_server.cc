#include "services/lib/runtime/http_server.h"

#include <httplib.h>
#include <zlib.h>

#include <chrono>
#include <exception>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/lib/runtime/logging.h"

namespace trainyard::runtime {

std::string_view HttpRequest::Header(std::string_view name) const {
  auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string_view()
                             : std::string_view(it->second);
}

HttpResponse JsonError(int status, std::string_view message) {
  return HttpResponse{
      .status = status,
      .content_type = "application/json",
      .body = absl::StrCat("{\"error\":{\"code\":", status, ",\"message\":\"",
                           JsonEscape(message), "\"}}")};
}

std::string Gzip(std::string_view data, int level) {
  z_stream z{};
  // 15 + 16: a window of 2^15 bytes with a gzip header and trailer.
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return std::string();
  }
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
}

bool AcceptsGzip(std::string_view accept_encoding_std) {
  const absl::string_view accept_encoding(accept_encoding_std.data(),
                                          accept_encoding_std.size());
  bool star = false;
  for (absl::string_view item : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ';');
    absl::string_view coding = absl::StripAsciiWhitespace(parts[0]);
    bool refused = false;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view param = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&param, "q=") ||
          absl::ConsumePrefix(&param, "Q=")) {
        double q = 1;
        refused = absl::SimpleAtod(param, &q) && q <= 0;
      }
    }
    if (absl::EqualsIgnoreCase(coding, "gzip")) return !refused;
    if (coding == "*") star = !refused;
  }
  return star;
}

bool CompressibleType(std::string_view content_type_std) {
  const absl::string_view content_type(content_type_std.data(),
                                       content_type_std.size());
  absl::string_view type = absl::StripAsciiWhitespace(
      content_type.substr(0, content_type.find(';')));
  if (absl::StartsWithIgnoreCase(type, "text/")) {
    return !absl::EqualsIgnoreCase(type, "text/event-stream");
  }
  for (absl::string_view t :
       {"application/json", "application/javascript", "application/xml",
        "image/svg+xml", "application/manifest+json"}) {
    if (absl::EqualsIgnoreCase(type, t)) return true;
  }
  return false;
}

absl::StatusOr<std::pair<std::string, int>> ParseHostPort(
    std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen address \"", std::string(address), "\" is not host:port"));
  }
  std::string host(address.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(std::string(address.substr(colon + 1)), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen address \"", std::string(address), "\" has a bad port"));
  }
  if (host == "localhost") host = "127.0.0.1";
  return std::make_pair(host, port);
}

absl::StatusOr<HttpResponse> HttpGet(std::string_view address,
                                     std::string_view path,
                                     absl::Duration timeout) {
  auto hp = ParseHostPort(address);
  if (!hp.ok()) return hp.status();
  httplib::Client client(hp->first, hp->second);
  auto micros = std::chrono::microseconds(absl::ToInt64Microseconds(timeout));
  client.set_connection_timeout(micros);
  client.set_read_timeout(micros);
  client.set_write_timeout(micros);
  httplib::Result result = client.Get(std::string(path));
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat("GET ", std::string(address), std::string(path), ": ",
                     httplib::to_string(result.error())));
  }
  HttpResponse response;
  response.status = result->status;
  response.content_type = result->get_header_value("Content-Type");
  response.body = std::move(result->body);
  return response;
}

// The httplib server (plain or TLS).
class HttpServer::Impl {
 public:
  std::unique_ptr<httplib::Server> server;
};

namespace {

class SinkStream : public HttpStream {
 public:
  SinkStream(httplib::DataSink& sink, const std::atomic<bool>& stopping)
      : sink_(sink), stopping_(stopping) {}
  bool Write(std::string_view data) override {
    if (stopping_.load() || !sink_.is_writable()) return false;
    return data.empty() || sink_.write(data.data(), data.size());
  }
  bool Stopping() const override { return stopping_.load(); }

 private:
  httplib::DataSink& sink_;
  const std::atomic<bool>& stopping_;
};

template <typename Duration>
std::pair<time_t, time_t> SecUsec(Duration d) {
  int64_t us = absl::ToInt64Microseconds(d);
  return {static_cast<time_t>(us / 1000000), static_cast<time_t>(us % 1000000)};
}

}  // namespace

HttpServer::HttpServer(std::string listen_address, HttpServerOptions options)
    : listen_address_(std::move(listen_address)),
      options_(std::move(options)),
      impl_(std::make_unique<Impl>()) {
  if (options_.threads < 1) options_.threads = 1;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, HttpHandler handler) {
  exact_[std::move(path)] = std::move(handler);
}

void HttpServer::HandlePrefix(std::string prefix, HttpHandler handler) {
  prefixes_[std::move(prefix)] = std::move(handler);
}

void HttpServer::OnStop(std::function<void()> hook) {
  on_stop_.push_back(std::move(hook));
}

HttpResponse HttpServer::Dispatch(const HttpRequest& request) const {
  if (auto it = exact_.find(request.path); it != exact_.end())
    return it->second(request);
  // The longest registered prefix of the path.
  auto it = prefixes_.upper_bound(request.path);
  while (it != prefixes_.begin()) {
    --it;
    if (absl::StartsWith(request.path, it->first)) return it->second(request);
  }
  return JsonError(404, absl::StrCat("no such path: ", request.path));
}

absl::Status HttpServer::Start() {
  auto hp = ParseHostPort(listen_address_);
  if (!hp.ok()) return hp.status();
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "http: TLS needs both a certificate and a key file");
  }
  if (tls()) {
    impl_->server = std::make_unique<httplib::SSLServer>(
        options_.tls_cert_file.c_str(), options_.tls_key_file.c_str());
    if (!impl_->server->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "http: cannot load the TLS certificate ", options_.tls_cert_file,
          " and key ", options_.tls_key_file, " (PEM files that match)"));
    }
  } else {
    impl_->server = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *impl_->server;
  const int threads = options_.threads;
  s.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  // Headers and body go out in separate writes: without TCP_NODELAY, Nagle
  // holds the second until the client's delayed ACK (40 ms).
  s.set_tcp_nodelay(true);
  s.set_payload_max_length(options_.max_body_bytes);
  auto [rs, rus] = SecUsec(options_.read_timeout);
  s.set_read_timeout(rs, rus);
  auto [ws, wus] = SecUsec(options_.write_timeout);
  s.set_write_timeout(ws, wus);
  s.set_keep_alive_timeout(std::max<time_t>(
      1,
      static_cast<time_t>(absl::ToInt64Seconds(options_.keep_alive_timeout))));
  s.set_keep_alive_max_count(
      static_cast<size_t>(std::max(1, options_.keep_alive_max_requests)));
  httplib::Headers defaults;
  for (const auto& [k, v] : options_.default_headers) defaults.emplace(k, v);
  s.set_default_headers(std::move(defaults));

  auto handler = [this](const httplib::Request& req, httplib::Response& res) {
    HttpRequest request;
    request.method = req.method;
    request.path = req.path;
    if (size_t q = req.target.find('?'); q != std::string::npos) {
      request.query = req.target.substr(q + 1);
    }
    for (const auto& [k, v] : req.params) request.params.emplace_back(k, v);
    for (const auto& [k, v] : req.headers)
      request.headers[absl::AsciiStrToLower(k)] = v;
    request.body = req.body;
    request.remote_addr = req.remote_addr;
    request.remote_port = req.remote_port;
    // httplib compresses bodies itself when the request accepts it, preferring
    // brotli at quality 11 (150 ms for a 66 KB page of jobs); without the
    // header it never does, and this server compresses instead (gzip, below).
    // The request object is httplib's own non-const local, handed to handlers
    // by const reference.
    const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
    // Ranges likewise: httplib would slice the body it is handed and still
    // answer 200 (a cache would keep one byte of a file as the file). No
    // handler serves ranges; the whole body goes out.
    const_cast<httplib::Request&>(req).ranges.clear();
    HttpResponse response = Dispatch(request);
    res.status = response.status;
    bool encoded = false;
    for (auto& [k, v] : response.headers) {
      encoded = encoded || absl::EqualsIgnoreCase(k, "Content-Encoding");
      res.set_header(k, v);
    }
    if (!response.stream && !encoded &&
        CompressibleType(response.content_type)) {
      res.set_header("Vary", "Accept-Encoding");
      if (response.body.size() >= kGzipMinBytes &&
          AcceptsGzip(request.Header("accept-encoding"))) {
        std::string gz = response.gzip_body != nullptr ? *response.gzip_body
                                                       : Gzip(response.body);
        if (!gz.empty()) {
          res.set_header("Content-Encoding", "gzip");
          response.body = std::move(gz);
        }
      }
    }
    if (response.stream) {
      res.set_chunked_content_provider(
          response.content_type, [fn = std::move(response.stream), this](
                                     size_t, httplib::DataSink& sink) {
            SinkStream stream(sink, stopping_);
            // httplib calls this outside its
            // handler's try: an exception here
            // would end the process.
            try {
              fn(stream);
            } catch (const std::exception& e) {
              Log(LogLevel::kError, "http stream threw", {{"error", e.what()}});
              return false;
            }
            sink.done();
            return true;
          });
    } else {
      res.set_content(std::move(response.body), response.content_type);
    }
  };
  // Request bodies need a Content-Length, checked against max_body_bytes
  // before anything is read: httplib reads a chunked body, or one without a
  // length, to its end whatever its size, and inflates a compressed one with
  // no limit.
  s.set_pre_routing_handler(
      [](const httplib::Request& req, httplib::Response& res) {
        auto refuse = [&](int status, std::string_view message) {
          HttpResponse e = JsonError(status, message);
          res.status = status;
          res.set_header("Connection", "close");
          res.set_content(e.body, e.content_type);
          return httplib::Server::HandlerResponse::Handled;
        };
        if (req.has_header("Transfer-Encoding")) {
          return refuse(411,
                        "a request body needs a Content-Length (chunked bodies "
                        "are not accepted)");
        }
        const bool body_method = req.method == "POST" || req.method == "PUT" ||
                                 req.method == "PATCH";
        if (body_method && !req.has_header("Content-Length")) {
          return refuse(411, "a request body needs a Content-Length");
        }
        if (req.has_header("Content-Encoding") &&
            !absl::EqualsIgnoreCase(req.get_header_value("Content-Encoding"),
                                    "identity")) {
          return refuse(415, "a request body must not be compressed");
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  s.Get(".*", handler);
  s.Post(".*", handler);
  s.Put(".*", handler);
  s.Patch(".*", handler);
  s.Delete(".*", handler);
  s.Options(".*", handler);
  // httplib's own refusals (413 too large, 400 malformed, 404 no route for a
  // method such as TRACE) get a JSON body; a handler's own error response is
  // left as it is.
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = res.status == 413   ? "request body too large"
                          : res.status == 414 ? "request URI too long"
                          : res.status == 404 ? "no such path or method"
                                              : "bad request";
    HttpResponse e = JsonError(res.status, message);
    res.set_content(e.body, e.content_type);
  });
  s.set_exception_handler([](const httplib::Request& req,
                             httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    Log(LogLevel::kError, "http handler threw",
        {{"path", req.path}, {"error", what}});
    HttpResponse e = JsonError(500, "internal error");
    res.status = 500;
    res.set_content(e.body, e.content_type);
  });

  if (hp->second == 0) {
    port_ = s.bind_to_any_port(hp->first);
    if (port_ <= 0) {
      return absl::UnavailableError(
          absl::StrCat("http: cannot listen on ", listen_address_));
    }
  } else {
    if (!s.bind_to_port(hp->first, hp->second)) {
      return absl::UnavailableError(
          absl::StrCat("http: cannot listen on ", listen_address_,
                       " (in use, or not an address of this host)"));
    }
    port_ = hp->second;
  }
  listener_ = std::thread([this] { impl_->server->listen_after_bind(); });
  // Until the loop runs, httplib's stop() would not end it: wait for it.
  for (int i = 0; i < 5000 && !s.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void HttpServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopping_.exchange(true)) return;
  for (auto& hook : on_stop_) hook();
  if (impl_->server) impl_->server->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace trainyard::runtime
