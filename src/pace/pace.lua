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
--   slf/stlf/dlf  where sl, stl and dlim came from: 1 headers, 2 a refusal's body, 3 the quota
--           endpoint, 4 counted (src/pace/stated.rs, LimitSource)
--   cl      requests per window learned by counting: the calls counted in the window a refusal
--           closed, when no limit was stated or configured (the limit then, below any stated)
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
-- stated), whether the day is spent (1/0), whether the window is fixed (1/0) and where each of
-- the three limits came from (LimitSource codes; 0: not stated); release, ms from now to the
-- held slot's moment.
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
local w, ph, windowed, counting, counted_limit, day_full
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
  -- Nobody stated a limit: what a refusal showed by counting is the limit.
  counted_limit = false
  if limit == 0 then
    limit = num('cl')
    counted_limit = limit > 0
  end
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
  -- A pool that limits its calls by nothing yet still counts them by window (rolling ones on
  -- the epoch's), so that a refusal can show how many it took.
  counting = windowed or limit == 0
  day_full = (dlimit > 0 and day_used >= dlimit)
    or (tdlimit > 0 and cost > 0 and day_tokens > 0 and day_tokens + cost > tdlimit)
end
settle()

-- Where fixed window x starts.
local function start(x)
  return x * win + ph
end

if counting then
  -- Windows before the current one are dropped; a pool that only counts keeps the one before,
  -- whose end a provider's window may overlap.
  local from = w
  if not windowed then from = w - 1 end
  local lo = tonumber(redis.call('HGET', key, 'lo') or from)
  if lo < from then
    if from - lo > 1000 then
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local x = string.match(f, '^[ckt]:(%d+)$')
        if x and tonumber(x) < from then redis.call('HDEL', key, f) end
      end
    else
      for x = lo, from - 1 do redis.call('HDEL', key, 'c:' .. x, 'k:' .. x, 't:' .. x) end
    end
  end
  redis.call('HSET', key, 'lo', from)
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
  day_used = day_used + 1
  if cost > 0 then
    redis.call('HINCRBY', key, 'dt', cost)
    day_tokens = day_tokens + cost
  end
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
    if counting then redis.call('HINCRBY', key, 'c:' .. x, 1) end
    keep(math.max(tat, ttat, start(x + 1)))
  elseif counting then
    redis.call('HINCRBY', key, 'c:' .. x, 1)
    if tlimit > 0 and cost > 0 then redis.call('HINCRBY', key, 'k:' .. x, cost) end
    keep(start(x + 1))
  else
    keep(now)
  end
end


-- Uncount a held slot whose call is (or was) made at `at`, from its window and its day.
local function release_at(at)
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
end

-- Fair share (docs/design.md §4.7, src/pace/fair.rs keeps the same rules in one process). Once
-- runs wait for the pool, its slots go through its queue only, by WF2Q+ over tenants, lane 0
-- (interactive) before lane 1 (batch). KEYS[3] is a hash:
--   v<l> / wb<l>          lane l's virtual time, and the weights of its tenants with runs waiting
--   f<l>:<t> n<l>:<t> w<l>:<t>   tenant t's last finish tag (kept while it is away), runs
--                         waiting, weight
--   e:<run>               a waiting run: lane|tenant|from|by|tokens|deadline (from: eligible
--                         once the virtual time reaches it; by: its deadline, in virtual time)
--   q                     runs waiting, both lanes
-- KEYS[4..7] lane 0's eligible (by deadline) and pending (by from) runs, then lane 1's; KEYS[8]
-- the granted runs (by the end of their slot); KEYS[9] the granted runs nobody told yet (a
-- list); KEYS[10] each tenant's slots this window ('w': which window). Tags are written with
-- 17 digits: Lua's own conversion keeps 14, and the order must be the one fair.rs computes.
local fair, grants, untold, shares = KEYS[3], KEYS[8], KEYS[9], KEYS[10]
local elig = {KEYS[4], KEYS[6]}
local pend = {KEYS[5], KEYS[7]}
local margin = 1 / 38

local function tag(x)
  return string.format('%.17g', x)
end

local function fget(f)
  return redis.call('HGET', fair, f)
end

local function fnum(f)
  return tonumber(fget(f) or '0')
end

local function waiting()
  return fnum('q')
end

local function entry(run)
  local e = fget('e:' .. run)
  if not e then return nil end
  local l, t, a, b, k, d = string.match(e, '^(%d)|([^|]+)|([^|]+)|([^|]+)|(%d+)|(%d+)$')
  return {lane = tonumber(l), tenant = t, from = tonumber(a), by = tonumber(b),
    tokens = tonumber(k), deadline = tonumber(d)}
end

local function keep_fair()
  local ttl = math.max(win, 60000) * 2 + 3600000
  for i = 3, 10 do redis.call('PEXPIRE', KEYS[i], ttl) end
end

-- Add a run to its lane; one already waiting keeps its place.
local function enter(run, tenant, weight, lane, tokens, deadline)
  if fget('e:' .. run) then return end
  local l = lane + 1
  weight = math.max(1, weight)
  local v = fnum('v' .. lane)
  -- A tenant waiting already chains its runs, owed or ahead; one that comes back starts now,
  -- or where its last run ended if that is later.
  local s = fnum('f' .. lane .. ':' .. tenant)
  if not fget('n' .. lane .. ':' .. tenant) then s = math.max(v, s) end
  local f = s + 1 / weight
  redis.call('HSET', fair, 'f' .. lane .. ':' .. tenant, tag(f))
  if redis.call('HINCRBY', fair, 'n' .. lane .. ':' .. tenant, 1) == 1 then
    redis.call('HSET', fair, 'w' .. lane .. ':' .. tenant, weight)
    redis.call('HSET', fair, 'wb' .. lane, tag(fnum('wb' .. lane) + weight))
    redis.call('HINCRBY', fair, 'tn', 1)
  end
  redis.call('HINCRBY', fair, 'q', 1)
  local from, by = s + margin * (1 / weight), s + (1 - margin) * (1 / weight)
  redis.call('HSET', fair, 'e:' .. run,
    lane .. '|' .. tenant .. '|' .. tag(from) .. '|' .. tag(by) .. '|' .. tokens .. '|' .. deadline)
  if from <= v then
    redis.call('ZADD', elig[l], tag(by), run)
  else
    redis.call('ZADD', pend[l], tag(from), run)
  end
  keep_fair()
end

-- Take a run out of its lane; returns its entry, or nil when it was not waiting.
local function remove(run)
  local e = entry(run)
  if not e then return nil end
  local lane, t = e.lane, e.tenant
  redis.call('HDEL', fair, 'e:' .. run)
  redis.call('ZREM', elig[lane + 1], run)
  redis.call('ZREM', pend[lane + 1], run)
  redis.call('HINCRBY', fair, 'q', -1)
  if redis.call('HINCRBY', fair, 'n' .. lane .. ':' .. t, -1) <= 0 then
    local w = fnum('w' .. lane .. ':' .. t)
    redis.call('HSET', fair, 'wb' .. lane, tag(fnum('wb' .. lane) - w))
    redis.call('HINCRBY', fair, 'tn', -1)
    redis.call('HDEL', fair, 'n' .. lane .. ':' .. t, 'w' .. lane .. ':' .. t)
  end
  return e
end

-- Lane l's virtual time once the next slot is served: each waiting tenant's share of a slot is
-- its weight over the weights waiting.
local function next_v(lane)
  local v, wb = fnum('v' .. lane), fnum('wb' .. lane)
  if wb > 0 then return v + 1 / wb end
  return v
end

-- The run next in line and its entry, left in line; runs past their deadline that come up
-- are dropped on the way.
local function head()
  while true do
    local lane = nil
    for l = 1, 0, -1 do
      if redis.call('ZCARD', elig[l + 1]) > 0 or redis.call('ZCARD', pend[l + 1]) > 0 then
        lane = l
      end
    end
    if lane == nil then return nil end
    local E, P = elig[lane + 1], pend[lane + 1]
    for _, run in ipairs(redis.call('ZRANGEBYSCORE', P, '-inf', tag(next_v(lane)))) do
      local e = entry(run)
      redis.call('ZREM', P, run)
      if e then redis.call('ZADD', E, tag(e.by), run) end
    end
    -- (Nobody eligible, after tenants left owed: the earliest start goes, as no slot is left
    -- unused.)
    local run = redis.call('ZRANGE', E, 0, 0)[1] or redis.call('ZRANGE', P, 0, 0)[1]
    local e = entry(run)
    if e.deadline > now then return run, e end
    remove(run)
  end
end

-- The run next in line takes its slot: virtual time moves on by the slot.
local function pop(run, e)
  redis.call('HSET', fair, 'v' .. e.lane, tag(next_v(e.lane)))
  remove(run)
end

-- Runs ahead of a waiter (one waiting, or one that would join), roughly: in its lane, those
-- with a smaller tag; in an earlier lane, all.
local function ahead(run, tenant, weight, lane)
  local f
  local e = entry(run)
  if e then
    f = e.by
  else
    f = math.max(fnum('v' .. lane), fnum('f' .. lane .. ':' .. tenant))
      + (1 - margin) * (1 / math.max(1, weight))
  end
  -- In the eligible runs its rank (equal tags by id); a run not among them comes after every
  -- equal tag, as a newer id does. Pending runs, by their start.
  local n = redis.call('ZRANK', elig[lane + 1], run)
  if not n then n = redis.call('ZCOUNT', elig[lane + 1], '-inf', tag(f)) end
  n = n + redis.call('ZCOUNT', pend[lane + 1], '-inf', '(' .. tag(f))
  -- (Not itself.)
  if redis.call('ZSCORE', pend[lane + 1], run) then n = n - 1 end
  if lane == 1 then
    n = n + redis.call('ZCARD', elig[1]) + redis.call('ZCARD', pend[1])
  end
  return n
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
  if num('wk') > 0 or counted_limit then working = limit end
  local window_from = num('slf')
  if counted_limit then window_from = 4 end
  local phased = 0
  if num('ph') > 0 then phased = 1 end
  return {used, resets, day_used, reserved, num('miss'), tokens, day_tokens,
    num('sl'), num('dlim'), num('stl'), working, num('lt'), phased, num('fx'), num('sx'),
    waiting(), fnum('tn'), window_from, num('dlf'), num('stlf')}
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
  if learned > 0 then redis.call('HSET', key, 'dlim', learned, 'dlf', 3) end
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
  local lower = ARGV[13] == '1'
  if limit == 0 and counting and lower then
    -- Nobody states the limit: the calls counted in the provider's window the refusal closed
    -- (the one its hint ends; the window before ours in proportion to its overlap), but the
    -- refused one, are it (docs/design.md §4.4, limits nobody states), and that window is
    -- full as below; no miss lowers it further.
    local theirs = now + math.max(hint, 0) - win
    local overlap = math.min(math.max((start(w) - theirs) / win, 0), 1)
    local served = used_in(w) + math.floor(used_in(w - 1) * overlap) - 1
    if served >= 1 then
      redis.call('HSET', key, 'cl', served)
      settle()
      spacing()
    end
    lower = false
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
  if lower and limit > 0 then
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
  if s_win > 0 then redis.call('HSET', key, 'sl', s_win, 'slf', ARGV[21]) end
  if s_tok > 0 then redis.call('HSET', key, 'stl', s_tok, 'stlf', ARGV[22]) end
  if s_day > 0 then redis.call('HSET', key, 'dlim', s_day, 'dlf', ARGV[23]) end
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
      redis.call('HSET', key, 'dlim', dlimit, 'dlf', 4)
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
  release_at(now + tonumber(ARGV[12]))
  return {1}
end

-- Ms until this call has room (0: now).
local function wait_now()
  if rolling then return math.max(0, math.ceil(rolling_wait())) end
  if windowed and (not room(w) or (tail and not room(w + 1))) then
    return start(free_from(w + 1)) + guard - now
  end
  return 0
end

-- Count a call now, that wait_now() has room for.
local function admit_now()
  count(w)
  if tail then
    -- Counted in the next window too; the day counts the call once.
    redis.call('HINCRBY', key, 'c:' .. (w + 1), 1)
    redis.call('HINCRBY', key, 't:' .. (w + 1), 1)
    if tlimit > 0 and cost > 0 then redis.call('HINCRBY', key, 'k:' .. (w + 1), cost) end
    keep(start(w + 2))
  end
end

local function full_day()
  return (dlimit > 0 and day_used >= dlimit)
    or (tdlimit > 0 and cost > 0 and day_tokens > 0 and day_tokens + cost > tdlimit)
end

-- Until when (epoch ms) a slot counted now may be used.
local function valid_until()
  if windowed then return start(w + 1) end
  return now + win
end

-- Grant the room there is now to the runs next in line, at most `max`: each slot is counted
-- for its run and kept for it until it comes (or its slot ends).
local function dispatch(max)
  local n = 0
  redis.call('ZREMRANGEBYSCORE', grants, '-inf', now)
  while n < max and waiting() > 0 and not (windowed and tail) do
    local run, e = head()
    if not run then break end
    cost = e.tokens
    if full_day() or wait_now() > 0 then break end
    pop(run, e)
    admit_now()
    redis.call('ZADD', grants, valid_until(), run)
    redis.call('RPUSH', untold, run)
    if redis.call('HGET', shares, 'w') ~= tostring(w) then
      redis.call('DEL', shares)
      redis.call('HSET', shares, 'w', w)
    end
    redis.call('HINCRBY', shares, e.tenant, 1)
    n = n + 1
  end
  if n > 0 then keep_fair() end
  return n
end

-- Ms a waiter with `n` runs ahead of it may expect to wait for its slot.
local function fair_wait(n)
  local per = math.max(limit, 1)
  if rolling then
    return math.max(wait_now(), 1) + math.ceil(n * win / per)
  end
  local left = math.max(0, per - used_in(w))
  if n < left and not tail then return 250 end
  return start(w + 1) + guard - now + math.floor(math.max(0, n - left) / per) * win
end

-- The runs still waiting, then those granted a slot nobody has told yet.
if op == 'dispatch' then
  if not day_full then dispatch(tonumber(ARGV[12])) end
  local told = redis.call('LRANGE', untold, 0, -1)
  redis.call('DEL', untold)
  table.insert(told, 1, tostring(waiting()))
  return told
end

-- A run that will not use its place, or its granted slot (ARGV[12]).
if op == 'leave' then
  local run = ARGV[12]
  local g = redis.call('ZSCORE', grants, run)
  if g then
    redis.call('ZREM', grants, run)
    redis.call('LREM', untold, 0, run)
    if tonumber(g) > now then release_at(now) end
  end
  remove(run)
  return {1}
end

-- Each tenant's slots this window: a flat list of tenant, slots.
if op == 'shares' then
  local out = {}
  if redis.call('HGET', shares, 'w') == tostring(w) then
    local all = redis.call('HGETALL', shares)
    for i = 1, #all, 2 do
      if all[i] ~= 'w' then
        table.insert(out, all[i])
        table.insert(out, all[i + 1])
      end
    end
  end
  return out
end

-- A run asking for itself (ARGV[12..16]: run, tenant, weight, lane, deadline) takes the slot
-- granted to it; while others wait, it takes no other (a continuation asks as nobody).
local who = nil
if ARGV[12] ~= nil and ARGV[12] ~= '' and (op == 'peek' or op == 'admit' or op == 'join') then
  who = {run = ARGV[12], tenant = ARGV[13], weight = tonumber(ARGV[14]),
    lane = tonumber(ARGV[15]), deadline = tonumber(ARGV[16])}
  -- (A grant past its slot is no grant; dispatch sweeps them.)
  local g = redis.call('ZSCORE', grants, who.run)
  if g and tonumber(g) > now then
    if op == 'admit' then redis.call('ZREM', grants, who.run) end
    return {1, 0, tonumber(g) - now}
  end
end

if day_full then
  if op == 'reserve' then return {0, 0, 0} end
  -- A spent day has no turns to wait for: a run joins no queue until the next.
  if op == 'join' then return {2, math.max(dend - now, 1)} end
  return {0, math.max(dend - now, 1)}
end

-- Join the pool's queue: granted a slot now when it is first in line and there is room, else
-- told roughly how long its turn takes.
if op == 'join' then
  enter(who.run, who.tenant, who.weight, who.lane, cost, who.deadline)
  local mine = cost
  dispatch(64)
  cost = mine
  local g = redis.call('ZSCORE', grants, who.run)
  if g then
    redis.call('LREM', untold, 0, who.run)
    return {1, 0, tonumber(g) - now}
  end
  return {0, math.max(1, fair_wait(ahead(who.run, who.tenant, who.weight, who.lane)))}
end

if who and waiting() > 0 then
  return {0, math.max(1, fair_wait(ahead(who.run, who.tenant, who.weight, who.lane)))}
end

if op == 'reserve' then
  -- A reservation ahead of runs waiting their turn would pass them.
  if waiting() > 0 then return {0, 0, 0} end
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
local wait = wait_now()
if wait > 0 then return {0, wait} end
if op == 'admit' then admit_now() end
return {1, 0}
