-- common.lua: the prelude shared by heartbeat.lua and leave.lua (each has a
-- `--#include common.lua` line where it goes). It only defines local
-- functions; it reads no KEYS or ARGV of its own. keyset(k) names the
-- N_KEYS (11) keys of one limit starting at KEYS[k], all under the limit's
-- hash tag {L} (user/store/store.h): hb, size, ramp, fb, lapsed, counted,
-- hist, sizes, meta, grant, dem; then a weighted limit's wt and, with
-- classes, its dc0..dc7 (nil for the others, so a limit without weights
-- never names a key it does not make:
-- Redis Cluster runs a script during a slot's migration only when all its
-- keys are on one side), and an in-flight limit's heartbeat's N_SLOT_KEYS
-- (3), claim, seen and sdem (nil for the others).
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
--     $K:dem $K:wt , id1 id2
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
--            demand per unit of weight, e / w (weighted max-min fairness
--            is plain max-min fairness over e / w)
--   wt       demand sharing with weights: live id -> its weight ("W"),
--            and its priority class after it ("W K") when the limit has
--            classes, for members other than weight 1 of class 0 only;
--            meta's sw sums the weights of dem's members (a count when
--            none has a weight)
--   dc0..dc7 priority classes (a limit with classes names all
--            KT_STORE_MAX_CLASSES, and leave always does): dem split by
--            class, so a class's own level is a walk of its own members
--            only; meta's ck is the class count they were built for, and
--            they are built anew from dem and wt when it differs or their
--            cardinalities do not sum to dem's
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

-- redis.call, named once (shorter scripts: each connection loads them),
-- and counted: heartbeat.lua answers how many commands it ran
local ncall, rcall = 0, redis.call
local function call(...)
  ncall = ncall + 1
  return rcall(...)
end
-- A command on a key of the change feed or the node leases (node.lua):
-- one found of the wrong type (a hand edit) is dropped and the command run
-- again, so such a key can never stop the heartbeats.
local function onkey(cmd, key, ...)
  ncall = ncall + 1
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    call('DEL', key)
    r = call(cmd, key, ...)
  end
  return r
end
local NK = 8 --[[KT_STORE_MAX_CLASSES]]
local function keyset(k, slots, weighted, classed)
  local K = {hb = KEYS[k], size = KEYS[k + 1], ramp = KEYS[k + 2], fb = KEYS[k + 3],
             lapsed = KEYS[k + 4], counted = KEYS[k + 5], hist = KEYS[k + 6],
             sizes = KEYS[k + 7], meta = KEYS[k + 8], grant = KEYS[k + 9], dem = KEYS[k + 10]}
  k = k + 11 --[[N_KEYS]]
  if weighted then K.wt, k = KEYS[k], k + 1 end
  if classed then
    K.dc = {}
    for j = 1, NK do K.dc[j] = KEYS[k + j - 1] end
    k = k + NK
  end
  if slots then K.claim, K.seen, K.sdem = KEYS[k], KEYS[k + 1], KEYS[k + 2] end
  return K
end
-- a rate or weight as written: every digit a double has
local function f17(x) return string.format('%.17g', x) end
-- a TIME in ms, or a bound of one
local function f0(x) return string.format('%.0f', x) end
-- Redis TIME in ms: the scripts' only clock
local function time_ms()
  local t = call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- the limit L of a key P:pool:{L}:..., and the node N of an index
-- P:node:{N}:limits ("-": none)
local function limit_of(key) return string.match(key, '{(.*)}:%w+$') end
local function node_of(idx) return string.match(idx, ':node:{(.*)}:limits$') or '-' end
-- The nodes with leases: node that hold members of the pool whose hb key
-- is hbk: P:pool:{L}:nodes, a set the full path keeps (heartbeat.lua).
local function holders_of(hbk) return (string.gsub(hbk, ':hb$', ':nodes')) end
-- Node me (or "-") changed limit L's pool answer at now (hk: its holders,
-- holders_of): "LIMIT NODE" goes
-- in the fleet's feed P:feed (read by nodes of earlier releases, and by
-- operators), and L in the inbox P:node:{N}:feed of every other node N
-- holding it, the one N's node.lua reads. A node thus reads only the
-- changes of its own limits: at 10,000 groups a fleet changes more limits
-- a second than any node holds.
local function notify(P, hk, L, me, now)
  local t = f0(now)
  onkey('ZADD', P .. ':feed', t, L .. ' ' .. me)
  for _, x in ipairs(onkey('SMEMBERS', hk)) do
    if x ~= me then
      local box = P .. ':node:{' .. x .. '}:feed'
      -- a new entry may be a new key: node.lua renews the TTL of its own
      if onkey('ZADD', box, t, L) == 1 then call('PEXPIRE', box, 1800000 --[[KT_STORE_QUIET_TTL_MS]]) end
    end
  end
end
local function bucket(v)
  local x = tonumber(v)
  if x == nil or x < 1 or x > 1000000 --[[KT_STORE_MAX_POOL]] or x ~= math.floor(x) then return 'x' end
  return f0(x)
end
local function rate(v)
  local x = tonumber(v)
  if x ~= nil and x >= 0 and x < 1e15 then return x end
  return 0
end
-- A weight as stored or sent ("W", or "W K" with a priority class K): a
-- number in (0, KT_STORE_MAX_WEIGHT]; anything else (a hand edit) weighs 1.
local function weight(v)
  local x = tonumber(string.match(v or '', '^%S+'))
  if x ~= nil and x > 0 and x <= 1000000 --[[KT_STORE_MAX_WEIGHT]] then return x end
  return 1
end
-- The priority class of "W K" (0, the first, without one or when invalid).
local function klass(v)
  local k = tonumber(string.match(v or '', '^%S+ (%S+)$'))
  if k ~= nil and k >= 0 and k < NK and k == math.floor(k) then return k end
  return 0
end
-- The weights of the ids of a ZRANGE ... WITHSCORES reply r, by pair (nil:
-- every weight is 1, wt is empty).
local function wts(K, c, r)
  if c.nw == 0 or #r == 0 then return nil end
  local ids = {}
  for j = 1, #r, 2 do ids[#ids + 1] = r[j] end
  return call('HMGET', K.wt, unpack(ids))
end
local function each(cmd, key, list, step)
  for i = 1, #list, step do
    call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
  end
end
local function load(K)
  local m = call('HMGET', K.meta, 'n', 'ns', 'bad', 'nl', 'res', 'gs', 'sd', 'lvl', 'lt', 'lp',
                      'exp', 'due', 'sw', 'cls', 'cd', 'ck', 'ans')
  -- no meta: a new pool, unless keys of an old one are left (an eviction,
  -- a hand edit); one probe says, instead of counting each (a fleet's
  -- start is mostly this)
  local bare = true
  for i = 1, 17 do if m[i] then bare = false; break end end
  if bare then
    local ks = {K.hb, K.size, K.counted, K.hist, K.sizes, K.lapsed, K.grant, K.dem}
    if K.wt then ks[#ks + 1] = K.wt end
    if call('EXISTS', unpack(ks)) == 0 then
      return {n = 0, ns = 0, bad = 0, nl = 0, res = 0, gs = 0, sd = 0, sw = 0, lvl = -1, lt = 0, lp = -1,
              shared = false, steady = false, nd = 0, nw = 0}, true
    end
  end
  local c = {n = tonumber(m[1]) or 0, ns = tonumber(m[2]) or 0, bad = tonumber(m[3]) or 0,
             nl = tonumber(m[4]) or 0, res = tonumber(m[5]) or 0,
             gs = tonumber(m[6]), sd = tonumber(m[7]), lvl = tonumber(m[8]) or -1,
             lt = tonumber(m[9]) or 0, lp = tonumber(m[10]) or -1, exp = tonumber(m[11]),
             shared = m[6] ~= false, steady = m[12] ~= false, nd = call('ZCARD', K.dem),
             sw = tonumber(m[13]), nw = 0, cls = m[14] ~= '' and m[14] or nil,
             ck = tonumber(m[16]), ans0 = m[17] or nil}
  if c.ck and (c.ck < 2 or c.ck > NK or c.ck ~= math.floor(c.ck)) then c.ck = nil end
  if K.wt then c.nw = call('HLEN', K.wt) end
  -- classes: "D W" per class (heartbeat.lua's csum), unless malformed
  if m[15] and m[15] ~= '' then
    c.cd = {}
    for d, w in string.gmatch(m[15], '([^ ,]+) ([^,]+)') do
      d, w = tonumber(d), tonumber(w)
      if not d or not w then c.cd = nil; break end
      c.cd[#c.cd + 1] = {d, w}
    end
  end
  local nv = call('HLEN', K.hist)
  local ok = call('ZCARD', K.hb) == c.n and call('HLEN', K.counted) == c.n
    and call('HLEN', K.size) == c.ns and c.ns <= c.n
    and call('ZCARD', K.lapsed) == c.nl and call('ZCARD', K.sizes) == nv
    and c.bad >= 0 and c.bad + nv <= c.n and c.res >= 0 and c.res < 1e30
    and call('HLEN', K.grant) == c.nd and c.nd <= c.n and c.nw <= c.nd
    -- a limit that no longer names wt (its weights dropped by a reload)
    -- weighs every member 1: a sum of weights that is not the count is
    -- from before, and is rebuilt
    and (K.wt ~= nil or c.nd == 0 or c.sw == c.nd)
    and (c.nd == 0 or (c.gs ~= nil and c.sd ~= nil and c.gs >= 0 and c.gs < 1e30
                       and c.sd >= 0 and c.sd < 1e30 and c.sw ~= nil and c.sw > 0 and c.sw < 1e30))
  if c.nd == 0 then c.gs, c.sd, c.sw = 0, 0, 0 end
  if ok and nv <= 32 then
    local sum = 0
    for _, v in ipairs(call('HVALS', K.hist)) do sum = sum + (tonumber(v) or -1e9) end
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
  local v = call('HINCRBY', K.hist, b, d)
  if v <= 0 then
    call('HDEL', K.hist, b)
    call('ZREM', K.sizes, b)
    if v < 0 then c.dirty = true end
  elseif v == d then
    call('ZADD', K.sizes, b, b)
    c.grew = true
  end
end
-- a live member stops sharing by demand (lapse, leave, equal mode)
local function undem(K, c, id)
  local x = call('ZSCORE', K.dem, id)
  if x then
    local w, k = 1, 0
    if c.nw > 0 then
      local v = call('HGET', K.wt, id)
      w, k = weight(v), klass(v)
      c.nw = c.nw - call('HDEL', K.wt, id)
    end
    local q = c.cd and c.cd[math.min(k, #c.cd - 1) + 1]
    if q then q[1], q[2] = q[1] - rate(x) * w, q[2] - w end
    call('ZREM', K.dem, id)
    if K.dc and c.ck then call('ZREM', K.dc[math.min(k, c.ck - 1) + 1], id) end
    c.nd, c.sd, c.sw, c.inval = c.nd - 1, c.sd - rate(x) * w, c.sw - w, true
    c.gs = c.gs - rate(call('HGET', K.grant, id))
    call('HDEL', K.grant, id)
  end
end
local function cdtext(cd)
  if not cd then return '' end
  local t = {}
  for k, q in ipairs(cd) do t[k] = f17(q[1]) .. ' ' .. f17(q[2]) end
  return table.concat(t, ',')
end
-- c.ans and c.due (heartbeat.lua's steady path): written when set, else
-- removed if load saw them, so a caller that sets neither (leave.lua) ends
-- the steady path until the next full heartbeat.
local function save(K, c)
  if c.nl == 0 or c.res < 0 then c.res = 0 end
  if c.nd <= 0 or c.gs < 0 then c.gs = 0 end
  if c.nd <= 0 or c.sd < 0 then c.sd = 0 end
  if c.nd <= 0 or c.sw < 0 then c.sw = 0 end
  if c.inval then c.lt = 0 end
  if c.n + c.nl > 0 then
    local f = {'n', c.n, 'ns', c.ns, 'bad', c.bad, 'nl', c.nl, 'res', f17(c.res),
               'exp', f0(c.exp or 0)}
    if c.ans then
      f[#f + 1], f[#f + 2], f[#f + 3], f[#f + 4] = 'ans', c.ans, 'due', f0(c.due)
    elseif c.steady then
      call('HDEL', K.meta, 'ans', 'due')
    end
    call('HMSET', K.meta, unpack(f))
    if c.nd > 0 then
      call('HMSET', K.meta, 'gs', f17(c.gs), 'sd', f17(c.sd),
                 'sw', f17(c.sw), 'cls', c.cls or '', 'cd', cdtext(c.cd), 'ck', c.ck or '',
                 'lvl', f17(c.lvl), 'lt', f0(c.lt),
                 'lp', f17(c.lp))
    elseif c.shared then -- written together: gs tells
      call('HDEL', K.meta, 'gs', 'sd', 'sw', 'cls', 'cd', 'ck', 'lvl', 'lt', 'lp')
    end
  else
    call('DEL', K.meta)
  end
end
