// SchedulerState (the scheduler service's incremental picture) against a
// snapshot built afresh from the same platform state every cycle: random
// sequences of every kind of change the service sees — submissions,
// admissions that start and end, preemptions and requeues, user errors that
// wait out a retry backoff, checkpoints, cancellations, quota and node edits,
// clusters cordoned or losing their dispatcher, queues stopped, nodes added.
#include "services/scheduler/scheduler_state.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "tests/support/scheduler/platform.h"

namespace trainyard::scheduler {
namespace {

namespace v1 = ::trainyard::v1;
using google::protobuf::util::TimeUtil;

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

google::protobuf::Timestamp Ts(absl::Time t) {
  return TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(t));
}

// A cycle's decisions written into the platform state as the scheduler
// service commits them: victims PREEMPTING, admitted jobs ADMITTED with an
// attempt on the chosen nodes, admitted at `now`. Returns the jobs changed.
std::vector<int64_t> Commit(PlatformState& st, const policy::Decisions& want,
                            const SnapshotIndex& index, absl::Time now) {
  std::vector<int64_t> changed;
  for (const policy::Preemption& p : want.preemptions) {
    st.jobs[p.victim].job.set_state(v1::JOB_STATE_PREEMPTING);
    changed.push_back(p.victim);
  }
  for (const policy::Admission& a : want.admissions) {
    JobView& v = st.jobs[a.job];
    v.job.set_state(v1::JOB_STATE_ADMITTED);
    v1::Attempt attempt;
    attempt.set_cluster(
        absl::StrCat("clusters/", index.node_clusters[a.worker_nodes[0]]));
    attempt.set_flavor(absl::StrCat("flavors/", index.flavor_ids[a.flavor]));
    for (size_t w = 0; w < a.worker_nodes.size(); ++w) {
      v1::WorkerPlacement* p = attempt.add_placements();
      p->set_worker(static_cast<int32_t>(w));
      p->set_node(index.node_names[a.worker_nodes[w]]);
    }
    *attempt.mutable_admit_time() = Ts(now);
    v.attempt = attempt;
    v.job.set_attempt_count(v.job.attempt_count() + 1);
    changed.push_back(a.job);
  }
  return changed;
}

void AddGpuQuota(v1::FlavorQuotas* fq, const std::string& flavor,
                 int64_t nominal) {
  fq->set_flavor(flavor);
  v1::ResourceQuota* rq = fq->add_resources();
  rq->set_resource(v1::RESOURCE_NAME_GPU);
  rq->set_nominal(nominal);
}

PlatformState RandomPlatform(std::mt19937_64& rng) {
  PlatformState st;
  testing::AddH100Flavors(st);
  for (const char* cluster : {"east", "west"}) {
    st.clusters[cluster] = v1::Cluster();
    v1::Pool pool;
    pool.set_flavor("h100");
    st.pools[{cluster, "main"}] = pool;
    pool.set_flavor("h100-spot");
    st.pools[{cluster, "spot"}] = pool;
    for (int n = 0, count = static_cast<int>(Uniform(rng, 1, 6)); n < count;
         ++n) {
      st.nodes[{cluster, absl::StrCat("n", n)}] =
          testing::MakeNode(n % 3 == 2 ? "spot" : "main", 8,
                            absl::StrCat("b", n / 4), absl::StrCat("r", n / 2));
    }
  }
  st.cohorts["pool"] = v1::Cohort();
  for (int q = 0; q < 4; ++q) {
    v1::Queue queue;
    queue.set_cohort("pool");
    AddGpuQuota(queue.add_quotas(), "h100", Uniform(rng, 0, 24));
    AddGpuQuota(queue.add_quotas(), "h100-spot", Uniform(rng, 0, 16));
    if (Uniform(rng, 0, 1) == 0) {
      queue.mutable_preemption()->set_within_queue(
          v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY);
      queue.mutable_preemption()->set_reclaim_within_cohort(
          v1::RECLAIM_WITHIN_COHORT_ANY);
    }
    st.queues[{"acme", absl::StrCat("q", q)}] = queue;
  }
  v1::PriorityClass low;
  low.set_value(0);
  low.set_preemptible(true);
  st.priority_classes["low"] = low;
  v1::PriorityClass high;
  high.set_value(100);
  high.set_preemptible(false);
  st.priority_classes["high"] = high;
  return st;
}

JobView NewJob(std::mt19937_64& rng, int64_t id, absl::Time now) {
  JobView v;
  v.job.set_name(absl::StrCat("tenants/acme/jobs/", id));
  v.job.set_tenant("acme");
  v.job.set_state(v1::JOB_STATE_QUEUED);
  v.job.set_version(1);
  const bool high = Uniform(rng, 0, 3) == 0;
  v.job.set_priority(high ? 100 : 0);
  *v.job.mutable_create_time() = Ts(now);
  v1::JobSpec* spec = v.job.mutable_spec();
  spec->set_priority_class(high ? "high" : "low");
  spec->set_queue(absl::StrCat("q", Uniform(rng, 0, 4)));  // q4: unknown.
  spec->set_workers(static_cast<int32_t>(Uniform(rng, 1, 3)));
  spec->mutable_resources()->set_gpus(Uniform(rng, 1, 8));
  spec->mutable_resources()->set_cpu_millis(1000);
  spec->mutable_resources()->set_memory_bytes(int64_t{1} << 30);
  spec->mutable_checkpoint()->set_resumable(Uniform(rng, 0, 1) == 1);
  if (Uniform(rng, 0, 2) == 0) spec->set_spot_policy(v1::SPOT_POLICY_PREFERRED);
  if (Uniform(rng, 0, 1) == 0)
    *spec->mutable_time_limit() = TimeUtil::SecondsToDuration(3600);
  return v;
}

// Decisions compared regardless of the order of the snapshots' vectors
// (the incremental one keeps jobs in the order they came).
void ExpectSame(const policy::Decisions& want, const policy::Decisions& got) {
  ASSERT_EQ(want.admissions, got.admissions);
  ASSERT_EQ(want.preemptions.size(), got.preemptions.size());
  for (size_t i = 0; i < want.preemptions.size(); ++i) {
    EXPECT_EQ(want.preemptions[i].victim, got.preemptions[i].victim);
    EXPECT_EQ(want.preemptions[i].message, got.preemptions[i].message);
  }
  ASSERT_EQ(want.reservations, got.reservations);
  ASSERT_EQ(want.pending.size(), got.pending.size());
  for (size_t i = 0; i < want.pending.size(); ++i) {
    ASSERT_EQ(want.pending[i], got.pending[i])
        << want.pending[i].message << " vs " << got.pending[i].message;
  }
}

TEST(SchedulerStateTest, SameDecisionsAsAFreshSnapshotUnderEveryChange) {
  std::mt19937_64 rng(20261125);
  std::map<std::string, int> seen;
  for (int iteration = 0; iteration < 150; ++iteration) {
    SCOPED_TRACE(absl::StrCat("iteration ", iteration));
    PlatformState st = RandomPlatform(rng);
    absl::Time now = absl::FromUnixSeconds(1'800'000'000);
    const absl::Time wall = now;
    int64_t next_id = 1;
    for (int k = 0, n = static_cast<int>(Uniform(rng, 0, 30)); k < n; ++k) {
      st.jobs[next_id] = NewJob(rng, next_id, now - absl::Minutes(k));
      ++next_id;
    }
    SchedulerState state;
    DispatcherLiveness liveness{.wall_now = wall};
    state.Reset(st, now, liveness);
    policy::Decisions got;
    for (int cycle = 0; cycle < 10; ++cycle) {
      SCOPED_TRACE(absl::StrCat("cycle ", cycle));
      state.Advance(st, now, liveness);
      state.Cycle(got);
      policy::Snapshot fresh;
      SnapshotIndex index;
      BuildSnapshot(st, now, &fresh, &index, liveness);
      const policy::Decisions want = policy::Decide(fresh);
      ExpectSame(want, got);
      if (::testing::Test::HasFatalFailure()) return;
      std::map<int64_t, std::string> excluded(index.excluded.begin(),
                                              index.excluded.end());
      ASSERT_EQ(excluded, state.excluded());
      seen["admitted"] += static_cast<int>(want.admissions.size());
      seen["preempted"] += static_cast<int>(want.preemptions.size());

      // What the database would hold after this cycle's commit and the
      // dispatchers' and users' work until the next one.
      std::vector<int64_t> changed = Commit(st, want, index, now);
      auto change = [&](int64_t id) { changed.push_back(id); };
      now += absl::Seconds(Uniform(rng, 1, 30));
      liveness.wall_now = now;
      std::vector<int64_t> ids;
      for (const auto& [id, v] : st.jobs) ids.push_back(id);
      for (int64_t id : ids) {
        JobView& v = st.jobs[id];
        const int64_t roll = Uniform(rng, 0, 19);
        switch (v.job.state()) {
          case v1::JOB_STATE_ADMITTED:
            if (roll < 10) {
              v.job.set_state(v1::JOB_STATE_RUNNING);
              *v.attempt->mutable_start_time() = Ts(now);
              change(id);
            }
            break;
          case v1::JOB_STATE_RUNNING:
            if (roll < 3) {
              st.jobs.erase(id);  // Succeeded.
              change(id);
              ++seen["completed"];
            } else if (roll < 5) {
              v.last_checkpoint = now;
              change(id);
              ++seen["checkpoint"];
            } else if (roll < 6) {  // A user error: back with a backoff.
              v.job.set_state(v1::JOB_STATE_QUEUED);
              *v.attempt->mutable_end_time() = Ts(now);
              v.attempt->set_failure_class(v1::FAILURE_CLASS_USER_ERROR);
              change(id);
              ++seen["backoff"];
            }
            break;
          case v1::JOB_STATE_PREEMPTING:
            if (roll < 12) {
              v.job.set_state(v1::JOB_STATE_QUEUED);
              *v.attempt->mutable_end_time() = Ts(now);
              v.attempt->set_failure_class(v1::FAILURE_CLASS_PREEMPTION);
              change(id);
              ++seen["requeued"];
            }
            break;
          case v1::JOB_STATE_QUEUED:
            if (roll == 0) {
              st.jobs.erase(id);  // Cancelled.
              change(id);
            } else if (roll == 1) {
              v.job.set_state(v1::JOB_STATE_HELD);
              change(id);
            }
            break;
          case v1::JOB_STATE_HELD:
            if (roll < 5) {
              v.job.set_state(v1::JOB_STATE_QUEUED);
              change(id);
            }
            break;
          default:
            break;
        }
      }
      for (int k = 0, n = static_cast<int>(Uniform(rng, 0, 6)); k < n; ++k) {
        st.jobs[next_id] = NewJob(rng, next_id, now);
        change(next_id++);
      }
      bool config = false;
      switch (Uniform(rng, 0, 9)) {
        case 0: {  // Quota edit (in place).
          v1::Queue& q =
              st.queues[{"acme", absl::StrCat("q", Uniform(rng, 0, 3))}];
          q.mutable_quotas(0)->mutable_resources(0)->set_nominal(
              Uniform(rng, 0, 24));
          config = true;
          ++seen["quota"];
          break;
        }
        case 1: {  // A node goes down or comes back (in place).
          auto it = st.nodes.begin();
          std::advance(it, Uniform(rng, 0, st.nodes.size() - 1));
          it->second.set_state(it->second.state() == v1::NODE_STATE_READY
                                   ? v1::NODE_STATE_DOWN
                                   : v1::NODE_STATE_READY);
          config = true;
          ++seen["node"];
          break;
        }
        case 2: {  // A cluster cordoned or uncordoned.
          v1::Cluster& c = st.clusters[Uniform(rng, 0, 1) ? "east" : "west"];
          c.set_cordoned(!c.cordoned());
          config = true;
          ++seen["cordon"];
          break;
        }
        case 3: {  // A dispatcher's heartbeat (old ones: it is gone).
          v1::Cluster& c = st.clusters[Uniform(rng, 0, 1) ? "east" : "west"];
          *c.mutable_heartbeat_time() =
              Ts(now - absl::Minutes(Uniform(rng, 0, 4)));
          config = true;
          ++seen["heartbeat"];
          break;
        }
        case 4: {  // A queue stopped or started (ids change: reset).
          v1::Queue& q = st.queues[{"acme", "q3"}];
          q.set_stop_policy(q.stop_policy() == v1::STOP_POLICY_HOLD
                                ? v1::STOP_POLICY_NONE
                                : v1::STOP_POLICY_HOLD);
          config = true;
          ++seen["stop"];
          break;
        }
        case 5: {  // A node added (ids change: reset).
          v1::Node node = st.nodes.begin()->second;
          st.nodes[{"west", absl::StrCat("x", cycle)}] = node;
          config = true;
          ++seen["add node"];
          break;
        }
        case 6: {  // A price change (in place).
          st.flavors["h100-spot"].mutable_gpu_hour_price()->set_micros(
              Uniform(rng, 1, 4) * 1'000'000);
          config = true;
          ++seen["price"];
          break;
        }
        case 7: {  // A queue's minimum runtime (in place).
          v1::Queue& q =
              st.queues[{"acme", absl::StrCat("q", Uniform(rng, 0, 3))}];
          q.mutable_min_runtime()->set_seconds(Uniform(rng, 0, 3) * 1800);
          config = true;
          ++seen["min runtime"];
          break;
        }
        case 8: {  // A flavor's restart overhead (in place).
          v1::Flavor& f = st.flavors["h100-spot"];
          if (Uniform(rng, 0, 2) == 0) {
            f.clear_restart_overhead();
          } else {
            f.mutable_restart_overhead()->set_seconds(Uniform(rng, 0, 60) * 60);
          }
          config = true;
          ++seen["restart overhead"];
          break;
        }
        default:
          break;
      }
      if (config)
        seen[state.ConfigChanged(st, now, liveness) ? "reset" : "in place"]++;
      for (int64_t id : changed) {
        auto it = st.jobs.find(id);
        state.JobChanged(id, it == st.jobs.end() ? nullptr : &it->second, now);
      }
    }
  }
  for (const char* kind :
       {"admitted", "preempted", "completed", "checkpoint", "backoff",
        "requeued", "quota", "node", "cordon", "heartbeat", "stop", "add node",
        "price", "min runtime", "restart overhead", "reset", "in place"}) {
    EXPECT_GT(seen[kind], 5) << kind;
  }
  for (const auto& [kind, n] : seen) std::printf("%s %d\n", kind.c_str(), n);
}

// Users' hourly spend caps in the tenant and in a project: before each
// cycle SchedulerState::UpdateBudgets sets what each cap has left; here it
// is computed independently from the platform state (the cap less, for each
// attempt of the user's jobs in the scope that is admitted, running or being
// preempted, workers x GPUs x its flavor's GPU-hour price, the only price
// the flavors have) and written into a snapshot built afresh, whose
// decisions must be the incremental ones. Caps are raised, lowered, added
// and removed on the way.
TEST(SchedulerStateTest, UserHourlyCapsAsComputedFromTheRunningWork) {
  std::mt19937_64 rng(20261128);
  const char* kUsers[] = {"users/alice", "users/bob", "users/carol"};
  std::map<std::string, int> seen;
  for (int iteration = 0; iteration < 60; ++iteration) {
    SCOPED_TRACE(absl::StrCat("iteration ", iteration));
    PlatformState st = RandomPlatform(rng);
    // Caps only (no HOLD limit): the only policy budgets are the caps.
    st.budgets[{"acme", ""}] = {
        .name = "tenants/acme/budgets/all",
        .user_hourly_cap_micros = Uniform(rng, 1, 12) * 10'000'000};
    st.budgets[{"acme", "nlp"}] = {
        .name = "tenants/acme/budgets/nlp",
        .user_hourly_cap_micros = Uniform(rng, 0, 6) * 10'000'000};
    absl::Time now = absl::FromUnixSeconds(1'800'000'000);
    DispatcherLiveness liveness{.wall_now = now};
    int64_t next_id = 1;
    auto new_job = [&](absl::Time at) {
      JobView v = NewJob(rng, next_id, at);
      v.job.set_creator(kUsers[Uniform(rng, 0, 2)]);
      if (Uniform(rng, 0, 1) == 0) v.job.mutable_spec()->set_project("nlp");
      st.jobs[next_id] = std::move(v);
      return next_id++;
    };
    for (int k = 0, n = static_cast<int>(Uniform(rng, 5, 30)); k < n; ++k)
      new_job(now - absl::Minutes(k));
    SchedulerState state;
    state.Reset(st, now, liveness);
    policy::Decisions got;
    for (int cycle = 0; cycle < 10; ++cycle) {
      SCOPED_TRACE(absl::StrCat("cycle ", cycle));
      state.Advance(st, now, liveness);
      state.UpdateBudgets(st);
      state.Cycle(got);
      policy::Snapshot fresh;
      SnapshotIndex index;
      BuildSnapshot(st, now, &fresh, &index, liveness);
      // What each cap has left, computed here.
      for (policy::Budget& b : fresh.budgets) {
        ASSERT_TRUE(b.hourly) << b.name;
        const std::string project =
            b.name == "tenants/acme/budgets/nlp" ? "nlp" : "";
        const int64_t cap =
            st.budgets.at({"acme", project}).user_hourly_cap_micros;
        int64_t running = 0;
        for (const auto& [id, v] : st.jobs) {
          const v1::JobState js = v.job.state();
          if (js != v1::JOB_STATE_ADMITTED && js != v1::JOB_STATE_RUNNING &&
              js != v1::JOB_STATE_PREEMPTING) {
            continue;
          }
          if (v.job.creator() != absl::StrCat("users/", b.user)) continue;
          if (!project.empty() && v.job.spec().project() != project) continue;
          const std::string flavor =
              v.attempt->flavor().substr(std::string("flavors/").size());
          running += int64_t{v.job.spec().workers()} *
                     v.job.spec().resources().gpus() *
                     st.flavors.at(flavor).gpu_hour_price().micros();
        }
        EXPECT_EQ(b.hourly_cap_micros, cap);
        b.remaining_micros = cap - running;
      }
      const policy::Decisions want = policy::Decide(fresh);
      ExpectSame(want, got);
      if (::testing::Test::HasFatalFailure()) return;
      seen["admitted"] += static_cast<int>(want.admissions.size());
      for (const policy::PendingDecision& p : want.pending) {
        if (p.message.str().starts_with("BUDGET_HOLD: user ")) ++seen["capped"];
      }

      std::vector<int64_t> changed = Commit(st, want, index, now);
      now += absl::Seconds(Uniform(rng, 1, 30));
      liveness.wall_now = now;
      std::vector<int64_t> ids;
      for (const auto& [id, v] : st.jobs) ids.push_back(id);
      for (int64_t id : ids) {
        JobView& v = st.jobs[id];
        const int64_t roll = Uniform(rng, 0, 9);
        const v1::JobState js = v.job.state();
        if (js == v1::JOB_STATE_ADMITTED && roll < 5) {
          v.job.set_state(v1::JOB_STATE_RUNNING);
          changed.push_back(id);
        } else if ((js == v1::JOB_STATE_RUNNING && roll < 3) ||
                   (js == v1::JOB_STATE_PREEMPTING && roll < 5) ||
                   (js == v1::JOB_STATE_QUEUED && roll == 0)) {
          st.jobs.erase(id);  // Ended, stopped, cancelled.
          changed.push_back(id);
          ++seen["ended"];
        }
      }
      for (int k = 0, n = static_cast<int>(Uniform(rng, 0, 5)); k < n; ++k)
        changed.push_back(new_job(now));
      switch (Uniform(rng, 0, 3)) {
        case 0: {  // A cap raised or lowered: in force at once.
          BudgetView& b = st.budgets[{"acme", Uniform(rng, 0, 1) ? "nlp" : ""}];
          if (b.user_hourly_cap_micros > 0) {
            b.user_hourly_cap_micros = Uniform(rng, 1, 12) * 10'000'000;
            ++seen["cap edited"];
          }
          break;
        }
        case 1: {  // The project's cap added or removed: mapped anew.
          BudgetView& b = st.budgets[{"acme", "nlp"}];
          b.user_hourly_cap_micros =
              b.user_hourly_cap_micros > 0 ? 0 : 30'000'000;
          seen[state.ConfigChanged(st, now, liveness) ? "reset" : "in place"]++;
          break;
        }
        default:
          break;
      }
      for (int64_t id : changed) {
        auto it = st.jobs.find(id);
        state.JobChanged(id, it == st.jobs.end() ? nullptr : &it->second, now);
      }
    }
  }
  for (const char* kind :
       {"admitted", "capped", "ended", "cap edited", "reset"}) {
    EXPECT_GT(seen[kind], 5) << kind;
  }
  for (const auto& [kind, n] : seen) std::printf("%s %d\n", kind.c_str(), n);
}

}  // namespace
}  // namespace trainyard::scheduler
