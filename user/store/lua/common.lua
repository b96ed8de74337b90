-- common.lua: the prelude shared by heartbeat.lua and leave.lua (each has a
-- `--#include common.lua` line where it goes). It only defines local
-- functions; it reads no KEYS or ARGV of its own. keyset(k) names the
-- N_KEYS (11) keys of one limit starting at KEYS[k], all under the limit's
-- hash tag {L} (user/store/store.h): hb, size, ramp, fb, lapsed, counted,
-- hist, sizes, meta, grant, dem; an in-flight limit's heartbeat has
-- N_SLOT_KEYS (3) more, claim, seen and sdem (nil for the others).
--
-- How these files get into the programs: the build (Makefile, rule for
-- $(BUILD)/gen/kt_lua.h) runs scripts/lua-embed.sh over user/store/lua/*.lua.
-- Each file becomes a C string (KT_LUA_HEARTBEAT, ...) for
-- user/store/store_redis.c, which SCRIPT LOADs them. On the way:
--   - a `--#include common.lua` line is replaced by this file;
--   - comment lines (first non-blank characters `--`) and empty lines are
--     dropped, so these comments are never sent to Redis;
--   - `NUMBER --[[NAME]]` becomes NUMBER, and the build fails unless the C
--     constant NAME (store.h, store_redis.c) equals NUMBER.
-- The same text, ready for redis-cli --eval, is written to $(BUILD)/lua/:
--   K='P:pool:{L}'; redis-cli --eval build/lua/leave.lua $K:hb $K:size \
--     $K:ramp $K:fb $K:lapsed $K:counted $K:hist $K:sizes $K:meta $K:grant \
--     $K:dem , id1 id2
--
-- The answer comes from counters kept as members join, lapse, return, die
-- and leave, so a call costs O(this node's members + members that just
-- lapsed or died) plus O(log pool), never a pass over the pool:
--   counted  live id -> the size bucket it is counted in: its stored size
--            (what the heartbeat wrote; a hand edit of size is not seen
--            until that member's next heartbeat) or 'x' when invalid or
--            missing
--   hist     bucket -> number of live members counted in it
--   sizes    zset of the buckets in hist (score = size), for the largest
--   meta     n live, ns live with a size entry, bad live counted 'x',
--            nl lapsed, res sum of the lapsed members' fallback rates,
--            exp when the keys' TTLs last set run out (TIME ms); ans
--            ("agree size live") and due (TIME ms) for heartbeat.lua's
--            steady path: the answer a call would give, valid until due;
--            for demand sharing gs (grants summed), sd (dem scores summed)
--            and the cached level lvl/lt/lp
--   grant, dem  demand sharing: live id -> grant, live id -> effective
--            demand
--   claim, seen, sdem  in-flight limits (heartbeat.lua's slots): node ->
--            the slots it may hold until its next heartbeat, node -> its
--            last heartbeat (TIME ms), node -> its demand (share: demand)
-- load() checks the counters against the cardinalities, O(1) (and that hist
-- sums to the valid live members when it has at most 32 buckets); a mismatch
-- means someone else changed the keys (hand edit, eviction, partial expiry)
-- and the heartbeat rebuilds everything from hb, lapsed, size and fb,
-- O(pool), once. A stored size that is not an integer in
-- 1..KT_STORE_MAX_POOL counts as a member that does not agree, never as an
-- error; a stored fallback rate that is not a finite number >= 0 is reserved
-- as 0. each() is chunked: unpack runs on Lua's C stack, which is limited.

local function keyset(k, slots)
  local K = {hb = KEYS[k], size = KEYS[k + 1], ramp = KEYS[k + 2], fb = KEYS[k + 3],
             lapsed = KEYS[k + 4], counted = KEYS[k + 5], hist = KEYS[k + 6],
             sizes = KEYS[k + 7], meta = KEYS[k + 8], grant = KEYS[k + 9], dem = KEYS[k + 10]}
  if slots then K.claim, K.seen, K.sdem = KEYS[k + 11], KEYS[k + 12], KEYS[k + 13] end
  return K
end
local function bucket(v)
  local x = tonumber(v)
  if x == nil or x < 1 or x > 1000000 --[[KT_STORE_MAX_POOL]] or x ~= math.floor(x) then return 'x' end
  return string.format('%d', x)
end
local function rate(v)
  local x = tonumber(v)
  if x ~= nil and x >= 0 and x < 1e15 then return x end
  return 0
end
local function each(cmd, key, list, step)
  for i = 1, #list, step do
    redis.call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
  end
end
local function load(K)
  local m = redis.call('HMGET', K.meta, 'n', 'ns', 'bad', 'nl', 'res', 'gs', 'sd', 'lvl', 'lt', 'lp',
                      'exp', 'due')
  local c = {n = tonumber(m[1]) or 0, ns = tonumber(m[2]) or 0, bad = tonumber(m[3]) or 0,
             nl = tonumber(m[4]) or 0, res = tonumber(m[5]) or 0,
             gs = tonumber(m[6]), sd = tonumber(m[7]), lvl = tonumber(m[8]) or -1,
             lt = tonumber(m[9]) or 0, lp = tonumber(m[10]) or -1, exp = tonumber(m[11]),
             shared = m[6] ~= false, steady = m[12] ~= false, nd = redis.call('ZCARD', K.dem)}
  local nv = redis.call('HLEN', K.hist)
  local ok = redis.call('ZCARD', K.hb) == c.n and redis.call('HLEN', K.counted) == c.n
    and redis.call('HLEN', K.size) == c.ns and c.ns <= c.n
    and redis.call('ZCARD', K.lapsed) == c.nl and redis.call('ZCARD', K.sizes) == nv
    and c.bad >= 0 and c.bad + nv <= c.n and c.res >= 0 and c.res < 1e30
    and redis.call('HLEN', K.grant) == c.nd and c.nd <= c.n
    and (c.nd == 0 or (c.gs ~= nil and c.sd ~= nil and c.gs >= 0 and c.gs < 1e30
                       and c.sd >= 0 and c.sd < 1e30))
  if c.nd == 0 then c.gs, c.sd = 0, 0 end
  if ok and nv <= 32 then
    local sum = 0
    for _, v in ipairs(redis.call('HVALS', K.hist)) do sum = sum + (tonumber(v) or -1e9) end
    ok = sum == c.n - c.bad
  end
  return c, ok
end
-- a live member enters (d = 1) or leaves (d = -1) bucket b
local function count(K, c, b, d)
  if b == 'x' then
    c.bad = c.bad + d
    if c.bad < 0 then c.dirty = true end
    return
  end
  local v = redis.call('HINCRBY', K.hist, b, d)
  if v <= 0 then
    redis.call('HDEL', K.hist, b)
    redis.call('ZREM', K.sizes, b)
    if v < 0 then c.dirty = true end
  elseif v == d then
    redis.call('ZADD', K.sizes, b, b)
    c.grew = true
  end
end
-- a live member stops sharing by demand (lapse, leave, equal mode)
local function undem(K, c, id)
  local e = redis.call('ZSCORE', K.dem, id)
  if e then
    redis.call('ZREM', K.dem, id)
    c.nd, c.sd, c.inval = c.nd - 1, c.sd - rate(e), true
    c.gs = c.gs - rate(redis.call('HGET', K.grant, id))
    redis.call('HDEL', K.grant, id)
  end
end
-- c.ans and c.due (heartbeat.lua's steady path): written when set, else
-- removed if load saw them, so a caller that sets neither (leave.lua) ends
-- the steady path until the next full heartbeat.
local function save(K, c)
  if c.nl == 0 or c.res < 0 then c.res = 0 end
  if c.nd <= 0 or c.gs < 0 then c.gs = 0 end
  if c.nd <= 0 or c.sd < 0 then c.sd = 0 end
  if c.inval then c.lt = 0 end
  if c.n + c.nl > 0 then
    local f = {'n', c.n, 'ns', c.ns, 'bad', c.bad, 'nl', c.nl, 'res', string.format('%.17g', c.res),
               'exp', string.format('%.0f', c.exp or 0)}
    if c.ans then
      f[#f + 1], f[#f + 2], f[#f + 3], f[#f + 4] = 'ans', c.ans, 'due', string.format('%.0f', c.due)
    elseif c.steady then
      redis.call('HDEL', K.meta, 'ans', 'due')
    end
    redis.call('HMSET', K.meta, unpack(f))
    if c.nd > 0 then
      redis.call('HMSET', K.meta, 'gs', string.format('%.17g', c.gs), 'sd', string.format('%.17g', c.sd),
                 'lvl', string.format('%.17g', c.lvl), 'lt', string.format('%.0f', c.lt),
                 'lp', string.format('%.17g', c.lp))
    elseif c.shared then -- written together: gs tells
      redis.call('HDEL', K.meta, 'gs', 'sd', 'lvl', 'lt', 'lp')
    end
  else
    redis.call('DEL', K.meta)
  end
end
