--[[
  Enqueue one or more messages (one round trip for a whole batch).
  KEYS[1] seq  KEYS[2] queue  KEYS[3] items  KEYS[4] timers  KEYS[5] signal
  KEYS[6] dedup key (optional; single message only)
  ARGV[3] delay ms (0 = visible now)  ARGV[4] bucket ms  ARGV[5] dedup window ms
  ARGV[6..] bodies
  Returns {first_id, count}: ids first_id .. first_id+count-1; {existing_id, 0} on a dedup hit.
]]
local delay = tonumber(ARGV[3])
local bucket_ms = tonumber(ARGV[4])
local n = #ARGV - 5

local bad = wrong_type({KEYS[1], 'string', KEYS[2], 'list', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list', KEYS[6] or KEYS[1], 'string'})
if bad then return corrupt(bad) end
local seq = rcall('GET', KEYS[1])
if seq and not tonumber(seq) then return corrupt(KEYS[1]) end

if KEYS[6] then
  local existing = rcall('GET', KEYS[6])
  if existing then return {existing, 0} end
end

local first = (tonumber(seq) or 0) + 1
local ids = {}
for i = 1, n do ids[i] = fmt(first + i - 1) end
-- Item keys are new by construction; one that exists means seq was overwritten.
for i = 1, n, 1000 do
  local ks = {}
  for j = i, math.min(i + 999, n) do ks[#ks + 1] = item_key(ids[j]) end
  if rcall('EXISTS', unpack(ks)) > 0 then return corrupt(KEYS[1]) end
end

local now = now_ms()
rcall('INCRBY', KEYS[1], n)
if KEYS[6] then rcall('SET', KEYS[6], ids[1], 'PX', ARGV[5]) end
local now_s = fmt(now)
if delay > 0 then
  local at = now + delay
  local at_s = fmt(at)
  for i = 1, n do
    rcall('HSET', item_key(ids[i]), 'b', ARGV[5 + i], 't', now_s, 'd', at_s)
    timer_add(KEYS[4], ids[i], at, bucket_ms)
  end
else
  for i = 1, n do rcall('HSET', item_key(ids[i]), 'b', ARGV[5 + i], 't', now_s) end
  for i = 1, n, 1000 do
    local chunk = {unpack(ids, i, math.min(i + 999, n))}
    rcall('RPUSH', KEYS[2], unpack(chunk))
    rcall('SADD', KEYS[3], unpack(chunk))
  end
  signal(KEYS[5])
end
return {ids[1], n}
