#include "services/api/job_service.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "services/api/events.h"
#include "services/api/status.h"
#include "services/api/submit_batcher.h"
#include "services/common/crypto.h"
#include "services/core/errors.h"
#include "services/core/job_state.h"
#include "services/core/names.h"
#include "services/core/validation.h"

namespace trainyard::api {
namespace {

using storage::postgres::NewJob;
using trainyard::v1::Job;

constexpr size_t kMaxBatch = 1000;

// Hash of what a submission asks for, so that a reused client_request_id with a
// different job is refused rather than silently answered with the first job.
std::string RequestHash(const Job& job) {
  Job content;
  content.set_display_name(job.display_name());
  *content.mutable_labels() = job.labels();
  *content.mutable_spec() = job.spec();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    content.SerializeToCodedStream(&coded);
  }
  return common::Sha256Hex(bytes);
}

bool Matches(const trainyard::v1::JobEvent& e,
             const std::vector<std::string>& tenants,
             const storage::postgres::EventFilter& filter,
             const std::string& job_name) {
  if (!tenants.empty() &&
      std::find(tenants.begin(), tenants.end(), e.tenant()) == tenants.end()) {
    return false;
  }
  if (!job_name.empty() && e.job() != job_name) return false;
  if (!filter.queue.empty() && e.queue() != filter.queue) return false;
  if (!filter.job_set.empty() && e.job_set() != filter.job_set) return false;
  return true;
}

}  // namespace

absl::Status JobServiceImpl::CheckRate(const std::string& tenant, double cost) {
  if (ctx_->rate_limiter == nullptr) return absl::OkStatus();
  absl::StatusOr<trainyard::v1::Tenant> t = ctx_->directory->GetTenant(tenant);
  if (t.ok() && t->submit_rate_limit() > 0) {
    ctx_->rate_limiter->SetLimit(
        tenant, t->submit_rate_limit(),
        t->submit_burst() > 0 ? t->submit_burst() : t->submit_rate_limit());
  }
  storage::redis::RateDecision d = ctx_->rate_limiter->Check(tenant, cost);
  if (d.allowed) return absl::OkStatus();
  return WithRetryDelay(
      absl::ResourceExhaustedError(absl::StrCat(
          "tenant ", tenant, " is over its submit rate limit; retry in ",
          absl::FormatDuration(d.retry_after))),
      d.retry_after);
}

absl::StatusOr<NewJob> JobServiceImpl::Prepare(
    const Caller& caller, const std::string& tenant,
    const trainyard::v1::SubmitJobRequest& req) {
  if (absl::Status s = core::ValidateClientRequestId(req.client_request_id());
      !s.ok())
    return s;
  if (!req.has_job()) return core::FieldError("job", "REQUIRED", "must be set");
  if (absl::Status s = core::ValidateJob(req.job(), ctx_->limits); !s.ok()) {
    return core::PrefixField(s, "job");
  }
  const trainyard::v1::JobSpec& spec = req.job().spec();
  if (absl::Status s =
          ctx_->directory->CheckQueue(tenant, spec.queue(), "job.spec.queue");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ctx_->directory->CheckProject(tenant, spec.project(),
                                                     "job.spec.project");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<trainyard::v1::Tenant> t = ctx_->directory->GetTenant(tenant);
  if (!t.ok()) return t.status();
  if (t->suspended()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tenant ", tenant, " is suspended and cannot submit jobs"));
  }
  absl::StatusOr<trainyard::v1::PriorityClass> pc =
      ctx_->directory->ResolvePriorityClass(*t, spec.priority_class(),
                                            "job.spec.priority_class");
  if (!pc.ok()) return pc.status();
  absl::StatusOr<std::shared_ptr<const core::CapacityIndex>> capacity =
      ctx_->directory->Capacity();
  if (!capacity.ok()) return capacity.status();
  if (absl::Status s = (*capacity)->CheckFits(spec); !s.ok()) {
    return core::PrefixField(s, "job");
  }

  NewJob n;
  n.tenant = tenant;
  n.client_request_id = req.client_request_id();
  n.request_hash = RequestHash(req.job());
  n.job.set_display_name(req.job().display_name());
  *n.job.mutable_labels() = req.job().labels();
  *n.job.mutable_spec() = spec;
  n.job.set_creator(caller.principal);
  n.job.set_priority(pc->value());
  return n;
}

grpc::ServerUnaryReactor* JobServiceImpl::Submit(
    grpc::CallbackServerContext* context,
    const trainyard::v1::SubmitJobRequest* request,
    trainyard::v1::SubmitJobResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto fail = [&](const absl::Status& s) {
    reactor->Finish(Reply(context, s));
    return reactor;
  };
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return fail(caller.status());
  absl::StatusOr<std::string> tenant =
      core::ParseTenantName(request->parent(), "parent");
  if (!tenant.ok()) return fail(tenant.status());
  if (absl::Status s =
          Require(*caller, *tenant, Permission::kWriteJobs, request->parent());
      !s.ok()) {
    return fail(s);
  }
  if (absl::Status s = CheckRate(*tenant, 1); !s.ok()) return fail(s);
  absl::StatusOr<NewJob> job = Prepare(*caller, *tenant, *request);
  if (!job.ok()) return fail(job.status());
  ctx_->batcher->SubmitAsync(
      *std::move(job),
      [context, reactor, response](storage::postgres::SubmitOutcome outcome) {
        if (!outcome.status.ok()) {
          reactor->Finish(Reply(context, outcome.status));
          return;
        }
        *response->mutable_job() = std::move(outcome.job);
        response->set_deduplicated(outcome.deduplicated);
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

grpc::Status JobServiceImpl::SubmitBatch(
    grpc::ServerContext* context,
    const trainyard::v1::SubmitJobBatchRequest* request,
    trainyard::v1::SubmitJobBatchResponse* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<std::string> tenant =
      core::ParseTenantName(request->parent(), "parent");
  if (!tenant.ok()) return Reply(context, tenant.status());
  if (absl::Status s =
          Require(*caller, *tenant, Permission::kWriteJobs, request->parent());
      !s.ok()) {
    return Reply(context, s);
  }
  if (request->requests().empty()) {
    return Reply(context,
                 core::FieldError("requests", "REQUIRED", "must not be empty"));
  }
  if (static_cast<size_t>(request->requests_size()) > kMaxBatch) {
    return Reply(context, core::FieldError(
                              "requests", "TOO_LARGE",
                              absl::StrCat("at most ", kMaxBatch, " jobs, got ",
                                           request->requests_size())));
  }
  if (absl::Status s = CheckRate(*tenant, request->requests_size()); !s.ok()) {
    return Reply(context, s);
  }
  std::vector<NewJob> jobs;
  jobs.reserve(request->requests_size());
  for (int i = 0; i < request->requests_size(); ++i) {
    const auto& item = request->requests(i);
    const std::string prefix = core::IndexField("requests", i);
    if (!item.parent().empty() && item.parent() != request->parent()) {
      return Reply(
          context,
          core::FieldError(core::JoinField(prefix, "parent"), "INCONSISTENT",
                           "must be empty or equal to the batch's parent"));
    }
    absl::StatusOr<NewJob> job = Prepare(*caller, *tenant, item);
    if (!job.ok())
      return Reply(context, core::PrefixField(job.status(), prefix));
    jobs.push_back(*std::move(job));
  }
  absl::StatusOr<std::vector<storage::postgres::SubmitOutcome>> outcomes =
      ctx_->jobs->SubmitMany(jobs, /*atomic=*/true);
  if (!outcomes.ok()) return Reply(context, outcomes.status());
  for (auto& o : *outcomes) {
    auto* r = response->add_responses();
    *r->mutable_job() = std::move(o.job);
    r->set_deduplicated(o.deduplicated);
  }
  if (ctx_->redis != nullptr)
    (void)ctx_->redis->Notify(kSchedulerWakeup, "submit");
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::Get(grpc::ServerContext* context,
                                 const trainyard::v1::GetJobRequest* request,
                                 trainyard::v1::Job* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<core::JobName> name =
      core::ParseJobName(request->name(), "name");
  if (!name.ok()) return Reply(context, name.status());
  if (absl::Status s = RequireJob(*caller, name->tenant, name->job_id,
                                  Permission::kRead, request->name());
      !s.ok()) {
    return Reply(context, s);
  }
  absl::StatusOr<Job> job =
      ctx_->jobs->Get(name->tenant, name->job_id,
                      request->view() == trainyard::v1::JOB_VIEW_FULL);
  if (!job.ok()) return Reply(context, job.status());
  *response = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::List(grpc::ServerContext* context,
                                  const trainyard::v1::ListJobsRequest* request,
                                  trainyard::v1::ListJobsResponse* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  if (absl::Status s = RejectJobToken(*caller, "list jobs"); !s.ok()) {
    return Reply(context, s);
  }
  absl::StatusOr<std::string> tenant =
      core::ParseTenantParent(request->parent(), "parent");
  if (!tenant.ok()) return Reply(context, tenant.status());
  storage::postgres::JobQuery query;
  if (*tenant == core::kAllId) {
    if (caller->platform_admin) {
      absl::StatusOr<storage::postgres::ListPage> all = ctx_->objects->List(
          storage::postgres::TenantKind(), {.limit = 100000});
      if (!all.ok()) return Reply(context, all.status());
      for (const auto& t : all->objects) query.tenants.push_back(t.key[0]);
    } else {
      query.tenants = caller->VisibleTenants();
    }
  } else {
    if (absl::Status s =
            Require(*caller, *tenant, Permission::kRead, request->parent());
        !s.ok()) {
      return Reply(context, s);
    }
    query.tenants = {*tenant};
  }
  absl::StatusOr<int> size = PageSize(request->page_size());
  if (!size.ok()) return Reply(context, size.status());
  query.limit = *size;
  if (!request->project().empty() && !core::IsValidId(request->project())) {
    return Reply(context, core::FieldError("project", "INVALID_NAME",
                                           "not a valid project id"));
  }
  if (!request->queue().empty() && !core::IsValidId(request->queue())) {
    return Reply(context, core::FieldError("queue", "INVALID_NAME",
                                           "not a valid queue id"));
  }
  query.project = request->project();
  query.queue = request->queue();
  query.job_set = request->job_set();
  for (int i = 0; i < request->states_size(); ++i) {
    auto st = static_cast<trainyard::v1::JobState>(request->states(i));
    if (!trainyard::v1::JobState_IsValid(st) ||
        st == trainyard::v1::JOB_STATE_UNSPECIFIED) {
      return Reply(context,
                   core::FieldError(core::IndexField("states", i),
                                    "INVALID_ENUM", "unknown job state"));
    }
    query.states.push_back(st);
  }
  for (const auto& [k, v] : request->labels()) query.labels.emplace_back(k, v);
  if (absl::Status s =
          core::ValidateLabels(request->labels(), ctx_->limits, "labels");
      !s.ok()) {
    return Reply(context, s);
  }
  if (!request->page_token().empty()) {
    int64_t before = 0;
    if (!absl::SimpleAtoi(request->page_token(), &before) || before <= 0) {
      return Reply(context, core::FieldError("page_token", "INVALID",
                                             "malformed page token"));
    }
    query.before_id = before;
  }
  query.with_attempts = request->view() == trainyard::v1::JOB_VIEW_FULL;
  absl::StatusOr<storage::postgres::JobPage> page = ctx_->jobs->List(query);
  if (!page.ok()) return Reply(context, page.status());
  for (auto& job : page->jobs) *response->add_jobs() = std::move(job);
  if (page->next_before_id > 0)
    response->set_next_page_token(absl::StrCat(page->next_before_id));
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::Cancel(
    grpc::ServerContext* context,
    const trainyard::v1::CancelJobRequest* request,
    trainyard::v1::Job* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<core::JobName> name =
      core::ParseJobName(request->name(), "name");
  if (!name.ok()) return Reply(context, name.status());
  if (absl::Status s = Require(*caller, name->tenant, Permission::kWriteJobs,
                               request->name());
      !s.ok()) {
    return Reply(context, s);
  }
  if (request->reason().size() > 1024) {
    return Reply(context, core::FieldError("reason", "TOO_LARGE",
                                           "at most 1024 characters"));
  }
  absl::StatusOr<Job> job = ctx_->jobs->Cancel(
      name->tenant, name->job_id, request->reason(), caller->principal);
  if (!job.ok()) return Reply(context, job.status());
  *response = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::SetHold(grpc::ServerContext* context,
                                     const std::string& job,
                                     const std::string& reason, bool hold,
                                     trainyard::v1::Job* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<core::JobName> name = core::ParseJobName(job, "name");
  if (!name.ok()) return Reply(context, name.status());
  if (absl::Status s =
          Require(*caller, name->tenant, Permission::kWriteJobs, job);
      !s.ok()) {
    return Reply(context, s);
  }
  if (reason.size() > 1024) {
    return Reply(context, core::FieldError("reason", "TOO_LARGE",
                                           "at most 1024 characters"));
  }
  absl::StatusOr<Job> held = ctx_->jobs->SetHold(
      name->tenant, name->job_id, hold, reason, caller->principal);
  if (!held.ok()) return Reply(context, held.status());
  // A released job is schedulable again: the scheduler need not wait for
  // its timer. (A hint only; it reads the outbox.)
  if (!hold && ctx_->redis != nullptr)
    (void)ctx_->redis->Notify(kSchedulerWakeup, "release");
  *response = *std::move(held);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::Hold(grpc::ServerContext* context,
                                  const trainyard::v1::HoldJobRequest* request,
                                  trainyard::v1::Job* response) {
  return SetHold(context, request->name(), request->reason(), /*hold=*/true,
                 response);
}

grpc::Status JobServiceImpl::Release(
    grpc::ServerContext* context,
    const trainyard::v1::ReleaseJobRequest* request,
    trainyard::v1::Job* response) {
  return SetHold(context, request->name(), request->reason(), /*hold=*/false,
                 response);
}

grpc::Status JobServiceImpl::Watch(
    grpc::ServerContext* context,
    const trainyard::v1::WatchJobsRequest* request,
    grpc::ServerWriter<trainyard::v1::WatchJobsResponse>* writer) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<std::string> tenant =
      core::ParseTenantParent(request->parent(), "parent");
  if (!tenant.ok()) return Reply(context, tenant.status());
  storage::postgres::EventFilter filter;
  std::string job_name;
  if (caller->job_scoped()) {
    // A job token watches its own job only.
    if (request->job().empty()) {
      return Reply(context,
                   RejectJobToken(*caller, "watch without a job filter"));
    }
    absl::StatusOr<core::JobName> name =
        core::ParseJobName(request->job(), "job");
    if (!name.ok()) return Reply(context, name.status());
    if (*tenant != core::kAllId && name->tenant != *tenant) {
      return Reply(context, core::FieldError("job", "INCONSISTENT",
                                             "job is not under parent"));
    }
    if (absl::Status s = RequireJob(*caller, name->tenant, name->job_id,
                                    Permission::kRead, request->job());
        !s.ok()) {
      return Reply(context, s);
    }
    filter.tenants = {name->tenant};
    filter.job_id = name->job_id;
    job_name = name->ToString();
  } else if (*tenant == core::kAllId) {
    if (!caller->platform_admin) {
      filter.tenants = caller->VisibleTenants();
      if (filter.tenants.empty()) {
        return Reply(context,
                     absl::PermissionDeniedError(absl::StrCat(
                         caller->principal, " has no role in any tenant")));
      }
    }
  } else {
    if (absl::Status s =
            Require(*caller, *tenant, Permission::kRead, request->parent());
        !s.ok()) {
      return Reply(context, s);
    }
    filter.tenants = {*tenant};
  }
  if (!request->job().empty() && !caller->job_scoped()) {
    absl::StatusOr<core::JobName> name =
        core::ParseJobName(request->job(), "job");
    if (!name.ok()) return Reply(context, name.status());
    if (*tenant != core::kAllId && name->tenant != *tenant) {
      return Reply(context, core::FieldError("job", "INCONSISTENT",
                                             "job is not under parent"));
    }
    if (absl::Status s =
            Require(*caller, name->tenant, Permission::kRead, request->job());
        !s.ok()) {
      return Reply(context, s);
    }
    filter.job_id = name->job_id;
    job_name = name->ToString();
  }
  filter.queue = request->queue();
  filter.job_set = request->job_set();

  uint64_t cursor = request->after_sequence();
  if (cursor == 0 && !request->from_start()) {
    absl::StatusOr<uint64_t> last = ctx_->jobs->LastEventSequence();
    if (!last.ok()) return Reply(context, last.status());
    cursor = *last;
  }
  // Headers go out at once so the client knows the stream is established.
  writer->SendInitialMetadata();

  auto send = [&](const trainyard::v1::JobEvent& e) {
    trainyard::v1::WatchJobsResponse r;
    *r.mutable_event() = e;
    return writer->Write(r);
  };
  while (!context->IsCancelled()) {
    EventHub::Read read = ctx_->hub->Wait(cursor, absl::Milliseconds(500));
    const bool gap =
        !read.events.empty() && read.events.front().sequence() > cursor + 1;
    if (read.behind || gap) {
      // Catch up from the outbox (the truth), then go back to the hub.
      absl::StatusOr<std::vector<trainyard::v1::JobEvent>> events =
          ctx_->jobs->ReadEvents(cursor, filter, 1000);
      if (!events.ok()) {
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      for (const auto& e : *events) {
        if (!send(e)) return grpc::Status::OK;
        cursor = e.sequence();
      }
      if (events->empty() && gap) {
        // Nothing committed between: the gap is a rolled-back sequence number.
        cursor = read.events.front().sequence() - 1;
      } else if (events->empty() && read.behind) {
        cursor = std::max(cursor, ctx_->hub->last());
      }
      continue;
    }
    for (const auto& e : read.events) {
      if (Matches(e, filter.tenants, filter, job_name) && !send(e))
        return grpc::Status::OK;
      cursor = e.sequence();
    }
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ReportCheckpoint(
    grpc::ServerContext* context,
    const trainyard::v1::ReportCheckpointRequest* request,
    trainyard::v1::Checkpoint* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<core::JobName> name =
      core::ParseJobName(request->job(), "job");
  if (!name.ok()) return Reply(context, name.status());
  if (absl::Status s = RequireJob(*caller, name->tenant, name->job_id,
                                  Permission::kWriteJobs, request->job());
      !s.ok()) {
    return Reply(context, s);
  }
  if (!request->has_checkpoint()) {
    return Reply(context,
                 core::FieldError("checkpoint", "REQUIRED", "must be set"));
  }
  if (absl::Status s =
          core::ValidateCheckpoint(request->checkpoint(), absl::Now());
      !s.ok()) {
    return Reply(context, core::PrefixField(s, "checkpoint"));
  }
  absl::StatusOr<trainyard::v1::Checkpoint> saved =
      ctx_->jobs->ReportCheckpoint(name->tenant, name->job_id,
                                   request->checkpoint());
  if (!saved.ok()) return Reply(context, saved.status());
  *response = *std::move(saved);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListCheckpoints(
    grpc::ServerContext* context,
    const trainyard::v1::ListCheckpointsRequest* request,
    trainyard::v1::ListCheckpointsResponse* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<core::JobName> name =
      core::ParseJobName(request->job(), "job");
  if (!name.ok()) return Reply(context, name.status());
  if (absl::Status s = RequireJob(*caller, name->tenant, name->job_id,
                                  Permission::kRead, request->job());
      !s.ok()) {
    return Reply(context, s);
  }
  absl::StatusOr<int> size = PageSize(request->page_size());
  if (!size.ok()) return Reply(context, size.status());
  int64_t before = 0;
  if (!request->page_token().empty() &&
      (!absl::SimpleAtoi(request->page_token(), &before) || before <= 0)) {
    return Reply(context, core::FieldError("page_token", "INVALID",
                                           "malformed page token"));
  }
  auto page =
      ctx_->jobs->ListCheckpoints(name->tenant, name->job_id, before, *size);
  if (!page.ok()) return Reply(context, page.status());
  for (auto& c : page->checkpoints) *response->add_checkpoints() = std::move(c);
  if (page->next_before_id > 0)
    response->set_next_page_token(absl::StrCat(page->next_before_id));
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ExplainPending(
    grpc::ServerContext* context,
    const trainyard::v1::ExplainPendingRequest* request,
    trainyard::v1::ExplainPendingResponse* response) {
  absl::StatusOr<Caller> caller = ctx_->auth->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<core::JobName> name =
      core::ParseJobName(request->name(), "name");
  if (!name.ok()) return Reply(context, name.status());
  if (absl::Status s = RequireJob(*caller, name->tenant, name->job_id,
                                  Permission::kRead, request->name());
      !s.ok()) {
    return Reply(context, s);
  }
  absl::StatusOr<storage::postgres::PendingPosition> pos =
      ctx_->jobs->Position(name->tenant, name->job_id);
  if (!pos.ok()) return Reply(context, pos.status());
  response->set_state(pos->state);
  response->set_queue_length(pos->queue_length);
  if (!core::IsPending(pos->state)) {
    response->set_reason("NOT_PENDING");
    response->set_message(absl::StrCat("the job is ",
                                       std::string(core::StateName(pos->state)),
                                       ", not pending"));
    return grpc::Status::OK;
  }
  response->set_position_in_queue(pos->position);
  // The scheduler's own reason once it has evaluated the job
  // (services/scheduler writes one for every job it leaves pending); the
  // position stays the live one above, in the policy's order (priority, then
  // submission).

  if (pos->state == trainyard::v1::JOB_STATE_QUEUED) {
    absl::StatusOr<std::optional<storage::postgres::Explanation>> e =
        ctx_->jobs->GetExplanation(name->job_id);
    if (!e.ok()) return Reply(context, e.status());
    if (e->has_value()) {
      response->set_reason((*e)->reason);
      response->set_message((*e)->message);
      return grpc::Status::OK;
    }
  }
  if (pos->state == trainyard::v1::JOB_STATE_HELD) {
    // Never considered by the scheduler until released; the position is the
    // place it goes back to.
    absl::StatusOr<Job> job =
        ctx_->jobs->Get(name->tenant, name->job_id, /*with_attempts=*/false);
    if (!job.ok()) return Reply(context, job.status());
    response->set_reason("HELD");
    response->set_message(absl::StrCat(
        job->state_message().empty() ? "held" : job->state_message(),
        "; not considered for scheduling until released; position ",
        pos->position, " of ", pos->queue_length, " pending in its queue"));
    return grpc::Status::OK;
  }
  // Until a scheduler has evaluated the job, its reason is that it awaits one;
  // the position is its place in the queue's order (priority, then submission).
  response->set_reason(pos->state == trainyard::v1::JOB_STATE_HELD
                           ? "HELD"
                           : "AWAITING_SCHEDULER");
  response->set_message(
      absl::StrCat(pos->state == trainyard::v1::JOB_STATE_HELD
                       ? "held; "
                       : "no scheduler has evaluated it yet; ",
                   "position ", pos->position, " of ", pos->queue_length,
                   " pending in its queue"));
  return grpc::Status::OK;
}

}  // namespace trainyard::api
