#include "services/dispatcher/adapters/kubernetes/kube_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kCaPem[] =
    "-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----\n";
constexpr char kCertPem[] =
    "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n";
constexpr char kKeyPem[] =
    "-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----\n";

std::string B64(const std::string& s) {
  std::string out;
  absl::Base64Escape(s, &out);
  return out;
}

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kubeconfig_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "certs");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  std::filesystem::path dir_;
};

TEST_F(KubeconfigTest, ReadsTheCurrentContextWithDataFieldsAndToken) {
  const std::string path = Write("config", R"(
apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: dev-cluster
  cluster:
    server: https://dev.example:6443
    insecure-skip-tls-verify: true
- name: prod-cluster
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: )" + B64(kCaPem) +
                                               R"(
    tls-server-name: kubernetes.default.svc
users:
- name: dev
  user:
    token: dev-token
- name: prod
  user:
    client-certificate-data: )" + B64(kCertPem) +
                                               R"(
    client-key-data: )" + B64(kKeyPem) + R"(
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev}
- name: prod
  context: {cluster: prod-cluster, user: prod, namespace: trainyard}
)");
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_EQ(c->tls_server_name, "kubernetes.default.svc");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->client_cert_pem, kCertPem);
  EXPECT_EQ(c->client_key_pem, kKeyPem);
  EXPECT_EQ(c->token, "");
  EXPECT_EQ(c->default_namespace, "trainyard");
  EXPECT_EQ(c->context, "prod");
  EXPECT_EQ(c->source, path);

  absl::StatusOr<KubeConfig> dev = LoadKubeconfig(path, "dev");
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->server, "https://dev.example:6443");
  EXPECT_TRUE(dev->insecure_skip_tls_verify);
  EXPECT_EQ(dev->token, "dev-token");
  EXPECT_EQ(dev->ca_pem, "");
  EXPECT_EQ(dev->default_namespace, "");
}

TEST_F(KubeconfigTest, ResolvesRelativeFilesAgainstTheKubeconfigDirectory) {
  Write("certs/ca.crt", kCaPem);
  Write("certs/client.crt", kCertPem);
  Write("certs/client.key", kKeyPem);
  Write("token", "file-token\n");
  const std::string path = Write("config", R"(
current-context: c
clusters:
- name: k
  cluster:
    server: https://k:6443
    certificate-authority: certs/ca.crt
users:
- name: u
  user:
    tokenFile: token
    client-certificate: certs/client.crt
    client-key: )" + (dir_ / "certs/client.key").string() +
                                               R"(
contexts:
- name: c
  context: {cluster: k, user: u}
)");
  // Loaded from another working directory: the paths still resolve.
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path("/");
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path);
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_EQ(c->client_cert_pem, kCertPem);
  EXPECT_EQ(c->client_key_pem, kKeyPem);
  EXPECT_EQ(c->token_file, (dir_ / "token").string());
  BearerToken token(*c);
  absl::StatusOr<std::string> t = token.Get();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "file-token");
}

TEST_F(KubeconfigTest, ErrorsNameTheFileAndWhatIsWrong) {
  struct Case {
    std::string name;
    std::string text;  // "" : the file does not exist
    absl::StatusCode code;
    std::vector<std::string> says;
  };
  const std::string ok_cluster =
      "clusters:\n- name: k\n  cluster: {server: 'https://k:6443'}\n";
  const std::string ok_user = "users:\n- name: u\n  user: {token: t}\n";
  const std::string ok_context =
      "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
      "current-context: c\n";
  const std::vector<Case> cases = {
      {"missing",
       "",
       absl::StatusCode::kFailedPrecondition,
       {"cannot read", "No such file"}},
      {"not_yaml",
       "clusters: [unclosed\n  - {",
       absl::StatusCode::kInvalidArgument,
       {"not YAML"}},
      {"scalar",
       "just a string\n",
       absl::StatusCode::kInvalidArgument,
       {"not a kubeconfig"}},
      {"no_current_context",
       ok_cluster + ok_user,
       absl::StatusCode::kInvalidArgument,
       {"no current-context"}},
      {"unknown_context",
       ok_cluster + ok_user +
           "contexts:\n- name: c\n  context: {cluster: k, user: u}\n"
           "current-context: nope\n",
       absl::StatusCode::kInvalidArgument,
       {"context \"nope\" not found in contexts", "there are: c"}},
      {"cluster_missing",
       ok_user + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"cluster \"k\" (named by context \"c\") not found in clusters"}},
      {"user_missing",
       ok_cluster + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"user \"u\" (named by context \"c\") not found in users"}},
      {"no_server",
       "clusters:\n- name: k\n  cluster: {insecure-skip-tls-verify: true}\n" +
           ok_user + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"cluster \"k\" has no server"}},
      {"server_without_scheme",
       "clusters:\n- name: k\n  cluster: {server: '10.0.0.1:6443'}\n" +
           ok_user + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"cluster \"k\": server \"10.0.0.1:6443\" is not an https:// or "
        "http:// URL"}},
      {"exec",
       ok_cluster +
           "users:\n- name: u\n  user:\n    exec: {command: aws, apiVersion: "
           "client.authentication.k8s.io/v1}\n" +
           ok_context,
       absl::StatusCode::kFailedPrecondition,
       {"user \"u\" uses an exec credential plugin (aws)", "not support"}},
      {"auth_provider",
       ok_cluster +
           "users:\n- name: u\n  user:\n    auth-provider: {name: gcp}\n" +
           ok_context,
       absl::StatusCode::kFailedPrecondition,
       {"auth-provider plugin (gcp)", "not support"}},
      {"bad_base64",
       ok_cluster +
           "users:\n- name: u\n  user: {client-key-data: 'not*base64!', "
           "client-certificate-data: " +
           B64(kCertPem) + "}\n" + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"user \"u\": client-key-data is not valid base64"}},
      {"bad_ca_base64",
       "clusters:\n- name: k\n  cluster: {server: 'https://k', "
       "certificate-authority-data: '%%%'}\n" +
           ok_user + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"cluster \"k\": certificate-authority-data is not valid base64"}},
      {"ca_file_missing",
       "clusters:\n- name: k\n  cluster: {server: 'https://k', "
       "certificate-authority: nothere.crt}\n" +
           ok_user + ok_context,
       absl::StatusCode::kFailedPrecondition,
       {"cluster \"k\": certificate-authority", "nothere.crt", "cannot read"}},
      {"token_file_missing",
       ok_cluster + "users:\n- name: u\n  user: {tokenFile: /nonexistent/t}\n" +
           ok_context,
       absl::StatusCode::kFailedPrecondition,
       {"tokenFile", "/nonexistent/t", "cannot read"}},
      {"cert_without_key",
       ok_cluster + "users:\n- name: u\n  user: {client-certificate-data: " +
           B64(kCertPem) + "}\n" + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"client certificate without a client key"}},
      {"clusters_not_list",
       "clusters: {k: 1}\n" + ok_user + ok_context,
       absl::StatusCode::kInvalidArgument,
       {"clusters is not a list"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path =
        c.text.empty() ? (dir_ / c.name).string() : Write(c.name, c.text);
    absl::StatusOr<KubeConfig> config = LoadKubeconfig(path);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), c.code) << config.status();
    EXPECT_THAT(std::string(config.status().message()),
                HasSubstr("kubeconfig " + path));
    for (const std::string& s : c.says) {
      EXPECT_THAT(std::string(config.status().message()), HasSubstr(s));
    }
  }
}

class InClusterTest : public KubeconfigTest {
 protected:
  void TearDown() override {
    ::unsetenv("KUBERNETES_SERVICE_HOST");
    ::unsetenv("KUBERNETES_SERVICE_PORT");
    KubeconfigTest::TearDown();
  }
};

TEST_F(InClusterTest, ReadsTheServiceAccountAndRereadsARotatedToken) {
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  Write("token", "first\n");
  Write("ca.crt", kCaPem);
  Write("namespace", "trainyard\n");
  absl::StatusOr<KubeConfig> c = InClusterConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_EQ(c->default_namespace, "trainyard");
  BearerToken token(*c);
  EXPECT_EQ(token.Get().value_or("?"), "first");
  // The kubelet replaces the projected token: the next request sees it.
  Write("token.new", "second-token\n");
  std::filesystem::rename(dir_ / "token.new", dir_ / "token");
  EXPECT_EQ(token.Get().value_or("?"), "second-token");
  // Removed for a moment (being replaced): the last token is kept.
  std::filesystem::remove(dir_ / "token");
  EXPECT_EQ(token.Get().value_or("?"), "second-token");

  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  Write("token", "x");
  absl::StatusOr<KubeConfig> v6 = InClusterConfig(dir_.string());
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->server, "https://[fd00::1]:443");
}

TEST_F(InClusterTest, OutsideAPodOrWithoutFilesIsFailedPrecondition) {
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  absl::StatusOr<KubeConfig> c = InClusterConfig(dir_.string());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("KUBERNETES_SERVICE_HOST"));

  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  c = InClusterConfig(dir_.string());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(c.status().message()),
      AllOf(HasSubstr((dir_ / "token").string()), HasSubstr("cannot read")));
  Write("token", "t");
  c = InClusterConfig(dir_.string());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr((dir_ / "ca.crt").string()));
}

}  // namespace
}  // namespace trainyard::dispatcher::kubernetes
