-- One pool's limiter (docs/design.md §4.4), on Redis time. KEYS[1] is the pool's hash:
--   c:<w>   calls counted in fixed window w (admitted, or reserved ahead)
--   lo      the oldest window still kept
--   tat     rolling windows: the theoretical arrival time (GCRA), in ms
--   dend/dn the day (its end, epoch ms) and the calls counted in it
--   miss    pacing misses
--   dlim    a day limit learned from the quota endpoint (used when none is declared)
-- ARGV: op (peek | admit | reserve | missed | usage | sync), limit per window (0: none), window ms,
-- rolling (1/0), limit per day (0: none), the day's end (epoch ms; 0: unknown, keep the count),
-- the guard at a window's edges (ms); for sync, the endpoint's used and limit.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[1]
local op = ARGV[1]
local limit = tonumber(ARGV[2])
local win = tonumber(ARGV[3])
local rolling = ARGV[4] == '1'
local dlimit = tonumber(ARGV[5])
local dend = tonumber(ARGV[6])
local guard = tonumber(ARGV[7])

local function num(field)
  return tonumber(redis.call('HGET', key, field) or '0')
end

if dend > 0 and num('dend') ~= dend then
  redis.call('HSET', key, 'dend', dend, 'dn', 0)
end
-- A day limit not declared may have been learned from the provider's quota endpoint.
if dlimit == 0 then dlimit = num('dlim') end
local day_used = num('dn')
local day_full = dlimit > 0 and day_used >= dlimit

local w = math.floor(now / win)
if not rolling and limit > 0 then
  local lo = tonumber(redis.call('HGET', key, 'lo') or w)
  if lo < w then
    if w - lo > 1000 then
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local x = string.match(f, '^c:(%d+)$')
        if x and tonumber(x) < w then redis.call('HDEL', key, f) end
      end
    else
      for x = lo, w - 1 do redis.call('HDEL', key, 'c:' .. x) end
    end
  end
  redis.call('HSET', key, 'lo', w)
end

local function used_in(x)
  return num('c:' .. x)
end

-- The first fixed window from x on with room.
local function free_from(x)
  while used_in(x) >= limit do x = x + 1 end
  return x
end

-- A call admitted this close to a fixed window's end may reach the provider in the next
-- window: it needs room in both and is counted in both.
local tail = (not rolling) and limit > 0 and ((w + 1) * win - now) <= guard

local emission = 0
local tat = now
if rolling and limit > 0 then
  emission = win / limit
  tat = math.max(num('tat'), now)
end

-- Ms until a rolling window admits a call (0 or less: now).
local function rolling_wait()
  return tat - (limit - 1) * emission - now
end

local function keep(until_ms)
  redis.call('PEXPIRE', key, math.max(until_ms - now, dend - now, win) + 60000)
end

local function count_day()
  redis.call('HINCRBY', key, 'dn', 1)
end

if op == 'usage' then
  local reserved = 0
  local used = 0
  local resets = 0
  if limit > 0 and rolling then
    used = math.min(limit, math.ceil((tat - now) / emission))
    resets = math.max(0, math.ceil(rolling_wait()))
  elseif limit > 0 then
    used = used_in(w)
    resets = (w + 1) * win - now
    for _, f in ipairs(redis.call('HKEYS', key)) do
      local x = string.match(f, '^c:(%d+)$')
      if x and tonumber(x) > w then reserved = reserved + used_in(tonumber(x)) end
    end
  end
  return {used, resets, day_used, reserved, num('miss')}
end

-- The quota endpoint's count of the day (ARGV[8], refusals included, lagging a little: it
-- never lowers ours) and its day limit (ARGV[9]). Returns whether the day was full, and is.
if op == 'sync' then
  local used = tonumber(ARGV[8])
  local learned = tonumber(ARGV[9])
  if used > day_used then
    redis.call('HSET', key, 'dn', used)
    day_used = used
  end
  if learned > 0 then redis.call('HSET', key, 'dlim', learned) end
  local limit_now = tonumber(ARGV[5])
  if limit_now == 0 then limit_now = learned end
  keep(now)
  local was = 0
  if day_full then was = 1 end
  local is = 0
  if limit_now > 0 and day_used >= limit_now then is = 1 end
  return {was, is}
end

if op == 'missed' then
  if limit > 0 and rolling then
    redis.call('HSET', key, 'tat', math.ceil(now + win))
  elseif limit > 0 and used_in(w) < limit then
    redis.call('HSET', key, 'c:' .. w, limit)
  end
  local misses = redis.call('HINCRBY', key, 'miss', 1)
  keep(now + win)
  return {misses}
end

if day_full then
  if op == 'reserve' then return {0, 0, 0} end
  return {0, math.max(dend - now, 1)}
end

if op == 'reserve' then
  count_day()
  if limit == 0 then
    keep(now)
    return {1, 0, win}
  end
  if rolling then
    local slot = math.max(now, tat - (limit - 1) * emission)
    redis.call('HSET', key, 'tat', math.ceil(tat + emission))
    keep(math.ceil(tat + emission))
    return {1, math.ceil(slot - now), math.ceil(slot - now + win)}
  end
  local x = free_from(w)
  if x == w and tail then x = free_from(w + 1) end
  redis.call('HINCRBY', key, 'c:' .. x, 1)
  keep((x + 1) * win)
  local wait = 0
  if x > w then wait = x * win + guard - now end
  return {1, wait, (x + 1) * win - now}
end

-- peek or admit
local wait = 0
if limit > 0 and rolling then
  wait = math.max(0, math.ceil(rolling_wait()))
elseif limit > 0 and (used_in(w) >= limit or (tail and used_in(w + 1) >= limit)) then
  wait = free_from(w + 1) * win + guard - now
end
if wait > 0 then return {0, wait} end
if op == 'admit' then
  count_day()
  if limit > 0 and rolling then
    redis.call('HSET', key, 'tat', math.ceil(tat + emission))
    keep(math.ceil(tat + emission))
  elseif limit > 0 then
    redis.call('HINCRBY', key, 'c:' .. w, 1)
    if tail then redis.call('HINCRBY', key, 'c:' .. (w + 1), 1) end
    keep((w + 2) * win)
  else
    keep(now)
  end
end
return {1, 0}
