-- node.lua: a node's lease and the change feed (redisStore.leases: node),
-- the first script of each of its heartbeats (heartbeat_groups in
-- user/store/store_redis.c). Single server or Sentinel only: it names keys
-- of other nodes and other limits (the config refuses leases: node with a
-- cluster).
--
-- KEYS: nodes (P:nodes, sorted set node -> its lease: the Redis TIME in ms
-- of its last heartbeat), feed (P:feed, sorted set "LIMIT NODE" -> the TIME
-- of the change: NODE, or "-", made it; the fleet's, trimmed here), and this
-- node's inbox (P:node:{NODE}:feed, sorted set limit -> the TIME of its last
-- change by another node: common.lua's notify writes it for the limits this
-- node holds).
-- ARGV: prefix P, node, stale_ms, since (the `now` this node's previous
-- node.lua answered; "0": none), keep_ms (how long the feed keeps a
-- change), ttl_ms (of nodes and feed).
-- Returns {now, held, changed, commands}: held 1 when the node's lease was
-- live (renewed within stale_ms) before this call, else 0 (a new node, or
-- one whose lease lapsed: everything it holds must be sent now); changed
-- the limits the inbox names as changed at or after since, each followed
-- by the TIME of its last change (a change from before the node's last
-- answer for the limit is no news to it), or the integer -1 when the
-- inbox cannot say (no since, since older than the inbox keeps or in the
-- future, or more than FEED_MAX changes): every limit is news.
--
-- A node with leases: node stamps its members with a heartbeat that far
-- in the future (heartbeat.lua's horizon) and sends a limit only when it or
-- its pool changed, so its members never lapse by their own heartbeat
-- while it lives. Its lease does: a node silent for stale_ms is found here
-- by whichever node calls next (at most DEAD_MAX a call, DEAD_CALLS
-- commands of their limits' work), each of its
-- members (P:node:{X}:limits, limit -> its ids there, written by
-- heartbeat.lua) gets the lease's time as its heartbeat, so the next full
-- call of each of those limits lapses it as usual, it leaves the limits'
-- holders and its inbox goes, and the limits' other holders are notified,
-- so they send them at once.

if redis.replicate_commands then redis.replicate_commands() end
--#include common.lua
-- a call handles at most DEAD_MAX lapsed nodes, and stops taking their
-- limits once it ran DEAD_CALLS commands (a limit with many holders
-- notifies each): the rest of a node's limits go at the next call
local DEAD_MAX, DEAD_CALLS, FEED_MAX = 16, 20000, 1000 --[[KT_STORE_FEED_MAX]]
local P, node = ARGV[1], ARGV[2]
local stale, since, keep, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = time_ms()
local prev = tonumber(onkey('ZSCORE', KEYS[1], node))
local held = 0
if prev ~= nil and prev >= now - stale and prev <= now then held = 1 end
call('ZADD', KEYS[1], f0(now), node)
local dead = call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. f0(now - stale), 'WITHSCORES', 'LIMIT', 0, DEAD_MAX)
for i = 1, #dead, 2 do
  if ncall >= DEAD_CALLS then break end
  local x, s = dead[i], dead[i + 1]
  local idx = P .. ':node:{' .. x .. '}:limits'
  local r, done = onkey('HGETALL', idx), {}
  for j = 1, #r, 2 do
    if ncall >= DEAD_CALLS then break end
    local hb = P .. ':pool:{' .. r[j] .. '}:hb'
    for id in string.gmatch(r[j + 1], '%S+') do
      -- XX: a member already lapsed (or gone) stays as it is; a hb
      -- of the wrong type is the limit's own to rebuild
      ncall = ncall + 1
      redis.pcall('ZADD', hb, 'XX', s, id)
    end
    local hk = holders_of(hb)
    onkey('SREM', hk, x)
    notify(P, hk, r[j], '-', now)
    done[#done + 1] = r[j]
  end
  if 2 * #done == #r then
    call('DEL', idx, P .. ':node:{' .. x .. '}:feed')
    call('ZREM', KEYS[1], x)
  else
    -- the rest at the next call (the node stays lapsed in the leases)
    each('HDEL', idx, done, 500)
  end
end
onkey('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. f0(now - keep))
onkey('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. f0(now - keep))
for k = 1, 3 do call('PEXPIRE', KEYS[k], ttl) end
local changed = -1
if since ~= nil and since > 0 and since >= now - keep and since <= now then
  local r = onkey('ZRANGEBYSCORE', KEYS[3], f0(since), '+inf', 'WITHSCORES', 'LIMIT', 0, FEED_MAX + 1)
  if #r <= 2 * FEED_MAX then changed = r end
end
return {now, held, changed, ncall}
