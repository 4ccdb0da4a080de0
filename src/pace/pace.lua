-- One pool's limiter (docs/design.md §4.4), on Redis time. KEYS[1] is the pool's hash:
--   c:<w>   calls counted in fixed window w (admitted, or reserved ahead)
--   k:<w>   tokens counted in fixed window w
--   t:<w>   calls counted in window w only because they were admitted at the end of w - 1
--   lo      the oldest window still kept
--   tat     rolling windows: the theoretical arrival time (GCRA), in ms
--   ttat    rolling windows: the same for tokens (each token moves it by window / tokens limit)
--   dend/dn the day (its end, epoch ms) and the calls counted in it
--   dt      the tokens counted in the day
--   miss    pacing misses
--   dlim    a day limit learned from the quota endpoint (used when none is declared)
-- ARGV: op (peek | admit | reserve | missed | usage | sync | spent), limit per window (0: none),
-- window ms, rolling (1/0), limit per day (0: none), the day's end (epoch ms; 0: unknown, keep
-- the count), the guard at a window's edges (ms), tokens per window (0: none), tokens per day (0:
-- none), this call's tokens (an estimate; 0: not counted); for sync, the endpoint's used and
-- limit; for spent, the tokens to add to what was counted (negative: fewer were spent); for
-- landed, how long ago (ms) the call was admitted.
--
-- A call needs room for its tokens as for itself; a window (or day) with no tokens counted yet
-- admits one call of any size, so a call larger than the limit is not refused for ever.
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
local tlimit = tonumber(ARGV[8])
local tdlimit = tonumber(ARGV[9])
local cost = tonumber(ARGV[10])
if cost <= 0 then cost = 0 end

local function num(field)
  return tonumber(redis.call('HGET', key, field) or '0')
end

if dend > 0 and num('dend') ~= dend then
  redis.call('HSET', key, 'dend', dend, 'dn', 0, 'dt', 0)
end
-- A day limit not declared may have been learned from the provider's quota endpoint.
if dlimit == 0 then dlimit = num('dlim') end
local day_used = num('dn')
local day_tokens = num('dt')
local day_full = (dlimit > 0 and day_used >= dlimit)
  or (tdlimit > 0 and cost > 0 and day_tokens > 0 and day_tokens + cost > tdlimit)

local w = math.floor(now / win)
local windowed = (not rolling) and (limit > 0 or tlimit > 0)
if windowed then
  local lo = tonumber(redis.call('HGET', key, 'lo') or w)
  if lo < w then
    if w - lo > 1000 then
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local x = string.match(f, '^[ckt]:(%d+)$')
        if x and tonumber(x) < w then redis.call('HDEL', key, f) end
      end
    else
      for x = lo, w - 1 do redis.call('HDEL', key, 'c:' .. x, 'k:' .. x, 't:' .. x) end
    end
  end
  redis.call('HSET', key, 'lo', w)
end

local function used_in(x)
  return num('c:' .. x)
end

local function tokens_in(x)
  return num('k:' .. x)
end

-- Whether fixed window x has room for this call and its tokens.
local function room(x)
  if limit > 0 and used_in(x) >= limit then return false end
  if tlimit > 0 and cost > 0 then
    local t = tokens_in(x)
    if t > 0 and t + cost > tlimit then return false end
  end
  return true
end

-- The first fixed window from x on with room.
local function free_from(x)
  while not room(x) do x = x + 1 end
  return x
end

-- A call admitted this close to a fixed window's end may reach the provider in the next
-- window: it needs room in both and is counted in both.
local tail = windowed and ((w + 1) * win - now) <= guard

local emission = 0
local tat = now
if rolling and limit > 0 then
  emission = win / limit
  tat = math.max(num('tat'), now)
end

local temission = 0
local ttat = now
if rolling and tlimit > 0 then
  temission = win / tlimit
  ttat = math.max(num('ttat'), now)
end

-- Ms until a rolling window admits a call and its tokens (0 or less: now).
local function rolling_wait()
  local wait = 0
  if limit > 0 then wait = tat - (limit - 1) * emission - now end
  if tlimit > 0 and cost > 0 then
    wait = math.max(wait, ttat + math.min(cost, tlimit) * temission - win - now)
  end
  return wait
end

local function keep(until_ms)
  redis.call('PEXPIRE', key, math.max(until_ms - now, dend - now, win) + 60000)
end

-- Count the call (and its tokens) in the day, and in fixed window x or the rolling windows.
local function count(x)
  redis.call('HINCRBY', key, 'dn', 1)
  if cost > 0 then redis.call('HINCRBY', key, 'dt', cost) end
  if rolling then
    if limit > 0 then
      tat = math.ceil(tat + emission)
      redis.call('HSET', key, 'tat', tat)
    end
    if tlimit > 0 and cost > 0 then
      ttat = math.ceil(ttat + cost * temission)
      redis.call('HSET', key, 'ttat', ttat)
    end
    keep(math.max(tat, ttat))
  elseif windowed then
    redis.call('HINCRBY', key, 'c:' .. x, 1)
    if tlimit > 0 and cost > 0 then redis.call('HINCRBY', key, 'k:' .. x, cost) end
    keep((x + 1) * win)
  else
    keep(now)
  end
end

if op == 'usage' then
  local reserved = 0
  local used = 0
  local resets = 0
  local tokens = 0
  if rolling then
    if limit > 0 then used = math.min(limit, math.ceil((tat - now) / emission)) end
    if tlimit > 0 then tokens = math.min(tlimit, math.ceil((ttat - now) / temission)) end
    resets = math.max(0, math.ceil(rolling_wait()))
  elseif windowed then
    used = used_in(w)
    tokens = tokens_in(w)
    resets = (w + 1) * win - now
    for _, f in ipairs(redis.call('HKEYS', key)) do
      local x = string.match(f, '^c:(%d+)$')
      if x and tonumber(x) > w then reserved = reserved + used_in(tonumber(x)) end
    end
  end
  return {used, resets, day_used, reserved, num('miss'), tokens, day_tokens}
end

-- The quota endpoint's count of the day (ARGV[11], refusals included, lagging a little: it
-- never lowers ours) and its day limit (ARGV[12]). Returns whether the day was full, and is.
if op == 'sync' then
  local used = tonumber(ARGV[11])
  local learned = tonumber(ARGV[12])
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

-- A call's tokens as its answer's usage counted them, less the estimate it was admitted with
-- (ARGV[11]): the current window and the day are corrected.
if op == 'spent' then
  local delta = tonumber(ARGV[11])
  if delta ~= 0 then
    redis.call('HSET', key, 'dt', math.max(0, day_tokens + delta))
    if rolling and tlimit > 0 then
      redis.call('HSET', key, 'ttat', math.ceil(math.max(now, ttat + delta * temission)))
    elseif windowed and tlimit > 0 then
      redis.call('HSET', key, 'k:' .. w, math.max(0, tokens_in(w) + delta))
    end
    keep(now + win)
  end
  return {1}
end

-- A call admitted ARGV[11] ms ago whose answer is back: if it was admitted at the end of its
-- window (and so counted in the next one too) and that window has not ended, it reached the
-- provider within it, and the next window gets its slot back.
if op == 'landed' then
  local admitted = now - tonumber(ARGV[11])
  local x = math.floor(admitted / win) + 1
  if windowed and x * win - admitted <= guard and now < x * win and num('t:' .. x) > 0 then
    redis.call('HINCRBY', key, 't:' .. x, -1)
    redis.call('HINCRBY', key, 'c:' .. x, -1)
    if tlimit > 0 and cost > 0 then redis.call('HINCRBY', key, 'k:' .. x, -cost) end
    return {1}
  end
  return {0}
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
  if rolling then
    local wait = math.max(0, math.ceil(rolling_wait()))
    count(w)
    return {1, wait, wait + win}
  end
  if not windowed then
    count(w)
    return {1, 0, win}
  end
  local x = free_from(w)
  if x == w and tail then x = free_from(w + 1) end
  count(x)
  local wait = 0
  if x > w then wait = x * win + guard - now end
  return {1, wait, (x + 1) * win - now}
end

-- peek or admit
local wait = 0
if rolling then
  wait = math.max(0, math.ceil(rolling_wait()))
elseif windowed and (not room(w) or (tail and not room(w + 1))) then
  wait = free_from(w + 1) * win + guard - now
end
if wait > 0 then return {0, wait} end
if op == 'admit' then
  count(w)
  if tail then
    -- Counted in the next window too; the day counts the call once.
    redis.call('HINCRBY', key, 'c:' .. (w + 1), 1)
    redis.call('HINCRBY', key, 't:' .. (w + 1), 1)
    if tlimit > 0 and cost > 0 then redis.call('HINCRBY', key, 'k:' .. (w + 1), cost) end
    keep((w + 2) * win)
  end
end
return {1, 0}
