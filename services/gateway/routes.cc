#include "services/gateway/routes.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/api/annotations.pb.h"
#include "google/protobuf/util/json_util.h"
#include "services/lib/runtime/logging.h"
#include "trainyard/v1/accounting.pb.h"
#include "trainyard/v1/admin.pb.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/gateway.pb.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/queue.pb.h"

namespace trainyard::gateway {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// The field named `name` (its proto name or its JSON name) of `d`.
const FieldDescriptor* FindField(const Descriptor* d, absl::string_view name) {
  const FieldDescriptor* f = d->FindFieldByName(std::string(name));
  if (f == nullptr) f = d->FindFieldByCamelcaseName(std::string(name));
  return f;
}

// Well-known types that the JSON mapping writes as one JSON string (Timestamp
// "2026-…Z", Duration "1.5s", FieldMask "a,b") or one JSON scalar (the
// wrappers).
bool IsScalarLikeMessage(const Descriptor* d) {
  const std::string& n = d->full_name();
  return n == "google.protobuf.Timestamp" || n == "google.protobuf.Duration" ||
         n == "google.protobuf.FieldMask" ||
         (absl::StartsWith(n, "google.protobuf.") &&
          absl::EndsWith(n, "Value") && n != "google.protobuf.Value");
}

std::string JsonQuote(absl::string_view text) {
  return absl::StrCat(
      "\"", runtime::JsonEscape(std::string_view(text.data(), text.size())),
      "\"");
}

// Parses the JSON `json` into `message` (the request, field "" , or its field
// `field`). An error names the field protobuf's parser stopped at: its message
// reads
// "(job.spec) workers: Int32 can't be fractional" or "queue: Cannot find
// field.".
absl::Status ParseJsonInto(absl::string_view json, Message& message,
                           absl::string_view field) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json),
                                                            &message, options);
  if (status.ok()) return absl::OkStatus();
  std::string text(status.message());
  std::string path(field);
  absl::string_view rest = text;
  bool colon_done = false;
  if (absl::StartsWith(rest, "(")) {
    size_t close = rest.find(')');
    if (close != absl::string_view::npos) {
      std::string inner(rest.substr(1, close - 1));
      path = path.empty() ? inner : absl::StrCat(path, ".", inner);
      rest = rest.substr(close + 1);
      if (absl::StartsWith(rest, ":")) {
        rest.remove_prefix(1);
        rest = absl::StripLeadingAsciiWhitespace(rest);
        colon_done = true;
      } else {
        rest = absl::StripLeadingAsciiWhitespace(rest);
      }
    }
  }
  size_t colon = rest.find(": ");
  if (!colon_done && colon != absl::string_view::npos && colon > 0 &&
      rest.substr(0, colon).find(' ') == absl::string_view::npos) {
    std::string name(rest.substr(0, colon));
    path = path.empty() ? name : absl::StrCat(path, ".", name);
    rest = rest.substr(colon + 2);
  }
  if (path.empty()) path = "body";
  std::string why(rest);
  if (why == "Cannot find field.") why = "no such field";
  return Invalid(path, absl::StrCat(why, " (the JSON body)"));
}

// Adds (repeated) or sets the scalar, enum or scalar-like message `f` of `m`
// from `text`.
absl::Status SetScalar(Message& m, const FieldDescriptor* f,
                       absl::string_view text, absl::string_view path) {
  const Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  auto bad = [&](absl::string_view what) {
    return Invalid(path, absl::StrCat("\"", text, "\" is not ", what));
  };
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      // Bytes travel base64 in JSON; in a path or query they are taken as
      // they are.
      rep ? r->AddString(&m, f, std::string(text))
          : r->SetString(&m, f, std::string(text));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("a 32-bit integer");
      rep ? r->AddInt32(&m, f, v) : r->SetInt32(&m, f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("a 64-bit integer");
      rep ? r->AddInt64(&m, f, v) : r->SetInt64(&m, f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an unsigned 32-bit integer");
      rep ? r->AddUInt32(&m, f, v) : r->SetUInt32(&m, f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an unsigned 64-bit integer");
      rep ? r->AddUInt64(&m, f, v) : r->SetUInt64(&m, f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v;
      if (!absl::SimpleAtod(text, &v)) return bad("a number");
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        rep ? r->AddDouble(&m, f, v) : r->SetDouble(&m, f, v);
      } else {
        rep ? r->AddFloat(&m, f, static_cast<float>(v))
            : r->SetFloat(&m, f, static_cast<float>(v));
      }
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (text == "true" || text == "1") {
        v = true;
      } else if (text == "false" || text == "0") {
        v = false;
      } else {
        return bad("true or false");
      }
      rep ? r->AddBool(&m, f, v) : r->SetBool(&m, f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* value = f->enum_type()->FindValueByName(std::string(text));
      int number;
      if (value == nullptr && absl::SimpleAtoi(text, &number)) {
        value = f->enum_type()->FindValueByNumber(number);
      }
      if (value == nullptr) {
        return bad(absl::StrCat("a value of ", f->enum_type()->name()));
      }
      rep ? r->AddEnumValue(&m, f, value->number())
          : r->SetEnumValue(&m, f, value->number());
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      if (!IsScalarLikeMessage(f->message_type())) {
        return Invalid(
            path,
            "a message field cannot be set from text; send it in the body");
      }
      Message* sub = rep ? r->AddMessage(&m, f) : r->MutableMessage(&m, f);
      // A string-valued type (Timestamp, Duration, FieldMask,
      // String/Bytes/Int64 wrappers) is parsed as a JSON string; a numeric or
      // bool wrapper as the bare JSON value.
      sub->Clear();
      google::protobuf::util::JsonParseOptions options;
      if (google::protobuf::util::JsonStringToMessage(JsonQuote(text), sub,
                                                      options)
              .ok()) {
        return absl::OkStatus();
      }
      sub->Clear();
      auto status = google::protobuf::util::JsonStringToMessage(
          std::string(text), sub, options);
      if (!status.ok()) {
        return bad(absl::StrCat("a ", f->message_type()->name(), " (",
                                std::string(status.message()), ")"));
      }
      return absl::OkStatus();
    }
  }
  return Invalid(path, "unsupported field type");
}

// Splits "report.parent" or "labels[team]" into the field names (and the map
// key).
struct ParsedPath {
  std::vector<std::string> names;
  std::string map_key;
  bool has_map_key = false;
};

ParsedPath SplitPath(absl::string_view path) {
  ParsedPath out;
  if (size_t open = path.find('[');
      open != absl::string_view::npos && absl::EndsWith(path, "]")) {
    out.map_key = std::string(path.substr(open + 1, path.size() - open - 2));
    out.has_map_key = true;
    path = path.substr(0, open);
  }
  out.names = absl::StrSplit(path, '.');
  return out;
}

}  // namespace

std::vector<const google::protobuf::ServiceDescriptor*> ApiServices() {
  // Through a message of each file, so that its descriptors are linked in and
  // registered.
  return {
      trainyard::v1::SubmitJobRequest::descriptor()->file()->FindServiceByName(
          "JobService"),
      trainyard::v1::CreateQueueRequest::descriptor()
          ->file()
          ->FindServiceByName("QueueService"),
      trainyard::v1::CreateClusterRequest::descriptor()
          ->file()
          ->FindServiceByName("ClusterService"),
      trainyard::v1::WhoAmIRequest::descriptor()->file()->FindServiceByName(
          "AdminService"),
      trainyard::v1::GetReportRequest::descriptor()->file()->FindServiceByName(
          "AccountingService")};
}

absl::StatusOr<PathTemplate> PathTemplate::Parse(absl::string_view text) {
  PathTemplate t;
  t.text_ = std::string(text);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("path template \"", text, "\": ", why));
  };
  if (!absl::StartsWith(text, "/")) return bad("must start with '/'");
  absl::string_view rest = text.substr(1);
  // The verb: a ':' after the last '/' outside braces.
  int depth = 0;
  size_t verb_at = absl::string_view::npos;
  for (size_t i = 0; i < rest.size(); ++i) {
    char c = rest[i];
    if (c == '{') ++depth;
    if (c == '}') --depth;
    if (depth == 0 && c == '/') verb_at = absl::string_view::npos;
    if (depth == 0 && c == ':') verb_at = i;
  }
  if (depth != 0) return bad("unbalanced braces");
  if (verb_at != absl::string_view::npos) {
    t.verb_ = std::string(rest.substr(verb_at + 1));
    rest = rest.substr(0, verb_at);
    if (t.verb_.empty()) return bad("empty verb");
  }
  // Segments at depth 0 split by '/'; a variable holds its own '/'-separated
  // segments.
  size_t i = 0;
  while (i <= rest.size()) {
    if (i < rest.size() && rest[i] == '{') {
      size_t close = rest.find('}', i);
      absl::string_view inside = rest.substr(i + 1, close - i - 1);
      Variable v;
      size_t eq = inside.find('=');
      v.field = std::string(inside.substr(0, eq));
      if (v.field.empty()) return bad("a variable without a field");
      v.begin = t.segments_.size();
      if (eq == absl::string_view::npos) {
        t.segments_.push_back({"*"});
      } else {
        for (absl::string_view s : absl::StrSplit(inside.substr(eq + 1), '/')) {
          if (s.empty()) return bad("empty segment");
          t.segments_.push_back({std::string(s)});
        }
      }
      v.end = t.segments_.size();
      t.variables_.push_back(std::move(v));
      i = close + 1;
    } else {
      size_t slash = rest.find('/', i);
      absl::string_view s = rest.substr(i, slash == absl::string_view::npos
                                               ? absl::string_view::npos
                                               : slash - i);
      if (s.empty()) return bad("empty segment");
      if (absl::StrContains(s, '{') || absl::StrContains(s, '}'))
        return bad("misplaced brace");
      t.segments_.push_back({std::string(s)});
      i = slash == absl::string_view::npos ? rest.size() : slash;
    }
    if (i >= rest.size()) break;
    if (rest[i] != '/') return bad("a variable must be a whole segment");
    ++i;
  }
  for (size_t k = 0; k + 1 < t.segments_.size(); ++k) {
    if (t.segments_[k].literal == "**")
      return bad("'**' must be the last segment");
  }
  return t;
}

int PathTemplate::Specificity() const {
  int n = 0;
  for (const Segment& s : segments_) {
    if (s.literal != "*" && s.literal != "**") ++n;
  }
  return n * 2 + (verb_.empty() ? 0 : 1);
}

bool PathTemplate::Match(
    absl::string_view path,
    std::vector<std::pair<std::string, std::string>>* bindings) const {
  if (!absl::StartsWith(path, "/")) return false;
  path.remove_prefix(1);
  if (!verb_.empty()) {
    std::string suffix = absl::StrCat(":", verb_);
    if (!absl::EndsWith(path, suffix)) return false;
    path.remove_suffix(suffix.size());
  }
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  std::vector<absl::string_view> matched(segments_.size());
  size_t p = 0;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const std::string& lit = segments_[k].literal;
    if (lit == "**") {
      if (p >= parts.size()) return false;
      matched[k] = absl::string_view(
          parts[p].data(), path.data() + path.size() - parts[p].data());
      p = parts.size();
      continue;
    }
    if (p >= parts.size() || parts[p].empty()) return false;
    if (lit == "*") {
      // Without a verb, a wildcard at the end does not take "id:verb".
      if (verb_.empty() && k + 1 == segments_.size() &&
          absl::StrContains(parts[p], ':')) {
        return false;
      }
    } else if (parts[p] != lit) {
      return false;
    }
    matched[k] = parts[p];
    ++p;
  }
  if (p != parts.size()) return false;
  if (bindings != nullptr) {
    bindings->clear();
    for (const Variable& v : variables_) {
      const char* begin = matched[v.begin].data();
      const char* end = matched[v.end - 1].data() + matched[v.end - 1].size();
      bindings->emplace_back(v.field, std::string(begin, end));
    }
  }
  return true;
}

absl::StatusOr<RouteTable> RouteTable::Build(
    const std::vector<const google::protobuf::ServiceDescriptor*>& services) {
  RouteTable table;
  for (const auto* service : services) {
    for (int i = 0; i < service->method_count(); ++i) {
      const auto* method = service->method(i);
      if (!method->options().HasExtension(google::api::http)) continue;
      const google::api::HttpRule& top =
          method->options().GetExtension(google::api::http);
      std::vector<const google::api::HttpRule*> rules = {&top};
      for (const auto& extra : top.additional_bindings())
        rules.push_back(&extra);
      for (const google::api::HttpRule* rule : rules) {
        Route route;
        route.method = method;
        route.grpc_path =
            absl::StrCat("/", service->full_name(), "/", method->name());
        std::string pattern;
        switch (rule->pattern_case()) {
          case google::api::HttpRule::kGet:
            route.http_method = "GET", pattern = rule->get();
            break;
          case google::api::HttpRule::kPost:
            route.http_method = "POST", pattern = rule->post();
            break;
          case google::api::HttpRule::kPut:
            route.http_method = "PUT", pattern = rule->put();
            break;
          case google::api::HttpRule::kPatch:
            route.http_method = "PATCH", pattern = rule->patch();
            break;
          case google::api::HttpRule::kDelete:
            route.http_method = "DELETE", pattern = rule->delete_();
            break;
          case google::api::HttpRule::kCustom:
            route.http_method = rule->custom().kind(),
            pattern = rule->custom().path();
            break;
          default:
            return absl::InvalidArgumentError(absl::StrCat(
                method->full_name(), ": google.api.http without a pattern"));
        }
        auto path = PathTemplate::Parse(pattern);
        if (!path.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(method->full_name(), ": ", path.status().message()));
        }
        route.path = *std::move(path);
        route.body = rule->body();
        const Descriptor* input = method->input_type();
        for (const auto& v : route.path.variables()) {
          const Descriptor* d = input;
          const FieldDescriptor* f = nullptr;
          for (absl::string_view name : absl::StrSplit(v.field, '.')) {
            if (d == nullptr ||
                (f = d->FindFieldByName(std::string(name))) == nullptr) {
              return absl::InvalidArgumentError(
                  absl::StrCat(method->full_name(), ": path variable ", v.field,
                               " is not a request field"));
            }
            d = f->message_type();
          }
          if (f->cpp_type() != FieldDescriptor::CPPTYPE_STRING ||
              f->is_repeated()) {
            return absl::InvalidArgumentError(
                absl::StrCat(method->full_name(), ": path variable ", v.field,
                             " is not a string field"));
          }
        }
        if (!route.body.empty() && route.body != "*" &&
            (input->FindFieldByName(route.body) == nullptr ||
             input->FindFieldByName(route.body)->message_type() == nullptr)) {
          return absl::InvalidArgumentError(
              absl::StrCat(method->full_name(), ": body ", route.body,
                           " is not a message field"));
        }
        route.server_streaming = method->server_streaming();
        if (method->client_streaming()) {
          return absl::InvalidArgumentError(
              absl::StrCat(method->full_name(),
                           ": client-streaming methods have no REST mapping"));
        }
        if (method->options().HasExtension(trainyard::v1::stream)) {
          const auto& s = method->options().GetExtension(trainyard::v1::stream);
          route.event_id_field = s.event_id_field();
          route.resume_field = s.resume_field();
          route.download_field = s.download_field();
        }
        table.routes_.push_back(std::move(route));
      }
    }
  }
  // The most specific first: literal segments, then a verb.
  std::stable_sort(table.routes_.begin(), table.routes_.end(),
                   [](const Route& a, const Route& b) {
                     return a.path.Specificity() > b.path.Specificity();
                   });
  return table;
}

absl::StatusOr<RouteTable::MatchResult> RouteTable::Match(
    absl::string_view http_method, absl::string_view path,
    std::vector<std::string>* allowed) const {
  std::vector<std::string> methods;
  std::vector<std::pair<std::string, std::string>> bindings;
  for (const Route& route : routes_) {
    if (!route.path.Match(path, &bindings)) continue;
    if (route.http_method == http_method ||
        (http_method == "HEAD" && route.http_method == "GET")) {
      return MatchResult{.route = &route, .bindings = std::move(bindings)};
    }
    if (std::find(methods.begin(), methods.end(), route.http_method) ==
        methods.end()) {
      methods.push_back(route.http_method);
    }
  }
  if (methods.empty())
    return absl::NotFoundError(absl::StrCat("no such path: ", path));
  std::sort(methods.begin(), methods.end());
  std::string list = absl::StrJoin(methods, ", ");
  if (allowed != nullptr) *allowed = std::move(methods);
  return absl::FailedPreconditionError(absl::StrCat(
      path, " does not take ", http_method, " (it takes ", list, ")"));
}

absl::Status SetFieldFromText(Message& message, absl::string_view path,
                              absl::string_view text) {
  ParsedPath parsed = SplitPath(path);
  Message* m = &message;
  for (size_t i = 0; i < parsed.names.size(); ++i) {
    const FieldDescriptor* f = FindField(m->GetDescriptor(), parsed.names[i]);
    if (f == nullptr) return Invalid(path, "no such field");
    const bool last = i + 1 == parsed.names.size();
    if (!last) {
      if (f->message_type() == nullptr || f->is_repeated() ||
          IsScalarLikeMessage(f->message_type())) {
        return Invalid(path, absl::StrCat(parsed.names[i], " has no fields"));
      }
      m = m->GetReflection()->MutableMessage(m, f);
      continue;
    }
    if (parsed.has_map_key) {
      if (!f->is_map())
        return Invalid(path, absl::StrCat(parsed.names[i], " is not a map"));
      Message* entry = m->GetReflection()->AddMessage(m, f);
      const Descriptor* ed = f->message_type();
      if (absl::Status s =
              SetScalar(*entry, ed->map_key(), parsed.map_key, path);
          !s.ok()) {
        m->GetReflection()->RemoveLast(m, f);
        return s;
      }
      if (absl::Status s = SetScalar(*entry, ed->map_value(), text, path);
          !s.ok()) {
        m->GetReflection()->RemoveLast(m, f);
        return s;
      }
      return absl::OkStatus();
    }
    if (f->is_map()) {
      return Invalid(path, absl::StrCat("a map: give entries as ",
                                        parsed.names[i], "[key]=value"));
    }
    return SetScalar(*m, f, text, path);
  }
  return Invalid(path, "empty field path");
}

std::string FieldText(const Message& message, absl::string_view path) {
  const Message* m = &message;
  std::vector<absl::string_view> names = absl::StrSplit(path, '.');
  for (size_t i = 0; i < names.size(); ++i) {
    const FieldDescriptor* f = FindField(m->GetDescriptor(), names[i]);
    if (f == nullptr || f->is_repeated()) return "";
    const Reflection* r = m->GetReflection();
    if (i + 1 < names.size()) {
      if (f->message_type() == nullptr) return "";
      m = &r->GetMessage(*m, f);
      continue;
    }
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        return r->GetString(*m, f);
      case FieldDescriptor::CPPTYPE_INT32:
        return absl::StrCat(r->GetInt32(*m, f));
      case FieldDescriptor::CPPTYPE_INT64:
        return absl::StrCat(r->GetInt64(*m, f));
      case FieldDescriptor::CPPTYPE_UINT32:
        return absl::StrCat(r->GetUInt32(*m, f));
      case FieldDescriptor::CPPTYPE_UINT64:
        return absl::StrCat(r->GetUInt64(*m, f));
      case FieldDescriptor::CPPTYPE_ENUM:
        return r->GetEnum(*m, f)->name();
      default:
        return "";
    }
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Message>> BuildRequest(
    const Route& route,
    const std::vector<std::pair<std::string, std::string>>& bindings,
    const std::vector<std::pair<std::string, std::string>>& query,
    absl::string_view body) {
  const Message* prototype =
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(
          route.method->input_type());
  std::unique_ptr<Message> request(prototype->New());
  absl::string_view trimmed = absl::StripAsciiWhitespace(body);
  if (route.body.empty()) {
    if (!trimmed.empty()) {
      return Invalid(
          "body",
          absl::StrCat(route.http_method, " ", route.path.text(),
                       " takes no body; send the fields as query parameters"));
    }
  } else if (!trimmed.empty()) {
    if (route.body == "*") {
      if (absl::Status s = ParseJsonInto(trimmed, *request, ""); !s.ok())
        return s;
    } else {
      const FieldDescriptor* f =
          request->GetDescriptor()->FindFieldByName(route.body);
      Message* sub = request->GetReflection()->MutableMessage(request.get(), f);
      if (absl::Status s = ParseJsonInto(trimmed, *sub, route.body); !s.ok())
        return s;
    }
  }
  // Path variables win over the body: the URL names the resource.
  for (const auto& [field, value] : bindings) {
    if (absl::Status s = SetFieldFromText(*request, field, value); !s.ok())
      return s;
  }
  for (const auto& [key, value] : query) {
    if (route.body == "*") {
      return Invalid(key,
                     "this method takes its fields in the JSON body, not the "
                     "query string");
    }
    ParsedPath parsed = SplitPath(key);
    if (!route.body.empty() && !parsed.names.empty()) {
      const FieldDescriptor* f =
          FindField(request->GetDescriptor(), parsed.names[0]);
      if (f != nullptr && f->name() == route.body) {
        return Invalid(key, "this field travels in the JSON body");
      }
    }
    for (const auto& v : route.path.variables()) {
      if (key == v.field) return Invalid(key, "this field is part of the path");
    }
    if (absl::Status s = SetFieldFromText(*request, key, value); !s.ok())
      return s;
  }
  return request;
}

std::string ToJson(const Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) return "{}";
  return out;
}

}  // namespace trainyard::gateway
