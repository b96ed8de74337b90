-- heartbeat.lua: the heartbeat of one node for one or more limits (all in
-- one hash slot), kt_store_heartbeat_many in user/store/store_redis.c.
-- Prefixed with common.lua at build time.
--
-- KEYS: N_KEYS (11) per limit, in keyset's order (common.lua), then wt for
-- a weighted limit, dc0..dc7 for a limit with classes, and N_SLOT_KEYS (3)
-- more (claim, seen, sdem) for an in-flight limit.
-- ARGV: first 4 for the call (store.h "Node leases"): the feed key (P:feed;
-- "-" in a cluster, where there is none), this node's index
-- (P:node:{NODE}:limits; "-" with leases: member, and the last two "0"), the horizon (ms: members'
-- heartbeats are stamped that far ahead of TIME, so a quiet node's members
-- stay live; its death is node.lua's to find) and the least TTL of the
-- keys (ms). A full call then notifies (common.lua) the limit's other
-- holders when its answer differs from the one meta held (a join, a
-- lapse, a size, a reserve: every change the nodes must hear; this node
-- has its answer already and need not send the limit again for it), and
-- with leases: node writes this node's member ids into its index and the
-- node into the limit's holders (P:pool:{L}:nodes; out again once it has
-- no members there).
-- ARGV per limit: stale_ms, n, ramp ("" = none), ramp_ttl_ms, hold_ms, fb
-- (this node's fallback rate per member, "%.17g"), pool_rate ("0": equal
-- share), floor_rate, recompute_ms, prev ("agree size live", and " R"
-- when it reserved R > 0: the answer this node's last answered call for
-- the limit returned, sent only when its members, sizes and fb are the
-- same as in that call; else "-"), slots ("node held pool cap demand" for an in-flight limit, see slots();
-- else "-"), weighted ("1": the limit has weights and wt is among its
-- KEYS; "1 F0 C0 F1 C1 ...": and priority classes, each its floor and
-- ceiling, the most important first; "3 F0 C0 ...": peer classes, see
-- peers(); "0 F0 C0 ..." or "2 ...": an in-flight limit's classes, in
-- order or peers; else "0"), then n (id, size) pairs,
-- size "0" meaning "the live count computed here", or with pool_rate > 0 n
-- (id, size, demand) triples, the demand "D" (weight 1), "D W" (weight
-- W, weighted max-min fairness) or "D W K" (and priority class K, 0 the
-- first); D "-1": a dormant member (a cooperative limit's caller not
-- called on its node yet), no demand, no floor and no fallback held.
-- Returns {agree, size, live, reserved} per limit, plus {granted, level
-- ("-1": none), {grant...}, weights (summed over the members sharing by
-- demand)} with pool_rate > 0, and with classes {part, weights} per class
-- (the rate the class was given, its members' weights summed), or {grant,
-- claimed} (whole slots) for an in-flight limit, and with classes {part...}
-- (this node's part of the slots per class); rates as strings (Lua numbers become
-- integers in replies); or the integer 1: "prev still holds" (the steady
-- path), or the string "agree size live[ R][ w]": the answer that holds
-- now (the steady path catching up, below; R its reserve when > 0, w when
-- it acknowledged, writing this node's sizes). After the limits' answers, two more
-- elements: the number of Redis commands the call ran, and its TIME in ms.
--
-- A member is live while its heartbeat is at most stale_ms old (its lease);
-- then it lapses: it moves from hb to lapsed and leaves the live count and
-- the size hash, but for hold_ms more its fallback rate (fb hash) is summed
-- into `reserved`, because its kernel buckets may still admit that much.
-- After that its buckets are closed and it is forgotten. Both moves read
-- only the members concerned (ZRANGEBYSCORE up to the bound). The running
-- reserved sum is recomputed exactly whenever at most RECOUNT members are
-- lapsed (so it neither drifts nor goes negative), and is 0 when none are.
--
-- The steady path: a call in equal share whose members, sizes and fb are
-- those of its last answered call, which sends that call's answer as prev,
-- is answered 1 ("the same") when the full path last wrote that answer into
-- meta (ans), its due time has not come, no member is due to lapse and
-- each of its members is still live, and the live members still number
-- as many (a hand edit, or a node running an older script that does not
-- keep ans, changes that). It only renews its members' heartbeats: 3 reads
-- and a ZADD a member instead of ~18 commands. A full call writes ans
-- (with the reserve while lapsed members are held, " R" after "agree size
-- live" when R > 0: a death held for hold_ms is answered on the steady
-- path too, not by a full call of every node at every heartbeat), and
-- sets due at the next check of the counters (stale_ms; a third of the
-- keys' least TTL when longer: with leases: node, whose nodes send a
-- limit only when it changed, and whose deaths the lapse check finds) or
-- the TTLs' refresh or when the first lapsed member is to be forgotten
-- (the reserve drops), whichever is sooner, so a hand edit or an eviction
-- is still found within that time (stale_ms with member leases); any
-- change to the pool goes through a full call, which rewrites ans.
-- Anything else takes the full path. When ans is not prev (another node
-- changed the pool since this node's last answer) but this node's members
-- already store the sizes a full call would write, that call would only
-- renew them: the path does so and answers ans itself ("catching up",
-- HMGET size more), so the nodes that hear of an agreement reached need
-- not run the full path to learn it. When they store other sizes (a join
-- or a lapse moved the live count), each with a valid counted bucket, the
-- path writes them as the full path's step 4 would, answers from the
-- sizes' largest, and writes that into ans, telling the holders when it
-- changed ("acknowledging", about 10 commands instead of about 40): so a
-- death or a join that every holder of a group must acknowledge costs one
-- full call and cheap acknowledgements.
--
-- TIME is the only clock; replicate_commands makes a write after TIME legal
-- on Redis < 5 (a no-op since 5).

if redis.replicate_commands then redis.replicate_commands() end
--#include common.lua
local RECOUNT = 64
local now = time_ms()
local FEED, NIDX, TTLMIN = ARGV[1], ARGV[2], tonumber(ARGV[4]) or 0
if FEED == '-' then FEED = nil end
-- the prefix P of P:feed: the inboxes and the holders (notify)
local P = FEED and string.sub(FEED, 1, -6)
-- this node's name, from its index's: the feed says who changed a limit
local ME = node_of(NIDX)
-- the longest TTL a call wanted for the feed and for this node's index:
-- trimmed and set once, after the last limit
local feed_ttl, nidx_ttl = 0, 0
-- a member's heartbeat as written (ahead of now with leases: node)
local stamp = f0(now + (tonumber(ARGV[3]) or 0))
-- How long the steady path may answer without a full call's check of the
-- counters: stale_ms, or a third of the keys' least TTL when longer (leases:
-- node: its hand edits and evictions are found within the quiet time
-- anyway, and a death is the lapse check's to find). A node on member
-- leases in the same pool finds a longer due too far ahead and takes the
-- full path, which writes its own.
local function recheck(stale) return math.max(stale, TTLMIN / 3) end
-- the TTL (ms) of the keys of a limit of stale_ms and hold_ms
local function keys_ttl(stale, hold) return math.max((stale + hold) * 3 --[[KT_STORE_EXPIRE_FACTOR]], TTLMIN) end
-- O(pool): every counter from hb, lapsed, size and fb
local function rebuild(K, stale, hold)
  local seen = {}
  for _, z in ipairs({K.hb, K.lapsed}) do
    local r = call('ZRANGE', z, 0, -1, 'WITHSCORES')
    for i = 1, #r, 2 do
      local s = tonumber(r[i + 1])
      if s ~= nil and (seen[r[i]] == nil or s > seen[r[i]][1]) then seen[r[i]] = {s, r[i + 1]} end
    end
  end
  local function map(key)
    local m, r = {}, call('HGETALL', key)
    for i = 1, #r, 2 do m[r[i]] = r[i + 1] end
    return m
  end
  local sz, fbm, gm, wm = map(K.size), map(K.fb), map(K.grant), {}
  if K.wt then wm = map(K.wt); call('DEL', K.wt) end
  local dm = {}
  local r = call('ZRANGE', K.dem, 0, -1, 'WITHSCORES')
  for i = 1, #r, 2 do dm[r[i]] = rate(r[i + 1]) end
  call('DEL', K.hb, K.lapsed, K.size, K.fb, K.counted, K.hist, K.sizes, K.meta, K.grant, K.dem)
  local c = {n = 0, ns = 0, bad = 0, nl = 0, res = 0, nd = 0, gs = 0, sd = 0, sw = 0, nw = 0,
             lvl = -1, lt = 0, lp = -1}
  local hb, lp, szl, fbl, cl, hist, gl, dl, wl = {}, {}, {}, {}, {}, {}, {}, {}, {}
  local function push(l, x, y) l[#l + 1] = x; l[#l + 1] = y end
  for id, s in pairs(seen) do
    if s[1] >= now - stale then
      push(hb, s[2], id)
      c.n = c.n + 1
      -- a grant without a demand may still be in force: keep it counted
      if gm[id] or dm[id] then
        local g, w = rate(gm[id]), weight(wm[id])
        local x = dm[id] or g / w
        push(gl, id, f17(g)); push(dl, x, id)
        local k = klass(wm[id])
        if w ~= 1 or k ~= 0 then
          local v = f17(w)
          if k ~= 0 then v = v .. ' ' .. k end
          push(wl, id, v); c.nw = c.nw + 1
        end
        c.nd, c.gs, c.sd, c.sw = c.nd + 1, c.gs + g, c.sd + x * w, c.sw + w
      end
      local b = bucket(sz[id])
      push(cl, id, b)
      if sz[id] then push(szl, id, sz[id]); c.ns = c.ns + 1 end
      if b == 'x' then c.bad = c.bad + 1 else hist[b] = (hist[b] or 0) + 1 end
      if fbm[id] then push(fbl, id, fbm[id]) end
    elseif s[1] >= now - stale - hold then
      push(lp, s[2], id)
      c.nl = c.nl + 1
      c.res = c.res + rate(fbm[id])
      if fbm[id] then push(fbl, id, fbm[id]) end
    end
  end
  local hl, sl = {}, {}
  for b, v in pairs(hist) do push(hl, b, v); push(sl, b, b) end
  each('ZADD', K.hb, hb, 1000); each('ZADD', K.lapsed, lp, 1000)
  each('HMSET', K.size, szl, 1000); each('HMSET', K.fb, fbl, 1000)
  each('HMSET', K.counted, cl, 1000); each('HMSET', K.hist, hl, 1000)
  each('ZADD', K.sizes, sl, 1000)
  each('HMSET', K.grant, gl, 1000); each('ZADD', K.dem, dl, 1000)
  if K.wt then each('HMSET', K.wt, wl, 1000) end
  return c
end
-- The water level for P over the zset z (dem, or a class's dc) of cnt
-- members whose demands sum to sd and weights to sw (-1: none, everyone
-- fits): the largest lvl with sum min(e, w lvl) <= P, a member's weighted
-- share being w lvl. z is sorted by x = e / w. Walks from both ends at
-- once, CHUNK entries per step, and stops as soon as either side finds
-- it, so it reads O(min(below, above)) entries. Bottom: the level is rem /
-- W (the weights left) once the next x is at least that. Top: with the k
-- largest capped, the level is (P - (sd - A)) / Wk (A their demands, Wk
-- their weights), valid once the next x is at most that. With all
-- weights 1, W and Wk are counts.
local CHUNK = 32
local function walk(K, c, z, cnt, sd, sw, P)
  if cnt == 0 or sd <= P then return -1 end
  local lo, rem, W, hi, A, Wk = 0, P, sw, 0, 0, 0
  while true do
    local r = call('ZRANGE', z, lo, lo + CHUNK - 1, 'WITHSCORES')
    local ws = wts(K, c, r)
    for j = 2, #r, 2 do
      local x, w = tonumber(r[j]), 1
      if ws then w = weight(ws[j / 2]) end
      if x * W >= rem then return rem / W end
      rem, cnt, W, lo = rem - x * w, cnt - 1, W - w, lo + 1
      if cnt == 0 or W <= 0 then return -1 end
    end
    local t = call('ZREVRANGE', z, hi, hi + CHUNK - 1, 'WITHSCORES')
    ws = wts(K, c, t)
    for j = 2, #t, 2 do
      local x, w = tonumber(t[j]), 1
      if ws then w = weight(ws[j / 2]) end
      if hi > 0 then
        local l = (P - (sd - A)) / Wk
        if l >= x then return math.max(l, 0) end
      end
      A, Wk, hi = A + x * w, Wk + w, hi + 1
    end
    if #r == 0 and #t == 0 then return -1 end
  end
end
local function level(K, c, P) return walk(K, c, K.dem, c.nd, c.sd, c.sw, P) end
-- Priority classes (ct: {floor, ceiling} per class, the first the most
-- important). cd: each class's demand and weight summed, kept as members
-- change (meta's cd; csum counts them anew, O(pool)). From them, every
-- call: P goes to the classes in order, each its demand up to its ceiling
-- while what the classes after it are owed of their floors (min(floor,
-- demand)) stays free, and what is left when all fit, less a floor, goes
-- to the classes by weight up to their ceilings. Within a class whose
-- part is short of its demand, weighted max-min at the class's own level:
-- a walk of that class's dc (clv), cached in meta (cls, "level part" per
-- class) while that part moves by at most 1% or a tenth of an equal
-- share, nothing invalidates it and rms has not passed, and walked at
-- most every rms / 4.
local function csum(K, c, nk)
  local r, cd = call('ZRANGE', K.dem, 0, -1, 'WITHSCORES'), {}
  local ws = wts(K, c, r)
  for k = 1, nk do cd[k] = {0, 0} end
  for j = 2, #r, 2 do
    local v = ws and ws[j / 2]
    local w, k = weight(v), math.min(klass(v), nk - 1) + 1
    cd[k][1], cd[k][2] = cd[k][1] + tonumber(r[j]) * w, cd[k][2] + w
  end
  return cd
end
-- dc built anew from dem and wt, O(pool): once, when missing or changed
-- behind the script's back
local function cindex(K, c, nk)
  call('DEL', unpack(K.dc))
  local r, by = call('ZRANGE', K.dem, 0, -1, 'WITHSCORES'), {}
  local ws = wts(K, c, r)
  for k = 1, nk do by[k] = {} end
  for j = 2, #r, 2 do
    local l = by[math.min(klass(ws and ws[j / 2]), nk - 1) + 1]
    l[#l + 1], l[#l + 2] = r[j], r[j - 1]
  end
  for k = 1, nk do each('ZADD', K.dc[k], by[k], 1000) end
  c.ck, c.grew = nk, true
end
local function clv(K, c, nk, A, D, W)
  local cl = {}
  for k = 1, nk do
    cl[k] = {-1, A[k]}
    if A[k] < D[k] then
      cl[k][1] = walk(K, c, K.dc[k], call('ZCARD', K.dc[k]), D[k], W[k], A[k])
      -- the sums drifted past the members: every one of them fits
      if cl[k][1] < 0 then cl[k][1] = 1e15 end
    end
  end
  return cl
end
-- Peer classes (ct.sib: a parent's children): class k's part is
-- clamp(W_k l, min(floor, D_k), min(D_k, ceiling)), l found by bisection
-- from below so the parts never sum past P; floors scaled down when P
-- cannot hold them all.
local function peers(ct, nk, D, W, P)
  local A, lo, cap, sb, hi = {}, {}, {}, 0, 0
  for k = 1, nk do
    cap[k] = math.min(D[k], ct[k][2])
    lo[k] = math.min(ct[k][1], cap[k])
    sb = sb + lo[k]
    if W[k] > 0 then hi = math.max(hi, cap[k] / W[k]) end
  end
  local function at(l)
    local s = 0
    for k = 1, nk do A[k] = math.min(cap[k], math.max(lo[k], W[k] * l)); s = s + A[k] end
    return s
  end
  if sb >= P then
    for k = 1, nk do A[k] = sb > 0 and lo[k] * P / sb or 0 end
    return A
  end
  if at(hi) <= P then return A end
  local l = 0
  for _ = 1, 60 do
    local m = (l + hi) / 2
    if at(m) <= P then l = m else hi = m end
  end
  at(l)
  return A
end
-- Each class's part of P (their demands D, weights W): peers, or in order,
-- each its demand up to its ceiling while what the classes after it are
-- owed of their floors stays free; and what is left.
local function split(ct, nk, D, W, P)
  local A, rem = {}, P
  if ct.sib then
    A = peers(ct, nk, D, W, P)
    for k = 1, nk do rem = rem - A[k] end
    return A, rem
  end
  for k = 1, nk do
    local owed = 0
    for j = k + 1, nk do owed = owed + math.min(ct[j][1], D[j]) end
    A[k] = math.max(0, math.min(D[k], ct[k][2], rem - owed))
    rem = rem - A[k]
  end
  return A, rem
end
-- A member's demand argument ("D", "D W" or "D W K") says it is dormant:
-- D "-1", a cooperative limit's caller not called on its node yet.
local function dormant(v) return string.match(v, '^%S+') == '-1' end
-- Updates dem for this node's members (ARGV i..j, stride 3), the level,
-- and their grants: shrinks first, then growth into free headroom only.
-- ct: the limit's classes (nil: none). Returns the grants in ARGV order.
local function share(K, c, P, flo, rms, i0, i1, ct)
  if c.nd > 0 and c.nd <= RECOUNT then
    c.gs, c.sd, c.sw = 0, 0, 0
    for _, v in ipairs(call('HVALS', K.grant)) do c.gs = c.gs + rate(v) end
    local z = call('ZRANGE', K.dem, 0, -1, 'WITHSCORES')
    local ws = wts(K, c, z)
    for j = 2, #z, 2 do
      local w = 1
      if ws then w = weight(ws[j / 2]) end
      c.sd, c.sw = c.sd + rate(z[j]) * w, c.sw + w
    end
  end
  local own, tenth = {}, 0.1 * P / math.max(c.nd, 1)
  -- classes: their sums (counted anew when missing, or for a small pool),
  -- and the cached levels
  local nk, cl = ct and #ct, nil
  local function cadd(k, e, w, sg)
    local q = c.cd[math.min(k, nk - 1) + 1]
    q[1], q[2] = q[1] + sg * e, q[2] + sg * w
  end
  if ct then
    if not c.cd or #c.cd ~= nk or c.nd <= RECOUNT then c.cd = csum(K, c, nk) end
    local n = 0
    for k = 1, NK do n = n + call('ZCARD', K.dc[k]) end
    if c.ck ~= nk or n ~= c.nd then cindex(K, c, nk) end
    if c.cls then
      cl = {}
      for lv, a in string.gmatch(c.cls, '([^ ,]+) ([^,]+)') do cl[#cl + 1] = {tonumber(lv), tonumber(a)} end
      if #cl ~= nk then cl = nil end
    end
  end
  for i = i0, i1, 3 do
    local id = ARGV[i]
    -- "D", "D W" or "D W K"
    local dv, wv = string.match(ARGV[i + 2], '^(%S+) (.+)$')
    local w, k = 1, 0
    if not dv then dv = ARGV[i + 2] elseif K.wt then w, k = weight(wv), klass(wv) end
    -- a dormant member holds no floor: it asks once it is called
    local dorm = dormant(ARGV[i + 2])
    local e = 0
    if not dorm then e = math.max(rate(dv), flo) end
    local x = e / w
    local old = call('ZSCORE', K.dem, id)
    local cur, ow, ok = nil, 1, 0
    if old then
      if c.nw > 0 then
        local v = call('HGET', K.wt, id)
        ow, ok = weight(v), klass(v)
      end
      local oe = rate(old) * ow
      cur = rate(call('HGET', K.grant, id))
      c.sd, c.sw = c.sd + e - oe, c.sw + w - ow
      -- with classes: the level of the member's class, if it is short
      local lv = c.lvl
      if ct then lv = cl and cl[math.min(k, nk - 1) + 1] and cl[math.min(k, nk - 1) + 1][1] or -1 end
      if ow ~= w or ok ~= k or
         (lv >= 0 and math.abs(math.min(e, w * lv) - math.min(oe, ow * lv)) > tenth) then
        c.inval = true
      end
      if ct then cadd(ok, oe, ow, -1) end
    else
      c.nd, c.sd, c.sw, c.inval = c.nd + 1, c.sd + e, c.sw + w, true
    end
    if ct then cadd(k, e, w, 1) end
    if w ~= 1 or k ~= 0 then
      local v = f17(w)
      if k ~= 0 then v = v .. ' ' .. k end
      if (w ~= ow or k ~= ok or not old) and call('HSET', K.wt, id, v) == 1 then c.nw, c.grew = c.nw + 1, true end
    elseif c.nw > 0 and (ow ~= 1 or ok ~= 0 or not old) then
      c.nw = c.nw - call('HDEL', K.wt, id)
    end
    if (not old or rate(old) ~= x) and call('ZADD', K.dem, x, id) == 1 then c.grew = true end
    if ct then
      local a, b = math.min(ok, nk - 1) + 1, math.min(k, nk - 1) + 1
      if old and a ~= b then call('ZREM', K.dc[a], id) end
      if not old or a ~= b or rate(old) ~= x then call('ZADD', K.dc[b], x, id) end
    end
    own[#own + 1] = {id = id, e = e, w = w, k = k, cur = cur, dorm = dorm}
  end
  if ct then
    local D, W, A, Wt, rem = {}, {}, {}, 0, P
    for k = 1, nk do
      D[k], W[k] = math.max(0, c.cd[k][1]), math.max(0, c.cd[k][2])
      Wt = Wt + W[k]
    end
    A, rem = split(ct, nk, D, W, P)
    rem = math.max(0, rem - flo)
    -- a walk of the pool at most every rms / 4, whatever changed (a fleet
    -- joining changes something every call): a class's level may be that
    -- old, and no grant grows past free headroom meanwhile
    local stale = not cl or now - c.lt >= rms
    for k = 1, nk do
      if not stale and A[k] < D[k] and
         (c.inval or cl[k][1] < 0 or math.abs(A[k] - cl[k][2]) > math.max(0.01 * cl[k][2], tenth)) then
        stale = true
      end
    end
    stale = stale and (not cl or now - c.lt >= rms / 4)
    if stale then cl, c.lt, c.lp = clv(K, c, nk, A, D, W), now, P end
    -- what invalidated the levels was honoured, or waits for the part to
    -- move or rms to pass (save would otherwise date them back to 0)
    c.inval = false
    local out = {}
    c.parts = {}
    for k = 1, nk do
      out[k] = f17(cl[k][1]) .. ' ' .. f17(cl[k][2])
      c.parts[2 * k - 1], c.parts[2 * k] = f17(A[k]), f17(W[k])
    end
    c.cls = table.concat(out, ',')
    for _, m in ipairs(own) do
      local k = math.min(m.k, nk - 1) + 1
      if A[k] < D[k] then
        m.t = math.min(m.e, m.w * math.max(cl[k][1], 0))
      else
        local b = 0
        if W[k] > 0 and Wt > 0 then b = math.max(0, math.min(rem * W[k] / Wt, ct[k][2] - A[k])) / W[k] end
        m.t = m.e + b * m.w
      end
    end
  else
    c.cls, c.cd, c.ck = nil, nil, nil
    if c.sd <= P then
      c.lvl = -1
    elseif c.inval or c.lvl < 0 or math.abs(P - c.lp) > 0.01 * c.lp or now - c.lt >= rms then
      c.lvl, c.lt, c.lp, c.inval = level(K, c, P), now, P, false
    end
    -- everyone fits: the leftover, less a floor, by weight
    local bonus = 0
    if c.lvl < 0 and c.nd > 0 and c.sw > 0 then bonus = math.max(0, P - c.sd - flo) / c.sw end
    for _, m in ipairs(own) do
      if c.lvl < 0 then m.t = m.e + bonus * m.w else m.t = math.min(m.e, m.w * c.lvl) end
    end
  end
  -- dormant: no part of the leftover either (it stays free for callers that wake)
  for _, m in ipairs(own) do
    if m.dorm then m.t = 0 end
  end
  local function set(m, g)
    c.gs = c.gs + g - (m.cur or 0)
    m.g = g
    if g ~= m.cur and call('HSET', K.grant, m.id, f17(g)) == 1 then
      c.grew = true
    end
  end
  for _, m in ipairs(own) do
    if m.cur and m.t < m.cur then set(m, m.t) end
  end
  local out = {}
  for k, m in ipairs(own) do
    if not m.g then
      local free = math.max(0, P - c.gs)
      if m.cur then set(m, math.min(m.t, m.cur + free)) else set(m, math.min(flo, m.t, free)) end
    end
    out[k] = f17(m.g)
  end
  if c.gs < 0 then c.gs = 0 end
  return out
end
-- The part of P for a node of demand d and weight w, weighted max-min
-- fair over the demands in sdem ("D", or "D W": the node's own among
-- them): every demand or its weight x the water level, and what all leave
-- of P shared by weight.
local function fill(K, P, d, w)
  local r, ds, sum, W = call('HVALS', K.sdem), {}, 0, 0
  for i = 1, #r do
    local a, b = string.match(r[i], '^(%S+) ?(%S*)$')
    local v, x = tonumber(a), tonumber(b)
    if v == nil or v < 0 then v = 0 end
    if x == nil or x <= 0 or x > 1e12 then x = 1 end
    ds[#ds + 1], sum, W = {v / x, x}, sum + v, W + x
  end
  if #ds == 0 then return P end
  if sum <= P then return d + (P - sum) * w / W end
  table.sort(ds, function(p, q) return p[1] < q[1] end)
  local rem = P
  for _, e in ipairs(ds) do
    if e[1] * W >= rem then return math.min(d, w * rem / W) end
    rem, W = rem - e[1] * e[2], W - e[2]
  end
  return d
end
-- With classes (ct, nk of them): this node's part of P per class, mine[k]
-- its {demand, weight} in class k. sdem holds every node's "D W
-- D0:W0,D1:W1,..." (one without the list counts in the last class): the
-- classes' parts as split() gives them, then within a class short of its
-- demand weighted max-min over the nodes' demands in it; a class that
-- fits gets its demand and, by weight, what all leave (up to its ceiling).
-- Returns the parts summed, and the parts.
local function fillc(K, P, ct, nk, mine)
  local r, ent, D, W, Wt = call('HVALS', K.sdem), {}, {}, {}, 0
  for k = 1, nk do ent[k], D[k], W[k] = {}, 0, 0 end
  for i = 1, #r do
    local a, b, l = string.match(r[i], '^(%S+) ?(%S*) ?(%S*)$')
    local per = {}
    for dd, ww in string.gmatch(l or '', '([^:,]+):([^,]+)') do per[#per + 1] = {tonumber(dd), tonumber(ww)} end
    if #per ~= nk then
      per = {}
      for k = 1, nk do per[k] = {0, 0} end
      per[nk] = {tonumber(a), tonumber(b) or 1}
    end
    for k = 1, nk do
      local dd, ww = per[k][1], per[k][2]
      if dd == nil or dd < 0 or dd > 1e12 then dd = 0 end
      if ww ~= nil and ww > 0 and ww <= 1e12 then
        ent[k][#ent[k] + 1] = {dd / ww, ww}
        D[k], W[k], Wt = D[k] + dd, W[k] + ww, Wt + ww
      end
    end
  end
  local A, rem = split(ct, nk, D, W, P)
  local parts, total = {}, 0
  rem = math.max(0, rem)
  for k = 1, nk do
    local d, w, p = mine[k][1], mine[k][2], 0
    if w > 0 and W[k] > 0 then
      if D[k] <= A[k] then
        p = d + math.max(0, math.min(rem * W[k] / Wt, ct[k][2] - A[k])) / W[k] * w
      else
        table.sort(ent[k], function(x, y) return x[1] < y[1] end)
        local R, WW, lv = A[k], W[k], nil
        for _, e in ipairs(ent[k]) do
          if e[1] * WW >= R then lv = R / WW; break end
          R, WW = R - e[1] * e[2], WW - e[2]
        end
        p = lv and math.min(d, w * lv) or d
      end
    end
    parts[k], total = p, total + p
  end
  return total, parts
end
-- In-flight limits: the slots this node may fill. sl is "node held pool
-- cap demand [weight [D0:W0,D1:W1,...]]": the node's name, what it may hold now (its open connections
-- or the slots in force in its kernel, the larger), the pool's slots, the
-- most it will take now (-1: no cap; a node that may have lost the store
-- runs on what its kernel holds until every node has claimed again), and
-- its demand (-1: equal parts; else share: demand, its part max-min fair
-- over the nodes' demands, weighted by the nodes' weights (weightBy: its
-- members' summed; 1 when absent), at least one slot). Each
-- node's claim bounds what it can hold until its next heartbeat: the
-- larger of what it holds and what it is granted now. A grant is at most
-- the node's part of the pool (its live members' share, rounded up) and
-- at most what the others' claims leave, so the claims never sum past the
-- pool: a node that joins, or grows, gets only slots that are free, and
-- one whose grant shrank keeps its claim until its connections close. A
-- node silent for stale + hold (its lease and fallback over) is forgotten
-- with its claim. A claim that is no whole number >= 0 (a hand edit)
-- counts as the whole pool until its node rewrites it. Returns the grant
-- and the others' claims summed.
local function slots(K, c, sl, n, stale, hold, ct)
  local node, held, P, cap, d, w, cls = string.match(sl, '^(%S+) (%d+) (%d+) (%-?%d+) (%-?%d+) ?(%S*) ?(%S*)$')
  held, P, cap, d, w = tonumber(held), tonumber(P), tonumber(cap), tonumber(d), tonumber(w)
  if not node then return 0, 0 end
  local dead = call('ZRANGEBYSCORE', K.seen, '-inf', '(' .. f0(now - stale - hold))
  if #dead > 0 then
    each('ZREM', K.seen, dead, 500)
    each('HDEL', K.claim, dead, 500)
    each('HDEL', K.sdem, dead, 500)
  end
  if call('ZADD', K.seen, now, node) == 1 then c.grew = true end
  local others, r = 0, call('HGETALL', K.claim)
  for i = 1, #r, 2 do
    if r[i] ~= node then
      local v = tonumber(r[i + 1])
      if v == nil or v < 0 or v ~= math.floor(v) then v = P end
      others = others + v
    end
  end
  local part = math.ceil(P * n / math.max(c.n, n, 1))
  local parts = nil
  if d >= 0 then
    local dv, mine = f0(d), {}
    if w then dv = dv .. ' ' .. f17(w) else w = 1 end
    if ct and cls and cls ~= '' then
      for dd, ww in string.gmatch(cls, '([^:,]+):([^,]+)') do
        mine[#mine + 1] = {math.max(0, tonumber(dd) or 0), math.max(0, tonumber(ww) or 0)}
      end
      if #mine == #ct then dv = dv .. ' ' .. cls else mine = nil end
    else
      mine = nil
    end
    if call('HSET', K.sdem, node, dv) == 1 then c.grew = true end
    local f = 0
    if mine then
      local p
      f, p = fillc(K, P, ct, #ct, mine)
      parts = {}
      for k = 1, #ct do parts[k] = f17(p[k]) end
    else
      f = fill(K, P, d, w)
    end
    part = math.max(1, math.ceil(f - 1e-9))
  else
    call('HDEL', K.sdem, node)
  end
  local g = math.max(0, math.min(part, P - others))
  if cap >= 0 and g > cap then g = cap end
  if call('HSET', K.claim, node, f0(math.max(held, g))) == 1 then c.grew = true end
  return g, others, parts
end
-- Member id moves from its counted bucket old (false: none yet) to b, the
-- new one counted first, so hist and sizes are never emptied on the way.
-- Answers the HSET of counted (1: a new field).
local function rebucket(K, c, id, old, b)
  count(K, c, b, 1)
  if old then count(K, c, old, -1) end
  return call('HSET', K.counted, id, b)
end
-- agree and size from the sizes' largest (zset sizes) and whether it is
-- the only one, in one read, for n live members of which bad are counted
-- invalid
local function agreement(sizes, bad, n)
  local top = call('ZREVRANGE', sizes, 0, 1)
  local hi, agree = tonumber(top[1]) or 0, 0
  if bad == 0 and #top == 1 and hi == n then agree = 1 end
  return agree, math.max(hi, n)
end
-- The full path for one limit: ARGV[first..] are its members.
local function full(K, first, stale, n, hold, fb, prate, flo, rms, st, sl, ct)
  local a, fresh = first, {}
  local c, ok = load(K)
  local ans0 = c.ans0
  if not ok then c = rebuild(K, stale, hold) end
  -- 1. this node's members heartbeat; one back from lapse leaves the reserve
  for i = 1, n do
    local id = ARGV[a]
    if call('ZADD', K.hb, stamp, id) == 1 then
      c.n = c.n + 1
      c.grew = true
      fresh[id] = true
      if call('ZREM', K.lapsed, id) == 1 then
        c.nl = c.nl - 1
        c.res = c.res - rate(call('HGET', K.fb, id))
      end
    end
    -- a dormant member's bucket has no fallback: none is held for it
    if fb ~= '0' and not (st == 3 and dormant(ARGV[a + 2])) then
      if call('HSET', K.fb, id, fb) == 1 then c.grew = true end
    else
      call('HDEL', K.fb, id)
    end
    a = a + st
  end
  -- 2. live members silent for stale_ms lapse (or die, if silent for hold_ms more too)
  local lapse, forget = now - stale, now - stale - hold
  local gone = call('ZRANGEBYSCORE', K.hb, '-inf', '(' .. f0(lapse), 'WITHSCORES')
  for i = 1, #gone, 2 do
    local id, s = gone[i], gone[i + 1]
    call('ZREM', K.hb, id)
    if c.nd > 0 then undem(K, c, id) end
    c.n = c.n - 1
    count(K, c, call('HGET', K.counted, id) or 'x', -1)
    call('HDEL', K.counted, id)
    c.ns = c.ns - call('HDEL', K.size, id)
    if tonumber(s) >= forget then
      call('ZADD', K.lapsed, s, id)
      c.nl = c.nl + 1
      c.grew = true
      c.res = c.res + rate(call('HGET', K.fb, id))
    else
      call('HDEL', K.fb, id)
    end
  end
  -- 3. lapsed members held for hold_ms are forgotten (none lapsed: no read)
  local dead = {}
  if c.nl > 0 then
    dead = call('ZRANGEBYSCORE', K.lapsed, '-inf', '(' .. f0(forget))
  end
  if #dead > 0 then
    c.nl = c.nl - #dead
    if c.nl > RECOUNT then
      for i = 1, #dead, 500 do
        local v = call('HMGET', K.fb, unpack(dead, i, math.min(i + 499, #dead)))
        for j = 1, #v do c.res = c.res - rate(v[j]) end
      end
    end
    each('ZREM', K.lapsed, dead, 500)
    each('HDEL', K.fb, dead, 500)
  end
  if c.nl <= RECOUNT then
    c.res = 0
    if c.nl > 0 then
      local ids = call('ZRANGE', K.lapsed, 0, -1)
      local v = call('HMGET', K.fb, unpack(ids))
      for j = 1, #v do c.res = c.res + rate(v[j]) end
    end
  end
  -- 4. sizes of this node's members, 0 = the live count now
  for i = first, a - 1, st do
    local id, r = ARGV[i], ARGV[i + 1]
    if r == '0' then r = f0(c.n) end
    local b, old = bucket(r), false
    if not fresh[id] then old = call('HGET', K.counted, id) end
    if old ~= b and rebucket(K, c, id, old, b) == 1 then c.grew = true end
    local added = call('HSET', K.size, id, r)
    c.ns = c.ns + added
    if added == 1 then c.grew = true end
  end
  if c.dirty then c = rebuild(K, stale, hold) end
  -- 5. demand sharing, or an in-flight limit's slots
  local dem, grant, claimed, parts = nil, nil, 0, nil
  if sl ~= '-' then grant, claimed, parts = slots(K, c, sl, n, stale, hold, ct) end
  if prate > 0 then
    dem = share(K, c, math.max(0, prate - c.res), flo, rms, first, a - 1, ct)
  elseif c.nd > 0 then
    for i = first, a - 1, st do undem(K, c, ARGV[i]) end
  end
  -- The keys' TTLs: set when this call may have made a key (a new
  -- member, field or element: c.grew; a rebuild: no exp), when the wanted
  -- TTL is shorter than what is set, or once a third of it has run;
  -- never otherwise (10 PEXPIREs a limit a heartbeat were most of its
  -- cost). Keys so outlive the last heartbeat by 2/3 of the TTL or more.
  local ttl, expire = keys_ttl(stale, hold), false
  if c.n + c.nl > 0 then
    local e = c.exp or 0
    expire = c.grew or e > now + ttl or e - now < ttl * 2 / 3
    if expire then c.exp = now + ttl end
  end
  local agree, size = agreement(K.sizes, c.bad, c.n)
  local o = {agree, size, c.n, f17(c.res)}
  -- the steady path may answer the same until the next check of the
  -- counters or the TTLs' refresh, whichever comes first
  if prate <= 0 and c.n > 0 then
    c.ans = string.format('%d %d %d', o[1], o[2], o[3])
    c.due = math.min(now + recheck(stale), (c.exp or 0) - ttl * 2 / 3)
    -- lapsed members held: their reserve is part of the answer until the
    -- first of them is forgotten, when the full path must run again
    if c.nl > 0 then
      if c.res > 0 then c.ans = c.ans .. ' ' .. o[4] end
      local first = tonumber(call('ZRANGE', K.lapsed, 0, 0, 'WITHSCORES')[2])
      if first then c.due = math.min(c.due, first + stale + hold) end
    end
  end
  save(K, c)
  if expire then
    for _, key in ipairs({K.hb, K.size, K.fb, K.lapsed, K.counted, K.hist, K.sizes, K.meta,
                          K.grant, K.dem}) do
      call('PEXPIRE', key, ttl)
    end
    if K.wt then call('PEXPIRE', K.wt, ttl) end
    for _, key in ipairs(K.dc or {}) do call('PEXPIRE', key, ttl) end
    if sl ~= '-' then
      call('PEXPIRE', K.claim, ttl)
      call('PEXPIRE', K.seen, ttl)
      call('PEXPIRE', K.sdem, ttl)
    end
  end
  local L, hk = limit_of(K.hb), FEED and holders_of(K.hb)
  if FEED and ans0 ~= c.ans then
    notify(P, hk, L, ME, now)
    feed_ttl = math.max(feed_ttl, ttl)
  end
  -- this node among the limit's holders while it has members there
  if NIDX ~= '-' then
    if n > 0 then
      local ids = {}
      for i = first, a - 1, st do ids[#ids + 1] = ARGV[i] end
      onkey('HSET', NIDX, L, table.concat(ids, ' '))
      nidx_ttl = math.max(nidx_ttl, ttl)
      if onkey('SADD', hk, ME) == 1 then call('PEXPIRE', hk, ttl) end
    else
      onkey('HDEL', NIDX, L)
      onkey('SREM', hk, ME)
    end
  end
  if hk and expire then call('PEXPIRE', hk, ttl) end
  if dem then
    o[5], o[6], o[7], o[8] = f17(c.gs), f17(c.lvl), dem, f17(c.sw)
    if ct then o[9] = c.parts end
  elseif grant then
    o[5], o[6] = grant, claimed
    -- with classes, this node's part per class
    if parts then o[7] = parts end
  end
  return o
end
-- The steady path (see the top): 1 when the limit's answer is `prev`, or
-- nil when the full path must run. Its ZADD XX only renews members that
-- are live, which the full path would do first anyway, so falling through
-- after it changes nothing. It reads the limit's KEYS (hb k, size k + 1,
-- counted k + 5, hist k + 6, sizes k + 7, meta k + 8) and ARGV (from a)
-- in place: it runs for every limit of every node at every heartbeat, and
-- each table, number and field costs.
local nows, lapses = stamp, {}
-- Acknowledging (the steady path when this node's stored sizes are not
-- the ones a full call would write, see the top): what the full path's
-- step 4 would do for members that each have a valid stored size,
-- bucket and counted entry, then its answer and notification. diff:
-- {id, size} of the members whose size changes. nil, with nothing
-- written, when a member's counted bucket is missing or invalid (a hand
-- edit): the full path mends it. Answers "agree size live w" (w: sizes
-- written).
local function acknowledge(k, a, live, res, ans, diff)
  local ids = {}
  for j, d in ipairs(diff) do ids[j] = d[1] end
  local cnt = call('HMGET', KEYS[k + 5], unpack(ids))
  for j, d in ipairs(diff) do
    if not cnt[j] or cnt[j] == 'x' or bucket(d[2]) == 'x' then return nil end
  end
  local K, c = {counted = KEYS[k + 5], hist = KEYS[k + 6], sizes = KEYS[k + 7]}, {bad = 0}
  for j, d in ipairs(diff) do
    local b = bucket(d[2])
    -- a bucket that was valid: hist and sizes are never emptied, no key is made
    if b ~= cnt[j] then rebucket(K, c, d[1], cnt[j], b) end
    call('HSET', KEYS[k + 1], d[1], d[2])
  end
  -- a bucket counted below zero: the counters were off, the full path rebuilds
  if c.dirty then return nil end
  -- no bad member (steady checked meta's count)
  local agree, size = agreement(KEYS[k + 7], 0, live)
  -- res: the reserve of ans (" R", or ""), which only a full call changes
  local now_ans = string.format('%d %d %d', agree, size, live) .. res
  if now_ans ~= ans then
    call('HSET', KEYS[k + 8], 'ans', now_ans)
    if FEED then
      notify(P, holders_of(KEYS[k]), limit_of(KEYS[k]), ME, now)
      feed_ttl = math.max(feed_ttl, keys_ttl(tonumber(ARGV[a]), tonumber(ARGV[a + 4])))
    end
  end
  return now_ans .. ' w'
end
local function steady(k, a, n, prev)
  local m = call('HMGET', KEYS[k + 8], 'due', 'ans', 'bad', 'gs')
  local due, stale, ans = tonumber(m[1]), ARGV[a], m[2]
  -- due is at most recheck() ahead when written: further means the clock went back
  if not ans or due == nil or due <= now or due - now > recheck(tonumber(stale)) then return nil end
  -- "agree size live", and the reserve when lapsed members are held
  local ag, size, live, res = string.match(ans, '^([01]) (%d+) (%d+)( ?%S*)$')
  live = tonumber(live)
  -- one the full path could not have written (a hand edit) is its to mend
  if ans ~= prev and (n == 0 or not live or live < 1 or tonumber(size) ~= live and
                      (ag == '1' or tonumber(size) < live)) then
    return nil
  end
  if res ~= '' then
    local r = tonumber(res)
    if not r or not (r > 0 and r < 1e15) then return nil end
  end
  local lapse = lapses[stale]
  if not lapse then
    lapse = '(' .. f0(now - tonumber(stale))
    lapses[stale] = lapse
  end
  if #call('ZRANGEBYSCORE', KEYS[k], '-inf', lapse, 'LIMIT', 0, 1) > 0 then return nil end
  -- members added or removed by anyone but this script's full path (a hand
  -- edit, a node still running an older script) change the live count
  if call('ZCARD', KEYS[k]) ~= live then return nil end
  -- Another node changed the answer since this node's last one (its inbox
  -- named the limit). When this node's members already store the sizes a
  -- full call would write, that call would change nothing but their
  -- heartbeats and answer ans: catching up. Otherwise it would write
  -- their sizes, count them and answer anew: acknowledging.
  local diff = nil
  if ans ~= prev then
    local ids = {}
    for i = a + 12, a + 10 + 2 * n, 2 do ids[#ids + 1] = ARGV[i] end
    local sz = call('HMGET', KEYS[k + 1], unpack(ids))
    for j = 1, n do
      local r = ARGV[a + 11 + 2 * j]
      if r == '0' then r = f0(live) end
      if sz[j] ~= r then
        -- a member without a size, a share by demand (meta's gs) or a
        -- bad member in the counts: the full path
        if not sz[j] or m[4] or tonumber(m[3]) ~= 0 then return nil end
        diff = diff or {}
        diff[#diff + 1] = {ids[j], r}
      end
    end
  end
  for i = a + 12, a + 10 + 2 * n, 2 do
    -- 0: not live, or renewed already in this millisecond (ZSCORE tells)
    if call('ZADD', KEYS[k], 'XX', 'CH', nows, ARGV[i]) ~= 1
       and call('ZSCORE', KEYS[k], ARGV[i]) ~= nows then
      return nil
    end
  end
  if diff then return acknowledge(k, a, live, res, ans, diff) end
  if ans ~= prev then return ans end
  return 1
end
-- one pass per limit: N_KEYS KEYS (+ wt for a weighted limit, + 8 dc with
-- classes, + N_SLOT_KEYS for an in-flight limit) and 12 + n x (2 or 3) ARGV each
local out, a, k = {}, 5, 1
while k <= #KEYS do
  local n, prate, prev, sl = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 6]), ARGV[a + 9], ARGV[a + 10]
  -- "T" or "T F0 C0 F1 C1 ...": T's bit 1 weighted (wt among the KEYS),
  -- bit 2 the classes are peers; the classes' floors and ceilings
  local t1 = tonumber(string.match(ARGV[a + 11], '^%d')) or 0
  local wk, ct = t1 % 2 == 1, nil
  for f, cc in string.gmatch(ARGV[a + 11], ' (%S+) (%S+)') do
    ct = ct or {sib = t1 >= 2}
    ct[#ct + 1] = {rate(f), rate(cc)}
  end
  local st = 2
  if prate > 0 then st = 3 end
  if ARGV[a + 2] ~= '' then call('SET', KEYS[k + 2], ARGV[a + 2], 'PX', ARGV[a + 3]) end
  local o = nil
  if st == 2 and prev ~= '-' and sl == '-' then o = steady(k, a, n, prev) end
  if not o then
    local stale, hold, fb = tonumber(ARGV[a]), tonumber(ARGV[a + 4]), ARGV[a + 5]
    local flo, rms = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
    o = full(keyset(k, sl ~= '-', wk, ct ~= nil and prate > 0), a + 12, stale, n, hold, fb, prate, flo,
             rms, st, sl, ct)
  end
  out[#out + 1] = o
  a = a + 12 + st * n
  k = k + 11 --[[N_KEYS]]
  if wk then k = k + 1 end
  if ct and prate > 0 then k = k + NK end
  if sl ~= '-' then k = k + 3 --[[N_SLOT_KEYS]] end
end
if feed_ttl > 0 then
  call('ZREMRANGEBYSCORE', FEED, '-inf', '(' .. f0(now - 60000 --[[KT_STORE_FEED_KEEP_MS]]))
  call('PEXPIRE', FEED, feed_ttl)
end
if nidx_ttl > 0 then call('PEXPIRE', NIDX, nidx_ttl) end
-- last: the commands this call ran (the store's work, for metrics), and
-- its TIME: a change the inbox names from before it is in these answers
out[#out + 1] = ncall
out[#out + 1] = now
return out
