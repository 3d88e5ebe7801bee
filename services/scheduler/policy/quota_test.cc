#include "services/scheduler/policy/quota.h"

#include "gtest/gtest.h"
#include "services/scheduler/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

using testing::SnapshotBuilder;
constexpr Resource kGpu = Resource::kGpu;

TEST(QuotaTreeTest, QueueWithoutCohortUsesOnlyNominal) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  QueueId q = b.AddQueue("solo");
  b.AddGpuQuota(q, f, 10, /*borrowing_limit=*/std::nullopt);
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
  QueueId a = b.AddQueue("a", c);
  QueueId other = b.AddQueue("b", c);
  b.AddGpuQuota(a, f, 10);
  b.AddGpuQuota(other, f, 10);
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
  QueueId a = b.AddQueue("a", c);
  QueueId other = b.AddQueue("b", c);
  b.AddGpuQuota(a, f, 10, /*borrowing_limit=*/3);
  b.AddGpuQuota(other, f, 10);
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
  QueueId a = b.AddQueue("a", c);
  QueueId lender = b.AddQueue("lender", c);
  b.AddGpuQuota(a, f, 10);
  b.AddGpuQuota(lender, f, 10, std::nullopt, /*lending_limit=*/4);
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
  QueueId a = b.AddQueue("a", c);
  QueueId lender = b.AddQueue("lender", c);
  b.AddGpuQuota(a, f, 10);
  b.AddGpuQuota(lender, f, 10, std::nullopt, /*lending_limit=*/0);
  QuotaTree tree(b.Build());
  EXPECT_EQ(tree.Available(a, f, kGpu), 10);
  EXPECT_EQ(tree.CohortLends(a, f, kGpu), 0);
  // The lender can still borrow a's unused quota.
  EXPECT_EQ(tree.Available(lender, f, kGpu), 20);
}

TEST(QuotaTreeTest, NestedCohortsLendAcrossLevels) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  CohortId root = b.AddCohort("org");
  CohortId x = b.AddCohort("x", root);
  CohortId y = b.AddCohort("y", root);
  QueueId a = b.AddQueue("a", x);
  QueueId bq = b.AddQueue("b", x);
  QueueId cq = b.AddQueue("c", y);
  b.AddGpuQuota(a, f, 10);
  b.AddGpuQuota(bq, f, 10);
  b.AddGpuQuota(cq, f, 8);
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
  QueueId a = b.AddQueue("a", x);
  QueueId cq = b.AddQueue("c", y);
  b.AddGpuQuota(a, f, 10, /*borrowing_limit=*/5);
  b.AddGpuQuota(cq, f, 8, std::nullopt, /*lending_limit=*/2);
  QuotaTree tree(b.Build());
  // c lends 2 into y, y passes it to the root; a's borrowing limit is 5.
  EXPECT_EQ(tree.Available(a, f, kGpu), 12);
  EXPECT_EQ(tree.Available(cq, f, kGpu), 18);  // 6 withheld + 12 in the tree.
}

TEST(QuotaTreeTest, UntrackedResourcesAndFlavorsAreUnlimited) {
  SnapshotBuilder b;
  FlavorId f = b.AddFlavor("a100");
  FlavorId g = b.AddFlavor("h100");
  QueueId q = b.AddQueue("q");
  b.AddGpuQuota(q, f, 1);
  QuotaTree tree(b.Build());
  EXPECT_FALSE(tree.Tracks(q, f, Resource::kCpu));
  EXPECT_FALSE(tree.Tracks(q, g, kGpu));
  EXPECT_EQ(tree.Available(q, f, Resource::kCpu), QuotaTree::kUnlimited);
  EXPECT_TRUE(tree.Fits(q, f, {.gpus = 1, .cpu_millis = 1'000'000}));
  Resource failed = Resource::kCpu;
  EXPECT_FALSE(tree.Fits(q, f, {.gpus = 2}, &failed));
  EXPECT_EQ(failed, kGpu);
}

}  // namespace
}  // namespace trainyard::scheduler::policy
