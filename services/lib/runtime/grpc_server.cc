#include "services/lib/runtime/grpc_server.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/support/server_interceptor.h"
#include "services/lib/runtime/logging.h"
#include "trainyard/v1/common.pb.h"

namespace trainyard::runtime {
namespace {

// gRPC and Abseil share the canonical code numbering.
std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// gRPC's own answer to a request whose bytes protobuf could not parse (a
// string field that is not valid UTF-8, a broken encoding) or that carried
// no message: INTERNAL with no text ("No payload" without a message). No
// handler of ours answers INTERNAL without a text (api::Reply).
bool IsUndecodableRequest(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::INTERNAL &&
         (status.error_message().empty() ||
          status.error_message() == "No payload");
}

// Counts every call by method and code, and answers an undecodable request
// with INVALID_ARGUMENT (ErrorInfo field "request", reason INVALID_VALUE),
// as any other bad input, instead of gRPC's INTERNAL.
class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(MetricsRegistry* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(absl::Now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status status = methods->GetSendStatus();
      if (IsUndecodableRequest(status)) {
        status = grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "request: not a valid message of this method: its bytes do not "
            "parse (a string field that is not valid UTF-8, or a broken "
            "encoding)");
        methods->ModifySendStatus(status);
        trainyard::v1::ErrorInfo info;
        info.set_field("request");
        info.set_reason("INVALID_VALUE");
        methods->GetSendTrailingMetadata()->emplace("trainyard-error-bin",
                                                    info.SerializeAsString());
      }
      metrics_
          ->GetCounter(
              "trainyard_grpc_requests_total",
              "gRPC requests handled, by method and code.",
              {{"method", method_}, {"code", CodeName(status.error_code())}})
          .Increment();
      metrics_
          ->GetHistogram("trainyard_grpc_request_seconds",
                         "gRPC request latency, by method.",
                         {{"method", method_}})
          .Observe(absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  MetricsRegistry* metrics_;
  std::string method_;
  absl::Time start_;
};

class MetricsInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(MetricsRegistry* metrics)
      : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(
        metrics_, info->method() == nullptr ? "" : info->method());
  }

 private:
  MetricsRegistry* metrics_;
};

}  // namespace

namespace {

// The contents of a PEM file; INVALID_ARGUMENT naming `flag` if it cannot be
// read or holds no PEM block.
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string pem = buffer.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return pem;
}

}  // namespace

GrpcServerRunner::GrpcServerRunner(GrpcServerOptions options)
    : options_(std::move(options)) {
  if (options_.metrics == nullptr) options_.metrics = &DefaultMetrics();
}

GrpcServerRunner::~GrpcServerRunner() {
  Shutdown(absl::ZeroDuration());
  if (server_) server_->Wait();
}

void GrpcServerRunner::AddService(grpc::Service* service) {
  services_.push_back(service);
}

absl::Status GrpcServerRunner::Start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which would let a second server silently
  // share the port; a port in use must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::InsecureServerCredentials();
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
      return absl::InvalidArgumentError(
          options_.tls_cert_file.empty()
              ? "tls_cert: required when tls_key is set"
              : "tls_key: required when tls_cert is set");
    }
    absl::StatusOr<std::string> cert =
        ReadPemFile(options_.tls_cert_file, "tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPemFile(options_.tls_key_file, "tls_key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(options_.listen_address, credentials, &port_);
  // The sync server grows a thread per blocked RPC and ends threads beyond
  // MAX_POLLERS idle ones; the default (2) makes a busy server create and
  // destroy threads constantly. Keep a pool of idle pollers instead.
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
      options_.max_idle_threads);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  for (grpc::Service* s : services_) builder.RegisterService(s);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      creators;
  creators.push_back(
      std::make_unique<MetricsInterceptorFactory>(options_.metrics));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("gRPC: cannot listen on ", options_.listen_address));
  }
  if (grpc::HealthCheckServiceInterface* health =
          server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
  }
  return absl::OkStatus();
}

void GrpcServerRunner::Shutdown(absl::Duration grace) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  if (grpc::HealthCheckServiceInterface* health =
          server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  server_->Shutdown(
      std::chrono::system_clock::now() +
      std::chrono::microseconds(absl::ToInt64Microseconds(grace)));
}

void GrpcServerRunner::Wait() {
  if (server_) server_->Wait();
}

}  // namespace trainyard::runtime
