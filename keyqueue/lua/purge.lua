--[[
  Delete up to `limit` messages of one source (their ids and item hashes); the caller loops
  until done so Redis is never blocked long. seq, config and dedup keys are kept.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead
  ARGV[3] bucket ms  ARGV[4] source ('waiting' | 'delayed' | 'dead' | 'processing')
  ARGV[5] limit  ARGV[6] bucket offset (delayed only: buckets already seen that keep ids)
  Returns {deleted, next bucket offset, done (1/0)}.
]]
local bucket_ms = tonumber(ARGV[3])
local source = ARGV[4]
local limit = tonumber(ARGV[5])
local offset = tonumber(ARGV[6])
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list'})
if bad then return corrupt(bad) end

local n = 0
if source == 'waiting' or source == 'dead' then
  local list = source == 'waiting' and KEYS[1] or KEYS[5]
  local ids = rcall('LRANGE', list, 0, limit - 1)
  rcall('LTRIM', list, #ids, -1)
  for _, id in ipairs(ids) do
    if source == 'dead' or rcall('SREM', KEYS[2], id) == 1 then
      rcall('DEL', item_key(id))
      n = n + 1
    end
  end
  return {n, 0, (#ids < limit) and 1 or 0}
elseif source == 'processing' then
  local ids = rcall('SRANDMEMBER', KEYS[3], limit)
  for _, id in ipairs(ids) do
    local ik = item_key(id)
    local d = tonumber(rcall('HGET', ik, 'd') or '0')
    rcall('SREM', KEYS[3], id)
    if d > 0 then timer_del(KEYS[4], id, d, bucket_ms) end
    rcall('DEL', ik)
    n = n + 1
  end
  return {n, 0, (#ids < limit) and 1 or 0}
end

-- delayed: ids in timer buckets that are neither owned nor waiting
local examined = 0
while examined < limit do
  local z = rcall('ZRANGE', KEYS[4], offset, offset)
  if #z == 0 then return {n, offset, 1} end
  local tk = timer_key(z[1])
  if wrong_type({tk, 'set'}) then return corrupt(tk) end
  for _, id in ipairs(rcall('SMEMBERS', tk)) do
    local ik = item_key(id)
    examined = examined + 1
    if rcall('SISMEMBER', KEYS[3], id) == 0 and rcall('SISMEMBER', KEYS[2], id) == 0
       and rcall('HEXISTS', ik, 'd') == 1 then
      rcall('SREM', tk, id)
      rcall('DEL', ik)
      n = n + 1
    end
  end
  if rcall('EXISTS', tk) == 0 then rcall('ZREM', KEYS[4], z[1]) else offset = offset + 1 end
end
return {n, offset, 0}
