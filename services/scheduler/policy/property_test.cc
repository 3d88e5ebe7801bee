// Property test: invariants of Decide() over many random small snapshots
// (seeded, so failures reproduce).
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/pricing.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::ApplyDecisions;
using testing::kGiB;
using testing::kHour;

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in [lo, hi].
  int64_t Int(int64_t lo, int64_t hi) {
    return lo +
           static_cast<int64_t>(gen_() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(int percent) { return Int(0, 99) < percent; }

 private:
  std::mt19937_64 gen_;
};

// Usage per (queue, flavor, resource), keyed for the oracle.
using UsageMap = std::map<std::tuple<QueueId, FlavorId, int>, int64_t>;

const ResourceQuota* FindQuota(const Snapshot& s, QueueId q, FlavorId f,
                               int r) {
  for (const FlavorQuota& fq : s.queues[q].quotas) {
    if (fq.flavor == f && fq.resources[r].has_value()) return &*fq.resources[r];
  }
  return nullptr;
}

// Independent check of the quota invariant, written as a recursion over the
// tree rather than QuotaTree's incremental bookkeeping: every queue uses at
// most nominal + borrowing limit, and every root (a queue without cohort or a
// root cohort) uses at most its subtree quota, where a child contributes its
// usage and quota beyond what its lending limit withholds.
bool QuotaInvariantHolds(const Snapshot& s, const UsageMap& usage,
                         std::string* why) {
  for (FlavorId f = 0; f < static_cast<FlavorId>(s.flavors.size()); ++f) {
    for (int r = 0; r < kNumResources; ++r) {
      // (quota, usage) pushed up from each child of each cohort.
      std::vector<int64_t> cohort_quota(s.cohorts.size(), 0),
          cohort_usage(s.cohorts.size(), 0);
      std::vector<bool> cohort_tracked(s.cohorts.size(), false);
      auto push = [&](std::optional<CohortId> parent, int64_t quota,
                      int64_t used, std::optional<int64_t> lending) {
        const int64_t withheld =
            lending.has_value() ? std::max<int64_t>(0, quota - *lending) : 0;
        cohort_quota[*parent] += quota - withheld;
        cohort_usage[*parent] += std::max<int64_t>(0, used - withheld);
        cohort_tracked[*parent] = true;
      };
      for (QueueId q = 0; q < static_cast<QueueId>(s.queues.size()); ++q) {
        const ResourceQuota* rq = FindQuota(s, q, f, r);
        if (rq == nullptr) continue;
        auto it = usage.find({q, f, r});
        const int64_t used = it == usage.end() ? 0 : it->second;
        if (!s.queues[q].cohort.has_value()) {
          if (used > rq->nominal) {
            *why = s.queues[q].name + " uses more than nominal";
            return false;
          }
          continue;
        }
        if (rq->borrowing_limit.has_value() &&
            used > rq->nominal + *rq->borrowing_limit) {
          *why = s.queues[q].name + " exceeds its borrowing limit";
          return false;
        }
        push(s.queues[q].cohort, rq->nominal, used, rq->lending_limit);
      }
      // Cohorts deepest first.
      std::vector<int> depth(s.cohorts.size(), 0);
      for (size_t c = 0; c < s.cohorts.size(); ++c) {
        for (auto p = s.cohorts[c].parent; p.has_value();
             p = s.cohorts[*p].parent)
          ++depth[c];
      }
      std::vector<int> order(s.cohorts.size());
      for (size_t c = 0; c < order.size(); ++c) order[c] = static_cast<int>(c);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return depth[a] > depth[b]; });
      for (int c : order) {
        if (!cohort_tracked[c]) continue;
        if (s.cohorts[c].parent.has_value()) {
          push(s.cohorts[c].parent, cohort_quota[c], cohort_usage[c],
               std::nullopt);
        } else if (cohort_usage[c] > cohort_quota[c]) {
          *why = "cohort " + s.cohorts[c].name + " over its subtree quota";
          return false;
        }
      }
    }
  }
  return true;
}

void Charge(UsageMap& usage, const Snapshot& s, QueueId q, FlavorId f,
            const Resources& amount) {
  for (int r = 0; r < kNumResources; ++r) {
    if (FindQuota(s, q, f, r) != nullptr) {
      usage[{q, f, r}] += amount.Get(static_cast<Resource>(r));
    }
  }
}

Snapshot RandomSnapshot(Rng& rng) {
  Snapshot s;
  s.now = 1000 * kHour;
  const int num_flavors = static_cast<int>(rng.Int(1, 3));
  for (int f = 0; f < num_flavors; ++f) {
    s.flavors.push_back({.name = "f" + std::to_string(f),
                         .kind = static_cast<FlavorKind>(rng.Int(0, 2)),
                         .price_micros_per_gpu_hour = rng.Int(0, 4'000'000)});
  }
  const int num_nodes = static_cast<int>(rng.Int(1, 12));
  for (int n = 0; n < num_nodes; ++n) {
    Node node{
        .name = "n" + std::to_string(n),
        .flavor = static_cast<FlavorId>(rng.Int(0, num_flavors - 1)),
        .gpu_model = static_cast<GpuModelId>(rng.Int(1, 2)),
        .capacity = {.gpus = std::vector<int64_t>{0, 2, 4, 8, 8}[rng.Int(0, 4)],
                     .cpu_millis = rng.Int(4, 64) * 1000,
                     .memory_bytes = rng.Int(8, 512) * kGiB},
        .block = rng.Chance(10) ? kNoLabel
                                : static_cast<TopologyLabel>(rng.Int(0, 2)),
        .schedulable = rng.Chance(90)};
    node.rack =
        rng.Chance(10) || node.block == kNoLabel
            ? kNoLabel
            : static_cast<TopologyLabel>(node.block * 3 + rng.Int(0, 2));
    if (rng.Chance(40)) {
      node.used = {.gpus = rng.Int(0, node.capacity.gpus),
                   .cpu_millis = rng.Int(0, node.capacity.cpu_millis),
                   .memory_bytes = rng.Int(0, node.capacity.memory_bytes)};
    }
    // Two clusters; racks and blocks never span them.
    node.cluster = node.block != kNoLabel ? node.block % 2
                                          : static_cast<int32_t>(rng.Int(0, 1));
    s.nodes.push_back(node);
  }
  const int num_cohorts = static_cast<int>(rng.Int(0, 3));
  for (int c = 0; c < num_cohorts; ++c) {
    std::optional<CohortId> parent;
    if (c > 0 && rng.Chance(50))
      parent = static_cast<CohortId>(rng.Int(0, c - 1));
    s.cohorts.push_back({.name = "c" + std::to_string(c), .parent = parent});
  }
  const int num_queues = static_cast<int>(rng.Int(1, 4));
  for (int q = 0; q < num_queues; ++q) {
    Queue queue{.name = "q" + std::to_string(q),
                .weight = std::vector<double>{0.5, 1.0, 2.0}[rng.Int(0, 2)],
                .strategy = rng.Chance(30) ? QueueingStrategy::kStrictFifo
                                           : QueueingStrategy::kBestEffortFifo};
    if (num_cohorts > 0 && rng.Chance(75)) {
      queue.cohort = static_cast<CohortId>(rng.Int(0, num_cohorts - 1));
    }
    std::vector<FlavorId> flavors;
    for (FlavorId f = 0; f < num_flavors; ++f) flavors.push_back(f);
    for (size_t i = flavors.size(); i > 1; --i)
      std::swap(flavors[i - 1], flavors[rng.Int(0, i - 1)]);
    for (FlavorId f : flavors) {
      if (rng.Chance(25)) continue;
      FlavorQuota fq{.flavor = f};
      for (int r = 0; r < kNumResources; ++r) {
        if (r != 0 && rng.Chance(70)) continue;
        const int64_t unit = r == 0 ? 1 : (r == 1 ? 1000 : kGiB);
        ResourceQuota rq{.nominal = rng.Int(0, r == 0 ? 24 : 64) * unit};
        if (rng.Chance(40)) rq.borrowing_limit = rng.Int(0, 16) * unit;
        if (rng.Chance(40))
          rq.lending_limit = rng.Int(0, rq.nominal / unit) * unit;
        fq.resources[r] = rq;
      }
      queue.quotas.push_back(fq);
    }
    s.queues.push_back(queue);
  }
  const int num_priorities = static_cast<int>(rng.Int(1, 3));
  for (int p = 0; p < num_priorities; ++p) {
    s.priority_classes.push_back(
        {.name = "p" + std::to_string(p),
         .value = static_cast<int32_t>(rng.Int(-5, 5))});
  }
  // Running work, kept only while the quota invariant holds.
  UsageMap usage;
  for (int i = 0, tries = static_cast<int>(rng.Int(0, 6)); i < tries; ++i) {
    const QueueId q = static_cast<QueueId>(rng.Int(0, num_queues - 1));
    if (s.queues[q].quotas.empty()) continue;
    const FlavorId f =
        s.queues[q].quotas[rng.Int(0, s.queues[q].quotas.size() - 1)].flavor;
    const Resources amount{.gpus = rng.Int(1, 8),
                           .cpu_millis = rng.Int(1, 8) * 1000,
                           .memory_bytes = rng.Int(1, 8) * kGiB};
    UsageMap trial = usage;
    Charge(trial, s, q, f, amount);
    std::string why;
    if (!QuotaInvariantHolds(s, trial, &why)) continue;
    usage = trial;
    s.running.push_back(
        {.job = 1000 + i, .queue = q, .flavor = f, .resources = amount});
  }
  const int num_jobs = static_cast<int>(rng.Int(0, 12));
  for (int j = 0; j < num_jobs; ++j) {
    s.pending.push_back(PendingJob{
        .id = j + 1,
        .queue = static_cast<QueueId>(rng.Int(0, num_queues - 1)),
        .priority_class =
            static_cast<PriorityClassId>(rng.Int(0, num_priorities - 1)),
        .submit_time = s.now - rng.Int(0, 3 * kHour),
        .workers = static_cast<int32_t>(rng.Int(1, 4)),
        .worker = {.gpus = std::vector<int64_t>{0, 1, 2, 4, 8}[rng.Int(0, 4)],
                   .gpu_model = static_cast<GpuModelId>(rng.Int(0, 2)),
                   .cpu_millis = rng.Int(1, 16) * 500,
                   .memory_bytes = rng.Int(1, 32) * kGiB},
        .required_topology = static_cast<TopologyLevel>(rng.Int(0, 2)),
        .spot_policy = static_cast<SpotPolicy>(rng.Int(0, 3))});
  }
  return s;
}

// After a cycle: no node is over-committed (`free`: what each node has left
// once the decisions take effect) and the quota invariant holds for `usage`.
void CheckCapacityAndQuota(const Snapshot& s,
                           const std::vector<Resources>& free,
                           const UsageMap& usage) {
  for (size_t n = 0; n < free.size(); ++n) {
    ASSERT_GE(free[n].gpus, 0) << "node " << n;
    ASSERT_GE(free[n].cpu_millis, 0) << "node " << n;
    ASSERT_GE(free[n].memory_bytes, 0) << "node " << n;
  }
  std::string why;
  ASSERT_TRUE(QuotaInvariantHolds(s, usage, &why)) << why;
}

TEST(PolicyPropertyTest, InvariantsHoldOnRandomSnapshots) {
  Rng rng(20261123);
  int admitted = 0, pending = 0;
  std::set<PendingReason> reasons;
  for (int iteration = 0; iteration < 1000; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    const Snapshot s = RandomSnapshot(rng);
    ASSERT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
    const Decisions d = Decide(s);

    // Same snapshot => same decisions, also with the pending list reversed.
    ASSERT_EQ(Decide(s), d);
    Snapshot reversed = s;
    std::reverse(reversed.pending.begin(), reversed.pending.end());
    ASSERT_EQ(Decide(reversed), d);

    // Every job is decided exactly once.
    std::map<JobId, const PendingJob*> jobs;
    for (const PendingJob& j : s.pending) jobs[j.id] = &j;
    std::set<JobId> seen;
    for (const Admission& a : d.admissions)
      ASSERT_TRUE(seen.insert(a.job).second);
    for (const PendingDecision& p : d.pending)
      ASSERT_TRUE(seen.insert(p.job).second);
    ASSERT_EQ(seen.size(), s.pending.size());

    // Capacity, placement constraints and gang atomicity.
    std::vector<Resources> free;
    for (const Node& n : s.nodes) {
      Resources f = n.capacity;
      f -= n.used;
      free.push_back(f);
    }
    UsageMap usage;
    for (const RunningAttempt& r : s.running)
      Charge(usage, s, r.queue, r.flavor, r.resources);
    for (const Admission& a : d.admissions) {
      const PendingJob& job = *jobs.at(a.job);
      ASSERT_EQ(a.queue, job.queue);
      ASSERT_EQ(static_cast<int32_t>(a.worker_nodes.size()), job.workers)
          << "gang split";
      const bool spot = s.flavors[a.flavor].kind == FlavorKind::kSpot;
      if (job.spot_policy == SpotPolicy::kNever) {
        ASSERT_FALSE(spot);
      }
      if (job.spot_policy == SpotPolicy::kRequired) {
        ASSERT_TRUE(spot);
      }
      bool listed = false;
      for (const FlavorQuota& fq : s.queues[a.queue].quotas)
        listed |= fq.flavor == a.flavor;
      ASSERT_TRUE(listed);
      std::set<TopologyLabel> racks, blocks;
      std::set<int32_t> clusters;
      for (NodeId n : a.worker_nodes) {
        const Node& node = s.nodes[n];
        ASSERT_EQ(node.flavor, a.flavor);
        clusters.insert(node.cluster);
        ASSERT_TRUE(node.schedulable);
        if (job.worker.gpus > 0 && job.worker.gpu_model != kAnyGpuModel) {
          ASSERT_EQ(node.gpu_model, job.worker.gpu_model);
        }
        free[n] -= job.worker.AsResources();
        racks.insert(node.rack);
        blocks.insert(node.block);
      }
      ASSERT_EQ(clusters.size(), 1u) << "a gang never spans clusters";
      if (job.required_topology == TopologyLevel::kRack) {
        ASSERT_EQ(racks.size(), 1u);
        ASSERT_NE(*racks.begin(), kNoLabel);
      }
      if (job.required_topology == TopologyLevel::kBlock) {
        ASSERT_EQ(blocks.size(), 1u);
        ASSERT_NE(*blocks.begin(), kNoLabel);
      }
      Charge(usage, s, a.queue, a.flavor,
             job.worker.AsResources() * job.workers);
    }
    ASSERT_NO_FATAL_FAILURE(CheckCapacityAndQuota(s, free, usage));

    // Pending jobs: a code-prefixed message and consecutive positions per
    // queue.
    std::map<QueueId, int32_t> last_position;
    for (const PendingDecision& p : d.pending) {
      ASSERT_TRUE(absl::StartsWith(
          p.message.str(), std::string(PendingReasonCode(p.reason)) + ": "))
          << p.message;
      ASSERT_EQ(p.position, ++last_position[p.queue]);
      reasons.insert(p.reason);
    }
    admitted += static_cast<int>(d.admissions.size());
    pending += static_cast<int>(d.pending.size());
  }
  // The generator exercises both outcomes and every scheduling reason.
  EXPECT_GT(admitted, 500);
  EXPECT_GT(pending, 500);
  EXPECT_EQ(reasons.size(), 5u);
}

// Random preemption policies, placed running gangs with priorities, start and
// checkpoint times on top of RandomSnapshot().
Snapshot RandomPreemptionSnapshot(Rng& rng) {
  Snapshot s = RandomSnapshot(rng);
  for (Queue& q : s.queues) {
    q.within_queue_preemption =
        static_cast<WithinQueuePreemption>(rng.Int(0, 2));
    q.reclaim_within_cohort = static_cast<ReclaimWithinCohort>(rng.Int(0, 2));
    q.fair_share_preemption = rng.Chance(50);
    q.min_runtime = rng.Chance(30) ? rng.Int(0, 3 * kHour) : 0;
  }
  for (Flavor& f : s.flavors) {
    if (rng.Chance(30)) f.restart_overhead_micros = rng.Int(0, kHour);
  }
  for (PriorityClass& pc : s.priority_classes) pc.preemptible = rng.Chance(80);
  UsageMap usage;
  for (const RunningAttempt& r : s.running)
    Charge(usage, s, r.queue, r.flavor, r.resources);
  for (RunningAttempt& r : s.running) {
    r.priority_class =
        static_cast<PriorityClassId>(rng.Int(0, s.priority_classes.size() - 1));
    r.start_time = s.now - rng.Int(0, 4 * kHour);
  }
  for (int i = 0, tries = static_cast<int>(rng.Int(0, 16)); i < tries; ++i) {
    const QueueId q = static_cast<QueueId>(rng.Int(0, s.queues.size() - 1));
    if (s.queues[q].quotas.empty()) continue;
    const FlavorId f =
        s.queues[q].quotas[rng.Int(0, s.queues[q].quotas.size() - 1)].flavor;
    std::vector<NodeId> nodes;
    for (NodeId n = 0; n < static_cast<NodeId>(s.nodes.size()); ++n) {
      if (s.nodes[n].flavor == f && rng.Chance(50)) nodes.push_back(n);
    }
    if (nodes.empty() || nodes.size() > 3) continue;
    int64_t gpus = 8;
    bool room = true;
    for (NodeId n : nodes) {
      Resources free = s.nodes[n].capacity;
      free -= s.nodes[n].used;
      gpus = std::min(gpus, free.gpus);
      room &= free.cpu_millis >= 1000 && free.memory_bytes >= kGiB;
    }
    if (!room || gpus <= 0) continue;
    gpus = rng.Int(1, gpus);
    const Resources worker{gpus, 1000, kGiB};
    const Resources total = worker * static_cast<int64_t>(nodes.size());
    UsageMap trial = usage;
    Charge(trial, s, q, f, total);
    std::string why;
    if (!QuotaInvariantHolds(s, trial, &why)) continue;
    usage = trial;
    for (NodeId n : nodes) s.nodes[n].used += worker;
    RunningAttempt r{.job = 2000 + i,
                     .queue = q,
                     .flavor = f,
                     .priority_class = static_cast<PriorityClassId>(
                         rng.Int(0, s.priority_classes.size() - 1)),
                     .placement = nodes,
                     .resources = total,
                     .start_time = s.now - rng.Int(0, 4 * kHour)};
    if (rng.Chance(60))
      r.last_checkpoint_time = r.start_time + rng.Int(0, s.now - r.start_time);
    s.running.push_back(r);
  }
  return s;
}

std::optional<CohortId> RootCohort(const Snapshot& s, QueueId q) {
  std::optional<CohortId> c = s.queues[q].cohort;
  while (c.has_value() && s.cohorts[*c].parent.has_value())
    c = s.cohorts[*c].parent;
  return c;
}

TEST(PolicyPropertyTest, InvariantsHoldWithPreemption) {
  Rng rng(20261124);
  int preemptions = 0, stability_checks = 0, for_capacity = 0;
  std::set<PreemptionReason> reasons;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    const Snapshot s = RandomPreemptionSnapshot(rng);
    ASSERT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
    PolicyConfig config;
    config.min_runtime_guarantee = rng.Chance(30) ? kHour : 0;
    config.preempt_for_capacity = rng.Chance(30);
    const Decisions d = Decide(s, config);

    // Determinism, also with the pending and running lists reversed.
    ASSERT_EQ(Decide(s, config), d);
    Snapshot reversed = s;
    std::reverse(reversed.pending.begin(), reversed.pending.end());
    std::reverse(reversed.running.begin(), reversed.running.end());
    ASSERT_EQ(Decide(reversed, config), d);

    std::map<JobId, const PendingJob*> jobs;
    for (const PendingJob& j : s.pending) jobs[j.id] = &j;
    std::map<JobId, const RunningAttempt*> running;
    for (const RunningAttempt& r : s.running) running[r.job] = &r;
    std::set<JobId> admitted;
    for (const Admission& a : d.admissions) {
      ASSERT_TRUE(admitted.insert(a.job).second);
      ASSERT_EQ(static_cast<int32_t>(a.worker_nodes.size()),
                jobs.at(a.job)->workers)
          << "gang split";
    }

    // Capacity and quota after removing the victims (whole gangs) and adding
    // the admissions.
    std::vector<Resources> free;
    for (const Node& n : s.nodes) {
      Resources f = n.capacity;
      f -= n.used;
      free.push_back(f);
    }
    std::set<JobId> victims;
    for (const Preemption& p : d.preemptions) {
      ASSERT_TRUE(victims.insert(p.victim).second) << "preempted twice";
      ASSERT_TRUE(running.count(p.victim)) << "victim not running";
      const RunningAttempt& r = *running.at(p.victim);
      // Preempted work is preemptible.
      const PriorityClass& vpc = s.priority_classes[r.priority_class];
      ASSERT_TRUE(vpc.preemptible);
      ASSERT_GE(s.now - r.start_time, config.min_runtime_guarantee);
      ASSERT_GE(s.now - r.start_time, s.queues[r.queue].min_runtime);
      ASSERT_EQ(p.victim_queue, r.queue);
      ASSERT_EQ(p.grace_period, config.preemption_grace_period);
      ASSERT_TRUE(admitted.count(p.preemptor)) << "preemptor not admitted";
      const PendingJob& preemptor = *jobs.at(p.preemptor);
      const Queue& pq = s.queues[preemptor.queue];
      const int32_t pv = s.priority_classes[preemptor.priority_class].value;
      ASSERT_TRUE(absl::StartsWith(
          p.message, std::string(PreemptionReasonCode(p.reason)) + ": "));
      switch (p.reason) {
        case PreemptionReason::kPreemptedByPriority:
          if (r.queue != preemptor.queue ||
              pq.within_queue_preemption == WithinQueuePreemption::kNever) {
            // For node capacity (rule 4): strictly lower priority.
            ASSERT_TRUE(config.preempt_for_capacity);
            ASSERT_LT(vpc.value, pv);
            ++for_capacity;
            break;
          }
          ASSERT_NE(pq.within_queue_preemption, WithinQueuePreemption::kNever);
          ASSERT_TRUE(vpc.value < pv ||
                      (vpc.value == pv &&
                       pq.within_queue_preemption ==
                           WithinQueuePreemption::kLowerOrNewerEqualPriority &&
                       r.start_time > preemptor.submit_time));
          break;
        case PreemptionReason::kReclaimedByCohort:
          ASSERT_NE(r.queue, preemptor.queue);
          ASSERT_TRUE(RootCohort(s, r.queue).has_value());
          ASSERT_EQ(RootCohort(s, r.queue), RootCohort(s, preemptor.queue));
          ASSERT_NE(pq.reclaim_within_cohort, ReclaimWithinCohort::kNever);
          if (pq.reclaim_within_cohort == ReclaimWithinCohort::kLowerPriority) {
            ASSERT_LT(vpc.value, pv);
          }
          break;
        case PreemptionReason::kFairShare:
          ASSERT_NE(r.queue, preemptor.queue);
          ASSERT_TRUE(RootCohort(s, r.queue).has_value());
          ASSERT_EQ(RootCohort(s, r.queue), RootCohort(s, preemptor.queue));
          ASSERT_TRUE(pq.fair_share_preemption);
          ASSERT_LE(vpc.value, pv);
          break;
      }
      reasons.insert(p.reason);
      const int64_t k = static_cast<int64_t>(r.placement.size());
      for (NodeId n : r.placement) {
        free[n] += Resources{r.resources.gpus / k, r.resources.cpu_millis / k,
                             r.resources.memory_bytes / k};
      }
    }
    UsageMap usage;
    for (const RunningAttempt& r : s.running) {
      if (!victims.count(r.job))
        Charge(usage, s, r.queue, r.flavor, r.resources);
    }
    for (const Admission& a : d.admissions) {
      const PendingJob& job = *jobs.at(a.job);
      for (NodeId n : a.worker_nodes) {
        ASSERT_EQ(s.nodes[n].flavor, a.flavor);
        free[n] -= job.worker.AsResources();
      }
      Charge(usage, s, a.queue, a.flavor,
             job.worker.AsResources() * job.workers);
    }
    ASSERT_NO_FATAL_FAILURE(CheckCapacityAndQuota(s, free, usage));
    preemptions += static_cast<int>(d.preemptions.size());

    // Stability: once the decisions are applied (victims pending again),
    // fair share never preempts back from a queue it just preempted for,
    // and a victim of a preemption for capacity never preempts its
    // preemptor by priority.
    std::set<std::pair<QueueId, QueueId>> fair;  // (preemptor q, victim q)
    // (preemptor, victim) of preemptions for capacity.
    std::set<std::pair<JobId, JobId>> by_priority;
    for (const Preemption& p : d.preemptions) {
      if (p.reason == PreemptionReason::kFairShare)
        fair.insert({jobs.at(p.preemptor)->queue, p.victim_queue});
      if (p.reason == PreemptionReason::kPreemptedByPriority &&
          p.victim_queue != jobs.at(p.preemptor)->queue) {
        by_priority.insert({p.preemptor, p.victim});
      }
    }
    if (fair.empty() && by_priority.empty()) continue;
    ++stability_checks;
    const Snapshot next = ApplyDecisions(s, d);
    ASSERT_TRUE(ValidateSnapshot(next).ok()) << ValidateSnapshot(next);
    const Decisions again = Decide(next, config);
    std::map<JobId, QueueId> next_queue;
    for (const PendingJob& j : next.pending) next_queue[j.id] = j.queue;
    for (const Preemption& p : again.preemptions) {
      if (p.reason == PreemptionReason::kPreemptedByPriority) {
        ASSERT_FALSE(by_priority.count({p.victim, p.preemptor}))
            << "preempted back by priority: " << p.message;
      }
      if (p.reason != PreemptionReason::kFairShare) continue;
      ASSERT_FALSE(fair.count({p.victim_queue, next_queue.at(p.preemptor)}))
          << "fair share preempted back: " << p.message;
    }
  }
  EXPECT_GT(preemptions, 100);
  EXPECT_GT(stability_checks, 0);
  EXPECT_GE(for_capacity, 5);
  EXPECT_EQ(reasons.size(), 3u);
}

// Fair share only: a cohort with an idle lender and two queues a and b whose
// 2-GPU jobs fill every node; a submits 2-GPU jobs. Applying the decisions
// and re-running Decide never lets b preempt back from a (the rule's
// guarantee: after a's last preemption, share(a) <= share(b), and b would
// need share(b) < share(a)). Free capacity and leftovers are excluded here:
// a queue that borrows newly free capacity may legitimately be preempted.
TEST(PolicyPropertyTest, FairSharePreemptionIsStable) {
  Rng rng(20261125);
  int preempted = 0;
  for (int iteration = 0; iteration < 2000; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Snapshot s;
    s.now = 1000 * kHour;
    s.flavors.push_back({.name = "f"});
    for (int p = 0; p < 2; ++p) {
      s.priority_classes.push_back(
          {.name = "p" + std::to_string(p), .value = p});
    }
    s.cohorts.push_back({.name = "c"});
    const int num_nodes = static_cast<int>(rng.Int(1, 4));
    for (int n = 0; n < num_nodes; ++n) {
      s.nodes.push_back({.name = "n" + std::to_string(n),
                         .capacity = {8, 64000, 512 * kGiB},
                         .block = 0,
                         .rack = 0});
    }
    const std::vector<int64_t> nominal = {8 * num_nodes, rng.Int(0, 4) * 2,
                                          rng.Int(0, 4) * 2};
    for (int q = 0; q < 3; ++q) {
      Queue queue{.name = std::vector<std::string>{"l", "a", "b"}[q],
                  .cohort = 0,
                  .weight = std::vector<double>{0.5, 1.0, 2.0}[rng.Int(0, 2)],
                  .fair_share_preemption = q > 0};
      FlavorQuota fq{.flavor = 0};
      fq.resources[0] = ResourceQuota{.nominal = nominal[q]};
      queue.quotas.push_back(fq);
      s.queues.push_back(queue);
    }
    JobId id = 100;
    for (NodeId n = 0; n < num_nodes; ++n) {
      for (int k = 0; k < 4; ++k) {
        s.nodes[n].used.gpus += 2;
        s.running.push_back(
            {.job = id++,
             .queue = static_cast<QueueId>(rng.Int(1, 2)),
             .priority_class = static_cast<PriorityClassId>(rng.Int(0, 1)),
             .placement = {n},
             .resources = {.gpus = 2},
             .start_time = s.now - rng.Int(1, 4 * kHour)});
      }
    }
    for (int j = 0, k = static_cast<int>(rng.Int(1, 8)); j < k; ++j) {
      s.pending.push_back(
          {.id = j + 1,
           .queue = 1,
           .priority_class = static_cast<PriorityClassId>(rng.Int(0, 1)),
           .submit_time = s.now - rng.Int(0, kHour),
           .workers = 1,
           .worker = {.gpus = 2}});
    }
    ASSERT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
    const Decisions d = Decide(s);
    for (const Preemption& p : d.preemptions) {
      ASSERT_EQ(p.reason, PreemptionReason::kFairShare);
      ASSERT_EQ(p.victim_queue, 2);
    }
    preempted += static_cast<int>(d.preemptions.size());
    const Snapshot next = ApplyDecisions(s, d);
    ASSERT_TRUE(ValidateSnapshot(next).ok()) << ValidateSnapshot(next);
    for (const Preemption& p : Decide(next).preemptions) {
      ASSERT_NE(p.victim_queue, 1) << "preempted back: " << p.message;
    }
  }
  EXPECT_GT(preempted, 200);
}

// Reservations and budgets on random snapshots with placed running gangs,
// time limits and shared budgets: a reserved job is pending with
// WAITING_FOR_RESERVATION, its gang is whole on nodes of its flavor and starts
// when some running attempt reaches its limit; quota holds with reservations
// charged; every backfilled job ends before a reservation of its flavor
// starts; no budget (nor user's hourly cap) is overrun.
TEST(PolicyPropertyTest, ReservationsBackfillAndBudgetsKeepTheirInvariants) {
  Rng rng(20261125);
  int reservations = 0, backfills = 0, holds = 0, cap_holds = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Snapshot s = RandomPreemptionSnapshot(rng);
    if (rng.Chance(50)) {
      for (Queue& q : s.queues) {
        q.within_queue_preemption = WithinQueuePreemption::kNever;
        q.reclaim_within_cohort = ReclaimWithinCohort::kNever;
        q.fair_share_preemption = false;
      }
    }
    for (RunningAttempt& r : s.running) {
      if (!r.placement.empty() && rng.Chance(80))
        r.time_limit_micros = (s.now - r.start_time) + rng.Int(1, 4 * kHour);
    }
    for (PendingJob& j : s.pending) {
      if (rng.Chance(70)) j.time_limit_micros = rng.Int(1, 2 * kHour);
    }
    if (rng.Chance(50)) {
      s.budgets.push_back(
          {.name = "b0", .remaining_micros = rng.Int(-1, 200'000'000)});
      for (Queue& q : s.queues) {
        if (rng.Chance(70)) q.budget = 0;
      }
    }
    // Some flavors price CPU and memory too.
    for (Flavor& f : s.flavors) {
      if (rng.Chance(30)) {
        f.price_micros_per_cpu_hour = rng.Int(0, 300'000);
        f.price_micros_per_gib_hour = rng.Int(0, 50'000);
      }
    }
    // Project budgets of the jobs' own (PendingJob::budget), sometimes the
    // queues' budget itself.
    if (rng.Chance(50)) {
      const BudgetId first = static_cast<BudgetId>(s.budgets.size());
      for (int p = 0; p < 2; ++p) {
        s.budgets.push_back({.name = "p" + std::to_string(p),
                             .remaining_micros = rng.Int(-1, 100'000'000)});
      }
      for (PendingJob& j : s.pending) {
        if (rng.Chance(60))
          j.budget = static_cast<BudgetId>(
              rng.Int(first > 0 ? first - 1 : 0, first + 1));
      }
    }
    // Users' hourly spend caps (in a tenant and in a project), charged the
    // hourly price.
    if (rng.Chance(40)) {
      const BudgetId first = static_cast<BudgetId>(s.budgets.size());
      for (int u = 0; u < 3; ++u) {
        const int64_t cap = rng.Int(0, 60'000'000);
        s.budgets.push_back({.name = "cap" + std::to_string(u),
                             .remaining_micros = cap - rng.Int(0, 20'000'000),
                             .hourly = true,
                             .user = "u" + std::to_string(u),
                             .hourly_cap_micros = cap});
      }
      for (PendingJob& j : s.pending) {
        if (rng.Chance(60))
          j.tenant_rate_cap = static_cast<BudgetId>(first + rng.Int(0, 2));
        if (rng.Chance(30))
          j.project_rate_cap = static_cast<BudgetId>(first + rng.Int(0, 2));
      }
    }
    ASSERT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
    const Decisions d = Decide(s);
    ASSERT_EQ(Decide(s), d);
    ASSERT_EQ(Decide(s, PolicyConfig{.use_placement_index = false,
                                     .use_equivalence_classes = false}),
              d);
    std::map<JobId, const PendingJob*> jobs;
    for (const PendingJob& j : s.pending) jobs[j.id] = &j;

    std::set<JobId> waiting;
    for (const PendingDecision& p : d.pending) {
      ASSERT_TRUE(absl::StartsWith(
          p.message.str(), std::string(PendingReasonCode(p.reason)) + ": "))
          << p.message;
      if (p.reason == PendingReason::kWaitingForReservation)
        waiting.insert(p.job);
      holds += p.reason == PendingReason::kBudgetHold;
      cap_holds += absl::StartsWith(p.message.str(), "BUDGET_HOLD: user ");
    }
    ASSERT_EQ(waiting.size(), d.reservations.size());
    std::set<TimeMicros> ends;
    for (const RunningAttempt& r : s.running) {
      if (r.time_limit_micros > 0)
        ends.insert(std::max(s.now, r.start_time + r.time_limit_micros));
    }
    UsageMap usage;
    for (const RunningAttempt& r : ApplyDecisions(s, d).running)
      Charge(usage, s, r.queue, r.flavor, r.resources);
    std::map<BudgetId, int64_t> spent;
    auto spend = [&](const PendingJob& job, FlavorId f) {
      const int64_t cost =
          ExpectedCostMicros(job, s.flavors[f], PolicyConfig{});
      const std::optional<BudgetId>& budget = s.queues[job.queue].budget;
      if (budget.has_value()) spent[*budget] += cost;
      // A job's own budget is charged too (once where it is the queue's).
      if (job.budget.has_value() && job.budget != budget)
        spent[*job.budget] += cost;
      // A user's hourly caps, their hourly price (once where they are the
      // same cap).
      const int64_t hourly = HourlyPriceMicros(job, s.flavors[f]);
      if (job.tenant_rate_cap.has_value())
        spent[*job.tenant_rate_cap] += hourly;
      if (job.project_rate_cap.has_value() &&
          job.project_rate_cap != job.tenant_rate_cap)
        spent[*job.project_rate_cap] += hourly;
    };
    for (const Reservation& r : d.reservations) {
      ASSERT_TRUE(waiting.count(r.job));
      const PendingJob& job = *jobs.at(r.job);
      ASSERT_EQ(r.queue, job.queue);
      ASSERT_EQ(static_cast<int32_t>(r.worker_nodes.size()), job.workers);
      for (NodeId n : r.worker_nodes) {
        ASSERT_EQ(s.nodes[n].flavor, r.flavor);
        ASSERT_TRUE(s.nodes[n].schedulable);
      }
      ASSERT_TRUE(ends.count(r.start_time)) << r.start_time;
      Charge(usage, s, r.queue, r.flavor,
             job.worker.AsResources() * job.workers);
      spend(job, r.flavor);
      ++reservations;
    }
    std::string why;
    ASSERT_TRUE(QuotaInvariantHolds(s, usage, &why)) << why;
    for (const Admission& a : d.admissions) {
      const PendingJob& job = *jobs.at(a.job);
      spend(job, a.flavor);
      if (!a.backfill) continue;
      ++backfills;
      ASSERT_GT(job.time_limit_micros, 0);
      bool before_one = false;
      for (const Reservation& r : d.reservations) {
        before_one |= r.flavor == a.flavor &&
                      s.now + job.time_limit_micros <= r.start_time;
      }
      ASSERT_TRUE(before_one) << "backfilled job " << a.job;
    }
    for (const auto& [b, amount] : spent) {
      ASSERT_LE(amount, std::max<int64_t>(0, s.budgets[b].remaining_micros))
          << "budget overrun";
    }
  }
  EXPECT_GT(reservations, 50);
  EXPECT_GT(backfills, 5);
  EXPECT_GT(holds, 50);
  EXPECT_GT(cap_holds, 50);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
