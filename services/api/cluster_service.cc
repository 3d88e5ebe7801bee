#include "services/api/cluster_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "services/api/resource_util.h"
#include "services/core/errors.h"
#include "services/core/names.h"
#include "services/core/string_view.h"
#include "services/core/validation.h"

namespace trainyard::api {
namespace {

namespace pg = storage::postgres;
namespace v1 = trainyard::v1;

using Key = std::vector<std::string>;

std::string Method(std::string_view rpc) {
  return core::Cat("/trainyard.v1.ClusterService/", rpc);
}

const UpdatableFields& ClusterFields() {
  static const auto* fields =
      new UpdatableFields{{"display_name", "backend", "slurm", "kubernetes",
                           "sim", "labels", "cordoned"}};
  return *fields;
}
const UpdatableFields& FlavorFields() {
  static const auto* fields = new UpdatableFields{
      {"kind", "gpu_model", "gpu_hour_price", "cpu_hour_price",
       "memory_gib_hour_price", "reclaim_rate_per_hour"}};
  return *fields;
}

std::string ClusterNameOf(const Key& key) { return core::ClusterName(key[0]); }
std::string FlavorNameOf(const Key& key) { return core::FlavorName(key[0]); }
std::string PoolNameOf(const Key& key) {
  return core::PoolName(key[0], key[1]);
}
std::string NodeNameOf(const Key& key) {
  return core::NodeName(key[0], key[1]);
}

absl::Status CheckClusterExists(pg::ObjectStore* objects,
                                const std::string& cluster) {
  return CheckExists(objects, pg::ClusterKind(), {cluster}, "parent",
                     reason::kUnknownCluster, "cluster");
}

}  // namespace

void ClusterServiceImpl::Invalidate() {
  if (ctx_->directory != nullptr) ctx_->directory->Invalidate();
}

// --- Clusters ---

grpc::Status ClusterServiceImpl::CreateCluster(
    grpc::ServerContext* context, const v1::CreateClusterRequest* request,
    v1::Cluster* response) {
  const std::string& id = request->cluster_id();
  const std::string name = core::ClusterName(id);
  return RunMutation(
      ctx_, context, Method("CreateCluster"), *request, name,
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "create clusters"));
        TY_RETURN_IF_ERROR(CheckNewId("cluster_id", id));
        v1::Cluster cluster = request->cluster();
        // Output only: reported by the cluster's dispatcher.
        cluster.clear_health();
        cluster.clear_health_message();
        cluster.clear_heartbeat_time();
        TY_RETURN_IF_ERROR(core::PrefixField(
            core::ValidateCluster(cluster, ctx_->limits), "cluster"));
        absl::StatusOr<v1::Cluster> created = CreateObject(
            ctx_->objects, pg::ClusterKind(), {id}, name, cluster, audit);
        if (!created.ok()) return created.status();
        *response = *std::move(created);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::GetCluster(
    grpc::ServerContext* context, const v1::GetClusterRequest* request,
    v1::Cluster* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::string> id =
        core::ParseClusterName(request->name(), "name");
    if (!id.ok()) return id.status();
    absl::StatusOr<v1::Cluster> cluster = GetObject<v1::Cluster>(
        ctx_->objects, pg::ClusterKind(), {*id}, core::ClusterName(*id));
    if (!cluster.ok()) return cluster.status();
    *response = *std::move(cluster);
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::ListClusters(
    grpc::ServerContext* context, const v1::ListClustersRequest* request,
    v1::ListClustersResponse* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 1);
    if (!query.ok()) return query.status();
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::ClusterKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &ClusterNameOf, response->mutable_clusters()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::UpdateCluster(
    grpc::ServerContext* context, const v1::UpdateClusterRequest* request,
    v1::Cluster* response) {
  const v1::Cluster& patch = request->cluster();
  return RunMutation(
      ctx_, context, Method("UpdateCluster"), *request, patch.name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseClusterName(patch.name(), "cluster.name");
        if (!id.ok()) return id.status();
        const std::string name = core::ClusterName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "update clusters"));
        absl::StatusOr<v1::Cluster> cluster = UpdateObject<v1::Cluster>(
            ctx_->objects, pg::ClusterKind(), {*id}, name, patch,
            request->update_mask(), ClusterFields(),
            [&](const v1::Cluster& merged) {
              return core::PrefixField(
                  core::ValidateCluster(merged, ctx_->limits), "cluster");
            },
            audit);
        if (!cluster.ok()) return cluster.status();
        *response = *std::move(cluster);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::DeleteCluster(
    grpc::ServerContext* context, const v1::DeleteClusterRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeleteCluster"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseClusterName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::ClusterName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "delete clusters"));
        // Its pools and nodes go with it (ON DELETE CASCADE).
        TY_RETURN_IF_ERROR(
            DeleteObject(ctx_->objects, pg::ClusterKind(), {*id}, name, audit));
        Invalidate();
        return absl::OkStatus();
      });
}

// --- Flavors ---

grpc::Status ClusterServiceImpl::CreateFlavor(
    grpc::ServerContext* context, const v1::CreateFlavorRequest* request,
    v1::Flavor* response) {
  const std::string& id = request->flavor_id();
  const std::string name = core::FlavorName(id);
  return RunMutation(
      ctx_, context, Method("CreateFlavor"), *request, name,
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "create flavors"));
        TY_RETURN_IF_ERROR(CheckNewId("flavor_id", id));
        TY_RETURN_IF_ERROR(core::PrefixField(
            core::ValidateFlavor(request->flavor()), "flavor"));
        absl::StatusOr<v1::Flavor> created =
            CreateObject(ctx_->objects, pg::FlavorKind(), {id}, name,
                         request->flavor(), audit);
        if (!created.ok()) return created.status();
        *response = *std::move(created);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::GetFlavor(grpc::ServerContext* context,
                                           const v1::GetFlavorRequest* request,
                                           v1::Flavor* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::string> id =
        core::ParseFlavorName(request->name(), "name");
    if (!id.ok()) return id.status();
    absl::StatusOr<v1::Flavor> flavor = GetObject<v1::Flavor>(
        ctx_->objects, pg::FlavorKind(), {*id}, core::FlavorName(*id));
    if (!flavor.ok()) return flavor.status();
    *response = *std::move(flavor);
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::ListFlavors(
    grpc::ServerContext* context, const v1::ListFlavorsRequest* request,
    v1::ListFlavorsResponse* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 1);
    if (!query.ok()) return query.status();
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::FlavorKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &FlavorNameOf, response->mutable_flavors()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::UpdateFlavor(
    grpc::ServerContext* context, const v1::UpdateFlavorRequest* request,
    v1::Flavor* response) {
  const v1::Flavor& patch = request->flavor();
  return RunMutation(
      ctx_, context, Method("UpdateFlavor"), *request, patch.name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseFlavorName(patch.name(), "flavor.name");
        if (!id.ok()) return id.status();
        const std::string name = core::FlavorName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "update flavors"));
        absl::StatusOr<v1::Flavor> flavor = UpdateObject<v1::Flavor>(
            ctx_->objects, pg::FlavorKind(), {*id}, name, patch,
            request->update_mask(), FlavorFields(),
            [](const v1::Flavor& merged) {
              return core::PrefixField(core::ValidateFlavor(merged), "flavor");
            },
            audit);
        if (!flavor.ok()) return flavor.status();
        *response = *std::move(flavor);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::DeleteFlavor(
    grpc::ServerContext* context, const v1::DeleteFlavorRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeleteFlavor"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> id =
            core::ParseFlavorName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::FlavorName(*id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "delete flavors"));
        TY_RETURN_IF_ERROR(DeleteObject(
            ctx_->objects, pg::FlavorKind(), {*id}, name, audit,
            {{"pools_flavor_fkey", "", reason::kInUse,
              core::Cat("flavor ", *id, " is used by a pool")},
             {"queue_flavors_flavor_fkey", "", reason::kInUse,
              core::Cat("flavor ", *id, " is used by a queue's quotas")}}));
        Invalidate();
        return absl::OkStatus();
      });
}

// --- Pools ---

grpc::Status ClusterServiceImpl::CreatePool(
    grpc::ServerContext* context, const v1::CreatePoolRequest* request,
    v1::Pool* response) {
  return RunMutation(
      ctx_, context, Method("CreatePool"), *request,
      core::Cat(request->parent(), "/pools/", request->pool_id()),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> cluster =
            core::ParseClusterName(request->parent(), "parent");
        if (!cluster.ok()) return cluster.status();
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "create pools"));
        TY_RETURN_IF_ERROR(CheckNewId("pool_id", request->pool_id()));
        const std::string name = core::PoolName(*cluster, request->pool_id());
        audit.record.resource = name;
        const v1::Pool& pool = request->pool();
        TY_RETURN_IF_ERROR(
            core::PrefixField(core::ValidatePool(pool, ctx_->limits), "pool"));
        TY_RETURN_IF_ERROR(CheckClusterExists(ctx_->objects, *cluster));
        TY_RETURN_IF_ERROR(CheckExists(ctx_->objects, pg::FlavorKind(),
                                       {pool.flavor()}, "pool.flavor",
                                       reason::kUnknownFlavor, "flavor"));
        absl::StatusOr<v1::Pool> created = CreateObject(
            ctx_->objects, pg::PoolKind(), {*cluster, request->pool_id()}, name,
            pool, audit,
            {{"pools_cluster_fkey", "parent", reason::kUnknownCluster,
              core::Cat("cluster ", Quoted(*cluster), " does not exist")},
             {"pools_flavor_fkey", "pool.flavor", reason::kUnknownFlavor,
              core::Cat("flavor ", Quoted(pool.flavor()), " does not exist")}});
        if (!created.ok()) return created.status();
        *response = *std::move(created);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::ListPools(grpc::ServerContext* context,
                                           const v1::ListPoolsRequest* request,
                                           v1::ListPoolsResponse* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::string> cluster =
        core::ParseClusterParent(request->parent(), "parent");
    if (!cluster.ok()) return cluster.status();
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 2);
    if (!query.ok()) return query.status();
    if (*cluster != core::kAllId) {
      query->equals.emplace_back("cluster", *cluster);
    }
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::PoolKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &PoolNameOf, response->mutable_pools()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::DeletePool(
    grpc::ServerContext* context, const v1::DeletePoolRequest* request,
    google::protobuf::Empty*) {
  return RunMutation(
      ctx_, context, Method("DeletePool"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<core::ClusterChildName> id =
            core::ParsePoolName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::PoolName(id->cluster, id->id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "delete pools"));
        TY_RETURN_IF_ERROR(DeleteObject(
            ctx_->objects, pg::PoolKind(), {id->cluster, id->id}, name, audit,
            {{"nodes_cluster_pool_fkey", "", reason::kInUse,
              core::Cat("pool ", id->id, " still has nodes")}}));
        Invalidate();
        return absl::OkStatus();
      });
}

// --- Nodes ---

grpc::Status ClusterServiceImpl::GetNode(grpc::ServerContext* context,
                                         const v1::GetNodeRequest* request,
                                         v1::Node* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<core::ClusterChildName> id =
        core::ParseNodeName(request->name(), "name");
    if (!id.ok()) return id.status();
    absl::StatusOr<v1::Node> node = GetObject<v1::Node>(
        ctx_->objects, pg::NodeKind(), {id->cluster, id->id},
        core::NodeName(id->cluster, id->id));
    if (!node.ok()) return node.status();
    *response = *std::move(node);
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::ListNodes(grpc::ServerContext* context,
                                           const v1::ListNodesRequest* request,
                                           v1::ListNodesResponse* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::string> cluster =
        core::ParseClusterParent(request->parent(), "parent");
    if (!cluster.ok()) return cluster.status();
    if (!request->pool().empty()) {
      TY_RETURN_IF_ERROR(CheckNewId("pool", request->pool()));
    }
    if (!v1::NodeState_IsValid(request->state())) {
      return core::FieldError(
          "state", core::reason::kInvalidValue,
          core::Cat("unknown value ", static_cast<int>(request->state())));
    }
    absl::StatusOr<pg::ListQuery> query =
        PageQuery(request->page_size(), request->page_token(), 2);
    if (!query.ok()) return query.status();
    if (*cluster != core::kAllId) {
      query->equals.emplace_back("cluster", *cluster);
    }
    if (!request->pool().empty()) {
      query->equals.emplace_back("pool", request->pool());
    }
    if (request->state() != v1::NODE_STATE_UNSPECIFIED) {
      query->equals.emplace_back("state",
                                 core::Cat(static_cast<int>(request->state())));
    }
    absl::StatusOr<pg::ListPage> page =
        ctx_->objects->List(pg::NodeKind(), *query);
    if (!page.ok()) return page.status();
    TY_RETURN_IF_ERROR(
        DecodePage(*page, &NodeNameOf, response->mutable_nodes()));
    response->set_next_page_token(NextPageToken(*page));
    return absl::OkStatus();
  });
}

grpc::Status ClusterServiceImpl::ReportNodes(
    grpc::ServerContext* context, const v1::ReportNodesRequest* request,
    v1::ReportNodesResponse* response) {
  return RunMutation(
      ctx_, context, Method("ReportNodes"), *request, request->parent(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<std::string> cluster =
            core::ParseClusterName(request->parent(), "parent");
        if (!cluster.ok()) return cluster.status();
        audit.record.resource = core::ClusterName(*cluster);
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "report nodes"));

        // Validate the whole report before writing anything.
        struct Write {
          std::string id;
          int index;
        };
        std::vector<Write> writes;
        absl::flat_hash_set<std::string> listed;
        absl::flat_hash_map<std::string, int>
            pools;  // pool id → first node index naming it
        for (int i = 0; i < request->nodes_size(); ++i) {
          const v1::Node& node = request->nodes(i);
          const std::string at = core::IndexField("nodes", i);
          absl::StatusOr<core::ClusterChildName> id =
              core::ParseNodeName(node.name(), core::JoinField(at, "name"));
          if (!id.ok()) return id.status();
          if (id->cluster != *cluster) {
            return core::FieldError(
                core::JoinField(at, "name"), core::reason::kInconsistent,
                core::Cat("node ", node.name(), " is not under parent ",
                          request->parent()));
          }
          if (!listed.insert(id->id).second) {
            return core::FieldError(
                core::JoinField(at, "name"), core::reason::kDuplicate,
                core::Cat("node ", node.name(), " is listed twice"));
          }
          TY_RETURN_IF_ERROR(
              core::PrefixField(core::ValidateNode(node, ctx_->limits), at));
          pools.emplace(node.pool(), i);
          writes.push_back(Write{id->id, i});
        }
        TY_RETURN_IF_ERROR(CheckClusterExists(ctx_->objects, *cluster));
        for (const auto& [pool, index] : pools) {
          TY_RETURN_IF_ERROR(CheckExists(
              ctx_->objects, pg::PoolKind(), {*cluster, pool},
              core::JoinField(core::IndexField("nodes", index), "pool"),
              reason::kUnknownPool, "pool"));
        }
        std::vector<std::string> removals;
        if (request->complete()) {
          pg::ListQuery query;
          query.equals.emplace_back("cluster", *cluster);
          absl::StatusOr<std::vector<pg::StoredObject>> existing =
              ListAll(ctx_->objects, pg::NodeKind(), query);
          if (!existing.ok()) return existing.status();
          for (const pg::StoredObject& row : *existing) {
            if (!listed.contains(row.key[1])) removals.push_back(row.key[1]);
          }
        }

        // One write per node; the audit row commits with the last one.
        const size_t total = writes.size() + removals.size();
        size_t done = 0;
        auto audit_if_last = [&]() -> const pg::AuditRecord* {
          return ++done == total ? &audit.record : nullptr;
        };
        int upserted = 0;
        int removed = 0;
        for (const Write& w : writes) {
          v1::Node node = request->nodes(w.index);
          ClearServerFields(&node);
          const pg::AuditRecord* node_audit = audit_if_last();
          absl::StatusOr<pg::StoredObject> row = ctx_->objects->Upsert(
              pg::NodeKind(), {*cluster, w.id}, ExtraColumns(node),
              node.SerializeAsString(), node_audit);
          if (!row.ok()) {
            if (upserted > 0) Invalidate();
            const std::string pool_field =
                core::JoinField(core::IndexField("nodes", w.index), "pool");
            return ExplainStorageError(
                row.status(), core::NodeName(*cluster, w.id),
                {{"nodes_cluster_pool_fkey", pool_field, reason::kUnknownPool,
                  core::Cat("pool ", Quoted(node.pool()), " of cluster ",
                            *cluster, " does not exist")},
                 {"nodes_cluster_fkey", "parent", reason::kUnknownCluster,
                  core::Cat("cluster ", Quoted(*cluster), " does not exist")}});
          }
          if (node_audit != nullptr) audit.committed = true;
          ++upserted;
        }
        for (const std::string& id : removals) {
          const pg::AuditRecord* node_audit = audit_if_last();
          absl::Status s =
              ctx_->objects->Delete(pg::NodeKind(), {*cluster, id}, node_audit);
          // A node removed meanwhile is not an error; the audit row is then
          // written below.
          if (absl::IsNotFound(s)) continue;
          if (!s.ok()) {
            Invalidate();
            return s;
          }
          if (node_audit != nullptr) audit.committed = true;
          ++removed;
        }
        if (!audit.committed) {
          // Nothing to write, or the last removal found its node gone: record
          // the call anyway.
          TY_RETURN_IF_ERROR(ctx_->auth_store->WriteAudit(audit.record));
          audit.committed = true;
        }
        response->set_upserted(upserted);
        response->set_removed(removed);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::SetNodeState(
    grpc::ServerContext* context, const v1::SetNodeStateRequest* request,
    v1::Node* response) {
  return RunMutation(
      ctx_, context, Method("SetNodeState"), *request, request->name(),
      [&](const Caller& caller, MutationAudit& audit) -> absl::Status {
        absl::StatusOr<core::ClusterChildName> id =
            core::ParseNodeName(request->name(), "name");
        if (!id.ok()) return id.status();
        const std::string name = core::NodeName(id->cluster, id->id);
        audit.record.resource = name;
        TY_RETURN_IF_ERROR(RequirePlatformAdmin(caller, "set node states"));
        if (request->state() != v1::NODE_STATE_READY &&
            request->state() != v1::NODE_STATE_DRAINING) {
          return core::FieldError(
              "state", core::reason::kInvalidValue,
              "must be NODE_STATE_READY or NODE_STATE_DRAINING");
        }
        if (request->reason().size() > core::kMaxDescriptionChars) {
          return core::FieldError(
              "reason", core::reason::kTooLarge,
              core::Cat("must be at most ", core::kMaxDescriptionChars,
                        " bytes, got ", request->reason().size()));
        }
        absl::StatusOr<pg::StoredObject> row = ctx_->objects->Update(
            pg::NodeKind(), {id->cluster, id->id}, /*expected_version=*/0,
            [&](const pg::StoredObject& current)
                -> absl::StatusOr<pg::ObjectStore::Mutation> {
              v1::Node node;
              if (!node.ParseFromString(current.body)) {
                return absl::InternalError(StoredBodyError(name));
              }
              node.set_state(request->state());
              node.set_state_message(request->reason());
              return pg::ObjectStore::Mutation{node.SerializeAsString(),
                                               ExtraColumns(node)};
            },
            &audit.record);
        if (!row.ok()) return ExplainStorageError(row.status(), name);
        audit.committed = true;
        absl::StatusOr<v1::Node> node = Decode<v1::Node>(*row, name);
        if (!node.ok()) return node.status();
        *response = *std::move(node);
        Invalidate();
        return absl::OkStatus();
      });
}

grpc::Status ClusterServiceImpl::GetCapacity(grpc::ServerContext* context,
                                             const v1::GetCapacityRequest*,
                                             v1::CapacitySummary* response) {
  return RunRead(ctx_, context, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::vector<pg::StoredObject>> flavor_rows =
        ListAll(ctx_->objects, pg::FlavorKind(), {});
    if (!flavor_rows.ok()) return flavor_rows.status();
    std::vector<v1::Flavor> flavors;
    for (const pg::StoredObject& row : *flavor_rows) {
      absl::StatusOr<v1::Flavor> flavor =
          Decode<v1::Flavor>(row, FlavorNameOf(row.key));
      if (!flavor.ok()) return flavor.status();
      flavors.push_back(*std::move(flavor));
    }
    absl::StatusOr<std::vector<pg::StoredObject>> pool_rows =
        ListAll(ctx_->objects, pg::PoolKind(), {});
    if (!pool_rows.ok()) return pool_rows.status();
    std::vector<std::pair<std::string, std::string>> pool_flavor;
    for (const pg::StoredObject& row : *pool_rows) {
      absl::StatusOr<v1::Pool> pool =
          Decode<v1::Pool>(row, PoolNameOf(row.key));
      if (!pool.ok()) return pool.status();
      pool_flavor.emplace_back(core::Cat(row.key[0], "/", row.key[1]),
                               pool->flavor());
    }
    pg::ListQuery ready;
    ready.equals.emplace_back(
        "state", core::Cat(static_cast<int>(v1::NODE_STATE_READY)));
    absl::StatusOr<std::vector<pg::StoredObject>> node_rows =
        ListAll(ctx_->objects, pg::NodeKind(), ready);
    if (!node_rows.ok()) return node_rows.status();
    std::vector<v1::Node> nodes;
    for (const pg::StoredObject& row : *node_rows) {
      absl::StatusOr<v1::Node> node =
          Decode<v1::Node>(row, NodeNameOf(row.key));
      if (!node.ok()) return node.status();
      nodes.push_back(*std::move(node));
    }
    *response = SumReadyCapacity(flavors, pool_flavor, nodes);
    return absl::OkStatus();
  });
}

}  // namespace trainyard::api
