// The Kubernetes client and informer against an HTTP server in the test
// process (kube_test_server.h) that speaks the API server's protocol for one
// pod collection and injects the faults a real server or a proxy in front of
// it produce: Retry-After, 5xx, HTML pages, garbage lines, a watch cut in the
// middle of a line, an expired resourceVersion (HTTP 410 and ERROR events).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/kubernetes/kube_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_test_server.h"
#include "services/dispatcher/adapters/kubernetes/kube_watch.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;
using kubetest::FakeApiServer;
using kubetest::kPods;
using kubetest::Seen;

// A client whose waits are recorded, not slept.
struct TestClient {
  explicit TestClient(const std::string& url, KubeConfig config = {}) {
    config.server = url;
    if (config.token.empty() && config.token_file.empty()) config.token = "tok";
    client = std::make_unique<KubeClient>(
        config, KubeClientOptions{.cluster = "test-cluster",
                                  .qps = 0,
                                  .max_retries = 3,
                                  .sleeper =
                                      [this](absl::Duration d) {
                                        absl::MutexLock l(&mu);
                                        waits.push_back(d);
                                      },
                                  .jitter = [] { return 0.0; }});
  }
  std::vector<absl::Duration> Waits() {
    absl::MutexLock l(&mu);
    return waits;
  }
  absl::Mutex mu;
  std::vector<absl::Duration> waits;
  std::unique_ptr<KubeClient> client;
};

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// --- Requests -------------------------------------------------------------

TEST(KubeClientHttpTest, VerbsSendWhatTheApiServerExpects) {
  FakeApiServer server;
  TestClient t(server.url());
  KubeClient& c = *t.client;
  server.Enqueue({201, R"({"kind":"Job","metadata":{"name":"j"}})"});
  absl::StatusOr<json> created =
      c.Create("/apis/batch/v1/namespaces/ns/jobs", {{"kind", "Job"}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["name"], "j");
  server.Enqueue({200, R"({"kind":"Job"})"});
  ASSERT_TRUE(c.Patch("/apis/batch/v1/namespaces/ns/jobs/j",
                      {{"spec", {{"suspend", true}}}})
                  .ok());
  server.Enqueue({200, R"({"kind":"Status","status":"Success"})"});
  ASSERT_TRUE(c.Delete("/apis/batch/v1/namespaces/ns/jobs/j", 0).ok());
  server.Enqueue({200, "line 1\nline 2\n", "text/plain"});
  absl::StatusOr<std::string> log =
      c.GetText("/api/v1/namespaces/ns/pods/p/log", {{"tailLines", "10"}});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(*log, "line 1\nline 2\n");

  const std::vector<Seen> seen = server.seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].Param("fieldValidation"), "Strict");
  EXPECT_EQ(seen[0].content_type, "application/json");
  EXPECT_EQ(json::parse(seen[0].body), json({{"kind", "Job"}}));
  EXPECT_EQ(seen[0].authorization, "Bearer tok");
  EXPECT_EQ(seen[1].method, "PATCH");
  EXPECT_EQ(seen[1].content_type, "application/merge-patch+json");
  EXPECT_EQ(seen[1].Param("fieldValidation"), "Strict");
  EXPECT_EQ(seen[2].method, "DELETE");
  EXPECT_EQ(json::parse(seen[2].body),
            json({{"apiVersion", "v1"},
                  {"kind", "DeleteOptions"},
                  {"propagationPolicy", "Background"},
                  {"gracePeriodSeconds", 0}}));
  EXPECT_EQ(seen[3].Param("tailLines"), "10");
  EXPECT_TRUE(t.Waits().empty());
}

TEST(KubeClientHttpTest, ARotatedTokenFileIsSentFromTheNextRequest) {
  FakeApiServer server;
  const std::string file =
      ::testing::TempDir() + "/kube_token_" + std::to_string(::getpid());
  std::ofstream(file) << "first-token\n";
  TestClient t(server.url(), KubeConfig{.token = "inline", .token_file = file});
  ASSERT_TRUE(t.client->List(kPods).ok());
  std::ofstream(file) << "the-rotated-token\n";
  ASSERT_TRUE(t.client->List(kPods).ok());
  std::remove(file.c_str());
  const std::vector<Seen> seen = server.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].authorization, "Bearer first-token");
  EXPECT_EQ(seen[1].authorization, "Bearer the-rotated-token");
}

TEST(KubeClientHttpTest, ListPassesSelectorsAndPages) {
  FakeApiServer server;
  for (const char* n : {"a", "b", "c"}) server.Put(n, "Running");
  TestClient t(server.url());
  absl::StatusOr<json> page =
      t.client->List(kPods, {.label_selector = "trainyard.dev/job=j1,x!=y",
                             .field_selector = "status.phase=Running",
                             .limit = 2});
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ((*page)["items"].size(), 2u);
  const std::string next = (*page)["metadata"]["continue"];
  page = t.client->List(kPods, {.limit = 2, .continue_token = next});
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ((*page)["items"].size(), 1u);
  EXPECT_EQ((*page)["items"][0]["metadata"]["name"], "c");
  const std::vector<Seen> seen = server.seen();
  EXPECT_EQ(seen[0].Param("labelSelector"), "trainyard.dev/job=j1,x!=y");
  EXPECT_EQ(seen[0].Param("fieldSelector"), "status.phase=Running");
  EXPECT_EQ(seen[0].Param("limit"), "2");
  EXPECT_EQ(seen[1].Param("continue"), next);
}

TEST(KubeClientHttpTest, TooManyRequestsWaitsRetryAfterCappedThenRetries) {
  FakeApiServer server;
  TestClient t(server.url());
  const std::string status429 =
      R"({"kind":"Status","reason":"TooManyRequests","code":429,"message":"slow down"})";
  server.Enqueue({429, status429, "application/json", {{"Retry-After", "3"}}});
  server.Enqueue(
      {429, status429, "application/json", {{"Retry-After", "3600"}}});
  server.Enqueue({429, status429});  // no Retry-After: backoff
  server.Enqueue({201, R"({"kind":"Job"})"});
  // A POST too: a 429 means the server did not process it.
  absl::StatusOr<json> r =
      t.client->Create("/apis/batch/v1/namespaces/ns/jobs", {});
  ASSERT_TRUE(r.ok()) << r.status();
  // 3 s as asked; 3600 s capped at max_retry_after (30 s); the third retry's
  // backoff 200 ms * 2^2 (jitter 0).
  EXPECT_THAT(t.Waits(), ElementsAre(absl::Seconds(3), absl::Seconds(30),
                                     absl::Milliseconds(800)));
  EXPECT_EQ(server.seen().size(), 4u);
  EXPECT_EQ(t.client->retries(), 3);
}

TEST(KubeClientHttpTest, ServerErrorsAreRetriedForIdempotentVerbsOnly) {
  FakeApiServer server;
  TestClient t(server.url());
  const std::string status500 =
      R"({"kind":"Status","reason":"InternalError","code":500,"message":"etcd leader changed"})";
  server.Enqueue({500, status500});
  server.Enqueue({503, "", "text/plain"});
  server.Enqueue({200, R"({"kind":"Pod"})"});
  absl::StatusOr<json> got = t.client->Get("/api/v1/namespaces/ns/pods/p");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(t.Waits(),
              ElementsAre(absl::Milliseconds(200), absl::Milliseconds(400)));

  // Every try fails: UNAVAILABLE after max_retries + 1 tries.
  for (int i = 0; i < 4; ++i) server.Enqueue({500, status500});
  got = t.client->Get("/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Msg(got.status()), HasSubstr("etcd leader changed"));
  EXPECT_THAT(Msg(got.status()), HasSubstr("(after 4 tries)"));

  // A POST that reached the server is not repeated.
  server.Enqueue({500, status500});
  const size_t before = server.seen().size();
  absl::StatusOr<json> created =
      t.client->Create("/apis/batch/v1/namespaces/ns/jobs", {});
  EXPECT_EQ(created.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(server.seen().size(), before + 1);

  // 409s are never retried.
  server.Enqueue(
      {409,
       R"({"kind":"Status","reason":"AlreadyExists","code":409,"message":"exists"})"});
  created = t.client->Create("/apis/batch/v1/namespaces/ns/jobs", {});
  EXPECT_EQ(created.status().code(), absl::StatusCode::kAlreadyExists);
  server.Enqueue(
      {409,
       R"({"kind":"Status","reason":"Conflict","code":409,"message":"modified"})"});
  EXPECT_EQ(t.client->Patch("/x", {}).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(server.seen().size(), before + 3);
}

TEST(KubeClientHttpTest, ConnectionRefusedIsRetriedEvenForPost) {
  int port = 0;
  {
    FakeApiServer gone;  // a port nobody listens on any more
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  TestClient t(absl::StrCat("http://127.0.0.1:", port));
  absl::StatusOr<json> r =
      t.client->Create("/apis/batch/v1/namespaces/ns/jobs", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Msg(r.status()), HasSubstr("kubernetes cluster test-cluster"));
  EXPECT_EQ(t.client->requests_sent(), 4);  // the request never arrived
  EXPECT_EQ(t.Waits().size(), 3u);
}

TEST(KubeClientHttpTest, HtmlAndGarbageAnswersAreClearErrors) {
  FakeApiServer server;
  TestClient t(server.url());
  server.Enqueue(
      {403, "<html><body><h1>403 Forbidden</h1> by the proxy</body></html>",
       "text/html"});
  absl::StatusOr<json> r = t.client->Get("/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      Msg(r.status()),
      HasSubstr("kubernetes cluster test-cluster: GET "
                "/api/v1/namespaces/ns/pods/p: HTTP 403: the answer is not "
                "a Kubernetes Status: \"<html><body><h1>403 Forbidden"));
  server.Enqueue({200, "<html>login page</html>", "text/html"});
  r = t.client->Get("/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(
      Msg(r.status()),
      HasSubstr("HTTP 200 answer is not JSON: \"<html>login page</html>\""));
}

TEST(KubeClientHttpTest, RateLimitSpacesRequestsAtQps) {
  FakeApiServer server;
  KubeClient c(KubeConfig{.server = server.url()},
               {.cluster = "c", .qps = 50, .burst = 2});
  for (int i = 0; i < 2; ++i) server.Enqueue({200, "{}"});
  const absl::Time start = absl::Now();
  // 2 go at once (the burst), the next 4 a token (20 ms) apart: >= 80 ms.
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(c.Get("/api/v1/namespaces/ns/pods").ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(79));
}

// --- Informer -------------------------------------------------------------

// What a handler saw, as "TYPE name phase".
class Recorder {
 public:
  InformerHandler Handler() {
    return [this](EventType type, const json& pod) {
      absl::MutexLock l(&mu_);
      events_.push_back(absl::StrCat(
          std::string(EventTypeName(type)), " ",
          pod["metadata"]["name"].get<std::string>(), " ",
          pod.contains("status") ? pod["status"].value("phase", "") : ""));
    };
  }
  std::vector<std::string> Take() {
    absl::MutexLock l(&mu_);
    return std::exchange(events_, {});
  }
  size_t size() const {
    absl::MutexLock l(&mu_);
    return events_.size();
  }
  bool WaitFor(size_t n, absl::Duration timeout = absl::Seconds(10)) const {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return events_.size() >= n;
    };
    const absl::Time deadline = absl::Now() + timeout;
    while (!enough() && absl::Now() < deadline) {
      mu_.AwaitWithDeadline(absl::Condition(&enough), deadline);
    }
    return enough();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
};

InformerOptions FastOptions() {
  return {.page_size = 2,
          .watch_timeout_seconds = 60,
          .initial_backoff = absl::Milliseconds(10),
          .max_backoff = absl::Milliseconds(50)};
}

TEST(InformerTest, ListsInPagesThenWatchesWithBookmarks) {
  FakeApiServer server;
  server.Put("a", "Pending");
  server.Put("b", "Running");
  server.Put("c", "Running");
  TestClient t(server.url());
  Recorder rec;
  InformerOptions options = FastOptions();
  options.label_selector = "trainyard.dev/job=j1";
  Informer informer(t.client.get(), kPods, options, rec.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(rec.WaitFor(3));
  std::vector<std::string> initial = rec.Take();
  std::sort(initial.begin(), initial.end());
  EXPECT_THAT(initial, ElementsAre("ADDED a Pending", "ADDED b Running",
                                   "ADDED c Running"));
  EXPECT_EQ(informer.LastResourceVersion(), "103");
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 1; }));

  server.Put("a", "Running");
  server.Remove("b");
  server.Put("d", "Pending");
  ASSERT_TRUE(rec.WaitFor(3));
  EXPECT_THAT(rec.Take(), ElementsAre("MODIFIED a Running", "DELETED b Running",
                                      "ADDED d Pending"));
  server.Bookmark();
  ASSERT_TRUE(
      server.WaitFor([&] { return informer.counters().bookmarks == 1; }));
  EXPECT_EQ(informer.LastResourceVersion(), "107");
  EXPECT_EQ(informer.size(), 3u);
  ASSERT_NE(informer.Get("ns/a"), nullptr);
  EXPECT_EQ((*informer.Get("ns/a"))["status"]["phase"], "Running");
  EXPECT_EQ(informer.Get("ns/b"), nullptr);

  // The list came in 2 pages, the watch from the list's resourceVersion.
  const std::vector<Seen> seen = server.seen();
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[0].Param("limit"), "2");
  EXPECT_EQ(seen[0].Param("labelSelector"), "trainyard.dev/job=j1");
  EXPECT_EQ(seen[1].Param("continue"), "2");
  const Seen& watch = seen[2];
  EXPECT_EQ(watch.Param("watch"), "true");
  EXPECT_EQ(watch.Param("resourceVersion"), "103");
  EXPECT_EQ(watch.Param("allowWatchBookmarks"), "true");
  EXPECT_EQ(watch.Param("timeoutSeconds"), "60");
  EXPECT_EQ(watch.Param("labelSelector"), "trainyard.dev/job=j1");

  // The server ends the watch (timeoutSeconds): resumed from the bookmark's
  // resourceVersion, no list.
  server.EndWatch();
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 2; }));
  EXPECT_EQ(server.watches()[1].Param("resourceVersion"), "107");
  informer.Stop();
  EXPECT_EQ(informer.counters().lists, 1);
  EXPECT_EQ(informer.counters().relists, 0);
  EXPECT_EQ(informer.counters().reconnects, 1);
  EXPECT_TRUE(rec.Take().empty());
}

TEST(InformerTest,
     ACutWatchResumesFromTheLastResourceVersionWithoutDuplicates) {
  FakeApiServer server;
  server.Put("a", "Pending");
  TestClient t(server.url());
  Recorder rec;
  Informer informer(t.client.get(), kPods, FastOptions(), rec.Handler());
  informer.Start();
  ASSERT_TRUE(rec.WaitFor(1));
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 1; }));
  server.Put("a", "Running");
  ASSERT_TRUE(rec.WaitFor(2));
  // Cut in the middle of a line; changes happen while disconnected.
  server.CutWatch(
      R"({"type":"MODIFIED","object":{"metadata":{"name":"a","names)");
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 2; }));
  server.Put("a", "Succeeded");
  server.Put("b", "Pending");
  ASSERT_TRUE(rec.WaitFor(4));
  informer.Stop();
  EXPECT_THAT(rec.Take(),
              ElementsAre("ADDED a Pending", "MODIFIED a Running",
                          "MODIFIED a Succeeded", "ADDED b Pending"));
  const std::vector<Seen> watches = server.watches();
  ASSERT_EQ(watches.size(), 2u);
  EXPECT_EQ(watches[1].Param("resourceVersion"), "102");
  EXPECT_EQ(informer.counters().lists, 1);
  EXPECT_EQ(informer.counters().reconnects, 1);
  EXPECT_THAT(Msg(informer.last_error()),
              HasSubstr("kubernetes cluster test-cluster"));
}

TEST(InformerTest, ExpiredResourceVersionRelistsAndDeliversTheDifference) {
  for (bool as_event : {true, false}) {
    SCOPED_TRACE(as_event ? "ERROR event 410" : "HTTP 410");
    FakeApiServer server;
    server.Put("a", "Pending");
    server.Put("b", "Running");
    server.Put("d", "Running");
    TestClient t(server.url());
    Recorder rec;
    Informer informer(t.client.get(), kPods, FastOptions(), rec.Handler());
    informer.Start();
    ASSERT_TRUE(rec.WaitFor(3));
    rec.Take();
    ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 1; }));
    // Changes the informer never sees as events: its resourceVersion is
    // compacted away.
    server.Put("a", "Running", /*silent=*/true);
    server.Remove("b", /*silent=*/true);
    server.Put("c", "Pending", /*silent=*/true);
    if (as_event) {
      server.Compact(/*error_event_on_live_watch=*/true);
    } else {
      server.Compact(false);
      server.CutWatch("");  // the next watch is answered HTTP 410
    }
    ASSERT_TRUE(rec.WaitFor(3));
    informer.Stop();
    std::vector<std::string> diff = rec.Take();
    std::sort(diff.begin(), diff.end());
    EXPECT_THAT(diff, ElementsAre("ADDED c Pending", "DELETED b Running",
                                  "MODIFIED a Running"));
    EXPECT_EQ(informer.counters().relists, 1);
    EXPECT_EQ(informer.LastResourceVersion(), "106");
    EXPECT_EQ(informer.size(), 3u);
  }
}

TEST(InformerTest, GarbageAndErrorEventsReconnectAndStopEndsAnIdleWatchAtOnce) {
  FakeApiServer server;
  server.Put("a", "Pending");
  TestClient t(server.url());
  Recorder rec;
  Informer informer(t.client.get(), kPods, FastOptions(), rec.Handler());
  informer.Start();
  ASSERT_TRUE(rec.WaitFor(1));
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 1; }));
  server.Line("<html>proxy error</html>");
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 2; }));
  EXPECT_THAT(Msg(informer.last_error()),
              HasSubstr("not a watch event: \"<html>proxy error</html>\""));
  server.Put("a", "Running");
  ASSERT_TRUE(rec.WaitFor(2));
  // An ERROR event other than 410: watch again from the resourceVersion.
  server.Line(
      R"j({"type":"ERROR","object":{"kind":"Status","code":500,"message":"etcd unavailable"}})j");
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 3; }));
  EXPECT_THAT(Msg(informer.last_error()),
              HasSubstr("ERROR event 500: etcd unavailable"));
  EXPECT_EQ(server.watches()[2].Param("resourceVersion"), "102");
  EXPECT_EQ(informer.counters().lists, 1);
  const absl::Time start = absl::Now();
  informer.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_THAT(rec.Take(), ElementsAre("ADDED a Pending", "MODIFIED a Running"));
}

TEST(InformerTest, StopEndsAListWaitingToRetryAtOnce) {
  FakeApiServer server;
  for (int i = 0; i < 10; ++i) server.Enqueue({503, "", "text/plain"});
  KubeClient client(KubeConfig{.server = server.url()},
                    {.cluster = "c",
                     .qps = 0,
                     .initial_backoff = absl::Seconds(30),
                     .max_backoff = absl::Seconds(30)});
  Recorder rec;
  Informer informer(&client, kPods, FastOptions(), rec.Handler());
  informer.Start();
  ASSERT_TRUE(server.WaitFor([&] { return server.seen().size() == 1; }));
  absl::SleepFor(absl::Milliseconds(50));  // into the 15 to 30 s backoff
  const absl::Time start = absl::Now();
  informer.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_FALSE(informer.Synced());
  EXPECT_EQ(server.seen().size(), 1u);
  EXPECT_EQ(rec.size(), 0u);
}

}  // namespace
}  // namespace trainyard::dispatcher::kubernetes
