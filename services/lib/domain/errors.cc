#include "services/lib/domain/errors.h"

#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

std::optional<std::string> Payload(const absl::Status& status,
                                   std::string_view url) {
  absl::optional<absl::Cord> cord = status.GetPayload(AbslView(url));
  if (!cord.has_value()) return std::nullopt;
  return std::string(*cord);
}

// A copy of `status` with a new message and the same code and payloads.
absl::Status WithMessage(const absl::Status& status, std::string_view message) {
  absl::Status out(status.code(), AbslView(message));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) {
        out.SetPayload(url, payload);
      });
  return out;
}

}  // namespace

absl::Status FieldError(std::string_view field, std::string_view reason_code,
                        std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(
      field.empty() ? std::string(message) : Cat(field, ": ", message));
  status.SetPayload(AbslView(kFieldPayloadUrl), absl::Cord(AbslView(field)));
  status.SetPayload(AbslView(kReasonPayloadUrl),
                    absl::Cord(AbslView(reason_code)));
  return status;
}

absl::Status AttachErrorInfo(absl::Status status, std::string_view field,
                             std::string_view reason_code) {
  if (status.ok()) return status;
  status.SetPayload(AbslView(kFieldPayloadUrl), absl::Cord(AbslView(field)));
  status.SetPayload(AbslView(kReasonPayloadUrl),
                    absl::Cord(AbslView(reason_code)));
  return status;
}

std::string ErrorField(const absl::Status& status) {
  return Payload(status, kFieldPayloadUrl).value_or("");
}

std::string ErrorReason(const absl::Status& status) {
  return Payload(status, kReasonPayloadUrl).value_or("");
}

bool HasErrorField(const absl::Status& status) {
  return status.GetPayload(AbslView(kFieldPayloadUrl)).has_value();
}

std::string JoinField(std::string_view prefix, std::string_view field) {
  if (prefix.empty()) return std::string(field);
  if (field.empty()) return std::string(prefix);
  if (field.front() == '[') return Cat(prefix, field);
  return Cat(prefix, ".", field);
}

std::string IndexField(std::string_view field, int64_t index) {
  return Cat(field, "[", index, "]");
}

std::string KeyField(std::string_view field, std::string_view key) {
  constexpr size_t kMaxKeyInPath = 128;
  std::string escaped =
      absl::CHexEscape(AbslView(key.substr(0, kMaxKeyInPath)));
  if (key.size() > kMaxKeyInPath) escaped += "...";
  return Cat(field, "[\"", escaped, "\"]");
}

absl::Status PrefixField(absl::Status status, std::string_view prefix) {
  if (status.ok() || prefix.empty()) return status;
  std::optional<std::string> field = Payload(status, kFieldPayloadUrl);
  if (!field.has_value()) return status;
  const std::string new_field = JoinField(prefix, *field);
  std::string_view message = StdView(status.message());
  std::string new_message;
  if (field->empty()) {
    new_message = Cat(new_field, ": ", message);
  } else if (message.starts_with(Cat(*field, ": "))) {
    message.remove_prefix(field->size() + 2);
    new_message = Cat(new_field, ": ", message);
  } else {
    // The message does not start with the field (built by hand); leave it as it
    // is.
    new_message = std::string(message);
  }
  absl::Status out = WithMessage(status, new_message);
  out.SetPayload(AbslView(kFieldPayloadUrl), absl::Cord(new_field));
  return out;
}

trainyard::v1::ErrorInfo ToErrorInfo(const absl::Status& status) {
  trainyard::v1::ErrorInfo info;
  info.set_field(ErrorField(status));
  info.set_reason(ErrorReason(status));
  return info;
}

}  // namespace trainyard::domain
