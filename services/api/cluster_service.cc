#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "services/api/handler.h"
#include "services/api/resource_handler.h"
#include "services/api/resource_methods.h"
#include "services/api/resource_util.h"
#include "services/api/services.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/names.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"
#include "services/lib/domain/validation.h"
#include "trainyard/v1/cluster.grpc.pb.h"

namespace trainyard::api {
namespace {

namespace pg = storage::postgres;
namespace v1 = trainyard::v1;

using google::protobuf::FieldMask;

absl::Status CheckClusterExists(pg::ObjectStore* objects,
                                const std::string& cluster) {
  return CheckExists(objects, pg::ClusterKind(), {cluster}, "parent",
                     reason::kUnknownCluster, "cluster");
}

// --- Clusters ---

constexpr std::string_view kClusterFields[] = {
    "display_name", "backend", "slurm",   "kubernetes",
    "sim",          "labels",  "cordoned"};

// Its pools and nodes go with a cluster (ON DELETE CASCADE). Its health is
// reported by the cluster's dispatcher, never set by a Create.
constexpr ResourceKind<v1::Cluster> kClusters = {
    .field = "cluster",
    .plural = "clusters",
    .parse_name = &ParseKey<&domain::ParseClusterName>,
    .name_of = &KeyName<&domain::ClusterName>,
    .access = kPlatformObjects,
    .store = &pg::ClusterKind,
    .updatable = kClusterFields,
    .validate =
        [](const ApiContext& ctx, const ResourceKey&,
           const v1::Cluster& cluster) {
          return domain::ValidateCluster(cluster, ctx.limits);
        },
    .clear_output_only =
        [](v1::Cluster* cluster) {
          cluster->clear_health();
          cluster->clear_health_message();
          cluster->clear_heartbeat_time();
        },
};

// --- Flavors ---

constexpr std::string_view kFlavorFields[] = {"kind",
                                              "gpu_model",
                                              "gpu_hour_price",
                                              "cpu_hour_price",
                                              "memory_gib_hour_price",
                                              "reclaim_rate_per_hour",
                                              "restart_overhead"};

constexpr ResourceKind<v1::Flavor> kFlavors = {
    .field = "flavor",
    .plural = "flavors",
    .parse_name = &ParseKey<&domain::ParseFlavorName>,
    .name_of = &KeyName<&domain::FlavorName>,
    .access = kPlatformObjects,
    .store = &pg::FlavorKind,
    .updatable = kFlavorFields,
    .validate =
        [](const ApiContext&, const ResourceKey&, const v1::Flavor& flavor) {
          return domain::ValidateFlavor(flavor);
        },
    .delete_conflicts =
        [](const ResourceKey& key) -> std::vector<ConstraintMessage> {
      return {InUse("pools_flavor_fkey",
                    domain::Cat("flavor ", key[0], " is used by a pool")),
              InUse("queue_flavors_flavor_fkey",
                    domain::Cat("flavor ", key[0],
                                " is used by a queue's quotas"))};
    },
};

// --- Pools ---

// The pool's cluster and flavor exist.
absl::Status CheckPoolReferences(const ApiContext& ctx, const ResourceKey& key,
                                 const v1::Pool& pool, const FieldMask*) {
  TY_RETURN_IF_ERROR(CheckClusterExists(ctx.objects, key[0]));
  return CheckExists(ctx.objects, pg::FlavorKind(), {pool.flavor()},
                     "pool.flavor", reason::kUnknownFlavor, "flavor");
}

constexpr ResourceKind<v1::Pool> kPools = {
    .field = "pool",
    .plural = "pools",
    .collection = "pools",
    .parse_name = &ParseKey<&domain::ParsePoolName>,
    .name_of = &KeyName<&domain::PoolName>,
    .parse_parent = &domain::ParseClusterName,
    .parent_name = &domain::ClusterName,
    .access = kPlatformObjects,
    .store = &pg::PoolKind,
    .extra_columns = [](const v1::Pool& pool)
        -> std::vector<std::optional<std::string>> { return {pool.flavor()}; },
    .validate =
        [](const ApiContext& ctx, const ResourceKey&, const v1::Pool& pool) {
          return domain::ValidatePool(pool, ctx.limits);
        },
    .check_references = &CheckPoolReferences,
    .write_conflicts = [](const ResourceKey& key, const v1::Pool& pool)
        -> std::vector<ConstraintMessage> {
      return {
          UnknownReference("pools_cluster_fkey", "parent",
                           reason::kUnknownCluster, "cluster", key[0]),
          UnknownReference("pools_flavor_fkey", "pool.flavor",
                           reason::kUnknownFlavor, "flavor", pool.flavor())};
    },
    .delete_conflicts =
        [](const ResourceKey& key) -> std::vector<ConstraintMessage> {
      return {InUse("nodes_cluster_pool_fkey",
                    domain::Cat("pool ", key[1], " still has nodes"))};
    },
};

// --- Nodes: read here, written by ReportNodes and SetNodeState ---

constexpr ResourceKind<v1::Node> kNodes = {
    .plural = "nodes",
    .parse_name = &ParseKey<&domain::ParseNodeName>,
    .name_of = &KeyName<&domain::NodeName>,
    .access = kPlatformObjects,
    .store = &pg::NodeKind,
    .extra_columns =
        [](const v1::Node& node) -> std::vector<std::optional<std::string>> {
      return {node.pool(), domain::Cat(static_cast<int>(node.state()))};
    },
};

// SetNodeState: platform admins drain nodes and make them ready again.
constexpr Verb kSetNodeStates = {
    .name = "set",
    .access = {.rule = Access::Rule::kPlatformAdmin},
    .plural = "node states"};

// A ReportNodes request checked whole before anything is written: the ids of
// its nodes (with their index in the request), and the nodes of the cluster
// it does not list when it is `complete`.
struct NodeReport {
  struct Write {
    std::string id;
    int index;
  };
  std::vector<Write> writes;
  std::vector<std::string> removals;
};

absl::StatusOr<NodeReport> CheckReport(ApiContext& ctx,
                                       const v1::ReportNodesRequest& request,
                                       const std::string& cluster) {
  NodeReport report;
  absl::flat_hash_set<std::string> listed;
  // pool id → first node index naming it
  absl::flat_hash_map<std::string, int> pools;
  for (int i = 0; i < request.nodes_size(); ++i) {
    const v1::Node& node = request.nodes(i);
    const std::string at = domain::IndexField("nodes", i);
    TY_ASSIGN_OR_RETURN(
        const domain::ClusterChildName id,
        domain::ParseNodeName(node.name(), domain::JoinField(at, "name")));
    if (id.cluster != cluster) {
      return domain::FieldError(
          domain::JoinField(at, "name"), domain::reason::kInconsistent,
          domain::Cat("node ", node.name(), " is not under parent ",
                      request.parent()));
    }
    if (!listed.insert(id.id).second) {
      return domain::FieldError(
          domain::JoinField(at, "name"), domain::reason::kDuplicate,
          domain::Cat("node ", node.name(), " is listed twice"));
    }
    TY_RETURN_IF_ERROR(
        domain::PrefixField(domain::ValidateNode(node, ctx.limits), at));
    pools.emplace(node.pool(), i);
    report.writes.push_back(NodeReport::Write{id.id, i});
  }
  TY_RETURN_IF_ERROR(CheckClusterExists(ctx.objects, cluster));
  for (const auto& [pool, index] : pools) {
    TY_RETURN_IF_ERROR(CheckExists(
        ctx.objects, pg::PoolKind(), {cluster, pool},
        domain::JoinField(domain::IndexField("nodes", index), "pool"),
        reason::kUnknownPool, "pool"));
  }
  if (request.complete()) {
    pg::ListQuery query;
    query.equals.emplace_back("cluster", cluster);
    TY_ASSIGN_OR_RETURN(std::vector<pg::StoredObject> existing,
                        ListAll(ctx.objects, pg::NodeKind(), query));
    for (const pg::StoredObject& row : existing) {
      if (!listed.contains(row.key[1])) report.removals.push_back(row.key[1]);
    }
  }
  return report;
}

// The pools of a cluster, or of every cluster ("clusters/-").
absl::StatusOr<pg::ListQuery> SelectPools(const ResourceKind<v1::Pool>& kind,
                                          const Caller&,
                                          const v1::ListPoolsRequest& request) {
  TY_ASSIGN_OR_RETURN(std::string cluster,
                      domain::ParseClusterParent(request.parent(), "parent"));
  TY_ASSIGN_OR_RETURN(pg::ListQuery query, PageOf(kind, request));
  if (cluster != domain::kAllId) {
    query.equals.emplace_back("cluster", cluster);
  }
  return query;
}

// The nodes of a cluster (or of every cluster), optionally of one pool and in
// one state.
absl::StatusOr<pg::ListQuery> SelectNodes(const ResourceKind<v1::Node>& kind,
                                          const Caller&,
                                          const v1::ListNodesRequest& request) {
  TY_ASSIGN_OR_RETURN(std::string cluster,
                      domain::ParseClusterParent(request.parent(), "parent"));
  const std::string& pool = request.pool();
  if (!pool.empty()) TY_RETURN_IF_ERROR(CheckNewId("pool", pool));
  if (!v1::NodeState_IsValid(request.state())) {
    return domain::FieldError(
        "state", domain::reason::kInvalidValue,
        domain::Cat("unknown value ", static_cast<int>(request.state())));
  }
  TY_ASSIGN_OR_RETURN(pg::ListQuery query, PageOf(kind, request));
  if (cluster != domain::kAllId) {
    query.equals.emplace_back("cluster", cluster);
  }
  if (!pool.empty()) query.equals.emplace_back("pool", pool);
  if (request.state() != v1::NODE_STATE_UNSPECIFIED) {
    query.equals.emplace_back("state",
                              domain::Cat(static_cast<int>(request.state())));
  }
  return query;
}

class ClusterServiceImpl final : public ApiService<v1::ClusterService> {
 public:
  using ApiService::ApiService;

  TY_RESOURCE_METHODS(Cluster, Clusters, cluster, clusters, kClusters, PageOnly)
  TY_RESOURCE_METHODS(Flavor, Flavors, flavor, flavors, kFlavors, PageOnly)

  TY_CREATE_METHOD(Pool, pool, kPools)
  TY_LIST_METHOD(Pools, pools, kPools, SelectPools)
  TY_DELETE_METHOD(Pool, kPools)

  // Nodes are written by ReportNodes and SetNodeState.
  TY_GET_METHOD(Node, kNodes)
  TY_LIST_METHOD(Nodes, nodes, kNodes, SelectNodes)

  TY_RPC(ReportNodes, v1::ReportNodesRequest, v1::ReportNodesResponse) {
    return RunMutation(
        ctx_, context, Method("ReportNodes"), *request, request->parent(),
        [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
          TY_ASSIGN_OR_RETURN(
              const std::string cluster,
              domain::ParseClusterName(request->parent(), "parent"));
          audit.record.resource = domain::ClusterName(cluster);
          TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "report nodes"));
          TY_ASSIGN_OR_RETURN(const NodeReport report,
                              CheckReport(*ctx_, *request, cluster));

          // One write per node; the audit row commits with the last one.
          const size_t total = report.writes.size() + report.removals.size();
          size_t done = 0;
          auto audit_if_last = [&]() -> const pg::AuditRecord* {
            return ++done == total ? &audit.record : nullptr;
          };
          int upserted = 0;
          int removed = 0;
          for (const NodeReport::Write& w : report.writes) {
            const v1::Node& node = request->nodes(w.index);
            const pg::ObjectStore::Mutation stored = Stored(kNodes, node);
            const pg::AuditRecord* node_audit = audit_if_last();
            absl::StatusOr<pg::StoredObject> row =
                ctx_->objects->Upsert(pg::NodeKind(), {cluster, w.id},
                                      stored.extras, stored.body, node_audit);
            if (!row.ok()) {
              if (upserted > 0) InvalidateCaches(*ctx_);
              const std::string pool_field = domain::JoinField(
                  domain::IndexField("nodes", w.index), "pool");
              return ExplainStorageError(
                  row.status(), domain::NodeName(cluster, w.id),
                  {{"nodes_cluster_pool_fkey", pool_field, reason::kUnknownPool,
                    domain::Cat("pool ", Quoted(node.pool()), " of cluster ",
                                cluster, " does not exist")},
                   UnknownReference("nodes_cluster_fkey", "parent",
                                    reason::kUnknownCluster, "cluster",
                                    cluster)});
            }
            if (node_audit != nullptr) audit.committed = true;
            ++upserted;
          }
          for (const std::string& id : report.removals) {
            const pg::AuditRecord* node_audit = audit_if_last();
            absl::Status s = ctx_->objects->Delete(pg::NodeKind(),
                                                   {cluster, id}, node_audit);
            // A node removed meanwhile is not an error; the audit row is then
            // written below.
            if (absl::IsNotFound(s)) continue;
            if (!s.ok()) {
              InvalidateCaches(*ctx_);
              return s;
            }
            if (node_audit != nullptr) audit.committed = true;
            ++removed;
          }
          if (!audit.committed) {
            // Nothing to write, or the last removal found its node gone: record
            // the call anyway.
            TY_RETURN_IF_ERROR(
                Committed(audit, ctx_->auth_store->WriteAudit(audit.record)));
          }
          response->set_upserted(upserted);
          response->set_removed(removed);
          InvalidateCaches(*ctx_);
          return absl::OkStatus();
        });
  }

  TY_RPC(SetNodeState, v1::SetNodeStateRequest, v1::Node) {
    return MutateResource(
        ctx_, context, Method("SetNodeState"), *request, kNodes, kSetNodeStates,
        request->name(), "name",
        [&](MutationAudit& audit, const NamedObject& node) -> absl::Status {
          if (request->state() != v1::NODE_STATE_READY &&
              request->state() != v1::NODE_STATE_DRAINING) {
            return domain::FieldError(
                "state", domain::reason::kInvalidValue,
                "must be NODE_STATE_READY or NODE_STATE_DRAINING");
          }
          if (request->reason().size() > domain::kMaxDescriptionChars) {
            return domain::FieldError(
                "reason", domain::reason::kTooLarge,
                domain::Cat("must be at most ", domain::kMaxDescriptionChars,
                            " bytes, got ", request->reason().size()));
          }
          // The dispatcher's reports keep the name in the stored body.
          TY_ASSIGN_OR_RETURN(
              *response, ModifyObject<v1::Node>(
                             *ctx_, kNodes, node.key, node.name, /*etag=*/"",
                             [&](v1::Node& stored) {
                               stored.set_state(request->state());
                               stored.set_state_message(request->reason());
                               return absl::OkStatus();
                             },
                             audit));
          InvalidateCaches(*ctx_);
          return absl::OkStatus();
        });
  }

  TY_RPC(GetCapacity, v1::GetCapacityRequest, v1::CapacitySummary) {
    return Run(
        ctx_, context, Method("GetCapacity"), *request,
        [&](const Caller&) -> absl::Status {
          TY_ASSIGN_OR_RETURN(const std::vector<v1::Flavor> flavors,
                              ReadAll(*ctx_, kFlavors));
          TY_ASSIGN_OR_RETURN(const std::vector<pg::StoredObject> pool_rows,
                              ListAll(ctx_->objects, pg::PoolKind(), {}));
          std::vector<std::pair<std::string, std::string>> pool_flavor;
          for (const pg::StoredObject& row : pool_rows) {
            TY_ASSIGN_OR_RETURN(const v1::Pool pool,
                                Decode<v1::Pool>(row, kPools.name_of(row.key)));
            pool_flavor.emplace_back(domain::Cat(row.key[0], "/", row.key[1]),
                                     pool.flavor());
          }
          pg::ListQuery ready;
          ready.equals.emplace_back(
              "state", domain::Cat(static_cast<int>(v1::NODE_STATE_READY)));
          TY_ASSIGN_OR_RETURN(const std::vector<v1::Node> nodes,
                              ReadAll(*ctx_, kNodes, ready));
          *response = SumReadyCapacity(flavors, pool_flavor, nodes);
          return absl::OkStatus();
        });
  }
};

}  // namespace

std::unique_ptr<grpc::Service> NewClusterService(ApiContext* ctx) {
  return std::make_unique<ClusterServiceImpl>(ctx);
}

}  // namespace trainyard::api
