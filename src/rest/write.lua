-- Extend one rest. KEYS[1]: the rest key.
-- ARGV: 'for' or 'until', ms (a length or an epoch-ms moment), min ms, cap ms, reason.
-- Returns {remaining ms after the write, Redis now in ms}.
local now = now_ms()
local requested = tonumber(ARGV[2])
if ARGV[1] == 'until' then
  requested = requested - now
end
return {extend(KEYS[1], requested, tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], now), now}
