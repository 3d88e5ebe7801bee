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
#include "services/scheduler/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

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
      for (NodeId n : a.worker_nodes) {
        const Node& node = s.nodes[n];
        ASSERT_EQ(node.flavor, a.flavor);
        ASSERT_TRUE(node.schedulable);
        if (job.worker.gpus > 0 && job.worker.gpu_model != kAnyGpuModel) {
          ASSERT_EQ(node.gpu_model, job.worker.gpu_model);
        }
        free[n] -= job.worker.AsResources();
        racks.insert(node.rack);
        blocks.insert(node.block);
      }
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
    for (size_t n = 0; n < free.size(); ++n) {
      ASSERT_GE(free[n].gpus, 0) << "node " << n;
      ASSERT_GE(free[n].cpu_millis, 0) << "node " << n;
      ASSERT_GE(free[n].memory_bytes, 0) << "node " << n;
    }
    std::string why;
    ASSERT_TRUE(QuotaInvariantHolds(s, usage, &why)) << why;

    // Pending jobs: a code-prefixed message and consecutive positions per
    // queue.
    std::map<QueueId, int32_t> last_position;
    for (const PendingDecision& p : d.pending) {
      ASSERT_TRUE(absl::StartsWith(
          p.message, std::string(PendingReasonCode(p.reason)) + ": "))
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

}  // namespace
}  // namespace trainyard::scheduler::policy
