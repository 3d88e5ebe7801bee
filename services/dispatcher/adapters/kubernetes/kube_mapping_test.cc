#include "services/dispatcher/adapters/kubernetes/kube_mapping.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "services/dispatcher/adapters/kubernetes/kube_settings.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::trainyard::domain::Cat;

KubernetesSettings NodeSettings();

absl::Time T(const char* rfc3339) {
  absl::Time t;
  std::string err;
  EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &err)) << err;
  return t;
}

// --- Quantities --------------------------------------------------------------

struct QuantityCase {
  const char* text;
  int scale;
  int64_t want;
};

// Values from the Kubernetes documentation ("Resource Management for Pods
// and Containers": 128974848, 129e6, 129M, 128974848000m and 123Mi are about
// the same memory; 0.1 CPU is 100m; "400m" of memory is 0.4 bytes) and from
// the quantity grammar (k8s.io/apimachinery/pkg/api/resource).
TEST(ParseQuantity, DocumentedValues) {
  const QuantityCase cases[] = {
      {"128974848", 0, 128974848},
      {"129e6", 0, 129000000},
      {"129M", 0, 129000000},
      {"128974848000m", 0, 128974848},
      {"123Mi", 0, 128974848},
      {"0.1", 3, 100},
      {"100m", 3, 100},
      {"100m", 0, 1},  // rounded up, as Quantity.Value()
      {"400m", 0, 1},
      {"1", 3, 1000},
      {"2", 0, 2},
      {"1k", 0, 1000},
      {"1Ki", 0, 1024},
      {"1M", 0, 1000000},
      {"1Mi", 0, 1048576},
      {"1G", 0, 1000000000},
      {"1Gi", 0, 1073741824},
      {"1T", 0, 1000000000000},
      {"1Ti", 0, 1099511627776},
      {"1P", 0, 1000000000000000},
      {"1Pi", 0, 1125899906842624},
      {"1E", 0, 1000000000000000000},
      {"1Ei", 0, 1152921504606846976},
      {"1.5Gi", 0, 1610612736},
      {"0.5Ki", 0, 512},
      {"1e3", 0, 1000},
      {"1E3", 0, 1000},
      {"1e+3", 0, 1000},
      {"1e-3", 3, 1},
      {"1.5e3", 0, 1500},
      {"5.", 0, 5},
      {".5", 3, 500},
      {"0.5", 0, 1},
      {"+7", 0, 7},
      {"-1", 0, -1},
      {"-1.5", 0, -2},  // away from zero
      {"1n", 3, 1},
      {"1500n", 9, 1500},
      {"1u", 6, 1},
      {"0", 0, 0},
      {"0.000", 3, 0},
      {"00012", 0, 12},
      {"32779436Ki", 0, 33566142464},  // a GKE node's allocatable memory
      {"7910m", 3, 7910},
      {"8Ei", -1, 922337203685477581},  // 9223372036854775808 / 10, rounded up
  };
  for (const QuantityCase& c : cases) {
    absl::StatusOr<int64_t> got = ParseQuantity(c.text, c.scale);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status();
    EXPECT_EQ(*got, c.want) << c.text << " scale " << c.scale;
  }
}

TEST(ParseQuantity, RejectsMalformedAndOverflow) {
  for (const char* bad :
       {"", "Ki", "1K", "1KiB", "1.2.3", "abc", "1e", "e3", "1 Gi", "1Mb",
        "--1", "1e99999", "8Ei", "9223372036854775808", "1234567890123456789k",
        ".", "1m2"}) {
    absl::StatusOr<int64_t> got = ParseQuantity(bad);
    EXPECT_FALSE(got.ok()) << bad << " parsed as " << *got;
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_EQ(*ParseQuantity("9223372036854775807"), 9223372036854775807);
  // 19 significant digits are fine, 20 are refused.
  EXPECT_EQ(*ParseQuantity("1234567890123456789"), 1234567890123456789);
  EXPECT_EQ(*ParseQuantity("1234567890123456789000m"), 1234567890123456789);
  EXPECT_FALSE(ParseQuantity("12345678901234567891").ok());
}

TEST(QuantityOf, StringsAndNumbers) {
  EXPECT_EQ(*QuantityOf(Json("2"), 3), 2000);
  EXPECT_EQ(*QuantityOf(Json(4)), 4);
  EXPECT_EQ(*QuantityOf(Json(0.5), 3), 500);
  EXPECT_FALSE(QuantityOf(Json::array()).ok());
}

TEST(Quantities, Formatting) {
  EXPECT_EQ(CpuQuantity(500), "500m");
  EXPECT_EQ(CpuQuantity(2000), "2");
  EXPECT_EQ(CpuQuantity(1500), "1500m");
  EXPECT_EQ(CpuQuantity(0), "0");
  EXPECT_EQ(MemoryQuantity(int64_t{16} << 30), "16Gi");
  EXPECT_EQ(MemoryQuantity(int64_t{512} << 20), "512Mi");
  EXPECT_EQ(MemoryQuantity(int64_t{1536} << 20), "1536Mi");
  EXPECT_EQ(MemoryQuantity(1000000000), "1000000000");
  EXPECT_EQ(MemoryQuantity(0), "0");
}

// --- Settings ----------------------------------------------------------------

TEST(KubernetesSettings, Defaults) {
  absl::StatusOr<KubernetesSettings> s = ParseKubernetesSettings("");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->namespace_, "trainyard");
  EXPECT_EQ(s->rendezvous_port, 29500);
  EXPECT_EQ(s->gpu_resource, "nvidia.com/gpu");
  EXPECT_EQ(s->gpu_model_label, "nvidia.com/gpu.product");
  EXPECT_EQ(s->zone_label, "topology.kubernetes.io/zone");
  EXPECT_EQ(s->default_grace_period, absl::Seconds(60));
  EXPECT_EQ(s->pool_labels,
            (std::vector<std::string>{
                "cloud.google.com/gke-nodepool", "karpenter.sh/nodepool",
                "eks.amazonaws.com/nodegroup", "kubernetes.azure.com/agentpool",
                "agentpool"}));
  EXPECT_TRUE(s->flavors.empty());
}

TEST(KubernetesSettings, ParsesEveryKey) {
  absl::StatusOr<KubernetesSettings> s = ParseKubernetesSettings(R"(
    # a GKE cluster
    namespace = training
    flavor.spot-h100.spot = gke
    flavor.spot-h100.node_selector = cloud.google.com/gke-accelerator=nvidia-h100-80gb
    flavor.ondemand-h100.toleration = dedicated=training:NoSchedule
    flavor.ondemand-h100.toleration = example.com/maintenance:NoExecute
    flavor.own-spot.spot = true
    pool_label = cloud.google.com/gke-nodepool
    flavor_label = example.com/flavor
    pool_flavor = h100-spot:spot-h100
    zone_label = topology.kubernetes.io/zone
    block_label = cloud.google.com/gce-topology-block
    rack_label = cloud.google.com/gce-topology-subblock
    gpu_resource = nvidia.com/gpu
    gpu_model_label = nvidia.com/gpu.product
    gpu_model_map = NVIDIA-H100-80GB-HBM3=H100
    rendezvous_port = 23456
    image_pull_secret = regcred
    image_pull_secret = other-cred
    service_account = trainer
    default_grace_period = 2m
    priority_class = trainyard-batch
    default_image = busybox:1.36
    node_lost_after = 90s
    image_pull_patience = 45s
    checkpoint_volume = hostPath:/mnt/checkpoints
  )");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->namespace_, "training");
  ASSERT_EQ(s->flavors.size(), 3u);
  EXPECT_EQ(s->flavors[0].flavor, "spot-h100");
  EXPECT_EQ(s->flavors[0].spot, SpotPreset::kGke);
  EXPECT_EQ(s->flavors[0].EffectiveNodeSelector(),
            (std::map<std::string, std::string>{
                {"cloud.google.com/gke-accelerator", "nvidia-h100-80gb"},
                {"cloud.google.com/gke-spot", "true"}}));
  EXPECT_EQ(s->flavors[0].EffectiveTolerations(),
            (std::vector<Toleration>{
                {"cloud.google.com/gke-spot", "Equal", "true", "NoSchedule"}}));
  EXPECT_EQ(s->flavors[1].flavor, "ondemand-h100");
  EXPECT_FALSE(s->flavors[1].is_spot());
  EXPECT_EQ(s->flavors[1].tolerations,
            (std::vector<Toleration>{
                {"dedicated", "Equal", "training", "NoSchedule"},
                {"example.com/maintenance", "Exists", "", "NoExecute"}}));
  EXPECT_TRUE(s->flavors[2].is_spot());
  EXPECT_EQ(s->pool_labels,
            std::vector<std::string>{"cloud.google.com/gke-nodepool"});
  EXPECT_EQ(s->flavor_label, "example.com/flavor");
  EXPECT_EQ(s->pool_flavors.at("h100-spot"), "spot-h100");
  EXPECT_EQ(s->block_label, "cloud.google.com/gce-topology-block");
  EXPECT_EQ(s->rack_label, "cloud.google.com/gce-topology-subblock");
  EXPECT_EQ(s->gpu_models.at("NVIDIA-H100-80GB-HBM3"), "H100");
  EXPECT_EQ(s->rendezvous_port, 23456);
  EXPECT_EQ(s->image_pull_secrets,
            (std::vector<std::string>{"regcred", "other-cred"}));
  EXPECT_EQ(s->service_account, "trainer");
  EXPECT_EQ(s->default_grace_period, absl::Minutes(2));
  EXPECT_EQ(s->priority_class, "trainyard-batch");
  EXPECT_EQ(s->default_image, "busybox:1.36");
  EXPECT_EQ(s->node_lost_after, absl::Seconds(90));
  EXPECT_EQ(s->image_pull_patience, absl::Seconds(45));
  EXPECT_EQ(s->checkpoint_volume.kind, CheckpointVolume::Kind::kHostPath);
  // A hostPath volume is mounted where it lies.
  EXPECT_EQ(s->checkpoint_mount_path, "/mnt/checkpoints");
}

TEST(KubernetesSettings, SpotPresets) {
  // The providers' documented spot labels and taints.
  struct Case {
    SpotPreset preset;
    std::pair<std::string, std::string> label;
    std::optional<Toleration> toleration;
  };
  const Case cases[] = {
      {SpotPreset::kGke,
       {"cloud.google.com/gke-spot", "true"},
       Toleration{"cloud.google.com/gke-spot", "Equal", "true", "NoSchedule"}},
      {SpotPreset::kKarpenter, {"karpenter.sh/capacity-type", "spot"}, {}},
      {SpotPreset::kEks, {"eks.amazonaws.com/capacityType", "SPOT"}, {}},
      {SpotPreset::kAks,
       {"kubernetes.azure.com/scalesetpriority", "spot"},
       Toleration{"kubernetes.azure.com/scalesetpriority", "Equal", "spot",
                  "NoSchedule"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(SpotPresetLabel(c.preset), c.label) << SpotPresetName(c.preset);
    EXPECT_EQ(SpotPresetToleration(c.preset), c.toleration)
        << SpotPresetName(c.preset);
    EXPECT_EQ(ParseSpotPreset(SpotPresetName(c.preset)), c.preset);
  }
  EXPECT_EQ(ParseSpotPreset("gcp"), std::nullopt);
}

TEST(KubernetesSettings, Tolerations) {
  EXPECT_EQ(*ParseToleration("k=v:NoSchedule", "t"),
            (Toleration{"k", "Equal", "v", "NoSchedule"}));
  EXPECT_EQ(*ParseToleration("example.com/k:NoExecute", "t"),
            (Toleration{"example.com/k", "Exists", "", "NoExecute"}));
  EXPECT_EQ(*ParseToleration("k=v", "t"), (Toleration{"k", "Equal", "v", ""}));
  EXPECT_EQ(*ParseToleration("k", "t"), (Toleration{"k", "Exists", "", ""}));
  EXPECT_EQ(*ParseToleration("*", "t"), (Toleration{"", "Exists", "", ""}));
  EXPECT_EQ(FormatToleration({"k", "Equal", "v", "NoSchedule"}),
            "k=v:NoSchedule");
  EXPECT_EQ(FormatToleration({"k", "Exists", "", ""}), "k");
  absl::StatusOr<Toleration> bad = ParseToleration("k=v:Sometimes", "tol");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              StartsWith("tol: effect must be"));
  EXPECT_FALSE(ParseToleration("=v", "t").ok());
  EXPECT_FALSE(ParseToleration("bad key!", "t").ok());
}

TEST(KubernetesSettings, ErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"namespace = Training", "namespace: "},
      {"flavor.spot.spot = gcp", "flavor.spot.spot: "},
      {"flavor.Bad_Id.spot = gke", "flavor.Bad_Id: "},
      {"flavor.x.node_selector = novalue", "flavor.x.node_selector: "},
      {"flavor.x.node_selector = bad key=v", "flavor.x.node_selector: "},
      {"flavor.x.toleration = k=v:Never", "flavor.x.toleration: "},
      {"flavor.x.colour = red", "flavor.x.colour: "},
      {"pool_label = not a label", "pool_label: "},
      {"pool_flavor = nocolon", "pool_flavor: "},
      {"pool_flavor = pool:Bad_Flavor", "pool_flavor: "},
      {"zone_label = a b", "zone_label: "},
      {"gpu_resource = ", "gpu_resource: "},
      {"rendezvous_port = 70000", "rendezvous_port: "},
      {"rendezvous_port = http", "rendezvous_port: "},
      {"image_pull_secret = Bad_Secret", "image_pull_secret: "},
      {"service_account = -x", "service_account: "},
      {"default_grace_period = soon", "default_grace_period: "},
      {"default_grace_period = -1s", "default_grace_period: "},
      {"priority_class = UPPER", "priority_class: "},
      {"node_lost_after = -5s", "node_lost_after: "},
      {"image_pull_patience = -1s", "image_pull_patience: "},
      {"image_pull_patience = soon", "image_pull_patience: "},
      {"default_image = my image", "default_image: "},
      {"gpu_model_map = NVIDIA H100=H100", "gpu_model_map: "},
      {"gpu_model_map = NVIDIA-H100=", "gpu_model_map: "},
      {"node_lost_after = later", "node_lost_after: "},
      {"checkpoint_volume = s3:bucket", "checkpoint_volume: "},
      {"checkpoint_volume = hostPath:relative", "checkpoint_volume: "},
      {"checkpoint_volume = pvc:Bad_Claim", "checkpoint_volume: "},
      {"checkpoint_volume = nfs:/no-server", "checkpoint_volume: "},
      {"checkpoint_volume = pvc:ckpt", "checkpoint_mount_path: "},
      {"checkpoint_mount_path = /x", "checkpoint_mount_path: "},
      {"colour = red", "colour: "},
      {"no equals sign", "line 1: "},
  };
  for (const auto& [text, prefix] : cases) {
    absl::StatusOr<KubernetesSettings> s = ParseKubernetesSettings(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(s.status().message()), StartsWith(prefix)) << text;
  }
}

TEST(KubernetesSettings, LoadAndFindFlavor) {
  const std::string path =
      Cat(::testing::TempDir(), "/kube-settings-", ::getpid(), ".conf");
  {
    std::ofstream f(path);
    f << "flavor.spot.spot = aks\nflavor.ondemand.node_selector = a=b\n";
  }
  absl::StatusOr<KubernetesSettings> s = LoadKubernetesSettings(path);
  ASSERT_TRUE(s.ok()) << s.status();
  // The first flavor serves requests without one.
  EXPECT_EQ(FindFlavor(*s, "")->flavor, "spot");
  EXPECT_EQ(FindFlavor(*s, "ondemand")->flavor, "ondemand");
  EXPECT_EQ(FindFlavor(*s, "other"), nullptr);
  EXPECT_EQ(FindFlavor(KubernetesSettings(), ""), nullptr);
  {
    std::ofstream f(path);
    f << "namespace = trainyard\nrendezvous_port = 0\n";
  }
  s = LoadKubernetesSettings(path);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.status().message()),
            Cat(path, ": rendezvous_port: must be in 1..65535"));
  std::remove(path.c_str());
  EXPECT_EQ(LoadKubernetesSettings(path).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(KubernetesSettings, Names) {
  EXPECT_TRUE(IsDns1123Label("ty-42-1"));
  EXPECT_FALSE(IsDns1123Label("Ty"));
  EXPECT_FALSE(IsDns1123Label("-a"));
  EXPECT_FALSE(IsDns1123Label(std::string(64, 'a')));
  EXPECT_TRUE(IsDns1123Subdomain("a.b-c.d"));
  EXPECT_FALSE(IsDns1123Subdomain("a..b"));
  EXPECT_TRUE(IsQualifiedName("cloud.google.com/gke-spot"));
  EXPECT_TRUE(IsQualifiedName("agentpool"));
  EXPECT_TRUE(IsQualifiedName("eks.amazonaws.com/capacityType"));
  EXPECT_FALSE(IsQualifiedName("a/b/c"));
  EXPECT_FALSE(IsQualifiedName("Example.com/x"));
  EXPECT_TRUE(IsLabelValue(""));
  EXPECT_TRUE(IsLabelValue("SPOT"));
  EXPECT_FALSE(IsLabelValue("a b"));
  EXPECT_FALSE(IsLabelValue("tenants/a"));
}

// --- BuildJob / BuildService -------------------------------------------------

KubernetesSettings GkeSettings() {
  absl::StatusOr<KubernetesSettings> s = ParseKubernetesSettings(R"(
    namespace = training
    flavor.spot-h100.spot = gke
    flavor.spot-h100.node_selector = cloud.google.com/gke-accelerator=nvidia-h100-80gb
    flavor.ondemand-h100.toleration = dedicated=training:NoSchedule
    checkpoint_volume = pvc:checkpoints
    checkpoint_mount_path = /checkpoints
    image_pull_secret = regcred
    service_account = trainer
    priority_class = trainyard-batch
  )");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

LaunchRequest TwoWorkerSpotRequest() {
  LaunchRequest r;
  r.name = "ty-42-3";
  r.job_id = 42;
  r.attempt = 3;
  r.tenant = "acme";
  r.flavor = "spot-h100";
  r.worker_nodes = {"gke-a-1", "gke-a-2"};
  r.resume_from = "/checkpoints/acme/42/step-500";
  r.env = {{"TRAINYARD_API_ENDPOINT", "api.trainyard:443"}};
  trainyard::v1::JobSpec& spec = r.spec;
  spec.set_project("llm");
  spec.set_workers(2);
  spec.mutable_resources()->set_gpus(8);
  spec.mutable_resources()->set_cpu_millis(96000);
  spec.mutable_resources()->set_memory_bytes(int64_t{800} << 30);
  spec.set_image("ghcr.io/acme/train:1.2");
  for (const char* w : {"python", "train.py", "--steps", "1000"}) {
    spec.add_command(w);
  }
  (*spec.mutable_env())["NCCL_DEBUG"] = "INFO";
  spec.set_working_dir("/workspace");
  spec.mutable_time_limit()->set_seconds(7200);
  spec.mutable_checkpoint()->set_directory("/checkpoints/acme/42");
  spec.mutable_checkpoint()->mutable_grace_period()->set_seconds(90);
  return r;
}

// The whole Job, written out from the batch/v1 Job and core/v1 PodSpec
// reference.
TEST(BuildJob, TwoWorkerSpotJob) {
  absl::StatusOr<Json> job = BuildJob(TwoWorkerSpotRequest(), GkeSettings());
  ASSERT_TRUE(job.ok()) << job.status();
  const Json want = Json::parse(R"json({
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
      "name": "ty-42-3",
      "namespace": "training",
      "labels": {
        "trainyard.dev/tenant": "acme",
        "trainyard.dev/job": "42",
        "trainyard.dev/attempt": "3",
        "trainyard.dev/name": "ty-42-3",
        "trainyard.dev/project": "llm",
        "trainyard.dev/flavor": "spot-h100"
      },
      "annotations": {
        "trainyard.dev/job-name": "tenants/acme/jobs/42",
        "trainyard.dev/worker-nodes": "gke-a-1,gke-a-2",
        "trainyard.dev/checkpoint-dir": "/checkpoints/acme/42",
        "trainyard.dev/spot": "true"
      }
    },
    "spec": {
      "completionMode": "Indexed",
      "completions": 2,
      "parallelism": 2,
      "backoffLimit": 0,
      "activeDeadlineSeconds": 7200,
      "template": {
        "metadata": {
          "labels": {
            "trainyard.dev/tenant": "acme",
            "trainyard.dev/job": "42",
            "trainyard.dev/attempt": "3",
            "trainyard.dev/name": "ty-42-3",
            "trainyard.dev/project": "llm",
            "trainyard.dev/flavor": "spot-h100"
          },
          "annotations": {
            "trainyard.dev/job-name": "tenants/acme/jobs/42"
          }
        },
        "spec": {
          "restartPolicy": "Never",
          "subdomain": "ty-42-3",
          "enableServiceLinks": false,
          "terminationGracePeriodSeconds": 90,
          "serviceAccountName": "trainer",
          "imagePullSecrets": [{"name": "regcred"}],
          "priorityClassName": "trainyard-batch",
          "nodeSelector": {
            "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
            "cloud.google.com/gke-spot": "true"
          },
          "tolerations": [
            {"key": "cloud.google.com/gke-spot", "operator": "Equal",
             "value": "true", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu", "operator": "Exists",
             "effect": "NoSchedule"}
          ],
          "affinity": {
            "nodeAffinity": {
              "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{
                  "matchFields": [{
                    "key": "metadata.name",
                    "operator": "In",
                    "values": ["gke-a-1", "gke-a-2"]
                  }]
                }]
              }
            },
            "podAntiAffinity": {
              "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"trainyard.dev/name": "ty-42-3"}},
                "topologyKey": "kubernetes.io/hostname"
              }]
            }
          },
          "containers": [{
            "name": "worker",
            "image": "ghcr.io/acme/train:1.2",
            "command": ["python", "train.py", "--steps", "1000"],
            "workingDir": "/workspace",
            "env": [
              {"name": "NCCL_DEBUG", "value": "INFO"},
              {"name": "TRAINYARD_API_ENDPOINT", "value": "api.trainyard:443"},
              {"name": "TRAINYARD_ATTEMPT", "value": "3"},
              {"name": "TRAINYARD_BACKEND_JOB_NAME", "value": "ty-42-3"},
              {"name": "TRAINYARD_CHECKPOINT_DIR", "value": "/checkpoints/acme/42"},
              {"name": "TRAINYARD_JOB", "value": "tenants/acme/jobs/42"},
              {"name": "TRAINYARD_JOB_ID", "value": "42"},
              {"name": "TRAINYARD_RESUME_FROM", "value": "/checkpoints/acme/42/step-500"},
              {"name": "TRAINYARD_TENANT", "value": "acme"},
              {"name": "TRAINYARD_WORKERS", "value": "2"},
              {"name": "TRAINYARD_WORKER_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
              {"name": "RANK", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
              {"name": "WORLD_SIZE", "value": "2"},
              {"name": "MASTER_ADDR", "value": "ty-42-3-0.ty-42-3"},
              {"name": "MASTER_PORT", "value": "29500"}
            ],
            "resources": {
              "requests": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "800Gi"},
              "limits": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "800Gi"}
            },
            "ports": [{"name": "rendezvous", "containerPort": 29500, "protocol": "TCP"}],
            "volumeMounts": [{
              "name": "checkpoint",
              "mountPath": "/checkpoints/acme/42",
              "subPath": "acme/42"
            }]
          }],
          "volumes": [{
            "name": "checkpoint",
            "persistentVolumeClaim": {"claimName": "checkpoints"}
          }]
        }
      }
    }
  })json");
  EXPECT_EQ(*job, want) << "diff: " << Json::diff(*job, want).dump(1);
}

TEST(BuildJob, MinimalJobOnASingleFlavorCluster) {
  LaunchRequest r;
  r.name = "ty-7-1";
  r.job_id = 7;
  r.attempt = 1;
  r.tenant = "t";
  r.worker_nodes = {"n1"};
  r.spec.set_workers(1);
  r.spec.set_image("busybox");
  r.spec.mutable_resources()->set_cpu_millis(500);
  r.spec.mutable_resources()->set_memory_bytes(1000000000);
  absl::StatusOr<Json> job = BuildJob(r, *ParseKubernetesSettings(""));
  ASSERT_TRUE(job.ok()) << job.status();
  const Json& pod = (*job)["spec"]["template"]["spec"];
  EXPECT_EQ((*job)["metadata"]["namespace"], "trainyard");
  EXPECT_FALSE((*job)["spec"].contains("activeDeadlineSeconds"));
  EXPECT_FALSE((*job)["spec"].contains("ttlSecondsAfterFinished"));
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], 60);
  EXPECT_FALSE(pod.contains("nodeSelector"));
  EXPECT_FALSE(pod.contains("tolerations"));  // no GPUs, no flavor
  EXPECT_FALSE(pod.contains("volumes"));
  EXPECT_FALSE(pod["affinity"].contains("podAntiAffinity"));
  // One worker needs no Service: no subdomain, and it rendezvouses with
  // itself.
  EXPECT_FALSE(NeedsService(r));
  EXPECT_FALSE(pod.contains("subdomain"));
  const Json& c = pod["containers"][0];
  EXPECT_FALSE(c.contains("command"));  // the image's entrypoint
  bool master_addr = false;
  for (const Json& e : c["env"]) {
    if (e["name"] == "MASTER_ADDR") {
      EXPECT_EQ(e["value"], "127.0.0.1");
      master_addr = true;
    }
  }
  EXPECT_TRUE(master_addr);
  EXPECT_EQ(c["resources"]["requests"],
            Json::parse(R"({"cpu": "500m", "memory": "1000000000"})"));
  EXPECT_EQ(c["resources"]["limits"], c["resources"]["requests"]);
}

TEST(BuildJob, EvenPlacementSpreadsWorkers) {
  LaunchRequest r = TwoWorkerSpotRequest();
  r.spec.set_workers(4);
  r.worker_nodes = {"gke-a-1", "gke-a-1", "gke-a-2", "gke-a-2"};
  r.spec.mutable_resources()->set_gpus(4);
  absl::StatusOr<Json> job = BuildJob(r, GkeSettings());
  ASSERT_TRUE(job.ok()) << job.status();
  const Json& pod = (*job)["spec"]["template"]["spec"];
  EXPECT_EQ(pod["affinity"]["nodeAffinity"]
               ["requiredDuringSchedulingIgnoredDuringExecution"]
               ["nodeSelectorTerms"][0]["matchFields"][0]["values"],
            Json::parse(R"(["gke-a-1", "gke-a-2"])"));
  EXPECT_FALSE(pod["affinity"].contains("podAntiAffinity"));
  EXPECT_EQ(pod["topologySpreadConstraints"], Json::parse(R"([{
      "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
      "whenUnsatisfiable": "DoNotSchedule",
      "labelSelector": {"matchLabels": {"trainyard.dev/name": "ty-42-3"}}}])"));
  EXPECT_EQ((*job)["spec"]["completions"], 4);

  // Uneven (2 + 1): pinned to the nodes, neither spread nor anti-affinity.
  r.spec.set_workers(3);
  r.worker_nodes = {"gke-a-1", "gke-a-2", "gke-a-1"};
  job = BuildJob(r, GkeSettings());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(
      (*job)["spec"]["template"]["spec"].contains("topologySpreadConstraints"));
  EXPECT_FALSE((*job)["spec"]["template"]["spec"]["affinity"].contains(
      "podAntiAffinity"));
}

TEST(BuildJob, OtherFlavorsAndVolumes) {
  KubernetesSettings s = GkeSettings();
  LaunchRequest r = TwoWorkerSpotRequest();
  r.flavor = "ondemand-h100";
  s.checkpoint_volume = {CheckpointVolume::Kind::kNfs, "nfs.internal:/export"};
  absl::StatusOr<Json> job = BuildJob(r, s);
  ASSERT_TRUE(job.ok()) << job.status();
  const Json& pod = (*job)["spec"]["template"]["spec"];
  EXPECT_FALSE(pod.contains("nodeSelector"));
  EXPECT_EQ(pod["tolerations"], Json::parse(R"([
      {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
      {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])"));
  EXPECT_FALSE(
      (*job)["metadata"]["annotations"].contains("trainyard.dev/spot"));
  EXPECT_EQ(pod["volumes"], Json::parse(R"([{"name": "checkpoint",
      "nfs": {"server": "nfs.internal", "path": "/export"}}])"));

  s.checkpoint_volume = {CheckpointVolume::Kind::kHostPath, "/mnt/ckpt"};
  job = BuildJob(r, s);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["spec"]["template"]["spec"]["volumes"],
            Json::parse(R"([{"name": "checkpoint",
      "hostPath": {"path": "/mnt/ckpt", "type": "Directory"}}])"));

  // A remote checkpoint directory is the job's business: no volume.
  r.spec.mutable_checkpoint()->set_directory("gs://bucket/acme/42");
  r.resume_from = "gs://bucket/acme/42/step-500";
  job = BuildJob(r, s);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE((*job)["spec"]["template"]["spec"].contains("volumes"));
  // Node loss in a minute instead of Kubernetes' default.
  s.node_lost_after = absl::Seconds(60);
  job = BuildJob(r, s);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["spec"]["template"]["spec"]["tolerations"], Json::parse(R"([
      {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
      {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
      {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
       "effect": "NoExecute", "tolerationSeconds": 60},
      {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
       "effect": "NoExecute", "tolerationSeconds": 60}])"));
  s.node_lost_after.reset();
  // A karpenter spot flavor selects by label and tolerates nothing extra.
  s.flavors.push_back({.flavor = "kspot", .spot = SpotPreset::kKarpenter});
  r.flavor = "kspot";
  r.spec.mutable_resources()->set_gpus(0);
  job = BuildJob(r, s);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["spec"]["template"]["spec"]["nodeSelector"],
            Json::parse(R"({"karpenter.sh/capacity-type": "spot"})"));
  EXPECT_FALSE((*job)["spec"]["template"]["spec"].contains("tolerations"));
}

TEST(BuildJob, RendezvousVariablesWin) {
  LaunchRequest r = TwoWorkerSpotRequest();
  (*r.spec.mutable_env())["RANK"] = "7";
  (*r.spec.mutable_env())["MASTER_PORT"] = "1";
  absl::StatusOr<Json> job = BuildJob(r, GkeSettings());
  ASSERT_TRUE(job.ok()) << job.status();
  int rank = 0, port = 0;
  for (const Json& e :
       (*job)["spec"]["template"]["spec"]["containers"][0]["env"]) {
    if (e["name"] == "RANK") {
      ++rank;
      EXPECT_TRUE(e.contains("valueFrom"));
    }
    if (e["name"] == "MASTER_PORT") {
      ++port;
      EXPECT_EQ(e["value"], "29500");
    }
  }
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(port, 1);
}

TEST(BuildJob, RefusesWhatKubernetesCannotHonour) {
  const KubernetesSettings s = GkeSettings();
  struct Case {
    std::function<void(LaunchRequest&)> change;
    absl::StatusCode code;
    const char* field;
  };
  const Case cases[] = {
      {[](LaunchRequest& r) { r.spec.clear_image(); },
       absl::StatusCode::kInvalidArgument, "spec.image"},
      {[](LaunchRequest& r) { r.spec.set_working_dir("workspace"); },
       absl::StatusCode::kInvalidArgument, "spec.working_dir"},
      {[](LaunchRequest& r) {
         r.spec.mutable_checkpoint()->set_directory("/elsewhere/42");
       },
       absl::StatusCode::kInvalidArgument, "spec.checkpoint.directory"},
      {[](LaunchRequest& r) {
         r.spec.mutable_checkpoint()->set_directory("/checkpoints");
       },
       absl::StatusCode::kInvalidArgument, "spec.checkpoint.directory"},
      {[](LaunchRequest& r) {
         r.spec.mutable_checkpoint()->set_directory("/checkpoints/a/../b");
       },
       absl::StatusCode::kInvalidArgument, "spec.checkpoint.directory"},
      {[](LaunchRequest& r) { r.resume_from = "/checkpoints/other/1"; },
       absl::StatusCode::kInvalidArgument, "resume_from"},
      {[](LaunchRequest& r) {
         r.spec.mutable_checkpoint()->mutable_grace_period()->set_seconds(-1);
       },
       absl::StatusCode::kInvalidArgument, "spec.checkpoint.grace_period"},
      {[](LaunchRequest& r) { r.spec.mutable_time_limit()->set_seconds(-5); },
       absl::StatusCode::kInvalidArgument, "spec.time_limit"},
      {[](LaunchRequest& r) { r.spec.set_project("Not A Label"); },
       absl::StatusCode::kInvalidArgument, "spec.project"},
      {[](LaunchRequest& r) { r.flavor = "gpu-a100"; },
       absl::StatusCode::kFailedPrecondition, "flavor"},
      {[](LaunchRequest& r) { r.worker_nodes.pop_back(); },
       absl::StatusCode::kInvalidArgument, "worker_nodes"},
      {[](LaunchRequest& r) { r.name = "ty-42-4"; },
       absl::StatusCode::kInvalidArgument, "name"},
      {[](LaunchRequest& r) { r.spec.set_command(1, "\xff\xfe"); },
       absl::StatusCode::kInvalidArgument, "spec.command[1]"},
      {[](LaunchRequest& r) { (*r.spec.mutable_env())["X"] = "caf\xc3"; },
       absl::StatusCode::kInvalidArgument, "spec.env[\"X\"]"},
      {[](LaunchRequest& r) { r.env["API"] = "\xc0\xaf"; },
       absl::StatusCode::kInvalidArgument, "env[\"API\"]"},
      {[](LaunchRequest& r) { r.spec.set_image("img\xe2\x82"); },
       absl::StatusCode::kInvalidArgument, "spec.image"},
  };
  for (const Case& c : cases) {
    LaunchRequest r = TwoWorkerSpotRequest();
    c.change(r);
    absl::StatusOr<Json> job = BuildJob(r, s);
    ASSERT_FALSE(job.ok()) << c.field;
    EXPECT_EQ(job.status().code(), c.code) << job.status();
    EXPECT_EQ(domain::ErrorField(job.status()), c.field) << job.status();
    EXPECT_THAT(std::string(job.status().message()),
                StartsWith(Cat(c.field, ": ")));
  }
  // Local checkpoints on a cluster without the shared filesystem.
  KubernetesSettings no_volume = s;
  no_volume.checkpoint_volume = {};
  no_volume.checkpoint_mount_path.clear();
  absl::StatusOr<Json> job = BuildJob(TwoWorkerSpotRequest(), no_volume);
  EXPECT_EQ(domain::ErrorField(job.status()), "spec.checkpoint.directory");
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("checkpoint_volume"));
  // No image, but the cluster has a default one.
  KubernetesSettings with_default = s;
  with_default.default_image = "busybox:1.36";
  LaunchRequest r = TwoWorkerSpotRequest();
  r.spec.clear_image();
  job = BuildJob(r, with_default);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["spec"]["template"]["spec"]["containers"][0]["image"],
            "busybox:1.36");
}

TEST(BuildService, HeadlessServiceOwnedByTheJob) {
  absl::StatusOr<Json> svc =
      BuildService(TwoWorkerSpotRequest(), GkeSettings(),
                   "0f6c6fbe-2b2b-4c3e-9d0e-9d1d2d3d4d5d");
  ASSERT_TRUE(svc.ok()) << svc.status();
  const Json want = Json::parse(R"json({
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
      "name": "ty-42-3",
      "namespace": "training",
      "labels": {
        "trainyard.dev/tenant": "acme",
        "trainyard.dev/job": "42",
        "trainyard.dev/attempt": "3",
        "trainyard.dev/name": "ty-42-3",
        "trainyard.dev/project": "llm",
        "trainyard.dev/flavor": "spot-h100"
      },
      "ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "ty-42-3",
        "uid": "0f6c6fbe-2b2b-4c3e-9d0e-9d1d2d3d4d5d",
        "controller": true, "blockOwnerDeletion": true
      }]
    },
    "spec": {
      "clusterIP": "None",
      "selector": {"trainyard.dev/name": "ty-42-3"},
      "publishNotReadyAddresses": true,
      "ports": [{"name": "rendezvous", "port": 29500, "targetPort": 29500,
                 "protocol": "TCP"}]
    }
  })json");
  EXPECT_EQ(*svc, want) << Json::diff(*svc, want).dump(1);
  absl::StatusOr<Json> plain =
      BuildService(TwoWorkerSpotRequest(), GkeSettings());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)["metadata"].contains("ownerReferences"));
}

// --- AttemptFromObjects ------------------------------------------------------

// A Job as the API server returns it after BuildJob's was created.
Json JobObject(int workers, const Json& conditions = Json::array(),
               const Json& extra_annotations = Json::object()) {
  Json annotations = {{"trainyard.dev/job-name", "tenants/acme/jobs/42"},
                      {"trainyard.dev/worker-nodes",
                       workers == 2 ? "gke-a-1,gke-a-2" : "gke-a-1"}};
  if (extra_annotations.is_object()) annotations.update(extra_annotations);
  Json job = {{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata",
               {{"name", "ty-42-3"},
                {"namespace", "training"},
                {"uid", "5c9e1c7a-0000-4000-8000-000000000042"},
                {"creationTimestamp", "2026-11-28T10:00:00Z"},
                {"annotations", annotations}}},
              {"spec",
               {{"completionMode", "Indexed"},
                {"completions", workers},
                {"parallelism", workers},
                {"backoffLimit", 0},
                {"activeDeadlineSeconds", 7200},
                {"template", {{"spec", {{"containers", Json::array()}}}}}}},
              {"status", {{"startTime", "2026-11-28T10:00:01Z"}}}};
  if (!conditions.empty()) job["status"]["conditions"] = conditions;
  return job;
}

Json JobCondition(const char* type, const char* reason, const char* message,
                  const char* time) {
  return {{"type", type},          {"status", "True"},
          {"reason", reason},      {"message", message},
          {"lastProbeTime", time}, {"lastTransitionTime", time}};
}

// A worker pod: `state` is its container's state ({"running": ...}).
Json PodObject(int index, const char* phase, const Json& state,
               const char* node = nullptr) {
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", Cat("ty-42-3-", index, "-abcde")},
        {"namespace", "training"},
        {"creationTimestamp", "2026-11-28T10:00:01Z"},
        {"labels",
         {{"trainyard.dev/name", "ty-42-3"},
          {"batch.kubernetes.io/job-completion-index", Cat(index)}}},
        {"annotations",
         {{"batch.kubernetes.io/job-completion-index", Cat(index)}}}}},
      {"spec",
       {{"containers", Json::array({{{"name", "worker"},
                                     {"image", "ghcr.io/acme/train:1.2"}}})},
        {"restartPolicy", "Never"}}},
      {"status",
       {{"phase", phase},
        {"conditions",
         Json::array({{{"type", "PodScheduled"},
                       {"status", "True"},
                       {"lastTransitionTime", "2026-11-28T10:00:02Z"}}})}}}};
  pod["spec"]["nodeName"] = node != nullptr ? node : Cat("gke-a-", index + 1);
  if (!state.is_null()) {
    pod["status"]["containerStatuses"] =
        Json::array({{{"name", "worker"},
                      {"state", state},
                      {"ready", state.contains("running")},
                      {"restartCount", 0},
                      {"image", "ghcr.io/acme/train:1.2"},
                      {"imageID", ""}}});
  }
  return pod;
}

Json Running(const char* since) {
  return {{"running", {{"startedAt", since}}}};
}
Json Exited(int code, const char* reason, const char* finished,
            const char* message = nullptr) {
  Json t = {{"exitCode", code},
            {"reason", reason},
            {"startedAt", "2026-11-28T10:01:00Z"},
            {"finishedAt", finished}};
  if (message != nullptr) t["message"] = message;
  return {{"terminated", t}};
}
Json Waiting(const char* reason, const char* message) {
  return {{"waiting", {{"reason", reason}, {"message", message}}}};
}
void Disrupt(Json& pod, const char* reason, const char* message) {
  pod["status"]["conditions"].push_back(
      {{"type", "DisruptionTarget"},
       {"status", "True"},
       {"reason", reason},
       {"message", message},
       {"lastTransitionTime", "2026-11-28T10:30:00Z"}});
}

const absl::Time kNow = T("2026-11-28T11:00:00Z");

TEST(AttemptFromObjects, PendingUntilEveryWorkerRuns) {
  // No pods yet.
  AttemptStatus s = AttemptFromObjects(JobObject(2), {}, kNow);
  EXPECT_EQ(s.name, "ty-42-3");
  EXPECT_EQ(s.backend_id, "5c9e1c7a-0000-4000-8000-000000000042");
  EXPECT_EQ(s.submit_time, T("2026-11-28T10:00:00Z"));
  EXPECT_EQ(s.phase, AttemptPhase::kPending);
  EXPECT_EQ(s.message, "pending: workers 0, 1: no pod yet");
  EXPECT_EQ(s.nodes, (std::vector<std::string>{"gke-a-1", "gke-a-2"}));
  EXPECT_FALSE(s.stop_requested);

  // One running, one pulling its image.
  Json unscheduled = PodObject(1, "Pending", Waiting("ContainerCreating", ""));
  s = AttemptFromObjects(
      JobObject(2),
      {PodObject(0, "Running", Running("2026-11-28T10:01:00Z")), unscheduled},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kPending);
  EXPECT_EQ(s.message, "pending: worker 1: ContainerCreating");
  EXPECT_FALSE(s.start_time.has_value());

  // Both running: started when the last one did.
  s = AttemptFromObjects(
      JobObject(2),
      {PodObject(1, "Running", Running("2026-11-28T10:02:30Z")),
       PodObject(0, "Running", Running("2026-11-28T10:01:00Z"))},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kRunning);
  EXPECT_EQ(s.start_time, T("2026-11-28T10:02:30Z"));
  EXPECT_FALSE(s.end_time.has_value());
  EXPECT_EQ(s.failure, FailureKind::kNone);
}

TEST(AttemptFromObjects, Succeeded) {
  AttemptStatus s = AttemptFromObjects(
      JobObject(2, Json::array({JobCondition("Complete", "CompletionsReached",
                                             "Reached expected number of "
                                             "succeeded pods",
                                             "2026-11-28T10:40:00Z")})),
      {PodObject(0, "Succeeded",
                 Exited(0, "Completed", "2026-11-28T10:39:00Z")),
       PodObject(1, "Succeeded",
                 Exited(0, "Completed", "2026-11-28T10:39:59Z"))},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(s.failure, FailureKind::kNone);
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(s.start_time, T("2026-11-28T10:01:00Z"));
  EXPECT_EQ(s.end_time, T("2026-11-28T10:40:00Z"));
  EXPECT_EQ(s.message, "all 2 workers exited with code 0");
}

const Json kBackoffFailed = Json::array({JobCondition(
    "Failed", "BackoffLimitExceeded",
    "Job has reached the specified backoff limit", "2026-11-28T10:31:00Z")});

struct FailureCase {
  const char* what;
  std::vector<Json> pods;
  Json annotations;
  FailureKind kind;
  std::optional<int> exit_code;
  const char* message;
};

TEST(AttemptFromObjects, FailureClasses) {
  Json oom =
      PodObject(1, "Failed", Exited(137, "OOMKilled", "2026-11-28T10:30:00Z"));
  Json peer =
      PodObject(0, "Failed", Exited(1, "Error", "2026-11-28T10:35:00Z"));
  Json exit3 = PodObject(
      0, "Failed", Exited(3, "Error", "2026-11-28T10:20:00Z", "loss is NaN"));
  Json later =
      PodObject(1, "Failed", Exited(143, "Error", "2026-11-28T10:20:05Z"));
  Json start_error =
      PodObject(0, "Failed",
                Exited(128, "StartError", "2026-11-28T10:01:00Z",
                       "exec: \"pyhton\": executable file not found in $PATH"));

  Json taint =
      PodObject(1, "Failed", Exited(137, "Error", "2026-11-28T10:30:00Z"));
  Disrupt(taint, "DeletionByTaintManager",
          "Taint manager: deleting due to NoExecute taint");
  Json shutdown =
      PodObject(1, "Failed", Exited(143, "Error", "2026-11-28T10:30:00Z"));
  shutdown["status"]["reason"] = "Terminated";
  shutdown["status"]["message"] =
      "Pod was terminated in response to imminent node shutdown.";
  Disrupt(shutdown, "TerminationByKubelet",
          "Pod was terminated in response to imminent node shutdown.");
  Json shutdown_spot_selector = shutdown;
  shutdown_spot_selector["spec"]["nodeSelector"] = {
      {"cloud.google.com/gke-spot", "true"}};
  Json pressure = PodObject(0, "Failed", Json());
  pressure["status"]["reason"] = "Evicted";
  pressure["status"]["message"] =
      "The node was low on resource: memory. Threshold quantity: 100Mi, "
      "available: 90Mi.";
  Disrupt(pressure, "TerminationByKubelet",
          "The node was low on resource: memory.");
  Json drained =
      PodObject(0, "Failed", Exited(143, "Error", "2026-11-28T10:30:00Z"));
  Disrupt(drained, "EvictionByEvictionAPI", "Eviction API: evicting");
  Json preempted =
      PodObject(0, "Failed", Exited(143, "Error", "2026-11-28T10:30:00Z"));
  Disrupt(preempted, "PreemptionByScheduler",
          "default-scheduler: preempting to accommodate a higher priority pod");
  Json podgc = PodObject(1, "Failed", Json());
  Disrupt(podgc, "DeletionByPodGC", "PodGC: node no longer exists");
  Json nodelost = PodObject(1, "Running", Running("2026-11-28T10:01:00Z"));
  nodelost["status"]["reason"] = "NodeLost";
  nodelost["status"]["message"] =
      "Node gke-a-2 which was running pod is unresponsive";
  Json outofgpu = PodObject(0, "Failed", Json());
  outofgpu["status"]["reason"] = "OutOfnvidia.com/gpu";
  outofgpu["status"]["message"] =
      "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu";
  Json pull =
      PodObject(1, "Pending",
                Waiting("ImagePullBackOff",
                        "Back-off pulling image \"ghcr.io/acme/trian:1.2\""));
  Json failed_bare = PodObject(0, "Failed", Json());

  const Json spot = {{"trainyard.dev/spot", "true"}};
  const std::vector<FailureCase> cases = {
      {"OOM first, then its peer",
       {peer, oom},
       {},
       FailureKind::kUserError,
       137,
       "worker 1 OOMKilled (exit 137)"},
      {"non-zero exit with termination message",
       {exit3, later},
       {},
       FailureKind::kUserError,
       3,
       "worker 0 exited with code 3: loss is NaN"},
      {"command not found",
       {start_error},
       {},
       FailureKind::kUserError,
       128,
       "worker 0 exited with code 128 (StartError: exec: \"pyhton\": "
       "executable file not found in $PATH)"},
      {"taint manager, peer crashed earlier",
       {exit3, taint},
       {},
       FailureKind::kNodeFailure,
       std::nullopt,
       "worker 1: node gke-a-2 lost (DeletionByTaintManager: Taint manager: "
       "deleting due to NoExecute taint)"},
      {"node shutdown, on-demand",
       {shutdown},
       {},
       FailureKind::kNodeFailure,
       std::nullopt,
       "worker 1: node gke-a-2 shut down (TerminationByKubelet: Pod was "
       "terminated in response to imminent node shutdown.)"},
      {"node shutdown, spot attempt",
       {shutdown},
       spot,
       FailureKind::kSpotReclaim,
       std::nullopt,
       "worker 1: node gke-a-2 shut down (spot capacity reclaimed) "
       "(TerminationByKubelet: Pod was terminated in response to imminent node "
       "shutdown.)"},
      {"node shutdown, spot node selector",
       {shutdown_spot_selector},
       {},
       FailureKind::kSpotReclaim,
       std::nullopt,
       "worker 1: node gke-a-2 shut down (spot capacity reclaimed) "
       "(TerminationByKubelet: Pod was terminated in response to imminent node "
       "shutdown.)"},
      {"node pressure eviction",
       {pressure},
       spot,
       FailureKind::kNodeFailure,
       std::nullopt,
       "worker 0 evicted by the kubelet on node gke-a-1 (Evicted: The node was "
       "low on resource: memory. Threshold quantity: 100Mi, available: 90Mi.)"},
      {"drain",
       {drained},
       {},
       FailureKind::kNodeFailure,
       std::nullopt,
       "worker 0 evicted on node gke-a-1 (node drained) "
       "(EvictionByEvictionAPI: "
       "Eviction API: evicting)"},
      {"drain of a spot node",
       {drained},
       spot,
       FailureKind::kSpotReclaim,
       std::nullopt,
       "worker 0 evicted on node gke-a-1 (spot capacity reclaimed) "
       "(EvictionByEvictionAPI: Eviction API: evicting)"},
      {"kube-scheduler preemption",
       {preempted},
       {},
       FailureKind::kPreempted,
       std::nullopt,
       "worker 0 preempted by kube-scheduler on node gke-a-1 "
       "(PreemptionByScheduler: default-scheduler: preempting to accommodate a "
       "higher priority pod)"},
      {"pod GC of a deleted node",
       {podgc},
       {},
       FailureKind::kNodeFailure,
       std::nullopt,
       "worker 1: node gke-a-2 lost (DeletionByPodGC: PodGC: node no longer "
       "exists)"},
      {"node lost",
       {nodelost},
       {},
       FailureKind::kNodeFailure,
       std::nullopt,
       "worker 1: node gke-a-2 lost (NodeLost: Node gke-a-2 which was running "
       "pod is unresponsive)"},
      {"kubelet admission",
       {outofgpu},
       {},
       FailureKind::kBackendError,
       std::nullopt,
       "worker 0 refused by the kubelet on node gke-a-1 (OutOfnvidia.com/gpu: "
       "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu)"},
      {"image never pulled",
       {pull},
       {},
       FailureKind::kUserError,
       std::nullopt,
       "worker 1 ImagePullBackOff: Back-off pulling image "
       "\"ghcr.io/acme/trian:1.2\""},
      {"worker 1's pod is gone",
       {PodObject(0, "Running", Running("2026-11-28T10:01:00Z"))},
       {},
       FailureKind::kNodeFailure,
       std::nullopt,
       "worker 1's pod is gone from node gke-a-2 (its node was removed?); the "
       "Job failed: BackoffLimitExceeded: Job has reached the specified "
       "backoff "
       "limit"},
      {"gone on spot",
       {PodObject(0, "Running", Running("2026-11-28T10:01:00Z"))},
       spot,
       FailureKind::kSpotReclaim,
       std::nullopt,
       "worker 1's pod is gone from node gke-a-2 (its node was removed?); the "
       "Job failed: BackoffLimitExceeded: Job has reached the specified "
       "backoff "
       "limit"},
      {"failed pod without detail",
       {failed_bare, PodObject(1, "Running", Running("2026-11-28T10:01:00Z"))},
       {},
       FailureKind::kBackendError,
       std::nullopt,
       "worker 0 failed on node gke-a-1: Failed"},
  };
  for (const FailureCase& c : cases) {
    AttemptStatus s = AttemptFromObjects(
        JobObject(2, kBackoffFailed, c.annotations), c.pods, kNow);
    EXPECT_EQ(s.phase, AttemptPhase::kFailed) << c.what;
    EXPECT_EQ(FailureKindName(s.failure), FailureKindName(c.kind)) << c.what;
    EXPECT_EQ(s.exit_code, c.exit_code) << c.what;
    EXPECT_EQ(s.message, c.message) << c.what;
    EXPECT_EQ(s.end_time, T("2026-11-28T10:31:00Z")) << c.what;
  }
}

TEST(AttemptFromObjects, DeadlineExceededIsTimeLimit) {
  AttemptStatus s = AttemptFromObjects(
      JobObject(2, Json::array({JobCondition(
                       "Failed", "DeadlineExceeded",
                       "Job was active longer than specified deadline",
                       "2026-11-28T12:00:01Z")})),
      {PodObject(0, "Failed", Exited(143, "Error", "2026-11-28T12:00:30Z")),
       PodObject(1, "Failed", Exited(143, "Error", "2026-11-28T12:00:30Z"))},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kTimeLimit);
  EXPECT_FALSE(s.exit_code.has_value());
  EXPECT_EQ(s.message,
            "reached its time limit of 2h (DeadlineExceeded: Job was active "
            "longer than specified deadline)");
  EXPECT_EQ(s.end_time, T("2026-11-28T12:00:01Z"));
}

// From Kubernetes 1.31 on, Failed waits for every pod to be gone, but
// FailureTarget (same reason) comes at once; a pod on a dead node may linger.
TEST(AttemptFromObjects, FailureTargetEndsTheAttempt) {
  Json lingering = PodObject(1, "Running", Running("2026-11-28T10:01:00Z"));
  lingering["metadata"]["deletionTimestamp"] = "2026-11-28T10:30:30Z";
  Disrupt(lingering, "DeletionByTaintManager",
          "Taint manager: deleting due to NoExecute taint");
  AttemptStatus s = AttemptFromObjects(
      JobObject(2, Json::array({JobCondition(
                       "FailureTarget", "BackoffLimitExceeded",
                       "Job has reached the specified backoff limit",
                       "2026-11-28T10:30:31Z")})),
      {PodObject(0, "Failed", Exited(1, "Error", "2026-11-28T10:30:40Z")),
       lingering},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kNodeFailure);
  EXPECT_EQ(s.end_time, T("2026-11-28T10:30:31Z"));
  // SuccessCriteriaMet likewise comes before Complete.
  s = AttemptFromObjects(
      JobObject(1, Json::array(
                       {JobCondition("SuccessCriteriaMet", "CompletionsReached",
                                     "", "2026-11-28T10:40:00Z")})),
      {PodObject(0, "Succeeded",
                 Exited(0, "Completed", "2026-11-28T10:39:00Z"))},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_EQ(s.message, "exited with code 0");
  EXPECT_EQ(s.end_time, T("2026-11-28T10:40:00Z"));
}

TEST(AttemptFromObjects, KnownNodesTellNodeFailures) {
  // The Job failed because worker 0 gave up on its peer, whose node is down
  // while its pod still shows Running.
  Json peer =
      PodObject(0, "Failed", Exited(1, "Error", "2026-11-28T10:35:00Z"));
  Json stale = PodObject(1, "Running", Running("2026-11-28T10:01:00Z"));
  NodeInventory a{.name = "gke-a-1"};
  NodeInventory b{.name = "gke-a-2",
                  .schedulable = false,
                  .failed = true,
                  .state_message = "Ready Unknown: NodeStatusUnknown"};
  const std::vector<NodeInventory> nodes = {a, b};
  AttemptStatus s = AttemptFromObjects(JobObject(2, kBackoffFailed),
                                       {peer, stale}, kNow, &nodes);
  EXPECT_EQ(s.failure, FailureKind::kNodeFailure);
  EXPECT_EQ(s.message,
            "worker 1: node gke-a-2 failed (Ready Unknown: NodeStatusUnknown)");
  // A node with a spot label makes it a reclaim, even on a Job not marked
  // spot.
  NodeInventory spot_b = b;
  spot_b.labels = {{"karpenter.sh/capacity-type", "spot"}};
  const std::vector<NodeInventory> spot_nodes = {a, spot_b};
  s = AttemptFromObjects(JobObject(2, kBackoffFailed), {peer, stale}, kNow,
                         &spot_nodes);
  EXPECT_EQ(s.failure, FailureKind::kSpotReclaim);
  // Without the nodes it is the worker's exit.
  s = AttemptFromObjects(JobObject(2, kBackoffFailed), {peer, stale}, kNow);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.exit_code, 1);
  // A node removed after its worker exited by itself does not hide the exit.
  const std::vector<NodeInventory> only_b = {b};
  s = AttemptFromObjects(
      JobObject(2, kBackoffFailed),
      {peer,
       PodObject(1, "Failed", Exited(0, "Completed", "2026-11-28T10:36:00Z"))},
      kNow, &only_b);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.message, "worker 0 exited with code 1");
}

TEST(AttemptFromObjects, WorkersThatCannotStart) {
  // An invalid image name fails at once.
  AttemptStatus s = AttemptFromObjects(
      JobObject(1),
      {PodObject(0, "Pending",
                 Waiting("InvalidImageName",
                         "Failed to apply default image tag \"Bad:Image\""))},
      T("2026-11-28T10:00:10Z"));
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.message,
            "worker 0 cannot start: InvalidImageName: Failed to apply default "
            "image tag \"Bad:Image\"");
  EXPECT_EQ(s.end_time, T("2026-11-28T10:00:10Z"));
  // A pull failure is given kImagePullPatience from scheduling (10:00:02).
  const Json pulling =
      PodObject(0, "Pending", Waiting("ErrImagePull", "rpc error: not found"));
  s = AttemptFromObjects(JobObject(1), {pulling}, T("2026-11-28T10:05:01Z"));
  EXPECT_EQ(s.phase, AttemptPhase::kPending);
  EXPECT_EQ(s.message, "pending: worker 0: ErrImagePull: rpc error: not found");
  s = AttemptFromObjects(JobObject(1), {pulling}, T("2026-11-28T10:05:02Z"));
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kUserError);
  EXPECT_EQ(s.message,
            "worker 0 cannot start: ErrImagePull: rpc error: not found");
}

TEST(AttemptFromObjects, UnschedulablePodIsPending) {
  Json pod = PodObject(0, "Pending", Json());
  pod["spec"].erase("nodeName");
  pod["status"]["conditions"] = Json::array(
      {{{"type", "PodScheduled"},
        {"status", "False"},
        {"reason", "Unschedulable"},
        {"message", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."},
        {"lastTransitionTime", "2026-11-28T10:00:02Z"}}});
  AttemptStatus s = AttemptFromObjects(JobObject(1), {pod}, kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kPending);
  EXPECT_EQ(s.message,
            "pending: worker 0: Unschedulable: 0/3 nodes are available: 3 "
            "Insufficient nvidia.com/gpu.");
  EXPECT_EQ(s.nodes, std::vector<std::string>{"gke-a-1"});  // the placement
}

TEST(AttemptFromObjects, Stops) {
  const Json preempt = {
      {"trainyard.dev/stop-reason", "preemption"},
      {"trainyard.dev/stop-deadline", "2026-11-28T10:32:00Z"}};
  const std::vector<Json> running = {
      PodObject(0, "Running", Running("2026-11-28T10:01:00Z")),
      PodObject(1, "Running", Running("2026-11-28T10:01:00Z"))};
  // Inside the grace period: still running, stop requested.
  AttemptStatus s = AttemptFromObjects(JobObject(2, Json::array(), preempt),
                                       running, T("2026-11-28T10:31:00Z"));
  EXPECT_EQ(s.phase, AttemptPhase::kRunning);
  EXPECT_TRUE(s.stop_requested);
  EXPECT_EQ(s.stop_deadline, T("2026-11-28T10:32:00Z"));
  EXPECT_EQ(s.message, "stopping (preemption)");
  // The pods were deleted and the Job failed: preempted, whatever the pods
  // say about their exit.
  s = AttemptFromObjects(
      JobObject(2, kBackoffFailed, preempt),
      {PodObject(0, "Failed", Exited(143, "Error", "2026-11-28T10:30:30Z"))},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled);
  EXPECT_EQ(s.failure, FailureKind::kPreempted);
  EXPECT_EQ(s.message, "preempted by Trainyard");
  EXPECT_EQ(s.end_time, T("2026-11-28T10:31:00Z"));
  EXPECT_FALSE(s.exit_code.has_value());
  EXPECT_TRUE(s.stop_requested);
  // Cancelled; a pending attempt without pods is gone once the deadline
  // passed.
  const Json cancel = {{"trainyard.dev/stop-reason", "cancel"},
                       {"trainyard.dev/stop-deadline", "2026-11-28T10:00:30Z"}};
  s = AttemptFromObjects(JobObject(2, Json::array(), cancel), {},
                         T("2026-11-28T10:00:31Z"));
  EXPECT_EQ(s.phase, AttemptPhase::kCancelled);
  EXPECT_EQ(s.failure, FailureKind::kCancelled);
  EXPECT_EQ(s.message, "cancelled by Trainyard");
  EXPECT_EQ(s.end_time, T("2026-11-28T10:00:31Z"));
  // Ending by itself inside the grace period wins.
  s = AttemptFromObjects(
      JobObject(2,
                Json::array({JobCondition("Complete", "CompletionsReached", "",
                                          "2026-11-28T10:31:30Z")}),
                preempt),
      {PodObject(0, "Succeeded",
                 Exited(0, "Completed", "2026-11-28T10:31:20Z")),
       PodObject(1, "Succeeded",
                 Exited(0, "Completed", "2026-11-28T10:31:29Z"))},
      kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kSucceeded);
  EXPECT_TRUE(s.stop_requested);
}

TEST(AttemptFromObjects, NewestPodOfAnIndexDecides) {
  Json old_pod =
      PodObject(0, "Failed", Exited(1, "Error", "2026-11-28T10:05:00Z"));
  Json new_pod = PodObject(0, "Running", Running("2026-11-28T10:06:00Z"));
  new_pod["metadata"]["creationTimestamp"] = "2026-11-28T10:05:30Z";
  new_pod["spec"]["nodeName"] = "gke-a-9";
  AttemptStatus s = AttemptFromObjects(JobObject(1), {new_pod, old_pod}, kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kRunning);
  EXPECT_EQ(s.nodes, std::vector<std::string>{"gke-a-9"});
  EXPECT_EQ(s.start_time, T("2026-11-28T10:06:00Z"));
}

TEST(AttemptFromObjects, LongMessagesAreCutAtACharacter) {
  // 299 ASCII bytes, then "é" (2 bytes) across the 300-byte cut.
  const std::string message = std::string(299, 'x') + "\xc3\xa9" + "tail";
  AttemptStatus s = AttemptFromObjects(
      JobObject(1, kBackoffFailed),
      {PodObject(0, "Failed",
                 Exited(2, "Error", "2026-11-28T10:20:00Z", message.c_str()))},
      kNow);
  EXPECT_EQ(s.message,
            "worker 0 exited with code 2: " + std::string(299, 'x') + "...");
}

// Objects of any shape (wrong types, missing fields) give a status or an
// inventory, never a crash.
TEST(AttemptFromObjects, MalformedObjectsDoNotCrash) {
  const std::vector<Json> shapes = {
      Json(),
      Json::array(),
      Json("job"),
      Json::parse(R"({"metadata": [], "spec": "x", "status": 3})"),
      Json::parse(
          R"({"metadata": {"name": 5, "annotations": {"trainyard.dev/stop-reason": 1}},
                      "spec": {"completions": -4},
                      "status": {"conditions": [1,
                                 {"type": "Failed", "status": "True", "reason": 7}]}})"),
      Json::parse(
          R"({"metadata": {"annotations": {"trainyard.dev/worker-nodes": ",,",
                      "trainyard.dev/stop-reason": "cancel", "trainyard.dev/stop-deadline": 3}},
                      "status": {"conditions": [{"type": "Complete", "status": "False"}]}})"),
      Json::parse(R"({"spec": {"completions": 99999999999}})"),
      Json::parse(R"({"spec": {"completions": 18446744073709551615}})"),
  };
  const std::vector<Json> pods = {
      Json(),
      Json::parse(
          R"({"metadata": {"annotations": {"batch.kubernetes.io/job-completion-index": "x"}}})"),
      Json::parse(
          R"({"metadata": {"annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
                      "status": {"phase": 1, "containerStatuses": [1, {"state": []},
                                 {"name": "worker", "state": {"terminated": {"exitCode": "1"}}}],
                                 "conditions": {"type": "DisruptionTarget"}}})"),
      Json::parse(
          R"({"metadata": {"labels": {"batch.kubernetes.io/job-completion-index": "1"}},
                      "spec": {"nodeName": ["a"]},
                      "status": {"phase": "Failed", "containerStatuses": []}})"),
  };
  const std::vector<NodeInventory> nodes = {{.name = "a"}};
  for (const Json& job : shapes) {
    AttemptStatus s = AttemptFromObjects(job, pods, kNow, &nodes);
    EXPECT_FALSE(s.message.empty()) << job.dump();
    NodeInventory n =
        NodeFromObject(job, {&pods[1], &pods[2], nullptr}, NodeSettings());
    EXPECT_EQ(n.used_gpus, 0) << job.dump();
  }
  // Many workers waiting: eight are named.
  Json many = JobObject(2);
  many["spec"]["completions"] = 10;
  EXPECT_EQ(AttemptFromObjects(many, {}, kNow).message,
            "pending: workers 0, 1, 2, 3, 4, 5, 6, 7 ... (10 in all): no pod "
            "yet");
  // A Job failed without reason, on pods without detail.
  AttemptStatus s = AttemptFromObjects(shapes[4], {}, kNow);
  EXPECT_EQ(s.phase, AttemptPhase::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kBackendError);
  EXPECT_EQ(s.message, "the Job failed: Failed");
}

TEST(StopReasonValue, RoundTrips) {
  EXPECT_EQ(StopReasonValue(StopReason::kCancel), "cancel");
  EXPECT_EQ(StopReasonValue(StopReason::kPreemption), "preemption");
  EXPECT_EQ(ParseStopReasonValue("preemption"), StopReason::kPreemption);
  EXPECT_EQ(ParseStopReasonValue("cancel"), StopReason::kCancel);
  EXPECT_EQ(ParseStopReasonValue("Cancel"), std::nullopt);
}

// --- Nodes -------------------------------------------------------------------

// A GKE spot H100 node as `kubectl get node -o json` shows one (trimmed).
Json GkeNode() {
  return Json::parse(R"json({
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
      "name": "gke-a-1",
      "creationTimestamp": "2026-11-28T08:00:00Z",
      "labels": {
        "cloud.google.com/gke-nodepool": "h100-spot",
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/gce-topology-block": "b1",
        "cloud.google.com/gce-topology-subblock": "sb3",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "topology.kubernetes.io/zone": "us-central1-a",
        "kubernetes.io/hostname": "gke-a-1"
      }
    },
    "spec": {
      "taints": [
        {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
      ]
    },
    "status": {
      "capacity": {"cpu": "208", "memory": "1871804604Ki", "nvidia.com/gpu": "8", "pods": "110"},
      "allocatable": {"cpu": "207400m", "memory": "1843210556Ki", "nvidia.com/gpu": "8", "pods": "110"},
      "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status",
         "lastHeartbeatTime": "2026-11-28T10:59:00Z",
         "lastTransitionTime": "2026-11-28T08:01:00Z"}
      ]
    }
  })json");
}

KubernetesSettings NodeSettings() {
  absl::StatusOr<KubernetesSettings> s = ParseKubernetesSettings(R"(
    flavor.spot-h100.spot = gke
    pool_flavor = h100-spot:spot-h100
    block_label = cloud.google.com/gce-topology-block
    rack_label = cloud.google.com/gce-topology-subblock
    gpu_model_map = NVIDIA-H100-80GB-HBM3=H100
  )");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

Json RequestingPod(const char* node, const char* phase, const char* cpu,
                   const char* memory, const char* gpus) {
  Json pod = PodObject(0, phase, Json(), node);
  Json resources = {{"cpu", cpu}, {"memory", memory}};
  if (gpus != nullptr) resources["nvidia.com/gpu"] = gpus;
  pod["spec"]["containers"][0]["resources"] = {{"requests", resources},
                                               {"limits", resources}};
  return pod;
}

TEST(NodeFromObject, GkeSpotNode) {
  const Json node = GkeNode();
  const Json a = RequestingPod("gke-a-1", "Running", "96", "800Gi", "4");
  const Json b = RequestingPod("gke-a-1", "Pending", "500m", "512Mi", nullptr);
  const Json done = RequestingPod("gke-a-1", "Succeeded", "96", "800Gi", "4");
  const Json other = RequestingPod("gke-a-2", "Running", "96", "800Gi", "4");
  NodeInventory n =
      NodeFromObject(node, {&a, &b, &done, &other}, NodeSettings());
  EXPECT_EQ(n.name, "gke-a-1");
  EXPECT_EQ(n.pool, "h100-spot");
  EXPECT_EQ(n.flavor, "spot-h100");
  EXPECT_EQ(n.gpu_model, "H100");
  EXPECT_EQ(n.gpus, 8);
  EXPECT_EQ(n.cpu_millis, 207400);
  EXPECT_EQ(n.memory_bytes, int64_t{1843210556} * 1024);
  EXPECT_EQ(n.used_gpus, 4);
  EXPECT_EQ(n.used_cpu_millis, 96500);
  EXPECT_EQ(n.used_memory_bytes, (int64_t{800} << 30) + (int64_t{512} << 20));
  EXPECT_EQ(n.block, "b1");
  EXPECT_EQ(n.rack, "sb3");
  EXPECT_EQ(n.labels.at("cloud.google.com/gke-spot"), "true");
  EXPECT_EQ(n.labels.size(), 8u);
  // The spot flavor tolerates the spot taint; GPU pods tolerate the GPU one.
  EXPECT_TRUE(n.schedulable);
  EXPECT_FALSE(n.failed);
  EXPECT_EQ(n.state_message, "Ready");
}

TEST(NodeFromObject, States) {
  const KubernetesSettings s = NodeSettings();
  // Cordoned.
  Json node = GkeNode();
  node["spec"]["unschedulable"] = true;
  node["spec"]["taints"].push_back(
      {{"key", "node.kubernetes.io/unschedulable"}, {"effect", "NoSchedule"}});
  NodeInventory n = NodeFromObject(node, {}, s);
  EXPECT_FALSE(n.schedulable);
  EXPECT_FALSE(n.failed);
  EXPECT_EQ(n.state_message, "cordoned");
  // A taint no flavor tolerates.
  node = GkeNode();
  node["spec"]["taints"].push_back(
      {{"key", "cloud.google.com/impending-node-termination"},
       {"effect", "NoSchedule"}});
  n = NodeFromObject(node, {}, s);
  EXPECT_FALSE(n.schedulable);
  EXPECT_EQ(n.state_message,
            "tainted cloud.google.com/impending-node-termination:NoSchedule");
  // A node of another pool keeps the spot taint untolerated: its flavor is
  // unknown, but some flavor (spot-h100) tolerates it.
  node = GkeNode();
  node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] = "other";
  n = NodeFromObject(node, {}, s);
  EXPECT_EQ(n.pool, "other");
  EXPECT_EQ(n.flavor, "");
  EXPECT_TRUE(n.schedulable);
  // NotReady.
  node = GkeNode();
  node["status"]["conditions"][0]["status"] = "Unknown";
  node["status"]["conditions"][0]["reason"] = "NodeStatusUnknown";
  node["status"]["conditions"][0]["message"] =
      "Kubelet stopped posting node status.";
  node["spec"]["taints"].push_back(
      {{"key", "node.kubernetes.io/unreachable"}, {"effect", "NoExecute"}});
  n = NodeFromObject(node, {}, s);
  EXPECT_TRUE(n.failed);
  EXPECT_FALSE(n.schedulable);
  EXPECT_EQ(n.state_message,
            "Ready Unknown: NodeStatusUnknown: Kubelet stopped posting node "
            "status.");
  trainyard::v1::Node proto = ToNodeProto(n, "gke");
  EXPECT_EQ(proto.state(), trainyard::v1::NODE_STATE_DOWN);
  // Being deleted.
  node = GkeNode();
  node["metadata"]["deletionTimestamp"] = "2026-11-28T10:59:00Z";
  n = NodeFromObject(node, {}, s);
  EXPECT_TRUE(n.failed);
  EXPECT_EQ(n.state_message, "being deleted");
  // The flavor label wins over the pool; the zone stands for the block when
  // no block label is set; a fixed GPU model wins over the label.
  KubernetesSettings plain = s;
  plain.block_label.clear();
  plain.gpu_model = "H100-SXM";
  node = GkeNode();
  node["metadata"]["labels"]["trainyard.dev/flavor"] = "reserved-h100";
  n = NodeFromObject(node, {}, plain);
  EXPECT_EQ(n.flavor, "reserved-h100");
  EXPECT_EQ(n.block, "us-central1-a");
  EXPECT_EQ(n.gpu_model, "H100-SXM");
  // A CPU node has no GPU model.
  node = GkeNode();
  node["status"]["allocatable"].erase("nvidia.com/gpu");
  n = NodeFromObject(node, {}, s);
  EXPECT_EQ(n.gpus, 0);
  EXPECT_EQ(n.gpu_model, "");
}

TEST(PodEffectiveRequests, InitContainersSidecarsAndOverhead) {
  // The rule of the Kubernetes docs on init containers and sidecars: the
  // effective init request is the largest init container's (plus the
  // sidecars started before it), the pod's the larger of that and the sum of
  // its containers and sidecars, plus the pod overhead.
  Json pod = RequestingPod("n", "Running", "1", "1Gi", nullptr);
  pod["spec"]["containers"].push_back(
      {{"name", "b"},
       {"image", "x"},
       {"resources", {{"limits", {{"cpu", "500m"}, {"memory", "512Mi"}}}}}});
  pod["spec"]["initContainers"] = Json::array(
      {{{"name", "init-big"},
        {"image", "x"},
        {"resources", {{"requests", {{"cpu", "2"}, {"memory", "256Mi"}}}}}},
       {{"name", "sidecar"},
        {"image", "x"},
        {"restartPolicy", "Always"},
        {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "64Mi"}}}}}},
       {{"name", "init-after"},
        {"image", "x"},
        {"resources", {{"requests", {{"cpu", "1900m"}, {"memory", "2Gi"}}}}}}});
  pod["spec"]["overhead"] = {{"cpu", "250m"}, {"memory", "120Mi"}};
  // cpu: containers 1000+500 + sidecar 100 = 1600; init peaks 2000 and
  // 100+1900 = 2000 → 2000, + 250 overhead = 2250.
  // memory: 1024+512+64 = 1600Mi; init peaks 256Mi, 64+2048 = 2112Mi →
  // 2112Mi + 120Mi = 2232Mi.
  EXPECT_EQ(
      PodEffectiveRequests(pod, "nvidia.com/gpu"),
      (PodRequests{
          .gpus = 0, .cpu_millis = 2250, .memory_bytes = int64_t{2232} << 20}));
}

TEST(CompactForeignPod, KeepsWhatTheAllocationNeedsOfOthersPodsOnly) {
  Json pod = RequestingPod("n", "Running", "1", "1Gi", nullptr);
  pod["spec"]["initContainers"] = Json::array(
      {{{"name", "sidecar"},
        {"image", "x"},
        {"restartPolicy", "Always"},
        {"env", Json::array({{{"name", "A"}, {"value", "1"}}})},
        {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "64Mi"}}}}}}});
  pod["spec"]["overhead"] = {{"cpu", "250m"}};
  pod["spec"]["tolerations"] = Json::array({{{"operator", "Exists"}}});
  pod["metadata"]["annotations"] = {{"big", std::string(4096, 'x')}};
  pod["metadata"].erase("labels");
  const PodRequests before = PodEffectiveRequests(pod, "nvidia.com/gpu");
  Json compact = pod;
  CompactForeignPod(compact);
  EXPECT_EQ(PodEffectiveRequests(compact, "nvidia.com/gpu"), before);
  // 1000m + 100m sidecar + 250m overhead.
  EXPECT_EQ(before.cpu_millis, 1350);
  EXPECT_EQ(compact["spec"]["nodeName"], pod["spec"]["nodeName"]);
  EXPECT_EQ(compact["status"], Json({{"phase", "Running"}}));
  EXPECT_FALSE(compact["metadata"].contains("annotations"));
  EXPECT_FALSE(compact["spec"].contains("tolerations"));
  EXPECT_FALSE(compact["spec"]["initContainers"][0].contains("env"));
  EXPECT_EQ(compact["metadata"]["name"], pod["metadata"]["name"]);
  EXPECT_LT(compact.dump().size(), pod.dump().size() / 4);
  // Trainyard's own pods stay whole.
  Json ours = pod;
  ours["metadata"]["labels"] = {{"trainyard.dev/name", "ty-1-1"}};
  Json kept = ours;
  CompactForeignPod(kept);
  EXPECT_EQ(kept, ours);
}

// --- Schema check ------------------------------------------------------------

// Writes the objects BuildJob and BuildService make, and the objects these
// tests read, to $KUBE_MAPPING_OUT for tests/support/kube_schema_check.py,
// which validates them against the strict v1.30 schemas.
TEST(KubeSchema, WriteObjects) {
  const char* out = std::getenv("KUBE_MAPPING_OUT");
  if (out == nullptr || *out == '\0') {
    GTEST_SKIP()
        << "KUBE_MAPPING_OUT not set (kube_mapping_schema_test sets it)";
  }
  const auto write = [&](const std::string& file, const Json& j) {
    std::ofstream f(Cat(out, "/", file));
    f << j.dump(2);
    ASSERT_TRUE(f.good()) << file;
  };
  const KubernetesSettings gke = GkeSettings();
  LaunchRequest r = TwoWorkerSpotRequest();
  write("job-spot.json", *BuildJob(r, gke));
  write("service-spot.json", *BuildService(r, gke, "0f6c6fbe-2b2b-4c3e-9d0e"));
  write("service-plain.json", *BuildService(r, gke));
  r.spec.set_workers(4);
  r.worker_nodes = {"gke-a-1", "gke-a-1", "gke-a-2", "gke-a-2"};
  write("job-spread.json", *BuildJob(r, gke));
  KubernetesSettings other = gke;
  other.checkpoint_volume = {CheckpointVolume::Kind::kNfs, "nfs:/export"};
  r.flavor = "ondemand-h100";
  write("job-nfs.json", *BuildJob(r, other));
  other.checkpoint_volume = {CheckpointVolume::Kind::kHostPath, "/checkpoints"};
  other.node_lost_after = absl::Seconds(45);
  write("job-hostpath.json", *BuildJob(r, other));
  LaunchRequest small;
  small.name = "ty-7-1";
  small.job_id = 7;
  small.attempt = 1;
  small.tenant = "t";
  small.worker_nodes = {"n1"};
  small.spec.set_workers(1);
  small.spec.set_image("busybox");
  write("job-minimal.json", *BuildJob(small, *ParseKubernetesSettings("")));
  // What the tests feed the mapping.
  write("job-read-failed.json", JobObject(2, kBackoffFailed));
  write("pod-read-running.json",
        PodObject(0, "Running", Running("2026-11-28T10:01:00Z")));
  write(
      "pod-read-oom.json",
      PodObject(1, "Failed", Exited(137, "OOMKilled", "2026-11-28T10:30:00Z")));
  Json disrupted =
      PodObject(1, "Failed", Exited(143, "Error", "2026-11-28T10:30:00Z"));
  Disrupt(disrupted, "TerminationByKubelet", "shutdown");
  write("pod-read-disrupted.json", disrupted);
  write("pod-read-waiting.json",
        PodObject(0, "Pending", Waiting("ErrImagePull", "not found")));
  write("node-read-gke.json", GkeNode());
}

}  // namespace
}  // namespace trainyard::dispatcher::kubernetes
