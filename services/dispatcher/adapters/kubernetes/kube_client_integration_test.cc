// The Kubernetes client and informer against the Kubernetes API test server
// (tests/fixtures/local_kube.h): TLS with the server's CA and a token or a
// client certificate, certificate failures, strict validation, injected
// 429/5xx/HTML answers, list+watch with bookmarks, a cut watch, and a 410
// re-list that delivers the difference.
#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/kubernetes/kube_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_config.h"
#include "services/dispatcher/adapters/kubernetes/kube_watch.h"
#include "tests/fixtures/local_kube.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::trainyard::testing::LocalKube;
using json = nlohmann::json;

constexpr char kPods[] = "/api/v1/namespaces/trainyard/pods";

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

json Pod(const std::string& name) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"labels", {{"app", "informer-test"}}}}},
      {"spec",
       {{"restartPolicy", "Never"},
        {"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
}

class KubeIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why; !LocalKube::Available(&why)) GTEST_SKIP() << why;
    absl::StatusOr<std::unique_ptr<LocalKube>> kube =
        LocalKube::Start({.extra_args = {"--bookmark-seconds", "1"}});
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = *std::move(kube);
  }

  KubeConfig Config(const std::string& context = "") {
    absl::StatusOr<KubeConfig> c =
        LoadKubeconfig(kube_->kubeconfig_path(), context);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.value_or(KubeConfig{});
  }

  std::unique_ptr<LocalKube> kube_;
};

TEST_F(KubeIntegrationTest, TlsWithTheCaAndATokenOrAClientCertificate) {
  for (const char* context : {"token", "client-cert"}) {
    SCOPED_TRACE(context);
    KubeConfig config = Config(context);
    EXPECT_FALSE(config.ca_pem.empty());
    KubeClient client(config, {.cluster = "local"});
    absl::StatusOr<json> list = client.List(kPods);
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_EQ((*list)["kind"], "PodList");
  }
  // tls-server-name: the certificate names localhost, the URL the address.
  KubeConfig by_name = Config();
  by_name.tls_server_name = "localhost";
  EXPECT_TRUE(KubeClient(by_name, {.cluster = "local"}).List(kPods).ok());
}

TEST_F(KubeIntegrationTest, CertificateAndCredentialFailuresNameTheCluster) {
  // A CA that did not sign the server's certificate.
  KubeConfig wrong_ca = Config();
  wrong_ca.ca_pem = [&] {
    std::ifstream in(kube_->client_cert_file());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  KubeClient client(wrong_ca, {.cluster = "prod-east"});
  absl::StatusOr<json> r = client.Get("/api/v1/namespaces/trainyard");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Msg(r.status()), HasSubstr("kubernetes cluster prod-east"));
  EXPECT_THAT(Msg(r.status()), HasSubstr("SSL certificate problem"));
  EXPECT_EQ(client.requests_sent(), 1);  // not retried

  // A name the certificate does not carry.
  KubeConfig wrong_name = Config();
  wrong_name.tls_server_name = "api.elsewhere.example";
  r = KubeClient(wrong_name, {.cluster = "prod-east"})
          .Get("/api/v1/namespaces/trainyard");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Msg(r.status()), HasSubstr("api.elsewhere.example"));

  // A token the server does not know.
  KubeConfig bad_token = Config();
  bad_token.token = "not-the-token";
  r = KubeClient(bad_token, {.cluster = "prod-east"})
          .Get("/api/v1/namespaces/trainyard");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated)
      << r.status();
}

TEST_F(KubeIntegrationTest, StrictValidationAndStatusesMap) {
  KubeClient client(Config(), {.cluster = "local"});
  json pod = Pod("p1");
  pod["spec"]["foo"] = 1;
  absl::StatusOr<json> r = client.Create(kPods, pod);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("unknown field \"spec.foo\""));
  pod = Pod("p1");
  pod["spec"]["containers"][0].erase("image");
  r = client.Create(kPods, pod);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r.status()), HasSubstr("spec.containers[0].image"));

  ASSERT_TRUE(client.Create(kPods, Pod("p1")).ok());
  r = client.Create(kPods, Pod("p1"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists) << r.status();
  r = client.Patch(absl::StrCat(kPods, "/p1"),
                   {{"metadata", {{"labels", {{"extra", "yes"}}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["metadata"]["labels"]["extra"], "yes");
  ASSERT_TRUE(client.Delete(absl::StrCat(kPods, "/p1"), 0).ok());
  r = client.Get(absl::StrCat(kPods, "/nope"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KubeIntegrationTest, RetryAfterIsHonouredAndServerErrorsRetried) {
  std::vector<absl::Duration> waits;
  KubeClient client(Config(),
                    {.cluster = "local",
                     .sleeper = [&](absl::Duration d) { waits.push_back(d); },
                     .jitter = [] { return 0.0; }});
  ASSERT_TRUE(kube_
                  ->Admin("POST", "/faults",
                          R"({"status": 429, "count": 1, "retry_after": 2})")
                  .ok());
  ASSERT_TRUE(client.List(kPods).ok());
  EXPECT_THAT(waits, ElementsAre(absl::Seconds(2)));

  waits.clear();
  ASSERT_TRUE(
      kube_->Admin("POST", "/faults", R"({"status": 503, "count": 2})").ok());
  ASSERT_TRUE(client.List(kPods).ok());
  EXPECT_THAT(waits,
              ElementsAre(absl::Milliseconds(200), absl::Milliseconds(400)));

  // A proxy's HTML page on every try.
  ASSERT_TRUE(kube_
                  ->Admin("POST", "/faults",
                          R"({"html": true, "status": 502, "count": 6})")
                  .ok());
  absl::StatusOr<json> r = client.List(kPods);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Msg(r.status()),
              HasSubstr("kubernetes cluster local: GET " + std::string(kPods)));
  EXPECT_THAT(Msg(r.status()), HasSubstr("not a Kubernetes Status: \"<"));
  EXPECT_THAT(Msg(r.status()), HasSubstr("(after 6 tries)"));
}

// What a handler saw, as "TYPE name".
class Recorder {
 public:
  InformerHandler Handler() {
    return [this](EventType type, const json& pod) {
      absl::MutexLock l(&mu_);
      events_.push_back(
          absl::StrCat(std::string(EventTypeName(type)), " ",
                       pod["metadata"]["name"].get<std::string>()));
      versions_.push_back(
          absl::StrCat(std::string(EventTypeName(type)), " ",
                       pod["metadata"]["name"].get<std::string>(), "@",
                       pod["metadata"].value("resourceVersion", "")));
    };
  }
  // Every (event type, object, resourceVersion) delivered once at most
  // (a DELETED after a re-list carries the last state seen).
  bool NoDuplicates() {
    absl::MutexLock l(&mu_);
    std::vector<std::string> v = versions_;
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  }
  // The events other than MODIFIED (the server's controllers update pods:
  // the scheduler marks them unschedulable without nodes).
  std::vector<std::string> SortedTransitions() {
    std::vector<std::string> out;
    for (const std::string& e : Sorted()) {
      if (!e.starts_with("MODIFIED")) out.push_back(e);
    }
    return out;
  }
  std::vector<std::string> Sorted() {
    absl::MutexLock l(&mu_);
    std::vector<std::string> out = events_;
    std::sort(out.begin(), out.end());
    return out;
  }
  void Clear() {
    absl::MutexLock l(&mu_);
    events_.clear();
  }
  bool WaitFor(size_t n, absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      {
        absl::MutexLock l(&mu_);
        if (events_.size() >= n) return true;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> versions_ ABSL_GUARDED_BY(mu_);
};

bool Eventually(const std::function<bool()>& f,
                absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (f()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return f();
}

TEST_F(KubeIntegrationTest, InformerWatchesWithBookmarksAndSurvivesACutWatch) {
  KubeClient writer(Config(), {.cluster = "local"});
  for (const char* n : {"a", "b", "c"})
    ASSERT_TRUE(writer.Create(kPods, Pod(n)).ok());
  KubeClient client(Config(), {.cluster = "local", .qps = 100, .burst = 100});
  Recorder rec;
  Informer informer(&client, kPods,
                    {.label_selector = "app=informer-test", .page_size = 2},
                    rec.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(20)));
  EXPECT_THAT(rec.SortedTransitions(),
              ElementsAre("ADDED a", "ADDED b", "ADDED c"));
  rec.Clear();
  // Idle: the server sends a bookmark a second, the resourceVersion follows.
  ASSERT_TRUE(writer
                  .Create("/api/v1/namespaces/trainyard/configmaps",
                          {{"apiVersion", "v1"},
                           {"kind", "ConfigMap"},
                           {"metadata", {{"name", "elsewhere"}}}})
                  .ok());
  const std::string before = informer.LastResourceVersion();
  ASSERT_TRUE(Eventually([&] { return informer.counters().bookmarks >= 1; }));
  EXPECT_NE(informer.LastResourceVersion(), before);

  ASSERT_TRUE(writer.Delete(absl::StrCat(kPods, "/a"), 0).ok());
  ASSERT_TRUE(rec.WaitFor(1));
  // The server cuts every watch; changes go on meanwhile.
  ASSERT_TRUE(kube_->Admin("POST", "/cut-watches").ok());
  ASSERT_TRUE(writer.Create(kPods, Pod("d")).ok());
  ASSERT_TRUE(rec.WaitFor(2));
  ASSERT_TRUE(Eventually([&] { return informer.size() == 3; }));
  absl::SleepFor(absl::Milliseconds(300));  // nothing more arrives
  informer.Stop();
  EXPECT_THAT(rec.SortedTransitions(), ElementsAre("ADDED d", "DELETED a"));
  EXPECT_TRUE(rec.NoDuplicates());
  EXPECT_EQ(informer.counters().lists, 1);
  EXPECT_GE(informer.counters().reconnects, 1);
  std::vector<std::string> cached;
  for (const ObjectPtr& p : informer.Snapshot())
    cached.push_back((*p)["metadata"]["name"]);
  std::sort(cached.begin(), cached.end());
  EXPECT_THAT(cached, ElementsAre("b", "c", "d"));
}

TEST_F(KubeIntegrationTest, ExpiredWatchRelistsAndDeliversOnlyTheDifference) {
  KubeClient writer(Config(), {.cluster = "local"});
  for (const char* n : {"a", "b", "keep"})
    ASSERT_TRUE(writer.Create(kPods, Pod(n)).ok());
  KubeClient client(Config(), {.cluster = "local", .qps = 100, .burst = 100});
  Recorder rec;
  // A long first backoff: the changes below happen while the informer
  // waits to reconnect.
  Informer informer(
      &client, kPods,
      {.initial_backoff = absl::Seconds(4), .max_backoff = absl::Seconds(4)},
      rec.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(20)));
  ASSERT_TRUE(rec.WaitFor(3));
  rec.Clear();
  // The informer's next watch fails; it backs off (2 to 4 s).
  ASSERT_TRUE(kube_
                  ->Admin("POST", "/faults",
                          absl::StrCat(
                              R"({"status": 500, "count": 1, "path_prefix": ")",
                              kPods, R"("})"))
                  .ok());
  ASSERT_TRUE(kube_->Admin("POST", "/cut-watches").ok());
  ASSERT_TRUE(Eventually([&] { return !informer.last_error().ok(); }));
  // Meanwhile: a changed, b gone, c new, keep untouched; then the history
  // is compacted: the informer's resourceVersion is too old.
  ASSERT_TRUE(writer
                  .Patch(absl::StrCat(kPods, "/a"),
                         {{"metadata", {{"labels", {{"changed", "yes"}}}}}})
                  .ok());
  ASSERT_TRUE(writer.Delete(absl::StrCat(kPods, "/b"), 0).ok());
  ASSERT_TRUE(writer.Create(kPods, Pod("c")).ok());
  ASSERT_TRUE(kube_->Admin("POST", "/compact").ok());
  EXPECT_TRUE(rec.Sorted().empty()) << "changes arrived before the re-list";
  ASSERT_TRUE(rec.WaitFor(3));
  ASSERT_TRUE(Eventually([&] { return informer.counters().relists == 1; }));
  absl::SleepFor(absl::Milliseconds(300));
  informer.Stop();
  EXPECT_THAT(rec.Sorted(), ElementsAre("ADDED c", "DELETED b", "MODIFIED a"));
  EXPECT_TRUE(rec.NoDuplicates());
  ASSERT_NE(informer.Get("trainyard/a"), nullptr);
  EXPECT_EQ((*informer.Get("trainyard/a"))["metadata"]["labels"]["changed"],
            "yes");
  EXPECT_EQ(informer.size(), 3u);
}

}  // namespace
}  // namespace trainyard::dispatcher::kubernetes
