-- ListJobs's `user` filter ("my jobs", the console's default view for a researcher): a tenant's
-- jobs by their creator, newest first, without reading the tenant's other jobs.
CREATE INDEX jobs_by_creator ON jobs (tenant, creator, id DESC);
