// Dispatch throughput into a real Slurm (docs/slurm.md), on one private
// cluster (tests/fixtures/local_slurm.h), three ways, N jobs each:
//   dispatcher  admitted → accepted by slurmctld: N jobs admitted by the
//               scheduler (api + PostgreSQL), then one dispatcher pass claims
//               each (ADMITTED → DISPATCHING, one transaction) and launches it
//               through the Slurm adapter (one POST job/submit each);
//   adapter     the Slurm adapter's Launch alone, N in a row;
//   sbatch      `sbatch` in a shell loop, the same job shape.
// The partition is DOWN while measuring, so jobs are accepted and queued but
// never start: only the submit path is timed. Prints one JSON line and writes
// it to --output. Numbers are measured, never asserted.
//
//   slurm_dispatch_bench [--jobs=64]
//   [--output=perf-results/slurm_dispatch.json]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/slurm/slurm_adapter.h"
#include "services/dispatcher/adapters/slurm/slurm_settings.h"
#include "services/dispatcher/dispatcher.h"
#include "services/scheduler/scheduler_service.h"
#include "tests/fixtures/local_slurm.h"
#include "tests/integration/api_test_harness.h"

ABSL_FLAG(int, jobs, 64,
          "jobs per measurement (at most 64: the harness queue's GPU quota)");
ABSL_FLAG(std::string, output, "perf-results/slurm_dispatch.json",
          "where to write the JSON result (empty: stdout only)");

namespace {

namespace v1 = ::trainyard::v1;
using trainyard::dispatcher::BackendJobName;
using trainyard::dispatcher::LaunchRequest;
using trainyard::dispatcher::slurm::SlurmAdapter;
using trainyard::testing::ApiHarness;
using trainyard::testing::LocalSlurm;

int Fail(const std::string& what) {
  std::fprintf(stderr, "slurm_dispatch_bench: %s\n", what.c_str());
  return 1;
}

absl::StatusOr<std::unique_ptr<SlurmAdapter>> NewAdapter(
    LocalSlurm& cluster, const std::string& prefix) {
  absl::StatusOr<trainyard::dispatcher::slurm::SlurmSettings> settings =
      trainyard::dispatcher::slurm::LoadSlurmSettings(cluster.adapter_config());
  if (!settings.ok()) return settings.status();
  settings->working_dir = cluster.work_dir();
  settings->job_name_prefix = prefix;
  return SlurmAdapter::Create(*settings);
}

// The harness's tenant, with cluster "slurm" (pool "ondemand", flavor "gpu")
// and its sim cluster reported down.
absl::Status DefineCluster(ApiHarness& h) {
  if (absl::Status s = h.SeedTenant("bench"); !s.ok()) return s;
  return h.SeedCluster("slurm", trainyard::v1::BACKEND_KIND_SLURM,
                       {{"ondemand", "gpu"}});
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int jobs = std::clamp(absl::GetFlag(FLAGS_jobs), 1, 64);
  std::string why;
  if (!LocalSlurm::Available(&why)) {
    std::fprintf(stderr, "slurm_dispatch_bench: skipped: %s\n", why.c_str());
    return 77;  // CTest SKIP_RETURN_CODE
  }
  // Two on-demand nodes with room for 64 one-GPU jobs.
  absl::StatusOr<std::unique_ptr<LocalSlurm>> slurm =
      LocalSlurm::Start({.ondemand_nodes = 2,
                         .spot_nodes = 0,
                         .gpus_per_node = 32,
                         .cpus_per_node = 32,
                         .memory_mb = 16000});
  if (!slurm.ok()) return Fail(slurm.status().ToString());
  LocalSlurm& cluster = **slurm;
  auto partition = [&](const char* state) {
    return cluster.Command({"scontrol", "update", "partitionname=ondemand",
                            absl::StrCat("state=", state)});
  };
  auto cancel_all = [&] {
    (void)cluster.Command({"scancel", "--quiet", "--user=root"});
  };

  // 1. admitted → accepted, through the scheduler and the dispatcher.
  absl::StatusOr<std::unique_ptr<ApiHarness>> harness = ApiHarness::Start();
  if (!harness.ok()) return Fail(harness.status().ToString());
  if (absl::Status s = DefineCluster(**harness); !s.ok()) {
    return Fail(s.ToString());
  }
  absl::StatusOr<std::unique_ptr<SlurmAdapter>> dispatch_adapter =
      NewAdapter(cluster, "d-");
  if (!dispatch_adapter.ok()) return Fail(dispatch_adapter.status().ToString());
  trainyard::scheduler::SchedulerOptions so;
  so.postgres_url = (*harness)->database_url();
  so.redis_addr = "";
  auto scheduler = trainyard::scheduler::SchedulerService::Create(so);
  if (!scheduler.ok()) return Fail(scheduler.status().ToString());
  auto dispatcher = trainyard::dispatcher::Dispatcher::Create(
      {.postgres_url = (*harness)->database_url(), .cluster = "slurm"},
      dispatch_adapter->get());
  if (!dispatcher.ok()) return Fail(dispatcher.status().ToString());
  if (auto p = (*dispatcher)->RunPass(); !p.ok()) {  // inventory
    return Fail(p.status().ToString());
  }
  const std::string token =
      (*harness)->Token("users/bench", v1::ROLE_TENANT_ADMIN, "bench");
  for (int i = 0; i < jobs; ++i) {
    v1::SubmitJobRequest req =
        trainyard::testing::MinimalSubmit("bench", absl::StrCat("j", i));
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->mutable_resources()->set_gpus(1);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(int64_t{10} << 20);
    spec->clear_command();
    spec->add_command("true");
    if ((*harness)->SubmitJob(token, req) <= 0) return Fail("submit failed");
  }
  if (auto s = partition("DOWN"); !s.ok()) return Fail(s.status().ToString());
  int admitted = 0;
  for (int cycle = 0; cycle < 20 && admitted < jobs; ++cycle) {
    auto c = (*scheduler)->RunCycle();
    if (!c.ok()) return Fail(c.status().ToString());
    admitted += c->admitted;
  }
  const absl::Time d0 = absl::Now();
  auto pass = (*dispatcher)->RunPass();
  const absl::Duration dispatch_time = absl::Now() - d0;
  if (!pass.ok()) return Fail(pass.status().ToString());
  const int launched = pass->launched;
  cancel_all();

  // 2. The adapter alone.
  absl::StatusOr<std::unique_ptr<SlurmAdapter>> adapter =
      NewAdapter(cluster, "a-");
  if (!adapter.ok()) return Fail(adapter.status().ToString());
  if (auto s = (*adapter)->Inventory(); !s.ok()) {
    return Fail(s.status().ToString());
  }
  // Warm up: the first call lists every job once (look before create).
  if (auto s = (*adapter)->List(); !s.ok()) return Fail(s.status().ToString());
  const absl::Time a0 = absl::Now();
  for (int i = 1; i <= jobs; ++i) {
    LaunchRequest r;
    r.job_id = i;
    r.attempt = 1;
    r.name = BackendJobName(i, 1);
    r.tenant = "bench";
    r.spec.set_workers(1);
    r.spec.mutable_resources()->set_gpus(1);
    r.spec.add_command("true");
    r.worker_nodes = {i % 2 == 0 ? "gpu1" : "gpu2"};
    r.flavor = "gpu";
    absl::StatusOr<trainyard::dispatcher::AttemptStatus> s =
        (*adapter)->Launch(r);
    if (!s.ok()) return Fail(s.status().ToString());
  }
  const absl::Duration adapter_time = absl::Now() - a0;
  cancel_all();

  // 3. sbatch in a shell loop, the same job shape.
  const std::string script = absl::StrCat(
      "for i in $(seq 1 ", jobs,
      "); do sbatch --quiet -p ondemand -J sb-$i --gres=gpu:1 "
      "--constraint=gpu$((i % 2 + 1)) -D ",
      cluster.work_dir(), " -o /dev/null --wrap true || exit 1; done");
  const absl::Time b0 = absl::Now();
  absl::StatusOr<std::string> out =
      cluster.Command({"/bin/bash", "-c", script});
  const absl::Duration sbatch_time = absl::Now() - b0;
  if (!out.ok()) return Fail(out.status().ToString());
  cancel_all();
  (void)partition("UP");

  const double dispatcher_rate =
      launched / absl::ToDoubleSeconds(dispatch_time);
  const double adapter_rate = jobs / absl::ToDoubleSeconds(adapter_time);
  const double sbatch_rate = jobs / absl::ToDoubleSeconds(sbatch_time);
  const std::string json = absl::StrFormat(
      "{\"jobs\": %d, \"admitted\": %d, \"dispatcher_launched\": %d, "
      "\"dispatcher_jobs_per_s\": %.1f, \"adapter_jobs_per_s\": %.1f, "
      "\"sbatch_jobs_per_s\": %.1f, \"dispatcher_vs_sbatch\": %.2f, "
      "\"adapter_vs_sbatch\": %.2f, \"dispatcher_seconds\": %.3f, "
      "\"adapter_seconds\": %.3f, \"sbatch_seconds\": %.3f, \"cpus\": %ld}",
      jobs, admitted, launched, dispatcher_rate, adapter_rate, sbatch_rate,
      dispatcher_rate / sbatch_rate, adapter_rate / sbatch_rate,
      absl::ToDoubleSeconds(dispatch_time), absl::ToDoubleSeconds(adapter_time),
      absl::ToDoubleSeconds(sbatch_time), sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%s\n", json.c_str());
  const std::string path = absl::GetFlag(FLAGS_output);
  if (!path.empty()) {
    std::ofstream f(path);
    if (!f) return Fail(absl::StrCat("cannot write ", path));
    f << json << "\n";
  }
  if (launched != jobs) {
    return Fail(absl::StrCat("the dispatcher launched ", launched, " of ", jobs,
                             " jobs (admitted ", admitted, ")"));
  }
  return 0;
}
