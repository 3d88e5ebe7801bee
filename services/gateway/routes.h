// The REST routes of the v1 API, read from the `google.api.http` options of the
// services' methods (proto/trainyard/v1/*.proto), and the transcoding of an
// HTTP request into the method's request message and of a response message into
// JSON (the standard protobuf JSON mapping). Pure: protobuf descriptors only,
// no gRPC, no I/O. Adding an RPC with an `option (google.api.http)` adds its
// route; nothing here names a method.
#ifndef TRAINYARD_SERVICES_GATEWAY_ROUTES_H_
#define TRAINYARD_SERVICES_GATEWAY_ROUTES_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace trainyard::gateway {

// A path template of google.api.HttpRule: "/v1/{name=tenants/*/jobs/*}:cancel".
class PathTemplate {
 public:
  struct Segment {
    std::string
        literal;  // "*" one segment, "**" the rest, else the literal text
  };
  struct Variable {
    std::string field;  // the request field path, e.g. "queue.name"
    size_t begin = 0;   // its segments [begin, end)
    size_t end = 0;
  };
  static absl::StatusOr<PathTemplate> Parse(absl::string_view text);

  // The variable bindings (field path → value) when `path` matches, else
  // nullopt-like false.
  bool Match(absl::string_view path,
             std::vector<std::pair<std::string, std::string>>* bindings) const;
  const std::string& text() const { return text_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<Variable>& variables() const { return variables_; }
  const std::string& verb() const { return verb_; }
  // Literal segments before the first wildcard: the more, the more specific.
  int Specificity() const;

 private:
  std::string text_;
  std::vector<Segment> segments_;
  std::vector<Variable> variables_;
  std::string verb_;
};

struct Route {
  std::string http_method;  // GET, POST, PATCH, PUT, DELETE
  PathTemplate path;
  // "" no body; "*" the whole request (less path variables); else the request
  // field.
  std::string body;
  const google::protobuf::MethodDescriptor* method = nullptr;
  // The gRPC method path, "/trainyard.v1.JobService/Get".
  std::string grpc_path;
  // Server-streaming: events (with the id and resume fields, either may be
  // empty) or a download of one bytes field.
  bool server_streaming = false;
  std::string event_id_field;
  std::string resume_field;
  std::string download_field;
};

class RouteTable {
 public:
  // Every method with a google.api.http option in `services`; an error names a
  // malformed rule.
  static absl::StatusOr<RouteTable> Build(
      const std::vector<const google::protobuf::ServiceDescriptor*>& services);

  struct MatchResult {
    const Route* route = nullptr;
    std::vector<std::pair<std::string, std::string>> bindings;
  };
  // NOT_FOUND when no route has the path; FAILED_PRECONDITION (→ 405) when some
  // has it, but not for `http_method` (`allowed` then lists the methods that
  // do).
  absl::StatusOr<MatchResult> Match(
      absl::string_view http_method, absl::string_view path,
      std::vector<std::string>* allowed = nullptr) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

// The services the gateway serves (the api's): JobService, QueueService,
// ClusterService, AdminService and AccountingService.
std::vector<const google::protobuf::ServiceDescriptor*> ApiServices();

// The request message of `route` from the path bindings, the query parameters
// (GET, DELETE and the fields a body does not cover; `name=value` with the
// field's JSON or proto name, nested fields joined by '.', a map entry as
// `labels[key]=value`, repeated fields by repeating the key) and the JSON body.
// INVALID_ARGUMENT names the field at fault.
absl::StatusOr<std::unique_ptr<google::protobuf::Message>> BuildRequest(
    const Route& route,
    const std::vector<std::pair<std::string, std::string>>& bindings,
    const std::vector<std::pair<std::string, std::string>>& query,
    absl::string_view body);

// Sets the (scalar) field at `path` of `message` from its text: what a path
// variable, a query parameter or a Last-Event-ID sets.
absl::Status SetFieldFromText(google::protobuf::Message& message,
                              absl::string_view path, absl::string_view text);

// The scalar field at `path` of `message` as text ("" when unset or not a
// scalar).
std::string FieldText(const google::protobuf::Message& message,
                      absl::string_view path);

// The standard JSON mapping of `message` (lowerCamelCase names, enums by name,
// 64-bit integers as strings, fields at their default value left out).
std::string ToJson(const google::protobuf::Message& message);

}  // namespace trainyard::gateway

#endif  // TRAINYARD_SERVICES_GATEWAY_ROUTES_H_
