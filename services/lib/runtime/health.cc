#include "services/lib/runtime/health.h"

#include "absl/strings/str_cat.h"
#include "services/lib/runtime/logging.h"

namespace trainyard::runtime {

void Health::AddReadinessCheck(std::string name, Check check) {
  std::lock_guard<std::mutex> lock(mu_);
  checks_.emplace_back(std::move(name), std::move(check));
}

Health::Result Health::CheckReadiness() {
  std::vector<std::pair<std::string, Check>> checks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    checks = checks_;
  }
  Result result;
  if (!live()) {
    result.ready = false;
    result.checks.emplace_back("live", absl::UnavailableError("shutting down"));
  }
  for (auto& [name, check] : checks) {
    absl::Status s = check();
    if (!s.ok()) result.ready = false;
    result.checks.emplace_back(name, s);
  }
  return result;
}

HttpResponse Health::HealthzResponse() const {
  if (!live()) {
    return HttpResponse{.status = 503,
                        .content_type = "application/json",
                        .body = "{\"status\":\"shutting_down\"}"};
  }
  return HttpResponse{.status = 200, .content_type = "application/json",
                      .body = "{\"status\":\"ok\"}"};
}

HttpResponse Health::ReadyzResponse() {
  Result r = CheckReadiness();
  std::string body = absl::StrCat("{\"status\":\"", r.ready ? "ready" : "not_ready",
                                  "\",\"checks\":{");
  bool first = true;
  for (const auto& [name, status] : r.checks) {
    if (!first) body += ",";
    first = false;
    absl::StrAppend(&body, "\"", JsonEscape(name), "\":");
    if (status.ok()) {
      body += "\"ok\"";
    } else {
      absl::StrAppend(&body, "\"", JsonEscape(status.ToString()), "\"");
    }
  }
  body += "}}";
  return HttpResponse{.status = r.ready ? 200 : 503,
                      .content_type = "application/json",
                      .body = std::move(body)};
}

void Health::Register(HttpServer& server, MetricsRegistry& metrics) {
  server.Handle("/healthz", [this](const HttpRequest&) { return HealthzResponse(); });
  server.Handle("/readyz", [this](const HttpRequest&) { return ReadyzResponse(); });
  MetricsRegistry* registry = &metrics;
  server.Handle("/metrics", [registry](const HttpRequest&) {
    return HttpResponse{.status = 200,
                        .content_type = "text/plain; version=0.0.4; charset=utf-8",
                        .body = registry->Render()};
  });
}

}  // namespace trainyard::runtime
