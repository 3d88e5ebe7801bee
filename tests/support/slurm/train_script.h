// A training job for the tests that run real work on Slurm
// (slurm_dispatcher_test, cross_backend_test): `/bin/bash -c kTrainScript`
// with the job's checkpoint directory set.
//
// Worker 0 trains: steps of STEP_SECONDS (default 1) each, from the step it
// resumes from (held in the file $TRAINYARD_RESUME_FROM names: Slurm's
// attempts write it so, and so does the Kubernetes API test server's fake
// kubelet) up to TOTAL, or STEPS more when TOTAL is not set. Each step done
// is appended to $TRAINYARD_CHECKPOINT_DIR/out as "<step> <attempt>". It
// checkpoints every EVERY steps and when signalled (USR1, TERM; then it
// exits 0): the file step-N holding N, then the manifest
// trainyard-checkpoint.json naming it. Its start ("attempt A starts after
// step S"), checkpoints ("checkpoint N attempt A") and end ("finished") go
// to its stdout and to $TRAINYARD_CHECKPOINT_DIR/log. The other workers of
// a gang idle until worker 0 is done.
#ifndef TRAINYARD_TESTS_SUPPORT_SLURM_TRAIN_SCRIPT_H_
#define TRAINYARD_TESTS_SUPPORT_SLURM_TRAIN_SCRIPT_H_

namespace trainyard::testing {

inline constexpr char kTrainScript[] = R"sh(
dir="$TRAINYARD_CHECKPOINT_DIR"
done="$dir/done-$TRAINYARD_ATTEMPT"
if [ "$TRAINYARD_WORKER_INDEX" != 0 ]; then
  trap 'exit 0' USR1 TERM
  while [ ! -e "$done" ]; do sleep 0.2; done
  exit 0
fi
step=0
if [ -n "$TRAINYARD_RESUME_FROM" ]; then step=$(cat "$TRAINYARD_RESUME_FROM"); fi
echo "attempt $TRAINYARD_ATTEMPT starts after step $step" | tee -a "$dir/log"
end="${TOTAL:-$((step + STEPS))}"
checkpoint() {
  echo "$step" > "$dir/step-$step"
  echo "{\"step\": $step, \"uri\": \"step-$step\", \"time\": $(date +%s)}" > "$dir/manifest.tmp"
  mv "$dir/manifest.tmp" "$dir/trainyard-checkpoint.json"
  echo "checkpoint $step attempt $TRAINYARD_ATTEMPT" | tee -a "$dir/log"
}
stop=0
trap 'stop=1' USR1 TERM
while [ "$step" -lt "$end" ]; do
  if [ "$stop" = 1 ]; then checkpoint; touch "$done"; exit 0; fi
  sleep "${STEP_SECONDS:-1}"
  step=$((step + 1))
  echo "$step $TRAINYARD_ATTEMPT" >> "$dir/out"
  if [ $((step % EVERY)) = 0 ]; then checkpoint; fi
done
echo "finished" | tee -a "$dir/log"
touch "$done"
)sh";

}  // namespace trainyard::testing

#endif  // TRAINYARD_TESTS_SUPPORT_SLURM_TRAIN_SCRIPT_H_
