// Liveness and readiness for a service process, served over HTTP:
//   /healthz  200 while the process is alive and not shutting down;
//   /readyz   200 when every readiness check passes, else 503 naming the failed checks;
//   /metrics  the metrics registry in Prometheus text format.
// Bodies are JSON (except /metrics).
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_HEALTH_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_HEALTH_H_

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "services/lib/runtime/http_server.h"
#include "services/lib/runtime/metrics.h"

namespace trainyard::runtime {

class Health {
 public:
  using Check = std::function<absl::Status()>;

  void AddReadinessCheck(std::string name, Check check);
  void SetLive(bool live) { live_.store(live); }
  bool live() const { return live_.load(); }

  struct Result {
    bool ready = true;
    std::vector<std::pair<std::string, absl::Status>> checks;
  };
  Result CheckReadiness();

  HttpResponse HealthzResponse() const;
  HttpResponse ReadyzResponse();

  void Register(HttpServer& server, MetricsRegistry& metrics);

 private:
  std::atomic<bool> live_{true};
  std::mutex mu_;
  std::vector<std::pair<std::string, Check>> checks_;
};

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_HEALTH_H_
