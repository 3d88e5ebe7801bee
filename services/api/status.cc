#include "services/api/status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/lib/runtime/logging.h"
#include "services/lib/domain/errors.h"
#include "trainyard/v1/common.pb.h"

namespace trainyard::api {
namespace {

constexpr char kRetryPayload[] = "trainyard.dev/retry_delay_ms";

}  // namespace

absl::Status WithRetryDelay(absl::Status status, absl::Duration delay) {
  status.SetPayload(kRetryPayload,
                    absl::Cord(absl::StrCat(absl::ToInt64Milliseconds(delay))));
  return status;
}

grpc::Status Reply(grpc::ServerContextBase* context,
                   const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (status.code() == absl::StatusCode::kInternal) {
    runtime::Log(runtime::LogLevel::kError, "internal error",
                {{"error", message}});
    message = "internal error (details in the server log)";
  }
  trainyard::v1::ErrorInfo info = domain::ToErrorInfo(status);
  if (auto delay = status.GetPayload(kRetryPayload)) {
    int64_t ms = 0;
    if (absl::SimpleAtoi(std::string(*delay), &ms)) {
      info.mutable_retry_delay()->set_seconds(ms / 1000);
      info.mutable_retry_delay()->set_nanos(
          static_cast<int32_t>((ms % 1000) * 1000000));
    }
  }
  if (context != nullptr) {
    context->AddTrailingMetadata("trainyard-error-bin",
                                 info.SerializeAsString());
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

}  // namespace trainyard::api
