// A protobuf message's bytes, the same for equal messages: map fields sorted
// by key (SerializeAsString leaves their order to the map's hash table, which
// differs between two equal messages). For comparing or hashing messages by
// their bytes.
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_PROTO_BYTES_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_PROTO_BYTES_H_

#include <string>

#include "google/protobuf/message_lite.h"

namespace trainyard::runtime {

std::string DeterministicBytes(const google::protobuf::MessageLite& message);

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_PROTO_BYTES_H_
