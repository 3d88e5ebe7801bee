// The engine against a deliberately simple reference scheduler, written for
// clarity, not speed, from the rules in docs/scheduling.md: Kueue's
// hierarchical quota (subtree, guaranteed, available) computed recursively
// from the definitions, progressive filling by priority, then fair share
// (usage above nominal over what the cohort tree could lend, exact
// fractions), then submit time and id, StrictFIFO / BestEffortFIFO, and
// flavor fungibility (a flavor within nominal quota before borrowing).
// What is compared:
//
// 1. One cycle, ample capacity (TheEngineAdmitsAsTheReference...): 3,000
//    random platforms (seeds 1-3000; up to three flavors in two clusters,
//    up to four cohorts, nested, with their own quota, borrowing and lending
//    limits, running work, weights, StrictFIFO queues). Decide() admits the
//    same jobs on the same flavors in the same order, and leaves every queue
//    at the reference's share (the exact fraction rounded down).
//
// 2. One cycle, tight nodes (OnTightNodes...): the same generator with one
//    node per flavor holding a few GPUs and CPUs (some taken by running
//    work) and gangs of up to three workers. The reference takes a flavor
//    only where quota and the flavor's only node both hold the whole gang
//    (first fit on one node); the same admissions, flavors and order.
//
// 3. The fair-share equilibrium over cycles (FairSharePreemption...): 3,000
//    random pools (RandomPool, Rng(1,000,000 + seed), seeds 1-3000; 500
//    under ASan): a
//    cohort tree whose root's quota plus its queues' (and sub-cohorts')
//    nominal quota equals the capacity of the pool flavor's only node, so
//    quota binds, never packing; 2-4 queues with nominal 0 or a little,
//    weights 0.5-3, some borrowing or lending limits, fair-sharing preemption
//    on 85 % of them (LessThanOrEqualToFinalShare, a quarter
//    LessThanInitialShare), reclaim (Any) on some queues with nominal quota;
//    in 40 % two weighted sub-cohorts (almost-LCA comparisons). A queue's
//    jobs are all alike (one worker or a gang of one-GPU workers), more than
//    the pool holds; in odd seeds every job of the pool needs the same GPUs
//    (one victim makes room for one job), in even seeds each queue's 1-3
//    GPUs (a job may need several victims). Beside the pool, unrelated
//    work: another cohort tree that preempts on another flavor in the other
//    cluster, and a queue without a cohort. Each pool runs four ways: its
//    queues' jobs submitted together (one queue's after the other's) or in
//    waves (each queue's jobs arrive once the earlier ones settled), each in
//    the queue order and reversed; Decide() and the incremental Scheduler
//    cycle after cycle on the applied decisions (ApplyDecisions, the clock a
//    minute on) until a cycle changes nothing, deciding the same each cycle.
//    The reference computes independently
//    - DRF: the allocations (jobs per queue) progressive filling reaches
//      from an idle pool, walking down from the root to the child of lowest
//      weighted share, every way of breaking ties;
//    - the rule's equilibria: every allocation where no pending job fits and
//      no sequence of reclaim or fair-share victims, each allowed when taken
//      (the strategy's condition on the almost-LCA shares, exact fractions),
//      makes room, by trying every allocation and every order (SettledAt);
//    - whether a running state is settled under the documented search:
//      victims in the documented order (least lost work, then newest, then
//      id), each taken if still allowed, until the job fits (Settled).
//    Required: the first cycle of "together" admits the pool's jobs exactly
//    as the reference's progressive filling (documented tie-break: submit
//    time, id), which in a flat pool is one of DRF's allocations; every run
//    ends, within 200 cycles, settled; with jobs of one size, at one of the
//    rule's equilibria, and where the rule has a single equilibrium all four
//    runs end there (independent of submit order and arrival); where the
//    filling already is an equilibrium, the engine moves nothing; the pool
//    alone, without the unrelated work, ends the same (together); the
//    engine's shares at the end are the reference's.
//    Not required: that every run ends at a DRF allocation. The rule can
//    stop before DRF's point and legitimately does (it never moves a queue
//    above the victim's share: a low-weight queue with large jobs that
//    arrives last may stay empty, where filling from idle gives it its first
//    job at share 0; a queue without fair-sharing preemption cannot take
//    back what others took while it was idle), and with sub-cohorts the
//    admission order follows each queue's own share while preemption compares
//    the subtrees. With jobs of several sizes the documented order can stop
//    where another order would go on (a first victim lowers its subtree's
//    share and forbids a second of the same subtree), so there only the
//    documented search is required to find nothing. The test prints how
//    often each case occurred.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/scheduler/policy/incremental.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/quota.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::ApplyDecisions;

// A small deterministic generator (the engine's tests' own is not reused:
// the reference shares nothing with them).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 6364136223846793005ULL + 1) {}
  int Below(int n) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((state_ >> 33) % static_cast<uint64_t>(n));
  }
  bool Chance(int percent) { return Below(100) < percent; }

 private:
  uint64_t state_;
};

constexpr Resource kTracked[] = {Resource::kGpu, Resource::kCpu};

// ---- The reference ----

class Reference {
 public:
  // With `nodes_bind`, every flavor has exactly one node, and a job also
  // needs room for its whole gang on it (first fit on the only node);
  // otherwise capacity is taken to be ample.
  explicit Reference(const Snapshot& s, bool nodes_bind = false)
      : s_(s), nodes_bind_(nodes_bind) {
    usage_.assign(s.queues.size(),
                  std::vector<Resources>(s.flavors.size(), Resources{}));
    for (const RunningAttempt& r : s.running)
      usage_[r.queue][r.flavor] += r.resources;
    if (nodes_bind_) {
      free_.assign(s.flavors.size(), Resources{});
      for (const policy::Node& n : s.nodes) {
        free_[n.flavor] = n.capacity;
        free_[n.flavor] -= n.used;
      }
    }
  }

  // The admissions, in order: (job, flavor).
  std::vector<std::pair<JobId, FlavorId>> Run() {
    std::vector<std::vector<const PendingJob*>> jobs(s_.queues.size());
    for (const PendingJob& j : s_.pending) jobs[j.queue].push_back(&j);
    for (auto& q : jobs) {
      std::sort(
          q.begin(), q.end(), [&](const PendingJob* a, const PendingJob* b) {
            const int32_t pa = s_.priority_classes[a->priority_class].value;
            const int32_t pb = s_.priority_classes[b->priority_class].value;
            if (pa != pb) return pa > pb;
            if (a->submit_time != b->submit_time)
              return a->submit_time < b->submit_time;
            return a->id < b->id;
          });
    }
    std::vector<size_t> next(s_.queues.size(), 0);
    std::vector<bool> blocked(s_.queues.size(), false);
    std::vector<std::pair<JobId, FlavorId>> admitted;
    while (true) {
      // The best head: priority, then the lower share, then submit, id.
      int best = -1;
      for (size_t q = 0; q < jobs.size(); ++q) {
        if (blocked[q] || next[q] >= jobs[q].size()) continue;
        if (best < 0 || Before(*jobs[q][next[q]], *jobs[best][next[best]]))
          best = static_cast<int>(q);
      }
      if (best < 0) break;
      const PendingJob& job = *jobs[best][next[best]];
      ++next[best];
      if (std::optional<FlavorId> f = Choose(job); f.has_value()) {
        Take(job.queue, *f, Need(job));
        admitted.push_back({job.id, *f});
      } else if (s_.queues[best].strategy == QueueingStrategy::kStrictFifo) {
        blocked[best] = true;
      }
    }
    return admitted;
  }

  // A weighted share as an exact fraction num / den (den > 0); nullopt:
  // infinite (weight 0 while borrowing).
  struct Fraction {
    __int128 num = 0;
    __int128 den = 1;
    friend bool operator<(const Fraction& a, const Fraction& b) {
      return a.num * b.den < b.num * a.den;
    }
    friend bool operator==(const Fraction& a, const Fraction& b) {
      return a.num * b.den == b.num * a.den;
    }
  };
  // A node of the quota tree: a queue or a cohort.
  struct TreeNode {
    bool is_queue;
    int id;
    friend bool operator==(const TreeNode&, const TreeNode&) = default;
  };
  static TreeNode Queue_(QueueId q) { return {true, q}; }
  static TreeNode Cohort(CohortId c) { return {false, c}; }

  std::optional<Fraction> Share(QueueId q) const {
    return NodeShare(Queue_(q));
  }
  // The share of a queue or cohort: the largest usage above its subtree
  // quota (a queue's: its nominal quota) over what its parent could lend it
  // (potentialAvailable), over the (flavor, resource) cells it tracks, then
  // divided by its weight. 0 for a root.
  std::optional<Fraction> NodeShare(TreeNode n) const {
    const std::optional<TreeNode> parent = Parent(n);
    if (!parent.has_value()) return Fraction{};
    Fraction best;
    for (FlavorId f = 0; f < static_cast<FlavorId>(s_.flavors.size()); ++f) {
      for (Resource r : kTracked) {
        if (n.is_queue ? !Entry(n, f, r).has_value() : !Counts(n, f, r))
          continue;
        const int64_t above = Usage(n, f, r) - Subtree(n, f, r);
        const int64_t lendable = Potential(*parent, f, r);
        if (above <= 0 || lendable <= 0) continue;
        if (best < Fraction{above, lendable}) best = {above, lendable};
      }
    }
    if (best.num == 0) return Fraction{};
    const double weight =
        n.is_queue ? s_.queues[n.id].weight : s_.cohorts[n.id].weight;
    if (weight <= 0) return std::nullopt;
    // Weights in thousandths (they are whole or halves here).
    const int64_t milli = static_cast<int64_t>(weight * 1000 + 0.5);
    return Fraction{best.num * 1000, best.den * milli};
  }
  // Whether share a < share b (infinite last).
  static bool Lower(const std::optional<Fraction>& a,
                    const std::optional<Fraction>& b) {
    if (!a.has_value() || !b.has_value()) return a.has_value() && !b;
    return *a < *b;
  }
  static bool Equal(const std::optional<Fraction>& a,
                    const std::optional<Fraction>& b) {
    return !Lower(a, b) && !Lower(b, a);
  }
  // Kueue's almost-LCA of two queues of one tree: the nodes just below their
  // lowest common cohort on each side.
  std::pair<TreeNode, TreeNode> AlmostLca(QueueId a, QueueId b) const {
    std::vector<TreeNode> pa{Queue_(a)};
    std::vector<TreeNode> pb{Queue_(b)};
    while (Parent(pa.back()).has_value()) pa.push_back(*Parent(pa.back()));
    while (Parent(pb.back()).has_value()) pb.push_back(*Parent(pb.back()));
    size_t i = pa.size() - 1;
    size_t j = pb.size() - 1;
    while (i > 0 && j > 0 && pa[i - 1] == pb[j - 1]) {
      --i;
      --j;
    }
    return {pa[i - 1], pb[j - 1]};
  }
  std::vector<TreeNode> Children(TreeNode n) const {
    std::vector<TreeNode> out;
    if (n.is_queue) return out;
    for (size_t q = 0; q < s_.queues.size(); ++q) {
      if (s_.queues[q].cohort == n.id) out.push_back(Queue_(q));
    }
    for (size_t c = 0; c < s_.cohorts.size(); ++c) {
      if (s_.cohorts[c].parent == n.id) out.push_back(Cohort(c));
    }
    return out;
  }

  // Charges (or, negated, releases) work of queue q on flavor f, on its
  // quota and, with nodes binding, on the flavor's node.
  void Take(QueueId q, FlavorId f, const Resources& r) {
    usage_[q][f] += r;
    if (nodes_bind_) free_[f] -= r;
  }
  void Release(QueueId q, FlavorId f, const Resources& r) {
    usage_[q][f] -= r;
    if (nodes_bind_) free_[f] += r;
  }
  // Whether the job fits its queue's quota on f, and the node if it binds.
  bool Fits(const PendingJob& j, FlavorId f) const {
    return FitsQuota(j, f) && FitsNode(j, f);
  }
  bool WithinNominal(const PendingJob& j, FlavorId f) const {
    const Resources need = Need(j);
    for (Resource r : kAllResources) {
      const std::optional<ResourceQuota> e = Entry(Queue_(j.queue), f, r);
      if (e.has_value() && need.Get(r) > 0 &&
          usage_[j.queue][f].Get(r) + need.Get(r) > e->nominal) {
        return false;
      }
    }
    return true;
  }
  // Whether q uses more than its nominal quota of some tracked resource of f.
  bool Borrows(QueueId q, FlavorId f) const {
    for (Resource r : kTracked) {
      const std::optional<ResourceQuota> e = Entry(Queue_(q), f, r);
      if (e.has_value() && usage_[q][f].Get(r) > e->nominal) return true;
    }
    return false;
  }
  static Resources Need(const PendingJob& j) {
    return j.worker.AsResources() * j.workers;
  }

 private:
  std::optional<TreeNode> Parent(TreeNode n) const {
    if (n.is_queue) {
      const auto& c = s_.queues[n.id].cohort;
      if (!c.has_value()) return std::nullopt;
      return Cohort(*c);
    }
    const auto& p = s_.cohorts[n.id].parent;
    if (!p.has_value()) return std::nullopt;
    return Cohort(*p);
  }
  const std::vector<FlavorQuota>& QuotasOf(TreeNode n) const {
    return n.is_queue ? s_.queues[n.id].quotas : s_.cohorts[n.id].quotas;
  }
  // The node's own entry for (f, r), if any.
  std::optional<ResourceQuota> Entry(TreeNode n, FlavorId f, Resource r) const {
    for (const FlavorQuota& fq : QuotasOf(n)) {
      if (fq.flavor == f) return fq.resources[static_cast<int>(r)];
    }
    return std::nullopt;
  }
  // Whether (f, r) counts at n: its own entry, or a child where it counts.
  bool Counts(TreeNode n, FlavorId f, Resource r) const {
    if (Entry(n, f, r).has_value()) return true;
    for (TreeNode c : Children(n)) {
      if (Counts(c, f, r)) return true;
    }
    return false;
  }
  int64_t Subtree(TreeNode n, FlavorId f, Resource r) const {
    const std::optional<ResourceQuota> e = Entry(n, f, r);
    int64_t total = e.has_value() ? e->nominal : 0;
    for (TreeNode c : Children(n)) {
      if (Counts(c, f, r)) total += Subtree(c, f, r) - Guaranteed(c, f, r);
    }
    return total;
  }
  int64_t Guaranteed(TreeNode n, FlavorId f, Resource r) const {
    const std::optional<ResourceQuota> e = Entry(n, f, r);
    if (!e.has_value() || !e->lending_limit.has_value()) return 0;
    return std::max<int64_t>(0, Subtree(n, f, r) - *e->lending_limit);
  }
  int64_t Usage(TreeNode n, FlavorId f, Resource r) const {
    if (n.is_queue) return usage_[n.id][f].Get(r);
    int64_t total = 0;
    for (TreeNode c : Children(n)) {
      if (Counts(c, f, r))
        total += std::max<int64_t>(0, Usage(c, f, r) - Guaranteed(c, f, r));
    }
    return total;
  }
  int64_t Available(TreeNode n, FlavorId f, Resource r) const {
    const std::optional<TreeNode> parent = Parent(n);
    if (!parent.has_value()) return Subtree(n, f, r) - Usage(n, f, r);
    const int64_t g = Guaranteed(n, f, r);
    const int64_t u = Usage(n, f, r);
    int64_t from_parent = Available(*parent, f, r);
    const std::optional<ResourceQuota> e = Entry(n, f, r);
    if (e.has_value() && e->borrowing_limit.has_value()) {
      from_parent = std::min(from_parent, Subtree(n, f, r) - g -
                                              std::max<int64_t>(0, u - g) +
                                              *e->borrowing_limit);
    }
    return std::max<int64_t>(0, g - u) + std::max<int64_t>(0, from_parent);
  }
  // What n could take if the whole tree were idle.
  int64_t Potential(TreeNode n, FlavorId f, Resource r) const {
    const std::optional<TreeNode> parent = Parent(n);
    if (!parent.has_value()) return Subtree(n, f, r);
    int64_t p = Guaranteed(n, f, r) + Potential(*parent, f, r);
    const std::optional<ResourceQuota> e = Entry(n, f, r);
    if (e.has_value() && e->borrowing_limit.has_value())
      p = std::min(p, Subtree(n, f, r) + *e->borrowing_limit);
    return p;
  }

  bool FitsQuota(const PendingJob& j, FlavorId f) const {
    const Resources need = Need(j);
    for (Resource r : kAllResources) {
      if (need.Get(r) <= 0) continue;
      const std::optional<ResourceQuota> e = Entry(Queue_(j.queue), f, r);
      if (!e.has_value()) continue;  // not limited
      if (need.Get(r) > std::max<int64_t>(0, Available(Queue_(j.queue), f, r)))
        return false;
    }
    return true;
  }
  // The whole gang on the flavor's only node.
  bool FitsNode(const PendingJob& j, FlavorId f) const {
    if (!nodes_bind_) return true;
    const Resources need = Need(j);
    for (Resource r : kAllResources) {
      if (need.Get(r) > free_[f].Get(r)) return false;
    }
    return true;
  }
  // Flavor fungibility: the first listed flavor within nominal quota, else
  // the first where it fits by borrowing (try_next_when_borrowing), or
  // simply the first that fits (off); "fits": quota, and the node where
  // nodes bind.
  std::optional<FlavorId> Choose(const PendingJob& j) const {
    std::optional<FlavorId> borrow;
    for (const FlavorQuota& fq : s_.queues[j.queue].quotas) {
      if (!Fits(j, fq.flavor)) continue;
      if (!s_.queues[j.queue].try_next_when_borrowing ||
          WithinNominal(j, fq.flavor)) {
        return fq.flavor;
      }
      if (!borrow.has_value()) borrow = fq.flavor;
    }
    return borrow;
  }

  bool Before(const PendingJob& a, const PendingJob& b) const {
    const int32_t pa = s_.priority_classes[a.priority_class].value;
    const int32_t pb = s_.priority_classes[b.priority_class].value;
    if (pa != pb) return pa > pb;
    const std::optional<Fraction> sa = Share(a.queue);
    const std::optional<Fraction> sb = Share(b.queue);
    if (!Equal(sa, sb)) return Lower(sa, sb);
    if (a.submit_time != b.submit_time) return a.submit_time < b.submit_time;
    return a.id < b.id;
  }

  const Snapshot& s_;
  const bool nodes_bind_;
  // Per queue, per flavor: what its running and admitted work uses.
  std::vector<std::vector<Resources>> usage_;
  // With nodes binding, per flavor: what its only node has free.
  std::vector<Resources> free_;
};

// ---- Random platforms ----

// `tight`: one node per flavor with little room (a few GPUs and CPUs, some
// taken by running work), and gangs of up to three workers, so that node
// capacity decides as often as quota; otherwise capacity is ample.
Snapshot RandomPlatform(Rng& rng, bool tight = false) {
  Snapshot s;
  s.now = int64_t{1000} * 3600 * 1000 * 1000;
  s.priority_classes = {{.name = "low", .value = 0},
                        {.name = "high", .value = 10}};
  const int flavors = 1 + rng.Below(3);
  for (int f = 0; f < flavors; ++f) {
    s.flavors.push_back({.name = "f" + std::to_string(f)});
    // One node per flavor, in one of two clusters: ample capacity (quota
    // and order decide), or little.
    s.nodes.push_back(
        {.name = "n" + std::to_string(f),
         .cluster = f % 2,
         .flavor = f,
         .capacity = tight ? Resources{rng.Below(12), rng.Below(12) * 1000, 0}
                           : Resources{100000, int64_t{100000} * 1000, 0}});
  }
  auto random_quota = [&](FlavorId f, bool cohort) {
    FlavorQuota fq{.flavor = f};
    for (Resource r : kTracked) {
      if (rng.Chance(25)) continue;  // untracked
      ResourceQuota q;
      const int64_t unit = r == Resource::kCpu ? 1000 : 1;
      q.nominal = rng.Below(cohort ? 6 : 9) * unit;
      if (rng.Chance(30)) q.borrowing_limit = rng.Below(5) * unit;
      if (rng.Chance(30)) q.lending_limit = rng.Below(5) * unit;
      fq.resources[static_cast<int>(r)] = q;
    }
    return fq;
  };
  const int cohorts = rng.Below(5);
  for (int c = 0; c < cohorts; ++c) {
    Cohort cohort{.name = "c" + std::to_string(c)};
    if (c > 0 && rng.Chance(50)) cohort.parent = rng.Below(c);
    if (rng.Chance(40))
      cohort.quotas.push_back(random_quota(rng.Below(flavors), true));
    if (rng.Chance(30)) cohort.weight = 1 + rng.Below(3);
    s.cohorts.push_back(cohort);
  }
  const int queues = 2 + rng.Below(5);
  for (int q = 0; q < queues; ++q) {
    Queue queue{.name = "q" + std::to_string(q), .tenant = "t"};
    if (cohorts > 0 && rng.Chance(85)) queue.cohort = rng.Below(cohorts);
    queue.weight = rng.Chance(30) ? 0.5 * (1 + rng.Below(4)) : 1.0;
    if (rng.Chance(20)) queue.strategy = QueueingStrategy::kStrictFifo;
    queue.try_next_when_borrowing = !rng.Chance(30);
    std::vector<FlavorId> listed;
    for (int f = 0; f < flavors; ++f) {
      if (rng.Chance(60)) listed.push_back(f);
    }
    if (listed.empty()) listed.push_back(rng.Below(flavors));
    // In a random order of preference.
    for (size_t i = listed.size(); i > 1; --i)
      std::swap(listed[i - 1], listed[rng.Below(static_cast<int>(i))]);
    for (FlavorId f : listed) queue.quotas.push_back(random_quota(f, false));
    s.queues.push_back(queue);
  }
  JobId id = 1;
  for (int q = 0; q < queues; ++q) {
    // Running work on the queue's first flavor.
    if (rng.Chance(40)) {
      const FlavorId f = s.queues[q].quotas.front().flavor;
      Resources used{rng.Below(4), rng.Below(4) * 1000, 0};
      if (tight) {
        // Within what the node has left.
        const Resources& cap = s.nodes[f].capacity;
        const Resources& taken = s.nodes[f].used;
        used.gpus = std::min(used.gpus, cap.gpus - taken.gpus);
        used.cpu_millis =
            std::min(used.cpu_millis, cap.cpu_millis - taken.cpu_millis);
      }
      s.running.push_back({.job = 10000 + q,
                           .queue = q,
                           .flavor = f,
                           .placement = {f},
                           .resources = used,
                           .start_time = s.now - 1000});
      s.nodes[f].used += used;
    }
    const int jobs = rng.Below(10);
    for (int k = 0; k < jobs; ++k) {
      PendingJob job{.id = id++,
                     .name = "j",
                     .queue = q,
                     .priority_class = rng.Chance(25) ? 1 : 0,
                     .submit_time = s.now - 1000 + rng.Below(20)};
      job.worker = {.gpus = rng.Below(4), .cpu_millis = rng.Below(4) * 1000};
      if (job.worker.gpus == 0 && job.worker.cpu_millis == 0)
        job.worker.gpus = 1;
      if (tight) job.workers = 1 + rng.Below(3);
      s.pending.push_back(job);
    }
  }
  return s;
}

TEST(ReferenceTest, TheEngineAdmitsAsTheReferenceAndReachesItsShares) {
  PolicyConfig config;
  config.aging_threshold = 0;  // the reference does not age
  int admissions = 0;
  int with_shares = 0;
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    Rng rng(seed);
    const Snapshot s = RandomPlatform(rng);
    ASSERT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
    Reference reference(s);
    const std::vector<std::pair<JobId, FlavorId>> expected = reference.Run();
    const Decisions d = Decide(s, config);
    std::vector<std::pair<JobId, FlavorId>> got;
    for (const Admission& a : d.admissions) got.push_back({a.job, a.flavor});
    ASSERT_EQ(got, expected) << "seed " << seed;
    admissions += static_cast<int>(got.size());
    // The shares after the cycle: the engine's fixed point is the
    // reference's exact fraction, rounded down.
    const Snapshot next = ApplyDecisions(s, d);
    const QuotaTree quota(next);
    for (QueueId q = 0; q < static_cast<QueueId>(next.queues.size()); ++q) {
      const std::optional<Reference::Fraction> exact = reference.Share(q);
      const int64_t engine = quota.Share(q, next.queues[q].weight);
      if (!exact.has_value()) {
        EXPECT_EQ(engine, QuotaTree::kInfiniteShare) << "seed " << seed;
        continue;
      }
      const int64_t rounded =
          static_cast<int64_t>(exact->num * QuotaTree::kShareOne / exact->den);
      EXPECT_EQ(engine, rounded) << "seed " << seed << " queue " << q;
      with_shares += rounded > 0;
    }
  }
  // The platforms exercised what they should.
  EXPECT_GT(admissions, 3000);
  EXPECT_GT(with_shares, 300);
}

// ---- Fair-share equilibrium over several cycles ----

// A cohort tree whose pool is the binding constraint: the root cohort's own
// GPU quota and its queues' (and sub-cohorts') nominal quota add up to the
// capacity of the pool flavor's only node, so quota binds, never packing.
// Quotas are multiples of a unit; the jobs of a queue all need the same
// GPUs, the unit, or with `mixed` 1-3 GPUs per queue (a job may then need
// several victims). Beside it, unrelated work: a second cohort tree on another
// flavor in the other cluster, and a queue without a cohort on a third.
struct PoolPlatform {
  Snapshot s;  // without the pool's jobs
  std::vector<QueueId> pool;
  // Per pool queue (same index): the jobs it submits, in order.
  std::vector<std::vector<PendingJob>> jobs;
  CohortId root = 0;
  static constexpr FlavorId kPool = 0;
};

PoolPlatform RandomPool(Rng& rng, bool mixed) {
  PoolPlatform p;
  Snapshot& s = p.s;
  s.now = int64_t{1000} * 3600 * 1000 * 1000;
  s.priority_classes = {{.name = "normal", .value = 0}};
  s.flavors = {{.name = "pool"}, {.name = "other"}, {.name = "solo"}};
  const int64_t unit = 1 + rng.Below(3);
  auto gpu_quota = [](FlavorId f, int64_t nominal,
                      std::optional<int64_t> borrowing = std::nullopt,
                      std::optional<int64_t> lending = std::nullopt) {
    FlavorQuota fq{.flavor = f};
    fq.resources[static_cast<int>(Resource::kGpu)] =
        ResourceQuota{.nominal = nominal,
                      .borrowing_limit = borrowing,
                      .lending_limit = lending};
    return fq;
  };
  int64_t capacity = 0;
  // The pool: a root cohort with quota of its own, and in 40 % two weighted
  // sub-cohorts (queues beneath them compare through them: almost LCA).
  const int64_t root_nominal = unit * (2 + rng.Below(6));
  capacity += root_nominal;
  s.cohorts.push_back({.name = "pool", .quotas = {gpu_quota(0, root_nominal)}});
  std::vector<CohortId> homes = {0};
  if (rng.Chance(40)) {
    for (int k = 0; k < 2; ++k) {
      Cohort sub{.name = "pool-" + std::to_string(k), .parent = 0};
      sub.weight = 0.5 * (1 + rng.Below(4));
      if (rng.Chance(30)) {
        const int64_t nominal = unit * (1 + rng.Below(2));
        capacity += nominal;
        sub.quotas.push_back(gpu_quota(0, nominal));
      }
      homes.push_back(static_cast<CohortId>(s.cohorts.size()));
      s.cohorts.push_back(sub);
    }
  }
  const int queues = 2 + rng.Below(3);
  for (int k = 0; k < queues; ++k) {
    Queue q{.name = "p" + std::to_string(k), .tenant = "t"};
    // Sub-cohorts, when there are, get at least one queue each.
    q.cohort = homes.size() > 1 && k < 2 ? homes[1 + k]
                                         : homes[rng.Below(homes.size())];
    constexpr double kWeights[] = {0.5, 1, 1, 1, 1.5, 2, 3};
    q.weight = kWeights[rng.Below(7)];
    const int64_t nominal = rng.Chance(60) ? 0 : unit * (1 + rng.Below(2));
    capacity += nominal;
    std::optional<int64_t> borrowing;
    std::optional<int64_t> lending;
    if (rng.Chance(20)) borrowing = unit * rng.Below(4);
    if (nominal > 0 && rng.Chance(15)) lending = unit * rng.Below(2);
    q.quotas.push_back(gpu_quota(0, nominal, borrowing, lending));
    q.fair_share_preemption = rng.Chance(85);
    if (rng.Chance(25))
      q.fair_share_strategy = FairShareStrategy::kLessThanInitialShare;
    if (nominal > 0 && rng.Chance(40))
      q.reclaim_within_cohort = ReclaimWithinCohort::kAny;
    p.pool.push_back(static_cast<QueueId>(s.queues.size()));
    s.queues.push_back(q);
  }
  // Quota == capacity: the pool's only node holds exactly its quota.
  s.nodes.push_back({.name = "pool-node",
                     .cluster = 0,
                     .flavor = 0,
                     .capacity = {capacity, 1000 * 1000, 0}});
  const int64_t slots = capacity / unit;
  JobId id = 1;
  for (size_t k = 0; k < p.pool.size(); ++k) {
    // More than the pool holds in all, some queues less than their part.
    const int count = 1 + rng.Below(static_cast<int>(slots) + 2);
    const int64_t size = mixed ? 1 + rng.Below(3) : unit;
    const bool gang = size > 1 && rng.Chance(30);
    std::vector<PendingJob> jobs;
    for (int j = 0; j < count; ++j) {
      PendingJob job{.id = id++, .name = "pool", .queue = p.pool[k]};
      job.workers = gang ? static_cast<int32_t>(size) : 1;
      job.worker = {.gpus = gang ? 1 : size, .cpu_millis = 1};
      jobs.push_back(job);
    }
    p.jobs.push_back(jobs);
  }
  // Unrelated: a cohort tree on flavor "other" (cluster 1) whose queues
  // borrow from each other and preempt for fair share, running work
  // included; a queue without a cohort on "solo". Their node is ample.
  s.nodes.push_back({.name = "other-node",
                     .cluster = 1,
                     .flavor = 1,
                     .capacity = {1000, 1000 * 1000, 0}});
  s.nodes.push_back({.name = "solo-node",
                     .cluster = rng.Below(2),
                     .flavor = 2,
                     .capacity = {1000, 1000 * 1000, 0}});
  const CohortId other = static_cast<CohortId>(s.cohorts.size());
  s.cohorts.push_back(
      {.name = "other", .quotas = {gpu_quota(1, 1 + rng.Below(6))}});
  for (int k = 0; k < 2; ++k) {
    Queue q{.name = "o" + std::to_string(k), .tenant = "u", .cohort = other};
    q.quotas.push_back(gpu_quota(1, rng.Below(3)));
    q.fair_share_preemption = rng.Chance(50);
    s.queues.push_back(q);
  }
  Queue solo{.name = "solo", .tenant = "u"};
  solo.quotas.push_back(gpu_quota(2, 1 + rng.Below(4)));
  s.queues.push_back(solo);
  for (QueueId q = static_cast<QueueId>(p.pool.size());
       q < static_cast<QueueId>(s.queues.size()); ++q) {
    const FlavorId f = s.queues[q].quotas.front().flavor;
    if (rng.Chance(50)) {
      const Resources used{1 + rng.Below(2), 1, 0};
      s.running.push_back({.job = 5000 + q,
                           .queue = q,
                           .flavor = f,
                           .placement = {static_cast<NodeId>(f)},
                           .resources = used,
                           .start_time = s.now - 1000});
      s.nodes[f].used += used;
    }
    for (int j = rng.Below(6); j > 0; --j) {
      PendingJob job{.id = 1000 + id++, .name = "other", .queue = q};
      job.worker = {.gpus = 1 + rng.Below(2), .cpu_millis = 1};
      job.submit_time = s.now - 1000 + rng.Below(20);
      s.pending.push_back(job);
    }
  }
  return p;
}

// The pool's running jobs per pool queue.
std::vector<int> Allocation(const PoolPlatform& p, const Snapshot& s) {
  std::vector<int> count(p.pool.size(), 0);
  for (const RunningAttempt& r : s.running) {
    for (size_t k = 0; k < p.pool.size(); ++k) count[k] += r.queue == p.pool[k];
  }
  return count;
}

// The pool's platform with nothing running.
Snapshot IdlePool(const PoolPlatform& p) {
  Snapshot idle = p.s;
  idle.running.clear();
  for (policy::Node& n : idle.nodes) n.used = {};
  return idle;
}

// Weighted DRF by progressive filling, from an idle pool: each step gives
// the next job to the queue found by walking down from the root cohort to
// the child of lowest share (cohort shares with their weights, queue shares
// with theirs), until a queue; a queue whose next job fits neither quota
// nor node is done. Every way of breaking ties between equal shares is
// followed: the result is the set of allocations DRF allows.
std::set<std::vector<int>> DrfAllocations(const PoolPlatform& p) {
  const Snapshot idle = IdlePool(p);
  Reference ref(idle, /*nodes_bind=*/true);
  using TreeNode = Reference::TreeNode;
  std::set<std::vector<int>> out;
  std::set<std::pair<std::vector<int>, unsigned>> seen;
  std::vector<int> count(p.pool.size(), 0);
  auto index_of = [&](QueueId q) {
    return static_cast<size_t>(std::find(p.pool.begin(), p.pool.end(), q) -
                               p.pool.begin());
  };
  std::function<void(unsigned)> visit = [&](unsigned done) {
    if (!seen.insert({count, done}).second) return;
    // Whether a node has a queue beneath it that still wants a job.
    std::function<bool(TreeNode)> wants = [&](TreeNode n) {
      if (n.is_queue) {
        const size_t k = index_of(n.id);
        return !(done >> k & 1) &&
               count[k] < static_cast<int>(p.jobs[k].size());
      }
      for (TreeNode c : ref.Children(n)) {
        if (wants(c)) return true;
      }
      return false;
    };
    std::vector<QueueId> next;  // the queues the walk may reach
    std::function<void(TreeNode)> walk = [&](TreeNode n) {
      if (n.is_queue) {
        next.push_back(n.id);
        return;
      }
      std::vector<TreeNode> lowest;
      std::optional<Reference::Fraction> low;
      bool any = false;
      for (TreeNode c : ref.Children(n)) {
        if (!wants(c)) continue;
        const std::optional<Reference::Fraction> share = ref.NodeShare(c);
        if (!any || Reference::Lower(share, low)) {
          lowest = {c};
          low = share;
          any = true;
        } else if (Reference::Equal(share, low)) {
          lowest.push_back(c);
        }
      }
      for (TreeNode c : lowest) walk(c);
    };
    walk(Reference::Cohort(p.root));
    if (next.empty()) {
      out.insert(count);
      return;
    }
    for (QueueId q : next) {
      const size_t k = index_of(q);
      const PendingJob& job = p.jobs[k][count[k]];
      if (ref.Fits(job, PoolPlatform::kPool)) {
        ref.Take(q, PoolPlatform::kPool, Reference::Need(job));
        ++count[k];
        visit(done);
        --count[k];
        ref.Release(q, PoolPlatform::kPool, Reference::Need(job));
      } else {
        visit(done | 1u << k);
      }
    }
  };
  visit(0);
  return out;
}

// Whether no rule of docs/scheduling.md moves the pool any more, with
// `count[k]` jobs of pool queue k running (charged to `ref`) and the rest
// of its jobs pending: no pending job of the pool fits (quota and node),
// and none may preempt a running job of another pool queue that borrows,
// by reclaim (its queue stays within nominal quota with it; policy Any:
// every job here has the same priority) or by fair share (its strategy, on
// the shares of the almost-LCA nodes), taking victims one after the other,
// each allowed when it is taken, in any order, until it has room. Where
// every job of the pool is the same size one victim makes room, and this is
// exactly the engine's search; with several sizes it may find room where
// the engine's documented order does not (Settled). On failure, `why` says
// which move is left.
bool SettledAt(const PoolPlatform& p, Reference& ref,
               const std::vector<int>& count, std::string* why) {
  constexpr FlavorId f = PoolPlatform::kPool;
  for (size_t b = 0; b < p.pool.size(); ++b) {
    if (count[b] >= static_cast<int>(p.jobs[b].size())) continue;
    const PendingJob& job = p.jobs[b][count[b]];
    const Queue& queue = p.s.queues[p.pool[b]];
    if (ref.Fits(job, f)) {
      *why = "queue " + queue.name + " has a job that fits";
      return false;
    }
    const Resources need = Reference::Need(job);
    const bool reclaim =
        queue.reclaim_within_cohort == ReclaimWithinCohort::kAny &&
        ref.WithinNominal(job, f);
    // Victims one after the other, each allowed when it is taken (the
    // shares with the earlier ones gone), in any order, until the job fits.
    std::vector<int> taken(p.pool.size(), 0);
    std::set<std::vector<int>> seen;
    std::function<bool()> room = [&]() {
      if (!seen.insert(taken).second) return false;
      for (size_t a = 0; a < p.pool.size(); ++a) {
        if (a == b || count[a] == taken[a] || !ref.Borrows(p.pool[a], f))
          continue;
        const Resources victim = Reference::Need(p.jobs[a][0]);
        const auto [victim_node, my_node] = ref.AlmostLca(p.pool[a], p.pool[b]);
        const auto victim_with = ref.NodeShare(victim_node);
        const auto mine_without = ref.NodeShare(my_node);
        ref.Release(p.pool[a], f, victim);
        const auto victim_without = ref.NodeShare(victim_node);
        ref.Take(p.pool[b], f, need);
        const auto mine_with = ref.NodeShare(my_node);
        ref.Release(p.pool[b], f, need);
        bool fair = false;
        if (queue.fair_share_preemption) {
          fair = queue.fair_share_strategy ==
                         FairShareStrategy::kLessThanInitialShare
                     ? Reference::Lower(mine_with, victim_with)
                     : !Reference::Lower(victim_without, mine_with) &&
                           Reference::Lower(mine_without, victim_with);
        }
        bool found = false;
        if (reclaim || fair) {
          ++taken[a];
          found = ref.Fits(job, f) || room();
          --taken[a];
        }
        ref.Take(p.pool[a], f, victim);
        if (found) {
          *why = "queue " + queue.name + " may still preempt, a job of " +
                 p.s.queues[p.pool[a]].name + " first" +
                 (reclaim ? " (reclaim)" : " (fair share)");
          return true;
        }
      }
      return false;
    };
    if (room()) return false;
  }
  return true;
}

// Whether the engine's documented search finds nothing to move in the
// running snapshot `s`: no pending job of the pool fits, and for each pool
// queue's next job, taking as victims the running jobs of the other pool
// queues that borrow in the documented order (least lost work, GPUs x time
// since the start; then the newest, the lowest job id: prices and
// priorities are equal here), each only if its queue still borrows and the
// rule allows it at that moment (reclaim, or fair share on the shares with
// the earlier victims gone), never gives it room. With jobs of several
// sizes a job may need several victims, and the order matters: a victim
// taken first lowers its subtree's share, which can forbid a later one
// that an exhaustive search (SettledAt) would have used.
bool Settled(const PoolPlatform& p, const Snapshot& s, std::string* why) {
  constexpr FlavorId f = PoolPlatform::kPool;
  Reference ref(s, /*nodes_bind=*/true);
  auto pool_index = [&](QueueId q) -> int {
    for (size_t k = 0; k < p.pool.size(); ++k) {
      if (p.pool[k] == q) return static_cast<int>(k);
    }
    return -1;
  };
  std::vector<const RunningAttempt*> victims;
  for (const RunningAttempt& r : s.running) {
    if (r.flavor == f && pool_index(r.queue) >= 0) victims.push_back(&r);
  }
  auto lost = [&](const RunningAttempt* r) {
    return r->resources.gpus * (s.now - r->start_time);
  };
  std::sort(victims.begin(), victims.end(),
            [&](const RunningAttempt* a, const RunningAttempt* b) {
              if (lost(a) != lost(b)) return lost(a) < lost(b);
              if (a->start_time != b->start_time)
                return a->start_time > b->start_time;
              return a->job < b->job;
            });
  for (QueueId b : p.pool) {
    const PendingJob* job = nullptr;
    for (const PendingJob& j : s.pending) {
      if (j.queue == b && job == nullptr) job = &j;
    }
    if (job == nullptr) continue;
    const Queue& queue = s.queues[b];
    if (ref.Fits(*job, f)) {
      *why = "queue " + queue.name + " has a job that fits";
      return false;
    }
    const bool reclaim =
        queue.reclaim_within_cohort == ReclaimWithinCohort::kAny &&
        ref.WithinNominal(*job, f);
    if (!reclaim && !queue.fair_share_preemption) continue;
    const Resources need = Reference::Need(*job);
    std::vector<const RunningAttempt*> taken;
    bool room = false;
    for (const RunningAttempt* v : victims) {
      if (v->queue == b || !ref.Borrows(v->queue, f)) continue;
      if (!reclaim) {
        const auto [victim_node, my_node] = ref.AlmostLca(v->queue, b);
        const auto victim_with = ref.NodeShare(victim_node);
        const auto mine_without = ref.NodeShare(my_node);
        ref.Release(v->queue, f, v->resources);
        const auto victim_without = ref.NodeShare(victim_node);
        ref.Take(b, f, need);
        const auto mine_with = ref.NodeShare(my_node);
        ref.Release(b, f, need);
        ref.Take(v->queue, f, v->resources);
        const bool allowed =
            queue.fair_share_strategy ==
                    FairShareStrategy::kLessThanInitialShare
                ? Reference::Lower(mine_with, victim_with)
                : !Reference::Lower(victim_without, mine_with) &&
                      Reference::Lower(mine_without, victim_with);
        if (!allowed) continue;
      }
      ref.Release(v->queue, f, v->resources);
      taken.push_back(v);
      if (ref.Fits(*job, f)) {
        room = true;
        break;
      }
    }
    for (const RunningAttempt* v : taken) ref.Take(v->queue, f, v->resources);
    if (room) {
      *why = "queue " + queue.name + " may still preempt " +
             std::to_string(taken.size()) + " job(s)" +
             (reclaim ? " (reclaim)" : " (fair share)");
      return false;
    }
  }
  return true;
}

// The documented rule's equilibria: every allocation of the pool (jobs per
// pool queue, within its demand and the pool's capacity) where nothing
// moves (SettledAt), found by trying them all.
std::set<std::vector<int>> Equilibria(const PoolPlatform& p) {
  const Snapshot idle = IdlePool(p);
  Reference ref(idle, /*nodes_bind=*/true);
  const int64_t capacity = idle.nodes[0].capacity.gpus;
  std::set<std::vector<int>> out;
  std::vector<int> count(p.pool.size(), 0);
  std::function<void(size_t, int64_t)> visit = [&](size_t k, int64_t used) {
    if (k == p.pool.size()) {
      std::string why;
      if (SettledAt(p, ref, count, &why)) out.insert(count);
      return;
    }
    const PendingJob& job = p.jobs[k][0];
    const int64_t gpus = Reference::Need(job).gpus;
    for (count[k] = 0; count[k] <= static_cast<int>(p.jobs[k].size()) &&
                       used + count[k] * gpus <= capacity;
         ++count[k]) {
      if (count[k] > 0)
        ref.Take(p.pool[k], PoolPlatform::kPool, Reference::Need(job));
      visit(k + 1, used + count[k] * gpus);
    }
    for (int j = 0; j < count[k] - 1; ++j)
      ref.Release(p.pool[k], PoolPlatform::kPool, Reference::Need(job));
    count[k] = 0;
  };
  visit(0, 0);
  return out;
}

// Runs the engine cycle after cycle, Decide() and the incremental
// Scheduler side by side (they must decide the same), applying each cycle's
// admissions and preemptions (ApplyDecisions) with the clock a minute on,
// until a cycle changes nothing. Returns the number of cycles, or -1 if
// there was no fixed point within 200.
int RunUntilSettled(Snapshot& s, const PolicyConfig& config, int* preemptions) {
  Scheduler scheduler(s, config);
  for (int cycle = 1; cycle <= 200; ++cycle) {
    const Decisions d = Decide(s, config);
    const Decisions incremental = scheduler.Cycle();
    EXPECT_EQ(incremental.admissions, d.admissions) << "cycle " << cycle;
    auto victims = [](const Decisions& x) {
      std::vector<std::pair<JobId, JobId>> out;
      for (const Preemption& pr : x.preemptions)
        out.push_back({pr.victim, pr.preemptor});
      return out;
    };
    EXPECT_EQ(victims(incremental), victims(d)) << "cycle " << cycle;
    if (d.admissions.empty() && d.preemptions.empty()) return cycle;
    *preemptions += static_cast<int>(d.preemptions.size());
    Snapshot next = ApplyDecisions(s, d);
    for (const Preemption& pr : d.preemptions) {
      EXPECT_TRUE(scheduler.CompleteRunning(pr.victim));
      for (const PendingJob& j : next.pending) {
        if (j.id == pr.victim) scheduler.AddPending(j);
      }
    }
    for (const Admission& a : d.admissions)
      EXPECT_TRUE(scheduler.ApplyAdmission(a));
    next.now += int64_t{60} * 1000 * 1000;
    scheduler.SetNow(next.now);
    s = std::move(next);
  }
  return -1;
}

TEST(ReferenceTest, FairSharePreemptionSettlesAtTheDrfEquilibrium) {
  PolicyConfig config;
  config.aging_threshold = 0;  // the reference does not age
  // The reference is slow by design: under ASan (about 50x slower here)
  // 500 pools, which still cover every case below.
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kPlatforms = 500;
#else
  constexpr int kPlatforms = 3000;
#endif
  int nested = 0;
  int unique = 0;
  int unique_is_drf = 0;
  int with_preemption = 0;
  int off_drf = 0;
  int most_cycles = 0;
  int order_matters = 0;
  int filling_settled = 0;
  int order_bound = 0;
  for (uint64_t seed = 1; seed <= kPlatforms; ++seed) {
    Rng rng(1'000'000 + seed);
    const bool mixed = seed % 2 == 0;
    const PoolPlatform p = RandomPool(rng, mixed);
    nested += p.s.cohorts.size() > 2;
    const std::set<std::vector<int>> drf = DrfAllocations(p);
    const std::set<std::vector<int>> equilibria = Equilibria(p);
    ASSERT_FALSE(drf.empty());
    ASSERT_FALSE(equilibria.empty()) << "seed " << seed;
    if (!mixed && equilibria.size() == 1) {
      ++unique;
      unique_is_drf += drf.count(*equilibria.begin()) > 0;
    }
    std::vector<size_t> order(p.pool.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::set<std::vector<int>> ends;
    for (const bool reversed : {false, true}) {
      if (reversed) std::reverse(order.begin(), order.end());
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << (reversed ? ", reversed" : ""));
      // Together: every job pending from the start, one queue's after the
      // other's in `order`.
      auto submit_together = [&](Snapshot& x) {
        for (size_t pos = 0; pos < order.size(); ++pos) {
          for (size_t j = 0; j < p.jobs[order[pos]].size(); ++j) {
            PendingJob job = p.jobs[order[pos]][j];
            job.submit_time = x.now - 100000 +
                              static_cast<int64_t>(pos) * 1000 +
                              static_cast<int64_t>(j);
            x.pending.push_back(job);
          }
        }
      };
      Snapshot s = p.s;
      submit_together(s);
      ASSERT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
      // The first cycle admits the pool's jobs as the reference's
      // progressive filling (unrelated work may preempt beside it).
      Reference first(s, /*nodes_bind=*/true);
      std::vector<std::pair<JobId, FlavorId>> expected = first.Run();
      std::erase_if(expected, [](const std::pair<JobId, FlavorId>& a) {
        return a.second != PoolPlatform::kPool;
      });
      std::vector<int> filled(p.pool.size(), 0);
      for (const auto& [job, flavor] : expected) {
        for (size_t k = 0; k < p.pool.size(); ++k) {
          for (const PendingJob& j : p.jobs[k]) filled[k] += j.id == job;
        }
      }
      {
        const Decisions d = Decide(s, config);
        std::vector<std::pair<JobId, FlavorId>> got;
        for (const Admission& a : d.admissions) {
          if (a.flavor == PoolPlatform::kPool) got.push_back({a.job, a.flavor});
        }
        ASSERT_EQ(got, expected);
      }
      // In a flat pool, one of DRF's allocations (the tie-break picks one);
      // with sub-cohorts the admission order still follows each queue's
      // own share, and preemption then moves the subtrees.
      if (p.s.cohorts.size() == 2) {
        EXPECT_TRUE(drf.count(filled));
      }
      int preemptions = 0;
      const int cycles = RunUntilSettled(s, config, &preemptions);
      ASSERT_GT(cycles, 0) << "no fixed point";
      most_cycles = std::max(most_cycles, cycles);
      std::string why;
      const std::vector<int> together = Allocation(p, s);
      EXPECT_TRUE(Settled(p, s, &why)) << why;
      if (!mixed) {
        EXPECT_TRUE(equilibria.count(together));
      } else {
        order_bound += !equilibria.count(together);
      }
      // Where progressive filling left nothing the rule would move, the
      // engine moves nothing either.
      if (equilibria.count(filled)) {
        ++filling_settled;
        EXPECT_EQ(together, filled);
      }
      ends.insert(together);
      // The work beside the pool changes nothing of it: the pool alone
      // ends the same.
      {
        Snapshot alone = p.s;
        alone.queues.resize(p.pool.size());
        alone.cohorts.erase(alone.cohorts.end() - 1);  // "other"
        alone.nodes.resize(1);
        alone.running.clear();
        alone.pending.clear();
        submit_together(alone);
        ASSERT_TRUE(ValidateSnapshot(alone).ok()) << ValidateSnapshot(alone);
        int ignored = 0;
        ASSERT_GT(RunUntilSettled(alone, config, &ignored), 0);
        EXPECT_EQ(Allocation(p, alone), together);
      }

      // In waves: each queue's jobs arrive once the earlier ones settled.
      Snapshot w = p.s;
      preemptions = 0;
      for (size_t pos = 0; pos < order.size(); ++pos) {
        for (size_t j = 0; j < p.jobs[order[pos]].size(); ++j) {
          PendingJob job = p.jobs[order[pos]][j];
          job.submit_time = w.now + static_cast<int64_t>(j);
          w.pending.push_back(job);
        }
        const int cycles = RunUntilSettled(w, config, &preemptions);
        ASSERT_GT(cycles, 0) << "no fixed point";
        most_cycles = std::max(most_cycles, cycles);
      }
      with_preemption += preemptions > 0;
      const std::vector<int> waves = Allocation(p, w);
      EXPECT_TRUE(Settled(p, w, &why)) << why;
      if (!mixed) {
        EXPECT_TRUE(equilibria.count(waves));
      } else {
        order_bound += !equilibria.count(waves);
      }
      off_drf += !drf.count(waves);
      ends.insert(waves);
      // The shares the engine reports are the reference's.
      const QuotaTree quota(w);
      const Reference last(w, /*nodes_bind=*/true);
      for (QueueId q : p.pool) {
        const std::optional<Reference::Fraction> exact = last.Share(q);
        ASSERT_TRUE(exact.has_value());
        EXPECT_EQ(quota.Share(q, w.queues[q].weight),
                  static_cast<int64_t>(exact->num * QuotaTree::kShareOne /
                                       exact->den));
      }
    }
    // Where the rule leaves one equilibrium, neither the submit order nor
    // the arrival in waves changes where the pool ends.
    if (!mixed && equilibria.size() == 1) {
      EXPECT_EQ(ends.size(), 1u) << "seed " << seed;
    }
    order_matters += ends.size() > 1;
  }
  std::printf(
      "fair-share equilibrium: %d pools (%d nested), one equilibrium in %d "
      "(a DRF allocation in %d), waves with preemptions %d, waves ending "
      "off DRF %d, order mattered in %d, most cycles to settle %d, filling "
      "already settled %d, mixed runs the victim order stopped %d\n",
      kPlatforms, nested, unique, unique_is_drf, with_preemption, off_drf,
      order_matters, most_cycles, filling_settled, order_bound);
  EXPECT_GT(unique, kPlatforms / 8);
  EXPECT_GT(with_preemption, kPlatforms / 2);
  EXPECT_GT(nested, kPlatforms / 4);
  EXPECT_GT(filling_settled, kPlatforms);
}

TEST(ReferenceTest, OnTightNodesTheEngineAdmitsAsTheReference) {
  // One node per flavor with little room: the reference places a gang on
  // the flavor's only node if it holds all of it (first fit), and a flavor
  // takes a job only where quota and that node both do.
  PolicyConfig config;
  config.aging_threshold = 0;
  int admissions = 0;
  int capacity_bound = 0;
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    Rng rng(seed);
    const Snapshot s = RandomPlatform(rng, /*tight=*/true);
    ASSERT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
    Reference reference(s, /*nodes_bind=*/true);
    const std::vector<std::pair<JobId, FlavorId>> expected = reference.Run();
    const Decisions d = Decide(s, config);
    std::vector<std::pair<JobId, FlavorId>> got;
    for (const Admission& a : d.admissions) got.push_back({a.job, a.flavor});
    ASSERT_EQ(got, expected) << "seed " << seed;
    admissions += static_cast<int>(got.size());
    // Ample capacity would have admitted more: the nodes bound.
    capacity_bound += Reference(s).Run().size() > expected.size();
    // Every admitted gang on its flavor's only node.
    for (const Admission& a : d.admissions) {
      for (NodeId n : a.worker_nodes) EXPECT_EQ(s.nodes[n].flavor, a.flavor);
    }
  }
  EXPECT_GT(admissions, 2000);
  EXPECT_GT(capacity_bound, 1000);
  std::printf("tight nodes: %d admissions, capacity bound in %d of 3000\n",
              admissions, capacity_bound);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
