--[[
  Give a current delivery back: to the tail of the FIFO, or delayed when a delay is given (a
  grouped message delayed so gets j: it still counts among its group's released messages).
  KEYS[1] processing  KEYS[2] timers  KEYS[3] item  KEYS[4] queue  KEYS[5] items  KEYS[6] signal
  ARGV[3] bucket ms  ARGV[4] id  ARGV[5] receipt  ARGV[6] delay ms  ARGV[7] error text
  ARGV[8] '1' to record ARGV[7] as last_error  ARGV[9] '1' to take back the delivery's receive
  (a throttled delivery does not use one up)
  Returns 1, or 0 when the receipt is stale.
]]
local bucket_ms = tonumber(ARGV[3])
local bad = wrong_type({KEYS[1], 'set', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'list',
                        KEYS[5], 'set', KEYS[6], 'list'})
if bad then return corrupt(bad) end
local id = ARGV[4]
local d, r = owned(KEYS[1], KEYS[3], id, ARGV[5])
if not d then return 0 end
local delay = tonumber(ARGV[6])
local now = now_ms()
local checks = {timer_key(bucket_of(d, bucket_ms)), 'set'}
if delay > 0 then checks[3] = timer_key(bucket_of(now + delay, bucket_ms)); checks[4] = 'set' end
bad = wrong_type(checks)
if bad then return corrupt(bad) end

disown(KEYS[1], KEYS[2], KEYS[3], id, d, bucket_ms, ARGV[5], r)
if ARGV[8] == '1' then rcall('HSET', KEYS[3], 'e', ARGV[7]) end
if ARGV[9] == '1' then rcall('HINCRBY', KEYS[3], 'r', -1) end
if delay > 0 then
  rcall('HSET', KEYS[3], 'd', fmt(now + delay))
  if string.sub(ARGV[5], -1) == 'g' then rcall('HSET', KEYS[3], 'j', '1') end  -- (a grouped delivery's receipt)
  timer_add(KEYS[2], id, now + delay, bucket_ms)
else
  make_waiting(KEYS[4], KEYS[5], id)
  signal(KEYS[6])
end
return 1
