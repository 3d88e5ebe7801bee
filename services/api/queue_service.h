// trainyard.v1.QueueService: tenants, projects, queues, cohorts and priority
// classes.
//
// Who may do what:
//   tenants           create/update/delete: platform-admin; get/list: tenants
//   the caller has a
//                     binding in (platform-admin: all); another tenant is
//                     NOT_FOUND.
//   projects          create/update/delete: tenant-admin of the tenant; read:
//   viewer. queues            create/update/delete: platform-admin (quotas
//   grant capacity); read:
//                     viewer; parent "tenants/-" lists the queues of every
//                     tenant the caller sees.
//   cohorts, priority classes
//                     read: any authenticated caller; write: platform-admin.
//   GetQueueStatus    viewer. Reports jobs per state and `usage`: per flavor
//                     and resource, what the queue's ADMITTED, DISPATCHING and
//                     RUNNING jobs hold, its nominal quota and what is
//                     borrowed above it. `weighted_share` stays 0 (it depends
//                     on the whole cohort; the scheduler does not publish it).
//
// Every mutation writes an audit row (in its own transaction when it succeeds,
// separately when it is refused or fails) and invalidates the Directory cache.
#ifndef TRAINYARD_SERVICES_API_QUEUE_SERVICE_H_
#define TRAINYARD_SERVICES_API_QUEUE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "services/api/context.h"
#include "trainyard/v1/queue.grpc.pb.h"

namespace trainyard::api {

class QueueServiceImpl final : public trainyard::v1::QueueService::Service {
 public:
  explicit QueueServiceImpl(ApiContext* ctx) : ctx_(ctx) {}

  grpc::Status CreateTenant(grpc::ServerContext* context,
                            const trainyard::v1::CreateTenantRequest* request,
                            trainyard::v1::Tenant* response) override;
  grpc::Status GetTenant(grpc::ServerContext* context,
                         const trainyard::v1::GetTenantRequest* request,
                         trainyard::v1::Tenant* response) override;
  grpc::Status ListTenants(
      grpc::ServerContext* context,
      const trainyard::v1::ListTenantsRequest* request,
      trainyard::v1::ListTenantsResponse* response) override;
  grpc::Status UpdateTenant(grpc::ServerContext* context,
                            const trainyard::v1::UpdateTenantRequest* request,
                            trainyard::v1::Tenant* response) override;
  grpc::Status DeleteTenant(grpc::ServerContext* context,
                            const trainyard::v1::DeleteTenantRequest* request,
                            google::protobuf::Empty* response) override;

  grpc::Status CreateProject(grpc::ServerContext* context,
                             const trainyard::v1::CreateProjectRequest* request,
                             trainyard::v1::Project* response) override;
  grpc::Status GetProject(grpc::ServerContext* context,
                          const trainyard::v1::GetProjectRequest* request,
                          trainyard::v1::Project* response) override;
  grpc::Status ListProjects(
      grpc::ServerContext* context,
      const trainyard::v1::ListProjectsRequest* request,
      trainyard::v1::ListProjectsResponse* response) override;
  grpc::Status UpdateProject(grpc::ServerContext* context,
                             const trainyard::v1::UpdateProjectRequest* request,
                             trainyard::v1::Project* response) override;
  grpc::Status DeleteProject(grpc::ServerContext* context,
                             const trainyard::v1::DeleteProjectRequest* request,
                             google::protobuf::Empty* response) override;

  grpc::Status CreateQueue(grpc::ServerContext* context,
                           const trainyard::v1::CreateQueueRequest* request,
                           trainyard::v1::Queue* response) override;
  grpc::Status GetQueue(grpc::ServerContext* context,
                        const trainyard::v1::GetQueueRequest* request,
                        trainyard::v1::Queue* response) override;
  grpc::Status ListQueues(grpc::ServerContext* context,
                          const trainyard::v1::ListQueuesRequest* request,
                          trainyard::v1::ListQueuesResponse* response) override;
  grpc::Status UpdateQueue(grpc::ServerContext* context,
                           const trainyard::v1::UpdateQueueRequest* request,
                           trainyard::v1::Queue* response) override;
  grpc::Status DeleteQueue(grpc::ServerContext* context,
                           const trainyard::v1::DeleteQueueRequest* request,
                           google::protobuf::Empty* response) override;
  grpc::Status GetQueueStatus(
      grpc::ServerContext* context,
      const trainyard::v1::GetQueueStatusRequest* request,
      trainyard::v1::QueueStatus* response) override;

  grpc::Status CreateCohort(grpc::ServerContext* context,
                            const trainyard::v1::CreateCohortRequest* request,
                            trainyard::v1::Cohort* response) override;
  grpc::Status GetCohort(grpc::ServerContext* context,
                         const trainyard::v1::GetCohortRequest* request,
                         trainyard::v1::Cohort* response) override;
  grpc::Status ListCohorts(
      grpc::ServerContext* context,
      const trainyard::v1::ListCohortsRequest* request,
      trainyard::v1::ListCohortsResponse* response) override;
  grpc::Status UpdateCohort(grpc::ServerContext* context,
                            const trainyard::v1::UpdateCohortRequest* request,
                            trainyard::v1::Cohort* response) override;
  grpc::Status DeleteCohort(grpc::ServerContext* context,
                            const trainyard::v1::DeleteCohortRequest* request,
                            google::protobuf::Empty* response) override;

  grpc::Status CreatePriorityClass(
      grpc::ServerContext* context,
      const trainyard::v1::CreatePriorityClassRequest* request,
      trainyard::v1::PriorityClass* response) override;
  grpc::Status GetPriorityClass(
      grpc::ServerContext* context,
      const trainyard::v1::GetPriorityClassRequest* request,
      trainyard::v1::PriorityClass* response) override;
  grpc::Status ListPriorityClasses(
      grpc::ServerContext* context,
      const trainyard::v1::ListPriorityClassesRequest* request,
      trainyard::v1::ListPriorityClassesResponse* response) override;
  grpc::Status UpdatePriorityClass(
      grpc::ServerContext* context,
      const trainyard::v1::UpdatePriorityClassRequest* request,
      trainyard::v1::PriorityClass* response) override;
  grpc::Status DeletePriorityClass(
      grpc::ServerContext* context,
      const trainyard::v1::DeletePriorityClassRequest* request,
      google::protobuf::Empty* response) override;

 private:
  ApiContext* ctx_;
};

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_QUEUE_SERVICE_H_
