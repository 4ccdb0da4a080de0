-- The store of SPEC §7, for SQLite and PostgreSQL alike: text keys (ULIDs, or ids the API
-- validated), integer epoch-ms timestamps, JSON as text, flags as 0/1 integers. Every integer is
-- BIGINT so both drivers read it as i64. Migrations are additive: an older binary keeps working
-- against a newer schema during a rolling deploy.

-- One row per conversation; next_seq hands out the positions of its messages (the row is the
-- lock that orders concurrent appends on PostgreSQL).
CREATE TABLE conversations (
    id          TEXT PRIMARY KEY,
    user_id     TEXT,
    next_seq    BIGINT NOT NULL DEFAULT 0,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);

-- The transcript. (run_id, msg_key) makes an append idempotent per run; a regenerate marks the
-- replaced turn deleted_ms instead of erasing it, so the audit trail keeps it and its keys stay
-- taken.
CREATE TABLE messages (
    id               TEXT PRIMARY KEY,
    conversation_id  TEXT NOT NULL,
    seq              BIGINT NOT NULL,
    run_id           TEXT NOT NULL,
    msg_key          TEXT NOT NULL,
    role             TEXT NOT NULL,
    content          TEXT,
    tool_calls       TEXT,
    tool_call_id     TEXT,
    created_ms       BIGINT NOT NULL,
    deleted_ms       BIGINT,
    UNIQUE (conversation_id, seq),
    UNIQUE (run_id, msg_key)
);

-- One row per run: what it asked for, where it stands (the budget counters travel here across
-- snoozes and crashes) and how it ended.
CREATE TABLE runs (
    run_id             TEXT PRIMARY KEY,
    user_id            TEXT NOT NULL,
    conversation_id    TEXT NOT NULL,
    kind               TEXT NOT NULL,
    routes             TEXT NOT NULL,
    parent_run_id      TEXT,
    idempotency_key    TEXT,
    status             TEXT NOT NULL,
    code               TEXT,
    calls              BIGINT NOT NULL,
    step1_attempts     BIGINT NOT NULL,
    retried            BIGINT NOT NULL,
    steps              BIGINT NOT NULL,
    route_index        BIGINT,
    input_applied      BIGINT NOT NULL,
    ambiguous_stop     BIGINT NOT NULL,
    emitted            BIGINT NOT NULL,
    snoozes            BIGINT NOT NULL,
    output             TEXT NOT NULL,
    incomplete         BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    total_tokens       BIGINT NOT NULL,
    pending_tool_call  TEXT,
    summary            TEXT,
    deadline_ms        BIGINT NOT NULL,
    created_ms         BIGINT NOT NULL,
    updated_ms         BIGINT NOT NULL
);
CREATE INDEX runs_by_conversation ON runs (conversation_id, created_ms);
CREATE INDEX runs_by_user ON runs (user_id, created_ms);
CREATE INDEX runs_by_idempotency_key ON runs (user_id, idempotency_key);
CREATE INDEX runs_by_parent ON runs (parent_run_id);
CREATE INDEX runs_by_status ON runs (status, updated_ms);

-- The attempt log: one row per provider call, failed or not, with what explains a failover.
CREATE TABLE attempts (
    run_id               TEXT NOT NULL,
    n                    BIGINT NOT NULL,
    step                 BIGINT NOT NULL,
    route                TEXT NOT NULL,
    http_status          BIGINT,
    error                TEXT,
    verdict              TEXT,
    retry_hint_ms        BIGINT,
    ratelimit_remaining  BIGINT,
    provider_name        TEXT,
    latency_ms           BIGINT NOT NULL,
    t_ms                 BIGINT NOT NULL,
    PRIMARY KEY (run_id, n)
);
CREATE INDEX attempts_by_time ON attempts (t_ms);

-- One row per tool call a run paused on; the decision columns are filled when a person answers.
CREATE TABLE approvals (
    run_id               TEXT NOT NULL,
    tool_call_id         TEXT NOT NULL,
    tool_call            TEXT NOT NULL,
    decision             TEXT,
    result               TEXT,
    continuation_run_id  TEXT,
    created_ms           BIGINT NOT NULL,
    decided_ms           BIGINT,
    PRIMARY KEY (run_id, tool_call_id)
);

-- Users' own provider keys, sealed with FREEWAY_SECRET_KEY (XChaCha20-Poly1305, bound to the
-- row's id, user and provider); the plain key is never stored.
CREATE TABLE connections (
    id          TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL,
    provider    TEXT NOT NULL,
    sealed_key  TEXT NOT NULL,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);
CREATE INDEX connections_by_user ON connections (user_id);
