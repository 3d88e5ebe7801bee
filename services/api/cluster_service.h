// trainyard.v1.ClusterService: clusters, flavors, pools, nodes and the capacity
// summary.
//
// Reads need any authenticated caller; every write needs platform-admin and
// writes an audit row (in its own transaction when it succeeds, separately when
// it is refused or fails).
//
//   ReportNodes    upserts every node of the request (names under `parent`,
//   pools that exist);
//                  with `complete` also deletes the cluster's nodes the request
//                  does not list. The writes are one transaction per node
//                  (ObjectStore has no batch write); the request is validated
//                  whole first, and the audit row commits with the last write.
//   SetNodeState   NODE_STATE_READY or NODE_STATE_DRAINING only; `reason`
//   becomes the node's
//                  state_message and is in the audit row.
//   GetCapacity    per flavor, the sum over READY nodes of the pools offering
//   it.
#ifndef TRAINYARD_SERVICES_API_CLUSTER_SERVICE_H_
#define TRAINYARD_SERVICES_API_CLUSTER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "services/api/context.h"
#include "trainyard/v1/cluster.grpc.pb.h"

namespace trainyard::api {

class ClusterServiceImpl final : public trainyard::v1::ClusterService::Service {
 public:
  explicit ClusterServiceImpl(ApiContext* ctx) : ctx_(ctx) {}

  grpc::Status CreateCluster(grpc::ServerContext* context,
                             const trainyard::v1::CreateClusterRequest* request,
                             trainyard::v1::Cluster* response) override;
  grpc::Status GetCluster(grpc::ServerContext* context,
                          const trainyard::v1::GetClusterRequest* request,
                          trainyard::v1::Cluster* response) override;
  grpc::Status ListClusters(
      grpc::ServerContext* context,
      const trainyard::v1::ListClustersRequest* request,
      trainyard::v1::ListClustersResponse* response) override;
  grpc::Status UpdateCluster(grpc::ServerContext* context,
                             const trainyard::v1::UpdateClusterRequest* request,
                             trainyard::v1::Cluster* response) override;
  grpc::Status DeleteCluster(grpc::ServerContext* context,
                             const trainyard::v1::DeleteClusterRequest* request,
                             google::protobuf::Empty* response) override;

  grpc::Status CreateFlavor(grpc::ServerContext* context,
                            const trainyard::v1::CreateFlavorRequest* request,
                            trainyard::v1::Flavor* response) override;
  grpc::Status GetFlavor(grpc::ServerContext* context,
                         const trainyard::v1::GetFlavorRequest* request,
                         trainyard::v1::Flavor* response) override;
  grpc::Status ListFlavors(
      grpc::ServerContext* context,
      const trainyard::v1::ListFlavorsRequest* request,
      trainyard::v1::ListFlavorsResponse* response) override;
  grpc::Status UpdateFlavor(grpc::ServerContext* context,
                            const trainyard::v1::UpdateFlavorRequest* request,
                            trainyard::v1::Flavor* response) override;
  grpc::Status DeleteFlavor(grpc::ServerContext* context,
                            const trainyard::v1::DeleteFlavorRequest* request,
                            google::protobuf::Empty* response) override;

  grpc::Status CreatePool(grpc::ServerContext* context,
                          const trainyard::v1::CreatePoolRequest* request,
                          trainyard::v1::Pool* response) override;
  grpc::Status ListPools(grpc::ServerContext* context,
                         const trainyard::v1::ListPoolsRequest* request,
                         trainyard::v1::ListPoolsResponse* response) override;
  grpc::Status DeletePool(grpc::ServerContext* context,
                          const trainyard::v1::DeletePoolRequest* request,
                          google::protobuf::Empty* response) override;

  grpc::Status GetNode(grpc::ServerContext* context,
                       const trainyard::v1::GetNodeRequest* request,
                       trainyard::v1::Node* response) override;
  grpc::Status ListNodes(grpc::ServerContext* context,
                         const trainyard::v1::ListNodesRequest* request,
                         trainyard::v1::ListNodesResponse* response) override;
  grpc::Status ReportNodes(
      grpc::ServerContext* context,
      const trainyard::v1::ReportNodesRequest* request,
      trainyard::v1::ReportNodesResponse* response) override;
  grpc::Status SetNodeState(grpc::ServerContext* context,
                            const trainyard::v1::SetNodeStateRequest* request,
                            trainyard::v1::Node* response) override;

  grpc::Status GetCapacity(grpc::ServerContext* context,
                           const trainyard::v1::GetCapacityRequest* request,
                           trainyard::v1::CapacitySummary* response) override;

 private:
  ApiContext* ctx_;
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_CLUSTER_SERVICE_H_
