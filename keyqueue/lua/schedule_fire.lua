--[[
  One fire of a schedule, a compare-and-set: if the schedule is still the version its firer
  read, enqueue its messages, move its stored next fire on and count them, in one step; so
  each fire time gives one message whatever the number of firers.
  KEYS[1] schedule:<id>  KEYS[2] schedules  KEYS[3] seq  KEYS[4] queue  KEYS[5] items
  KEYS[6] timers  KEYS[7] signal  KEYS[8] config  KEYS[9] counters
  ARGV[3] version read  ARGV[4] next fire ms ('' = no more)  ARGV[5] index score
  ARGV[6] missed fire times  ARGV[7] bucket ms  ARGV[8] bytes per body field
  ARGV[9..] fire ms, due ms of each message (due later than now: a delayed message)
  Each message is an item with b (the schedule's body), t, s (its fire time) and n = 0.
  Returns {done (1, or 0 when the schedule changed since it was read: nothing done),
  first id, count, config_missing}.
]]
local bad = {}
local f = checked(bad, 'HMGET', KEYS[1], 'v', 'b')
checked(bad, 'ZSCORE', KEYS[2], 'x')
local seq = checked(bad, 'GET', KEYS[3])
local tokens = checked(bad, 'LLEN', KEYS[7])
if #bad > 0 then return corrupt(bad[1]) end
local wrong = wrong_type({KEYS[4], 'list', KEYS[5], 'set', KEYS[6], 'zset', KEYS[9], 'hash'})
if wrong then return corrupt(wrong) end
if not_integer(seq) then return corrupt(KEYS[3]) end
if not f[1] or f[1] ~= ARGV[3] then return {0, false, 0, 0} end

local now = now_ms()
local now_s = fmt(now)
local body = f[2] or ''
local bucket_ms = tonumber(ARGV[7])
local chunk = tonumber(ARGV[8])
local n = (#ARGV - 8) / 2
local first = (tonumber(seq) or 0) + 1
local waiting = 0
if n > 0 then rcall('INCRBY', KEYS[3], n) end
for j = 1, n do
  local id = fmt(first + j - 1)
  local fire, due = ARGV[7 + 2 * j], tonumber(ARGV[8 + 2 * j])
  local fields = {'t', now_s, 's', fire, 'n', '0'}
  if due > now then
    fields[#fields + 1] = 'd'; fields[#fields + 1] = fmt(due)
    rcall('HSET', item_key(id), unpack(body_fields(fields, body, chunk)))
    timer_add(KEYS[6], id, due, bucket_ms)
  else
    rcall('HSET', item_key(id), unpack(body_fields(fields, body, chunk)))
    make_waiting(KEYS[4], KEYS[5], id)
    waiting = waiting + 1
  end
end
if n > 0 then
  rcall('HINCRBY', KEYS[9], 'enqueued', n)
  rcall('HINCRBY', KEYS[9], 'scheduled', n)
  rcall('HINCRBY', KEYS[1], 'f', n)
  rcall('HSET', KEYS[1], 'l', ARGV[#ARGV - 1])
end
if waiting > 0 and tokens == 0 then rcall('RPUSH', KEYS[7], '1') end
if tonumber(ARGV[6]) > 0 then rcall('HINCRBY', KEYS[1], 'm', ARGV[6]) end
if ARGV[4] == '' then rcall('HDEL', KEYS[1], 'n') else rcall('HSET', KEYS[1], 'n', ARGV[4]) end
rcall('HSET', KEYS[1], 'v', fmt(tonumber(ARGV[3]) + 1))
rcall('ZADD', KEYS[2], ARGV[5], string.sub(KEYS[1], #BASE + 10))
return {1, fmt(first), n, rcall('EXISTS', KEYS[8]) == 0 and 1 or 0}
