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

local lost = rcall('EXISTS', KEYS[6]) == 0 and 1 or 0
local bad = {}
local seq = checked(bad, 'GET', KEYS[1])
local existing = dedup and checked(bad, 'GET', dedup)
if #bad > 0 then return corrupt(bad[1]) end
local wrong = wrong_type({KEYS[7], 'hash', KEYS[2], 'list', KEYS[3], 'set', KEYS[4], 'zset', KEYS[5], 'list'})
  or group_bad({g})
if wrong then return corrupt(wrong) end
if seq and not tonumber(seq) then return corrupt(KEYS[1]) end
local held = rcall('GET', BASE .. 'held')
if held and not tonumber(held) then return corrupt(BASE .. 'held') end
if existing then return {existing, 0, lost} end

local first = (tonumber(seq) or 0) + 1
local ids = {}
local iks = new_item_keys(first, n, ids)
if not iks then return corrupt(KEYS[1]) end

local now_s = fmt(now_ms())
rcall('INCRBY', KEYS[1], n)
rcall('HINCRBY', KEYS[7], 'enqueued', n)
if dedup then rcall('SET', dedup, fmt(first), 'PX', ARGV[5]) end
local at = delay > 0 and tonumber(now_s) + delay
local released = false
for j = 1, n do
  local id = ids[j]
  local head = {'t', now_s, 'n', '0', 'g', g}
  if at then head[7] = 'd'; head[8] = fmt(at) end
  rcall('HSET', iks[j], unpack(body_fields(head, ARGV[8 + step * (j - 1) + 1], chunk)))
  local a = step == 2 and ARGV[8 + step * j]
  if a and a ~= '' then rcall('HSET', iks[j], 'a', a) end
  if at then timer_add(KEYS[4], id, at, bucket_ms)
  elseif group_join(id, g) then released = true end
end
if released then signal(KEYS[5]) end
return {fmt(first), n, lost}
