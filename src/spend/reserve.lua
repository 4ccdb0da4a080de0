-- Hold an estimate for one attempt if the tenant's day and the run stay within their caps.
-- KEYS: the day's hash and holds, the run's hash and holds (one tenant's hash tag).
-- ARGV: reservation id, estimate (nano-USD), tenant cap (-1: none), run cap (-1: none), hold ms,
-- day end (epoch ms), longest wait for a day's end (ms), how long a day is kept after it ends
-- (ms), how long a run is kept (ms), most lapsed reservations to release per account.
-- Returns {1, 0} when granted, {0, 1} when the tenant cap refuses, {0, 2} when the run cap does.
local id = ARGV[1]
local estimate = tonumber(ARGV[2])
local tenant_cap = tonumber(ARGV[3])
local run_cap = tonumber(ARGV[4])
local max = tonumber(ARGV[10])

sweep(KEYS[1], KEYS[2], max)
sweep(KEYS[3], KEYS[4], max)
local run_spent, run_reserved = amounts(KEYS[3])
if run_cap >= 0 and run_spent + run_reserved + estimate > run_cap then
  return {0, 2}
end
local day_spent, day_reserved = amounts(KEYS[1])
if tenant_cap >= 0 and day_spent + day_reserved + estimate > tenant_cap then
  return {0, 1}
end

local until_ms = now + tonumber(ARGV[5])
local function hold(hash, holds, kept)
  redis.call('HINCRBY', hash, 'reserved', ARGV[2])
  redis.call('HSET', hash, 'h:' .. id, ARGV[2])
  redis.call('ZADD', holds, until_ms, id)
  redis.call('PEXPIRE', hash, kept)
  redis.call('PEXPIRE', holds, kept)
end
hold(KEYS[1], KEYS[2], day_kept(tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])))
hold(KEYS[3], KEYS[4], tonumber(ARGV[9]))
return {1, 0}
