-- What a tenant's day spent and holds. KEYS: the day's hash and holds. ARGV: most lapsed
-- reservations to release. Returns {spent, reserved} in nano-USD.
sweep(KEYS[1], KEYS[2], tonumber(ARGV[1]))
local spent, reserved = amounts(KEYS[1])
return {spent, reserved}
