-- Each queue's weighted fair share as the scheduler last computed it (GetQueueStatus's
-- weighted_share): written by the scheduler when it changes, at most once per explanation
-- interval. A queue without a row has share 0.
CREATE TABLE queue_shares (
  tenant         text NOT NULL,
  queue          text NOT NULL,
  weighted_share double precision NOT NULL,
  update_time    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, queue)
);
