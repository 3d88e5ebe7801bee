#include "services/gateway/gateway.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "services/gateway/openapi.h"
#include "services/gateway/routes.h"
#include "services/lib/runtime/health.h"
#include "services/lib/runtime/logging.h"
#include "trainyard/v1/accounting.grpc.pb.h"
#include "trainyard/v1/admin.grpc.pb.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/common.pb.h"
#include "trainyard/v1/job.grpc.pb.h"
#include "trainyard/v1/queue.grpc.pb.h"

namespace trainyard::gateway {

using runtime::HttpRequest;
using runtime::HttpResponse;
using runtime::HttpStream;

namespace {
std::string Esc(absl::string_view s) {
  return runtime::JsonEscape(std::string_view(s.data(), s.size()));
}
}  // namespace

int HttpStatusOf(int grpc_code) {
  switch (static_cast<grpc::StatusCode>(grpc_code)) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    default:
      return 500;
  }
}

namespace {

absl::string_view Header(const HttpRequest& r, const char* name) {
  std::string_view v = r.Header(name);
  return absl::string_view(v.data(), v.size());
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// {"error":{"code":400,"status":"INVALID_ARGUMENT","message":"…","field":"…","reason":"…",
// "retryDelay":"1s"}}: the body of every error the gateway answers.
// `http_status` 0: the code's own HTTP status.
std::string ErrorJson(grpc::StatusCode code, absl::string_view message,
                      const trainyard::v1::ErrorInfo& info,
                      int http_status = 0) {
  std::string out = absl::StrCat(
      "{\"error\":{\"code\":",
      http_status != 0 ? http_status : HttpStatusOf(code), ",\"status\":\"",
      CodeName(code), "\",\"message\":\"", Esc(message), "\"");
  if (!info.field().empty())
    absl::StrAppend(&out, ",\"field\":\"", Esc(info.field()), "\"");
  if (!info.reason().empty()) {
    absl::StrAppend(&out, ",\"reason\":\"", Esc(info.reason()), "\"");
  }
  if (info.has_retry_delay()) {
    absl::StrAppend(
        &out, ",\"retryDelay\":\"",
        google::protobuf::util::TimeUtil::ToString(info.retry_delay()), "\"");
  }
  out += "}}";
  return out;
}

HttpResponse ErrorResponse(grpc::StatusCode code, absl::string_view message,
                           const trainyard::v1::ErrorInfo& info = {}) {
  HttpResponse r{.status = HttpStatusOf(code),
                 .content_type = "application/json",
                 .body = ErrorJson(code, message, info)};
  if (info.has_retry_delay()) {
    int64_t seconds =
        std::max<int64_t>(1, info.retry_delay().seconds() +
                                 (info.retry_delay().nanos() > 0 ? 1 : 0));
    r.headers.emplace_back("Retry-After", absl::StrCat(seconds));
  }
  return r;
}

// An INVALID_ARGUMENT of the transcoder ("field: why") as an error with the
// field named.
HttpResponse InvalidArgument(const absl::Status& s) {
  trainyard::v1::ErrorInfo info;
  absl::string_view message = s.message();
  if (size_t colon = message.find(": "); colon != absl::string_view::npos) {
    info.set_field(std::string(message.substr(0, colon)));
  }
  info.set_reason("INVALID_VALUE");
  return ErrorResponse(grpc::StatusCode::INVALID_ARGUMENT, message, info);
}

trainyard::v1::ErrorInfo ErrorInfoOf(const grpc::ClientContext& ctx) {
  trainyard::v1::ErrorInfo info;
  const auto& trailers = ctx.GetServerTrailingMetadata();
  if (auto it = trailers.find("trainyard-error-bin"); it != trailers.end()) {
    info.ParseFromArray(it->second.data(), static_cast<int>(it->second.size()));
  }
  return info;
}

grpc::ByteBuffer ToByteBuffer(const google::protobuf::Message& m) {
  std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

bool FromByteBuffer(const grpc::ByteBuffer& buffer,
                    google::protobuf::Message* m) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const auto& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return m->ParseFromString(bytes);
}

std::unique_ptr<google::protobuf::Message> NewOutput(const Route& route) {
  return std::unique_ptr<google::protobuf::Message>(
      google::protobuf::MessageFactory::generated_factory()
          ->GetPrototype(route.method->output_type())
          ->New());
}

std::string MimeType(absl::string_view path) {
  static const std::pair<const char*, const char*> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".txt", "text/plain; charset=utf-8"},
      {".map", "application/json"},
  };
  for (const auto& [ext, type] : kTypes) {
    if (absl::EndsWith(path, ext)) return type;
  }
  return "application/octet-stream";
}

constexpr char kCsp[] =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' "
    "data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'";

// One server-streaming call in progress, driven on its own completion queue.
struct StreamCall {
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  grpc::ByteBuffer read;
  bool read_pending = false;  // a Read is outstanding
  bool have_read = false;     // `read` holds a message not yet written out
  bool ended = false;         // the server closed the stream (a Read said !ok)
  grpc::Status status;

  // Waits for `tag` (the only one outstanding) until `deadline`: true with `ok`
  // set when it came, false on timeout.
  bool Wait(void* tag, bool* ok,
            std::chrono::system_clock::time_point deadline) {
    void* got = nullptr;
    switch (cq.AsyncNext(&got, ok, deadline)) {
      case grpc::CompletionQueue::GOT_EVENT:
        return got == tag || (*ok = false, true);
      case grpc::CompletionQueue::TIMEOUT:
        return false;
      case grpc::CompletionQueue::SHUTDOWN:
        *ok = false;
        return true;
    }
    return false;
  }
  bool WaitForever(void* tag) {
    bool ok = false;
    Wait(tag, &ok, std::chrono::system_clock::time_point::max());
    return ok;
  }
  // Ends the call (status) and the queue; once.
  void Finish() {
    if (finished || call == nullptr) return;
    finished = true;
    // Unless the server ended the stream, the call is cancelled: the client
    // left, a write failed or the gateway stops. Without it Finish would wait
    // for a Watch that never ends, holding a thread and a stream slot.
    if (!ended) ctx.TryCancel();
    if (read_pending) {
      WaitForever(&read);
      read_pending = false;
    }
    call->Finish(&status, &status);
    WaitForever(&status);
    cq.Shutdown();
    void* tag;
    bool ok;
    while (cq.Next(&tag, &ok)) {
    }
  }
  // A stream whose body never ran (the client left before it began) still ends
  // its call and leaves the gateway's set of open streams.
  ~StreamCall() {
    if (!finished && call != nullptr) {
      ctx.TryCancel();
      Finish();
    }
    if (unregister) unregister(this);
  }
  bool finished = false;
  std::function<void(StreamCall*)> unregister;
};

}  // namespace

class Gateway::Impl {
 public:
  explicit Impl(GatewayOptions options)
      : options_(std::move(options)),
        stub_(options_.channel),
        metrics_(options_.metrics != nullptr ? *options_.metrics
                                             : runtime::DefaultMetrics()) {}

  absl::Status Start() {
    auto table = RouteTable::Build(ApiServices());
    if (!table.ok()) return table.status();
    routes_ = *std::move(table);
    openapi_ = OpenApiDocument(routes_);
    runtime::HttpServerOptions http = options_.http;
    http.default_headers.emplace_back("Content-Security-Policy", kCsp);
    http.default_headers.emplace_back("X-Content-Type-Options", "nosniff");
    http.default_headers.emplace_back("X-Frame-Options", "DENY");
    http.default_headers.emplace_back("Referrer-Policy", "no-referrer");
    http.default_headers.emplace_back("Cross-Origin-Opener-Policy",
                                      "same-origin");
    http.default_headers.emplace_back("Cross-Origin-Resource-Policy",
                                      "same-origin");
    if (!http.tls_cert_file.empty()) {
      http.default_headers.emplace_back("Strict-Transport-Security",
                                        "max-age=31536000");
    }
    server_ = std::make_unique<runtime::HttpServer>(options_.listen_address,
                                                    std::move(http));
    health_.AddReadinessCheck("api", [this] {
      if (options_.channel->WaitForConnected(std::chrono::system_clock::now() +
                                             std::chrono::seconds(1))) {
        return absl::OkStatus();
      }
      return absl::UnavailableError("the api does not answer");
    });
    health_.Register(*server_, metrics_);
    server_->Handle("/v1/openapi.json", [this](const HttpRequest& r) {
      if (r.method != "GET" && r.method != "HEAD") {
        return ErrorResponse(grpc::StatusCode::INVALID_ARGUMENT, "GET only");
      }
      return HttpResponse{.content_type = "application/json", .body = openapi_};
    });
    server_->HandlePrefix("/v1/",
                          [this](const HttpRequest& r) { return Api(r); });
    server_->HandlePrefix("/",
                          [this](const HttpRequest& r) { return Console(r); });
    server_->OnStop([this] { CancelStreams(); });
    streams_gauge_ = &metrics_.GetGauge(
        "trainyard_gateway_streams",
        "Event streams and downloads the gateway serves now.");
    return server_->Start();
  }

  int port() const { return server_ ? server_->port() : 0; }
  void Stop() {
    if (server_) server_->Stop();
  }

 private:
  // --- CORS
  // -------------------------------------------------------------------------------

  bool OriginAllowed(absl::string_view origin) const {
    for (const std::string& o : options_.cors_origins) {
      if (o == origin) return true;
    }
    return false;
  }

  void AddCors(const HttpRequest& r, HttpResponse& response) const {
    absl::string_view origin = Header(r, "origin");
    if (origin.empty() || !OriginAllowed(origin)) return;
    response.headers.emplace_back("Access-Control-Allow-Origin",
                                  std::string(origin));
    response.headers.emplace_back("Vary", "Origin");
    response.headers.emplace_back("Access-Control-Expose-Headers",
                                  "Retry-After");
  }

  // --- The API
  // ----------------------------------------------------------------------------

  HttpResponse Api(const HttpRequest& r) {
    const absl::Time start = absl::Now();
    std::string route_label = "unmatched";
    HttpResponse response = ApiInner(r, &route_label);
    response.headers.emplace_back("Cache-Control", "no-store");
    AddCors(r, response);
    metrics_
        .GetCounter(
            "trainyard_gateway_requests_total",
            "REST requests by route and HTTP status.",
            {{"route", route_label}, {"code", absl::StrCat(response.status)}})
        .Increment();
    if (!response.stream) {
      metrics_
          .GetHistogram("trainyard_gateway_request_seconds",
                        "REST request latency (unary), gRPC call included.",
                        {{"route", route_label}})
          .Observe(absl::ToDoubleSeconds(absl::Now() - start));
    }
    if (response.status >= 500) {
      Log(runtime::LogLevel::kWarning, "gateway request failed",
          {{"method", r.method},
           {"path", r.path},
           {"status", response.status}});
    }
    return response;
  }

  HttpResponse ApiInner(const HttpRequest& r, std::string* route_label) {
    if (r.method == "OPTIONS") {
      absl::string_view origin = Header(r, "origin");
      if (origin.empty() || !OriginAllowed(origin)) {
        return ErrorResponse(
            grpc::StatusCode::PERMISSION_DENIED,
            "cross-origin requests are not allowed from this origin");
      }
      HttpResponse ok{.status = 204};
      ok.headers = {
          {"Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE"},
          {"Access-Control-Allow-Headers",
           "Authorization, Content-Type, Last-Event-ID"},
          {"Access-Control-Max-Age", "600"}};
      return ok;
    }
    std::vector<std::string> allowed;
    auto match = routes_.Match(r.method, r.path, &allowed);
    if (!match.ok()) {
      if (match.status().code() == absl::StatusCode::kFailedPrecondition) {
        HttpResponse e{.status = 405,
                       .content_type = "application/json",
                       .body = ErrorJson(grpc::StatusCode::UNIMPLEMENTED,
                                         match.status().message(), {}, 405)};
        e.headers.emplace_back("Allow", absl::StrJoin(allowed, ", "));
        return e;
      }
      return ErrorResponse(grpc::StatusCode::NOT_FOUND,
                           match.status().message());
    }
    const Route& route = *match->route;
    *route_label = absl::StrCat(route.http_method, " ", route.path.text());
    if (!route.body.empty() && !r.body.empty()) {
      absl::string_view type = Header(r, "content-type");
      if (!type.empty() &&
          !absl::StartsWith(absl::AsciiStrToLower(type), "application/json")) {
        return ErrorResponse(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("body: want Content-Type application/json, not ",
                         type));
      }
    }
    auto request = BuildRequest(route, match->bindings, r.params, r.body);
    if (!request.ok()) return InvalidArgument(request.status());
    if (route.server_streaming) return Stream(r, route, std::move(*request));
    return Unary(r, route, **request);
  }

  void Authorize(const HttpRequest& r, grpc::ClientContext& ctx) const {
    absl::string_view auth = Header(r, "authorization");
    if (!auth.empty()) ctx.AddMetadata("authorization", std::string(auth));
  }

  HttpResponse Unary(const HttpRequest& r, const Route& route,
                     const google::protobuf::Message& request) {
    grpc::ClientContext ctx;
    Authorize(r, ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMicroseconds(options_.call_timeout));
    grpc::ByteBuffer in = ToByteBuffer(request);
    grpc::ByteBuffer out;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    stub_.UnaryCall(&ctx, route.grpc_path, grpc::StubOptions(), &in, &out,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = std::move(s);
                      done = true;
                      cv.notify_one();
                    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    }
    if (!status.ok()) {
      return ErrorResponse(status.error_code(), status.error_message(),
                           ErrorInfoOf(ctx));
    }
    auto response = NewOutput(route);
    if (!FromByteBuffer(out, response.get())) {
      return ErrorResponse(grpc::StatusCode::INTERNAL,
                           "the api's response did not parse");
    }
    return HttpResponse{.content_type = "application/json",
                        .body = ToJson(*response)};
  }

  // A server-streaming method: the call starts here, and its errors before the
  // first message are an ordinary HTTP error; after that the stream carries
  // events (or the download).
  HttpResponse Stream(const HttpRequest& r, const Route& route,
                      std::unique_ptr<google::protobuf::Message> request) {
    if (!route.resume_field.empty()) {
      if (absl::string_view last = Header(r, "last-event-id"); !last.empty()) {
        if (absl::Status s =
                SetFieldFromText(*request, route.resume_field, last);
            !s.ok()) {
          return InvalidArgument(absl::InvalidArgumentError(
              absl::StrCat("Last-Event-ID: not an event id of this stream (",
                           s.message(), ")")));
        }
      }
    }
    auto call = std::make_shared<StreamCall>();
    // The cap is checked and the slot taken in one step.
    if (!TryRegister(call.get())) {
      trainyard::v1::ErrorInfo info;
      info.set_reason("TOO_MANY_STREAMS");
      info.mutable_retry_delay()->set_seconds(5);
      return ErrorResponse(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("the gateway serves ", options_.max_streams,
                       " streams at once; try again shortly"),
          info);
    }
    Authorize(r, call->ctx);
    call->unregister = [this](StreamCall* c) { Unregister(c); };
    call->call = stub_.PrepareCall(&call->ctx, route.grpc_path, &call->cq);
    call->call->StartCall(call.get());
    bool started = call->WaitForever(call.get());
    grpc::ByteBuffer in = ToByteBuffer(*request);
    if (started) {
      call->call->Write(in, &in);
      started = call->WaitForever(&in);
    }
    if (started) {
      call->call->WritesDone(&in);
      call->WaitForever(&in);
      call->call->ReadInitialMetadata(&call->ctx);
      call->WaitForever(&call->ctx);
      // A call refused at once (bad request, no permission) ends now; wait
      // briefly for that.
      call->call->Read(&call->read, &call->read);
      call->read_pending = true;
      bool ok = false;
      if (call->Wait(&call->read, &ok,
                     std::chrono::system_clock::now() +
                         std::chrono::milliseconds(100))) {
        call->read_pending = false;
        if (ok) {
          call->have_read = true;
        } else {
          call->ended = true;
          started = false;
        }
      }
    }
    if (!started) {
      call->Finish();
      Unregister(call.get());
      if (call->status.ok())
        return HttpResponse{.status = 200, .content_type = ContentType(route)};
      return ErrorResponse(call->status.error_code(),
                           call->status.error_message(),
                           ErrorInfoOf(call->ctx));
    }
    HttpResponse response{.content_type = ContentType(route)};
    if (!route.download_field.empty()) {
      response.headers.emplace_back("Content-Disposition", "attachment");
    } else {
      response.headers.emplace_back("X-Accel-Buffering", "no");
    }
    const Route* rp = &route;
    response.stream = [this, call, rp](HttpStream& out) {
      Pump(*rp, *call, out);
      call->Finish();
      Unregister(call.get());
      if (!call->status.ok() && rp->download_field.empty() &&
          call->status.error_code() != grpc::StatusCode::CANCELLED) {
        out.Write(absl::StrCat(
            "event: error\ndata: ",
            ErrorJson(call->status.error_code(), call->status.error_message(),
                      ErrorInfoOf(call->ctx)),
            "\n\n"));
      }
    };
    return response;
  }

  static std::string ContentType(const Route& route) {
    return route.download_field.empty() ? "text/event-stream"
                                        : "application/octet-stream";
  }

  // Reads the stream's messages (the first may be in hand already) and writes
  // them out.
  void Pump(const Route& route, StreamCall& call, HttpStream& out) {
    auto response = NewOutput(route);
    const auto keepalive =
        absl::ToChronoMicroseconds(options_.keepalive_interval);
    while (true) {
      bool ok = false;
      if (call.have_read) {
        call.have_read = false;
        ok = true;
      } else {
        if (!call.read_pending) {
          call.call->Read(&call.read, &call.read);
          call.read_pending = true;
        }
        if (!call.Wait(&call.read, &ok,
                       std::chrono::system_clock::now() + keepalive)) {
          // Quiet: a comment line tells whether an event stream's client is
          // still there (a download's bytes are the file: nothing is added).
          if (out.Stopping()) return;
          if (route.download_field.empty() && !out.Write(": keepalive\n\n"))
            return;
          continue;
        }
        call.read_pending = false;
      }
      if (!ok) {
        call.ended = true;
        return;
      }
      response->Clear();
      if (!FromByteBuffer(call.read, response.get())) return;
      bool written;
      if (!route.download_field.empty()) {
        const auto* f =
            response->GetDescriptor()->FindFieldByName(route.download_field);
        written = f == nullptr ||
                  out.Write(response->GetReflection()->GetString(*response, f));
      } else {
        std::string event;
        if (!route.event_id_field.empty()) {
          absl::StrAppend(
              &event, "id: ", FieldText(*response, route.event_id_field), "\n");
        }
        absl::StrAppend(&event, "data: ", ToJson(*response), "\n\n");
        written = out.Write(event);
      }
      if (!written) return;
    }
  }

  // Takes a stream slot for `call`; false when all --gateway_max_streams are
  // taken.
  bool TryRegister(StreamCall* call) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (static_cast<int>(streams_.size()) >= options_.max_streams) return false;
    streams_.insert(call);
    streams_gauge_->Set(static_cast<double>(streams_.size()));
    if (stopping_) call->ctx.TryCancel();
    return true;
  }
  void Unregister(StreamCall* call) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams_.erase(call);
    streams_gauge_->Set(static_cast<double>(streams_.size()));
  }
  void CancelStreams() {
    std::lock_guard<std::mutex> lock(streams_mu_);
    stopping_ = true;
    for (StreamCall* call : streams_) call->ctx.TryCancel();
  }

  // --- The console's files
  // ------------------------------------------------------------------

  HttpResponse Console(const HttpRequest& r) {
    if (r.method != "GET" && r.method != "HEAD") {
      return ErrorResponse(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat(r.method, " ", r.path, ": the console takes GET only"));
    }
    namespace fs = std::filesystem;
    if (options_.console_dir.empty() ||
        !fs::exists(fs::path(options_.console_dir) / "index.html")) {
      return ErrorResponse(
          grpc::StatusCode::NOT_FOUND,
          "the web console is not built here (cd web && npm ci && npm run "
          "build, "
          "then give --console_dir=web/dist); the API is under /v1/");
    }
    std::string rel = r.path.substr(1);
    // No way out of the console's folder: no "..", ".", backslashes or NUL in
    // the path.
    for (absl::string_view segment : absl::StrSplit(rel, '/')) {
      if (segment == ".." || segment == "." ||
          absl::StrContains(segment, '\\') ||
          absl::StrContains(segment, '\0')) {
        return ErrorResponse(grpc::StatusCode::INVALID_ARGUMENT,
                             "path: not a path inside the console");
      }
    }
    std::error_code ec;
    const fs::path root = fs::canonical(options_.console_dir, ec);
    fs::path file = rel.empty() ? root / "index.html"
                                : fs::weakly_canonical(root / rel, ec);
    const std::string root_prefix = root.string() + "/";
    if (ec || !absl::StartsWith(file.string(), root_prefix)) {
      return ErrorResponse(grpc::StatusCode::INVALID_ARGUMENT,
                           "path: not a path inside the console");
    }
    bool is_index = false;
    if (!fs::is_regular_file(file, ec)) {
      // A page of the single-page app ("/jobs/42"): index.html; a missing
      // asset: 404.
      absl::string_view last =
          absl::string_view(rel).substr(rel.rfind('/') + 1);
      if (absl::StrContains(last, '.')) {
        return ErrorResponse(grpc::StatusCode::NOT_FOUND,
                             absl::StrCat("no such file: ", r.path));
      }
      file = root / "index.html";
      is_index = true;
    }
    is_index = is_index || file.filename() == "index.html";
    HttpResponse response{.content_type = MimeType(file.string())};
    const CachedFile cached =
        Cached(file, runtime::CompressibleType(response.content_type));
    if (cached.body == nullptr) {
      return ErrorResponse(grpc::StatusCode::NOT_FOUND,
                           absl::StrCat("no such file: ", r.path));
    }
    response.body = *cached.body;
    response.gzip_body = cached.gzip;
    response.headers.emplace_back("Cache-Control",
                                  is_index || !absl::StartsWith(rel, "assets/")
                                      ? "no-cache"
                                      : "public, max-age=31536000, immutable");
    return response;
  }

  // A console file as read from disk, and its gzip form (compressed once, at
  // zlib's best level): read again when its size or time of change differ.
  struct CachedFile {
    std::filesystem::file_time_type mtime;
    uintmax_t size = 0;
    std::shared_ptr<const std::string> body;
    std::shared_ptr<const std::string> gzip;
  };
  CachedFile Cached(const std::filesystem::path& file, bool compressible) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_time_type mtime = fs::last_write_time(file, ec);
    const uintmax_t size = ec ? 0 : fs::file_size(file, ec);
    if (ec) {
      std::lock_guard<std::mutex> lock(files_mu_);
      files_.erase(file.string());
      return {};
    }
    {
      std::lock_guard<std::mutex> lock(files_mu_);
      auto it = files_.find(file.string());
      if (it != files_.end() && it->second.mtime == mtime &&
          it->second.size == size) {
        return it->second;
      }
    }
    std::ifstream in(file, std::ios::binary);
    std::stringstream body;
    body << in.rdbuf();
    if (!in.good() && !in.eof()) return {};
    CachedFile f{.mtime = mtime, .size = size};
    f.body = std::make_shared<const std::string>(body.str());
    if (compressible && f.body->size() >= runtime::kGzipMinBytes) {
      std::string gz = runtime::Gzip(*f.body, 9);
      if (!gz.empty())
        f.gzip = std::make_shared<const std::string>(std::move(gz));
    }
    std::lock_guard<std::mutex> lock(files_mu_);
    files_[file.string()] = f;
    return f;
  }

  GatewayOptions options_;
  grpc::GenericStub stub_;
  runtime::MetricsRegistry& metrics_;
  runtime::Health health_;
  RouteTable routes_;
  std::string openapi_;
  std::unique_ptr<runtime::HttpServer> server_;
  std::mutex streams_mu_;
  std::set<StreamCall*> streams_;
  bool stopping_ = false;
  runtime::Gauge* streams_gauge_ = nullptr;
  std::mutex files_mu_;
  absl::flat_hash_map<std::string, CachedFile> files_;
};

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(
    GatewayOptions options) {
  if (options.channel == nullptr) {
    return absl::InvalidArgumentError("gateway: no channel to the api");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gateway::~Gateway() { Stop(); }
int Gateway::port() const { return impl_->port(); }
void Gateway::Stop() { impl_->Stop(); }

}  // namespace trainyard::gateway
