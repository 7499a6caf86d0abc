--[[
  Write a schedule's fields if it is still the version its writer read (a compare-and-set:
  an upsert, pause or resume computed in the client from what it read).
  KEYS[1] schedule:<id>  KEYS[2] schedules (index: id scored by its next fire ms, inf when none)
  ARGV[3] version read ('' = no schedule)  ARGV[4] index score  ARGV[5] how many fields to delete
  ARGV[6..] the fields to delete, then field/value pairs to set
  Returns 1 when written, 0 when the schedule changed since it was read (nothing written).
]]
local bad = {}
local v = checked(bad, 'HGET', KEYS[1], 'v')
checked(bad, 'ZSCORE', KEYS[2], 'x')
if #bad > 0 then return corrupt(bad[1]) end
if (v or '') ~= ARGV[3] then return 0 end
local drop = tonumber(ARGV[5])
if drop > 0 then rcall('HDEL', KEYS[1], unpack(ARGV, 6, 5 + drop)) end
if #ARGV > 5 + drop then rcall('HSET', KEYS[1], unpack(ARGV, 6 + drop)) end
rcall('ZADD', KEYS[2], ARGV[4], string.sub(KEYS[1], #BASE + 10))
return 1
