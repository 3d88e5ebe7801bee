// Settings of the Slurm adapter (docs/slurm.md): how to reach slurmrestd, how
// to authenticate, which partition serves which flavor, and how jobs are
// launched and stopped. Read from a file of `key = value` lines (`#`
// comments), e.g. the adapter.conf deploy/slurm/start.sh writes:
//
//   rest_url = http://127.0.0.1:16820        # or https://..., unix:/path
//   api_version = v0.0.38
//   jwt_key_file = /var/spool/slurm/jwt_hs256.key   # or: token = eyJ...
//   token_user = slurm                       # the token's "sun" claim
//   user = root                              # X-SLURM-USER-NAME: jobs run as
//   partition = gpu:ondemand:ondemand        # flavor:partition[:pool]
//   partition = spot:spot:spot
//   gpu_model = H100
//   stop_signal = USR1                       # or TERM
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_SETTINGS_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_SETTINGS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::dispatcher::slurm {

// One Trainyard flavor served by one Slurm partition.
struct SlurmPartition {
  // Flavor id (LaunchRequest.flavor), e.g. "gpu" or "spot".
  std::string flavor;
  // Slurm partition name.
  std::string partition;
  // Trainyard pool id of the partition's nodes (Inventory); default: the
  // partition name.
  std::string pool;
};

struct SlurmSettings {
  // slurmrestd: "http://host:port", "https://host:port" or "unix:/path".
  std::string rest_url;
  // OpenAPI plugin version in the URL paths ("v0.0.38"; Slurm 24.05 removed
  // it, so it stays a setting).
  std::string api_version = "v0.0.38";
  // HS256 key of slurmctld's auth/jwt (AuthAltParameters=jwt_key=...): the
  // adapter mints short-lived tokens for token_user from it.
  std::string jwt_key_file;
  // A token to send as is instead (then jwt_key_file is not needed).
  std::string token;
  // The "sun" claim of minted tokens: SlurmUser (root or slurm) may act for
  // any `user`.
  std::string token_user = "slurm";
  // X-SLURM-USER-NAME: the user jobs are submitted (and run) as; default
  // token_user.
  std::string user;
  absl::Duration token_lifetime = absl::Minutes(30);
  // Flavor → partition; the first is used for requests without a flavor.
  std::vector<SlurmPartition> partitions;
  // GPU model reported for every node (empty: the gres type, upper-cased).
  std::string gpu_model;
  // Signal sent by Stop before the grace period (SIGUSR1 or SIGTERM ...).
  int stop_signal = 10;
  // Slurm account of every job (empty: none).
  std::string account;
  // Working directory of jobs whose spec names none.
  std::string working_dir = "/tmp";
  // Where "<name>.out" (stdout and stderr of the job) goes; empty: the job's
  // working directory.
  std::string output_dir;
  // Pin workers to the scheduler's nodes with a feature constraint: every
  // node must carry its own name as a feature (deploy/slurm does that).
  bool pin_nodes = true;
  // Read `trainyard-checkpoint.json` in the job's checkpoint directory when
  // it is a local path (or file://).
  bool read_checkpoints = true;
  // Timeouts of one REST call.
  absl::Duration connect_timeout = absl::Seconds(3);
  absl::Duration request_timeout = absl::Seconds(15);
  // HTTPS: CA bundle (empty: the system's) and whether to skip verification.
  std::string ca_file;
  bool insecure_skip_verify = false;
  // Prefix of the Slurm job names ("<prefix>ty-<job>-<attempt>"), so that
  // several Trainyard deployments (staging, production) can share a cluster
  // without seeing each other's jobs. Empty by default.
  std::string job_name_prefix;
  // Container images (JobSpec.image): words that run a worker in its image,
  // with "{image}" replaced by the image. container_srun_args go to srun
  // (pyxis/enroot: "--container-image={image}"); container_exec is put in
  // front of the job's command (Apptainer: "apptainer exec docker://{image}").
  // With neither, a job that names an image is refused on this cluster.
  std::vector<std::string> container_srun_args;
  std::vector<std::string> container_exec;
  // PATH of jobs whose spec.env sets none.
  std::string default_path =
      "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
};

// Parses `key = value` lines. Unknown keys, malformed values and a missing
// rest_url are INVALID_ARGUMENT naming the key ("stop_signal: ...").
absl::StatusOr<SlurmSettings> ParseSlurmSettings(std::string_view text);
// Reads and parses a settings file.
absl::StatusOr<SlurmSettings> LoadSlurmSettings(const std::string& path);
// Checks a settings struct built in code (what ParseSlurmSettings checks).
absl::Status ValidateSlurmSettings(const SlurmSettings& settings);

// "USR1", "SIGUSR1", "10" → 10; 0 for anything else (1..64 accepted).
int ParseSignal(std::string_view s);

}  // namespace trainyard::dispatcher::slurm

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_SLURM_SLURM_SETTINGS_H_
