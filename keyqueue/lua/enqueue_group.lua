--[[
  Enqueue messages of one group (one round trip for a batch): each joins the end of its group,
  released to the FIFO while the group has fewer released messages than group_concurrency,
  else held; a delayed one joins when it falls due (the reaper), not before.
  KEYS[1] seq  KEYS[2] queue  KEYS[3] items  KEYS[4] timers  KEYS[5] signal  KEYS[6] config
  KEYS[7] counters  KEYS[8] dedup key (optional; single message only)
  ARGV[3] delay ms (0 = now)  ARGV[4] bucket ms  ARGV[5] dedup window ms
  ARGV[6] bytes per body field (body_fields)  ARGV[7] group  ARGV[8] '1' when each body is
  followed by its attributes (field a, opaque bytes; '' = none), else ''  ARGV[9..] bodies
  Returns {first_id, count, config_missing}, or {existing_id, 0, config_missing} on a dedup hit.
]]
local delay = tonumber(ARGV[3])
local bucket_ms = tonumber(ARGV[4])
local chunk = tonumber(ARGV[6])
local g = ARGV[7]
local step = ARGV[8] == '1' and 2 or 1
local n = (#ARGV - 8) / step
local dedup = KEYS[8]

if n == 1 and delay == 0 then
  -- The hot path (see undo_enqueue): the reads of the group's state check the types of
  -- what the message's way writes (released: the group's count and the signal; held: the
  -- held count).
  local bad = {}
  local existing = dedup and checked(bad, 'GET', dedup)
  local queued = checked(bad, 'LLEN', group_key(g))
  if #bad > 0 then return corrupt(bad[1]) end
  local stored, tokens, release = 0, 1, false
  if queued == 0 then  -- (nothing held: the group may have room)
    stored = checked(bad, 'HGET', BASE .. 'groups', g)
    tokens = checked(bad, 'LLEN', KEYS[5])
    if #bad > 0 then return corrupt(bad[1]) end
    stored = tonumber(stored or '') or 0
    release = stored < group_limit()
  end
  if not release then
    local held = checked(bad, 'GET', BASE .. 'held')
    if #bad > 0 then return corrupt(bad[1]) end
    if not_integer(held) then return corrupt(BASE .. 'held') end
  end
  if existing then return {existing, 0, rcall('EXISTS', KEYS[6]) == 0 and 1 or 0} end
  local id, err = next_id()
  if not id then return err end
  local ik = item_key(id)
  local body = ARGV[9]
  local now_s = fmt(now_ms())
  write_item(ik, body, chunk, 't', now_s, 'g', g)
  local a = step == 2 and ARGV[10]
  if a and a ~= '' then rcall('HSET', ik, 'a', a, 'n', '0') end
  local r
  r, err = push_new(id, release)
  if not r then return err end
  if release then
    rcall('HSET', BASE .. 'groups', g, stored + 1)
    if tokens == 0 then rcall('RPUSH', KEYS[5], '1') end
  else
    rcall('RPUSH', group_key(g), id)
    rcall('INCRBY', BASE .. 'held', 1)
  end
  if dedup then rcall('SET', dedup, id, 'PX', ARGV[5]) end
  local missing = r == 1 and rcall('EXISTS', KEYS[6]) == 0 and 1 or 0
  mark_format(KEYS[7], id)
  mark_groups(KEYS[7])
  return {id, 1, missing}
end

-- Batches and delayed messages: every key is type-checked before the first write.
local lost = rcall('EXISTS', KEYS[6]) == 0 and 1 or 0
local bad = {}
local seq = checked(bad, 'GET', KEYS[1])
local existing = dedup and checked(bad, 'GET', dedup)
if #bad > 0 then return corrupt(bad[1]) end
local wrong = wrong_type({KEYS[7], 'hash', KEYS[2], 'list', KEYS[3], 'set', KEYS[4], 'zset', KEYS[5], 'list'})
  or group_bad({g})
if wrong then return corrupt(wrong) end
if not_integer(seq) then return corrupt(KEYS[1]) end
local held = rcall('GET', BASE .. 'held')
if not_integer(held) then return corrupt(BASE .. 'held') end
if existing then return {existing, 0, lost} end

local first = (tonumber(seq) or 0) + 1
local ids = {}
local iks = new_item_keys(first, n, ids)
if not iks then return corrupt(KEYS[1]) end

local now_s = fmt(now_ms())
rcall('INCRBY', KEYS[1], n)
rcall('HINCRBY', KEYS[7], 'enqueued', n)
mark_format(KEYS[7], fmt(first))
mark_groups(KEYS[7])
if dedup then rcall('SET', dedup, fmt(first), 'PX', ARGV[5]) end
local at = delay > 0 and tonumber(now_s) + delay
-- As group_join, message by message, with the group read once: released while the group
-- has room and holds nothing, else held (behind the first one held, all the rest).
local stored = not at and tonumber(rcall('HGET', BASE .. 'groups', g) or '')
local room = not at and rcall('LLEN', group_key(g)) == 0 and group_limit() - (stored or 0) or 0
local released, kept = {}, {}
for j = 1, n do
  local id = ids[j]
  local body = ARGV[8 + step * (j - 1) + 1]
  if at then write_item(iks[j], body, chunk, 't', now_s, 'g', g, 'd', fmt(at))
  else
    if #released < room then released[#released + 1] = id else kept[#kept + 1] = id end
    write_item(iks[j], body, chunk, 't', now_s, 'g', g)
  end
  local a = step == 2 and ARGV[8 + step * j]
  if a and a ~= '' then rcall('HSET', iks[j], 'a', a, 'n', '0') end
  if at then timer_add(KEYS[4], id, at, bucket_ms) end
end
if #released > 0 then
  rcall('RPUSH', KEYS[2], unpack(released))
  rcall('SADD', KEYS[3], unpack(released))
  rcall('HSET', BASE .. 'groups', g, (stored or 0) + #released)
  signal(KEYS[5])
end
if #kept > 0 then
  rcall('RPUSH', group_key(g), unpack(kept))
  rcall('INCRBY', BASE .. 'held', #kept)
end
return {fmt(first), n, lost}
