-- Three indexes of `runs` that no query reads: idempotency is decided in Redis, continuations
-- look their parent up by its id, and a conversation's transcript is read from `messages`.
-- Each cost every run insert a B-tree write, and a SQLite store's writes are its bottleneck.
DROP INDEX IF EXISTS runs_by_conversation;
DROP INDEX IF EXISTS runs_by_idempotency_key;
DROP INDEX IF EXISTS runs_by_parent;
