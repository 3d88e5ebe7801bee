// Pure parts of the Kubernetes client: the token bucket against a schedule
// computed by hand, Status answers mapped to absl::Status, URLs, backoff.
#include "services/dispatcher/adapters/kubernetes/kube_client.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/clock.h"
#include "services/dispatcher/adapters/kubernetes/kube_watch.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(TokenBucketTest, FollowsTheHandComputedSchedule) {
  // qps 5, burst 10: a token every 200 ms, 10 stored.
  VirtualClock clock(absl::FromUnixSeconds(1000));
  TokenBucket bucket(5, 10, clock);
  // t=0: 12 requests at once. The bucket holds 10: those go now; the 11th
  // waits for the token due at +200 ms, the 12th for the one at +400 ms.
  std::vector<double> waits_ms;
  for (int i = 0; i < 12; ++i) {
    waits_ms.push_back(absl::ToDoubleMilliseconds(bucket.Reserve()));
  }
  const std::vector<double> expected = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200, 400};
  ASSERT_EQ(waits_ms.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(waits_ms[i], expected[i], 1e-6) << "request " << i;
  }
  // t=1 s: 5 tokens arrived, 2 of them already promised (the 11th and 12th):
  // 3 go at once, the 4th waits 200 ms.
  clock.Advance(absl::Seconds(1));
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(absl::ToDoubleMilliseconds(bucket.Reserve()), 0, 1e-6);
  }
  EXPECT_NEAR(absl::ToDoubleMilliseconds(bucket.Reserve()), 200, 1e-6);
  // t=1.1 s: half a token arrived since; the balance is -1 + 0.5 = -0.5, the
  // next request makes it -1.5: it waits 1.5 / 5 s = 300 ms.
  clock.Advance(absl::Milliseconds(100));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(bucket.Reserve()), 300, 1e-6);
  // t=1 h: the bucket refills to its burst and no further.
  clock.Advance(absl::Hours(1));
  for (int i = 0; i < 10; ++i) {
    EXPECT_NEAR(absl::ToDoubleMilliseconds(bucket.Reserve()), 0, 1e-6);
  }
  EXPECT_NEAR(absl::ToDoubleMilliseconds(bucket.Reserve()), 200, 1e-6);
}

TEST(TokenBucketTest, NoLimitWhenQpsIsZero) {
  VirtualClock clock;
  TokenBucket bucket(0, 1, clock);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
}

TEST(StatusFromAnswerTest, MapsKubernetesStatusesByCodeAndReason) {
  struct Case {
    int code;
    std::string body;
    absl::StatusCode want;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {422,
       R"j({"kind":"Status","apiVersion":"v1","status":"Failure",
           "message":"Job.batch \"ty-1-0\" is invalid: spec.parallelism: Invalid value: -1",
           "reason":"Invalid","details":{"name":"ty-1-0","group":"batch","kind":"Job",
           "causes":[{"reason":"FieldValueInvalid","message":"Invalid value: -1: must be greater than or equal to 0","field":"spec.parallelism"},
                     {"reason":"FieldValueRequired","message":"Required value","field":"spec.template.spec.containers"}]},
           "code":422})j",
       absl::StatusCode::kInvalidArgument,
       {"HTTP 422 Invalid", "spec.parallelism: Invalid value: -1: must be",
        "spec.template.spec.containers: Required value"}},
      {400,
       R"j({"kind":"Status","status":"Failure","message":"strict decoding error: unknown field \"spec.foo\"","reason":"BadRequest","code":400})j",
       absl::StatusCode::kInvalidArgument,
       {"BadRequest", "unknown field \"spec.foo\""}},
      {401,
       R"j({"kind":"Status","message":"Unauthorized","reason":"Unauthorized","code":401})j",
       absl::StatusCode::kUnauthenticated,
       {"Unauthorized"}},
      {403,
       R"j({"kind":"Status","message":"jobs.batch is forbidden: User \"system:serviceaccount:trainyard:dispatcher\" cannot create resource","reason":"Forbidden","code":403})j",
       absl::StatusCode::kPermissionDenied,
       {"Forbidden", "cannot create"}},
      {404,
       R"j({"kind":"Status","message":"pods \"x\" not found","reason":"NotFound","code":404})j",
       absl::StatusCode::kNotFound,
       {"pods \"x\" not found"}},
      {409,
       R"j({"kind":"Status","message":"jobs.batch \"ty-1-0\" already exists","reason":"AlreadyExists","code":409})j",
       absl::StatusCode::kAlreadyExists,
       {"already exists"}},
      {409,
       R"j({"kind":"Status","message":"Operation cannot be fulfilled on jobs.batch \"ty-1-0\": the object has been modified","reason":"Conflict","code":409})j",
       absl::StatusCode::kAborted,
       {"Conflict", "has been modified"}},
      {410,
       R"j({"kind":"Status","message":"too old resource version: 5 (10)","reason":"Expired","code":410})j",
       absl::StatusCode::kOutOfRange,
       {"too old resource version", "resourceVersion expired"}},
      {429,
       R"j({"kind":"Status","message":"Too many requests","reason":"TooManyRequests","code":429})j",
       absl::StatusCode::kResourceExhausted,
       {"TooManyRequests"}},
      {500,
       R"j({"kind":"Status","message":"etcdserver: leader changed","reason":"InternalError","code":500})j",
       absl::StatusCode::kUnavailable,
       {"etcdserver: leader changed"}},
      {504,
       R"j({"kind":"Status","message":"request timed out","reason":"Timeout","code":504})j",
       absl::StatusCode::kUnavailable,
       {"HTTP 504 Timeout: request timed out"}},
      {503, "", absl::StatusCode::kUnavailable, {"HTTP 503: empty answer"}},
      // A proxy in front of the API server answering with HTML.
      {502,
       "<html>\r\n<head><title>502 Bad "
       "Gateway</title></head>\r\n<body>nginx</body></html>",
       absl::StatusCode::kUnavailable,
       {"HTTP 502: the answer is not a Kubernetes Status: \"<html>  "
        "<head><title>502 Bad Gateway"}},
      // A Status of an unexpected shape: fields of the wrong types.
      {404,
       R"j({"kind":"Status","message":42,"reason":["NotFound"],"details":{"causes":"x"}})j",
       absl::StatusCode::kNotFound,
       {"a Status without reason or message: "
        "{\"kind\":\"Status\",\"message\":42"}},
      {418,
       R"j({"kind":"Status","message":"teapot","reason":"Teapot"})j",
       absl::StatusCode::kUnknown,
       {"HTTP 418 Teapot: teapot"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const absl::Status s = StatusFromAnswer(
        "prod-a", "POST /apis/batch/v1/namespaces/t/jobs", c.code, c.body);
    EXPECT_EQ(s.code(), c.want) << s;
    EXPECT_THAT(Msg(s), HasSubstr("kubernetes cluster prod-a: POST "
                                  "/apis/batch/v1/namespaces/t/jobs: HTTP "));
    for (const std::string& want : c.says) EXPECT_THAT(Msg(s), HasSubstr(want));
  }
  EXPECT_TRUE(IsExpired(StatusFromAnswer("c", "GET /", 410, "")));
  EXPECT_FALSE(IsExpired(StatusFromAnswer("c", "GET /", 404, "")));
}

TEST(StatusFromAnswerTest, ALongBodyIsCutInTheMessage) {
  const std::string body(10000, 'x');
  const absl::Status s = StatusFromAnswer("c", "GET /", 500, body);
  EXPECT_THAT(Msg(s), HasSubstr(std::string(200, 'x') + "..."));
  EXPECT_THAT(Msg(s), Not(HasSubstr(std::string(201, 'x'))));
}

TEST(KubeClientUrlTest, EscapesQueryValues) {
  EXPECT_EQ(KubeClient::Url("/api/v1/namespaces/t/pods",
                            {{"labelSelector", "trainyard.dev/job=j1,app!=x"},
                             {"limit", "500"},
                             {"continue", "eyJ2Ijo+/="}}),
            "/api/v1/namespaces/t/pods?labelSelector=trainyard.dev%2Fjob%3Dj1%"
            "2Capp%21%3Dx&limit=500&continue=eyJ2Ijo%2B%2F%3D");
  EXPECT_EQ(KubeClient::Url("/x?a=1", {{"b", "2"}}), "/x?a=1&b=2");
  EXPECT_EQ(KubeClient::Url("/x", {}), "/x");
}

TEST(KubeClientBackoffTest, DoublesUpToTheCapWithJitterHalvingAtMost) {
  double jitter = 0;
  KubeClient client(KubeConfig{.server = "http://127.0.0.1:1"},
                    {.initial_backoff = absl::Milliseconds(200),
                     .max_backoff = absl::Seconds(2),
                     .jitter = [&] { return jitter; }});
  // 200, 400, 800, 1600, then the 2 s cap.
  const std::vector<int64_t> want_ms = {200, 400, 800, 1600, 2000, 2000};
  for (size_t i = 0; i < want_ms.size(); ++i) {
    EXPECT_EQ(client.Backoff(static_cast<int>(i)),
              absl::Milliseconds(want_ms[i]));
  }
  jitter = 0.5;  // a quarter off
  EXPECT_EQ(client.Backoff(0), absl::Milliseconds(150));
  EXPECT_EQ(client.Backoff(10), absl::Milliseconds(1500));
}

TEST(InformerTransformTest, StripsManagedFieldsAndLastAppliedOnly) {
  nlohmann::json pod = nlohmann::json::parse(R"j({
    "metadata": {"name": "p", "namespace": "t", "resourceVersion": "7",
      "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                      "keep": "yes"},
      "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
    "status": {"phase": "Running"}})j");
  StripManagedFields(pod);
  EXPECT_EQ(pod, nlohmann::json::parse(R"j({
    "metadata": {"name": "p", "namespace": "t", "resourceVersion": "7",
      "annotations": {"keep": "yes"}},
    "status": {"phase": "Running"}})j"));
  EXPECT_EQ(ObjectKey(pod), "t/p");
  EXPECT_EQ(ObjectKey({{"metadata", {{"name", "node-1"}}}}), "node-1");
  nlohmann::json odd = {{"metadata", 3}};
  StripManagedFields(odd);  // not an object's metadata: left alone
  EXPECT_EQ(odd, nlohmann::json({{"metadata", 3}}));
}

}  // namespace
}  // namespace trainyard::dispatcher::kubernetes
