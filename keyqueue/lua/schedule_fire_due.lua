--[[
  Fire due schedules whose fire needs no planning by the client, reading and writing each in
  this one call (no compare-and-set: nothing runs between the read and the write). That is an
  `every` schedule without jitter with one fire time due, its next one not past its end, and
  the fire time within its misfire_grace (and within late ms when catch_up is none): a fire
  time gives one message, at that fire time, and the next fire time is the one an interval
  after it, as the client's planner says for the same case. Every other one (cron, jitter,
  several fire times behind, the last fire before the end) is left as it is for the client
  to plan and fire by schedule_fire_many; a paused one or one without a next fire is not due
  (its index score is inf).
  Such a fire moves only the schedule's index score: its state (fired count, last and next
  fire) stays as its last write left it, and readers count in the intervals the index moved
  on since (schedules.fired_since, state_fired). So a fire writes no state, and reads one
  only to know the schedule exists (an index entry without a state is a stray: not fired).
  KEYS[1] schedules  KEYS[2] seq  KEYS[3] queue  KEYS[4] items  KEYS[5] signal  KEYS[6] config
  KEYS[7] counters  KEYS[8] schedule_state  KEYS[9] schedule_defs  KEYS[10] schedule_bodies
  ARGV[3] bytes per body field  ARGV[4] late ms (catch_up none: older fire times are missed)
  ARGV[5] how many due entries of the index to look at, from its head (the earliest)
  The due schedules of that look are read with one HMGET of each shared hash (states,
  definitions, bodies): a fire's own call is the HSET of its message.
  Each message is an item with b (the schedule's body), t, s (its fire time) and n = 0.
  Returns {config_missing, now ms, schedules fired, the earliest fire time known after now
  ('' = none), due entries looked at, then id, index score of each due schedule left to the
  client}.
]]
local bad = {}
local now = now_ms()
-- The due entries of the head, then the first one after them (when fewer than the look's
-- size are due): no more is read from an index of schedules that are not due.
local limit = tonumber(ARGV[5])
-- (With their scores: each one's next fire.)
local raw = checked(bad, 'ZRANGE', KEYS[1], '-inf', fmt(now), 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
if #bad > 0 then return corrupt(bad[1]) end
local due, fires = {}, {}
for i = 2, #raw, 2 do
  due[i / 2] = raw[i - 1]; fires[i / 2] = raw[i]
end
local soonest = nil
local looked = #due
if looked < limit then
  local after = rcall('ZRANGE', KEYS[1], '(' .. fmt(now), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if after[2] and after[2] ~= 'inf' then soonest = tonumber(after[2]) end
end
local out = {rcall('EXISTS', KEYS[6]) == 0 and 1 or 0, fmt(now), 0, '', looked}
if #due == 0 then
  if soonest then out[4] = fmt(soonest) end
  return out
end

local seq = checked(bad, 'GET', KEYS[2])
local tokens = checked(bad, 'LLEN', KEYS[5])
local n = #due
local states = checked(bad, 'HMGET', KEYS[8], unpack(due))
local dumps = checked(bad, 'HMGET', KEYS[9], unpack(due))
local bodies = checked(bad, 'HMGET', KEYS[10], unpack(due))
if #bad > 0 then return corrupt(bad[1]) end
local wrong = wrong_type({KEYS[3], 'list', KEYS[4], 'set', KEYS[7], 'hash'})
if wrong then return corrupt(wrong) end
if not_integer(seq) then return corrupt(KEYS[2]) end

local late = tonumber(ARGV[4])
-- A definition's fields (keyqueue's compact JSON: [cron, every_ms, tz, start_ms, end_ms,
-- jitter_ms, catch_up, grace_ms]), read once a call (schedules alike share one): false when
-- no schedule of it can fire here (cron, jitter, or a definition written otherwise: the
-- client plans those).
local defs = {}
local function every_of(d)
  local known = defs[d]
  if known == nil then
    -- (No start: a stored next fire is never before it.)
    local every, stop, catch_up, grace = string.match(d, '^%[null,(%d+),"[^"]*",[^,]*,([^,]*),0,"(%a+)",([^%]]*)%]$')
    every = tonumber(every)
    known = false
    if every and every > 0 then
      known = {every = every, stop = stop ~= 'null' and tonumber(stop) or nil,
               grace = grace ~= 'null' and tonumber(grace) or nil, none = catch_up == 'none'}
    end
    defs[d] = known
  end
  return known
end

-- The next fire time of a schedule of definition e whose next fire is nf (its index score's
-- text), when it fires here: a number and its text; else nil.
local function plan(e, nf)
  local nxt = tonumber(nf)
  local age = now - nxt
  if age < 0 or age >= e.every then return nil end
  if (e.grace and age > e.grace) or (e.none and age > late) then return nil end
  local t = nxt + e.every
  if e.stop and t > e.stop then return nil end
  return t, fmt(t)
end

-- The same for schedule i, planned once for a run of schedules alike (one definition, one
-- next fire: the index lists those that fall due together side by side).
local last_d, last_nf, last_t, last_ts
local function next_of(i)
  local d, nf = dumps[i], fires[i]
  if not states[i] then return nil end  -- (no schedule: its index entry and parts are strays)
  if d == last_d and nf == last_nf then return last_t, last_ts end
  if not d then return nil end
  local e = every_of(d)
  local t, ts
  if e then t, ts = plan(e, nf) end
  last_d, last_nf, last_t, last_ts = d, nf, t, ts
  return t, ts
end

local nexts, total = {}, 0
for i = 1, n do
  local t, ts = next_of(i)
  nexts[i] = ts
  if t then
    total = total + 1
    if not soonest or t < soonest then soonest = t end
  else
    out[#out + 1] = due[i]; out[#out + 1] = fires[i]
  end
end
out[3] = total
if soonest then out[4] = fmt(soonest) end
if total == 0 then return out end

local now_s = fmt(now)
local chunk = tonumber(ARGV[3])
local id = (tonumber(seq) or 0)
rcall('INCRBY', KEYS[2], total)
local waiting, scores = {}, {}
local item = BASE .. 'item:'
for i = 1, n do
  local ts = nexts[i]
  if ts then
    id = id + 1
    local ids = fmt(id)
    write_item(item .. ids, bodies[i] or '', chunk, 't', now_s, 's', fires[i], 'n', '0')
    waiting[#waiting + 1] = ids
    scores[#scores + 1] = ts; scores[#scores + 1] = due[i]
  end
end
make_waiting_all(KEYS[3], KEYS[4], waiting)
for i = 1, #scores, 1000 do
  rcall('ZADD', KEYS[1], unpack(scores, i, math.min(i + 999, #scores)))
end
rcall('HINCRBY', KEYS[7], 'enqueued', total)
rcall('HINCRBY', KEYS[7], 'scheduled', total)
if tokens == 0 then rcall('RPUSH', KEYS[5], '1') end
return out
