--[[
  Enqueue one or more messages (one round trip for a whole batch).
  KEYS[1] seq  KEYS[2] queue  KEYS[3] items  KEYS[4] timers  KEYS[5] signal  KEYS[6] config
  KEYS[7] dedup key (optional; single message only)
  ARGV[3] delay ms (0 = visible now)  ARGV[4] bucket ms  ARGV[5] dedup window ms
  ARGV[6..] bodies
  Returns {first_id, count, config_missing}: ids first_id .. first_id+count-1; {existing_id, 0,
  config_missing} on a dedup hit. config_missing (1/0) tells the client its config hash is
  gone (Redis lost its data), so it can restore its settings and registration: no extra trip.
]]
local delay = tonumber(ARGV[3])
local bucket_ms = tonumber(ARGV[4])
local n = #ARGV - 5
local dedup = KEYS[7]
local lost = rcall('EXISTS', KEYS[6]) == 0 and 1 or 0

-- Every key is type-checked (by the reads below or TYPE) before the first write.
local bad = {}
local seq = checked(bad, 'GET', KEYS[1])
local tokens = 1
if delay == 0 then tokens = checked(bad, 'LLEN', KEYS[5]) end
local existing = dedup and checked(bad, 'GET', dedup)
if #bad > 0 then return corrupt(bad[1]) end
local wrong = delay > 0 and wrong_type({KEYS[4], 'zset'}) or wrong_type({KEYS[2], 'list', KEYS[3], 'set'})
if wrong then return corrupt(wrong) end
if seq and not tonumber(seq) then return corrupt(KEYS[1]) end
if existing then return {existing, 0, lost} end

local first = (tonumber(seq) or 0) + 1
if n == 1 and delay == 0 then
  -- The common case, kept lean: Lua overhead, not Redis, dominates a one-message call.
  local id = fmt(first)
  local ik = BASE .. 'item:' .. id
  if rcall('EXISTS', ik) == 1 then return corrupt(KEYS[1]) end
  local body = ARGV[6]
  local now_s = fmt(now_ms())
  rcall('INCR', KEYS[1])
  if dedup then rcall('SET', dedup, id, 'PX', ARGV[5]) end
  if #body <= CHUNK then rcall('HSET', ik, 't', now_s, 'b', body)
  else rcall('HSET', ik, unpack(body_fields({'t', now_s}, body))) end
  rcall('RPUSH', KEYS[2], id)
  rcall('SADD', KEYS[3], id)
  if tokens == 0 then rcall('RPUSH', KEYS[5], '1') end
  return {id, 1, lost}
end
-- Item keys are new by construction; one that exists means seq was overwritten.
for i = 1, n, 1000 do
  local ks = {}
  for j = i, math.min(i + 999, n) do ks[#ks + 1] = item_key(fmt(first + j - 1)) end
  if rcall('EXISTS', unpack(ks)) > 0 then return corrupt(KEYS[1]) end
end

local now_s = fmt(now_ms())
rcall('INCRBY', KEYS[1], n)
if dedup then rcall('SET', dedup, fmt(first), 'PX', ARGV[5]) end
if delay > 0 then
  local at = tonumber(now_s) + delay
  for i = 1, n do
    local id = fmt(first + i - 1)
    rcall('HSET', item_key(id), unpack(body_fields({'t', now_s, 'd', fmt(at)}, ARGV[5 + i])))
    timer_add(KEYS[4], id, at, bucket_ms)
  end
  return {fmt(first), n, lost}
end
for i = 1, n, 1000 do
  local ids = {}
  for j = i, math.min(i + 999, n) do
    local id = fmt(first + j - 1)
    ids[#ids + 1] = id
    rcall('HSET', item_key(id), unpack(body_fields({'t', now_s}, ARGV[5 + j])))
  end
  rcall('RPUSH', KEYS[2], unpack(ids))
  rcall('SADD', KEYS[3], unpack(ids))
end
if tokens == 0 then rcall('RPUSH', KEYS[5], '1') end
return {fmt(first), n, lost}
