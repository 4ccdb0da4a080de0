-- (v3) Tenants, tiers and spend (docs/design.md §4.8, §4.9). tenant, tier and priority are written
-- at enqueue as the run resolved them (a run that named no tenant is its user's); a row from
-- before this migration keeps NULLs and reads as its user's, in tier `default`, interactive.
-- Money is DOUBLE PRECISION: REAL is 4 bytes on PostgreSQL, too coarse to sum small costs.
-- No index on tenant: a tenant filter reads like the `q` one, and every index costs each insert.
ALTER TABLE runs ADD COLUMN tenant TEXT;
ALTER TABLE runs ADD COLUMN tier TEXT;
ALTER TABLE runs ADD COLUMN priority TEXT;
ALTER TABLE runs ADD COLUMN max_usd DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0.0;
ALTER TABLE attempts ADD COLUMN cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0.0;
