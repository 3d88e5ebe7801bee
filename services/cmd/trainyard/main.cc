// The `trainyard` binary: every Trainyard service and its operator commands.
//
//   trainyard api         the api service (gRPC; /metrics, /healthz, /readyz)
//   trainyard scheduler   the scheduler (one leader; others stand by)
//   trainyard dispatcher  one cluster's dispatcher (--backend: sim, slurm,
//                         kubernetes)
//   trainyard sim-cluster a simulated cluster served over gRPC
//   trainyard accounting  AccountingService and the meter (one leader)
//   trainyard accounting import-spot-prices -f FILE
//   trainyard accounting reconcile --month=YYYY-MM
//   trainyard gateway     the REST/JSON gateway and the web console (over
//   --target) trainyard all         every service that exists, in one process
//   trainyard migrate     apply the SQL migrations
//   trainyard token create --principal=users/NAME --role=ROLE [--tenant=T]
//   trainyard apply -f FILE --target=HOST:PORT --token=TOKEN
//   trainyard version

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/accounting/accounting_service.h"
#include "services/accounting/meter_service.h"
#include "services/accounting/pricing/spot_csv.h"
#include "services/accounting/reconcile.h"
#include "services/accounting/webhook.h"
#include "services/api/auth.h"
#include "services/api/server.h"
#include "services/cmd/trainyard/apply.h"
#include "services/dispatcher/adapters/all.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/registry.h"
#include "services/dispatcher/adapters/sim/sim_adapter.h"
#include "services/dispatcher/adapters/sim/sim_config.h"
#include "services/dispatcher/adapters/sim/sim_remote.h"
#include "services/dispatcher/dispatcher.h"
#include "services/gateway/gateway.h"
#include "services/lib/domain/validation.h"
#include "services/lib/runtime/config.h"
#include "services/lib/runtime/grpc_server.h"
#include "services/lib/runtime/health.h"
#include "services/lib/runtime/http_server.h"
#include "services/lib/runtime/job_token.h"
#include "services/lib/runtime/logging.h"
#include "services/lib/runtime/malloc_tuning.h"
#include "services/lib/runtime/metrics.h"
#include "services/scheduler/scheduler_service.h"
#include "storage/postgres/accounting_store.h"
#include "storage/postgres/auth_store.h"
#include "storage/postgres/migrate.h"
#include "storage/postgres/pool.h"

ABSL_FLAG(std::string, grpc_listen, "127.0.0.1:50051",
          "gRPC listen address (host:port)");
ABSL_FLAG(std::string, tls_cert, "",
          "api/all: PEM certificate chain; with --tls_key the gRPC port serves "
          "TLS only");
ABSL_FLAG(std::string, tls_key, "", "api/all: PEM private key of --tls_cert");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:8081",
          "HTTP listen address for /metrics, /healthz and /readyz; empty "
          "disables it");
ABSL_FLAG(
    std::string, gateway_listen, "",
    "the REST/JSON gateway and web console: its listen address (`gateway`: "
    "127.0.0.1:8090 when empty; `all`: off when empty)");
ABSL_FLAG(
    std::string, console_dir, "",
    "gateway/all: the web console's built files (web/dist); empty: no console");
ABSL_FLAG(std::string, gateway_tls_cert, "",
          "gateway/all: PEM certificate chain; with --gateway_tls_key the "
          "gateway serves "
          "HTTPS only");
ABSL_FLAG(std::string, gateway_tls_key, "",
          "gateway/all: PEM private key of --gateway_tls_cert");
ABSL_FLAG(std::string, gateway_cors_origins, "",
          "gateway/all: comma-separated origins allowed to call the REST API "
          "from another "
          "origin (CORS); empty: none");
ABSL_FLAG(int64_t, gateway_max_body, 1 << 20,
          "gateway/all: the largest request body in bytes (413 beyond)");
ABSL_FLAG(
    int, gateway_threads, 32,
    "gateway/all: HTTP worker threads (requests and streams served at once)");
ABSL_FLAG(
    int, gateway_max_streams, 24,
    "gateway/all: event streams and downloads open at once (503 beyond); below "
    "--gateway_threads");
ABSL_FLAG(std::string, target_ca, "",
          "gateway: PEM CA certificate to verify the api's TLS at --target; "
          "empty: plaintext");
ABSL_FLAG(std::string, postgres_url,
          "postgresql://trainyard@127.0.0.1:55432/trainyard",
          "PostgreSQL connection URL");
ABSL_FLAG(std::string, redis_addr, "127.0.0.1:56379",
          "Redis address (host:port)");
ABSL_FLAG(std::string, log_level, "info",
          "Minimum log level: debug, info, warning, error");
ABSL_FLAG(int, db_pool_size, 16, "PostgreSQL connections per process");
ABSL_FLAG(absl::Duration, database_wait, absl::Seconds(60),
          "api/scheduler/dispatcher/all: how long a service that starts while "
          "PostgreSQL cannot be reached (not up yet, restarting) tries again "
          "before it exits");
ABSL_FLAG(
    double, default_submit_rate, 500,
    "Submits per second allowed to a tenant that sets no limit of its own");
ABSL_FLAG(double, default_submit_burst, 1000,
          "Burst of submits above the rate");
ABSL_FLAG(
    int, submit_committers, 2,
    "Group-commit threads for Submit (each commits one batch per transaction)");
ABSL_FLAG(int, submit_batch, 256,
          "Most submits written in one group-commit transaction");
ABSL_FLAG(absl::Duration, schedule_interval, absl::Seconds(1),
          "scheduler: a cycle runs at least this often (and on every wake-up)");
ABSL_FLAG(absl::Duration, explanation_interval, absl::Seconds(1),
          "scheduler: pending jobs' explanations are recomputed at most this "
          "often (cycles in between only decide and commit); 0 = every cycle");
ABSL_FLAG(bool, hot_standby, true,
          "scheduler: a standby follows the outbox as the leader does, so "
          "that its first cycle as the leader reads only what changed "
          "(false: a new leader loads every active job)");
ABSL_FLAG(absl::Duration, standby_follow_interval, absl::Seconds(5),
          "scheduler: how often a hot standby follows the outbox");
ABSL_FLAG(bool, hold_borrowing_for_priority, false,
          "scheduler: a job that finds no room in its cohort for quota its "
          "queue may borrow keeps lower-priority jobs of the cohort from "
          "borrowing for the rest of the cycle (docs/scheduling.md)");
ABSL_FLAG(absl::Duration, dispatcher_timeout, absl::Minutes(2),
          "scheduler: a cluster whose dispatcher has not reported for this "
          "long gets no new admissions (0: never held back)");
ABSL_FLAG(bool, nominal_before_borrowing, false,
          "scheduler: Kueue's ordering across queues: jobs their queue can "
          "take within nominal quota go before jobs that would borrow, "
          "whatever their priorities (docs/scheduling.md)");
ABSL_FLAG(bool, preempt_for_capacity, false,
          "scheduler: a job within its queue's nominal quota that finds no "
          "nodes with room may preempt running jobs of strictly lower "
          "priority of any queue (docs/scheduling.md)");
ABSL_FLAG(
    std::string, sim_config, "",
    "dispatcher/all: text-format SimClusterConfig; runs a dispatcher with "
    "the sim backend for the cluster it names (docs/sim.md)");
ABSL_FLAG(std::string, sim_target, "",
          "dispatcher: address (host:port) of a `trainyard sim-cluster` to "
          "dispatch to, instead of an in-process --sim_config cluster");
ABSL_FLAG(std::string, sim_grpc_listen, "",
          "dispatcher/all with --sim_config: also serve the in-process sim's "
          "SimClusterService (fault injection, `trainyard sim-fault`) on this "
          "address; empty: not served");
ABSL_FLAG(absl::Duration, dispatch_interval, absl::Milliseconds(500),
          "dispatcher: a pass runs at least this often");
ABSL_FLAG(int64_t, log_tail_bytes, 1 << 20,
          "dispatcher: the newest bytes of each attempt's output copied to "
          "PostgreSQL for `yard logs` and the console (0: none)");
ABSL_FLAG(absl::Duration, log_interval, absl::Seconds(5),
          "dispatcher: a running attempt's new output is copied at most this "
          "often (and all of it when the attempt ends)");
ABSL_FLAG(std::string, backend, "",
          "dispatcher/all: the cluster's backend: sim (--sim_config or "
          "--sim_target; the default), slurm (--slurm_config) or kubernetes "
          "(--kubeconfig)");
ABSL_FLAG(std::string, slurm_config, "",
          "dispatcher/all with --backend=slurm: Slurm adapter settings, "
          "`key = value` lines (docs/slurm.md; deploy/slurm/start.sh writes "
          "one as adapter.conf)");
ABSL_FLAG(std::string, slurm_cluster, "slurm",
          "dispatcher/all with --backend=slurm: id of the cluster it "
          "dispatches for (clusters/{id})");
ABSL_FLAG(std::string, api_advertise_addr, "",
          "dispatcher/all: the api address every attempt's workers get as "
          "TRAINYARD_ADDR; `all` defaults to --grpc_listen (a wildcard host "
          "replaced by this host's name), `dispatcher` sets none without it");
ABSL_FLAG(std::string, job_token_key_file, "",
          "api/dispatcher/all: HMAC keys of job tokens (TRAINYARD_TOKEN of "
          "every attempt), one per line: the first signs, all verify. Share "
          "it between the api and the dispatchers. `all` without it uses a "
          "random key of its own; `api` then refuses job tokens and "
          "`dispatcher` mints none");
ABSL_FLAG(absl::Duration, job_token_ttl, absl::Hours(24 * 7),
          "dispatcher/all: lifetime of a job token of a job without a time "
          "limit");
ABSL_FLAG(absl::Duration, job_token_margin, absl::Hours(1),
          "dispatcher/all: a job token lives the job's time limit + grace "
          "period + this");
ABSL_FLAG(std::string, principal, "",
          "token create: principal, e.g. users/alice");
ABSL_FLAG(std::string, role, "",
          "token create: role to bind: viewer, member, tenant-admin, finance, "
          "platform-admin");
ABSL_FLAG(std::string, tenant, "",
          "token create: tenant of the role (not for platform-admin)");
ABSL_FLAG(absl::Duration, ttl, absl::Hours(24 * 90),
          "token create: token lifetime");
ABSL_FLAG(std::string, description, "", "token create: what the token is for");
ABSL_FLAG(std::string, f, "",
          "apply: text-format ApplyBundle file; accounting import-spot-prices: "
          "the CSV file");
ABSL_FLAG(std::string, month, "",
          "accounting reconcile: the month to reconcile, YYYY-MM (UTC)");
ABSL_FLAG(absl::Duration, meter_interval, absl::Seconds(30),
          "accounting/all: how often the meter turns attempts into ledger "
          "lines (a running job's cost is at most this old)");
ABSL_FLAG(absl::Duration, cost_event_interval, absl::Minutes(1),
          "accounting/all: a running job's COST_UPDATED event on its Watch "
          "stream at most this often (0: every meter pass); an attempt "
          "metered for the last time always gets one");
ABSL_FLAG(std::string, accounting_currency, "USD",
          "accounting/all: the price book's ISO 4217 currency until the first "
          "price sets it");
ABSL_FLAG(std::string, lost_work_rule, "tenant",
          "accounting/all: who pays for work lost to an interruption: tenant, "
          "platform or split");
ABSL_FLAG(int, lost_work_tenant_percent, 50,
          "accounting/all: with --lost_work_rule=split, the tenant's percent");
ABSL_FLAG(absl::Duration, spot_price_max_age, absl::Hours(2),
          "accounting/all: how long a spot price observation stays fresh");
ABSL_FLAG(absl::Duration, close_month_after, absl::Hours(24 * 5),
          "accounting/all: a month's prices become immutable this long after "
          "it ends");
ABSL_FLAG(std::string, budget_webhook_url, "",
          "accounting/all: http(s) URL that receives each budget threshold "
          "notice (signed JSON POST); empty: none");
ABSL_FLAG(std::string, budget_webhook_secret_file, "",
          "accounting/all: file holding the webhook's HMAC-SHA256 key "
          "(X-Trainyard-Signature); empty: unsigned");
ABSL_FLAG(std::string, target, "127.0.0.1:50051", "apply/gateway: api address");
ABSL_FLAG(std::string, token, "",
          "apply: bearer token (or env TRAINYARD_TOKEN)");

namespace {

using trainyard::runtime::Log;
using trainyard::runtime::LogLevel;

constexpr char kUsage[] =
    R"(trainyard — multi-tenant training-platform control plane

Usage:
  trainyard api      [--config=FILE] [--grpc_listen=..] [--tls_cert=PEM --tls_key=PEM] [--http_listen=..] [--postgres_url=..] [--redis_addr=..]
  trainyard scheduler [--config=FILE] [--http_listen=..] [--postgres_url=..] [--redis_addr=..] [--schedule_interval=1s]
  trainyard dispatcher [--backend=NAME] BACKEND_FLAGS [--config=FILE] [--http_listen=..] [--postgres_url=..]
  trainyard sim-cluster --sim_config=FILE [--grpc_listen=127.0.0.1:50061] [--http_listen=..]
  trainyard sim-fault --sim_target=HOST:PORT KIND TARGET [EXIT_CODE]   (KIND: reclaim-node, fail-node, ... docs/sim.md)
  trainyard accounting [--config=FILE] [--grpc_listen=..] [--http_listen=..] [--postgres_url=..] [--meter_interval=30s] [--cost_event_interval=1m]
                     [--accounting_currency=USD] [--lost_work_rule=tenant|platform|split] [--lost_work_tenant_percent=50]
                     [--budget_webhook_url=URL] [--budget_webhook_secret_file=FILE]
                     [--spot_price_max_age=2h] [--close_month_after=120h]
  trainyard accounting import-spot-prices -f FILE.csv [--postgres_url=..]
  trainyard accounting reconcile --month=YYYY-MM [--postgres_url=..] [the meter's --lost_work_rule, ...]
  trainyard gateway  [--target=127.0.0.1:50051] [--target_ca=PEM] [--gateway_listen=127.0.0.1:8090] [--console_dir=web/dist]
                     [--gateway_tls_cert=PEM --gateway_tls_key=PEM] [--gateway_cors_origins=ORIGIN,..]
                     [--gateway_max_body=1048576] [--gateway_threads=32] [--gateway_max_streams=24]   (docs/gateway.md)
  trainyard all      (the api's flags, --schedule_interval, --sim_config, the accounting flags, the gateway's with
                     --gateway_listen; every service in one process)
  Job tokens (api, dispatcher, all): [--job_token_key_file=FILE] [--api_advertise_addr=HOST:PORT]
                     [--job_token_ttl=168h] [--job_token_margin=1h]  (docs/security.md "Job tokens")
  trainyard migrate  [--postgres_url=..]
  trainyard token create --principal=users/NAME --role=ROLE [--tenant=TENANT] [--ttl=2160h]
  trainyard apply -f FILE [--target=127.0.0.1:50051] [--token=TOKEN]
  trainyard version
)";

// kUsage, then the dispatcher's backends (the adapter registry's) with their
// flags.
std::string Usage() {
  std::string usage =
      absl::StrCat(kUsage, "\nDispatcher backends (--backend=NAME; default ",
                   trainyard::dispatcher::kDefaultAdapter, "):\n");
  for (const std::string& name : trainyard::dispatcher::AdapterNames()) {
    auto factory = trainyard::dispatcher::FindAdapterFactory(name);
    if (!factory.ok()) continue;
    absl::StrAppend(&usage,
                    absl::StrFormat("  %-7s %s\n", name, factory->usage));
  }
  return usage;
}

int Migrate() {
  auto result =
      trainyard::storage::postgres::Migrate(absl::GetFlag(FLAGS_postgres_url));
  if (!result.ok()) {
    std::cerr << "migrate: " << result.status() << "\n";
    return 1;
  }
  std::cout << "schema at version " << result->current_version << " (applied "
            << result->applied.size() << " migration(s))\n";
  return 0;
}

absl::StatusOr<trainyard::v1::Role> ParseRole(const std::string& role) {
  if (role == "viewer") return trainyard::v1::ROLE_VIEWER;
  if (role == "member") return trainyard::v1::ROLE_MEMBER;
  if (role == "tenant-admin") return trainyard::v1::ROLE_TENANT_ADMIN;
  if (role == "finance") return trainyard::v1::ROLE_FINANCE;
  if (role == "platform-admin") return trainyard::v1::ROLE_PLATFORM_ADMIN;
  return absl::InvalidArgumentError(absl::StrCat(
      "--role: unknown role \"", role,
      "\"; use viewer, member, tenant-admin, finance or platform-admin"));
}

// Creates a token (and the role binding, if asked) straight in the database:
// the bootstrap path for the first platform-admin, like `kubeadm token create`.
int TokenCreate() {
  const std::string principal = absl::GetFlag(FLAGS_principal);
  if (!trainyard::domain::IsValidPrincipal(principal)) {
    std::cerr << "token create: --principal: must look like users/NAME or "
                 "serviceAccounts/NAME\n";
    return 2;
  }
  const absl::Duration ttl = absl::GetFlag(FLAGS_ttl);
  if (ttl <= absl::ZeroDuration() || ttl > absl::Hours(24 * 366)) {
    std::cerr << "token create: --ttl: must be positive and at most one year\n";
    return 2;
  }
  std::optional<trainyard::v1::RoleBinding> binding;
  if (!absl::GetFlag(FLAGS_role).empty()) {
    auto role = ParseRole(absl::GetFlag(FLAGS_role));
    if (!role.ok()) {
      std::cerr << "token create: " << role.status().message() << "\n";
      return 2;
    }
    binding.emplace();
    binding->set_principal(principal);
    binding->set_role(*role);
    binding->set_tenant(absl::GetFlag(FLAGS_tenant));
    if (absl::Status s = trainyard::domain::ValidateRoleBinding(*binding);
        !s.ok()) {
      std::cerr << "token create: " << s.message() << "\n";
      return 2;
    }
  }
  auto migrated =
      trainyard::storage::postgres::Migrate(absl::GetFlag(FLAGS_postgres_url));
  if (!migrated.ok()) {
    std::cerr << "token create: " << migrated.status() << "\n";
    return 1;
  }
  auto db = trainyard::storage::postgres::Database::Open(
      {.url = absl::GetFlag(FLAGS_postgres_url), .pool_size = 1});
  if (!db.ok()) {
    std::cerr << "token create: " << db.status() << "\n";
    return 1;
  }
  trainyard::storage::postgres::AuthStore store(db->get());
  trainyard::storage::postgres::AuditRecord audit;
  audit.principal = "system:trainyard-cli";
  audit.method = "trainyard token create";
  audit.resource = principal;
  audit.tenant = absl::GetFlag(FLAGS_tenant);
  audit.request_json =
      absl::StrCat("{\"principal\":\"", principal, "\",\"role\":\"",
                   absl::GetFlag(FLAGS_role), "\"}");
  if (binding) {
    auto created = store.CreateRoleBinding(*binding, audit.principal, &audit);
    if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
      std::cerr << "token create: " << created.status().message() << "\n";
      return 1;
    }
  }
  trainyard::api::NewToken token = trainyard::api::GenerateToken();
  auto stored = store.CreateToken(token.id, principal, token.hash,
                                  absl::GetFlag(FLAGS_description),
                                  audit.principal, absl::Now() + ttl, &audit);
  if (!stored.ok()) {
    std::cerr << "token create: " << stored.status() << "\n";
    return 1;
  }
  std::cout << token.secret << "\n";
  return 0;
}

absl::StatusOr<trainyard::accounting::MeterServiceOptions>
MeterOptionsFromFlags() {
  trainyard::accounting::MeterServiceOptions options;
  options.postgres_url = absl::GetFlag(FLAGS_postgres_url);
  options.interval = absl::GetFlag(FLAGS_meter_interval);
  options.currency = absl::GetFlag(FLAGS_accounting_currency);
  if (options.interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--meter_interval: must be positive");
  }
  options.cost_event_interval = absl::GetFlag(FLAGS_cost_event_interval);
  if (options.cost_event_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--cost_event_interval: must not be negative");
  }
  const std::string rule = absl::GetFlag(FLAGS_lost_work_rule);
  using trainyard::accounting::pricing::LostWorkRule;
  if (rule == "tenant") {
    options.meter.lost_work_rule = LostWorkRule::kTenant;
  } else if (rule == "platform") {
    options.meter.lost_work_rule = LostWorkRule::kPlatform;
  } else if (rule == "split") {
    options.meter.lost_work_rule = LostWorkRule::kSplit;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lost_work_rule: must be tenant, platform or split, got \"", rule,
        "\""));
  }
  options.meter.split_tenant_percent =
      absl::GetFlag(FLAGS_lost_work_tenant_percent);
  if (options.meter.split_tenant_percent < 0 ||
      options.meter.split_tenant_percent > 100) {
    return absl::InvalidArgumentError(
        "--lost_work_tenant_percent: must be 0 to 100");
  }
  options.meter.spot_max_age_ms =
      absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_spot_price_max_age));
  if (options.meter.spot_max_age_ms <= 0) {
    return absl::InvalidArgumentError("--spot_price_max_age: must be positive");
  }
  return options;
}

trainyard::accounting::AccountingServiceOptions AccountingOptionsFromFlags() {
  return {.currency = absl::GetFlag(FLAGS_accounting_currency),
          .close_after = absl::GetFlag(FLAGS_close_month_after)};
}

// The budget notices' webhook of --budget_webhook_url and
// --budget_webhook_secret_file (the key: the file's bytes without a final
// newline).
absl::StatusOr<std::unique_ptr<trainyard::accounting::WebhookSender>>
BudgetWebhookFromFlags() {
  trainyard::accounting::WebhookOptions options;
  options.url = absl::GetFlag(FLAGS_budget_webhook_url);
  const std::string path = absl::GetFlag(FLAGS_budget_webhook_secret_file);
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budget_webhook_secret_file: cannot read ", path));
    }
    std::stringstream text;
    text << in.rdbuf();
    options.secret =
        std::string(absl::StripTrailingAsciiWhitespace(text.str()));
    if (options.secret.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budget_webhook_secret_file: ", path, " is empty"));
    }
  }
  auto sender = trainyard::accounting::WebhookSender::Create(options);
  if (!sender.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--budget_webhook_url: ", sender.status().message()));
  }
  return sender;
}

// `trainyard accounting import-spot-prices -f FILE`: every row of the CSV
// file into the price book, all or none (docs/accounting.md).
int ImportSpotPrices() {
  const std::string path = absl::GetFlag(FLAGS_f);
  if (path.empty()) {
    std::cerr << "import-spot-prices: -f FILE is required\n";
    return 2;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "import-spot-prices: cannot read " << path << "\n";
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto prices = trainyard::accounting::pricing::ParseSpotPriceCsv(text.str());
  if (!prices.ok()) {
    std::cerr << "import-spot-prices: " << path << ": "
              << prices.status().message() << "\n";
    return 1;
  }
  auto migrated =
      trainyard::storage::postgres::Migrate(absl::GetFlag(FLAGS_postgres_url));
  if (!migrated.ok()) {
    std::cerr << "import-spot-prices: " << migrated.status() << "\n";
    return 1;
  }
  auto db = trainyard::storage::postgres::Database::Open(
      {.url = absl::GetFlag(FLAGS_postgres_url), .pool_size = 1});
  if (!db.ok()) {
    std::cerr << "import-spot-prices: " << db.status() << "\n";
    return 1;
  }
  trainyard::storage::postgres::AccountingStore store(db->get());
  trainyard::storage::postgres::AccountingStore::PriceChange change;
  change.spot_prices = *std::move(prices);
  trainyard::storage::postgres::AuditRecord audit;
  audit.principal = "system:trainyard-cli";
  audit.method = "trainyard accounting import-spot-prices";
  audit.resource = path;
  audit.request_json =
      absl::StrCat("{\"rows\":", change.spot_prices.size(), "}");
  auto stored =
      store.AddPrices(change,
                      trainyard::accounting::ClosedBefore(
                          absl::Now(), absl::GetFlag(FLAGS_close_month_after)),
                      "", &audit);
  if (!stored.ok()) {
    std::cerr << "import-spot-prices: " << path << ": "
              << stored.status().message() << "\n";
    return 1;
  }
  std::cout << "imported " << change.spot_prices.size() << " spot price(s) in "
            << stored->currency() << "\n";
  return 0;
}

// `trainyard accounting reconcile --month=YYYY-MM`: the month's ledger against
// the attempts and the price book, recomputed (docs/accounting.md). Exits 0
// when they agree, 1 with the differences otherwise.
int Reconcile() {
  auto window = trainyard::accounting::MonthWindow(absl::GetFlag(FLAGS_month));
  if (!window.ok()) {
    std::cerr << "reconcile: --" << window.status().message() << "\n";
    return 2;
  }
  auto meter = MeterOptionsFromFlags();
  if (!meter.ok()) {
    std::cerr << "reconcile: " << meter.status().message() << "\n";
    return 2;
  }
  auto db = trainyard::storage::postgres::Database::Open(
      {.url = absl::GetFlag(FLAGS_postgres_url), .pool_size = 1});
  if (!db.ok()) {
    std::cerr << "reconcile: " << db.status() << "\n";
    return 1;
  }
  trainyard::storage::postgres::AccountingStore store(db->get());
  auto book = store.LoadPriceBook(meter->currency);
  if (!book.ok()) {
    std::cerr << "reconcile: " << book.status() << "\n";
    return 1;
  }
  auto result = trainyard::accounting::Reconcile(store, *book, window->first,
                                                 window->second, meter->meter);
  if (!result.ok()) {
    std::cerr << "reconcile: " << result.status() << "\n";
    return 1;
  }
  for (const std::string& d : result->differences) std::cout << d << "\n";
  std::cout << absl::StrFormat(
      "%s: %d attempts (%d not metered yet), %d lines recomputed = %d micros "
      "%s, %d ledger lines = %d micros: %d difference(s)\n",
      absl::GetFlag(FLAGS_month), result->attempts, result->unmetered,
      result->lines, result->recomputed_micros, book->currency(),
      result->ledger_lines, result->ledger_micros, result->differences.size());
  return result->ok() ? 0 : 1;
}

trainyard::scheduler::SchedulerOptions SchedulerOptionsFromFlags() {
  trainyard::scheduler::SchedulerOptions options;
  options.postgres_url = absl::GetFlag(FLAGS_postgres_url);
  options.redis_addr = absl::GetFlag(FLAGS_redis_addr);
  options.interval = absl::GetFlag(FLAGS_schedule_interval);
  options.explanation_interval = absl::GetFlag(FLAGS_explanation_interval);
  options.hot_standby = absl::GetFlag(FLAGS_hot_standby);
  options.standby_follow_interval =
      absl::GetFlag(FLAGS_standby_follow_interval);
  options.policy.hold_borrowing_for_priority =
      absl::GetFlag(FLAGS_hold_borrowing_for_priority);
  options.policy.nominal_before_borrowing =
      absl::GetFlag(FLAGS_nominal_before_borrowing);
  options.policy.preempt_for_capacity =
      absl::GetFlag(FLAGS_preempt_for_capacity);
  options.dispatcher_timeout = absl::GetFlag(FLAGS_dispatcher_timeout);
  return options;
}

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// /healthz, /readyz and /metrics on --http_listen (nullptr when it is empty)
// for the commands that run one background service.
absl::StatusOr<std::unique_ptr<trainyard::runtime::HttpServer>>
StartHealthServer(trainyard::runtime::Health& health) {
  if (absl::GetFlag(FLAGS_http_listen).empty()) return nullptr;
  auto http = std::make_unique<trainyard::runtime::HttpServer>(
      absl::GetFlag(FLAGS_http_listen));
  health.Register(*http, trainyard::runtime::DefaultMetrics());
  if (absl::Status s = http->Start(); !s.ok()) return s;
  return http;
}

// The job token keys of --job_token_key_file; without it, a random key when
// `random_if_unset` (`all`: api and dispatcher share this process), else null.
absl::StatusOr<std::shared_ptr<const trainyard::runtime::JobTokenKeys>>
JobTokenKeysFromFlags(bool random_if_unset) {
  const std::string path = absl::GetFlag(FLAGS_job_token_key_file);
  if (path.empty()) {
    if (random_if_unset) return trainyard::runtime::JobTokenKeys::Random();
    return nullptr;
  }
  auto keys = trainyard::runtime::JobTokenKeys::FromFile(path);
  if (!keys.ok()) {
    return absl::Status(
        keys.status().code(),
        absl::StrCat("--job_token_key_file: ", keys.status().message()));
  }
  return keys;
}

// --api_advertise_addr, or for `all` (default_to_listen) --grpc_listen with a
// wildcard host replaced by this host's name.
std::string ApiAdvertiseAddr(bool default_to_listen) {
  std::string addr = absl::GetFlag(FLAGS_api_advertise_addr);
  if (!addr.empty() || !default_to_listen) return addr;
  addr = absl::GetFlag(FLAGS_grpc_listen);
  for (std::string_view wildcard : {"0.0.0.0:", "[::]:", ":"}) {
    if (addr.starts_with(wildcard)) {
      char host[256] = {};
      if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
        std::strcpy(host, "localhost");
      }
      return absl::StrCat(host, ":", addr.substr(wildcard.size()));
    }
  }
  return addr;
}

// What the dispatcher gives every attempt to call the api with.
struct ApiAccess {
  std::string addr;
  std::shared_ptr<const trainyard::runtime::JobTokenKeys> keys;
};

// A dispatcher with its backend's adapter, which it owns.
struct BackendDispatcher {
  std::unique_ptr<trainyard::dispatcher::Adapter> adapter;
  std::unique_ptr<trainyard::dispatcher::Dispatcher> dispatcher;
  // BackendAdapter::companion; declared last so it goes first.
  std::shared_ptr<void> companion;
};

// Starts the dispatcher of `cluster` driving `adapter` (with the flags
// database, Redis and pass interval).
absl::StatusOr<BackendDispatcher> StartDispatcher(
    std::unique_ptr<trainyard::dispatcher::Adapter> adapter,
    const std::string& cluster, const std::string& backend,
    const ApiAccess& api) {
  BackendDispatcher out;
  out.adapter = std::move(adapter);
  // Fault injection for crash tests (DispatcherOptions,
  // docs/dispatcher.md "Crash safety"); unset: off.
  int fault_kill_after_launches = 0;
  if (const char* env = std::getenv("TRAINYARD_FAULT_KILL_AFTER_LAUNCHES");
      env != nullptr && *env != '\0') {
    if (!absl::SimpleAtoi(env, &fault_kill_after_launches) ||
        fault_kill_after_launches < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TRAINYARD_FAULT_KILL_AFTER_LAUNCHES: not a count: ", env));
    }
    if (fault_kill_after_launches > 0) {
      Log(LogLevel::kWarning,
          "fault injection: the dispatcher kills itself after this many "
          "launches, before recording the last",
          {{"TRAINYARD_FAULT_KILL_AFTER_LAUNCHES", fault_kill_after_launches}});
    }
  }
  auto dispatcher = trainyard::dispatcher::Dispatcher::Create(
      {.postgres_url = absl::GetFlag(FLAGS_postgres_url),
       .redis_addr = absl::GetFlag(FLAGS_redis_addr),
       .cluster = cluster,
       .interval = absl::GetFlag(FLAGS_dispatch_interval),
       .api_advertise_addr = api.addr,
       .job_tokens = api.keys,
       .job_token_ttl = absl::GetFlag(FLAGS_job_token_ttl),
       .job_token_margin = absl::GetFlag(FLAGS_job_token_margin),
       .log_tail_bytes = absl::GetFlag(FLAGS_log_tail_bytes),
       .log_interval = absl::GetFlag(FLAGS_log_interval),
       .fault_kill_after_launches = fault_kill_after_launches},
      out.adapter.get());
  if (!dispatcher.ok()) return dispatcher.status();
  out.dispatcher = std::move(*dispatcher);
  out.dispatcher->Start();
  Log(LogLevel::kInfo, "dispatcher started",
      {{"cluster", cluster},
       {"backend", backend},
       {"api_advertise_addr", api.addr.empty() ? "(none)" : api.addr},
       {"job_tokens", api.keys == nullptr
                          ? std::string("off")
                          : absl::StrCat("key ", api.keys->signing_key_id())}});
  if (api.addr.empty() || api.keys == nullptr) {
    Log(LogLevel::kWarning,
        "attempts get no TRAINYARD_ADDR or TRAINYARD_TOKEN: their workers "
        "cannot report checkpoints (set --api_advertise_addr and "
        "--job_token_key_file)");
  }
  return out;
}

// The dispatcher backend `--backend` names (the default when it is empty), and
// its settings: the current values of the flags it reads.
struct Backend {
  std::string name;
  trainyard::dispatcher::AdapterFactory factory;
  trainyard::dispatcher::AdapterSettings settings;
};

// INVALID_ARGUMENT naming the known backends when `--backend` is not one.
absl::StatusOr<Backend> SelectedBackend() {
  Backend backend{.name = absl::GetFlag(FLAGS_backend)};
  if (backend.name.empty())
    backend.name = trainyard::dispatcher::kDefaultAdapter;
  auto factory = trainyard::dispatcher::FindAdapterFactory(backend.name);
  if (!factory.ok()) return factory.status();
  backend.factory = *std::move(factory);
  for (const std::string& flag : backend.factory.flags) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(flag);
    if (f == nullptr) {
      return absl::InternalError(absl::StrCat(
          "backend \"", backend.name, "\" reads an undefined flag --", flag));
    }
    backend.settings.values[flag] = f->CurrentValue();
  }
  return backend;
}

// The backend's usage check; without --backend its message also points to
// the other backends.
absl::Status CheckBackend(const Backend& backend) {
  if (!backend.factory.check) return absl::OkStatus();
  absl::Status s = backend.factory.check(backend.settings);
  if (s.ok() || !absl::GetFlag(FLAGS_backend).empty()) return s;
  return absl::Status(
      s.code(),
      absl::StrCat(s.message(), ", or choose a backend with --backend (",
                   absl::StrJoin(trainyard::dispatcher::AdapterNames(), ", "),
                   "; see --help)"));
}

// Whether `trainyard all` runs a dispatcher of the backend (sim: given
// --sim_config; slurm: always).
bool RunsInAll(const Backend& backend) {
  return !backend.factory.runs_in_all ||
         backend.factory.runs_in_all(backend.settings);
}

// Starts the dispatcher of the backend (INVALID_ARGUMENT naming the flag when
// its settings are missing).
absl::StatusOr<BackendDispatcher> StartBackendDispatcher(const Backend& backend,
                                                         const ApiAccess& api) {
  auto created =
      trainyard::dispatcher::CreateAdapter(backend.name, backend.settings);
  if (!created.ok()) return created.status();
  absl::StatusOr<BackendDispatcher> started = StartDispatcher(
      std::move(created->adapter), created->cluster, created->label, api);
  if (started.ok()) started->companion = std::move(created->companion);
  return started;
}

// `trainyard sim-cluster`: the cluster `--sim_config` describes, on the real
// clock, served over gRPC (SimClusterService) on --grpc_listen, with /healthz,
// /readyz and /metrics on --http_listen.
int ServeSimCluster() {
  sigset_t signals = BlockStopSignals();
  if (absl::GetFlag(FLAGS_sim_config).empty()) {
    std::cerr << "sim-cluster: --sim_config=FILE is required\n";
    return 2;
  }
  auto config = trainyard::dispatcher::sim::LoadSimConfig(
      absl::GetFlag(FLAGS_sim_config));
  if (!config.ok()) {
    std::cerr << "sim-cluster: " << config.status() << "\n";
    return 2;
  }
  auto sim = trainyard::dispatcher::sim::SimAdapter::Create(
      *config, &trainyard::dispatcher::RealClock::Get());
  if (!sim.ok()) {
    std::cerr << "sim-cluster: " << sim.status() << "\n";
    return 2;
  }
  std::unique_ptr<grpc::Service> service =
      trainyard::dispatcher::sim::NewSimClusterServer(sim->get());
  trainyard::runtime::GrpcServerRunner server(
      {.listen_address = absl::GetFlag(FLAGS_grpc_listen)});
  server.AddService(service.get());
  if (absl::Status s = server.Start(); !s.ok()) {
    Log(LogLevel::kError, "sim-cluster: gRPC failed to start", {{"error", s}});
    return 1;
  }
  trainyard::runtime::Health health;
  absl::StatusOr<std::unique_ptr<trainyard::runtime::HttpServer>> http =
      StartHealthServer(health);
  if (!http.ok()) {
    Log(LogLevel::kError, "sim-cluster: http failed to start",
        {{"error", http.status()}});
    return 1;
  }
  Log(LogLevel::kInfo, "sim cluster serving",
      {{"cluster", config->cluster()}, {"port", server.port()}});
  int sig = 0;
  sigwait(&signals, &sig);
  Log(LogLevel::kInfo, "shutting down", {{"signal", sig}});
  server.Shutdown();
  if (*http) (*http)->Stop();
  return 0;
}

// `trainyard sim-fault KIND TARGET [EXIT_CODE]`: injects a fault into the sim
// cluster at --sim_target (a `trainyard sim-cluster`, or the in-process sim of
// a `trainyard all --sim_grpc_listen`), as docs/sim.md describes.
int SimFault(const std::vector<char*>& args) {
  using Kind = trainyard::v1::InjectSimFaultRequest;
  static const std::map<std::string, Kind::Kind, std::less<>> kKinds = {
      {"fail-node", Kind::FAIL_NODE},
      {"reclaim-node", Kind::RECLAIM_NODE},
      {"reclaim-pool", Kind::RECLAIM_POOL},
      {"recover-node", Kind::RECOVER_NODE},
      {"cordon-node", Kind::CORDON_NODE},
      {"uncordon-node", Kind::UNCORDON_NODE},
      {"crash-attempt", Kind::CRASH_ATTEMPT}};
  const std::string target = absl::GetFlag(FLAGS_sim_target);
  auto kind =
      args.size() >= 4 ? kKinds.find(std::string_view(args[2])) : kKinds.end();
  int exit_code = 0;
  if (target.empty() || kind == kKinds.end() || args.size() > 5 ||
      (args.size() == 5 && !absl::SimpleAtoi(args[4], &exit_code))) {
    std::cerr << "usage: trainyard sim-fault --sim_target=HOST:PORT KIND "
                 "TARGET [EXIT_CODE]\n  KIND: "
              << absl::StrJoin(kKinds, " | ",
                               [](std::string* out, const auto& k) {
                                 out->append(k.first);
                               })
              << "\n";
    return 2;
  }
  trainyard::dispatcher::sim::SimClusterClient client({.target = target});
  if (absl::Status s = client.InjectFault(kind->second, args[3], exit_code);
      !s.ok()) {
    std::cerr << "sim-fault: " << s << "\n";
    return 1;
  }
  std::cout << "sim-fault: " << kind->first << " " << args[3] << "\n";
  return 0;
}

// Applies the migrations, waiting up to --database_wait for PostgreSQL to
// accept connections (each failed try is logged as a warning).
absl::StatusOr<trainyard::storage::postgres::MigrateResult>
MigrateWhenReachable(std::string_view component) {
  return trainyard::storage::postgres::MigrateWhenReachable(
      absl::GetFlag(FLAGS_postgres_url), absl::GetFlag(FLAGS_database_wait),
      [component](const absl::Status& s) {
        Log(LogLevel::kWarning,
            absl::StrCat(std::string(component),
                         ": database not reachable, trying again"),
            {{"error", s}});
      });
}

// `trainyard dispatcher`: one cluster's dispatcher, with /metrics, /healthz,
// /readyz.
int ServeDispatcher() {
  sigset_t signals = BlockStopSignals();
  absl::StatusOr<Backend> backend = SelectedBackend();
  absl::Status usage = backend.ok() ? CheckBackend(*backend) : backend.status();
  if (!usage.ok()) {
    std::cerr << "dispatcher: " << usage.message() << "\n";
    return 2;
  }
  auto migrated = MigrateWhenReachable("dispatcher");
  if (!migrated.ok()) {
    Log(LogLevel::kError, "dispatcher: migrations failed",
        {{"error", migrated.status()}});
    return 1;
  }
  auto keys = JobTokenKeysFromFlags(/*random_if_unset=*/false);
  if (!keys.ok()) {
    Log(LogLevel::kError, "dispatcher failed to start",
        {{"error", keys.status()}});
    return 1;
  }
  absl::StatusOr<BackendDispatcher> sim = StartBackendDispatcher(
      *backend,
      {.addr = ApiAdvertiseAddr(/*default_to_listen=*/false), .keys = *keys});
  if (!sim.ok()) {
    Log(LogLevel::kError, "dispatcher failed to start",
        {{"error", sim.status()}});
    return 1;
  }
  trainyard::runtime::Health health;
  absl::StatusOr<std::unique_ptr<trainyard::runtime::HttpServer>> http =
      StartHealthServer(health);
  if (!http.ok()) {
    Log(LogLevel::kError, "dispatcher: http failed to start",
        {{"error", http.status()}});
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  Log(LogLevel::kInfo, "shutting down", {{"signal", sig}});
  sim->dispatcher->Shutdown();
  if (*http) (*http)->Stop();
  return 0;
}

// `trainyard scheduler`: the scheduler alone, with /metrics, /healthz, /readyz.
int ServeScheduler() {
  sigset_t signals = BlockStopSignals();
  auto migrated = MigrateWhenReachable("scheduler");
  if (!migrated.ok()) {
    Log(LogLevel::kError, "scheduler: migrations failed",
        {{"error", migrated.status()}});
    return 1;
  }
  auto scheduler = trainyard::scheduler::SchedulerService::Create(
      SchedulerOptionsFromFlags());
  if (!scheduler.ok()) {
    Log(LogLevel::kError, "scheduler failed to start",
        {{"error", scheduler.status()}});
    return 1;
  }
  trainyard::runtime::Health health;
  absl::StatusOr<std::unique_ptr<trainyard::runtime::HttpServer>> http =
      StartHealthServer(health);
  if (!http.ok()) {
    Log(LogLevel::kError, "scheduler: http failed to start",
        {{"error", http.status()}});
    return 1;
  }
  trainyard::runtime::DefaultMetrics().AddCollector(
      [s = scheduler->get()](trainyard::runtime::MetricsRegistry& m) {
        m.GetGauge("trainyard_scheduler_leader",
                   "1 while this process is the leader.")
            .Set(s->is_leader() ? 1 : 0);
      });
  (*scheduler)->Start();
  Log(LogLevel::kInfo, "scheduler started",
      {{"http", *http ? absl::StrCat("127.0.0.1:", (*http)->port()) : "off"}});
  int sig = 0;
  sigwait(&signals, &sig);
  Log(LogLevel::kInfo, "shutting down", {{"signal", sig}});
  (*scheduler)->Shutdown();
  if (*http) (*http)->Stop();
  return 0;
}

// The REST/JSON gateway over the api at `target` (`ca_pem`: verify its TLS;
// empty: plaintext), from the --gateway_* flags. `listen` empty: the gateway's
// default address.
absl::StatusOr<std::unique_ptr<trainyard::gateway::Gateway>> StartGateway(
    const std::string& listen, const std::string& target,
    const std::string& ca_pem) {
  trainyard::gateway::GatewayOptions options;
  options.listen_address = listen.empty() ? "127.0.0.1:8090" : listen;
  std::shared_ptr<grpc::ChannelCredentials> creds =
      ca_pem.empty() ? grpc::InsecureChannelCredentials()
                     : grpc::SslCredentials({.pem_root_certs = ca_pem});
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  options.channel = grpc::CreateCustomChannel(target, creds, args);
  options.console_dir = absl::GetFlag(FLAGS_console_dir);
  for (absl::string_view o :
       absl::StrSplit(absl::GetFlag(FLAGS_gateway_cors_origins), ',',
                      absl::SkipWhitespace())) {
    options.cors_origins.emplace_back(absl::StripAsciiWhitespace(o));
  }
  options.http.threads = absl::GetFlag(FLAGS_gateway_threads);
  options.http.max_body_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_gateway_max_body));
  options.http.tls_cert_file = absl::GetFlag(FLAGS_gateway_tls_cert);
  options.http.tls_key_file = absl::GetFlag(FLAGS_gateway_tls_key);
  options.max_streams = absl::GetFlag(FLAGS_gateway_max_streams);
  if (options.max_streams < 1 || options.max_streams >= options.http.threads ||
      absl::GetFlag(FLAGS_gateway_max_body) < 1) {
    return absl::InvalidArgumentError(
        "--gateway_max_streams must be at least 1 and below --gateway_threads, "
        "and "
        "--gateway_max_body positive");
  }
  auto gateway = trainyard::gateway::Gateway::Start(std::move(options));
  if (!gateway.ok()) return gateway.status();
  Log(LogLevel::kInfo, "gateway serving",
      {{"url",
        absl::StrCat(
            absl::GetFlag(FLAGS_gateway_tls_cert).empty() ? "http" : "https",
            "://127.0.0.1:", (*gateway)->port(), "/")},
       {"api", target},
       {"console", absl::GetFlag(FLAGS_console_dir).empty()
                       ? "off"
                       : absl::GetFlag(FLAGS_console_dir)}});
  return gateway;
}

absl::StatusOr<std::string> ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `trainyard gateway`: the REST/JSON gateway and console over the api at
// --target.
int ServeGateway() {
  sigset_t signals = BlockStopSignals();
  std::string ca;
  if (!absl::GetFlag(FLAGS_target_ca).empty()) {
    auto text = ReadFileText(absl::GetFlag(FLAGS_target_ca));
    if (!text.ok()) {
      std::cerr << "gateway: --target_ca: " << text.status().message() << "\n";
      return 2;
    }
    ca = *text;
  }
  auto gateway = StartGateway(absl::GetFlag(FLAGS_gateway_listen),
                              absl::GetFlag(FLAGS_target), ca);
  if (!gateway.ok()) {
    Log(LogLevel::kError, "gateway failed to start",
        {{"error", gateway.status()}});
    return gateway.status().code() == absl::StatusCode::kInvalidArgument ? 2
                                                                         : 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  Log(LogLevel::kInfo, "shutting down", {{"signal", sig}});
  (*gateway)->Stop();
  return 0;
}

enum class ServeMode { kApi, kAccounting, kAll };

int Serve(ServeMode mode) {
  const bool with_scheduler = mode == ServeMode::kAll;
  // The api serves AccountingService too (price book, usage, reports: reads
  // and writes of PostgreSQL); the meter runs in `accounting` and `all`.
  const bool with_meter = mode != ServeMode::kApi;
  const char* name = mode == ServeMode::kAccounting ? "accounting" : "api";
  // SIGINT/SIGTERM end the process cleanly; block them before threads start so
  // that only the waiter below receives them.
  sigset_t signals = BlockStopSignals();
  // `all` runs a dispatcher when its backend's settings ask for one.
  std::optional<Backend> backend;
  if (with_scheduler) {
    absl::StatusOr<Backend> selected = SelectedBackend();
    if (!selected.ok()) {
      std::cerr << "all: " << selected.status().message() << "\n";
      return 2;
    }
    if (RunsInAll(*selected)) backend = *std::move(selected);
  }

  trainyard::api::ApiServerOptions options;
  options.grpc_listen = absl::GetFlag(FLAGS_grpc_listen);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  options.postgres_url = absl::GetFlag(FLAGS_postgres_url);
  options.redis_addr = absl::GetFlag(FLAGS_redis_addr);
  options.db_pool_size = absl::GetFlag(FLAGS_db_pool_size);
  options.database_wait = absl::GetFlag(FLAGS_database_wait);
  options.default_submit_rate = absl::GetFlag(FLAGS_default_submit_rate);
  options.default_submit_burst = absl::GetFlag(FLAGS_default_submit_burst);
  options.submit_committers = absl::GetFlag(FLAGS_submit_committers);
  options.submit_batch = absl::GetFlag(FLAGS_submit_batch);
  // `all` shares one key between its api and its dispatcher when no key file
  // is given; `api` alone then refuses job tokens.
  auto keys = JobTokenKeysFromFlags(/*random_if_unset=*/with_scheduler);
  if (!keys.ok()) {
    Log(LogLevel::kError, "api failed to start", {{"error", keys.status()}});
    return 1;
  }
  options.job_tokens = *keys;
  options.serve_core = mode != ServeMode::kAccounting;
  options.log_name = name;
  // Declared first, destroyed last: the meter's notify hook points at it.
  std::unique_ptr<trainyard::accounting::WebhookSender> webhook;
  std::unique_ptr<trainyard::accounting::MeterService> meter;
  options.more_services.push_back([accounting = AccountingOptionsFromFlags()](
                                      trainyard::api::ApiContext* ctx) {
    return trainyard::accounting::NewAccountingService(ctx, accounting);
  });
  if (with_meter) {
    auto meter_options = MeterOptionsFromFlags();
    if (!meter_options.ok()) {
      std::cerr << name << ": " << meter_options.status().message() << "\n";
      return 2;
    }
    if (!absl::GetFlag(FLAGS_budget_webhook_url).empty()) {
      auto sender = BudgetWebhookFromFlags();
      if (!sender.ok()) {
        std::cerr << name << ": " << sender.status().message() << "\n";
        return 2;
      }
      webhook = *std::move(sender);
      meter_options->notify = [w = webhook.get()](const std::string& type,
                                                  const std::string& json) {
        absl::StatusOr<std::string> id = w->Enqueue(type, json);
        if (!id.ok()) {
          Log(LogLevel::kWarning, "budget webhook: not queued",
              {{"error", id.status()}});
        }
      };
    }
    auto created =
        trainyard::accounting::MeterService::Create(*std::move(meter_options));
    if (!created.ok()) {
      Log(LogLevel::kError, "meter failed to start",
          {{"error", created.status()}});
      return 1;
    }
    meter = *std::move(created);
  }
  auto server = trainyard::api::ApiServer::Start(options);
  if (!server.ok()) {
    Log(LogLevel::kError, absl::StrCat(name, " failed to start"),
        {{"error", server.status()}});
    return 1;
  }
  if (meter) {
    trainyard::runtime::DefaultMetrics().AddCollector(
        [m = meter.get()](trainyard::runtime::MetricsRegistry& r) {
          r.GetGauge("trainyard_meter_leader",
                     "1 while this process is the meter's leader.")
              .Set(m->is_leader() ? 1 : 0);
          r.GetGauge("trainyard_meter_passes",
                     "Metering passes this process completed.")
              .Set(static_cast<double>(m->passes()));
        });
    meter->Start();
  }
  // `all` also runs the scheduler (the api has applied the migrations).
  std::unique_ptr<trainyard::scheduler::SchedulerService> scheduler;
  if (with_scheduler) {
    auto created = trainyard::scheduler::SchedulerService::Create(
        SchedulerOptionsFromFlags());
    if (!created.ok()) {
      Log(LogLevel::kError, "scheduler failed to start",
          {{"error", created.status()}});
      if (meter) meter->Shutdown();
      (*server)->Shutdown(absl::Seconds(1));
      return 1;
    }
    scheduler = std::move(*created);
    scheduler->Start();
  }
  // ... and, when its backend asks for one (sim: --sim_config; slurm:
  // --backend=slurm), a dispatcher for that cluster.
  std::optional<BackendDispatcher> sim;
  if (backend.has_value()) {
    absl::StatusOr<BackendDispatcher> started = StartBackendDispatcher(
        *backend,
        {.addr = ApiAdvertiseAddr(/*default_to_listen=*/true), .keys = *keys});
    if (!started.ok()) {
      Log(LogLevel::kError, "dispatcher failed to start",
          {{"error", started.status()}});
      if (scheduler) scheduler->Shutdown();
      if (meter) meter->Shutdown();
      (*server)->Shutdown(absl::Seconds(1));
      return 1;
    }
    sim = std::move(*started);
  }
  // ... and, with --gateway_listen, the REST/JSON gateway and console over this
  // api.
  std::unique_ptr<trainyard::gateway::Gateway> gateway;
  if (with_scheduler && !absl::GetFlag(FLAGS_gateway_listen).empty()) {
    std::string ca;
    if (!options.tls_cert_file.empty())
      ca = ReadFileText(options.tls_cert_file).value_or("");
    auto started =
        StartGateway(absl::GetFlag(FLAGS_gateway_listen),
                     absl::StrCat("127.0.0.1:", (*server)->grpc_port()), ca);
    if (!started.ok()) {
      Log(LogLevel::kError, "gateway failed to start",
          {{"error", started.status()}});
      if (sim.has_value()) sim->dispatcher->Shutdown();
      if (scheduler) scheduler->Shutdown();
      if (meter) meter->Shutdown();
      (*server)->Shutdown(absl::Seconds(1));
      return started.status().code() == absl::StatusCode::kInvalidArgument ? 2
                                                                           : 1;
    }
    gateway = *std::move(started);
  }
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    Log(LogLevel::kInfo, "shutting down", {{"signal", sig}});
    if (gateway) gateway->Stop();
    if (sim.has_value()) sim->dispatcher->Shutdown();
    if (scheduler) scheduler->Shutdown();
    if (meter) meter->Shutdown();
    (*server)->Shutdown(absl::Seconds(5));
  });
  (*server)->Wait();
  waiter.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // First: it may execute the program again (malloc_tuning.h).
  trainyard::runtime::UseHugePageMalloc(argv);
  if (absl::Status s = trainyard::dispatcher::RegisterBuiltinAdapters();
      !s.ok()) {
    std::cerr << "dispatcher backends: " << s << "\n";
    return 1;
  }
  const std::string usage = Usage();
  absl::SetProgramUsageMessage(usage);
  // Debian's Abseil is built with mutex deadlock detection on, which updates a
  // global lock graph on every acquisition; production servers do not pay for
  // that.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<char*> args =
      trainyard::runtime::ParseFlagsWithConfig(argc, argv);
  auto level =
      trainyard::runtime::ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) {
    std::cerr << "--log_level: " << level.status().message() << "\n";
    return 2;
  }
  trainyard::runtime::SetMinLogLevel(*level);
  if (args.size() < 2) {
    std::cerr << usage;
    return 2;
  }
  const std::string command = args[1];
  trainyard::runtime::SetLogComponent(command);
  if (command == "version") {
    std::cout << "trainyard " << TRAINYARD_VERSION << "\n";
    return 0;
  }
  if (command == "migrate") return Migrate();
  if (command == "api") return Serve(ServeMode::kApi);
  if (command == "all") return Serve(ServeMode::kAll);
  if (command == "gateway") return ServeGateway();
  if (command == "accounting") {
    if (args.size() >= 3 && std::string(args[2]) == "import-spot-prices")
      return ImportSpotPrices();
    if (args.size() >= 3 && std::string(args[2]) == "reconcile")
      return Reconcile();
    if (args.size() >= 3) {
      std::cerr << "usage: trainyard accounting [import-spot-prices -f FILE | "
                   "reconcile --month=YYYY-MM]\n";
      return 2;
    }
    return Serve(ServeMode::kAccounting);
  }
  if (command == "scheduler") return ServeScheduler();
  if (command == "dispatcher") return ServeDispatcher();
  if (command == "sim-cluster") return ServeSimCluster();
  if (command == "sim-fault") return SimFault(args);
  if (command == "token") {
    if (args.size() >= 3 && std::string(args[2]) == "create")
      return TokenCreate();
    std::cerr << "usage: trainyard token create --principal=users/NAME "
                 "--role=ROLE ...\n";
    return 2;
  }
  if (command == "apply") {
    std::string token = absl::GetFlag(FLAGS_token);
    if (token.empty()) {
      if (const char* env = std::getenv("TRAINYARD_TOKEN")) token = env;
    }
    if (absl::GetFlag(FLAGS_f).empty()) {
      std::cerr << "apply: -f FILE is required\n";
      return 2;
    }
    return trainyard::RunApply(absl::GetFlag(FLAGS_f),
                               absl::GetFlag(FLAGS_target), token);
  }
  std::cerr << "unknown command \"" << command << "\"\n" << usage;
  return 2;
}
