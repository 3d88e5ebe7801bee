// What the scheduler service's tests share (not used by the service): pieces
// of a platform's stored objects (PlatformState), built by hand.
#ifndef TRAINYARD_TESTS_SUPPORT_SCHEDULER_PLATFORM_H_
#define TRAINYARD_TESTS_SUPPORT_SCHEDULER_PLATFORM_H_

#include <cstdint>
#include <string>

#include "services/scheduler/snapshot_builder.h"

namespace trainyard::scheduler::testing {

// The tests' two flavors: "h100", on demand at 2.50 per GPU-hour, and
// "h100-spot", the same GPU on spot at 1.00 per GPU-hour, reclaimed at 5% an
// hour.
inline void AddH100Flavors(PlatformState& st) {
  trainyard::v1::Flavor od;
  od.set_kind(trainyard::v1::FLAVOR_KIND_ON_DEMAND);
  od.set_gpu_model("H100");
  od.mutable_gpu_hour_price()->set_micros(2'500'000);
  st.flavors["h100"] = od;
  trainyard::v1::Flavor spot = od;
  spot.set_kind(trainyard::v1::FLAVOR_KIND_SPOT);
  spot.mutable_gpu_hour_price()->set_micros(1'000'000);
  spot.set_reclaim_rate_per_hour(0.05);
  st.flavors["h100-spot"] = spot;
}

// A node of `pool` with `gpus` GPUs, 64 CPUs and 512 GiB of memory, in
// `block` and `rack`.
inline trainyard::v1::Node MakeNode(
    const std::string& pool, int gpus, const std::string& block,
    const std::string& rack,
    trainyard::v1::NodeState state = trainyard::v1::NODE_STATE_READY) {
  trainyard::v1::Node n;
  n.set_pool(pool);
  n.mutable_capacity()->set_gpus(gpus);
  n.mutable_capacity()->set_cpu_millis(64000);
  n.mutable_capacity()->set_memory_bytes(int64_t{512} << 30);
  n.mutable_topology()->set_block(block);
  n.mutable_topology()->set_rack(rack);
  n.set_state(state);
  return n;
}

}  // namespace trainyard::scheduler::testing

#endif  // TRAINYARD_TESTS_SUPPORT_SCHEDULER_PLATFORM_H_
