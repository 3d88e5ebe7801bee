// The Kubernetes backend at scale against the Kubernetes API test server
// (tests/fixtures/local_kube.h; docs/kubernetes.md, "Performance"). Two
// measurements:
//
//   --mode=dispatch  N single-pod jobs end to end: submitted to the api
//                    (gRPC, one after another), admitted by the scheduler,
//                    launched by the dispatcher through the Kubernetes
//                    adapter (one Indexed Job each) and RUNNING, i.e. their
//                    pods were created by the Job controller, bound by the
//                    server's scheduler, started by its kubelet, and seen
//                    running through the adapter's watches. The api,
//                    scheduler and dispatcher run in this process over
//                    PostgreSQL. Two rates: jobs_per_s, N / (last RUNNING -
//                    first submit), and dispatch_jobs_per_s, N / (last
//                    RUNNING - all admitted), the dispatcher's part.
//   --mode=watch     the `trainyard dispatcher --backend=kubernetes` process
//                    (TRAINYARD_BIN) over a cluster of --nodes nodes and
//                    --pods pods (not Trainyard's: others' work the
//                    dispatcher counts against its nodes): its resident
//                    memory once it has listed them and reported the nodes,
//                    and its CPU time over --idle_seconds with no changes.
//
// Prints one JSON line and writes it to --output. Numbers are measured, never
// asserted (the smoke test runs a small size).
//
//   kube_dispatch_bench --mode=dispatch [--jobs=1000] [--nodes=125]
//       [--qps=50] [--burst=100] [--output=FILE]
//   kube_dispatch_bench --mode=watch [--nodes=5000] [--pods=50000]
//       [--idle_seconds=30] [--output=FILE]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/field_mask.pb.h"
#include "services/dispatcher/adapters/kubernetes/kube_adapter.h"
#include "services/dispatcher/dispatcher.h"
#include "services/scheduler/scheduler_service.h"
#include "tests/fixtures/local_kube.h"
#include "tests/fixtures/trainyard_process.h"
#include "tests/integration/api_test_harness.h"

ABSL_FLAG(std::string, mode, "dispatch", "dispatch or watch");
ABSL_FLAG(int, jobs, 1000, "dispatch: single-pod jobs (1 GPU each)");
ABSL_FLAG(int, nodes, 0,
          "nodes of 8 GPUs (0: dispatch, enough for the jobs; watch, 5000)");
ABSL_FLAG(int, pods, 50000, "watch: pods of others on the nodes");
ABSL_FLAG(double, qps, 50, "dispatch: the client's --kube_qps");
ABSL_FLAG(int, burst, 100, "dispatch: the client's --kube_burst");
ABSL_FLAG(int, idle_seconds, 30, "watch: how long to measure idle CPU");
ABSL_FLAG(std::string, output, "", "where to write the JSON result");

namespace {

namespace v1 = ::trainyard::v1;
namespace kube = ::trainyard::dispatcher::kubernetes;
using Json = nlohmann::json;
using trainyard::testing::ApiHarness;
using trainyard::testing::LocalKube;

constexpr char kPool[] =
    R"("labels": {"cloud.google.com/gke-nodepool": "ondemand"})";

int Fail(const std::string& what) {
  std::fprintf(stderr, "kube_dispatch_bench: %s\n", what.c_str());
  return 1;
}

int Emit(const std::string& json) {
  std::printf("%s\n", json.c_str());
  const std::string out = absl::GetFlag(FLAGS_output);
  if (!out.empty()) {
    std::ofstream f(out);
    f << json << "\n";
    if (!f) return Fail("cannot write " + out);
  }
  return 0;
}

absl::Status CreateNodes(LocalKube& kube, int count) {
  return kube
      .Admin("POST", "/nodes",
             absl::StrCat(
                 R"({"count": )", count,
                 R"(, "gpus": 8, "gpu_product": "NVIDIA-H100-80GB-HBM3", )",
                 kPool, "}"))
      .status();
}

// The harness's tenant "bench" with a queue of `gpus` GPUs and cluster
// "kubernetes" (pool "ondemand", flavor "gpu").
absl::Status DefineTenantAndCluster(ApiHarness& h, int gpus) {
  if (absl::Status s = h.SeedTenant("bench"); !s.ok()) return s;
  v1::UpdateQueueRequest req;
  v1::Queue* q = req.mutable_queue();
  q->set_name("tenants/bench/queues/default");
  q->set_cohort("pool");
  v1::FlavorQuotas* quota = q->add_quotas();
  quota->set_flavor("gpu");
  v1::ResourceQuota* gpu = quota->add_resources();
  gpu->set_resource(v1::RESOURCE_NAME_GPU);
  gpu->set_nominal(gpus);
  req.mutable_update_mask()->add_paths("quotas");
  v1::Queue out;
  grpc::Status st = h.queues()->UpdateQueue(
      ApiHarness::Context(h.admin_token()).get(), req, &out);
  if (!st.ok()) {
    return absl::InternalError("UpdateQueue: " + st.error_message());
  }
  return h.SeedCluster("kubernetes", v1::BACKEND_KIND_KUBERNETES,
                       {{"ondemand", "gpu"}});
}

int Dispatch() {
  const int jobs = std::max(1, absl::GetFlag(FLAGS_jobs));
  const int nodes = absl::GetFlag(FLAGS_nodes) > 0 ? absl::GetFlag(FLAGS_nodes)
                                                   : (jobs + 7) / 8;
  absl::StatusOr<std::unique_ptr<LocalKube>> kube = LocalKube::Start();
  if (!kube.ok()) return Fail(kube.status().ToString());
  if (absl::Status s = CreateNodes(**kube, nodes); !s.ok()) {
    return Fail(s.ToString());
  }
  // The pods run until deleted.
  if (auto s = (*kube)->Admin(
          "POST", "/scripts",
          R"({"selector": "trainyard.dev/tenant=bench", "namespace": "trainyard",
              "run_seconds": null})");
      !s.ok()) {
    return Fail(s.status().ToString());
  }
  absl::StatusOr<std::unique_ptr<ApiHarness>> harness = ApiHarness::Start();
  if (!harness.ok()) return Fail(harness.status().ToString());
  if (absl::Status s = DefineTenantAndCluster(**harness, nodes * 8); !s.ok()) {
    return Fail(s.ToString());
  }

  kube::KubernetesAdapterOptions o;
  absl::StatusOr<kube::KubeConfig> config =
      kube::LoadKubeconfig((*kube)->kubeconfig_path());
  if (!config.ok()) return Fail(config.status().ToString());
  o.config = *config;
  o.client.cluster = "kubernetes";
  o.client.qps = absl::GetFlag(FLAGS_qps);
  o.client.burst = absl::GetFlag(FLAGS_burst);
  o.settings.checkpoint_volume = {kube::CheckpointVolume::Kind::kHostPath,
                                  (*kube)->dir()};
  o.settings.checkpoint_mount_path = (*kube)->dir();
  o.settings.gpu_models = {{"NVIDIA-H100-80GB-HBM3", "H100"}};
  o.settings.pool_flavors = {{"ondemand", "gpu"}};
  absl::StatusOr<std::unique_ptr<kube::KubernetesAdapter>> adapter =
      kube::KubernetesAdapter::Create(std::move(o));
  if (!adapter.ok()) return Fail(adapter.status().ToString());
  trainyard::scheduler::SchedulerOptions so;
  so.postgres_url = (*harness)->database_url();
  so.redis_addr = "";
  auto scheduler = trainyard::scheduler::SchedulerService::Create(so);
  if (!scheduler.ok()) return Fail(scheduler.status().ToString());
  auto dispatcher = trainyard::dispatcher::Dispatcher::Create(
      {.postgres_url = (*harness)->database_url(), .cluster = "kubernetes"},
      adapter->get());
  if (!dispatcher.ok()) return Fail(dispatcher.status().ToString());
  if (auto p = (*dispatcher)->RunPass(); !p.ok()) {  // the nodes
    return Fail(p.status().ToString());
  } else if (p->nodes_reported != nodes) {
    return Fail(
        absl::StrCat("reported ", p->nodes_reported, " nodes of ", nodes));
  }

  const std::string token =
      (*harness)->Token("users/bench", v1::ROLE_TENANT_ADMIN, "bench");
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < jobs; ++i) {
    v1::SubmitJobRequest req =
        trainyard::testing::MinimalSubmit("bench", absl::StrCat("j", i));
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_image("trainer:1");
    spec->mutable_resources()->set_gpus(1);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{1} << 30);
    if ((*harness)->SubmitJob(token, req) <= 0) return Fail("submit failed");
  }
  const absl::Duration submit_time = absl::Now() - t0;
  int admitted = 0, launched = 0, running = 0, cycles = 0, passes = 0;
  absl::Duration scheduler_time, dispatcher_time;
  absl::Time all_launched = absl::InfinitePast();
  absl::Time all_admitted = absl::InfinitePast();
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  while (running < jobs) {
    if (absl::Now() > deadline) {
      return Fail(absl::StrCat("after 10 minutes: ", admitted, " admitted, ",
                               launched, " launched, ", running, " running"));
    }
    if (admitted < jobs) {
      const absl::Time c0 = absl::Now();
      auto c = (*scheduler)->RunCycle();
      scheduler_time += absl::Now() - c0;
      if (!c.ok()) return Fail(c.status().ToString());
      admitted += c->admitted;
      ++cycles;
      if (admitted >= jobs) all_admitted = absl::Now();
    }
    const absl::Time p0 = absl::Now();
    auto p = (*dispatcher)->RunPass();
    dispatcher_time += absl::Now() - p0;
    if (!p.ok()) return Fail(p.status().ToString());
    ++passes;
    launched += p->launched;
    running += p->started;
    if (launched == jobs && all_launched == absl::InfinitePast()) {
      all_launched = absl::Now();
    }
    if (p->launched == 0 && p->started == 0) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  const absl::Duration total = absl::Now() - t0;
  return Emit(absl::StrFormat(
      "{\"mode\": \"dispatch\", \"jobs\": %d, \"nodes\": %d, \"qps\": %g, "
      "\"burst\": %d, \"submit_seconds\": %.3f, "
      "\"launched_seconds\": %.3f, \"running_seconds\": %.3f, "
      "\"jobs_per_s\": %.1f, \"admitted_to_running_seconds\": %.3f, "
      "\"dispatch_jobs_per_s\": %.1f, \"scheduler_cycles\": %d, "
      "\"scheduler_seconds\": %.3f, \"dispatcher_passes\": %d, "
      "\"dispatcher_seconds\": %.3f}",
      jobs, nodes, absl::GetFlag(FLAGS_qps), absl::GetFlag(FLAGS_burst),
      absl::ToDoubleSeconds(submit_time),
      absl::ToDoubleSeconds(all_launched - t0), absl::ToDoubleSeconds(total),
      jobs / absl::ToDoubleSeconds(total),
      absl::ToDoubleSeconds(t0 + total - all_admitted),
      jobs / absl::ToDoubleSeconds(t0 + total - all_admitted), cycles,
      absl::ToDoubleSeconds(scheduler_time), passes,
      absl::ToDoubleSeconds(dispatcher_time)));
}

// VmRSS and VmHWM of `pid` in MiB.
std::pair<double, double> Memory(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  double rss = 0, hwm = 0;
  for (std::string line; std::getline(f, line);) {
    for (auto [key, out] : {std::pair{"VmRSS:", &rss}, {"VmHWM:", &hwm}}) {
      if (line.rfind(key, 0) != 0) continue;
      std::vector<std::string> parts =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      int64_t kib = 0;
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) {
        *out = kib / 1024.0;
      }
    }
  }
  return {rss, hwm};
}

// User + system CPU seconds of `pid`.
double CpuSeconds(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(f)),
                   std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
  int64_t user = 0, sys = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &user) ||
      !absl::SimpleAtoi(fields[12], &sys)) {
    return 0;
  }
  return static_cast<double>(user + sys) / sysconf(_SC_CLK_TCK);
}

int Watch() {
  const int nodes =
      absl::GetFlag(FLAGS_nodes) > 0 ? absl::GetFlag(FLAGS_nodes) : 5000;
  const int pods = std::max(0, absl::GetFlag(FLAGS_pods));
  LocalKube::Options ko;
  ko.extra_args = {"--no-events"};
  absl::StatusOr<std::unique_ptr<LocalKube>> kube = LocalKube::Start(ko);
  if (!kube.ok()) return Fail(kube.status().ToString());
  if (absl::Status s = CreateNodes(**kube, nodes); !s.ok()) {
    return Fail(s.ToString());
  }
  // Others' work: Indexed Jobs of up to 1,000 pods in namespace "default",
  // one CPU each, running until deleted.
  const absl::Time t0 = absl::Now();
  for (int made = 0, j = 0; made < pods; ++j) {
    const int n = std::min(1000, pods - made);
    Json job = {
        {"apiVersion", "batch/v1"},
        {"kind", "Job"},
        {"metadata", {{"name", absl::StrCat("others-", j)}}},
        {"spec",
         {{"completionMode", "Indexed"},
          {"completions", n},
          {"parallelism", n},
          {"backoffLimit", 0},
          {"template",
           {{"spec",
             {{"restartPolicy", "Never"},
              {"containers",
               Json::array({{{"name", "c"},
                             {"image", "other:1"},
                             {"resources",
                              {{"requests",
                                {{"cpu", "1"}, {"memory", "1Gi"}}}}}}})}}}}}}}};
    absl::StatusOr<LocalKube::Response> r = (*kube)->Request(
        "POST", "/apis/batch/v1/namespaces/default/jobs", job.dump());
    if (!r.ok()) return Fail(r.status().ToString());
    if (r->code != 201) return Fail(absl::StrCat(r->code, ": ", r->body));
    made += n;
  }
  for (;;) {
    absl::StatusOr<LocalKube::Response> r = (*kube)->Request(
        "GET", "/api/v1/pods?limit=1&fieldSelector=status.phase%3DRunning");
    if (!r.ok()) return Fail(r.status().ToString());
    Json body = Json::parse(r->body, nullptr, false);
    const int64_t running =
        body.is_object()
            ? body["metadata"].value("remainingItemCount", int64_t{0}) +
                  static_cast<int64_t>(body["items"].size())
            : 0;
    if (running >= pods) break;
    if (absl::Now() - t0 > absl::Minutes(20)) {
      return Fail(absl::StrCat("only ", running, " of ", pods,
                               " pods running after 20 minutes"));
    }
    absl::SleepFor(absl::Seconds(2));
  }
  const absl::Duration setup = absl::Now() - t0;

  absl::StatusOr<std::unique_ptr<ApiHarness>> harness = ApiHarness::Start();
  if (!harness.ok()) return Fail(harness.status().ToString());
  if (absl::Status s = DefineTenantAndCluster(**harness, 64); !s.ok()) {
    return Fail(s.ToString());
  }
  const std::string settings = (*kube)->dir() + "/settings.conf";
  {
    std::ofstream f(settings);
    f << "namespace = trainyard\n"
         "pool_flavor = ondemand:gpu\n"
         "gpu_model_map = NVIDIA-H100-80GB-HBM3=H100\n"
         "checkpoint_volume = hostPath:"
      << (*kube)->dir()
      << "\n"
         "checkpoint_mount_path = "
      << (*kube)->dir() << "\n";
  }
  trainyard::testing::TrainyardService dispatcher(
      "dispatcher",
      {trainyard::testing::TrainyardBinary(), "dispatcher",
       "--postgres_url=" + (*harness)->database_url(),
       "--redis_addr=", "--http_listen=", "--log_level=warning",
       "--backend=kubernetes", "--kubeconfig=" + (*kube)->kubeconfig_path(),
       "--kube_settings=" + settings},
      (*kube)->dir() + "/dispatcher.log");
  const absl::Time d0 = absl::Now();
  if (absl::Status s = dispatcher.Start(); !s.ok()) return Fail(s.ToString());
  // Listed and reported: the api lists the cluster's nodes as the
  // dispatcher reported them.
  absl::Duration sync;
  for (;;) {
    if (auto died = dispatcher.Died(); died.has_value()) return Fail(*died);
    int listed = 0;
    std::string page;
    grpc::Status st;
    do {
      v1::ListNodesRequest req;
      req.set_parent("clusters/kubernetes");
      req.set_page_size(1000);
      req.set_page_token(page);
      v1::ListNodesResponse resp;
      st = (*harness)->clusters()->ListNodes(
          ApiHarness::Context((*harness)->admin_token()).get(), req, &resp);
      listed += resp.nodes_size();
      page = resp.next_page_token();
    } while (st.ok() && !page.empty());
    if (st.ok() && listed >= nodes) {
      sync = absl::Now() - d0;
      break;
    }
    if (absl::Now() - d0 > absl::Minutes(5)) {
      return Fail("the dispatcher did not report the nodes in 5 minutes");
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  absl::SleepFor(absl::Seconds(5));  // settle
  const auto [rss_synced, hwm_synced] = Memory(dispatcher.pid());
  const int idle = std::max(1, absl::GetFlag(FLAGS_idle_seconds));
  const double c0 = CpuSeconds(dispatcher.pid());
  absl::SleepFor(absl::Seconds(idle));
  const double cpu = CpuSeconds(dispatcher.pid()) - c0;
  const auto [rss, hwm] = Memory(dispatcher.pid());
  dispatcher.Kill();
  return Emit(absl::StrFormat(
      "{\"mode\": \"watch\", \"nodes\": %d, \"pods\": %d, "
      "\"cluster_setup_seconds\": %.1f, \"dispatcher_sync_seconds\": %.1f, "
      "\"rss_mib_after_sync\": %.0f, \"rss_mib\": %.0f, \"peak_rss_mib\": "
      "%.0f, \"idle_seconds\": %d, \"idle_cpu_seconds\": %.2f, "
      "\"idle_cpu_percent_of_a_core\": %.2f}",
      nodes, pods, absl::ToDoubleSeconds(setup), absl::ToDoubleSeconds(sync),
      rss_synced, rss, std::max(hwm, hwm_synced), idle, cpu,
      100.0 * cpu / idle));
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string why;
  if (!LocalKube::Available(&why)) {
    std::fprintf(stderr, "kube_dispatch_bench: skipped: %s\n", why.c_str());
    return 77;  // CTest SKIP_RETURN_CODE
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "dispatch") return Dispatch();
  if (mode == "watch") return Watch();
  return Fail("--mode: dispatch or watch, not " + mode);
}
