// Settings of the Kubernetes adapter's mapping (docs/kubernetes.md): the
// namespace attempts run in, how each Trainyard flavor is placed (node
// selector, tolerations, spot presets by provider), how a Node's pool,
// flavor, topology and GPUs are read from its labels, and what every worker
// pod gets (rendezvous port, image pull secrets, service account, grace
// period, priority class, the shared checkpoint volume). Read, as the Slurm
// adapter's settings are, from `key = value` lines (`#` comments):
//
//   namespace = trainyard
//   flavor.spot-h100.spot = gke            # gke, karpenter, eks, aks
//   flavor.spot-h100.node_selector = example.com/gpu=h100
//   flavor.ondemand-h100.toleration = dedicated=training:NoSchedule
//   pool_label = cloud.google.com/gke-nodepool   # repeatable; first found wins
//   pool_flavor = h100-spot-pool:spot-h100       # pool:flavor, repeatable
//   gpu_model_map = NVIDIA-H100-80GB-HBM3=H100   # product label value=model
//   checkpoint_volume = pvc:trainyard-checkpoints
//   checkpoint_mount_path = /checkpoints
//
// The client settings (kubeconfig, API server, TLS) are not here: they are
// the client's (kube_config.h).
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_SETTINGS_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_SETTINGS_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::dispatcher::kubernetes {

// A pod toleration (core/v1 Toleration). operator "Equal" (with value) or
// "Exists" (without); effect "", "NoSchedule", "PreferNoSchedule" or
// "NoExecute" ("" tolerates every effect).
struct Toleration {
  std::string key;
  std::string op = "Equal";
  std::string value;
  std::string effect;
  friend bool operator==(const Toleration&, const Toleration&) = default;
};

// Parses "key=value:Effect", "key=value", "key:Effect" (Exists), "key"
// (Exists), and "*" / ":Effect" (an empty key with Exists tolerates every
// taint). INVALID_ARGUMENT naming `field`.
absl::StatusOr<Toleration> ParseToleration(std::string_view text,
                                           std::string_view field);
// The inverse of ParseToleration, e.g. "key=value:NoSchedule".
std::string FormatToleration(const Toleration& t);

// The spot capacity conventions of the providers that have one; a flavor
// with a preset gets the provider's node selector and toleration.
//   gke        node selector cloud.google.com/gke-spot=true, toleration
//              cloud.google.com/gke-spot=true:NoSchedule (the taint GKE puts
//              on spot node pools that ask for it);
//   karpenter  node selector karpenter.sh/capacity-type=spot (Karpenter
//              taints nothing for spot);
//   eks        node selector eks.amazonaws.com/capacityType=SPOT (managed
//              node groups; no taint by default);
//   aks        node selector kubernetes.azure.com/scalesetpriority=spot,
//              toleration kubernetes.azure.com/scalesetpriority=spot:
//              NoSchedule (AKS taints every spot pool so).
enum class SpotPreset { kNone, kGke, kKarpenter, kEks, kAks };
// "none", "gke", "karpenter", "eks", "aks"; nullopt for anything else.
std::optional<SpotPreset> ParseSpotPreset(std::string_view name);
std::string_view SpotPresetName(SpotPreset preset);
// The node label (key, value) a preset selects, and the toleration it adds
// (nullopt for providers that taint nothing).
std::pair<std::string, std::string> SpotPresetLabel(SpotPreset preset);
std::optional<Toleration> SpotPresetToleration(SpotPreset preset);

// How the pods of one Trainyard flavor are placed. Workers are pinned to the
// scheduler's nodes anyway; the selector and tolerations are what lets
// kube-scheduler accept those nodes (tolerations) and keeps a pod off a node
// of another flavor should the placement and the cluster disagree (selector).
struct FlavorPlacement {
  // Flavor id (LaunchRequest.flavor), e.g. "spot-h100".
  std::string flavor;
  // Spot capacity of this provider (adds its label and toleration).
  SpotPreset spot = SpotPreset::kNone;
  // Marks the flavor as spot without a preset (a cluster labelling its spot
  // nodes its own way): a reclaim is then told from a node failure.
  bool spot_flag = false;
  // Node labels the pods select (merged with the preset's).
  std::map<std::string, std::string> node_selector;
  // Tolerations (the preset's come first).
  std::vector<Toleration> tolerations;

  bool is_spot() const { return spot != SpotPreset::kNone || spot_flag; }
  // node_selector plus the preset's label.
  std::map<std::string, std::string> EffectiveNodeSelector() const;
  // The preset's toleration, then `tolerations`.
  std::vector<Toleration> EffectiveTolerations() const;
};

// A volume of the shared checkpoint filesystem, mounted in every worker.
struct CheckpointVolume {
  enum class Kind { kNone, kHostPath, kPvc, kNfs };
  Kind kind = Kind::kNone;
  // hostPath: the node's directory; pvc: the claim name; nfs: "server:/path".
  std::string source;
};

struct KubernetesSettings {
  // Namespace of every Job, Service and pod Trainyard creates.
  std::string namespace_ = "trainyard";

  // --- Placement -------------------------------------------------------------
  // Flavor → placement, in the order given; the first serves requests without
  // a flavor. Empty: every flavor is placed by node pinning alone.
  std::vector<FlavorPlacement> flavors;

  // --- Reading Nodes ---------------------------------------------------------
  // Labels naming a node's pool, tried in order (GKE, Karpenter, EKS, AKS).
  std::vector<std::string> pool_labels = {
      "cloud.google.com/gke-nodepool", "karpenter.sh/nodepool",
      "eks.amazonaws.com/nodegroup", "kubernetes.azure.com/agentpool",
      "agentpool"};
  // Label naming a node's flavor (checked before pool_flavors); empty: none.
  std::string flavor_label = "trainyard.dev/flavor";
  // Pool → flavor, for nodes without the flavor label.
  std::map<std::string, std::string> pool_flavors;
  // Topology labels. block: the block label's value, else the zone when
  // block_label is empty; rack: the rack label's value (empty label: none).
  std::string zone_label = "topology.kubernetes.io/zone";
  std::string block_label;
  std::string rack_label;
  // The GPU extended resource and the label naming its model.
  std::string gpu_resource = "nvidia.com/gpu";
  std::string gpu_model_label = "nvidia.com/gpu.product";
  // GPU model reported for every GPU node (overrides the label when set).
  std::string gpu_model;
  // Label value → Trainyard GPU model ("NVIDIA-H100-80GB-HBM3" → "H100");
  // values not listed are reported as they are.
  std::map<std::string, std::string> gpu_models;

  // --- Worker pods -----------------------------------------------------------
  // Port of the rendezvous (MASTER_PORT) on worker 0.
  int rendezvous_port = 29500;
  std::vector<std::string> image_pull_secrets;
  // Service account of the pods (empty: the namespace's default).
  std::string service_account;
  // terminationGracePeriodSeconds of jobs whose spec sets no
  // checkpoint.grace_period.
  absl::Duration default_grace_period = absl::Seconds(60);
  // priorityClassName of every pod (empty: none).
  std::string priority_class;
  // Image of jobs whose spec names none (empty: such jobs are refused).
  std::string default_image;
  // How long a worker stays on a node that is NotReady or unreachable
  // before Kubernetes evicts it (tolerationSeconds of the pods' tolerations
  // for node.kubernetes.io/not-ready and unreachable:NoExecute), which fails
  // the attempt as a node failure. Unset: Kubernetes' default (the
  // DefaultTolerationSeconds admission plugin's, 300s unless the cluster
  // changed it).
  std::optional<absl::Duration> node_lost_after;
  // How long a worker may fail to pull its image (ErrImagePull,
  // ImagePullBackOff: the kubelet keeps retrying) before the attempt fails as
  // the user's error. 0s..24h.
  absl::Duration image_pull_patience = absl::Minutes(5);
  // The shared checkpoint filesystem: a job whose checkpoint directory is a
  // local path under checkpoint_mount_path gets that directory (and only it,
  // as a subPath) mounted at the same path. The dispatcher sees the same
  // filesystem at the same path, where it reads the manifests.
  CheckpointVolume checkpoint_volume;
  std::string checkpoint_mount_path;
};

// Parses `key = value` lines: namespace, flavor.<id>.spot (a preset or
// "true"), flavor.<id>.node_selector = k=v, flavor.<id>.toleration (as
// ParseToleration), pool_label (repeatable; the first occurrence replaces the
// defaults; "none" clears them), flavor_label, pool_flavor = pool:flavor,
// zone_label, block_label, rack_label, gpu_resource, gpu_model_label,
// gpu_model, gpu_model_map = value=model, rendezvous_port,
// image_pull_patience (a duration),
// image_pull_secret (repeatable), service_account, default_grace_period (a
// duration, "30s"), priority_class, default_image, node_lost_after (a
// duration), checkpoint_volume
// (hostPath:/dir, pvc:name, nfs:server:/dir), checkpoint_mount_path.
// Unknown keys and malformed values are INVALID_ARGUMENT naming the key.
absl::StatusOr<KubernetesSettings> ParseKubernetesSettings(
    std::string_view text);
// Reads and parses a settings file.
absl::StatusOr<KubernetesSettings> LoadKubernetesSettings(
    const std::string& path);
// Checks a settings struct built in code (what ParseKubernetesSettings
// checks): names are valid Kubernetes names, label keys qualified names,
// label values valid, flavors unique, the port in 1..65535 ...
absl::Status ValidateKubernetesSettings(const KubernetesSettings& settings);

// The placement of `flavor`: nullptr when no flavor is configured for it. An
// empty flavor selects the first configured one.
const FlavorPlacement* FindFlavor(const KubernetesSettings& settings,
                                  std::string_view flavor);

// Kubernetes name rules (k8s.io/apimachinery validation): DNS-1123 label
// (63 characters, [a-z0-9-], alphanumeric at both ends), DNS-1123 subdomain
// (253, dot-separated labels), qualified name (label/annotation keys: an
// optional DNS subdomain prefix and '/', then 63 characters of
// [A-Za-z0-9._-], alphanumeric at both ends), label value (empty, or 63
// characters of [A-Za-z0-9._-], alphanumeric at both ends).
bool IsDns1123Label(std::string_view s);
bool IsDns1123Subdomain(std::string_view s);
bool IsQualifiedName(std::string_view s);
bool IsLabelValue(std::string_view s);

}  // namespace trainyard::dispatcher::kubernetes

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_SETTINGS_H_
