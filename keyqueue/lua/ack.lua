--[[
  Acknowledge deliveries: each message whose receipt is current is deleted.
  KEYS[1] processing  KEYS[2] timers  KEYS[3] counters
  ARGV[3] bucket ms  ARGV[4] k  ARGV[5..] id, receipt pairs: first the k whose receipt does not
  end in 'g', then those that do (the item keys are made here: an argument costs Redis more
  than the concatenation)
  Returns the number acknowledged (a delivery listed twice counts once). An acknowledged
  grouped message (field g) frees its group's next: its receipt ends in 'g' (claim.lua), so
  only the pairs after the first k have g read (sorted by the client: a look at each receipt
  here costs more than the field), and those come once each (the client drops a repeated
  pair: a grouped delivery listed twice would end its group's current message twice).
]]
local bucket_ms = tonumber(ARGV[3])
local bad = wrong_type({KEYS[1], 'set', KEYS[2], 'zset'})
if bad then return corrupt(bad) end

-- Current receipts: the ids, their item keys and timers (text, as read). A delivery listed
-- twice is here twice: SREM below counts it once, and the other writes do not mind.
local item = BASE .. 'item:'
local ids, keys, timers = {}, {}, {}
-- The groups of the grouped ones among them, and the place in ids of each.
local gs, at = {}, {}
local m = 0
local plain_end = 5 + 2 * tonumber(ARGV[4])
for i = 5, #ARGV, 2 do
  local ik = item .. ARGV[i]
  local f
  if i < plain_end then f = redis.pcall('HMGET', ik, 'c', 'd')
  else f = redis.pcall('HMGET', ik, 'c', 'd', 'g') end
  if f.err then return corrupt(ik) end  -- (a read: nothing written yet)
  if f[1] == ARGV[i + 1] then
    m = m + 1
    ids[m], keys[m], timers[m] = ARGV[i], ik, f[2]
    if f[3] then gs[#gs + 1], at[#gs + 1] = f[3], m end
  end
end
if m == 0 then return 0 end

-- Still owned: in processing. Every one, but for a broken state.
local held = rcall('SMISMEMBER', KEYS[1], unpack(ids))
for i = 1, m do
  if held[i] ~= 1 then
    local gone, gone_keys, gone_timers, gone_gs = {}, {}, {}, {}
    for j = 1, m do
      if held[j] == 1 then
        gone[#gone + 1], gone_keys[#gone_keys + 1], gone_timers[#gone_timers + 1] = ids[j], keys[j], timers[j]
      end
    end
    for j = 1, #gs do
      if held[at[j]] == 1 then gone_gs[#gone_gs + 1] = gs[j] end
    end
    ids, keys, timers, gs = gone, gone_keys, gone_timers, gone_gs
    break
  end
end
if #ids == 0 then return 0 end
local groups, order = by_bucket(ids, timers, bucket_ms)
bad = bad_bucket(order)
if bad then return corrupt(bad) end
-- The counters are checked by a read (a hash, its count a number), then the groups' next
-- messages are taken, first of the writes: a group key of the wrong type fails the call
-- there, every pop undone (see group_take). Either way nothing has changed. The acked count
-- is SREM's, which counts a delivery listed twice once.
local counted = redis.pcall('HGET', KEYS[3], 'acked')
if type(counted) == 'table' or not_integer(counted) then return corrupt(KEYS[3]) end
local take
if #gs > 0 then
  local err
  take, err = group_take(gs)
  if not take then return err end
end
local n = rcall('SREM', KEYS[1], unpack(ids))
rcall('HINCRBY', KEYS[3], 'acked', n)
drop_timers(KEYS[2], groups, order)
rcall('DEL', unpack(keys))
if take then group_give(take) end
return n
