// End-to-end tests of the `trainyard` binary as docs/cli.md documents it:
// version, migrate, token create, all (with a config file), apply, /healthz
// /readyz /metrics, clean shutdown on SIGTERM, and clear errors for bad
// arguments. Runs the real binary against a real PostgreSQL and Redis.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/lib/runtime/http_server.h"
#include "tests/fixtures/local_postgres.h"
#include "tests/fixtures/local_redis.h"
#include "tests/fixtures/ports.h"
#include "tests/fixtures/subprocess.h"
#include "trainyard/v1/queue.grpc.pb.h"

namespace trainyard::testing {
namespace {

using ::testing::HasSubstr;
namespace fx = ::trainyard::testing::internal;

std::string Binary() {
  const char* bin = std::getenv("TRAINYARD_BIN");
  return bin == nullptr ? "" : bin;
}

std::string SourceDir() {
  const char* dir = std::getenv("TRAINYARD_SOURCE_DIR");
  return dir == nullptr ? "." : dir;
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Binary().empty())
        << "TRAINYARD_BIN is not set (run through ctest)";
    auto dir = fx::MakeTempDir("trainyard-cli-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    auto db = SharedPostgres()->CreateDatabase();
    ASSERT_TRUE(db.ok()) << db.status();
    db_url_ = *db;
  }

  RunResult Run(std::vector<std::string> args) {
    static int counter = 0;
    const std::string log = absl::StrCat(dir_, "/run-", ++counter, ".log");
    args.insert(args.begin(), Binary());
    auto pid = fx::Spawn({.argv = args, .log_path = log});
    RunResult r;
    if (!pid.ok()) return r;
    auto status = fx::WaitForExit(*pid, absl::Seconds(60));
    if (status.ok() && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
    r.output = fx::ReadFile(log).value_or("");
    return r;
  }

  std::string dir_;
  std::string db_url_;
};

// GET 127.0.0.1:port/path; returns {status code, body}, {0, ""} when nothing
// answered.
std::pair<int, std::string> HttpGet(int port, const std::string& path) {
  auto r = runtime::HttpGet(absl::StrCat("127.0.0.1:", port), path);
  if (!r.ok()) return {0, ""};
  return {r->status, r->body};
}

// The token is the one stdout line that starts with "ty_".
std::string TokenFrom(const std::string& output) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StartsWith(line, "ty_")) return std::string(line);
  }
  return "";
}

TEST_F(CliTest, VersionAndUsage) {
  RunResult v = Run({"version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_THAT(v.output,
              ::testing::MatchesRegex("trainyard [0-9]+\\.[0-9]+\\.[0-9]+\n"));

  RunResult none = Run({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.output, HasSubstr("Usage:"));

  RunResult unknown = Run({"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.output, HasSubstr("unknown command \"frobnicate\""));
  // The gateway refuses limits it cannot keep, and a CA file it cannot read.
  RunResult streams =
      Run({"gateway", "--gateway_max_streams=40", "--gateway_threads=32",
           "--gateway_listen=127.0.0.1:0"});
  EXPECT_EQ(streams.exit_code, 2);
  EXPECT_THAT(streams.output,
              HasSubstr("--gateway_max_streams must be at least 1 and below"));
  RunResult ca = Run({"gateway", "--target_ca=" + dir_ + "/missing-ca.pem"});
  EXPECT_EQ(ca.exit_code, 2);
  EXPECT_THAT(ca.output, HasSubstr("missing-ca.pem"));
  // The dispatcher needs a backend.
  RunResult dispatcher = Run({"dispatcher"});
  EXPECT_EQ(dispatcher.exit_code, 2);
  EXPECT_THAT(dispatcher.output,
              HasSubstr("give one of --sim_config=FILE or --sim_target"));
  RunResult both = Run({"dispatcher", "--sim_config=x", "--sim_target=y:1"});
  EXPECT_EQ(both.exit_code, 2);
  // A sim cluster needs its config, and a readable one.
  RunResult sim = Run({"sim-cluster"});
  EXPECT_EQ(sim.exit_code, 2);
  EXPECT_THAT(sim.output, HasSubstr("--sim_config=FILE is required"));
  RunResult sim_missing =
      Run({"sim-cluster", "--sim_config=" + dir_ + "/missing.textproto"});
  EXPECT_EQ(sim_missing.exit_code, 2);
  EXPECT_THAT(sim_missing.output, HasSubstr("missing.textproto"));
  // The in-process sim's own port needs an in-process sim.
  RunResult listen_remote =
      Run({"dispatcher", "--sim_target=y:1", "--sim_grpc_listen=127.0.0.1:0"});
  EXPECT_EQ(listen_remote.exit_code, 2);
  EXPECT_THAT(listen_remote.output,
              HasSubstr("--sim_grpc_listen serves an in-process sim"));
  // sim-fault: a target address, a known kind and a target, or its usage.
  RunResult fault_no_target = Run({"sim-fault", "reclaim-node", "s-0001"});
  EXPECT_EQ(fault_no_target.exit_code, 2);
  EXPECT_THAT(fault_no_target.output,
              HasSubstr("usage: trainyard sim-fault --sim_target=HOST:PORT"));
  RunResult fault_kind =
      Run({"sim-fault", "--sim_target=127.0.0.1:1", "melt-node", "s-0001"});
  EXPECT_EQ(fault_kind.exit_code, 2);
  EXPECT_THAT(fault_kind.output, HasSubstr("reclaim-node"));
  RunResult fault_code = Run({"sim-fault", "--sim_target=127.0.0.1:1",
                              "crash-attempt", "ty-1-1", "seven"});
  EXPECT_EQ(fault_code.exit_code, 2);
  // A sim that does not answer: exit 1 with the reason.
  RunResult fault_down =
      Run({"sim-fault", "--sim_target=127.0.0.1:1", "reclaim-node", "s-0001"});
  EXPECT_EQ(fault_down.exit_code, 1);
  EXPECT_THAT(fault_down.output, HasSubstr("sim-fault: "));
  // The meter's cost event interval cannot be negative.
  RunResult interval =
      Run({"accounting", "--cost_event_interval=-1s", "--http_listen="});
  EXPECT_EQ(interval.exit_code, 2);
  EXPECT_THAT(interval.output,
              HasSubstr("--cost_event_interval: must not be negative"));
  // The scheduler exists: without a database it tries again for
  // --database_wait, then fails clearly.
  const absl::Time start = absl::Now();
  RunResult scheduler =
      Run({"scheduler", "--postgres_url=postgresql://nobody@127.0.0.1:1/none",
           "--http_listen=", "--database_wait=1s"});
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(scheduler.exit_code, 1);
  EXPECT_THAT(scheduler.output,
              HasSubstr("scheduler: database not reachable, trying again"));
  EXPECT_THAT(scheduler.output, HasSubstr("scheduler: migrations failed"));
}

TEST_F(CliTest, MigrateIsIdempotentAndTokenCreateValidates) {
  RunResult first = Run({"migrate", "--postgres_url=" + db_url_});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_THAT(first.output, HasSubstr("schema at version"));
  RunResult second = Run({"migrate", "--postgres_url=" + db_url_});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("(applied 0 migration(s))"));

  RunResult bad_db =
      Run({"migrate", "--postgres_url=postgresql://nobody@127.0.0.1:1/none"});
  EXPECT_EQ(bad_db.exit_code, 1);
  EXPECT_THAT(bad_db.output, HasSubstr("migrate:"));

  RunResult bad_role = Run({"token", "create", "--postgres_url=" + db_url_,
                            "--principal=users/a", "--role=overlord"});
  EXPECT_NE(bad_role.exit_code, 0);
  EXPECT_THAT(bad_role.output, HasSubstr("--role"));
  RunResult bad_principal = Run({"token", "create", "--postgres_url=" + db_url_,
                                 "--principal=alice", "--role=platform-admin"});
  EXPECT_NE(bad_principal.exit_code, 0);
  EXPECT_THAT(bad_principal.output, HasSubstr("--principal"));

  RunResult ok = Run({"token", "create", "--postgres_url=" + db_url_,
                      "--principal=users/admin", "--role=platform-admin"});
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(TokenFrom(ok.output), ::testing::StartsWith("ty_"));
}

// `trainyard accounting import-spot-prices -f FILE`: a good file loads whole;
// a file with one bad row loads nothing and names the line; loading the good
// file again is refused (one price per pool and instant), so the first load
// was stored.
TEST_F(CliTest, ImportSpotPricesLoadsAWholeFileOrNothing) {
  const std::string good = dir_ + "/spot.csv";
  std::ofstream(good) << "pool,effective_time,price_per_gpu_hour,currency\n"
                         "gpu,2030-01-01T00:00:00Z,0.95,USD\n"
                         "gpu,2030-01-01T01:00:00Z,1.1025,USD\n";
  const std::string bad = dir_ + "/bad.csv";
  std::ofstream(bad) << "pool,effective_time,price_per_gpu_hour,currency\n"
                        "gpu,2030-01-02T00:00:00Z,0.95,USD\n"
                        "gpu,2030-01-02T01:00:00Z,-1,USD\n";
  RunResult missing =
      Run({"accounting", "import-spot-prices", "--postgres_url=" + db_url_});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output, HasSubstr("-f FILE is required"));
  RunResult refused = Run({"accounting", "import-spot-prices", "-f", bad,
                           "--postgres_url=" + db_url_});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.output, HasSubstr("line 3, price_per_gpu_hour"));
  RunResult ok = Run({"accounting", "import-spot-prices", "-f", good,
                      "--postgres_url=" + db_url_});
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("imported 2 spot price(s) in USD"));
  RunResult again = Run({"accounting", "import-spot-prices", "-f", good,
                         "--postgres_url=" + db_url_});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.output,
              HasSubstr("spot_prices[0].spot_price.effective_time"));
}

// `trainyard accounting reconcile`: a bad month is a usage error; an empty
// ledger of a migrated database reconciles.
TEST_F(CliTest, ReconcileChecksItsMonthAndReconcilesAnEmptyLedger) {
  RunResult bad = Run({"accounting", "reconcile", "--month=2026-13",
                       "--postgres_url=" + db_url_});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("--month: must be YYYY-MM"));
  ASSERT_EQ(Run({"migrate", "--postgres_url=" + db_url_}).exit_code, 0);
  RunResult ok = Run({"accounting", "reconcile", "--month=2026-11",
                      "--postgres_url=" + db_url_});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("2026-11: 0 attempts"));
  EXPECT_THAT(ok.output, HasSubstr("0 difference(s)"));
}

TEST_F(CliTest, ServeApplyHealthMetricsAndShutdown) {
  ASSERT_EQ(Run({"migrate", "--postgres_url=" + db_url_}).exit_code, 0);
  RunResult admin = Run({"token", "create", "--postgres_url=" + db_url_,
                         "--principal=users/admin", "--role=platform-admin"});
  ASSERT_EQ(admin.exit_code, 0) << admin.output;
  const std::string token = TokenFrom(admin.output);
  ASSERT_FALSE(token.empty()) << admin.output;

  auto grpc_port = PickUnusedPort();
  auto http_port = PickUnusedPort();
  auto gateway_port = PickUnusedPort();
  ASSERT_TRUE(grpc_port.ok() && http_port.ok() && gateway_port.ok());
  const std::string config = absl::StrCat(dir_, "/trainyard.conf");
  {
    std::ofstream out(config);
    out << "# written by cli_test\n"
        << "postgres_url = " << db_url_ << "\n"
        << "redis_addr = " << SharedRedis()->Address() << "\n"
        << "grpc_listen = 127.0.0.1:" << *grpc_port << "\n"
        << "http_listen = 127.0.0.1:" << *http_port
        << "  # comment after a value\n"
        << "gateway_listen = 127.0.0.1:" << *gateway_port << "\n"
        << "log_level = info\n";
  }
  const std::string log = absl::StrCat(dir_, "/all.log");
  auto pid = fx::Spawn(
      {.argv = {Binary(), "all", "--config=" + config}, .log_path = log});
  ASSERT_TRUE(pid.ok()) << pid.status();

  bool ready = false;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30);
       absl::Now() < deadline;) {
    if (HttpGet(*http_port, "/readyz").first == 200) {
      ready = true;
      break;
    }
    ASSERT_FALSE(fx::TryReap(*pid).has_value()) << fx::ReadFileTail(log);
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(ready) << fx::ReadFileTail(log);
  // It executed itself again with glibc's malloc on huge pages
  // (malloc_tuning.h): the same process, the tunable in its environment.
  {
    std::ifstream environ(absl::StrCat("/proc/", *pid, "/environ"));
    const std::string env((std::istreambuf_iterator<char>(environ)),
                          std::istreambuf_iterator<char>());
    EXPECT_THAT(env, HasSubstr("GLIBC_TUNABLES=glibc.malloc.hugetlb=1"));
  }
  auto healthz = HttpGet(*http_port, "/healthz");
  EXPECT_EQ(healthz.first, 200);
  EXPECT_THAT(healthz.second, HasSubstr("\"ok\""));

  // apply the demo bundle the quick start uses; a second apply is a no-op, not
  // an error.
  const std::string bundle = SourceDir() + "/deploy/local/demo.textproto";
  const std::string target = absl::StrCat("--target=127.0.0.1:", *grpc_port);
  RunResult applied = Run({"apply", "-f", bundle, target, "--token=" + token});
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  EXPECT_THAT(
      applied.output,
      HasSubstr("created rate rate of on-demand-h100 RESOURCE_NAME_GPU"));
  EXPECT_THAT(applied.output,
              HasSubstr("created spot price spot price of spot-h100"));
  RunResult again = Run({"apply", "-f", bundle, target, "--token=" + token});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  // The prices in force are the bundle's: nothing is added twice.
  EXPECT_THAT(
      again.output,
      HasSubstr("unchanged rate rate of on-demand-h100 RESOURCE_NAME_GPU"));
  EXPECT_THAT(again.output, ::testing::Not(HasSubstr("created rate")));
  RunResult no_token =
      Run({"apply", "-f", bundle, target, "--token=ty_bad_token"});
  EXPECT_NE(no_token.exit_code, 0);
  EXPECT_THAT(no_token.output, HasSubstr("UNAUTHENTICATED"));
  RunResult missing = Run(
      {"apply", "-f", dir_ + "/nope.textproto", target, "--token=" + token});
  EXPECT_NE(missing.exit_code, 0);

  // The tenant from the bundle is there, over gRPC with the admin token.
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", *grpc_port),
                                     grpc::InsecureChannelCredentials());
  auto queues = trainyard::v1::QueueService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + token);
  trainyard::v1::GetTenantRequest get;
  get.set_name("tenants/demo");
  trainyard::v1::Tenant tenant;
  grpc::Status s = queues->GetTenant(&ctx, get, &tenant);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(tenant.name(), "tenants/demo");

  // The REST/JSON gateway of `all`: the api's answers as JSON, its OpenAPI
  // document, and no console where none was built.
  auto rest = HttpGet(*gateway_port, "/v1/tenants/demo");
  EXPECT_EQ(rest.first, 401);
  EXPECT_THAT(rest.second, HasSubstr("\"status\":\"UNAUTHENTICATED\""));
  auto openapi = HttpGet(*gateway_port, "/v1/openapi.json");
  EXPECT_EQ(openapi.first, 200);
  EXPECT_THAT(openapi.second, HasSubstr("\"/v1/tenants/{tenant}/jobs\""));
  auto console = HttpGet(*gateway_port, "/");
  EXPECT_EQ(console.first, 404);
  EXPECT_THAT(console.second, HasSubstr("the web console is not built here"));

  auto metrics = HttpGet(*http_port, "/metrics");
  EXPECT_EQ(metrics.first, 200);
  EXPECT_THAT(metrics.second,
              HasSubstr("# TYPE trainyard_grpc_requests_total counter"));
  // apply read the tenant too, so only the series' presence is certain.
  EXPECT_TRUE(absl::StrContains(
      metrics.second,
      "trainyard_grpc_requests_total{method=\"/trainyard.v1.QueueService/"
      "GetTenant\",code=\"OK\"} "));
  EXPECT_THAT(metrics.second, HasSubstr("trainyard_redis_up 1"));

  // Structured JSON log lines.
  EXPECT_THAT(fx::ReadFileTail(log), HasSubstr("\"msg\":\"api serving\""));

  ASSERT_EQ(kill(*pid, SIGTERM), 0);
  auto exited = fx::WaitForExit(*pid, absl::Seconds(15));
  ASSERT_TRUE(exited.ok()) << "trainyard did not stop on SIGTERM";
  EXPECT_TRUE(WIFEXITED(*exited) && WEXITSTATUS(*exited) == 0)
      << fx::DescribeWaitStatus(*exited);
}

TEST_F(CliTest, BadConfigFileAndPortInUseFailClearly) {
  const std::string config = absl::StrCat(dir_, "/bad.conf");
  {
    std::ofstream out(config);
    out << "postgres_url = x\nthis line is wrong\n";
  }
  RunResult bad = Run({"all", "--config=" + config});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("line 2"));

  RunResult missing = Run({"all", "--config=" + dir_ + "/absent.conf"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output, HasSubstr("cannot read config file"));

  // The database is not migrated and unreachable: start fails with exit 1 and
  // says why.
  RunResult no_db =
      Run({"api", "--postgres_url=postgresql://nobody@127.0.0.1:1/none",
           "--grpc_listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
           "--database_wait=0s"});
  EXPECT_EQ(no_db.exit_code, 1);
  EXPECT_THAT(no_db.output, HasSubstr("api failed to start"));

  // The budget webhook's flags are checked before anything starts.
  RunResult bad_url =
      Run({"accounting", "--budget_webhook_url=ftp://hooks.example/x"});
  EXPECT_EQ(bad_url.exit_code, 2);
  EXPECT_THAT(bad_url.output, HasSubstr("--budget_webhook_url"));
  RunResult no_secret =
      Run({"accounting", "--budget_webhook_url=http://127.0.0.1:9/hook",
           "--budget_webhook_secret_file=" + dir_ + "/absent.key"});
  EXPECT_EQ(no_secret.exit_code, 2);
  EXPECT_THAT(no_secret.output, HasSubstr("--budget_webhook_secret_file"));
}

}  // namespace
}  // namespace trainyard::testing
