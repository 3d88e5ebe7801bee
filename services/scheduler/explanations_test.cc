#include "services/scheduler/explanations.h"

#include "gtest/gtest.h"

namespace trainyard::scheduler {
namespace {

const absl::Time kWritten = absl::FromUnixSeconds(1'800'000'000);
const absl::Duration kRefresh = absl::Seconds(5);

bool Due(std::string_view old_reason, std::string_view old_message,
         std::string_view reason, std::string_view message,
         absl::Duration since) {
  return ExplanationDue(old_reason, old_message, kWritten, reason, message,
                        kWritten + since, kRefresh);
}

TEST(ExplanationsTest, NothingChangedIsNeverRewritten) {
  EXPECT_FALSE(Due("NO_CAPACITY", "m", "NO_CAPACITY", "m", absl::Hours(1)));
}

TEST(ExplanationsTest, ANewMessageWaitsForTheRefresh) {
  EXPECT_FALSE(Due("QUOTA_EXHAUSTED", "gpu 63/64", "QUOTA_EXHAUSTED",
                   "gpu 64/64", absl::Seconds(1)));
  EXPECT_TRUE(Due("QUOTA_EXHAUSTED", "gpu 63/64", "QUOTA_EXHAUSTED",
                  "gpu 64/64", kRefresh));
}

TEST(ExplanationsTest, MovesBetweenWaitingForResourcesWaitForTheRefresh) {
  // Quota full in one cycle, the node full in the next: no news.
  EXPECT_FALSE(
      Due("QUOTA_EXHAUSTED", "q", "NO_CAPACITY", "n", absl::Milliseconds(20)));
  EXPECT_FALSE(
      Due("NO_CAPACITY", "n", "QUOTA_EXHAUSTED", "q", absl::Seconds(4)));
  EXPECT_FALSE(Due("NO_FIT_TOPOLOGY", "t", "WAITING_FOR_RESERVATION", "r",
                   absl::Seconds(1)));
  EXPECT_TRUE(Due("NO_CAPACITY", "n", "QUOTA_EXHAUSTED", "q", kRefresh));
}

TEST(ExplanationsTest, OtherReasonChangesAreWrittenAtOnce) {
  EXPECT_TRUE(
      Due("NO_CAPACITY", "n", "QUEUE_STOPPED", "s", absl::ZeroDuration()));
  EXPECT_TRUE(
      Due("BUDGET_HOLD", "b", "QUOTA_EXHAUSTED", "q", absl::ZeroDuration()));
  EXPECT_TRUE(Due("QUOTA_EXHAUSTED", "q", "BLOCKED_BY_STRICT_FIFO", "f",
                  absl::ZeroDuration()));
}

TEST(ExplanationsTest, TheComparedFormAgreesWithTheTexts) {
  const std::string_view reasons[] = {"QUOTA_EXHAUSTED", "NO_CAPACITY",
                                      "QUEUE_STOPPED", "BUDGET_HOLD"};
  const std::string_view messages[] = {"a", "b"};
  const absl::Duration sinces[] = {absl::ZeroDuration(), absl::Seconds(1),
                                   kRefresh, absl::Hours(1)};
  for (std::string_view old_reason : reasons) {
    for (std::string_view reason : reasons) {
      for (std::string_view old_message : messages) {
        for (std::string_view message : messages) {
          for (absl::Duration since : sinces) {
            EXPECT_EQ(
                ExplanationDue(
                    old_reason == reason, old_message == message,
                    WaitsForResources(old_reason) && WaitsForResources(reason),
                    kWritten, kWritten + since, kRefresh),
                Due(old_reason, old_message, reason, message, since))
                << old_reason << " " << reason << " " << since;
          }
        }
      }
    }
  }
  // Which rule makes it due.
  EXPECT_EQ(
      ExplanationRewrite(false, false, false, kWritten, kWritten, kRefresh),
      Rewrite::kAtOnce);
  EXPECT_EQ(ExplanationRewrite(true, false, false, kWritten,
                               kWritten + kRefresh, kRefresh),
            Rewrite::kRefresh);
  EXPECT_EQ(ExplanationRewrite(false, false, true, kWritten,
                               kWritten + kRefresh, kRefresh),
            Rewrite::kRefresh);
  EXPECT_EQ(ExplanationRewrite(false, true, true, kWritten,
                               kWritten + absl::Seconds(1), kRefresh),
            Rewrite::kNo);
  // The compared form's own cases.
  EXPECT_FALSE(ExplanationDue(true, true, false, kWritten,
                              kWritten + absl::Hours(1), kRefresh));
  EXPECT_TRUE(ExplanationDue(false, true, false, kWritten, kWritten, kRefresh));
  EXPECT_FALSE(ExplanationDue(false, false, true, kWritten,
                              kWritten + absl::Seconds(1), kRefresh));
  EXPECT_TRUE(ExplanationDue(true, false, false, kWritten, kWritten + kRefresh,
                             kRefresh));
}

}  // namespace
}  // namespace trainyard::scheduler
