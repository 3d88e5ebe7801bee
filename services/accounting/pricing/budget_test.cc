#include "services/accounting/pricing/budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard::accounting::pricing {
namespace {

using ::testing::HasSubstr;

// 1,000.00 a month; notify at 50 %, spot only from 75 %, hold at 90 %
// (Kubecost users' 50/75/90).
BudgetRule Rule() {
  return {.monthly_amount_micros = 1'000'000'000,
          .thresholds = {{50, BudgetAction::kWarn},
                         {75, BudgetAction::kRestrictToSpot},
                         {90, BudgetAction::kHold}}};
}

TEST(BudgetTest, ThresholdsAreReachedAtExactlyTheirShare) {
  const BudgetRule rule = Rule();
  EXPECT_EQ(ActiveAction(rule, 499'999'999), BudgetAction::kNone);
  EXPECT_EQ(ActiveAction(rule, 500'000'000), BudgetAction::kWarn);
  EXPECT_EQ(ActiveAction(rule, 749'999'999), BudgetAction::kWarn);
  EXPECT_EQ(ActiveAction(rule, 750'000'000), BudgetAction::kRestrictToSpot);
  EXPECT_EQ(ActiveAction(rule, 900'000'000), BudgetAction::kHold);
  EXPECT_EQ(ActiveAction(rule, 5'000'000'000), BudgetAction::kHold);
  EXPECT_EQ(ReachedPercent(rule, 760'000'000), 75);
  EXPECT_EQ(ReachedPercent(rule, 0), 0);
}

TEST(BudgetTest, AStrongerActionBelowAWeakerOneStaysInForce) {
  // Hold at 80 %, a reminder at 100 %: past 100 % the hold stays.
  const BudgetRule rule = {
      .monthly_amount_micros = 100,
      .thresholds = {{80, BudgetAction::kHold}, {100, BudgetAction::kWarn}}};
  EXPECT_EQ(ActiveAction(rule, 120), BudgetAction::kHold);
}

TEST(BudgetTest, NewlyReachedNotifiesEachThresholdOnce) {
  const BudgetRule rule = Rule();
  std::vector<BudgetThreshold> first = NewlyReached(rule, 800'000'000, 0);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].percent, 50);
  EXPECT_EQ(first[1].percent, 75);
  EXPECT_TRUE(NewlyReached(rule, 800'000'000, 75).empty());
  std::vector<BudgetThreshold> later = NewlyReached(rule, 950'000'000, 75);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].percent, 90);
}

TEST(BudgetTest, HoldLimitIsTheLowestHoldThresholdRoundedDown) {
  EXPECT_EQ(HoldLimitMicros(Rule()), 900'000'000);
  const BudgetRule odd = {
      .monthly_amount_micros = 333,
      .thresholds = {{50, BudgetAction::kHold}, {100, BudgetAction::kHold}}};
  EXPECT_EQ(HoldLimitMicros(odd), 166);  // 166.5 rounded down
  const BudgetRule warn_only = {.monthly_amount_micros = 100,
                                .thresholds = {{100, BudgetAction::kWarn}}};
  EXPECT_EQ(HoldLimitMicros(warn_only), std::nullopt);
}

TEST(BudgetTest, ValidationNamesTheField) {
  BudgetRule rule = Rule();
  rule.monthly_amount_micros = -1;
  EXPECT_THAT(ValidateBudgetRule(rule).message(),
              HasSubstr("monthly_amount.micros"));
  rule = Rule();
  rule.user_hourly_cap_micros = -1;
  EXPECT_THAT(ValidateBudgetRule(rule).message(),
              HasSubstr("user_hourly_cap.micros"));
  rule.user_hourly_cap_micros = 0;  // no cap
  EXPECT_TRUE(ValidateBudgetRule(rule).ok());
  rule.user_hourly_cap_micros = 10'000'000;
  EXPECT_TRUE(ValidateBudgetRule(rule).ok());
  rule = Rule();
  rule.thresholds[1].percent = 50;
  EXPECT_THAT(ValidateBudgetRule(rule).message(),
              HasSubstr("thresholds[1].percent"));
  rule = Rule();
  rule.thresholds[2].percent = 1001;
  EXPECT_THAT(ValidateBudgetRule(rule).message(),
              HasSubstr("thresholds[2].percent"));
  rule = Rule();
  rule.thresholds[0].action = static_cast<BudgetAction>(7);
  EXPECT_THAT(ValidateBudgetRule(rule).message(),
              HasSubstr("thresholds[0].action"));
  rule.thresholds.clear();
  EXPECT_THAT(ValidateBudgetRule(rule).message(), HasSubstr("thresholds"));
  EXPECT_TRUE(ValidateBudgetRule(Rule()).ok());
}

TEST(BudgetTest, MonthsAreUtcCalendarMonths) {
  // 2026-02-14T12:00:00Z.
  const TimeMs t = 1'771'070'400'000;
  EXPECT_EQ(MonthStartMs(t), 1'769'904'000'000);      // 2026-02-01
  EXPECT_EQ(NextMonthStartMs(t), 1'772'323'200'000);  // 2026-03-01
  EXPECT_EQ(MonthStartMs(1'769'904'000'000), 1'769'904'000'000);
}

}  // namespace
}  // namespace trainyard::accounting::pricing
