-- What of each queue's quota others of its cohort tree use (GetQueueStatus's usage[].lent),
-- written by the scheduler with the weighted share: [[flavor, resource number, amount], ...]
-- for the cells with a non-zero amount.
ALTER TABLE queue_shares ADD COLUMN lent jsonb NOT NULL DEFAULT '[]'::jsonb;
