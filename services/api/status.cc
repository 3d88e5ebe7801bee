#include "services/api/status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/lib/domain/errors.h"
#include "services/lib/runtime/logging.h"
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

grpc::Status Reply(grpc::ServerContextBase* context, const absl::Status& in) {
  if (in.ok()) return grpc::Status::OK;
  absl::Status status = in;
  if ((status.code() == absl::StatusCode::kInvalidArgument ||
       status.code() == absl::StatusCode::kResourceExhausted) &&
      domain::ErrorReason(status).empty()) {
    // Every INVALID_ARGUMENT and RESOURCE_EXHAUSTED is built with its field
    // and reason (domain::FieldError, AttachErrorInfo); one that is not is a
    // defect, logged, and still answered with a reason a client can test.
    runtime::Log(
        runtime::LogLevel::kWarning, "error without ErrorInfo reason",
        {{"code", std::string(absl::StatusCodeToString(status.code()))},
         {"error", std::string(status.message())}});
    status = domain::AttachErrorInfo(
        status, domain::ErrorField(status),
        status.code() == absl::StatusCode::kInvalidArgument
            ? domain::reason::kInvalidValue
            : std::string_view("RESOURCE_EXHAUSTED"));
  }
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
