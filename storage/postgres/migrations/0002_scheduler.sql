-- The scheduler's explanation of every job it left pending (ExplainPending), written only
-- when it changes. Rows of jobs that are no longer pending are removed by the scheduler.
CREATE TABLE pending_explanations (
  job_id      bigint PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
  reason      text NOT NULL,
  message     text NOT NULL,
  position    bigint NOT NULL,
  update_time timestamptz NOT NULL DEFAULT now()
);
