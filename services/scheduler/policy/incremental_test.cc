#include "services/scheduler/policy/incremental.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/preemption.h"
#include "services/scheduler/policy/pricing.h"
#include "services/scheduler/policy/snapshot.h"
#include "tests/support/policy/synthetic.h"
#include "tests/support/policy/test_util.h"

namespace trainyard::scheduler::policy {
namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A uniformly random index of `items` (not empty), as an id of type Id.
template <typename Id, typename T>
Id Pick(std::mt19937_64& rng, const std::vector<T>& items) {
  return static_cast<Id>(
      Uniform(rng, 0, static_cast<int64_t>(items.size()) - 1));
}

// The ids of the snapshot's monthly budgets (hourly == false) or of its
// users' hourly spend caps.
std::vector<BudgetId> BudgetsOf(const Snapshot& s, bool hourly) {
  std::vector<BudgetId> ids;
  for (size_t b = 0; b < s.budgets.size(); ++b) {
    if (s.budgets[b].hourly == hourly) ids.push_back(static_cast<BudgetId>(b));
  }
  return ids;
}

// Gives `job` one of the snapshot's monthly budgets as its own, and its
// user's hourly spend caps in its tenant and project, sometimes.
void GiveRandomBudget(const Snapshot& s, PendingJob& job,
                      std::mt19937_64& rng) {
  const std::vector<BudgetId> monthly = BudgetsOf(s, false);
  if (!monthly.empty() && Uniform(rng, 0, 2) != 0)
    job.budget = monthly[Pick<size_t>(rng, monthly)];
  const std::vector<BudgetId> caps = BudgetsOf(s, true);
  if (caps.empty()) return;
  if (Uniform(rng, 0, 2) != 0)
    job.tenant_rate_cap = caps[Pick<size_t>(rng, caps)];
  if (Uniform(rng, 0, 2) == 0)
    job.project_rate_cap = caps[Pick<size_t>(rng, caps)];
}

// Adds 1 to 4 users' hourly spend caps with what is left of them (up to
// $80/h; sometimes nothing or less).
void AddRandomRateCaps(Snapshot& s, std::mt19937_64& rng) {
  for (int u = 0, n = static_cast<int>(Uniform(rng, 1, 4)); u < n; ++u) {
    const int64_t remaining = Uniform(rng, -1, 80) * 1000000;
    s.budgets.push_back(
        {.name = "budget-of-cap-" + std::to_string(u),
         .remaining_micros = remaining,
         .hourly = true,
         .user = "user-" + std::to_string(u),
         .hourly_cap_micros = remaining + Uniform(rng, 0, 40) * 1000000});
  }
}

// Sometimes prices CPU-hours and GiB-hours on `f` (in steps that make the
// flavors' cost order depend on the jobs' CPU and memory).
void RandomCpuAndMemoryPrices(Flavor& f, std::mt19937_64& rng) {
  if (Uniform(rng, 0, 2) != 0) return;
  f.price_micros_per_cpu_hour = Uniform(rng, 0, 4) * 250000;
  f.price_micros_per_gib_hour = Uniform(rng, 0, 4) * 33333;
}

// Where the nodes run on two backends (Slurm and Kubernetes), some jobs may
// run on one of them only.
void GiveRandomBackends(const Snapshot& s, PendingJob& job,
                        std::mt19937_64& rng) {
  if (s.nodes.empty() || s.nodes[0].backend == Backend::kUnknown) return;
  switch (Uniform(rng, 0, 3)) {
    case 0:
      job.worker.backends = BackendBit(Backend::kSlurm);
      break;
    case 1:
      job.worker.backends = BackendBit(Backend::kKubernetes);
      break;
    default:
      job.worker.backends = kAnyBackend;
  }
}

// A job of MakeSyntheticJob() that may spend a budget of its own and may be
// bound to a backend.
PendingJob RandomJob(const Snapshot& s, JobId id, std::mt19937_64& rng) {
  PendingJob job = MakeSyntheticJob(s, id, rng);
  if (Uniform(rng, 0, 1) == 0) GiveRandomBudget(s, job, rng);
  GiveRandomBackends(s, job, rng);
  return job;
}

// A small synthetic snapshot, sometimes with irregular details that make the
// scheduler fall back to PlaceGang: unlabelled nodes, a rack split across
// blocks, tiny CPU-only workers, partly used nodes.
Snapshot RandomSnapshot(std::mt19937_64& rng) {
  SyntheticSpec spec{.nodes = static_cast<int>(Uniform(rng, 1, 120)),
                     .gpus_per_node = static_cast<int>(Uniform(rng, 1, 8)),
                     .nodes_per_rack = static_cast<int>(Uniform(rng, 1, 6)),
                     .racks_per_block = static_cast<int>(Uniform(rng, 1, 4)),
                     .queues = static_cast<int>(Uniform(rng, 1, 30)),
                     .cohorts = static_cast<int>(Uniform(rng, 0, 12)),
                     .pending = static_cast<int>(Uniform(rng, 0, 400)),
                     .busy_fraction = Uniform(rng, 0, 10) / 10.0,
                     .seed = rng()};
  Snapshot s = MakeSyntheticSnapshot(spec);
  if (Uniform(rng, 0, 3) == 0 && !s.nodes.empty()) {
    Node& node = s.nodes[Uniform(rng, 0, s.nodes.size() - 1)];
    if (Uniform(rng, 0, 1) == 0) {
      node.rack = kNoLabel;
    } else {
      node.block = node.block + 1;
    }
  }
  // Some have two clusters (by block, so racks and blocks stay inside one),
  // of which some run different backends.
  if (Uniform(rng, 0, 2) == 0) {
    for (Node& node : s.nodes) node.cluster = node.block % 2;
    if (Uniform(rng, 0, 1) == 0) {
      for (Node& node : s.nodes) {
        node.backend =
            node.cluster == 0 ? Backend::kSlurm : Backend::kKubernetes;
        s.flavors[node.flavor].backends |= BackendBit(node.backend);
      }
    }
  }
  for (Node& node : s.nodes) {
    if (Uniform(rng, 0, 9) == 0) {
      node.used.cpu_millis =
          std::min(node.capacity.cpu_millis,
                   node.used.cpu_millis + Uniform(rng, 0, 48000));
    }
  }
  // Some snapshots preempt: every kind of policy on some queues, a
  // non-preemptible class, checkpoints of running work.
  if (Uniform(rng, 0, 2) == 0) {
    for (Queue& q : s.queues) {
      q.within_queue_preemption =
          static_cast<WithinQueuePreemption>(Uniform(rng, 0, 2));
      q.reclaim_within_cohort =
          static_cast<ReclaimWithinCohort>(Uniform(rng, 0, 2));
      q.fair_share_preemption = Uniform(rng, 0, 1) == 1;
      // Some queues protect young jobs for up to 2 h.
      if (Uniform(rng, 0, 2) == 0)
        q.min_runtime = Uniform(rng, 0, 120) * int64_t{60} * 1000000;
    }
    if (!s.priority_classes.empty())
      s.priority_classes.back().preemptible = false;
    for (RunningAttempt& r : s.running) {
      if (Uniform(rng, 0, 1) == 0)
        r.last_checkpoint_time = r.start_time + Uniform(rng, 0, 3600) * 1000000;
    }
  }
  // Some have time limits (reservations and backfill) and budgets.
  if (Uniform(rng, 0, 1) == 0) {
    for (RunningAttempt& r : s.running) {
      if (Uniform(rng, 0, 9) < 7) {
        r.time_limit_micros =
            (s.now - r.start_time) + Uniform(rng, 1, 480) * 60 * 1000000;
      }
    }
    constexpr int64_t kLimits[] = {0, 1, 4, 24};
    for (PendingJob& job : s.pending) {
      job.time_limit_micros =
          kLimits[Uniform(rng, 0, 3)] * int64_t{3600} * 1000000;
    }
  }
  if (Uniform(rng, 0, 2) == 0) {
    const int budgets = static_cast<int>(Uniform(rng, 1, 3));
    for (int b = 0; b < budgets; ++b) {
      s.budgets.push_back(
          {.name = "budget-" + std::to_string(b),
           .remaining_micros = Uniform(rng, -1, 3000) * 1000000});
    }
    for (Queue& q : s.queues) {
      if (Uniform(rng, 0, 3) != 0) q.budget = Uniform(rng, 0, budgets - 1);
    }
  }
  // Some jobs spend budgets of their own (projects), as well as their
  // queue's: new ones, or one a queue spends too.
  if (Uniform(rng, 0, 2) == 0) {
    const int projects = static_cast<int>(Uniform(rng, 1, 4));
    for (int p = 0; p < projects; ++p) {
      s.budgets.push_back(
          {.name = "project-" + std::to_string(p),
           .remaining_micros = Uniform(rng, -1, 1500) * 1000000});
    }
    for (PendingJob& job : s.pending) GiveRandomBudget(s, job, rng);
  }
  // Some jobs' users have hourly spend caps (as well as the budgets).
  if (Uniform(rng, 0, 2) == 0) {
    AddRandomRateCaps(s, rng);
    for (PendingJob& job : s.pending) {
      job.budget.reset();
      GiveRandomBudget(s, job, rng);
    }
  }
  for (PendingJob& job : s.pending) {
    if (Uniform(rng, 0, 19) == 0) {
      job.worker = {.gpus = 0, .cpu_millis = 500, .memory_bytes = 1 << 30};
    }
    GiveRandomBackends(s, job, rng);
  }
  // Some flavors have a restart overhead of their own, and some price CPU
  // and memory too.
  for (Flavor& f : s.flavors) {
    if (Uniform(rng, 0, 2) == 0)
      f.restart_overhead_micros = Uniform(rng, 0, 60) * int64_t{60} * 1000000;
    RandomCpuAndMemoryPrices(f, rng);
  }
  return s;
}

constexpr PolicyConfig kPlain{.use_placement_index = false,
                              .use_equivalence_classes = false};

void ExpectSame(const Decisions& want, const Decisions& got) {
  ASSERT_EQ(want.admissions.size(), got.admissions.size());
  for (size_t i = 0; i < want.admissions.size(); ++i)
    ASSERT_EQ(want.admissions[i], got.admissions[i]) << "admission " << i;
  ASSERT_EQ(want.preemptions, got.preemptions);
  ASSERT_EQ(want.reservations, got.reservations);
  ASSERT_EQ(want.pending.size(), got.pending.size());
  for (size_t i = 0; i < want.pending.size(); ++i) {
    ASSERT_EQ(want.pending[i], got.pending[i])
        << "pending " << i << ": " << want.pending[i].message << " vs "
        << got.pending[i].message;
  }
}

TEST(SchedulerTest, SameDecisionsAsDecideOnRandomSnapshots) {
  std::mt19937_64 rng(20261123);
  int admitted = 0;
  int preempted = 0;
  int reserved = 0;
  int backfilled = 0;
  int held = 0;
  int capped = 0;  // held by a user's hourly spend cap first
  int bound = 0;   // admitted jobs bound to one backend
  // Kept across cycles of different snapshots, so that Cycle(Decisions&)
  // writes over more and over fewer entries than it needs.
  Decisions reused;
  for (int iteration = 0; iteration < 300; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Scheduler scheduler(RandomSnapshot(rng));
    for (int cycle = 0; cycle < 4; ++cycle) {
      SCOPED_TRACE("cycle " + std::to_string(cycle));
      const Decisions got = scheduler.Cycle();
      const Decisions want = Decide(scheduler.snapshot());
      ExpectSame(want, got);
      if (::testing::Test::HasFatalFailure()) return;
      scheduler.Cycle(reused);
      ExpectSame(want, reused);
      if (::testing::Test::HasFatalFailure()) return;
      // The speed-ups (placement index, equivalence classes) change nothing.
      ExpectSame(want, Decide(scheduler.snapshot(), kPlain));
      if (::testing::Test::HasFatalFailure()) return;
      admitted += static_cast<int>(got.admissions.size());
      preempted += static_cast<int>(got.preemptions.size());
      reserved += static_cast<int>(got.reservations.size());
      for (const Admission& a : got.admissions) backfilled += a.backfill;
      // A job bound to a backend runs on that backend's nodes only.
      for (const Admission& a : got.admissions) {
        const Snapshot& now = scheduler.snapshot();
        const auto job =
            std::find_if(now.pending.begin(), now.pending.end(),
                         [&](const PendingJob& j) { return j.id == a.job; });
        ASSERT_NE(job, now.pending.end());
        if (job->worker.backends == kAnyBackend) continue;
        ++bound;
        for (NodeId n : a.worker_nodes) {
          ASSERT_NE(job->worker.backends & BackendBit(now.nodes[n].backend), 0)
              << "job " << a.job << " on node " << n;
        }
      }
      for (const PendingDecision& p : got.pending) {
        held += p.reason == PendingReason::kBudgetHold;
        capped += p.message.str().starts_with("BUDGET_HOLD: user ");
      }
      // Steady state: victims stop, admissions start running, some work
      // completes, new jobs arrive, some pending jobs are cancelled.
      for (const Preemption& p : got.preemptions)
        ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
      for (const Admission& a : got.admissions)
        ASSERT_TRUE(scheduler.ApplyAdmission(a));
      const Snapshot& s = scheduler.snapshot();
      std::vector<JobId> done;
      for (const RunningAttempt& r : s.running) {
        if (Uniform(rng, 0, 3) == 0) done.push_back(r.job);
      }
      for (JobId id : done) ASSERT_TRUE(scheduler.CompleteRunning(id));
      std::vector<JobId> cancelled;
      for (const PendingJob& j : s.pending) {
        if (Uniform(rng, 0, 19) == 0) cancelled.push_back(j.id);
      }
      for (JobId id : cancelled) ASSERT_TRUE(scheduler.RemovePending(id));
      if (!s.queues.empty()) {
        for (int k = 0, n = static_cast<int>(Uniform(rng, 0, 30)); k < n; ++k) {
          scheduler.AddPending(
              RandomJob(s, 1000000 + iteration * 1000 + cycle * 100 + k, rng));
        }
      }
      scheduler.SetNow(s.now + Uniform(rng, 0, 600) * 1000 * 1000);
    }
  }
  EXPECT_GT(admitted, 1000);
  EXPECT_GT(preempted, 20);
  EXPECT_GT(reserved, 20);
  EXPECT_GT(backfilled, 20);
  EXPECT_GT(held, 20);
  EXPECT_GT(capped, 20);
  EXPECT_GT(bound, 100);
  std::printf(
      "admitted %d, preempted %d, reserved %d, backfilled %d, budget holds "
      "%d (by hourly caps %d), bound to a backend %d\n",
      admitted, preempted, reserved, backfilled, held, capped, bound);
}

// Every mutation the scheduler service applies between cycles — running
// work that changes outside an admission (a job the database says runs, one
// being preempted that holds its nodes but no quota, a new checkpoint), a
// changed pending job, nodes going away and coming back or changing size,
// queue, cohort, flavor and budget edits, new priority classes — on random
// snapshots: every cycle equals Decide() on the scheduler's snapshot, with
// and without the speed-ups.
TEST(SchedulerTest, SameDecisionsAsDecideUnderEveryMutation) {
  std::mt19937_64 rng(20261125);
  absl::flat_hash_map<std::string, int> applied;
  int admitted = 0;
  int preempted = 0;
  for (int iteration = 0; iteration < 200; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Scheduler scheduler(RandomSnapshot(rng));
    Decisions reused;
    JobId next_id = 5000000 + iteration * 10000;
    for (int cycle = 0; cycle < 6; ++cycle) {
      SCOPED_TRACE("cycle " + std::to_string(cycle));
      scheduler.Cycle(reused);
      const Decisions want = Decide(scheduler.snapshot());
      ExpectSame(want, reused);
      if (::testing::Test::HasFatalFailure()) return;
      ExpectSame(want, Decide(scheduler.snapshot(), kPlain));
      if (::testing::Test::HasFatalFailure()) return;
      admitted += static_cast<int>(want.admissions.size());
      preempted += static_cast<int>(want.preemptions.size());
      // Victims become PREEMPTING: they keep their nodes, give back their
      // quota and may not be preempted again; some admissions run.
      const Snapshot& s = scheduler.snapshot();
      for (const Preemption& p : want.preemptions) {
        const RunningAttempt* victim = nullptr;
        for (const RunningAttempt& r : s.running) {
          if (r.job == p.victim) victim = &r;
        }
        ASSERT_NE(victim, nullptr);
        RunningAttempt stopping = *victim;
        if (stopping.worker_resources == Resources{} &&
            !stopping.placement.empty()) {
          stopping.worker_resources = WorkerShare(stopping, 0);
        }
        stopping.resources = {};
        PriorityClass pc = s.priority_classes[stopping.priority_class];
        pc.name += " (preempting)";
        pc.preemptible = false;
        stopping.priority_class = scheduler.AddPriorityClass(pc);
        ASSERT_TRUE(scheduler.UpdateRunning(stopping));
        ++applied["UpdateRunning"];
      }
      for (const Admission& a : want.admissions) {
        if (Uniform(rng, 0, 3) != 0) {
          ASSERT_TRUE(scheduler.ApplyAdmission(a));
        }
      }
      for (int k = 0, n = static_cast<int>(Uniform(rng, 0, 8)); k < n; ++k) {
        switch (Uniform(rng, 0, 10)) {
          case 0: {  // Running work the scheduler did not admit.
            if (s.queues.empty() || s.nodes.empty()) break;
            PendingJob job = MakeSyntheticJob(s, next_id++, rng);
            RunningAttempt r{
                .job = job.id,
                .queue = job.queue,
                .priority_class = job.priority_class,
                .resources = job.worker.AsResources() * job.workers,
                .start_time = s.now - Uniform(rng, 0, 7200) * int64_t{1000000},
                .time_limit_micros = job.time_limit_micros};
            const NodeId first = Pick<NodeId>(rng, s.nodes);
            r.flavor = s.nodes[first].flavor;
            for (int w = 0; w < job.workers; ++w) r.placement.push_back(first);
            if (Uniform(rng, 0, 1) == 0)
              r.worker_resources = job.worker.AsResources();
            if (Uniform(rng, 0, 1) == 0)
              r.last_checkpoint_time =
                  r.start_time + Uniform(rng, 0, 60) * int64_t{1000000};
            ASSERT_TRUE(scheduler.AddRunning(r));
            ASSERT_FALSE(scheduler.AddRunning(r));
            ++applied["AddRunning"];
            break;
          }
          case 1: {  // A checkpoint.
            if (s.running.empty()) break;
            const RunningAttempt& r =
                s.running[Uniform(rng, 0, s.running.size() - 1)];
            ASSERT_TRUE(scheduler.SetLastCheckpoint(
                r.job, s.now - Uniform(rng, 0, 600) * int64_t{1000000}));
            ++applied["SetLastCheckpoint"];
            break;
          }
          case 2: {  // A pending job changed (priority, shape).
            if (s.pending.empty()) break;
            PendingJob job = s.pending[Uniform(rng, 0, s.pending.size() - 1)];
            job.priority_class = static_cast<PriorityClassId>(
                Uniform(rng, 0, s.priority_classes.size() - 1));
            job.worker.gpus = Uniform(rng, 0, 4);
            if (Uniform(rng, 0, 2) == 0) {
              job.budget.reset();
              job.tenant_rate_cap.reset();
              job.project_rate_cap.reset();
              GiveRandomBudget(s, job, rng);
            }
            ASSERT_TRUE(scheduler.UpdatePending(job));
            ++applied["UpdatePending"];
            break;
          }
          case 3:
          case 4: {  // A node goes away, comes back, shrinks or grows.
            if (s.nodes.empty()) break;
            const NodeId id = Pick<NodeId>(rng, s.nodes);
            Node node = s.nodes[id];
            node.used = {};  // Ignored: kept as charged.
            if (Uniform(rng, 0, 1) == 0) {
              node.schedulable = !node.schedulable;
            } else {
              node.capacity.gpus = Uniform(rng, 0, 8);
              node.capacity.cpu_millis = Uniform(rng, 1, 128) * 1000;
            }
            scheduler.SetNode(id, node);
            ++applied["SetNode"];
            break;
          }
          case 5: {  // A queue edit: quota, weight, strategy, preemption.
            if (s.queues.empty()) break;
            const QueueId id = Pick<QueueId>(rng, s.queues);
            Queue q = s.queues[id];
            for (FlavorQuota& fq : q.quotas) {
              for (auto& rq : fq.resources) {
                if (rq.has_value() && Uniform(rng, 0, 1) == 0)
                  rq->nominal = Uniform(rng, 0, 64) * rq->nominal / 32;
              }
            }
            q.weight = Uniform(rng, 1, 4) / 2.0;
            if (Uniform(rng, 0, 3) == 0) {
              q.strategy = q.strategy == QueueingStrategy::kStrictFifo
                               ? QueueingStrategy::kBestEffortFifo
                               : QueueingStrategy::kStrictFifo;
            }
            q.fair_share_preemption = Uniform(rng, 0, 1) == 1;
            q.min_runtime = Uniform(rng, 0, 1) == 0
                                ? Uniform(rng, 0, 120) * int64_t{60} * 1000000
                                : 0;
            scheduler.SetQueue(id, q);
            ++applied["SetQueue"];
            break;
          }
          case 6: {  // A cohort edit.
            if (s.cohorts.empty()) break;
            const CohortId id = Pick<CohortId>(rng, s.cohorts);
            Cohort c = s.cohorts[id];
            if (!c.quotas.empty()) {
              c.quotas.pop_back();
            } else if (!s.flavors.empty()) {
              FlavorQuota fq{.flavor = 0};
              fq.resources[0] = ResourceQuota{.nominal = Uniform(rng, 0, 32)};
              c.quotas.push_back(fq);
            }
            scheduler.SetCohort(id, c);
            ++applied["SetCohort"];
            break;
          }
          case 7: {  // A price change.
            if (s.flavors.empty()) break;
            const FlavorId id = Pick<FlavorId>(rng, s.flavors);
            Flavor f = s.flavors[id];
            f.price_micros_per_gpu_hour = Uniform(rng, 0, 8) * 1000000;
            f.reclaim_rate_per_hour = Uniform(rng, 0, 4) / 2.0;
            RandomCpuAndMemoryPrices(f, rng);
            if (Uniform(rng, 0, 1) == 0) {
              f.restart_overhead_micros =
                  Uniform(rng, 0, 60) * int64_t{60} * 1000000;
            } else {
              f.restart_overhead_micros.reset();
            }
            scheduler.SetFlavor(id, f);
            ++applied["SetFlavor"];
            break;
          }
          case 8: {  // A budget spent or topped up.
            if (s.budgets.empty()) break;
            const BudgetId id = Pick<BudgetId>(rng, s.budgets);
            Budget b = s.budgets[id];
            b.remaining_micros =
                Uniform(rng, -1, b.hourly ? 80 : 3000) * 1000000;
            if (b.hourly) b.hourly_cap_micros = b.remaining_micros + 5000000;
            scheduler.SetBudget(id, b);
            ++applied["SetBudget"];
            break;
          }
          case 9: {  // Work ends; a job arrives.
            if (!s.running.empty()) {
              ASSERT_TRUE(scheduler.CompleteRunning(
                  s.running[Uniform(rng, 0, s.running.size() - 1)].job));
            }
            if (!s.queues.empty())
              scheduler.AddPending(RandomJob(s, next_id++, rng));
            ++applied["CompleteAndArrive"];
            break;
          }
          default: {  // A cancelled job.
            if (s.pending.empty()) break;
            ASSERT_TRUE(scheduler.RemovePending(
                s.pending[Uniform(rng, 0, s.pending.size() - 1)].id));
            ++applied["RemovePending"];
            break;
          }
        }
      }
      scheduler.SetNow(s.now + Uniform(rng, 0, 300) * 1000 * 1000);
    }
  }
  for (const char* kind :
       {"AddRunning", "UpdateRunning", "SetLastCheckpoint", "UpdatePending",
        "SetNode", "SetQueue", "SetCohort", "SetFlavor", "SetBudget",
        "CompleteAndArrive", "RemovePending"}) {
    EXPECT_GT(applied[kind], 20) << kind;
  }
  EXPECT_GT(admitted, 1000);
  EXPECT_GT(preempted, 20);
}

// One H100 node of 8 GPUs (block 1, rack 1) and the queue "research" with 64
// GPUs of quota.
class OneNodeSchedulerTest : public ::testing::Test {
 protected:
  testing::SnapshotBuilder b_;
  const FlavorId f_ = b_.AddFlavor("h100");
  const NodeId n_ = b_.AddNode(f_, 8, /*block=*/1, /*rack=*/1);
  const QueueId q_ = b_.AddGpuQueue("research", std::nullopt, f_, 64);
};

// A running attempt's workers release on their nodes exactly what they were
// charged, also when it holds no quota (a job being preempted).
TEST_F(OneNodeSchedulerTest, RunningWorkReleasesWhatItsWorkersHold) {
  Scheduler scheduler(b_.Build());
  RunningAttempt stopping{.job = 7,
                          .queue = q_,
                          .flavor = f_,
                          .placement = {n_, n_},
                          .resources = {},
                          .worker_resources = {.gpus = 3}};
  ASSERT_TRUE(scheduler.AddRunning(stopping));
  EXPECT_EQ(scheduler.snapshot().nodes[n_].used.gpus, 6);
  ASSERT_TRUE(scheduler.CompleteRunning(7));
  EXPECT_EQ(scheduler.snapshot().nodes[n_].used.gpus, 0);
  EXPECT_FALSE(scheduler.CompleteRunning(7));
  EXPECT_FALSE(scheduler.SetLastCheckpoint(7, 0));
  EXPECT_FALSE(scheduler.UpdateRunning(stopping));
}

// The scheduler service keeps running work and pending jobs in the order
// they came, not in id order: decisions must not depend on the order of
// Snapshot::running and Snapshot::pending.
TEST(SchedulerTest, DecisionsDoNotDependOnTheOrderOfJobs) {
  std::mt19937_64 rng(20261126);
  int compared = 0;
  for (int iteration = 0; iteration < 300; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Snapshot s = RandomSnapshot(rng);
    const Decisions want = Decide(s);
    std::shuffle(s.running.begin(), s.running.end(), rng);
    std::shuffle(s.pending.begin(), s.pending.end(), rng);
    ExpectSame(want, Decide(s));
    if (::testing::Test::HasFatalFailure()) return;
    compared +=
        static_cast<int>(want.admissions.size() + want.reservations.size() +
                         want.preemptions.size());
  }
  EXPECT_GT(compared, 1000);
}

TEST(SchedulerTest, InvalidJobDefersToDecide) {
  Scheduler scheduler(MakeSyntheticSnapshot(
      {.nodes = 10, .queues = 3, .cohorts = 1, .pending = 20}));
  PendingJob bad{.id = 999999, .queue = 99};
  scheduler.AddPending(bad);
  ExpectSame(Decide(scheduler.snapshot()), scheduler.Cycle());
  EXPECT_EQ(scheduler.Cycle().pending.front().reason,
            PendingReason::kInvalidSnapshot);
  ASSERT_TRUE(scheduler.RemovePending(999999));
  ExpectSame(Decide(scheduler.snapshot()), scheduler.Cycle());
  const Decisions d = scheduler.Cycle();
  for (const PendingDecision& p : d.pending)
    EXPECT_NE(p.reason, PendingReason::kInvalidSnapshot);
}

// Explanations are kept per equivalence class across cycles and reused
// while the details they were formatted from (reason, flavor, the numbers in
// the text) are equal; otherwise they are formatted again.
TEST_F(OneNodeSchedulerTest, UnchangedFailureSharesItsExplanationAcrossCycles) {
  b_.AddRunning(1, q_, f_, n_, 6);
  b_.AddJob(10, q_, 4, 1, 1);
  b_.AddJob(11, q_, 4, 1, 2);
  Scheduler scheduler(b_.Build());
  const Decisions first = scheduler.Cycle();
  ASSERT_EQ(first.pending.size(), 2u);
  EXPECT_EQ(first.pending[0].message,
            "NO_CAPACITY: free nodes hold 2 of 4 workers (flavor h100)");
  scheduler.SetNow(scheduler.snapshot().now + 1000000);
  const Decisions second = scheduler.Cycle();
  ExpectSame(Decide(scheduler.snapshot()), second);
  ASSERT_EQ(second.pending.size(), 2u);
  // The same text, not a copy: nothing was formatted again.
  EXPECT_EQ(&first.pending[0].message.str(), &second.pending[0].message.str());
  EXPECT_EQ(&second.pending[0].message.str(), &second.pending[1].message.str());
}

TEST_F(OneNodeSchedulerTest, ExplanationFollowsChangedNumbersAcrossCycles) {
  const QueueId small = b_.AddGpuQueue("small", std::nullopt, f_, 4);
  b_.AddRunning(1, q_, f_, n_, 1);
  b_.AddRunning(2, q_, f_, n_, 5);
  b_.AddRunningQuotaOnly(3, small, f_, 1);
  b_.AddRunningQuotaOnly(4, small, f_, 2);
  b_.AddJob(10, q_, 4, 1, 1);
  b_.AddJob(11, small, 1, 3, 2);
  Scheduler scheduler(b_.Build());
  Decisions d = scheduler.Cycle();
  ExpectSame(Decide(scheduler.snapshot()), d);
  ASSERT_EQ(d.pending.size(), 2u);
  EXPECT_EQ(d.pending[0].message,
            "NO_CAPACITY: free nodes hold 2 of 4 workers (flavor h100)");
  EXPECT_EQ(d.pending[1].message,
            "QUOTA_EXHAUSTED: queue small gpu 3/4, cohort lends 0, job needs "
            "3 (flavor h100): the queue has no cohort to borrow from");
  // One GPU more is free, one less is used: both texts change.
  ASSERT_TRUE(scheduler.CompleteRunning(1));
  ASSERT_TRUE(scheduler.CompleteRunning(3));
  d = scheduler.Cycle();
  ExpectSame(Decide(scheduler.snapshot()), d);
  ASSERT_EQ(d.pending.size(), 2u);
  EXPECT_EQ(d.pending[0].message,
            "NO_CAPACITY: free nodes hold 3 of 4 workers (flavor h100)");
  EXPECT_EQ(d.pending[1].message,
            "QUOTA_EXHAUSTED: queue small gpu 2/4, cohort lends 0, job needs "
            "3 (flavor h100): the queue has no cohort to borrow from");
  // And back (a job that uses the same GPU again).
  scheduler.AddPending(
      {.id = 12, .queue = q_, .workers = 1, .worker = {.gpus = 1}});
  d = scheduler.Cycle();
  ExpectSame(Decide(scheduler.snapshot()), d);
  ASSERT_EQ(d.admissions.size(), 1u);
  ASSERT_TRUE(scheduler.ApplyAdmission(d.admissions[0]));
  d = scheduler.Cycle();
  ExpectSame(Decide(scheduler.snapshot()), d);
  EXPECT_EQ(d.pending[0].message,
            "NO_CAPACITY: free nodes hold 2 of 4 workers (flavor h100)");
  // A rebuild of the class table (after an invalid job) renumbers classes:
  // no explanation of the old numbering may be reused.
  scheduler.AddPending({.id = 99, .queue = 42});
  EXPECT_EQ(scheduler.Cycle().pending.front().reason,
            PendingReason::kInvalidSnapshot);
  ASSERT_TRUE(scheduler.RemovePending(99));
  scheduler.AddPending(
      {.id = 13, .queue = q_, .workers = 3, .worker = {.gpus = 1}});
  d = scheduler.Cycle();
  ExpectSame(Decide(scheduler.snapshot()), d);
}

// Classes are numbered anew when the scheduler rebuilds its state (after an
// invalid snapshot): no explanation kept under the old numbering is reused.
TEST_F(OneNodeSchedulerTest, RebuildDropsKeptExplanations) {
  b_.AddRunning(1, q_, f_, n_, 7);
  b_.AddJob(10, q_, 2, 1, 1);
  b_.AddJob(11, q_, 4, 1, 2);
  Scheduler scheduler(b_.Build());
  Decisions d = scheduler.Cycle();
  ASSERT_EQ(d.pending.size(), 2u);
  EXPECT_EQ(d.pending[0].message,
            "NO_CAPACITY: free nodes hold 1 of 2 workers (flavor h100)");
  EXPECT_EQ(d.pending[1].message,
            "NO_CAPACITY: free nodes hold 1 of 4 workers (flavor h100)");
  // While the snapshot is invalid, job 10 leaves and comes back: the rebuilt
  // state sees job 11 first, so the classes swap numbers.
  const PendingJob job10 = scheduler.snapshot().pending[0];
  ASSERT_EQ(job10.id, 10);
  scheduler.AddPending({.id = 99, .queue = 42});
  ASSERT_TRUE(scheduler.RemovePending(10));
  ASSERT_TRUE(scheduler.RemovePending(99));
  scheduler.AddPending(job10);
  d = scheduler.Cycle();
  ExpectSame(Decide(scheduler.snapshot()), d);
  ASSERT_EQ(d.pending.size(), 2u);
  EXPECT_EQ(d.pending[0].message,
            "NO_CAPACITY: free nodes hold 1 of 2 workers (flavor h100)");
  EXPECT_EQ(d.pending[1].message,
            "NO_CAPACITY: free nodes hold 1 of 4 workers (flavor h100)");
}

// Long random sequences of small mutations: most classes see the same
// numbers from cycle to cycle (their explanations are reused), some see
// changed ones (theirs must be formatted again).
// Applies a cycle's decisions (victims end, admissions start), then a little
// churn: up to 3 completions, perhaps one pending job removed, up to 3
// arrivals (ids from `first_id`) and 0–120 s.
void ApplyWithLightChurn(Scheduler& scheduler, const Decisions& got,
                         std::mt19937_64& rng, JobId first_id) {
  for (const Preemption& p : got.preemptions)
    ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
  for (const Admission& a : got.admissions)
    ASSERT_TRUE(scheduler.ApplyAdmission(a));
  const Snapshot& s = scheduler.snapshot();
  for (int k = 0, m = static_cast<int>(Uniform(rng, 0, 3));
       k < m && !s.running.empty(); ++k) {
    ASSERT_TRUE(scheduler.CompleteRunning(
        s.running[Uniform(rng, 0, s.running.size() - 1)].job));
  }
  if (!s.pending.empty() && Uniform(rng, 0, 2) == 0) {
    ASSERT_TRUE(scheduler.RemovePending(
        s.pending[Uniform(rng, 0, s.pending.size() - 1)].id));
  }
  if (!s.queues.empty()) {
    for (int k = 0, m = static_cast<int>(Uniform(rng, 0, 3)); k < m; ++k)
      scheduler.AddPending(RandomJob(s, first_id + k, rng));
  }
  scheduler.SetNow(s.now + Uniform(rng, 0, 120) * 1000 * 1000);
}

TEST(SchedulerTest, KeptExplanationsOnLongRandomMutationSequences) {
  std::mt19937_64 rng(20261124);
  int shared = 0;
  int changed = 0;
  for (int iteration = 0; iteration < 120; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Scheduler scheduler(RandomSnapshot(rng));
    Decisions last;
    for (int cycle = 0; cycle < 12; ++cycle) {
      SCOPED_TRACE("cycle " + std::to_string(cycle));
      const Decisions got = scheduler.Cycle();
      ExpectSame(Decide(scheduler.snapshot()), got);
      if (::testing::Test::HasFatalFailure()) return;
      ExpectSame(Decide(scheduler.snapshot(), kPlain), got);
      if (::testing::Test::HasFatalFailure()) return;
      absl::flat_hash_map<JobId, const PendingDecision*> before;
      for (const PendingDecision& p : last.pending) before[p.job] = &p;
      for (const PendingDecision& p : got.pending) {
        auto it = before.find(p.job);
        if (it == before.end()) continue;
        if (&it->second->message.str() == &p.message.str()) {
          ++shared;
        } else if (it->second->message.str() != p.message.str()) {
          ++changed;
        }
      }
      ApplyWithLightChurn(scheduler, got, rng,
                          1000000 + iteration * 1000 + cycle * 10);
      if (::testing::Test::HasFatalFailure()) return;
      last = got;
    }
  }
  // Both paths were taken many times.
  EXPECT_GT(shared, 10000);
  EXPECT_GT(changed, 1000);
  std::printf("explanations shared %d, changed %d\n", shared, changed);
}

// Cycles that do not explain (the scheduler service's, between two
// explaining ones) decide exactly as those that do and leave every message
// empty, and the next cycle that explains gives Decide()'s messages: the
// classes' kept explanations stay right across the cycles between.
TEST(SchedulerTest, UnexplainedCyclesDecideAlikeAndLaterExplanationsAreRight) {
  std::mt19937_64 rng(20261127);
  int explained = 0;
  int unexplained = 0;
  for (int iteration = 0; iteration < 50; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Scheduler scheduler(RandomSnapshot(rng));
    Decisions got;
    for (int cycle = 0; cycle < 12; ++cycle) {
      SCOPED_TRACE("cycle " + std::to_string(cycle));
      const bool explain = Uniform(rng, 0, 2) == 0;
      scheduler.Cycle(got, explain);
      Decisions want = Decide(scheduler.snapshot());
      if (explain) {
        ++explained;
      } else {
        for (const PendingDecision& p : got.pending)
          ASSERT_EQ(p.message, "") << "job " << p.job;
        for (PendingDecision& p : want.pending) p.message = Message();
        unexplained += static_cast<int>(got.pending.size());
      }
      ExpectSame(want, got);
      if (::testing::Test::HasFatalFailure()) return;
      ApplyWithLightChurn(scheduler, got, rng,
                          2000000 + iteration * 1000 + cycle * 10);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(explained, 120);
  EXPECT_GT(unexplained, 600);
}

// A preemption that no running attempt allows is found in the first cycle
// after a change allows it (nothing of an earlier cycle's search is kept):
// a victim of lower priority in the job's own queue appears, and a borrower
// in the cohort whose priority class becomes preemptible.
TEST(SchedulerTest, PreemptionBecomesPossibleAfterAChange) {
  testing::SnapshotBuilder b;
  const PriorityClassId low = b.AddPriority("low", -10);
  const PriorityClassId high = b.AddPriority("high", 10);
  const PriorityClassId pinned = b.AddPriority("pinned", -20);
  b.snapshot().priority_classes[pinned].preemptible = false;
  const FlavorId f = b.AddFlavor("h100");
  const NodeId n0 = b.AddNode(f, 8);
  const NodeId n1 = b.AddNode(f, 8);
  const CohortId c = b.AddCohort("c");
  // Queue own preempts lower priorities within itself; queue light reclaims
  // its nominal quota from borrowers; queue heavy borrows.
  const QueueId own = b.AddGpuQueue("own", std::nullopt, f, 8);
  b.snapshot().queues[own].within_queue_preemption =
      WithinQueuePreemption::kLowerPriority;
  const QueueId light = b.AddGpuQueue("light", c, f, 8);
  b.snapshot().queues[light].reclaim_within_cohort = ReclaimWithinCohort::kAny;
  const QueueId heavy = b.AddGpuQueue("heavy", c, f, 0);
  b.AddRunning(100, own, f, n0, 8);
  b.snapshot().running.back().priority_class = high;
  b.AddRunning(200, heavy, f, n1, 8);
  b.snapshot().running.back().priority_class = pinned;
  b.AddJob(1, own, 1, 8).priority_class = high;
  b.AddJob(2, light, 1, 8).priority_class = low;
  Scheduler scheduler(b.Build());

  auto cycle = [&] {
    const Decisions d = scheduler.Cycle();
    ExpectSame(Decide(scheduler.snapshot()), d);
    ExpectSame(Decide(scheduler.snapshot(), kPlain), d);
    std::vector<JobId> victims;
    for (const Preemption& p : d.preemptions) victims.push_back(p.victim);
    return victims;
  };
  // Job 100 has job 1's priority, and job 200's class is not preemptible.
  EXPECT_TRUE(cycle().empty());
  EXPECT_TRUE(cycle().empty());

  // Job 100 is replaced by a lower-priority attempt: job 1 preempts it.
  RunningAttempt lower = scheduler.snapshot().running[0];
  ASSERT_EQ(lower.job, 100);
  lower.priority_class = low;
  ASSERT_TRUE(scheduler.UpdateRunning(lower));
  EXPECT_EQ(cycle(), std::vector<JobId>{100});
  EXPECT_EQ(cycle(), std::vector<JobId>{100});

  // Job 200 becomes preemptible (a new attempt of a preemptible class):
  // job 2 reclaims light's quota from it.
  ASSERT_TRUE(scheduler.CompleteRunning(200));
  EXPECT_EQ(cycle(), std::vector<JobId>{100});
  ASSERT_TRUE(scheduler.AddRunning({.job = 201,
                                    .queue = heavy,
                                    .flavor = f,
                                    .priority_class = high,
                                    .placement = {n1},
                                    .resources = {.gpus = 8}}));
  std::vector<JobId> victims = cycle();
  std::sort(victims.begin(), victims.end());
  EXPECT_EQ(victims, (std::vector<JobId>{100, 201}));
}

// The scheduler service benchmark's mix at a small size (light queues
// reclaiming, every fourth queue preempting within itself), through cycles
// of churn: with preemption searches that fail inside speculative runs, the
// decisions equal those of the plain engine (no classes, no runs, no
// placement index).
TEST(SchedulerTest, SameDecisionsAsThePlainEngineInTheServiceMix) {
  std::mt19937_64 rng(20261126);
  SyntheticSpec spec{.nodes = 320,
                     .racks_per_block = 4,
                     .queues = 40,
                     .cohorts = 20,
                     .pending = 0,
                     .busy_fraction = 0,
                     .seed = 7};
  Snapshot s = MakeSyntheticSnapshot(spec);
  for (size_t q = 0; q < s.queues.size(); ++q) {
    if (q % 4 == 3) {
      s.queues[q].reclaim_within_cohort = ReclaimWithinCohort::kAny;
    } else if (q % 4 == 1) {
      s.queues[q].within_queue_preemption =
          WithinQueuePreemption::kLowerPriority;
    }
  }
  JobId next_id = 1;
  auto add_job = [&](const Snapshot& snapshot) {
    PendingJob job = MakeSyntheticJob(snapshot, next_id++, rng);
    // 3 % of the jobs in the light queues.
    const bool light = Uniform(rng, 0, 99) < 3;
    job.queue = static_cast<QueueId>(4 * Uniform(rng, 0, 9) +
                                     (light ? 3 : Uniform(rng, 0, 2)));
    return job;
  };
  for (int i = 0; i < 4000; ++i) s.pending.push_back(add_job(s));
  Scheduler scheduler(std::move(s));
  int preempted = 0;
  for (int cycle = 0; cycle < 14; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const Decisions got = scheduler.Cycle();
    ExpectSame(Decide(scheduler.snapshot(), kPlain), got);
    if (::testing::Test::HasFatalFailure()) return;
    preempted += static_cast<int>(got.preemptions.size());
    for (const Admission& a : got.admissions)
      ASSERT_TRUE(scheduler.ApplyAdmission(a));
    const Snapshot& now = scheduler.snapshot();
    for (const Preemption& p : got.preemptions) {
      ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
      PendingJob job = add_job(scheduler.snapshot());
      job.queue = p.victim_queue;
      scheduler.AddPending(std::move(job));
    }
    for (int k = 0; k < 15 && !now.running.empty(); ++k) {
      ASSERT_TRUE(scheduler.CompleteRunning(
          now.running[Uniform(rng, 0, now.running.size() - 1)].job));
    }
    for (int k = 0; k < 15; ++k)
      scheduler.AddPending(add_job(scheduler.snapshot()));
    scheduler.SetNow(now.now + 1000 * 1000);
  }
  EXPECT_GT(preempted, 0);
}

// Tenant budgets on most queues and project budgets of the jobs
// (PendingJob::budget) shared across queues, in a mix with preemption and
// priced CPU and memory, through cycles of churn in which the budgets are
// charged what the admissions cost (as the chargeback system does) and
// sometimes topped up: every cycle equals Decide() and the plain engine
// (no classes, no runs, no placement index), and both kinds of budget hold
// jobs.
TEST(SchedulerTest, SameDecisionsAsThePlainEngineWithProjectBudgets) {
  std::mt19937_64 rng(20261127);
  SyntheticSpec spec{.nodes = 160,
                     .racks_per_block = 4,
                     .queues = 24,
                     .cohorts = 8,
                     .pending = 0,
                     .busy_fraction = 0,
                     .seed = 11};
  Snapshot s = MakeSyntheticSnapshot(spec);
  constexpr int kTenants = 6;
  constexpr int kProjects = 8;
  for (int t = 0; t < kTenants; ++t) {
    s.budgets.push_back(
        {.name = "tenant-" + std::to_string(t),
         .remaining_micros = Uniform(rng, 100, 1500) * 1000000});
  }
  for (int p = 0; p < kProjects; ++p) {
    s.budgets.push_back({.name = "project-" + std::to_string(p),
                         .remaining_micros = Uniform(rng, 30, 600) * 1000000});
  }
  for (size_t q = 0; q < s.queues.size(); ++q) {
    if (q % 4 != 0) s.queues[q].budget = static_cast<BudgetId>(q % kTenants);
    if (q % 3 == 1) {
      s.queues[q].within_queue_preemption =
          WithinQueuePreemption::kLowerPriority;
    }
  }
  s.flavors[0].price_micros_per_cpu_hour = 20000;
  s.flavors[0].price_micros_per_gib_hour = 1000;
  s.flavors[2].price_micros_per_gib_hour = 2000;
  JobId next_id = 1;
  auto add_job = [&](const Snapshot& snapshot) {
    PendingJob job = MakeSyntheticJob(snapshot, next_id++, rng);
    const int64_t kind = Uniform(rng, 0, 9);
    if (kind < 6) {
      job.budget =
          static_cast<BudgetId>(kTenants + Uniform(rng, 0, kProjects - 1));
    } else if (kind == 6) {
      // Its own budget is its queue's (or a tenant's): counted once.
      job.budget = snapshot.queues[job.queue].budget.value_or(0);
    }
    return job;
  };
  for (int i = 0; i < 1500; ++i) s.pending.push_back(add_job(s));
  Scheduler scheduler(std::move(s));
  int admitted = 0, tenant_holds = 0, project_holds = 0;
  for (int cycle = 0; cycle < 12; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const Decisions got = scheduler.Cycle();
    ExpectSame(Decide(scheduler.snapshot()), got);
    if (::testing::Test::HasFatalFailure()) return;
    ExpectSame(Decide(scheduler.snapshot(), kPlain), got);
    if (::testing::Test::HasFatalFailure()) return;
    for (const PendingDecision& p : got.pending) {
      if (p.reason != PendingReason::kBudgetHold) continue;
      if (p.message.str().starts_with("BUDGET_HOLD: budget project-")) {
        ++project_holds;
      } else {
        ++tenant_holds;
      }
    }
    admitted += static_cast<int>(got.admissions.size());
    // What the admissions cost comes off their budgets.
    const Snapshot& now = scheduler.snapshot();
    std::vector<int64_t> spent(now.budgets.size(), 0);
    for (const Admission& a : got.admissions) {
      const PendingJob* job = nullptr;
      for (const PendingJob& j : now.pending) {
        if (j.id == a.job) job = &j;
      }
      ASSERT_NE(job, nullptr);
      const int64_t cost =
          ExpectedCostMicros(*job, now.flavors[a.flavor], PolicyConfig{});
      const std::optional<BudgetId> queue_budget =
          now.queues[job->queue].budget;
      if (queue_budget.has_value()) spent[*queue_budget] += cost;
      if (job->budget.has_value() && job->budget != queue_budget)
        spent[*job->budget] += cost;
    }
    for (size_t b = 0; b < spent.size(); ++b) {
      Budget budget = now.budgets[b];
      ASSERT_LE(spent[b], std::max<int64_t>(0, budget.remaining_micros))
          << "budget " << budget.name << " overrun";
      budget.remaining_micros -= spent[b];
      if (Uniform(rng, 0, 5) == 0)
        budget.remaining_micros += Uniform(rng, 0, 200) * 1000000;
      if (!(budget == now.budgets[b]))
        scheduler.SetBudget(static_cast<BudgetId>(b), std::move(budget));
    }
    for (const Preemption& p : got.preemptions)
      ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
    for (const Admission& a : got.admissions)
      ASSERT_TRUE(scheduler.ApplyAdmission(a));
    for (int k = 0; k < 10 && !now.running.empty(); ++k) {
      ASSERT_TRUE(scheduler.CompleteRunning(
          now.running[Uniform(rng, 0, now.running.size() - 1)].job));
    }
    for (int k = 0; k < 40; ++k)
      scheduler.AddPending(add_job(scheduler.snapshot()));
    scheduler.SetNow(now.now + 1000 * 1000);
  }
  std::printf("admitted %d, tenant budget holds %d, project budget holds %d\n",
              admitted, tenant_holds, project_holds);
  EXPECT_GT(admitted, 100);
  EXPECT_GT(tenant_holds, 100);
  EXPECT_GT(project_holds, 100);
}

// Users' hourly spend caps in tenants and projects (PendingJob::
// tenant_rate_cap, project_rate_cap) beside tenant budgets, through cycles
// of churn in which what each cap has left is computed here, independently,
// as SchedulerState does: the cap less the hourly prices (gang x per-worker
// GPU, CPU and memory prices, summed by hand) of the user's running jobs.
// No cycle admits more hourly price to a cap than it has left; every cycle
// equals Decide() and the plain engine; the caps hold jobs, with the cap's
// numbers in the explanation.
TEST(SchedulerTest, UserHourlyCapsHoldJobsAsTheRunningWorkComputedHereSays) {
  std::mt19937_64 rng(20261128);
  SyntheticSpec spec{.nodes = 96,
                     .racks_per_block = 4,
                     .queues = 12,
                     .cohorts = 4,
                     .pending = 0,
                     .busy_fraction = 0,
                     .seed = 13};
  Snapshot s = MakeSyntheticSnapshot(spec);
  s.flavors[0].price_micros_per_cpu_hour = 20000;
  s.flavors[0].price_micros_per_gib_hour = 1000;
  constexpr int kTenants = 3;
  constexpr int kCaps = 10;  // users x scopes
  for (int t = 0; t < kTenants; ++t) {
    s.budgets.push_back(
        {.name = "tenant-" + std::to_string(t),
         .remaining_micros = Uniform(rng, 2000, 6000) * 1000000});
  }
  for (size_t q = 0; q < s.queues.size(); ++q) {
    if (q % 3 != 0) s.queues[q].budget = static_cast<BudgetId>(q % kTenants);
  }
  std::vector<int64_t> cap(kCaps);
  for (int c = 0; c < kCaps; ++c) {
    cap[c] = Uniform(rng, 10, 120) * 1000000;
    s.budgets.push_back({.name = "budget-" + std::to_string(c % 4),
                         .remaining_micros = cap[c],
                         .hourly = true,
                         .user = "user-" + std::to_string(c),
                         .hourly_cap_micros = cap[c]});
  }
  auto cap_id = [](int c) { return static_cast<BudgetId>(kTenants + c); };
  // The price of one hour of `job` on `f`, summed term by term in exact
  // fractions of a micro (thousandths of a CPU, bytes of a GiB), rounded
  // half up.
  auto hourly = [](const PendingJob& job, const Flavor& f) {
    const __int128 per_worker_scaled =
        static_cast<__int128>(job.worker.gpus) * f.price_micros_per_gpu_hour *
            1000 * testing::kGiB +
        static_cast<__int128>(job.worker.cpu_millis) *
            f.price_micros_per_cpu_hour * testing::kGiB +
        static_cast<__int128>(job.worker.memory_bytes) *
            f.price_micros_per_gib_hour * 1000;
    const __int128 total = per_worker_scaled * job.workers;
    const __int128 unit = static_cast<__int128>(1000) * testing::kGiB;
    return static_cast<int64_t>((2 * total + unit) / (2 * unit));
  };
  JobId next_id = 1;
  auto add_job = [&](const Snapshot& snapshot) {
    PendingJob job = MakeSyntheticJob(snapshot, next_id++, rng);
    const int c = static_cast<int>(Uniform(rng, 0, kCaps));  // kCaps: none
    if (c < kCaps) {
      if (Uniform(rng, 0, 1) == 0) {
        job.tenant_rate_cap = cap_id(c);
      } else {
        job.project_rate_cap = cap_id(c);
      }
      // Sometimes the user's caps in both its tenant and its project.
      if (Uniform(rng, 0, 4) == 0)
        job.tenant_rate_cap = cap_id(static_cast<int>(Uniform(rng, 0, 9)));
    }
    return job;
  };
  for (int i = 0; i < 600; ++i) s.pending.push_back(add_job(s));
  Scheduler scheduler(std::move(s));
  // The running jobs' caps and hourly prices.
  struct Running {
    std::vector<int> caps;
    int64_t hourly = 0;
  };
  absl::flat_hash_map<JobId, Running> running;
  int admitted = 0, cap_holds = 0;
  for (int cycle = 0; cycle < 12; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    // Sometimes raised (which releases held jobs).
    if (cycle % 5 == 4) {
      for (int64_t& c : cap) c += Uniform(rng, 0, 40) * 1000000;
    }
    // What each cap has left, from the running work.
    std::vector<int64_t> left = cap;
    for (const auto& [id, r] : running) {
      for (int c : r.caps) left[c] -= r.hourly;
    }
    for (int c = 0; c < kCaps; ++c) {
      Budget b = scheduler.snapshot().budgets[cap_id(c)];
      b.hourly_cap_micros = cap[c];
      b.remaining_micros = left[c];
      if (!(b == scheduler.snapshot().budgets[cap_id(c)]))
        scheduler.SetBudget(cap_id(c), std::move(b));
    }
    const Decisions got = scheduler.Cycle();
    ExpectSame(Decide(scheduler.snapshot()), got);
    if (::testing::Test::HasFatalFailure()) return;
    ExpectSame(Decide(scheduler.snapshot(), kPlain), got);
    if (::testing::Test::HasFatalFailure()) return;
    const Snapshot& now = scheduler.snapshot();
    for (const PendingDecision& p : got.pending) {
      if (!p.message.str().starts_with("BUDGET_HOLD: user ")) continue;
      ++cap_holds;
      // "user user-3's hourly spend cap of 40.000000/h in budget budget-3:
      // 36.000000/h running, this job needs 8.000000/h (flavor ...)".
      const std::string& m = p.message.str();
      const size_t user = m.find("user-");
      const int c = std::stoi(m.substr(user + 5));
      EXPECT_NE(m.find(absl::StrCat("cap of ", FormatMicros(cap[c]), "/h")),
                std::string::npos)
          << m;
    }
    std::vector<int64_t> charged(kCaps, 0);
    for (const Admission& a : got.admissions) {
      const PendingJob* job = nullptr;
      for (const PendingJob& j : now.pending) {
        if (j.id == a.job) job = &j;
      }
      ASSERT_NE(job, nullptr);
      Running r{.hourly = hourly(*job, now.flavors[a.flavor])};
      ASSERT_EQ(r.hourly, HourlyPriceMicros(*job, now.flavors[a.flavor]));
      for (const std::optional<BudgetId>& b :
           {job->tenant_rate_cap, job->project_rate_cap}) {
        if (!b.has_value()) continue;
        const int c = *b - kTenants;
        if (std::find(r.caps.begin(), r.caps.end(), c) != r.caps.end())
          continue;
        r.caps.push_back(c);
        charged[c] += r.hourly;
      }
      running[a.job] = std::move(r);
    }
    for (int c = 0; c < kCaps; ++c) {
      ASSERT_LE(charged[c], std::max<int64_t>(0, left[c]))
          << "cap of user-" << c << " overrun";
    }
    admitted += static_cast<int>(got.admissions.size());
    for (const Preemption& p : got.preemptions) {
      ASSERT_TRUE(scheduler.CompleteRunning(p.victim));
      running.erase(p.victim);
    }
    for (const Admission& a : got.admissions)
      ASSERT_TRUE(scheduler.ApplyAdmission(a));
    for (int k = 0; k < 12 && !now.running.empty(); ++k) {
      const JobId id = now.running[Uniform(rng, 0, now.running.size() - 1)].job;
      ASSERT_TRUE(scheduler.CompleteRunning(id));
      running.erase(id);
    }
    for (int k = 0; k < 30; ++k)
      scheduler.AddPending(add_job(scheduler.snapshot()));
    scheduler.SetNow(now.now + 1000 * 1000);
  }
  std::printf("admitted %d, hourly cap holds %d\n", admitted, cap_holds);
  EXPECT_GT(admitted, 100);
  EXPECT_GT(cap_holds, 100);
}

// Fair-share preemption compares the queues' usage on every flavor: a
// class's failure to preempt must not be reused after the victim's queue
// takes more on a flavor that is not one of the class's candidates.
TEST(SchedulerTest, FairShareFailureIsNotReusedAfterUsageElsewhere) {
  testing::SnapshotBuilder b;
  const FlavorId f0 = b.AddFlavor("f0");
  const FlavorId f1 = b.AddFlavor("f1");
  const NodeId n0 = b.AddNode(f0, 8);
  b.AddNode(f1, 8);
  const CohortId c = b.AddCohort("c");
  const QueueId a = b.AddGpuQueue("a", c, f0, 0);
  b.snapshot().queues[a].fair_share_preemption = true;
  const QueueId victim = b.AddGpuQueue("b", c, f0, 0);
  b.AddGpuQuota(victim, f1, 0);
  const QueueId lender = b.AddGpuQueue("lender", c, f0, 8);
  b.AddGpuQuota(lender, f1, 8);
  b.AddRunning(100, victim, f0, n0, 4);
  b.AddRunning(101, victim, f0, n0, 4);
  Snapshot& s = b.snapshot();
  s.now = 10 * testing::kHour;
  // Aged jobs go first, oldest first: job 1, then job 3 (b's, on f1), then
  // job 2 (not aged; job 1's class).
  b.AddJob(1, a, 1, 6, s.now - 5 * testing::kHour);
  b.AddJob(3, victim, 1, 8, s.now - 4 * testing::kHour);
  b.AddJob(2, a, 1, 6, s.now);
  const Decisions want = Decide(b.Build(), kPlain);
  ExpectSame(want, Decide(b.Build()));
  Scheduler scheduler(b.Build());
  ExpectSame(want, scheduler.Cycle());
  std::vector<JobId> admitted;
  for (const Admission& ad : want.admissions) admitted.push_back(ad.job);
  std::sort(admitted.begin(), admitted.end());
  EXPECT_EQ(admitted, (std::vector<JobId>{2, 3}));
}

}  // namespace
}  // namespace trainyard::scheduler::policy
