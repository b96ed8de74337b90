-- permit.lua: permits of a strict limit (kt_store_permits in
-- user/store/store_redis.c). Standalone: redis-cli --eval works on this file.
--
-- KEYS[1]: P:strict:{L}.
-- ARGV: every_us, max_reserved, n.
-- Returns {now_us, ahead_us, granted_1, wait_1, ..., granted_n, wait_n}, all
-- integers: every value is an integer below 2^54 (now < 2^53, plus at most
-- (max_reserved + 1) x every <= 8.64e15), which Redis replies unchanged;
-- Lua's doubles hold it exactly below 2^53, within 1 us above (only
-- reservations centuries ahead).
--
-- The permit rule is store.h's. No key: the first permit is due now. A value
-- that is not a plain decimal integer below 2^54 (digits only: TIME is never
-- negative; a hand edit) counts as a permit issued now. The key is SET every
-- call, also when every permit was refused, so an invalid value is replaced
-- by that permit at now rather than read as "now" again by every later call.

if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local every, maxr, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('GET', KEYS[1])
local last = now - every
if v then
  last = now
  if #v <= 17 and string.match(v, '^%d+$') and tonumber(v) < 18014398509481984 then
    last = tonumber(v)
  end
end
local out = {now, 0}
for i = 1, n do
  local nxt = last + every
  local g, w
  if now >= nxt then
    last, g, w = now, 1, 0
  elseif math.floor(math.max(0, last - now) / every) < maxr then
    last, g, w = nxt, 1, nxt - now
  elseif maxr > 0 then
    -- until one reservation has become due: then one more may be made
    g, w = 0, last - maxr * every + 1 - now
  else
    g, w = 0, nxt - now
  end
  out[2 * i + 1], out[2 * i + 2] = g, w
end
out[2] = math.max(0, last - now)
-- last - now + every > 0 here: n >= 1, and a refusal means last is
-- less than every behind now
redis.call('SET', KEYS[1], string.format('%.0f', last), 'PX',
           string.format('%.0f', math.ceil((last - now + every) / 1000) + 1000))
return out
