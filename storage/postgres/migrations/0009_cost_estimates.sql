-- What the scheduler expects a job to cost (docs/accounting.md, "A job's cost"), in micros of
-- the price book's currency: for a pending job, on the flavor it would try first (written with
-- its explanation); for an attempt, on the flavor it was admitted to (also in the attempt's
-- body as estimated_cost). NULL where the scheduler did not estimate one.
ALTER TABLE pending_explanations ADD COLUMN estimated_cost_micros bigint;
ALTER TABLE attempts ADD COLUMN estimated_cost_micros bigint;
