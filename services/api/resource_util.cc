#include "services/api/resource_util.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/field_mask_util.h"
#include "google/protobuf/util/time_util.h"
#include "services/api/context.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"
#include "storage/postgres/errors.h"

namespace trainyard::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FieldMask;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::util::FieldMaskUtil;

// The field `name` of `message` if it exists with the given C++ type and is
// singular.
const FieldDescriptor* SingularField(const Message& message,
                                     std::string_view name,
                                     FieldDescriptor::CppType type) {
  const FieldDescriptor* field =
      message.GetDescriptor()->FindFieldByName(std::string(name));
  if (field == nullptr || field->is_repeated() || field->cpp_type() != type) {
    return nullptr;
  }
  return field;
}

void SetTime(Message* message, std::string_view name, absl::Time t) {
  const FieldDescriptor* field =
      SingularField(*message, name, FieldDescriptor::CPPTYPE_MESSAGE);
  if (field == nullptr ||
      field->message_type()->full_name() !=
          google::protobuf::Timestamp::descriptor()->full_name()) {
    return;
  }
  const Reflection* reflection = message->GetReflection();
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) {
    reflection->ClearField(message, field);
    return;
  }
  reflection->MutableMessage(message, field)->CopyFrom(ToProtoTime(t));
}

void ClearIfPresent(Message* message, std::string_view name) {
  const FieldDescriptor* field =
      message->GetDescriptor()->FindFieldByName(std::string(name));
  if (field != nullptr) message->GetReflection()->ClearField(message, field);
}

std::string_view TopLevel(std::string_view path) {
  size_t dot = path.find('.');
  return dot == std::string_view::npos ? path : path.substr(0, dot);
}

bool IsUpdatable(const UpdatableFields& updatable, std::string_view field) {
  return std::find(updatable.begin(), updatable.end(), field) !=
         updatable.end();
}

}  // namespace

google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
      absl::ToUnixMicros(t));
}

void SetServerFields(const storage::postgres::StoredObject& row,
                     std::string_view name,
                     google::protobuf::Message* message) {
  const Reflection* reflection = message->GetReflection();
  if (const FieldDescriptor* f =
          SingularField(*message, "name", FieldDescriptor::CPPTYPE_STRING)) {
    reflection->SetString(message, f, std::string(name));
  }
  if (const FieldDescriptor* f =
          SingularField(*message, "etag", FieldDescriptor::CPPTYPE_STRING)) {
    reflection->SetString(message, f, domain::Cat(row.version));
  }
  SetTime(message, "create_time", row.create_time);
  SetTime(message, "update_time", row.update_time);
  SetTime(message, "report_time", row.update_time);
}

void ClearServerFields(google::protobuf::Message* message) {
  for (std::string_view field :
       {"name", "etag", "create_time", "update_time", "report_time"}) {
    ClearIfPresent(message, field);
  }
}

absl::Status DecodeStored(const storage::postgres::StoredObject& row,
                          std::string_view name,
                          google::protobuf::Message* message) {
  if (!message->ParseFromString(row.body)) {
    return absl::InternalError(domain::Cat(
        "stored body of ", name, " is not a valid ", message->GetTypeName()));
  }
  SetServerFields(row, name, message);
  return absl::OkStatus();
}

std::optional<std::string> NullIfEmpty(const std::string& id) {
  if (id.empty()) return std::nullopt;
  return id;
}

std::string Quoted(std::string_view s) {
  constexpr size_t kMaxEcho = 200;
  std::string out = domain::Cat(
      "\"", absl::CHexEscape(domain::AbslView(s.substr(0, kMaxEcho))));
  if (s.size() > kMaxEcho) out += "...";
  out += "\"";
  return out;
}

absl::Status CheckNewId(std::string_view field, std::string_view id,
                        bool (*valid)(std::string_view)) {
  static constexpr char kIdRule[] =
      "must be 1..63 characters of [a-z0-9-], starting with a letter and "
      "ending with a letter or digit";
  static constexpr char kOtherRule[] =
      "must be 1..253 characters of [a-z0-9.-], starting and ending with a "
      "letter or digit";
  if (id.empty()) {
    return domain::FieldError(field, domain::reason::kRequired, "required");
  }
  if (valid == nullptr) valid = &domain::IsValidId;
  if (!valid(id)) {
    const char* rule = valid == &domain::IsValidId ? kIdRule : kOtherRule;
    return domain::FieldError(field, domain::reason::kInvalidName,
                              domain::Cat(rule, "; got ", Quoted(id)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ExpectedVersion(std::string_view etag,
                                        std::string_view resource) {
  if (etag.empty()) return 0;
  int64_t version = 0;
  if (!absl::SimpleAtoi(domain::AbslView(etag), &version) || version <= 0) {
    return absl::AbortedError(domain::Cat("etag mismatch: \"", etag,
                                          "\" is not an etag of ", resource,
                                          "; read it again and retry"));
  }
  return version;
}

absl::Status CheckUpdateMask(const FieldMask& mask,
                             const Descriptor* descriptor,
                             const UpdatableFields& updatable) {
  for (const std::string& path : mask.paths()) {
    const std::string top(TopLevel(path));
    if (path.empty() || descriptor->FindFieldByName(top) == nullptr ||
        !FieldMaskUtil::GetFieldDescriptors(descriptor, path, nullptr)) {
      return domain::FieldError("update_mask", reason::kBadUpdateMask,
                                domain::Cat("unknown field \"", path, "\""));
    }
    if (!IsUpdatable(updatable, top)) {
      return domain::FieldError(
          "update_mask", reason::kBadUpdateMask,
          domain::Cat("field \"", path, "\" cannot be updated"));
    }
  }
  return absl::OkStatus();
}

void ApplyUpdateMask(const google::protobuf::Message& patch,
                     const FieldMask& mask, const UpdatableFields& updatable,
                     google::protobuf::Message* target) {
  FieldMask effective = mask;
  if (effective.paths().empty()) {
    for (std::string_view field : updatable) {
      effective.add_paths(std::string(field));
    }
  }
  FieldMaskUtil::MergeOptions options;
  options.set_replace_message_fields(true);
  options.set_replace_repeated_fields(true);
  FieldMaskUtil::MergeMessageTo(patch, effective, options, target);
}

bool MaskCovers(const FieldMask& mask, std::string_view field) {
  if (mask.paths().empty()) return true;
  for (const std::string& path : mask.paths()) {
    if (TopLevel(path) == field) return true;
  }
  return false;
}

absl::Status PageTokenError() {
  return domain::FieldError(
      "page_token", domain::reason::kInvalidValue,
      "malformed; pass the next_page_token of the previous page of the "
      "same listing");
}

absl::StatusOr<std::vector<std::string>> PageKey(
    const std::string& page_token, size_t key_size,
    bool (*valid)(std::string_view)) {
  absl::StatusOr<std::vector<std::string>> key =
      storage::postgres::DecodePageToken(page_token);
  if (!key.ok() || key->size() != key_size) return PageTokenError();
  if (valid != nullptr) {
    for (const std::string& part : *key) {
      if (!valid(part)) return PageTokenError();
    }
  }
  return key;
}

absl::StatusOr<storage::postgres::ListQuery> PageQuery(
    int32_t page_size, const std::string& page_token, size_t key_size) {
  absl::StatusOr<int> limit = PageSize(page_size);
  if (!limit.ok()) return limit.status();
  storage::postgres::ListQuery query;
  query.limit = *limit;
  if (!page_token.empty()) {
    TY_ASSIGN_OR_RETURN(query.after_key, PageKey(page_token, key_size));
  }
  return query;
}

absl::StatusOr<std::vector<storage::postgres::StoredObject>> ListAll(
    storage::postgres::ObjectStore* objects,
    const storage::postgres::ObjectKind& kind,
    storage::postgres::ListQuery query) {
  std::vector<storage::postgres::StoredObject> out;
  query.limit = domain::kMaxPageSize;
  query.after_key.clear();
  while (true) {
    absl::StatusOr<storage::postgres::ListPage> page =
        objects->List(kind, query);
    if (!page.ok()) return page.status();
    for (storage::postgres::StoredObject& row : page->objects) {
      out.push_back(std::move(row));
    }
    if (!page->more || out.empty()) return out;
    query.after_key = out.back().key;
  }
}

std::string NextPageToken(const storage::postgres::ListPage& page) {
  if (!page.more || page.objects.empty()) return "";
  return storage::postgres::EncodePageToken(page.objects.back().key);
}

absl::Status ExplainStorageError(
    absl::Status status, std::string_view resource,
    const std::vector<ConstraintMessage>& messages) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return absl::NotFoundError(domain::Cat(resource, " not found"));
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition: {
      const std::string constraint =
          storage::postgres::ViolatedConstraint(status);
      for (const ConstraintMessage& m : messages) {
        if (m.constraint != constraint) continue;
        absl::Status out(status.code(),
                         m.field.empty()
                             ? m.message
                             : domain::Cat(m.field, ": ", m.message));
        return domain::AttachErrorInfo(out, m.field, m.reason);
      }
      if (status.code() == absl::StatusCode::kAlreadyExists) {
        return absl::AlreadyExistsError(
            domain::Cat(resource, " already exists"));
      }
      if (constraint.empty()) return status;
      return absl::FailedPreconditionError(
          domain::Cat(resource, " conflicts with other objects (constraint ",
                      constraint, ")"));
    }
    default:
      return status;
  }
}

ConstraintMessage UnknownReference(std::string constraint, std::string field,
                                   std::string_view reason_code,
                                   std::string_view what, std::string_view id) {
  return {std::move(constraint), std::move(field), reason_code,
          domain::Cat(what, " ", Quoted(id), " does not exist")};
}

ConstraintMessage InUse(std::string constraint, std::string message) {
  return {std::move(constraint), "", reason::kInUse, std::move(message)};
}

absl::Status MissingReference(std::string_view field,
                              std::string_view reason_code,
                              std::string_view what, std::string_view id) {
  return domain::FieldError(
      field, reason_code,
      domain::Cat(what, " ", Quoted(id), " does not exist"));
}

absl::Status CheckExists(storage::postgres::ObjectStore* objects,
                         const storage::postgres::ObjectKind& kind,
                         const std::vector<std::string>& key,
                         std::string_view field, std::string_view reason_code,
                         std::string_view what) {
  absl::StatusOr<storage::postgres::StoredObject> row = objects->Get(kind, key);
  if (absl::IsNotFound(row.status())) {
    return MissingReference(field, reason_code, what, key.back());
  }
  return row.status();
}

bool IsEtagMismatch(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         absl::StartsWith(status.message(), "etag mismatch");
}

std::string StoredBodyError(std::string_view name) {
  return domain::Cat("stored body of ", name, " does not parse");
}

absl::Status EtagMismatch(std::string_view name, std::string_view etag) {
  return absl::AbortedError(domain::Cat("etag mismatch: ", name,
                                        " has changed since etag \"", etag,
                                        "\"; read it again and retry"));
}

trainyard::v1::CapacitySummary SumReadyCapacity(
    const std::vector<trainyard::v1::Flavor>& flavors,
    const std::vector<std::pair<std::string, std::string>>& pool_flavor,
    const std::vector<trainyard::v1::Node>& nodes) {
  std::map<std::string, trainyard::v1::FlavorCapacity> rows;
  for (const trainyard::v1::Flavor& flavor : flavors) {
    absl::StatusOr<std::string> id =
        domain::ParseFlavorName(flavor.name(), "name");
    if (!id.ok()) continue;
    trainyard::v1::FlavorCapacity& row = rows[*id];
    row.set_flavor(*id);
    row.mutable_total()->set_gpu_model(flavor.gpu_model());
  }
  absl::flat_hash_map<std::string, std::string> flavor_of(pool_flavor.begin(),
                                                          pool_flavor.end());
  for (const trainyard::v1::Node& node : nodes) {
    if (node.state() != trainyard::v1::NODE_STATE_READY) continue;
    absl::StatusOr<domain::ClusterChildName> name =
        domain::ParseNodeName(node.name(), "name");
    if (!name.ok()) continue;
    auto it = flavor_of.find(domain::Cat(name->cluster, "/", node.pool()));
    if (it == flavor_of.end()) continue;
    auto row = rows.find(it->second);
    if (row == rows.end()) continue;
    row->second.set_ready_nodes(row->second.ready_nodes() + 1);
    trainyard::v1::Resources* total = row->second.mutable_total();
    total->set_gpus(total->gpus() + node.capacity().gpus());
    total->set_cpu_millis(total->cpu_millis() + node.capacity().cpu_millis());
    total->set_memory_bytes(total->memory_bytes() +
                            node.capacity().memory_bytes());
  }
  trainyard::v1::CapacitySummary summary;
  for (auto& [id, row] : rows) *summary.add_flavors() = std::move(row);
  return summary;
}

}  // namespace trainyard::api
