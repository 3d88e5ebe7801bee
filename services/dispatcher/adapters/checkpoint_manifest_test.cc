#include "services/dispatcher/adapters/checkpoint_manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::dispatcher {
namespace {

using ::testing::HasSubstr;

TEST(CheckpointManifestTest, Parses) {
  absl::StatusOr<CheckpointInfo> c = ParseCheckpointManifest(
      R"({"step": 12, "uri": "step-12", "time": 1700000000})", "/ck");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 12);
  EXPECT_EQ(c->uri, "/ck/step-12");
  EXPECT_EQ(c->time, absl::FromUnixSeconds(1700000000));
  c = ParseCheckpointManifest(R"({"step": 3, "uri": "s3://b/k"})", "/ck");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->uri, "s3://b/k");
  EXPECT_EQ(c->time, absl::InfinitePast());
  EXPECT_THAT(
      ParseCheckpointManifest(R"({"uri": "x"})", "/ck").status().message(),
      HasSubstr("step"));
  EXPECT_THAT(
      ParseCheckpointManifest(R"({"step": 1})", "/ck").status().message(),
      HasSubstr("uri"));
  EXPECT_FALSE(ParseCheckpointManifest("nope", "/ck").ok());
  EXPECT_EQ(LocalCheckpointDir("file:///a/b"), "/a/b");
  EXPECT_EQ(LocalCheckpointDir("/a"), "/a");
  EXPECT_EQ(LocalCheckpointDir("s3://a"), std::nullopt);
  EXPECT_EQ(LocalCheckpointDir(""), std::nullopt);
}

TEST(CheckpointManifestTest, ReadsTheManifestOfThisAttempt) {
  char tmpl[] = "/tmp/ty-manifest-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  EXPECT_EQ(ReadCheckpointManifest(dir, std::nullopt), std::nullopt);
  const std::string path = dir + "/trainyard-checkpoint.json";
  { std::ofstream(path) << R"({"step": 7, "uri": "step-7"})"; }
  // No time: the file's modification time, set here to a known second.
  struct timespec times[2] = {{1700000100, 0}, {1700000100, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  std::optional<CheckpointInfo> c = ReadCheckpointManifest(dir, std::nullopt);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 7);
  EXPECT_EQ(c->uri, dir + "/step-7");
  EXPECT_EQ(c->time, absl::FromUnixSeconds(1700000100));
  // An attempt that started later does not take it; one a second late does.
  EXPECT_EQ(ReadCheckpointManifest(dir, absl::FromUnixSeconds(1700000102)),
            std::nullopt);
  EXPECT_TRUE(ReadCheckpointManifest(dir, absl::FromUnixSeconds(1700000101))
                  .has_value());
  // Garbage is no checkpoint.
  { std::ofstream(path) << "{"; }
  EXPECT_EQ(ReadCheckpointManifest(dir, std::nullopt), std::nullopt);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace trainyard::dispatcher
