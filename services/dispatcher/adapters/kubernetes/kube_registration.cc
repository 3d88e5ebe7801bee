#include "services/dispatcher/adapters/kubernetes/kube_registration.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/dispatcher/adapters/kubernetes/kube_adapter.h"
#include "services/dispatcher/adapters/registry.h"

// The backend's flags live with it: the binary reads them through the
// registry (AdapterFactory::flags), never by name.
ABSL_FLAG(std::string, kubeconfig, "",
          "dispatcher/all with --backend=kubernetes: kubeconfig file of the "
          "cluster's API server (empty: in-cluster service account)");
ABSL_FLAG(std::string, kube_context, "",
          "dispatcher/all with --backend=kubernetes: context of --kubeconfig "
          "(empty: its current-context)");
ABSL_FLAG(std::string, kube_settings, "",
          "dispatcher/all with --backend=kubernetes: the adapter's settings, "
          "`key = value` lines (docs/kubernetes.md); empty: the defaults");
ABSL_FLAG(std::string, kube_cluster, "kubernetes",
          "dispatcher/all with --backend=kubernetes: id of the cluster it "
          "dispatches for (clusters/{id})");
ABSL_FLAG(double, kube_qps, 50,
          "dispatcher/all with --backend=kubernetes: API requests a second "
          "(client-side rate limit, as client-go's QPS)");
ABSL_FLAG(int32_t, kube_burst, 100,
          "dispatcher/all with --backend=kubernetes: requests allowed in a "
          "burst above --kube_qps");

namespace trainyard::dispatcher::kubernetes {
namespace {

constexpr char kKubeconfig[] = "kubeconfig";
constexpr char kContext[] = "kube_context";
constexpr char kSettings[] = "kube_settings";
constexpr char kCluster[] = "kube_cluster";
constexpr char kQps[] = "kube_qps";
constexpr char kBurst[] = "kube_burst";

absl::Status Check(const AdapterSettings& settings) {
  if (settings.Get(kKubeconfig).empty() &&
      std::getenv("KUBERNETES_SERVICE_HOST") == nullptr) {
    return absl::InvalidArgumentError(
        "--backend=kubernetes needs --kubeconfig=FILE outside a Kubernetes "
        "pod (no KUBERNETES_SERVICE_HOST for the in-cluster configuration)");
  }
  double qps = 0;
  if (!absl::SimpleAtod(settings.Get(kQps), &qps) || qps < 0) {
    return absl::InvalidArgumentError("--kube_qps: a number >= 0");
  }
  int burst = 0;
  if (!absl::SimpleAtoi(settings.Get(kBurst), &burst) || burst < 1) {
    return absl::InvalidArgumentError("--kube_burst: an integer >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<BackendAdapter> Create(const AdapterSettings& settings) {
  KubernetesAdapterOptions options;
  const std::string kubeconfig = settings.Get(kKubeconfig);
  absl::StatusOr<KubeConfig> config =
      kubeconfig.empty() ? InClusterConfig()
                         : LoadKubeconfig(kubeconfig, settings.Get(kContext));
  if (!config.ok()) return config.status();
  options.config = *std::move(config);
  if (const std::string file = settings.Get(kSettings); !file.empty()) {
    absl::StatusOr<KubernetesSettings> s = LoadKubernetesSettings(file);
    if (!s.ok()) return s.status();
    options.settings = *std::move(s);
  }
  const std::string cluster = settings.Get(kCluster);
  options.client.cluster = cluster;
  (void)absl::SimpleAtod(settings.Get(kQps), &options.client.qps);
  (void)absl::SimpleAtoi(settings.Get(kBurst), &options.client.burst);
  absl::StatusOr<std::unique_ptr<KubernetesAdapter>> adapter =
      KubernetesAdapter::Create(std::move(options));
  if (!adapter.ok()) return adapter.status();
  return BackendAdapter{.adapter = std::move(*adapter), .cluster = cluster};
}

}  // namespace

absl::Status RegisterKubernetesAdapter() {
  return RegisterAdapterFactory(
      "kubernetes",
      {.flags = {kKubeconfig, kContext, kSettings, kCluster, kQps, kBurst},
       .usage = "--kubeconfig=FILE [--kube_context=NAME] "
                "[--kube_settings=FILE] [--kube_cluster=kubernetes]",
       .check = Check,
       .create = Create});
}

}  // namespace trainyard::dispatcher::kubernetes
