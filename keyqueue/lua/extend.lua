--[[
  Heartbeat: move the visibility deadline of a current delivery to now + seconds.
  KEYS[1] processing  KEYS[2] timers  KEYS[3] item
  ARGV[3] bucket ms  ARGV[4] id  ARGV[5] receipt  ARGV[6] extension ms
  Returns the new deadline in ms, or 0 when the receipt is stale.
]]
local bucket_ms = tonumber(ARGV[3])
local bad = wrong_type({KEYS[1], 'set', KEYS[2], 'zset', KEYS[3], 'hash'})
if bad then return corrupt(bad) end
local id = ARGV[4]
local d = owned(KEYS[1], KEYS[3], id, ARGV[5])
if not d then return 0 end
local new = now_ms() + tonumber(ARGV[6])
local old_tk = timer_key(bucket_of(d, bucket_ms))
local new_tk = timer_key(bucket_of(new, bucket_ms))
bad = wrong_type({old_tk, 'set', new_tk, 'set'})
if bad then return corrupt(bad) end
if d > 0 then timer_del(KEYS[2], id, d, bucket_ms) end
rcall('HSET', KEYS[3], 'd', fmt(new))
timer_add(KEYS[2], id, new, bucket_ms)
return new
