-- A provider's canary (docs/design.md §4.6) is an attempt of no run: the attempt log tells the two
-- kinds apart, and the newest canary of each route is found through its own small index.
ALTER TABLE attempts ADD COLUMN kind TEXT NOT NULL DEFAULT 'call';
CREATE INDEX attempts_canaries ON attempts (route, t_ms) WHERE kind = 'canary';
