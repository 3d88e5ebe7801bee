-- Trainyard schema, version 1. PostgreSQL is the truth; Redis only mirrors it.
-- Resource tables keep their indexed columns as SQL and the whole API object as a serialized
-- protobuf (`body`); see docs/storage.md.

CREATE TABLE tenants (
  id          text PRIMARY KEY,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
  tenant      text NOT NULL REFERENCES tenants(id) ON DELETE RESTRICT,
  id          text NOT NULL,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, id)
);

CREATE TABLE cohorts (
  id          text PRIMARY KEY,
  parent      text REFERENCES cohorts(id) ON DELETE RESTRICT,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE flavors (
  id          text PRIMARY KEY,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queues (
  tenant      text NOT NULL REFERENCES tenants(id) ON DELETE RESTRICT,
  id          text NOT NULL,
  cohort      text REFERENCES cohorts(id) ON DELETE RESTRICT,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, id)
);
CREATE INDEX queues_cohort ON queues (cohort);

-- Flavors named in queue quotas, so that a flavor in use cannot be deleted.
CREATE TABLE queue_flavors (
  tenant text NOT NULL,
  queue  text NOT NULL,
  flavor text NOT NULL REFERENCES flavors(id) ON DELETE RESTRICT,
  PRIMARY KEY (tenant, queue, flavor),
  FOREIGN KEY (tenant, queue) REFERENCES queues(tenant, id) ON DELETE CASCADE
);

CREATE TABLE priority_classes (
  id          text PRIMARY KEY,
  value       integer NOT NULL,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE clusters (
  id          text PRIMARY KEY,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pools (
  cluster     text NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
  id          text NOT NULL,
  flavor      text NOT NULL REFERENCES flavors(id) ON DELETE RESTRICT,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (cluster, id)
);

CREATE TABLE nodes (
  cluster     text NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
  id          text NOT NULL,
  pool        text NOT NULL,
  state       smallint NOT NULL,
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (cluster, id),
  FOREIGN KEY (cluster, pool) REFERENCES pools(cluster, id) ON DELETE RESTRICT
);

-- Jobs. `spec` is a serialized trainyard.v1.JobSpec (immutable); the rest is mutable state
-- guarded by `version` (optimistic concurrency: every UPDATE checks and bumps it).
CREATE SEQUENCE job_ids;
CREATE TABLE jobs (
  id                bigint PRIMARY KEY,
  tenant            text NOT NULL REFERENCES tenants(id) ON DELETE RESTRICT,
  queue             text NOT NULL,
  project           text NOT NULL,
  state             smallint NOT NULL,
  priority          integer NOT NULL,
  client_request_id text NOT NULL,
  request_hash      text NOT NULL,
  job_set           text NOT NULL DEFAULT '',
  display_name      text NOT NULL DEFAULT '',
  creator           text NOT NULL,
  labels            jsonb NOT NULL DEFAULT '{}',
  spec              bytea NOT NULL,
  state_reason      text NOT NULL DEFAULT '',
  state_message     text NOT NULL DEFAULT '',
  attempt_count     integer NOT NULL DEFAULT 0,
  resume_from       text NOT NULL DEFAULT '',
  cancel_requested  boolean NOT NULL DEFAULT false,
  version           bigint NOT NULL DEFAULT 1,
  create_time       timestamptz NOT NULL DEFAULT now(),
  update_time       timestamptz NOT NULL DEFAULT now(),
  end_time          timestamptz,
  UNIQUE (tenant, client_request_id),
  FOREIGN KEY (tenant, queue) REFERENCES queues(tenant, id) ON DELETE RESTRICT,
  FOREIGN KEY (tenant, project) REFERENCES projects(tenant, id) ON DELETE RESTRICT
);
CREATE INDEX jobs_by_tenant ON jobs (tenant, id DESC);
CREATE INDEX jobs_by_queue ON jobs (tenant, queue, id DESC);
CREATE INDEX jobs_pending ON jobs (tenant, queue, priority DESC, id) WHERE state IN (1, 10);
CREATE INDEX jobs_active ON jobs (state) WHERE state NOT IN (5, 6, 7);
CREATE INDEX jobs_labels ON jobs USING gin (labels jsonb_path_ops);
CREATE INDEX jobs_by_project ON jobs (tenant, project, id DESC);

-- One run of a job: the unit that is dispatched and metered (filled by scheduler/dispatcher).
CREATE TABLE attempts (
  job_id      bigint NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  idx         integer NOT NULL,
  cluster     text NOT NULL,
  flavor      text NOT NULL,
  body        bytea NOT NULL,
  start_time  timestamptz,
  end_time    timestamptz,
  PRIMARY KEY (job_id, idx)
);

CREATE TABLE checkpoints (
  job_id      bigint NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  id          bigserial,
  attempt     integer NOT NULL,
  step        bigint NOT NULL,
  uri         text NOT NULL,
  body        bytea NOT NULL,
  report_time timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, id)
);

-- The transactional outbox: one row per job event, written in the same transaction as the
-- change it describes. `seq` is assigned under a transaction-scoped advisory lock taken just
-- before the insert, so sequence order equals commit order and a reader that has seen seq N
-- has seen every committed event below N. `body` is a serialized trainyard.v1.JobEvent
-- without its sequence field.
CREATE SEQUENCE job_event_seq;
CREATE TABLE job_events (
  seq         bigint PRIMARY KEY,
  tenant      text NOT NULL,
  job_id      bigint NOT NULL,
  queue       text NOT NULL,
  job_set     text NOT NULL DEFAULT '',
  body        bytea NOT NULL,
  create_time timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_events_by_job ON job_events (job_id, seq);
CREATE INDEX job_events_by_tenant ON job_events (tenant, seq);

CREATE TABLE api_tokens (
  id          text PRIMARY KEY,
  principal   text NOT NULL,
  secret_hash text NOT NULL,
  description text NOT NULL DEFAULT '',
  creator     text NOT NULL,
  create_time timestamptz NOT NULL DEFAULT now(),
  expire_time timestamptz,
  revoke_time timestamptz
);
CREATE INDEX api_tokens_by_principal ON api_tokens (principal);

CREATE TABLE role_bindings (
  id          bigserial PRIMARY KEY,
  principal   text NOT NULL,
  role        smallint NOT NULL,
  tenant      text REFERENCES tenants(id) ON DELETE CASCADE,
  creator     text NOT NULL,
  create_time timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX role_bindings_unique ON role_bindings (principal, role, coalesce(tenant, ''));

CREATE TABLE audit_log (
  id           bigserial PRIMARY KEY,
  time         timestamptz NOT NULL DEFAULT now(),
  principal    text NOT NULL,
  method       text NOT NULL,
  resource     text NOT NULL,
  tenant       text,
  request_json text NOT NULL,
  result       text NOT NULL
);
CREATE INDEX audit_log_by_tenant ON audit_log (tenant, id DESC);
