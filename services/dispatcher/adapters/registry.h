// Dispatcher backends by name. `trainyard dispatcher --backend=NAME` (and
// `trainyard all`) ask this registry for the adapter of backend NAME; the
// binary knows no concrete adapter type.
//
// A backend registers an AdapterFactory under its name: the flags it reads,
// a check of their values, and a function creating its Adapter and naming
// the cluster it dispatches for. The binary passes the factory the current
// values of those flags (AdapterSettings), so a backend's flags may be
// defined next to its registration (ABSL_FLAG) rather than in main.cc.
//
// Registration is explicit: each backend has a Register...Adapter() function
// in its own folder (adapters/sim/sim_registration.h,
// adapters/slurm/slurm_registration.h) and RegisterBuiltinAdapters()
// (adapters/all.h) calls every one of them; the binary calls that once at
// startup. Adding a backend (e.g. Kubernetes) is: its adapter and its
// RegisterKubernetesAdapter() in adapters/kubernetes/, one line in
// adapters/all.cc, its library in services/dispatcher/CMakeLists.txt (linked
// by trainyard_builtin_adapters); main.cc does not change.
//
// Why not a static registration object in each adapter's library: the linker
// drops an object file of a static library that nothing references, so such
// a registrar only runs in binaries that link the library whole-archive
// ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>); a binary or test that forgets silently
// has no such backend, and the registrars run in an unspecified order before
// main(). An explicit call runs when asked, and all.cc is the one place that
// lists the backends.
//
// Thread-safe.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_REGISTRY_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/dispatcher/adapters/adapter.h"

namespace trainyard::dispatcher {

// A backend's settings: the values of its flags by name, without dashes
// ("sim_config" → "deploy/local/sim-cluster.textproto").
struct AdapterSettings {
  absl::flat_hash_map<std::string, std::string> values;

  // The value of flag `name`; "" when it has none.
  std::string Get(std::string_view name) const;
};

// What a factory creates: the adapter and the cluster it dispatches for.
struct BackendAdapter {
  std::unique_ptr<Adapter> adapter;
  // The {cluster} of clusters/{cluster}.
  std::string cluster;
  // How logs name the backend (e.g. "sim-remote" for a sim cluster reached
  // over gRPC); empty = the registered name.
  std::string label;
  // What runs beside the adapter for as long as it does, destroyed before it
  // (the in-process sim's own SimClusterService with --sim_grpc_listen);
  // null for most backends.
  std::shared_ptr<void> companion;
};

struct AdapterFactory {
  // The flags the backend reads (names without dashes): the keys of the
  // settings its functions get.
  std::vector<std::string> flags;
  // Those flags as the usage message shows them, e.g.
  // "--slurm_config=FILE [--slurm_cluster=slurm]".
  std::string usage;
  // Whether the settings give the backend what it needs, checked before
  // anything starts: INVALID_ARGUMENT naming the flags (`trainyard
  // dispatcher` exits 2 with it). Null: nothing to check.
  std::function<absl::Status(const AdapterSettings&)> check;
  // Whether `trainyard all` (which runs a dispatcher only when asked) runs one
  // of this backend, the one --backend selects, with these settings. Null:
  // always.
  std::function<bool(const AdapterSettings&)> runs_in_all;
  // Creates the adapter (after `check`). May block a while, e.g. for a
  // remote cluster to come up. Required.
  std::function<absl::StatusOr<BackendAdapter>(const AdapterSettings&)> create;
};

// Registers `factory` as backend `name`. INVALID_ARGUMENT for an empty name
// or a factory without `create`; ALREADY_EXISTS when the name is taken (the
// first registration stays).
absl::Status RegisterAdapterFactory(std::string name, AdapterFactory factory);

// The registered backend names, sorted.
std::vector<std::string> AdapterNames();

// The factory of backend `name`; INVALID_ARGUMENT naming the known backends
// when there is none.
absl::StatusOr<AdapterFactory> FindAdapterFactory(std::string_view name);

// Checks the settings (AdapterFactory::check) and creates backend `name`'s
// adapter; the label defaults to `name`.
absl::StatusOr<BackendAdapter> CreateAdapter(std::string_view name,
                                             const AdapterSettings& settings);

}  // namespace trainyard::dispatcher

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_REGISTRY_H_
