// The dispatcher kill -9 chaos of the process-level tests
// (slurm_process_test, kube_process_test), over a ProcessStack whose api and
// scheduler run and whose dispatcher is added but not started:
//
//   - the dispatcher starts with its fault-injection point
//     TRAINYARD_FAULT_KILL_AFTER_LAUNCHES=1 (docs/dispatcher.md, "Crash
//     safety"): it kills itself -9 right after its first launch the backend
//     accepted, before it records anything of that launch;
//   - a submitter thread submits the jobs in bursts of 1-`max_burst` every
//     0.2-1.2 s (retrying UNAVAILABLE and DEADLINE_EXCEEDED), so that the
//     dispatcher keeps launching while it is killed;
//   - for `chaos` (and, with `chaos_until_min_kills`, until `min_kills`
//     kills), seeded: the dispatcher is killed -9 at a random moment, the
//     moment a job is DISPATCHING, or by its fault point (a third of the
//     restarts have it, N = 1-3), then restarted 0-500 ms later. After every
//     kill: the attempts DISPATCHING in PostgreSQL whose backend job exists
//     (launched, not recorded) or not (claimed, not launched yet); after a
//     fault kill, the attempt the dying dispatcher named in its log is
//     DISPATCHING and on the backend;
//   - then, with the dispatcher left alone, every job ends within
//     `final_limit`, exactly once (one unbroken event chain), SUCCEEDED.
//
// The test then checks the backend's end state itself and calls
// ExpectDispatcherChaosCounters, which prints the counters and expects at
// least `min_kills` kills, a fault point that fired, and a kill that left an
// attempt launched but unrecorded.
//
//   DispatcherChaos chaos;  // chaos.start: now
//   ... the backend ...
//   ASSERT_NO_FATAL_FAILURE(SetUpDispatcherChaos(
//       &stack_, cluster_file, {"--backend=..."}, &services, &options));
//   AddChaosRequests(job_count, memory_bytes, rng, add_command, &options);
//   ASSERT_NO_FATAL_FAILURE(
//       RunDispatcherChaos(&stack_, services, options, rng, &chaos));
#ifndef TRAINYARD_TESTS_INTEGRATION_DISPATCHER_CHAOS_H_
#define TRAINYARD_TESTS_INTEGRATION_DISPATCHER_CHAOS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/fixtures/trainyard_process.h"
#include "tests/integration/process_stack.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::testing {

struct DispatcherChaosServices {
  TrainyardService* api = nullptr;
  TrainyardService* scheduler = nullptr;
  // Added to the stack, not started.
  TrainyardService* dispatcher = nullptr;
};

struct DispatcherChaosOptions {
  // For the log line: "[<label> crash seed <seed>]"; the submitter's bursts
  // are seeded by `seed` too.
  std::string label;
  uint64_t seed = 1;
  // The jobs, submitted in this order with `token`.
  std::vector<v1::SubmitJobRequest> requests;
  std::string token;
  int max_burst = 6;

  absl::Duration chaos = absl::Seconds(30);
  int min_kills = 8;
  // Whether the chaos goes on past `chaos` until `min_kills` kills (a
  // fault-armed dispatcher that finds no work waits 5 s for its launch
  // before it is killed).
  bool chaos_until_min_kills = false;
  // How long every job may take to end after the chaos, polled every
  // `final_poll`.
  absl::Duration final_limit = absl::Seconds(120);
  absl::Duration final_poll = absl::Milliseconds(500);

  // What the backend's job names have before "ty-<job>-<attempt>".
  std::string name_prefix;
  // The job names (attempts) the backend holds now, by full name; nullopt
  // (with a test failure saying why) when it could not be asked.
  std::function<std::optional<std::set<std::string>>()> backend_jobs;
  // For messages: "is not <on_backend>" ("in Slurm"), "<launched> but
  // unrecorded" ("submitted to Slurm"), "claimed but not <unlaunched>"
  // ("submitted").
  std::string on_backend;
  std::string launched;
  std::string unlaunched;
};

// What the chaos did and what every job ended as.
struct DispatcherChaos {
  int kills = 0;
  // Kills the moment a job was DISPATCHING.
  int targeted = 0;
  // Dispatchers started with the fault point, and how many of them fired.
  int injected = 0;
  int fired = 0;
  // Attempts left DISPATCHING by a kill, summed over the kills: with their
  // backend job, and without.
  int launched_unrecorded = 0;
  int claimed_unlaunched = 0;
  // When the test started (set by the caller, before it set up the stack).
  absl::Time start = absl::Now();
  // From `start` to the end of the chaos.
  absl::Duration chaos_took;
  JobHistoryCheck histories;
  // ProcessStack::StateHistogram(histories).
  std::string histogram;
};

// Adds `trainyard api` and `trainyard scheduler --schedule_interval=200ms`
// to the stack and starts them, applies the quick start's tenant
// (deploy/local/demo-tenant.textproto) and `cluster_file`, sets
// options->token to a member of tenant demo's; adds `trainyard dispatcher
// --dispatch_interval=100ms` with `dispatcher_flags`, not started. Fatal
// failures: ASSERT_NO_FATAL_FAILURE.
void SetUpDispatcherChaos(ProcessStack* stack, const std::string& cluster_file,
                          const std::vector<std::string>& dispatcher_flags,
                          DispatcherChaosServices* services,
                          DispatcherChaosOptions* options);

// options->requests: `count` jobs of tenant demo's default project and
// queue, client request ids "<label>-crash-<seed>-<i>", each 1 worker of 1
// GPU (every sixth, drawn from `rng`, a 2-worker gang), 1 CPU,
// `memory_bytes`, spot allowed, its command added by `command` (which may
// draw from `rng` too).
void AddChaosRequests(int count, int64_t memory_bytes, std::mt19937_64& rng,
                      const std::function<void(v1::JobSpec*)>& command,
                      DispatcherChaosOptions* options);

// The chaos (header comment); fatal failures: ASSERT_NO_FATAL_FAILURE.
void RunDispatcherChaos(ProcessStack* stack,
                        const DispatcherChaosServices& services,
                        const DispatcherChaosOptions& options,
                        std::mt19937_64& rng, DispatcherChaos* chaos);

// Prints the counters (with `backend_jobs`: "Slurm jobs 48") and expects at
// least `min_kills` kills, a fault point that fired, and a kill that left
// an attempt launched but unrecorded.
void ExpectDispatcherChaosCounters(const DispatcherChaosOptions& options,
                                   const DispatcherChaos& chaos,
                                   const std::string& backend_jobs);

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_INTEGRATION_DISPATCHER_CHAOS_H_
