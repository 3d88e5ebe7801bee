// The engine against a deliberately simple reference scheduler, written for
// clarity, not speed, from the rules in docs/scheduling.md: Kueue's
// hierarchical quota (subtree, guaranteed, available) computed recursively
// from the definitions, progressive filling by priority, then fair share
// (usage above nominal over what the cohort tree could lend, exact
// fractions), then submit time and id, StrictFIFO / BestEffortFIFO, and
// flavor fungibility (a flavor within nominal quota before borrowing). On
// thousands of small random platforms (several cohorts, nested, flavors,
// clusters) where node capacity is ample, so that quota and order decide,
// both must admit the same jobs on the same flavors in the same order and
// leave every queue at the same share.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
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
  explicit Reference(const Snapshot& s) : s_(s) {
    usage_.assign(s.queues.size(),
                  std::vector<Resources>(s.flavors.size(), Resources{}));
    for (const RunningAttempt& r : s.running)
      usage_[r.queue][r.flavor] += r.resources;
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
        usage_[job.queue][*f] += Need(job);
        admitted.push_back({job.id, *f});
      } else if (s_.queues[best].strategy == QueueingStrategy::kStrictFifo) {
        blocked[best] = true;
      }
    }
    return admitted;
  }

  // Queue q's weighted share as an exact fraction num / den (den > 0);
  // nullopt: infinite (weight 0 while borrowing).
  struct Fraction {
    __int128 num = 0;
    __int128 den = 1;
  };
  std::optional<Fraction> Share(QueueId q) const {
    const Queue& queue = s_.queues[q];
    if (!queue.cohort.has_value()) return Fraction{};
    Fraction best;
    for (const FlavorQuota& fq : queue.quotas) {
      for (Resource r : kTracked) {
        const auto& rq = fq.resources[static_cast<int>(r)];
        if (!rq.has_value()) continue;
        const int64_t above = usage_[q][fq.flavor].Get(r) - rq->nominal;
        const int64_t lendable = Potential(Cohort(*queue.cohort), fq.flavor, r);
        if (above <= 0 || lendable <= 0) continue;
        if (static_cast<__int128>(above) * best.den >
            best.num * static_cast<__int128>(lendable)) {
          best = {above, lendable};
        }
      }
    }
    if (best.num == 0) return Fraction{};
    if (queue.weight <= 0) return std::nullopt;
    // Weights in thousandths (they are whole or halves here).
    const int64_t milli = static_cast<int64_t>(queue.weight * 1000 + 0.5);
    return Fraction{best.num * 1000, best.den * milli};
  }

 private:
  // A node of the quota tree: a queue or a cohort.
  struct Node {
    bool is_queue;
    int id;
  };
  static Node Queue_(QueueId q) { return {true, q}; }
  static Node Cohort(CohortId c) { return {false, c}; }

  std::optional<Node> Parent(Node n) const {
    if (n.is_queue) {
      const auto& c = s_.queues[n.id].cohort;
      if (!c.has_value()) return std::nullopt;
      return Cohort(*c);
    }
    const auto& p = s_.cohorts[n.id].parent;
    if (!p.has_value()) return std::nullopt;
    return Cohort(*p);
  }
  std::vector<Node> Children(Node n) const {
    std::vector<Node> out;
    if (n.is_queue) return out;
    for (size_t q = 0; q < s_.queues.size(); ++q) {
      if (s_.queues[q].cohort == n.id) out.push_back(Queue_(q));
    }
    for (size_t c = 0; c < s_.cohorts.size(); ++c) {
      if (s_.cohorts[c].parent == n.id) out.push_back(Cohort(c));
    }
    return out;
  }
  const std::vector<FlavorQuota>& QuotasOf(Node n) const {
    return n.is_queue ? s_.queues[n.id].quotas : s_.cohorts[n.id].quotas;
  }
  // The node's own entry for (f, r), if any.
  std::optional<ResourceQuota> Entry(Node n, FlavorId f, Resource r) const {
    for (const FlavorQuota& fq : QuotasOf(n)) {
      if (fq.flavor == f) return fq.resources[static_cast<int>(r)];
    }
    return std::nullopt;
  }
  // Whether (f, r) counts at n: its own entry, or a child where it counts.
  bool Counts(Node n, FlavorId f, Resource r) const {
    if (Entry(n, f, r).has_value()) return true;
    for (Node c : Children(n)) {
      if (Counts(c, f, r)) return true;
    }
    return false;
  }
  int64_t Subtree(Node n, FlavorId f, Resource r) const {
    const std::optional<ResourceQuota> e = Entry(n, f, r);
    int64_t total = e.has_value() ? e->nominal : 0;
    for (Node c : Children(n)) {
      if (Counts(c, f, r)) total += Subtree(c, f, r) - Guaranteed(c, f, r);
    }
    return total;
  }
  int64_t Guaranteed(Node n, FlavorId f, Resource r) const {
    const std::optional<ResourceQuota> e = Entry(n, f, r);
    if (!e.has_value() || !e->lending_limit.has_value()) return 0;
    return std::max<int64_t>(0, Subtree(n, f, r) - *e->lending_limit);
  }
  int64_t Usage(Node n, FlavorId f, Resource r) const {
    if (n.is_queue) return usage_[n.id][f].Get(r);
    int64_t total = 0;
    for (Node c : Children(n)) {
      if (Counts(c, f, r))
        total += std::max<int64_t>(0, Usage(c, f, r) - Guaranteed(c, f, r));
    }
    return total;
  }
  int64_t Available(Node n, FlavorId f, Resource r) const {
    const std::optional<Node> parent = Parent(n);
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
  int64_t Potential(Node n, FlavorId f, Resource r) const {
    const std::optional<Node> parent = Parent(n);
    if (!parent.has_value()) return Subtree(n, f, r);
    int64_t p = Guaranteed(n, f, r) + Potential(*parent, f, r);
    const std::optional<ResourceQuota> e = Entry(n, f, r);
    if (e.has_value() && e->borrowing_limit.has_value())
      p = std::min(p, Subtree(n, f, r) + *e->borrowing_limit);
    return p;
  }

  static Resources Need(const PendingJob& j) {
    return j.worker.AsResources() * j.workers;
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
  // Flavor fungibility: the first listed flavor within nominal quota, else
  // the first where it fits by borrowing (try_next_when_borrowing), or
  // simply the first that fits (off).
  std::optional<FlavorId> Choose(const PendingJob& j) const {
    std::optional<FlavorId> borrow;
    for (const FlavorQuota& fq : s_.queues[j.queue].quotas) {
      if (!FitsQuota(j, fq.flavor)) continue;
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
    if (sa.has_value() != sb.has_value()) return sa.has_value();
    if (sa.has_value()) {
      const __int128 l = sa->num * sb->den;
      const __int128 r = sb->num * sa->den;
      if (l != r) return l < r;
    }
    if (a.submit_time != b.submit_time) return a.submit_time < b.submit_time;
    return a.id < b.id;
  }

  const Snapshot& s_;
  // Per queue, per flavor: what its running and admitted work uses.
  std::vector<std::vector<Resources>> usage_;
};

// ---- Random platforms ----

Snapshot RandomPlatform(Rng& rng) {
  Snapshot s;
  s.now = int64_t{1000} * 3600 * 1000 * 1000;
  s.priority_classes = {{.name = "low", .value = 0},
                        {.name = "high", .value = 10}};
  const int flavors = 1 + rng.Below(3);
  for (int f = 0; f < flavors; ++f) {
    s.flavors.push_back({.name = "f" + std::to_string(f)});
    // Ample capacity, in one of two clusters: quota and order decide.
    s.nodes.push_back({.name = "n" + std::to_string(f),
                       .cluster = f % 2,
                       .flavor = f,
                       .capacity = {100000, int64_t{100000} * 1000, 0}});
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
      const Resources used{rng.Below(4), rng.Below(4) * 1000, 0};
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

}  // namespace
}  // namespace trainyard::scheduler::policy
