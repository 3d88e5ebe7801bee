#include "services/scheduler/scheduler_state.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "services/lib/domain/validation.h"
#include "services/scheduler/policy/pricing.h"

namespace trainyard::scheduler {

namespace v1 = ::trainyard::v1;

std::set<std::string> SchedulerState::GoneClusters(
    const PlatformState& state, const DispatcherLiveness& liveness) {
  std::set<std::string> gone;
  for (const auto& [id, cluster] : state.clusters) {
    if (DispatcherGone(cluster, liveness)) gone.insert(id);
  }
  return gone;
}

void SchedulerState::Reset(const PlatformState& state, absl::Time now,
                           const DispatcherLiveness& liveness) {
  policy::Snapshot snapshot;
  BuildSnapshot(state, now, &snapshot, &index_, liveness, &mapper_);
  where_.clear();
  excluded_.clear();
  backoff_.clear();
  backoff_until_.clear();
  for (const policy::PendingJob& p : snapshot.pending)
    where_[p.id] = Where::kPending;
  for (const policy::RunningAttempt& r : snapshot.running)
    where_[r.job] = Where::kRunning;
  for (auto& [id, message] : index_.excluded) {
    where_[id] = Where::kExcluded;
    auto view = state.jobs.find(id);
    std::optional<absl::Time> until = RetryNotBefore(view->second);
    if (until.has_value() && *until > now) {
      backoff_.emplace(*until, id);
      backoff_until_[id] = *until;
    }
    excluded_[id] = std::move(message);
  }
  index_.excluded.clear();
  gone_ = GoneClusters(state, liveness);
  scheduler_ =
      std::make_unique<policy::Scheduler>(std::move(snapshot), config_);
}

bool SchedulerState::ConfigChanged(const PlatformState& state, absl::Time now,
                                   const DispatcherLiveness& liveness) {
  if (!built()) {
    Reset(state, now, liveness);
    return true;
  }
  SnapshotMapper next = mapper_;
  policy::Snapshot config;
  SnapshotIndex index;
  next.MapConfig(state, liveness, &config, &index);
  const policy::Snapshot& s = scheduler_->snapshot();
  bool same_ids = index.node_names == index_.node_names &&
                  index.flavor_ids == index_.flavor_ids &&
                  index.queue_keys == index_.queue_keys &&
                  config.cohorts.size() == s.cohorts.size() &&
                  config.budgets.size() == s.budgets.size() &&
                  next.SameClassesAs(mapper_);
  for (size_t c = 0; same_ids && c < config.cohorts.size(); ++c)
    same_ids = config.cohorts[c].name == s.cohorts[c].name;
  if (!same_ids) {
    Reset(state, now, liveness);
    return true;
  }
  mapper_ = std::move(next);
  index_ = std::move(index);
  SyncInterned();
  for (size_t i = 0; i < config.flavors.size(); ++i) {
    if (!(config.flavors[i] == s.flavors[i])) {
      scheduler_->SetFlavor(static_cast<policy::FlavorId>(i),
                            std::move(config.flavors[i]));
    }
  }
  for (size_t i = 0; i < config.nodes.size(); ++i) {
    config.nodes[i].used = s.nodes[i].used;
    if (!(config.nodes[i] == s.nodes[i])) {
      scheduler_->SetNode(static_cast<policy::NodeId>(i),
                          std::move(config.nodes[i]));
    }
  }
  for (size_t i = 0; i < config.cohorts.size(); ++i) {
    if (!(config.cohorts[i] == s.cohorts[i])) {
      scheduler_->SetCohort(static_cast<policy::CohortId>(i),
                            std::move(config.cohorts[i]));
    }
  }
  for (size_t i = 0; i < config.queues.size(); ++i) {
    if (!(config.queues[i] == s.queues[i])) {
      scheduler_->SetQueue(static_cast<policy::QueueId>(i),
                           std::move(config.queues[i]));
    }
  }
  gone_ = GoneClusters(state, liveness);
  return false;
}

std::optional<int64_t> SchedulerState::PendingEstimate(int64_t id) const {
  const policy::PendingJob* job = scheduler_->FindPending(id);
  if (job == nullptr) return std::nullopt;
  const policy::Snapshot& s = scheduler_->snapshot();
  const std::vector<policy::FlavorId> flavors =
      policy::CandidateFlavors(s, *job, config_);
  if (flavors.empty()) return std::nullopt;
  return policy::ExpectedCostMicros(*job, s.flavors[flavors.front()], config_);
}

int64_t SchedulerState::ExpectedCost(const trainyard::v1::Job& job,
                                     policy::FlavorId flavor) const {
  return policy::ExpectedCostMicros(SnapshotMapper::CostShapeOf(job),
                                    scheduler_->snapshot().flavors[flavor],
                                    config_);
}

void SchedulerState::UpdateBudgets(const PlatformState& state) {
  if (!built()) return;
  const policy::Snapshot& s = scheduler_->snapshot();
  if (s.budgets.empty()) {
    admitted_.clear();
    return;
  }
  UpdateRateCaps(state);
  // The earliest forecast: what every budget's forecast covers.
  absl::Time covered = absl::InfiniteFuture();
  for (const auto& [key, view] : state.budgets) {
    covered = std::min(covered, view.status_time);
  }
  for (const policy::RunningAttempt& r : s.running) {
    auto view = state.jobs.find(r.job);
    if (view == state.jobs.end() || !view->second.attempt.has_value()) continue;
    const v1::Job& job = view->second.job;
    const v1::Attempt& a = *view->second.attempt;
    const absl::Time admitted =
        a.has_admit_time()
            ? absl::FromUnixMillis(domain::UnixMillis(a.admit_time()))
            : absl::InfinitePast();
    if (admitted <= covered) continue;
    if (!mapper_.BudgetOf(job.tenant(), "").has_value() &&
        !mapper_.BudgetOf(job.tenant(), job.spec().project()).has_value()) {
      continue;
    }
    auto [it, inserted] = admitted_.try_emplace({r.job, a.index()});
    if (!inserted) continue;
    it->second = {
        .admitted = admitted,
        .cost = policy::ExpectedCostMicros(SnapshotMapper::CostShapeOf(job),
                                           s.flavors[r.flavor], config_),
        .tenant = job.tenant(),
        .project = job.spec().project()};
  }
  std::vector<int64_t> committed(s.budgets.size(), 0);
  for (auto it = admitted_.begin(); it != admitted_.end();) {
    const AdmittedCost& c = it->second;
    if (c.admitted <= covered) {
      it = admitted_.erase(it);
      continue;
    }
    std::vector<std::string> scopes = {""};
    if (!c.project.empty()) scopes.push_back(c.project);
    for (const std::string& project : scopes) {
      std::optional<policy::BudgetId> b = mapper_.BudgetOf(c.tenant, project);
      auto budget = state.budgets.find({c.tenant, project});
      if (!b.has_value() || budget == state.budgets.end() ||
          c.admitted <= budget->second.status_time) {
        continue;
      }
      committed[*b] += c.cost;
    }
    ++it;
  }
  for (const auto& [key, view] : state.budgets) {
    std::optional<policy::BudgetId> b = mapper_.BudgetOf(key.first, key.second);
    if (!b.has_value()) continue;
    int64_t remaining = -1;
    if (!view.hold && view.hold_limit_micros.has_value()) {
      remaining =
          *view.hold_limit_micros - view.forecast_micros - committed[*b];
    }
    if (s.budgets[*b].remaining_micros != remaining ||
        s.budgets[*b].name != view.name) {
      scheduler_->SetBudget(*b,
                            {.name = view.name, .remaining_micros = remaining});
    }
  }
}

void SchedulerState::UpdateRateCaps(const PlatformState& state) {
  const std::vector<SnapshotMapper::RateCapKey>& caps = mapper_.rate_caps();
  if (caps.empty()) return;
  const policy::Snapshot& s = scheduler_->snapshot();
  const size_t first = mapper_.budgets().size() - caps.size();
  // The hourly price of each user's running work in each capped scope.
  std::vector<int64_t> running(caps.size(), 0);
  for (const policy::RunningAttempt& r : s.running) {
    auto view = state.jobs.find(r.job);
    if (view == state.jobs.end()) continue;
    const v1::Job& job = view->second.job;
    std::optional<policy::BudgetId> ids[] = {
        mapper_.RateCapOf(job.tenant(), "", job.creator()),
        job.spec().project().empty()
            ? std::nullopt
            : mapper_.RateCapOf(job.tenant(), job.spec().project(),
                                job.creator())};
    if (!ids[0].has_value() && !ids[1].has_value()) continue;
    const int64_t hourly = policy::HourlyPriceMicros(
        SnapshotMapper::CostShapeOf(job), s.flavors[r.flavor]);
    for (const std::optional<policy::BudgetId>& b : ids) {
      if (b.has_value()) {
        int64_t& sum = running[*b - first];
        sum = hourly > std::numeric_limits<int64_t>::max() - sum
                  ? std::numeric_limits<int64_t>::max()
                  : sum + hourly;
      }
    }
  }
  for (size_t i = 0; i < caps.size(); ++i) {
    const policy::BudgetId b = static_cast<policy::BudgetId>(first + i);
    auto view = state.budgets.find({caps[i].tenant, caps[i].project});
    // A cap removed since the mapping (remapped at the next configuration
    // change): nothing of it is in force.
    policy::Budget budget = s.budgets[b];
    budget.hourly_cap_micros =
        view != state.budgets.end() ? view->second.user_hourly_cap_micros : 0;
    if (view != state.budgets.end()) budget.name = view->second.name;
    budget.remaining_micros = budget.hourly_cap_micros > 0
                                  ? budget.hourly_cap_micros - running[i]
                                  : std::numeric_limits<int64_t>::max();
    if (!(budget == s.budgets[b])) scheduler_->SetBudget(b, std::move(budget));
  }
}

void SchedulerState::SyncInterned() {
  const policy::Snapshot& s = scheduler_->snapshot();
  for (size_t i = s.budgets.size(); i < mapper_.budgets().size(); ++i) {
    scheduler_->AddBudget(mapper_.budgets()[i]);
  }
  for (size_t i = s.priority_classes.size();
       i < mapper_.priority_classes().size(); ++i) {
    scheduler_->AddPriorityClass(mapper_.priority_classes()[i]);
  }
  for (size_t i = s.gpu_model_names.size();
       i < mapper_.gpu_model_names().size(); ++i) {
    scheduler_->AddGpuModelName(mapper_.gpu_model_names()[i]);
  }
}

void SchedulerState::Forget(int64_t id) {
  auto it = where_.find(id);
  if (it == where_.end()) return;
  switch (it->second) {
    case Where::kPending:
      scheduler_->RemovePending(id);
      break;
    case Where::kRunning:
      scheduler_->CompleteRunning(id);
      break;
    case Where::kExcluded:
      excluded_.erase(id);
      if (auto b = backoff_until_.find(id); b != backoff_until_.end()) {
        backoff_.erase({b->second, id});
        backoff_until_.erase(b);
      }
      break;
  }
  where_.erase(it);
}

void SchedulerState::Add(int64_t id, JobEntry e) {
  SyncInterned();
  switch (e.kind) {
    case JobEntry::Kind::kRunning:
      scheduler_->AddRunning(std::move(e.running));
      where_[id] = Where::kRunning;
      break;
    case JobEntry::Kind::kPending:
      scheduler_->AddPending(std::move(e.pending));
      where_[id] = Where::kPending;
      break;
    case JobEntry::Kind::kExcluded:
      excluded_[id] = std::move(e.excluded);
      if (e.excluded_until.has_value()) {
        backoff_.emplace(*e.excluded_until, id);
        backoff_until_[id] = *e.excluded_until;
      }
      where_[id] = Where::kExcluded;
      break;
    case JobEntry::Kind::kNone:
      break;
  }
}

void SchedulerState::JobChanged(int64_t id, const JobView* view,
                                absl::Time now) {
  Forget(id);
  if (view != nullptr) Add(id, mapper_.MapJob(id, *view, now));
}

void SchedulerState::Advance(const PlatformState& state, absl::Time now,
                             const DispatcherLiveness& liveness) {
  if (GoneClusters(state, liveness) != gone_) {
    ConfigChanged(state, now, liveness);
  }
  scheduler_->SetNow(absl::ToUnixMicros(now));
  // Backoffs that ended; the others' texts count down.
  std::vector<int64_t> due;
  for (const auto& [until, id] : backoff_) due.push_back(id);
  for (int64_t id : due) {
    auto view = state.jobs.find(id);
    if (backoff_until_.at(id) <= now) {
      JobChanged(id, view == state.jobs.end() ? nullptr : &view->second, now);
    } else if (view != state.jobs.end()) {
      excluded_[id] = mapper_.MapJob(id, view->second, now).excluded;
    }
  }
}

}  // namespace trainyard::scheduler
