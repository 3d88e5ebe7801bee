// The gRPC methods of an administrative kind, bound to resource_handler.h's
// generic CreateResource/GetResource/ListResources/UpdateResource/
// DeleteResource in one line per kind instead of one hand-written method per
// RPC. Used inside the body of a service class derived from ApiService
// (handler.h), in a .cc that includes resource_handler.h and defines the
// kind's ResourceKind:
//
//   class ClusterServiceImpl final : public ApiService<v1::ClusterService> {
//    public:
//     using ApiService::ApiService;
//     TY_RESOURCE_METHODS(Cluster, Clusters, cluster, clusters, kClusters,
//                         PageOnly)                   // all five
//     TY_CREATE_METHOD(Pool, pool, kPools)             // or verb by verb
//     TY_LIST_METHOD(Pools, pools, kPools, SelectPools)
//     ...
//
// `field` is the object's field in Create and Update requests (cluster,
// priority_class), `plural_field` the list field of the List response
// (clusters, priority_classes), `kind` the ResourceKind. `select` is the
// List's selection: a function (const ResourceKind<T>&, const Caller&, const
// List<Kinds>Request&) → absl::StatusOr<ListQuery>; PageOnly where the kind
// has no parent or filters.
#ifndef TRAINYARD_SERVICES_API_RESOURCE_METHODS_H_
#define TRAINYARD_SERVICES_API_RESOURCE_METHODS_H_

#define TY_CREATE_METHOD(Kind, field, kind)                                \
  TY_RPC(Create##Kind, ::trainyard::v1::Create##Kind##Request,             \
         ::trainyard::v1::Kind) {                                          \
    return CreateResource(ctx_, context, Method("Create" #Kind), *request, \
                          kind, ParentOf(*request), request->field##_id(), \
                          request->field(), response);                     \
  }

#define TY_GET_METHOD(Kind, kind)                                          \
  TY_RPC(Get##Kind, ::trainyard::v1::Get##Kind##Request,                   \
         ::trainyard::v1::Kind) {                                          \
    return GetResource(ctx_, context, Method("Get" #Kind), *request, kind, \
                       request->name(), response);                         \
  }

#define TY_LIST_METHOD(Kinds, plural_field, kind, select)                     \
  TY_RPC(List##Kinds, ::trainyard::v1::List##Kinds##Request,                  \
         ::trainyard::v1::List##Kinds##Response) {                            \
    return ListResources(                                                     \
        ctx_, context, Method("List" #Kinds), *request, kind,                 \
        [&](const Caller& caller) { return select(kind, caller, *request); }, \
        response->mutable_##plural_field(),                                   \
        response->mutable_next_page_token());                                 \
  }

#define TY_UPDATE_METHOD(Kind, field, kind)                                \
  TY_RPC(Update##Kind, ::trainyard::v1::Update##Kind##Request,             \
         ::trainyard::v1::Kind) {                                          \
    return UpdateResource(ctx_, context, Method("Update" #Kind), *request, \
                          kind, request->field(), request->update_mask(),  \
                          response);                                       \
  }

#define TY_DELETE_METHOD(Kind, kind)                                       \
  TY_RPC(Delete##Kind, ::trainyard::v1::Delete##Kind##Request,             \
         ::google::protobuf::Empty) {                                      \
    return DeleteResource(ctx_, context, Method("Delete" #Kind), *request, \
                          kind, request->name());                          \
  }

#define TY_RESOURCE_METHODS(Kind, Kinds, field, plural_field, kind, select) \
  TY_CREATE_METHOD(Kind, field, kind)                                       \
  TY_GET_METHOD(Kind, kind)                                                 \
  TY_LIST_METHOD(Kinds, plural_field, kind, select)                         \
  TY_UPDATE_METHOD(Kind, field, kind)                                       \
  TY_DELETE_METHOD(Kind, kind)

#endif  // TRAINYARD_SERVICES_API_RESOURCE_METHODS_H_
