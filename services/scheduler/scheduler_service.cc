#include "services/scheduler/scheduler_service.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "services/accounting/budget_rule.h"
#include "services/accounting/pricing/budget.h"
#include "services/lib/domain/names.h"
#include "services/lib/runtime/logging.h"
#include "services/lib/runtime/metrics.h"
#include "services/scheduler/explanations.h"
#include "services/scheduler/policy/pricing.h"
#include "storage/redis/redis_options.h"
#include "storage/redis/wakeup_subscriber.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/queue.pb.h"

namespace trainyard::scheduler {
namespace {

namespace v1 = ::trainyard::v1;
namespace pg = ::trainyard::storage::postgres;
using runtime::Log;
using runtime::LogLevel;

// The API's ResourceName number of a policy resource.
int ResourceNumber(policy::Resource r) {
  switch (r) {
    case policy::Resource::kGpu:
      return v1::RESOURCE_NAME_GPU;
    case policy::Resource::kCpu:
      return v1::RESOURCE_NAME_CPU;
    case policy::Resource::kMemory:
      return v1::RESOURCE_NAME_MEMORY;
  }
  return v1::RESOURCE_NAME_UNSPECIFIED;
}

// Replaces `out` with every object of `kind`, page by page, keyed by its name
// (one-part keys) or by (parent, name) (two-part keys: pools, nodes, queues).
template <typename Map>
absl::Status ReloadAll(pg::ObjectStore& store, const pg::ObjectKind& kind,
                       Map& out) {
  out.clear();
  pg::ListQuery query;
  query.limit = 1000;
  while (true) {
    absl::StatusOr<pg::ListPage> page = store.List(kind, query);
    if (!page.ok()) return page.status();
    for (const pg::StoredObject& o : page->objects) {
      typename Map::mapped_type p;
      if (!p.ParseFromString(o.body)) continue;
      if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
        out[o.key[0]] = std::move(p);
      } else {
        out[{o.key[0], o.key[1]}] = std::move(p);
      }
    }
    if (!page->more || page->objects.empty()) return absl::OkStatus();
    query.after_key = page->objects.back().key;
  }
}

runtime::Histogram& CycleSeconds() {
  static runtime::Histogram& h = runtime::DefaultMetrics().GetHistogram(
      "trainyard_scheduler_cycle_seconds",
      "Duration of a scheduling cycle (load, decide, commit).");
  return h;
}
runtime::Counter& Decided(const char* kind) {
  return runtime::DefaultMetrics().GetCounter(
      "trainyard_scheduler_decisions_total", "Decisions committed, by kind.",
      {{"kind", kind}});
}

// The configuration tables the scheduler reads, in the order of
// SchedulerService::config_fingerprints_.
enum ConfigKind : size_t {
  kFlavors,
  kClusters,
  kPools,
  kNodes,
  kCohorts,
  kQueues,
  kPriorityClasses,
  kBudgets,
};
const std::vector<const pg::ObjectKind*>& ConfigKinds() {
  static const std::vector<const pg::ObjectKind*> kinds = {
      &pg::FlavorKind(),        &pg::ClusterKind(), &pg::PoolKind(),
      &pg::NodeKind(),          &pg::CohortKind(),  &pg::QueueKind(),
      &pg::PriorityClassKind(), &pg::BudgetKind()};
  return kinds;
}

// Whether two sets of clusters differ at most in what a dispatcher's health
// report writes besides the health itself (heartbeat time, health message,
// etag): nothing the policy's picture maps but liveness, which
// SchedulerState::Advance follows.
bool SameButHeartbeats(const std::map<std::string, v1::Cluster>& a,
                       const std::map<std::string, v1::Cluster>& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first) return false;
    v1::Cluster x = ia->second, y = ib->second;
    for (v1::Cluster* c : {&x, &y}) {
      c->clear_heartbeat_time();
      c->clear_health_message();
      c->clear_etag();
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(x, y)) return false;
  }
  return true;
}

}  // namespace

SchedulerService::SchedulerService(SchedulerOptions options)
    : options_(std::move(options)), policy_state_(options_.policy) {}

SchedulerService::~SchedulerService() {
  Shutdown();
  {
    absl::MutexLock l(&writes_mu_);
    writer_stop_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

void SchedulerService::WriteExplanationsLoop() {
  while (true) {
    absl::flat_hash_map<int64_t, std::optional<pg::Explanation>> batch;
    absl::flat_hash_map<std::pair<std::string, std::string>, pg::QueueShareRow>
        shares;
    {
      absl::MutexLock l(&writes_mu_);
      writes_mu_.Await(absl::Condition(
          +[](SchedulerService* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->writes_mu_) {
                 return s->writer_stop_ || !s->writes_.empty() ||
                        !s->share_writes_.empty();
               },
          this));
      // Stopping, nothing left to write.
      if (writes_.empty() && share_writes_.empty()) return;
      batch.swap(writes_);
      shares.swap(share_writes_);
      writing_ = true;
    }
    std::vector<pg::Explanation> upserts;
    std::vector<int64_t> done;
    for (auto& [id, row] : batch) {
      if (row.has_value()) {
        upserts.push_back(std::move(*row));
      } else {
        done.push_back(id);
      }
    }
    // In job order: concurrent writers (a new leader) lock rows alike.
    std::sort(upserts.begin(), upserts.end(),
              [](const pg::Explanation& a, const pg::Explanation& b) {
                return a.job_id < b.job_id;
              });
    std::sort(done.begin(), done.end());
    absl::Status s = jobs_->WriteExplanations(upserts, done);
    std::vector<pg::QueueShareRow> share_rows;
    for (auto& [key, row] : shares) share_rows.push_back(std::move(row));
    std::sort(share_rows.begin(), share_rows.end(),
              [](const pg::QueueShareRow& a, const pg::QueueShareRow& b) {
                return std::tie(a.tenant, a.queue) <
                       std::tie(b.tenant, b.queue);
              });
    if (s.ok()) s = jobs_->WriteQueueShares(share_rows);
    absl::MutexLock l(&writes_mu_);
    writing_ = false;
    if (!s.ok()) write_failure_ = s;
  }
}

absl::Status SchedulerService::FlushExplanations() {
  absl::MutexLock l(&writes_mu_);
  writes_mu_.Await(absl::Condition(
      +[](SchedulerService* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->writes_mu_) {
        return s->writes_.empty() && s->share_writes_.empty() && !s->writing_;
      },
      this));
  return write_failure_;
}

absl::StatusOr<std::unique_ptr<SchedulerService>> SchedulerService::Create(
    SchedulerOptions options) {
  std::unique_ptr<SchedulerService> s(new SchedulerService(std::move(options)));
  absl::StatusOr<std::unique_ptr<pg::Database>> db =
      pg::Database::Open({.url = s->options_.postgres_url,
                          .pool_size = std::max(2, s->options_.db_pool_size),
                          .custom_plans = true});
  if (!db.ok()) return db.status();
  s->db_ = std::move(*db);
  s->jobs_ = std::make_unique<pg::SchedulerStore>(s->db_.get());
  s->api_jobs_ = std::make_unique<pg::JobStore>(s->db_.get());
  s->objects_ = std::make_unique<pg::ObjectStore>(s->db_.get());
  s->accounting_ = std::make_unique<pg::AccountingStore>(s->db_.get());
  s->writer_ = std::thread([p = s.get()] { p->WriteExplanationsLoop(); });
  if (!s->options_.redis_addr.empty()) {
    absl::StatusOr<storage::redis::RedisOptions> redis =
        storage::redis::ParseRedisAddress(s->options_.redis_addr);
    if (!redis.ok()) return redis.status();
    s->redis_ = std::make_unique<storage::redis::RedisClient>(*redis);
  }
  return s;
}

void SchedulerService::Start() {
  loop_.Start(
      *db_,
      {.name = "scheduler",
       .lock_key = options_.leader_lock_key,
       .standby_poll = options_.standby_poll,
       .redis_addr = options_.redis_addr,
       .wakeup_channels = {storage::redis::kSchedulerWakeupChannel},
       .interval = options_.interval},
      [this] { BecomeLeader(); }, [this] { return LeadRound(); },
      options_.hot_standby ? std::function<void()>([this] {
        const absl::Time now = absl::Now();
        if (now - last_follow_ < options_.standby_follow_interval) return;
        last_follow_ = now;
        if (absl::Status s = Follow(); !s.ok()) {
          Log(LogLevel::kWarning, "scheduler: standby refresh failed",
              {{"error", s}});
        }
      })
                           : nullptr);
}

void SchedulerService::Shutdown() { loop_.Stop(); }

void SchedulerService::BecomeLeader() {
  absl::MutexLock l(&cycle_mu_);
  if (options_.hot_standby && loaded_) {
    // The picture followed the outbox (Follow(), or this process's own
    // cycles as an earlier leader): the events since its last read reach
    // the first cycle as any cycle's do. The policy's picture was not kept
    // up, and what the old leader wrote to pending_explanations is not in
    // explained_.
    rebuild_policy_ = true;
    reload_explanations_ = true;
    return;
  }
  ForgetEverything();
}

absl::Status SchedulerService::Follow() {
  absl::MutexLock l(&cycle_mu_);
  CycleReport unused;
  if (absl::Status s = Refresh(unused); !s.ok()) {
    ForgetEverything();
    return s;
  }
  rebuild_policy_ = true;
  return absl::OkStatus();
}

void SchedulerService::ForgetWritten() {
  explained_.clear();
  shares_written_.clear();
}

void SchedulerService::ForgetEverything() {
  loaded_ = false;
  config_loaded_ = false;
  ForgetWritten();
}

void SchedulerService::SeedExplained(
    const std::vector<pg::WrittenExplanation>& written) {
  ForgetWritten();
  explained_.reserve(written.size());
  for (const pg::WrittenExplanation& e : written) {
    explained_[e.job_id] =
        Explained{.message_hash = absl::HashOf(std::string_view(e.message)),
                  .written = e.written,
                  .cycle = explain_cycle_,
                  .reason = ReasonCode(e.reason)};
  }
}

leader::NextRound SchedulerService::LeadRound() {
  absl::StatusOr<CycleReport> report = CycleOnce();
  if (!report.ok()) {
    Log(LogLevel::kWarning, "scheduler: cycle failed",
        {{"error", report.status()}});
  } else if (report->admitted + report->preempted + report->dropped > 0) {
    Log(LogLevel::kInfo, "scheduler: cycle",
        {{"cycle", report->cycle},
         {"pending", report->pending},
         {"admitted", report->admitted},
         {"preempted", report->preempted},
         {"dropped", report->dropped},
         {"seconds", absl::ToDoubleSeconds(report->load + report->decide +
                                           report->commit)},
         {"load_seconds", absl::ToDoubleSeconds(report->load)},
         {"refresh_seconds", absl::ToDoubleSeconds(report->refresh)},
         {"decide_seconds", absl::ToDoubleSeconds(report->decide)},
         {"commit_seconds", absl::ToDoubleSeconds(report->commit)},
         {"explanations_written", report->explanations_written}});
  }
  return {};  // The interval, or a wake-up.
}

absl::Status SchedulerService::LoadConfigKind(size_t kind) {
  PlatformState& st = state_;
  switch (kind) {
    case kFlavors:
      return ReloadAll(*objects_, pg::FlavorKind(), st.flavors);
    case kClusters:
      return ReloadAll(*objects_, pg::ClusterKind(), st.clusters);
    case kPools:
      return ReloadAll(*objects_, pg::PoolKind(), st.pools);
    case kNodes:
      return ReloadAll(*objects_, pg::NodeKind(), st.nodes);
    case kCohorts:
      return ReloadAll(*objects_, pg::CohortKind(), st.cohorts);
    case kQueues:
      return ReloadAll(*objects_, pg::QueueKind(), st.queues);
    case kPriorityClasses:
      return ReloadAll(*objects_, pg::PriorityClassKind(), st.priority_classes);
    case kBudgets:
      return ReloadAll(*objects_, pg::BudgetKind(), budget_objects_);
  }
  return absl::InternalError("unknown configuration kind");
}

absl::Status SchedulerService::Refresh(CycleReport& report) {
  changed_.clear();
  jobs_reloaded_ = !loaded_;
  config_changed_ = false;
  if (!loaded_) {
    // This process's explanation writes still under way first: the rows read
    // below are then what was last written (a failed write changed nothing).
    (void)FlushExplanations();
    // The sequence first: a job that changes after it is read again next cycle.
    absl::StatusOr<uint64_t> seq = api_jobs_->LastEventSequence();
    if (!seq.ok()) return seq.status();
    // The jobs and the explanations written (by this leader or the one
    // before) are read on threads (and connections) of their own while this
    // one reads the configuration.
    absl::StatusOr<std::vector<pg::ActiveJob>> all;
    absl::StatusOr<std::vector<pg::WrittenExplanation>> written;
    std::thread jobs_reader(
        [&all, this] { all = jobs_->LoadActiveJobs(nullptr); });
    std::thread explanations_reader(
        [&written, this] { written = jobs_->LoadExplanations(); });
    const absl::Status config = RefreshConfig(report);
    jobs_reader.join();
    explanations_reader.join();
    if (!config.ok()) return config;
    if (!all.ok()) return all.status();
    if (!written.ok()) return written.status();
    // What the table holds counts as written: the first cycle writes only
    // what differs from it (as any cycle does), not every pending job's row,
    // and removes the rows of jobs that are no longer pending.
    SeedExplained(*written);
    reload_explanations_ = false;
    report.full_load = true;
    state_.jobs.clear();
    for (pg::ActiveJob& a : *all) {
      const int64_t id = std::stoll(std::string(domain::NameId(a.job.name())));
      state_.jobs[id] =
          JobView{std::move(a.job), std::move(a.attempt), a.last_checkpoint};
    }
    last_seq_ = *seq;
    loaded_ = true;
    return absl::OkStatus();
  }
  if (reload_explanations_) {
    // A hot standby became the leader: what the old leader wrote.
    (void)FlushExplanations();
    absl::StatusOr<std::vector<pg::WrittenExplanation>> written =
        jobs_->LoadExplanations();
    if (!written.ok()) return written.status();
    SeedExplained(*written);
    reload_explanations_ = false;
    explain_due_ = true;
  }
  // Only the jobs that have events since the last cycle, read with their
  // events in one transaction.
  while (true) {
    absl::StatusOr<pg::SchedulerStore::Changes> changes =
        jobs_->LoadChanges(last_seq_, 10000);
    if (!changes.ok()) return changes.status();
    report.refresh_events += changes->read_events;
    report.refresh_jobs += changes->read_jobs;
    report.events_read += changes->events;
    report.jobs_read += static_cast<int>(changes->ids.size());
    for (int64_t id : changes->ids) {
      state_.jobs.erase(id);
      changed_.push_back(id);
    }
    for (pg::ActiveJob& a : changes->active) {
      const int64_t id = std::stoll(std::string(domain::NameId(a.job.name())));
      state_.jobs[id] =
          JobView{std::move(a.job), std::move(a.attempt), a.last_checkpoint};
    }
    last_seq_ = changes->last_seq;
    if (!changes->more) break;
  }
  return RefreshConfig(report);
}

absl::Status SchedulerService::RefreshConfig(CycleReport& report) {
  // The configuration tables are read in full, each only when it changed
  // (one statement tells, per table): a dispatcher's heartbeat rewrites its
  // cluster's row, not the nodes.
  const absl::Time config_start = absl::Now();
  absl::StatusOr<std::vector<std::string>> fingerprints =
      objects_->Fingerprints(ConfigKinds());
  if (!fingerprints.ok()) return fingerprints.status();
  if (fingerprints->size() != ConfigKinds().size())
    return absl::InternalError("fingerprints: wrong column count");
  const bool all = !config_loaded_;
  std::map<std::string, v1::Cluster> old_clusters;
  bool clusters_changed = false, others_changed = false, budgets_changed = all;
  config_loaded_ = false;
  for (size_t k = 0; k < fingerprints->size(); ++k) {
    if (!all && (*fingerprints)[k] == config_fingerprints_[k]) continue;
    if (k == kBudgets) {
      budgets_changed = true;
      if (absl::Status s = LoadConfigKind(k); !s.ok()) return s;
      continue;
    }
    if (k == kClusters) {
      clusters_changed = true;
      old_clusters = std::move(state_.clusters);
    } else {
      others_changed = true;
    }
    if (absl::Status s = LoadConfigKind(k); !s.ok()) return s;
  }
  // Only clusters changed, and only in what a dispatcher's heartbeat writes:
  // the policy's picture stays (Advance() follows the dispatchers' liveness
  // from state_.clusters).
  config_changed_ =
      all || others_changed ||
      (clusters_changed && !SameButHeartbeats(old_clusters, state_.clusters));
  config_fingerprints_ = std::move(*fingerprints);
  config_loaded_ = true;
  if (absl::Status s = RefreshBudgets(budgets_changed); !s.ok()) return s;
  report.refresh_config = absl::Now() - config_start;
  return absl::OkStatus();
}

absl::Status SchedulerService::RefreshBudgets(bool budgets_changed) {
  const absl::Time wall = absl::Now();
  if (!budgets_changed && wall - budgets_read_ < absl::Seconds(1)) {
    return absl::OkStatus();
  }
  // The scheduler's clock (virtual in the simulator and the tests), as the
  // attempts' times and the meter's passes.
  const absl::Time now = options_.clock ? options_.clock() : wall;
  absl::StatusOr<std::map<std::string, pg::CurrentPrices>> prices =
      accounting_->PricesAt(absl::ToUnixMillis(now));
  if (!prices.ok()) return prices.status();
  std::map<std::string, BookPrices> book;
  for (const auto& [flavor, p] : *prices) {
    auto f = state_.flavors.find(flavor);
    const bool spot =
        f != state_.flavors.end() && f->second.kind() == v1::FLAVOR_KIND_SPOT;
    book[flavor] = {.gpu_hour = spot && p.spot_gpu_hour.has_value()
                                    ? p.spot_gpu_hour
                                    : p.gpu_hour,
                    .cpu_hour = p.cpu_hour,
                    .gib_hour = p.gib_hour};
  }
  std::map<std::pair<std::string, std::string>, BudgetView> budgets;
  if (!budget_objects_.empty()) {
    absl::StatusOr<std::vector<pg::BudgetStatusRow>> rows =
        accounting_->LoadBudgetStatus();
    if (!rows.ok()) return rows.status();
    std::map<std::pair<std::string, std::string>, const pg::BudgetStatusRow*>
        status;
    for (const pg::BudgetStatusRow& r : *rows) status[{r.tenant, r.id}] = &r;
    const int64_t month =
        accounting::pricing::MonthStartMs(absl::ToUnixMillis(now));
    for (const auto& [key, budget] : budget_objects_) {
      const accounting::pricing::BudgetRule rule = accounting::RuleOf(budget);
      BudgetView view{
          .name = absl::StrCat("tenants/", key.first, "/budgets/", key.second),
          .hold_limit_micros = accounting::pricing::HoldLimitMicros(rule),
          .user_hourly_cap_micros = rule.user_hourly_cap_micros};
      // A status of an earlier month is none: the month turned.
      if (auto it = status.find(key);
          it != status.end() && it->second->month_start_ms == month) {
        view.forecast_micros = it->second->forecast_micros;
        view.status_time = absl::FromUnixMillis(it->second->status_ms);
      }
      // The action in force from the budget as it is now (an edit acts at
      // once) and the meter's forecast.
      const accounting::pricing::BudgetAction action =
          accounting::pricing::ActiveAction(rule, view.forecast_micros);
      view.hold = action == accounting::pricing::BudgetAction::kHold;
      view.restrict_to_spot =
          action == accounting::pricing::BudgetAction::kRestrictToSpot;
      budgets[{key.first, budget.project()}] = std::move(view);
    }
  }
  budgets_read_ = wall;
  // What the policy's configuration maps: prices, which budgets limit
  // admission, which restrict to spot, which cap users' hourly spend.
  auto shape =
      [](const std::map<std::pair<std::string, std::string>, BudgetView>& m) {
        std::vector<std::tuple<std::pair<std::string, std::string>, std::string,
                               bool, bool, bool>>
            out;
        for (const auto& [key, v] : m) {
          out.emplace_back(key, v.name,
                           v.hold || v.hold_limit_micros.has_value(),
                           v.restrict_to_spot, v.user_hourly_cap_micros > 0);
        }
        return out;
      };
  if (book != state_.prices || shape(budgets) != shape(state_.budgets)) {
    config_changed_ = true;
  }
  state_.prices = std::move(book);
  state_.budgets = std::move(budgets);
  return absl::OkStatus();
}

absl::StatusOr<CycleReport> SchedulerService::RunCycle() { return CycleOnce(); }

uint16_t SchedulerService::ReasonCode(std::string_view reason) {
  auto it = reason_codes_.find(std::string(reason));
  if (it != reason_codes_.end()) return it->second;
  const uint16_t code = static_cast<uint16_t>(reasons_.size());
  reasons_.emplace_back(reason);
  reason_waits_.push_back(WaitsForResources(reason));
  reason_codes_.emplace(std::string(reason), code);
  return code;
}

// Queues stopped with STOP_POLICY_HOLD_AND_DRAIN (as Kueue's HoldAndDrain):
// besides admitting nothing (their pending jobs are left out of the
// snapshot, QUEUE_STOPPED), every job of theirs that holds resources is
// preempted through the same path as the policy's victims: a RUNNING job
// goes PREEMPTING (its dispatcher stops it after its grace period and it
// returns to QUEUED), an ADMITTED one back to QUEUED. A DISPATCHING job is
// taken once it runs. The jobs stay in their queue and are admitted again
// once its stop policy is NONE. Only while some queue drains are the jobs
// scanned.
void SchedulerService::DrainStoppedQueues(
    const policy::Decisions& d,
    std::vector<pg::PreemptDecision>& preemptions) const {
  std::set<std::pair<std::string, std::string>> draining;
  for (const auto& [key, queue] : state_.queues) {
    if (queue.stop_policy() == v1::STOP_POLICY_HOLD_AND_DRAIN)
      draining.insert(key);
  }
  if (draining.empty()) return;
  absl::flat_hash_set<int64_t> victims;
  for (const policy::Preemption& p : d.preemptions) victims.insert(p.victim);
  for (const auto& [id, view] : state_.jobs) {
    const v1::Job& job = view.job;
    if (job.state() != v1::JOB_STATE_RUNNING &&
        job.state() != v1::JOB_STATE_ADMITTED) {
      continue;
    }
    if (!draining.contains({job.tenant(), job.spec().queue()}) ||
        victims.contains(id)) {
      continue;
    }
    preemptions.push_back(
        {.tenant = job.tenant(),
         .job_id = id,
         .expected_version = job.version(),
         .reason = "QUEUE_DRAINED",
         .message = absl::StrCat(
             "QUEUE_DRAINED: queue ", job.tenant(), "/", job.spec().queue(),
             " is stopped with HOLD_AND_DRAIN; the job returns to its queue "
             "and is admitted again once the queue's stop policy is NONE")});
  }
}

absl::StatusOr<CycleReport> SchedulerService::CycleOnce() {
  absl::MutexLock l(&cycle_mu_);
  {
    // An explanation write failed: nothing written since can be trusted.
    absl::MutexLock w(&writes_mu_);
    if (!write_failure_.ok()) {
      write_failure_ = absl::OkStatus();
      ForgetWritten();
    }
  }
  CycleReport report;
  const absl::Time start = absl::Now();
  if (absl::Status s = Refresh(report); !s.ok()) {
    // The database may have lost (or this process missed) anything: reload
    // every job and rewrite every explanation.
    ForgetEverything();
    return s;
  }
  report.refresh = absl::Now() - start;
  // The policy's picture follows what changed: every job anew only on the
  // first cycle of a leader or after a failed one.
  const absl::Time now = options_.clock ? options_.clock() : absl::Now();
  const DispatcherLiveness liveness{.wall_now = absl::Now(),
                                    .timeout = options_.dispatcher_timeout};
  if (jobs_reloaded_ || rebuild_policy_ || !policy_state_.built()) {
    rebuild_policy_ = false;
    policy_state_.Reset(state_, now, liveness);
  } else {
    if (config_changed_) policy_state_.ConfigChanged(state_, now, liveness);
    std::sort(changed_.begin(), changed_.end());
    changed_.erase(std::unique(changed_.begin(), changed_.end()),
                   changed_.end());
    for (int64_t id : changed_) {
      auto it = state_.jobs.find(id);
      policy_state_.JobChanged(
          id, it == state_.jobs.end() ? nullptr : &it->second, now);
    }
  }
  policy_state_.Advance(state_, now, liveness);
  policy_state_.UpdateBudgets(state_);
  const absl::Time loaded = absl::Now();
  // Between two explaining cycles at least explanation_interval passes (a
  // new leader's first cycle, one after a full reload and one after a
  // failed write always explain): under steady churn cycles follow each
  // other back to back, and formatting and comparing every pending job's
  // explanation each time would cost more than the decisions themselves
  // (docs/performance.md). A cycle that does not explain leaves the
  // messages unformatted.
  const bool explain_now =
      options_.explanation_interval <= absl::ZeroDuration() || jobs_reloaded_ ||
      explain_due_ || explained_.empty() ||
      loaded - last_explained_ >= options_.explanation_interval;
  policy_state_.Cycle(decisions_, explain_now);
  const policy::Decisions& d = decisions_;
  const SnapshotIndex& index = policy_state_.index();
  const absl::Time decided = absl::Now();
  report.load = loaded - start;
  report.decide = decided - loaded;
  report.pending = static_cast<int>(policy_state_.snapshot().pending.size());
  report.running = static_cast<int>(policy_state_.snapshot().running.size());
  report.reservations = static_cast<int>(d.reservations.size());

  // Explanations of this cycle: (reason, message, position) per pending job,
  // compared with what was written as they come by the reason's code and a
  // hash of the message (no text kept or compared per job). A new reason is
  // written at once, a new message or a move between reasons of waiting for
  // resources at most every explanation_refresh (ExplanationDue); rows of
  // jobs no longer pending go away. (Two different messages of one job with
  // the same 64-bit hash would leave the older text until the reason
  // changes; the odds are negligible.) Only in an explaining cycle
  // (explain_now, above).
  const absl::Time explained_at = absl::Now();
  if (explain_now) {
    last_explained_ = loaded;
    explain_due_ = false;
  }
  const int64_t this_cycle = explain_now ? ++explain_cycle_ : explain_cycle_;
  std::vector<pg::Explanation> upserts;
  // Rewrites due to the refresh alone, capped per cycle (the oldest first).
  // The texts stay valid through the cycle (decisions_, policy_state_).
  struct DueRefresh {
    absl::Time written;
    int64_t id;
    uint64_t hash;
    std::string_view message;
    int32_t position;
    uint16_t reason;
  };
  std::vector<DueRefresh> refreshes;
  auto explain = [&](int64_t id, uint16_t reason, std::string_view message,
                     int32_t position) {
    const uint64_t hash = absl::HashOf(message);  // As a full load seeds it.
    auto [it, inserted] = explained_.try_emplace(id);
    Explained& last = it->second;
    last.cycle = this_cycle;
    if (!inserted) {
      const Rewrite rewrite = ExplanationRewrite(
          last.reason == reason, last.message_hash == hash,
          reason_waits_[last.reason] && reason_waits_[reason], last.written,
          explained_at, options_.explanation_refresh);
      if (rewrite == Rewrite::kNo) return;
      if (rewrite == Rewrite::kRefresh) {
        refreshes.push_back(
            {last.written, id, hash, message, position, reason});
        return;
      }
    }
    last.reason = reason;
    last.message_hash = hash;
    last.written = explained_at;
    upserts.push_back({.job_id = id,
                       .reason = reasons_[reason],
                       .message = std::string(message),
                       .position = position,
                       .evaluate_time = explained_at});
  };
  // The code of each policy::PendingReason, looked up once per cycle.
  std::array<int, 256> pending_codes;
  pending_codes.fill(-1);
  if (explain_now) {
    // explained_ is much larger than the caches at scale: each lookup
    // would wait for memory, so the job a few places ahead is fetched early.
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < d.pending.size(); ++i) {
      if (i + kAhead < d.pending.size())
        explained_.prefetch(d.pending[i + kAhead].job);
      const policy::PendingDecision& p = d.pending[i];
      int& code = pending_codes[static_cast<uint8_t>(p.reason)];
      if (code < 0) code = ReasonCode(policy::PendingReasonCode(p.reason));
      explain(p.job, static_cast<uint16_t>(code), p.message.str(), p.position);
    }
    for (const auto& [id, message] : policy_state_.excluded()) {
      explain(
          id,
          ReasonCode(std::string_view(message).substr(0, message.find(':'))),
          message, 0);
    }
  }
  const size_t cap =
      options_.explanation_refresh_per_cycle > 0
          ? static_cast<size_t>(options_.explanation_refresh_per_cycle)
          : refreshes.size();
  if (refreshes.size() > cap) {
    std::nth_element(refreshes.begin(), refreshes.begin() + cap,
                     refreshes.end(),
                     [](const DueRefresh& a, const DueRefresh& b) {
                       return a.written < b.written ||
                              (a.written == b.written && a.id < b.id);
                     });
    refreshes.resize(cap);
  }
  for (const DueRefresh& r : refreshes) {
    Explained& last = explained_.find(r.id)->second;
    last.reason = r.reason;
    last.message_hash = r.hash;
    last.written = explained_at;
    upserts.push_back({.job_id = r.id,
                       .reason = reasons_[r.reason],
                       .message = std::string(r.message),
                       .position = r.position,
                       .evaluate_time = explained_at});
  }

  // The cost estimate of each job whose explanation is written: on the
  // flavor it would try first (docs/accounting.md, "A job's cost").
  for (pg::Explanation& e : upserts) {
    e.estimated_cost_micros = policy_state_.PendingEstimate(e.job_id);
  }

  // Preemptions, then the admissions that need them.
  std::vector<pg::PreemptDecision> preemptions;
  std::map<int64_t, std::vector<int64_t>> victims_of;
  for (const policy::Preemption& p : d.preemptions) {
    auto it = state_.jobs.find(p.victim);
    if (it == state_.jobs.end()) continue;
    preemptions.push_back({.tenant = it->second.job.tenant(),
                           .job_id = p.victim,
                           .expected_version = it->second.job.version(),
                           .reason = policy::PreemptionReasonCode(p.reason),
                           .message = p.message});
    victims_of[p.preemptor].push_back(p.victim);
  }
  DrainStoppedQueues(d, preemptions);
  std::vector<pg::AdmitDecision> admissions;
  for (const policy::Admission& a : d.admissions) {
    auto it = state_.jobs.find(a.job);
    if (it == state_.jobs.end()) continue;
    // The policy never places a gang across clusters (placement.h).
    const std::string& cluster = index.node_clusters[a.worker_nodes.front()];
    const std::string& flavor_id = index.flavor_ids[a.flavor];
    pg::AdmitDecision admit{.tenant = it->second.job.tenant(),
                            .job_id = a.job,
                            .expected_version = it->second.job.version(),
                            .victims = victims_of[a.job]};
    admit.attempt.set_cluster(absl::StrCat("clusters/", cluster));
    admit.attempt.set_flavor(absl::StrCat("flavors/", flavor_id));
    auto flavor = state_.flavors.find(flavor_id);
    if (flavor != state_.flavors.end())
      *admit.attempt.mutable_gpu_hour_price() = flavor->second.gpu_hour_price();
    // What the admission reserves from the job's budgets, for the job's cost
    // estimate (docs/accounting.md).
    admit.estimated_cost_micros =
        policy_state_.ExpectedCost(it->second.job, a.flavor);
    if (flavor != state_.flavors.end() &&
        !flavor->second.gpu_hour_price().currency_code().empty()) {
      admit.attempt.mutable_estimated_cost()->set_currency_code(
          flavor->second.gpu_hour_price().currency_code());
      admit.attempt.mutable_estimated_cost()->set_micros(
          *admit.estimated_cost_micros);
    }
    for (size_t w = 0; w < a.worker_nodes.size(); ++w) {
      v1::WorkerPlacement* p = admit.attempt.add_placements();
      p->set_worker(static_cast<int32_t>(w));
      p->set_node(index.node_names[a.worker_nodes[w]]);
    }
    admit.message = absl::StrCat(
        "admitted on flavor ", flavor_id, " in cluster ", cluster,
        a.borrowing ? " (borrowing from its cohort)" : "",
        a.backfill ? " (backfill: ends before a reservation)" : "",
        "; expected cost ", policy::FormatMicros(*admit.estimated_cost_micros),
        admit.attempt.estimated_cost().currency_code().empty() ? "" : " ",
        admit.attempt.estimated_cost().currency_code());
    admissions.push_back(std::move(admit));
  }
  report.commit_prepare = absl::Now() - decided;
  if (!preemptions.empty() || !admissions.empty()) {
    absl::StatusOr<pg::DecisionOutcome> outcome =
        jobs_->ApplyDecisions(preemptions, admissions);
    if (!outcome.ok()) {
      ForgetWritten();
      return outcome.status();
    }
    report.commit_lock_jobs = outcome->lock_jobs;
    report.commit_writes = outcome->writes;
    report.commit_outbox_wait = outcome->outbox_wait;
    report.commit_events = outcome->events;
    report.commit_commit = outcome->commit;
    report.admitted = static_cast<int>(outcome->admitted.size());
    report.preempted = static_cast<int>(outcome->preempted.size());
    report.dropped = static_cast<int>(outcome->dropped.size());
    Decided("admit").Increment(report.admitted);
    Decided("preempt").Increment(report.preempted);
    Decided("dropped").Increment(report.dropped);
    // Wake the dispatchers that have work now instead of letting them wait
    // for their timer (a hint only; they read PostgreSQL).
    if (redis_ != nullptr && report.admitted + report.preempted > 0) {
      std::set<std::string> clusters;
      for (const pg::AdmitDecision& a : admissions) {
        clusters.insert(std::string(domain::NameId(a.attempt.cluster())));
      }
      for (const pg::PreemptDecision& p : preemptions) {
        auto it = state_.jobs.find(p.job_id);
        if (it != state_.jobs.end() && it->second.attempt.has_value()) {
          clusters.insert(
              std::string(domain::NameId(it->second.attempt->cluster())));
        }
      }
      for (const std::string& c : clusters) {
        (void)redis_->Notify(storage::redis::DispatcherWakeupChannel(c),
                             "scheduler");
      }
    }
  }

  std::vector<int64_t> done;
  for (auto it = explained_.begin(); explain_now && it != explained_.end();) {
    if (it->second.cycle != this_cycle) {
      done.push_back(it->first);
      explained_.erase(it++);
    } else {
      ++it;
    }
  }
  report.explanations_written = static_cast<int>(upserts.size() + done.size());
  // The queues' weighted shares and what they lend, with the explanations and
  // when they changed.
  std::vector<pg::QueueShareRow> share_changes;
  if (explain_now) {
    const std::vector<int64_t> shares = policy_state_.QueueShares();
    const std::optional<policy::QuotaTree::Lent> lent =
        policy_state_.QueueLent();
    for (size_t q = 0; q < shares.size() && q < index.queue_keys.size(); ++q) {
      ShareWritten now{.share = shares[q]};
      for (size_t f = 0; lent.has_value() && f < index.flavor_ids.size(); ++f) {
        for (policy::Resource r : policy::kAllResources) {
          const int64_t amount = lent->Get(static_cast<policy::QueueId>(q),
                                           static_cast<policy::FlavorId>(f), r);
          if (amount == 0) continue;
          now.lent.push_back({.flavor = index.flavor_ids[f],
                              .resource = ResourceNumber(r),
                              .amount = amount});
        }
      }
      auto [it, inserted] =
          shares_written_.try_emplace(index.queue_keys[q], now);
      if (!inserted && it->second.share == now.share &&
          it->second.lent == now.lent) {
        continue;
      }
      it->second = now;
      share_changes.push_back(
          {.tenant = index.queue_keys[q].first,
           .queue = index.queue_keys[q].second,
           .weighted_share = shares[q] == policy::QuotaTree::kInfiniteShare
                                 ? std::numeric_limits<double>::infinity()
                                 : static_cast<double>(shares[q]) /
                                       policy::QuotaTree::kShareOne,
           .lent = std::move(now.lent)});
    }
  }
  {
    absl::MutexLock w(&writes_mu_);
    for (pg::QueueShareRow& row : share_changes) {
      share_writes_[{row.tenant, row.queue}] = std::move(row);
    }
    for (pg::Explanation& e : upserts) {
      const int64_t id = e.job_id;
      writes_[id] = std::move(e);
    }
    for (int64_t id : done) writes_[id] = std::nullopt;
  }
  report.commit = absl::Now() - decided;
  report.cycle = ++cycles_;
  CycleSeconds().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  return report;
}

}  // namespace trainyard::scheduler
