--[[
  Put dead-lettered or in-flight messages back at the tail of the FIFO with receives reset
  to 0 and their age restarted (t = now: retention counts from the requeue). An in-flight
  message's receipt is forgotten, so its current holder can no longer ack it. Either the given ids, or up to `limit` taken from the head of the source.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead  KEYS[6] signal
  ARGV[3] bucket ms  ARGV[4] source ('dead' | 'processing')  ARGV[5] limit
  ARGV[6] SSCAN cursor over processing (when no ids are given)  ARGV[7..] ids
  A grouped dead letter (field g) joins the end of its group instead (released, or held).
  Returns {requeued, examined, next cursor ('0' when the scan is complete)}.
]]
local bucket_ms = tonumber(ARGV[3])
local from_dead = ARGV[4] == 'dead'
local limit = tonumber(ARGV[5])
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list', KEYS[6], 'list'})
if bad then return corrupt(bad) end

local given = #ARGV > 6
local ids
local cursor = '0'
if given then ids = {unpack(ARGV, 7)}
elseif from_dead then ids = rcall('LRANGE', KEYS[5], 0, limit - 1)
else
  -- SSCAN, not SRANDMEMBER: random picks slow down as the set empties and its table goes sparse
  local scan = rcall('SSCAN', KEYS[3], ARGV[6], 'COUNT', limit)
  cursor, ids = scan[1], scan[2]
end
if #ids == 0 then return {0, 0, cursor} end

-- One read per id, which is also its type check, before any write.
local broken, items = {}, {}
for i, id in ipairs(ids) do items[i] = checked(broken, 'HMGET', item_key(id), 't', 'd', 'g', 'r', 'c') end
if #broken > 0 then return corrupt(broken[1]) end
local gs = {}
if from_dead then
  for i = 1, #ids do if items[i][3] then gs[#gs + 1] = items[i][3] end end
  if #gs > 0 then
    bad = group_bad(gs)
    if bad then return corrupt(bad) end
  end
end

-- Which ids are really in the source (and have a message behind them).
local present = {}
if from_dead then
  if given then
    for i, id in ipairs(ids) do present[i] = rcall('LREM', KEYS[5], 1, id) > 0 end
  else
    rcall('LTRIM', KEYS[5], #ids, -1)
    for i = 1, #ids do present[i] = true end
  end
else
  local held = rcall('SMISMEMBER', KEYS[3], unpack(ids))
  for i = 1, #ids do present[i] = held[i] == 1 end
end
local moved, timers, seen, joining = {}, {}, {}, {}
for i, id in ipairs(ids) do
  if present[i] and items[i][1] and not seen[id] then
    seen[id] = items[i]
    if from_dead and items[i][3] then
      joining[#joining + 1] = {id, items[i][3]}
    else
      moved[#moved + 1] = id
      timers[#timers + 1] = from_dead and 0 or (tonumber(items[i][2]) or 0)
    end
  end
end
local groups, order = by_bucket(moved, timers, bucket_ms)
bad = bad_bucket(order)
if bad then return corrupt(bad) end  -- only in-flight ids have timers: nothing is written yet

if not from_dead then
  local out = {}
  for i, id in ipairs(ids) do if present[i] then out[#out + 1] = id end end
  if #out > 0 then rcall('SREM', KEYS[3], unpack(out)) end
  drop_timers(KEYS[4], groups, order)
end
local now_s = fmt(now_ms())
for _, id in ipairs(moved) do
  local ik = item_key(id)
  first_written(ik, seen[id][4], seen[id][5])  -- (n and f: r is reset)
  rcall('HDEL', ik, 'r', 'c', 'd', 'x')
  rcall('HSET', ik, 't', now_s)
end
if #moved > 0 then
  rcall('RPUSH', KEYS[1], unpack(moved))
  rcall('SADD', KEYS[2], unpack(moved))
  signal(KEYS[6])
end
for _, x in ipairs(joining) do
  local ik = item_key(x[1])
  first_written(ik, seen[x[1]][4], seen[x[1]][5])
  rcall('HDEL', ik, 'r', 'c', 'd', 'x', 'j')
  rcall('HSET', ik, 't', now_s)
  if group_join(x[1], x[2]) then signal(KEYS[6]) end
end
return {#moved + #joining, #ids, cursor}
