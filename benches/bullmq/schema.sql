-- The records a freeway run leaves in its store, cut to what the throughput scenario writes:
-- the conversation (its row orders the messages), the run, its attempt, its two messages.
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY, user_id TEXT, next_seq BIGINT NOT NULL DEFAULT 0,
    created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    status TEXT NOT NULL, calls BIGINT NOT NULL DEFAULT 0, output TEXT NOT NULL DEFAULT '',
    prompt_tokens BIGINT NOT NULL DEFAULT 0, completion_tokens BIGINT NOT NULL DEFAULT 0,
    job TEXT NOT NULL, created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_user ON runs (user_id, created_ms);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, updated_ms);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL, n BIGINT NOT NULL, route TEXT NOT NULL, http_status BIGINT,
    latency_ms BIGINT NOT NULL, created_ms BIGINT NOT NULL, PRIMARY KEY (run_id, n));
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, seq BIGINT NOT NULL, run_id TEXT NOT NULL,
    msg_key TEXT NOT NULL, role TEXT NOT NULL, content TEXT, created_ms BIGINT NOT NULL,
    UNIQUE (conversation_id, seq), UNIQUE (run_id, msg_key));
