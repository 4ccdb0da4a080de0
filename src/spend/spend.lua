-- Shared by the ledger's scripts: Redis time, and the accounts they keep.
--
-- An account (a tenant's day, or a run) is a hash and a sorted set, under one hash tag:
--   hash:  spent, reserved (nano-USD), and h:<id> per reservation: its estimate while it holds,
--          'x' once it lapsed unsettled, 's' once settled (so a second settle changes nothing)
--   set:   the reservations that hold, scored by when they lapse (Redis ms)

-- Time comes from Redis so that every replica measures holds on one clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Amounts are sent as integers, never in a float's exponent notation.
local function int(v)
  return string.format('%d', v)
end

-- Release an account's reservations whose time ran out, the oldest first, at most `max`.
local function sweep(hash, holds, max)
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now, 'LIMIT', 0, max)
  for _, id in ipairs(gone) do
    local amount = tonumber(redis.call('HGET', hash, 'h:' .. id))
    if amount then
      redis.call('HINCRBY', hash, 'reserved', int(-amount))
      redis.call('HSET', hash, 'h:' .. id, 'x')
    end
    redis.call('ZREM', holds, id)
  end
end

local function amounts(hash)
  local v = redis.call('HMGET', hash, 'spent', 'reserved')
  return tonumber(v[1]) or 0, tonumber(v[2]) or 0
end

-- How long a day's account is kept: until `kept` ms after the day ends, the end taken as at most
-- `ahead_max` ms away.
local function day_kept(day_end, ahead_max, kept)
  local ahead = day_end - now
  if ahead < 0 then ahead = 0 end
  if ahead > ahead_max then ahead = ahead_max end
  return ahead + kept
end
