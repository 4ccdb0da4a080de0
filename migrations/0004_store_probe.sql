-- `GET /healthz` proves the store takes writes, not only reads: it rewrites this one row through
-- the same writer the runs go through (a full disk fails it).
CREATE TABLE store_probe (
    id    BIGINT PRIMARY KEY,
    t_ms  BIGINT NOT NULL
);
