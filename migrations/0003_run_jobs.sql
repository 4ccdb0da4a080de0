-- Redis is for scheduling, SQL is the record: the job a run was enqueued as, kept beside the run
-- so a run whose queue entry Redis lost (a restart without its data, a failover) can be pushed
-- again from the store alone. Rows go with their runs when those are pruned.
CREATE TABLE run_jobs (
    run_id  TEXT PRIMARY KEY,
    job     TEXT NOT NULL
);
