-- When the scheduler evaluated a pending job to the explanation in its row (ExplainPending's
-- evaluate_time), from the scheduler's clock. update_time is when the row was written, which
-- the scheduler's asynchronous writer does later. Rows written before this column existed
-- have none: their update_time stands in.
ALTER TABLE pending_explanations ADD COLUMN evaluate_time timestamptz;
