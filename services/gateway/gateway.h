// The REST/JSON gateway (`trainyard gateway`, and in `trainyard all`): serves
// the v1 API over HTTP/JSON by transcoding each request to the gRPC method its
// `google.api.http` option names (routes.h), streams as server-sent events
// (resumable with Last-Event-ID) or downloads, the OpenAPI document generated
// from the same options (/v1/openapi.json), and the web console's static files
// (web/dist) with security headers. Auth is the api's: the request's bearer
// token is passed on as gRPC metadata, so the gateway holds no authority of its
// own.
#ifndef TRAINYARD_SERVICES_GATEWAY_GATEWAY_H_
#define TRAINYARD_SERVICES_GATEWAY_GATEWAY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "services/lib/runtime/http_server.h"
#include "services/lib/runtime/metrics.h"

namespace trainyard::gateway {

struct GatewayOptions {
  std::string listen_address = "127.0.0.1:8090";
  // The channel to the api (JobService, QueueService, ClusterService,
  // AdminService, AccountingService).
  std::shared_ptr<grpc::Channel> channel;
  // The console's built files (web/dist); empty: "/" answers that the console
  // is not built.
  std::string console_dir;
  // Origins allowed to call the API from another origin (CORS); empty: none
  // (the default).
  std::vector<std::string> cors_origins;
  // The HTTP server: threads, body size limit, timeouts, TLS.
  runtime::HttpServerOptions http;
  // Streams (server-sent events, downloads) open at once; more are refused with
  // 503. Each one holds an HTTP worker thread, so keep this below http.threads.
  int max_streams = 12;
  // A unary call's deadline.
  absl::Duration call_timeout = absl::Seconds(30);
  // A comment line is sent on a quiet event stream this often (proxies, dead
  // clients).
  absl::Duration keepalive_interval = absl::Seconds(15);
  runtime::MetricsRegistry* metrics =
      nullptr;  // default: runtime::DefaultMetrics()
};

class Gateway {
 public:
  static absl::StatusOr<std::unique_ptr<Gateway>> Start(GatewayOptions options);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  int port() const;
  // Stops accepting, ends open streams, waits for requests in flight.
  void Stop();

  class Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The HTTP status of a gRPC status code (google.rpc.Code's documented mapping).
int HttpStatusOf(int grpc_code);

}  // namespace trainyard::gateway

#endif  // TRAINYARD_SERVICES_GATEWAY_GATEWAY_H_
