-- A run's last event: append it, give the stream its true size, and keep it for the grace.
--
-- Redis gives every new stream node 4 KB up front and shrinks a node only when it starts the
-- next, so a short run's stream would hold 4 KB of nothing for the whole grace
-- (`FREEWAY_EVENTS_KEEP_S`). Dumping and restoring it writes it back at what it holds (about a
-- kilobyte for a run of a few events). A long stream's earlier nodes are already shrunk, so
-- only streams short enough to be rewritten cheaply are.
--
-- KEYS[1] the run's stream
-- ARGV[1] the stream's approximate longest, ARGV[2] the event's type, ARGV[3] its JSON,
-- ARGV[4] the grace in seconds, ARGV[5] the longest stream rewritten
-- The entry's fields are those of every event (`TYPE_FIELD`, `DATA_FIELD` in events/mod.rs).
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'type', ARGV[2], 'data', ARGV[3])
if redis.call('XLEN', KEYS[1]) <= tonumber(ARGV[5]) then
  local whole = redis.call('DUMP', KEYS[1])
  redis.call('RESTORE', KEYS[1], 0, whole, 'REPLACE')
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
