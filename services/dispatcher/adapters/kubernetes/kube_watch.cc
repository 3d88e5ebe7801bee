#include "services/dispatcher/adapters/kubernetes/kube_watch.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::kubernetes {

using ::trainyard::domain::Cat;

namespace {

const nlohmann::json& Metadata(const nlohmann::json& object) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!object.is_object()) return kEmpty;
  auto it = object.find("metadata");
  if (it == object.end() || !it->is_object()) return kEmpty;
  return *it;
}

std::string MetaString(const nlohmann::json& object, const char* key) {
  const nlohmann::json& m = Metadata(object);
  auto it = m.find(key);
  if (it == m.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

}  // namespace

void StripManagedFields(nlohmann::json& object) {
  if (!object.is_object()) return;
  auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object()) return;
  metadata->erase("managedFields");
  auto annotations = metadata->find("annotations");
  if (annotations != metadata->end() && annotations->is_object()) {
    annotations->erase("kubectl.kubernetes.io/last-applied-configuration");
  }
}

std::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
  }
  return "?";
}

std::string ObjectKey(const nlohmann::json& object) {
  const std::string ns = MetaString(object, "namespace");
  const std::string name = MetaString(object, "name");
  return ns.empty() ? name : Cat(ns, "/", name);
}

Informer::Informer(KubeClient* client, std::string path,
                   InformerOptions options, InformerHandler handler)
    : client_(client),
      path_(std::move(path)),
      options_(std::move(options)),
      handler_(std::move(handler)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  absl::MutexLock l(&mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  canceller_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool Informer::Synced() const {
  absl::MutexLock l(&mu_);
  return synced_;
}

bool Informer::WaitForSync(absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&synced_), timeout);
  return synced_;
}

std::vector<ObjectPtr> Informer::Snapshot() const {
  absl::MutexLock l(&mu_);
  std::vector<ObjectPtr> out;
  out.reserve(cache_.size());
  for (const auto& [key, object] : cache_) out.push_back(object);
  return out;
}

ObjectPtr Informer::Get(std::string_view key) const {
  absl::MutexLock l(&mu_);
  auto it = cache_.find(std::string(key));
  return it == cache_.end() ? nullptr : it->second;
}

size_t Informer::size() const {
  absl::MutexLock l(&mu_);
  return cache_.size();
}

std::string Informer::LastResourceVersion() const {
  absl::MutexLock l(&mu_);
  return resource_version_;
}

Informer::Counters Informer::counters() const {
  absl::MutexLock l(&mu_);
  return counters_;
}

absl::Status Informer::last_error() const {
  absl::MutexLock l(&mu_);
  return last_error_;
}

bool Informer::Sleep(absl::Duration d) {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return !stopping_;
}

absl::Duration Informer::Backoff(int failures) const {
  absl::Duration d = options_.initial_backoff;
  for (int i = 0; i < failures && d < options_.max_backoff; ++i) d *= 2;
  d = std::min(d, options_.max_backoff);
  thread_local absl::BitGen gen;
  return d * absl::Uniform(gen, 0.5, 1.0);
}

void Informer::Trim(nlohmann::json& object) const {
  if (options_.transform) options_.transform(object);
}

void Informer::Deliver(std::vector<Delivery>& deliveries) {
  for (const Delivery& d : deliveries) handler_(d.type, *d.object);
  absl::MutexLock l(&mu_);
  counters_.events += static_cast<int64_t>(deliveries.size());
}

void Informer::Run() {
  bool need_list = true;
  int failures = 0;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
    }
    absl::Status status;
    bool progressed = false;
    if (need_list) {
      status = List();
      if (status.ok()) {
        need_list = false;
        failures = 0;
      }
    } else {
      const absl::Time start = absl::Now();
      status = Watch(&progressed);
      if (progressed) failures = 0;
      if (IsExpired(status)) need_list = true;
      // A watch that ends at once with nothing in it is not a quiet cluster
      // (that ends after timeoutSeconds): back off as after an error.
      if (status.ok() && !progressed &&
          absl::Now() - start < absl::Seconds(1)) {
        status = absl::UnavailableError(
            Cat("kubernetes cluster ", client_->cluster(), ": watch ", path_,
                ": the server ended the watch at once"));
      }
    }
    if (absl::IsCancelled(status)) return;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      last_error_ = status;
    }
    // A finished list goes on to watch; a watch the server ended resumes at
    // once from the last resourceVersion; an expired one lists again at once.
    if (status.ok() || IsExpired(status)) continue;
    // A failed list, or a watch cut by an error: back off.
    if (!Sleep(Backoff(failures++))) return;
  }
}

absl::Status Informer::List() {
  absl::flat_hash_map<std::string, ObjectPtr> fresh;
  std::string continue_token;
  std::string resource_version;
  for (int restarts = 0;;) {
    absl::StatusOr<nlohmann::json> page =
        client_->List(path_,
                      {.label_selector = options_.label_selector,
                       .field_selector = options_.field_selector,
                       .limit = options_.page_size,
                       .continue_token = continue_token},
                      &canceller_);
    if (!page.ok()) {
      // An expired continue token: start the list again from its first page.
      if (IsExpired(page.status()) && !continue_token.empty() &&
          restarts++ < 3) {
        fresh.clear();
        continue_token.clear();
        continue;
      }
      return page.status();
    }
    if (!page->is_object()) {
      return absl::InternalError(Cat("kubernetes cluster ", client_->cluster(),
                                     ": GET ", path_,
                                     ": the list is not a JSON object"));
    }
    auto items = page->find("items");
    if (items != page->end() && items->is_array()) {
      for (nlohmann::json& item : *items) {
        std::string key = ObjectKey(item);
        if (key.empty()) continue;
        Trim(item);
        fresh.insert_or_assign(
            std::move(key),
            std::make_shared<const nlohmann::json>(std::move(item)));
      }
    } else if (items != page->end() && !items->is_null()) {
      return absl::InternalError(Cat("kubernetes cluster ", client_->cluster(),
                                     ": GET ", path_,
                                     ": the list's items are not an array"));
    }
    resource_version = MetaString(*page, "resourceVersion");
    continue_token = MetaString(*page, "continue");
    if (continue_token.empty()) break;
  }
  // The difference between the copy and the list, as events.
  std::vector<Delivery> deliveries;
  {
    absl::MutexLock l(&mu_);
    // Every write changes an object's resourceVersion: equal versions are
    // the same object.
    for (const auto& [key, object] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        deliveries.push_back({EventType::kAdded, object});
      } else if (MetaString(*it->second, "resourceVersion") !=
                 MetaString(*object, "resourceVersion")) {
        deliveries.push_back({EventType::kModified, object});
      }
    }
    for (auto& [key, object] : cache_) {
      if (!fresh.contains(key)) {
        deliveries.push_back({EventType::kDeleted, std::move(object)});
      }
    }
    cache_ = std::move(fresh);
    resource_version_ = resource_version;
    if (counters_.lists > 0) ++counters_.relists;
    ++counters_.lists;
  }
  Deliver(deliveries);
  // Synced once the first list's objects have reached the handler.
  absl::MutexLock l(&mu_);
  synced_ = true;
  return absl::OkStatus();
}

absl::Status Informer::Watch(bool* progressed) {
  Query query = {{"watch", "true"},
                 {"allowWatchBookmarks", "true"},
                 {"timeoutSeconds", Cat(options_.watch_timeout_seconds)}};
  {
    absl::MutexLock l(&mu_);
    query.emplace_back("resourceVersion", resource_version_);
  }
  if (!options_.label_selector.empty()) {
    query.emplace_back("labelSelector", options_.label_selector);
  }
  if (!options_.field_selector.empty()) {
    query.emplace_back("fieldSelector", options_.field_selector);
  }
  absl::Status event_error;
  const std::string where =
      Cat("kubernetes cluster ", client_->cluster(), ": watch ", path_);
  auto on_line = [&](std::string_view line) -> bool {
    nlohmann::json event =
        nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
    if (!event.is_object() || !event.contains("type") ||
        !event["type"].is_string() || !event.contains("object") ||
        !event["object"].is_object()) {
      event_error = absl::UnavailableError(
          Cat(where, ": a line of the stream is not a watch event: \"",
              Snippet(line), "\""));
      return false;
    }
    const std::string type = event["type"].get<std::string>();
    nlohmann::json& object = event["object"];
    if (type == "ERROR") {
      const int code = object.value("code", 0);
      std::string message =
          object.contains("message") && object["message"].is_string()
              ? object["message"].get<std::string>()
              : Snippet(line);
      if (code == 410) {
        event_error =
            absl::OutOfRangeError(Cat(where, ": ERROR event 410: ", message,
                                      " (resourceVersion expired)"));
      } else {
        event_error = absl::UnavailableError(
            Cat(where, ": ERROR event ", code, ": ", message));
      }
      return false;
    }
    const std::string rv = MetaString(object, "resourceVersion");
    *progressed = true;
    if (type == "BOOKMARK") {
      absl::MutexLock l(&mu_);
      if (!rv.empty()) resource_version_ = rv;
      ++counters_.bookmarks;
      return true;
    }
    std::string key = ObjectKey(object);
    if (key.empty() ||
        (type != "ADDED" && type != "MODIFIED" && type != "DELETED")) {
      event_error = absl::UnavailableError(
          Cat(where, ": unexpected watch event: \"", Snippet(line), "\""));
      return false;
    }
    Trim(object);
    std::vector<Delivery> deliveries;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return false;
      if (!rv.empty()) resource_version_ = rv;
      auto it = cache_.find(key);
      if (type == "DELETED") {
        if (it == cache_.end()) {
          ++counters_.duplicates;
          return true;
        }
        cache_.erase(it);
        deliveries.push_back(
            {EventType::kDeleted,
             std::make_shared<const nlohmann::json>(std::move(object))});
      } else if (it != cache_.end() &&
                 MetaString(*it->second, "resourceVersion") == rv) {
        ++counters_.duplicates;
        return true;
      } else {
        const EventType t =
            it == cache_.end() ? EventType::kAdded : EventType::kModified;
        ObjectPtr stored =
            std::make_shared<const nlohmann::json>(std::move(object));
        cache_.insert_or_assign(std::move(key), stored);
        deliveries.push_back({t, std::move(stored)});
      }
    }
    Deliver(deliveries);
    return true;
  };
  absl::Status status = client_->Stream(path_, query, on_line, &canceller_);
  {
    absl::MutexLock l(&mu_);
    if (!stopping_ && !IsExpired(status) && !IsExpired(event_error)) {
      ++counters_.reconnects;
    }
  }
  if (!event_error.ok()) return event_error;
  return status;
}

}  // namespace trainyard::dispatcher::kubernetes
