#include "services/dispatcher/adapters/registry.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/all.h"

namespace trainyard::dispatcher {
namespace {

using ::testing::HasSubstr;

// An adapter with no nodes and no attempts.
class NullAdapter : public Adapter {
 public:
  std::string_view kind() const override { return "null"; }
  absl::StatusOr<AttemptStatus> Launch(const LaunchRequest&) override {
    return absl::UnimplementedError("null");
  }
  absl::Status Signal(std::string_view, int) override {
    return absl::NotFoundError("null");
  }
  absl::Status Stop(std::string_view, absl::Duration, StopReason) override {
    return absl::NotFoundError("null");
  }
  absl::StatusOr<AttemptStatus> Status(std::string_view) override {
    return absl::NotFoundError("null");
  }
  absl::StatusOr<std::vector<AttemptStatus>> List() override {
    return std::vector<AttemptStatus>{};
  }
  absl::Status Delete(std::string_view) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<NodeInventory>> Inventory() override {
    return std::vector<NodeInventory>{};
  }
};

AdapterFactory NullFactory() {
  return {
      .flags = {"null_cluster"},
      .check =
          [](const AdapterSettings& s) {
            return s.Get("null_cluster").empty()
                       ? absl::InvalidArgumentError("--null_cluster: required")
                       : absl::OkStatus();
          },
      .create = [](const AdapterSettings& s) -> absl::StatusOr<BackendAdapter> {
        return BackendAdapter{.adapter = std::make_unique<NullAdapter>(),
                              .cluster = s.Get("null_cluster")};
      }};
}

TEST(AdapterRegistryTest, RegistersFindsAndCreates) {
  ASSERT_TRUE(RegisterAdapterFactory("test-null", NullFactory()).ok());
  EXPECT_EQ(RegisterAdapterFactory("test-null", NullFactory()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RegisterAdapterFactory("", NullFactory()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RegisterAdapterFactory("test-empty", AdapterFactory{}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(AdapterNames(), ::testing::Contains("test-null"));

  absl::StatusOr<AdapterFactory> factory = FindAdapterFactory("test-null");
  ASSERT_TRUE(factory.ok()) << factory.status();
  EXPECT_THAT(factory->flags, ::testing::ElementsAre("null_cluster"));

  // The check runs first.
  absl::StatusOr<BackendAdapter> missing = CreateAdapter("test-null", {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("--null_cluster"));

  absl::StatusOr<BackendAdapter> created =
      CreateAdapter("test-null", {.values = {{"null_cluster", "c1"}}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_NE(created->adapter, nullptr);
  EXPECT_EQ(created->cluster, "c1");
  EXPECT_EQ(created->label, "test-null");  // The name by default.
}

TEST(AdapterRegistryTest, UnknownNameListsTheKnownOnes) {
  ASSERT_TRUE(RegisterBuiltinAdapters().ok());
  absl::StatusOr<AdapterFactory> factory = FindAdapterFactory("nomad");
  EXPECT_EQ(factory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(factory.status().message(),
              HasSubstr("unknown backend \"nomad\""));
  EXPECT_THAT(factory.status().message(), HasSubstr("sim"));
  EXPECT_THAT(factory.status().message(), HasSubstr("slurm"));
  EXPECT_THAT(factory.status().message(), HasSubstr("kubernetes"));
  EXPECT_FALSE(CreateAdapter("nomad", {}).ok());
}

TEST(AdapterRegistryTest, BuiltinBackends) {
  ASSERT_TRUE(RegisterBuiltinAdapters().ok());
  ASSERT_TRUE(RegisterBuiltinAdapters().ok());  // Once only.
  EXPECT_THAT(AdapterNames(),
              ::testing::IsSupersetOf({"kubernetes", "sim", "slurm"}));
  EXPECT_THAT(AdapterNames(), ::testing::Contains(kDefaultAdapter));

  // sim: exactly one of --sim_config and --sim_target.
  absl::StatusOr<AdapterFactory> sim = FindAdapterFactory("sim");
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_THAT(sim->check({}).message(),
              HasSubstr("give one of --sim_config=FILE or --sim_target"));
  EXPECT_FALSE(
      sim->check({.values = {{"sim_config", "a"}, {"sim_target", "b:1"}}})
          .ok());
  EXPECT_FALSE(sim->runs_in_all({.values = {{"sim_target", "b:1"}}}));
  EXPECT_TRUE(sim->runs_in_all({.values = {{"sim_config", "a"}}}));

  const char* root = std::getenv("TRAINYARD_SOURCE_DIR");
  const std::string path =
      absl::StrCat(root == nullptr ? TRAINYARD_SOURCE_DIR_DEFAULT : root,
                   "/deploy/local/sim-cluster.textproto");
  absl::StatusOr<BackendAdapter> created =
      CreateAdapter("sim", {.values = {{"sim_config", path}}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->cluster, "sim-a");
  EXPECT_EQ(created->label, "sim");
  absl::StatusOr<std::vector<NodeInventory>> nodes =
      created->adapter->Inventory();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_FALSE(nodes->empty());
  EXPECT_FALSE(
      CreateAdapter("sim", {.values = {{"sim_config", path + ".missing"}}})
          .ok());

  // slurm: --slurm_config is required; `all` runs it whenever selected.
  absl::StatusOr<AdapterFactory> slurm = FindAdapterFactory("slurm");
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_THAT(CreateAdapter("slurm", {}).status().message(),
              HasSubstr("--slurm_config"));
  EXPECT_EQ(slurm->runs_in_all, nullptr);

  // kubernetes: --kubeconfig outside a pod; a kubeconfig that cannot be read
  // is named; a bad rate limit is refused before anything starts.
  absl::StatusOr<AdapterFactory> kube = FindAdapterFactory("kubernetes");
  ASSERT_TRUE(kube.ok()) << kube.status();
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_THAT(
      kube->check({.values = {{"kube_qps", "50"}, {"kube_burst", "100"}}})
          .message(),
      HasSubstr("--kubeconfig"));
  EXPECT_THAT(kube->check({.values = {{"kubeconfig", "k"},
                                      {"kube_qps", "-1"},
                                      {"kube_burst", "100"}}})
                  .message(),
              HasSubstr("--kube_qps"));
  absl::StatusOr<BackendAdapter> missing = CreateAdapter(
      "kubernetes", {.values = {{"kubeconfig", "/nonexistent/kubeconfig"},
                                {"kube_qps", "50"},
                                {"kube_burst", "100"}}});
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/kubeconfig"));
}

}  // namespace
}  // namespace trainyard::dispatcher
