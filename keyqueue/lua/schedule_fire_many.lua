--[[
  The fires of many due schedules in one call, each a compare-and-set on its own: a schedule
  that is no longer the one its firer read is left as it is
  (another firer fired or changed it), so each fire time gives one message whatever the
  number of firers. Its firer computed every fire (its messages and its next fire time).
  KEYS[1] schedules  KEYS[2] seq  KEYS[3] queue  KEYS[4] items  KEYS[5] timers  KEYS[6] signal
  KEYS[7] config  KEYS[8] counters  KEYS[9] schedule_state  KEYS[10] schedule_defs
  KEYS[11] schedule_bodies
  ARGV[3] bytes per body field  ARGV[4] bucket ms
  ARGV[5..] per fire: schedule id, version, index score, definition and anchor read (a
  schedule made again may reach the same version and score), next fire ms ('' = no more),
  index score after the fire, missed fire times, interval ms ('' = cron), message count m,
  then m pairs of fire ms, due ms (due later than now: a delayed message)
  The index score is compared, not the state's next fire: schedule_fire_due moves only the
  index (state_fired counts those fires in).
  Each message is an item with b (the schedule's body), t, s (its fire time) and n = 0.
  Returns {config_missing, first id of each fire (0: the schedule changed, nothing done)}:
  a fire's ids are its first id and the ones after it, one per message.
]]
local bad = {}
local seq = checked(bad, 'GET', KEYS[2])
local tokens = checked(bad, 'LLEN', KEYS[6])
-- Where each fire's arguments start, and its schedule id.
local at, ids = {}, {}
local a = 5
while a <= #ARGV do
  at[#at + 1] = a
  ids[#ids + 1] = ARGV[a]
  a = a + 10 + 2 * tonumber(ARGV[a + 9])
end
local n = #ids
local states = checked(bad, 'HMGET', KEYS[9], unpack(ids))
local defs = checked(bad, 'HMGET', KEYS[10], unpack(ids))
local bodies = checked(bad, 'HMGET', KEYS[11], unpack(ids))
local scores = checked(bad, 'ZMSCORE', KEYS[1], unpack(ids))
if #bad > 0 then return corrupt(bad[1]) end
local wrong = wrong_type({KEYS[3], 'list', KEYS[4], 'set', KEYS[5], 'zset', KEYS[8], 'hash'})
if wrong then return corrupt(wrong) end
if not_integer(seq) then return corrupt(KEYS[2]) end

-- Which fires still hold (the schedule is the one read).
local go, total = {}, 0
for i = 1, n do
  local b = at[i]
  local s = states[i]
  go[i] = false
  if s and defs[i] == ARGV[b + 3] and score_is(scores[i], ARGV[b + 2]) then
    local v, an = string.match(s, '^(%d+):%d+:%d*:%d+:(%d+):[01]:%d*$')
    go[i] = v == ARGV[b + 1] and an == ARGV[b + 4]
  end
  if go[i] then total = total + tonumber(ARGV[b + 9]) end
end

local now = now_ms()
local now_s = fmt(now)
local chunk = tonumber(ARGV[3])
local bucket_ms = tonumber(ARGV[4])
local next_id = (tonumber(seq) or 0) + 1
if total > 0 then rcall('INCRBY', KEYS[2], total) end
local out = {rcall('EXISTS', KEYS[7]) == 0 and 1 or 0}
local waiting, scored, written = {}, {}, {}
for i = 1, n do
  out[i + 1] = 0
  if go[i] then
    local b = at[i]
    local m = tonumber(ARGV[b + 9])
    local body = bodies[i] or ''
    out[i + 1] = fmt(next_id)
    for j = 1, m do
      local id = fmt(next_id)
      next_id = next_id + 1
      local ik = BASE .. 'item:' .. id
      local fire, due = ARGV[b + 8 + 2 * j], tonumber(ARGV[b + 9 + 2 * j])
      if due > now then
        write_item(ik, body, chunk, 't', now_s, 's', fire, 'n', '0', 'd', fmt(due))
        timer_add(KEYS[5], id, due, bucket_ms)
      else
        write_item(ik, body, chunk, 't', now_s, 's', fire, 'n', '0')
        waiting[#waiting + 1] = id
      end
    end
    written[#written + 1] = ids[i]
    local z, every = tonumber(scores[i]), tonumber(ARGV[b + 8])
    written[#written + 1] = state_fired(states[i], m, ARGV[b + 8 + 2 * m], tonumber(ARGV[b + 7]), ARGV[b + 5], z, every)
    scored[#scored + 1] = ARGV[b + 6]; scored[#scored + 1] = ids[i]
  end
end
make_waiting_all(KEYS[3], KEYS[4], waiting)
for i = 1, #scored, 1000 do
  local last = math.min(i + 999, #scored)
  rcall('ZADD', KEYS[1], unpack(scored, i, last))
  rcall('HSET', KEYS[9], unpack(written, i, last))
end
if total > 0 then
  rcall('HINCRBY', KEYS[8], 'enqueued', total)
  rcall('HINCRBY', KEYS[8], 'scheduled', total)
end
if #waiting > 0 and tokens == 0 then rcall('RPUSH', KEYS[6], '1') end
return out
