// The API's gRPC services, each built on the ApiContext it serves from
// (server.cc registers them). Their handlers run on handler.h's path; the
// administrative kinds are ResourceKind descriptors (resource_handler.h) whose
// RPCs resource_methods.h binds.
#ifndef TRAINYARD_SERVICES_API_SERVICES_H_
#define TRAINYARD_SERVICES_API_SERVICES_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/service_type.h>

#include <memory>

#include "services/api/context.h"

namespace trainyard::api {

// JobService: submission (validated, rate-limited, idempotent,
// group-committed), reads, cancellation, the event Watch stream, checkpoints,
// and pending explanations. Submit uses gRPC's callback API: the request thread
// hands the job to the group-commit batcher and returns, and the committer
// finishes the RPC, so thousands of submits can wait for one fsync without
// holding a thread each. The other methods are synchronous. Every method runs
// on services/api/handler.h's path (authenticate, run, reply); none writes an
// audit row (a job's changes are recorded in its own history).
std::unique_ptr<grpc::Service> NewJobService(ApiContext* ctx);

// trainyard.v1.QueueService: tenants, projects, queues, cohorts and priority
// classes.
//
// Who may do what:
//   tenants         create/update/delete: platform-admin; get/list: the
//                   tenants the caller has a binding in (platform-admin: all);
//                   another tenant is NOT_FOUND.
//   projects        create/update/delete: tenant-admin of the tenant; read:
//                   viewer.
//   queues          create/update/delete: platform-admin (quotas grant
//                   capacity); read: viewer; parent "tenants/-" lists the
//                   queues of every tenant the caller sees.
//   cohorts, priority classes
//                   read: any authenticated caller; write: platform-admin.
//   GetQueueStatus  viewer. Reports jobs per state and `usage`: per flavor and
//                   resource, what the queue's ADMITTED, DISPATCHING and
//                   RUNNING jobs hold, its nominal quota and what is borrowed
//                   above it; `lent` (what others of its cohort tree use of
//                   its unused nominal) and `weighted_share` (its fair share,
//                   docs/scheduling.md) as the scheduler last published them
//                   (it writes changes at most every explanation interval).
//
// Every mutation writes an audit row (in its own transaction when it succeeds,
// separately when it is refused or fails) and invalidates the Directory cache.
std::unique_ptr<grpc::Service> NewQueueService(ApiContext* ctx);

// trainyard.v1.ClusterService: clusters, flavors, pools, nodes and the capacity
// summary.
//
// Reads need any authenticated caller; every write needs platform-admin and
// writes an audit row (in its own transaction when it succeeds, separately when
// it is refused or fails).
//
//   ReportNodes   upserts every node of the request (names under `parent`,
//                 pools that exist); with `complete` also deletes the
//                 cluster's nodes the request does not list. The writes are
//                 one transaction per node (ObjectStore has no batch write);
//                 the request is validated whole first, and the audit row
//                 commits with the last write.
//   SetNodeState  NODE_STATE_READY or NODE_STATE_DRAINING only; `reason`
//                 becomes the node's state_message and is in the audit row.
//   GetCapacity   per flavor, the sum over READY nodes of the pools offering
//                 it.
std::unique_ptr<grpc::Service> NewClusterService(ApiContext* ctx);

// trainyard.v1.AdminService: API tokens, role bindings, the audit log, WhoAmI.
//
//   CreateApiToken     principal "" = the caller. A token for another
//                      principal needs platform-admin, or tenant-admin in
//                      every tenant where that principal holds bindings (it
//                      must hold at least one, none of them platform-admin).
//                      ttl unset = 90 days, at most 365 days. The secret is
//                      returned once; only its hash is stored.
//   ListApiTokens      principal "" = the caller's; another principal, or "-"
//                      for all, needs platform-admin.
//   RevokeApiToken     own tokens, or platform-admin (others' tokens are
//                      NOT_FOUND to other callers). Takes effect at once on
//                      this replica.
//   CreateRoleBinding  platform-admin: any; tenant-admin: bindings in its
//                      tenants, never ROLE_PLATFORM_ADMIN.
//   ListRoleBindings   platform-admin: all; others: the bindings of the
//                      tenants they administer plus their own.
//   DeleteRoleBinding  same rights as CreateRoleBinding on the binding's
//                      tenant and role.
//   ListAuditLog       platform-admin: all (optionally one tenant);
//                      tenant-admin: `tenant` must be set to a tenant it
//                      administers.
//   WhoAmI             the caller and its bindings.
//
// Mutations write an audit row and, where roles or tokens change, flush the
// authentication cache of this replica.
std::unique_ptr<grpc::Service> NewAdminService(ApiContext* ctx);

}  // namespace trainyard::api

#endif  // TRAINYARD_SERVICES_API_SERVICES_H_
