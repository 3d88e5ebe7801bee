#include "services/lib/domain/errors.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

TEST(FieldErrorTest, CarriesFieldReasonAndMessage) {
  absl::Status s =
      FieldError("spec.workers", "OUT_OF_RANGE", "must be at least 1");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec.workers: must be at least 1");
  EXPECT_EQ(ErrorField(s), "spec.workers");
  EXPECT_EQ(ErrorReason(s), "OUT_OF_RANGE");
  EXPECT_TRUE(HasErrorField(s));
}

TEST(FieldErrorTest, EmptyFieldHasBareMessage) {
  absl::Status s = FieldError("", "REQUIRED", "something is missing");
  EXPECT_EQ(s.message(), "something is missing");
  EXPECT_EQ(ErrorField(s), "");
  EXPECT_TRUE(HasErrorField(s));
}

TEST(FieldErrorTest, PlainStatusHasNoInfo) {
  absl::Status s = absl::InternalError("boom");
  EXPECT_EQ(ErrorField(s), "");
  EXPECT_EQ(ErrorReason(s), "");
  EXPECT_FALSE(HasErrorField(s));
  EXPECT_EQ(ErrorField(absl::OkStatus()), "");
}

TEST(PrefixFieldTest, ComposesForBatchRequests) {
  absl::Status s =
      FieldError("spec.workers", "OUT_OF_RANGE", "must be at least 1");
  absl::Status job = PrefixField(s, "job");
  EXPECT_EQ(ErrorField(job), "job.spec.workers");
  EXPECT_EQ(job.message(), "job.spec.workers: must be at least 1");
  absl::Status batch = PrefixField(job, "requests[3]");
  EXPECT_EQ(batch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(batch), "requests[3].job.spec.workers");
  EXPECT_EQ(ErrorReason(batch), "OUT_OF_RANGE");
  EXPECT_EQ(batch.message(),
            "requests[3].job.spec.workers: must be at least 1");
}

TEST(PrefixFieldTest, Cases) {
  struct Case {
    std::string field;
    std::string prefix;
    std::string want_field;
  };
  const Case cases[] = {
      {"spec.workers", "job", "job.spec.workers"},
      {"[2].flavor", "quotas", "quotas[2].flavor"},
      {"", "client_request_id", "client_request_id"},
      {"spec.env[\"A.B\"]", "job", "job.spec.env[\"A.B\"]"},
      {"spec.workers", "", "spec.workers"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field + " / " + c.prefix);
    absl::Status s = PrefixField(FieldError(c.field, "R", "msg"), c.prefix);
    EXPECT_EQ(ErrorField(s), c.want_field);
    EXPECT_EQ(s.message(), c.want_field + ": msg");
    EXPECT_EQ(ErrorReason(s), "R");
  }
}

TEST(PrefixFieldTest, LeavesOtherStatusesAlone) {
  EXPECT_TRUE(PrefixField(absl::OkStatus(), "job").ok());
  absl::Status internal = absl::InternalError("db down");
  EXPECT_EQ(PrefixField(internal, "job"), internal);
}

TEST(PrefixFieldTest, KeepsCodeAndOtherPayloads) {
  absl::Status s =
      AttachErrorInfo(absl::FailedPreconditionError("queue is stopped"),
                      "queue", "QUEUE_STOPPED");
  s.SetPayload("example.com/other", absl::Cord("x"));
  absl::Status p = PrefixField(s, "spec");
  EXPECT_EQ(p.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorField(p), "spec.queue");
  EXPECT_EQ(ErrorReason(p), "QUEUE_STOPPED");
  // The message did not start with the field, so it is kept as it was.
  EXPECT_EQ(p.message(), "queue is stopped");
  ASSERT_TRUE(p.GetPayload("example.com/other").has_value());
}

TEST(AttachErrorInfoTest, OkStaysOk) {
  EXPECT_TRUE(AttachErrorInfo(absl::OkStatus(), "f", "R").ok());
}

TEST(FieldPathTest, Helpers) {
  EXPECT_EQ(JoinField("spec", "workers"), "spec.workers");
  EXPECT_EQ(JoinField("", "workers"), "workers");
  EXPECT_EQ(JoinField("spec", ""), "spec");
  EXPECT_EQ(JoinField("quotas", "[1]"), "quotas[1]");
  EXPECT_EQ(IndexField("command", 3), "command[3]");
  EXPECT_EQ(KeyField("env", "A"), "env[\"A\"]");
  EXPECT_EQ(KeyField("env", "a\"b\n"), "env[\"a\\\"b\\n\"]");
  EXPECT_EQ(KeyField("env", std::string(200, 'x')),
            "env[\"" + std::string(128, 'x') + "...\"]");
}

TEST(ToErrorInfoTest, CopiesFieldAndReason) {
  trainyard::v1::ErrorInfo info =
      ToErrorInfo(FieldError("spec.queue", "UNKNOWN_QUEUE", "no"));
  EXPECT_EQ(info.field(), "spec.queue");
  EXPECT_EQ(info.reason(), "UNKNOWN_QUEUE");
  EXPECT_FALSE(info.has_retry_delay());
}

TEST(CatTest, AcceptsStdStringView) {
  std::string_view a = "a";
  absl::string_view b = "b";
  EXPECT_EQ(Cat(a, b, std::string("c"), "d", 1), "abcd1");
  EXPECT_EQ(StdView(AbslView(a)), "a");
}

}  // namespace
}  // namespace trainyard::domain
