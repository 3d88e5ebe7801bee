#include "tests/integration/api_test_harness.h"

#include <grpcpp/generic/generic_stub.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/accounting/accounting_service.h"
#include "services/api/auth.h"
#include "storage/postgres/auth_store.h"
#include "storage/postgres/pool.h"
#include "storage/redis/redis_client.h"
#include "storage/redis/redis_options.h"
#include "trainyard/v1/common.pb.h"

namespace trainyard::testing {

absl::StatusOr<std::unique_ptr<ApiHarness>> ApiHarness::Start(Options options) {
  std::unique_ptr<ApiHarness> h(new ApiHarness());
  if (options.private_redis) {
    absl::StatusOr<std::unique_ptr<LocalRedis>> redis = LocalRedis::Start();
    if (!redis.ok()) return redis.status();
    h->own_redis_ = *std::move(redis);
    h->redis_ = h->own_redis_.get();
  } else {
    h->redis_ = SharedRedis();
    // Each test gets a fresh database, so the shared Redis must not hold an
    // earlier test's event stream (its sequence numbers would collide with this
    // database's).
    auto options_or = storage::redis::ParseRedisAddress(h->redis_->Address());
    if (!options_or.ok()) return options_or.status();
    storage::redis::RedisClient flusher(*options_or);
    if (auto flushed = flusher.Command({"FLUSHALL"}); !flushed.ok())
      return flushed.status();
  }
  absl::StatusOr<std::string> db = SharedPostgres()->CreateDatabase();
  if (!db.ok()) return db.status();
  h->database_url_ = *db;
  api::ApiServerOptions server = options.server;
  server.grpc_listen = "127.0.0.1:0";
  server.http_listen = "127.0.0.1:0";
  server.postgres_url = h->database_url_;
  server.redis_addr = h->redis_->Address();
  // The api serves AccountingService too, as `trainyard api` does.
  server.more_services.push_back([](api::ApiContext* ctx) {
    return accounting::NewAccountingService(ctx, {});
  });
  server.db_pool_size = 8;
  absl::StatusOr<std::unique_ptr<api::ApiServer>> started =
      api::ApiServer::Start(server);
  if (!started.ok()) return started.status();
  h->server_ = *std::move(started);
  h->channel_ =
      grpc::CreateChannel(h->target(), grpc::InsecureChannelCredentials());
  h->admin_token_ = h->Token("users/root", trainyard::v1::ROLE_PLATFORM_ADMIN);
  return h;
}

ApiHarness::~ApiHarness() {
  if (server_) server_->Shutdown(absl::Seconds(1));
}

std::string ApiHarness::target() const {
  return absl::StrCat("127.0.0.1:", server_->grpc_port());
}

std::string ApiHarness::Token(const std::string& principal,
                              trainyard::v1::Role role,
                              const std::string& tenant) {
  storage::postgres::AuthStore* store = server_->context()->auth_store;
  if (role != trainyard::v1::ROLE_UNSPECIFIED) {
    trainyard::v1::RoleBinding binding;
    binding.set_principal(principal);
    binding.set_role(role);
    binding.set_tenant(tenant);
    auto created = store->CreateRoleBinding(binding, "test", nullptr);
    if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
      ADD_FAILURE() << "role binding: " << created.status();
    }
    server_->context()->auth->InvalidateAll();
  }
  api::NewToken token = api::GenerateToken();
  auto stored =
      store->CreateToken(token.id, principal, token.hash, "test", "test",
                         absl::Now() + absl::Hours(1), nullptr);
  if (!stored.ok()) ADD_FAILURE() << "token: " << stored.status();
  return token.secret;
}

std::unique_ptr<grpc::ClientContext> ApiHarness::Context(
    const std::string& token) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(30));
  return context;
}

std::unique_ptr<trainyard::v1::JobService::Stub> ApiHarness::jobs() {
  return trainyard::v1::JobService::NewStub(channel_);
}
std::unique_ptr<trainyard::v1::QueueService::Stub> ApiHarness::queues() {
  return trainyard::v1::QueueService::NewStub(channel_);
}
std::unique_ptr<trainyard::v1::ClusterService::Stub> ApiHarness::clusters() {
  return trainyard::v1::ClusterService::NewStub(channel_);
}
std::unique_ptr<trainyard::v1::AdminService::Stub> ApiHarness::admin() {
  return trainyard::v1::AdminService::NewStub(channel_);
}

namespace {

absl::Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok() || s.error_code() == grpc::StatusCode::ALREADY_EXISTS)
    return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(std::string(what), ": ", s.error_message()));
}

}  // namespace

absl::Status ApiHarness::SeedPriorityPreemption(const std::string& tenant) {
  auto q = queues();
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, int>>{{"low", 10}, {"high", 100}}) {
    trainyard::v1::CreatePriorityClassRequest req;
    req.set_priority_class_id(name);
    req.mutable_priority_class()->set_value(value);
    req.mutable_priority_class()->set_preemptible(true);
    trainyard::v1::PriorityClass out;
    if (auto s = FromGrpc(
            q->CreatePriorityClass(Context(admin_token_).get(), req, &out),
            "priority class");
        !s.ok()) {
      return s;
    }
  }
  trainyard::v1::UpdateQueueRequest update;
  update.mutable_queue()->set_name(
      absl::StrCat("tenants/", tenant, "/queues/default"));
  update.mutable_queue()->mutable_preemption()->set_within_queue(
      trainyard::v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY);
  update.mutable_update_mask()->add_paths("preemption");
  trainyard::v1::Queue updated;
  if (auto s = FromGrpc(
          q->UpdateQueue(Context(admin_token_).get(), update, &updated),
          "queue");
      !s.ok()) {
    return s;
  }
  if (updated.preemption().within_queue() !=
      trainyard::v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY) {
    return absl::InternalError(
        absl::StrCat("queue preemption not updated: ", updated.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status ApiHarness::ReportSimNodes(trainyard::v1::NodeState state) {
  trainyard::v1::ReportNodesRequest req;
  req.set_parent("clusters/sim");
  for (int i = 0; i < 4; ++i) {
    auto* n = req.add_nodes();
    n->set_name(absl::StrCat("clusters/sim/nodes/n", i));
    n->set_pool("main");
    n->set_state(state);
    n->mutable_capacity()->set_gpus(8);
    n->mutable_capacity()->set_gpu_model("H100");
    n->mutable_capacity()->set_cpu_millis(64000);
    n->mutable_capacity()->set_memory_bytes(int64_t{512} << 30);
    n->mutable_topology()->set_block("b0");
    n->mutable_topology()->set_rack(absl::StrCat("r", i / 2));
  }
  trainyard::v1::ReportNodesResponse out;
  return FromGrpc(
      clusters()->ReportNodes(Context(admin_token_).get(), req, &out), "nodes");
}

absl::Status ApiHarness::SeedCluster(
    const std::string& id, trainyard::v1::BackendKind backend,
    const std::vector<std::pair<std::string, std::string>>& pools) {
  auto c = clusters();
  trainyard::v1::CreateClusterRequest cluster;
  cluster.set_cluster_id(id);
  cluster.mutable_cluster()->set_backend(backend);
  trainyard::v1::Cluster created;
  if (auto s = FromGrpc(
          c->CreateCluster(Context(admin_token_).get(), cluster, &created),
          id + " cluster");
      !s.ok()) {
    return s;
  }
  for (const auto& [pool, flavor] : pools) {
    if (absl::Status s = CreatePool(id, pool, flavor); !s.ok()) return s;
  }
  return ReportSimNodes(trainyard::v1::NODE_STATE_DOWN);
}

absl::Status ApiHarness::CreateFlavor(const std::string& id,
                                      trainyard::v1::FlavorKind kind,
                                      int64_t gpu_hour_micros,
                                      double reclaim_rate_per_hour) {
  trainyard::v1::CreateFlavorRequest req;
  req.set_flavor_id(id);
  req.mutable_flavor()->set_kind(kind);
  req.mutable_flavor()->set_gpu_model("H100");
  req.mutable_flavor()->mutable_gpu_hour_price()->set_currency_code("USD");
  req.mutable_flavor()->mutable_gpu_hour_price()->set_micros(gpu_hour_micros);
  req.mutable_flavor()->set_reclaim_rate_per_hour(reclaim_rate_per_hour);
  trainyard::v1::Flavor out;
  return FromGrpc(
      clusters()->CreateFlavor(Context(admin_token_).get(), req, &out),
      id + " flavor");
}

absl::Status ApiHarness::CreatePool(const std::string& cluster,
                                    const std::string& pool,
                                    const std::string& flavor) {
  trainyard::v1::CreatePoolRequest req;
  req.set_parent("clusters/" + cluster);
  req.set_pool_id(pool);
  req.mutable_pool()->set_flavor(flavor);
  trainyard::v1::Pool out;
  return FromGrpc(
      clusters()->CreatePool(Context(admin_token_).get(), req, &out),
      cluster + " pool");
}

absl::Status ApiHarness::AddQueueQuota(const std::string& tenant,
                                       const std::string& queue,
                                       const std::string& flavor) {
  auto q = queues();
  trainyard::v1::GetQueueRequest get;
  get.set_name(absl::StrCat("tenants/", tenant, "/queues/", queue));
  trainyard::v1::Queue current;
  if (auto s = FromGrpc(q->GetQueue(Context(admin_token_).get(), get, &current),
                        "queue");
      !s.ok()) {
    return s;
  }
  if (current.quotas().empty()) {
    return absl::FailedPreconditionError(get.name() + " has no quota to copy");
  }
  trainyard::v1::UpdateQueueRequest update;
  update.mutable_queue()->set_name(current.name());
  *update.mutable_queue()->mutable_quotas() = current.quotas();
  trainyard::v1::FlavorQuotas* added = update.mutable_queue()->add_quotas();
  *added = current.quotas(0);
  added->set_flavor(flavor);
  update.mutable_update_mask()->add_paths("quotas");
  trainyard::v1::Queue updated;
  return FromGrpc(q->UpdateQueue(Context(admin_token_).get(), update, &updated),
                  "queue");
}

absl::Status ApiHarness::SeedTenant(const std::string& tenant) {
  auto q = queues();
  auto c = clusters();
  if (!cluster_seeded_) {
    {
      trainyard::v1::CreateFlavorRequest req;
      req.set_flavor_id("gpu");
      req.mutable_flavor()->set_kind(trainyard::v1::FLAVOR_KIND_ON_DEMAND);
      req.mutable_flavor()->set_gpu_model("H100");
      req.mutable_flavor()->mutable_gpu_hour_price()->set_currency_code("USD");
      req.mutable_flavor()->mutable_gpu_hour_price()->set_micros(2000000);
      trainyard::v1::Flavor out;
      if (auto s =
              FromGrpc(c->CreateFlavor(Context(admin_token_).get(), req, &out),
                       "flavor");
          !s.ok()) {
        return s;
      }
    }
    {
      trainyard::v1::CreateClusterRequest req;
      req.set_cluster_id("sim");
      req.mutable_cluster()->set_backend(trainyard::v1::BACKEND_KIND_SIM);
      trainyard::v1::Cluster out;
      if (auto s =
              FromGrpc(c->CreateCluster(Context(admin_token_).get(), req, &out),
                       "cluster");
          !s.ok()) {
        return s;
      }
    }
    {
      trainyard::v1::CreatePoolRequest req;
      req.set_parent("clusters/sim");
      req.set_pool_id("main");
      req.mutable_pool()->set_flavor("gpu");
      trainyard::v1::Pool out;
      if (auto s = FromGrpc(
              c->CreatePool(Context(admin_token_).get(), req, &out), "pool");
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = ReportSimNodes(trainyard::v1::NODE_STATE_READY);
        !s.ok()) {
      return s;
    }
    {
      trainyard::v1::CreateCohortRequest req;
      req.set_cohort_id("pool");
      trainyard::v1::Cohort out;
      if (auto s =
              FromGrpc(q->CreateCohort(Context(admin_token_).get(), req, &out),
                       "cohort");
          !s.ok()) {
        return s;
      }
    }
    cluster_seeded_ = true;
  }
  {
    trainyard::v1::CreateTenantRequest req;
    req.set_tenant_id(tenant);
    trainyard::v1::Tenant out;
    if (auto s = FromGrpc(
            q->CreateTenant(Context(admin_token_).get(), req, &out), "tenant");
        !s.ok()) {
      return s;
    }
  }
  {
    trainyard::v1::CreateProjectRequest req;
    req.set_parent(absl::StrCat("tenants/", tenant));
    req.set_project_id("default");
    trainyard::v1::Project out;
    if (auto s =
            FromGrpc(q->CreateProject(Context(admin_token_).get(), req, &out),
                     "project");
        !s.ok()) {
      return s;
    }
  }
  {
    trainyard::v1::CreateQueueRequest req;
    req.set_parent(absl::StrCat("tenants/", tenant));
    req.set_queue_id("default");
    req.mutable_queue()->set_cohort("pool");
    auto* quota = req.mutable_queue()->add_quotas();
    quota->set_flavor("gpu");
    auto* gpu = quota->add_resources();
    gpu->set_resource(trainyard::v1::RESOURCE_NAME_GPU);
    gpu->set_nominal(64);
    trainyard::v1::Queue out;
    if (auto s = FromGrpc(
            q->CreateQueue(Context(admin_token_).get(), req, &out), "queue");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

grpc::Status ApiHarness::CallUnary(
    const std::string& token, const google::protobuf::MethodDescriptor& method,
    const std::string& request, trainyard::v1::ErrorInfo* info,
    std::string* response) {
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::ClientContext> context = Context(token);
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer response_buffer;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(
      context.get(),
      absl::StrCat("/", method.service()->full_name(), "/", method.name()),
      request_buffer, &cq);
  call->StartCall();
  call->Finish(&response_buffer, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  (void)cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (info != nullptr) *info = ErrorInfoOf(*context);
  if (response != nullptr) {
    response->clear();
    std::vector<grpc::Slice> slices;
    if (status.ok() && response_buffer.Dump(&slices).ok()) {
      for (const grpc::Slice& part : slices) {
        response->append(reinterpret_cast<const char*>(part.begin()),
                         part.size());
      }
    }
  }
  return status;
}

std::vector<const google::protobuf::MethodDescriptor*>
ApiHarness::ApiMethods() {
  std::vector<const google::protobuf::MethodDescriptor*> out;
  for (const char* name :
       {"JobService", "QueueService", "ClusterService", "AdminService"}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            absl::StrCat("trainyard.v1.", name));
    if (service == nullptr) {
      ADD_FAILURE() << "no descriptor of trainyard.v1." << name;
      continue;
    }
    for (int i = 0; i < service->method_count(); ++i) {
      out.push_back(service->method(i));
    }
  }
  return out;
}

trainyard::v1::ErrorInfo ErrorInfoOf(const grpc::ClientContext& context) {
  trainyard::v1::ErrorInfo info;
  const auto& md = context.GetServerTrailingMetadata();
  auto it = md.find("trainyard-error-bin");
  if (it != md.end())
    info.ParseFromString(std::string(it->second.data(), it->second.size()));
  return info;
}

int64_t ApiHarness::SubmitJob(const std::string& token,
                              const trainyard::v1::SubmitJobRequest& request) {
  trainyard::v1::SubmitJobResponse response;
  grpc::Status s = jobs()->Submit(Context(token).get(), request, &response);
  if (!s.ok()) {
    ADD_FAILURE() << "Submit: " << s.error_message();
    return 0;
  }
  const std::string& name = response.job().name();
  return std::stoll(name.substr(name.rfind('/') + 1));
}

trainyard::v1::Job ApiHarness::GetJob(const std::string& token,
                                      const std::string& tenant, int64_t id) {
  trainyard::v1::GetJobRequest request;
  request.set_name(absl::StrCat("tenants/", tenant, "/jobs/", id));
  request.set_view(trainyard::v1::JOB_VIEW_FULL);
  trainyard::v1::Job job;
  grpc::Status s = jobs()->Get(Context(token).get(), request, &job);
  if (!s.ok())
    ADD_FAILURE() << "Get " << request.name() << ": " << s.error_message();
  return job;
}

trainyard::v1::ExplainPendingResponse ApiHarness::Explain(
    const std::string& token, const std::string& tenant, int64_t id) {
  trainyard::v1::ExplainPendingRequest req;
  req.set_name(absl::StrCat("tenants/", tenant, "/jobs/", id));
  trainyard::v1::ExplainPendingResponse resp;
  grpc::Status s = jobs()->ExplainPending(Context(token).get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

trainyard::v1::SubmitJobRequest MinimalSubmit(
    const std::string& tenant, const std::string& client_request_id) {
  trainyard::v1::SubmitJobRequest req;
  req.set_parent(absl::StrCat("tenants/", tenant));
  req.set_client_request_id(client_request_id);
  auto* spec = req.mutable_job()->mutable_spec();
  spec->set_project("default");
  spec->set_queue("default");
  spec->set_workers(1);
  spec->mutable_resources()->set_gpus(1);
  spec->mutable_resources()->set_cpu_millis(4000);
  spec->mutable_resources()->set_memory_bytes(int64_t{16} << 30);
  spec->add_command("python");
  spec->add_command("train.py");
  return req;
}

}  // namespace trainyard::testing
