// The OpenAPI 3.0 document of the REST API, generated from the same
// `google.api.http` options the gateway routes by (so the two never disagree),
// served at /v1/openapi.json.
#ifndef TRAINYARD_SERVICES_GATEWAY_OPENAPI_H_
#define TRAINYARD_SERVICES_GATEWAY_OPENAPI_H_

#include <string>

#include "services/gateway/routes.h"

namespace trainyard::gateway {

// The document as JSON. Path templates become OpenAPI paths with one parameter
// per wildcard segment, named after the collection before it
// ("/v1/tenants/{tenant}/jobs/{job}:cancel"); message schemas follow the
// protobuf JSON mapping (64-bit integers as strings, enums by name).
std::string OpenApiDocument(const RouteTable& routes);

// The OpenAPI path of a route's template, and for each of its parameters the
// parameter's name and the request field (and segment pattern) it fills.
struct OpenApiPath {
  std::string path;
  struct Param {
    std::string name;
    std::string field;
  };
  std::vector<Param> params;
};
OpenApiPath OpenApiPathOf(const PathTemplate& path);

}  // namespace trainyard::gateway

#endif  // TRAINYARD_SERVICES_GATEWAY_OPENAPI_H_
