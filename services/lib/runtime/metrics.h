// Prometheus metrics: counters, gauges and histograms with labels, rendered in the text
// exposition format (version 0.0.4) by MetricsRegistry::Render().
//
//   Counter& c = DefaultMetrics().GetCounter("trainyard_rpcs_total", "RPCs handled.",
//                                            {{"method", m}, {"code", "OK"}});
//   c.Increment();
//
// Metric objects live as long as their registry; Get* returns the same object for the same
// name and labels, so callers may cache the reference. All operations are thread-safe.
#ifndef TRAINYARD_SERVICES_LIB_RUNTIME_METRICS_H_
#define TRAINYARD_SERVICES_LIB_RUNTIME_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainyard::runtime {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Increment(double by = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds` are the upper bounds of the buckets, strictly increasing; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Seconds: 0.5 ms … 10 s, for request latencies.
std::vector<double> LatencyBuckets();

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Counter& GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Gauge& GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help,
                          const MetricLabels& labels = {},
                          std::vector<double> bounds = LatencyBuckets());

  // Collectors run at the start of every Render() (e.g. to refresh gauges from a database).
  void AddCollector(std::function<void(MetricsRegistry&)> collector);

  // The whole registry in Prometheus text format.
  std::string Render();

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::map<MetricLabels, std::unique_ptr<Counter>> counters;
    std::map<MetricLabels, std::unique_ptr<Gauge>> gauges;
    std::map<MetricLabels, std::unique_ptr<Histogram>> histograms;
  };
  Family& FamilyFor(std::string_view name, std::string_view help, Type type);

  std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;
  std::mutex collectors_mu_;
  std::vector<std::function<void(MetricsRegistry&)>> collectors_;
};

// The process-wide registry that /metrics serves.
MetricsRegistry& DefaultMetrics();

// Escapes a label value for the text format.
std::string EscapeLabelValue(std::string_view value);

}  // namespace trainyard::runtime

#endif  // TRAINYARD_SERVICES_LIB_RUNTIME_METRICS_H_
