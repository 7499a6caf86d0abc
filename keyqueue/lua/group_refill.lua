--[[
  Release held messages of the groups named while each has room under group_concurrency
  (read from the config hash now): a raise of the setting lets them through at once rather
  than at each group's next end.
  KEYS[1] queue  KEYS[2] items  KEYS[3] signal
  ARGV[3..] group names (fields of the groups hash: groups with released messages)
  Returns the number of messages released.
]]
local gs = {unpack(ARGV, 3)}
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'list'}) or group_bad(gs)
if bad then return corrupt(bad) end
if #gs == 0 then return 0 end
local counts = redis.pcall('HMGET', BASE .. 'groups', unpack(gs))
if counts.err then return corrupt(BASE .. 'groups') end
local held = redis.pcall('GET', BASE .. 'held')
if type(held) == 'table' or not_integer(held) then return corrupt(BASE .. 'held') end
local limit, released = group_limit(), 0
for i, g in ipairs(gs) do
  local stored = tonumber(counts[i] or '')
  if stored and stored < limit then released = released + group_fill(g, stored, stored) end
end
return released
