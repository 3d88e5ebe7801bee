#include "services/dispatcher/adapters/settings_file.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::dispatcher {
namespace {

using ::testing::HasSubstr;

TEST(SettingsFileTest, SplitsKeyValueLines) {
  absl::StatusOr<std::vector<SettingLine>> lines = ParseSettingLines(
      "# a comment\n\n  a = 1  \nb=x = y # trailing\n\tc =\n");
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 3u);
  EXPECT_EQ((*lines)[0].key, "a");
  EXPECT_EQ((*lines)[0].value, "1");
  EXPECT_EQ((*lines)[0].line, 3);
  EXPECT_EQ((*lines)[1].key, "b");
  EXPECT_EQ((*lines)[1].value, "x = y");
  EXPECT_EQ((*lines)[1].line, 4);
  EXPECT_EQ((*lines)[2].key, "c");
  EXPECT_EQ((*lines)[2].value, "");
  EXPECT_EQ(ParseSettingLines("a = 1\nnonsense\n").status().message(),
            "line 2: expected `key = value`");
  EXPECT_EQ(BadSetting("k", "why").message(), "k: why");
}

TEST(SettingsFileTest, LoadsAFileAndNamesItInErrors) {
  char path[] = "/tmp/ty-settings-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << "n = 5\n"; }
  auto parse = [](std::string_view text) -> absl::StatusOr<int> {
    absl::StatusOr<std::vector<SettingLine>> lines = ParseSettingLines(text);
    if (!lines.ok()) return lines.status();
    if (lines->size() != 1 || (*lines)[0].key != "n") {
      return BadSetting("n", "required");
    }
    return std::atoi((*lines)[0].value.c_str());
  };
  absl::StatusOr<int> n = LoadSettingsFile<int>(path, "test", parse);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5);
  { std::ofstream(path) << "m = 5\n"; }
  EXPECT_EQ(LoadSettingsFile<int>(path, "test", parse).status().message(),
            std::string(path) + ": n: required");
  unlink(path);
  absl::Status missing = LoadSettingsFile<int>(path, "test", parse).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("test settings file"));
  EXPECT_THAT(missing.message(), HasSubstr(path));
}

}  // namespace
}  // namespace trainyard::dispatcher
