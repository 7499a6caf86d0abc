--[[
  Claim up to `count` messages from the head of the FIFO for a visibility timeout.
  Ownership rule of the design: the caller owns an id that it moves into processing (not
  there yet) and out of items (still there); list entries failing it are stale and
  dropped. A message out of receives goes to dead letters instead of being delivered.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead  KEYS[6] signal
  KEYS[7] config  KEYS[8] counters (dead_lettered)
  ARGV[3] count  ARGV[4] visibility ms  ARGV[5] bucket ms  ARGV[6] max receives ('' = no limit)
  Returns {dead_lettered, config_missing (1/0), next_timer, id, b, t, r, d, c, e, a, f, id, ...}:
  next_timer is ms from now to the earliest timer in the index (nil: none), so the client
  knows when a reap may find something, at no extra round trip.
]]
-- The fields a claim needs, by one HMGET for a body of up to two fields (the common case:
-- no table of every field, no concatenation of many), else read_item. nil when absent,
-- false when the key holds the wrong type (the read fails, nothing is written).
local function read_for_claim(ik)
  local v = redis.pcall('HMGET', ik, 'b', 'b1', 't', 'r', 'n', 'e', 'a', 'f')
  if v.err then return false end
  -- maybe b2, b3, ...; or no t (not written by an enqueue): read as before, whole
  if not v[3] or (v[2] and #v[2] == #v[1]) then return read_item(ik) end
  return {b = v[2] and v[1] .. v[2] or v[1], t = v[3], r = v[4], n = v[5], e = v[6], a = v[7], f = v[8]}
end

local count = tonumber(ARGV[3])
local bucket_ms = tonumber(ARGV[5])
local max_receives = tonumber(ARGV[6])

-- Every key's type is known before the first write, at few extra calls: the index and the
-- signal by the reads this script makes anyway (redis.pcall), the queue and the sets by the
-- first round's reads, the timer set by its SADD (the first write of a round), and the two
-- keys written only for a dead letter by TYPE, when dead letters are possible at all.
local bad = {}
local first = checked(bad, 'ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
local tokens = checked(bad, 'LLEN', KEYS[6])
if #bad > 0 then return corrupt(bad[1]) end
if max_receives then
  local wrong = wrong_type({KEYS[5], 'list', KEYS[8], 'hash'})
  if wrong then return corrupt(wrong) end
end
local now = now_ms()
local deadline = now + tonumber(ARGV[4])
local deadline_s, now_s = fmt(deadline), fmt(now)
local tk = timer_key(bucket_of(deadline, bucket_ms))

local out = {0, rcall('EXISTS', KEYS[7]) == 0 and 1 or 0, false}
local claimed = 0
local written = false  -- once true, a failing read ends the claim with what it took
while claimed < count do
  -- at most 1,000 per round: unpack() takes only about 8,000 values
  local heads = checked(bad, 'LRANGE', KEYS[1], 0, math.min(count - claimed, 1000) - 1)
  if not heads then return corrupt(KEYS[1]) end  -- (only the first round can fail)
  if #heads == 0 then break end
  -- Read every item of this round before the first write; a wrong type fails the read.
  local items = {}
  for i = 1, #heads do
    local f = read_for_claim(item_key(heads[i]))
    if f == false then
      if not written then return corrupt(item_key(heads[i])) end
      heads = {unpack(heads, 1, i - 1)}  -- deliver what this call took; the next reports it
      count = 0
      break
    end
    items[i] = f
  end
  if #heads == 0 then break end
  local waiting = checked(bad, 'SMISMEMBER', KEYS[2], unpack(heads))
  local held = checked(bad, 'SMISMEMBER', KEYS[3], unpack(heads))
  if #bad > 0 then return corrupt(bad[1]) end  -- (only the first round can fail)
  local leaving, taken, fields, dead, gone, seen = {}, {}, {}, {}, {}, {}
  for i, id in ipairs(heads) do
    if waiting[i] == 1 and held[i] == 0 and not seen[id] then
      seen[id] = true
      leaving[#leaving + 1] = id
      local f = items[i]
      if f then
        local r = tonumber(f.r or '0')
        if max_receives and r >= max_receives then
          dead[#dead + 1] = id
          gone[#gone + 1] = f
        else
          taken[#taken + 1] = id
          fields[#fields + 1] = f
        end
      end
    end
  end
  -- The writes of this round; the timer set's SADD first, as its type check.
  if #taken > 0 then
    local added = redis.pcall('SADD', tk, unpack(taken))
    if type(added) == 'table' and added.err then
      if not written then return write_error(added, tk) end
      break
    end
  end
  written = true
  rcall('LTRIM', KEYS[1], #heads, -1)
  for j, id in ipairs(taken) do
    local f = fields[j]
    local n = tonumber(f.n or '0') + 1
    f.r, f.c, f.d = fmt(tonumber(f.r or '0') + 1), fmt(n) .. '-' .. now_s, deadline_s
    if f.f then rcall('HSET', item_key(id), 'r', f.r, 'n', fmt(n), 'c', f.c, 'd', deadline_s)
    else  -- the first delivery also records when it was made (SQS's ApproximateFirstReceiveTimestamp)
      f.f = now_s
      rcall('HSET', item_key(id), 'r', f.r, 'n', fmt(n), 'c', f.c, 'd', deadline_s, 'f', now_s)
    end
    push_message(out, id, f)
  end
  for j, id in ipairs(dead) do
    if not gone[j].e then rcall('HSET', item_key(id), 'e', 'exceeded max_receives (' .. ARGV[6] .. ')') end
  end
  if #leaving > 0 then rcall('SREM', KEYS[2], unpack(leaving)) end
  if #taken > 0 then
    rcall('SADD', KEYS[3], unpack(taken))
    claimed = claimed + #taken
  end
  if #dead > 0 then
    rcall('RPUSH', KEYS[5], unpack(dead))
    rcall('HINCRBY', KEYS[8], 'dead_lettered', #dead)
    out[1] = out[1] + #dead
  end
end
local earliest = first[2] and tonumber(first[2])
if claimed > 0 then
  rcall('ZADD', KEYS[4], 'LT', deadline, bucket_of(deadline, bucket_ms))
  if tokens == 0 and rcall('LLEN', KEYS[1]) > 0 then rcall('RPUSH', KEYS[6], '1') end
  if not earliest or deadline < earliest then earliest = deadline end
end
if earliest then out[3] = math.floor(earliest - now) end
return out
