-- ListJobs's orders (priority, display name, state, queue; each ascending or descending, then by
-- id in the same direction) read a tenant's jobs in index order and stop after one page. Without
-- them PostgreSQL sorted every job of the tenant for each page: 200-300 ms at 100,000 jobs.
-- jobs_by_queue becomes (tenant, queue, id): read backwards it still gives a queue's newest jobs
-- first, and forwards the queue order.
CREATE INDEX jobs_by_priority ON jobs (tenant, priority, id);
CREATE INDEX jobs_by_display_name ON jobs (tenant, display_name, id);
CREATE INDEX jobs_by_state ON jobs (tenant, state, id);
DROP INDEX jobs_by_queue;
CREATE INDEX jobs_by_queue ON jobs (tenant, queue, id);
