#include "services/dispatcher/adapters/kubernetes/kube_config.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "services/lib/domain/status_macros.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::dispatcher::kubernetes {

using ::trainyard::domain::AbslView;
using ::trainyard::domain::Cat;

namespace {

// The whole file, or FAILED_PRECONDITION naming it and the system's reason.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        Cat(what, " ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) {
    return absl::FailedPreconditionError(
        Cat(what, " ", path, ": cannot read: ", std::strerror(errno)));
  }
  return out.str();
}

// Reads kubeconfig entries, every error prefixed with the file's name.
class KubeconfigReader {
 public:
  KubeconfigReader(std::string path, YAML::Node root)
      : path_(std::move(path)),
        dir_(std::filesystem::path(path_).parent_path().string()),
        root_(std::move(root)) {}

  absl::StatusOr<KubeConfig> Read(const std::string& wanted_context) {
    if (!root_.IsMap()) {
      return Invalid("not a kubeconfig (the top level is not a mapping)");
    }
    std::string context_name = wanted_context;
    if (context_name.empty()) {
      TY_ASSIGN_OR_RETURN(context_name, Scalar(root_, "current-context", ""));
      if (context_name.empty()) {
        return Invalid("no context given and the file has no current-context");
      }
    }
    TY_ASSIGN_OR_RETURN(YAML::Node context,
                        Named("contexts", "context", context_name));
    TY_ASSIGN_OR_RETURN(
        std::string cluster_name,
        Scalar(context, "cluster", Cat("context \"", context_name, "\"")));
    TY_ASSIGN_OR_RETURN(
        std::string user_name,
        Scalar(context, "user", Cat("context \"", context_name, "\"")));
    if (cluster_name.empty()) {
      return Invalid(Cat("context \"", context_name, "\" names no cluster"));
    }
    KubeConfig config;
    config.source = path_;
    config.context = context_name;
    TY_ASSIGN_OR_RETURN(
        config.default_namespace,
        Scalar(context, "namespace", Cat("context \"", context_name, "\"")));

    TY_ASSIGN_OR_RETURN(
        YAML::Node cluster,
        Named("clusters", "cluster", cluster_name,
              Cat(" (named by context \"", context_name, "\")")));
    const std::string cwhat = Cat("cluster \"", cluster_name, "\"");
    TY_ASSIGN_OR_RETURN(config.server, Scalar(cluster, "server", cwhat));
    while (!config.server.empty() && config.server.back() == '/') {
      config.server.pop_back();
    }
    if (config.server.empty()) return Invalid(Cat(cwhat, " has no server"));
    if (!config.server.starts_with("https://") &&
        !config.server.starts_with("http://")) {
      return Invalid(Cat(cwhat, ": server \"", config.server,
                         "\" is not an https:// or http:// URL"));
    }
    TY_ASSIGN_OR_RETURN(config.ca_pem,
                        DataOrFile(cluster, "certificate-authority", cwhat));
    TY_ASSIGN_OR_RETURN(config.tls_server_name,
                        Scalar(cluster, "tls-server-name", cwhat));
    TY_ASSIGN_OR_RETURN(config.insecure_skip_tls_verify,
                        Bool(cluster, "insecure-skip-tls-verify", cwhat));

    if (user_name.empty()) return config;  // anonymous
    TY_ASSIGN_OR_RETURN(YAML::Node user, Named("users", "user", user_name,
                                               Cat(" (named by context \"",
                                                   context_name, "\")")));
    const std::string uwhat = Cat("user \"", user_name, "\"");
    if (user["exec"]) {
      std::string command;
      if (user["exec"].IsMap() && user["exec"]["command"] &&
          user["exec"]["command"].IsScalar()) {
        command = Cat(" (", user["exec"]["command"].Scalar(), ")");
      }
      return absl::FailedPreconditionError(
          Cat("kubeconfig ", path_, ": ", uwhat,
              " uses an exec credential plugin", command,
              ", which Trainyard does not support: give the user a token, "
              "a tokenFile or a client certificate"));
    }
    if (user["auth-provider"]) {
      std::string name;
      if (user["auth-provider"].IsMap() && user["auth-provider"]["name"] &&
          user["auth-provider"]["name"].IsScalar()) {
        name = Cat(" (", user["auth-provider"]["name"].Scalar(), ")");
      }
      return absl::FailedPreconditionError(
          Cat("kubeconfig ", path_, ": ", uwhat,
              " uses an auth-provider plugin", name,
              ", which Trainyard does not support: give the user a token, "
              "a tokenFile or a client certificate"));
    }
    if (user["username"] || user["password"]) {
      return absl::FailedPreconditionError(
          Cat("kubeconfig ", path_, ": ", uwhat,
              " uses basic authentication (username/password), which "
              "Kubernetes removed and Trainyard does not support"));
    }
    TY_ASSIGN_OR_RETURN(config.token, Scalar(user, "token", uwhat));
    TY_ASSIGN_OR_RETURN(std::string token_file,
                        Scalar(user, "tokenFile", uwhat));
    if (!token_file.empty()) {
      config.token_file = Resolve(token_file);
      // Read once now so that an unreadable file is reported at load time.
      TY_ASSIGN_OR_RETURN(
          std::string ignored,
          ReadWholeFile(config.token_file,
                        Cat("kubeconfig ", path_, ": ", uwhat, ": tokenFile")));
    }
    TY_ASSIGN_OR_RETURN(config.client_cert_pem,
                        DataOrFile(user, "client-certificate", uwhat));
    TY_ASSIGN_OR_RETURN(config.client_key_pem,
                        DataOrFile(user, "client-key", uwhat));
    if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
      return Invalid(
          Cat(uwhat, " has a client ",
              config.client_cert_pem.empty() ? "key" : "certificate",
              " without a client ",
              config.client_cert_pem.empty() ? "certificate" : "key"));
    }
    return config;
  }

 private:
  absl::Status Invalid(const std::string& what) const {
    return absl::InvalidArgumentError(Cat("kubeconfig ", path_, ": ", what));
  }

  std::string Resolve(const std::string& file) const {
    if (file.empty() || file.front() == '/' || dir_.empty()) return file;
    return (std::filesystem::path(dir_) / file).string();
  }

  // The entry of `list` (clusters, users, contexts) named `name`: its `field`.
  absl::StatusOr<YAML::Node> Named(const std::string& list,
                                   const std::string& field,
                                   const std::string& name,
                                   const std::string& named_by = "") const {
    const YAML::Node entries = root_[list];
    std::vector<std::string> names;
    if (entries && !entries.IsNull()) {
      if (!entries.IsSequence()) return Invalid(Cat(list, " is not a list"));
      for (const YAML::Node& e : entries) {
        if (!e.IsMap() || !e["name"] || !e["name"].IsScalar()) {
          return Invalid(Cat("an entry of ", list, " has no name"));
        }
        const std::string n = e["name"].Scalar();
        if (n != name) {
          names.push_back(n);
          continue;
        }
        const YAML::Node body = e[field];
        if (!body || body.IsNull()) return YAML::Node(YAML::NodeType::Map);
        if (!body.IsMap()) {
          return Invalid(
              Cat(field, " \"", name, "\": ", field, " is not a mapping"));
        }
        return body;
      }
    }
    return Invalid(Cat(field, " \"", name, "\"", named_by, " not found in ",
                       list, names.empty() ? " (none)" : " (there are: ",
                       absl::StrJoin(names, ", "), names.empty() ? "" : ")"));
  }

  absl::StatusOr<std::string> Scalar(const YAML::Node& node,
                                     const std::string& key,
                                     const std::string& what) const {
    const YAML::Node v = node[key];
    if (!v || v.IsNull()) return std::string();
    if (!v.IsScalar()) {
      return Invalid(
          Cat(what.empty() ? "" : Cat(what, ": "), key, " is not a string"));
    }
    return v.Scalar();
  }

  absl::StatusOr<bool> Bool(const YAML::Node& node, const std::string& key,
                            const std::string& what) const {
    TY_ASSIGN_OR_RETURN(std::string v, Scalar(node, key, what));
    if (v.empty() || v == "false") return false;
    if (v == "true") return true;
    return Invalid(Cat(what, ": ", key, " is \"", v, "\", not true or false"));
  }

  // `key`-data (base64) or `key` (a file, relative to the kubeconfig's
  // directory); "" when neither is set.
  absl::StatusOr<std::string> DataOrFile(const YAML::Node& node,
                                         const std::string& key,
                                         const std::string& what) const {
    TY_ASSIGN_OR_RETURN(std::string data,
                        Scalar(node, Cat(key, "-data"), what));
    if (!data.empty()) {
      std::string compact;
      for (char c : data) {
        if (!absl::ascii_isspace(static_cast<unsigned char>(c))) compact += c;
      }
      std::string decoded;
      if (!absl::Base64Unescape(AbslView(compact), &decoded) ||
          decoded.empty()) {
        return Invalid(Cat(what, ": ", key, "-data is not valid base64"));
      }
      return decoded;
    }
    TY_ASSIGN_OR_RETURN(std::string file, Scalar(node, key, what));
    if (file.empty()) return std::string();
    return ReadWholeFile(Resolve(file),
                         Cat("kubeconfig ", path_, ": ", what, ": ", key));
  }

  const std::string path_;
  const std::string dir_;
  const YAML::Node root_;
};

std::string Trimmed(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(AbslView(s)));
}

}  // namespace

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path,
                                          const std::string& context) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "kubeconfig"));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        Cat("kubeconfig ", path, ": not YAML: ", e.what()));
  }
  try {
    return KubeconfigReader(path, root).Read(context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        Cat("kubeconfig ", path, ": not a kubeconfig: ", e.what()));
  }
}

absl::StatusOr<KubeConfig> InClusterConfig(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "in-cluster configuration: KUBERNETES_SERVICE_HOST and "
        "KUBERNETES_SERVICE_PORT are not set (not running in a pod); give a "
        "kubeconfig instead");
  }
  KubeConfig config;
  const std::string h = host;
  config.server = h.find(':') != std::string::npos
                      ? Cat("https://[", h, "]:", port)
                      : Cat("https://", h, ":", port);
  config.source = Cat("in-cluster ", root);
  config.token_file = Cat(root, "/token");
  TY_ASSIGN_OR_RETURN(std::string token,
                      ReadWholeFile(config.token_file, "in-cluster token"));
  if (Trimmed(token).empty()) {
    return absl::FailedPreconditionError(
        Cat("in-cluster token ", config.token_file, " is empty"));
  }
  TY_ASSIGN_OR_RETURN(config.ca_pem,
                      ReadWholeFile(Cat(root, "/ca.crt"), "in-cluster CA"));
  // The namespace file is optional (client-go falls back to "default").
  std::ifstream ns(Cat(root, "/namespace"));
  if (ns) {
    std::ostringstream out;
    out << ns.rdbuf();
    config.default_namespace = Trimmed(out.str());
  }
  return config;
}

BearerToken::BearerToken(const KubeConfig& config)
    : inline_token_(config.token), file_(config.token_file) {}

absl::StatusOr<std::string> BearerToken::Get() {
  if (file_.empty()) return inline_token_;
  absl::MutexLock l(&mu_);
  struct stat st {};
  if (::stat(file_.c_str(), &st) != 0) {
    if (read_) return token_;
    return absl::FailedPreconditionError(
        Cat("token file ", file_, ": cannot read: ", std::strerror(errno)));
  }
  const int64_t mtime_ns =
      int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  if (read_ && mtime_ns == mtime_ns_ && st.st_size == size_) return token_;
  absl::StatusOr<std::string> text = ReadWholeFile(file_, "token file");
  if (!text.ok()) {
    if (read_) return token_;
    return text.status();
  }
  token_ = Trimmed(*text);
  read_ = true;
  mtime_ns_ = mtime_ns;
  size_ = st.st_size;
  return token_;
}

}  // namespace trainyard::dispatcher::kubernetes
