#ifndef TRAINYARD_SERVICES_API_STATUS_H_
#define TRAINYARD_SERVICES_API_STATUS_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace trainyard::api {

// Converts a status to the gRPC status returned to the client, attaching a
// serialized trainyard.v1.ErrorInfo (field at fault, reason, retry delay) as
// the trailing metadata "trainyard-error-bin". Internal details of INTERNAL
// errors are logged, not returned. An INVALID_ARGUMENT or RESOURCE_EXHAUSTED
// built without a reason (a defect: build them with domain::FieldError or
// AttachErrorInfo) is logged and given INVALID_VALUE / RESOURCE_EXHAUSTED.
grpc::Status Reply(grpc::ServerContextBase* context,
                   const absl::Status& status);

// Marks a status with the delay after which a retry may succeed
// (RESOURCE_EXHAUSTED).
absl::Status WithRetryDelay(absl::Status status, absl::Duration delay);

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_STATUS_H_
