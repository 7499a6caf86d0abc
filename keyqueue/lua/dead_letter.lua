--[[
  Move a current delivery to dead letters, keeping its item hash and the reason, and
  recording when (x, from which dead_retention counts).
  KEYS[1] processing  KEYS[2] timers  KEYS[3] item  KEYS[4] dead  KEYS[5] counters
  ARGV[3] bucket ms  ARGV[4] id  ARGV[5] receipt  ARGV[6] reason ('' keeps last_error)
  A grouped message (field g) frees its group's next.
  Returns 1, or 0 when the receipt is stale.
]]
local bucket_ms = tonumber(ARGV[3])
local bad = wrong_type({KEYS[1], 'set', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'list'})
if bad then return corrupt(bad) end
local id = ARGV[4]
local d, r = owned(KEYS[1], KEYS[3], id, ARGV[5])
if not d then return 0 end
local tk = timer_key(bucket_of(d, bucket_ms))
if wrong_type({tk, 'set'}) then return corrupt(tk) end
local g = rcall('HGET', KEYS[3], 'g')
if g then
  bad = group_bad({g})
  if bad then return corrupt(bad) end
end
local counted = redis.pcall('HINCRBY', KEYS[5], 'dead_lettered', 1)
if type(counted) == 'table' then return write_error(counted, KEYS[5]) end
disown(KEYS[1], KEYS[2], KEYS[3], id, d, bucket_ms, ARGV[5], r)
local now_s = fmt(now_ms())
if ARGV[6] ~= '' then rcall('HSET', KEYS[3], 'e', ARGV[6], 'x', now_s) else rcall('HSET', KEYS[3], 'x', now_s) end
rcall('RPUSH', KEYS[4], id)
if g then
  rcall('HDEL', KEYS[3], 'j')
  group_end(g)
end
return 1
