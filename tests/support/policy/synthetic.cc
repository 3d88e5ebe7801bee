#include "tests/support/policy/synthetic.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>

namespace trainyard::scheduler::policy {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr TimeMicros kHour = int64_t{3600} * 1000 * 1000;
constexpr GpuModelId kH100 = 1;
constexpr GpuModelId kA100 = 2;

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

}  // namespace

PendingJob MakeSyntheticJob(const Snapshot& s, JobId id, std::mt19937_64& rng) {
  PendingJob job;
  job.id = id;
  job.name = "job-" + std::to_string(id);
  job.queue = static_cast<QueueId>(
      Uniform(rng, 0, static_cast<int64_t>(s.queues.size()) - 1));
  const int64_t p = Uniform(rng, 0, 99);
  job.priority_class = p < 10 ? 2 : (p < 80 ? 1 : 0);
  job.submit_time = s.now - Uniform(rng, 0, 3 * kHour);
  // GPUs per gang: 55% 1, 15% 2, 10% 4, 10% 8, 5% 16, 3% 32, 2% 64.
  const int64_t g = Uniform(rng, 0, 99);
  int64_t gpus_per_worker = 1;
  int32_t workers = 1;
  if (g < 55) {
    gpus_per_worker = 1;
  } else if (g < 70) {
    gpus_per_worker = 2;
  } else if (g < 80) {
    gpus_per_worker = 4;
  } else if (g < 90) {
    gpus_per_worker = 8;
  } else if (g < 95) {
    gpus_per_worker = 8;
    workers = 2;
  } else if (g < 98) {
    gpus_per_worker = 8;
    workers = 4;
  } else {
    gpus_per_worker = 8;
    workers = 8;
  }
  job.workers = workers;
  job.worker = {.gpus = gpus_per_worker,
                .gpu_model = Uniform(rng, 0, 9) < 2 ? kH100 : kAnyGpuModel,
                .cpu_millis = 12000 * gpus_per_worker,
                .memory_bytes = 96 * kGiB * gpus_per_worker};
  if (workers > 1) {
    const int64_t t = Uniform(rng, 0, 9);
    job.required_topology = t < 2   ? TopologyLevel::kRack
                            : t < 4 ? TopologyLevel::kBlock
                                    : TopologyLevel::kNone;
  }
  const int64_t sp = Uniform(rng, 0, 9);
  job.spot_policy = sp < 3   ? SpotPolicy::kNever
                    : sp < 8 ? SpotPolicy::kAllowed
                    : sp < 9 ? SpotPolicy::kPreferred
                             : SpotPolicy::kRequired;
  return job;
}

Snapshot MakeSyntheticSnapshot(const SyntheticSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  Snapshot s;
  s.now = 500000 * kHour;
  s.gpu_model_names = {"any", "h100", "a100"};
  s.flavors = {
      {.name = "h100-ondemand",
       .kind = FlavorKind::kOnDemand,
       .price_micros_per_gpu_hour = 4000000},
      {.name = "h100-reserved",
       .kind = FlavorKind::kReserved,
       .price_micros_per_gpu_hour = 2500000},
      {.name = "a100-ondemand",
       .kind = FlavorKind::kOnDemand,
       .price_micros_per_gpu_hour = 2000000},
      {.name = "h100-spot",
       .kind = FlavorKind::kSpot,
       .price_micros_per_gpu_hour = 1500000,
       .reclaim_rate_per_hour = 0.05},
  };
  s.priority_classes = {{.name = "low", .value = 0},
                        {.name = "default", .value = 100},
                        {.name = "high", .value = 1000, .preemptible = false}};
  // Nodes: block b has flavor pattern 0,1,2,0,3 (h100 on-demand twice).
  constexpr FlavorId kBlockFlavor[] = {0, 1, 2, 0, 3};
  std::vector<int64_t> flavor_gpus(s.flavors.size(), 0);
  s.nodes.reserve(spec.nodes);
  const int nodes_per_block = spec.nodes_per_rack * spec.racks_per_block;
  for (int n = 0; n < spec.nodes; ++n) {
    const int block = n / nodes_per_block;
    const FlavorId f = kBlockFlavor[block % 5];
    Node node;
    node.name = "node-" + std::to_string(n);
    node.cluster = 0;
    node.pool = f;
    node.flavor = f;
    node.gpu_model = f == 2 ? kA100 : kH100;
    node.capacity = {spec.gpus_per_node, 12000 * spec.gpus_per_node,
                     96 * kGiB * spec.gpus_per_node};
    node.block = block;
    node.rack = n / spec.nodes_per_rack;
    node.schedulable = Uniform(rng, 0, 199) != 0;
    flavor_gpus[f] += spec.gpus_per_node;
    s.nodes.push_back(std::move(node));
  }
  // Cohorts: ten roots, the rest children of the root before them.
  for (int c = 0; c < spec.cohorts; ++c) {
    Cohort cohort{.name = "cohort-" + std::to_string(c)};
    if (c % 10 != 0) cohort.parent = c / 10 * 10;
    s.cohorts.push_back(std::move(cohort));
  }
  // Queues: each has quota for two or three flavors; nominal quotas add up to
  // about the capacity of the flavor.
  for (int q = 0; q < spec.queues; ++q) {
    Queue queue;
    queue.name = "queue-" + std::to_string(q);
    queue.tenant = "tenant-" + std::to_string(q % 200);
    if (spec.cohorts > 0) queue.cohort = q % spec.cohorts;
    queue.weight = 1.0 + static_cast<double>(q % 4);
    queue.strategy = q % 10 == 0 ? QueueingStrategy::kStrictFifo
                                 : QueueingStrategy::kBestEffortFifo;
    std::vector<FlavorId> flavors = {static_cast<FlavorId>(q % 2 == 0 ? 0 : 1),
                                     2};
    if (q % 3 != 0) flavors.push_back(3);
    for (FlavorId f : flavors) {
      FlavorQuota fq{.flavor = f};
      const int64_t nominal =
          std::max<int64_t>(8, flavor_gpus[f] * 2 / spec.queues);
      ResourceQuota rq{.nominal = nominal};
      if (q % 5 == 1) rq.borrowing_limit = nominal;
      if (q % 7 == 2) rq.lending_limit = nominal / 2;
      fq.resources[static_cast<int>(Resource::kGpu)] = rq;
      queue.quotas.push_back(fq);
    }
    s.queues.push_back(std::move(queue));
  }
  // Running work: whole or partial nodes, charged to a queue with quota for
  // the node's flavor.
  JobId next_id = 1;
  for (int n = 0; n < spec.nodes; ++n) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) >=
        spec.busy_fraction) {
      continue;
    }
    Node& node = s.nodes[n];
    const int64_t gpus = Uniform(rng, 1, spec.gpus_per_node);
    QueueId q = 0;
    for (int tries = 0; tries < 20; ++tries) {
      q = static_cast<QueueId>(Uniform(rng, 0, spec.queues - 1));
      bool ok = false;
      for (const FlavorQuota& fq : s.queues[q].quotas)
        ok |= fq.flavor == node.flavor;
      if (ok) break;
    }
    const Resources r = {gpus, 12000 * gpus, 96 * kGiB * gpus};
    node.used += r;
    s.running.push_back({.job = next_id++,
                         .queue = q,
                         .flavor = node.flavor,
                         .priority_class = 1,
                         .placement = {static_cast<NodeId>(n)},
                         .resources = r,
                         .start_time = s.now - Uniform(rng, 0, 10 * kHour)});
  }
  s.pending.reserve(spec.pending);
  for (int j = 0; j < spec.pending; ++j) {
    s.pending.push_back(MakeSyntheticJob(s, next_id++, rng));
  }
  return s;
}

}  // namespace trainyard::scheduler::policy
