#include "services/scheduler/policy/quota.h"

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::SnapshotBuilder;
constexpr Resource kGpu = Resource::kGpu;

// A cohort's own quota for resource r of flavor f (Cohort::quotas).
void AddCohortQuota(SnapshotBuilder& b, CohortId c, FlavorId f, int64_t nominal,
                    std::optional<int64_t> borrowing_limit = std::nullopt,
                    std::optional<int64_t> lending_limit = std::nullopt,
                    Resource r = kGpu) {
  FlavorQuota fq{.flavor = f};
  fq.resources[static_cast<int>(r)] =
      ResourceQuota{.nominal = nominal,
                    .borrowing_limit = borrowing_limit,
                    .lending_limit = lending_limit};
  b.snapshot().cohorts[c].quotas.push_back(fq);
}

// Cohort "org" with sub-cohorts x (queues a and b) and y (queue c), each queue
// with a nominal GPU quota of flavor f.
struct TwoSubtrees {
  CohortId root, x, y;
  QueueId a, bq, cq;
};
TwoSubtrees AddTwoSubtrees(SnapshotBuilder& b, FlavorId f, int64_t a_gpus,
                           int64_t b_gpus, int64_t c_gpus) {
  const CohortId root = b.AddCohort("org");
  const CohortId x = b.AddCohort("x", root);
  const CohortId y = b.AddCohort("y", root);
  return {root,
          x,
          y,
          b.AddGpuQueue("a", x, f, a_gpus),
          b.AddGpuQueue("b", x, f, b_gpus),
          b.AddGpuQueue("c", y, f, c_gpus)};
}

TEST(QuotaTreeTest, QueueWithoutCohortUsesOnlyNominal) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  QueueId q = b.AddGpuQueue("solo", std::nullopt, f, 10,
                            /*borrowing_limit=*/std::nullopt);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.Available(q, f, kGpu), 10);
  EXPECT_TRUE(tree.Fits(q, f, {.gpus = 10}));
  EXPECT_FALSE(tree.Fits(q, f, {.gpus = 11}));
  tree.Add(q, f, {.gpus = 7});
  EXPECT_EQ(tree.Available(q, f, kGpu), 3);
  EXPECT_EQ(tree.CohortLends(q, f, kGpu), 0);
}

TEST(QuotaTreeTest, BorrowsWhatTheCohortHasUnused) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId c = b.AddCohort("research");
  QueueId a = b.AddGpuQueue("a", c, f, 10);
  QueueId other = b.AddGpuQueue("b", c, f, 10);
  b.AddRunningQuotaOnly(1, other, f, 4);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.Available(a, f, kGpu), 16);
  EXPECT_EQ(tree.CohortLends(a, f, kGpu), 6);
  EXPECT_EQ(tree.Available(other, f, kGpu), 16);
  tree.Add(a, f, {.gpus = 16});
  EXPECT_EQ(tree.Available(a, f, kGpu), 0);
  // The lender's own nominal quota is in use by the borrower: nothing left.
  EXPECT_EQ(tree.Available(other, f, kGpu), 0);
  EXPECT_EQ(tree.CohortUsage(c, f, kGpu), 20);
  EXPECT_EQ(tree.AboveNominal(a, kGpu), 6);
  // Releasing usage gives it back.
  tree.Add(a, f, {.gpus = -6});
  EXPECT_EQ(tree.Available(other, f, kGpu), 6);
}

TEST(QuotaTreeTest, BorrowingLimitCapsBorrowing) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId c = b.AddCohort("research");
  QueueId a = b.AddGpuQueue("a", c, f, 10, /*borrowing_limit=*/3);
  QueueId other = b.AddGpuQueue("b", c, f, 10);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.Available(a, f, kGpu), 13);
  tree.Add(a, f, {.gpus = 12});
  EXPECT_EQ(tree.Available(a, f, kGpu), 1);
  EXPECT_EQ(tree.Available(other, f, kGpu), 8);
}

TEST(QuotaTreeTest, LenderKeepsWhatItsLendingLimitWithholds) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId c = b.AddCohort("research");
  QueueId a = b.AddGpuQueue("a", c, f, 10);
  QueueId lender =
      b.AddGpuQueue("lender", c, f, 10, std::nullopt, /*lending_limit=*/4);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.Available(a, f, kGpu), 14);  // 10 own + 4 lent.
  EXPECT_EQ(tree.CohortSubtreeQuota(c, f, kGpu), 14);
  tree.Add(a, f, {.gpus = 14});
  EXPECT_EQ(tree.Available(a, f, kGpu), 0);
  // The 6 withheld GPUs stay available to the lender.
  EXPECT_EQ(tree.Available(lender, f, kGpu), 6);
  tree.Add(lender, f, {.gpus = 6});
  EXPECT_EQ(tree.Available(lender, f, kGpu), 0);
}

TEST(QuotaTreeTest, LendingLimitZeroLendsNothing) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId c = b.AddCohort("research");
  QueueId a = b.AddGpuQueue("a", c, f, 10);
  QueueId lender =
      b.AddGpuQueue("lender", c, f, 10, std::nullopt, /*lending_limit=*/0);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.Available(a, f, kGpu), 10);
  EXPECT_EQ(tree.CohortLends(a, f, kGpu), 0);
  // The lender can still borrow a's unused quota.
  EXPECT_EQ(tree.Available(lender, f, kGpu), 20);
}

TEST(QuotaTreeTest, NestedCohortsLendAcrossLevels) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  auto [root, x, y, a, bq, cq] = AddTwoSubtrees(b, f, 10, 10, 8);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.CohortSubtreeQuota(root, f, kGpu), 28);
  EXPECT_EQ(tree.Available(a, f, kGpu), 28);
  tree.Add(cq, f, {.gpus = 5});
  EXPECT_EQ(tree.Available(a, f, kGpu), 23);
  EXPECT_EQ(tree.CohortUsage(y, f, kGpu), 5);
  EXPECT_EQ(tree.CohortUsage(root, f, kGpu), 5);
  tree.Add(a, f, {.gpus = 22});
  EXPECT_EQ(tree.CohortUsage(x, f, kGpu), 22);
  EXPECT_EQ(tree.Available(cq, f, kGpu), 1);
  EXPECT_EQ(tree.Available(bq, f, kGpu), 1);
}

TEST(QuotaTreeTest, NestedCohortWithLendingLimitOnQueue) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId root = b.AddCohort("org");
  CohortId x = b.AddCohort("x", root);
  CohortId y = b.AddCohort("y", root);
  QueueId a = b.AddGpuQueue("a", x, f, 10, /*borrowing_limit=*/5);
  QueueId cq = b.AddGpuQueue("c", y, f, 8, std::nullopt, /*lending_limit=*/2);
  QuotaTree tree(b.Build());
  // c lends 2 into y, y passes it to the root; a's borrowing limit is 5.
  EXPECT_EQ(tree.Available(a, f, kGpu), 12);
  EXPECT_EQ(tree.Available(cq, f, kGpu), 18);  // 6 withheld + 12 in the tree.
}

TEST(QuotaTreeTest, UntrackedResourcesAndFlavorsAreUnlimited) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  FlavorId g = b.AddFlavor("h100");
  QueueId q = b.AddGpuQueue("q", std::nullopt, f, 1);
  QuotaTree tree(b.Build());
  EXPECT_FALSE(tree.Tracks(q, f, Resource::kCpu));
  EXPECT_FALSE(tree.Tracks(q, g, kGpu));
  EXPECT_EQ(tree.Available(q, f, Resource::kCpu), QuotaTree::kUnlimited);
  EXPECT_TRUE(tree.Fits(q, f, {.gpus = 1, .cpu_millis = 1'000'000}));
  Resource failed = Resource::kCpu;
  EXPECT_FALSE(tree.Fits(q, f, {.gpus = 2}, &failed));
  EXPECT_EQ(failed, kGpu);
}

TEST(QuotaTreeTest, CohortNominalQuotaIsLentToItsQueues) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId c = b.AddCohort("research");
  QueueId a = b.AddGpuQueue("a", c, f, 2);
  QueueId other = b.AddGpuQueue("b", c, f, 4);
  QueueId empty = b.AddGpuQueue("empty", c, f, 0);
  AddCohortQuota(b, c, f, 8);
  QuotaTree tree(b.Build());
  // 8 of the cohort's own + 2 + 4 lent by the queues.
  EXPECT_EQ(tree.CohortSubtreeQuota(c, f, kGpu), 14);
  EXPECT_EQ(tree.Available(a, f, kGpu), 14);
  EXPECT_EQ(tree.CohortLends(a, f, kGpu), 12);
  EXPECT_EQ(tree.Available(empty, f, kGpu), 14);
  EXPECT_EQ(tree.CohortLends(empty, f, kGpu), 14);
  tree.Add(a, f, {.gpus = 10});
  EXPECT_EQ(tree.AboveNominal(a, kGpu), 8);
  EXPECT_EQ(tree.CohortUsage(c, f, kGpu), 10);
  EXPECT_EQ(tree.Available(other, f, kGpu), 4);
  tree.Add(empty, f, {.gpus = 4});
  EXPECT_EQ(tree.Available(a, f, kGpu), 0);
  EXPECT_EQ(tree.Available(other, f, kGpu), 0);
  EXPECT_FALSE(tree.Fits(other, f, {.gpus = 1}));
  tree.Add(a, f, {.gpus = -10});
  EXPECT_EQ(tree.Available(other, f, kGpu), 10);
}

TEST(QuotaTreeTest, CohortBorrowingLimitCapsTheWholeSubtree) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  auto [root, x, y, a, bq, cq] = AddTwoSubtrees(b, f, 5, 5, 20);
  // x's subtree (a and b) may use at most its 10 + 3 borrowed from the root.
  AddCohortQuota(b, x, f, 0, /*borrowing_limit=*/3);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.CohortSubtreeQuota(root, f, kGpu), 30);
  EXPECT_EQ(tree.Available(a, f, kGpu), 13);
  EXPECT_EQ(tree.Available(cq, f, kGpu), 30);
  tree.Add(a, f, {.gpus = 8});
  // b has its own 5 unused, but x may only borrow 3 from the root in all.
  EXPECT_EQ(tree.Available(bq, f, kGpu), 5);
  EXPECT_EQ(tree.Available(a, f, kGpu), 5);
  tree.Add(bq, f, {.gpus = 5});
  EXPECT_EQ(tree.CohortUsage(x, f, kGpu), 13);
  EXPECT_EQ(tree.Available(a, f, kGpu), 0);
  EXPECT_EQ(tree.Available(bq, f, kGpu), 0);
  EXPECT_EQ(tree.CohortLends(bq, f, kGpu), 0);
  // The root still has 17 unused: y's queue may take all of it.
  EXPECT_EQ(tree.Available(cq, f, kGpu), 17);
}

TEST(QuotaTreeTest, CohortLendingLimitWithholdsFromSiblingSubtrees) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  auto [root, x, y, a, bq, cq] = AddTwoSubtrees(b, f, 5, 5, 2);
  // x lends 4 of its 10 to the root and keeps 6 for a and b.
  AddCohortQuota(b, x, f, 0, std::nullopt, /*lending_limit=*/4);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.CohortSubtreeQuota(x, f, kGpu), 10);
  EXPECT_EQ(tree.CohortSubtreeQuota(root, f, kGpu), 6);
  EXPECT_EQ(tree.Available(cq, f, kGpu), 6);  // 2 own + 4 lent by x.
  EXPECT_EQ(tree.Available(a, f, kGpu), 12);  // 6 withheld + 6 in the root.
  tree.Add(cq, f, {.gpus = 6});
  EXPECT_EQ(tree.Available(cq, f, kGpu), 0);
  // The 6 withheld by x stay available to its queues.
  EXPECT_EQ(tree.Available(a, f, kGpu), 6);
  tree.Add(a, f, {.gpus = 6});
  EXPECT_EQ(tree.CohortUsage(root, f, kGpu), 6);  // a's 6 stay within x.
  EXPECT_EQ(tree.Available(bq, f, kGpu), 0);
  tree.Add(cq, f, {.gpus = -6});
  // The root's 6 (x's 4 lent and c's 2) are back.
  EXPECT_EQ(tree.Available(bq, f, kGpu), 6);
}

TEST(QuotaTreeTest, NestedCohortsWithLimitsAtTwoLevels) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId root = b.AddCohort("org");
  CohortId mid = b.AddCohort("mid", root);
  CohortId leaf = b.AddCohort("leaf", mid);
  QueueId a = b.AddGpuQueue("a", leaf, f, 2);
  QueueId bq = b.AddGpuQueue("b", mid, f, 4);
  QueueId cq = b.AddGpuQueue("c", root, f, 10);
  AddCohortQuota(b, root, f, 4);
  // mid: 6 of its own + 2 + 4 = 12, lends 3 to the root (withholds 9) and may
  // use at most 12 + 2.
  AddCohortQuota(b, mid, f, 6, /*borrowing_limit=*/2, /*lending_limit=*/3);
  // leaf: 2 (a's), may use at most 2 + 5.
  AddCohortQuota(b, leaf, f, 0, /*borrowing_limit=*/5);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.CohortSubtreeQuota(leaf, f, kGpu), 2);
  EXPECT_EQ(tree.CohortSubtreeQuota(mid, f, kGpu), 12);
  EXPECT_EQ(tree.CohortSubtreeQuota(root, f, kGpu), 17);  // 4 + 3 + 10.
  EXPECT_EQ(tree.Available(cq, f, kGpu), 17);
  EXPECT_EQ(tree.Available(a, f, kGpu), 7);    // leaf's borrowing limit.
  EXPECT_EQ(tree.Available(bq, f, kGpu), 14);  // mid's borrowing limit.
  tree.Add(a, f, {.gpus = 7});
  EXPECT_EQ(tree.CohortUsage(mid, f, kGpu), 7);
  EXPECT_EQ(tree.CohortUsage(root, f, kGpu), 0);  // Within mid's 9 withheld.
  EXPECT_EQ(tree.Available(a, f, kGpu), 0);
  EXPECT_EQ(tree.Available(bq, f, kGpu), 7);  // 2 withheld + 5 from the root.
  tree.Add(bq, f, {.gpus = 7});
  EXPECT_EQ(tree.CohortUsage(root, f, kGpu), 5);
  EXPECT_EQ(tree.Available(bq, f, kGpu), 0);
  EXPECT_EQ(tree.Available(cq, f, kGpu), 12);
  tree.Add(cq, f, {.gpus = 12});
  tree.Add(a, f, {.gpus = -7});
  // mid has 2 of its withheld 9 unused, and the root 5 (its own 2 left and
  // mid's 3): a gets 7, within leaf's limit.
  EXPECT_EQ(tree.Available(a, f, kGpu), 7);
  EXPECT_EQ(tree.Available(cq, f, kGpu), 5);
}

TEST(QuotaTreeTest, CohortQuotaOnlyMattersForResourcesQueuesTrack) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  FlavorId g = b.AddFlavor("h100");
  CohortId root = b.AddCohort("org");
  CohortId x = b.AddCohort("x", root);
  QueueId q = b.AddGpuQueue("q", x, f, 1);
  QueueId r = b.AddGpuQueue("r", root, f, 1);
  // x limits CPU of a100 and GPUs of h100, which q has no quota for.
  AddCohortQuota(b, x, f, 1000, /*borrowing_limit=*/0, std::nullopt,
                 Resource::kCpu);
  AddCohortQuota(b, x, g, 2, /*borrowing_limit=*/0);
  // The root's sibling cohort y carries a100 GPUs no queue beneath it tracks.
  CohortId y = b.AddCohort("y", root);
  AddCohortQuota(b, y, f, 5);
  QuotaTree tree(b.Build());
  // q's CPU and h100 stay untracked: unlimited and charged nowhere.
  EXPECT_FALSE(tree.Tracks(q, f, Resource::kCpu));
  EXPECT_FALSE(tree.Tracks(q, g, kGpu));
  EXPECT_EQ(tree.Available(q, f, Resource::kCpu), QuotaTree::kUnlimited);
  EXPECT_EQ(tree.Available(q, g, kGpu), QuotaTree::kUnlimited);
  EXPECT_TRUE(tree.Fits(q, f, {.gpus = 1, .cpu_millis = 1'000'000}));
  tree.Add(q, f, {.cpu_millis = 5000});
  tree.Add(q, g, {.gpus = 3});
  EXPECT_EQ(tree.CohortUsage(x, f, Resource::kCpu), 0);
  EXPECT_EQ(tree.CohortUsage(x, g, kGpu), 0);
  // y's own a100 GPU quota is in the tree for the queues that track it.
  EXPECT_EQ(tree.CohortSubtreeQuota(root, f, kGpu), 7);
  EXPECT_EQ(tree.Available(q, f, kGpu), 7);
  EXPECT_EQ(tree.Available(r, f, kGpu), 7);
}

TEST(QuotaTreeTest, ValidateSnapshotChecksCohortQuotas) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("h100");
  b.AddCohort("org");
  CohortId c = b.AddCohort("x", 0);
  AddCohortQuota(b, c, f, 4);
  EXPECT_TRUE(ValidateSnapshot(b.Build()).ok());
  AddCohortQuota(b, c, f, 4);
  EXPECT_EQ(ValidateSnapshot(b.Build()),
            absl::InvalidArgumentError(
                "cohorts[1].quotas: flavor h100 listed twice"));
  b.snapshot().cohorts[c].quotas.pop_back();
  b.snapshot().cohorts[c].quotas[0].flavor = 3;
  EXPECT_EQ(
      ValidateSnapshot(b.Build()),
      absl::InvalidArgumentError("cohorts[1].quotas: flavor out of range"));
  b.snapshot().cohorts[c].quotas.clear();
  AddCohortQuota(b, c, f, 4, std::nullopt, /*lending_limit=*/-1);
  EXPECT_EQ(ValidateSnapshot(b.Build()),
            absl::InvalidArgumentError("cohorts[1].quotas: negative quota"));
}

// Through Decide(): job 1 fits only thanks to the cohort's own quota, job 2
// is held by its sub-cohort's borrowing limit although the tree has room.
TEST(QuotaTreeTest, DecideAdmitsOnCohortQuotaAndHoldsAtCohortBorrowingLimit) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  b.AddNodes(2, f, 8);
  CohortId org = b.AddCohort("org");
  CohortId lab = b.AddCohort("lab", org);
  QueueId a = b.AddGpuQueue("a", org, f, 2);
  QueueId lq = b.AddGpuQueue("l", lab, f, 2);
  AddCohortQuota(b, org, f, 8);
  AddCohortQuota(b, lab, f, 0, /*borrowing_limit=*/1);
  b.AddJob(1, a, 1, 6);
  b.AddJob(2, lq, 1, 4);
  const Decisions d = Decide(b.Build());
  ASSERT_EQ(d.admissions.size(), 1u);
  EXPECT_EQ(d.admissions[0].job, 1);
  EXPECT_TRUE(d.admissions[0].borrowing);
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].job, 2);
  EXPECT_EQ(d.pending[0].reason, PendingReason::kQuotaExhausted);
  // l may use its 2 + lab's limit of 1; org still has 6 unused.
  EXPECT_EQ(d.pending[0].message,
            "QUOTA_EXHAUSTED: queue l gpu 0/2, cohort lends 1, job needs 4 "
            "(flavor a100): cohort lab's borrowing limit (1) binds");

  // Without the borrowing limit the tree's unused quota admits job 2 too.
  b.snapshot().cohorts[lab].quotas.clear();
  EXPECT_EQ(Decide(b.Build()).admissions.size(), 2u);
}

// What each queue lends, worked by hand. Cohort "research": a (nominal 8), b
// (4), c (4, lending limit 2: guaranteed 2) and d (0). a uses 2, b 1, c 0 and
// d 10, so d borrows 10 and the others can lend 6, 3 and 2 (11). Shares of
// 10: 10*6/11 = 5.45, 10*3/11 = 2.73, 10*2/11 = 1.82 → floors 5, 2, 1 (8);
// the two left go to the largest remainders, c (.82) then b (.73): 5, 3, 2.
TEST(QuotaTreeTest, LentSharesTheBorrowingAmongLendersByLargestRemainder) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  FlavorId other = b.AddFlavor("h100");
  CohortId c = b.AddCohort("research");
  QueueId qa = b.AddGpuQueue("a", c, f, 8);
  QueueId qb = b.AddGpuQueue("b", c, f, 4);
  QueueId qc = b.AddGpuQueue("c", c, f, 4, std::nullopt, /*lending_limit=*/2);
  QueueId qd = b.AddGpuQueue("d", c, f, 0);
  QueueId solo = b.AddGpuQueue("solo", std::nullopt, f, 4);
  b.AddRunningQuotaOnly(1, qa, f, 2);
  b.AddRunningQuotaOnly(2, qb, f, 1);
  b.AddRunningQuotaOnly(3, qd, f, 10);
  b.AddRunningQuotaOnly(4, solo, f, 1);
  QuotaTree tree(b.Build());
  QuotaTree::Lent lent = tree.LentByQueue();
  EXPECT_EQ(lent.Get(qa, f, kGpu), 5);
  EXPECT_EQ(lent.Get(qb, f, kGpu), 3);
  EXPECT_EQ(lent.Get(qc, f, kGpu), 2);
  EXPECT_EQ(lent.Get(qd, f, kGpu), 0);
  EXPECT_EQ(lent.Get(solo, f, kGpu), 0);
  EXPECT_EQ(lent.Get(qa, other, kGpu), 0);
  EXPECT_EQ(lent.Get(qa, f, Resource::kCpu), 0);
  // Less borrowing: d returns 7 of its 10 GPUs (3 borrowed). 3*6/11 = 1.64,
  // 3*3/11 = 0.82, 3*2/11 = 0.55 → 1, 0, 0; the two left go to b (.82) and
  // a (.64), not c (.55): 2, 1, 0.
  tree.Add(qd, f, {.gpus = -7});
  lent = tree.LentByQueue();
  EXPECT_EQ(lent.Get(qa, f, kGpu), 2);
  EXPECT_EQ(lent.Get(qb, f, kGpu), 1);
  EXPECT_EQ(lent.Get(qc, f, kGpu), 0);
  // Nobody above nominal: nothing lent.
  tree.Add(qd, f, {.gpus = -3});
  lent = tree.LentByQueue();
  EXPECT_EQ(
      lent.Get(qa, f, kGpu) + lent.Get(qb, f, kGpu) + lent.Get(qc, f, kGpu), 0);
}

// Nested cohorts, worked by hand: org → x (a: 8, b: 4) and y (c: 6). a uses
// 12 (4 above nominal), b 1. x puts 12 into org and uses 13, so 1 of a's 4
// comes from org and 3 from inside x, all from b (the only lender there).
// Without quota of its own org serves the 1 from y, i.e. from c; with a
// nominal quota of 2 of its own, org serves it itself.
TEST(QuotaTreeTest, LentFollowsTheBorrowingDownNestedCohorts) {
  for (const int64_t org_nominal : {0, 2}) {
    SCOPED_TRACE(org_nominal);
    SnapshotBuilder b;
    FlavorId f = b.AddFlavor("a100");
    TwoSubtrees t = AddTwoSubtrees(b, f, 8, 4, 6);
    if (org_nominal > 0) AddCohortQuota(b, t.root, f, org_nominal);
    b.AddRunningQuotaOnly(1, t.a, f, 12);
    b.AddRunningQuotaOnly(2, t.bq, f, 1);
    QuotaTree tree(b.Build());
    const QuotaTree::Lent lent = tree.LentByQueue();
    EXPECT_EQ(lent.Get(t.a, f, kGpu), 0);
    EXPECT_EQ(lent.Get(t.bq, f, kGpu), 3);
    EXPECT_EQ(lent.Get(t.cq, f, kGpu), org_nominal == 0 ? 1 : 0);
  }
}

}  // namespace
}  // namespace trainyard::scheduler::policy
