-- The tail of each attempt's output (its workers' stdout and stderr as the backend keeps them),
-- copied by the dispatcher while the attempt runs and once more when it ends, so that the API
-- serves logs without reaching into a cluster, and they outlive the backend's own copy (a
-- Kubernetes pod deleted, a Slurm output file cleaned up).
--   size       bytes of output read so far: `data` ends at this offset;
--   data       the newest bytes read, at most the dispatcher's --log_tail_bytes;
--   complete   the attempt ended and its output was read to the end (nothing more will come);
--   error      why the output cannot be read ('' when it can), e.g. the backend keeps none.
CREATE TABLE attempt_logs (
  job_id      bigint NOT NULL,
  attempt     integer NOT NULL,
  size        bigint NOT NULL DEFAULT 0,
  data        bytea NOT NULL DEFAULT ''::bytea,
  complete    boolean NOT NULL DEFAULT false,
  error       text NOT NULL DEFAULT '',
  update_time timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, attempt),
  FOREIGN KEY (job_id, attempt) REFERENCES attempts (job_id, idx) ON DELETE CASCADE
);
