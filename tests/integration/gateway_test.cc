// The REST/JSON gateway over a real api (PostgreSQL, Redis): every route
// reaches its gRPC method, errors map to HTTP with the field named, auth and
// tenants are the api's, limits, server-sent events resume with Last-Event-ID,
// the console's files stay inside their folder.
#include "services/gateway/gateway.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/gateway/openapi.h"
#include "services/gateway/routes.h"
#include "tests/integration/api_test_harness.h"
#include "tests/support/http/raw_http.h"
#include "trainyard/v1/accounting.grpc.pb.h"
#include "trainyard/v1/job.grpc.pb.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(gateway::GatewayOptions options,
             ApiHarness::Options harness = {}) {
    gateway_.reset();
    if (!api_) {
      auto started = ApiHarness::Start(harness);
      ASSERT_TRUE(started.ok()) << started.status();
      api_ = *std::move(started);
      ASSERT_TRUE(api_->SeedTenant("acme").ok());
      ASSERT_TRUE(api_->SeedTenant("rival").ok());
    }
    options.listen_address = "127.0.0.1:0";
    options.channel = api_->channel();
    // A registry of the gateway's own: the process-wide one holds collectors of
    // api servers that earlier tests have destroyed.
    options.metrics = &metrics_;
    options.keepalive_interval = absl::Milliseconds(200);
    auto gw = gateway::Gateway::Start(std::move(options));
    ASSERT_TRUE(gw.ok()) << gw.status();
    gateway_ = *std::move(gw);
  }

  httplib::Client Client(const std::string& token = "") {
    httplib::Client c("127.0.0.1", gateway_->port());
    c.set_read_timeout(10, 0);
    if (!token.empty()) c.set_bearer_token_auth(token);
    return c;
  }

  static json Json(const httplib::Result& r) {
    EXPECT_TRUE(r);
    if (!r) return json();
    return json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  }

  runtime::MetricsRegistry metrics_;
  std::unique_ptr<ApiHarness> api_;
  std::unique_ptr<gateway::Gateway> gateway_;
};

// Sends `raw` as it is (no client-side normalization of the path) and returns
// the response (all the server sent until it closed, or 5 s); `first_byte` (if
// set) gets the time the first byte of the response came, counted from the
// send.
TEST_F(GatewayTest, EveryRouteReachesItsGrpcMethod) {
  auto table = gateway::RouteTable::Build(gateway::ApiServices());
  ASSERT_TRUE(table.ok());
  // Without credentials every method answers UNAUTHENTICATED: the route found
  // its method (a route to a method the api does not serve would answer 501
  // UNIMPLEMENTED, a wrong path 404).
  int checked = 0;
  for (const gateway::Route& route : table->routes()) {
    std::string path;
    for (const auto& s : route.path.segments()) {
      absl::StrAppend(&path, "/", s.literal == "*" ? "x1" : s.literal);
    }
    if (!route.path.verb().empty())
      absl::StrAppend(&path, ":", route.path.verb());
    std::string body = route.body.empty() ? "" : "{}";
    auto r = RawHttpExchange(
        gateway_->port(),
        absl::StrCat(route.http_method, " ", path,
                     " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n",
                     body.empty() ? "" : "Content-Type: application/json\r\n",
                     "Content-Length: ", body.size(), "\r\n\r\n", body));
    EXPECT_THAT(r, HasSubstr("HTTP/1.1 401"))
        << route.http_method << " " << path << "\n"
        << r;
    EXPECT_THAT(r, HasSubstr("\"status\":\"UNAUTHENTICATED\""))
        << route.grpc_path;
    ++checked;
  }
  int methods = 0;
  for (const auto* service : gateway::ApiServices())
    methods += service->method_count();
  EXPECT_EQ(checked, methods);
}

TEST_F(GatewayTest, TranscodesSubmitGetAndListAsTheGrpcApiSeesThem) {
  const std::string member =
      api_->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  auto c = Client(member);
  auto submitted = c.Post("/v1/tenants/acme/jobs", R"({
      "clientRequestId": "rest-1",
      "job": {"displayName": "<script>alert(\"x\")</script>", "labels": {"team": "vision"},
              "spec": {"project": "default", "queue": "default", "workers": 1, "jobSet": "sweep",
                       "command": ["python", "train.py"],
                       "resources": {"gpus": 1, "cpuMillis": 4000, "memoryBytes": "17179869184"}}}})",
                          "application/json");
  ASSERT_TRUE(submitted);
  ASSERT_EQ(submitted->status, 200) << submitted->body;
  json job = Json(submitted)["job"];
  std::string name = job["name"];
  ASSERT_THAT(name, HasSubstr("tenants/acme/jobs/"));
  // The job as the gRPC API reads it is the job the REST call described.
  int64_t id = std::stoll(name.substr(name.rfind('/') + 1));
  trainyard::v1::Job read = api_->GetJob(member, "acme", id);
  EXPECT_EQ(read.display_name(), "<script>alert(\"x\")</script>");
  EXPECT_EQ(read.labels().at("team"), "vision");
  EXPECT_EQ(read.spec().job_set(), "sweep");
  EXPECT_EQ(read.spec().resources().memory_bytes(), int64_t{17179869184});
  EXPECT_EQ(read.spec().command_size(), 2);

  // GET of the job: the standard JSON mapping of the same message.
  json got = Json(c.Get(("/v1/" + name).c_str()));
  EXPECT_EQ(got["name"], name);
  EXPECT_EQ(got["displayName"], "<script>alert(\"x\")</script>");
  EXPECT_EQ(got["spec"]["resources"]["memoryBytes"], "17179869184");
  EXPECT_EQ(got["state"], trainyard::v1::JobState_Name(read.state()));

  // List with filters from the query string, as the gRPC List with the same
  // filters.
  ASSERT_NE(api_->SubmitJob(member, MinimalSubmit("acme", "grpc-2")), 0);
  json listed = Json(c.Get(
      "/v1/tenants/acme/jobs?jobSet=sweep&pageSize=10&labels[team]=vision"));
  ASSERT_EQ(listed["jobs"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["jobs"][0]["name"], name);
  json all = Json(c.Get("/v1/tenants/acme/jobs?pageSize=1"));
  EXPECT_EQ(all["jobs"].size(), 1u);
  ASSERT_TRUE(all.contains("nextPageToken"));
  json rest = Json(c.Get(
      absl::StrCat("/v1/tenants/acme/jobs?pageSize=1&pageToken=",
                   httplib::detail::encode_query_param(all["nextPageToken"]))
          .c_str()));
  ASSERT_EQ(rest["jobs"].size(), 1u);
  EXPECT_NE(rest["jobs"][0]["name"], all["jobs"][0]["name"]);

  // Cancel through its custom verb.
  auto cancelled = c.Post(("/v1/" + name + ":cancel").c_str(),
                          R"({"reason":"done"})", "application/json");
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(cancelled->status, 200) << cancelled->body;
  EXPECT_TRUE(api_->GetJob(member, "acme", id).cancel_requested() ||
              api_->GetJob(member, "acme", id).state() ==
                  trainyard::v1::JOB_STATE_CANCELLED);
}

TEST_F(GatewayTest, ErrorsCarryTheGrpcCodeHttpStatusFieldAndReason) {
  const std::string member =
      api_->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  const std::string viewer =
      api_->Token("users/vic", trainyard::v1::ROLE_VIEWER, "acme");
  auto c = Client(member);

  // INVALID_ARGUMENT: the same field, reason and message as the gRPC call's
  // ErrorInfo.
  trainyard::v1::SubmitJobRequest bad = MinimalSubmit("acme", "bad-1");
  bad.mutable_job()->mutable_spec()->mutable_resources()->set_cpu_millis(0);
  auto ctx = ApiHarness::Context(member);
  trainyard::v1::SubmitJobResponse unused;
  grpc::Status status = api_->jobs()->Submit(ctx.get(), bad, &unused);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  trainyard::v1::ErrorInfo info = ErrorInfoOf(*ctx);
  auto r = c.Post(
      "/v1/tenants/acme/jobs",
      R"({"clientRequestId":"bad-1","job":{"spec":{"project":"default","queue":"default",
                      "workers":1,"command":["python","train.py"],
                      "resources":{"gpus":1,"cpuMillis":0,"memoryBytes":"17179869184"}}}})",
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  json e = Json(r)["error"];
  EXPECT_EQ(e["code"], 400);
  EXPECT_EQ(e["status"], "INVALID_ARGUMENT");
  EXPECT_EQ(e["field"], info.field());
  EXPECT_EQ(e["reason"], info.reason());
  EXPECT_EQ(e["message"], status.error_message());
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");

  // The transcoder's own refusals name the field too.
  json unknown =
      Json(c.Post("/v1/tenants/acme/jobs", R"({"job":{"colour":"red"}})",
                  "application/json"))["error"];
  EXPECT_EQ(unknown["field"], "job.colour");
  EXPECT_EQ(unknown["status"], "INVALID_ARGUMENT");
  json badparam = Json(c.Get("/v1/tenants/acme/jobs?pageSize=lots"))["error"];
  EXPECT_EQ(badparam["field"], "pageSize");
  auto text = c.Post("/v1/tenants/acme/jobs", "{}", "text/plain");
  EXPECT_EQ(text->status, 400);
  EXPECT_THAT(text->body, HasSubstr("Content-Type application/json"));

  // NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED and the gateway's 404/405.
  EXPECT_EQ(c.Get("/v1/tenants/acme/jobs/999999")->status, 404);
  auto viewer_cancel = Client(viewer).Post("/v1/tenants/acme/jobs/1:cancel",
                                           "{}", "application/json");
  EXPECT_EQ(viewer_cancel->status, 403) << viewer_cancel->body;
  EXPECT_EQ(Json(viewer_cancel)["error"]["status"], "PERMISSION_DENIED");
  auto anonymous = Client("not-a-token").Get("/v1/whoami");
  EXPECT_EQ(anonymous->status, 401);
  auto wrong_method = c.Delete("/v1/tenants/acme/jobs/1:cancel");
  EXPECT_EQ(wrong_method->status, 405);
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  auto nowhere = c.Get("/v1/no/such/thing");
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_EQ(Json(nowhere)["error"]["status"], "NOT_FOUND");
}

TEST_F(GatewayTest, RateLimitsAre429WithRetryAfter) {
  api_.reset();
  ApiHarness::Options h;
  h.server.default_submit_rate = 0.01;
  h.server.default_submit_burst = 1;
  Start({}, h);
  const std::string member =
      api_->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  auto c = Client(member);
  auto submit = [&](const std::string& id) {
    return c.Post("/v1/tenants/acme/jobs",
                  absl::StrCat(R"({"clientRequestId":")", id,
                               R"(","job":{"spec":{"project":"default",
                      "queue":"default","workers":1,"command":["python"],
                      "resources":{"gpus":1,"cpuMillis":1000,"memoryBytes":"1000000000"}}}})"),
                  "application/json");
  };
  EXPECT_EQ(submit("a")->status, 200);
  auto limited = submit("b");
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->status, 429) << limited->body;
  json e = Json(limited)["error"];
  EXPECT_EQ(e["status"], "RESOURCE_EXHAUSTED");
  EXPECT_EQ(e["reason"], "RATE_LIMITED");
  ASSERT_TRUE(e.contains("retryDelay"));
  int retry_after = std::stoi(limited->get_header_value("Retry-After"));
  EXPECT_GE(retry_after, 1);
}

TEST_F(GatewayTest, OversizedBodiesAndSlowClientsAreRefused) {
  gateway::GatewayOptions options;
  options.http.max_body_bytes = 4096;
  options.http.read_timeout = absl::Seconds(1);
  Start(options);
  const std::string member =
      api_->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  auto c = Client(member);
  std::string big =
      absl::StrCat(R"({"clientRequestId":"big","job":{"displayName":")",
                   std::string(5000, 'x'), R"("}})");
  auto r = c.Post("/v1/tenants/acme/jobs", big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_THAT(r->body, HasSubstr("request body too large"));
  json listed = Json(c.Get("/v1/tenants/acme/jobs"));
  EXPECT_FALSE(listed.contains("jobs")) << "the oversized submit created a job";

  // A client that stops mid-body is cut after the read timeout, and nothing is
  // submitted.
  std::chrono::steady_clock::duration answered{};
  std::string r2 = RawHttpExchange(
      gateway_->port(),
      absl::StrCat(
          "POST /v1/tenants/acme/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: "
          "Bearer ",
          member,
          "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
          R"({"clientRequestId":"slow")"),
      &answered);
  EXPECT_THAT(r2, HasSubstr("HTTP/1.1 400"));
  EXPECT_GE(answered, std::chrono::milliseconds(900));
  EXPECT_LT(answered, std::chrono::seconds(3));
  EXPECT_FALSE(Json(c.Get("/v1/tenants/acme/jobs")).contains("jobs"));
}

TEST_F(GatewayTest, ExportIsADownloadOfTheSameBytesAsTheGrpcStream) {
  const std::string finance =
      api_->Token("users/fin", trainyard::v1::ROLE_FINANCE, "acme");
  trainyard::v1::ExportReportRequest req;
  req.mutable_report()->set_parent("tenants/acme");
  *req.mutable_report()->mutable_start_time() =
      google::protobuf::util::TimeUtil::SecondsToTimestamp(1793491200);
  *req.mutable_report()->mutable_end_time() =
      google::protobuf::util::TimeUtil::SecondsToTimestamp(1796083200);
  req.set_format(trainyard::v1::REPORT_FORMAT_CSV);
  std::string grpc_bytes;
  {
    auto ctx = ApiHarness::Context(finance);
    auto stub = trainyard::v1::AccountingService::NewStub(api_->channel());
    auto reader = stub->ExportReport(ctx.get(), req);
    trainyard::v1::ExportReportResponse chunk;
    while (reader->Read(&chunk)) grpc_bytes += chunk.data();
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_FALSE(grpc_bytes.empty());
  auto r = Client(finance).Post(
      "/v1/tenants/acme/report:export",
      R"({"report":{"startTime":"2026-11-01T00:00:00Z","endTime":"2026-12-01T00:00:00Z"},
          "format":"REPORT_FORMAT_CSV"})",
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/octet-stream");
  EXPECT_EQ(r->get_header_value("Content-Disposition"), "attachment");
  EXPECT_EQ(r->body, grpc_bytes);
  // A viewer of another tenant gets an error, not a file.
  const std::string rival =
      api_->Token("users/rob", trainyard::v1::ROLE_MEMBER, "rival");
  auto denied = Client(rival).Post("/v1/tenants/acme/report:export",
                                   R"({"format":"REPORT_FORMAT_CSV"})",
                                   "application/json");
  EXPECT_THAT(denied->status, ::testing::AnyOf(403, 404));
  EXPECT_EQ(denied->get_header_value("Content-Type"), "application/json");
}

TEST_F(GatewayTest, WatchIsServerSentEventsResumableWithLastEventId) {
  const std::string member =
      api_->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  const std::string rival =
      api_->Token("users/rob", trainyard::v1::ROLE_MEMBER, "rival");
  ASSERT_NE(api_->SubmitJob(member, MinimalSubmit("acme", "w1")), 0);
  ASSERT_NE(api_->SubmitJob(rival, MinimalSubmit("rival", "r1")), 0);
  ASSERT_NE(api_->SubmitJob(member, MinimalSubmit("acme", "w2")), 0);

  // The oracle: the gRPC Watch of the same caller from the start.
  std::vector<uint64_t> grpc_ids;
  {
    auto ctx = ApiHarness::Context(member);
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    trainyard::v1::WatchJobsRequest req;
    req.set_parent("tenants/-");
    req.set_from_start(true);
    auto reader = api_->jobs()->Watch(ctx.get(), req);
    trainyard::v1::WatchJobsResponse e;
    while (reader->Read(&e)) grpc_ids.push_back(e.event().sequence());
    reader->Finish().IgnoreError();
  }
  ASSERT_GE(grpc_ids.size(), 2u);

  // Reads the event stream until `want` events came (or 5 s), as (id, tenant)
  // pairs.
  auto read_events = [&](const std::string& last_event_id, size_t want) {
    std::vector<std::pair<std::string, std::string>> events;
    std::string buffer;
    auto c = Client(member);
    httplib::Headers headers;
    if (!last_event_id.empty()) headers.emplace("Last-Event-ID", last_event_id);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    auto r = c.Get("/v1/tenants/-/jobs:watch?fromStart=true", headers,
                   [&](const char* data, size_t n) {
                     buffer.append(data, n);
                     size_t end;
                     while ((end = buffer.find("\n\n")) != std::string::npos) {
                       std::string block = buffer.substr(0, end);
                       buffer.erase(0, end + 2);
                       if (!absl::StartsWith(block, "id: ")) continue;
                       std::string id = block.substr(4, block.find('\n') - 4);
                       json data =
                           json::parse(block.substr(block.find("data: ") + 6));
                       events.emplace_back(id, data["event"]["tenant"]);
                     }
                     return events.size() < want &&
                            std::chrono::steady_clock::now() < deadline;
                   });
    return events;
  };
  auto first = read_events("", grpc_ids.size());
  ASSERT_EQ(first.size(), grpc_ids.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].first, absl::StrCat(grpc_ids[i]));
    EXPECT_EQ(first[i].second, "acme")
        << "another tenant's event reached the stream";
  }
  // Resume after the first event: the rest, none twice.
  auto resumed = read_events(first[0].first, grpc_ids.size() - 1);
  ASSERT_EQ(resumed.size(), grpc_ids.size() - 1);
  for (size_t i = 0; i < resumed.size(); ++i)
    EXPECT_EQ(resumed[i].first, first[i + 1].first);

  // A Last-Event-ID that is no event id, and another tenant's stream, are
  // refused up front.
  httplib::Headers junk = {{"Last-Event-ID", "yesterday"}};
  auto bad = Client(member).Get("/v1/tenants/acme/jobs:watch", junk);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json(bad)["error"]["field"], "Last-Event-ID");
  auto other = Client(member).Get("/v1/tenants/rival/jobs:watch");
  EXPECT_THAT(other->status, ::testing::AnyOf(403, 404));
}

TEST_F(GatewayTest, StopEndsOpenStreamsPromptly) {
  const std::string member =
      api_->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  std::atomic<bool> opened{false};
  std::thread watcher([&] {
    auto c = Client(member);
    c.Get("/v1/tenants/acme/jobs:watch", [&](const char*, size_t) {
      opened = true;
      return true;
    });
  });
  for (int i = 0; i < 100 && !opened; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(opened.load()) << "no keepalive reached the client";
  auto start = std::chrono::steady_clock::now();
  gateway_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(7));
  watcher.join();
}

TEST_F(GatewayTest, AStreamWhoseClientLeftEndsAndFreesItsSlot) {
  gateway::GatewayOptions options;
  options.max_streams = 1;
  Start(options);
  const std::string member =
      api_->Token("users/ana", trainyard::v1::ROLE_MEMBER, "acme");
  // A watcher reads the first keepalive and leaves (the Watch itself never
  // ends).
  int first_status = 0;
  Client(member).Get(
      "/v1/tenants/acme/jobs:watch",
      [&](const httplib::Response& r) {
        first_status = r.status;
        return true;
      },
      [](const char*, size_t) { return false; });
  ASSERT_EQ(first_status, 200);
  // Its only slot comes free once the gateway's next write fails: the call
  // is cancelled rather than waited for.
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Client(member).Get(
        "/v1/tenants/acme/jobs:watch",
        [&](const httplib::Response& r) {
          status = r.status;
          return false;
        },
        [](const char*, size_t) { return false; });
  }
  EXPECT_EQ(status, 200) << "the stream slot was never freed";
}

TEST_F(GatewayTest, ConsoleFilesStayInsideTheirFolderWithSecurityHeaders) {
  namespace fs = std::filesystem;
  fs::path base =
      fs::path(::testing::TempDir()) / absl::StrCat("console-", getpid());
  fs::remove_all(base);
  fs::create_directories(base / "dist" / "assets");
  std::ofstream(base / "dist" / "index.html")
      << "<!doctype html><title>Trainyard</title>";
  std::ofstream(base / "dist" / "assets" / "app-1234.js") << "console.log(1)";
  std::ofstream(base / "secret.txt") << "TOP-SECRET";
  fs::create_symlink(base / "secret.txt", base / "dist" / "link.txt");
  gateway::GatewayOptions options;
  options.console_dir = (base / "dist").string();
  Start(options);
  auto c = Client();

  auto index = c.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_THAT(index->body, HasSubstr("<title>Trainyard</title>"));
  EXPECT_EQ(index->get_header_value("Content-Type"),
            "text/html; charset=utf-8");
  EXPECT_THAT(index->get_header_value("Content-Security-Policy"),
              HasSubstr("script-src 'self'"));
  EXPECT_THAT(index->get_header_value("Content-Security-Policy"),
              HasSubstr("frame-ancestors 'none'"));
  EXPECT_THAT(index->get_header_value("Content-Security-Policy"),
              Not(HasSubstr("unsafe")));
  EXPECT_EQ(index->get_header_value("X-Frame-Options"), "DENY");
  EXPECT_EQ(index->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(index->get_header_value("Cache-Control"), "no-cache");
  // A page of the app is index.html; an asset is itself, cached for good.
  EXPECT_THAT(c.Get("/jobs/tenants/acme/jobs/7")->body,
              HasSubstr("<title>Trainyard</title>"));
  auto js = c.Get("/assets/app-1234.js");
  EXPECT_EQ(js->body, "console.log(1)");
  EXPECT_EQ(js->get_header_value("Content-Type"),
            "text/javascript; charset=utf-8");
  EXPECT_THAT(js->get_header_value("Cache-Control"), HasSubstr("immutable"));
  EXPECT_EQ(c.Get("/assets/missing.js")->status, 404);
  EXPECT_EQ(c.Post("/", "x", "text/plain")->status, 400);

  // A bundle goes out gzip-compressed to a browser (which offers brotli
  // first), from memory; a new build of the file is served at once.
  std::string bundle;
  for (int i = 0; i < 2000; ++i)
    absl::StrAppend(&bundle, "console.log(", i % 10, ");\n");
  std::ofstream(base / "dist" / "assets" / "bundle.js") << bundle;
  httplib::Client raw("127.0.0.1", gateway_->port());
  raw.set_decompress(false);
  const httplib::Headers browser = {
      {"Accept-Encoding", "gzip, deflate, br, zstd"}};
  auto gz = raw.Get("/assets/bundle.js", browser);
  ASSERT_TRUE(gz);
  EXPECT_EQ(gz->get_header_value("Content-Encoding"), "gzip");
  EXPECT_LT(gz->body.size(), bundle.size() / 3);
  EXPECT_EQ(raw.Get("/assets/bundle.js")->body, bundle);  // no Accept-Encoding
  // httplib's client inflates what the gateway deflated.
  httplib::Client inflating("127.0.0.1", gateway_->port());
  auto inflated = inflating.Get("/assets/bundle.js", browser);
  ASSERT_TRUE(inflated);
  EXPECT_EQ(inflated->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(inflated->body, bundle);
  std::ofstream(base / "dist" / "assets" / "bundle.js") << bundle << "var z=1;";
  auto rebuilt = inflating.Get("/assets/bundle.js", browser);
  ASSERT_TRUE(rebuilt);
  EXPECT_EQ(rebuilt->body, bundle + "var z=1;");

  // No way out: dot segments (plain or percent-encoded) and a symlink that
  // leads outside.
  for (const char* path :
       {"/../secret.txt", "/assets/../../secret.txt",
        "/assets/%2e%2e/%2e%2e/secret.txt", "/%2e%2e/secret.txt", "/link.txt",
        "/..%5csecret.txt"}) {
    std::string r = RawHttpExchange(
        gateway_->port(), absl::StrCat("GET ", path,
                                       " HTTP/1.1\r\nHost: x\r\nConnection: "
                                       "close\r\n\r\n"));
    EXPECT_THAT(r, Not(HasSubstr("TOP-SECRET"))) << path;
    EXPECT_THAT(r, ::testing::AnyOf(HasSubstr("HTTP/1.1 400"),
                                    HasSubstr("HTTP/1.1 404")))
        << path << "\n"
        << r;
  }
  fs::remove_all(base);
}

TEST_F(GatewayTest, CorsIsOffByDefaultAndAnsweredForListedOrigins) {
  auto c = Client();
  httplib::Headers origin = {{"Origin", "https://evil.example"}};
  auto preflight = c.Options("/v1/whoami", origin);
  EXPECT_EQ(preflight->status, 403);
  auto get = c.Get("/v1/whoami", origin);
  EXPECT_EQ(get->get_header_value("Access-Control-Allow-Origin"), "");

  gateway::GatewayOptions options;
  options.cors_origins = {"https://console.example"};
  Start(options);
  auto cors = Client();
  httplib::Headers ok = {{"Origin", "https://console.example"},
                         {"Access-Control-Request-Method", "POST"}};
  auto allowed = cors.Options("/v1/tenants/acme/jobs", ok);
  EXPECT_EQ(allowed->status, 204);
  EXPECT_EQ(allowed->get_header_value("Access-Control-Allow-Origin"),
            "https://console.example");
  EXPECT_THAT(allowed->get_header_value("Access-Control-Allow-Headers"),
              HasSubstr("Authorization"));
  EXPECT_EQ(cors.Options("/v1/whoami", origin)->status, 403);
  EXPECT_EQ(cors.Get("/v1/whoami", ok)
                ->get_header_value("Access-Control-Allow-Origin"),
            "https://console.example");
}

TEST_F(GatewayTest, ServesTheOpenApiDocumentAndHealth) {
  auto c = Client();
  json doc = Json(c.Get("/v1/openapi.json"));
  EXPECT_EQ(doc["openapi"], "3.0.3");
  EXPECT_TRUE(doc["paths"].contains("/v1/tenants/{tenant}/jobs"));
  EXPECT_TRUE(doc["paths"]["/v1/tenants/{tenant}/jobs"].contains("post"));
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/readyz")->status, 200);
  EXPECT_EQ(c.Get("/v1/whoami")->status, 401);
  EXPECT_THAT(c.Get("/metrics")->body,
              HasSubstr("trainyard_gateway_requests_total{route=\"GET "
                        "/v1/whoami\",code=\"401\"} 1"));
}

}  // namespace
}  // namespace trainyard::testing
