--[[
  Acknowledge deliveries: each message whose receipt is current is deleted.
  KEYS[1] processing  KEYS[2] timers  KEYS[3..] item keys
  ARGV[3] bucket ms  ARGV[4..] id, receipt pairs (in the order of the item keys)
  Returns the number acknowledged.
]]
local bucket_ms = tonumber(ARGV[3])
local bad = wrong_type({KEYS[1], 'set', KEYS[2], 'zset'})
if bad then return corrupt(bad) end

local broken = {}
local ids, keys, timers, seen = {}, {}, {}, {}
for i = 3, #KEYS do
  local id, receipt = ARGV[2 + 2 * (i - 2)], ARGV[3 + 2 * (i - 2)]
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
local gone, gone_keys, buckets, order = {}, {}, {}, {}
for i, id in ipairs(ids) do
  if held[i] == 1 then
    gone[#gone + 1] = id
    gone_keys[#gone_keys + 1] = keys[i]
    if timers[i] > 0 then
      local b = bucket_of(timers[i], bucket_ms)
      if not buckets[b] then buckets[b] = {}; order[#order + 1] = b end
      table.insert(buckets[b], id)
    end
  end
end
for _, b in ipairs(order) do
  if wrong_type({timer_key(b), 'set'}) then return corrupt(timer_key(b)) end
end
if #gone == 0 then return 0 end
rcall('SREM', KEYS[1], unpack(gone))
for _, b in ipairs(order) do
  local tk = timer_key(b)
  rcall('SREM', tk, unpack(buckets[b]))
  if rcall('EXISTS', tk) == 0 then rcall('ZREM', KEYS[2], b) end
end
rcall('DEL', unpack(gone_keys))
return #gone
