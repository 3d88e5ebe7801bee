
#include <httplib.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/lib/runtime/config.h"
#include "services/lib/runtime/crypto.h"
#include "services/lib/runtime/grpc_server.h"
#include "services/lib/runtime/health.h"
#include "services/lib/runtime/http_server.h"
#include "services/lib/runtime/job_token.h"
#include "services/lib/runtime/logging.h"
#include "services/lib/runtime/malloc_tuning.h"
#include "services/lib/runtime/metrics.h"
#include "services/lib/runtime/proto_bytes.h"
#include "tests/support/http/raw_http.h"
#include "trainyard/v1/cluster.pb.h"

namespace trainyard::runtime {
namespace {

using ::trainyard::testing::RawHttpExchange;

using ::testing::HasSubstr;
using ::testing::Not;

// GET 127.0.0.1:port/path as "HTTP <status>\n<content type>\n<body>", or ""
// when nothing answered.
std::string HttpGet(int port, const std::string& path) {
  absl::StatusOr<HttpResponse> r =
      runtime::HttpGet(absl::StrCat("127.0.0.1:", port), path);
  if (!r.ok()) return "";
  return absl::StrCat("HTTP ", r->status, "\n", r->content_type, "\n", r->body);
}

TEST(LoggingTest, FormatsOneJsonLineWithTypedFields) {
  std::string line = FormatLogLine(absl::FromUnixSeconds(0), LogLevel::kWarning,
                                   "api", "hello \"world\"\n",
                                   {{"s", "x"},
                                    {"n", 42},
                                    {"b", true},
                                    {"d", 0.5},
                                    {"err", absl::NotFoundError("gone")}});
  EXPECT_EQ(line,
            "{\"ts\":\"1970-01-01T00:00:00.000000Z\",\"level\":\"warning\","
            "\"component\":\"api\","
            "\"msg\":\"hello "
            "\\\"world\\\"\\n\",\"s\":\"x\",\"n\":42,\"b\":true,\"d\":0.5,"
            "\"err\":\"NOT_FOUND: gone\"}");
}

TEST(LoggingTest, EscapesControlCharacters) {
  EXPECT_EQ(JsonEscape(std::string("a\x01z\\", 4)), "a\\u0001z\\\\");
}

TEST(LoggingTest, ParsesLevels) {
  EXPECT_EQ(*ParseLogLevel("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
}

TEST(MetricsTest, RendersCountersGaugesAndHistograms) {
  MetricsRegistry registry;
  registry.GetCounter("ty_requests_total", "Requests.", {{"code", "OK"}})
      .Increment();
  registry.GetCounter("ty_requests_total", "Requests.", {{"code", "OK"}})
      .Increment(2);
  registry.GetCounter("ty_requests_total", "Requests.", {{"code", "NOT_FOUND"}})
      .Increment();
  registry.GetGauge("ty_depth", "Depth.").Set(7);
  Histogram& h =
      registry.GetHistogram("ty_latency_seconds", "Latency.", {}, {0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE ty_requests_total counter\n"));
  EXPECT_THAT(text, HasSubstr("ty_requests_total{code=\"OK\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("ty_requests_total{code=\"NOT_FOUND\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ty_depth 7\n"));
  EXPECT_THAT(text, HasSubstr("ty_latency_seconds_bucket{le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ty_latency_seconds_bucket{le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ty_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("ty_latency_seconds_count 3\n"));
  EXPECT_THAT(text, HasSubstr("ty_latency_seconds_sum 5.55"));
}

TEST(MetricsTest, CountersNeverDecreaseAndAreThreadSafe) {
  MetricsRegistry registry;
  Counter& c = registry.GetCounter("c_total", "C.");
  c.Increment(-5);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.Increment();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
}

TEST(MetricsTest, EscapesLabelValuesAndRunsCollectors) {
  MetricsRegistry registry;
  registry.GetGauge("g", "G.", {{"name", "a\"b\\c\nd"}}).Set(1);
  int calls = 0;
  registry.AddCollector([&calls](MetricsRegistry& r) {
    r.GetGauge("collected", "C.").Set(++calls);
  });
  std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("g{name=\"a\\\"b\\\\c\\nd\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("collected 1\n"));
  EXPECT_THAT(registry.Render(), HasSubstr("collected 2\n"));
}

TEST(HttpServerTest, ServesHealthReadinessAndMetrics) {
  MetricsRegistry registry;
  registry.GetGauge("ty_up", "Up.").Set(1);
  HttpServer server("127.0.0.1:0");
  Health health;
  bool db_ok = true;
  health.AddReadinessCheck("postgres", [&db_ok] {
    return db_ok ? absl::OkStatus()
                 : absl::UnavailableError("connection refused");
  });
  health.Register(server, registry);
  ASSERT_TRUE(server.Start().ok());
  ASSERT_GT(server.port(), 0);

  EXPECT_THAT(HttpGet(server.port(), "/healthz"), HasSubstr("HTTP 200"));
  std::string ready = HttpGet(server.port(), "/readyz");
  EXPECT_THAT(ready, HasSubstr("HTTP 200"));
  EXPECT_THAT(ready, HasSubstr("\"postgres\":\"ok\""));
  db_ok = false;
  ready = HttpGet(server.port(), "/readyz");
  EXPECT_THAT(ready, HasSubstr("HTTP 503"));
  EXPECT_THAT(ready, HasSubstr("connection refused"));
  EXPECT_THAT(HttpGet(server.port(), "/metrics"), HasSubstr("ty_up 1"));
  std::string missing = HttpGet(server.port(), "/nope?x=1");
  EXPECT_THAT(missing, HasSubstr("HTTP 404"));
  EXPECT_THAT(missing, HasSubstr("application/json"));
  health.SetLive(false);
  EXPECT_THAT(HttpGet(server.port(), "/healthz"), HasSubstr("HTTP 503"));
  server.Stop();
  EXPECT_EQ(HttpGet(server.port(), "/healthz"), "");
}

TEST(HttpServerTest, RejectsBadListenAddress) {
  HttpServer bad("nonsense");
  EXPECT_FALSE(bad.Start().ok());
  HttpServer bad_port("127.0.0.1:99999");
  EXPECT_FALSE(bad_port.Start().ok());
}

TEST(HttpServerTest, KeepsConnectionsAliveRoutesByPrefixAndLimitsBodies) {
  HttpServer server("127.0.0.1:0", {.max_body_bytes = 1000,
                                    .keep_alive_timeout = absl::Seconds(1),
                                    .keep_alive_max_requests = 3});
  std::atomic<int> calls{0};
  server.Handle("/v1/exact", [](const HttpRequest&) {
    return HttpResponse{.body = "exact"};
  });
  server.HandlePrefix("/v1/", [&calls](const HttpRequest& r) {
    ++calls;
    std::string params;
    for (const auto& [k, v] : r.params)
      absl::StrAppend(&params, k, "=", v, ";");
    return HttpResponse{
        .body = absl::StrCat("v1 ", r.method, " ", r.path, " ", params, " ",
                             r.body.size()),
        .headers = {{"X-Client-Port", absl::StrCat(r.remote_port)}}};
  });
  server.HandlePrefix(
      "/", [](const HttpRequest&) { return HttpResponse{.body = "root"}; });
  ASSERT_TRUE(server.Start().ok());
  httplib::Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  auto a = client.Get("/v1/x/y?s=a%20b&s=c");
  ASSERT_TRUE(a);
  auto b = client.Post("/v1/z", std::string(1000, 'x'), "text/plain");
  ASSERT_TRUE(b);
  EXPECT_THAT(a->body, HasSubstr("v1 GET /v1/x/y s=a b;s=c;"));
  EXPECT_THAT(b->body, HasSubstr("v1 POST /v1/z"));
  EXPECT_THAT(b->body, HasSubstr(" 1000"));
  // One connection served both (the same client port), and the third request
  // was its last.
  EXPECT_EQ(a->get_header_value("X-Client-Port"),
            b->get_header_value("X-Client-Port"));
  EXPECT_NE(a->get_header_value("X-Client-Port"), "");
  auto c = client.Get("/v1/exact");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->body, "exact");
  EXPECT_EQ(c->get_header_value("Connection"), "close");
  auto root = client.Get("/anything/else");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->body, "root");

  // A body over the limit: 413 with a JSON error, and the handler never runs.
  int before = calls.load();
  auto big = client.Post("/v1/z", std::string(1001, 'x'), "text/plain");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_THAT(big->body, HasSubstr("request body too large"));
  EXPECT_EQ(calls.load(), before);
  server.Stop();
}

// zlib's inflate of a gzip stream (independent of the server's Gzip()).
std::string Gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out;
  char buf[4096];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

TEST(HttpServerTest, AcceptEncodingGzipRules) {
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("gzip, deflate, br, zstd"));
  EXPECT_TRUE(AcceptsGzip("br;q=1.0, GZIP;q=0.5"));
  EXPECT_TRUE(AcceptsGzip("*"));
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_FALSE(AcceptsGzip("br"));
  EXPECT_FALSE(AcceptsGzip("identity"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0, br"));
  EXPECT_FALSE(AcceptsGzip("deflate, gzip; q=0.000"));
  EXPECT_FALSE(AcceptsGzip("*;q=0"));
  EXPECT_FALSE(AcceptsGzip("*, gzip;q=0"));  // the named coding wins
  EXPECT_TRUE(CompressibleType("application/json"));
  EXPECT_TRUE(CompressibleType("text/html; charset=utf-8"));
  EXPECT_TRUE(CompressibleType("text/csv"));
  EXPECT_TRUE(CompressibleType("image/svg+xml"));
  EXPECT_FALSE(CompressibleType("text/event-stream"));
  EXPECT_FALSE(CompressibleType("image/png"));
  EXPECT_FALSE(CompressibleType("application/octet-stream"));
  const std::string text(100000, 'a');
  EXPECT_EQ(Gunzip(Gzip(text)), text);
  EXPECT_LT(Gzip(text).size(), 1000u);
}

TEST(HttpServerTest, CompressesWithGzipOnlyWhenAskedAndNeverStreams) {
  std::string json = "[";
  for (int i = 0; i < 500; ++i)
    absl::StrAppend(&json, i ? "," : "", "{\"id\":", i, "}");
  json += "]";
  HttpServer server("127.0.0.1:0");
  server.Handle("/json", [&](const HttpRequest&) {
    return HttpResponse{.content_type = "application/json", .body = json};
  });
  server.Handle("/small", [](const HttpRequest&) {
    return HttpResponse{.content_type = "application/json", .body = "{}"};
  });
  server.Handle("/png", [&](const HttpRequest&) {
    return HttpResponse{.content_type = "image/png", .body = json};
  });
  // A body compressed ahead of time is sent as it is (a marker proves it).
  server.Handle("/pre", [&](const HttpRequest&) {
    return HttpResponse{.content_type = "text/javascript",
                        .body = json,
                        .gzip_body = std::make_shared<const std::string>(
                            Gzip("precompressed"))};
  });
  server.Handle("/csv", [&](const HttpRequest&) {
    return HttpResponse{.content_type = "text/csv",
                        .stream = [&](HttpStream& s) { s.Write(json); }};
  });
  ASSERT_TRUE(server.Start().ok());
  httplib::Client client("127.0.0.1", server.port());
  client.set_decompress(false);
  auto get = [&](const std::string& path, const std::string& accept) {
    httplib::Headers h;
    if (!accept.empty()) h.emplace("Accept-Encoding", accept);
    auto r = client.Get(path, h);
    EXPECT_TRUE(r) << path;
    return r;
  };
  // A browser's header: gzip, though brotli is offered first.
  auto gz = get("/json", "gzip, deflate, br, zstd");
  ASSERT_TRUE(gz);
  EXPECT_EQ(gz->get_header_value_count("Content-Encoding"), 1u);
  EXPECT_EQ(gz->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(gz->get_header_value("Vary"), "Accept-Encoding");
  EXPECT_LT(gz->body.size(), json.size() / 3);
  EXPECT_EQ(Gunzip(gz->body), json);
  for (const char* accept : {"", "br", "gzip;q=0, br", "identity"}) {
    auto plain = get("/json", accept);
    ASSERT_TRUE(plain);
    EXPECT_FALSE(plain->has_header("Content-Encoding")) << accept;
    EXPECT_EQ(plain->body, json) << accept;
  }
  auto small = get("/small", "gzip");
  ASSERT_TRUE(small);
  EXPECT_FALSE(small->has_header("Content-Encoding"));
  EXPECT_EQ(small->body, "{}");
  auto png = get("/png", "gzip, br");
  ASSERT_TRUE(png);
  EXPECT_FALSE(png->has_header("Content-Encoding"));
  EXPECT_EQ(png->body, json);
  auto pre = get("/pre", "gzip");
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(Gunzip(pre->body), "precompressed");
  auto csv = get("/csv", "gzip, deflate, br");
  ASSERT_TRUE(csv);
  EXPECT_FALSE(csv->has_header("Content-Encoding"));
  EXPECT_EQ(csv->body, json);
  server.Stop();
}

// What `raw` gets back from the server on a connection of its own.
TEST(HttpServerTest, BodiesNeedALengthAndNoEncodingAndRangesAreIgnored) {
  std::atomic<int> calls{0};
  HttpServer server("127.0.0.1:0", {.max_body_bytes = 1000});
  server.HandlePrefix("/", [&](const HttpRequest& r) {
    ++calls;
    return HttpResponse{.body = absl::StrCat("whole body ", r.body.size())};
  });
  ASSERT_TRUE(server.Start().ok());
  // Chunked: refused before any of it is read (httplib would read it whole).
  std::string chunked =
      RawHttpExchange(server.port(),
                      "POST /x HTTP/1.1\r\nHost: a\r\nConnection: "
                      "close\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "5\r\nhello\r\n0\r\n\r\n");
  EXPECT_THAT(chunked, HasSubstr("HTTP/1.1 411"));
  EXPECT_THAT(chunked, HasSubstr("Content-Length"));
  // No length at all.
  std::string bare = RawHttpExchange(
      server.port(),
      "POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(bare, HasSubstr("HTTP/1.1 411"));
  // A compressed body (its inflated size would escape the limit).
  std::string gz = Gzip(std::string(100000, 'x'));
  std::string encoded = RawHttpExchange(
      server.port(), absl::StrCat("POST /x HTTP/1.1\r\nHost: a\r\nConnection: "
                                  "close\r\nContent-Encoding: "
                                  "gzip\r\nContent-Length: ",
                                  gz.size(), "\r\n\r\n", gz));
  EXPECT_THAT(encoded, HasSubstr("HTTP/1.1 415"));
  EXPECT_EQ(calls.load(), 0);
  // A Range is not served: the whole body, 200.
  httplib::Client client("127.0.0.1", server.port());
  auto ranged = client.Get("/file", {{"Range", "bytes=0-0"}});
  ASSERT_TRUE(ranged);
  EXPECT_EQ(ranged->status, 200);
  EXPECT_EQ(ranged->body, "whole body 0");
  EXPECT_FALSE(ranged->has_header("Content-Range"));
  // An empty POST with its length is fine.
  auto empty = client.Post("/x", "", "application/json");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 200);
  server.Stop();
}

TEST(HttpServerTest, StreamsChunksAndStopEndsAStream) {
  HttpServer server("127.0.0.1:0");
  std::atomic<bool> stream_saw_stop{false};
  server.Handle("/three", [](const HttpRequest&) {
    return HttpResponse{.content_type = "text/event-stream",
                        .stream = [](HttpStream& s) {
                          for (int i = 0; i < 3; ++i)
                            s.Write(absl::StrCat("data: ", i, "\n\n"));
                        }};
  });
  server.Handle("/forever", [&stream_saw_stop](const HttpRequest&) {
    return HttpResponse{.stream = [&stream_saw_stop](HttpStream& s) {
      while (s.Write("tick\n"))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      stream_saw_stop = s.Stopping();
    }};
  });
  ASSERT_TRUE(server.Start().ok());
  httplib::Client client("127.0.0.1", server.port());
  auto three = client.Get("/three");
  ASSERT_TRUE(three);
  EXPECT_EQ(three->body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_EQ(three->get_header_value("Content-Type"), "text/event-stream");

  std::atomic<int> ticks{0};
  std::thread reader([&] {
    httplib::Client c("127.0.0.1", server.port());
    c.Get("/forever", [&](const char*, size_t) {
      ++ticks;
      return true;
    });
  });
  while (ticks.load() < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto start = std::chrono::steady_clock::now();
  server.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  reader.join();
  EXPECT_TRUE(stream_saw_stop.load());
}

TEST(HttpServerTest, ServesTlsWithTheGivenCertificateAndRefusesABadOne) {
  std::string dir = ::testing::TempDir() + "/http_tls";
  std::filesystem::create_directories(dir);
  std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  ASSERT_EQ(
      std::system(
          absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -keyout ",
                       key, " -out ", cert,
                       " -days 1 -subj /CN=localhost -addext "
                       "subjectAltName=IP:127.0.0.1 2>/dev/null")
              .c_str()),
      0);
  HttpServer server("127.0.0.1:0",
                    {.tls_cert_file = cert, .tls_key_file = key});
  server.Handle(
      "/hi", [](const HttpRequest&) { return HttpResponse{.body = "secure"}; });
  ASSERT_TRUE(server.Start().ok());
  httplib::SSLClient client("127.0.0.1", server.port());
  client.set_ca_cert_path(cert.c_str());
  client.enable_server_certificate_verification(true);
  auto r = client.Get("/hi");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->body, "secure");
  // Plain HTTP to the TLS port gets no answer.
  EXPECT_FALSE(runtime::HttpGet(absl::StrCat("127.0.0.1:", server.port()),
                                "/hi", absl::Seconds(2))
                   .ok());
  server.Stop();

  HttpServer swapped("127.0.0.1:0",
                     {.tls_cert_file = key, .tls_key_file = cert});
  absl::Status s = swapped.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("TLS certificate"));
  HttpServer half("127.0.0.1:0", {.tls_cert_file = cert});
  EXPECT_EQ(half.Start().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrpcServerTest, ServesHealthAndReportsAPortInUse) {
  MetricsRegistry registry;
  GrpcServerRunner runner(
      {.listen_address = "127.0.0.1:0", .metrics = &registry});
  ASSERT_TRUE(runner.Start().ok());
  ASSERT_GT(runner.port(), 0);
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(runner.port()),
                          grpc::InsecureChannelCredentials());
  // grpc.health.v1.Health/Check with an empty request (service "") answers
  // SERVING = 1.
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer request;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_one();
                 });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& s : slices)
    bytes += std::string(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
  EXPECT_THAT(registry.Render(),
              HasSubstr("trainyard_grpc_requests_total{method=\"/"
                        "grpc.health.v1.Health/Check\","
                        "code=\"OK\"} 1"));

  GrpcServerRunner clash(
      {.listen_address = "127.0.0.1:" + std::to_string(runner.port())});
  EXPECT_FALSE(clash.Start().ok());
  runner.Shutdown(absl::ZeroDuration());
  runner.Shutdown(absl::ZeroDuration());  // idempotent
  runner.Wait();
}

TEST(GrpcServerTest, TlsSettingsAreCheckedAndNamed) {
  GrpcServerRunner cert_only(
      {.listen_address = "127.0.0.1:0", .tls_cert_file = "/x.pem"});
  absl::Status s = cert_only.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tls_key: required"));
  GrpcServerRunner key_only(
      {.listen_address = "127.0.0.1:0", .tls_key_file = "/x.pem"});
  EXPECT_THAT(key_only.Start().message(), HasSubstr("tls_cert: required"));
  GrpcServerRunner missing({.listen_address = "127.0.0.1:0",
                            .tls_cert_file = "/nonexistent/cert.pem",
                            .tls_key_file = "/nonexistent/key.pem"});
  s = missing.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("tls_cert: cannot read /nonexistent/cert.pem"));
  const std::string not_pem = ::testing::TempDir() + "/not.pem";
  { std::ofstream(not_pem) << "hello"; }
  GrpcServerRunner garbage({.listen_address = "127.0.0.1:0",
                            .tls_cert_file = not_pem,
                            .tls_key_file = not_pem});
  EXPECT_THAT(garbage.Start().message(), HasSubstr("is not a PEM file"));
}

TEST(ConfigTest, ParsesKeyValueLines) {
  auto args = ParseConfigText(
      "# comment\n\npostgres_url = postgresql://x@127.0.0.1:1/db  # trailing\n"
      "--log_level=debug\nname = \"quoted value\"\n");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ::testing::ElementsAre(
                         "--postgres_url=postgresql://x@127.0.0.1:1/db",
                         "--log_level=debug", "--name=quoted value"));
}

TEST(ConfigTest, NamesTheBadLine) {
  auto args = ParseConfigText("a = 1\nnot a pair\n");
  ASSERT_FALSE(args.ok());
  EXPECT_THAT(std::string(args.status().message()), HasSubstr("line 2"));
  EXPECT_FALSE(ParseConfigText("config = other.conf\n").ok());
  EXPECT_FALSE(ReadConfigFile("/nonexistent/trainyard.conf").ok());
}

TEST(CryptoTest, Sha256KnownAnswer) {
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CryptoTest, RandomTokensAreAlphanumericAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    std::string t = RandomToken(32);
    ASSERT_EQ(t.size(), 32u);
    for (char c : t)
      ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 200u);
  EXPECT_EQ(RandomBytes(16).size(), 16u);
}

TEST(CryptoTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
}

TEST(CryptoTest, HmacSha256KnownAnswer) {
  // RFC 4231 test case 2.
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(JobTokenTest, MintsAndVerifiesWithRotation) {
  const std::string old_key(40, 'a'), new_key(40, 'b');
  auto old_only = JobTokenKeys::FromKeys({old_key});
  auto rotated = JobTokenKeys::FromKeys({new_key, old_key});
  ASSERT_TRUE(old_only.ok() && rotated.ok());
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  const std::string token = (*old_only)->Mint(
      {.tenant = "acme", .job_id = 42, .expires = now + absl::Hours(1)});
  EXPECT_TRUE(IsJobToken(token));
  EXPECT_THAT(token, ::testing::StartsWith("tyj.acme.42.1800003600."));
  // Signed with the old key: the rotated set still verifies it.
  absl::StatusOr<JobTokenClaims> claims = (*rotated)->Verify(token, now);
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->tenant, "acme");
  EXPECT_EQ(claims->job_id, 42);
  EXPECT_EQ(claims->expires, now + absl::Hours(1));
  // The rotated set signs with the new key, which the old set does not know.
  const std::string fresh = (*rotated)->Mint(
      {.tenant = "acme", .job_id = 42, .expires = now + absl::Hours(1)});
  EXPECT_THAT((*old_only)->Verify(fresh, now).status().message(),
              HasSubstr("unknown key"));
  EXPECT_THAT(
      (*rotated)->Verify(token, now + absl::Hours(1)).status().message(),
      HasSubstr("expired"));
  std::string tampered = token;
  tampered.replace(tampered.find(".42."), 4, ".43.");
  EXPECT_THAT((*rotated)->Verify(tampered, now).status().message(),
              HasSubstr("signature does not match"));
  for (const char* bad : {"tyj.", "tyj.acme.42", "tyj.acme.042.1.abcdefab.00",
                          "ty_x_y", "tyj.ac.me.42.1800003600.abcdefab."}) {
    absl::StatusOr<JobTokenClaims> r = (*rotated)->Verify(bad, now);
    EXPECT_TRUE(absl::IsUnauthenticated(r.status())) << bad;
  }
}

TEST(JobTokenTest, KeyFilesAreCheckedWhenLoaded) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/job-token-good.key";
  {
    std::ofstream out(good);
    out << "# rotated 2026-11\n\n  " << std::string(32, 'k') << "  \n"
        << std::string(33, 'j') << "\n";
  }
  auto keys = JobTokenKeys::FromFile(good);
  ASSERT_TRUE(keys.ok()) << keys.status();
  const std::string short_key = dir + "/job-token-short.key";
  {
    std::ofstream out(short_key);
    out << "tooshort\n";
  }
  EXPECT_THAT(JobTokenKeys::FromFile(short_key).status().message(),
              HasSubstr("at least 32"));
  EXPECT_TRUE(absl::IsNotFound(
      JobTokenKeys::FromFile(dir + "/job-token-missing.key").status()));
  EXPECT_THAT(
      JobTokenKeys::FromKeys({std::string(32, 'x'), std::string(32, 'x')})
          .status()
          .message(),
      HasSubstr("the same"));
  EXPECT_FALSE(JobTokenKeys::FromKeys({}).ok());
}

}  // namespace
TEST(MallocTuningTest, AddsTheHugePageTunableUnlessOneIsChosen) {
  EXPECT_EQ(TunablesWithHugePageMalloc(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePageMalloc(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(TunablesWithHugePageMalloc("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  // The operator's choice stands, whatever it is.
  EXPECT_EQ(TunablesWithHugePageMalloc("glibc.malloc.hugetlb=0"), std::nullopt);
  EXPECT_EQ(TunablesWithHugePageMalloc(
                "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"),
            std::nullopt);
}

}  // namespace trainyard::runtime

namespace trainyard::runtime {
namespace {

// A node's labels are a map: equal nodes must give equal bytes, whatever
// order their labels were set in (the dispatcher compares reported nodes by
// their bytes), with the entries in key order.
TEST(ProtoBytesTest, EqualMessagesHaveEqualBytesWithMapsInKeyOrder) {
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) keys.push_back(absl::StrCat("label-", 100 + i));
  trainyard::v1::Node forward, backward;
  for (const std::string& k : keys) (*forward.mutable_labels())[k] = "v-" + k;
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    (*backward.mutable_labels())[*it] = "v-" + *it;
  }
  forward.set_name("clusters/k/nodes/n1");
  backward.set_name("clusters/k/nodes/n1");
  const std::string a = DeterministicBytes(forward);
  EXPECT_EQ(a, DeterministicBytes(backward));
  trainyard::v1::Node parsed;
  ASSERT_TRUE(parsed.ParseFromString(a));
  EXPECT_EQ(parsed.labels_size(), 60);
  // Each key appears after the one before it in sort order.
  size_t last = 0;
  for (const std::string& k : keys) {  // already sorted: label-100 ...
    const size_t at = a.find("\x0a" + std::string(1, char(k.size())) + k);
    ASSERT_NE(at, std::string::npos) << k;
    EXPECT_GT(at, last) << k;
    last = at;
  }
}

}  // namespace
}  // namespace trainyard::runtime
