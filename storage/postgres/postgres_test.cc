// Storage against a real PostgreSQL: migrations, generic objects, jobs with
// optimistic concurrency and the state machine, the outbox's ordering under
// concurrency, tokens.

#include <algorithm>
#include <atomic>
#include <pqxx/pqxx>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/postgres/auth_store.h"
#include "storage/postgres/dispatcher_store.h"
#include "storage/postgres/errors.h"
#include "storage/postgres/job_store.h"
#include "storage/postgres/migrate.h"
#include "storage/postgres/object_store.h"
#include "storage/postgres/pool.h"
#include "storage/postgres/scheduler_store.h"
#include "tests/fixtures/local_postgres.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/queue.pb.h"

namespace trainyard::storage::postgres {
namespace {

using trainyard::v1::JobState;

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto url = testing::SharedPostgres()->CreateDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    auto m = Migrate(url_);
    ASSERT_TRUE(m.ok()) << m.status();
    auto db = Database::Open({.url = url_, .pool_size = 8});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    objects_ = std::make_unique<ObjectStore>(db_.get());
    jobs_ = std::make_unique<JobStore>(db_.get());
    scheduler_ = std::make_unique<SchedulerStore>(db_.get());
    dispatcher_ = std::make_unique<DispatcherStore>(db_.get());
    auth_ = std::make_unique<AuthStore>(db_.get());
  }

  void SeedQueue(const std::string& tenant) {
    ASSERT_TRUE(objects_->Create(TenantKind(), {tenant}, {}, "", nullptr).ok());
    ASSERT_TRUE(
        objects_->Create(ProjectKind(), {tenant, "p"}, {}, "", nullptr).ok());
    ASSERT_TRUE(
        objects_
            ->Create(QueueKind(), {tenant, "q"}, {std::nullopt}, "", nullptr)
            .ok());
  }

  NewJob MakeJob(const std::string& tenant, const std::string& key) {
    NewJob n;
    n.tenant = tenant;
    n.client_request_id = key;
    n.request_hash = "h";
    n.job.mutable_spec()->set_queue("q");
    n.job.mutable_spec()->set_project("p");
    n.job.mutable_spec()->set_workers(1);
    n.job.set_creator("users/t");
    return n;
  }

  int64_t IdOf(const trainyard::v1::Job& job) {
    return std::stoll(job.name().substr(job.name().rfind('/') + 1));
  }

  std::string url_;
  std::unique_ptr<Database> db_;
  std::unique_ptr<ObjectStore> objects_;
  std::unique_ptr<JobStore> jobs_;
  std::unique_ptr<SchedulerStore> scheduler_;
  std::unique_ptr<DispatcherStore> dispatcher_;
  std::unique_ptr<AuthStore> auth_;
};

TEST_F(PostgresTest, MigrationsAreIdempotentAndConcurrentCallersSerialise) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::atomic<int> applied{0};
  auto fresh = testing::SharedPostgres()->CreateDatabase();
  ASSERT_TRUE(fresh.ok());
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto m = Migrate(*fresh);
      if (!m.ok())
        ++failures;
      else
        applied += static_cast<int>(m->applied.size());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(applied, static_cast<int>(EmbeddedMigrations().size()));
  auto again = Migrate(*fresh);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->applied.empty());
  EXPECT_EQ(again->current_version, EmbeddedMigrations().back().version);
}

// A service that starts while its database is down (crashed, restarting)
// waits for it: MigrateWhenReachable tries again until the server is back, and
// gives up with UNAVAILABLE once its wait has passed.
TEST(MigrateWhenReachableTest,
     WaitsForARestartingDatabaseAndGivesUpAfterItsWait) {
  auto pg = testing::LocalPostgres::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  auto url = (*pg)->CreateDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  ASSERT_TRUE((*pg)->Crash().ok());

  int retries = 0;
  const absl::Time start = absl::Now();
  auto down = MigrateWhenReachable(*url, absl::Milliseconds(700),
                                   [&](const absl::Status&) { ++retries; });
  EXPECT_TRUE(absl::IsUnavailable(down.status())) << down.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_GE(retries, 2);
  auto once = MigrateWhenReachable(*url, absl::ZeroDuration());
  EXPECT_TRUE(absl::IsUnavailable(once.status())) << once.status();

  std::thread restarter([&] {
    absl::SleepFor(absl::Seconds(1));
    ASSERT_TRUE((*pg)->Restart().ok());
  });
  retries = 0;
  auto back = MigrateWhenReachable(*url, absl::Seconds(60),
                                   [&](const absl::Status&) { ++retries; });
  restarter.join();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_GE(retries, 1);
  EXPECT_EQ(back->current_version, EmbeddedMigrations().back().version);
}

// Migration 0007 over a ledger written before it: each line's list cost (a
// spot GPU line not priced from the rate: at the GPU rate in force at its
// start, half to even), each attempt's first line, and the rollups.
TEST(MigrationTest, RollupsMigrationFillsListCostAttemptStartsAndRollups) {
  auto url = testing::SharedPostgres()->CreateDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  std::vector<Migration> before;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version < 7) before.push_back(m);
  }
  ASSERT_TRUE(Migrate(*url, before).ok());
  constexpr int64_t kH = 3'600'000;
  const int64_t h0 = 1'793'491'200'000;  // 2026-11-01T00:00:00Z
  {
    pqxx::connection conn(*url);
    pqxx::work txn(conn);
    // The spot flavor's GPU list rate: 900 micros per GPU-hour from h0.
    txn.exec_params(
        "INSERT INTO price_rates (flavor, resource, effective_ms, "
        "price_micros) VALUES ('s', 0, $1, 900)",
        h0);
    // job, attempt, resource, start, end, spot, price_source, cost.
    auto line = [&](int64_t job, int attempt, int resource, int64_t start,
                    int64_t end, bool spot, int source, int64_t cost) {
      txn.exec_params(
          "INSERT INTO usage_lines VALUES ($1, $2, $3, $4::bigint, $5, "
          "$4::bigint - $4::bigint % "
          "3600000, 't', 'p', 'q', 'u', 'c', 's', $6, 1, 1, $7, false, $8, "
          "false, $8, 0, false)",
          job, attempt, resource, start, end, spot, source, cost);
    };
    // 900 × 6,000 GPU-ms = 1.5 micro-units at list: a half, rounded to 2.
    line(1, 0, 0, h0, h0 + 6000, true, 1, 7);
    // 900 × 2,000 = 0.5: a half, rounded to 0.
    line(1, 0, 0, h0 + 6000, h0 + 8000, true, 1, 7);
    // Priced from the rate: list = cost.
    line(1, 0, 0, h0 + kH, h0 + kH + 6000, true, 0, 11);
    line(1, 0, 1, h0, h0 + 8000, true, 0, 13);
    // Before the rate: list = cost. No GPU: the CPU line starts the attempt.
    line(2, 1, 1, h0 - kH, h0 - kH + 60'000, true, 1, 17);
    line(2, 1, 2, h0 - kH, h0 - kH + 60'000, true, 1, 19);
    txn.commit();
  }
  std::vector<Migration> upto7 = before;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version == 7) upto7.push_back(m);
  }
  auto m = Migrate(*url, upto7);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->applied, std::vector<int>{7});
  pqxx::connection conn(*url);
  pqxx::work txn(conn);
  std::vector<std::string> got;
  for (const pqxx::row& r :
       txn.exec("SELECT job_id || '/' || resource || '/' || (start_ms - " +
                std::to_string(h0) +
                ") || ' ' || list_cost_micros || ' ' || attempt_start FROM "
                "usage_lines ORDER BY job_id, resource, start_ms")) {
    got.push_back(r[0].as<std::string>());
  }
  EXPECT_THAT(got, ::testing::ElementsAre(
                       "1/0/0 2 true", "1/0/6000 0 false",
                       "1/0/3600000 11 false", "1/1/0 13 false",
                       "2/1/-3600000 17 true", "2/2/-3600000 19 false"));
  // Hour, day and month rollups, each summing every line once.
  for (int g = 0; g < 3; ++g) {
    pqxx::row r = txn.exec_params1(
        "SELECT sum(lines)::bigint, sum(cost_micros)::bigint, "
        "sum(list_cost_micros)::bigint, sum(attempts)::bigint, "
        "sum(quantity)::bigint FROM usage_rollups WHERE granularity = $1",
        g);
    EXPECT_EQ(r[0].as<int64_t>(), 6) << g;
    EXPECT_EQ(r[1].as<int64_t>(), 7 + 7 + 11 + 13 + 17 + 19) << g;
    EXPECT_EQ(r[2].as<int64_t>(), 2 + 0 + 11 + 13 + 17 + 19) << g;
    EXPECT_EQ(r[3].as<int64_t>(), 2) << g;
    EXPECT_EQ(r[4].as<int64_t>(), 6000 + 2000 + 6000 + 8000 + 60'000 + 60'000)
        << g;
  }
  // The October line and the November ones are in different months.
  EXPECT_EQ(txn.exec1("SELECT count(*) FROM usage_rollups WHERE granularity "
                      "= 2 AND resource = 1")[0]
                .as<int>(),
            2);
}

// Migration 0008 over nodes written before it: each node's capacity read
// from its body (a serialized trainyard.v1.Node with every kind of field
// around the capacity), summed per flavor into an open interval from the
// migration on; the trigger then moves it.
TEST(MigrationTest, IdleMigrationReadsTheCapacityOfTheNodesThere) {
  auto url = testing::SharedPostgres()->CreateDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  std::vector<Migration> before;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version < 8) before.push_back(m);
  }
  ASSERT_TRUE(Migrate(*url, before).ok());
  auto body = [](int gpus, int64_t cpu, int64_t memory) {
    trainyard::v1::Node node;
    node.set_name("clusters/c/nodes/x");
    node.set_pool("p");
    node.mutable_capacity()->set_gpus(gpus);
    node.mutable_capacity()->set_gpu_model("H100");
    node.mutable_capacity()->set_cpu_millis(cpu);
    node.mutable_capacity()->set_memory_bytes(memory);
    node.mutable_topology()->set_rack("r1");
    (*node.mutable_labels())["zone"] = "a";
    node.set_state(trainyard::v1::NODE_STATE_DRAINING);
    node.set_state_message("maintenance");
    node.mutable_report_time()->set_seconds(1'793'491'200);
    node.mutable_report_time()->set_nanos(5);
    std::string out;
    node.SerializeToString(&out);
    return out;
  };
  const int64_t big = int64_t{3} << 40;  // 3 TiB: a 6-byte varint
  {
    pqxx::connection conn(*url);
    pqxx::work txn(conn);
    txn.exec(
        "INSERT INTO flavors (id, body) VALUES ('f', ''), ('g', ''); INSERT "
        "INTO clusters (id, body) VALUES ('c', ''); INSERT INTO pools "
        "(cluster, id, flavor, body) VALUES ('c', 'p', 'f', ''), ('c', 'q', "
        "'g', '')");
    auto node = [&](const char* id, const char* pool, const std::string& b) {
      txn.exec_params(
          "INSERT INTO nodes (cluster, id, pool, state, body) VALUES ('c', "
          "$1, $2, 1, $3)",
          id, pool, pqxx::binarystring(b));
    };
    node("n1", "p", body(8, 64'000, big));
    node("n2", "p", body(0, 300, 1));
    node("n3", "q", body(4, 0, 0));
    txn.commit();
  }
  auto m = Migrate(*url);
  ASSERT_TRUE(m.ok()) << m.status();
  // 0008 applied over the nodes already there (and any later migrations).
  EXPECT_NE(std::find(m->applied.begin(), m->applied.end(), 8),
            m->applied.end());
  pqxx::connection conn(*url);
  pqxx::work txn(conn);
  std::vector<std::string> got;
  for (const pqxx::row& r : txn.exec(
           "SELECT flavor || ' ' || (start_ms = (SELECT computed_until_ms "
           "FROM idle_state)) || ' ' || coalesce(end_ms::text, 'open') || ' ' "
           "|| nodes || ' ' || gpus || ' ' || cpu_millis || ' ' || "
           "memory_bytes FROM pool_capacity ORDER BY flavor, start_ms")) {
    got.push_back(r[0].as<std::string>());
  }
  EXPECT_THAT(got, ::testing::ElementsAre(
                       absl::StrCat("f true open 2 8 64300 ", big + 1),
                       "g true open 1 4 0 0"));
  // Removing n1 later closes f's interval and opens one without it.
  txn.exec("SET LOCAL trainyard.capacity_change_ms = '9000000000000'");
  txn.exec("DELETE FROM nodes WHERE id = 'n1'");
  got.clear();
  for (const pqxx::row& r : txn.exec(
           "SELECT coalesce(end_ms::text, 'open') || ' ' || nodes || ' ' || "
           "gpus || ' ' || cpu_millis || ' ' || memory_bytes FROM "
           "pool_capacity WHERE flavor = 'f' ORDER BY start_ms")) {
    got.push_back(r[0].as<std::string>());
  }
  EXPECT_THAT(got, ::testing::ElementsAre(
                       absl::StrCat("9000000000000 2 8 64300 ", big + 1),
                       "open 1 0 300 1"));
}

TEST_F(PostgresTest, RefusesASchemaNewerThanTheBinary) {
  std::vector<Migration> older = {EmbeddedMigrations().front()};
  older.front().version = 0;  // knows nothing beyond version 0
  auto m = Migrate(url_, older);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(PostgresTest, ObjectCrudWithVersionsAndForeignKeys) {
  trainyard::v1::Tenant t;
  t.set_display_name("Acme");
  auto created = objects_->Create(TenantKind(), {"acme"}, {},
                                  t.SerializeAsString(), nullptr);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->version, 1);
  EXPECT_EQ(
      objects_->Create(TenantKind(), {"acme"}, {}, "", nullptr).status().code(),
      absl::StatusCode::kAlreadyExists);

  auto updated = objects_->Update(
      TenantKind(), {"acme"}, 1,
      [](const StoredObject& cur) -> absl::StatusOr<ObjectStore::Mutation> {
        trainyard::v1::Tenant t;
        t.ParseFromString(cur.body);
        t.set_display_name("Acme Corp");
        return ObjectStore::Mutation{t.SerializeAsString(), {}};
      },
      nullptr);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->version, 2);
  // A writer holding version 1 lost the race.
  auto stale = objects_->Update(
      TenantKind(), {"acme"}, 1,
      [](const StoredObject& cur) -> absl::StatusOr<ObjectStore::Mutation> {
        return ObjectStore::Mutation{cur.body, {}};
      },
      nullptr);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);

  // A queue in a missing cohort is refused, naming the constraint.
  auto orphan =
      objects_->Create(QueueKind(), {"acme", "q"}, {"nope"}, "", nullptr);
  EXPECT_EQ(orphan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ViolatedConstraint(orphan.status()), "queues_cohort_fkey");

  ASSERT_TRUE(
      objects_->Create(QueueKind(), {"acme", "q"}, {std::nullopt}, "", nullptr)
          .ok());
  // A tenant with queues cannot be deleted.
  EXPECT_EQ(objects_->Delete(TenantKind(), {"acme"}, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(objects_->Get(QueueKind(), {"acme", "zz"}).status().code(),
            absl::StatusCode::kNotFound);

  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(objects_
                    ->Create(QueueKind(), {"acme", absl::StrCat("x", i)},
                             {std::nullopt}, "", nullptr)
                    .ok());
  }
  ListQuery q;
  q.equals = {{"tenant", "acme"}};
  q.limit = 4;
  auto page1 = objects_->List(QueueKind(), q);
  ASSERT_TRUE(page1.ok());
  EXPECT_EQ(page1->objects.size(), 4u);
  EXPECT_TRUE(page1->more);
  q.after_key = page1->objects.back().key;
  auto page2 = objects_->List(QueueKind(), q);
  ASSERT_TRUE(page2.ok());
  EXPECT_EQ(page2->objects.size(), 2u);
  EXPECT_FALSE(page2->more);
}

TEST_F(PostgresTest, FingerprintChangesWithEveryWriteAndOnlyThen) {
  const std::vector<const ObjectKind*> kinds = {&TenantKind(), &CohortKind()};
  auto fingerprint = [&] {
    absl::StatusOr<std::string> f = objects_->Fingerprint(kinds);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *f : std::string();
  };
  const std::string empty = fingerprint();
  EXPECT_EQ(fingerprint(), empty);
  ASSERT_TRUE(objects_->Create(TenantKind(), {"acme"}, {}, "", nullptr).ok());
  const std::string created = fingerprint();
  EXPECT_NE(created, empty);
  EXPECT_EQ(fingerprint(), created);
  // An update (same row count) and a write to the second table.
  ASSERT_TRUE(objects_
                  ->Update(
                      TenantKind(), {"acme"}, 0,
                      [](const StoredObject& cur)
                          -> absl::StatusOr<ObjectStore::Mutation> {
                        return ObjectStore::Mutation{cur.body + "x", {}};
                      },
                      nullptr)
                  .ok());
  const std::string updated = fingerprint();
  EXPECT_NE(updated, created);
  ASSERT_TRUE(
      objects_->Create(CohortKind(), {"c"}, {std::nullopt}, "", nullptr).ok());
  const std::string cohort = fingerprint();
  EXPECT_NE(cohort, updated);
  ASSERT_TRUE(objects_->Delete(CohortKind(), {"c"}, nullptr).ok());
  EXPECT_NE(fingerprint(), cohort);
  EXPECT_EQ(fingerprint(), updated);
}

TEST_F(PostgresTest, FingerprintsChangeOnlyForTheTableWritten) {
  const std::vector<const ObjectKind*> kinds = {&TenantKind(), &CohortKind()};
  auto fingerprints = [&] {
    absl::StatusOr<std::vector<std::string>> f = objects_->Fingerprints(kinds);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *f : std::vector<std::string>();
  };
  const std::vector<std::string> empty = fingerprints();
  ASSERT_EQ(empty.size(), 2u);
  EXPECT_EQ(fingerprints(), empty);
  ASSERT_TRUE(objects_->Create(TenantKind(), {"acme"}, {}, "", nullptr).ok());
  const std::vector<std::string> tenant = fingerprints();
  EXPECT_NE(tenant[0], empty[0]);
  EXPECT_EQ(tenant[1], empty[1]);
  ASSERT_TRUE(
      objects_->Create(CohortKind(), {"c"}, {std::nullopt}, "", nullptr).ok());
  const std::vector<std::string> cohort = fingerprints();
  EXPECT_EQ(cohort[0], tenant[0]);
  EXPECT_NE(cohort[1], tenant[1]);
  EXPECT_EQ(fingerprints(), cohort);
}

TEST_F(PostgresTest, AuditRowCommitsWithTheChangeOnly) {
  AuditRecord audit{"users/root", "/x/Create", "tenants/a", "", "{}", "OK"};
  ASSERT_TRUE(objects_->Create(TenantKind(), {"a"}, {}, "", &audit).ok());
  // The failed duplicate writes no audit row in its (rolled back) transaction.
  EXPECT_FALSE(objects_->Create(TenantKind(), {"a"}, {}, "", &audit).ok());
  bool more = false;
  auto entries =
      auth_->ListAudit("", "", std::nullopt, std::nullopt, 0, 10, &more);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].resource(), "tenants/a");
}

TEST_F(PostgresTest, SubmitManyIsIdempotentAndWritesOneEventPerJob) {
  SeedQueue("t");
  std::vector<NewJob> batch = {MakeJob("t", "a"), MakeJob("t", "b"),
                               MakeJob("t", "a")};
  auto out = jobs_->SubmitMany(batch, false);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_FALSE((*out)[0].deduplicated);
  EXPECT_TRUE((*out)[2].deduplicated);
  EXPECT_EQ((*out)[0].job.name(), (*out)[2].job.name());
  auto again = jobs_->SubmitMany({MakeJob("t", "a")}, false);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)[0].deduplicated);
  EXPECT_EQ((*again)[0].job.name(), (*out)[0].job.name());
  NewJob changed = MakeJob("t", "a");
  changed.request_hash = "other";
  auto refused = jobs_->SubmitMany({changed}, false);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ((*refused)[0].status.code(), absl::StatusCode::kAlreadyExists);
  auto events = jobs_->ReadEvents(0, {}, 100);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 2u);
}

// A batch statement prepared while the jobs table was tiny must not stay a
// sequential scan once the table has grown: on a fresh database the
// scheduler's and dispatcher's lookups of job rows by an array of ids were
// planned once as sequential scans (the generic plan PostgreSQL settles on
// after five executions) and read every job row on each call.
TEST_F(PostgresTest, BatchLookupsUseTheIndexAfterTheTableGrows) {
  SeedQueue("t");
  auto first = jobs_->SubmitMany({MakeJob("t", "seed")}, false);
  ASSERT_TRUE(first.ok()) << first.status();
  const int64_t id = IdOf((*first)[0].job);
  // One connection, planned as the scheduler and the dispatchers plan: the
  // statement's cached plan is the one examined below.
  auto one =
      Database::Open({.url = url_, .pool_size = 1, .custom_plans = true});
  ASSERT_TRUE(one.ok()) << one.status();
  SchedulerStore store(one->get());
  // JobSaves' statement (every batch of state changes), with the seed job's
  // own state: the job is queued (1) with no attempts. Executed through
  // libpqxx first (which prepares it on the connection), then explained.
  const std::string args = absl::StrCat("'{", id,
                                        "}', '{1}', '{QUEUED}', '{x}', '{0}', "
                                        "'{\"\"}', '{f}', '{f}'");
  for (int i = 0; i < 10; ++i) {
    absl::Status s = (*one)->Transact([&](pqxx::work& txn) {
      EXPECT_EQ(
          txn.exec_prepared("jobs_save_many", absl::StrCat("{", id, "}"), "{1}",
                            "{QUEUED}", "{x}", "{0}", "{\"\"}", "{f}", "{f}")
              .size(),
          1u);
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_TRUE(db_->Transact([&](pqxx::work& txn) {
                   txn.exec0(absl::StrCat(
                       "INSERT INTO jobs (id, tenant, queue, project, state, "
                       "priority, client_request_id, request_hash, creator, "
                       "spec) SELECT g, tenant, queue, project, state, "
                       "priority, 'bulk-' || g, request_hash, creator, spec "
                       "FROM jobs, generate_series(",
                       id + 1, ", ", id + 20000,
                       ") AS g WHERE jobs.id = ", id));
                   return absl::OkStatus();
                 })
                  .ok());
  std::string plan;
  ASSERT_TRUE((*one)
                  ->Transact([&](pqxx::work& txn) {
                    for (const pqxx::row& r : txn.exec(
                             "EXPLAIN EXECUTE jobs_save_many(" + args + ")")) {
                      plan += r[0].c_str();
                      plan += "\n";
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_THAT(plan, ::testing::HasSubstr("Index Scan"));
  EXPECT_THAT(plan, ::testing::Not(::testing::HasSubstr("Seq Scan")));
}

TEST_F(PostgresTest, UnknownQueueFailsTheBatchWithoutWritingAnything) {
  SeedQueue("t");
  NewJob bad = MakeJob("t", "x");
  bad.job.mutable_spec()->set_queue("missing");
  auto out = jobs_->SubmitMany({MakeJob("t", "ok"), bad}, true);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  auto events = jobs_->ReadEvents(0, {}, 100);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
  JobQuery q;
  q.tenants = {"t"};
  auto page = jobs_->List(q);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->jobs.empty());
}

TEST_F(PostgresTest, TransitionsFollowTheStateMachineAndVersions) {
  SeedQueue("t");
  auto out = jobs_->SubmitMany({MakeJob("t", "a")}, false);
  ASSERT_TRUE(out.ok());
  const int64_t id = IdOf((*out)[0].job);
  auto admitted = jobs_->Transition(
      "t", id, 1, trainyard::v1::JOB_STATE_ADMITTED, "ADMITTED", "");
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->version(), 2);
  // Stale version: dropped, not applied twice.
  EXPECT_EQ(
      jobs_->Transition("t", id, 1, trainyard::v1::JOB_STATE_QUEUED, "X", "")
          .status()
          .code(),
      absl::StatusCode::kAborted);
  // Forbidden transition.
  EXPECT_EQ(
      jobs_->Transition("t", id, 2, trainyard::v1::JOB_STATE_SUCCEEDED, "X", "")
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(jobs_
                  ->Transition("t", id, 2, trainyard::v1::JOB_STATE_DISPATCHING,
                               "D", "")
                  .ok());
  ASSERT_TRUE(
      jobs_->Transition("t", id, 3, trainyard::v1::JOB_STATE_RUNNING, "R", "")
          .ok());
  // Cancelling a running job asks for a stop; it does not end it.
  auto cancelled = jobs_->Cancel("t", id, "", "users/x");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), trainyard::v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(cancelled->cancel_requested());
  auto done = jobs_->Transition("t", id, 0, trainyard::v1::JOB_STATE_CANCELLED,
                                "STOPPED", "");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), trainyard::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(
      jobs_->Transition("t", id, 0, trainyard::v1::JOB_STATE_QUEUED, "X", "")
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  auto events = jobs_->ReadEvents(0, {.job_id = id}, 100);
  ASSERT_TRUE(events.ok());
  std::vector<JobState> to;
  for (const auto& e : *events) to.push_back(e.to_state());
  EXPECT_THAT(to, ::testing::ElementsAre(trainyard::v1::JOB_STATE_QUEUED,
                                         trainyard::v1::JOB_STATE_ADMITTED,
                                         trainyard::v1::JOB_STATE_DISPATCHING,
                                         trainyard::v1::JOB_STATE_RUNNING,
                                         trainyard::v1::JOB_STATE_RUNNING,
                                         trainyard::v1::JOB_STATE_CANCELLED));
}

// ChangeAttempts: one transaction, each change checked on its own; a refused
// change skips the later changes of its job and leaves the others applied.
TEST_F(PostgresTest, ChangeAttemptsAppliesEachChangeOnItsOwn) {
  SeedQueue("t");
  auto out = jobs_->SubmitMany(
      {MakeJob("t", "a"), MakeJob("t", "b"), MakeJob("t", "c")}, false);
  ASSERT_TRUE(out.ok());
  std::vector<int64_t> ids;
  std::vector<AdmitDecision> admissions;
  for (const SubmitOutcome& o : *out) {
    ids.push_back(IdOf(o.job));
    AdmitDecision a{.tenant = "t", .job_id = ids.back(), .expected_version = 1};
    a.attempt.set_cluster("clusters/c");
    a.attempt.set_flavor("flavors/f");
    admissions.push_back(a);
  }
  auto admitted = scheduler_->ApplyDecisions({}, admissions);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_EQ(admitted->admitted.size(), 3u);
  const int64_t a = ids[0], b = ids[1], c = ids[2];
  auto change = [](int64_t id, int64_t version, JobState to) {
    return AttemptChange{.tenant = "t",
                         .job_id = id,
                         .expected_version = version,
                         .to = to,
                         .reason = "R",
                         .message = "m"};
  };
  auto results = dispatcher_->ChangeAttempts(
      {change(a, 2, trainyard::v1::JOB_STATE_DISPATCHING),
       change(b, 1, trainyard::v1::JOB_STATE_DISPATCHING),  // stale
       change(b, 0, trainyard::v1::JOB_STATE_DISPATCHING),  // follows it
       change(c, 2, trainyard::v1::JOB_STATE_RUNNING),      // forbidden
       change(a, 0, trainyard::v1::JOB_STATE_RUNNING)});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 5u);
  EXPECT_TRUE((*results)[0].ok());
  EXPECT_EQ((*results)[1].status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*results)[2].status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*results)[3].status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*results)[4].ok()) << (*results)[4].status();
  EXPECT_EQ((*results)[4]->state(), trainyard::v1::JOB_STATE_RUNNING);
  EXPECT_EQ((*results)[4]->version(), 4);
  auto job_b = jobs_->Get("t", b, false);
  ASSERT_TRUE(job_b.ok());
  EXPECT_EQ(job_b->state(), trainyard::v1::JOB_STATE_ADMITTED);
  EXPECT_EQ(job_b->version(), 2);
  // a's two changes are two events in order; b and c got none.
  auto events = jobs_->ReadEvents(0, {}, 100);
  ASSERT_TRUE(events.ok());
  std::vector<std::pair<std::string, JobState>> changed;
  for (const auto& e : *events) {
    if (e.type() == trainyard::v1::JOB_EVENT_TYPE_STATE_CHANGED &&
        e.from_state() != trainyard::v1::JOB_STATE_QUEUED) {
      changed.emplace_back(e.job(), e.to_state());
    }
  }
  const std::string name_a = absl::StrCat("tenants/t/jobs/", a);
  EXPECT_THAT(changed,
              ::testing::ElementsAre(
                  ::testing::Pair(name_a, trainyard::v1::JOB_STATE_DISPATCHING),
                  ::testing::Pair(name_a, trainyard::v1::JOB_STATE_RUNNING)));
}

// Sequence order must equal commit order: a reader that has seen seq N never
// later finds a committed event below N. Readers poll while writers commit
// concurrently.
TEST_F(PostgresTest, OutboxSequenceNeverGoesBackwardsUnderConcurrentWriters) {
  SeedQueue("t");
  std::atomic<bool> stop{false};
  std::atomic<int> violations{0};
  std::thread reader([&] {
    uint64_t seen_max = 0;
    std::set<uint64_t> seen;
    while (!stop) {
      auto events = jobs_->ReadEvents(0, {}, 100000);
      if (!events.ok()) continue;
      for (const auto& e : *events) {
        if (!seen.contains(e.sequence()) && e.sequence() < seen_max)
          ++violations;
      }
      for (const auto& e : *events) {
        seen.insert(e.sequence());
        seen_max = std::max(seen_max, e.sequence());
      }
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 6; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 30; ++i) {
        auto r =
            jobs_->SubmitMany({MakeJob("t", absl::StrCat(w, "-", i))}, false);
        EXPECT_TRUE(r.ok());
      }
    });
  }
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(violations, 0);
  auto all = jobs_->ReadEvents(0, {}, 100000);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 180u);
}

// The append's one statement takes the outbox lock before it draws a
// sequence number: a writer waiting for the lock has drawn none, so a number
// drawn under the lock is never below one committed after it.
TEST_F(PostgresTest, OutboxAppendDrawsNoSequenceBeforeItHoldsTheLock) {
  SeedQueue("t");
  ASSERT_TRUE(jobs_->SubmitMany({MakeJob("t", "first")}, false).ok());
  pqxx::connection holder(url_);
  pqxx::work hold(holder);
  hold.exec("SELECT pg_advisory_xact_lock(" +
            std::to_string(0x74796f7574626f78) + ")");
  pqxx::connection observer(url_);
  auto last_value = [&] {
    pqxx::nontransaction n(observer);
    return n.exec1("SELECT last_value FROM job_event_seq")[0].as<int64_t>();
  };
  const int64_t before = last_value();
  std::thread writer([&] {
    EXPECT_TRUE(jobs_->SubmitMany({MakeJob("t", "second")}, false).ok());
  });
  // Until the writer waits for the advisory lock.
  bool waiting = false;
  for (int i = 0; i < 500 && !waiting; ++i) {
    pqxx::nontransaction n(observer);
    waiting = n.exec1(
                   "SELECT count(*) FROM pg_locks WHERE locktype = "
                   "'advisory' AND NOT granted")[0]
                  .as<int>() > 0;
    if (!waiting) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(waiting);
  EXPECT_EQ(last_value(), before);
  hold.commit();
  writer.join();
  EXPECT_EQ(last_value(), before + 1);
  auto all = jobs_->ReadEvents(0, {}, 100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_LT((*all)[0].sequence(), (*all)[1].sequence());
}

TEST_F(PostgresTest, TokensAndRoleBindings) {
  auto token = auth_->CreateToken("t1", "users/a", "hash", "desc", "users/root",
                                  absl::Now() + absl::Hours(1), nullptr);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->name(), "apiTokens/t1");
  auto got = auth_->GetToken("t1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->secret_hash, "hash");
  EXPECT_FALSE(got->token.has_revoke_time());
  ASSERT_TRUE(auth_->RevokeToken("t1", nullptr).ok());
  EXPECT_TRUE(auth_->GetToken("t1")->token.has_revoke_time());

  ASSERT_TRUE(objects_->Create(TenantKind(), {"acme"}, {}, "", nullptr).ok());
  trainyard::v1::RoleBinding b;
  b.set_principal("users/a");
  b.set_role(trainyard::v1::ROLE_MEMBER);
  b.set_tenant("acme");
  ASSERT_TRUE(auth_->CreateRoleBinding(b, "users/root", nullptr).ok());
  EXPECT_EQ(auth_->CreateRoleBinding(b, "users/root", nullptr).status().code(),
            absl::StatusCode::kAlreadyExists);
  b.set_tenant("ghost");
  EXPECT_EQ(auth_->CreateRoleBinding(b, "users/root", nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto bindings = auth_->BindingsOf("users/a");
  ASSERT_TRUE(bindings.ok());
  ASSERT_EQ(bindings->size(), 1u);
  EXPECT_EQ((*bindings)[0].tenant(), "acme");
}

}  // namespace
}  // namespace trainyard::storage::postgres
