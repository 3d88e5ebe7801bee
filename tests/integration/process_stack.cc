#include "tests/integration/process_stack.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "tests/fixtures/ports.h"
#include "tests/fixtures/subprocess.h"

namespace trainyard::testing {

namespace fx = ::trainyard::testing::internal;

int EnvInt(const char* name, int fallback) {
  const char* env = std::getenv(name);
  int n = fallback;
  if (env == nullptr || !absl::SimpleAtoi(env, &n)) return fallback;
  return n;
}

std::string SourceDir() {
  const char* env = std::getenv("TRAINYARD_SOURCE_DIR");
  return env == nullptr ? "." : env;
}

bool Terminal(int state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

ProcessStack::~ProcessStack() {
  for (auto& s : services_) s->Kill();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void ProcessStack::SetUp(LocalPostgres* pg, LocalRedis* redis,
                         const std::string& prefix) {
  ASSERT_FALSE(TrainyardBinary().empty())
      << "TRAINYARD_BIN is not set (run through ctest)";
  redis_ = redis;
  absl::StatusOr<std::string> dir = fx::MakeTempDir(prefix);
  ASSERT_TRUE(dir.ok()) << dir.status();
  dir_ = *dir;
  absl::StatusOr<std::string> url = pg->CreateDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  db_url_ = *url;
  absl::StatusOr<int> api_port = PickUnusedPort();
  ASSERT_TRUE(api_port.ok()) << api_port.status();
  api_addr_ = absl::StrCat("127.0.0.1:", *api_port);
  // The docs' order: `trainyard migrate`, then the services.
  CommandResult migrated = Run({"migrate", "--postgres_url=" + db_url_});
  ASSERT_EQ(migrated.exit_code, 0) << migrated.output;
  admin_ = Token("users/admin", "platform-admin");
  ASSERT_FALSE(admin_.empty());
}

CommandResult ProcessStack::Run(const std::vector<std::string>& args) {
  return RunTrainyard(args, absl::StrCat(dir_, "/run-", ++runs_, ".log"));
}

std::string ProcessStack::Token(const std::string& principal,
                                const std::string& role,
                                const std::string& tenant) {
  absl::StatusOr<std::string> token =
      CreateToken(db_url_, absl::StrCat(dir_, "/token-", ++runs_, ".log"),
                  principal, role, tenant);
  EXPECT_TRUE(token.ok()) << token.status();
  return token.value_or("");
}

std::vector<std::string> ProcessStack::Argv(
    std::vector<std::string> head) const {
  head.insert(head.begin(), TrainyardBinary());
  for (const std::string& flag :
       {"--postgres_url=" + db_url_, "--redis_addr=" + redis_->Address(),
        std::string("--http_listen="), std::string("--log_level=warning")}) {
    head.push_back(flag);
  }
  return head;
}

TrainyardService* ProcessStack::AddService(const std::string& name,
                                           std::vector<std::string> argv) {
  services_.push_back(std::make_unique<TrainyardService>(
      name, std::move(argv), absl::StrCat(dir_, "/", name, ".log")));
  return services_.back().get();
}

void ProcessStack::Apply(const std::string& file, TrainyardService* api) {
  CommandResult applied;
  for (absl::Time deadline = absl::Now() + absl::Seconds(60);
       absl::Now() < deadline;) {
    applied = Run(
        {"apply", "-f", file, "--target=" + api_addr_, "--token=" + admin_});
    if (applied.exit_code == 0) return;
    std::optional<std::string> died = api->Died();
    ASSERT_FALSE(died.has_value()) << *died;
    absl::SleepFor(absl::Milliseconds(200));
  }
  FAIL() << "apply -f " << file << ": " << applied.output;
}

std::unique_ptr<v1::JobService::Stub> ProcessStack::Jobs() const {
  return v1::JobService::NewStub(
      grpc::CreateChannel(api_addr_, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> ProcessStack::Context(
    const std::string& token) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return ctx;
}

v1::Job ProcessStack::AwaitEnd(const std::string& name,
                               const std::string& token,
                               absl::Duration timeout) {
  auto jobs = Jobs();
  v1::Job job;
  for (absl::Time deadline = absl::Now() + timeout; absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(300))) {
    for (auto& s : services_) {
      std::optional<std::string> died = s->Died();
      if (died.has_value()) {
        ADD_FAILURE() << s->name() << ": " << *died;
        return job;
      }
    }
    v1::GetJobRequest get;
    get.set_name(name);
    get.set_view(v1::JOB_VIEW_FULL);
    grpc::Status s = jobs->Get(Context(token).get(), get, &job);
    if (!s.ok()) {
      ADD_FAILURE() << "Get " << name << ": " << s.error_message();
      return job;
    }
    if (Terminal(job.state())) break;
  }
  return job;
}

std::vector<std::string> ProcessStack::Dispatching() const {
  std::vector<std::string> names;
  try {
    pqxx::connection conn(db_url_);
    pqxx::read_transaction txn(conn);
    for (const auto& row :
         txn.exec("SELECT id, attempt_count FROM jobs WHERE state = 3")) {
      names.push_back(
          absl::StrCat("ty-", row[0].as<int64_t>(), "-", row[1].as<int>()));
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  return names;
}

void ProcessStack::Attempts(
    const std::string& prefix,
    std::map<std::string, v1::Attempt>* attempts) const {
  pqxx::connection conn(db_url_);
  pqxx::read_transaction txn(conn);
  for (const auto& row : txn.exec("SELECT job_id, idx, body FROM attempts")) {
    v1::Attempt attempt;
    pqxx::binarystring body(row[2]);
    ASSERT_TRUE(attempt.ParseFromString(body.str()));
    (*attempts)[absl::StrCat(prefix, "ty-", row[0].as<int64_t>(), "-",
                             row[1].as<int>())] = std::move(attempt);
  }
}

std::string ProcessStack::FaultInjectedAttempt(const std::string& log) {
  const std::string tail = fx::ReadFileTail(log, 4096);
  const std::string kKey =
      "\"msg\":\"dispatcher: fault injection, killing self\","
      "\"attempt\":\"";
  const size_t at = tail.rfind(kKey);
  if (at == std::string::npos) return "";
  const size_t begin = at + kKey.size();
  const size_t end = tail.find('"', begin);
  if (end == std::string::npos) return "";
  return tail.substr(begin, end - begin);
}

std::string ProcessStack::StateHistogram(const JobHistoryCheck& check) {
  std::map<int, int> by_state;
  for (const auto& [id, job] : check.jobs) ++by_state[job.first];
  std::string histogram;
  for (const auto& [state, n] : by_state) {
    absl::StrAppend(&histogram, " ",
                    v1::JobState_Name(static_cast<v1::JobState>(state)), "=",
                    n);
  }
  return histogram;
}

}  // namespace trainyard::testing
