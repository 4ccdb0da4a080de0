-- Count one rest of a route no configuration names against the user whose run earned it, and
-- keep such rests within their bounds (docs/design.md §3.3).
-- KEYS[1]: every such rest, member '<user> <rest key>', score its expiry (Redis ms).
-- KEYS[2]: this user's, member '<rest key>', score its expiry.
-- KEYS[3]: the count of rests dropped.
-- ARGV: user, rest key, remaining ms, per-user bound, total bound, the sets' TTL (ms), the prefix
-- of a user's set (KEYS[2] is that prefix and this user: every set shares KEYS[1]'s hash tag).
-- Returns the rest keys to drop, shortest-lived first: the caller deletes them.
local now = now_ms()
local user, key = ARGV[1], ARGV[2]
local expiry = now + tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[1], 'GT', expiry, user .. ' ' .. key)
redis.call('ZADD', KEYS[2], 'GT', expiry, key)
local dropped = {}
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #popped, 2 do
    redis.call('ZREM', KEYS[1], user .. ' ' .. popped[i])
    dropped[#dropped + 1] = popped[i]
  end
end
over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[5])
if over > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], over)
  for i = 1, #popped, 2 do
    local member = popped[i]
    local space = string.find(member, ' ', 1, true)
    local owner, rest = string.sub(member, 1, space - 1), string.sub(member, space + 1)
    redis.call('ZREM', ARGV[7] .. owner, rest)
    dropped[#dropped + 1] = rest
  end
end
local ttl = tonumber(ARGV[6])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
if #dropped > 0 then
  redis.call('INCRBY', KEYS[3], #dropped)
end
return dropped
