#include "services/dispatcher/adapters/sim/sim_remote.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace trainyard::dispatcher::sim {
namespace {

namespace v1 = ::trainyard::v1;

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status, std::string_view method) {
  if (status.ok()) return absl::OkStatus();
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    message = absl::StrCat("sim cluster ", std::string(method), ": ", message);
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      message);
}

void SetTime(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t nanos = absl::ToUnixNanos(t);
  int64_t seconds = nanos / 1'000'000'000;
  int64_t rem = nanos % 1'000'000'000;
  if (rem < 0) {
    rem += 1'000'000'000;
    --seconds;
  }
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(rem));
}

absl::Time GetTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

AttemptPhase PhaseFromProto(v1::SimAttemptPhase phase) {
  switch (phase) {
    case v1::SIM_ATTEMPT_RUNNING:
      return AttemptPhase::kRunning;
    case v1::SIM_ATTEMPT_SUCCEEDED:
      return AttemptPhase::kSucceeded;
    case v1::SIM_ATTEMPT_FAILED:
      return AttemptPhase::kFailed;
    case v1::SIM_ATTEMPT_CANCELLED:
      return AttemptPhase::kCancelled;
    default:
      return AttemptPhase::kPending;
  }
}

v1::SimAttemptPhase PhaseToProto(AttemptPhase phase) {
  switch (phase) {
    case AttemptPhase::kPending:
      return v1::SIM_ATTEMPT_PENDING;
    case AttemptPhase::kRunning:
      return v1::SIM_ATTEMPT_RUNNING;
    case AttemptPhase::kSucceeded:
      return v1::SIM_ATTEMPT_SUCCEEDED;
    case AttemptPhase::kFailed:
      return v1::SIM_ATTEMPT_FAILED;
    case AttemptPhase::kCancelled:
      return v1::SIM_ATTEMPT_CANCELLED;
  }
  return v1::SIM_ATTEMPT_PHASE_UNSPECIFIED;
}

v1::SimFailureKind FailureToProto(FailureKind kind) {
  switch (kind) {
    case FailureKind::kNone:
      return v1::SIM_FAILURE_NONE;
    case FailureKind::kUserError:
      return v1::SIM_FAILURE_USER_ERROR;
    case FailureKind::kPreempted:
      return v1::SIM_FAILURE_PREEMPTED;
    case FailureKind::kSpotReclaim:
      return v1::SIM_FAILURE_SPOT_RECLAIM;
    case FailureKind::kNodeFailure:
      return v1::SIM_FAILURE_NODE_FAILURE;
    case FailureKind::kTimeLimit:
      return v1::SIM_FAILURE_TIME_LIMIT;
    case FailureKind::kCancelled:
      return v1::SIM_FAILURE_CANCELLED;
    case FailureKind::kBackendError:
      return v1::SIM_FAILURE_BACKEND_ERROR;
  }
  return v1::SIM_FAILURE_NONE;
}

FailureKind FailureFromProto(v1::SimFailureKind kind) {
  switch (kind) {
    case v1::SIM_FAILURE_USER_ERROR:
      return FailureKind::kUserError;
    case v1::SIM_FAILURE_PREEMPTED:
      return FailureKind::kPreempted;
    case v1::SIM_FAILURE_SPOT_RECLAIM:
      return FailureKind::kSpotReclaim;
    case v1::SIM_FAILURE_NODE_FAILURE:
      return FailureKind::kNodeFailure;
    case v1::SIM_FAILURE_TIME_LIMIT:
      return FailureKind::kTimeLimit;
    case v1::SIM_FAILURE_CANCELLED:
      return FailureKind::kCancelled;
    case v1::SIM_FAILURE_BACKEND_ERROR:
      return FailureKind::kBackendError;
    default:
      return FailureKind::kNone;
  }
}

}  // namespace

// --- Conversions
// ---------------------------------------------------------------

v1::SimLaunchRequest ToProto(const LaunchRequest& request) {
  v1::SimLaunchRequest out;
  out.set_name(request.name);
  out.set_job_id(request.job_id);
  out.set_attempt(request.attempt);
  out.set_tenant(request.tenant);
  *out.mutable_spec() = request.spec;
  for (const std::string& node : request.worker_nodes) {
    out.add_worker_nodes(node);
  }
  out.set_flavor(request.flavor);
  out.set_resume_from(request.resume_from);
  for (const auto& [k, v] : request.env) (*out.mutable_env())[k] = v;
  return out;
}

LaunchRequest FromProto(const v1::SimLaunchRequest& request) {
  LaunchRequest out;
  out.name = request.name();
  out.job_id = request.job_id();
  out.attempt = request.attempt();
  out.tenant = request.tenant();
  out.spec = request.spec();
  out.worker_nodes.assign(request.worker_nodes().begin(),
                          request.worker_nodes().end());
  out.flavor = request.flavor();
  out.resume_from = request.resume_from();
  for (const auto& [k, v] : request.env()) out.env[k] = v;
  return out;
}

v1::SimAttempt ToProto(const AttemptStatus& status) {
  v1::SimAttempt out;
  out.set_name(status.name);
  out.set_backend_id(status.backend_id);
  out.set_phase(PhaseToProto(status.phase));
  out.set_failure(FailureToProto(status.failure));
  if (status.exit_code.has_value()) out.set_exit_code(*status.exit_code);
  out.set_message(status.message);
  if (status.submit_time != absl::InfinitePast()) {
    SetTime(status.submit_time, out.mutable_submit_time());
  }
  if (status.start_time) SetTime(*status.start_time, out.mutable_start_time());
  if (status.end_time) SetTime(*status.end_time, out.mutable_end_time());
  out.set_stop_requested(status.stop_requested);
  if (status.stop_deadline) {
    SetTime(*status.stop_deadline, out.mutable_stop_deadline());
  }
  for (const CheckpointInfo& c : status.checkpoints) {
    v1::SimCheckpoint* cp = out.add_checkpoints();
    cp->set_step(c.step);
    cp->set_uri(c.uri);
    SetTime(c.time, cp->mutable_time());
  }
  for (const std::string& node : status.nodes) out.add_nodes(node);
  return out;
}

AttemptStatus FromProto(const v1::SimAttempt& attempt) {
  AttemptStatus out;
  out.name = attempt.name();
  out.backend_id = attempt.backend_id();
  out.phase = PhaseFromProto(attempt.phase());
  out.failure = FailureFromProto(attempt.failure());
  if (attempt.has_exit_code()) out.exit_code = attempt.exit_code();
  out.message = attempt.message();
  if (attempt.has_submit_time()) {
    out.submit_time = GetTime(attempt.submit_time());
  }
  if (attempt.has_start_time()) out.start_time = GetTime(attempt.start_time());
  if (attempt.has_end_time()) out.end_time = GetTime(attempt.end_time());
  out.stop_requested = attempt.stop_requested();
  if (attempt.has_stop_deadline()) {
    out.stop_deadline = GetTime(attempt.stop_deadline());
  }
  for (const v1::SimCheckpoint& c : attempt.checkpoints()) {
    out.checkpoints.push_back({c.step(), c.uri(), GetTime(c.time())});
  }
  out.nodes.assign(attempt.nodes().begin(), attempt.nodes().end());
  return out;
}

v1::SimNodeInventory ToProto(const NodeInventory& node) {
  v1::SimNodeInventory out;
  out.set_name(node.name);
  out.set_pool(node.pool);
  out.set_flavor(node.flavor);
  out.set_gpu_model(node.gpu_model);
  out.set_gpus(node.gpus);
  out.set_cpu_millis(node.cpu_millis);
  out.set_memory_bytes(node.memory_bytes);
  out.set_used_gpus(node.used_gpus);
  out.set_used_cpu_millis(node.used_cpu_millis);
  out.set_used_memory_bytes(node.used_memory_bytes);
  out.set_rack(node.rack);
  out.set_block(node.block);
  for (const auto& [k, v] : node.labels) (*out.mutable_labels())[k] = v;
  out.set_schedulable(node.schedulable);
  out.set_failed(node.failed);
  out.set_state_message(node.state_message);
  return out;
}

NodeInventory FromProto(const v1::SimNodeInventory& node) {
  NodeInventory out;
  out.name = node.name();
  out.pool = node.pool();
  out.flavor = node.flavor();
  out.gpu_model = node.gpu_model();
  out.gpus = node.gpus();
  out.cpu_millis = node.cpu_millis();
  out.memory_bytes = node.memory_bytes();
  out.used_gpus = node.used_gpus();
  out.used_cpu_millis = node.used_cpu_millis();
  out.used_memory_bytes = node.used_memory_bytes();
  out.rack = node.rack();
  out.block = node.block();
  for (const auto& [k, v] : node.labels()) out.labels[k] = v;
  out.schedulable = node.schedulable();
  out.failed = node.failed();
  out.state_message = node.state_message();
  return out;
}

// --- Server
// --------------------------------------------------------------------

namespace {

class SimClusterServer final
    : public trainyard::v1::SimClusterService::Service {
 public:
  explicit SimClusterServer(SimAdapter* sim) : sim_(sim) {}

  grpc::Status GetSimCluster(grpc::ServerContext*,
                             const v1::GetSimClusterRequest*,
                             v1::SimClusterInfo* response) override {
    response->set_cluster(sim_->cluster());
    *response->mutable_config() = sim_->config();
    absl::StatusOr<std::vector<AttemptStatus>> attempts = sim_->List();
    if (!attempts.ok()) return ToGrpc(attempts.status());
    response->set_active_attempts(std::count_if(
        attempts->begin(), attempts->end(),
        [](const AttemptStatus& a) { return !IsTerminal(a.phase); }));
    absl::MutexLock lock(&mu_);
    response->set_attempts_created(attempts_created_);
    response->set_launches_refused(launches_refused_);
    std::vector<std::string> duplicates;
    for (const auto& [name, count] : created_) {
      if (count > 1) duplicates.push_back(name);
    }
    std::sort(duplicates.begin(), duplicates.end());
    for (std::string& name : duplicates) {
      response->add_duplicate_launches(std::move(name));
    }
    return grpc::Status::OK;
  }

  grpc::Status LaunchAttempt(grpc::ServerContext*,
                             const v1::SimLaunchRequest* request,
                             v1::SimAttempt* response) override {
    // Launch is idempotent by name; whether it created the attempt shows in
    // whether one of that name existed before. Serialised so that two
    // concurrent launches of one name are told apart correctly.
    absl::MutexLock lock(&mu_);
    const bool existed = sim_->Status(request->name()).ok();
    absl::StatusOr<AttemptStatus> status = sim_->Launch(FromProto(*request));
    if (!status.ok()) {
      if (status.status().code() == absl::StatusCode::kFailedPrecondition) {
        ++launches_refused_;
      }
      return ToGrpc(status.status());
    }
    if (!existed) {
      ++attempts_created_;
      ++created_[request->name()];
    }
    *response = ToProto(*status);
    return grpc::Status::OK;
  }

  grpc::Status SignalAttempt(grpc::ServerContext*,
                             const v1::SignalSimAttemptRequest* request,
                             google::protobuf::Empty*) override {
    return ToGrpc(sim_->Signal(request->name(), request->signal()));
  }

  grpc::Status StopAttempt(grpc::ServerContext*,
                           const v1::StopSimAttemptRequest* request,
                           google::protobuf::Empty*) override {
    StopReason reason;
    switch (request->reason()) {
      case v1::StopSimAttemptRequest::CANCEL:
        reason = StopReason::kCancel;
        break;
      case v1::StopSimAttemptRequest::PREEMPTION:
        reason = StopReason::kPreemption;
        break;
      default:
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "reason: must be CANCEL or PREEMPTION");
    }
    const absl::Duration grace = absl::Seconds(request->grace().seconds()) +
                                 absl::Nanoseconds(request->grace().nanos());
    return ToGrpc(sim_->Stop(request->name(), grace, reason));
  }

  grpc::Status GetAttempt(grpc::ServerContext*,
                          const v1::GetSimAttemptRequest* request,
                          v1::SimAttempt* response) override {
    absl::StatusOr<AttemptStatus> status = sim_->Status(request->name());
    if (!status.ok()) return ToGrpc(status.status());
    *response = ToProto(*status);
    AddEnv(*response);
    return grpc::Status::OK;
  }

  grpc::Status ListAttempts(grpc::ServerContext*,
                            const v1::ListSimAttemptsRequest*,
                            v1::ListSimAttemptsResponse* response) override {
    absl::StatusOr<std::vector<AttemptStatus>> attempts = sim_->List();
    if (!attempts.ok()) return ToGrpc(attempts.status());
    for (const AttemptStatus& a : *attempts) {
      v1::SimAttempt* out = response->add_attempts();
      *out = ToProto(a);
      AddEnv(*out);
    }
    return grpc::Status::OK;
  }

  grpc::Status DeleteAttempt(grpc::ServerContext*,
                             const v1::DeleteSimAttemptRequest* request,
                             google::protobuf::Empty*) override {
    return ToGrpc(sim_->Delete(request->name()));
  }

  grpc::Status ReadAttemptLog(grpc::ServerContext*,
                              const v1::ReadSimAttemptLogRequest* request,
                              v1::SimAttemptLog* response) override {
    absl::StatusOr<LogChunk> chunk =
        sim_->ReadLog(request->name(), request->offset(), request->max_bytes());
    if (!chunk.ok()) return ToGrpc(chunk.status());
    response->set_offset(chunk->offset);
    response->set_data(std::move(chunk->data));
    response->set_size(chunk->size);
    return grpc::Status::OK;
  }

  grpc::Status ListSimNodes(grpc::ServerContext*,
                            const v1::ListSimNodesRequest*,
                            v1::ListSimNodesResponse* response) override {
    absl::StatusOr<std::vector<NodeInventory>> nodes = sim_->Inventory();
    if (!nodes.ok()) return ToGrpc(nodes.status());
    for (const NodeInventory& n : *nodes) *response->add_nodes() = ToProto(n);
    return grpc::Status::OK;
  }

  grpc::Status InjectFault(grpc::ServerContext*,
                           const v1::InjectSimFaultRequest* request,
                           google::protobuf::Empty*) override {
    if (request->target().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "target: required");
    }
    const std::string& t = request->target();
    switch (request->kind()) {
      case v1::InjectSimFaultRequest::FAIL_NODE:
        return ToGrpc(sim_->FailNode(t));
      case v1::InjectSimFaultRequest::RECLAIM_NODE:
        return ToGrpc(sim_->ReclaimNode(t));
      case v1::InjectSimFaultRequest::RECLAIM_POOL:
        return ToGrpc(sim_->ReclaimPool(t));
      case v1::InjectSimFaultRequest::RECOVER_NODE:
        return ToGrpc(sim_->RecoverNode(t));
      case v1::InjectSimFaultRequest::CORDON_NODE:
        return ToGrpc(sim_->SetNodeSchedulable(t, false));
      case v1::InjectSimFaultRequest::UNCORDON_NODE:
        return ToGrpc(sim_->SetNodeSchedulable(t, true));
      case v1::InjectSimFaultRequest::CRASH_ATTEMPT:
        return ToGrpc(sim_->CrashJob(t, request->exit_code()));
      default:
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "kind: must be one of FAIL_NODE, RECLAIM_NODE, RECLAIM_POOL, "
            "RECOVER_NODE, CORDON_NODE, UNCORDON_NODE, CRASH_ATTEMPT");
    }
  }

 private:
  // Fills attempt.env from SimAdapter::LaunchEnv (nothing if it is gone).
  void AddEnv(v1::SimAttempt& attempt) {
    absl::StatusOr<std::map<std::string, std::string>> env =
        sim_->LaunchEnv(attempt.name());
    if (!env.ok()) return;  // deleted meanwhile
    for (const auto& [k, v] : *env) (*attempt.mutable_env())[k] = v;
  }

  SimAdapter* sim_;
  absl::Mutex mu_;
  // Creations per backend name, since the process started.
  absl::flat_hash_map<std::string, int> created_ ABSL_GUARDED_BY(mu_);
  int64_t attempts_created_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t launches_refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<grpc::Service> NewSimClusterServer(SimAdapter* sim) {
  return std::make_unique<SimClusterServer>(sim);
}

// --- Client
// --------------------------------------------------------------------

SimClusterClient::SimClusterClient(SimClusterClientOptions options)
    : options_(std::move(options)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 * 1024 * 1024);
  // Reconnect quickly after the server restarts.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(
      options_.target, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::SimClusterService::NewStub(channel_);
}

void SimClusterClient::Prepare(grpc::ClientContext& context) const {
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
}

absl::StatusOr<v1::SimClusterInfo> SimClusterClient::Info(
    absl::Duration timeout) {
  grpc::ClientContext context;
  const absl::Duration wait = std::max(timeout, options_.rpc_timeout);
  context.set_deadline(absl::ToChronoTime(absl::Now() + wait));
  // Only wait for the server when asked to.
  context.set_wait_for_ready(timeout > absl::ZeroDuration());
  v1::SimClusterInfo info;
  grpc::Status status =
      stub_->GetSimCluster(&context, v1::GetSimClusterRequest(), &info);
  if (!status.ok()) return FromGrpc(status, "GetSimCluster");
  return info;
}

absl::StatusOr<AttemptStatus> SimClusterClient::Launch(
    const LaunchRequest& request) {
  grpc::ClientContext context;
  Prepare(context);
  v1::SimAttempt out;
  grpc::Status status = stub_->LaunchAttempt(&context, ToProto(request), &out);
  if (!status.ok()) return FromGrpc(status, "LaunchAttempt");
  return FromProto(out);
}

absl::Status SimClusterClient::Signal(std::string_view name, int signal) {
  grpc::ClientContext context;
  Prepare(context);
  v1::SignalSimAttemptRequest request;
  request.set_name(std::string(name));
  request.set_signal(signal);
  google::protobuf::Empty out;
  return FromGrpc(stub_->SignalAttempt(&context, request, &out),
                  "SignalAttempt");
}

absl::Status SimClusterClient::Stop(std::string_view name, absl::Duration grace,
                                    StopReason reason) {
  if (grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grace: must not be negative");
  }
  grpc::ClientContext context;
  Prepare(context);
  v1::StopSimAttemptRequest request;
  request.set_name(std::string(name));
  const int64_t nanos = absl::ToInt64Nanoseconds(grace);
  request.mutable_grace()->set_seconds(nanos / 1'000'000'000);
  request.mutable_grace()->set_nanos(
      static_cast<int32_t>(nanos % 1'000'000'000));
  request.set_reason(reason == StopReason::kCancel
                         ? v1::StopSimAttemptRequest::CANCEL
                         : v1::StopSimAttemptRequest::PREEMPTION);
  google::protobuf::Empty out;
  return FromGrpc(stub_->StopAttempt(&context, request, &out), "StopAttempt");
}

absl::StatusOr<AttemptStatus> SimClusterClient::Status(std::string_view name) {
  grpc::ClientContext context;
  Prepare(context);
  v1::GetSimAttemptRequest request;
  request.set_name(std::string(name));
  v1::SimAttempt out;
  grpc::Status status = stub_->GetAttempt(&context, request, &out);
  if (!status.ok()) return FromGrpc(status, "GetAttempt");
  return FromProto(out);
}

absl::StatusOr<std::vector<AttemptStatus>> SimClusterClient::List() {
  grpc::ClientContext context;
  Prepare(context);
  v1::ListSimAttemptsResponse out;
  grpc::Status status =
      stub_->ListAttempts(&context, v1::ListSimAttemptsRequest(), &out);
  if (!status.ok()) return FromGrpc(status, "ListAttempts");
  std::vector<AttemptStatus> attempts;
  attempts.reserve(out.attempts_size());
  for (const v1::SimAttempt& a : out.attempts()) {
    attempts.push_back(FromProto(a));
  }
  return attempts;
}

absl::Status SimClusterClient::Delete(std::string_view name) {
  grpc::ClientContext context;
  Prepare(context);
  v1::DeleteSimAttemptRequest request;
  request.set_name(std::string(name));
  google::protobuf::Empty out;
  return FromGrpc(stub_->DeleteAttempt(&context, request, &out),
                  "DeleteAttempt");
}

absl::StatusOr<LogChunk> SimClusterClient::ReadLog(std::string_view name,
                                                   int64_t offset,
                                                   int64_t max_bytes) {
  grpc::ClientContext context;
  Prepare(context);
  v1::ReadSimAttemptLogRequest request;
  request.set_name(std::string(name));
  request.set_offset(offset);
  request.set_max_bytes(max_bytes);
  v1::SimAttemptLog out;
  grpc::Status status = stub_->ReadAttemptLog(&context, request, &out);
  if (!status.ok()) return FromGrpc(status, "ReadAttemptLog");
  return LogChunk{.offset = out.offset(),
                  .data = std::move(*out.mutable_data()),
                  .size = out.size()};
}

absl::StatusOr<std::vector<NodeInventory>> SimClusterClient::Inventory() {
  grpc::ClientContext context;
  Prepare(context);
  v1::ListSimNodesResponse out;
  grpc::Status status =
      stub_->ListSimNodes(&context, v1::ListSimNodesRequest(), &out);
  if (!status.ok()) return FromGrpc(status, "ListSimNodes");
  std::vector<NodeInventory> nodes;
  nodes.reserve(out.nodes_size());
  for (const v1::SimNodeInventory& n : out.nodes()) {
    nodes.push_back(FromProto(n));
  }
  return nodes;
}

absl::Status SimClusterClient::InjectFault(v1::InjectSimFaultRequest::Kind kind,
                                           std::string_view target,
                                           int exit_code) {
  grpc::ClientContext context;
  Prepare(context);
  v1::InjectSimFaultRequest request;
  request.set_kind(kind);
  request.set_target(std::string(target));
  request.set_exit_code(exit_code);
  google::protobuf::Empty out;
  return FromGrpc(stub_->InjectFault(&context, request, &out), "InjectFault");
}

}  // namespace trainyard::dispatcher::sim
