-- Shared by the rest scripts: Redis time and the extend-only write.

-- Time comes from Redis so that every replica measures rests on one clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Make `key` rest for `requested` ms (clamped to [min_ms, cap_ms]) unless it already rests at least
-- that long: a rest never gets shorter. Returns the remaining ms after the write.
local function extend(key, requested, min_ms, cap_ms, reason, now)
  if requested > cap_ms then requested = cap_ms end
  if requested < min_ms then requested = min_ms end
  local current = redis.call('PTTL', key)
  if current >= requested then
    return current
  end
  local value = '{"reason":' .. cjson.encode(reason) .. ',"set_at_ms":' .. string.format('%d', now) .. '}'
  redis.call('SET', key, value, 'PX', requested)
  return requested
end
