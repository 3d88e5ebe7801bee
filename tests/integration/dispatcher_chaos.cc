#include "tests/integration/dispatcher_chaos.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/fixtures/subprocess.h"
#include "trainyard/v1/job.grpc.pb.h"

namespace trainyard::testing {
namespace {

namespace fx = ::trainyard::testing::internal;

std::vector<std::string> FaultEnv(int n) {
  return {absl::StrCat("TRAINYARD_FAULT_KILL_AFTER_LAUNCHES=", n)};
}

// Submits `options.requests` in bursts of 1-max_burst every 0.2-1.2 s until
// all are in or `stop`; a call that fails but with UNAVAILABLE or
// DEADLINE_EXCEEDED (the api busy, 20 tries) stops it with `error`.
class Submitter {
 public:
  Submitter(const ProcessStack& stack, const DispatcherChaosOptions& options)
      : jobs_(stack.Jobs()), thread_([this, &options] { Run(options); }) {}
  Submitter(const Submitter&) = delete;
  Submitter& operator=(const Submitter&) = delete;
  ~Submitter() { Join(); }

  void Join() {
    stop = true;
    if (thread_.joinable()) thread_.join();
  }

  std::atomic<int> submitted{0};
  std::atomic<bool> stop{false};
  // Set before the thread stops; read after Join.
  std::string error;

 private:
  void Run(const DispatcherChaosOptions& options) {
    const int job_count = static_cast<int>(options.requests.size());
    std::mt19937_64 r(options.seed * 7 + 1);
    int i = 0;
    while (i < job_count && !stop) {
      const int burst = 1 + r() % options.max_burst;
      for (int k = 0; k < burst && i < job_count && !stop; ++k, ++i) {
        for (int tries = 0;; ++tries) {
          v1::SubmitJobResponse response;
          grpc::Status s =
              jobs_->Submit(ProcessStack::Context(options.token).get(),
                            options.requests[i], &response);
          if (s.ok()) break;
          if (tries >= 20 ||
              (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
               s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED)) {
            error = absl::StrCat("Submit ", i, ": ", s.error_code(), " ",
                                 s.error_message());
            stop = true;
            return;
          }
          absl::SleepFor(absl::Milliseconds(100));
        }
        submitted = i + 1;
      }
      absl::SleepFor(absl::Milliseconds(200 + r() % 1000));
    }
  }

  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::thread thread_;  // Last: started once the rest is.
};

class Chaos {
 public:
  Chaos(ProcessStack* stack, const DispatcherChaosServices& services,
        const DispatcherChaosOptions& options, DispatcherChaos* chaos)
      : stack_(stack), s_(services), options_(options), chaos_(chaos) {}

  // Attempts DISPATCHING in PostgreSQL, by their backend job names.
  std::vector<std::string> Dispatching() const {
    std::vector<std::string> names = stack_->Dispatching();
    for (std::string& name : names) name = options_.name_prefix + name;
    return names;
  }

  // Whether every job was submitted and ended.
  bool AllEnded(const Submitter& submitter) const {
    const int job_count = static_cast<int>(options_.requests.size());
    if (submitter.submitted.load() != job_count) return false;
    const JobHistoryCheck now = CheckJobHistories(stack_->db_url());
    return static_cast<int>(now.jobs.size()) == job_count &&
           std::all_of(now.jobs.begin(), now.jobs.end(),
                       [](const auto& e) { return Terminal(e.second.first); });
  }

  // The dispatcher with the fault point armed: waits until it killed itself
  // (true), or up to `limit` when it launched too little meanwhile (false;
  // the caller kills it then). Anything but SIGKILL is a crash of its own.
  bool AwaitFault(absl::Duration limit) {
    ++chaos_->injected;
    for (const absl::Time until = absl::Now() + limit; absl::Now() < until;
         absl::SleepFor(absl::Milliseconds(5))) {
      std::optional<std::string> died = s_.dispatcher->Died();
      if (!died.has_value()) continue;
      EXPECT_TRUE(absl::StrContains(*died, "killed by signal 9")) << *died;
      ++chaos_->fired;
      return true;
    }
    return false;
  }

  // kill -9 (a no-op when the fault point killed it), then what it left:
  // jobs DISPATCHING whose backend job exists (launched, not recorded) or
  // not (claimed, not launched yet). A `fault` kill came right after the
  // backend accepted the attempt the dispatcher names in its log (its last
  // words), before it recorded anything of it: that attempt is DISPATCHING
  // in PostgreSQL and on the backend.
  void KillAndSample(bool fault) {
    s_.dispatcher->Kill();
    const int kills = ++chaos_->kills;
    const std::vector<std::string> names = Dispatching();
    std::optional<std::set<std::string>> held = options_.backend_jobs();
    ASSERT_TRUE(held.has_value())
        << "kill " << kills << ": the backend's jobs could not be listed";
    for (const std::string& name : names) {
      if (held->contains(name)) {
        ++chaos_->launched_unrecorded;
      } else {
        ++chaos_->claimed_unlaunched;
      }
    }
    if (fault) {
      const std::string attempt =
          ProcessStack::FaultInjectedAttempt(s_.dispatcher->log());
      ASSERT_FALSE(attempt.empty()) << "kill " << kills << ": the fault point "
                                    << "fired without naming its attempt";
      const std::string name = options_.name_prefix + attempt;
      EXPECT_TRUE(std::find(names.begin(), names.end(), name) != names.end())
          << "kill " << kills << ": " << name << " is not DISPATCHING";
      EXPECT_TRUE(held->contains(name)) << "kill " << kills << ": " << name
                                        << " is not " << options_.on_backend;
    }
  }

  // The api and scheduler (and the dispatcher unless `armed`: AwaitFault
  // looks) still run.
  void ExpectAlive(bool armed) const {
    for (TrainyardService* s : {s_.api, s_.scheduler, s_.dispatcher}) {
      if (s == s_.dispatcher && armed) continue;
      std::optional<std::string> died = s->Died();
      ASSERT_FALSE(died.has_value()) << *died;
    }
  }

  // Kill -9 the dispatcher (or let the fault point kill it), look at what
  // it left, restart it 0-500 ms later; for `chaos` (and `min_kills` kills
  // where asked) or until the submitter stopped on an error.
  // The dispatcher runs with the fault point armed.
  void Run(std::mt19937_64& rng, const Submitter& submitter) {
    bool armed = true;
    const absl::Time chaos_end = absl::Now() + options_.chaos;
    auto more = [&] {
      return absl::Now() < chaos_end || (options_.chaos_until_min_kills &&
                                         chaos_->kills < options_.min_kills);
    };
    while (more() && !submitter.stop) {
      ASSERT_NO_FATAL_FAILURE(ExpectAlive(armed));
      bool fault = false;
      if (armed) {
        // The first dispatcher's launches come for sure (jobs arrive from
        // the start): as long as it takes. A restarted one may find no work
        // left.
        fault = AwaitFault(chaos_->kills == 0 ? absl::Seconds(60)
                                              : absl::Seconds(5));
      } else if (rng() % 2 == 0) {
        // The moment a job is DISPATCHING (the dispatcher claimed it and is
        // launching), within 3 s.
        ++chaos_->targeted;
        for (absl::Time until = absl::Now() + absl::Seconds(3);
             absl::Now() < until && Dispatching().empty();) {
          absl::SleepFor(absl::Milliseconds(5));
        }
      } else {
        absl::SleepFor(absl::Milliseconds(100 + rng() % 1400));
      }
      ASSERT_NO_FATAL_FAILURE(KillAndSample(fault));
      absl::SleepFor(absl::Milliseconds(rng() % 500));
      armed = rng() % 3 == 0;
      ASSERT_TRUE(s_.dispatcher
                      ->Start(armed ? FaultEnv(1 + static_cast<int>(rng() % 3))
                                    : std::vector<std::string>{})
                      .ok());
      // Let it start (connect, take the cluster's lock, list the backend)
      // now and then, so that it does work between kills.
      if (rng() % 3 == 0) absl::SleepFor(absl::Seconds(1));
    }
    if (armed && !submitter.stop) {
      // The chaos ended with the fault point armed: the last kill, then a
      // dispatcher without it.
      ASSERT_NO_FATAL_FAILURE(KillAndSample(AwaitFault(absl::Seconds(5))));
      ASSERT_TRUE(s_.dispatcher->Start().ok());
    }
  }

  // Then every job ends, with the dispatcher left alone: whether they did
  // within `final_limit`.
  void AwaitAllEnded(const Submitter& submitter, bool* done) const {
    *done = false;
    for (const absl::Time deadline = absl::Now() + options_.final_limit;
         absl::Now() < deadline && !submitter.stop;
         absl::SleepFor(options_.final_poll)) {
      ASSERT_NO_FATAL_FAILURE(ExpectAlive(false));
      if (AllEnded(submitter)) {
        *done = true;
        return;
      }
    }
  }

 private:
  ProcessStack* stack_;
  const DispatcherChaosServices& s_;
  const DispatcherChaosOptions& options_;
  DispatcherChaos* chaos_;
};

}  // namespace

void SetUpDispatcherChaos(ProcessStack* stack, const std::string& cluster_file,
                          const std::vector<std::string>& dispatcher_flags,
                          DispatcherChaosServices* services,
                          DispatcherChaosOptions* options) {
  services->api = stack->AddService(
      "api", stack->Argv({"api", "--grpc_listen=" + stack->api_addr()}));
  services->scheduler = stack->AddService(
      "scheduler", stack->Argv({"scheduler", "--schedule_interval=200ms"}));
  std::vector<std::string> dispatcher = {"dispatcher"};
  dispatcher.insert(dispatcher.end(), dispatcher_flags.begin(),
                    dispatcher_flags.end());
  dispatcher.push_back("--dispatch_interval=100ms");
  services->dispatcher =
      stack->AddService("dispatcher", stack->Argv(std::move(dispatcher)));
  ASSERT_TRUE(services->api->Start().ok());
  ASSERT_NO_FATAL_FAILURE(stack->Apply(
      SourceDir() + "/deploy/local/demo-tenant.textproto", services->api));
  ASSERT_NO_FATAL_FAILURE(stack->Apply(cluster_file, services->api));
  options->token = stack->Token("users/demo", "member", "demo");
  ASSERT_FALSE(options->token.empty());
  ASSERT_TRUE(services->scheduler->Start().ok());
}

void AddChaosRequests(int count, int64_t memory_bytes, std::mt19937_64& rng,
                      const std::function<void(v1::JobSpec*)>& command,
                      DispatcherChaosOptions* options) {
  for (int i = 0; i < count; ++i) {
    v1::SubmitJobRequest& req = options->requests.emplace_back();
    req.set_parent("tenants/demo");
    req.set_client_request_id(
        absl::StrCat(options->label, "-crash-", options->seed, "-", i));
    v1::JobSpec* spec = req.mutable_job()->mutable_spec();
    spec->set_project("default");
    spec->set_queue("default");
    spec->set_workers(rng() % 6 == 0 ? 2 : 1);
    spec->mutable_resources()->set_gpus(1);
    spec->mutable_resources()->set_cpu_millis(1000);
    spec->mutable_resources()->set_memory_bytes(memory_bytes);
    spec->set_spot_policy(v1::SPOT_POLICY_ALLOWED);
    command(spec);
  }
}

void RunDispatcherChaos(ProcessStack* stack,
                        const DispatcherChaosServices& services,
                        const DispatcherChaosOptions& options,
                        std::mt19937_64& rng, DispatcherChaos* chaos) {
  Chaos run(stack, services, options, chaos);
  // The first dispatcher has the fault point (N = 1): jobs arrive at once,
  // so it fires; so do a third of the restarts (N = 1-3).
  ASSERT_TRUE(services.dispatcher->Start(FaultEnv(1)).ok());
  // Joined on every way out.
  Submitter submitter(*stack, options);
  ASSERT_NO_FATAL_FAILURE(run.Run(rng, submitter));
  chaos->chaos_took = absl::Now() - chaos->start;

  bool done = false;
  ASSERT_NO_FATAL_FAILURE(run.AwaitAllEnded(submitter, &done));
  submitter.Join();
  ASSERT_TRUE(submitter.error.empty()) << submitter.error;
  chaos->histories = CheckJobHistories(stack->db_url());
  chaos->histogram = ProcessStack::StateHistogram(chaos->histories);
  ASSERT_TRUE(done) << "not every job ended within " << options.final_limit
                    << ":" << chaos->histogram << "\ndispatcher log:\n"
                    << fx::ReadFileTail(services.dispatcher->log(), 3000)
                    << "\nscheduler log:\n"
                    << fx::ReadFileTail(services.scheduler->log(), 2000);

  // --- Every job ended exactly once, and succeeded ---
  const JobHistoryCheck& histories = chaos->histories;
  const int job_count = static_cast<int>(options.requests.size());
  EXPECT_TRUE(histories.problems.empty())
      << histories.problems.size() << " problems:\n"
      << absl::StrJoin(histories.problems, "\n");
  EXPECT_EQ(static_cast<int>(histories.jobs.size()), job_count);
  int succeeded = 0;
  for (const auto& [id, job] : histories.jobs) {
    if (job.first == v1::JOB_STATE_SUCCEEDED) ++succeeded;
  }
  EXPECT_EQ(succeeded, job_count) << chaos->histogram;
}

void ExpectDispatcherChaosCounters(const DispatcherChaosOptions& options,
                                   const DispatcherChaos& chaos,
                                   const std::string& backend_jobs) {
  std::cout << "[" << options.label << " crash seed " << options.seed << "] "
            << options.requests.size() << " jobs in "
            << absl::FormatDuration(absl::Now() - chaos.start) << " (chaos "
            << absl::FormatDuration(chaos.chaos_took) << "):" << chaos.histogram
            << "; attempts " << chaos.histories.attempt_rows << ", "
            << backend_jobs << ", transitions " << chaos.histories.transitions
            << "; dispatcher kills " << chaos.kills << " (" << chaos.targeted
            << " targeted, " << chaos.injected << " fault-injected of which "
            << chaos.fired
            << " fired), left DISPATCHING: " << chaos.launched_unrecorded << " "
            << options.launched << " but unrecorded, "
            << chaos.claimed_unlaunched << " claimed but not "
            << options.unlaunched << "\n";
  EXPECT_GE(chaos.kills, options.min_kills);
  // The kills did land between "launched" and "recorded": at least the
  // fault point's (each of which KillAndSample checked).
  EXPECT_GT(chaos.fired, 0);
  EXPECT_GT(chaos.launched_unrecorded, 0);
}

}  // namespace trainyard::testing
