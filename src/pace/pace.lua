-- One pool's limiter (docs/design.md §4.4), on Redis time. KEYS[2] is the log of a pool whose
-- provider states moments (a sorted set of the moments its calls are made, reserved ones
-- included; members from 'seq'): a window found to slide is paced by it.
-- KEYS[1] is the pool's hash:
--   c:<w>   calls counted in fixed window w (admitted, or reserved ahead)
--   k:<w>   tokens counted in fixed window w
--   t:<w>   calls counted in window w only because they were admitted at the end of w - 1
--   lo      the oldest window still kept
--   tat     rolling windows: the theoretical arrival time (GCRA), in ms
--   ttat    rolling windows: the same for tokens (each token moves it by window / tokens limit)
--   dend/dn the day (its end, epoch ms) and the calls counted in it
--   dt      the tokens counted in the day
--   miss    pacing misses
-- and what the provider stated (the provider's word wins over the configuration, unless pinned):
--   sl      requests per window it stated
--   stl     tokens per window it stated
--   dlim    requests per day it stated (or its quota endpoint gave, or a day refusal showed)
--   ph      where its fixed windows start, ms past the epoch's (0: the epoch's own)
--   wk/wkw  the working requests-per-window limit a pacing miss lowered, and the window from
--           which it holds (it recovers by one each window after that without a miss)
--   lt      when the provider last stated something (epoch ms)
--   fx      1: the provider said where its window ends (a moment), though declared rolling
--   sx      1: the provider's window slides: its stated reset moved on by less than a window
--   lr      the latest reset the provider stated as a moment (epoch ms)
--   seq     the last sliding-log member handed out
-- ARGV: op (peek | admit | reserve | missed | usage | sync | spent | landed | learn | release),
-- limit per window (0: none), window ms, rolling (1/0), limit per day (0: none), the day's end
-- (epoch ms; 0: unknown, keep the count), the guard at a window's edges (ms), tokens per window
-- (0: none), tokens per day (0: none), this call's tokens (an estimate; 0: not counted), pinned
-- (1/0); then per op: sync, the endpoint's used and limit; spent, the tokens to add to what was
-- counted (negative: fewer were spent); landed, how long ago (ms) the call was admitted; missed,
-- the refusal's hint (ms, 0: none) and whether to lower the working limit (1/0); learn, the
-- stated requests per window, per day, tokens per window (0: not stated), requests left in the
-- window, the day, tokens left in the window (-1: not stated), ms until the window ends (0: not
-- stated), whether the day is spent (1/0) and whether the window is fixed (1/0); release, ms from now to the held slot's moment.
--
-- A call needs room for its tokens as for itself; a window (or day) with no tokens counted yet
-- admits one call of any size, so a call larger than the limit is not refused for ever.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[1]
local log = KEYS[2]
local op = ARGV[1]
local limit = tonumber(ARGV[2])
local win = tonumber(ARGV[3])
local declared_rolling = ARGV[4] == '1'
local rolling = declared_rolling
local dlimit = tonumber(ARGV[5])
local dend = tonumber(ARGV[6])
local guard = tonumber(ARGV[7])
local tlimit = tonumber(ARGV[8])
local tdlimit = tonumber(ARGV[9])
local cost = tonumber(ARGV[10])
if cost <= 0 then cost = 0 end
local pin = ARGV[11] == '1'
local configured = {limit, tlimit, dlimit}

local function num(field)
  return tonumber(redis.call('HGET', key, field) or '0')
end

if dend > 0 and num('dend') ~= dend then
  redis.call('HSET', key, 'dend', dend, 'dn', 0, 'dt', 0)
end
local day_used = num('dn')
local day_tokens = num('dt')

-- The limits in force: a stated one replaces the configured one unless the pool pins it (or
-- declares none); a working limit lowered by misses caps the window's.
local w, ph, windowed, day_full
local sliding, logs = false, false
local function settle()
  -- The provider's kind of window wins over the declared one: a window that slides is paced
  -- call by call (rolling, its stated resets gating the next slot), a fixed one by windows.
  rolling = declared_rolling
  sliding = not pin and num('sx') == 1
  if sliding then
    rolling = true
  elseif rolling and not pin and num('fx') == 1 then
    rolling = false
  end
  logs = sliding or num('lr') > 0
  local function stated(field, declared)
    local s = num(field)
    if s > 0 and (not pin or declared == 0) then return s end
    return declared
  end
  limit = stated('sl', configured[1])
  tlimit = stated('stl', configured[2])
  dlimit = stated('dlim', configured[3])
  ph = 0
  if not rolling then ph = num('ph') % win end
  w = math.floor((now - ph) / win)
  local wk = num('wk')
  if wk > 0 then
    local since = w - num('wkw')
    if since > 0 then wk = wk + since end
    if limit == 0 or wk >= limit then
      redis.call('HDEL', key, 'wk', 'wkw')
    else
      if since > 0 then redis.call('HSET', key, 'wk', wk, 'wkw', w) end
      limit = wk
    end
  end
  windowed = (not rolling) and (limit > 0 or tlimit > 0)
  day_full = (dlimit > 0 and day_used >= dlimit)
    or (tdlimit > 0 and cost > 0 and day_tokens > 0 and day_tokens + cost > tdlimit)
end
settle()

-- Where fixed window x starts.
local function start(x)
  return x * win + ph
end

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

-- Whether a window of the provider's that ends `ends_ms` from now (0: not said) is the current
-- one: one that ends by the guard after the current window began is the one before, though the
-- phases agree within the guard.
local function current(ends_ms)
  return ends_ms <= 0 or now + ends_ms > start(w) + guard
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
local tail = windowed and (start(w + 1) - now) <= guard

-- A rolling window's calls are spaced a little more than window / limit (pace::
-- rolling_emission_ms): the provider's clock starts when a call arrives, not when it is admitted.
local emission = 0
local tat = now
local function spacing()
  if rolling and limit > 0 then
    local interval = win / limit
    emission = interval + math.min(interval / 50, 50)
    tat = math.max(num('tat'), now)
  end
end
spacing()

local temission = 0
local ttat = now
if rolling and tlimit > 0 then
  temission = win / tlimit
  ttat = math.max(num('ttat'), now)
end

-- A sliding window's call leaves it this long after its moment (the guard: the provider's
-- clock starts when the call arrives).
local span = win + guard

-- The moments of a sliding window's log still in a window (reserved ones included), oldest
-- first: a flat {member, moment, ...}.
local function logged()
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - span)
  return redis.call('ZRANGEBYSCORE', log, '(' .. (now - span), '+inf', 'WITHSCORES')
end

-- Ms until a sliding window has a slot: at most `limit` moments in any stretch of `span`, so
-- the next one goes `span` after the limit-th newest (later ones in the log count too).
local function slide_wait()
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - span)
  local n = redis.call('ZCARD', log)
  if n < limit then return 0 end
  local e = redis.call('ZRANGE', log, n - limit, n - limit, 'WITHSCORES')
  return math.max(0, tonumber(e[2]) + span - now)
end

local function log_at(at)
  redis.call('ZADD', log, at, redis.call('HINCRBY', key, 'seq', 1))
end

-- The provider counts `limit - left` calls in its sliding window and frees its next slot at
-- `at`: calls of its count the log lacks, and logged ones it says leave later than the log
-- thinks, are taken to leave spread from `at` to the latest a call made now can.
local function slide_fill(at, left)
  local e = logged()
  local past, early = 0, {}
  for i = 1, #e, 2 do
    local m = tonumber(e[i + 1])
    if m <= now then
      past = past + 1
      if left == 0 and m + span < at then table.insert(early, e[i]) end
    end
  end
  local k = math.max(0, limit - left - past) + #early
  if k == 0 then return end
  for _, member in ipairs(early) do redis.call('ZREM', log, member) end
  local last = math.max(at, now + span)
  for i = 0, k - 1 do
    local leaves = at
    if k > 1 then leaves = at + math.floor(i * (last - at) / (k - 1)) end
    log_at(leaves - span)
  end
end

-- Ms until a rolling window admits a call and its tokens (0 or less: now).
local function rolling_wait()
  local wait = 0
  if limit > 0 and sliding then
    wait = slide_wait()
  elseif limit > 0 then
    wait = tat - (limit - 1) * emission - now
  end
  if tlimit > 0 and cost > 0 then
    wait = math.max(wait, ttat + math.min(cost, tlimit) * temission - win - now)
  end
  return wait
end

local function keep(until_ms)
  local ttl = math.max(until_ms - now, dend - now, win) + 60000
  redis.call('PEXPIRE', key, ttl)
  if logs then redis.call('PEXPIRE', log, ttl) end
end

-- Count the call (and its tokens) in the day, in the log at the moment the call is made (`wait`
-- ms from now), and in fixed window x or the rolling windows.
local function count(x, wait)
  redis.call('HINCRBY', key, 'dn', 1)
  if cost > 0 then redis.call('HINCRBY', key, 'dt', cost) end
  if logs and limit > 0 then log_at(now + (wait or 0)) end
  if rolling then
    if limit > 0 and not sliding then
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
    keep(start(x + 1))
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
    if limit > 0 and sliding then
      used = redis.call('ZCOUNT', log, '(' .. (now - span), now)
      reserved = redis.call('ZCOUNT', log, '(' .. now, '+inf')
    elseif limit > 0 then
      used = math.min(limit, math.ceil((tat - now) / emission))
    end
    if tlimit > 0 then tokens = math.min(tlimit, math.ceil((ttat - now) / temission)) end
    resets = math.max(0, math.ceil(rolling_wait()))
  elseif windowed then
    used = used_in(w)
    tokens = tokens_in(w)
    resets = start(w + 1) - now
    for _, f in ipairs(redis.call('HKEYS', key)) do
      local x = string.match(f, '^c:(%d+)$')
      if x and tonumber(x) > w then reserved = reserved + used_in(tonumber(x)) end
    end
  end
  local working = 0
  if num('wk') > 0 then working = limit end
  local phased = 0
  if num('ph') > 0 then phased = 1 end
  return {used, resets, day_used, reserved, num('miss'), tokens, day_tokens,
    num('sl'), num('dlim'), num('stl'), working, num('lt'), phased, num('fx'), num('sx')}
end

-- The quota endpoint's count of the day (ARGV[11], refusals included, lagging a little: it
-- never lowers ours) and its day limit (ARGV[12]). Returns whether the day was full, and is.
if op == 'sync' then
  local used = tonumber(ARGV[12])
  local learned = tonumber(ARGV[13])
  local was = 0
  if day_full then was = 1 end
  if used > day_used then
    redis.call('HSET', key, 'dn', used)
    day_used = used
  end
  if learned > 0 then redis.call('HSET', key, 'dlim', learned) end
  settle()
  keep(now)
  local is = 0
  if dlimit > 0 and day_used >= dlimit then is = 1 end
  return {was, is}
end

-- A call's tokens as its answer's usage counted them, less the estimate it was admitted with
-- (ARGV[12]): the current window and the day are corrected.
if op == 'spent' then
  local delta = tonumber(ARGV[12])
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

-- A call admitted ARGV[12] ms ago whose answer is back: if it was admitted at the end of its
-- window (and so counted in the next one too) and that window has not ended, it reached the
-- provider within it, and the next window gets its slot back.
if op == 'landed' then
  local admitted = now - tonumber(ARGV[12])
  local x = math.floor((admitted - ph) / win) + 1
  if windowed and start(x) - admitted <= guard and now < start(x) and num('t:' .. x) > 0 then
    redis.call('HINCRBY', key, 't:' .. x, -1)
    redis.call('HINCRBY', key, 'c:' .. x, -1)
    if tlimit > 0 and cost > 0 then redis.call('HINCRBY', key, 'k:' .. x, -cost) end
    return {1}
  end
  return {0}
end

-- A refusal of a call the limiter admitted. A rolling window has no slot until the refusal's
-- hint (ARGV[12]) when it gave one (the provider's bucket may be a fraction of a call short, not
-- empty), else for one spacing; a fixed window is full. ARGV[13] = 1 lowers the working limit.
if op == 'missed' then
  local hint = tonumber(ARGV[12])
  if logs then
    -- A sliding window does not count the call it refused.
    local last = redis.call('ZREVRANGEBYSCORE', log, now, '-inf', 'LIMIT', 0, 1)
    if #last > 0 then redis.call('ZREM', log, last[1]) end
  end
  if limit > 0 and sliding then
    -- It is full until the hint.
    if hint <= 0 then hint = math.ceil(win / limit) end
    slide_fill(now + hint, 0)
  elseif limit > 0 and rolling then
    local next_at = now + emission
    if hint > 0 then next_at = now + hint end
    tat = math.max(tat, math.ceil(next_at + (limit - 1) * emission))
    redis.call('HSET', key, 'tat', tat)
  elseif limit > 0 and used_in(w) < limit and current(hint) then
    redis.call('HSET', key, 'c:' .. w, limit)
  end
  if ARGV[13] == '1' and limit > 0 then
    -- It holds for the next window; each one after that passed without a miss raises it.
    redis.call('HSET', key, 'wk', math.max(1, math.floor(limit * 0.9)), 'wkw', w + 1)
  end
  local misses = redis.call('HINCRBY', key, 'miss', 1)
  keep(now + win)
  return {misses}
end

-- What the provider stated (ARGV[12..19], as the header says).
if op == 'learn' then
  local s_win, s_day, s_tok = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
  local r_win, r_day, r_tok = tonumber(ARGV[15]), tonumber(ARGV[16]), tonumber(ARGV[17])
  local ends = tonumber(ARGV[18])
  local day_spent = ARGV[19] == '1'
  if s_win > 0 then redis.call('HSET', key, 'sl', s_win) end
  if s_tok > 0 then redis.call('HSET', key, 'stl', s_tok) end
  if s_day > 0 then redis.call('HSET', key, 'dlim', s_day) end
  -- A moment the window ends: a fixed window's steps by a whole window (or more), a sliding
  -- one's by the gap between its oldest calls as each ages out.
  if ARGV[20] == '1' and not pin then
    local lr = num('lr')
    -- (Steps within the guard are the same moment: they add up until one is not.)
    local step = now + ends - lr
    if ends > 0 and (lr == 0 or step > guard) then
      -- (Only a declared window's length is known well enough to tell a step short.)
      if lr > 0 and step < win - guard and configured[1] > 0 then
        redis.call('HSET', key, 'sx', 1)
        redis.call('HDEL', key, 'fx')
      end
      redis.call('HSET', key, 'lr', now + ends)
    end
    -- A bucket states no moment: a pool declared rolling is paced by windows until they slide.
    if declared_rolling and num('sx') == 0 then redis.call('HSET', key, 'fx', 1) end
  end
  settle()
  spacing()
  -- The provider's window ends `ends` from now: realign the fixed windows to it, each count
  -- moved to the window where its calls are made (the current one's stays current; a held
  -- slot's to the window its holder wakes in). Tails lose their meaning and count in full.
  if windowed and ends > 0 and ends <= win + guard then
    local nph = (now + ends) % win
    local d = math.abs(nph - ph)
    if math.min(d, win - d) > guard then
      local nw = math.floor((now - nph) / win)
      local moved = {}
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local kind, x = string.match(f, '^([ckt]):(%d+)$')
        if kind then
          x = tonumber(x)
          local v = num(f)
          redis.call('HDEL', key, f)
          if kind ~= 't' then
            local to = nw
            if x > w then to = math.max(nw, math.floor((start(x) + guard - nph) / win)) end
            local g = kind .. ':' .. to
            moved[g] = (moved[g] or 0) + v
          end
        end
      end
      for g, v in pairs(moved) do redis.call('HSET', key, g, v) end
      redis.call('HSET', key, 'ph', nph, 'lo', nw)
      -- 'ph' 0 reads as the epoch's own phase; a provider's phase of exactly 0 is that.
      if nph == 0 then redis.call('HDEL', key, 'ph') end
      ph = nph
      w = nw
    end
  end
  -- What is left: the provider counts calls freeway did not (other clients of the key).
  if r_win >= 0 and limit > 0 then
    local used = math.max(0, limit - r_win)
    if sliding then
      slide_fill(now + ends, r_win)
    elseif rolling and r_win == 0 and ends > 0 and ARGV[20] == '1' then
      -- A full window with a stated end (of a kind not learned yet) has its next slot there,
      -- sooner or later than a bucket's: a call in flight now is refused or counted after it.
      tat = math.ceil(now + ends + (limit - 1) * emission)
      redis.call('HSET', key, 'tat', tat)
    elseif rolling then
      tat = math.max(tat, math.ceil(now + used * emission))
      redis.call('HSET', key, 'tat', tat)
    elseif windowed and used_in(w) < used and current(ends) then
      redis.call('HSET', key, 'c:' .. w, used)
    end
  end
  if r_tok >= 0 and tlimit > 0 then
    local used = math.max(0, tlimit - r_tok)
    if rolling then
      local ttat0 = math.max(num('ttat'), now)
      redis.call('HSET', key, 'ttat', math.max(ttat0, math.ceil(now + used * win / tlimit)))
    elseif windowed and tokens_in(w) < used and current(ends) then
      redis.call('HSET', key, 'k:' .. w, used)
    end
  end
  if r_day >= 0 and dlimit > 0 and day_used < dlimit - r_day then
    day_used = dlimit - r_day
    redis.call('HSET', key, 'dn', day_used)
  end
  -- A day refusal spends the day; without a known day limit, what was counted is the limit.
  if day_spent then
    if dlimit == 0 then
      dlimit = math.max(day_used, 1)
      redis.call('HSET', key, 'dlim', dlimit)
    end
    if day_used < dlimit then redis.call('HSET', key, 'dn', dlimit) end
  end
  redis.call('HSET', key, 'lt', now)
  keep(now + win)
  return {1}
end

-- A held slot its run will not use (its moment ARGV[12] ms from now): uncounted from its window
-- and from the day it falls in, so the slot goes to another run.
if op == 'release' then
  local at = now + tonumber(ARGV[12])
  if logs and limit > 0 then
    local near = redis.call('ZRANGEBYSCORE', log, at - guard, at + guard)
    if #near > 0 then redis.call('ZREM', log, near[1]) end
  end
  if sliding then
    -- Only the log counts it.
  elseif rolling then
    if limit > 0 and tat > now then
      redis.call('HSET', key, 'tat', math.max(now, math.floor(tat - emission)))
    end
    if tlimit > 0 and cost > 0 then
      local ttat0 = num('ttat')
      if ttat0 > now then
        redis.call('HSET', key, 'ttat', math.max(now, math.floor(ttat0 - cost * win / tlimit)))
      end
    end
  elseif windowed then
    local x = math.floor((at - ph) / win)
    if x >= w and used_in(x) > 0 then
      redis.call('HINCRBY', key, 'c:' .. x, -1)
      if tlimit > 0 and cost > 0 then
        redis.call('HSET', key, 'k:' .. x, math.max(0, tokens_in(x) - cost))
      end
    end
  end
  -- A slot of a later day was counted in none yet (a held slot outlives no day: it is valid for
  -- one window).
  if day_used > 0 and (dend == 0 or at < dend) then
    redis.call('HINCRBY', key, 'dn', -1)
    if cost > 0 then redis.call('HSET', key, 'dt', math.max(0, day_tokens - cost)) end
  end
  return {1}
end

if day_full then
  if op == 'reserve' then return {0, 0, 0} end
  return {0, math.max(dend - now, 1)}
end

if op == 'reserve' then
  if rolling then
    local wait = math.max(0, math.ceil(rolling_wait()))
    count(w, wait)
    return {1, wait, wait + win}
  end
  if not windowed then
    count(w)
    return {1, 0, win}
  end
  local x = free_from(w)
  if x == w and tail then x = free_from(w + 1) end
  local wait = 0
  if x > w then wait = start(x) + guard - now end
  count(x, wait)
  return {1, wait, start(x + 1) - now}
end

-- peek or admit
local wait = 0
if rolling then
  wait = math.max(0, math.ceil(rolling_wait()))
elseif windowed and (not room(w) or (tail and not room(w + 1))) then
  wait = start(free_from(w + 1)) + guard - now
end
if wait > 0 then return {0, wait} end
if op == 'admit' then
  count(w)
  if tail then
    -- Counted in the next window too; the day counts the call once.
    redis.call('HINCRBY', key, 'c:' .. (w + 1), 1)
    redis.call('HINCRBY', key, 't:' .. (w + 1), 1)
    if tlimit > 0 and cost > 0 then redis.call('HINCRBY', key, 'k:' .. (w + 1), cost) end
    keep(start(w + 2))
  end
end
return {1, 0}
