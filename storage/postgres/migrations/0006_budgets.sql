-- Budgets: a monthly spending limit of a tenant (project '') or of one of its projects, at most
-- one per scope. `body` is a serialized trainyard.v1.Budget without its output-only fields.
CREATE TABLE budgets (
  tenant      text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  id          text NOT NULL,
  project     text NOT NULL DEFAULT '',
  body        bytea NOT NULL,
  version     bigint NOT NULL DEFAULT 1,
  create_time timestamptz NOT NULL DEFAULT now(),
  update_time timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, id)
);
CREATE UNIQUE INDEX budgets_scope ON budgets (tenant, project);

-- What the meter last found for each budget (after each pass): the month it is about, what
-- the ledger holds for the scope in that month, the forecast with the work still running or
-- admitted, the action in force, and the highest threshold already notified this month.
-- The scheduler reads it each cycle to hold or restrict new work.
CREATE TABLE budget_status (
  tenant           text NOT NULL,
  id               text NOT NULL,
  month_start_ms   bigint NOT NULL,
  spent_micros     bigint NOT NULL,
  forecast_micros  bigint NOT NULL,
  active_action    smallint NOT NULL,
  notified_percent integer NOT NULL DEFAULT 0,
  -- The budget's version the status was computed for.
  budget_version   bigint NOT NULL,
  status_ms        bigint NOT NULL,
  PRIMARY KEY (tenant, id),
  FOREIGN KEY (tenant, id) REFERENCES budgets (tenant, id) ON DELETE CASCADE
);
