#include "services/api/server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "services/api/events.h"
#include "services/api/services.h"
#include "services/api/submit_batcher.h"
#include "services/lib/runtime/grpc_server.h"
#include "services/lib/runtime/health.h"
#include "services/lib/runtime/http_server.h"
#include "services/lib/runtime/logging.h"
#include "services/lib/runtime/metrics.h"
#include "storage/postgres/migrate.h"
#include "storage/redis/tenant_rate_limiter.h"

namespace trainyard::api {

using runtime::Log;
using runtime::LogLevel;

struct ApiServer::Impl {
  ApiServerOptions options;
  std::unique_ptr<storage::postgres::Database> db;
  std::unique_ptr<storage::postgres::ObjectStore> objects;
  std::unique_ptr<storage::postgres::JobStore> jobs;
  std::unique_ptr<storage::postgres::AuthStore> auth_store;
  std::unique_ptr<storage::redis::RedisClient> redis;
  std::unique_ptr<storage::redis::TenantRateLimiter> rate_limiter;
  std::unique_ptr<Authenticator> auth;
  std::unique_ptr<Directory> directory;
  std::unique_ptr<SubmitBatcher> batcher;
  std::unique_ptr<EventRelay> relay;
  std::unique_ptr<EventHub> hub;
  ApiContext ctx;
  std::unique_ptr<grpc::Service> job_service;
  std::unique_ptr<grpc::Service> queue_service;
  std::unique_ptr<grpc::Service> cluster_service;
  std::unique_ptr<grpc::Service> admin_service;
  std::vector<std::unique_ptr<grpc::Service>> more_services;
  std::unique_ptr<runtime::GrpcServerRunner> grpc;
  runtime::Health health;
  std::unique_ptr<runtime::HttpServer> http;
  bool shut_down = false;
};

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ApiServer::~ApiServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(
    const ApiServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.migrate) {
    absl::StatusOr<storage::postgres::MigrateResult> m =
        storage::postgres::MigrateWhenReachable(
            options.postgres_url, options.database_wait,
            [](const absl::Status& s) {
              Log(LogLevel::kWarning,
                  "api: database not reachable, trying again", {{"error", s}});
            });
    if (!m.ok()) {
      return absl::Status(
          m.status().code(),
          absl::StrCat("migrating the database: ", m.status().message()));
    }
    if (!m->applied.empty()) {
      Log(LogLevel::kInfo, "applied migrations",
          {{"count", static_cast<int64_t>(m->applied.size())},
           {"version", static_cast<int64_t>(m->current_version)}});
    }
  }
  absl::StatusOr<std::unique_ptr<storage::postgres::Database>> db =
      storage::postgres::Database::Open(
          {.url = options.postgres_url, .pool_size = options.db_pool_size});
  if (!db.ok()) return db.status();
  impl->db = *std::move(db);
  impl->objects =
      std::make_unique<storage::postgres::ObjectStore>(impl->db.get());
  impl->jobs = std::make_unique<storage::postgres::JobStore>(impl->db.get());
  impl->auth_store =
      std::make_unique<storage::postgres::AuthStore>(impl->db.get());

  absl::StatusOr<storage::redis::RedisOptions> redis_options =
      storage::redis::ParseRedisAddress(options.redis_addr);
  if (!redis_options.ok()) return redis_options.status();
  impl->redis = std::make_unique<storage::redis::RedisClient>(*redis_options);
  if (absl::Status s = impl->redis->Ping(); !s.ok()) {
    Log(LogLevel::kWarning,
        "redis unavailable at start; running without live push",
        {{"redis", options.redis_addr}, {"error", s}});
  }
  impl->rate_limiter = std::make_unique<storage::redis::TenantRateLimiter>(
      impl->redis.get(), options.default_submit_rate,
      options.default_submit_burst);
  impl->auth = std::make_unique<Authenticator>(
      impl->auth_store.get(), options.cache_ttl, options.job_tokens);
  impl->directory =
      std::make_unique<Directory>(impl->objects.get(), options.cache_ttl);
  storage::redis::RedisClient* redis = impl->redis.get();
  impl->batcher = std::make_unique<SubmitBatcher>(
      impl->jobs.get(),
      SubmitBatcher::Options{.max_batch = options.submit_batch,
                             .committers = options.submit_committers},
      [redis](size_t) { (void)redis->Notify(kSchedulerWakeup, "submit"); });
  impl->relay =
      std::make_unique<EventRelay>(impl->db.get(), impl->jobs.get(), redis);
  impl->hub = std::make_unique<EventHub>(*redis_options, impl->jobs.get());

  ApiContext& ctx = impl->ctx;
  ctx.db = impl->db.get();
  ctx.objects = impl->objects.get();
  ctx.jobs = impl->jobs.get();
  ctx.auth_store = impl->auth_store.get();
  ctx.redis = redis;
  ctx.rate_limiter = impl->rate_limiter.get();
  ctx.auth = impl->auth.get();
  ctx.directory = impl->directory.get();
  ctx.batcher = impl->batcher.get();
  ctx.hub = impl->hub.get();

  if (options.serve_core) {
    impl->job_service = NewJobService(&ctx);
    impl->queue_service = NewQueueService(&ctx);
    impl->cluster_service = NewClusterService(&ctx);
    impl->admin_service = NewAdminService(&ctx);
    impl->relay->Start();
    impl->hub->Start();
  }
  for (const auto& make : options.more_services) {
    impl->more_services.push_back(make(&ctx));
  }

  impl->grpc = std::make_unique<runtime::GrpcServerRunner>(
      runtime::GrpcServerOptions{.listen_address = options.grpc_listen,
                                 .tls_cert_file = options.tls_cert_file,
                                 .tls_key_file = options.tls_key_file});
  if (options.serve_core) {
    impl->grpc->AddService(impl->job_service.get());
    impl->grpc->AddService(impl->queue_service.get());
    impl->grpc->AddService(impl->cluster_service.get());
    impl->grpc->AddService(impl->admin_service.get());
  }
  for (const auto& service : impl->more_services) {
    impl->grpc->AddService(service.get());
  }
  if (absl::Status s = impl->grpc->Start(); !s.ok()) return s;

  storage::postgres::Database* database = impl->db.get();
  impl->health.AddReadinessCheck("postgres",
                                 [database] { return database->Ping(); });
  runtime::MetricsRegistry& metrics = runtime::DefaultMetrics();
  runtime::Gauge& redis_up = metrics.GetGauge(
      "trainyard_redis_up", "Whether Redis answered the last ping (1) or not.");
  runtime::Gauge& relayed = metrics.GetGauge(
      "trainyard_events_relayed",
      "Job events this process relayed from the outbox to Redis.");
  EventRelay* relay = impl->relay.get();
  metrics.AddCollector(
      [redis, relay, &redis_up, &relayed](runtime::MetricsRegistry&) {
        redis_up.Set(redis->Ping().ok() ? 1 : 0);
        relayed.Set(static_cast<double>(relay->published()));
      });
  if (!options.http_listen.empty()) {
    impl->http = std::make_unique<runtime::HttpServer>(options.http_listen);
    impl->health.Register(*impl->http, metrics);
    if (absl::Status s = impl->http->Start(); !s.ok()) return s;
  }
  Log(LogLevel::kInfo, absl::StrCat(options.log_name, " serving"),
      {{"grpc", absl::StrCat("127.0.0.1:", impl->grpc->port())},
       {"http",
        impl->http ? absl::StrCat("127.0.0.1:", impl->http->port()) : "off"}});
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

int ApiServer::grpc_port() const { return impl_->grpc->port(); }

int ApiServer::http_port() const {
  return impl_->http ? impl_->http->port() : 0;
}

ApiContext* ApiServer::context() { return &impl_->ctx; }

void ApiServer::Shutdown(absl::Duration grace) {
  if (impl_ == nullptr || impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->health.SetLive(false);
  // Watch streams end when the hub stops waking them and the server cancels
  // them.
  impl_->hub->Stop();
  impl_->grpc->Shutdown(grace);
  impl_->relay->Stop();
  if (impl_->http) impl_->http->Stop();
  impl_->batcher.reset();
}

void ApiServer::Wait() { impl_->grpc->Wait(); }

}  // namespace trainyard::api
