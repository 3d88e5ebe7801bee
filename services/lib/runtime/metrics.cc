#include "services/lib/runtime/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::runtime {
namespace {

void AtomicAdd(std::atomic<double>& target, double by) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + by, std::memory_order_relaxed)) {
  }
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  // Shortest form that reads back as the same double.
  for (int precision = 15; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, v);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return absl::StrFormat("%.17g", v);
}

std::string RenderLabels(const MetricLabels& labels, const std::string& extra_key = "",
                         const std::string& extra_value = "") {
  if (labels.empty() && extra_key.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ",";
    first = false;
    absl::StrAppend(&out, k, "=\"", EscapeLabelValue(v), "\"");
  }
  if (!extra_key.empty()) {
    if (!first) out += ",";
    absl::StrAppend(&out, extra_key, "=\"", extra_value, "\"");
  }
  out += "}";
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void Counter::Increment(double by) {
  if (by < 0) return;  // counters never go down
  AtomicAdd(value_, by);
}

void Gauge::Add(double by) { AtomicAdd(value_, by); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

MetricsRegistry::Family& MetricsRegistry::FamilyFor(std::string_view name, std::string_view help,
                                                    Type type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{.type = type, .help = std::string(help)})
             .first;
  } else if (it->second.type != type) {
    // A programming error: the same name registered as two types.
    throw std::logic_error(absl::StrCat("metric ", std::string(name), " has two types"));
  }
  return it->second;
}

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                     const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyFor(name, help, Type::kCounter).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                 const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyFor(name, help, Type::kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         const MetricLabels& labels, std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyFor(name, help, Type::kHistogram).histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return *slot;
}

void MetricsRegistry::AddCollector(std::function<void(MetricsRegistry&)> collector) {
  std::lock_guard<std::mutex> lock(collectors_mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() {
  {
    std::vector<std::function<void(MetricsRegistry&)>> collectors;
    {
      std::lock_guard<std::mutex> lock(collectors_mu_);
      collectors = collectors_;
    }
    for (auto& c : collectors) c(*this);
  }
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, family] : families_) {
    const char* type = family.type == Type::kCounter ? "counter"
                       : family.type == Type::kGauge ? "gauge"
                                                     : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family.help), "\n");
    absl::StrAppend(&out, "# TYPE ", name, " ", type, "\n");
    for (const auto& [labels, c] : family.counters) {
      absl::StrAppend(&out, name, RenderLabels(labels), " ", FormatValue(c->value()), "\n");
    }
    for (const auto& [labels, g] : family.gauges) {
      absl::StrAppend(&out, name, RenderLabels(labels), " ", FormatValue(g->value()), "\n");
    }
    for (const auto& [labels, h] : family.histograms) {
      Histogram::Snapshot s = h->snapshot();
      for (size_t i = 0; i < s.cumulative.size(); ++i) {
        std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
        if (i < s.bounds.size() && s.bounds[i] != std::floor(s.bounds[i])) {
          le = absl::StrFormat("%g", s.bounds[i]);
        }
        absl::StrAppend(&out, name, "_bucket", RenderLabels(labels, "le", le), " ",
                        s.cumulative[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", RenderLabels(labels), " ", FormatValue(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", RenderLabels(labels), " ", s.count, "\n");
    }
  }
  return out;
}

MetricsRegistry& DefaultMetrics() {
  static MetricsRegistry* registry = new MetricsRegistry();
  return *registry;
}

}  // namespace trainyard::runtime
