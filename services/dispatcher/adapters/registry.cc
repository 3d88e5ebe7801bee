#include "services/dispatcher/adapters/registry.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, AdapterFactory, std::less<>> factories
      ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // Never destroyed.
  return *registry;
}

}  // namespace

std::string AdapterSettings::Get(std::string_view name) const {
  auto it = values.find(domain::AbslView(name));
  return it == values.end() ? std::string() : it->second;
}

absl::Status RegisterAdapterFactory(std::string name, AdapterFactory factory) {
  if (name.empty()) return absl::InvalidArgumentError("backend name: required");
  if (!factory.create) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend \"", name, "\": create: required"));
  }
  Registry& r = GetRegistry();
  absl::MutexLock l(&r.mu);
  if (!r.factories.emplace(name, std::move(factory)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("backend \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

std::vector<std::string> AdapterNames() {
  Registry& r = GetRegistry();
  absl::MutexLock l(&r.mu);
  std::vector<std::string> names;
  names.reserve(r.factories.size());
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

absl::StatusOr<AdapterFactory> FindAdapterFactory(std::string_view name) {
  {
    Registry& r = GetRegistry();
    absl::MutexLock l(&r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) return it->second;
  }
  const std::vector<std::string> names = AdapterNames();
  return absl::InvalidArgumentError(domain::Cat(
      "--backend: unknown backend \"", name,
      "\" (known: ", names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<BackendAdapter> CreateAdapter(std::string_view name,
                                             const AdapterSettings& settings) {
  absl::StatusOr<AdapterFactory> factory = FindAdapterFactory(name);
  if (!factory.ok()) return factory.status();
  if (factory->check) {
    if (absl::Status s = factory->check(settings); !s.ok()) return s;
  }
  absl::StatusOr<BackendAdapter> created = factory->create(settings);
  if (!created.ok()) return created.status();
  if (created->adapter == nullptr) {
    return absl::InternalError(
        domain::Cat("backend \"", name, "\" created no adapter"));
  }
  if (created->label.empty()) created->label = std::string(name);
  return created;
}

}  // namespace trainyard::dispatcher
