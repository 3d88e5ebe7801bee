// Where the dispatcher's Kubernetes client finds its API server and
// credentials: a kubeconfig file (as kubectl reads it) or the pod's service
// account (in-cluster). See docs/kubernetes.md.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_CONFIG_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_CONFIG_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard::dispatcher::kubernetes {

inline constexpr char kServiceAccountDir[] =
    "/var/run/secrets/kubernetes.io/serviceaccount";

// An API server and how to authenticate to it. Files named by the kubeconfig
// (certificate-authority, client-certificate, client-key) are read when the
// configuration is loaded; a token file is re-read whenever it changes
// (BearerToken).
struct KubeConfig {
  // "https://host:port" (no trailing slash).
  std::string server;
  // PEM bundle the server's certificate is verified against; empty: the
  // system's trust store.
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  // The name the server's certificate must carry when it differs from the
  // server's host.
  std::string tls_server_name;
  // Bearer token given inline.
  std::string token;
  // File holding the bearer token (tokenFile, the service account's projected
  // token). When set it wins over `token`, as in client-go.
  std::string token_file;
  // Client certificate and key (PEM), for x509 authentication.
  std::string client_cert_pem;
  std::string client_key_pem;
  // The context's namespace ("" when the context names none).
  std::string default_namespace;
  // The context used ("" in-cluster) and where the configuration came from
  // (the kubeconfig's path, or "in-cluster <dir>"), for messages.
  std::string context;
  std::string source;
};

// Reads a kubeconfig file. `context` "" means the file's current-context.
// Errors name the file and what is wrong: FAILED_PRECONDITION for a file that
// cannot be read (the kubeconfig or one it names) and for credential plugins
// (exec, auth-provider), which are not supported; INVALID_ARGUMENT for text
// that is not a kubeconfig (not YAML, an unknown context, a context whose
// cluster or user is missing, a cluster without server, bad base64).
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path,
                                          const std::string& context = "");

// The configuration of a pod's service account: the server from
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the token file
// `root`/token (re-read when it changes: projected tokens rotate), the CA
// `root`/ca.crt and the namespace `root`/namespace. FAILED_PRECONDITION when
// not in a cluster (variables unset) or a file cannot be read.
absl::StatusOr<KubeConfig> InClusterConfig(
    const std::string& root = kServiceAccountDir);

// The bearer token of a KubeConfig: the inline token, or the token file's
// content, re-read when the file's modification time or size changes (a
// rotated projected token is picked up on the next request). Thread-safe.
class BearerToken {
 public:
  explicit BearerToken(const KubeConfig& config);

  // "" when the configuration has no token. A token file that cannot be read
  // any more keeps the last token read (the file is being replaced); one that
  // was never read is FAILED_PRECONDITION.
  absl::StatusOr<std::string> Get();

 private:
  const std::string inline_token_;
  const std::string file_;
  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  bool read_ ABSL_GUARDED_BY(mu_) = false;
  int64_t mtime_ns_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t size_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace trainyard::dispatcher::kubernetes

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_CONFIG_H_
