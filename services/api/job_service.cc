#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/api/events.h"
#include "services/api/handler.h"
#include "services/api/resource_util.h"
#include "services/api/services.h"
#include "services/api/status.h"
#include "services/api/submit_batcher.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/job_state.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/validation.h"
#include "services/lib/runtime/crypto.h"
#include "services/lib/runtime/proto_bytes.h"
#include "trainyard/v1/job.grpc.pb.h"

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
  return runtime::Sha256Hex(runtime::DeterministicBytes(content));
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

// The tenant of a submission's `parent`, which the caller may submit to.
absl::StatusOr<std::string> SubmitTenant(const Caller& caller,
                                         const std::string& parent) {
  TY_ASSIGN_OR_RETURN(std::string tenant,
                      domain::ParseTenantName(parent, "parent"));
  TY_RETURN_IF_ERROR(Require(caller, tenant, Permission::kWriteJobs, parent));
  return tenant;
}

// The id a page of a newest-first listing starts below: 0 (the newest) for an
// empty token.
absl::StatusOr<int64_t> BeforeIdFromPageToken(const std::string& token) {
  int64_t before = 0;
  if (!token.empty() && (!absl::SimpleAtoi(token, &before) || before <= 0)) {
    return PageTokenError();
  }
  return before;
}

// The order of ListJobs's `order_by` ("create_time desc", "priority", ...).
absl::Status ParseJobOrder(const std::string& text,
                           storage::postgres::JobQuery* query) {
  std::vector<std::string> words =
      absl::StrSplit(absl::AsciiStrToLower(text), ' ', absl::SkipWhitespace());
  if (words.empty()) return absl::OkStatus();  // newest first
  static const std::pair<const char*, storage::postgres::JobOrder> kOrders[] = {
      {"create_time", storage::postgres::JobOrder::kCreateTime},
      {"priority", storage::postgres::JobOrder::kPriority},
      {"display_name", storage::postgres::JobOrder::kDisplayName},
      {"state", storage::postgres::JobOrder::kState},
      {"queue", storage::postgres::JobOrder::kQueue},
  };
  bool known = false;
  for (const auto& [name, order] : kOrders) {
    if (words[0] == name) query->order = order, known = true;
  }
  if (!known || words.size() > 2 ||
      (words.size() == 2 && words[1] != "asc" && words[1] != "desc")) {
    return domain::FieldError(
        "order_by", "INVALID_VALUE",
        absl::StrCat(
            "\"", text,
            "\": want a field (create_time, priority, display_name, state, "
            "queue) and an optional asc or desc"));
  }
  query->descending = words.size() == 2 && words[1] == "desc";
  return absl::OkStatus();
}

// ListJobs's page token: the newest-first listing's is the last id (as before
// orders existed); another order's is "o" + base64url(order_by \x1f value \x1f
// id), valid only with the same order.
std::string JobPageToken(const std::string& order_by,
                         const storage::postgres::JobQuery& query,
                         const storage::postgres::JobCursor& next) {
  if (query.order == storage::postgres::JobOrder::kCreateTime &&
      query.descending) {
    return absl::StrCat(next.id);
  }
  std::string raw = absl::StrCat(absl::AsciiStrToLower(order_by), "\x1f",
                                 next.value, "\x1f", next.id);
  return absl::StrCat("o", absl::WebSafeBase64Escape(raw));
}

absl::StatusOr<std::optional<storage::postgres::JobCursor>>
JobCursorFromPageToken(const std::string& token, const std::string& order_by,
                       const storage::postgres::JobQuery& query) {
  if (token.empty()) return std::nullopt;
  if (query.order == storage::postgres::JobOrder::kCreateTime &&
      query.descending) {
    TY_ASSIGN_OR_RETURN(int64_t before, BeforeIdFromPageToken(token));
    return storage::postgres::JobCursor{.id = before};
  }
  std::string raw;
  if (token[0] != 'o' || !absl::WebSafeBase64Unescape(token.substr(1), &raw)) {
    return PageTokenError();
  }
  std::vector<std::string> parts = absl::StrSplit(raw, '\x1f');
  storage::postgres::JobCursor cursor;
  if (parts.size() != 3 || parts[0] != absl::AsciiStrToLower(order_by) ||
      !absl::SimpleAtoi(parts[2], &cursor.id) || cursor.id <= 0) {
    return PageTokenError();
  }
  cursor.value = parts[1];
  return cursor;
}

// Who may act on one job: job tokens for their own job (RequireJob), or never
// (Require).
enum class JobTokens { kOwnJob, kRefused };

class JobServiceImpl final
    : public ApiService<trainyard::v1::JobService,
                        trainyard::v1::JobService::WithCallbackMethod_Submit<
                            trainyard::v1::JobService::Service>> {
 public:
  using ApiService::ApiService;

  // Charges `cost` to the tenant's submit rate limit.
  absl::Status CheckRate(const std::string& tenant, double cost) {
    if (ctx_->rate_limiter == nullptr) return absl::OkStatus();
    absl::StatusOr<trainyard::v1::Tenant> t =
        ctx_->directory->GetTenant(tenant);
    if (t.ok() && t->submit_rate_limit() > 0) {
      ctx_->rate_limiter->SetLimit(
          tenant, t->submit_rate_limit(),
          t->submit_burst() > 0 ? t->submit_burst() : t->submit_rate_limit());
    }
    storage::redis::RateDecision d = ctx_->rate_limiter->Check(tenant, cost);
    if (d.allowed) return absl::OkStatus();
    return WithRetryDelay(
        domain::AttachErrorInfo(
            absl::ResourceExhaustedError(absl::StrCat(
                "tenant ", tenant, " is over its submit rate limit; retry in ",
                absl::FormatDuration(d.retry_after))),
            "", reason::kRateLimited),
        d.retry_after);
  }

  // Validates one submission and turns it into a storage row; errors name
  // fields relative to the SubmitJobRequest.
  absl::StatusOr<NewJob> Prepare(const Caller& caller,
                                 const std::string& tenant,
                                 const trainyard::v1::SubmitJobRequest& req) {
    TY_RETURN_IF_ERROR(
        domain::ValidateClientRequestId(req.client_request_id()));
    if (!req.has_job())
      return domain::FieldError("job", "REQUIRED", "must be set");
    TY_RETURN_IF_ERROR(domain::PrefixField(
        domain::ValidateJob(req.job(), ctx_->limits), "job"));
    const trainyard::v1::JobSpec& spec = req.job().spec();
    TY_RETURN_IF_ERROR(
        ctx_->directory->CheckQueue(tenant, spec.queue(), "job.spec.queue"));
    TY_RETURN_IF_ERROR(ctx_->directory->CheckProject(tenant, spec.project(),
                                                     "job.spec.project"));
    TY_ASSIGN_OR_RETURN(const trainyard::v1::Tenant t,
                        ctx_->directory->GetTenant(tenant));
    if (t.suspended()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tenant ", tenant, " is suspended and cannot submit jobs"));
    }
    TY_ASSIGN_OR_RETURN(
        const trainyard::v1::PriorityClass pc,
        ctx_->directory->ResolvePriorityClass(t, spec.priority_class(),
                                              "job.spec.priority_class"));
    TY_ASSIGN_OR_RETURN(
        const std::shared_ptr<const domain::CapacityIndex> capacity,
        ctx_->directory->Capacity());
    TY_RETURN_IF_ERROR(domain::PrefixField(capacity->CheckFits(spec), "job"));

    NewJob n;
    n.tenant = tenant;
    n.client_request_id = req.client_request_id();
    n.request_hash = RequestHash(req.job());
    n.job.set_display_name(req.job().display_name());
    *n.job.mutable_labels() = req.job().labels();
    *n.job.mutable_spec() = spec;
    n.job.set_creator(caller.principal);
    n.job.set_priority(pc.value());
    return n;
  }

  grpc::ServerUnaryReactor* Submit(
      grpc::CallbackServerContext* context,
      const trainyard::v1::SubmitJobRequest* request,
      trainyard::v1::SubmitJobResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    NewJob job;
    grpc::Status checked =
        Run(ctx_, context, Method("Submit"), *request,
            [&](const Caller& caller) -> absl::Status {
              TY_ASSIGN_OR_RETURN(const std::string tenant,
                                  SubmitTenant(caller, request->parent()));
              TY_RETURN_IF_ERROR(CheckRate(tenant, 1));
              TY_ASSIGN_OR_RETURN(job, Prepare(caller, tenant, *request));
              return absl::OkStatus();
            });
    if (!checked.ok()) {
      reactor->Finish(checked);
      return reactor;
    }
    ctx_->batcher->SubmitAsync(
        std::move(job),
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

  TY_RPC(SubmitBatch, trainyard::v1::SubmitJobBatchRequest,
         trainyard::v1::SubmitJobBatchResponse) {
    return Run(
        ctx_, context, Method("SubmitBatch"), *request,
        [&](const Caller& caller) -> absl::Status {
          TY_ASSIGN_OR_RETURN(const std::string tenant,
                              SubmitTenant(caller, request->parent()));
          if (request->requests().empty()) {
            return domain::FieldError("requests", "REQUIRED",
                                      "must not be empty");
          }
          if (static_cast<size_t>(request->requests_size()) > kMaxBatch) {
            return domain::FieldError(
                "requests", "TOO_LARGE",
                absl::StrCat("at most ", kMaxBatch, " jobs, got ",
                             request->requests_size()));
          }
          TY_RETURN_IF_ERROR(CheckRate(tenant, request->requests_size()));
          std::vector<NewJob> jobs;
          jobs.reserve(request->requests_size());
          for (int i = 0; i < request->requests_size(); ++i) {
            const auto& item = request->requests(i);
            const std::string prefix = domain::IndexField("requests", i);
            if (!item.parent().empty() && item.parent() != request->parent()) {
              return domain::FieldError(
                  domain::JoinField(prefix, "parent"), "INCONSISTENT",
                  "must be empty or equal to the batch's parent");
            }
            absl::StatusOr<NewJob> job = Prepare(caller, tenant, item);
            if (!job.ok()) return domain::PrefixField(job.status(), prefix);
            jobs.push_back(*std::move(job));
          }
          TY_ASSIGN_OR_RETURN(
              std::vector<storage::postgres::SubmitOutcome> outcomes,
              ctx_->jobs->SubmitMany(jobs, /*atomic=*/true));
          for (auto& o : outcomes) {
            auto* r = response->add_responses();
            *r->mutable_job() = std::move(o.job);
            r->set_deduplicated(o.deduplicated);
          }
          if (ctx_->redis != nullptr) {
            (void)ctx_->redis->Notify(kSchedulerWakeup, "submit");
          }
          return absl::OkStatus();
        });
  }

  TY_RPC(Get, trainyard::v1::GetJobRequest, trainyard::v1::Job) {
    return RunOnJob(
        context, "Get", *request, request->name(), "name", Permission::kRead,
        JobTokens::kOwnJob,
        [&](const Caller&, const domain::JobName& name) -> absl::Status {
          TY_ASSIGN_OR_RETURN(
              *response,
              ctx_->jobs->Get(name.tenant, name.job_id,
                              request->view() == trainyard::v1::JOB_VIEW_FULL));
          return ctx_->jobs->FillCosts({response});
        });
  }

  TY_RPC(List, trainyard::v1::ListJobsRequest,
         trainyard::v1::ListJobsResponse) {
    return Run(
        ctx_, context, Method("List"), *request,
        [&](const Caller& caller) -> absl::Status {
          TY_RETURN_IF_ERROR(RejectJobToken(caller, "list jobs"));
          TY_ASSIGN_OR_RETURN(
              const std::string tenant,
              domain::ParseTenantParent(request->parent(), "parent"));
          storage::postgres::JobQuery query;
          if (tenant != domain::kAllId) {
            TY_RETURN_IF_ERROR(
                Require(caller, tenant, Permission::kRead, request->parent()));
            query.tenants = {tenant};
          } else if (caller.platform_admin) {
            TY_ASSIGN_OR_RETURN(
                const storage::postgres::ListPage all,
                ctx_->objects->List(storage::postgres::TenantKind(),
                                    {.limit = 100000}));
            for (const auto& t : all.objects) query.tenants.push_back(t.key[0]);
          } else {
            query.tenants = caller.VisibleTenants();
          }
          TY_ASSIGN_OR_RETURN(query.limit, PageSize(request->page_size()));
          if (!request->project().empty() &&
              !domain::IsValidId(request->project())) {
            return domain::FieldError("project", "INVALID_NAME",
                                      "not a valid project id");
          }
          if (!request->queue().empty() &&
              !domain::IsValidId(request->queue())) {
            return domain::FieldError("queue", "INVALID_NAME",
                                      "not a valid queue id");
          }
          query.project = request->project();
          query.queue = request->queue();
          query.job_set = request->job_set();
          query.creator = request->user();
          if (request->has_created_after()) {
            TY_ASSIGN_OR_RETURN(
                query.created_after,
                domain::ToTime(request->created_after(), "created_after"));
          }
          if (request->has_created_before()) {
            TY_ASSIGN_OR_RETURN(
                query.created_before,
                domain::ToTime(request->created_before(), "created_before"));
          }
          TY_RETURN_IF_ERROR(ParseJobOrder(request->order_by(), &query));
          for (int i = 0; i < request->states_size(); ++i) {
            auto st = static_cast<trainyard::v1::JobState>(request->states(i));
            if (!trainyard::v1::JobState_IsValid(st) ||
                st == trainyard::v1::JOB_STATE_UNSPECIFIED) {
              return domain::FieldError(domain::IndexField("states", i),
                                        "INVALID_ENUM", "unknown job state");
            }
            query.states.push_back(st);
          }
          for (const auto& [k, v] : request->labels()) {
            query.labels.emplace_back(k, v);
          }
          TY_RETURN_IF_ERROR(domain::ValidateLabels(request->labels(),
                                                    ctx_->limits, "labels"));
          TY_ASSIGN_OR_RETURN(
              query.after, JobCursorFromPageToken(request->page_token(),
                                                  request->order_by(), query));
          query.with_attempts = request->view() == trainyard::v1::JOB_VIEW_FULL;
          TY_ASSIGN_OR_RETURN(storage::postgres::JobPage page,
                              ctx_->jobs->List(query));
          for (auto& job : page.jobs) *response->add_jobs() = std::move(job);
          std::vector<trainyard::v1::Job*> jobs;
          for (auto& job : *response->mutable_jobs()) jobs.push_back(&job);
          TY_RETURN_IF_ERROR(ctx_->jobs->FillCosts(jobs));
          if (page.next.has_value()) {
            response->set_next_page_token(
                JobPageToken(request->order_by(), query, *page.next));
          }
          return absl::OkStatus();
        });
  }

  // Runs the handler of `rpc` ("Get") for `request` on the job that `job`
  // (the request field `field`) names, on which the caller needs
  // `permission`.
  grpc::Status RunOnJob(
      grpc::ServerContext* context, std::string_view rpc,
      const google::protobuf::Message& request, const std::string& job,
      std::string_view field, Permission permission, JobTokens tokens,
      absl::FunctionRef<absl::Status(const Caller&, const domain::JobName&)>
          fn) {
    return Run(ctx_, context, Method(rpc), request,
               [&](const Caller& caller) -> absl::Status {
                 TY_ASSIGN_OR_RETURN(const domain::JobName name,
                                     domain::ParseJobName(job, field));
                 TY_RETURN_IF_ERROR(
                     tokens == JobTokens::kOwnJob
                         ? RequireJob(caller, name.tenant, name.job_id,
                                      permission, job)
                         : Require(caller, name.tenant, permission, job));
                 return fn(caller, name);
               });
  }

  // ReportCheckpoint and ListCheckpoints: the job `request.job()` names, on
  // which the caller (or the job's own token) needs `permission`.
  template <typename Request>
  grpc::Status RunOnCheckpoints(
      grpc::ServerContext* context, std::string_view rpc,
      const Request& request, Permission permission,
      absl::FunctionRef<absl::Status(const domain::JobName&)> fn) {
    return RunOnJob(
        context, rpc, request, request.job(), "job", permission,
        JobTokens::kOwnJob,
        [&](const Caller&, const domain::JobName& name) { return fn(name); });
  }

  // Cancel, Hold and Release: the job named `job`, which the caller may write
  // (job tokens may not), a reason of at most 1024 characters, and `change`.
  grpc::Status ChangeJob(grpc::ServerContext* context, std::string_view rpc,
                         const google::protobuf::Message& request,
                         const std::string& job, const std::string& reason,
                         absl::FunctionRef<absl::StatusOr<trainyard::v1::Job>(
                             const domain::JobName& name, const Caller& caller)>
                             change,
                         trainyard::v1::Job* response) {
    return RunOnJob(
        context, rpc, request, job, "name", Permission::kWriteJobs,
        JobTokens::kRefused,
        [&](const Caller& caller, const domain::JobName& name) -> absl::Status {
          if (reason.size() > 1024) {
            return domain::FieldError("reason", "TOO_LARGE",
                                      "at most 1024 characters");
          }
          TY_ASSIGN_OR_RETURN(*response, change(name, caller));
          return absl::OkStatus();
        });
  }

  TY_RPC(Cancel, trainyard::v1::CancelJobRequest, trainyard::v1::Job) {
    return ChangeJob(
        context, "Cancel", *request, request->name(), request->reason(),
        [&](const domain::JobName& name, const Caller& caller) {
          return ctx_->jobs->Cancel(name.tenant, name.job_id, request->reason(),
                                    caller.principal);
        },
        response);
  }

  // Hold (hold = true) or Release.
  grpc::Status SetHold(grpc::ServerContext* context, std::string_view rpc,
                       const google::protobuf::Message& request,
                       const std::string& job, const std::string& reason,
                       bool hold, trainyard::v1::Job* response) {
    return ChangeJob(
        context, rpc, request, job, reason,
        [&](const domain::JobName& name,
            const Caller& caller) -> absl::StatusOr<Job> {
          TY_ASSIGN_OR_RETURN(
              Job held, ctx_->jobs->SetHold(name.tenant, name.job_id, hold,
                                            reason, caller.principal));
          // A released job is schedulable again: the scheduler need not wait
          // for its timer. (A hint only; it reads the outbox.)
          if (!hold && ctx_->redis != nullptr) {
            (void)ctx_->redis->Notify(kSchedulerWakeup, "release");
          }
          return held;
        },
        response);
  }

  TY_RPC(Hold, trainyard::v1::HoldJobRequest, trainyard::v1::Job) {
    return SetHold(context, "Hold", *request, request->name(),
                   request->reason(), /*hold=*/true, response);
  }

  TY_RPC(Release, trainyard::v1::ReleaseJobRequest, trainyard::v1::Job) {
    return SetHold(context, "Release", *request, request->name(),
                   request->reason(), /*hold=*/false, response);
  }

  // The events a Watch request selects, for the caller: its tenants, job and
  // filters (`job_name`: the job's name when it names one).
  absl::Status WatchFilter(const Caller& caller,
                           const trainyard::v1::WatchJobsRequest& request,
                           storage::postgres::EventFilter* filter,
                           std::string* job_name) {
    TY_ASSIGN_OR_RETURN(const std::string tenant,
                        domain::ParseTenantParent(request.parent(), "parent"));
    if (caller.job_scoped()) {
      // A job token watches its own job only.
      if (request.job().empty()) {
        return RejectJobToken(caller, "watch without a job filter");
      }
    } else if (tenant == domain::kAllId) {
      if (!caller.platform_admin) {
        filter->tenants = caller.VisibleTenants();
        if (filter->tenants.empty()) {
          return absl::PermissionDeniedError(
              absl::StrCat(caller.principal, " has no role in any tenant"));
        }
      }
    } else {
      TY_RETURN_IF_ERROR(
          Require(caller, tenant, Permission::kRead, request.parent()));
      filter->tenants = {tenant};
    }
    if (!request.job().empty()) {
      TY_ASSIGN_OR_RETURN(const domain::JobName name,
                          domain::ParseJobName(request.job(), "job"));
      if (tenant != domain::kAllId && name.tenant != tenant) {
        return domain::FieldError("job", "INCONSISTENT",
                                  "job is not under parent");
      }
      TY_RETURN_IF_ERROR(RequireJob(caller, name.tenant, name.job_id,
                                    Permission::kRead, request.job()));
      if (caller.job_scoped()) filter->tenants = {name.tenant};
      filter->job_id = name.job_id;
      *job_name = name.ToString();
    }
    filter->queue = request.queue();
    filter->job_set = request.job_set();
    return absl::OkStatus();
  }

  grpc::Status Watch(
      grpc::ServerContext* context,
      const trainyard::v1::WatchJobsRequest* request,
      grpc::ServerWriter<trainyard::v1::WatchJobsResponse>* writer) override {
    return Run(
        ctx_, context, Method("Watch"), *request,
        [&](const Caller& caller) -> absl::Status {
          storage::postgres::EventFilter filter;
          std::string job_name;
          TY_RETURN_IF_ERROR(WatchFilter(caller, *request, &filter, &job_name));
          uint64_t cursor = request->after_sequence();
          if (cursor == 0 && !request->from_start()) {
            TY_ASSIGN_OR_RETURN(cursor, ctx_->jobs->LastEventSequence());
          }
          // Headers go out at once so the client knows the stream is
          // established.
          writer->SendInitialMetadata();

          auto send = [&](const trainyard::v1::JobEvent& e) {
            trainyard::v1::WatchJobsResponse r;
            *r.mutable_event() = e;
            return writer->Write(r);
          };
          while (!context->IsCancelled()) {
            EventHub::Read read =
                ctx_->hub->Wait(cursor, absl::Milliseconds(500));
            const bool gap = !read.events.empty() &&
                             read.events.front().sequence() > cursor + 1;
            if (read.behind || gap) {
              // Catch up from the outbox (the truth), then go back to the hub.
              absl::StatusOr<std::vector<trainyard::v1::JobEvent>> events =
                  ctx_->jobs->ReadEvents(cursor, filter, 1000);
              if (!events.ok()) {
                absl::SleepFor(absl::Milliseconds(200));
                continue;
              }
              for (const auto& e : *events) {
                if (!send(e)) return absl::OkStatus();
                cursor = e.sequence();
              }
              if (events->empty() && gap) {
                // Nothing committed between: the gap is a rolled-back sequence
                // number.
                cursor = read.events.front().sequence() - 1;
              } else if (events->empty() && read.behind) {
                cursor = std::max(cursor, ctx_->hub->last());
              }
              continue;
            }
            for (const auto& e : read.events) {
              if (Matches(e, filter.tenants, filter, job_name) && !send(e)) {
                return absl::OkStatus();
              }
              cursor = e.sequence();
            }
          }
          return absl::OkStatus();
        });
  }

  TY_RPC(ReportCheckpoint, trainyard::v1::ReportCheckpointRequest,
         trainyard::v1::Checkpoint) {
    return RunOnCheckpoints(
        context, "ReportCheckpoint", *request, Permission::kWriteJobs,
        [&](const domain::JobName& name) -> absl::Status {
          if (!request->has_checkpoint()) {
            return domain::FieldError("checkpoint", "REQUIRED", "must be set");
          }
          TY_RETURN_IF_ERROR(domain::PrefixField(
              domain::ValidateCheckpoint(request->checkpoint(), absl::Now()),
              "checkpoint"));
          TY_ASSIGN_OR_RETURN(
              *response, ctx_->jobs->ReportCheckpoint(name.tenant, name.job_id,
                                                      request->checkpoint()));
          return absl::OkStatus();
        });
  }

  TY_RPC(ListCheckpoints, trainyard::v1::ListCheckpointsRequest,
         trainyard::v1::ListCheckpointsResponse) {
    return RunOnCheckpoints(
        context, "ListCheckpoints", *request, Permission::kRead,
        [&](const domain::JobName& name) -> absl::Status {
          TY_ASSIGN_OR_RETURN(const int size, PageSize(request->page_size()));
          TY_ASSIGN_OR_RETURN(const int64_t before,
                              BeforeIdFromPageToken(request->page_token()));
          TY_ASSIGN_OR_RETURN(
              auto page, ctx_->jobs->ListCheckpoints(name.tenant, name.job_id,
                                                     before, size));
          for (auto& c : page.checkpoints) {
            *response->add_checkpoints() = std::move(c);
          }
          if (page.next_before_id > 0) {
            response->set_next_page_token(absl::StrCat(page.next_before_id));
          }
          return absl::OkStatus();
        });
  }

  TY_RPC(ExplainPending, trainyard::v1::ExplainPendingRequest,
         trainyard::v1::ExplainPendingResponse) {
    return RunOnJob(context, "ExplainPending", *request, request->name(),
                    "name", Permission::kRead, JobTokens::kOwnJob,
                    [&](const Caller&, const domain::JobName& name) {
                      return Explain(name, response);
                    });
  }

  TY_RPC(GetLogs, trainyard::v1::GetJobLogsRequest, trainyard::v1::JobLogs) {
    return RunOnJob(
        context, "GetLogs", *request, request->name(), "name",
        Permission::kRead, JobTokens::kRefused,
        [&](const Caller&, const domain::JobName& name) -> absl::Status {
          if (request->attempt() < 0) {
            return domain::FieldError("attempt", "INVALID_VALUE",
                                      "must be 0 (the newest) or more");
          }
          if (request->offset() < 0) {
            return domain::FieldError("offset", "INVALID_VALUE",
                                      "must be 0 or more");
          }
          TY_ASSIGN_OR_RETURN(const Job job,
                              ctx_->jobs->Get(name.tenant, name.job_id,
                                              /*with_attempts=*/true));
          return Logs(job, name.job_id, request->attempt(), request->offset(),
                      response);
        });
  }

  // GetLogs of attempt `index` (0: the newest) of `job` from byte `offset`.
  absl::Status Logs(const Job& job, int64_t job_id, int32_t index,
                    int64_t offset, trainyard::v1::JobLogs* response) {
    response->set_job(job.name());
    if (job.attempts_size() == 0) {
      if (index > 0) {
        return domain::FieldError("attempt", "OUT_OF_RANGE",
                                  "the job has no attempt yet");
      }
      response->set_unavailable_reason(
          absl::StrCat("the job has not run yet (it is ",
                       std::string(domain::StateName(job.state())), ")"));
      return absl::OkStatus();
    }
    const trainyard::v1::Attempt* attempt = nullptr;
    for (const trainyard::v1::Attempt& a : job.attempts()) {
      if (index == 0 ? (attempt == nullptr || a.index() > attempt->index())
                     : a.index() == index) {
        attempt = &a;
      }
    }
    if (attempt == nullptr) {
      return domain::FieldError(
          "attempt", "OUT_OF_RANGE",
          absl::StrCat("the job has ", job.attempts_size(), " attempts"));
    }
    response->set_attempt(attempt->index());
    response->set_backend_job_name(attempt->backend_job_name());
    TY_ASSIGN_OR_RETURN(
        const std::optional<storage::postgres::JobStore::AttemptLog> log,
        ctx_->jobs->GetAttemptLog(job_id, attempt->index()));
    if (!log.has_value()) {
      if (attempt->has_end_time()) {
        response->set_complete(true);
        response->set_unavailable_reason(
            "no output was copied of this attempt (its dispatcher copies "
            "none, or it ended before it ran)");
      }
      return absl::OkStatus();
    }
    const int64_t kept_from =
        log->size - static_cast<int64_t>(log->data.size());
    int64_t start = std::max(offset, kept_from);
    std::string_view bytes;
    if (start < log->size) {
      bytes = std::string_view(log->data).substr(
          static_cast<size_t>(start - kept_from));
      // Where the kept bytes were cut, skip the rest of a cut character.
      if (start == kept_from && kept_from > offset) {
        while (!bytes.empty() && (bytes.front() & 0xc0) == 0x80 &&
               start - kept_from < 3) {
          bytes.remove_prefix(1);
          ++start;
        }
      }
    } else {
      start = log->size;
    }
    response->set_text(domain::ToValidUtf8(bytes));
    response->set_start_offset(start);
    response->set_end_offset(log->size);
    response->set_complete(log->complete);
    response->set_unavailable_reason(log->error);
    *response->mutable_update_time() = ToProtoTime(log->update_time);
    return absl::OkStatus();
  }

  // ExplainPending of the job `name`.
  absl::Status Explain(const domain::JobName& name,
                       trainyard::v1::ExplainPendingResponse* response) {
    TY_ASSIGN_OR_RETURN(const storage::postgres::PendingPosition pos,
                        ctx_->jobs->Position(name.tenant, name.job_id));
    response->set_state(pos.state);
    response->set_queue_length(pos.queue_length);
    if (!domain::IsPending(pos.state)) {
      response->set_reason("NOT_PENDING");
      response->set_message(
          absl::StrCat("the job is ", std::string(domain::StateName(pos.state)),
                       ", not pending"));
      return absl::OkStatus();
    }
    response->set_position_in_queue(pos.position);
    // The scheduler's own reason once it has evaluated the job
    // (services/scheduler writes one for every job it leaves pending); the
    // position stays the live one above, in the policy's order (priority,
    // then submission).
    if (pos.state == trainyard::v1::JOB_STATE_QUEUED) {
      TY_ASSIGN_OR_RETURN(
          const std::optional<storage::postgres::Explanation> explanation,
          ctx_->jobs->GetExplanation(name.job_id));
      if (explanation.has_value()) {
        response->set_reason(explanation->reason);
        response->set_message(explanation->message);
        if (explanation->evaluate_time != absl::InfinitePast()) {
          *response->mutable_evaluate_time() =
              ToProtoTime(explanation->evaluate_time);
        }
        return absl::OkStatus();
      }
    }
    if (pos.state == trainyard::v1::JOB_STATE_HELD) {
      // Never considered by the scheduler until released; the position is the
      // place it goes back to.
      TY_ASSIGN_OR_RETURN(
          const Job job,
          ctx_->jobs->Get(name.tenant, name.job_id, /*with_attempts=*/false));
      response->set_reason("HELD");
      response->set_message(absl::StrCat(
          job.state_message().empty() ? "held" : job.state_message(),
          "; not considered for scheduling until released; position ",
          pos.position, " of ", pos.queue_length, " pending in its queue"));
      return absl::OkStatus();
    }
    // Until a scheduler has evaluated the job, its reason is that it awaits
    // one; the position is its place in the queue's order (priority, then
    // submission).
    response->set_reason("AWAITING_SCHEDULER");
    response->set_message(absl::StrCat(
        "no scheduler has evaluated it yet; position ", pos.position, " of ",
        pos.queue_length, " pending in its queue"));
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<grpc::Service> NewJobService(ApiContext* ctx) {
  return std::make_unique<JobServiceImpl>(ctx);
}

}  // namespace trainyard::api
