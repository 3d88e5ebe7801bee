#include "services/gateway/routes.h"

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "services/gateway/openapi.h"
#include "trainyard/v1/accounting.grpc.pb.h"
#include "trainyard/v1/admin.grpc.pb.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/job.grpc.pb.h"
#include "trainyard/v1/queue.grpc.pb.h"

namespace trainyard::gateway {
namespace {

using ::testing::HasSubstr;
using Bindings = std::vector<std::pair<std::string, std::string>>;

std::vector<const google::protobuf::ServiceDescriptor*> Services() {
  return ApiServices();
}

const RouteTable& Table() {
  static const RouteTable* table =
      new RouteTable(*RouteTable::Build(Services()));
  return *table;
}

template <typename T>
T Parse(const std::string& text) {
  T m;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &m)) << text;
  return m;
}

// The request `method path?query body` becomes, compared with the expected
// message.
std::unique_ptr<google::protobuf::Message> Transcode(
    const std::string& method, const std::string& path, const Bindings& query,
    const std::string& body, std::string* grpc_path = nullptr) {
  auto match = Table().Match(method, path);
  EXPECT_TRUE(match.ok()) << match.status();
  if (!match.ok()) return nullptr;
  if (grpc_path) *grpc_path = match->route->grpc_path;
  auto request = BuildRequest(*match->route, match->bindings, query, body);
  EXPECT_TRUE(request.ok()) << request.status();
  return request.ok() ? std::move(*request) : nullptr;
}

TEST(PathTemplateTest, ParsesAndMatchesVariablesAndVerbs) {
  auto t = PathTemplate::Parse("/v1/{name=tenants/*/jobs/*}:cancel");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->verb(), "cancel");
  Bindings b;
  ASSERT_TRUE(t->Match("/v1/tenants/acme/jobs/42:cancel", &b));
  EXPECT_EQ(b, (Bindings{{"name", "tenants/acme/jobs/42"}}));
  EXPECT_FALSE(t->Match("/v1/tenants/acme/jobs/42", &b));
  EXPECT_FALSE(t->Match("/v1/tenants/acme/jobs/42:hold", &b));
  EXPECT_FALSE(t->Match("/v1/tenants/acme/queues/42:cancel", &b));
  EXPECT_FALSE(t->Match("/v1/tenants//jobs/42:cancel", &b));

  auto list = PathTemplate::Parse("/v1/{parent=tenants/*}/jobs");
  ASSERT_TRUE(list.ok());
  ASSERT_TRUE(list->Match("/v1/tenants/-/jobs", &b));
  EXPECT_EQ(b, (Bindings{{"parent", "tenants/-"}}));
  EXPECT_FALSE(list->Match("/v1/tenants/acme/jobs:watch", &b));
  EXPECT_FALSE(list->Match("/v1/tenants/acme/jobs/", &b));

  auto nested = PathTemplate::Parse("/v1/{queue.name=tenants/*/queues/*}");
  ASSERT_TRUE(nested.ok());
  ASSERT_TRUE(nested->Match("/v1/tenants/a/queues/q", &b));
  EXPECT_EQ(b, (Bindings{{"queue.name", "tenants/a/queues/q"}}));

  auto rest = PathTemplate::Parse("/files/{path=**}");
  ASSERT_TRUE(rest.ok());
  ASSERT_TRUE(rest->Match("/files/a/b/c", &b));
  EXPECT_EQ(b, (Bindings{{"path", "a/b/c"}}));

  for (const char* bad : {"v1/x", "/v1/{name", "/v1/{=a}", "/v1//x",
                          "/v1/x:", "/v1/**/x", "/v1/a{name}"}) {
    EXPECT_FALSE(PathTemplate::Parse(bad).ok()) << bad;
  }
}

TEST(RouteTableTest, EveryMethodOfTheFiveServicesHasARoute) {
  int methods = 0;
  for (const auto* s : Services()) methods += s->method_count();
  EXPECT_EQ(static_cast<int>(Table().routes().size()), methods);
}

TEST(RouteTableTest, MatchesTheMostSpecificRouteAndNamesTheAllowedMethods) {
  struct Case {
    const char* method;
    const char* path;
    const char* grpc;
  } cases[] = {
      {"GET", "/v1/tenants/acme/jobs/42", "/trainyard.v1.JobService/Get"},
      {"GET", "/v1/tenants/acme/jobs/42:explain",
       "/trainyard.v1.JobService/ExplainPending"},
      {"GET", "/v1/tenants/acme/jobs/42/logs",
       "/trainyard.v1.JobService/GetLogs"},
      {"GET", "/v1/tenants/acme/jobs:watch", "/trainyard.v1.JobService/Watch"},
      {"GET", "/v1/tenants/acme/jobs", "/trainyard.v1.JobService/List"},
      {"POST", "/v1/tenants/acme/jobs", "/trainyard.v1.JobService/Submit"},
      {"POST", "/v1/tenants/acme/jobs/42:cancel",
       "/trainyard.v1.JobService/Cancel"},
      {"GET", "/v1/tenants/acme/queues/q:status",
       "/trainyard.v1.QueueService/GetQueueStatus"},
      {"GET", "/v1/tenants/acme/queues/q",
       "/trainyard.v1.QueueService/GetQueue"},
      {"GET", "/v1/tenants/acme", "/trainyard.v1.QueueService/GetTenant"},
      {"HEAD", "/v1/tenants/acme", "/trainyard.v1.QueueService/GetTenant"},
      {"GET", "/v1/whoami", "/trainyard.v1.AdminService/WhoAmI"},
      {"GET", "/v1/capacity", "/trainyard.v1.ClusterService/GetCapacity"},
      {"POST", "/v1/tenants/acme/report:export",
       "/trainyard.v1.AccountingService/ExportReport"},
      {"GET", "/v1/tenants/acme/invoices/2026-11",
       "/trainyard.v1.AccountingService/GetInvoice"},
  };
  for (const Case& c : cases) {
    auto m = Table().Match(c.method, c.path);
    ASSERT_TRUE(m.ok()) << c.method << " " << c.path << ": " << m.status();
    EXPECT_EQ(m->route->grpc_path, c.grpc) << c.method << " " << c.path;
  }
  std::vector<std::string> allowed;
  auto wrong =
      Table().Match("DELETE", "/v1/tenants/acme/jobs/42:cancel", &allowed);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(allowed, std::vector<std::string>{"POST"});
  Table().Match("PUT", "/v1/tenants/acme/queues/q", &allowed).IgnoreError();
  EXPECT_EQ(allowed, (std::vector<std::string>{"DELETE", "GET", "PATCH"}));
  EXPECT_EQ(Table().Match("GET", "/v1/nothing/here").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Table().Match("GET", "/v1/tenants/a/jobs/1/2").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(BuildRequestTest,
     QueryParametersFillScalarsRepeatedsMapsEnumsAndTimestamps) {
  auto list = Transcode("GET", "/v1/tenants/acme/jobs",
                        {{"states", "JOB_STATE_RUNNING"},
                         {"states", "2"},
                         {"labels[team]", "vision"},
                         {"labels[tier]", "a b"},
                         {"pageSize", "50"},
                         {"job_set", "sweep-1"},
                         {"view", "JOB_VIEW_FULL"}},
                        "");
  ASSERT_NE(list, nullptr);
  auto want = Parse<trainyard::v1::ListJobsRequest>(
      R"pb(parent: "tenants/acme"
           states: JOB_STATE_RUNNING
           states: 2
           labels { key: "team" value: "vision" }
           labels { key: "tier" value: "a b" }
           page_size: 50
           job_set: "sweep-1"
           view: JOB_VIEW_FULL)pb");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*list, want))
      << list->DebugString();

  auto report = Transcode("GET", "/v1/tenants/acme/report",
                          {{"startTime", "2026-11-01T00:00:00Z"},
                           {"end_time", "2026-12-01T00:00:00-05:00"},
                           {"groupBy", "REPORT_DIMENSION_PROJECT"},
                           {"includeIdle", "true"}},
                          "");
  ASSERT_NE(report, nullptr);
  auto want_report = Parse<trainyard::v1::GetReportRequest>(
      R"pb(parent: "tenants/acme"
           start_time { seconds: 1793491200 }
           end_time { seconds: 1796101200 }
           group_by: REPORT_DIMENSION_PROJECT
           include_idle: true)pb");
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(*report, want_report))
      << report->DebugString();
}

TEST(BuildRequestTest, BodiesFillTheRequestOrTheirFieldAndPathVariablesWin) {
  auto submit =
      Transcode("POST", "/v1/tenants/acme/jobs", {},
                R"({"parent":"tenants/evil","job":{"displayName":"<script>\"x"},
                                 "clientRequestId":"r1"})");
  ASSERT_NE(submit, nullptr);
  auto want = Parse<trainyard::v1::SubmitJobRequest>(
      R"pb(parent: "tenants/acme"
           job { display_name: "<script>\"x" }
           client_request_id: "r1")pb");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*submit, want))
      << submit->DebugString();

  std::string grpc;
  auto update = Transcode("PATCH", "/v1/tenants/acme/queues/q",
                          {{"updateMask", "cohort,labels"}},
                          R"({"cohort":"cohorts/c"})", &grpc);
  ASSERT_NE(update, nullptr);
  EXPECT_EQ(grpc, "/trainyard.v1.QueueService/UpdateQueue");
  auto want_update = Parse<trainyard::v1::UpdateQueueRequest>(
      R"pb(queue { name: "tenants/acme/queues/q" cohort: "cohorts/c" }
           update_mask { paths: "cohort" paths: "labels" })pb");
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(*update, want_update))
      << update->DebugString();

  auto export_report =
      Transcode("POST", "/v1/tenants/acme/report:export", {},
                R"({"report":{"project":"p"},"format":"REPORT_FORMAT_CSV"})");
  ASSERT_NE(export_report, nullptr);
  auto want_export = Parse<trainyard::v1::ExportReportRequest>(
      R"pb(report { parent: "tenants/acme" project: "p" }
           format: REPORT_FORMAT_CSV)pb");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*export_report,
                                                                 want_export));
}

TEST(BuildRequestTest, RefusesWhatItCannotActOnNamingTheField) {
  auto refused = [](const std::string& method, const std::string& path,
                    const Bindings& query, const std::string& body) {
    auto match = Table().Match(method, path);
    EXPECT_TRUE(match.ok());
    auto r = BuildRequest(*match->route, match->bindings, query, body);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_THAT(refused("GET", "/v1/tenants/a/jobs", {{"pageSize", "many"}}, ""),
              HasSubstr("pageSize: \"many\" is not a 32-bit integer"));
  EXPECT_THAT(refused("GET", "/v1/tenants/a/jobs", {{"states", "RUNNING"}}, ""),
              HasSubstr("states: \"RUNNING\" is not a value of JobState"));
  EXPECT_THAT(refused("GET", "/v1/tenants/a/jobs", {{"colour", "red"}}, ""),
              HasSubstr("colour: no such field"));
  EXPECT_THAT(refused("GET", "/v1/tenants/a/jobs", {{"labels", "x"}}, ""),
              HasSubstr("labels: a map"));
  EXPECT_THAT(
      refused("GET", "/v1/tenants/a/jobs", {{"parent", "tenants/b"}}, ""),
      HasSubstr("parent: this field is part of the path"));
  EXPECT_THAT(refused("GET", "/v1/tenants/a/jobs", {}, "{}"),
              HasSubstr("body: GET"));
  EXPECT_THAT(
      refused("GET", "/v1/tenants/a/report", {{"startTime", "yesterday"}}, ""),
      HasSubstr("startTime: \"yesterday\" is not a Timestamp"));
  EXPECT_THAT(
      refused("POST", "/v1/tenants/a/jobs", {{"clientRequestId", "x"}}, "{}"),
      HasSubstr(
          "clientRequestId: this method takes its fields in the JSON body"));
  EXPECT_THAT(
      refused("POST", "/v1/tenants/a/jobs", {}, R"({"job":{"colour":1}})"),
      HasSubstr("job.colour: no such field"));
  EXPECT_THAT(refused("POST", "/v1/tenants/a/jobs", {},
                      R"({"job":{"spec":{"workers":1.5}}})"),
              HasSubstr("job.spec.workers: "));
  EXPECT_THAT(refused("PATCH", "/v1/tenants/a/queues/q", {}, R"({"colour":1})"),
              HasSubstr("queue.colour: no such field"));
  EXPECT_THAT(refused("POST", "/v1/tenants/a/jobs", {}, "{not json"),
              HasSubstr("body: "));
  EXPECT_THAT(
      refused("PATCH", "/v1/tenants/a/queues/q", {{"queue.cohort", "x"}}, "{}"),
      HasSubstr("queue.cohort: this field travels in the JSON body"));
}

TEST(ToJsonTest, UsesTheStandardMapping) {
  auto job = Parse<trainyard::v1::Job>(R"pb(name: "tenants/a/jobs/7"
                                            state: JOB_STATE_RUNNING
                                            display_name: "x")pb");
  nlohmann::json j = nlohmann::json::parse(ToJson(job));
  EXPECT_EQ(j["name"], "tenants/a/jobs/7");
  EXPECT_EQ(j["state"], "JOB_STATE_RUNNING");
  EXPECT_EQ(j["displayName"], "x");
  trainyard::v1::Money money;
  money.set_currency_code("USD");
  money.set_micros(
      9007199254740993);  // beyond a double's integers: must stay a string
  EXPECT_EQ(nlohmann::json::parse(ToJson(money))["micros"], "9007199254740993");
  trainyard::v1::WatchJobsResponse event;
  event.mutable_event()->set_sequence(123);
  EXPECT_EQ(FieldText(event, "event.sequence"), "123");
  trainyard::v1::WatchJobsRequest watch;
  ASSERT_TRUE(SetFieldFromText(watch, "after_sequence", "99").ok());
  EXPECT_EQ(watch.after_sequence(), 99u);
  EXPECT_FALSE(SetFieldFromText(watch, "after_sequence", "-1").ok());
}

TEST(OpenApiTest, DescribesEveryRouteWithNamedPathParameters) {
  OpenApiPath p =
      OpenApiPathOf(*PathTemplate::Parse("/v1/{name=tenants/*/jobs/*}:cancel"));
  EXPECT_EQ(p.path, "/v1/tenants/{tenant}/jobs/{job}:cancel");
  ASSERT_EQ(p.params.size(), 2u);
  EXPECT_EQ(p.params[1].name, "job");
  EXPECT_EQ(p.params[1].field, "name");
  EXPECT_EQ(
      OpenApiPathOf(*PathTemplate::Parse("/v1/{name=priorityClasses/*}")).path,
      "/v1/priorityClasses/{priorityClass}");

  nlohmann::json doc = nlohmann::json::parse(OpenApiDocument(Table()));
  EXPECT_EQ(doc["openapi"], "3.0.3");
  int operations = 0;
  for (auto& [path, ops] : doc["paths"].items())
    operations += static_cast<int>(ops.size());
  EXPECT_EQ(operations, static_cast<int>(Table().routes().size()));
  auto cancel = doc["paths"]["/v1/tenants/{tenant}/jobs/{job}:cancel"]["post"];
  EXPECT_EQ(cancel["operationId"], "JobService_Cancel");
  EXPECT_EQ(
      cancel["requestBody"]["content"]["application/json"]["schema"]["$ref"],
      "#/components/schemas/trainyard.v1.CancelJobRequest");
  auto watch = doc["paths"]["/v1/tenants/{tenant}/jobs:watch"]["get"];
  EXPECT_TRUE(
      watch["responses"]["200"]["content"].contains("text/event-stream"));
  bool has_last_event_id = false;
  for (auto& param : watch["parameters"])
    has_last_event_id |= param["name"] == "Last-Event-ID";
  EXPECT_TRUE(has_last_event_id);
  auto money = doc["components"]["schemas"]["trainyard.v1.Money"]["properties"];
  EXPECT_EQ(money["micros"]["type"], "string");
  EXPECT_EQ(money["currencyCode"]["type"], "string");
}

}  // namespace
}  // namespace trainyard::gateway
