--[[
  Enqueue one or more messages (one round trip for a whole batch).
  KEYS[1] seq  KEYS[2] queue  KEYS[3] items  KEYS[4] timers  KEYS[5] signal  KEYS[6] config
  KEYS[7] counters  KEYS[8] dedup key (optional; single message only)
  ARGV[3] delay ms (0 = visible now)  ARGV[4] bucket ms  ARGV[5] dedup window ms
  ARGV[6] bytes per body field (body_fields)  ARGV[7] '1' when each body is followed by its
  attributes (field a, opaque bytes, written with n = 0; '' = none), '2' when by its attributes and its enqueue time
  (t in ms, '' = now; a moved message keeps its first; never later than now), else ''
  ARGV[8..] bodies (or body, attributes pairs, or body, attributes, time triples)
  Returns {first_id, count, config_missing}: ids first_id .. first_id+count-1; {existing_id, 0,
  config_missing} on a dedup hit. config_missing (1/0) tells the client its config hash is
  gone (Redis lost its data), so it can restore its settings and registration: no extra trip.
]]
local delay = tonumber(ARGV[3])
local bucket_ms = tonumber(ARGV[4])
local timed = ARGV[7] == '2'
local paired = ARGV[7] == '1' or timed
local step = timed and 3 or paired and 2 or 1
local n = (#ARGV - 7) / step
local chunk = tonumber(ARGV[6])
local dedup = KEYS[8]

-- The attributes of message j (nil when none): written apart from the body, so a message
-- without them costs nothing more.
local function attributes(j)
  local a = paired and ARGV[7 + step * (j - 1) + 2]
  if a and a ~= '' then return a end
  return nil
end

-- The enqueue time of message j: now_s, or the one given when that is earlier.
local function since(j, now_s)
  local t = timed and tonumber(ARGV[7 + step * j])
  if t and t < tonumber(now_s) then return fmt(t) end
  return now_s
end

if n == 1 and delay == 0 then
  -- The hot path, kept to the calls the layout needs (see undo_enqueue).
  local bad = {}
  local tokens = checked(bad, 'LLEN', KEYS[5])
  local existing = dedup and checked(bad, 'GET', dedup)
  if #bad > 0 then return corrupt(bad[1]) end
  if existing then return {existing, 0, rcall('EXISTS', KEYS[6]) == 0 and 1 or 0} end
  local id, err = next_id()
  if not id then return err end
  local ik = item_key(id)
  local body = ARGV[8]
  local now_s = fmt(now_ms())
  if timed then now_s = since(1, now_s) end
  write_item(ik, body, chunk, 't', now_s)
  local a = attributes(1)
  if a then rcall('HSET', ik, 'a', a, 'n', '0') end
  local r
  r, err = push_new(id, true)
  if not r then return err end
  if dedup then rcall('SET', dedup, id, 'PX', ARGV[5]) end
  if tokens == 0 then rcall('RPUSH', KEYS[5], '1') end
  -- The config hash is looked for only when the counters were absent too: both go when
  -- Redis loses its data (a config deleted alone is found by the next claim or reap).
  local missing = r == 1 and rcall('EXISTS', KEYS[6]) == 0 and 1 or 0
  mark_format(KEYS[7], id)
  return {id, 1, missing}
end

-- Batches and delayed messages: every key is type-checked (by the reads below or TYPE)
-- before the first write; the checks cost little next to the writes of a batch.
local lost = rcall('EXISTS', KEYS[6]) == 0 and 1 or 0
local bad = {}
local seq = checked(bad, 'GET', KEYS[1])
local tokens = 1
if delay == 0 then tokens = checked(bad, 'LLEN', KEYS[5]) end
local existing = dedup and checked(bad, 'GET', dedup)
if #bad > 0 then return corrupt(bad[1]) end
local wrong = delay > 0 and wrong_type({KEYS[7], 'hash', KEYS[4], 'zset'})
  or wrong_type({KEYS[7], 'hash', KEYS[2], 'list', KEYS[3], 'set'})
if wrong then return corrupt(wrong) end
if not_integer(seq) then return corrupt(KEYS[1]) end
if existing then return {existing, 0, lost} end

local first = (tonumber(seq) or 0) + 1
local ids = {}
local iks = new_item_keys(first, n, ids)
if not iks then return corrupt(KEYS[1]) end

local now_s = fmt(now_ms())
rcall('INCRBY', KEYS[1], n)
rcall('HINCRBY', KEYS[7], 'enqueued', n)
mark_format(KEYS[7], fmt(first))
if dedup then rcall('SET', dedup, fmt(first), 'PX', ARGV[5]) end
if delay > 0 then
  local at = tonumber(now_s) + delay
  for i = 1, n do
    write_item(iks[i], ARGV[7 + (i - 1) * step + 1], chunk, 't', since(i, now_s), 'd', fmt(at))
    local a = attributes(i)
    if a then rcall('HSET', iks[i], 'a', a, 'n', '0') end
    timer_add(KEYS[4], ids[i], at, bucket_ms)
  end
  return {fmt(first), n, lost}
end
for j = 1, n do
  write_item(iks[j], ARGV[7 + (j - 1) * step + 1], chunk, 't', timed and since(j, now_s) or now_s)
  if paired then
    local a = attributes(j)
    if a then rcall('HSET', iks[j], 'a', a, 'n', '0') end
  end
end
make_waiting_all(KEYS[2], KEYS[3], ids)
if tokens == 0 then rcall('RPUSH', KEYS[5], '1') end
return {fmt(first), n, lost}
