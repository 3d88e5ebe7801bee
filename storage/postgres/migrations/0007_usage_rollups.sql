-- Report rollups (docs/accounting.md, "Rollups"): the ledger's lines summed per UTC hour, UTC
-- day and UTC month and per rollup key, kept exactly equal to the lines by the meter in the
-- transaction that writes them. Two new line columns make every sum a report has a plain sum:
-- the line's list cost, and whether it is its attempt's first line.

ALTER TABLE usage_lines ADD COLUMN list_cost_micros bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_lines ADD COLUMN attempt_start boolean NOT NULL DEFAULT false;

-- Existing lines, exactly as the meter now sets them (pricing::MeterAttemptSince). List cost:
-- the cost, except for a spot GPU line not priced from the rate, whose list cost is its GPU-ms
-- at the flavor's GPU rate in force at its start, rounded half to even (when it has one).
UPDATE usage_lines SET list_cost_micros = cost_micros;
WITH priced AS (
  SELECT u.job_id, u.attempt, u.resource, u.start_ms,
         r.price_micros::numeric * u.amount * (u.end_ms - u.start_ms) AS n
  FROM usage_lines u
  JOIN LATERAL (SELECT p.price_micros FROM price_rates p
                WHERE p.flavor = u.flavor AND p.resource = 0 AND p.effective_ms <= u.start_ms
                ORDER BY p.effective_ms DESC LIMIT 1) r ON true
  WHERE u.spot AND u.resource = 0 AND u.price_source <> 0
)
UPDATE usage_lines u
SET list_cost_micros = (CASE
    WHEN 2 * mod(p.n, 3600000) > 3600000
      OR (2 * mod(p.n, 3600000) = 3600000 AND mod(div(p.n, 3600000), 2) = 1)
    THEN div(p.n, 3600000) + 1 ELSE div(p.n, 3600000) END)::bigint
FROM priced p
WHERE u.job_id = p.job_id AND u.attempt = p.attempt AND u.resource = p.resource
  AND u.start_ms = p.start_ms;
-- The attempt's first line: the earliest line of its first resource that has lines (resources
-- with a zero amount have none; an attempt's lines are metered from its start).
UPDATE usage_lines u SET attempt_start = true
FROM (SELECT DISTINCT ON (job_id, attempt) job_id, attempt, resource, start_ms
      FROM usage_lines ORDER BY job_id, attempt, resource, start_ms) f
WHERE u.job_id = f.job_id AND u.attempt = f.attempt AND u.resource = f.resource
  AND u.start_ms = f.start_ms;
ALTER TABLE usage_lines ALTER COLUMN list_cost_micros DROP DEFAULT;
ALTER TABLE usage_lines ALTER COLUMN attempt_start DROP DEFAULT;

-- The start (ms, UTC) of the UTC calendar month holding `ms`.
CREATE FUNCTION utc_month_start_ms(ms bigint) RETURNS bigint
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$ SELECT (extract(epoch FROM date_trunc('month', to_timestamp(ms / 1000) AT TIME ZONE 'UTC'))
                * 1000)::bigint $$;

-- One row per bucket (granularity 0 an hour, 1 a UTC day, 2 a UTC month, starting at
-- period_start_ms) and rollup key with lines: the sums of those lines. `quantity` is GPU-ms,
-- CPU millicore-ms or memory byte-ms (by `resource`; numeric: byte-ms exceed int64), and
-- `lost_quantity` that of lost-work lines. `attempts` counts lines with attempt_start,
-- `spot_gap_lines` lines with spot_price_gap.
CREATE TABLE usage_rollups (
  granularity           smallint NOT NULL CHECK (granularity BETWEEN 0 AND 2),
  period_start_ms       bigint NOT NULL,
  tenant                text NOT NULL,
  project               text NOT NULL,
  queue                 text NOT NULL,
  user_name             text NOT NULL,
  cluster               text NOT NULL,
  flavor                text NOT NULL,
  resource              smallint NOT NULL,
  lines                 bigint NOT NULL,
  cost_micros           bigint NOT NULL,
  tenant_cost_micros    bigint NOT NULL,
  platform_cost_micros  bigint NOT NULL,
  lost_work_cost_micros bigint NOT NULL,
  list_cost_micros      bigint NOT NULL,
  quantity              numeric NOT NULL,
  lost_quantity         numeric NOT NULL,
  attempts              bigint NOT NULL,
  spot_gap_lines        bigint NOT NULL,
  PRIMARY KEY (granularity, period_start_ms, tenant, project, queue, user_name, cluster,
               flavor, resource)
);

-- The rollups of the lines already in the ledger (AccountingStore::RebuildRollups runs the
-- same statements).
INSERT INTO usage_rollups
SELECT 0, period_start_ms, tenant, project, queue, user_name, cluster, flavor, resource,
       count(*), sum(cost_micros), sum(tenant_cost_micros), sum(platform_cost_micros),
       coalesce(sum(cost_micros) FILTER (WHERE lost_work), 0), sum(list_cost_micros),
       sum(amount::numeric * (end_ms - start_ms)),
       coalesce(sum(amount::numeric * (end_ms - start_ms)) FILTER (WHERE lost_work), 0),
       count(*) FILTER (WHERE attempt_start), count(*) FILTER (WHERE spot_price_gap)
FROM usage_lines
GROUP BY period_start_ms, tenant, project, queue, user_name, cluster, flavor, resource;
INSERT INTO usage_rollups
SELECT g.g, CASE WHEN g.g = 1 THEN r.period_start_ms - r.period_start_ms % 86400000
                 ELSE utc_month_start_ms(r.period_start_ms) END,
       tenant, project, queue, user_name, cluster, flavor, resource,
       sum(lines), sum(cost_micros), sum(tenant_cost_micros), sum(platform_cost_micros),
       sum(lost_work_cost_micros), sum(list_cost_micros), sum(quantity), sum(lost_quantity),
       sum(attempts), sum(spot_gap_lines)
FROM usage_rollups r CROSS JOIN (VALUES (1::smallint), (2::smallint)) AS g(g)
WHERE r.granularity = 0
GROUP BY 1, 2, tenant, project, queue, user_name, cluster, flavor, resource;
