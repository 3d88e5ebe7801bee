#include "services/scheduler/policy/quota.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace trainyard::scheduler::policy {

QuotaTree::QuotaTree(const Snapshot& s)
    : num_queues_(static_cast<int>(s.queues.size())),
      num_flavors_(static_cast<int>(s.flavors.size())) {
  const int num_nodes = num_queues_ + static_cast<int>(s.cohorts.size());
  parent_.assign(num_nodes, -1);
  cells_.assign(static_cast<size_t>(num_nodes) * num_flavors_ * kNumResources,
                Cell{});
  // A queue's or cohort's own quota entries; a cohort cell is tracked from
  // its own entry or (below) from a tracked child.
  auto set_quotas = [&](int node, const std::vector<FlavorQuota>& quotas) {
    for (const FlavorQuota& fq : quotas) {
      for (Resource r : kAllResources) {
        const auto& rq = fq.resources[static_cast<int>(r)];
        if (!rq.has_value()) continue;
        Cell& c = cells_[CellIndex(node, fq.flavor, r)];
        c.tracked = true;
        c.nominal = rq->nominal;
        c.subtree = rq->nominal;
        c.borrowing_limit = rq->borrowing_limit.value_or(-1);
        c.lending_limit = rq->lending_limit.value_or(-1);
      }
    }
  };
  for (int q = 0; q < num_queues_; ++q) {
    const Queue& queue = s.queues[q];
    if (queue.cohort.has_value()) parent_[q] = num_queues_ + *queue.cohort;
    set_quotas(q, queue.quotas);
  }
  std::vector<int> depth(s.cohorts.size(), 0);
  for (size_t c = 0; c < s.cohorts.size(); ++c) {
    if (s.cohorts[c].parent.has_value())
      parent_[num_queues_ + c] = num_queues_ + *s.cohorts[c].parent;
    set_quotas(num_queues_ + static_cast<int>(c), s.cohorts[c].quotas);
    for (auto p = s.cohorts[c].parent; p.has_value(); p = s.cohorts[*p].parent)
      ++depth[c];
  }
  // Children before parents: queues first, then cohorts deepest first, so a
  // cohort's subtree (own nominal + what its children lend) is complete before
  // its guaranteed part is computed and the rest passed up.
  std::vector<int> order;
  for (int q = 0; q < num_queues_; ++q) order.push_back(q);
  std::vector<int> cohorts(s.cohorts.size());
  for (size_t c = 0; c < cohorts.size(); ++c) cohorts[c] = static_cast<int>(c);
  std::stable_sort(cohorts.begin(), cohorts.end(),
                   [&](int a, int b) { return depth[a] > depth[b]; });
  for (int c : cohorts) order.push_back(num_queues_ + c);
  for (int node : order) {
    if (parent_[node] < 0) continue;
    for (FlavorId f = 0; f < num_flavors_; ++f) {
      for (Resource r : kAllResources) {
        const Cell& child = cells_[CellIndex(node, f, r)];
        if (!child.tracked) continue;
        Cell& parent = cells_[CellIndex(parent_[node], f, r)];
        parent.tracked = true;
        parent.subtree += child.subtree - Guaranteed(child);
      }
    }
  }
  // Parents before children: potential(root) = subtree(root); below it,
  // potential(n) = guaranteed(n) + potential(parent), capped at subtree(n) +
  // borrowing_limit(n) where n has a borrowing limit.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int node = *it;
    for (FlavorId f = 0; f < num_flavors_; ++f) {
      for (Resource r : kAllResources) {
        Cell& c = cells_[CellIndex(node, f, r)];
        if (!c.tracked) continue;
        if (parent_[node] < 0) {
          c.potential = c.subtree;
          continue;
        }
        c.potential =
            Guaranteed(c) + cells_[CellIndex(parent_[node], f, r)].potential;
        if (c.borrowing_limit >= 0)
          c.potential = std::min(c.potential, c.subtree + c.borrowing_limit);
      }
    }
  }
  for (int q = 0; q < num_queues_; ++q) {
    for (int n = parent_[q]; n >= 0 && parent_[n] >= 0; n = parent_[n]) {
      for (FlavorId f = 0; f < num_flavors_; ++f) {
        for (Resource r : kAllResources) {
          if (cells_[CellIndex(n, f, r)].borrowing_limit >= 0)
            cells_[CellIndex(q, f, r)].cohort_limit_above = true;
        }
      }
    }
  }
  absl::flat_hash_map<int, std::vector<int>> lenders;
  for (int node = 0; node < num_nodes; ++node) {
    bool lends = false;
    for (size_t i = static_cast<size_t>(CellIndex(node, 0, Resource::kGpu));
         i < static_cast<size_t>(CellIndex(node + 1, 0, Resource::kGpu)); ++i)
      lends |= cells_[i].lending_limit >= 0;
    if (!lends) continue;
    int root = node;
    while (parent_[root] >= 0) root = parent_[root];
    lenders[root].push_back(node);
  }
  // Per queue cell: what the lenders of its tree off its path keep.
  for (int q = 0; q < num_queues_; ++q) {
    if (parent_[q] < 0) continue;
    int root = q;
    while (parent_[root] >= 0) root = parent_[root];
    auto it = lenders.find(root);
    if (it == lenders.end()) continue;
    for (int lender : it->second) {
      bool on_path = false;
      for (int n = q; n >= 0 && !on_path; n = parent_[n]) on_path = n == lender;
      if (on_path) continue;
      for (FlavorId f = 0; f < num_flavors_; ++f) {
        for (Resource r : kAllResources) {
          const Cell& l = cells_[CellIndex(lender, f, r)];
          if (!l.tracked || l.lending_limit < 0) continue;
          cells_[CellIndex(q, f, r)].withheld += Guaranteed(l);
        }
      }
    }
  }
  for (const RunningAttempt& a : s.running) Add(a.queue, a.flavor, a.resources);
}

QuotaTree::Binding QuotaTree::BindingLimit(QueueId q, FlavorId f, Resource r,
                                           int64_t want) const {
  return BindingLimitWith(q, f, r, want, Available(q, f, r),
                          [&] { return TreeBinding(q, f, r); });
}

QuotaTree::Binding QuotaTree::TreeBinding(QueueId q, FlavorId f,
                                          Resource r) const {
  int node = parent_[q];
  if (cells_[CellIndex(q, f, r)].cohort_limit_above) {
    // Up the tree: the first cohort whose borrowing limit gives its
    // subtree less than its parent has left.
    for (; parent_[node] >= 0; node = parent_[node]) {
      const Cell& n = cells_[CellIndex(node, f, r)];
      if (n.borrowing_limit < 0) continue;
      const int64_t g = Guaranteed(n);
      const int64_t cap =
          n.subtree - g - std::max<int64_t>(0, n.usage - g) + n.borrowing_limit;
      if (cap < AvailableAt(parent_[node], f, r)) {
        return {.kind = Binding::kCohortBorrowingLimit,
                .cohort = node - num_queues_,
                .value = n.borrowing_limit};
      }
    }
  } else {
    while (parent_[node] >= 0) node = parent_[node];
  }
  const Cell& root = cells_[CellIndex(node, f, r)];
  const int64_t withheld = cells_[CellIndex(q, f, r)].withheld;
  return {.kind = withheld > 0 ? Binding::kWithheld : Binding::kTreeInUse,
          .cohort = node - num_queues_,
          .value = std::max<int64_t>(0, root.subtree - root.usage),
          .withheld = withheld};
}

int64_t QuotaTree::Lendable(int node, FlavorId f, Resource r) const {
  if (parent_[node] < 0) return 0;
  return cells_[CellIndex(parent_[node], f, r)].potential;
}

int64_t QuotaTree::Share(int node, double weight) const {
  if (parent_[node] < 0) return 0;
  // The largest above / lendable, compared exactly as fractions.
  int64_t above_max = 0;
  int64_t lendable_max = 1;
  for (FlavorId f = 0; f < num_flavors_; ++f) {
    for (Resource r : kAllResources) {
      const Cell& c = cells_[CellIndex(node, f, r)];
      if (!c.tracked || c.usage <= c.subtree) continue;
      const int64_t lendable = cells_[CellIndex(parent_[node], f, r)].potential;
      if (lendable <= 0) continue;
      const int64_t above = c.usage - c.subtree;
      if (static_cast<__int128>(above) * lendable_max >
          static_cast<__int128>(above_max) * lendable) {
        above_max = above;
        lendable_max = lendable;
      }
    }
  }
  if (above_max == 0) return 0;
  if (!(weight > 0.0)) return kInfiniteShare;
  // Weights in thousandths, as Kueue's milli-values.
  const int64_t weight_milli =
      std::max<int64_t>(1, std::llround(std::min(weight, 1e12) * 1000.0));
  const __int128 share = static_cast<__int128>(above_max) * kShareOne * 1000 /
                         (static_cast<__int128>(lendable_max) * weight_milli);
  return share >= kInfiniteShare ? kInfiniteShare - 1
                                 : static_cast<int64_t>(share);
}

std::pair<int, int> QuotaTree::AlmostLca(int a, int b) const {
  std::vector<int> path_a;
  std::vector<int> path_b;
  for (int n = a; n >= 0; n = parent_[n]) path_a.push_back(n);
  for (int n = b; n >= 0; n = parent_[n]) path_b.push_back(n);
  if (path_a.back() != path_b.back()) return {-1, -1};
  // Walk down from the common root while the paths agree.
  size_t i = path_a.size() - 1;
  size_t j = path_b.size() - 1;
  while (i > 0 && j > 0 && path_a[i - 1] == path_b[j - 1]) {
    --i;
    --j;
  }
  if (i == 0 || j == 0) return {path_a[i], path_b[j]};  // one contains other
  return {path_a[i - 1], path_b[j - 1]};
}

int64_t QuotaTree::ParentPart(int node, FlavorId f, Resource r) const {
  const Cell& c = cells_[CellIndex(node, f, r)];
  int64_t part = AvailableAt(parent_[node], f, r);
  if (c.borrowing_limit >= 0) {
    const int64_t g = Guaranteed(c);
    const int64_t stored_in_parent = c.subtree - g;
    const int64_t used_in_parent = std::max<int64_t>(0, c.usage - g);
    part =
        std::min(part, stored_in_parent - used_in_parent + c.borrowing_limit);
  }
  return std::max<int64_t>(0, part);
}

int64_t QuotaTree::AvailableAt(int node, FlavorId f, Resource r) const {
  const Cell& c = cells_[CellIndex(node, f, r)];
  if (parent_[node] < 0) return c.subtree - c.usage;
  const int64_t local = std::max<int64_t>(0, Guaranteed(c) - c.usage);
  return local + ParentPart(node, f, r);
}

int64_t QuotaTree::Available(QueueId q, FlavorId f, Resource r) const {
  if (!Tracks(q, f, r)) return kUnlimited;
  return std::max<int64_t>(0, AvailableAt(q, f, r));
}

int64_t QuotaTree::CohortLends(QueueId q, FlavorId f, Resource r) const {
  return CohortLends(q, f, r, Available(q, f, r));
}

int64_t QuotaTree::CohortLends(QueueId q, FlavorId f, Resource r,
                               int64_t available) const {
  if (!Tracks(q, f, r) || parent_[q] < 0) return 0;
  const Cell& c = cells_[CellIndex(q, f, r)];
  const int64_t own_unused = std::max<int64_t>(0, c.nominal - c.usage);
  return std::max<int64_t>(0, available - own_unused);
}

bool QuotaTree::Fits(QueueId q, FlavorId f, const Resources& amount,
                     Resource* failed) const {
  return FitsAvailable(
      amount, [&](Resource r) { return Available(q, f, r); }, failed);
}

bool QuotaTree::WithinBorrowingLimit(QueueId q, FlavorId f,
                                     const Resources& amount) const {
  for (Resource r : kAllResources) {
    const int64_t want = amount.Get(r);
    if (want <= 0 || !Tracks(q, f, r)) continue;
    const Cell& c = cells_[CellIndex(q, f, r)];
    if (c.borrowing_limit >= 0 &&
        c.usage + want > c.subtree + c.borrowing_limit) {
      return false;
    }
  }
  return true;
}

void QuotaTree::Add(QueueId q, FlavorId f, const Resources& amount) {
  for (Resource r : kAllResources) {
    int64_t delta = amount.Get(r);
    int node = q;
    if (!cells_[CellIndex(node, f, r)].tracked) continue;
    while (delta != 0) {
      Cell& c = cells_[CellIndex(node, f, r)];
      const int64_t g = Guaranteed(c);
      const int64_t before = std::max<int64_t>(0, c.usage - g);
      c.usage += delta;
      const int64_t after = std::max<int64_t>(0, c.usage - g);
      if (parent_[node] < 0) break;
      delta = after - before;
      node = parent_[node];
    }
  }
}

int64_t QuotaTree::AboveNominal(QueueId q, Resource r) const {
  int64_t sum = 0;
  for (FlavorId f = 0; f < num_flavors_; ++f) {
    const Cell& c = cells_[CellIndex(q, f, r)];
    if (c.tracked && c.usage > c.nominal) sum += c.usage - c.nominal;
  }
  return sum;
}

QuotaTree::Lent QuotaTree::LentByQueue() const {
  const int num_nodes = static_cast<int>(parent_.size());
  Lent out;
  out.num_flavors_ = num_flavors_;
  out.lent_.assign(
      static_cast<size_t>(num_queues_) * num_flavors_ * kNumResources, 0);
  // Cohorts top-down (shallowest first), each with its children.
  std::vector<std::vector<int>> children(num_nodes);
  std::vector<int> depth(num_nodes, 0);
  for (int n = 0; n < num_nodes; ++n) {
    if (parent_[n] >= 0) children[parent_[n]].push_back(n);
    for (int p = parent_[n]; p >= 0; p = parent_[p]) ++depth[n];
  }
  std::vector<int> cohorts;
  for (int n = num_queues_; n < num_nodes; ++n) {
    if (!children[n].empty()) cohorts.push_back(n);
  }
  std::stable_sort(cohorts.begin(), cohorts.end(),
                   [&](int a, int b) { return depth[a] < depth[b]; });
  std::vector<int64_t> attributed(num_nodes);
  std::vector<int64_t> unused;
  for (FlavorId f = 0; f < num_flavors_; ++f) {
    for (Resource r : kAllResources) {
      std::fill(attributed.begin(), attributed.end(), 0);
      for (int cohort : cohorts) {
        const Cell& c = cells_[CellIndex(cohort, f, r)];
        if (!c.tracked) continue;
        // What the children borrow beyond what they put in, and what each
        // of them has put in and not used.
        int64_t borrowed = 0;
        int64_t total_unused = 0;
        unused.assign(children[cohort].size(), 0);
        for (size_t i = 0; i < children[cohort].size(); ++i) {
          const Cell& k = cells_[CellIndex(children[cohort][i], f, r)];
          if (!k.tracked) continue;
          const int64_t g = Guaranteed(k);
          const int64_t put_in = k.subtree - g;
          const int64_t uses = std::max<int64_t>(0, k.usage - g);
          borrowed += std::max<int64_t>(0, uses - put_in);
          unused[i] = std::max<int64_t>(0, put_in - uses);
          total_unused += unused[i];
        }
        const int64_t from_parent =
            parent_[cohort] < 0 ? 0 : std::max<int64_t>(0, c.usage - c.subtree);
        int64_t amount =
            std::max<int64_t>(0, borrowed - from_parent) + attributed[cohort];
        // The cohort's own quota first.
        amount -= std::min(amount, c.nominal);
        amount = std::min(amount, total_unused);
        if (amount == 0) continue;
        // Then the children's, in proportion, by largest remainder.
        int64_t given = 0;
        std::vector<std::pair<__int128, size_t>> remainders;
        for (size_t i = 0; i < unused.size(); ++i) {
          if (unused[i] == 0) continue;
          const __int128 exact = static_cast<__int128>(amount) * unused[i];
          const int64_t share = static_cast<int64_t>(exact / total_unused);
          attributed[children[cohort][i]] += share;
          given += share;
          remainders.push_back({exact % total_unused, i});
        }
        std::stable_sort(
            remainders.begin(), remainders.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
        for (size_t j = 0; given < amount && j < remainders.size(); ++j) {
          ++attributed[children[cohort][remainders[j].second]];
          ++given;
        }
      }
      for (int q = 0; q < num_queues_; ++q) {
        out.lent_[CellIndex(q, f, r)] = attributed[q];
      }
    }
  }
  return out;
}

int64_t QuotaTree::CohortUsage(CohortId c, FlavorId f, Resource r) const {
  return cells_[CellIndex(num_queues_ + c, f, r)].usage;
}

int64_t QuotaTree::CohortSubtreeQuota(CohortId c, FlavorId f,
                                      Resource r) const {
  return cells_[CellIndex(num_queues_ + c, f, r)].subtree;
}

}  // namespace trainyard::scheduler::policy
