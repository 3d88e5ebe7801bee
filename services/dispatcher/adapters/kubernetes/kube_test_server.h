// Test only: an HTTP server in the test process (cpp-httplib) that speaks
// the Kubernetes API server's protocol for one pod collection, kPods: lists
// in pages, watches replaying a change log after the watcher's
// resourceVersion, and the faults a real server or a proxy in front of it
// produce (canned answers, garbage lines, a watch cut in the middle of a
// line, an expired resourceVersion as an ERROR event or an HTTP 410).
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_TEST_SERVER_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_TEST_SERVER_H_

#include <httplib.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainyard::dispatcher::kubernetes::kubetest {

using json = nlohmann::json;

inline constexpr char kPods[] = "/api/v1/namespaces/ns/pods";

// A request as the server saw it.
struct Seen {
  std::string method;
  std::string path;
  std::multimap<std::string, std::string> params;
  std::string authorization;
  std::string content_type;
  std::string body;

  std::string Param(const std::string& k) const {
    auto it = params.find(k);
    return it == params.end() ? "" : it->second;
  }
};

// One pod collection with resourceVersions, lists in pages, and watches
// replaying the change log after the watcher's resourceVersion.
class FakeApiServer {
 public:
  // Answers the test queues up for the next plain requests (not watches),
  // taken first-in first-out before the collection's own behaviour.
  struct Canned {
    int status;
    std::string body;
    std::string content_type = "application/json";
    std::map<std::string, std::string> headers;
  };

  FakeApiServer() {
    auto handle = [this](const httplib::Request& req, httplib::Response& res) {
      Handle(req, res);
    };
    server_.Get(".*", handle);
    server_.Post(".*", handle);
    server_.Patch(".*", handle);
    server_.Delete(".*", handle);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost.
    while (!server_.is_running()) absl::SleepFor(absl::Milliseconds(1));
  }
  ~FakeApiServer() {
    {
      absl::MutexLock l(&mu_);
      shutdown_ = true;
    }
    server_.stop();
    thread_.join();
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

  void Enqueue(Canned c) {
    absl::MutexLock l(&mu_);
    canned_.push_back(std::move(c));
  }

  // Creates or changes pod `name` (phase), logged for watchers unless
  // silent (a change that happened while the log was compacted away).
  void Put(const std::string& name, const std::string& phase,
           bool silent = false) {
    absl::MutexLock l(&mu_);
    ++rv_;
    const bool existed = pods_.contains(name);
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"name", name},
                  {"namespace", "ns"},
                  {"resourceVersion", std::to_string(rv_)}}},
                {"status", {{"phase", phase}}}};
    pods_[name] = pod;
    if (!silent) {
      Log(existed ? "MODIFIED" : "ADDED", pod);
    }
  }
  // Pods shaped like the dispatcher's workers (labels, env, affinity,
  // conditions: about 3 KB of JSON each), created without log entries.
  void PutMany(int n, const std::string& prefix) {
    absl::MutexLock l(&mu_);
    for (int i = 0; i < n; ++i) {
      ++rv_;
      const std::string name = absl::StrCat(prefix, i);
      json env = json::array();
      for (const char* k : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
                            "TRAINYARD_JOB", "TRAINYARD_ATTEMPT"}) {
        env.push_back(
            {{"name", k}, {"value", absl::StrCat("value-of-", k, "-", i)}});
      }
      json conditions = json::array();
      for (const char* c :
           {"PodScheduled", "Initialized", "ContainersReady", "Ready"}) {
        conditions.push_back({{"type", c},
                              {"status", "True"},
                              {"lastTransitionTime", "2026-11-28T12:00:00Z"}});
      }
      pods_[name] = json{
          {"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ns"},
            {"uid", absl::StrCat("0b5e6a52-1c1f-4c43-9a55-", 100000000000 + i)},
            {"resourceVersion", std::to_string(rv_)},
            {"creationTimestamp", "2026-11-28T12:00:00Z"},
            {"labels",
             {{"trainyard.dev/tenant", "acme"},
              {"trainyard.dev/job", absl::StrCat("j", i / 8)},
              {"trainyard.dev/attempt", "0"},
              {"trainyard.dev/name", absl::StrCat("ty-j", i / 8, "-0")},
              {"batch.kubernetes.io/job-completion-index",
               std::to_string(i % 8)}}},
            {"ownerReferences",
             json::array({{{"apiVersion", "batch/v1"},
                           {"kind", "Job"},
                           {"name", absl::StrCat("ty-j", i / 8, "-0")},
                           {"uid", "5d7c2f0e-8f7e-4c9b-b1a4-3f6f0d2c9e11"},
                           {"controller", true}}})}}},
          {"spec",
           {{"restartPolicy", "Never"},
            {"nodeName", absl::StrCat("node-", i % 6250)},
            {"hostname", absl::StrCat("ty-j", i / 8, "-0-", i % 8)},
            {"subdomain", absl::StrCat("ty-j", i / 8, "-0")},
            {"containers",
             json::array(
                 {{{"name", "worker"},
                   {"image", "registry.example/acme/train:2026.11"},
                   {"command", json::array({"python", "-m", "train"})},
                   {"env", env},
                   {"resources",
                    {{"limits", {{"nvidia.com/gpu", "8"}, {"memory", "512Gi"}}},
                     {"requests", {{"cpu", "64"}, {"memory", "512Gi"}}}}}}})},
            {"affinity",
             {{"nodeAffinity",
               {{"requiredDuringSchedulingIgnoredDuringExecution",
                 {{"nodeSelectorTerms",
                   json::array(
                       {{{"matchFields",
                          json::array(
                              {{{"key", "metadata.name"},
                                {"operator", "In"},
                                {"values",
                                 json::array({absl::StrCat(
                                     "node-", i % 6250)})}}})}}})}}}}}}}}},
          {"status",
           {{"phase", "Running"},
            {"podIP", absl::StrCat("10.", i / 65536, ".", (i / 256) % 256, ".",
                                   i % 256)},
            {"conditions", conditions},
            {"containerStatuses",
             json::array({{{"name", "worker"},
                           {"ready", true},
                           {"restartCount", 0},
                           {"state",
                            {{"running",
                              {{"startedAt", "2026-11-28T12:00:05Z"}}}}}}})}}}};
    }
  }
  void Remove(const std::string& name, bool silent = false) {
    absl::MutexLock l(&mu_);
    ++rv_;
    json pod = pods_[name];
    pod["metadata"]["resourceVersion"] = std::to_string(rv_);
    pods_.erase(name);
    if (!silent) Log("DELETED", pod);
  }
  // Changes elsewhere advance the resourceVersion; a bookmark says so.
  void Bookmark() {
    absl::MutexLock l(&mu_);
    ++rv_;
    log_.push_back(
        {rv_,
         json({{"type", "BOOKMARK"},
               {"object",
                {{"kind", "Pod"},
                 {"apiVersion", "v1"},
                 {"metadata", {{"resourceVersion", std::to_string(rv_)}}}}}})
             .dump()});
  }
  // A raw line for the live watch (garbage, an ERROR event).
  void Line(std::string line) {
    absl::MutexLock l(&mu_);
    log_.push_back({rv_, std::move(line), /*live_only=*/true});
  }
  // Forgets the log up to now: a watch from an older resourceVersion gets
  // 410, as an ERROR event on the live watch (if any) or an HTTP 410.
  void Compact(bool error_event_on_live_watch) {
    absl::MutexLock l(&mu_);
    compacted_ = rv_;
    if (error_event_on_live_watch) {
      log_.push_back({rv_,
                      json({{"type", "ERROR"},
                            {"object",
                             {{"kind", "Status"},
                              {"apiVersion", "v1"},
                              {"status", "Failure"},
                              {"message", "too old resource version"},
                              {"reason", "Expired"},
                              {"code", 410}}}})
                          .dump(),
                      /*live_only=*/true});
    }
  }
  // The live watch writes `partial` (half a line) and drops the connection.
  void CutWatch(std::string partial) {
    absl::MutexLock l(&mu_);
    cut_ = std::move(partial);
  }
  // The live watch ends normally (as at timeoutSeconds).
  void EndWatch() {
    absl::MutexLock l(&mu_);
    end_ = true;
  }

  std::vector<Seen> seen() const {
    absl::MutexLock l(&mu_);
    return seen_;
  }
  std::vector<Seen> watches() const {
    std::vector<Seen> out;
    for (const Seen& s : seen()) {
      if (s.Param("watch") == "true") out.push_back(s);
    }
    return out;
  }
  bool WaitFor(std::function<bool()> pred,
               absl::Duration timeout = absl::Seconds(10)) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (pred()) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return pred();
  }

 private:
  struct Entry {
    int64_t rv;
    std::string line;
    bool live_only = false;
  };

  void Log(const char* type, const json& pod)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    log_.push_back({rv_, json({{"type", type}, {"object", pod}}).dump()});
  }

  void Handle(const httplib::Request& req, httplib::Response& res) {
    Seen s{.method = req.method,
           .path = req.path,
           .authorization = req.get_header_value("Authorization"),
           .content_type = req.get_header_value("Content-Type"),
           .body = req.body};
    for (const auto& [k, v] : req.params) s.params.emplace(k, v);
    absl::MutexLock l(&mu_);
    seen_.push_back(s);
    if (s.Param("watch") == "true") return Watch(s, res);
    if (!canned_.empty()) {
      Canned c = canned_.front();
      canned_.erase(canned_.begin());
      res.status = c.status;
      for (const auto& [k, v] : c.headers) res.set_header(k, v);
      res.set_content(c.body, c.content_type.c_str());
      return;
    }
    if (req.method == "GET" && req.path == kPods) return List(s, res);
    res.status = 404;
    res.set_content(json({{"kind", "Status"},
                          {"reason", "NotFound"},
                          {"code", 404},
                          {"message", "no such path"}})
                        .dump(),
                    "application/json");
  }

  void List(const Seen& s, httplib::Response& res)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t limit = 0;
    int64_t start = 0;
    (void)absl::SimpleAtoi(s.Param("limit"), &limit);
    (void)absl::SimpleAtoi(s.Param("continue"), &start);
    json items = json::array();
    int64_t i = 0;
    int64_t next = 0;
    for (const auto& [name, pod] : pods_) {
      if (i++ < start) continue;
      if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
        next = i - 1;
        break;
      }
      json item = pod;
      item.erase("kind");  // items of a list carry no kind
      item.erase("apiVersion");
      items.push_back(item);
    }
    json list = {{"kind", "PodList"},
                 {"apiVersion", "v1"},
                 {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                 {"items", items}};
    if (next > 0) list["metadata"]["continue"] = std::to_string(next);
    res.set_content(list.dump(), "application/json");
  }

  void Watch(const Seen& s, httplib::Response& res)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t from = 0;
    (void)absl::SimpleAtoi(s.Param("resourceVersion"), &from);
    if (from < compacted_) {
      res.status = 410;
      res.set_content(json({{"kind", "Status"},
                            {"status", "Failure"},
                            {"reason", "Expired"},
                            {"code", 410},
                            {"message", "too old resource version"}})
                          .dump(),
                      "application/json");
      return;
    }
    // Replays the log after `from` (live-only lines are for watches already
    // open when they were logged), then follows it.
    size_t pos = 0;
    while (pos < log_.size() && (log_[pos].rv <= from || log_[pos].live_only)) {
      ++pos;
    }
    // CutWatch and EndWatch act on the newest watch only (an older one
    // whose client went away lingers until its next write fails).
    cut_.reset();
    end_ = false;
    const int64_t gen = ++watch_gen_;
    res.set_chunked_content_provider(
        "application/json",
        [this, pos, gen](size_t, httplib::DataSink& sink) mutable {
          absl::MutexLock l(&mu_);
          while (true) {
            while (pos < log_.size()) {
              const std::string line = log_[pos++].line + "\n";
              if (!sink.write(line.data(), line.size())) return false;
            }
            if (gen == watch_gen_ && cut_.has_value()) {
              sink.write(cut_->data(), cut_->size());
              cut_.reset();
              return false;  // drops the connection mid-stream
            }
            if (gen == watch_gen_ && end_) {
              end_ = false;
              sink.done();
              return true;
            }
            if (shutdown_) return false;
            mu_.AwaitWithTimeout(absl::Condition(&shutdown_),
                                 absl::Milliseconds(20));
          }
        });
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Canned> canned_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, json> pods_ ABSL_GUARDED_BY(mu_);
  int64_t rv_ ABSL_GUARDED_BY(mu_) = 100;
  int64_t compacted_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Entry> log_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> cut_ ABSL_GUARDED_BY(mu_);
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  int64_t watch_gen_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::dispatcher::kubernetes::kubetest

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_TEST_SERVER_H_
