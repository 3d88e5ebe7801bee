#include "services/dispatcher/adapters/kubernetes/kube_adapter.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/dispatcher/adapters/checkpoint_manifest.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using Json = nlohmann::json;

// Checkpoints are read while an attempt runs and this long after it ended
// (a manifest written in the grace period lands late).
constexpr absl::Duration kCheckpointReadAfterEnd = absl::Minutes(10);
constexpr size_t kMaxCheckpointsPerAttempt = 64;

std::string StringAt(const Json& object,
                     std::initializer_list<const char*> path) {
  const Json* at = &object;
  for (const char* key : path) {
    if (!at->is_object()) return "";
    auto it = at->find(key);
    if (it == at->end()) return "";
    at = &*it;
  }
  return at->is_string() ? at->get<std::string>() : "";
}

bool Terminal(const Json& pod) {
  const std::string phase = StringAt(pod, {"status", "phase"});
  return phase == "Succeeded" || phase == "Failed";
}

void AddRequests(PodRequests& to, const PodRequests& r, int sign) {
  to.gpus += sign * r.gpus;
  to.cpu_millis += sign * r.cpu_millis;
  to.memory_bytes += sign * r.memory_bytes;
}

}  // namespace

KubernetesAdapter::KubernetesAdapter(KubernetesAdapterOptions options)
    : options_(std::move(options)),
      client_(std::make_unique<KubeClient>(options_.config, options_.client)) {}

KubernetesAdapter::~KubernetesAdapter() {
  for (Informer* i : {jobs_.get(), pods_.get(), node_informer_.get()}) {
    if (i != nullptr) i->Stop();
  }
}

absl::StatusOr<std::unique_ptr<KubernetesAdapter>> KubernetesAdapter::Create(
    KubernetesAdapterOptions options) {
  if (absl::Status s = ValidateKubernetesSettings(options.settings); !s.ok()) {
    return s;
  }
  std::unique_ptr<KubernetesAdapter> a(
      new KubernetesAdapter(std::move(options)));
  const std::string& ns = a->options_.settings.namespace_;
  KubernetesAdapter* self = a.get();
  InformerOptions jobs_options = a->options_.informer;
  jobs_options.label_selector = std::string(kOwnedSelector);
  a->jobs_ = std::make_unique<Informer>(
      a->client_.get(), domain::Cat("/apis/batch/v1/namespaces/", ns, "/jobs"),
      jobs_options, [self](EventType type, const Json& job) {
        if (type != EventType::kDeleted) return;
        // The last states of its ended pods (OnPod) go with it.
        absl::MutexLock l(&self->mu_);
        self->attempt_pods_.erase(StringAt(job, {"metadata", "name"}));
      });
  // Every pod of the cluster: Trainyard's whole, the others only as much as
  // their node's allocation needs.
  InformerOptions pods_options = a->options_.informer;
  pods_options.transform = [](Json& pod) {
    StripManagedFields(pod);
    CompactForeignPod(pod);
  };
  a->pods_ = std::make_unique<Informer>(
      a->client_.get(), "/api/v1/pods", pods_options,
      [self](EventType type, const Json& pod) { self->OnPod(type, pod); });
  a->node_informer_ = std::make_unique<Informer>(
      a->client_.get(), "/api/v1/nodes", a->options_.informer,
      [self](EventType, const Json&) {
        absl::MutexLock l(&self->mu_);
        ++self->inventory_changes_;
      });
  for (Informer* i :
       {a->jobs_.get(), a->pods_.get(), a->node_informer_.get()}) {
    i->Start();
  }
  const absl::Time deadline = absl::Now() + a->options_.sync_timeout;
  for (auto [informer, what] :
       {std::pair{a->jobs_.get(), "jobs"}, std::pair{a->pods_.get(), "pods"},
        std::pair{a->node_informer_.get(), "nodes"}}) {
    if (!informer->WaitForSync(
            std::max(absl::ZeroDuration(), deadline - absl::Now()))) {
      return absl::UnavailableError(domain::Cat(
          "kubernetes cluster ", a->cluster(), ": could not list ", what,
          " within ", absl::FormatDuration(a->options_.sync_timeout), ": ",
          informer->last_error().ToString()));
    }
  }
  return a;
}

void KubernetesAdapter::OnPod(EventType type, const Json& pod) {
  const std::string key = ObjectKey(pod);
  const std::string owner =
      StringAt(pod, {"metadata", "labels", kLabelName.data()});
  const bool ours =
      !owner.empty() &&
      StringAt(pod, {"metadata", "namespace"}) == options_.settings.namespace_;
  absl::MutexLock l(&mu_);
  if (ours) {
    // A pod that ended is kept in its last state while its Job exists (the
    // Job's deletion forgets it): how it ended (DisruptionTarget, OOMKilled
    // ...) says why the attempt failed, and Kubernetes deletes such pods
    // soon (the taint manager, PodGC) while the Job says only
    // BackoffLimitExceeded. (Under mu_: the Job's deletion is in the jobs
    // informer's copy before its handler takes mu_.)
    const bool keep = type == EventType::kDeleted && Terminal(pod) &&
                      jobs_->Get(domain::Cat(options_.settings.namespace_, "/",
                                             owner)) != nullptr;
    if (type == EventType::kDeleted && !keep) {
      auto it = attempt_pods_.find(owner);
      if (it != attempt_pods_.end()) {
        it->second.erase(key);
        if (it->second.empty()) attempt_pods_.erase(it);
      }
    } else {
      attempt_pods_[owner][key] = pod;
    }
  }
  if (auto it = bound_.find(key); it != bound_.end()) {
    AddRequests(node_used_[it->second.node], it->second.requests, -1);
    bound_.erase(it);
    ++inventory_changes_;
  }
  const std::string node = StringAt(pod, {"spec", "nodeName"});
  if (type != EventType::kDeleted && !node.empty() && !Terminal(pod)) {
    BoundPod b{node, PodEffectiveRequests(pod, options_.settings.gpu_resource)};
    AddRequests(node_used_[node], b.requests, +1);
    bound_.emplace(key, std::move(b));
    ++inventory_changes_;
  }
}

std::string KubernetesAdapter::JobPath(std::string_view name) const {
  return domain::Cat("/apis/batch/v1/namespaces/", options_.settings.namespace_,
                     "/jobs/", name);
}
std::string KubernetesAdapter::ServicePath(std::string_view name) const {
  return domain::Cat("/api/v1/namespaces/", options_.settings.namespace_,
                     "/services/", name);
}
std::string KubernetesAdapter::PodPath(std::string_view name) const {
  return domain::Cat("/api/v1/namespaces/", options_.settings.namespace_,
                     "/pods/", name);
}

absl::StatusOr<Json> KubernetesAdapter::FindJob(std::string_view name) {
  ObjectPtr cached =
      jobs_->Get(domain::Cat(options_.settings.namespace_, "/", name));
  if (cached != nullptr) return *cached;
  // Not seen by the watch (yet): ask.
  return client_->Get(JobPath(name));
}

AttemptStatus KubernetesAdapter::StatusOf(const Json& job) {
  const std::string name = StringAt(job, {"metadata", "name"});
  std::vector<Json> pods;
  std::shared_ptr<const std::vector<NodeInventory>> nodes;
  {
    absl::MutexLock l(&mu_);
    if (auto it = attempt_pods_.find(name); it != attempt_pods_.end()) {
      for (const auto& [key, pod] : it->second) pods.push_back(pod);
    }
    nodes = nodes_;
  }
  AttemptStatus s = AttemptFromObjects(
      job, pods, absl::Now(),
      nodes == nullptr || nodes->empty() ? nullptr : nodes.get(),
      options_.settings.image_pull_patience);
  ReadCheckpoints(name, job, s);
  absl::MutexLock l(&mu_);
  if (auto it = checkpoints_.find(name); it != checkpoints_.end()) {
    s.checkpoints = it->second;
  }
  return s;
}

void KubernetesAdapter::ReadCheckpoints(std::string_view name, const Json& job,
                                        const AttemptStatus& s) {
  if (!s.start_time.has_value()) return;  // never ran
  if (s.end_time.has_value() &&
      absl::Now() - *s.end_time > kCheckpointReadAfterEnd) {
    return;
  }
  const std::optional<std::string> dir = LocalCheckpointDir(StringAt(
      job, {"metadata", "annotations", kAnnotationCheckpointDir.data()}));
  if (!dir.has_value()) return;
  std::optional<CheckpointInfo> c = ReadCheckpointManifest(*dir, s.start_time);
  if (!c.has_value()) return;
  absl::MutexLock l(&mu_);
  std::vector<CheckpointInfo>& list = checkpoints_[std::string(name)];
  if (!list.empty() && list.back().step >= c->step) return;
  list.push_back(*std::move(c));
  if (list.size() > kMaxCheckpointsPerAttempt) list.erase(list.begin());
}

absl::StatusOr<AttemptStatus> KubernetesAdapter::Launch(
    const LaunchRequest& request) {
  // Look before creating: an attempt of that name in any phase is returned.
  // The Jobs informer listed every Job of ours before this process launched
  // anything, so one it does not hold was never created, or only this instant
  // (by an earlier Launch of this process, or a dispatcher killed as it
  // created it): then the create's AlreadyExists reads it back.
  if (ObjectPtr cached = jobs_->Get(
          domain::Cat(options_.settings.namespace_, "/", request.name));
      cached != nullptr) {
    return StatusOf(*cached);
  }
  absl::StatusOr<Json> job = BuildJob(request, options_.settings);
  if (!job.ok()) return job.status();
  if (NeedsService(request)) {
    absl::StatusOr<Json> service = BuildService(request, options_.settings);
    if (!service.ok()) return service.status();
    const std::string services = domain::Cat(
        "/api/v1/namespaces/", options_.settings.namespace_, "/services");
    if (absl::StatusOr<Json> s = client_->Create(services, *service);
        !s.ok() && !absl::IsAlreadyExists(s.status())) {
      return s.status();
    }
  }
  absl::StatusOr<Json> created =
      client_->Create(domain::Cat("/apis/batch/v1/namespaces/",
                                  options_.settings.namespace_, "/jobs"),
                      *job);
  if (absl::IsAlreadyExists(created.status())) {
    created = client_->Get(JobPath(request.name));
  }
  if (!created.ok()) return created.status();
  return StatusOf(*created);
}

absl::Status KubernetesAdapter::Signal(std::string_view name, int signal) {
  return absl::UnimplementedError(domain::Cat(
      "kubernetes cluster ", cluster(), ": cannot send signal ", signal, " to ",
      name,
      ": Kubernetes has no API that signals a container (a stop sends SIGTERM "
      "through graceful deletion)"));
}

absl::Status KubernetesAdapter::Stop(std::string_view name,
                                     absl::Duration grace, StopReason reason) {
  if (grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grace: must not be negative");
  }
  absl::StatusOr<Json> job = FindJob(name);
  if (!job.ok()) return job.status();
  const AttemptStatus now = StatusOf(*job);
  if (IsTerminal(now.phase)) return absl::OkStatus();
  absl::Time deadline = absl::Now() + grace;
  StopReason effective = reason;
  if (now.stop_requested) {
    if (now.stop_deadline.has_value()) {
      deadline = std::min(deadline, *now.stop_deadline);
    }
    const std::optional<StopReason> earlier = ParseStopReasonValue(StringAt(
        *job, {"metadata", "annotations", kAnnotationStopReason.data()}));
    if (earlier == StopReason::kCancel) effective = StopReason::kCancel;
  }
  Json patch = {{"metadata",
                 {{"annotations",
                   {{std::string(kAnnotationStopReason),
                     std::string(StopReasonValue(effective))},
                    {std::string(kAnnotationStopDeadline),
                     absl::FormatTime(absl::RFC3339_sec, deadline,
                                      absl::UTCTimeZone())}}}}},
                {"spec", {{"suspend", true}}}};
  if (absl::StatusOr<Json> p = client_->Patch(JobPath(name), patch); !p.ok()) {
    return p.status();
  }
  // SIGTERM now, SIGKILL when the grace period ends.
  const int64_t seconds = static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(
      std::max(absl::ZeroDuration(), deadline - absl::Now()))));
  std::vector<std::string> pods;
  {
    absl::MutexLock l(&mu_);
    if (auto it = attempt_pods_.find(std::string(name));
        it != attempt_pods_.end()) {
      for (const auto& [key, pod] : it->second) {
        if (!Terminal(pod)) pods.push_back(StringAt(pod, {"metadata", "name"}));
      }
    }
  }
  for (const std::string& pod : pods) {
    absl::StatusOr<Json> d = client_->Delete(PodPath(pod), seconds);
    if (!d.ok() && !absl::IsNotFound(d.status())) return d.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<AttemptStatus> KubernetesAdapter::Status(std::string_view name) {
  absl::StatusOr<Json> job = FindJob(name);
  if (!job.ok()) return job.status();
  return StatusOf(*job);
}

absl::StatusOr<std::vector<AttemptStatus>> KubernetesAdapter::List() {
  // The node check of AttemptFromObjects uses the inventory of this pass.
  RefreshNodes();
  std::vector<AttemptStatus> out;
  for (const ObjectPtr& job : jobs_->Snapshot()) {
    const std::string name = StringAt(*job, {"metadata", "name"});
    if (!ParseBackendJobName(name).ok()) continue;
    out.push_back(StatusOf(*job));
  }
  std::sort(out.begin(), out.end(),
            [](const AttemptStatus& a, const AttemptStatus& b) {
              return a.name < b.name;
            });
  return out;
}

absl::Status KubernetesAdapter::Delete(std::string_view name) {
  absl::StatusOr<Json> job = FindJob(name);
  if (absl::IsNotFound(job.status())) {
    // The Service may outlive a Job that was never created.
    absl::StatusOr<Json> s = client_->Delete(ServicePath(name));
    if (!s.ok() && !absl::IsNotFound(s.status())) return s.status();
    return absl::OkStatus();
  }
  if (!job.ok()) return job.status();
  if (!IsTerminal(StatusOf(*job).phase)) {
    return absl::FailedPreconditionError(
        domain::Cat(name, ": has not ended; Stop it first"));
  }
  for (const std::string& path : {JobPath(name), ServicePath(name)}) {
    absl::StatusOr<Json> d = client_->Delete(path);
    if (!d.ok() && !absl::IsNotFound(d.status())) return d.status();
  }
  absl::MutexLock l(&mu_);
  checkpoints_.erase(std::string(name));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<NodeInventory>> KubernetesAdapter::Inventory() {
  RefreshNodes();
  absl::MutexLock l(&mu_);
  return *nodes_;
}

void KubernetesAdapter::RefreshNodes() {
  uint64_t changes = 0;
  {
    absl::MutexLock l(&mu_);
    if (nodes_ != nullptr && nodes_computed_at_ == inventory_changes_) return;
    // Read before the snapshot: a change after this point is computed again
    // next time.
    changes = inventory_changes_;
  }
  std::vector<NodeInventory> out;
  const std::vector<ObjectPtr> nodes = node_informer_->Snapshot();
  out.reserve(nodes.size());
  {
    absl::MutexLock l(&mu_);
    for (const ObjectPtr& node : nodes) {
      NodeInventory n = NodeFromObject(*node, {}, options_.settings);
      if (auto it = node_used_.find(n.name); it != node_used_.end()) {
        n.used_gpus = it->second.gpus;
        n.used_cpu_millis = it->second.cpu_millis;
        n.used_memory_bytes = it->second.memory_bytes;
      }
      out.push_back(std::move(n));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const NodeInventory& a, const NodeInventory& b) {
              return a.name < b.name;
            });
  absl::MutexLock l(&mu_);
  nodes_ = std::make_shared<const std::vector<NodeInventory>>(std::move(out));
  nodes_computed_at_ = changes;
}

absl::StatusOr<LogChunk> KubernetesAdapter::ReadLog(std::string_view name,
                                                    int64_t offset,
                                                    int64_t max_bytes) {
  if (offset < 0) return absl::InvalidArgumentError("offset: must be >= 0");
  if (max_bytes <= 0)
    return absl::InvalidArgumentError("max_bytes: must be > 0");
  absl::StatusOr<Json> job = FindJob(name);
  if (!job.ok()) return job.status();
  // Worker 0's pod: the newest of index 0 that has started.
  std::string pod;
  std::string created;
  {
    absl::MutexLock l(&mu_);
    if (auto it = attempt_pods_.find(std::string(name));
        it != attempt_pods_.end()) {
      for (const auto& [key, p] : it->second) {
        if (StringAt(p, {"metadata", "annotations",
                         kCompletionIndexAnnotation.data()}) != "0") {
          continue;
        }
        const std::string t = StringAt(p, {"metadata", "creationTimestamp"});
        if (pod.empty() || t > created) {
          pod = StringAt(p, {"metadata", "name"});
          created = t;
        }
      }
    }
  }
  if (pod.empty()) return LogChunk{.offset = offset};
  // The kubelet serves a log from its start only: read up to the end asked
  // for and keep what lies past `offset`.
  absl::StatusOr<std::string> text =
      client_->GetText(domain::Cat(PodPath(pod), "/log"),
                       {{"container", std::string(kWorkerContainer)},
                        {"limitBytes", domain::Cat(offset + max_bytes)}});
  if (absl::IsInvalidArgument(text.status()) ||
      absl::IsNotFound(text.status())) {
    // A container that has not started has no log yet; a deleted pod (kept
    // in its last state, OnPod) none any more.
    return LogChunk{.offset = offset};
  }
  if (!text.ok()) return text.status();
  LogChunk chunk;
  chunk.offset = offset;
  chunk.size = static_cast<int64_t>(text->size());
  if (offset < chunk.size) chunk.data = text->substr(offset);
  return chunk;
}

}  // namespace trainyard::dispatcher::kubernetes
