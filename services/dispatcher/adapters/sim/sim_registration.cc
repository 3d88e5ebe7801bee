#include "services/dispatcher/adapters/sim/sim_registration.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/registry.h"
#include "services/dispatcher/adapters/sim/sim_adapter.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/dispatcher/adapters/sim/sim_remote.h"

namespace trainyard::dispatcher::sim {
namespace {

constexpr char kConfig[] = "sim_config";
constexpr char kTarget[] = "sim_target";

absl::Status Check(const AdapterSettings& settings) {
  if (settings.Get(kConfig).empty() == settings.Get(kTarget).empty()) {
    return absl::InvalidArgumentError(
        "give one of --sim_config=FILE or --sim_target=HOST:PORT");
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
  out.adapter = std::move(*adapter);
  return out;
}

}  // namespace

absl::Status RegisterSimAdapter() {
  return RegisterAdapterFactory(
      "sim", {.flags = {kConfig, kTarget},
              .usage = "--sim_config=FILE | --sim_target=HOST:PORT",
              .check = Check,
              .runs_in_all =
                  [](const AdapterSettings& settings) {
                    return !settings.Get(kConfig).empty();
                  },
              .create = Create});
}

}  // namespace trainyard::dispatcher::sim
