#include "services/gateway/openapi.h"

#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainyard::gateway {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using nlohmann::json;

std::string Singular(absl::string_view collection) {
  if (absl::EndsWith(collection, "sses"))
    return std::string(collection.substr(0, collection.size() - 2));
  if (absl::EndsWith(collection, "s"))
    return std::string(collection.substr(0, collection.size() - 1));
  return absl::StrCat(collection, "Id");
}

class SchemaBuilder {
 public:
  json Ref(const Descriptor* d) {
    if (json wkt = WellKnown(d); !wkt.is_null()) return wkt;
    Add(d);
    return {{"$ref", absl::StrCat("#/components/schemas/", d->full_name())}};
  }
  json& schemas() { return schemas_; }

  json FieldSchema(const FieldDescriptor* f) {
    if (f->is_map()) {
      return {{"type", "object"},
              {"additionalProperties", Scalar(f->message_type()->map_value())}};
    }
    json one = Scalar(f);
    if (f->is_repeated()) return {{"type", "array"}, {"items", one}};
    return one;
  }

 private:
  static json WellKnown(const Descriptor* d) {
    const std::string& n = d->full_name();
    if (n == "google.protobuf.Timestamp")
      return {{"type", "string"}, {"format", "date-time"}};
    if (n == "google.protobuf.Duration") {
      return {{"type", "string"},
              {"description", "Seconds with an s suffix, e.g. \"1.5s\"."}};
    }
    if (n == "google.protobuf.FieldMask") {
      return {{"type", "string"},
              {"description", "Comma-separated field paths."}};
    }
    if (n == "google.protobuf.Empty") return {{"type", "object"}};
    if (n == "google.protobuf.Struct") return {{"type", "object"}};
    if (n == "google.protobuf.Value") return json::object();
    return nullptr;
  }

  json Scalar(const FieldDescriptor* f) {
    switch (f->type()) {
      case FieldDescriptor::TYPE_INT32:
      case FieldDescriptor::TYPE_SINT32:
      case FieldDescriptor::TYPE_SFIXED32:
        return {{"type", "integer"}, {"format", "int32"}};
      case FieldDescriptor::TYPE_UINT32:
      case FieldDescriptor::TYPE_FIXED32:
        return {{"type", "integer"}, {"format", "int64"}, {"minimum", 0}};
      case FieldDescriptor::TYPE_INT64:
      case FieldDescriptor::TYPE_SINT64:
      case FieldDescriptor::TYPE_SFIXED64:
        return {{"type", "string"}, {"format", "int64"}};
      case FieldDescriptor::TYPE_UINT64:
      case FieldDescriptor::TYPE_FIXED64:
        return {{"type", "string"}, {"format", "uint64"}};
      case FieldDescriptor::TYPE_DOUBLE:
      case FieldDescriptor::TYPE_FLOAT:
        return {{"type", "number"}};
      case FieldDescriptor::TYPE_BOOL:
        return {{"type", "boolean"}};
      case FieldDescriptor::TYPE_STRING:
        return {{"type", "string"}};
      case FieldDescriptor::TYPE_BYTES:
        return {{"type", "string"}, {"format", "byte"}};
      case FieldDescriptor::TYPE_ENUM: {
        json values = json::array();
        for (int i = 0; i < f->enum_type()->value_count(); ++i) {
          values.push_back(f->enum_type()->value(i)->name());
        }
        return {{"type", "string"}, {"enum", values}};
      }
      case FieldDescriptor::TYPE_MESSAGE:
      case FieldDescriptor::TYPE_GROUP:
        return Ref(f->message_type());
    }
    return json::object();
  }

  void Add(const Descriptor* d) {
    if (!seen_.insert(d->full_name()).second) return;
    json properties = json::object();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      properties[f->json_name()] = FieldSchema(f);
    }
    schemas_[d->full_name()] = {{"type", "object"}, {"properties", properties}};
  }

  json schemas_ = json::object();
  std::set<std::string> seen_;
};

// The query parameters of a GET or DELETE: the request's fields the path does
// not bind, with the fields of nested messages as dotted names.
void QueryParams(SchemaBuilder& schemas, const Descriptor* d,
                 const std::string& prefix, const std::set<std::string>& bound,
                 json& params, int depth) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    std::string name = prefix + f->json_name();
    std::string proto_path = prefix + f->name();
    if (bound.count(proto_path)) continue;
    const Descriptor* m = f->message_type();
    if (m != nullptr && !f->is_map() && !f->is_repeated() &&
        !absl::StartsWith(m->full_name(), "google.protobuf.")) {
      if (depth < 3)
        QueryParams(schemas, m, name + ".", bound, params, depth + 1);
      continue;
    }
    json p = {{"name", f->is_map() ? name + "[key]" : name},
              {"in", "query"},
              {"schema",
               f->is_map() ? schemas.FieldSchema(f->message_type()->map_value())
                           : schemas.FieldSchema(f)}};
    if (f->is_repeated() && !f->is_map()) p["explode"] = true;
    params.push_back(std::move(p));
  }
}

}  // namespace

OpenApiPath OpenApiPathOf(const PathTemplate& path) {
  OpenApiPath out;
  std::set<std::string> used;
  const auto& segments = path.segments();
  std::vector<std::string> names(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string& lit = segments[i].literal;
    if (lit != "*" && lit != "**") {
      names[i] = lit;
      continue;
    }
    std::string base = i > 0 && segments[i - 1].literal != "*"
                           ? Singular(segments[i - 1].literal)
                           : "segment";
    std::string name = base;
    for (int k = 2; used.count(name); ++k) name = absl::StrCat(base, k);
    used.insert(name);
    names[i] = absl::StrCat("{", name, "}");
    std::string field;
    for (const auto& v : path.variables()) {
      if (i >= v.begin && i < v.end) field = v.field;
    }
    out.params.push_back({name, field});
  }
  out.path = "";
  for (const std::string& n : names) absl::StrAppend(&out.path, "/", n);
  if (!path.verb().empty()) absl::StrAppend(&out.path, ":", path.verb());
  return out;
}

std::string OpenApiDocument(const RouteTable& routes) {
  SchemaBuilder schemas;
  json paths = json::object();
  for (const Route& route : routes.routes()) {
    OpenApiPath p = OpenApiPathOf(route.path);
    json params = json::array();
    std::set<std::string> bound;
    for (const auto& param : p.params) {
      bound.insert(param.field);
      params.push_back(
          {{"name", param.name},
           {"in", "path"},
           {"required", true},
           {"schema", {{"type", "string"}}},
           {"description",
            absl::StrCat("A segment of the request field `", param.field, "` (",
                         route.path.text(), ")")}});
    }
    const Descriptor* input = route.method->input_type();
    json op = {{"operationId", absl::StrCat(route.method->service()->name(),
                                            "_", route.method->name())},
               {"tags", json::array({route.method->service()->name()})}};
    if (route.body.empty()) {
      QueryParams(schemas, input, "", bound, params, 0);
    } else {
      json body_schema =
          route.body == "*"
              ? schemas.Ref(input)
              : schemas.Ref(input->FindFieldByName(route.body)->message_type());
      op["requestBody"] = {
          {"required", route.body != "*"},
          {"content", {{"application/json", {{"schema", body_schema}}}}}};
      if (route.body != "*") {
        bound.insert(route.body);
        QueryParams(schemas, input, "", bound, params, 0);
      }
    }
    if (route.resume_field.size()) {
      params.push_back(
          {{"name", "Last-Event-ID"},
           {"in", "header"},
           {"schema", {{"type", "string"}}},
           {"description", absl::StrCat("Resume after this event (sets `",
                                        route.resume_field, "`).")}});
    }
    op["parameters"] = params;
    json ok;
    if (route.server_streaming && route.download_field.empty()) {
      ok = {
          {"description",
           absl::StrCat("Server-sent events; each `data:` is a ",
                        route.method->output_type()->full_name(), " as JSON")},
          {"content",
           {{"text/event-stream", {{"schema", {{"type", "string"}}}}}}}};
      schemas.Ref(route.method->output_type());
    } else if (route.server_streaming) {
      ok = {{"description", "The file's bytes."},
            {"content",
             {{"application/octet-stream",
               {{"schema", {{"type", "string"}, {"format", "binary"}}}}}}}};
    } else {
      ok = {{"description", "OK"},
            {"content",
             {{"application/json",
               {{"schema", schemas.Ref(route.method->output_type())}}}}}};
    }
    op["responses"] = {
        {"200", ok},
        {"default",
         {{"description", "An error"},
          {"content",
           {{"application/json",
             {{"schema", {{"$ref", "#/components/schemas/Error"}}}}}}}}}};
    paths[p.path][absl::AsciiStrToLower(route.http_method)] = op;
  }
  json& s = schemas.schemas();
  s["Error"] = {
      {"type", "object"},
      {"properties",
       {{"error",
         {{"type", "object"},
          {"properties",
           {{"code",
             {{"type", "integer"}, {"description", "The HTTP status."}}},
            {"status",
             {{"type", "string"},
              {"description", "The gRPC status code's name."}}},
            {"message", {{"type", "string"}}},
            {"field",
             {{"type", "string"},
              {"description", "The request field at fault."}}},
            {"reason", {{"type", "string"}}},
            {"retryDelay", {{"type", "string"}}}}}}}}}};
  json doc = {{"openapi", "3.0.3"},
              {"info",
               {{"title", "Trainyard API"},
                {"version", "v1"},
                {"description",
                 "REST/JSON over the v1 gRPC API (proto/trainyard/v1), "
                 "generated from its "
                 "google.api.http options."}}},
              {"servers", json::array({{{"url", "/"}}})},
              {"security", json::array({{{"bearer", json::array()}}})},
              {"paths", paths},
              {"components",
               {{"schemas", s},
                {"securitySchemes",
                 {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}}}};
  return doc.dump();
}

}  // namespace trainyard::gateway
