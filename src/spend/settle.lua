-- An attempt's cost replaces its estimate in the tenant's day and in the run.
-- KEYS: as reserve.lua. ARGV: reservation id, cost (nano-USD), day end (epoch ms), longest wait
-- for a day's end (ms), how long a day is kept after it ends (ms), how long a run is kept (ms).
-- A lapsed (or forgotten) reservation still adds its cost; a settled one changes nothing.
local field = 'h:' .. ARGV[1]

local function settle(hash, holds, kept)
  local held = redis.call('HGET', hash, field)
  if held == 's' then
    return
  end
  local amount = tonumber(held)
  if amount then
    redis.call('HINCRBY', hash, 'reserved', int(-amount))
    redis.call('ZREM', holds, ARGV[1])
  end
  redis.call('HSET', hash, field, 's')
  redis.call('HINCRBY', hash, 'spent', ARGV[2])
  redis.call('PEXPIRE', hash, kept)
end
settle(KEYS[1], KEYS[2], day_kept(tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])))
settle(KEYS[3], KEYS[4], tonumber(ARGV[6]))
return 1
