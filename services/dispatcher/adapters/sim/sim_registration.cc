#include "services/dispatcher/adapters/sim/sim_registration.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/registry.h"
#include "services/dispatcher/adapters/sim/sim_adapter.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/dispatcher/adapters/sim/sim_remote.h"
#include "services/lib/runtime/grpc_server.h"

namespace trainyard::dispatcher::sim {
namespace {

constexpr char kConfig[] = "sim_config";
constexpr char kTarget[] = "sim_target";
constexpr char kListen[] = "sim_grpc_listen";

// The in-process sim's SimClusterService on its own port (what `trainyard
// sim-cluster` serves), so that faults can be injected into the cluster a
// `trainyard all` or `trainyard dispatcher --sim_config` drives.
struct SimServer {
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<runtime::GrpcServerRunner> runner;
};

absl::Status Check(const AdapterSettings& settings) {
  if (settings.Get(kConfig).empty() == settings.Get(kTarget).empty()) {
    return absl::InvalidArgumentError(
        "give one of --sim_config=FILE or --sim_target=HOST:PORT");
  }
  if (!settings.Get(kListen).empty() && settings.Get(kConfig).empty()) {
    return absl::InvalidArgumentError(
        "--sim_grpc_listen serves an in-process sim: it needs --sim_config");
  }
  return absl::OkStatus();
}

absl::StatusOr<BackendAdapter> Create(const AdapterSettings& settings) {
  BackendAdapter out;
  if (const std::string target = settings.Get(kTarget); !target.empty()) {
    auto client = std::make_unique<SimClusterClient>(
        SimClusterClientOptions{.target = target});
    // The cluster's name comes from the sim cluster itself; wait a while for
    // it to come up (both are often started together).
    auto info = client->Info(absl::Seconds(30));
    if (!info.ok()) return info.status();
    out.cluster = info->cluster();
    out.adapter = std::move(client);
    out.label = "sim-remote";
    return out;
  }
  auto config = LoadSimConfig(settings.Get(kConfig));
  if (!config.ok()) return config.status();
  auto adapter = SimAdapter::Create(*config, &RealClock::Get());
  if (!adapter.ok()) return adapter.status();
  out.cluster = config->cluster();
  if (const std::string listen = settings.Get(kListen); !listen.empty()) {
    auto server = std::make_shared<SimServer>();
    server->service = NewSimClusterServer(adapter->get());
    server->runner = std::make_unique<runtime::GrpcServerRunner>(
        runtime::GrpcServerOptions{.listen_address = listen});
    server->runner->AddService(server->service.get());
    if (absl::Status s = server->runner->Start(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--sim_grpc_listen=", listen,
                                                 ": ", s.message()));
    }
    out.companion = std::move(server);
  }
  out.adapter = std::move(*adapter);
  return out;
}

}  // namespace

absl::Status RegisterSimAdapter() {
  return RegisterAdapterFactory(
      "sim", {.flags = {kConfig, kTarget, kListen},
              .usage = "--sim_config=FILE [--sim_grpc_listen=HOST:PORT] | "
                       "--sim_target=HOST:PORT",
              .check = Check,
              .runs_in_all =
                  [](const AdapterSettings& settings) {
                    return !settings.Get(kConfig).empty();
                  },
              .create = Create});
}

}  // namespace trainyard::dispatcher::sim
