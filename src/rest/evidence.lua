-- Record ambiguous evidence against a pool and rest it when other users corroborate it.
-- KEYS[1]: the evidence ZSET, KEYS[2]: the pool rest key (same hash tag).
-- ARGV: member '<user_id>:<unique>' (unique has no ':'), window ms, min entries, min users,
--       rest ms, min ms, cap ms, ZSET ttl ms, reason.
-- Returns {remaining ms of the pool rest, or -1 when not corroborated, Redis now in ms}.
local now = now_ms()
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - window))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[8]))
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
if #members < tonumber(ARGV[3]) then
  return {-1, now}
end
-- A user id may itself contain ':'; the unique part never does, so the user ends at the last ':'.
local seen, users = {}, 0
for _, member in ipairs(members) do
  local user = string.match(member, '^(.*):[^:]*$') or member
  if not seen[user] then
    seen[user] = true
    users = users + 1
  end
end
if users < tonumber(ARGV[4]) then
  return {-1, now}
end
return {extend(KEYS[2], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[9], now), now}
