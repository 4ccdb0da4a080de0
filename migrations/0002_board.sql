-- The job board and /metrics (issue 6): the newest runs of everyone (the per-user list already
-- has runs_by_user), and runs counted by status and code from an index alone.
CREATE INDEX runs_by_created ON runs (created_ms);
CREATE INDEX runs_by_status_code ON runs (status, code);
