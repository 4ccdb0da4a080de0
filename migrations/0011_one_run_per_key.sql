-- One key, one run (docs/design.md §4.3): the store decides which run a web app's idempotency key
-- names. A run enqueued with a key claims `<user_id>/<idempotency_key>` here (`/` occurs in
-- neither: both are `[A-Za-z0-9_.:-]`) in the transaction that inserts it; the primary key makes a
-- second claim do nothing, on SQLite and PostgreSQL alike, however many requests race, and the
-- request that loses answers the run that holds the key. A claim goes with its run: when the run
-- is pruned, or discarded because it could not be enqueued.
CREATE TABLE run_keys (
    idem_key TEXT PRIMARY KEY,
    run_id   TEXT NOT NULL
);
-- Runs enqueued before this migration keep their keys: the first run of each key holds it.
INSERT INTO run_keys (idem_key, run_id)
SELECT user_id || '/' || idempotency_key, MIN(run_id) FROM runs
WHERE idempotency_key IS NOT NULL GROUP BY user_id, idempotency_key;
CREATE INDEX run_keys_by_run ON run_keys (run_id);
