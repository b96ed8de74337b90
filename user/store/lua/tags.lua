-- tags.lua: the tag exchange (kt_store_tag_exchange in user/store/store_redis.c).
-- Standalone: redis-cli --eval works on this file.
--
-- KEYS[1]: the tag limit's stream.
-- ARGV: node, last id read ('' on the first call), retention ms, entries to
-- read at most, then the node's report chunks.
-- Each chunk is one stream entry {n: node, h: chunk}, the stream trimmed to
-- the retention on Redis's clock. Then the entries after `last`, other
-- nodes' only. Returns {new last id, 1 if there may be more, chunk...}. A
-- first call reads nothing and starts after the newest entry: a node joining
-- later is not charged for hits before it.

if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local node, last, keep, count = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local minid = string.format('%.0f', math.max(0, now - keep))
for i = 5, #ARGV do
  redis.call('XADD', KEYS[1], 'MINID', '~', minid, '*', 'n', node, 'h', ARGV[i])
end
if #ARGV >= 5 then redis.call('PEXPIRE', KEYS[1], keep * 2) end
if last == '' then
  local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  return {top[1] and top[1][1] or '0-0', 0}
end
local r = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', count)
local out = {last, #r >= count and 1 or 0}
for _, e in ipairs(r) do
  out[1] = e[1]
  local f, from, h = e[2], nil, nil
  for j = 1, #f - 1, 2 do
    if f[j] == 'n' then from = f[j + 1] elseif f[j] == 'h' then h = f[j + 1] end
  end
  if from ~= node and h then out[#out + 1] = h end
end
return out
