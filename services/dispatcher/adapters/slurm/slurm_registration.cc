#include "services/dispatcher/adapters/slurm/slurm_registration.h"

#include <utility>

#include "absl/status/statusor.h"
#include "services/dispatcher/adapters/registry.h"
#include "services/dispatcher/adapters/slurm/slurm_adapter.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"

namespace trainyard::dispatcher::slurm {
namespace {

constexpr char kConfig[] = "slurm_config";
constexpr char kCluster[] = "slurm_cluster";

absl::Status Check(const AdapterSettings& settings) {
  if (settings.Get(kConfig).empty()) {
    return absl::InvalidArgumentError(
        "--backend=slurm needs --slurm_config=FILE");
  }
  return absl::OkStatus();
}

absl::StatusOr<BackendAdapter> Create(const AdapterSettings& settings) {
  auto loaded = LoadSlurmSettings(settings.Get(kConfig));
  if (!loaded.ok()) return loaded.status();
  auto adapter = SlurmAdapter::Create(*std::move(loaded));
  if (!adapter.ok()) return adapter.status();
  return BackendAdapter{.adapter = std::move(*adapter),
                        .cluster = settings.Get(kCluster)};
}

}  // namespace

absl::Status RegisterSlurmAdapter() {
  return RegisterAdapterFactory(
      "slurm", {.flags = {kConfig, kCluster},
                .usage = "--slurm_config=FILE [--slurm_cluster=slurm]",
                .check = Check,
                .create = Create});
}

}  // namespace trainyard::dispatcher::slurm
