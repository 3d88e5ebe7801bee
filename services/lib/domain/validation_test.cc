#include "services/lib/domain/validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "services/lib/domain/errors.h"
#include "services/lib/domain/string_view.h"

namespace trainyard::domain {
namespace {

namespace v1 = ::trainyard::v1;

constexpr int64_t kTiB = int64_t{1} << 40;

void ExpectFieldError(const absl::Status& s, std::string_view field,
                      std::string_view reason) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(ErrorField(s), field) << s;
  EXPECT_EQ(ErrorReason(s), reason) << s;
  EXPECT_TRUE(StdView(s.message()).starts_with(Cat(field, ": "))) << s;
}

void SetDuration(google::protobuf::Duration* d, int64_t seconds,
                 int32_t nanos = 0) {
  d->set_seconds(seconds);
  d->set_nanos(nanos);
}

v1::JobSpec ValidSpec() {
  v1::JobSpec spec;
  spec.set_project("llm-pretrain");
  spec.set_queue("default");
  spec.set_workers(2);
  spec.mutable_resources()->set_gpus(8);
  spec.mutable_resources()->set_gpu_model("H100");
  spec.mutable_resources()->set_cpu_millis(64'000);
  spec.mutable_resources()->set_memory_bytes(kTiB / 2);
  spec.add_command("python");
  spec.add_command("train.py");
  (*spec.mutable_env())["BATCH"] = "64";
  SetDuration(spec.mutable_time_limit(), 3600);
  return spec;
}

struct SpecCase {
  std::string name;
  std::function<void(v1::JobSpec&)> mutate;
  std::string field;  // empty: valid
  std::string reason;
};

std::string Repeat(size_t n, char c = 'a') { return std::string(n, c); }

TEST(ValidateJobSpecTest, ValidSpecPasses) {
  EXPECT_TRUE(ValidateJobSpec(ValidSpec(), Limits()).ok());
}

TEST(ValidateJobSpecTest, Table) {
  const std::vector<SpecCase> cases = {
      // Valid variations.
      {"cpu only",
       [](auto& s) {
         s.mutable_resources()->set_gpus(0);
         s.mutable_resources()->clear_gpu_model();
       },
       "", ""},
      {"image without command",
       [](auto& s) {
         s.clear_command();
         s.set_image("ghcr.io/x/y:1");
       },
       "", ""},
      {"no time limit", [](auto& s) { s.clear_time_limit(); }, "", ""},
      {"expected runtime without limit",
       [](auto& s) {
         s.clear_time_limit();
         SetDuration(s.mutable_expected_runtime(), 7200);
       },
       "", ""},
      {"expected runtime equal limit",
       [](auto& s) { SetDuration(s.mutable_expected_runtime(), 3600); }, "",
       ""},
      {"max workers", [](auto& s) { s.set_workers(4096); }, "", ""},
      {"max gpus", [](auto& s) { s.mutable_resources()->set_gpus(64); }, "",
       ""},
      {"max memory",
       [](auto& s) { s.mutable_resources()->set_memory_bytes(16 * kTiB); }, "",
       ""},
      {"256 command entries",
       [](auto& s) {
         s.clear_command();
         for (int i = 0; i < 256; ++i) s.add_command("x");
       },
       "", ""},
      {"priority class", [](auto& s) { s.set_priority_class("high"); }, "", ""},
      {"time limit 30 days",
       [](auto& s) { SetDuration(s.mutable_time_limit(), 30 * 86400); }, "",
       ""},
      {"grace 1h",
       [](auto& s) {
         SetDuration(s.mutable_checkpoint()->mutable_grace_period(), 3600);
       },
       "", ""},
      {"resumable without directory",
       [](auto& s) { s.mutable_checkpoint()->set_resumable(true); }, "", ""},
      {"spot required",
       [](auto& s) { s.set_spot_policy(v1::SPOT_POLICY_REQUIRED); }, "", ""},
      {"retry",
       [](auto& s) {
         s.mutable_retry()->set_max_attempts(100);
         SetDuration(s.mutable_retry()->mutable_initial_backoff(), 10);
         SetDuration(s.mutable_retry()->mutable_max_backoff(), 600);
         s.mutable_retry()->add_retryable_exit_codes(1);
         s.mutable_retry()->add_retryable_exit_codes(255);
       },
       "", ""},
      {"job set", [](auto& s) { s.set_job_set("Sweep_2024.v1-a"); }, "", ""},
      {"env lower-case", [](auto& s) { (*s.mutable_env())["_my_var1"] = ""; },
       "", ""},
      {"trainyard lower-case",
       [](auto& s) { (*s.mutable_env())["trainyard_x"] = "1"; }, "", ""},

      // project / queue / priority class.
      {"project missing", [](auto& s) { s.clear_project(); }, "spec.project",
       "REQUIRED"},
      {"project bad", [](auto& s) { s.set_project("LLM_pretrain"); },
       "spec.project", "INVALID_NAME"},
      {"queue missing", [](auto& s) { s.clear_queue(); }, "spec.queue",
       "REQUIRED"},
      {"queue bad", [](auto& s) { s.set_queue("-default"); }, "spec.queue",
       "INVALID_NAME"},
      {"queue too long", [](auto& s) { s.set_queue(Repeat(64)); }, "spec.queue",
       "INVALID_NAME"},
      {"priority class bad", [](auto& s) { s.set_priority_class("High"); },
       "spec.priority_class", "INVALID_NAME"},

      // workers.
      {"workers 0", [](auto& s) { s.set_workers(0); }, "spec.workers",
       "OUT_OF_RANGE"},
      {"workers negative", [](auto& s) { s.set_workers(-3); }, "spec.workers",
       "OUT_OF_RANGE"},
      {"workers huge", [](auto& s) { s.set_workers(4097); }, "spec.workers",
       "OUT_OF_RANGE"},
      {"workers int max",
       [](auto& s) { s.set_workers(std::numeric_limits<int32_t>::max()); },
       "spec.workers", "OUT_OF_RANGE"},

      // resources.
      {"resources missing", [](auto& s) { s.clear_resources(); },
       "spec.resources", "REQUIRED"},
      {"gpus -1", [](auto& s) { s.mutable_resources()->set_gpus(-1); },
       "spec.resources.gpus", "OUT_OF_RANGE"},
      {"gpus 65", [](auto& s) { s.mutable_resources()->set_gpus(65); },
       "spec.resources.gpus", "OUT_OF_RANGE"},
      {"gpu model chars",
       [](auto& s) { s.mutable_resources()->set_gpu_model("H100 SXM"); },
       "spec.resources.gpu_model", "INVALID_VALUE"},
      {"gpu model long",
       [](auto& s) { s.mutable_resources()->set_gpu_model(Repeat(65, 'H')); },
       "spec.resources.gpu_model", "INVALID_VALUE"},
      {"gpu model without gpus",
       [](auto& s) { s.mutable_resources()->set_gpus(0); },
       "spec.resources.gpu_model", "INCONSISTENT"},
      {"cpu 0", [](auto& s) { s.mutable_resources()->set_cpu_millis(0); },
       "spec.resources.cpu_millis", "OUT_OF_RANGE"},
      {"cpu -1", [](auto& s) { s.mutable_resources()->set_cpu_millis(-1); },
       "spec.resources.cpu_millis", "OUT_OF_RANGE"},
      {"cpu huge",
       [](auto& s) { s.mutable_resources()->set_cpu_millis(1'024'001); },
       "spec.resources.cpu_millis", "OUT_OF_RANGE"},
      {"memory 0", [](auto& s) { s.mutable_resources()->set_memory_bytes(0); },
       "spec.resources.memory_bytes", "OUT_OF_RANGE"},
      {"memory huge",
       [](auto& s) { s.mutable_resources()->set_memory_bytes(16 * kTiB + 1); },
       "spec.resources.memory_bytes", "OUT_OF_RANGE"},
      {"memory int64 max",
       [](auto& s) {
         s.mutable_resources()->set_memory_bytes(
             std::numeric_limits<int64_t>::max());
       },
       "spec.resources.memory_bytes", "OUT_OF_RANGE"},

      // image / command / env / working dir.
      {"image with space", [](auto& s) { s.set_image("a b"); }, "spec.image",
       "INVALID_VALUE"},
      {"image too long", [](auto& s) { s.set_image(Repeat(2049)); },
       "spec.image", "TOO_LARGE"},
      {"command missing", [](auto& s) { s.clear_command(); }, "spec.command",
       "REQUIRED"},
      {"command 257 entries",
       [](auto& s) {
         for (int i = 0; i < 255; ++i) s.add_command("x");
       },
       "spec.command", "TOO_LARGE"},
      {"command too big", [](auto& s) { s.add_command(Repeat(64 * 1024)); },
       "spec.command", "TOO_LARGE"},
      {"command NUL", [](auto& s) { s.set_command(1, std::string("a\0b", 3)); },
       "spec.command[1]", "INVALID_VALUE"},
      {"env reserved", [](auto& s) { (*s.mutable_env())["TRAINYARD_X"] = "1"; },
       "spec.env[\"TRAINYARD_X\"]", "RESERVED_NAME"},
      {"env starts with digit",
       [](auto& s) { (*s.mutable_env())["1BAD"] = "1"; }, "spec.env[\"1BAD\"]",
       "INVALID_NAME"},
      {"env dash", [](auto& s) { (*s.mutable_env())["A-B"] = "1"; },
       "spec.env[\"A-B\"]", "INVALID_NAME"},
      {"env empty name", [](auto& s) { (*s.mutable_env())[""] = "1"; },
       "spec.env[\"\"]", "INVALID_NAME"},
      {"env NUL value",
       [](auto& s) { (*s.mutable_env())["A"] = std::string("\0", 1); },
       "spec.env[\"A\"]", "INVALID_VALUE"},
      {"env 257 entries",
       [](auto& s) {
         for (int i = 0; i < 256; ++i) (*s.mutable_env())[Cat("V", i)] = "";
       },
       "spec.env", "TOO_LARGE"},
      {"env too big",
       [](auto& s) { (*s.mutable_env())["BIG"] = Repeat(64 * 1024); },
       "spec.env", "TOO_LARGE"},
      {"working dir too long",
       [](auto& s) { s.set_working_dir("/" + Repeat(4096)); },
       "spec.working_dir", "TOO_LARGE"},

      // durations.
      {"time limit 0", [](auto& s) { SetDuration(s.mutable_time_limit(), 0); },
       "spec.time_limit", "OUT_OF_RANGE"},
      {"time limit negative",
       [](auto& s) { SetDuration(s.mutable_time_limit(), -1); },
       "spec.time_limit", "OUT_OF_RANGE"},
      {"time limit 31 days",
       [](auto& s) { SetDuration(s.mutable_time_limit(), 31 * 86400); },
       "spec.time_limit", "OUT_OF_RANGE"},
      {"time limit bad nanos",
       [](auto& s) { SetDuration(s.mutable_time_limit(), 1, 1'000'000'000); },
       "spec.time_limit", "INVALID_VALUE"},
      {"time limit mixed signs",
       [](auto& s) { SetDuration(s.mutable_time_limit(), 1, -1); },
       "spec.time_limit", "INVALID_VALUE"},
      {"time limit huge seconds",
       [](auto& s) {
         SetDuration(s.mutable_time_limit(),
                     std::numeric_limits<int64_t>::max());
       },
       "spec.time_limit", "INVALID_VALUE"},
      {"expected runtime over limit",
       [](auto& s) { SetDuration(s.mutable_expected_runtime(), 3601); },
       "spec.expected_runtime", "OUT_OF_RANGE"},
      {"expected runtime negative",
       [](auto& s) { SetDuration(s.mutable_expected_runtime(), -5); },
       "spec.expected_runtime", "OUT_OF_RANGE"},

      // enums.
      {"spot policy unknown",
       [](auto& s) { s.set_spot_policy(static_cast<v1::SpotPolicy>(9)); },
       "spec.spot_policy", "INVALID_VALUE"},
      {"backend unknown",
       [](auto& s) { s.set_backend(static_cast<v1::BackendPreference>(9)); },
       "spec.backend", "INVALID_VALUE"},
      {"required level unknown",
       [](auto& s) {
         s.mutable_topology()->set_required_level(
             static_cast<v1::TopologyLevel>(7));
       },
       "spec.topology.required_level", "INVALID_VALUE"},
      {"preferred level unknown",
       [](auto& s) {
         s.mutable_topology()->set_preferred_level(
             static_cast<v1::TopologyLevel>(-1));
       },
       "spec.topology.preferred_level", "INVALID_VALUE"},

      // checkpoint.
      {"checkpoint interval negative",
       [](auto& s) {
         SetDuration(s.mutable_checkpoint()->mutable_interval(), -1);
       },
       "spec.checkpoint.interval", "OUT_OF_RANGE"},
      {"grace over 1h",
       [](auto& s) {
         SetDuration(s.mutable_checkpoint()->mutable_grace_period(), 3601);
       },
       "spec.checkpoint.grace_period", "OUT_OF_RANGE"},
      {"grace negative",
       [](auto& s) {
         SetDuration(s.mutable_checkpoint()->mutable_grace_period(), 0, -1);
       },
       "spec.checkpoint.grace_period", "OUT_OF_RANGE"},
      {"checkpoint directory long",
       [](auto& s) { s.mutable_checkpoint()->set_directory(Repeat(2049)); },
       "spec.checkpoint.directory", "TOO_LARGE"},

      // retry.
      {"max attempts 101",
       [](auto& s) { s.mutable_retry()->set_max_attempts(101); },
       "spec.retry.max_attempts", "OUT_OF_RANGE"},
      {"max attempts -1",
       [](auto& s) { s.mutable_retry()->set_max_attempts(-1); },
       "spec.retry.max_attempts", "OUT_OF_RANGE"},
      {"initial backoff negative",
       [](auto& s) {
         SetDuration(s.mutable_retry()->mutable_initial_backoff(), -1);
       },
       "spec.retry.initial_backoff", "OUT_OF_RANGE"},
      {"max backoff negative",
       [](auto& s) {
         SetDuration(s.mutable_retry()->mutable_max_backoff(), -1);
       },
       "spec.retry.max_backoff", "OUT_OF_RANGE"},
      {"initial over max",
       [](auto& s) {
         SetDuration(s.mutable_retry()->mutable_initial_backoff(), 600);
         SetDuration(s.mutable_retry()->mutable_max_backoff(), 60);
       },
       "spec.retry.initial_backoff", "INCONSISTENT"},
      {"exit code 0",
       [](auto& s) {
         s.mutable_retry()->add_retryable_exit_codes(1);
         s.mutable_retry()->add_retryable_exit_codes(0);
       },
       "spec.retry.retryable_exit_codes[1]", "OUT_OF_RANGE"},
      {"exit code 256",
       [](auto& s) { s.mutable_retry()->add_retryable_exit_codes(256); },
       "spec.retry.retryable_exit_codes[0]", "OUT_OF_RANGE"},

      // job set.
      {"job set space", [](auto& s) { s.set_job_set("my sweep"); },
       "spec.job_set", "INVALID_NAME"},
      {"job set long", [](auto& s) { s.set_job_set(Repeat(129)); },
       "spec.job_set", "INVALID_NAME"},
  };
  for (const SpecCase& c : cases) {
    SCOPED_TRACE(c.name);
    v1::JobSpec spec = ValidSpec();
    c.mutate(spec);
    absl::Status s = ValidateJobSpec(spec, Limits());
    if (c.field.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      ExpectFieldError(s, c.field, c.reason);
    }
  }
}

TEST(ValidateJobSpecTest, Messages) {
  v1::JobSpec spec = ValidSpec();
  spec.set_workers(0);
  EXPECT_EQ(ValidateJobSpec(spec, Limits()).message(),
            "spec.workers: must be at least 1");
  spec.set_workers(5000);
  EXPECT_EQ(ValidateJobSpec(spec, Limits()).message(),
            "spec.workers: must be at most 4096, got 5000");
}

TEST(ValidateJobSpecTest, CustomLimits) {
  Limits limits;
  limits.max_workers = 8;
  limits.max_gpus_per_worker = 4;
  v1::JobSpec spec = ValidSpec();
  spec.set_workers(9);
  ExpectFieldError(ValidateJobSpec(spec, limits), "spec.workers",
                   "OUT_OF_RANGE");
  spec.set_workers(8);
  ExpectFieldError(ValidateJobSpec(spec, limits), "spec.resources.gpus",
                   "OUT_OF_RANGE");
  spec.mutable_resources()->set_gpus(4);
  EXPECT_TRUE(ValidateJobSpec(spec, limits).ok());
}

TEST(ValidateJobSpecTest, ComposesIntoBatchPath) {
  v1::JobSpec spec = ValidSpec();
  spec.set_workers(0);
  absl::Status s = PrefixField(
      PrefixField(ValidateJobSpec(spec, Limits()), "job"), "requests[3]");
  EXPECT_EQ(ErrorField(s), "requests[3].job.spec.workers");
  EXPECT_EQ(s.message(), "requests[3].job.spec.workers: must be at least 1");
}

TEST(ValidateJobTest, DisplayNameLabelsSpec) {
  v1::Job job;
  *job.mutable_spec() = ValidSpec();
  job.set_display_name("pretrain 7B");
  (*job.mutable_labels())["team"] = "nlp";
  EXPECT_TRUE(ValidateJob(job, Limits()).ok());

  v1::Job no_spec = job;
  no_spec.clear_spec();
  ExpectFieldError(ValidateJob(no_spec, Limits()), "spec", "REQUIRED");

  v1::Job bad_label = job;
  (*bad_label.mutable_labels())["bad key"] = "x";
  ExpectFieldError(ValidateJob(bad_label, Limits()), "labels[\"bad key\"]",
                   "INVALID_NAME");

  v1::Job bad_name = job;
  bad_name.set_display_name(Repeat(257));
  ExpectFieldError(ValidateJob(bad_name, Limits()), "display_name",
                   "TOO_LARGE");

  v1::Job bad_spec = job;
  bad_spec.mutable_spec()->mutable_resources()->set_gpus(-1);
  ExpectFieldError(ValidateJob(bad_spec, Limits()), "spec.resources.gpus",
                   "OUT_OF_RANGE");
}

TEST(ValidateLabelsTest, Table) {
  struct Case {
    std::string key, value, field, reason;
  };
  const Case cases[] = {
      {"team", "nlp", "", ""},
      {"example.com/owner_1-a", "A.b_c-d/e", "", ""},
      {"k", "", "", ""},
      {Repeat(63), Repeat(63), "", ""},
      {"", "v", "labels[\"\"]", "INVALID_NAME"},
      {Repeat(64), "v", Cat("labels[\"", Repeat(64), "\"]"), "INVALID_NAME"},
      {"a b", "v", "labels[\"a b\"]", "INVALID_NAME"},
      {"k", Repeat(64), "labels[\"k\"]", "INVALID_VALUE"},
      {"k", "a:b", "labels[\"k\"]", "INVALID_VALUE"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + "=" + c.value);
    google::protobuf::Map<std::string, std::string> labels;
    labels[c.key] = c.value;
    absl::Status s = ValidateLabels(labels, Limits(), "labels");
    if (c.field.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      ExpectFieldError(s, c.field, c.reason);
    }
  }
  google::protobuf::Map<std::string, std::string> many;
  for (int i = 0; i < 64; ++i) many[Cat("k", i)] = "v";
  EXPECT_TRUE(ValidateLabels(many, Limits(), "labels").ok());
  many["k64"] = "v";
  ExpectFieldError(ValidateLabels(many, Limits(), "job.labels"), "job.labels",
                   "TOO_LARGE");
}

TEST(ValidateDisplayNameTest, CountsCharactersNotBytes) {
  std::string accented;
  for (int i = 0; i < 256; ++i) accented += "é";
  EXPECT_TRUE(ValidateDisplayName(accented, Limits()).ok());
  ExpectFieldError(ValidateDisplayName(accented + "é", Limits()),
                   "display_name", "TOO_LARGE");
  ExpectFieldError(ValidateDisplayName("two\nlines", Limits()), "display_name",
                   "INVALID_VALUE");
  EXPECT_TRUE(ValidateDisplayName("", Limits()).ok());
}

TEST(ValidateClientRequestIdTest, Table) {
  EXPECT_TRUE(ValidateClientRequestId("abc:1.2_3-4").ok());
  EXPECT_TRUE(ValidateClientRequestId(Repeat(128)).ok());
  ExpectFieldError(ValidateClientRequestId(""), "client_request_id",
                   "REQUIRED");
  ExpectFieldError(ValidateClientRequestId(Repeat(129)), "client_request_id",
                   "TOO_LARGE");
  ExpectFieldError(ValidateClientRequestId("a b"), "client_request_id",
                   "INVALID_VALUE");
  ExpectFieldError(ValidateClientRequestId("a/b"), "client_request_id",
                   "INVALID_VALUE");
}

TEST(ValidateCheckpointTest, Table) {
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  auto valid = [&] {
    v1::Checkpoint c;
    c.set_step(100);
    c.set_uri("s3://bucket/run/step-100");
    c.mutable_time()->set_seconds(1'700'000'000 - 60);
    (*c.mutable_metadata())["loss"] = "1.25";
    return c;
  };
  EXPECT_TRUE(ValidateCheckpoint(valid(), now).ok());

  struct Case {
    std::string name;
    std::function<void(v1::Checkpoint&)> mutate;
    std::string field, reason;
  };
  const std::vector<Case> cases = {
      {"4 min ahead ok",
       [](auto& c) { c.mutable_time()->set_seconds(1'700'000'000 + 240); }, "",
       ""},
      {"step 0 ok", [](auto& c) { c.set_step(0); }, "", ""},
      {"negative step", [](auto& c) { c.set_step(-1); }, "step",
       "OUT_OF_RANGE"},
      {"negative attempt", [](auto& c) { c.set_attempt(-1); }, "attempt",
       "OUT_OF_RANGE"},
      {"no uri", [](auto& c) { c.clear_uri(); }, "uri", "REQUIRED"},
      {"long uri", [](auto& c) { c.set_uri(Repeat(2049)); }, "uri",
       "TOO_LARGE"},
      {"no time", [](auto& c) { c.clear_time(); }, "time", "REQUIRED"},
      {"6 min ahead",
       [](auto& c) { c.mutable_time()->set_seconds(1'700'000'000 + 360); },
       "time", "OUT_OF_RANGE"},
      {"bad nanos", [](auto& c) { c.mutable_time()->set_nanos(-1); }, "time",
       "INVALID_VALUE"},
      {"year 10000",
       [](auto& c) { c.mutable_time()->set_seconds(253'402'300'800); }, "time",
       "INVALID_VALUE"},
      {"33 metadata",
       [](auto& c) {
         for (int i = 0; i < 32; ++i)
           (*c.mutable_metadata())[Cat("m", i)] = "x";
       },
       "metadata", "TOO_LARGE"},
      {"metadata empty key", [](auto& c) { (*c.mutable_metadata())[""] = "x"; },
       "metadata[\"\"]", "INVALID_NAME"},
      {"metadata big value",
       [](auto& c) { (*c.mutable_metadata())["k"] = Repeat(4097); },
       "metadata[\"k\"]", "INVALID_VALUE"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::Checkpoint checkpoint = valid();
    c.mutate(checkpoint);
    absl::Status s = ValidateCheckpoint(checkpoint, now);
    if (c.field.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      ExpectFieldError(s, c.field, c.reason);
    }
  }
}

TEST(ValidateTenantTest, Table) {
  v1::Tenant t;
  t.set_display_name("Acme Research");
  t.set_default_priority_class("normal");
  t.set_submit_rate_limit(5);
  EXPECT_TRUE(ValidateTenant(t).ok());
  v1::Tenant bad = t;
  bad.set_default_priority_class("Normal");
  ExpectFieldError(ValidateTenant(bad), "default_priority_class",
                   "INVALID_NAME");
  bad = t;
  bad.set_submit_rate_limit(-1);
  ExpectFieldError(ValidateTenant(bad), "submit_rate_limit", "OUT_OF_RANGE");
  bad = t;
  bad.set_submit_burst(std::nan(""));
  ExpectFieldError(ValidateTenant(bad), "submit_burst", "OUT_OF_RANGE");

  v1::Project p;
  (*p.mutable_labels())["x y"] = "1";
  ExpectFieldError(ValidateProject(p), "labels[\"x y\"]", "INVALID_NAME");
}

v1::Queue ValidQueue() {
  v1::Queue q;
  q.set_cohort("research");
  q.set_fair_share_weight(2);
  v1::FlavorQuotas* fq = q.add_quotas();
  fq->set_flavor("on-demand-h100");
  v1::ResourceQuota* gpu = fq->add_resources();
  gpu->set_resource(v1::RESOURCE_NAME_GPU);
  gpu->set_nominal(64);
  gpu->set_borrowing_limit(16);
  gpu->set_lending_limit(32);
  v1::ResourceQuota* cpu = fq->add_resources();
  cpu->set_resource(v1::RESOURCE_NAME_CPU);
  cpu->set_nominal(1'000'000);
  v1::FlavorQuotas* spot = q.add_quotas();
  spot->set_flavor("spot-h100");
  spot->add_resources()->set_resource(v1::RESOURCE_NAME_GPU);
  return q;
}

TEST(ValidateQueueTest, Table) {
  EXPECT_TRUE(ValidateQueue(ValidQueue()).ok());
  struct Case {
    std::string name;
    std::function<void(v1::Queue&)> mutate;
    std::string field, reason;
  };
  const std::vector<Case> cases = {
      {"weight 0 is default", [](auto& q) { q.set_fair_share_weight(0); }, "",
       ""},
      {"no quotas", [](auto& q) { q.clear_quotas(); }, "", ""},
      {"lending equal nominal",
       [](auto& q) {
         q.mutable_quotas(0)->mutable_resources(0)->set_lending_limit(64);
       },
       "", ""},
      {"weight negative", [](auto& q) { q.set_fair_share_weight(-1); },
       "fair_share_weight", "OUT_OF_RANGE"},
      {"weight nan", [](auto& q) { q.set_fair_share_weight(std::nan("")); },
       "fair_share_weight", "OUT_OF_RANGE"},
      {"weight inf", [](auto& q) { q.set_fair_share_weight(INFINITY); },
       "fair_share_weight", "OUT_OF_RANGE"},
      {"cohort bad", [](auto& q) { q.set_cohort("Research"); }, "cohort",
       "INVALID_NAME"},
      {"flavor missing", [](auto& q) { q.mutable_quotas(0)->clear_flavor(); },
       "quotas[0].flavor", "REQUIRED"},
      {"flavor bad",
       [](auto& q) { q.mutable_quotas(1)->set_flavor("spot_h100"); },
       "quotas[1].flavor", "INVALID_NAME"},
      {"flavor duplicate",
       [](auto& q) { q.mutable_quotas(1)->set_flavor("on-demand-h100"); },
       "quotas[1].flavor", "DUPLICATE"},
      {"resource duplicate",
       [](auto& q) {
         q.mutable_quotas(0)->mutable_resources(1)->set_resource(
             v1::RESOURCE_NAME_GPU);
       },
       "quotas[0].resources[1].resource", "DUPLICATE"},
      {"resource unset",
       [](auto& q) {
         q.mutable_quotas(1)->mutable_resources(0)->clear_resource();
       },
       "quotas[1].resources[0].resource", "REQUIRED"},
      {"resource unknown",
       [](auto& q) {
         q.mutable_quotas(1)->mutable_resources(0)->set_resource(
             static_cast<v1::ResourceName>(9));
       },
       "quotas[1].resources[0].resource", "INVALID_VALUE"},
      {"nominal negative",
       [](auto& q) {
         q.mutable_quotas(0)->mutable_resources(0)->set_nominal(-1);
       },
       "quotas[0].resources[0].nominal", "OUT_OF_RANGE"},
      {"borrowing negative",
       [](auto& q) {
         q.mutable_quotas(0)->mutable_resources(0)->set_borrowing_limit(-1);
       },
       "quotas[0].resources[0].borrowing_limit", "OUT_OF_RANGE"},
      {"lending negative",
       [](auto& q) {
         q.mutable_quotas(0)->mutable_resources(0)->set_lending_limit(-1);
       },
       "quotas[0].resources[0].lending_limit", "OUT_OF_RANGE"},
      {"lending over nominal",
       [](auto& q) {
         q.mutable_quotas(0)->mutable_resources(0)->set_lending_limit(65);
       },
       "quotas[0].resources[0].lending_limit", "OUT_OF_RANGE"},
      {"strategy unknown",
       [](auto& q) {
         q.set_queueing_strategy(static_cast<v1::QueueingStrategy>(5));
       },
       "queueing_strategy", "INVALID_VALUE"},
      {"within queue unknown",
       [](auto& q) {
         q.mutable_preemption()->set_within_queue(
             static_cast<v1::WithinQueuePreemption>(5));
       },
       "preemption.within_queue", "INVALID_VALUE"},
      {"reclaim unknown",
       [](auto& q) {
         q.mutable_preemption()->set_reclaim_within_cohort(
             static_cast<v1::ReclaimWithinCohort>(5));
       },
       "preemption.reclaim_within_cohort", "INVALID_VALUE"},
      {"fair share unknown",
       [](auto& q) {
         q.mutable_preemption()->set_fair_share(
             static_cast<v1::FairSharePreemption>(5));
       },
       "preemption.fair_share", "INVALID_VALUE"},
      {"fungibility unknown",
       [](auto& q) {
         q.mutable_flavor_fungibility()->set_when_can_preempt(
             static_cast<v1::FlavorFallback>(5));
       },
       "flavor_fungibility.when_can_preempt", "INVALID_VALUE"},
      {"stop policy unknown",
       [](auto& q) { q.set_stop_policy(static_cast<v1::StopPolicy>(5)); },
       "stop_policy", "INVALID_VALUE"},
      {"min runtime negative",
       [](auto& q) { SetDuration(q.mutable_min_runtime(), -60); },
       "min_runtime", "OUT_OF_RANGE"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::Queue q = ValidQueue();
    c.mutate(q);
    absl::Status s = ValidateQueue(q);
    if (c.field.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      ExpectFieldError(s, c.field, c.reason);
    }
  }
  EXPECT_EQ(EffectiveFairShareWeight(0), 1.0);
  EXPECT_EQ(EffectiveFairShareWeight(2.5), 2.5);
}

TEST(ValidateCohortTest, Table) {
  v1::Cohort c;
  c.set_parent("root");
  *c.mutable_quotas() = ValidQueue().quotas();
  EXPECT_TRUE(ValidateCohort(c, "research").ok());
  ExpectFieldError(ValidateCohort(c, "root"), "parent", "INCONSISTENT");
  v1::Cohort named = c;
  named.set_name("cohorts/root");
  ExpectFieldError(ValidateCohort(named), "parent", "INCONSISTENT");
  v1::Cohort bad = c;
  bad.set_parent("Root");
  ExpectFieldError(ValidateCohort(bad, "research"), "parent", "INVALID_NAME");
  bad = c;
  bad.mutable_quotas(0)->mutable_resources(0)->set_nominal(-5);
  ExpectFieldError(ValidateCohort(bad, "research"),
                   "quotas[0].resources[0].nominal", "OUT_OF_RANGE");
  bad = c;
  bad.set_fair_share_weight(-0.5);
  ExpectFieldError(ValidateCohort(bad, "research"), "fair_share_weight",
                   "OUT_OF_RANGE");
  EXPECT_TRUE(ValidateCohort(v1::Cohort()).ok());
}

TEST(ValidatePriorityClassTest, Range) {
  v1::PriorityClass pc;
  for (int32_t v : {-1'000'000, 0, 1'000'000}) {
    pc.set_value(v);
    EXPECT_TRUE(ValidatePriorityClass(pc).ok()) << v;
  }
  for (int32_t v :
       {-1'000'001, 1'000'001, std::numeric_limits<int32_t>::max()}) {
    pc.set_value(v);
    ExpectFieldError(ValidatePriorityClass(pc), "value", "OUT_OF_RANGE");
  }
  pc.set_value(0);
  pc.set_description(Repeat(1025));
  ExpectFieldError(ValidatePriorityClass(pc), "description", "TOO_LARGE");
}

v1::Flavor ValidFlavor() {
  v1::Flavor f;
  f.set_kind(v1::FLAVOR_KIND_SPOT);
  f.set_gpu_model("H100");
  f.mutable_gpu_hour_price()->set_currency_code("USD");
  f.mutable_gpu_hour_price()->set_micros(1'500'000);
  f.mutable_cpu_hour_price()->set_micros(10'000);  // empty currency = USD
  f.set_reclaim_rate_per_hour(0.05);
  return f;
}

TEST(ValidateFlavorTest, Table) {
  EXPECT_TRUE(ValidateFlavor(ValidFlavor()).ok());
  struct Case {
    std::string name;
    std::function<void(v1::Flavor&)> mutate;
    std::string field, reason;
  };
  const std::vector<Case> cases = {
      {"kind missing", [](auto& f) { f.clear_kind(); }, "kind", "REQUIRED"},
      {"kind unknown",
       [](auto& f) { f.set_kind(static_cast<v1::FlavorKind>(8)); }, "kind",
       "INVALID_VALUE"},
      {"gpu model bad", [](auto& f) { f.set_gpu_model("H 100"); }, "gpu_model",
       "INVALID_VALUE"},
      {"price negative",
       [](auto& f) { f.mutable_gpu_hour_price()->set_micros(-1); },
       "gpu_hour_price.micros", "OUT_OF_RANGE"},
      {"currency lower",
       [](auto& f) { f.mutable_gpu_hour_price()->set_currency_code("usd"); },
       "gpu_hour_price.currency_code", "INVALID_VALUE"},
      {"currency mixed",
       [](auto& f) { f.mutable_cpu_hour_price()->set_currency_code("EUR"); },
       "cpu_hour_price.currency_code", "INCONSISTENT"},
      {"reclaim negative", [](auto& f) { f.set_reclaim_rate_per_hour(-0.1); },
       "reclaim_rate_per_hour", "OUT_OF_RANGE"},
      {"reclaim inf", [](auto& f) { f.set_reclaim_rate_per_hour(INFINITY); },
       "reclaim_rate_per_hour", "OUT_OF_RANGE"},
      {"reclaim on demand",
       [](auto& f) { f.set_kind(v1::FLAVOR_KIND_ON_DEMAND); },
       "reclaim_rate_per_hour", "INCONSISTENT"},
      {"on demand no reclaim",
       [](auto& f) {
         f.set_kind(v1::FLAVOR_KIND_RESERVED);
         f.set_reclaim_rate_per_hour(0);
       },
       "", ""},
      {"cpu only", [](auto& f) { f.clear_gpu_model(); }, "", ""},
      {"restart overhead negative",
       [](auto& f) { SetDuration(f.mutable_restart_overhead(), -1); },
       "restart_overhead", "OUT_OF_RANGE"},
      {"restart overhead over a day",
       [](auto& f) { SetDuration(f.mutable_restart_overhead(), 86401); },
       "restart_overhead", "OUT_OF_RANGE"},
      {"restart overhead zero",
       [](auto& f) { SetDuration(f.mutable_restart_overhead(), 0); }, "", ""},
      {"restart overhead a day",
       [](auto& f) { SetDuration(f.mutable_restart_overhead(), 86400); }, "",
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::Flavor f = ValidFlavor();
    c.mutate(f);
    absl::Status s = ValidateFlavor(f);
    if (c.field.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      ExpectFieldError(s, c.field, c.reason);
    }
  }
}

TEST(ValidateClusterTest, Table) {
  v1::Cluster slurm;
  slurm.set_backend(v1::BACKEND_KIND_SLURM);
  slurm.mutable_slurm()->set_rest_url("http://127.0.0.1:6820");
  slurm.mutable_slurm()->set_preemption_signal("USR1");
  (*slurm.mutable_slurm()->mutable_partitions())["spot-h100"] = "spot";
  EXPECT_TRUE(ValidateCluster(slurm).ok());

  v1::Cluster c = slurm;
  c.mutable_slurm()->set_rest_url("unix:///run/slurmrestd.sock");
  EXPECT_TRUE(ValidateCluster(c).ok());
  c.clear_settings();
  EXPECT_TRUE(ValidateCluster(c).ok());

  c = slurm;
  c.clear_backend();
  ExpectFieldError(ValidateCluster(c), "backend", "REQUIRED");
  c = slurm;
  c.mutable_kubernetes()->set_api_server(
      "https://k8s:6443");  // replaces slurm settings
  ExpectFieldError(ValidateCluster(c), "kubernetes", "INCONSISTENT");
  c = slurm;
  c.mutable_slurm()->set_preemption_signal("KILL");
  ExpectFieldError(ValidateCluster(c), "slurm.preemption_signal",
                   "INVALID_VALUE");
  c = slurm;
  c.mutable_slurm()->set_rest_url("ftp://x");
  ExpectFieldError(ValidateCluster(c), "slurm.rest_url", "INVALID_VALUE");
  c = slurm;
  (*c.mutable_slurm()->mutable_partitions())["Spot"] = "spot";
  ExpectFieldError(ValidateCluster(c), "slurm.partitions[\"Spot\"]",
                   "INVALID_NAME");

  v1::Cluster k8s;
  k8s.set_backend(v1::BACKEND_KIND_KUBERNETES);
  k8s.mutable_kubernetes()->set_api_server("https://10.0.0.1:6443");
  k8s.mutable_kubernetes()->set_namespace_("trainyard");
  EXPECT_TRUE(ValidateCluster(k8s).ok());
  k8s.mutable_kubernetes()->set_namespace_("Bad_NS");
  ExpectFieldError(ValidateCluster(k8s), "kubernetes.namespace",
                   "INVALID_NAME");

  v1::Cluster sim;
  sim.set_backend(v1::BACKEND_KIND_SIM);
  sim.mutable_sim()->set_reclaim_rate_per_hour(-1);
  ExpectFieldError(ValidateCluster(sim), "sim.reclaim_rate_per_hour",
                   "OUT_OF_RANGE");
  sim.mutable_slurm();
  ExpectFieldError(ValidateCluster(sim), "slurm", "INCONSISTENT");
}

TEST(ValidatePoolTest, Table) {
  v1::Pool p;
  p.set_flavor("spot-h100");
  (*p.mutable_node_selector())["node.kubernetes.io/instance-type"] =
      "p5.48xlarge";
  EXPECT_TRUE(ValidatePool(p).ok());
  p.clear_flavor();
  ExpectFieldError(ValidatePool(p), "flavor", "REQUIRED");
  p.set_flavor("Spot");
  ExpectFieldError(ValidatePool(p), "flavor", "INVALID_NAME");
}

TEST(ValidateNodeTest, Table) {
  auto valid = [] {
    v1::Node n;
    n.set_pool("h100");
    n.mutable_capacity()->set_gpus(8);
    n.mutable_capacity()->set_gpu_model("H100");
    n.mutable_capacity()->set_cpu_millis(192'000);
    n.mutable_capacity()->set_memory_bytes(2 * kTiB);
    n.mutable_topology()->set_block("b1");
    n.mutable_topology()->set_rack("r01");
    n.set_state(v1::NODE_STATE_READY);
    return n;
  };
  EXPECT_TRUE(ValidateNode(valid()).ok());
  struct Case {
    std::string name;
    std::function<void(v1::Node&)> mutate;
    std::string field, reason;
  };
  const std::vector<Case> cases = {
      {"cpu node",
       [](auto& n) {
         n.mutable_capacity()->set_gpus(0);
         n.mutable_capacity()->clear_gpu_model();
       },
       "", ""},
      {"state unreported", [](auto& n) { n.clear_state(); }, "", ""},
      {"pool missing", [](auto& n) { n.clear_pool(); }, "pool", "REQUIRED"},
      {"pool bad", [](auto& n) { n.set_pool("H100"); }, "pool", "INVALID_NAME"},
      {"capacity missing", [](auto& n) { n.clear_capacity(); }, "capacity",
       "REQUIRED"},
      {"gpus negative", [](auto& n) { n.mutable_capacity()->set_gpus(-1); },
       "capacity.gpus", "OUT_OF_RANGE"},
      {"cpu zero", [](auto& n) { n.mutable_capacity()->set_cpu_millis(0); },
       "capacity.cpu_millis", "OUT_OF_RANGE"},
      {"memory zero",
       [](auto& n) { n.mutable_capacity()->set_memory_bytes(0); },
       "capacity.memory_bytes", "OUT_OF_RANGE"},
      {"gpu model bad",
       [](auto& n) { n.mutable_capacity()->set_gpu_model("H100 80GB"); },
       "capacity.gpu_model", "INVALID_VALUE"},
      {"rack bad", [](auto& n) { n.mutable_topology()->set_rack("rack 1"); },
       "topology.rack", "INVALID_VALUE"},
      {"state unknown",
       [](auto& n) { n.set_state(static_cast<v1::NodeState>(9)); }, "state",
       "INVALID_VALUE"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::Node n = valid();
    c.mutate(n);
    absl::Status s = ValidateNode(n);
    if (c.field.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      ExpectFieldError(s, c.field, c.reason);
    }
  }
}

TEST(PrincipalTest, IsValidPrincipal) {
  for (const std::string& good :
       std::vector<std::string>{"users/alice", "users/alice@example.com",
                                "serviceAccounts/dispatcher", "users/a.b_c+d-e",
                                "users/" + Repeat(128)}) {
    EXPECT_TRUE(IsValidPrincipal(good)) << good;
  }
  for (const std::string& bad : std::vector<std::string>{
           "", "alice", "users/", "groups/x", "users/a b", "users/a/b",
           "Users/alice", "serviceaccounts/x", "users/" + Repeat(129)}) {
    EXPECT_FALSE(IsValidPrincipal(bad)) << bad;
  }
}

TEST(ValidateRoleBindingTest, Table) {
  v1::RoleBinding b;
  b.set_principal("users/alice");
  b.set_role(v1::ROLE_MEMBER);
  b.set_tenant("acme");
  EXPECT_TRUE(ValidateRoleBinding(b).ok());

  v1::RoleBinding admin;
  admin.set_principal("users/root");
  admin.set_role(v1::ROLE_PLATFORM_ADMIN);
  EXPECT_TRUE(ValidateRoleBinding(admin).ok());

  v1::RoleBinding bad = b;
  bad.set_principal("alice");
  ExpectFieldError(ValidateRoleBinding(bad), "principal", "INVALID_NAME");
  bad = b;
  bad.clear_principal();
  ExpectFieldError(ValidateRoleBinding(bad), "principal", "REQUIRED");
  bad = b;
  bad.clear_role();
  ExpectFieldError(ValidateRoleBinding(bad), "role", "REQUIRED");
  bad = b;
  bad.set_role(static_cast<v1::Role>(17));
  ExpectFieldError(ValidateRoleBinding(bad), "role", "INVALID_VALUE");
  bad = b;
  bad.clear_tenant();
  ExpectFieldError(ValidateRoleBinding(bad), "tenant", "REQUIRED");
  bad = b;
  bad.set_tenant("Acme");
  ExpectFieldError(ValidateRoleBinding(bad), "tenant", "INVALID_NAME");
  bad = admin;
  bad.set_tenant("acme");
  ExpectFieldError(ValidateRoleBinding(bad), "tenant", "INCONSISTENT");
}

TEST(DurationTest, ToDurationAndToTime) {
  google::protobuf::Duration d;
  SetDuration(&d, 1, 500'000'000);
  EXPECT_EQ(*ToDuration(d, "d"), absl::Milliseconds(1500));
  SetDuration(&d, -1, -500'000'000);
  EXPECT_EQ(*ToDuration(d, "d"), absl::Milliseconds(-1500));
  SetDuration(&d, 315'576'000'001);
  ExpectFieldError(ToDuration(d, "d").status(), "d", "INVALID_VALUE");
  google::protobuf::Timestamp t;
  t.set_seconds(10);
  t.set_nanos(5);
  EXPECT_EQ(*ToTime(t, "t"), absl::FromUnixSeconds(10) + absl::Nanoseconds(5));
  t.set_nanos(1'000'000'000);
  ExpectFieldError(ToTime(t, "t").status(), "t", "INVALID_VALUE");
}

TEST(PageSizeTest, Resolve) {
  EXPECT_EQ(*ResolvePageSize(0), 100);
  EXPECT_EQ(*ResolvePageSize(1), 1);
  EXPECT_EQ(*ResolvePageSize(1000), 1000);
  EXPECT_EQ(*ResolvePageSize(5000), 1000);
  ExpectFieldError(ResolvePageSize(-1).status(), "page_size", "OUT_OF_RANGE");
}

TEST(ToValidUtf8Test, ReplacesEachByteOutsideAWellFormedSequence) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  struct Case {
    std::string in, out;
  } cases[] = {
      {"", ""},
      {"plain ascii\n", "plain ascii\n"},
      {"\xE2\x82\xAC 5", "\xE2\x82\xAC 5"},      // €, kept
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},  // U+1F600, kept
      {"a\xFF"
       "b",
       "a" + r + "b"},                      // never UTF-8
      {"\xE2\x82", r + r},                  // € cut short
      {"\x82\xAC tail", r + r + " tail"},   // € cut at its head
      {"\xC0\xAF", r + r},                  // overlong '/'
      {"\xED\xA0\x80", r + r + r},          // a surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},  // above U+10FFFF
      {std::string("nul\0ok", 6), std::string("nul\0ok", 6)},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ToValidUtf8(c.in), c.out) << c.in;
    EXPECT_TRUE(IsValidUtf8(ToValidUtf8(c.in)));
  }
}

}  // namespace
}  // namespace trainyard::domain
