// The authorization matrix of the api service, against a real PostgreSQL and
// Redis: every RPC of JobService, QueueService, ClusterService and
// AdminService, called by every kind of principal, on an object of its own
// tenant ("t1") and of another tenant ("t2"), or, for platform objects and
// caller-relative calls, once.
//
// The expected codes are written from the rules (docs/security.md, the comments
// of proto/trainyard/v1/*.proto), not from what the implementation does:
//   * a principal with no role in a tenant cannot see that tenant's objects:
//   NOT_FOUND;
//   * a principal that sees the tenant but lacks the role: PERMISSION_DENIED,
//   naming the role;
//   * platform objects (cohorts, priority classes, clusters, pools, nodes,
//   flavors) are read by
//     every authenticated principal and written by platform-admins;
//   * tenants and queues belong to tenants but only platform-admins create or
//   change them;
//   * every administrative mutation leaves an audit row, refused ones too, with
//   the code as
//     the result;
//   * a job token (of the shared job in t1) may call JobService's Get, Watch,
//     ExplainPending, ListCheckpoints and ReportCheckpoint on its own job and
//     nothing else: every other cell is PERMISSION_DENIED naming its job
//     (docs/security.md, "Job tokens").
// Where the rules leave the code open (a denial that could be either), a cell
// accepts both; see the comments at those rows.
//
// One test per cell, named Service_Rpc[_variant]__role__own|other|platform, so
// a failure names the role, the RPC and the tenant. Mutations that succeed work
// on objects made for the cell.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/empty.pb.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/accounting/accounting_service.h"
#include "services/lib/domain/names.h"
#include "services/lib/runtime/job_token.h"
#include "tests/integration/api_test_harness.h"
#include "trainyard/v1/accounting.grpc.pb.h"

namespace trainyard::testing {
namespace {

namespace v1 = trainyard::v1;
using grpc::StatusCode;

// --- Who calls ---

enum class Who {
  kViewer,         // viewer in t1
  kMember,         // member in t1
  kTenantAdmin,    // tenant-admin in t1
  kFinance,        // finance in t1 (viewer + accounting)
  kPlatformAdmin,  // platform-admin
  kNobody,         // a valid token, no role binding anywhere
  kAnonymous,      // no credentials at all
  kJobToken,       // the job token of the shared job of t1
  // finance bound without a tenant: every tenant's accounting, nothing else
  kPlatformFinance,
};
constexpr int kWhoCount = 9;
constexpr Who kEveryone[] = {
    Who::kViewer,    Who::kMember,        Who::kTenantAdmin,
    Who::kFinance,   Who::kPlatformAdmin, Who::kNobody,
    Who::kAnonymous, Who::kJobToken,      Who::kPlatformFinance};

std::string WhoName(Who who) {
  switch (who) {
    case Who::kViewer:
      return "viewer";
    case Who::kMember:
      return "member";
    case Who::kTenantAdmin:
      return "tenant_admin";
    case Who::kFinance:
      return "finance";
    case Who::kPlatformAdmin:
      return "platform_admin";
    case Who::kNobody:
      return "nobody";
    case Who::kAnonymous:
      return "anonymous";
    case Who::kJobToken:
      return "job_token";
    case Who::kPlatformFinance:
      return "platform_finance";
  }
  return "?";
}

bool IsTenantRole(Who who) {
  return who == Who::kViewer || who == Who::kMember ||
         who == Who::kTenantAdmin || who == Who::kFinance;
}

// --- What it calls on ---

enum class Target {
  kOwn,    // an object of tenant t1 (the tenant roles' own)
  kOther,  // an object of tenant t2 (where no tenant role here has a binding)
  kPlatform,  // a platform object, or a call relative to the caller
};

std::string TargetName(Target t) {
  switch (t) {
    case Target::kOwn:
      return "own";
    case Target::kOther:
      return "other";
    case Target::kPlatform:
      return "platform";
  }
  return "?";
}

constexpr char kOwnTenant[] = "t1";
constexpr char kOtherTenant[] = "t2";

// --- Expected outcomes, from the rules ---

using Codes = std::vector<StatusCode>;
using Expect = std::function<Codes(Who, Target)>;

std::string CodeName(StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

std::string CodesName(const Codes& codes) {
  std::vector<std::string> names;
  for (StatusCode c : codes) names.push_back(CodeName(c));
  return absl::StrJoin(names, " or ");
}

// The tenant role a tenant-scoped RPC needs (docs/security.md, "Roles").
enum class Need { kViewer, kMember, kTenantAdmin, kPlatformAdmin };

const char* NeedName(Need need) {
  switch (need) {
    case Need::kViewer:
      return "viewer";
    case Need::kMember:
      return "member";
    case Need::kTenantAdmin:
      return "tenant-admin";
    case Need::kPlatformAdmin:
      return "platform-admin";
  }
  return "?";
}

// Whether `who`'s role in t1 grants `need` there: viewer ⊂ member ⊂
// tenant-admin; finance = viewer + accounting; nothing but platform-admin
// grants platform-admin.
bool Grants(Who who, Need need) {
  switch (need) {
    case Need::kViewer:
      return IsTenantRole(who);
    case Need::kMember:
      return who == Who::kMember || who == Who::kTenantAdmin;
    case Need::kTenantAdmin:
      return who == Who::kTenantAdmin;
    case Need::kPlatformAdmin:
      return false;
  }
  return false;
}

// An RPC on an object of a tenant that needs `need` there (docs/security.md,
// "Denials").
Expect InTenant(Need need) {
  return [need](Who who, Target target) -> Codes {
    if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
    if (who == Who::kPlatformAdmin) return {StatusCode::OK};
    // Platform finance holds no role in any tenant: like nobody, outside
    // accounting.
    if (who == Who::kNobody || who == Who::kPlatformFinance ||
        target == Target::kOther)
      return {StatusCode::NOT_FOUND};
    return {Grants(who, need) ? StatusCode::OK : StatusCode::PERMISSION_DENIED};
  };
}

// Reads of platform objects and calls about the caller itself.
Expect AnyAuthenticated() {
  return [](Who who, Target) -> Codes {
    if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
    return {StatusCode::OK};
  };
}

// Writes of platform objects.
Expect PlatformAdminOnly() {
  return [](Who who, Target) -> Codes {
    if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
    if (who == Who::kPlatformAdmin) return {StatusCode::OK};
    return {StatusCode::PERMISSION_DENIED};
  };
}

// The methods a job token may call (docs/security.md, "Job tokens"), on its
// own job only.
bool IsJobTokenMethod(const std::string& method) {
  for (const char* rpc : {"Get", "Watch", "ExplainPending", "ListCheckpoints",
                          "ReportCheckpoint"}) {
    if (method == absl::StrCat("/trainyard.v1.JobService/", rpc)) return true;
  }
  return false;
}

// --- The shared world ---

struct Env {
  std::unique_ptr<ApiHarness> h;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::QueueService::Stub> queues;
  std::unique_ptr<v1::ClusterService::Stub> clusters;
  std::unique_ptr<v1::AdminService::Stub> admin;
  std::unique_ptr<v1::AccountingService::Stub> accounting;
  std::string token[kWhoCount];      // by Who; empty for kAnonymous
  std::string principal[kWhoCount];  // by Who; empty for kAnonymous
  // A queued job in each tenant, with one checkpoint; never cancelled.
  std::string job_t1;
  std::string job_t2;
  std::atomic<int> counter{0};

  const std::string& JobOf(const std::string& tenant) const {
    return tenant == kOwnTenant ? job_t1 : job_t2;
  }

  // A fresh id: "<prefix>-<n>".
  std::string Fresh(const std::string& prefix) {
    return absl::StrCat(prefix, "-", ++counter);
  }

  std::unique_ptr<grpc::ClientContext> AsAdmin() const {
    return ApiHarness::Context(h->admin_token());
  }

  // --- Objects made (as the platform admin) for one cell ---

  static void Check(const grpc::Status& s, const std::string& what) {
    EXPECT_TRUE(s.ok()) << "setting up " << what << ": "
                        << CodeName(s.error_code()) << " " << s.error_message();
  }

  std::string NewJob(const std::string& tenant) {
    v1::SubmitJobResponse resp;
    Check(jobs->Submit(AsAdmin().get(), MinimalSubmit(tenant, Fresh("authz")),
                       &resp),
          "job");
    return resp.job().name();
  }
  // A new job, held (by the platform admin).
  std::string NewHeldJob(const std::string& tenant) {
    v1::HoldJobRequest req;
    req.set_name(NewJob(tenant));
    v1::Job out;
    Check(jobs->Hold(AsAdmin().get(), req, &out), "held job");
    return req.name();
  }
  std::string NewTenant() {
    v1::CreateTenantRequest req;
    req.set_tenant_id(Fresh("authz-tenant"));
    v1::Tenant out;
    Check(queues->CreateTenant(AsAdmin().get(), req, &out), "tenant");
    return absl::StrCat("tenants/", req.tenant_id());
  }
  std::string NewProject(const std::string& tenant) {
    v1::CreateProjectRequest req;
    req.set_parent(absl::StrCat("tenants/", tenant));
    req.set_project_id(Fresh("authz-project"));
    v1::Project out;
    Check(queues->CreateProject(AsAdmin().get(), req, &out), "project");
    return absl::StrCat(req.parent(), "/projects/", req.project_id());
  }
  std::string NewQueue(const std::string& tenant) {
    v1::CreateQueueRequest req;
    req.set_parent(absl::StrCat("tenants/", tenant));
    req.set_queue_id(Fresh("authz-queue"));
    v1::Queue out;
    Check(queues->CreateQueue(AsAdmin().get(), req, &out), "queue");
    return absl::StrCat(req.parent(), "/queues/", req.queue_id());
  }
  // A budget of a new project of `tenant` (one budget per scope).
  std::string NewBudget(const std::string& tenant) {
    const std::string project = NewProject(tenant);
    v1::CreateBudgetRequest req;
    req.set_parent(absl::StrCat("tenants/", tenant));
    req.set_budget_id(Fresh("authz-budget"));
    req.mutable_budget()->set_project(project.substr(project.rfind('/') + 1));
    req.mutable_budget()->mutable_monthly_amount()->set_micros(100'000'000);
    req.mutable_budget()->add_thresholds()->set_percent(100);
    v1::Budget out;
    Check(accounting->CreateBudget(AsAdmin().get(), req, &out), "budget");
    return absl::StrCat(req.parent(), "/budgets/", req.budget_id());
  }
  std::string NewCohort() {
    v1::CreateCohortRequest req;
    req.set_cohort_id(Fresh("authz-cohort"));
    v1::Cohort out;
    Check(queues->CreateCohort(AsAdmin().get(), req, &out), "cohort");
    return absl::StrCat("cohorts/", req.cohort_id());
  }
  std::string NewPriorityClass() {
    v1::CreatePriorityClassRequest req;
    req.set_priority_class_id(Fresh("authz-pc"));
    req.mutable_priority_class()->set_value(7);
    v1::PriorityClass out;
    Check(queues->CreatePriorityClass(AsAdmin().get(), req, &out),
          "priority class");
    return absl::StrCat("priorityClasses/", req.priority_class_id());
  }
  std::string NewCluster() {
    v1::CreateClusterRequest req;
    req.set_cluster_id(Fresh("authz-cluster"));
    req.mutable_cluster()->set_backend(v1::BACKEND_KIND_SIM);
    v1::Cluster out;
    Check(clusters->CreateCluster(AsAdmin().get(), req, &out), "cluster");
    return absl::StrCat("clusters/", req.cluster_id());
  }
  std::string NewFlavor() {
    v1::CreateFlavorRequest req;
    req.set_flavor_id(Fresh("authz-flavor"));
    req.mutable_flavor()->set_kind(v1::FLAVOR_KIND_ON_DEMAND);
    req.mutable_flavor()->set_gpu_model("H100");
    v1::Flavor out;
    Check(clusters->CreateFlavor(AsAdmin().get(), req, &out), "flavor");
    return absl::StrCat("flavors/", req.flavor_id());
  }
  std::string NewPool() {
    v1::CreatePoolRequest req;
    req.set_parent("clusters/authz-scratch");
    req.set_pool_id(Fresh("authz-pool"));
    req.mutable_pool()->set_flavor("gpu");
    v1::Pool out;
    Check(clusters->CreatePool(AsAdmin().get(), req, &out), "pool");
    return absl::StrCat(req.parent(), "/pools/", req.pool_id());
  }
  // A new token of `principal`; returns its name "apiTokens/{id}".
  std::string NewToken(const std::string& principal) {
    v1::CreateApiTokenRequest req;
    req.set_principal(principal);
    req.set_description("authz matrix");
    v1::CreateApiTokenResponse out;
    Check(admin->CreateApiToken(AsAdmin().get(), req, &out), "token");
    return out.token().name();
  }
  // A new binding; returns its name "roleBindings/{id}".
  std::string NewBinding(const std::string& principal, v1::Role role,
                         const std::string& tenant) {
    v1::CreateRoleBindingRequest req;
    req.mutable_role_binding()->set_principal(principal);
    req.mutable_role_binding()->set_role(role);
    req.mutable_role_binding()->set_tenant(tenant);
    v1::RoleBinding out;
    Check(admin->CreateRoleBinding(AsAdmin().get(), req, &out), "role binding");
    return out.name();
  }

  v1::Node ScratchNode(const std::string& id) const {
    v1::Node n;
    n.set_name(absl::StrCat("clusters/authz-scratch/nodes/", id));
    n.set_pool("scratch");
    n.set_state(v1::NODE_STATE_DRAINING);
    n.mutable_capacity()->set_gpus(8);
    n.mutable_capacity()->set_gpu_model("H100");
    n.mutable_capacity()->set_cpu_millis(64000);
    n.mutable_capacity()->set_memory_bytes(int64_t{512} << 30);
    n.mutable_topology()->set_block("b9");
    n.mutable_topology()->set_rack("r9");
    return n;
  }
};

// One call of the matrix: who makes it, and on which tenant.
struct Call {
  Env* env;
  Who who;
  std::string tenant;  // "t1", "t2", or "" (platform)

  const std::string& principal() const {
    return env->principal[static_cast<int>(who)];
  }
  std::string parent() const { return absl::StrCat("tenants/", tenant); }

  // A client context carrying the caller's credentials (none for kAnonymous).
  std::unique_ptr<grpc::ClientContext> Ctx() const {
    if (who == Who::kAnonymous) {
      auto ctx = std::make_unique<grpc::ClientContext>();
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(30));
      return ctx;
    }
    return ApiHarness::Context(env->token[static_cast<int>(who)]);
  }

  // The tenants `who` may read (for checking what lists return); nullopt-like
  // flag for all.
  bool SeesAll() const { return who == Who::kPlatformAdmin; }
  bool Sees(const std::string& t) const {
    return SeesAll() ||
           ((IsTenantRole(who) || who == Who::kJobToken) && t == kOwnTenant);
  }
};

// Whether `text` names tenant `tenant` as a word (not as part of another id).
bool NamesTenant(const std::string& text, const std::string& tenant) {
  auto id_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  };
  for (size_t at = text.find(tenant); at != std::string::npos;
       at = text.find(tenant, at + 1)) {
    const bool left = at == 0 || !id_char(text[at - 1]);
    const size_t end = at + tenant.size();
    const bool right = end == text.size() || !id_char(text[end]);
    if (left && right) return true;
  }
  return false;
}

// The tenant of "tenants/{t}/...".
std::string TenantOfName(const std::string& name) {
  constexpr char kPrefix[] = "tenants/";
  if (!absl::StartsWith(name, kPrefix)) return "";
  std::string rest = name.substr(sizeof(kPrefix) - 1);
  return rest.substr(0, rest.find('/'));
}

// A refusal of a call that names no tenant (it names a principal or a token)
// must not name a tenant the caller cannot see: that would tell it the tenant
// exists and that the principal holds a role there.
void ExpectNoTenantLeak(const Call& c, const grpc::Status& s) {
  if (s.ok()) return;
  for (const char* tenant : {kOwnTenant, kOtherTenant}) {
    if (c.Sees(tenant)) continue;
    EXPECT_FALSE(NamesTenant(s.error_message(), tenant))
        << "the refusal reveals tenant " << tenant
        << " to a caller with no role there: " << s.error_message();
  }
}

// --- The rows ---

struct Row {
  std::string service;  // "JobService"
  std::string rpc;      // "Submit"
  std::string variant;  // distinguishes rows of one RPC; "" if only one
  bool per_tenant;      // own and other columns (else one platform column)
  bool
      audited;  // an administrative mutation: every outcome leaves an audit row
  const char*
      role;  // the role a PERMISSION_DENIED must name; nullptr: any role
  Expect expect;
  std::function<grpc::Status(const Call&)> run;

  std::string Label() const {
    return absl::StrCat(service, "_", rpc, variant.empty() ? "" : "_", variant);
  }
  std::string Method() const {
    return absl::StrCat("/trainyard.v1.", service, "/", rpc);
  }
};

google::protobuf::FieldMask Mask(const std::string& path) {
  google::protobuf::FieldMask mask;
  mask.add_paths(path);
  return mask;
}

// --- Calling an RPC as the cell's caller ---

using Run = std::function<grpc::Status(const Call&)>;
using JobStub = v1::JobService::Stub;
using QueueStub = v1::QueueService::Stub;
using ClusterStub = v1::ClusterService::Stub;
using AdminStub = v1::AdminService::Stub;

// A unary RPC: `method` of the environment's `stub`.
template <typename Stub, typename Req, typename Resp>
using Method = grpc::Status (Stub::*)(grpc::ClientContext*, const Req&, Resp*);

// A run that calls `method` of the environment's `stub` as the cell's caller,
// with the request `fill` makes for the cell; `check`, if any, looks at the
// response of a call that succeeded.
template <typename Stub, typename Req, typename Resp>
Run Calls(std::unique_ptr<Stub> Env::*stub, Method<Stub, Req, Resp> method,
          std::type_identity_t<std::function<void(const Call&, Req&)>> fill,
          std::type_identity_t<
              std::function<void(const Call&, const Req&, const Resp&)>>
              check = nullptr) {
  return [=](const Call& c) {
    Req req;
    fill(c, req);
    Resp resp;
    Stub& to = *(c.env->*stub);
    grpc::Status s = (to.*method)(c.Ctx().get(), req, &resp);
    if (s.ok() && check) check(c, req, resp);
    return s;
  };
}

// A call with an empty request.
template <typename Stub, typename Req, typename Resp>
Run CallsEmpty(std::unique_ptr<Stub> Env::*stub,
               Method<Stub, Req, Resp> method) {
  return Calls(stub, method, [](const Call&, Req&) {});
}

// A call on the object `name` names for the cell (a fixed name, or one made
// for it).
template <typename Stub, typename Req, typename Resp>
Run CallsOn(std::unique_ptr<Stub> Env::*stub, Method<Stub, Req, Resp> method,
            std::function<std::string(const Call&)> name) {
  return Calls(stub, method,
               [name](const Call& c, Req& req) { req.set_name(name(c)); });
}
template <typename Stub, typename Req, typename Resp>
Run CallsOn(std::unique_ptr<Stub> Env::*stub, Method<Stub, Req, Resp> method,
            std::string name) {
  return Calls(stub, method,
               [name](const Call&, Req& req) { req.set_name(name); });
}

// A listing (of `parent`, for the listings that have one) that, permitted,
// returns something: `count` says how many items the response holds.
template <typename Stub, typename Req, typename Resp>
Run ListsSome(std::unique_ptr<Stub> Env::*stub, Method<Stub, Req, Resp> method,
              int (Resp::*count)() const, std::string parent = "") {
  return Calls(
      stub, method,
      [parent](const Call&, Req& req) {
        if constexpr (requires { req.set_parent(parent); }) {
          req.set_parent(parent);
        }
      },
      [count](const Call&, const Req&, const Resp& resp) {
        EXPECT_GT((resp.*count)(), 0);
      });
}

// A listing of the cell's tenant that, permitted, returns something, all of it
// in that tenant (`names`: the names of the items).
template <typename Stub, typename Req, typename Resp, typename Item>
Run ListsOfTenant(
    std::unique_ptr<Stub> Env::*stub, Method<Stub, Req, Resp> method,
    const google::protobuf::RepeatedPtrField<Item>& (Resp::*items)() const) {
  return Calls(
      stub, method, [](const Call& c, Req& req) { req.set_parent(c.parent()); },
      [items](const Call& c, const Req&, const Resp& resp) {
        EXPECT_GT((resp.*items)().size(), 0);
        for (const Item& item : (resp.*items)()) {
          EXPECT_EQ(TenantOfName(item.name()), c.tenant);
        }
      });
}

// What a listing across every tenant ("tenants/-") returned, by the tenants of
// its items: none the caller cannot see, its own (unless it has no role), and
// for a caller that sees all, the other one too.
template <typename Item>
void ExpectTenantsListed(const Call& c,
                         const google::protobuf::RepeatedPtrField<Item>& items,
                         std::function<std::string(const Item&)> tenant_of) {
  std::set<std::string> tenants;
  for (const Item& item : items) {
    tenants.insert(tenant_of(item));
    EXPECT_TRUE(c.Sees(tenant_of(item))) << "leaked " << item.name();
  }
  if (c.Sees(kOwnTenant)) {
    EXPECT_TRUE(tenants.contains(kOwnTenant));
  }
  if (c.SeesAll()) {
    EXPECT_TRUE(tenants.contains(kOtherTenant));
  }
}

// `run`, whose refusal must not name a tenant the caller cannot see
// (ExpectNoTenantLeak).
Run LeaksNoTenant(Run run) {
  return [run](const Call& c) {
    grpc::Status s = run(c);
    ExpectNoTenantLeak(c, s);
    return s;
  };
}

std::vector<Row> JobRows() {
  std::vector<Row> rows;
  auto tenant_row = [&](std::string rpc, Need need, Run run) {
    rows.push_back(Row{"JobService", std::move(rpc), "", true, false,
                       NeedName(need), InTenant(need), std::move(run)});
  };
  tenant_row("Submit", Need::kMember, [](const Call& c) {
    v1::SubmitJobResponse resp;
    return c.env->jobs->Submit(
        c.Ctx().get(), MinimalSubmit(c.tenant, c.env->Fresh("authz")), &resp);
  });
  tenant_row("SubmitBatch", Need::kMember,
             Calls(&Env::jobs, &JobStub::SubmitBatch,
                   [](const Call& c, v1::SubmitJobBatchRequest& req) {
                     req.set_parent(c.parent());
                     *req.add_requests() =
                         MinimalSubmit(c.tenant, c.env->Fresh("authz-batch"));
                     req.mutable_requests(0)->clear_parent();
                   }));
  tenant_row(
      "Get", Need::kViewer,
      Calls(
          &Env::jobs, &JobStub::Get,
          [](const Call& c, v1::GetJobRequest& req) {
            req.set_name(c.env->JobOf(c.tenant));
          },
          [](const Call&, const v1::GetJobRequest& req, const v1::Job& resp) {
            EXPECT_EQ(resp.name(), req.name());
          }));
  tenant_row("List", Need::kViewer,
             Calls(
                 &Env::jobs, &JobStub::List,
                 [](const Call& c, v1::ListJobsRequest& req) {
                   req.set_parent(c.parent());
                 },
                 [](const Call& c, const v1::ListJobsRequest&,
                    const v1::ListJobsResponse& resp) {
                   EXPECT_GT(resp.jobs_size(), 0);
                   for (const v1::Job& j : resp.jobs()) {
                     EXPECT_EQ(j.tenant(), c.tenant) << j.name();
                   }
                 }));
  tenant_row("Cancel", Need::kMember,
             Calls(&Env::jobs, &JobStub::Cancel,
                   [](const Call& c, v1::CancelJobRequest& req) {
                     req.set_name(c.env->NewJob(c.tenant));
                     req.set_reason("authz matrix");
                   }));
  tenant_row(
      "Hold", Need::kMember,
      Calls(
          &Env::jobs, &JobStub::Hold,
          [](const Call& c, v1::HoldJobRequest& req) {
            req.set_name(c.env->NewJob(c.tenant));
            req.set_reason("authz matrix");
          },
          [](const Call&, const v1::HoldJobRequest&, const v1::Job& resp) {
            EXPECT_EQ(resp.state(), v1::JOB_STATE_HELD);
          }));
  tenant_row(
      "Release", Need::kMember,
      Calls(
          &Env::jobs, &JobStub::Release,
          [](const Call& c, v1::ReleaseJobRequest& req) {
            req.set_name(c.env->NewHeldJob(c.tenant));
          },
          [](const Call&, const v1::ReleaseJobRequest&, const v1::Job& resp) {
            EXPECT_EQ(resp.state(), v1::JOB_STATE_QUEUED);
          }));
  tenant_row("Watch", Need::kViewer, [](const Call& c) {
    // The job's history from the start: a permitted watch delivers its
    // SUBMITTED event at once; a refused one ends before its first message.
    v1::WatchJobsRequest req;
    req.set_parent(c.parent());
    req.set_job(c.env->JobOf(c.tenant));
    req.set_from_start(true);
    std::unique_ptr<grpc::ClientContext> ctx = c.Ctx();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(10));
    auto reader = c.env->jobs->Watch(ctx.get(), req);
    v1::WatchJobsResponse resp;
    if (reader->Read(&resp)) {
      EXPECT_EQ(resp.event().job(), req.job());
      EXPECT_EQ(resp.event().tenant(), c.tenant);
      ctx->TryCancel();
      (void)reader->Finish();
      return grpc::Status::OK;
    }
    return reader->Finish();
  });
  tenant_row("ReportCheckpoint", Need::kMember,
             Calls(&Env::jobs, &JobStub::ReportCheckpoint,
                   [](const Call& c, v1::ReportCheckpointRequest& req) {
                     req.set_job(c.env->JobOf(c.tenant));
                     const int step = ++c.env->counter;
                     req.mutable_checkpoint()->set_step(step);
                     req.mutable_checkpoint()->set_uri(
                         absl::StrCat("s3://authz/ckpt-", step));
                     *req.mutable_checkpoint()->mutable_time() =
                         google::protobuf::util::TimeUtil::GetCurrentTime();
                   }));
  tenant_row("ListCheckpoints", Need::kViewer,
             Calls(
                 &Env::jobs, &JobStub::ListCheckpoints,
                 [](const Call& c, v1::ListCheckpointsRequest& req) {
                   req.set_job(c.env->JobOf(c.tenant));
                 },
                 [](const Call&, const v1::ListCheckpointsRequest&,
                    const v1::ListCheckpointsResponse& resp) {
                   EXPECT_GT(resp.checkpoints_size(), 0);
                 }));
  tenant_row("ExplainPending", Need::kViewer,
             CallsOn(&Env::jobs, &JobStub::ExplainPending,
                     [](const Call& c) { return c.env->JobOf(c.tenant); }));
  tenant_row("GetLogs", Need::kViewer,
             CallsOn(&Env::jobs, &JobStub::GetLogs,
                     [](const Call& c) { return c.env->JobOf(c.tenant); }));
  // "tenants/-": every tenant the caller can read, and nothing else.
  rows.push_back(Row{"JobService", "List", "all_tenants", false, false, nullptr,
                     AnyAuthenticated(),
                     Calls(
                         &Env::jobs, &JobStub::List,
                         [](const Call&, v1::ListJobsRequest& req) {
                           req.set_parent("tenants/-");
                           req.set_page_size(1000);
                         },
                         [](const Call& c, const v1::ListJobsRequest&,
                            const v1::ListJobsResponse& resp) {
                           ExpectTenantsListed<v1::Job>(
                               c, resp.jobs(),
                               [](const v1::Job& j) { return j.tenant(); });
                         })});
  return rows;
}

std::vector<Row> QueueRows() {
  std::vector<Row> rows;
  auto tenant_row = [&](std::string rpc, Need need, bool audited, Run run) {
    rows.push_back(Row{"QueueService", std::move(rpc), "", true, audited,
                       NeedName(need), InTenant(need), std::move(run)});
  };
  auto platform_read = [&](std::string rpc, Run run) {
    rows.push_back(Row{"QueueService", std::move(rpc), "", false, false,
                       nullptr, AnyAuthenticated(), std::move(run)});
  };
  auto platform_write = [&](std::string rpc, Run run) {
    rows.push_back(Row{"QueueService", std::move(rpc), "", false, true,
                       "platform-admin", PlatformAdminOnly(), std::move(run)});
  };
  auto in_tenant = [](std::string suffix) {
    return [suffix](const Call& c) { return c.parent() + suffix; };
  };

  // --- Tenants: create/update/delete platform-admin; get/list what the caller
  // sees ---
  platform_write("CreateTenant",
                 Calls(&Env::queues, &QueueStub::CreateTenant,
                       [](const Call& c, v1::CreateTenantRequest& req) {
                         req.set_tenant_id(c.env->Fresh("authz-tenant"));
                       }));
  tenant_row("GetTenant", Need::kViewer, false,
             CallsOn(&Env::queues, &QueueStub::GetTenant, in_tenant("")));
  platform_read("ListTenants",
                Calls(
                    &Env::queues, &QueueStub::ListTenants,
                    [](const Call&, v1::ListTenantsRequest& req) {
                      req.set_page_size(1000);
                    },
                    [](const Call& c, const v1::ListTenantsRequest&,
                       const v1::ListTenantsResponse& resp) {
                      std::set<std::string> names;
                      for (const v1::Tenant& t : resp.tenants()) {
                        names.insert(t.name());
                        EXPECT_TRUE(c.Sees(TenantOfName(t.name())))
                            << "leaked " << t.name();
                      }
                      if (c.Sees(kOwnTenant)) {
                        EXPECT_TRUE(names.contains("tenants/t1"));
                      }
                      if (c.SeesAll()) {
                        EXPECT_TRUE(names.contains("tenants/t2"));
                      }
                    }));
  tenant_row(
      "UpdateTenant", Need::kPlatformAdmin, true,
      Calls(&Env::queues, &QueueStub::UpdateTenant,
            [](const Call& c, v1::UpdateTenantRequest& req) {
              req.mutable_tenant()->set_name(c.parent());
              req.mutable_tenant()->set_display_name(c.env->Fresh("renamed"));
              *req.mutable_update_mask() = Mask("display_name");
            }));
  // t1 and t2 own jobs, so only an empty tenant can be deleted: the platform
  // admin (whose answer does not depend on the tenant) deletes a new one; every
  // other caller is refused on t1 / t2 themselves (and were it not, t1 / t2
  // would survive: they are not empty).
  tenant_row("DeleteTenant", Need::kPlatformAdmin, true,
             CallsOn(&Env::queues, &QueueStub::DeleteTenant, [](const Call& c) {
               return c.who == Who::kPlatformAdmin ? c.env->NewTenant()
                                                   : c.parent();
             }));

  // --- Projects: write tenant-admin, read viewer ---
  tenant_row("CreateProject", Need::kTenantAdmin, true,
             Calls(&Env::queues, &QueueStub::CreateProject,
                   [](const Call& c, v1::CreateProjectRequest& req) {
                     req.set_parent(c.parent());
                     req.set_project_id(c.env->Fresh("authz-project"));
                   }));
  tenant_row("GetProject", Need::kViewer, false,
             CallsOn(&Env::queues, &QueueStub::GetProject,
                     in_tenant("/projects/default")));
  tenant_row("ListProjects", Need::kViewer, false,
             ListsOfTenant(&Env::queues, &QueueStub::ListProjects,
                           &v1::ListProjectsResponse::projects));
  tenant_row(
      "UpdateProject", Need::kTenantAdmin, true,
      Calls(&Env::queues, &QueueStub::UpdateProject,
            [](const Call& c, v1::UpdateProjectRequest& req) {
              req.mutable_project()->set_name(c.env->NewProject(c.tenant));
              req.mutable_project()->set_display_name("renamed");
              *req.mutable_update_mask() = Mask("display_name");
            }));
  tenant_row(
      "DeleteProject", Need::kTenantAdmin, true,
      CallsOn(&Env::queues, &QueueStub::DeleteProject,
              [](const Call& c) { return c.env->NewProject(c.tenant); }));

  // --- Queues: write platform-admin (quotas grant capacity), read viewer ---
  tenant_row("CreateQueue", Need::kPlatformAdmin, true,
             Calls(&Env::queues, &QueueStub::CreateQueue,
                   [](const Call& c, v1::CreateQueueRequest& req) {
                     req.set_parent(c.parent());
                     req.set_queue_id(c.env->Fresh("authz-queue"));
                   }));
  tenant_row("GetQueue", Need::kViewer, false,
             CallsOn(&Env::queues, &QueueStub::GetQueue,
                     in_tenant("/queues/default")));
  tenant_row("ListQueues", Need::kViewer, false,
             ListsOfTenant(&Env::queues, &QueueStub::ListQueues,
                           &v1::ListQueuesResponse::queues));
  tenant_row("UpdateQueue", Need::kPlatformAdmin, true,
             Calls(&Env::queues, &QueueStub::UpdateQueue,
                   [](const Call& c, v1::UpdateQueueRequest& req) {
                     req.mutable_queue()->set_name(c.env->NewQueue(c.tenant));
                     req.mutable_queue()->set_display_name("renamed");
                     *req.mutable_update_mask() = Mask("display_name");
                   }));
  tenant_row("DeleteQueue", Need::kPlatformAdmin, true,
             CallsOn(&Env::queues, &QueueStub::DeleteQueue,
                     [](const Call& c) { return c.env->NewQueue(c.tenant); }));
  tenant_row("GetQueueStatus", Need::kViewer, false,
             CallsOn(&Env::queues, &QueueStub::GetQueueStatus,
                     in_tenant("/queues/default")));
  rows.push_back(Row{"QueueService", "ListQueues", "all_tenants", false, false,
                     nullptr, AnyAuthenticated(),
                     Calls(
                         &Env::queues, &QueueStub::ListQueues,
                         [](const Call&, v1::ListQueuesRequest& req) {
                           req.set_parent("tenants/-");
                           req.set_page_size(1000);
                         },
                         [](const Call& c, const v1::ListQueuesRequest&,
                            const v1::ListQueuesResponse& resp) {
                           ExpectTenantsListed<v1::Queue>(
                               c, resp.queues(), [](const v1::Queue& q) {
                                 return TenantOfName(q.name());
                               });
                         })});

  // --- Cohorts: read anyone authenticated, write platform-admin ---
  platform_write("CreateCohort",
                 Calls(&Env::queues, &QueueStub::CreateCohort,
                       [](const Call& c, v1::CreateCohortRequest& req) {
                         req.set_cohort_id(c.env->Fresh("authz-cohort"));
                       }));
  platform_read("GetCohort",
                CallsOn(&Env::queues, &QueueStub::GetCohort, "cohorts/pool"));
  platform_read("ListCohorts",
                ListsSome(&Env::queues, &QueueStub::ListCohorts,
                          &v1::ListCohortsResponse::cohorts_size));
  platform_write("UpdateCohort",
                 Calls(&Env::queues, &QueueStub::UpdateCohort,
                       [](const Call& c, v1::UpdateCohortRequest& req) {
                         req.mutable_cohort()->set_name(c.env->NewCohort());
                         req.mutable_cohort()->set_fair_share_weight(2);
                         *req.mutable_update_mask() = Mask("fair_share_weight");
                       }));
  platform_write("DeleteCohort",
                 CallsOn(&Env::queues, &QueueStub::DeleteCohort,
                         [](const Call& c) { return c.env->NewCohort(); }));

  // --- Priority classes: read anyone authenticated, write platform-admin ---
  platform_write("CreatePriorityClass",
                 Calls(&Env::queues, &QueueStub::CreatePriorityClass,
                       [](const Call& c, v1::CreatePriorityClassRequest& req) {
                         req.set_priority_class_id(c.env->Fresh("authz-pc"));
                         req.mutable_priority_class()->set_value(3);
                       }));
  platform_read("GetPriorityClass",
                CallsOn(&Env::queues, &QueueStub::GetPriorityClass,
                        "priorityClasses/authz-shared"));
  platform_read(
      "ListPriorityClasses",
      ListsSome(&Env::queues, &QueueStub::ListPriorityClasses,
                &v1::ListPriorityClassesResponse::priority_classes_size));
  platform_write(
      "UpdatePriorityClass",
      Calls(&Env::queues, &QueueStub::UpdatePriorityClass,
            [](const Call& c, v1::UpdatePriorityClassRequest& req) {
              req.mutable_priority_class()->set_name(c.env->NewPriorityClass());
              req.mutable_priority_class()->set_description("changed");
              *req.mutable_update_mask() = Mask("description");
            }));
  platform_write(
      "DeletePriorityClass",
      CallsOn(&Env::queues, &QueueStub::DeletePriorityClass,
              [](const Call& c) { return c.env->NewPriorityClass(); }));
  return rows;
}

std::vector<Row> ClusterRows() {
  std::vector<Row> rows;
  auto read = [&](std::string rpc, Run run) {
    rows.push_back(Row{"ClusterService", std::move(rpc), "", false, false,
                       nullptr, AnyAuthenticated(), std::move(run)});
  };
  auto write = [&](std::string rpc, Run run) {
    rows.push_back(Row{"ClusterService", std::move(rpc), "", false, true,
                       "platform-admin", PlatformAdminOnly(), std::move(run)});
  };
  write("CreateCluster",
        Calls(&Env::clusters, &ClusterStub::CreateCluster,
              [](const Call& c, v1::CreateClusterRequest& req) {
                req.set_cluster_id(c.env->Fresh("authz-cluster"));
                req.mutable_cluster()->set_backend(v1::BACKEND_KIND_SIM);
              }));
  read("GetCluster",
       CallsOn(&Env::clusters, &ClusterStub::GetCluster, "clusters/sim"));
  read("ListClusters", ListsSome(&Env::clusters, &ClusterStub::ListClusters,
                                 &v1::ListClustersResponse::clusters_size));
  write("UpdateCluster",
        Calls(&Env::clusters, &ClusterStub::UpdateCluster,
              [](const Call& c, v1::UpdateClusterRequest& req) {
                req.mutable_cluster()->set_name(c.env->NewCluster());
                req.mutable_cluster()->set_display_name("renamed");
                *req.mutable_update_mask() = Mask("display_name");
              }));
  write("DeleteCluster",
        CallsOn(&Env::clusters, &ClusterStub::DeleteCluster,
                [](const Call& c) { return c.env->NewCluster(); }));
  write("CreateFlavor",
        Calls(&Env::clusters, &ClusterStub::CreateFlavor,
              [](const Call& c, v1::CreateFlavorRequest& req) {
                req.set_flavor_id(c.env->Fresh("authz-flavor"));
                req.mutable_flavor()->set_kind(v1::FLAVOR_KIND_ON_DEMAND);
                req.mutable_flavor()->set_gpu_model("H100");
              }));
  read("GetFlavor",
       CallsOn(&Env::clusters, &ClusterStub::GetFlavor, "flavors/gpu"));
  read("ListFlavors", ListsSome(&Env::clusters, &ClusterStub::ListFlavors,
                                &v1::ListFlavorsResponse::flavors_size));
  write("UpdateFlavor",
        Calls(&Env::clusters, &ClusterStub::UpdateFlavor,
              [](const Call& c, v1::UpdateFlavorRequest& req) {
                req.mutable_flavor()->set_name(c.env->NewFlavor());
                req.mutable_flavor()->set_gpu_model("A100");
                *req.mutable_update_mask() = Mask("gpu_model");
              }));
  write("DeleteFlavor",
        CallsOn(&Env::clusters, &ClusterStub::DeleteFlavor,
                [](const Call& c) { return c.env->NewFlavor(); }));
  write("CreatePool", Calls(&Env::clusters, &ClusterStub::CreatePool,
                            [](const Call& c, v1::CreatePoolRequest& req) {
                              req.set_parent("clusters/authz-scratch");
                              req.set_pool_id(c.env->Fresh("authz-pool"));
                              req.mutable_pool()->set_flavor("gpu");
                            }));
  read("ListPools",
       ListsSome(&Env::clusters, &ClusterStub::ListPools,
                 &v1::ListPoolsResponse::pools_size, "clusters/sim"));
  write("DeletePool", CallsOn(&Env::clusters, &ClusterStub::DeletePool,
                              [](const Call& c) { return c.env->NewPool(); }));
  read("GetNode",
       CallsOn(&Env::clusters, &ClusterStub::GetNode, "clusters/sim/nodes/n0"));
  read("ListNodes",
       ListsSome(&Env::clusters, &ClusterStub::ListNodes,
                 &v1::ListNodesResponse::nodes_size, "clusters/sim"));
  write("ReportNodes", Calls(&Env::clusters, &ClusterStub::ReportNodes,
                             [](const Call& c, v1::ReportNodesRequest& req) {
                               req.set_parent("clusters/authz-scratch");
                               *req.add_nodes() =
                                   c.env->ScratchNode(c.env->Fresh("node"));
                             }));
  write("SetNodeState",
        Calls(&Env::clusters, &ClusterStub::SetNodeState,
              [](const Call&, v1::SetNodeStateRequest& req) {
                req.set_name("clusters/authz-scratch/nodes/scratch-0");
                req.set_state(v1::NODE_STATE_DRAINING);
                req.set_reason("authz matrix");
              }));
  read("GetCapacity", CallsEmpty(&Env::clusters, &ClusterStub::GetCapacity));
  return rows;
}

// Principals the admin rows act on (made in SetUpTestSuite):
constexpr char kAmy[] = "users/amy";    // viewer in t1
constexpr char kZed[] = "users/zed";    // viewer in t2
constexpr char kDual[] = "users/dual";  // viewer in t1 and platform-admin
constexpr char kBoth[] = "users/both";  // viewer in t1 and viewer in t2

std::vector<Row> AdminRows() {
  std::vector<Row> rows;
  auto add = [&](std::string rpc, std::string variant, bool per_tenant,
                 bool audited, const char* role, Expect expect, Run run) {
    rows.push_back(Row{"AdminService", std::move(rpc), std::move(variant),
                       per_tenant, audited, role, std::move(expect),
                       std::move(run)});
  };
  // Whose principal the own / other columns act on.
  auto subject = [](const Call& c) -> std::string {
    return c.tenant == kOwnTenant ? kAmy : kZed;
  };

  // --- CreateApiToken: for oneself anyone; for others platform-admin, or
  // tenant-admin for principals of its tenant ---
  add("CreateApiToken", "self", false, true, nullptr, AnyAuthenticated(),
      Calls(
          &Env::admin, &AdminStub::CreateApiToken,
          [](const Call&, v1::CreateApiTokenRequest& req) {
            req.set_description("mine");
          },
          [](const Call& c, const v1::CreateApiTokenRequest&,
             const v1::CreateApiTokenResponse& resp) {
            EXPECT_EQ(resp.token().principal(), c.principal());
            EXPECT_FALSE(resp.secret().empty());
          }));
  add(
      "CreateApiToken", "for_other", true, true, nullptr,
      [](Who who, Target target) -> Codes {
        if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
        if (who == Who::kPlatformAdmin) return {StatusCode::OK};
        if (who == Who::kTenantAdmin && target == Target::kOwn)
          return {StatusCode::OK};
        // Not NOT_FOUND for t2's principal: a principal with no binding at all
        // is refused with PERMISSION_DENIED too, so NOT_FOUND would tell that
        // zed holds a role somewhere.
        return {StatusCode::PERMISSION_DENIED};
      },
      LeaksNoTenant(Calls(
          &Env::admin, &AdminStub::CreateApiToken,
          [subject](const Call& c, v1::CreateApiTokenRequest& req) {
            req.set_principal(subject(c));
          },
          [](const Call&, const v1::CreateApiTokenRequest& req,
             const v1::CreateApiTokenResponse& resp) {
            EXPECT_EQ(resp.token().principal(), req.principal());
          })));
  // A principal of t1 that is also platform-admin (or also in t2): minting its
  // token is acting with its platform (or t2) rights, which a tenant-admin of
  // t1 does not have.
  auto mints_token_of = [](std::string principal) {
    return LeaksNoTenant(
        Calls(&Env::admin, &AdminStub::CreateApiToken,
              [principal](const Call&, v1::CreateApiTokenRequest& req) {
                req.set_principal(principal);
              }));
  };
  add("CreateApiToken", "for_t1_principal_also_platform_admin", false, true,
      nullptr, PlatformAdminOnly(), mints_token_of(kDual));
  add("CreateApiToken", "for_t1_principal_also_in_t2", false, true, nullptr,
      PlatformAdminOnly(), mints_token_of(kBoth));

  // --- ListApiTokens: one's own; another's or everyone's (principal "-")
  // platform-admin ---
  add("ListApiTokens", "self", false, false, nullptr, AnyAuthenticated(),
      Calls(
          &Env::admin, &AdminStub::ListApiTokens,
          [](const Call&, v1::ListApiTokensRequest&) {},
          [](const Call& c, const v1::ListApiTokensRequest&,
             const v1::ListApiTokensResponse& resp) {
            EXPECT_GT(resp.tokens_size(), 0);
            for (const v1::ApiToken& t : resp.tokens()) {
              EXPECT_EQ(t.principal(), c.principal());
            }
          }));
  add(
      "ListApiTokens", "of_other", true, false, nullptr,
      [](Who who, Target target) -> Codes {
        if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
        if (who == Who::kPlatformAdmin) return {StatusCode::OK};
        // Amy is in t1, which the tenant roles see: refused. Zed (t2) is
        // invisible to them and nobody sees neither: the rules allow either
        // refusal.
        if (IsTenantRole(who) && target == Target::kOwn)
          return {StatusCode::PERMISSION_DENIED};
        return {StatusCode::PERMISSION_DENIED, StatusCode::NOT_FOUND};
      },
      LeaksNoTenant(Calls(
          &Env::admin, &AdminStub::ListApiTokens,
          [subject](const Call& c, v1::ListApiTokensRequest& req) {
            req.set_principal(subject(c));
          },
          [](const Call&, const v1::ListApiTokensRequest& req,
             const v1::ListApiTokensResponse& resp) {
            for (const v1::ApiToken& t : resp.tokens()) {
              EXPECT_EQ(t.principal(), req.principal());
            }
          })));
  add("ListApiTokens", "all", false, false, "platform-admin",
      PlatformAdminOnly(),
      Calls(&Env::admin, &AdminStub::ListApiTokens,
            [](const Call&, v1::ListApiTokensRequest& req) {
              req.set_principal("-");
            }));

  // --- RevokeApiToken: one's own, or platform-admin ---
  add("RevokeApiToken", "own_token", false, true, nullptr, AnyAuthenticated(),
      Calls(
          &Env::admin, &AdminStub::RevokeApiToken,
          [](const Call& c, v1::RevokeApiTokenRequest& req) {
            // The anonymous caller has no principal, and a job token's (its
            // job) holds no API tokens: they try a token of the root user's.
            req.set_name(c.env->NewToken(c.who == Who::kAnonymous ||
                                                 c.who == Who::kJobToken
                                             ? "users/root"
                                             : c.principal()));
          },
          [](const Call&, const v1::RevokeApiTokenRequest&,
             const v1::ApiToken& resp) {
            EXPECT_TRUE(resp.has_revoke_time());
          }));
  add(
      "RevokeApiToken", "of_other", true, true, nullptr,
      [](Who who, Target target) -> Codes {
        if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
        if (who == Who::kPlatformAdmin) return {StatusCode::OK};
        // A token of zed (t2) is an object the t1 roles cannot see; amy's (t1)
        // is refused, and the rules do not say whether it is hidden or
        // forbidden.
        if (IsTenantRole(who) && target == Target::kOwn) {
          return {StatusCode::PERMISSION_DENIED, StatusCode::NOT_FOUND};
        }
        return {StatusCode::NOT_FOUND};
      },
      LeaksNoTenant(CallsOn(
          &Env::admin, &AdminStub::RevokeApiToken,
          [subject](const Call& c) { return c.env->NewToken(subject(c)); })));

  // --- Role bindings: platform-admin any; tenant-admin within its tenant,
  // never platform-admin ---
  add("CreateRoleBinding", "in_tenant", true, true, "tenant-admin",
      InTenant(Need::kTenantAdmin),
      Calls(&Env::admin, &AdminStub::CreateRoleBinding,
            [](const Call& c, v1::CreateRoleBindingRequest& req) {
              req.mutable_role_binding()->set_principal(
                  absl::StrCat("users/", c.env->Fresh("granted")));
              req.mutable_role_binding()->set_role(v1::ROLE_MEMBER);
              req.mutable_role_binding()->set_tenant(c.tenant);
            }));
  add("CreateRoleBinding", "platform_admin", false, true, "platform-admin",
      PlatformAdminOnly(),
      Calls(&Env::admin, &AdminStub::CreateRoleBinding,
            [](const Call& c, v1::CreateRoleBindingRequest& req) {
              req.mutable_role_binding()->set_principal(
                  absl::StrCat("users/", c.env->Fresh("escalated")));
              req.mutable_role_binding()->set_role(v1::ROLE_PLATFORM_ADMIN);
            }));
  // Listing filters rather than refuses: what comes back is the caller's own
  // bindings and those of tenants it administers (platform-admin: all).
  // Filtering on an invisible tenant may give an empty page or NOT_FOUND.
  auto check_bindings = [](const Call& c,
                           const v1::ListRoleBindingsResponse& resp) {
    for (const v1::RoleBinding& b : resp.role_bindings()) {
      if (c.SeesAll()) continue;
      const bool own = b.principal() == c.principal();
      const bool administered =
          c.who == Who::kTenantAdmin && b.tenant() == kOwnTenant;
      EXPECT_TRUE(own || administered) << "leaked " << b.ShortDebugString();
    }
  };
  add(
      "ListRoleBindings", "of_tenant", true, false, nullptr,
      [](Who who, Target target) -> Codes {
        if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
        if (who == Who::kPlatformAdmin ||
            (IsTenantRole(who) && target == Target::kOwn)) {
          return {StatusCode::OK};
        }
        return {StatusCode::OK, StatusCode::NOT_FOUND};
      },
      Calls(
          &Env::admin, &AdminStub::ListRoleBindings,
          [](const Call& c, v1::ListRoleBindingsRequest& req) {
            req.set_tenant(c.tenant);
            req.set_page_size(1000);
          },
          [check_bindings](const Call& c, const v1::ListRoleBindingsRequest&,
                           const v1::ListRoleBindingsResponse& resp) {
            check_bindings(c, resp);
            for (const v1::RoleBinding& b : resp.role_bindings()) {
              EXPECT_EQ(b.tenant(), c.tenant);
            }
            if (c.SeesAll() ||
                (IsTenantRole(c.who) && c.tenant == kOwnTenant)) {
              EXPECT_GT(resp.role_bindings_size(), 0);
            }
          }));
  add("ListRoleBindings", "all", false, false, nullptr, AnyAuthenticated(),
      Calls(
          &Env::admin, &AdminStub::ListRoleBindings,
          [](const Call&, v1::ListRoleBindingsRequest& req) {
            req.set_page_size(1000);
          },
          [check_bindings](const Call& c, const v1::ListRoleBindingsRequest&,
                           const v1::ListRoleBindingsResponse& resp) {
            check_bindings(c, resp);
            if (c.who == Who::kNobody) {
              EXPECT_EQ(resp.role_bindings_size(), 0);
            }
            if (c.who == Who::kTenantAdmin) {
              // Sees amy's binding in t1: it administers t1.
              bool amy = false;
              for (const v1::RoleBinding& b : resp.role_bindings())
                amy |= b.principal() == kAmy;
              EXPECT_TRUE(amy);
            }
          }));
  add("DeleteRoleBinding", "in_tenant", true, true, "tenant-admin",
      InTenant(Need::kTenantAdmin),
      CallsOn(&Env::admin, &AdminStub::DeleteRoleBinding, [](const Call& c) {
        return c.env->NewBinding(
            absl::StrCat("users/", c.env->Fresh("revoked")), v1::ROLE_MEMBER,
            c.tenant);
      }));
  add("DeleteRoleBinding", "platform_admin", false, true, "platform-admin",
      PlatformAdminOnly(),
      CallsOn(&Env::admin, &AdminStub::DeleteRoleBinding, [](const Call& c) {
        return c.env->NewBinding(
            absl::StrCat("users/", c.env->Fresh("demoted")),
            v1::ROLE_PLATFORM_ADMIN, "");
      }));

  // --- ListAuditLog: platform-admin all; tenant-admin with tenant set to its
  // own ---
  add("ListAuditLog", "of_tenant", true, false, "tenant-admin",
      InTenant(Need::kTenantAdmin),
      Calls(
          &Env::admin, &AdminStub::ListAuditLog,
          [](const Call& c, v1::ListAuditLogRequest& req) {
            req.set_tenant(c.tenant);
          },
          [](const Call& c, const v1::ListAuditLogRequest&,
             const v1::ListAuditLogResponse& resp) {
            for (const v1::AuditEntry& e : resp.entries()) {
              EXPECT_EQ(e.tenant(), c.tenant);
            }
          }));
  add("ListAuditLog", "all", false, false, "platform-admin",
      PlatformAdminOnly(), CallsEmpty(&Env::admin, &AdminStub::ListAuditLog));

  add("WhoAmI", "", false, false, nullptr, AnyAuthenticated(),
      Calls(
          &Env::admin, &AdminStub::WhoAmI,
          [](const Call&, v1::WhoAmIRequest&) {},
          [](const Call& c, const v1::WhoAmIRequest&, const v1::Caller& resp) {
            EXPECT_EQ(resp.principal(), c.principal());
            EXPECT_EQ(resp.bindings_size(), c.who == Who::kNobody ? 0 : 1);
          }));
  return rows;
}

// AccountingService (docs/security.md, "Roles"): the price book is read by
// everyone and changed by platform admins; a tenant's usage and reports are
// read by its finance and tenant-admins, by platform finance and by platform
// admins; every tenant's ("tenants/-") only by the last two. Budgets are
// read as usage is, and written by the tenant's finance and tenant-admins
// (and platform admins): platform finance only reads.
Expect FinanceRead() {
  return [](Who who, Target target) -> Codes {
    if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
    if (who == Who::kPlatformAdmin || who == Who::kPlatformFinance)
      return {StatusCode::OK};
    if (who == Who::kNobody || target == Target::kOther)
      return {StatusCode::NOT_FOUND};
    return {who == Who::kFinance || who == Who::kTenantAdmin
                ? StatusCode::OK
                : StatusCode::PERMISSION_DENIED};
  };
}

Expect FinanceWrite() {
  return [](Who who, Target target) -> Codes {
    if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
    if (who == Who::kPlatformAdmin) return {StatusCode::OK};
    if (who == Who::kNobody || who == Who::kPlatformFinance ||
        target == Target::kOther)
      return {StatusCode::NOT_FOUND};
    return {who == Who::kFinance || who == Who::kTenantAdmin
                ? StatusCode::OK
                : StatusCode::PERMISSION_DENIED};
  };
}

Expect FinanceReadAll() {
  return [](Who who, Target) -> Codes {
    if (who == Who::kAnonymous) return {StatusCode::UNAUTHENTICATED};
    if (who == Who::kPlatformAdmin || who == Who::kPlatformFinance)
      return {StatusCode::OK};
    return {StatusCode::PERMISSION_DENIED};
  };
}

using AccountingStub = v1::AccountingService::Stub;

google::protobuf::Timestamp AuthzTime(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  return t;
}

// November 2026, the window of the report rows.
void Window(v1::GetReportRequest& req) {
  *req.mutable_start_time() = AuthzTime(1793491200);  // 2026-11-01T00:00:00Z
  *req.mutable_end_time() = AuthzTime(1796083200);    // 2026-12-01T00:00:00Z
}

std::vector<Row> AccountingRows() {
  std::vector<Row> rows;
  auto add = [&](std::string rpc, std::string variant, bool per_tenant,
                 bool audited, const char* role, Expect expect, Run run) {
    rows.push_back({"AccountingService", std::move(rpc), std::move(variant),
                    per_tenant, audited, role, std::move(expect),
                    std::move(run)});
  };
  add("GetPriceBook", "", false, false, nullptr, AnyAuthenticated(),
      CallsEmpty(&Env::accounting, &AccountingStub::GetPriceBook));
  // Each call a new instant in 2030, so that every permitted one is stored.
  add("AddRate", "", false, true, "platform-admin", PlatformAdminOnly(),
      Calls(&Env::accounting, &AccountingStub::AddRate,
            [](const Call& c, v1::AddRateRequest& req) {
              v1::Rate* r = req.mutable_rate();
              r->set_flavor("gpu");
              r->set_resource(v1::RESOURCE_NAME_GPU);
              r->mutable_price_per_unit_hour()->set_currency_code("USD");
              r->mutable_price_per_unit_hour()->set_micros(2000000);
              *r->mutable_effective_time() =
                  AuthzTime(1893456000 + 3600 * int64_t{++c.env->counter});
            }));
  add("AddSpotPrice", "", false, true, "platform-admin", PlatformAdminOnly(),
      Calls(&Env::accounting, &AccountingStub::AddSpotPrice,
            [](const Call& c, v1::AddSpotPriceRequest& req) {
              v1::SpotPrice* p = req.mutable_spot_price();
              p->set_flavor("gpu");
              p->mutable_gpu_hour_price()->set_currency_code("USD");
              p->mutable_gpu_hour_price()->set_micros(900000);
              *p->mutable_effective_time() =
                  AuthzTime(1893456000 + 3600 * int64_t{++c.env->counter});
            }));
  add("AddCommitment", "", false, true, "platform-admin", PlatformAdminOnly(),
      Calls(&Env::accounting, &AccountingStub::AddCommitment,
            [](const Call& c, v1::AddCommitmentRequest& req) {
              v1::Commitment* m = req.mutable_commitment();
              m->set_flavor("gpu");
              m->mutable_amount()->set_currency_code("USD");
              m->mutable_amount()->set_micros(1000000);
              const int64_t at = 1893456000 + 3600 * int64_t{++c.env->counter};
              *m->mutable_start_time() = AuthzTime(at);
              *m->mutable_end_time() = AuthzTime(at + 3600);
            }));
  add("ListUsage", "of_tenant", true, false, "finance", FinanceRead(),
      Calls(&Env::accounting, &AccountingStub::ListUsage,
            [](const Call& c, v1::ListUsageRequest& req) {
              req.set_parent(c.parent());
            }));
  add("ListUsage", "all", false, false, "finance", FinanceReadAll(),
      Calls(&Env::accounting, &AccountingStub::ListUsage,
            [](const Call&, v1::ListUsageRequest& req) {
              req.set_parent("tenants/-");
            }));
  add("GetReport", "of_tenant", true, false, "finance", FinanceRead(),
      Calls(&Env::accounting, &AccountingStub::GetReport,
            [](const Call& c, v1::GetReportRequest& req) {
              req.set_parent(c.parent());
              Window(req);
            }));
  add("GetReport", "all", false, false, "finance", FinanceReadAll(),
      Calls(&Env::accounting, &AccountingStub::GetReport,
            [](const Call&, v1::GetReportRequest& req) {
              req.set_parent("tenants/-");
              Window(req);
            }));
  add("ExportReport", "of_tenant", true, false, "finance", FinanceRead(),
      [](const Call& c) {
        v1::ExportReportRequest req;
        req.mutable_report()->set_parent(c.parent());
        Window(*req.mutable_report());
        req.set_format(v1::REPORT_FORMAT_CSV);
        auto ctx = c.Ctx();
        auto reader = c.env->accounting->ExportReport(ctx.get(), req);
        v1::ExportReportResponse chunk;
        std::string data;
        while (reader->Read(&chunk)) data += chunk.data();
        grpc::Status s = reader->Finish();
        if (s.ok()) {
          EXPECT_TRUE(absl::StartsWith(data, "BillingAccountId,"));
        }
        return s;
      });
  // October 2026: a month that has started whenever this runs.
  add("GetInvoice", "", true, false, "finance", FinanceRead(),
      Calls(&Env::accounting, &AccountingStub::GetInvoice,
            [](const Call& c, v1::GetInvoiceRequest& req) {
              req.set_name(c.parent() + "/invoices/2026-10");
            }));
  add("CreateBudget", "", true, true, "finance", FinanceWrite(),
      Calls(&Env::accounting, &AccountingStub::CreateBudget,
            [](const Call& c, v1::CreateBudgetRequest& req) {
              const std::string project = c.env->NewProject(c.tenant);
              req.set_parent(c.parent());
              req.set_budget_id(c.env->Fresh("authz-budget"));
              req.mutable_budget()->set_project(
                  project.substr(project.rfind('/') + 1));
              req.mutable_budget()->mutable_monthly_amount()->set_micros(1000);
              req.mutable_budget()->add_thresholds()->set_percent(90);
            }));
  add("GetBudget", "", true, false, "finance", FinanceRead(),
      CallsOn(&Env::accounting, &AccountingStub::GetBudget,
              [](const Call& c) { return c.env->NewBudget(c.tenant); }));
  add("ListBudgets", "of_tenant", true, false, "finance", FinanceRead(),
      Calls(&Env::accounting, &AccountingStub::ListBudgets,
            [](const Call& c, v1::ListBudgetsRequest& req) {
              req.set_parent(c.parent());
            }));
  add("ListBudgets", "all", false, false, "finance", FinanceReadAll(),
      Calls(&Env::accounting, &AccountingStub::ListBudgets,
            [](const Call&, v1::ListBudgetsRequest& req) {
              req.set_parent("tenants/-");
            }));
  add("UpdateBudget", "", true, true, "finance", FinanceWrite(),
      Calls(&Env::accounting, &AccountingStub::UpdateBudget,
            [](const Call& c, v1::UpdateBudgetRequest& req) {
              req.mutable_budget()->set_name(c.env->NewBudget(c.tenant));
              req.mutable_budget()->mutable_monthly_amount()->set_micros(2000);
              req.mutable_update_mask()->add_paths("monthly_amount");
            }));
  add("DeleteBudget", "", true, true, "finance", FinanceWrite(),
      CallsOn(&Env::accounting, &AccountingStub::DeleteBudget,
              [](const Call& c) { return c.env->NewBudget(c.tenant); }));
  return rows;
}

const std::vector<Row>& Rows() {
  static const std::vector<Row>* rows = [] {
    auto* all = new std::vector<Row>();
    for (auto part : {JobRows(), QueueRows(), ClusterRows(), AdminRows(),
                      AccountingRows()}) {
      for (Row& r : part) all->push_back(std::move(r));
    }
    return all;
  }();
  return *rows;
}

// --- The matrix ---

struct CellParam {
  size_t row;
  Who who;
  Target target;
};

std::string CellName(const CellParam& p) {
  return absl::StrCat(Rows()[p.row].Label(), "__", WhoName(p.who), "__",
                      TargetName(p.target));
}

void PrintTo(const CellParam& p, std::ostream* os) { *os << CellName(p); }

std::vector<CellParam> AllCells() {
  std::vector<CellParam> cells;
  for (size_t i = 0; i < Rows().size(); ++i) {
    for (Who who : kEveryone) {
      if (Rows()[i].per_tenant) {
        cells.push_back({i, who, Target::kOwn});
        cells.push_back({i, who, Target::kOther});
      } else {
        cells.push_back({i, who, Target::kPlatform});
      }
    }
  }
  return cells;
}

class AuthzTest : public ::testing::TestWithParam<CellParam> {
 protected:
  static void SetUpTestSuite() {
    env_ = new Env();
    absl::Status s = Setup(*env_);
    if (!s.ok()) {
      setup_error_ = new std::string(s.ToString());
      delete env_;
      env_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete env_;
    env_ = nullptr;
  }

  static absl::Status Setup(Env& env) {
    ApiHarness::Options options;
    const std::shared_ptr<const runtime::JobTokenKeys> job_token_keys =
        runtime::JobTokenKeys::Random();
    options.server.job_tokens = job_token_keys;
    absl::StatusOr<std::unique_ptr<ApiHarness>> h =
        ApiHarness::Start(std::move(options));
    if (!h.ok()) return h.status();
    env.h = *std::move(h);
    if (absl::Status s = env.h->SeedTenant(kOwnTenant); !s.ok()) return s;
    if (absl::Status s = env.h->SeedTenant(kOtherTenant); !s.ok()) return s;
    env.jobs = env.h->jobs();
    env.queues = env.h->queues();
    env.clusters = env.h->clusters();
    env.admin = env.h->admin();
    env.accounting = v1::AccountingService::NewStub(env.h->channel());

    struct Principal {
      Who who;
      const char* name;
      v1::Role role;
      const char* tenant;
    };
    const Principal principals[] = {
        {Who::kViewer, "users/t1-viewer", v1::ROLE_VIEWER, kOwnTenant},
        {Who::kMember, "users/t1-member", v1::ROLE_MEMBER, kOwnTenant},
        {Who::kTenantAdmin, "users/t1-tenant-admin", v1::ROLE_TENANT_ADMIN,
         kOwnTenant},
        {Who::kFinance, "users/t1-finance", v1::ROLE_FINANCE, kOwnTenant},
        {Who::kPlatformAdmin, "users/platform-admin", v1::ROLE_PLATFORM_ADMIN,
         ""},
        {Who::kNobody, "users/nobody", v1::ROLE_UNSPECIFIED, ""},
        {Who::kPlatformFinance, "users/platform-finance", v1::ROLE_FINANCE, ""},
    };
    for (const Principal& p : principals) {
      env.principal[static_cast<int>(p.who)] = p.name;
      env.token[static_cast<int>(p.who)] =
          env.h->Token(p.name, p.role, p.tenant);
    }
    (void)env.h->Token(kAmy, v1::ROLE_VIEWER, kOwnTenant);
    (void)env.h->Token(kZed, v1::ROLE_VIEWER, kOtherTenant);
    (void)env.h->Token(kDual, v1::ROLE_VIEWER, kOwnTenant);
    (void)env.h->Token(kDual, v1::ROLE_PLATFORM_ADMIN);
    (void)env.h->Token(kBoth, v1::ROLE_VIEWER, kOwnTenant);
    (void)env.h->Token(kBoth, v1::ROLE_VIEWER, kOtherTenant);

    auto fail = [](const grpc::Status& s, const std::string& what) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat(what, ": ", s.error_message()));
    };
    for (const char* tenant : {kOwnTenant, kOtherTenant}) {
      v1::SubmitJobResponse job;
      grpc::Status s = env.jobs->Submit(
          env.AsAdmin().get(), MinimalSubmit(tenant, "authz-shared"), &job);
      if (!s.ok()) return fail(s, "shared job");
      (tenant == std::string(kOwnTenant) ? env.job_t1 : env.job_t2) =
          job.job().name();
      v1::ReportCheckpointRequest cp;
      cp.set_job(job.job().name());
      cp.mutable_checkpoint()->set_step(1);
      cp.mutable_checkpoint()->set_uri("s3://authz/shared");
      *cp.mutable_checkpoint()->mutable_time() =
          google::protobuf::util::TimeUtil::GetCurrentTime();
      v1::Checkpoint saved;
      s = env.jobs->ReportCheckpoint(env.AsAdmin().get(), cp, &saved);
      if (!s.ok()) return fail(s, "shared checkpoint");
    }
    // The job token of t1's shared job; its principal is the job's name.
    absl::StatusOr<domain::JobName> shared =
        domain::ParseJobName(env.job_t1, "job");
    if (!shared.ok()) return shared.status();
    env.principal[static_cast<int>(Who::kJobToken)] = env.job_t1;
    env.token[static_cast<int>(Who::kJobToken)] =
        job_token_keys->Mint({.tenant = shared->tenant,
                              .job_id = shared->job_id,
                              .expires = absl::Now() + absl::Hours(1)});
    {
      v1::CreatePriorityClassRequest req;
      req.set_priority_class_id("authz-shared");
      req.mutable_priority_class()->set_value(10);
      v1::PriorityClass out;
      grpc::Status s =
          env.queues->CreatePriorityClass(env.AsAdmin().get(), req, &out);
      if (!s.ok()) return fail(s, "priority class");
    }
    {
      v1::CreateClusterRequest req;
      req.set_cluster_id("authz-scratch");
      req.mutable_cluster()->set_backend(v1::BACKEND_KIND_SIM);
      v1::Cluster out;
      grpc::Status s =
          env.clusters->CreateCluster(env.AsAdmin().get(), req, &out);
      if (!s.ok()) return fail(s, "scratch cluster");
    }
    {
      v1::CreatePoolRequest req;
      req.set_parent("clusters/authz-scratch");
      req.set_pool_id("scratch");
      req.mutable_pool()->set_flavor("gpu");
      v1::Pool out;
      grpc::Status s = env.clusters->CreatePool(env.AsAdmin().get(), req, &out);
      if (!s.ok()) return fail(s, "scratch pool");
    }
    {
      v1::ReportNodesRequest req;
      req.set_parent("clusters/authz-scratch");
      *req.add_nodes() = env.ScratchNode("scratch-0");
      v1::ReportNodesResponse out;
      grpc::Status s =
          env.clusters->ReportNodes(env.AsAdmin().get(), req, &out);
      if (!s.ok()) return fail(s, "scratch node");
    }
    return absl::OkStatus();
  }

  // The newest audit row of `principal`, read as the root platform admin.
  static bool NewestAudit(const std::string& principal, v1::AuditEntry* out) {
    v1::ListAuditLogRequest req;
    req.set_principal(principal);
    req.set_page_size(1);
    v1::ListAuditLogResponse resp;
    grpc::Status s =
        env_->admin->ListAuditLog(env_->AsAdmin().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << "ListAuditLog: " << s.error_message();
    if (!s.ok() || resp.entries().empty()) return false;
    *out = resp.entries(0);
    return true;
  }

  static Env* env_;
  static std::string* setup_error_;
};

Env* AuthzTest::env_ = nullptr;
std::string* AuthzTest::setup_error_ = nullptr;

TEST_P(AuthzTest, Cell) {
  ASSERT_NE(env_, nullptr) << "harness setup failed: "
                           << (setup_error_ != nullptr ? *setup_error_ : "?");
  const CellParam& p = GetParam();
  const Row& row = Rows()[p.row];
  const std::string cell = CellName(p);
  SCOPED_TRACE(cell);
  Call call{env_, p.who,
            p.target == Target::kOwn     ? kOwnTenant
            : p.target == Target::kOther ? kOtherTenant
                                         : ""};
  // A job token: its own job (t1's shared job, which the own column of the
  // job-token methods names) through its five methods, nothing else.
  const bool job_token = p.who == Who::kJobToken;
  const Codes want =
      !job_token ? row.expect(p.who, p.target)
      : IsJobTokenMethod(row.Method()) && p.target == Target::kOwn
          ? Codes{StatusCode::OK}
          : Codes{StatusCode::PERMISSION_DENIED};
  const grpc::Status got = row.run(call);
  const bool as_expected =
      std::find(want.begin(), want.end(), got.error_code()) != want.end();
  EXPECT_TRUE(as_expected) << row.Method() << " called by " << WhoName(p.who)
                           << " on " << TargetName(p.target)
                           << (call.tenant.empty()
                                   ? ""
                                   : absl::StrCat(" (tenant ", call.tenant,
                                                  ")"))
                           << ": got " << CodeName(got.error_code()) << " \""
                           << got.error_message() << "\", the rules say "
                           << CodesName(want);

  // A refusal for lack of a role names the role needed (docs/security.md,
  // "Denials").
  if (got.error_code() == StatusCode::PERMISSION_DENIED && job_token) {
    // ... and a job token's refusal names the token's job instead.
    EXPECT_TRUE(
        absl::StrContains(got.error_message(), "job token of " + env_->job_t1))
        << "PERMISSION_DENIED of a job token should name its job "
        << env_->job_t1 << ": " << got.error_message();
  } else if (got.error_code() == StatusCode::PERMISSION_DENIED) {
    if (row.role != nullptr) {
      EXPECT_TRUE(absl::StrContains(got.error_message(), row.role))
          << "PERMISSION_DENIED should name role " << row.role << ": "
          << got.error_message();
    } else {
      bool names_role = false;
      for (const char* role :
           {"viewer", "member", "tenant-admin", "finance", "platform-admin"}) {
        names_role |= absl::StrContains(got.error_message(), role);
      }
      EXPECT_TRUE(names_role)
          << "PERMISSION_DENIED should name the role needed: "
          << got.error_message();
    }
  }

  // Every administrative mutation writes an audit row, refused ones too, with
  // the status code as the result. (Unauthenticated calls have no principal to
  // record.)
  if (row.audited && p.who != Who::kAnonymous) {
    v1::AuditEntry entry;
    ASSERT_TRUE(NewestAudit(call.principal(), &entry))
        << "no audit row of " << call.principal() << " for " << row.Method();
    EXPECT_EQ(entry.method(), row.Method()) << entry.ShortDebugString();
    EXPECT_EQ(entry.result(), CodeName(got.error_code()))
        << entry.ShortDebugString();
    EXPECT_EQ(entry.principal(), call.principal());
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, AuthzTest, ::testing::ValuesIn(AllCells()),
                         [](const ::testing::TestParamInfo<CellParam>& info) {
                           return CellName(info.param);
                         });

}  // namespace
}  // namespace trainyard::testing
