--[[
  Write a schedule if it is still the version its writer read (a compare-and-set: an upsert,
  pause or resume computed in the client from what it read).
  KEYS[1] schedule_state  KEYS[2] schedules (index: id scored by its next fire ms, inf when
  none)  KEYS[3] schedule_defs  KEYS[4] schedule_bodies
  ARGV[3] schedule id  ARGV[4] version read ('' = no schedule)  ARGV[5] index score
  ARGV[6] state (v:f:l:m:a:p:n)  ARGV[7] index score read ('' = none: schedule_fire_due moves
  only the index, so the version alone does not tell a fire since the read)
  ARGV[8] '1' when the definition and body follow (an upsert)  ARGV[9] definition  ARGV[10] body
  Returns 1 when written, 0 when the schedule changed since it was read (nothing written).
]]
local bad = {}
local state = checked(bad, 'HGET', KEYS[1], ARGV[3])
local z = checked(bad, 'ZSCORE', KEYS[2], ARGV[3])
checked(bad, 'HLEN', KEYS[3])
checked(bad, 'HLEN', KEYS[4])
if #bad > 0 then return corrupt(bad[1]) end
if (state and string.match(state, '^(%d+):') or '') ~= ARGV[4] then return 0 end
-- (A schedule made anew replaces an index entry left without one.)
if state and not score_is(z, ARGV[7]) then return 0 end
rcall('HSET', KEYS[1], ARGV[3], ARGV[6])
if ARGV[8] == '1' then
  rcall('HSET', KEYS[3], ARGV[3], ARGV[9])
  rcall('HSET', KEYS[4], ARGV[3], ARGV[10])
end
rcall('ZADD', KEYS[2], ARGV[5], ARGV[3])
return 1
