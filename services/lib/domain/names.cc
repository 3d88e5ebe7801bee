#include "services/lib/domain/names.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Ids of the form [first][middle]{0,max-2}[last]?, where first and last are
// lower-case letters or digits (first may be restricted to letters) and middle
// additionally allows '-' (and '.').
bool IsIdLike(std::string_view id, size_t max_len, bool first_must_be_letter,
              bool allow_dot) {
  if (id.empty() || id.size() > max_len) return false;
  const char first = id.front();
  if (!(IsLower(first) || (!first_must_be_letter && IsDigit(first))))
    return false;
  const char last = id.back();
  if (!(IsLower(last) || IsDigit(last))) return false;
  for (char c : id) {
    if (!(IsLower(c) || IsDigit(c) || c == '-' || (allow_dot && c == '.')))
      return false;
  }
  return true;
}

absl::Status NameError(std::string_view field, std::string_view pattern,
                       std::string_view got) {
  constexpr size_t kMaxEcho = 200;
  std::string echo = absl::CHexEscape(AbslView(got.substr(0, kMaxEcho)));
  if (got.size() > kMaxEcho) echo += "...";
  return FieldError(field, reason::kInvalidName,
                    Cat("expected ", pattern, ", got \"", echo, "\""));
}

// Splits `name` on '/' and checks that the segments at even positions equal the
// literal collection ids in `collections` (e.g. {"tenants", "jobs"}); returns
// the variable segments.
bool SplitName(std::string_view name,
               std::initializer_list<std::string_view> collections,
               std::vector<std::string_view>* ids) {
  std::vector<absl::string_view> parts = absl::StrSplit(AbslView(name), '/');
  if (parts.size() != 2 * collections.size()) return false;
  size_t i = 0;
  for (std::string_view collection : collections) {
    if (StdView(parts[2 * i]) != collection) return false;
    ids->push_back(StdView(parts[2 * i + 1]));
    ++i;
  }
  return true;
}

// Parses "<collection>/{id}" with a validity predicate for the id.
absl::StatusOr<std::string> ParseSimple(std::string_view name,
                                        std::string_view field,
                                        std::string_view collection,
                                        std::string_view pattern,
                                        bool (*valid)(std::string_view)) {
  std::vector<std::string_view> ids;
  if (!SplitName(name, {collection}, &ids) || !valid(ids[0])) {
    return NameError(field, pattern, name);
  }
  return std::string(ids[0]);
}

// Parses a decimal int64 > 0 without sign or leading zeros.
bool ParseJobId(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 19 || s.front() == '0') return false;
  for (char c : s) {
    if (!IsDigit(c)) return false;
  }
  return absl::SimpleAtoi(AbslView(s), out) && *out > 0;
}

constexpr std::string_view kTenantPattern = "tenants/{tenant}";
constexpr std::string_view kJobPattern = "tenants/{tenant}/jobs/{job}";
constexpr std::string_view kProjectPattern =
    "tenants/{tenant}/projects/{project}";
constexpr std::string_view kQueuePattern = "tenants/{tenant}/queues/{queue}";
constexpr std::string_view kClusterPattern = "clusters/{cluster}";
constexpr std::string_view kPoolPattern = "clusters/{cluster}/pools/{pool}";
constexpr std::string_view kNodePattern = "clusters/{cluster}/nodes/{node}";

absl::StatusOr<TenantChildName> ParseTenantChild(std::string_view name,
                                                 std::string_view field,
                                                 std::string_view collection,
                                                 std::string_view pattern) {
  std::vector<std::string_view> ids;
  if (!SplitName(name, {"tenants", collection}, &ids) || !IsValidId(ids[0]) ||
      !IsValidId(ids[1])) {
    return NameError(field, pattern, name);
  }
  return TenantChildName{std::string(ids[0]), std::string(ids[1])};
}

absl::StatusOr<ClusterChildName> ParseClusterChild(
    std::string_view name, std::string_view field, std::string_view collection,
    std::string_view pattern, bool (*valid)(std::string_view)) {
  std::vector<std::string_view> ids;
  if (!SplitName(name, {"clusters", collection}, &ids) || !IsValidId(ids[0]) ||
      !valid(ids[1])) {
    return NameError(field, pattern, name);
  }
  return ClusterChildName{std::string(ids[0]), std::string(ids[1])};
}

}  // namespace

bool IsValidId(std::string_view id) {
  return IsIdLike(id, 63, /*first_must_be_letter=*/true, /*allow_dot=*/false);
}

bool IsValidNodeId(std::string_view id) {
  return IsIdLike(id, 253, /*first_must_be_letter=*/false, /*allow_dot=*/true);
}

bool IsValidGeneratedId(std::string_view id) {
  return IsIdLike(id, 63, /*first_must_be_letter=*/false, /*allow_dot=*/false);
}

std::string TenantName(std::string_view tenant) {
  return Cat("tenants/", tenant);
}

absl::StatusOr<std::string> ParseTenantName(std::string_view name,
                                            std::string_view field) {
  return ParseSimple(name, field, "tenants", kTenantPattern, &IsValidId);
}

bool IsAllTenants(std::string_view parent) { return parent == "tenants/-"; }

absl::StatusOr<std::string> ParseTenantParent(std::string_view parent,
                                              std::string_view field) {
  if (IsAllTenants(parent)) return std::string(kAllId);
  std::vector<std::string_view> ids;
  if (!SplitName(parent, {"tenants"}, &ids) || !IsValidId(ids[0])) {
    return NameError(field, "tenants/{tenant} or tenants/-", parent);
  }
  return std::string(ids[0]);
}

std::string JobName::ToString() const {
  return JobResourceName(tenant, job_id);
}

std::string FormatJobName(const JobName& name) { return name.ToString(); }

std::string JobResourceName(std::string_view tenant, int64_t job_id) {
  return Cat("tenants/", tenant, "/jobs/", job_id);
}

absl::StatusOr<JobName> ParseJobName(std::string_view name,
                                     std::string_view field) {
  std::vector<std::string_view> ids;
  JobName out;
  if (!SplitName(name, {"tenants", "jobs"}, &ids) || !IsValidId(ids[0]) ||
      !ParseJobId(ids[1], &out.job_id)) {
    return NameError(field, kJobPattern, name);
  }
  out.tenant = std::string(ids[0]);
  return out;
}

std::string ProjectName(std::string_view tenant, std::string_view project) {
  return Cat("tenants/", tenant, "/projects/", project);
}

absl::StatusOr<TenantChildName> ParseProjectName(std::string_view name,
                                                 std::string_view field) {
  return ParseTenantChild(name, field, "projects", kProjectPattern);
}

std::string QueueName(std::string_view tenant, std::string_view queue) {
  return Cat("tenants/", tenant, "/queues/", queue);
}

absl::StatusOr<TenantChildName> ParseQueueName(std::string_view name,
                                               std::string_view field) {
  return ParseTenantChild(name, field, "queues", kQueuePattern);
}

std::string BudgetName(std::string_view tenant, std::string_view budget) {
  return Cat("tenants/", tenant, "/budgets/", budget);
}

absl::StatusOr<TenantChildName> ParseBudgetName(std::string_view name,
                                                std::string_view field) {
  return ParseTenantChild(name, field, "budgets",
                          "tenants/{tenant}/budgets/{budget}");
}

std::string CohortName(std::string_view cohort) {
  return Cat("cohorts/", cohort);
}

absl::StatusOr<std::string> ParseCohortName(std::string_view name,
                                            std::string_view field) {
  return ParseSimple(name, field, "cohorts", "cohorts/{cohort}", &IsValidId);
}

std::string PriorityClassName(std::string_view priority_class) {
  return Cat("priorityClasses/", priority_class);
}

absl::StatusOr<std::string> ParsePriorityClassName(std::string_view name,
                                                   std::string_view field) {
  return ParseSimple(name, field, "priorityClasses",
                     "priorityClasses/{priority_class}", &IsValidId);
}

std::string FlavorName(std::string_view flavor) {
  return Cat("flavors/", flavor);
}

absl::StatusOr<std::string> ParseFlavorName(std::string_view name,
                                            std::string_view field) {
  return ParseSimple(name, field, "flavors", "flavors/{flavor}", &IsValidId);
}

std::string ClusterName(std::string_view cluster) {
  return Cat("clusters/", cluster);
}

absl::StatusOr<std::string> ParseClusterName(std::string_view name,
                                             std::string_view field) {
  return ParseSimple(name, field, "clusters", kClusterPattern, &IsValidId);
}

bool IsAllClusters(std::string_view parent) { return parent == "clusters/-"; }

absl::StatusOr<std::string> ParseClusterParent(std::string_view parent,
                                               std::string_view field) {
  if (IsAllClusters(parent)) return std::string(kAllId);
  std::vector<std::string_view> ids;
  if (!SplitName(parent, {"clusters"}, &ids) || !IsValidId(ids[0])) {
    return NameError(field, "clusters/{cluster} or clusters/-", parent);
  }
  return std::string(ids[0]);
}

std::string PoolName(std::string_view cluster, std::string_view pool) {
  return Cat("clusters/", cluster, "/pools/", pool);
}

absl::StatusOr<ClusterChildName> ParsePoolName(std::string_view name,
                                               std::string_view field) {
  return ParseClusterChild(name, field, "pools", kPoolPattern, &IsValidId);
}

std::string NodeName(std::string_view cluster, std::string_view node) {
  return Cat("clusters/", cluster, "/nodes/", node);
}

absl::StatusOr<ClusterChildName> ParseNodeName(std::string_view name,
                                               std::string_view field) {
  return ParseClusterChild(name, field, "nodes", kNodePattern, &IsValidNodeId);
}

std::string ApiTokenName(std::string_view id) { return Cat("apiTokens/", id); }

absl::StatusOr<std::string> ParseApiTokenName(std::string_view name,
                                              std::string_view field) {
  return ParseSimple(name, field, "apiTokens", "apiTokens/{id}",
                     &IsValidGeneratedId);
}

std::string RoleBindingName(std::string_view id) {
  return Cat("roleBindings/", id);
}

absl::StatusOr<std::string> ParseRoleBindingName(std::string_view name,
                                                 std::string_view field) {
  return ParseSimple(name, field, "roleBindings", "roleBindings/{id}",
                     &IsValidGeneratedId);
}

std::string_view NameId(std::string_view name) {
  const size_t slash = name.rfind('/');
  return slash == std::string_view::npos ? name : name.substr(slash + 1);
}

}  // namespace trainyard::domain
