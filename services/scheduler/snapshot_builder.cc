#include "services/scheduler/snapshot_builder.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "google/protobuf/util/time_util.h"
#include "services/lib/domain/capacity.h"
#include "services/lib/domain/names.h"
#include "services/scheduler/policy/preemption.h"

namespace trainyard::scheduler {
namespace {

namespace v1 = ::trainyard::v1;
using policy::Resource;

// As TimeUtil::TimestampToMicroseconds (nanos toward zero), inline: it is
// called for every job of every cycle.
int64_t Micros(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}
int64_t Micros(const google::protobuf::Duration& d) {
  return google::protobuf::util::TimeUtil::DurationToMicroseconds(d);
}

policy::Resources ShapeOf(const v1::Resources& r) {
  return {r.gpus(), r.cpu_millis(), r.memory_bytes()};
}

std::vector<policy::FlavorQuota> QuotasOf(
    const google::protobuf::RepeatedPtrField<v1::FlavorQuotas>& quotas,
    const absl::flat_hash_map<std::string, policy::FlavorId>& flavor_ids) {
  std::vector<policy::FlavorQuota> out;
  for (const v1::FlavorQuotas& fq : quotas) {
    auto f = flavor_ids.find(std::string(domain::NameId(fq.flavor())));
    if (f == flavor_ids.end()) continue;
    policy::FlavorQuota q{.flavor = f->second};
    for (const v1::ResourceQuota& rq : fq.resources()) {
      int r = -1;
      switch (rq.resource()) {
        case v1::RESOURCE_NAME_GPU:
          r = static_cast<int>(Resource::kGpu);
          break;
        case v1::RESOURCE_NAME_CPU:
          r = static_cast<int>(Resource::kCpu);
          break;
        case v1::RESOURCE_NAME_MEMORY:
          r = static_cast<int>(Resource::kMemory);
          break;
        default:
          break;
      }
      if (r < 0) continue;
      policy::ResourceQuota pq{.nominal = rq.nominal()};
      if (rq.has_borrowing_limit()) pq.borrowing_limit = rq.borrowing_limit();
      if (rq.has_lending_limit()) pq.lending_limit = rq.lending_limit();
      q.resources[r] = pq;
    }
    out.push_back(std::move(q));
  }
  return out;
}

// RetryPolicy defaults (job.proto): 10 s, doubling, at most 10 min.
constexpr absl::Duration kDefaultInitialBackoff = absl::Seconds(10);
constexpr absl::Duration kDefaultMaxBackoff = absl::Minutes(10);

absl::Duration DurationOf(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

bool HoldsResources(v1::JobState s) {
  return s == v1::JOB_STATE_ADMITTED || s == v1::JOB_STATE_DISPATCHING ||
         s == v1::JOB_STATE_RUNNING || s == v1::JOB_STATE_PREEMPTING;
}

}  // namespace

policy::Backend BackendOf(v1::BackendKind kind) {
  switch (kind) {
    case v1::BACKEND_KIND_SIM:
      return policy::Backend::kSim;
    case v1::BACKEND_KIND_SLURM:
      return policy::Backend::kSlurm;
    case v1::BACKEND_KIND_KUBERNETES:
      return policy::Backend::kKubernetes;
    default:
      return policy::Backend::kUnknown;
  }
}

policy::BackendSet BackendsOf(v1::BackendPreference preference) {
  // The nodes of the kinds the check at submit allows (one rule:
  // domain::BackendMatches); all of them: any node.
  policy::BackendSet allowed = 0, every = 0;
  for (int k = v1::BackendKind_MIN; k <= v1::BackendKind_MAX; ++k) {
    if (!v1::BackendKind_IsValid(k)) continue;
    const auto kind = static_cast<v1::BackendKind>(k);
    const policy::BackendSet bit = policy::BackendBit(BackendOf(kind));
    every |= bit;
    if (domain::BackendMatches(preference, kind)) allowed |= bit;
  }
  return allowed == every ? policy::kAnyBackend : allowed;
}

bool DispatcherGone(const v1::Cluster& cluster,
                    const DispatcherLiveness& liveness) {
  if (!cluster.has_heartbeat_time() || liveness.timeout <= absl::ZeroDuration())
    return false;
  return liveness.wall_now -
             absl::FromUnixMicros(Micros(cluster.heartbeat_time())) >
         liveness.timeout;
}

policy::GpuModelId SnapshotMapper::ModelId(const std::string& name) {
  if (name.empty()) return policy::kAnyGpuModel;
  if (gpu_model_names_.empty()) gpu_model_names_.push_back("");
  auto [it, inserted] = models_.try_emplace(
      name, static_cast<policy::GpuModelId>(gpu_model_names_.size()));
  if (inserted) gpu_model_names_.push_back(name);
  return it->second;
}

// Priority classes: the configured ones, then any (name, value) a job
// carries that is not configured; "(preempting)" copies are never
// preemptible.
policy::PriorityClassId SnapshotMapper::ClassId(const std::string& name,
                                                int32_t value,
                                                bool preemptible) {
  std::pair<std::string, int32_t> key{
      preemptible ? name : name + " (preempting)", value};
  auto [it, inserted] = classes_.try_emplace(
      key, static_cast<policy::PriorityClassId>(priority_classes_.size()));
  if (inserted) {
    priority_classes_.push_back(
        {.name = key.first, .value = value, .preemptible = preemptible});
  }
  return it->second;
}

// Memoized by what it depends on: most jobs share a few classes.
policy::PriorityClassId SnapshotMapper::JobClass(const v1::Job& job,
                                                 bool preemptible) {
  auto [it, inserted] = class_of_.try_emplace(
      {job.spec().priority_class(), job.priority(), preemptible}, 0);
  if (inserted) {
    std::string name = std::string(domain::NameId(job.spec().priority_class()));
    auto configured = class_preemptible_.find(name);
    if (name.empty()) name = "default";
    const bool class_preemptible =
        configured == class_preemptible_.end() || configured->second;
    it->second =
        ClassId(name, job.priority(), preemptible && class_preemptible);
  }
  return it->second;
}

void SnapshotMapper::MapConfig(const PlatformState& state,
                               const DispatcherLiveness& liveness,
                               policy::Snapshot* snapshot,
                               SnapshotIndex* index) {
  policy::Snapshot& s = *snapshot;
  s = policy::Snapshot{};
  *index = SnapshotIndex{};
  flavor_ids_.clear();
  node_ids_.clear();
  queue_ids_.clear();
  known_queues_.clear();

  // The backends that offer each flavor: those of the clusters of its pools.
  absl::flat_hash_map<std::string, policy::BackendSet> flavor_backends;
  for (const auto& [key, pool] : state.pools) {
    auto cluster = state.clusters.find(key.first);
    if (cluster == state.clusters.end()) continue;
    flavor_backends[std::string(domain::NameId(pool.flavor()))] |=
        policy::BackendBit(BackendOf(cluster->second.backend()));
  }
  // Flavors.
  for (const auto& [id, f] : state.flavors) {
    flavor_ids_[id] = static_cast<policy::FlavorId>(s.flavors.size());
    index->flavor_ids.push_back(id);
    policy::FlavorKind kind = policy::FlavorKind::kOnDemand;
    if (f.kind() == v1::FLAVOR_KIND_RESERVED)
      kind = policy::FlavorKind::kReserved;
    if (f.kind() == v1::FLAVOR_KIND_SPOT) kind = policy::FlavorKind::kSpot;
    // The price book's prices where it has them (what the meter will
    // charge), else the flavor's own GPU-hour price.
    BookPrices book;
    if (auto it = state.prices.find(id); it != state.prices.end()) {
      book = it->second;
    }
    s.flavors.push_back(
        {.name = id,
         .kind = kind,
         .price_micros_per_gpu_hour = std::max<int64_t>(
             0, book.gpu_hour.value_or(f.gpu_hour_price().micros())),
         .price_micros_per_cpu_hour =
             std::max<int64_t>(0, book.cpu_hour.value_or(0)),
         .price_micros_per_gib_hour =
             std::max<int64_t>(0, book.gib_hour.value_or(0)),
         .reclaim_rate_per_hour = std::max(0.0, f.reclaim_rate_per_hour())});
    if (auto it = flavor_backends.find(id); it != flavor_backends.end()) {
      s.flavors.back().backends = it->second;
    }
    if (f.has_restart_overhead()) {
      s.flavors.back().restart_overhead_micros =
          std::max<int64_t>(0, Micros(f.restart_overhead()));
    }
  }

  // Topology labels are per cluster: a gang never spans clusters, and racks
  // and blocks must not either.
  auto intern = [](absl::flat_hash_map<std::string, int32_t>& ids,
                   std::string key) {
    return ids.try_emplace(std::move(key), static_cast<int32_t>(ids.size()))
        .first->second;
  };
  // Nodes.
  for (const auto& [key, node] : state.nodes) {
    const auto& [cluster_id, node_id] = key;
    auto pool = state.pools.find({cluster_id, node.pool()});
    if (pool == state.pools.end()) continue;
    auto flavor =
        flavor_ids_.find(std::string(domain::NameId(pool->second.flavor())));
    if (flavor == flavor_ids_.end()) continue;
    auto cluster = state.clusters.find(cluster_id);
    const bool cordoned =
        cluster == state.clusters.end() || cluster->second.cordoned() ||
        cluster->second.health() == v1::CLUSTER_HEALTH_UNHEALTHY ||
        DispatcherGone(cluster->second, liveness);
    std::string name =
        absl::StrCat("clusters/", cluster_id, "/nodes/", node_id);
    node_ids_[name] = static_cast<policy::NodeId>(s.nodes.size());
    index->node_names.push_back(name);
    index->node_clusters.push_back(cluster_id);
    std::string gpu_model = node.capacity().gpu_model();
    if (gpu_model.empty())
      gpu_model =
          state.flavors.at(std::string(domain::NameId(pool->second.flavor())))
              .gpu_model();
    policy::Node n{
        .name = std::move(name),
        .cluster = intern(clusters_, cluster_id),
        .backend = cluster == state.clusters.end()
                       ? policy::Backend::kUnknown
                       : BackendOf(cluster->second.backend()),
        .flavor = flavor->second,
        .gpu_model = ModelId(gpu_model),
        .capacity = ShapeOf(node.capacity()),
        .schedulable = node.state() == v1::NODE_STATE_READY && !cordoned};
    if (!node.topology().block().empty()) {
      n.block = intern(blocks_,
                       absl::StrCat(cluster_id, "/", node.topology().block()));
      if (!node.topology().rack().empty()) {
        n.rack = intern(
            racks_, absl::StrCat(cluster_id, "/", node.topology().block(), "/",
                                 node.topology().rack()));
      }
    } else if (!node.topology().rack().empty()) {
      n.rack = intern(racks_,
                      absl::StrCat(cluster_id, "//", node.topology().rack()));
    }
    s.nodes.push_back(std::move(n));
  }

  // Cohorts (parents may come later in key order: ids first, then links).
  absl::flat_hash_map<std::string, policy::CohortId> cohort_ids;
  for (const auto& [id, c] : state.cohorts) {
    cohort_ids[id] = static_cast<policy::CohortId>(s.cohorts.size());
    s.cohorts.push_back({.name = id});
  }
  for (const auto& [id, c] : state.cohorts) {
    policy::Cohort& cohort = s.cohorts[cohort_ids[id]];
    auto parent = cohort_ids.find(std::string(domain::NameId(c.parent())));
    if (!c.parent().empty() && parent != cohort_ids.end())
      cohort.parent = parent->second;
    cohort.quotas = QuotasOf(c.quotas(), flavor_ids_);
    cohort.weight = c.fair_share_weight() > 0 ? c.fair_share_weight() : 1.0;
  }
  // A cohort chain that loops would be refused by ValidateSnapshot: cut it.
  for (size_t c = 0; c < s.cohorts.size(); ++c) {
    std::optional<policy::CohortId> p = s.cohorts[c].parent;
    for (size_t steps = 0; p.has_value(); ++steps) {
      if (steps > s.cohorts.size()) {
        s.cohorts[c].parent.reset();
        break;
      }
      p = s.cohorts[*p].parent;
    }
  }

  // Budgets: those that limit admission (a HOLD threshold, or in HOLD) are
  // the policy's; those that restrict to spot are remembered for MapJob.
  // Scopes with a user hourly cap get an hourly budget per user, interned by
  // MapJob after the monthly ones: kept while those and the capped scopes
  // stay the same (else the jobs are mapped anew: SameClassesAs).
  const auto previous_ids = std::move(budget_ids_);
  const auto previous_capped = std::move(capped_);
  budget_ids_.clear();
  restricted_.clear();
  capped_.clear();
  budgets_.clear();
  for (const auto& [key, b] : state.budgets) {
    if (b.restrict_to_spot) restricted_.insert(key);
    if (b.user_hourly_cap_micros > 0)
      capped_[key] = {b.name, b.user_hourly_cap_micros};
    if (!b.hold && !b.hold_limit_micros.has_value()) continue;
    budget_ids_[key] = static_cast<policy::BudgetId>(budgets_.size());
    budgets_.push_back({.name = b.name, .remaining_micros = 0});
  }
  if (budget_ids_ != previous_ids || !SameScopes(capped_, previous_capped)) {
    rate_cap_ids_.clear();
    rate_caps_.clear();
  }
  for (const RateCapKey& k : rate_caps_) {
    const auto& [name, cap] = capped_.at({k.tenant, k.project});
    budgets_.push_back({.name = name,
                        .remaining_micros = 0,
                        .hourly = true,
                        .user = std::string(domain::NameId(k.user)),
                        .hourly_cap_micros = cap});
  }
  s.budgets = budgets_;

  // Queues.
  for (const auto& [key, q] : state.queues) {
    known_queues_.insert(key);
    if (q.stop_policy() == v1::STOP_POLICY_HOLD ||
        q.stop_policy() == v1::STOP_POLICY_HOLD_AND_DRAIN) {
      continue;
    }
    queue_ids_[key] = static_cast<policy::QueueId>(s.queues.size());
    index->queue_keys.push_back(key);
    policy::Queue queue{
        .name = absl::StrCat(key.first, "/", key.second),
        .tenant = key.first,
        .weight = q.fair_share_weight() > 0 ? q.fair_share_weight() : 1.0,
        .strategy = q.queueing_strategy() == v1::QUEUEING_STRATEGY_STRICT_FIFO
                        ? policy::QueueingStrategy::kStrictFifo
                        : policy::QueueingStrategy::kBestEffortFifo};
    auto cohort = cohort_ids.find(std::string(domain::NameId(q.cohort())));
    if (!q.cohort().empty() && cohort != cohort_ids.end())
      queue.cohort = cohort->second;
    queue.quotas = QuotasOf(q.quotas(), flavor_ids_);
    switch (q.preemption().within_queue()) {
      case v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY:
        queue.within_queue_preemption =
            policy::WithinQueuePreemption::kLowerPriority;
        break;
      case v1::WITHIN_QUEUE_PREEMPTION_LOWER_OR_NEWER_EQUAL_PRIORITY:
        queue.within_queue_preemption =
            policy::WithinQueuePreemption::kLowerOrNewerEqualPriority;
        break;
      default:
        break;
    }
    switch (q.preemption().reclaim_within_cohort()) {
      case v1::RECLAIM_WITHIN_COHORT_LOWER_PRIORITY:
        queue.reclaim_within_cohort =
            policy::ReclaimWithinCohort::kLowerPriority;
        break;
      case v1::RECLAIM_WITHIN_COHORT_ANY:
        queue.reclaim_within_cohort = policy::ReclaimWithinCohort::kAny;
        break;
      default:
        break;
    }
    const v1::FairSharePreemption fs = q.preemption().fair_share();
    queue.fair_share_preemption =
        fs == v1::FAIR_SHARE_PREEMPTION_LESS_THAN_OR_EQUAL_TO_FINAL_SHARE ||
        fs == v1::FAIR_SHARE_PREEMPTION_LESS_THAN_INITIAL_SHARE;
    if (q.preemption().has_borrow_within_cohort_max_priority()) {
      queue.borrow_within_cohort_max_priority =
          q.preemption().borrow_within_cohort_max_priority();
    }
    queue.try_next_when_borrowing =
        q.flavor_fungibility().when_can_borrow() != v1::FLAVOR_FALLBACK_STOP;
    queue.try_next_when_preempting =
        q.flavor_fungibility().when_can_preempt() != v1::FLAVOR_FALLBACK_STOP;
    if (fs == v1::FAIR_SHARE_PREEMPTION_LESS_THAN_INITIAL_SHARE) {
      queue.fair_share_strategy =
          policy::FairShareStrategy::kLessThanInitialShare;
    }
    if (q.has_min_runtime())
      queue.min_runtime = std::max<int64_t>(0, Micros(q.min_runtime()));
    queue.budget = BudgetOf(key.first, "");
    s.queues.push_back(std::move(queue));
  }

  // Priority classes (a change of what is preemptible remaps every job).
  absl::flat_hash_map<std::string, bool> preemptible;
  for (const auto& [id, pc] : state.priority_classes)
    preemptible[id] = pc.preemptible();
  if (preemptible != class_preemptible_) {
    class_preemptible_ = std::move(preemptible);
    class_of_.clear();
  }
  for (const auto& [id, pc] : state.priority_classes)
    ClassId(id, pc.value(), pc.preemptible());
  if (gpu_model_names_.empty()) gpu_model_names_.push_back("");
  s.priority_classes = priority_classes_;
  s.gpu_model_names = gpu_model_names_;
}

JobEntry SnapshotMapper::MapJob(int64_t id, const JobView& view,
                                absl::Time now) {
  JobEntry e;
  const v1::Job& job = view.job;
  const v1::JobSpec& spec = job.spec();
  auto queue = queue_ids_.find(
      std::pair<std::string, std::string>(job.tenant(), spec.queue()));
  const policy::Resources worker = ShapeOf(spec.resources());
  const int32_t workers = std::max(1, spec.workers());
  if (HoldsResources(job.state())) {
    if (!view.attempt.has_value()) return e;
    const v1::Attempt& a = *view.attempt;
    auto flavor = flavor_ids_.find(std::string(domain::NameId(a.flavor())));
    if (flavor == flavor_ids_.end()) return e;
    // Running work of a queue that no longer exists (or is stopped) holds
    // its nodes, but no quota (with no queue at all there is nothing to
    // admit: it is left out); so does a job being preempted: its preemptor,
    // admitted in its place, is charged that quota now (else the quota would
    // count twice until the victim has stopped, and its cohort would admit
    // nothing else meanwhile).
    if (queue == queue_ids_.end() && queue_ids_.empty()) return e;
    policy::RunningAttempt& r = e.running;
    r = policy::RunningAttempt{
        .job = id,
        .queue = queue != queue_ids_.end() ? queue->second : 0,
        .flavor = flavor->second,
        .priority_class =
            JobClass(job, job.state() != v1::JOB_STATE_PREEMPTING),
        .resources = worker * workers,
        .start_time = a.has_start_time()   ? Micros(a.start_time())
                      : a.has_admit_time() ? Micros(a.admit_time())
                                           : absl::ToUnixMicros(now),
        .time_limit_micros =
            spec.has_time_limit() ? Micros(spec.time_limit()) : 0,
        .worker_resources = worker};
    if (view.last_checkpoint.has_value())
      r.last_checkpoint_time = absl::ToUnixMicros(*view.last_checkpoint);
    for (const v1::WorkerPlacement& p : a.placements()) {
      auto node = node_ids_.find(p.node());
      if (node == node_ids_.end()) continue;
      r.placement.push_back(node->second);
    }
    if (job.state() == v1::JOB_STATE_PREEMPTING || queue == queue_ids_.end()) {
      r.resources = {};
    }
    e.kind = JobEntry::Kind::kRunning;
    return e;
  }
  if (job.state() != v1::JOB_STATE_QUEUED) return e;
  if (std::optional<absl::Time> until = RetryNotBefore(view);
      until.has_value() && *until > now) {
    e.kind = JobEntry::Kind::kExcluded;
    e.excluded_until = until;
    e.excluded = absl::StrCat(
        "RETRY_BACKOFF: attempt ", job.attempt_count(), " failed; retry ",
        job.attempt_count() + 1, " waits until ",
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", *until, absl::UTCTimeZone()),
        " (in ", absl::ToInt64Seconds(*until - now) + 1, " s)");
    return e;
  }
  if (queue == queue_ids_.end()) {
    e.kind = JobEntry::Kind::kExcluded;
    e.excluded =
        !known_queues_.contains({job.tenant(), spec.queue()})
            ? absl::StrCat("QUEUE_NOT_FOUND: queue ", job.tenant(), "/",
                           spec.queue(), " does not exist")
            : absl::StrCat("QUEUE_STOPPED: queue ", job.tenant(), "/",
                           spec.queue(), " admits no new work (stop policy)");
    return e;
  }
  e.kind = JobEntry::Kind::kPending;
  policy::PendingJob& p = e.pending;
  p = CostShapeOf(job);
  p.id = id;
  p.name = job.display_name();
  p.queue = queue->second;
  p.priority_class = JobClass(job, true);
  p.submit_time = Micros(job.create_time());
  p.worker.gpu_model = ModelId(spec.resources().gpu_model());
  p.worker.backends = BackendsOf(spec.backend());
  if (!spec.project().empty())
    p.budget = BudgetOf(job.tenant(), spec.project());
  if (capped_.contains({job.tenant(), ""}))
    p.tenant_rate_cap = RateCap(job.tenant(), "", job.creator());
  if (!spec.project().empty() &&
      capped_.contains({job.tenant(), spec.project()}))
    p.project_rate_cap = RateCap(job.tenant(), spec.project(), job.creator());
  switch (spec.topology().required_level()) {
    case v1::TOPOLOGY_LEVEL_BLOCK:
      p.required_topology = policy::TopologyLevel::kBlock;
      break;
    case v1::TOPOLOGY_LEVEL_RACK:
      p.required_topology = policy::TopologyLevel::kRack;
      break;
    default:
      break;
  }
  switch (spec.spot_policy()) {
    case v1::SPOT_POLICY_NEVER:
      p.spot_policy = policy::SpotPolicy::kNever;
      break;
    case v1::SPOT_POLICY_ALLOWED:
      p.spot_policy = policy::SpotPolicy::kAllowed;
      break;
    case v1::SPOT_POLICY_PREFERRED:
      p.spot_policy = policy::SpotPolicy::kPreferred;
      break;
    case v1::SPOT_POLICY_REQUIRED:
      p.spot_policy = policy::SpotPolicy::kRequired;
      break;
    default:
      // As the API documents: allowed for resumable jobs, never otherwise.
      p.spot_policy = spec.checkpoint().resumable()
                          ? policy::SpotPolicy::kAllowed
                          : policy::SpotPolicy::kNever;
      break;
  }
  // A budget past its RESTRICT_TO_SPOT threshold: spot capacity only (a job
  // that asked for spot alone keeps its own policy; its explanation need not
  // blame the budget).
  if (p.spot_policy != policy::SpotPolicy::kRequired &&
      (restricted_.contains({job.tenant(), ""}) ||
       restricted_.contains({job.tenant(), spec.project()}))) {
    p.spot_policy = policy::SpotPolicy::kRequiredByBudget;
  }
  return e;
}

std::optional<policy::BudgetId> SnapshotMapper::BudgetOf(
    const std::string& tenant, const std::string& project) const {
  auto it = budget_ids_.find({tenant, project});
  if (it == budget_ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<policy::BudgetId> SnapshotMapper::RateCapOf(
    const std::string& tenant, const std::string& project,
    const std::string& user) const {
  auto it = rate_cap_ids_.find({tenant, project, user});
  if (it == rate_cap_ids_.end()) return std::nullopt;
  return it->second;
}

policy::BudgetId SnapshotMapper::RateCap(const std::string& tenant,
                                         const std::string& project,
                                         const std::string& user) {
  RateCapKey key{tenant, project, user};
  auto [it, inserted] = rate_cap_ids_.try_emplace(
      key, static_cast<policy::BudgetId>(budgets_.size()));
  if (inserted) {
    const auto& [name, cap] = capped_.at({tenant, project});
    budgets_.push_back({.name = name,
                        .remaining_micros = 0,
                        .hourly = true,
                        .user = std::string(domain::NameId(user)),
                        .hourly_cap_micros = cap});
    rate_caps_.push_back(std::move(key));
  }
  return it->second;
}

policy::PendingJob SnapshotMapper::CostShapeOf(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  const policy::Resources worker = ShapeOf(spec.resources());
  return policy::PendingJob{
      .workers = std::max(1, spec.workers()),
      .worker = {.gpus = worker.gpus,
                 .cpu_millis = worker.cpu_millis,
                 .memory_bytes = worker.memory_bytes},
      .time_limit_micros =
          spec.has_time_limit() ? Micros(spec.time_limit()) : 0,
      .expected_runtime_micros =
          spec.has_expected_runtime() ? Micros(spec.expected_runtime()) : 0,
      .can_checkpoint = spec.checkpoint().resumable(),
      .checkpoint_interval_micros = spec.checkpoint().has_interval()
                                        ? Micros(spec.checkpoint().interval())
                                        : 0};
}

void BuildSnapshot(const PlatformState& state, absl::Time now,
                   policy::Snapshot* snapshot, SnapshotIndex* index,
                   const DispatcherLiveness& liveness,
                   SnapshotMapper* mapper_out) {
  SnapshotMapper local;
  SnapshotMapper& mapper = mapper_out != nullptr ? *mapper_out : local;
  mapper = SnapshotMapper();
  mapper.MapConfig(state, liveness, snapshot, index);
  policy::Snapshot& s = *snapshot;
  s.now = absl::ToUnixMicros(now);
  for (const auto& [id, view] : state.jobs) {
    JobEntry e = mapper.MapJob(id, view, now);
    switch (e.kind) {
      case JobEntry::Kind::kRunning:
        for (size_t i = 0; i < e.running.placement.size(); ++i)
          s.nodes[e.running.placement[i]].used +=
              policy::WorkerShare(e.running, i);
        s.running.push_back(std::move(e.running));
        break;
      case JobEntry::Kind::kPending:
        s.pending.push_back(std::move(e.pending));
        break;
      case JobEntry::Kind::kExcluded:
        index->excluded.emplace_back(id, std::move(e.excluded));
        break;
      case JobEntry::Kind::kNone:
        break;
    }
  }
  s.priority_classes = mapper.priority_classes();
  s.gpu_model_names = mapper.gpu_model_names();
  s.budgets = mapper.budgets();
  // Node usage beyond capacity (e.g. a node shrank) would be refused by
  // ValidateSnapshot only if negative; keep it, the node just has no room.
}

std::optional<absl::Time> RetryNotBefore(const JobView& view) {
  if (!view.attempt.has_value() || !view.attempt->has_end_time())
    return std::nullopt;
  const v1::FailureClass failure = view.attempt->failure_class();
  if (failure != v1::FAILURE_CLASS_USER_ERROR &&
      failure != v1::FAILURE_CLASS_BACKEND_ERROR) {
    return std::nullopt;  // Platform failures resume at once.
  }
  const v1::RetryPolicy& retry = view.job.spec().retry();
  const absl::Duration initial = retry.has_initial_backoff()
                                     ? DurationOf(retry.initial_backoff())
                                     : kDefaultInitialBackoff;
  const absl::Duration cap = retry.has_max_backoff()
                                 ? DurationOf(retry.max_backoff())
                                 : kDefaultMaxBackoff;
  // Doubling per retry: attempt 1 failed -> initial, attempt 2 -> 2x ...
  absl::Duration backoff = initial;
  for (int i = 1; i < view.job.attempt_count() && backoff < cap; ++i)
    backoff *= 2;
  backoff = std::min(backoff, cap);
  // Deterministic jitter in [-10 %, +10 %] from the job and attempt, so that
  // jobs failing together do not come back together.
  const uint64_t h =
      (static_cast<uint64_t>(
           std::stoll(view.job.name().substr(view.job.name().rfind('/') + 1))) *
       0x9E3779B97F4A7C15ull) ^
      static_cast<uint64_t>(view.job.attempt_count()) * 0xBF58476D1CE4E5B9ull;
  const double jitter = (static_cast<double>(h % 2001) - 1000.0) / 10000.0;
  backoff += backoff * jitter;
  return absl::FromUnixMicros(
             google::protobuf::util::TimeUtil::TimestampToMicroseconds(
                 view.attempt->end_time())) +
         backoff;
}

}  // namespace trainyard::scheduler
