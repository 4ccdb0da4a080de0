-- A run enqueued again by POST /v1/runs/{id}/retry names the run it retries.
ALTER TABLE runs ADD COLUMN retry_of TEXT;
