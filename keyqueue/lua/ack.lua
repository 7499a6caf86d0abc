--[[
  Acknowledge deliveries: each message whose receipt is current is deleted.
  KEYS[1] processing  KEYS[2] timers  KEYS[3] counters  KEYS[4..] item keys
  ARGV[3] bucket ms  ARGV[4..] id, receipt pairs (in the order of the item keys)
  Returns the number acknowledged (a delivery listed twice counts once).
]]
local bucket_ms = tonumber(ARGV[3])
local bad = wrong_type({KEYS[1], 'set', KEYS[2], 'zset'})
if bad then return corrupt(bad) end

local broken = {}
local ids, keys, timers, seen = {}, {}, {}, {}
for i = 4, #KEYS do
  local id, receipt = ARGV[2 + 2 * (i - 3)], ARGV[3 + 2 * (i - 3)]
  local f = checked(broken, 'HMGET', KEYS[i], 'c', 'd')
  if f and f[1] and f[1] == receipt and not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id
    keys[#keys + 1] = KEYS[i]
    timers[#timers + 1] = tonumber(f[2]) or 0
  end
end
if #broken > 0 then return corrupt(broken[1]) end
if #ids == 0 then return 0 end

local held = rcall('SMISMEMBER', KEYS[1], unpack(ids))
local gone, gone_keys, gone_timers = {}, {}, {}
for i, id in ipairs(ids) do
  if held[i] == 1 then
    gone[#gone + 1] = id
    gone_keys[#gone_keys + 1] = keys[i]
    gone_timers[#gone_timers + 1] = timers[i]
  end
end
if #gone == 0 then return 0 end
local groups, order = by_bucket(gone, gone_timers, bucket_ms)
bad = bad_bucket(order)
if bad then return corrupt(bad) end
-- The first write checks the counters' type: when it fails, nothing has changed.
local counted = redis.pcall('HINCRBY', KEYS[3], 'acked', #gone)
if type(counted) == 'table' then return write_error(counted, KEYS[3]) end
rcall('SREM', KEYS[1], unpack(gone))
drop_timers(KEYS[2], groups, order)
rcall('DEL', unpack(gone_keys))
return #gone
