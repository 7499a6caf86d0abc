--[[
  The fires of many due schedules in one call, each a compare-and-set on its own: a schedule
  that is no longer the one its firer read is left as it is
  (another firer fired or changed it), so each fire time gives one message whatever the
  number of firers. Its firer computed every fire (its messages and its next fire time).
  KEYS[1] schedules  KEYS[2] seq  KEYS[3] queue  KEYS[4] items  KEYS[5] timers  KEYS[6] signal
  KEYS[7] config  KEYS[8] counters  KEYS[9..] schedule:<id> of each fire, in order
  ARGV[3] bucket ms  ARGV[4] bytes per body field
  ARGV[5..] per fire: version, next fire (ms), definition and anchor read (a schedule made
  again may reach the same version and next fire), next fire ms ('' = no more), index score,
  missed fire times, message count m, then m pairs of fire ms, due ms (due later than now: a
  delayed message)
  Each message is an item with b (the schedule's body), t, s (its fire time) and n = 0.
  Returns {config_missing, first id of each fire (0: the schedule changed, nothing done)}:
  a fire's ids are its first id and the ones after it, one per message.
]]
local bad = {}
local seq = checked(bad, 'GET', KEYS[2])
local tokens = checked(bad, 'LLEN', KEYS[6])
checked(bad, 'ZSCORE', KEYS[1], 'x')
local n = #KEYS - 8
local reads = {}
for i = 1, n do reads[i] = checked(bad, 'HMGET', KEYS[8 + i], 'v', 'n', 'f', 'm', 'b', 'd', 'a') end
if #bad > 0 then return corrupt(bad[1]) end
local wrong = wrong_type({KEYS[3], 'list', KEYS[4], 'set', KEYS[5], 'zset', KEYS[8], 'hash'})
if wrong then return corrupt(wrong) end
if not_integer(seq) then return corrupt(KEYS[2]) end

-- Which fires still hold (the schedule is the one read), and where each one's ARGV start.
local at, go, total = {}, {}, 0
local a = 5
for i = 1, n do
  at[i] = a
  local m = tonumber(ARGV[a + 7])
  local f = reads[i]
  go[i] = f[1] and f[1] == ARGV[a] and f[2] == ARGV[a + 1] and f[6] == ARGV[a + 2] and f[7] == ARGV[a + 3]
  if go[i] then total = total + m end
  a = a + 8 + 2 * m
end

local now = now_ms()
local now_s = fmt(now)
local bucket_ms = tonumber(ARGV[3])
local chunk = tonumber(ARGV[4])
local sub = string.sub
local next_id = (tonumber(seq) or 0) + 1
if total > 0 then rcall('INCRBY', KEYS[2], total) end
local out = {rcall('EXISTS', KEYS[7]) == 0 and 1 or 0}
local waiting, scores = {}, {}
for i = 1, n do
  out[i + 1] = 0
  if go[i] then
    local key, j0, f = KEYS[8 + i], at[i] + 2, reads[i]  -- (j0: where the fire's own arguments start, less 2)
    local m = tonumber(ARGV[j0 + 5])
    local body = f[5] or ''
    out[i + 1] = fmt(next_id)
    for j = 1, m do
      local id = fmt(next_id)
      next_id = next_id + 1
      local ik = BASE .. 'item:' .. id
      local fire, due = ARGV[j0 + 4 + 2 * j], tonumber(ARGV[j0 + 5 + 2 * j])
      if due > now then
        write_item(ik, body, chunk, 't', now_s, 's', fire, 'n', '0', 'd', fmt(due))
        timer_add(KEYS[5], id, due, bucket_ms)
      else
        write_item(ik, body, chunk, 't', now_s, 's', fire, 'n', '0')
        waiting[#waiting + 1] = id
      end
    end
    -- The counts are written whole (read above): one HSET per schedule.
    local v, fired, nxt = fmt(tonumber(ARGV[at[i]]) + 1), fmt((tonumber(f[3]) or 0) + m), ARGV[j0 + 2]
    local missed = tonumber(ARGV[j0 + 4])
    if m == 1 and missed == 0 and nxt ~= '' then
      rcall('HSET', key, 'v', v, 'f', fired, 'l', ARGV[j0 + 6], 'n', nxt)
    else
      local set = {'v', v, 'f', fired}
      if m > 0 then set[5] = 'l'; set[6] = ARGV[j0 + 4 + 2 * m] end
      if missed > 0 then set[#set + 1] = 'm'; set[#set + 1] = fmt((tonumber(f[4]) or 0) + missed) end
      if nxt == '' then rcall('HDEL', key, 'n') else set[#set + 1] = 'n'; set[#set + 1] = nxt end
      rcall('HSET', key, unpack(set))
    end
    scores[#scores + 1] = ARGV[j0 + 3]; scores[#scores + 1] = sub(key, #BASE + 10)
  end
end
make_waiting_all(KEYS[3], KEYS[4], waiting)
for i = 1, #scores, 1000 do rcall('ZADD', KEYS[1], unpack(scores, i, math.min(i + 999, #scores))) end
if total > 0 then
  rcall('HINCRBY', KEYS[8], 'enqueued', total)
  rcall('HINCRBY', KEYS[8], 'scheduled', total)
end
if #waiting > 0 and tokens == 0 then rcall('RPUSH', KEYS[6], '1') end
return out
