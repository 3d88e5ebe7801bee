// The `trainyard` services of one process-level test (slurm_process_test,
// kube_process_test) as separate processes over the test's own PostgreSQL
// database and the suite's Redis: the test's temp dir, `trainyard migrate`,
// an api port, an admin token, service processes it may kill -9 and start
// again, one-shot commands (`apply`, `token create`), the JobService over
// gRPC, and what a dispatcher killed by its fault-injection point left.
//
//   class MyTest : public ::testing::Test {
//     void SetUp() override {
//       ASSERT_NO_FATAL_FAILURE(stack_.SetUp(pg_, redis_, "trainyard-my-"));
//     }
//     ProcessStack stack_;
//   };
//   TrainyardService* api = stack_.AddService(
//       "api", stack_.Argv({"api", "--grpc_listen=" + stack_.api_addr()}));
//   ASSERT_TRUE(api->Start().ok());
//   ASSERT_NO_FATAL_FAILURE(stack_.Apply("deploy/.../demo.textproto", api));
#ifndef TRAINYARD_TESTS_INTEGRATION_PROCESS_STACK_H_
#define TRAINYARD_TESTS_INTEGRATION_PROCESS_STACK_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/trainyard_process.h"
#include "trainyard/v1/job.grpc.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::testing {

// $NAME as an int, `fallback` when unset or not a number.
int EnvInt(const char* name, int fallback);
// The repository ($TRAINYARD_SOURCE_DIR, set by CTest; else ".").
std::string SourceDir();
// SUCCEEDED, FAILED or CANCELLED.
bool Terminal(int state);

class ProcessStack {
 public:
  ProcessStack() = default;
  ProcessStack(const ProcessStack&) = delete;
  ProcessStack& operator=(const ProcessStack&) = delete;
  // Kills the services and removes the temp dir.
  ~ProcessStack();

  // For a test's SetUp (fatal failures: ASSERT_NO_FATAL_FAILURE): a temp dir
  // named `prefix`XXXXXX, a fresh database of `pg`, `trainyard migrate` on
  // it, a free api port and a platform-admin token.
  void SetUp(LocalPostgres* pg, LocalRedis* redis, const std::string& prefix);

  // `trainyard args...` to completion, logged in the temp dir.
  CommandResult Run(const std::vector<std::string>& args);
  // `trainyard token create`: the token, "" (and a test failure) on error.
  std::string Token(const std::string& principal, const std::string& role,
                    const std::string& tenant = "");
  // The binary and `head`, plus the flags every service of the test gets: its
  // database, Redis, no HTTP port, quiet logs.
  std::vector<std::string> Argv(std::vector<std::string> head) const;
  // A service process (not started), logging to DIR/<name>.log; owned here.
  TrainyardService* AddService(const std::string& name,
                               std::vector<std::string> argv);
  // `trainyard apply -f FILE` against the api, retried while `api` starts.
  void Apply(const std::string& file, TrainyardService* api);

  std::unique_ptr<v1::JobService::Stub> Jobs() const;
  // A call's context with `token`, 10 s deadline.
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token);
  // Gets job `name` (full view) until it ended or `timeout` passed, failing
  // the test when a service of the stack died meanwhile. The last state seen.
  v1::Job AwaitEnd(const std::string& name, const std::string& token,
                   absl::Duration timeout);

  // Attempt names ("ty-<job>-<attempt>") of the jobs DISPATCHING in the
  // database: claimed by a dispatcher, launch not recorded yet.
  std::vector<std::string> Dispatching() const;
  // Every attempt of the database, by its backend job name: `prefix` +
  // "ty-<job>-<attempt>" (fatal failures: ASSERT_NO_FATAL_FAILURE).
  void Attempts(const std::string& prefix,
                std::map<std::string, v1::Attempt>* attempts) const;
  // The attempt a dispatcher killed by its fault-injection point
  // (TRAINYARD_FAULT_KILL_AFTER_LAUNCHES) names in its log as its last
  // launch, "" when the log has none.
  static std::string FaultInjectedAttempt(const std::string& log);
  // " SUCCEEDED=12 FAILED=1": how many jobs ended in each state.
  static std::string StateHistogram(const JobHistoryCheck& check);

  const std::string& dir() const { return dir_; }
  const std::string& db_url() const { return db_url_; }
  const std::string& api_addr() const { return api_addr_; }
  const std::string& admin() const { return admin_; }

 private:
  LocalRedis* redis_ = nullptr;
  std::string dir_;
  std::string db_url_;
  std::string api_addr_;
  std::string admin_;
  int runs_ = 0;
  std::vector<std::unique_ptr<TrainyardService>> services_;
};

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_INTEGRATION_PROCESS_STACK_H_
