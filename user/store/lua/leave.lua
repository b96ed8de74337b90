-- leave.lua: members leave one limit's pool (kt_store_leave in
-- user/store/store_redis.c). Prefixed with common.lua at build time.
--
-- KEYS: N_KEYS (11) of one limit, in keyset's order (common.lua), its wt
-- and its dc0..dc7 (kt_store_leave always names them: a limit may have
-- weights and classes).
-- Not in a cluster, two more KEYS: the feed and this node's index
-- (node.lua; P:node:{-}:limits with leases: member): the limit's other
-- holders are notified (common.lua: quiet nodes that stay hear of it at
-- once), and it goes out of the index and this node out of its holders
-- (the next full call writes both again).
-- ARGV: the ids that leave.
-- Returns how many of them were live or lapsed. With consistent counters it
-- keeps them exact; otherwise it only removes the ids and drops meta, so the
-- next heartbeat rebuilds.

if redis.replicate_commands then redis.replicate_commands() end
--#include common.lua
local K = keyset(1, false, #KEYS > 11 --[[N_KEYS]], #KEYS > 12)
local c, ok = load(K)
local n = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if call('ZREM', K.hb, id) == 1 then
    n = n + 1
    c.n = c.n - 1
    if ok then
      count(K, c, call('HGET', K.counted, id) or 'x', -1)
      undem(K, c, id)
    end
  elseif call('ZREM', K.lapsed, id) == 1 then
    n = n + 1
    c.nl = c.nl - 1
    c.res = c.res - rate(call('HGET', K.fb, id))
  end
  call('HDEL', K.counted, id)
  c.ns = c.ns - call('HDEL', K.size, id)
  call('HDEL', K.fb, id)
  call('ZREM', K.dem, id)
  call('HDEL', K.grant, id)
  if K.wt then call('HDEL', K.wt, id) end
end
if ok and not c.dirty then save(K, c) else call('DEL', K.meta) end
if #KEYS >= 22 then
  local L, me, hk = limit_of(K.hb), node_of(KEYS[22]), holders_of(K.hb)
  if n > 0 then notify(string.sub(KEYS[21], 1, -6), hk, L, me, time_ms()) end
  onkey('HDEL', KEYS[22], L)
  if me ~= '-' then onkey('SREM', hk, me) end
end
return n
