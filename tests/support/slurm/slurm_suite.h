// The base of the test fixtures that run against a private Slurm cluster
// (tests/fixtures/local_slurm.h), one cluster per test suite:
//
//   class SlurmAdapterTest : public SlurmSuite {
//    protected:
//     static void SetUpTestSuite() {
//       if (!StartSlurm()) return;
//       ...  // more of the suite's set-up; SuiteFailed(status) on an error
//     }
//     static void TearDownTestSuite() { StopSlurm(); }
//     void SetUp() override {
//       if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
//       ASSERT_EQ(start_error_, nullptr) << *start_error_;
//       ...
//
// Tests skip where this machine cannot run Slurm and fail where it can but the
// suite's set-up failed.
#ifndef TRAINYARD_TESTS_SUPPORT_SLURM_SLURM_SUITE_H_
#define TRAINYARD_TESTS_SUPPORT_SLURM_SLURM_SUITE_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/fixtures/local_slurm.h"

namespace trainyard::testing {

class SlurmSuite : public ::testing::Test {
 protected:
  // Starts the suite's cluster with `options`; false when it does not run
  // (skip_reason_ or start_error_ says why).
  static bool StartSlurm(LocalSlurm::Options options = {}) {
    std::string why;
    if (!LocalSlurm::Available(&why)) {
      skip_reason_ = new std::string(why);
      return false;
    }
    absl::StatusOr<std::unique_ptr<LocalSlurm>> slurm =
        LocalSlurm::Start(std::move(options));
    if (!slurm.ok()) {
      SuiteFailed(slurm.status());
      return false;
    }
    slurm_ = slurm->release();
    return true;
  }

  // Stops the cluster (after the suite's own tear-down).
  static void StopSlurm() {
    delete slurm_;
    slurm_ = nullptr;
  }

  // Records that the suite's set-up failed: its tests fail with `status`.
  static void SuiteFailed(const absl::Status& status) {
    if (start_error_ == nullptr)
      start_error_ = new std::string(status.ToString());
  }

  inline static LocalSlurm* slurm_ = nullptr;
  // Why the tests skip (no Slurm on this machine), or null.
  inline static std::string* skip_reason_ = nullptr;
  // Why the tests fail (the suite's set-up failed), or null.
  inline static std::string* start_error_ = nullptr;
};

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_SUPPORT_SLURM_SLURM_SUITE_H_
