#include "services/lib/domain/names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "services/lib/domain/errors.h"

namespace trainyard::domain {
namespace {

void ExpectNameError(const absl::Status& s, std::string_view field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(ErrorField(s), field) << s;
  EXPECT_EQ(ErrorReason(s), "INVALID_NAME") << s;
}

TEST(IdTest, IsValidId) {
  for (const std::string& id : std::vector<std::string>{
           "a", "ab", "a1", "a-b", "team-42", std::string(63, 'a')}) {
    EXPECT_TRUE(IsValidId(id)) << id;
  }
  for (const std::string& id : std::vector<std::string>{
           "", "A", "1a", "-a", "a-", "a_b", "a.b", "a b", "ab\n", "é",
           std::string(64, 'a'), "tenants/a"}) {
    EXPECT_FALSE(IsValidId(id)) << id;
  }
}

TEST(IdTest, IsValidNodeId) {
  for (const std::string& id :
       std::vector<std::string>{"n0001", "1", "gpu-01.rack3.example.com",
                                "10.0.0.1", "a..b", std::string(253, 'a')}) {
    EXPECT_TRUE(IsValidNodeId(id)) << id;
  }
  for (const std::string& id : std::vector<std::string>{
           "", ".a", "a.", "-a", "a-", "Node1", "a_b", std::string(254, 'a')}) {
    EXPECT_FALSE(IsValidNodeId(id)) << id;
  }
}

TEST(IdTest, IsValidGeneratedId) {
  EXPECT_TRUE(IsValidGeneratedId("42"));
  EXPECT_TRUE(IsValidGeneratedId("550e8400-e29b-41d4-a716-446655440000"));
  EXPECT_TRUE(IsValidGeneratedId("tok-abc"));
  EXPECT_FALSE(IsValidGeneratedId(""));
  EXPECT_FALSE(IsValidGeneratedId("A1"));
  EXPECT_FALSE(IsValidGeneratedId("a-"));
}

TEST(TenantNameTest, ParseAndFormat) {
  EXPECT_EQ(TenantName("acme"), "tenants/acme");
  absl::StatusOr<std::string> t = ParseTenantName("tenants/acme", "parent");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "acme");
  for (const std::string& bad : std::vector<std::string>{
           "", "tenants/", "tenants/-", "tenants/Acme", "tenant/acme", "acme",
           "tenants/acme/", "/tenants/acme", "tenants/acme/jobs/1"}) {
    SCOPED_TRACE(bad);
    ExpectNameError(ParseTenantName(bad, "parent").status(), "parent");
  }
}

TEST(TenantNameTest, ErrorMessageShowsPatternAndInput) {
  absl::Status s = ParseTenantName("tenants/Bad", "parent").status();
  EXPECT_EQ(s.message(),
            "parent: expected tenants/{tenant}, got \"tenants/Bad\"");
}

TEST(TenantNameTest, AllTenants) {
  EXPECT_TRUE(IsAllTenants("tenants/-"));
  EXPECT_FALSE(IsAllTenants("tenants/acme"));
  EXPECT_FALSE(IsAllTenants("tenants/"));
  EXPECT_EQ(*ParseTenantParent("tenants/-", "parent"), "-");
  EXPECT_EQ(*ParseTenantParent("tenants/acme", "parent"), "acme");
  ExpectNameError(ParseTenantParent("tenants/--", "parent").status(), "parent");
}

TEST(JobNameTest, ParseGood) {
  absl::StatusOr<JobName> n = ParseJobName("tenants/acme/jobs/42", "name");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->tenant, "acme");
  EXPECT_EQ(n->job_id, 42);
  EXPECT_EQ(n->ToString(), "tenants/acme/jobs/42");
  EXPECT_EQ(FormatJobName(*n), "tenants/acme/jobs/42");
  EXPECT_EQ(JobResourceName("acme", 7), "tenants/acme/jobs/7");

  absl::StatusOr<JobName> max =
      ParseJobName("tenants/a/jobs/9223372036854775807", "name");
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(max->job_id, INT64_MAX);
  EXPECT_EQ((JobName{"a", 5}), (JobName{"a", 5}));
}

TEST(JobNameTest, ParseBad) {
  for (const std::string& bad : std::vector<std::string>{
           "", "tenants/acme/jobs/", "tenants/acme/jobs/0",
           "tenants/acme/jobs/-1", "tenants/acme/jobs/+1",
           "tenants/acme/jobs/01", "tenants/acme/jobs/1a",
           "tenants/acme/jobs/ 1", "tenants/acme/jobs/9223372036854775808",
           "tenants/acme/jobs/99999999999999999999", "tenants/Acme/jobs/1",
           "tenants//jobs/1", "tenants/acme/job/1", "tenants/acme/jobs/1/",
           "tenants/acme/projects/1", "tenants/acme"}) {
    SCOPED_TRACE(bad);
    absl::Status s = ParseJobName(bad, "name").status();
    ExpectNameError(s, "name");
    EXPECT_NE(
        std::string(s.message()).find("expected tenants/{tenant}/jobs/{job}"),
        std::string::npos);
  }
}

TEST(JobNameTest, LongInputIsCutInMessage) {
  absl::Status s = ParseJobName(std::string(10000, 'x'), "name").status();
  EXPECT_LT(s.message().size(), 300u);
}

TEST(TenantChildTest, ProjectsAndQueues) {
  EXPECT_EQ(ProjectName("acme", "llm"), "tenants/acme/projects/llm");
  EXPECT_EQ(QueueName("acme", "default"), "tenants/acme/queues/default");
  EXPECT_EQ(*ParseProjectName("tenants/acme/projects/llm", "name"),
            (TenantChildName{"acme", "llm"}));
  EXPECT_EQ(*ParseQueueName("tenants/acme/queues/default", "name"),
            (TenantChildName{"acme", "default"}));
  ExpectNameError(
      ParseProjectName("tenants/acme/queues/default", "name").status(), "name");
  ExpectNameError(
      ParseQueueName("tenants/acme/queues/Default", "name").status(), "name");
  ExpectNameError(
      ParseQueueName("tenants/-/queues/default", "queue.name").status(),
      "queue.name");
}

TEST(PlatformNameTest, ParseAndFormat) {
  struct Case {
    std::string (*format)(std::string_view);
    absl::StatusOr<std::string> (*parse)(std::string_view, std::string_view);
    std::string prefix;
  };
  const Case cases[] = {
      {&CohortName, &ParseCohortName, "cohorts/"},
      {&PriorityClassName, &ParsePriorityClassName, "priorityClasses/"},
      {&FlavorName, &ParseFlavorName, "flavors/"},
      {&ClusterName, &ParseClusterName, "clusters/"},
      {&ApiTokenName, &ParseApiTokenName, "apiTokens/"},
      {&RoleBindingName, &ParseRoleBindingName, "roleBindings/"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.prefix);
    EXPECT_EQ(c.format("abc"), c.prefix + "abc");
    absl::StatusOr<std::string> id = c.parse(c.prefix + "abc", "name");
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, "abc");
    ExpectNameError(c.parse(c.prefix + "ABC", "name").status(), "name");
    ExpectNameError(c.parse(c.prefix, "name").status(), "name");
    ExpectNameError(c.parse("other/abc", "name").status(), "name");
    ExpectNameError(c.parse(c.prefix + "abc/x", "name").status(), "name");
  }
  // Generated ids may start with a digit; user-chosen ids may not.
  EXPECT_TRUE(ParseApiTokenName("apiTokens/123", "name").ok());
  EXPECT_TRUE(ParseRoleBindingName("roleBindings/7", "name").ok());
  EXPECT_FALSE(ParseClusterName("clusters/1a", "name").ok());
  EXPECT_FALSE(ParseClusterName("clusters/-", "name").ok());
}

TEST(ClusterChildTest, PoolsAndNodes) {
  EXPECT_EQ(PoolName("sim-a", "h100"), "clusters/sim-a/pools/h100");
  EXPECT_EQ(NodeName("sim-a", "n0001"), "clusters/sim-a/nodes/n0001");
  EXPECT_EQ(*ParsePoolName("clusters/sim-a/pools/h100", "name"),
            (ClusterChildName{"sim-a", "h100"}));
  EXPECT_EQ(
      *ParseNodeName("clusters/sim-a/nodes/gpu-01.rack3.example.com", "name"),
      (ClusterChildName{"sim-a", "gpu-01.rack3.example.com"}));
  EXPECT_EQ(*ParseNodeName("clusters/sim-a/nodes/0001", "name"),
            (ClusterChildName{"sim-a", "0001"}));
  // Pool ids do not take dots; node ids do.
  ExpectNameError(ParsePoolName("clusters/sim-a/pools/h100.x", "name").status(),
                  "name");
  ExpectNameError(ParseNodeName("clusters/sim-a/nodes/Node1", "name").status(),
                  "name");
  ExpectNameError(ParseNodeName("clusters/sim-a/pools/n1", "name").status(),
                  "name");
  ExpectNameError(ParseNodeName("clusters/Sim/nodes/n1", "name").status(),
                  "name");
}

TEST(ClusterParentTest, AllClusters) {
  EXPECT_TRUE(IsAllClusters("clusters/-"));
  EXPECT_FALSE(IsAllClusters("clusters/a"));
  EXPECT_EQ(*ParseClusterParent("clusters/-", "parent"), "-");
  EXPECT_EQ(*ParseClusterParent("clusters/a", "parent"), "a");
  ExpectNameError(ParseClusterParent("tenants/-", "parent").status(), "parent");
}

}  // namespace
}  // namespace trainyard::domain

namespace trainyard::domain {
namespace {

TEST(NameIdTest, LastSegment) {
  EXPECT_EQ(NameId("clusters/a/nodes/n7"), "n7");
  EXPECT_EQ(NameId("flavors/h100"), "h100");
  EXPECT_EQ(NameId("h100"), "h100");
  EXPECT_EQ(NameId(""), "");
}

}  // namespace
}  // namespace trainyard::domain
