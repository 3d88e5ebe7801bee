// `trainyard apply -f FILE`: makes the API's objects match a text-format
// trainyard.v1.ApplyBundle.
//
// Objects are applied in the bundle's field order (priority classes, flavors,
// clusters, pools, nodes, cohorts, tenants, projects, queues, role bindings)
// and, within a field, in file order. Each object is read; a missing one is
// created, one that differs (ignoring output-only fields) is replaced as a
// whole (Update with an empty mask), an equal one is left alone. Nodes go
// through ReportNodes, one call per cluster (never `complete`, so unlisted
// nodes stay). Pools have no Update: a pool that differs is an error. Role
// bindings are created; one that exists already is unchanged.
//
// Prints one line per object to stdout: "created queue
// tenants/demo/queues/default", "updated …" or "unchanged …".
#ifndef TRAINYARD_SERVICES_CMD_TRAINYARD_APPLY_H_
#define TRAINYARD_SERVICES_CMD_TRAINYARD_APPLY_H_

#include <string>

namespace trainyard {

// Applies `file` to the API server at `target` ("host:port", insecure channel),
// sending "authorization: Bearer <token>". Returns 0 on success; 2 when the
// file cannot be read or parsed or names an object malformedly ("FILE:LINE:COL:
// message" on stderr, nothing applied); 1 when an RPC fails (its code name and
// message on stderr; earlier objects stay applied).
int RunApply(const std::string& file, const std::string& target,
             const std::string& token);

}  // namespace trainyard

#endif  // TRAINYARD_SERVICES_CMD_TRAINYARD_APPLY_H_
