-- Chargeback: the price book, the ledger of metered usage lines and the metering cursor of
-- each attempt (docs/accounting.md). Times are milliseconds since the Unix epoch (UTC), as the
-- pricing library counts them; money is integer micro-units of the book's one currency.

-- One row: the book's currency, set by the first price added (every later price must be in
-- it).
CREATE TABLE accounting_settings (
  id       smallint PRIMARY KEY CHECK (id = 1),
  currency text NOT NULL
);

-- Rate versions: the price of a unit-hour of `resource` (0 GPU, 1 CPU, 2 MEMORY) on a flavor
-- from `effective_ms` until the next version of the same flavor and resource.
CREATE TABLE price_rates (
  flavor       text NOT NULL,
  resource     smallint NOT NULL,
  effective_ms bigint NOT NULL,
  price_micros bigint NOT NULL CHECK (price_micros >= 0),
  create_time  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flavor, resource, effective_ms)
);

-- Spot price observations per spot pool (flavor), per GPU-hour.
CREATE TABLE spot_prices (
  flavor       text NOT NULL,
  effective_ms bigint NOT NULL,
  price_micros bigint NOT NULL CHECK (price_micros >= 0),
  create_time  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (flavor, effective_ms)
);

-- Reserved commitments: what the platform pays for a pool over [start_ms, end_ms).
CREATE TABLE commitments (
  id            bigserial PRIMARY KEY,
  flavor        text NOT NULL,
  start_ms      bigint NOT NULL,
  end_ms        bigint NOT NULL CHECK (end_ms > start_ms),
  amount_micros bigint NOT NULL CHECK (amount_micros >= 0),
  create_time   timestamptz NOT NULL DEFAULT now()
);

-- The ledger: one line per attempt, resource and piece of a charge period (a UTC hour), keyed
-- as the meter keys it, so that metering an attempt again upserts the same lines.
CREATE TABLE usage_lines (
  job_id               bigint NOT NULL,
  attempt              integer NOT NULL,
  resource             smallint NOT NULL,
  start_ms             bigint NOT NULL,
  end_ms               bigint NOT NULL,
  period_start_ms      bigint NOT NULL,
  tenant               text NOT NULL,
  project              text NOT NULL,
  queue                text NOT NULL,
  user_name            text NOT NULL,
  cluster              text NOT NULL,
  flavor               text NOT NULL,
  spot                 boolean NOT NULL,
  -- GPUs, CPU millicores or memory bytes over all workers.
  amount               bigint NOT NULL,
  unit_price_micros    bigint NOT NULL,
  price_source         smallint NOT NULL,
  spot_price_gap       boolean NOT NULL,
  cost_micros          bigint NOT NULL,
  lost_work            boolean NOT NULL,
  tenant_cost_micros   bigint NOT NULL,
  platform_cost_micros bigint NOT NULL,
  -- The last line of a running attempt; it grows with the next pass.
  open                 boolean NOT NULL,
  PRIMARY KEY (job_id, attempt, resource, start_ms)
);
CREATE INDEX usage_lines_by_period ON usage_lines (period_start_ms);
CREATE INDEX usage_lines_by_tenant ON usage_lines (tenant, period_start_ms);

-- How far each attempt is metered: up to metered_until_ms, and `metered_final` once its
-- ended usage is in the ledger for good. The partial index is the meter's work list.
ALTER TABLE attempts ADD COLUMN metered_until_ms bigint;
ALTER TABLE attempts ADD COLUMN metered_final boolean NOT NULL DEFAULT false;
CREATE INDEX attempts_unmetered ON attempts (job_id, idx)
  WHERE start_time IS NOT NULL AND NOT metered_final;
