// Quota accounting over the cohort tree, with Kueue's hierarchical semantics
// (including Kueue's hierarchical Cohorts: a cohort may carry quota itself).
//
// Every queue and every cohort is a node of the tree. Each node n may have,
// per (flavor, resource), a nominal quota, a borrowing limit and a lending
// limit (Queue::quotas, Cohort::quotas; a missing entry is nominal 0 with no
// limits). Per (flavor, resource):
//   - subtree(queue) = nominal(queue).
//   - subtree(cohort) = nominal(cohort)
//                       + sum over children c of (subtree(c) - guaranteed(c)).
//   - guaranteed(n) = max(0, subtree(n) - lending_limit(n)) if n has a lending
//     limit, else 0: what n withholds from its parent cohort.
//   - usage(queue) = what its running and admitted jobs use.
//   - usage(cohort) = sum over children c of max(0, usage(c) - guaranteed(c)).
//   - available(root) = subtree(root) - usage(root).
//   - available(n) = max(0, guaranteed(n) - usage(n)) + from_parent(n).
//   - from_parent(n) = max(0, min(available(parent), cap(n))).
//   - cap(n) = subtree(n) - guaranteed(n) - max(0, usage(n) - guaranteed(n))
//              + borrowing_limit(n) if n has a borrowing limit, else
//              unlimited; i.e. usage(n) <= subtree(n) + borrowing_limit(n).
// So a queue may use up to nominal + borrowing limit, borrowing only what its
// cohorts have unused (quota its siblings lend and the cohorts' own nominal
// quota); a lender (queue or cohort) keeps what its lending limit withholds for
// itself (a cohort: for the queues beneath it); and a cohort's borrowing limit
// caps what its whole subtree takes from the parent, so it caps every queue
// beneath it. Limits of a node without a parent have no effect: a queue without
// a cohort can use exactly its nominal quota, and a root cohort lends to and
// borrows from nobody. Without cohort quotas this is exactly the queue-only
// model (cohort cells: nominal 0, no limits).
//
// Resources a queue has no quota entry for (nullopt) are not limited for it and
// its usage of them is charged nowhere, even where a cohort above it has an
// entry for them. So a cohort's entry for (flavor, resource) only matters to
// queues that track that (flavor, resource): its nominal adds to what queues of
// its cohort tree may borrow, and its limits cap the tracking queues beneath
// it. Nor does a cohort's entry for a flavor let a queue use a flavor the queue
// does not list.
#ifndef TRAINYARD_SERVICES_SCHEDULER_POLICY_QUOTA_H_
#define TRAINYARD_SERVICES_SCHEDULER_POLICY_QUOTA_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/scheduler/policy/snapshot.h"

namespace trainyard::scheduler::policy {

class QuotaTree {
 public:
  static constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

  // Builds the tree from the snapshot's queues and cohorts and charges the
  // running attempts. The snapshot must be valid (ValidateSnapshot).
  explicit QuotaTree(const Snapshot& snapshot);

  // Whether queue q has a quota entry for resource r of flavor f.
  bool Tracks(QueueId q, FlavorId f, Resource r) const {
    return cells_[CellIndex(q, f, r)].tracked;
  }
  // How much of (f, r) queue q may still take now; kUnlimited if untracked.
  int64_t Available(QueueId q, FlavorId f, Resource r) const;
  // The part of Available() that comes from the cohort (beyond the queue's own
  // unused nominal quota): what the cohort "lends" it now.
  int64_t CohortLends(QueueId q, FlavorId f, Resource r) const;
  // CohortLends() where Available(q, f, r) is already known.
  int64_t CohortLends(QueueId q, FlavorId f, Resource r,
                      int64_t available) const;
  // Whether q may take `amount` of flavor f. On failure, *failed (if given) is
  // the first resource that does not fit.
  bool Fits(QueueId q, FlavorId f, const Resources& amount,
            Resource* failed = nullptr) const;
  // Fits() where available(r) gives Available(q, f, r) (or a cache of it).
  template <typename AvailableFn>
  static bool FitsAvailable(const Resources& amount, AvailableFn available,
                            Resource* failed = nullptr) {
    for (Resource r : kAllResources) {
      const int64_t want = amount.Get(r);
      // Untracked resources are available without limit.
      if (want > 0 && want > available(r)) {
        if (failed != nullptr) *failed = r;
        return false;
      }
    }
    return true;
  }
  // Charges (or, with negative amounts, releases) usage to q and its cohorts.
  // Whether `amount` more keeps the queue within its own nominal quota plus
  // borrowing limit on f (its cohort may still have no room for it).
  bool WithinBorrowingLimit(QueueId q, FlavorId f,
                            const Resources& amount) const;
  void Add(QueueId q, FlavorId f, const Resources& amount);

  int64_t Usage(QueueId q, FlavorId f, Resource r) const {
    return cells_[CellIndex(q, f, r)].usage;
  }
  int64_t Nominal(QueueId q, FlavorId f, Resource r) const {
    return cells_[CellIndex(q, f, r)].nominal;
  }
  // Sum over flavors of max(0, usage - nominal) for resource r.
  int64_t AboveNominal(QueueId q, Resource r) const;

  // The limit that keeps queue q from taking `want` more of (f, r) (for
  // explanations, where Fits() failed on r), from the queue up:
  struct Binding {
    enum Kind : uint8_t {
      kNone,                  // it fits
      kNoCohort,              // no cohort: nominal is all it may use
      kQueueBorrowingLimit,   // value: the queue's borrowing limit
      kNominalLent,           // within nominal; value: of it lent to others
      kCohortBorrowingLimit,  // value: the limit of cohort `cohort`
      kTreeInUse,             // value: left to lend in the tree (cohort:
                              // the root)
      kWithheld,              // as kTreeInUse, and lending limits of other
                              // queues and cohorts keep `withheld` (their
                              // guaranteed quota, used or not) from it
    };
    Kind kind = kNone;
    CohortId cohort = -1;
    int64_t value = 0;
    int64_t withheld = 0;
  };
  Binding BindingLimit(QueueId q, FlavorId f, Resource r, int64_t want) const;
  // BindingLimit() with `available` as Available(q, f, r) and `tree()`
  // giving TreeBinding(q, f, r) (or caches of them).
  template <typename TreeFn>
  Binding BindingLimitWith(QueueId q, FlavorId f, Resource r, int64_t want,
                           int64_t available, TreeFn tree) const {
    if (!Tracks(q, f, r) || want <= available) return {};
    const Cell& c = cells_[CellIndex(q, f, r)];
    if (parent_[q] < 0) return {.kind = Binding::kNoCohort, .value = c.nominal};
    if (c.borrowing_limit >= 0 &&
        c.usage + want > c.subtree + c.borrowing_limit) {
      return {.kind = Binding::kQueueBorrowingLimit,
              .value = c.borrowing_limit};
    }
    if (c.usage + want <= c.nominal) {
      // Its own nominal quota would hold the job: others borrow it.
      return {.kind = Binding::kNominalLent,
              .value = std::max<int64_t>(0, c.nominal - c.usage - available)};
    }
    return tree();
  }
  // Whether a cohort on queue q's path to its root (the root aside) has a
  // borrowing limit on (f, r): only then does the limit that binds depend on
  // the usage of other queues' beyond what is left to lend in the tree.
  bool CohortLimitAbove(QueueId q, FlavorId f, Resource r) const {
    return cells_[CellIndex(q, f, r)].cohort_limit_above;
  }
  // The part of BindingLimit() above queue q (which does not depend on what
  // the job wants): the first cohort on q's path whose borrowing limit binds,
  // else what its tree has left to lend and what lending limits withhold.
  // For a queue in a cohort.
  Binding TreeBinding(QueueId q, FlavorId f, Resource r) const;

  // --- Fair share (Kueue's dominant resource share) ---
  // Shares are fixed-point: kShareOne is a share of 1 (a node that borrows
  // all its cohort tree could lend it), so equal fractions compare equal.
  static constexpr int64_t kShareOne = 1'000'000'000;
  static constexpr int64_t kInfiniteShare = std::numeric_limits<int64_t>::max();
  // Tree nodes: queue q is node q, cohort c is node QueueCount() + c.
  int QueueCount() const { return num_queues_; }
  int CohortNode(CohortId c) const { return num_queues_ + c; }
  // The parent of a tree node; -1 at a root.
  int Parent(int node) const { return parent_[node]; }
  // The share of tree node `node`: the largest, over the (flavor, resource)
  // cells it tracks, of its usage above its own quota (a queue: nominal; a
  // cohort: its subtree quota) divided by Lendable() of that cell, then
  // divided by `weight`; in units of 1 / kShareOne, rounded down. 0 for a
  // root (a queue without a cohort) and within quota; kInfiniteShare above
  // quota at weight 0. Cells whose Lendable() is 0 are skipped (as Kueue).
  int64_t Share(int node, double weight) const;
  // What node's parent could lend it of (f, r) if the whole tree were idle
  // (Kueue's potentialAvailable of the parent): static, from the quotas and
  // limits alone.
  int64_t Lendable(int node, FlavorId f, Resource r) const;
  // The two children of the lowest common ancestor of nodes a and b on their
  // paths to it (Kueue's "almost LCA"): the nodes whose shares decide between
  // a and b. {a, b} for siblings; {-1, -1} when they share no root.
  std::pair<int, int> AlmostLca(int a, int b) const;
  // Usage charged to a cohort (what its children use beyond their guarantees).
  // --- What each queue lends ---
  // What of each queue's quota other queues of its cohort tree are using now,
  // per (flavor, resource) cell: Get(q, f, r). The tree's borrowing is
  // attributed top-down. At each cohort, what its children use beyond what
  // they put in (their borrowing), less what the cohort itself takes from its
  // parent, plus what the parent attributed to the cohort as a lender, is
  // served first from the cohort's own nominal quota, then from its
  // children's unused lendable quota (subtree - guaranteed - own use beyond
  // guaranteed) in proportion to it, rounded by largest remainder (ties: the
  // lower node id, i.e. snapshot order). A child cohort passes what it was
  // attributed on to its own children the same way. 0 for queues without a
  // cohort and untracked cells.
  class Lent {
   public:
    int64_t Get(QueueId q, FlavorId f, Resource r) const {
      return lent_[(static_cast<size_t>(q) * num_flavors_ + f) * kNumResources +
                   static_cast<int>(r)];
    }

   private:
    friend class QuotaTree;
    int num_flavors_ = 0;
    std::vector<int64_t> lent_;
  };
  Lent LentByQueue() const;

  int64_t CohortUsage(CohortId c, FlavorId f, Resource r) const;
  int64_t CohortSubtreeQuota(CohortId c, FlavorId f, Resource r) const;

 private:
  struct Cell {
    bool tracked = false;
    // A queue's: whether a cohort on its path (below the root) has a
    // borrowing limit on the cell's (flavor, resource).
    bool cohort_limit_above = false;
    // A queue's: what lending limits of the other queues and cohorts of its
    // tree keep for themselves (their guaranteed quota) on the cell's
    // (flavor, resource).
    int64_t withheld = 0;
    int64_t nominal = 0;
    int64_t borrowing_limit = -1;  // -1: unlimited
    int64_t lending_limit = -1;    // -1: unlimited
    int64_t subtree = 0;
    int64_t usage = 0;
    // Kueue's potentialAvailable: the most this node could take of the tree
    // if every other node were idle (quota.cc).
    int64_t potential = 0;
  };

  int CellIndex(int node, FlavorId f, Resource r) const {
    return (node * num_flavors_ + f) * kNumResources + static_cast<int>(r);
  }
  static int64_t Guaranteed(const Cell& c) {
    return c.lending_limit < 0
               ? 0
               : (c.subtree > c.lending_limit ? c.subtree - c.lending_limit
                                              : 0);
  }
  int64_t AvailableAt(int node, FlavorId f, Resource r) const;
  int64_t ParentPart(int node, FlavorId f, Resource r) const;

  int num_queues_ = 0;
  int num_flavors_ = 0;
  // Tree nodes: queues are [0, num_queues_), cohort c is num_queues_ + c.
  std::vector<int> parent_;  // -1 for roots
  std::vector<Cell> cells_;
};

}  // namespace trainyard::scheduler::policy

#endif  // TRAINYARD_SERVICES_SCHEDULER_POLICY_QUOTA_H_
