--[[
  Counts of each state, read atomically.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead
  Returns {waiting, processing, delayed, dead, enqueued ms of the head of the FIFO or false, now ms,
  held}: waiting counts the held messages of groups too.
  delayed = ids in timer buckets minus those in flight (exact unless bucket_seconds changed
  while timers were pending).
]]
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list'}) or group_bad({})
if bad then return corrupt(bad) end
local held = tonumber(rcall('GET', BASE .. 'held') or '0')
if not held then return corrupt(BASE .. 'held') end
local processing = rcall('SCARD', KEYS[3])
local timed = 0
for _, b in ipairs(rcall('ZRANGE', KEYS[4], 0, -1)) do
  local tk = timer_key(b)
  if wrong_type({tk, 'set'}) then return corrupt(tk) end
  timed = timed + rcall('SCARD', tk)
end
local head = rcall('LINDEX', KEYS[1], 0)
local oldest = false
if head then
  local ik = item_key(head)
  if wrong_type({ik, 'hash'}) then return corrupt(ik) end
  oldest = rcall('HGET', ik, 't') or false
end
return {rcall('SCARD', KEYS[2]) + held, processing, math.max(timed - processing, 0),
        rcall('LLEN', KEYS[5]), oldest, now_ms(), held}
