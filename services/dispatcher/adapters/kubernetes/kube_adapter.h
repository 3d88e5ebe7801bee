// The `kubernetes` backend: drives a Kubernetes cluster through its API
// server (docs/kubernetes.md).
//
//   Launch   a headless Service, then a batch/v1 Indexed Job, both named
//            "ty-<job>-<attempt>" (BuildService, BuildJob in kube_mapping.h).
//            Looks before it creates: the Job in the watch-fed cache, else a
//            GET; a create that answers AlreadyExists is read back. So a
//            dispatcher killed between "created" and "recorded" finds the Job
//            instead of creating a second one.
//   Stop     annotates the Job with the stop's reason and deadline, suspends
//            it (the Job controller creates no more pods) and deletes its
//            pods with the grace period as gracePeriodSeconds: SIGTERM now,
//            SIGKILL when it ends. The attempt then ends kCancelled with
//            failure kCancelled or kPreempted.
//   Status/List  from three informers, one watch per kind for the whole
//            cluster (kube_watch.h): the namespace's Trainyard Jobs, every pod
//            (Trainyard's give the attempts' state; everyone's count against
//            their node's free resources) and the nodes; AttemptFromObjects
//            maps them. Checkpoints from the job's checkpoint manifest on the
//            shared checkpoint volume (checkpoint_manifest.h).
//   Inventory  the nodes (NodeFromObject) with the requests of every
//            non-terminal pod bound to them.
//   Delete   DELETE of the Job and the Service, propagationPolicy Background.
//   ReadLog  worker 0's log (pods/log, container "worker").
//   Signal   UNIMPLEMENTED: Kubernetes has no API that signals a container.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_ADAPTER_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_ADAPTER_H_

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/adapter.h"
#include "services/dispatcher/adapters/kubernetes/kube_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_config.h"
#include "services/dispatcher/adapters/kubernetes/kube_mapping.h"
#include "services/dispatcher/adapters/kubernetes/kube_settings.h"
#include "services/dispatcher/adapters/kubernetes/kube_watch.h"

namespace trainyard::dispatcher::kubernetes {

struct KubernetesAdapterOptions {
  KubeConfig config;
  KubeClientOptions client;
  KubernetesSettings settings;
  // How long Create waits for the informers' first lists.
  absl::Duration sync_timeout = absl::Seconds(60);
  InformerOptions informer;
};

class KubernetesAdapter final : public Adapter {
 public:
  // Connects, lists and starts watching; UNAVAILABLE naming the cluster when
  // the first lists do not complete within sync_timeout.
  static absl::StatusOr<std::unique_ptr<KubernetesAdapter>> Create(
      KubernetesAdapterOptions options);
  ~KubernetesAdapter() override;

  std::string_view kind() const override { return "kubernetes"; }
  absl::StatusOr<AttemptStatus> Launch(const LaunchRequest& request) override;
  // Launches wait on the API server (one request each for a single pod); the
  // client's QPS limit, shared by all, still paces them.
  int LaunchConcurrency() const override { return 8; }
  absl::Status Signal(std::string_view name, int signal) override;
  absl::Status Stop(std::string_view name, absl::Duration grace,
                    StopReason reason) override;
  absl::StatusOr<AttemptStatus> Status(std::string_view name) override;
  absl::StatusOr<std::vector<AttemptStatus>> List() override;
  absl::Status Delete(std::string_view name) override;
  absl::StatusOr<std::vector<NodeInventory>> Inventory() override;
  absl::StatusOr<LogChunk> ReadLog(std::string_view name, int64_t offset,
                                   int64_t max_bytes) override;

  KubeClient& client() { return *client_; }

 private:
  explicit KubernetesAdapter(KubernetesAdapterOptions options);

  std::string JobPath(std::string_view name) const;
  std::string ServicePath(std::string_view name) const;
  std::string PodPath(std::string_view name) const;
  // The Job from the cache, else from the API server; NOT_FOUND if none.
  absl::StatusOr<nlohmann::json> FindJob(std::string_view name);
  // The attempt's state from its Job, its pods and the checkpoints read.
  AttemptStatus StatusOf(const nlohmann::json& job);
  // Computes nodes_ again if a node or a pod's node changed since.
  void RefreshNodes();
  void ReadCheckpoints(std::string_view name, const nlohmann::json& job,
                       const AttemptStatus& status);
  // Informer handlers.
  void OnPod(EventType type, const nlohmann::json& pod);
  // The cluster's label in messages.
  const std::string& cluster() const { return client_->cluster(); }

  const KubernetesAdapterOptions options_;
  std::unique_ptr<KubeClient> client_;

  absl::Mutex mu_;
  // Trainyard's pods by attempt name, then by "namespace/name".
  absl::flat_hash_map<std::string, std::map<std::string, nlohmann::json>>
      attempt_pods_ ABSL_GUARDED_BY(mu_);
  // Every non-terminal pod bound to a node: its node and requests.
  struct BoundPod {
    std::string node;
    PodRequests requests;
  };
  absl::flat_hash_map<std::string, BoundPod> bound_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, PodRequests> node_used_ ABSL_GUARDED_BY(mu_);
  // Checkpoints found per attempt, oldest first.
  absl::flat_hash_map<std::string, std::vector<CheckpointInfo>> checkpoints_
      ABSL_GUARDED_BY(mu_);
  // The inventory as last computed (for AttemptFromObjects' node check), and
  // what it was computed from: inventory_changes_ counts the node events and
  // the changes of node_used_; Inventory() computes again only when it moved
  // (an idle cluster of thousands of nodes costs a dispatch pass nothing).
  std::shared_ptr<const std::vector<NodeInventory>> nodes_ ABSL_GUARDED_BY(mu_);
  uint64_t inventory_changes_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t nodes_computed_at_ ABSL_GUARDED_BY(mu_) = 0;

  // Last: stopped (in the destructor) before the state above goes.
  std::unique_ptr<Informer> jobs_;
  std::unique_ptr<Informer> pods_;
  std::unique_ptr<Informer> node_informer_;
};

}  // namespace trainyard::dispatcher::kubernetes

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_ADAPTER_H_
