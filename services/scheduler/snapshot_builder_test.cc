#include "services/scheduler/snapshot_builder.h"

#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "services/lib/domain/capacity.h"
#include "services/scheduler/policy/policy.h"
#include "services/scheduler/policy/quota.h"
#include "tests/support/scheduler/platform.h"

namespace trainyard::scheduler {
namespace {

namespace v1 = ::trainyard::v1;
using google::protobuf::util::TimeUtil;
using testing::AddH100Flavors;
using testing::MakeNode;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

JobView MakeJob(int64_t id, const std::string& queue, v1::JobState state,
                int gpus, int workers = 1) {
  JobView v;
  v.job.set_name("tenants/acme/jobs/" + std::to_string(id));
  v.job.set_tenant("acme");
  v.job.set_state(state);
  v.job.set_version(3);
  v.job.set_priority(10);
  *v.job.mutable_create_time() =
      TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(kNow) - 60);
  v1::JobSpec* spec = v.job.mutable_spec();
  spec->set_queue(queue);
  spec->set_workers(workers);
  spec->mutable_resources()->set_gpus(gpus);
  spec->mutable_resources()->set_cpu_millis(1000);
  spec->mutable_resources()->set_memory_bytes(int64_t{1} << 30);
  return v;
}

PlatformState Platform() {
  PlatformState st;
  AddH100Flavors(st);
  st.clusters["sim"] = v1::Cluster();
  v1::Pool pool;
  pool.set_flavor("h100");
  st.pools[{"sim", "main"}] = pool;
  st.nodes[{"sim", "n1"}] = MakeNode("main", 8, "b1", "r1");
  st.nodes[{"sim", "n2"}] = MakeNode("main", 8, "b1", "r2");
  st.nodes[{"sim", "n3"}] =
      MakeNode("main", 8, "b1", "r2", v1::NODE_STATE_DOWN);
  v1::Cohort cohort;
  st.cohorts["pool"] = cohort;
  v1::Queue q;
  q.set_cohort("pool");
  v1::FlavorQuotas* fq = q.add_quotas();
  fq->set_flavor("h100");
  v1::ResourceQuota* rq = fq->add_resources();
  rq->set_resource(v1::RESOURCE_NAME_GPU);
  rq->set_nominal(16);
  rq->set_borrowing_limit(4);
  q.mutable_preemption()->set_within_queue(
      v1::WITHIN_QUEUE_PREEMPTION_LOWER_PRIORITY);
  st.queues[{"acme", "default"}] = q;
  v1::Queue stopped = q;
  stopped.set_stop_policy(v1::STOP_POLICY_HOLD);
  st.queues[{"acme", "stopped"}] = stopped;
  v1::PriorityClass pc;
  pc.set_value(10);
  pc.set_preemptible(true);
  st.priority_classes["default"] = pc;
  return st;
}

// The price book's prices win over a flavor's own; budgets with a HOLD limit
// become policy budgets (the tenant's on its queues, a project's on its
// jobs); a budget restricting to spot makes its scope's jobs spot-only.
TEST(SnapshotBuilderTest, MapsBookPricesAndBudgets) {
  PlatformState st = Platform();
  st.prices["h100"] = {
      .gpu_hour = 3'000'000, .cpu_hour = 100'000, .gib_hour = 10'000};
  st.budgets[{"acme", ""}] = {.name = "tenants/acme/budgets/all",
                              .hold_limit_micros = 100'000'000};
  st.budgets[{"acme", "nlp"}] = {.name = "tenants/acme/budgets/nlp",
                                 .hold_limit_micros = 50'000'000};
  st.budgets[{"acme", "vision"}] = {.name = "tenants/acme/budgets/vision",
                                    .restrict_to_spot = true};
  st.budgets[{"acme", "warned"}] = {.name = "tenants/acme/budgets/warned"};
  auto job = [&](int64_t id, const std::string& project) {
    JobView v = MakeJob(id, "default", v1::JOB_STATE_QUEUED, 1);
    v.job.mutable_spec()->set_project(project);
    v.job.mutable_spec()->mutable_checkpoint()->set_resumable(true);
    st.jobs[id] = v;
  };
  job(1, "nlp");
  job(2, "vision");
  job(3, "warned");
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  const policy::Flavor& h100 = s.flavors[0];
  ASSERT_EQ(h100.name, "h100");
  EXPECT_EQ(h100.price_micros_per_gpu_hour, 3'000'000);
  EXPECT_EQ(h100.price_micros_per_cpu_hour, 100'000);
  EXPECT_EQ(h100.price_micros_per_gib_hour, 10'000);
  ASSERT_EQ(s.flavors[1].name, "h100-spot");
  EXPECT_EQ(s.flavors[1].price_micros_per_gpu_hour, 1'000'000);  // its own
  EXPECT_EQ(s.flavors[1].price_micros_per_cpu_hour, 0);
  // Two budgets limit admission (all, nlp); vision and warned do not.
  ASSERT_EQ(s.budgets.size(), 2u);
  EXPECT_EQ(s.budgets[0].name, "tenants/acme/budgets/all");
  EXPECT_EQ(s.budgets[1].name, "tenants/acme/budgets/nlp");
  ASSERT_FALSE(s.queues.empty());
  EXPECT_EQ(s.queues[0].budget, 0);
  ASSERT_EQ(s.pending.size(), 3u);
  for (const policy::PendingJob& p : s.pending) {
    switch (p.id) {
      case 1:
        EXPECT_EQ(p.budget, 1);
        EXPECT_EQ(p.spot_policy, policy::SpotPolicy::kAllowed);
        break;
      case 2:
        EXPECT_EQ(p.budget, std::nullopt);
        EXPECT_EQ(p.spot_policy, policy::SpotPolicy::kRequiredByBudget);
        break;
      default:
        EXPECT_EQ(p.budget, std::nullopt);
        EXPECT_EQ(p.spot_policy, policy::SpotPolicy::kAllowed);
    }
  }
}

// A budget's user hourly cap becomes one hourly policy budget per user of
// its scope with pending work (after the monthly budgets, in the order the
// users are met), named by the budget and the user; a job gets its user's
// caps in its tenant and its project.
TEST(SnapshotBuilderTest, MapsUserHourlyCapsPerUserAndScope) {
  PlatformState st = Platform();
  st.budgets[{"acme", ""}] = {.name = "tenants/acme/budgets/all",
                              .hold_limit_micros = 100'000'000,
                              .user_hourly_cap_micros = 40'000'000};
  st.budgets[{"acme", "nlp"}] = {.name = "tenants/acme/budgets/nlp",
                                 .user_hourly_cap_micros = 10'000'000};
  st.budgets[{"acme", "vision"}] = {.name = "tenants/acme/budgets/vision"};
  auto job = [&](int64_t id, const std::string& creator,
                 const std::string& project, v1::JobState state) {
    JobView v = MakeJob(id, "default", state, 1);
    v.job.set_creator(creator);
    v.job.mutable_spec()->set_project(project);
    st.jobs[id] = v;
  };
  job(1, "users/alice", "nlp", v1::JOB_STATE_QUEUED);
  job(2, "users/bob", "", v1::JOB_STATE_QUEUED);
  job(3, "users/alice", "vision", v1::JOB_STATE_QUEUED);
  job(4, "users/carol", "nlp", v1::JOB_STATE_SUCCEEDED);  // not mapped
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  // The tenant's monthly budget (HOLD limit), then alice's caps in the
  // tenant and in nlp, then bob's in the tenant. nlp has no HOLD limit.
  ASSERT_EQ(s.budgets.size(), 4u);
  EXPECT_FALSE(s.budgets[0].hourly);
  const policy::Budget want[] = {{.name = "tenants/acme/budgets/all",
                                  .hourly = true,
                                  .user = "alice",
                                  .hourly_cap_micros = 40'000'000},
                                 {.name = "tenants/acme/budgets/nlp",
                                  .hourly = true,
                                  .user = "alice",
                                  .hourly_cap_micros = 10'000'000},
                                 {.name = "tenants/acme/budgets/all",
                                  .hourly = true,
                                  .user = "bob",
                                  .hourly_cap_micros = 40'000'000}};
  for (int b = 0; b < 3; ++b) EXPECT_EQ(s.budgets[b + 1], want[b]) << b;
  ASSERT_EQ(s.pending.size(), 3u);
  for (const policy::PendingJob& p : s.pending) {
    switch (p.id) {
      case 1:
        EXPECT_EQ(p.tenant_rate_cap, 1);
        EXPECT_EQ(p.project_rate_cap, 2);
        break;
      case 2:
        EXPECT_EQ(p.tenant_rate_cap, 3);
        EXPECT_EQ(p.project_rate_cap, std::nullopt);
        break;
      default:  // alice in vision (no cap): her tenant cap only
        EXPECT_EQ(p.tenant_rate_cap, 1);
        EXPECT_EQ(p.project_rate_cap, std::nullopt);
    }
  }
}

TEST(SnapshotBuilderTest, MapsMinimumRuntimesAndRestartOverheads) {
  PlatformState st = Platform();
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_EQ(s.queues.size(), 1u);
  EXPECT_EQ(s.queues[0].min_runtime, 0);
  ASSERT_EQ(s.flavors.size(), 2u);
  EXPECT_FALSE(s.flavors[0].restart_overhead_micros.has_value());
  EXPECT_FALSE(s.flavors[1].restart_overhead_micros.has_value());

  st.queues[{"acme", "default"}].mutable_min_runtime()->set_seconds(600);
  st.flavors[s.flavors[1].name].mutable_restart_overhead()->set_seconds(90);
  st.flavors[s.flavors[0].name].mutable_restart_overhead();  // Set to 0.
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_TRUE(policy::ValidateSnapshot(s).ok()) << policy::ValidateSnapshot(s);
  EXPECT_EQ(s.queues[0].min_runtime, 600 * 1000000);
  EXPECT_EQ(s.flavors[1].restart_overhead_micros, 90 * 1000000);
  EXPECT_EQ(s.flavors[0].restart_overhead_micros, 0);
}

TEST(SnapshotBuilderTest, MapsPlatformObjectsToThePolicyModel) {
  PlatformState st = Platform();
  // Running: job 1 on n1 with 6 GPUs, checkpointed.
  JobView running = MakeJob(1, "default", v1::JOB_STATE_RUNNING, 6);
  v1::Attempt a;
  a.set_index(1);
  a.set_cluster("clusters/sim");
  a.set_flavor("flavors/h100");
  a.add_placements()->set_node("clusters/sim/nodes/n1");
  *a.mutable_start_time() =
      TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(kNow) - 600);
  running.attempt = a;
  running.last_checkpoint = kNow - absl::Seconds(120);
  running.job.mutable_spec()->mutable_time_limit()->set_seconds(3600);
  st.jobs[1] = running;
  JobView pending = MakeJob(2, "default", v1::JOB_STATE_QUEUED, 8, 2);
  pending.job.mutable_spec()->mutable_topology()->set_required_level(
      v1::TOPOLOGY_LEVEL_BLOCK);
  pending.job.mutable_spec()->mutable_checkpoint()->set_resumable(true);
  st.jobs[2] = pending;
  st.jobs[3] = MakeJob(3, "stopped", v1::JOB_STATE_QUEUED, 1);
  st.jobs[4] = MakeJob(4, "nowhere", v1::JOB_STATE_QUEUED, 1);
  st.jobs[5] = MakeJob(5, "default", v1::JOB_STATE_HELD, 1);

  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_TRUE(policy::ValidateSnapshot(s).ok()) << policy::ValidateSnapshot(s);

  EXPECT_EQ(s.now, absl::ToUnixMicros(kNow));
  ASSERT_EQ(s.flavors.size(), 2u);
  EXPECT_EQ(s.flavors[0].name, "h100");
  EXPECT_EQ(s.flavors[0].price_micros_per_gpu_hour, 2'500'000);
  EXPECT_EQ(s.flavors[1].kind, policy::FlavorKind::kSpot);
  EXPECT_DOUBLE_EQ(s.flavors[1].reclaim_rate_per_hour, 0.05);

  ASSERT_EQ(s.nodes.size(), 3u);
  EXPECT_EQ(index.node_names[0], "clusters/sim/nodes/n1");
  EXPECT_EQ(index.node_clusters[2], "sim");
  EXPECT_EQ(s.nodes[0].used.gpus, 6);
  EXPECT_EQ(s.nodes[1].used.gpus, 0);
  EXPECT_TRUE(s.nodes[0].schedulable);
  EXPECT_FALSE(s.nodes[2].schedulable);
  EXPECT_EQ(s.nodes[0].block, s.nodes[1].block);
  EXPECT_NE(s.nodes[0].rack, s.nodes[1].rack);
  EXPECT_EQ(s.nodes[1].rack, s.nodes[2].rack);
  EXPECT_EQ(s.gpu_model_names[s.nodes[0].gpu_model], "H100");

  ASSERT_EQ(s.queues.size(), 1u);  // "stopped" is left out
  EXPECT_EQ(index.queue_keys[0],
            (std::pair<std::string, std::string>{"acme", "default"}));
  ASSERT_TRUE(s.queues[0].cohort.has_value());
  ASSERT_EQ(s.queues[0].quotas.size(), 1u);
  const auto& gpu = s.queues[0].quotas[0].resources[0];
  ASSERT_TRUE(gpu.has_value());
  EXPECT_EQ(gpu->nominal, 16);
  EXPECT_EQ(gpu->borrowing_limit, 4);
  EXPECT_FALSE(gpu->lending_limit.has_value());
  EXPECT_EQ(s.queues[0].within_queue_preemption,
            policy::WithinQueuePreemption::kLowerPriority);

  ASSERT_EQ(s.running.size(), 1u);
  const policy::RunningAttempt& r = s.running[0];
  EXPECT_EQ(r.job, 1);
  EXPECT_EQ(r.placement, std::vector<policy::NodeId>{0});
  EXPECT_EQ(r.resources.gpus, 6);
  EXPECT_EQ(r.start_time, absl::ToUnixMicros(kNow) - 600'000'000);
  EXPECT_EQ(r.last_checkpoint_time, absl::ToUnixMicros(kNow) - 120'000'000);
  EXPECT_EQ(r.time_limit_micros, 3'600'000'000);

  ASSERT_EQ(s.pending.size(),
            1u);  // HELD, stopped and unknown queues are not pending
  const policy::PendingJob& p = s.pending[0];
  EXPECT_EQ(p.id, 2);
  EXPECT_EQ(p.workers, 2);
  EXPECT_EQ(p.worker.gpus, 8);
  EXPECT_EQ(p.required_topology, policy::TopologyLevel::kBlock);
  EXPECT_EQ(p.spot_policy,
            policy::SpotPolicy::kAllowed);  // resumable, unspecified
  EXPECT_TRUE(p.can_checkpoint);
  EXPECT_EQ(s.priority_classes[p.priority_class].value, 10);

  ASSERT_EQ(index.excluded.size(), 2u);
  EXPECT_EQ(index.excluded[0].first, 3);
  EXPECT_EQ(index.excluded[0].second.rfind("QUEUE_STOPPED: ", 0), 0u);
  EXPECT_EQ(index.excluded[1].first, 4);
  EXPECT_EQ(index.excluded[1].second.rfind("QUEUE_NOT_FOUND: ", 0), 0u);

  // 6 GPUs used of the queue's 16 nominal leave 10; the gang needs 16 and the
  // queue may borrow at most 4 more.
  const policy::Decisions d = policy::Decide(s);
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].reason, policy::PendingReason::kQuotaExhausted);
  EXPECT_EQ(d.pending[0].message.str(),
            "QUOTA_EXHAUSTED: queue acme/default gpu 6/16, cohort lends 0, job "
            "needs 16 (flavor h100): the queue's borrowing limit (4) binds");
  // One 8-GPU worker fits quota, and n2 (8 free GPUs) holds it; n3 is down.
  st.jobs[2].job.mutable_spec()->set_workers(1);
  BuildSnapshot(st, kNow, &s, &index);
  const policy::Decisions one = policy::Decide(s);
  ASSERT_EQ(one.admissions.size(), 1u);
  EXPECT_EQ(index.node_names[one.admissions[0].worker_nodes[0]],
            "clusters/sim/nodes/n2");
}

// Jobs share priority classes by (name, value, preemptible): the same name
// with another value, an unconfigured name, and a job being preempted each
// get their own class, and a class named in full is the same class; submit
// times to the microsecond.
TEST(SnapshotBuilderTest, PriorityClassesPerNameValueAndPreemptibility) {
  PlatformState st = Platform();
  JobView a = MakeJob(1, "default", v1::JOB_STATE_QUEUED, 1);
  a.job.mutable_spec()->set_priority_class("default");
  a.job.mutable_create_time()->set_nanos(123456789);
  JobView b = MakeJob(2, "default", v1::JOB_STATE_QUEUED, 1);
  b.job.mutable_spec()->set_priority_class("priorityClasses/default");
  JobView c = MakeJob(3, "default", v1::JOB_STATE_QUEUED, 1);
  c.job.mutable_spec()->set_priority_class("default");
  c.job.set_priority(7);
  JobView d = MakeJob(4, "default", v1::JOB_STATE_QUEUED, 1);
  d.job.mutable_spec()->set_priority_class("batch");
  d.job.set_priority(3);
  JobView e = MakeJob(5, "default", v1::JOB_STATE_PREEMPTING, 1);
  e.job.mutable_spec()->set_priority_class("default");
  v1::Attempt attempt;
  attempt.set_flavor("flavors/h100");
  attempt.add_placements()->set_node("clusters/sim/nodes/n1");
  e.attempt = attempt;
  JobView f = MakeJob(6, "default", v1::JOB_STATE_QUEUED, 1);
  f.job.mutable_spec()->set_priority_class("batch");
  f.job.set_priority(3);
  for (JobView* v : {&a, &b, &c, &d, &e, &f}) {
    const int64_t id = std::stoll(v->job.name().substr(18));
    st.jobs[id] = *v;
  }
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_TRUE(policy::ValidateSnapshot(s).ok()) << policy::ValidateSnapshot(s);
  ASSERT_EQ(s.pending.size(), 5u);
  ASSERT_EQ(s.running.size(), 1u);
  auto class_of = [&](policy::JobId id) -> const policy::PriorityClass& {
    for (const policy::PendingJob& p : s.pending)
      if (p.id == id) return s.priority_classes[p.priority_class];
    return s.priority_classes[s.running[0].priority_class];
  };
  EXPECT_EQ(class_of(1).name, "default");
  EXPECT_EQ(class_of(1).value, 10);
  EXPECT_TRUE(class_of(1).preemptible);
  EXPECT_EQ(&class_of(2), &class_of(1));  // The same class, by its full name.
  EXPECT_EQ(class_of(3).name, "default");
  EXPECT_EQ(class_of(3).value, 7);
  EXPECT_NE(&class_of(3), &class_of(1));
  EXPECT_EQ(class_of(4).name, "batch");  // Not configured: the job's value.
  EXPECT_EQ(class_of(4).value, 3);
  EXPECT_EQ(&class_of(6), &class_of(4));
  EXPECT_EQ(class_of(5).value, 10);
  EXPECT_FALSE(class_of(5).preemptible);
  EXPECT_EQ(s.pending[0].submit_time,
            (absl::ToUnixSeconds(kNow) - 60) * 1000000 + 123456);
}

TEST(SnapshotBuilderTest, PreemptingJobsAreNotPreemptibleAgain) {
  PlatformState st = Platform();
  JobView j = MakeJob(1, "default", v1::JOB_STATE_PREEMPTING, 8);
  v1::Attempt a;
  a.set_flavor("flavors/h100");
  a.add_placements()->set_node("clusters/sim/nodes/n1");
  j.attempt = a;
  st.jobs[1] = j;
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_EQ(s.running.size(), 1u);
  EXPECT_FALSE(s.priority_classes[s.running[0].priority_class].preemptible);
  EXPECT_EQ(s.priority_classes[s.running[0].priority_class].value, 10);
}

TEST(SnapshotBuilderTest, PreemptingJobsHoldTheirNodesButNoQuota) {
  PlatformState st = Platform();
  // A job being preempted on n1 and the preemptor admitted in its place.
  for (const auto& [id, state] : std::vector<std::pair<int64_t, v1::JobState>>{
           {1, v1::JOB_STATE_PREEMPTING}, {2, v1::JOB_STATE_ADMITTED}}) {
    JobView j = MakeJob(id, "default", state, 8);
    v1::Attempt a;
    a.set_flavor("flavors/h100");
    a.add_placements()->set_node("clusters/sim/nodes/n1");
    j.attempt = a;
    st.jobs[id] = j;
  }
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_EQ(s.running.size(), 2u);
  // Until the victim stops, the node holds both...
  policy::NodeId n1 = -1;
  for (size_t n = 0; n < index.node_names.size(); ++n) {
    if (index.node_names[n] == "clusters/sim/nodes/n1")
      n1 = static_cast<policy::NodeId>(n);
  }
  ASSERT_GE(n1, 0);
  EXPECT_EQ(s.nodes[n1].used.gpus, 16);
  // ...but the queue's quota counts the preemptor only.
  EXPECT_EQ(s.running[0].job, 1);
  EXPECT_EQ(s.running[0].resources.gpus, 0);
  EXPECT_EQ(s.running[1].job, 2);
  EXPECT_EQ(s.running[1].resources.gpus, 8);
  const policy::QuotaTree quota(s);
  EXPECT_EQ(quota.Usage(s.running[1].queue, s.running[1].flavor,
                        policy::Resource::kGpu),
            8);
}

TEST(SnapshotBuilderTest, ClustersKeepTheirOwnTopology) {
  PlatformState st = Platform();
  st.clusters["other"] = v1::Cluster();
  st.pools[{"other", "main"}] = st.pools[{"sim", "main"}];
  // Same block and rack names as n1 in cluster sim.
  st.nodes[{"other", "m1"}] = MakeNode("main", 8, "b1", "r1");
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_EQ(s.nodes.size(), 4u);
  EXPECT_EQ(index.node_names[0], "clusters/other/nodes/m1");
  EXPECT_NE(s.nodes[0].cluster, s.nodes[1].cluster);
  EXPECT_NE(s.nodes[0].block, s.nodes[1].block);
  EXPECT_NE(s.nodes[0].rack, s.nodes[1].rack);
  EXPECT_EQ(s.nodes[1].cluster, s.nodes[2].cluster);
}

// A node carries its cluster's backend, a flavor those of the clusters that
// offer it, and a job its backend preference; and
// the policy's NodeMatches() allows exactly the nodes the api's check at
// submit (domain::BackendMatches) counts, for every preference and kind.
TEST(SnapshotBuilderTest, NodesCarryTheirBackendAndJobsTheirPreference) {
  PlatformState st = Platform();
  st.clusters["sim"].set_backend(v1::BACKEND_KIND_SIM);
  st.clusters["k8s"].set_backend(v1::BACKEND_KIND_KUBERNETES);
  st.pools[{"k8s", "main"}] = st.pools[{"sim", "main"}];
  st.nodes[{"k8s", "k1"}] = MakeNode("main", 8, "b1", "r1");
  st.jobs[1] = MakeJob(1, "default", v1::JOB_STATE_QUEUED, 1);
  st.jobs[1].job.mutable_spec()->set_backend(v1::BACKEND_PREFERENCE_KUBERNETES);
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  ASSERT_EQ(index.node_names[0], "clusters/k8s/nodes/k1");
  EXPECT_EQ(s.nodes[0].backend, policy::Backend::kKubernetes);
  EXPECT_EQ(s.nodes[1].backend, policy::Backend::kSim);
  // h100 is offered by a pool of each cluster; h100-spot by none.
  ASSERT_EQ(s.flavors[0].name, "h100");
  EXPECT_EQ(s.flavors[0].backends,
            policy::BackendBit(policy::Backend::kSim) |
                policy::BackendBit(policy::Backend::kKubernetes));
  ASSERT_EQ(s.flavors[1].name, "h100-spot");
  EXPECT_EQ(s.flavors[1].backends, policy::kAnyBackend);
  ASSERT_EQ(s.pending.size(), 1u);
  EXPECT_TRUE(policy::NodeMatches(s.nodes[0], s.pending[0].worker));
  EXPECT_FALSE(policy::NodeMatches(s.nodes[1], s.pending[0].worker));

  EXPECT_EQ(BackendsOf(v1::BACKEND_PREFERENCE_UNSPECIFIED),
            policy::kAnyBackend);
  EXPECT_EQ(BackendsOf(v1::BACKEND_PREFERENCE_ANY), policy::kAnyBackend);
  EXPECT_EQ(BackendsOf(v1::BACKEND_PREFERENCE_SLURM),
            policy::BackendBit(policy::Backend::kSlurm));
  EXPECT_EQ(BackendsOf(v1::BACKEND_PREFERENCE_KUBERNETES),
            policy::BackendBit(policy::Backend::kKubernetes));
  EXPECT_EQ(BackendsOf(v1::BACKEND_PREFERENCE_SIM),
            policy::BackendBit(policy::Backend::kSim));
  for (int p = v1::BackendPreference_MIN; p <= v1::BackendPreference_MAX; ++p) {
    for (int k = v1::BackendKind_MIN; k <= v1::BackendKind_MAX; ++k) {
      const auto preference = static_cast<v1::BackendPreference>(p);
      const auto kind = static_cast<v1::BackendKind>(k);
      const policy::Node node{.backend = BackendOf(kind)};
      const policy::WorkerShape shape{.backends = BackendsOf(preference)};
      EXPECT_EQ(policy::NodeMatches(node, shape),
                domain::BackendMatches(preference, kind))
          << v1::BackendPreference_Name(preference) << " on "
          << v1::BackendKind_Name(kind);
    }
  }
}

TEST(SnapshotBuilderTest, UserErrorsWaitOutTheirRetryBackoff) {
  PlatformState st = Platform();
  JobView j = MakeJob(9, "default", v1::JOB_STATE_QUEUED, 1);
  j.job.set_attempt_count(3);  // attempts 1..3 ran; 3 failed: 4 * 10 s
  v1::Attempt a;
  a.set_index(3);
  a.set_failure_class(v1::FAILURE_CLASS_USER_ERROR);
  *a.mutable_end_time() =
      TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(kNow));
  j.attempt = a;
  std::optional<absl::Time> until = RetryNotBefore(j);
  ASSERT_TRUE(until.has_value());
  EXPECT_GE(*until, kNow + absl::Seconds(36));  // 40 s - 10 %
  EXPECT_LE(*until, kNow + absl::Seconds(44));  // 40 s + 10 %
  st.jobs[9] = j;
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow + absl::Seconds(30), &s, &index);
  EXPECT_TRUE(s.pending.empty());
  ASSERT_EQ(index.excluded.size(), 1u);
  EXPECT_EQ(index.excluded[0].second.rfind(
                "RETRY_BACKOFF: attempt 3 failed; retry 4 waits "
                "until ",
                0),
            0u)
      << index.excluded[0].second;
  BuildSnapshot(st, kNow + absl::Seconds(45), &s, &index);
  EXPECT_EQ(s.pending.size(), 1u);
  // The cap, and platform failures resume at once.
  j.job.mutable_spec()->mutable_retry()->mutable_max_backoff()->set_seconds(15);
  EXPECT_LE(*RetryNotBefore(j), kNow + absl::Seconds(17));
  j.attempt->set_failure_class(v1::FAILURE_CLASS_NODE_FAILURE);
  EXPECT_FALSE(RetryNotBefore(j).has_value());
}

TEST(SnapshotBuilderTest, CordonedClusterIsNotSchedulable) {
  PlatformState st = Platform();
  st.clusters["sim"].set_cordoned(true);
  policy::Snapshot s;
  SnapshotIndex index;
  BuildSnapshot(st, kNow, &s, &index);
  for (const policy::Node& n : s.nodes) EXPECT_FALSE(n.schedulable);
}

TEST(SnapshotBuilderTest, ClusterWhoseDispatcherIsGoneGetsNoNewWork) {
  const absl::Time wall = absl::FromUnixSeconds(1'900'000'000);
  const DispatcherLiveness liveness{.wall_now = wall,
                                    .timeout = absl::Minutes(2)};
  auto schedulable = [&](const PlatformState& st, const DispatcherLiveness& l) {
    policy::Snapshot s;
    SnapshotIndex index;
    BuildSnapshot(st, kNow, &s, &index, l);
    EXPECT_FALSE(s.nodes.empty());
    int n = 0;
    for (const policy::Node& node : s.nodes) n += node.schedulable;
    return n;
  };
  PlatformState st = Platform();
  const int all = schedulable(st, liveness);
  ASSERT_GT(all, 0);  // No heartbeat yet: not held back.
  auto beat = [&](absl::Duration ago) {
    *st.clusters["sim"].mutable_heartbeat_time() =
        google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
            absl::ToUnixMicros(wall - ago));
  };
  beat(absl::Seconds(30));
  EXPECT_EQ(schedulable(st, liveness), all);
  EXPECT_FALSE(DispatcherGone(st.clusters["sim"], liveness));
  beat(absl::Minutes(2) + absl::Seconds(1));
  EXPECT_TRUE(DispatcherGone(st.clusters["sim"], liveness));
  EXPECT_EQ(schedulable(st, liveness), 0);
  // No check without a wall clock, or with the timeout off.
  EXPECT_EQ(schedulable(st, DispatcherLiveness{}), all);
  EXPECT_EQ(
      schedulable(st, {.wall_now = wall, .timeout = absl::ZeroDuration()}),
      all);
  // A backend its dispatcher reports down gets no new work either.
  beat(absl::Seconds(1));
  st.clusters["sim"].set_health(v1::CLUSTER_HEALTH_UNHEALTHY);
  EXPECT_EQ(schedulable(st, liveness), 0);
  st.clusters["sim"].set_health(v1::CLUSTER_HEALTH_HEALTHY);
  EXPECT_EQ(schedulable(st, liveness), all);
}

TEST(SnapshotBuilderTest, SameStateSameSnapshot) {
  PlatformState st = Platform();
  st.jobs[2] = MakeJob(2, "default", v1::JOB_STATE_QUEUED, 8, 2);
  st.jobs[7] = MakeJob(7, "default", v1::JOB_STATE_QUEUED, 1);
  policy::Snapshot a, b;
  SnapshotIndex ia, ib;
  BuildSnapshot(st, kNow, &a, &ia);
  BuildSnapshot(st, kNow, &b, &ib);
  EXPECT_EQ(policy::Decide(a), policy::Decide(b));
  EXPECT_EQ(ia.node_names, ib.node_names);
}

}  // namespace
}  // namespace trainyard::scheduler
