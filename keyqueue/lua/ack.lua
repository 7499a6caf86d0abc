--[[
  Acknowledge deliveries: each message whose receipt is current is deleted.
  KEYS[1] processing  KEYS[2] timers  KEYS[3..] item keys
  ARGV[3] bucket ms  ARGV[4..] id, receipt pairs (in the order of the item keys)
  Returns the number acknowledged.
]]
local bucket_ms = tonumber(ARGV[3])
local checks = {KEYS[1], 'set', KEYS[2], 'zset'}
for i = 3, #KEYS do checks[#checks + 1] = KEYS[i]; checks[#checks + 1] = 'hash' end
local bad = wrong_type(checks)
if bad then return corrupt(bad) end

local current = {}
for i = 3, #KEYS do
  local id = ARGV[2 + 2 * (i - 2)]
  local d = owned(KEYS[1], KEYS[i], id, ARGV[3 + 2 * (i - 2)])
  if d then
    local tk = timer_key(bucket_of(d, bucket_ms))
    if wrong_type({tk, 'set'}) then return corrupt(tk) end
    current[#current + 1] = {i, id, d}
  end
end
for _, m in ipairs(current) do
  rcall('SREM', KEYS[1], m[2])
  if m[3] > 0 then timer_del(KEYS[2], m[2], m[3], bucket_ms) end
  rcall('DEL', KEYS[m[1]])
end
return #current
