// Registers the `kubernetes` backend (adapters/registry.h) with its flags:
//   --kubeconfig=FILE       the API server and credentials (empty: the pod's
//                           service account, in-cluster)
//   --kube_context=NAME     the kubeconfig's context (empty: its current one)
//   --kube_settings=FILE    the mapping's settings (kube_settings.h; empty:
//                           the defaults, namespace "trainyard")
//   --kube_cluster=ID       the cluster it dispatches for (clusters/{id})
//   --kube_qps, --kube_burst  client-side rate limit of API requests
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_REGISTRATION_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_REGISTRATION_H_

#include "absl/status/status.h"

namespace trainyard::dispatcher::kubernetes {

absl::Status RegisterKubernetesAdapter();

}  // namespace trainyard::dispatcher::kubernetes

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_REGISTRATION_H_
