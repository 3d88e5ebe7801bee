// Resource names of the v1 API (AIP-122 style) and the ids inside them.
//
//   tenants/{tenant}
//   tenants/{tenant}/jobs/{job}
//   tenants/{tenant}/projects/{project}
//   tenants/{tenant}/queues/{queue}
//   cohorts/{cohort}
//   priorityClasses/{priority_class}
//   flavors/{flavor}
//   clusters/{cluster}
//   clusters/{cluster}/pools/{pool}
//   clusters/{cluster}/nodes/{node}
//   apiTokens/{id}
//   roleBindings/{id}
//
// Ids: ^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$ (IsValidId), except
//   {job}   a decimal int64 > 0 without sign or leading zeros;
//   {node}  like a hostname: ^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$
//           (IsValidNodeId);
//   apiTokens and roleBindings ids are server-generated and may also start
//           with a digit (IsValidGeneratedId).
//
// "tenants/-" and "clusters/-" are the parents meaning "all" in List and Watch
// requests.
//
// Every Parse* function reports a malformed name as
//   FieldError(field, "INVALID_NAME",
//              "expected tenants/{tenant}/jobs/{job}, got \"...\"")
#ifndef TRAINYARD_SERVICES_LIB_DOMAIN_NAMES_H_
#define TRAINYARD_SERVICES_LIB_DOMAIN_NAMES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace trainyard::domain {

// ^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$ : tenants, projects, queues, cohorts,
// priority classes, flavors, clusters, pools.
bool IsValidId(std::string_view id);
// ^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$ : node ids (hostnames).
bool IsValidNodeId(std::string_view id);
// ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ : ids the server generates (API tokens,
// role bindings); like IsValidId but may start with a digit (serial numbers,
// UUIDs).
bool IsValidGeneratedId(std::string_view id);

// The id that stands for "all" in parents: "tenants/-", "clusters/-".
inline constexpr std::string_view kAllId = "-";

// --- Tenants ---
std::string TenantName(std::string_view tenant);
// "tenants/{t}" → t. "tenants/-" is rejected (see ParseTenantParent).
absl::StatusOr<std::string> ParseTenantName(std::string_view name,
                                            std::string_view field);
// Whether parent is "tenants/-".
bool IsAllTenants(std::string_view parent);
// "tenants/{t}" → t, "tenants/-" → "-" (kAllId): for List/Watch parents.
absl::StatusOr<std::string> ParseTenantParent(std::string_view parent,
                                              std::string_view field);

// --- Jobs ---
struct JobName {
  std::string tenant;
  int64_t job_id = 0;

  // "tenants/{tenant}/jobs/{job_id}".
  std::string ToString() const;
  friend bool operator==(const JobName&, const JobName&) = default;
};
// The last segment of a resource name ("clusters/a/nodes/n7" -> "n7"); the
// name itself when it has no '/'. Does not validate.
std::string_view NameId(std::string_view name);

std::string FormatJobName(const JobName& name);
std::string JobResourceName(std::string_view tenant, int64_t job_id);
absl::StatusOr<JobName> ParseJobName(std::string_view name,
                                     std::string_view field);

// --- Children of a tenant: projects and queues ---
struct TenantChildName {
  std::string tenant;
  std::string id;

  friend bool operator==(const TenantChildName&,
                         const TenantChildName&) = default;
};
std::string ProjectName(std::string_view tenant, std::string_view project);
absl::StatusOr<TenantChildName> ParseProjectName(std::string_view name,
                                                 std::string_view field);
std::string QueueName(std::string_view tenant, std::string_view queue);
absl::StatusOr<TenantChildName> ParseQueueName(std::string_view name,
                                               std::string_view field);
std::string BudgetName(std::string_view tenant, std::string_view budget);
absl::StatusOr<TenantChildName> ParseBudgetName(std::string_view name,
                                                std::string_view field);

// --- Platform objects ---
std::string CohortName(std::string_view cohort);
absl::StatusOr<std::string> ParseCohortName(std::string_view name,
                                            std::string_view field);
std::string PriorityClassName(std::string_view priority_class);
absl::StatusOr<std::string> ParsePriorityClassName(std::string_view name,
                                                   std::string_view field);
std::string FlavorName(std::string_view flavor);
absl::StatusOr<std::string> ParseFlavorName(std::string_view name,
                                            std::string_view field);

// --- Clusters and their pools and nodes ---
std::string ClusterName(std::string_view cluster);
// "clusters/{c}" → c. "clusters/-" is rejected (see ParseClusterParent).
absl::StatusOr<std::string> ParseClusterName(std::string_view name,
                                             std::string_view field);
// Whether parent is "clusters/-".
bool IsAllClusters(std::string_view parent);
// "clusters/{c}" → c, "clusters/-" → "-" (kAllId).
absl::StatusOr<std::string> ParseClusterParent(std::string_view parent,
                                               std::string_view field);

struct ClusterChildName {
  std::string cluster;
  std::string id;

  friend bool operator==(const ClusterChildName&,
                         const ClusterChildName&) = default;
};
std::string PoolName(std::string_view cluster, std::string_view pool);
absl::StatusOr<ClusterChildName> ParsePoolName(std::string_view name,
                                               std::string_view field);
std::string NodeName(std::string_view cluster, std::string_view node);
absl::StatusOr<ClusterChildName> ParseNodeName(std::string_view name,
                                               std::string_view field);

// --- Admin objects ---
std::string ApiTokenName(std::string_view id);
absl::StatusOr<std::string> ParseApiTokenName(std::string_view name,
                                              std::string_view field);
std::string RoleBindingName(std::string_view id);
absl::StatusOr<std::string> ParseRoleBindingName(std::string_view name,
                                                 std::string_view field);

}  // namespace trainyard::domain

#endif  // TRAINYARD_SERVICES_LIB_DOMAIN_NAMES_H_
