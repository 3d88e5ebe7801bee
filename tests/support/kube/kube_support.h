// What the tests that drive the Kubernetes API test server
// (tests/fixtures/local_kube.h) through the Kubernetes adapter share
// (kube_adapter_test, kube_dispatcher_test, cross_backend_test): the
// adapter's options for the server, pod scripts for its fake kubelet, and
// reading back what a worker said.
#ifndef TRAINYARD_TESTS_SUPPORT_KUBE_KUBE_SUPPORT_H_
#define TRAINYARD_TESTS_SUPPORT_KUBE_KUBE_SUPPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "services/dispatcher/adapters/kubernetes/kube_adapter.h"
#include "tests/fixtures/local_kube.h"

namespace trainyard::testing {

// The GPU product the tests' nodes carry, and the model Trainyard names it.
inline constexpr char kTestGpuProduct[] = "NVIDIA-H100-80GB-HBM3";

// Options of a Kubernetes adapter for cluster `cluster` on `kube`: its
// kubeconfig, no client-side rate limit, the checkpoint directory
// `checkpoint_root` mounted (hostPath) at the same path in the pods, and the
// test GPU product as H100.
inline absl::StatusOr<dispatcher::kubernetes::KubernetesAdapterOptions>
TestAdapterOptions(const LocalKube& kube, const std::string& cluster,
                   const std::string& checkpoint_root) {
  namespace k = ::trainyard::dispatcher::kubernetes;
  absl::StatusOr<k::KubeConfig> config =
      k::LoadKubeconfig(kube.kubeconfig_path());
  if (!config.ok()) return config.status();
  k::KubernetesAdapterOptions o;
  o.config = *std::move(config);
  o.client.cluster = cluster;
  o.client.qps = 0;  // no limit
  o.settings.checkpoint_volume = {k::CheckpointVolume::Kind::kHostPath,
                                  checkpoint_root};
  o.settings.checkpoint_mount_path = checkpoint_root;
  o.settings.gpu_models = {{kTestGpuProduct, "H100"}};
  return o;
}

// Gives the fake kubelet a script for the pods of namespace trainyard that
// script["selector"] selects (tests/fixtures/kube_apiserver/README.md).
inline absl::Status AddPodScript(LocalKube& kube, nlohmann::json script) {
  script["namespace"] = "trainyard";
  absl::StatusOr<std::string> r = kube.Admin("POST", "/scripts", script.dump());
  return r.ok() ? absl::OkStatus() : r.status();
}

// The log of worker 0 of attempt `name` (label trainyard.dev/name) as the
// fake kubelet wrote it; NOT_FOUND unless it has exactly one pod.
inline absl::StatusOr<std::string> WorkerLog(LocalKube& kube,
                                             const std::string& name) {
  absl::StatusOr<LocalKube::Response> list = kube.Request(
      "GET", absl::StrCat("/api/v1/namespaces/trainyard/"
                          "pods?labelSelector=trainyard.dev%2Fname%3D",
                          name));
  if (!list.ok()) return list.status();
  const nlohmann::json pods = nlohmann::json::parse(list->body, nullptr, false)
                                  .value("items", nlohmann::json::array());
  if (list->code != 200 || pods.size() != 1) {
    return absl::NotFoundError(
        absl::StrCat(name, " has no single pod: ", list->body));
  }
  absl::StatusOr<LocalKube::Response> log = kube.Request(
      "GET",
      absl::StrCat("/api/v1/namespaces/trainyard/pods/",
                   pods[0]["metadata"]["name"].get<std::string>(), "/log"));
  if (!log.ok()) return log.status();
  if (log->code != 200) {
    return absl::UnavailableError(
        absl::StrCat("pod log: HTTP ", log->code, ": ", log->body));
  }
  return log->body;
}

// The steps of the checkpoints a fake kubelet's log says it wrote, in order
// ("trainyard-fake: step N: checkpoint step-N written to PATH").
inline std::vector<int64_t> FakeCheckpointSteps(absl::string_view log) {
  std::vector<int64_t> steps;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find(": checkpoint step-");
    if (at == absl::string_view::npos) continue;
    const absl::string_view rest = line.substr(at + 18);
    int64_t step = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &step))
      steps.push_back(step);
  }
  return steps;
}

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_SUPPORT_KUBE_KUBE_SUPPORT_H_
