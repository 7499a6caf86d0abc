--[[
  Put dead-lettered or in-flight messages back at the tail of the FIFO with receives reset
  to 0. An in-flight message's receipt is forgotten, so its current holder can no longer
  ack it. Either the given ids, or up to `limit` taken from the head of the source.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead  KEYS[6] signal
  ARGV[3] bucket ms  ARGV[4] source ('dead' | 'processing')  ARGV[5] limit  ARGV[6..] ids
  Returns {requeued, examined}.
]]
local bucket_ms = tonumber(ARGV[3])
local from_dead = ARGV[4] == 'dead'
local limit = tonumber(ARGV[5])
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list', KEYS[6], 'list'})
if bad then return corrupt(bad) end

local ids
if #ARGV > 5 then ids = {unpack(ARGV, 6)}
elseif from_dead then ids = rcall('LRANGE', KEYS[5], 0, limit - 1)
else ids = rcall('SRANDMEMBER', KEYS[3], limit) end

local timers = {}
local checks = {}
for i, id in ipairs(ids) do
  local ik = item_key(id)
  if wrong_type({ik, 'hash'}) then return corrupt(ik) end
  if not from_dead then
    timers[i] = tonumber(rcall('HGET', ik, 'd') or '0')
    if timers[i] > 0 then
      checks[#checks + 1] = timer_key(bucket_of(timers[i], bucket_ms)); checks[#checks + 1] = 'set'
    end
  end
end
bad = wrong_type(checks)
if bad then return corrupt(bad) end

local n = 0
for i, id in ipairs(ids) do
  local ik = item_key(id)
  local removed
  if from_dead then removed = rcall('LREM', KEYS[5], 1, id) else removed = rcall('SREM', KEYS[3], id) end
  if removed > 0 and rcall('EXISTS', ik) == 1 then
    if not from_dead and timers[i] > 0 then timer_del(KEYS[4], id, timers[i], bucket_ms) end
    rcall('HDEL', ik, 'r', 'c', 'd')
    make_waiting(KEYS[1], KEYS[2], id)
    n = n + 1
  end
end
if n > 0 then signal(KEYS[6]) end
return {n, #ids}
