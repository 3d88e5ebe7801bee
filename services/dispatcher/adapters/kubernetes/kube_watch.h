// An informer: keeps a local copy of the objects of one kind (pods, Jobs,
// nodes) under one API path, and tells a handler about every change, as
// client-go's reflector + informer do. It lists (in pages), then watches from
// the list's resourceVersion on a thread of its own; bookmarks advance the
// resourceVersion; a watch the server ends is resumed from the last
// resourceVersion (no re-list), after a backoff when it was cut by an error;
// when the resourceVersion has expired (410 Gone) it lists again and delivers
// the difference between its copy and the new list as ADDED, MODIFIED and
// DELETED, so that the handler sees every object's last state once: no
// change missed, none delivered twice. An idle watch sleeps in poll().
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_WATCH_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_WATCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/http/rest_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_client.h"

namespace trainyard::dispatcher::kubernetes {

enum class EventType { kAdded, kModified, kDeleted };

std::string_view EventTypeName(EventType type);

// An object as the informer holds it: parsed once, shared, never changed.
using ObjectPtr = std::shared_ptr<const nlohmann::json>;

// Removes metadata.managedFields and the
// kubectl.kubernetes.io/last-applied-configuration annotation.
void StripManagedFields(nlohmann::json& object);

// "namespace/name", or "name" for a cluster-scoped object.
std::string ObjectKey(const nlohmann::json& object);

struct InformerOptions {
  std::string label_selector;
  std::string field_selector;
  // Objects per list page (limit/continue).
  int64_t page_size = 500;
  // The server ends each watch after this long (timeoutSeconds); the informer
  // then watches again from its resourceVersion.
  int64_t watch_timeout_seconds = 300;
  // Waits after a failed list or a cut watch: doubled per failure in a row up
  // to max, with jitter (each drawn from [d/2, d]).
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  // Applied to every object before it is stored and delivered (client-go's
  // SetTransform): drop what the consumer never reads to keep the copy
  // small. The default drops metadata.managedFields and kubectl's
  // last-applied-configuration annotation, the largest parts of most
  // objects; nullptr keeps objects whole. It must keep metadata.name,
  // namespace and resourceVersion.
  std::function<void(nlohmann::json&)> transform = StripManagedFields;
};

// Called on the informer's thread, one event at a time, after the informer's
// copy has changed. For kDeleted, the object's last state.
using InformerHandler =
    std::function<void(EventType type, const nlohmann::json& object)>;

class Informer {
 public:
  // path: a collection, "/api/v1/namespaces/trainyard/pods". `client` must
  // outlive the informer.
  Informer(KubeClient* client, std::string path, InformerOptions options,
           InformerHandler handler);
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Starts the thread (once).
  void Start();
  // Ends the watch and joins the thread; no handler call after it returns.
  void Stop();

  // The first list has been delivered.
  bool Synced() const;
  // Waits until Synced() or the timeout; returns Synced().
  bool WaitForSync(absl::Duration timeout) const;
  // The cached objects (shared, immutable: a snapshot costs a pointer per
  // object, and a later change replaces the informer's pointer, not the
  // object).
  std::vector<ObjectPtr> Snapshot() const;
  // One cached object ("namespace/name"), or nullptr.
  ObjectPtr Get(std::string_view key) const;
  size_t size() const;
  std::string LastResourceVersion() const;

  struct Counters {
    int64_t lists = 0;       // complete lists (the first one included)
    int64_t relists = 0;     // lists after the first (410 Gone)
    int64_t reconnects = 0;  // watches started again without a list
    int64_t events = 0;      // events delivered to the handler
    int64_t bookmarks = 0;
    int64_t duplicates = 0;  // watch events dropped: already in the copy
  };
  Counters counters() const;
  // The last error of a list or watch (OK when the last one went well).
  absl::Status last_error() const;

 private:
  struct Delivery {
    EventType type;
    ObjectPtr object;
  };
  void Run();
  absl::Status List();
  absl::Status Watch(bool* progressed);
  // Sleeps, unless Stop() comes first: returns false then.
  bool Sleep(absl::Duration d);
  absl::Duration Backoff(int failures) const;
  void Deliver(std::vector<Delivery>& deliveries);
  void Trim(nlohmann::json& object) const;

  KubeClient* const client_;
  const std::string path_;
  const InformerOptions options_;
  const InformerHandler handler_;
  http::Canceller canceller_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, ObjectPtr> cache_ ABSL_GUARDED_BY(mu_);
  std::string resource_version_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::dispatcher::kubernetes

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_WATCH_H_
