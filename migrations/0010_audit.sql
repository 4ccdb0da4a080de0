-- The operator's actions (docs/operations.md, "The console"): who cleared, paused, cancelled,
-- retried, woke or approved what, kept in the record beside the runs they touched. Ids are
-- ULIDs: their order is their time's, so a page is a range of the primary key.
CREATE TABLE audit (
    id TEXT PRIMARY KEY,
    t_ms BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL
);

-- The runs that retry a run, for its detail: few runs are retries, so the index holds only them.
CREATE INDEX runs_retry_of ON runs (retry_of) WHERE retry_of IS NOT NULL;
