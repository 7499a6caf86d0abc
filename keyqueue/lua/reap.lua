--[[
  Reap due timers. Expired deliveries go back to the tail of the FIFO (or to dead letters
  when out of receives, deleted when their age reached the retention); due delayed messages
  become visible (or are deleted, expired). Each id's own timer decides,
  so precision does not depend on the bucket width. The index scores a bucket by the
  earliest timer it may hold, so only buckets that can hold something due are examined.
  At most `limit` ids are examined per call; the caller loops with the returned position.
  A bucket of at most `limit` ids is examined in one call and rescored exactly; a larger
  one is scanned in chunks (SSCAN) and stays due until it shrinks.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead  KEYS[6] signal
  KEYS[7] config  KEYS[8] counters (redelivered, dead_lettered, expired)
  ARGV[3] bucket ms  ARGV[4] max receives ('' = no limit)  ARGV[5] limit
  ARGV[6] bucket being scanned ('' = next due)  ARGV[7] its SSCAN cursor  ARGV[8] due buckets to skip
  ARGV[9] retention ms ('' = none)  ARGV[10] ids deferred by the chunks of the scan so far
  (space-separated, '' = none)
  A grouped message (field g) that goes to dead letters or is deleted frees its group's next;
  a delayed one that falls due joins the end of its group (released, or held behind it), those
  one call finds due in the order they fell due (in_due_order). A bucket scanned in chunks
  could split those across calls: there they are left in their timer set and named in the
  returned position (deferred), and join, in that order, once the scan has been through the
  whole bucket (a deferring client that dies leaves them to the next scan).
  Returns {requeued, dead_lettered, released, bucket, cursor, skip, done (1/0),
           config_missing (1/0), expired, deferred, corrupt keys...}
]]
local bucket_ms = tonumber(ARGV[3])
local max_receives = tonumber(ARGV[4])
local retention = tonumber(ARGV[9])
local limit = tonumber(ARGV[5])
local budget = limit
local bucket, cursor, skip = ARGV[6], ARGV[7], tonumber(ARGV[8])
-- Due delayed grouped messages a chunked scan leaves for its end (see the header): at most
-- a limit's worth, past which they join as found.
local deferred, is_deferred = {}, {}
local function defer(id)
  if not is_deferred[id] then deferred[#deferred + 1] = id; is_deferred[id] = true end
end
for id in string.gmatch(ARGV[10] or '', '%d+') do defer(id) end
local deferring = false
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list', KEYS[6], 'list', KEYS[8], 'hash'})
if bad then return corrupt(bad) end

local now = now_ms()
-- A message enqueued (or requeued) at or before `cutoff` has reached the retention.
local cutoff = retention and now - retention
group_cutoff = cutoff
local res = {0, 0, 0, 0}
local broken = {}
local moved = false

-- Handle one id found in timer set tk (bucket ends at `bucket_end` ms) by the rules of
-- keyqueue/core/states.py (owed, decide), which the script-free mode's reaper applies too: a state a live
-- operation of that mode passes through is left alone until the bucket has fully passed.
-- Returns the id's timer if it stays in tk, else nil.
-- Take id out of timer set tk and out of the set of its own timer d, if that is another.
local function untime(tk, id, d)
  rcall('SREM', tk, id)
  if d and timer_key(bucket_of(d, bucket_ms)) ~= tk then rcall('SREM', timer_key(bucket_of(d, bucket_ms)), id) end
end

-- A released grouped message of group g ended: its group's next is released (a group key of
-- the wrong type is reported and left as it is).
local function group_ended(g)
  if not g then return end
  local wrong = group_bad({g})
  if wrong then broken[#broken + 1] = wrong; return end
  group_end(g)
end

-- f: the item's fields as examine() read them (r, c; g: its group); released: its group when
-- it counts among the group's released messages (else a grouped one joins its group).
local function to_waiting(tk, ik, id, d, f, released)
  local g = f[6]
  if g and not released and group_bad({g}) then broken[#broken + 1] = group_key(g); return now end
  untime(tk, id, d)
  first_written(ik, f[2], f[4])
  -- A write even when there is no c or d to delete: a script-free claimer WATCHes the hash
  -- before it drops a list entry it found stale.
  if rcall('HDEL', ik, 'c', 'd') == 0 then rcall('HINCRBY', ik, 'n', 0) end
  if g and not released then group_join(id, g) else make_waiting(KEYS[1], KEYS[2], id) end
  moved = true
end

-- Whether enqueue time t (text or false) has reached the retention.
local function lapsed(t)
  return cutoff and t and tonumber(t) <= cutoff
end

-- Delete an expired message that is no longer waiting, as an ack does (g: its group when it
-- counts among the group's released messages).
local function expire(tk, ik, id, d, g)
  untime(tk, id, d)
  rcall('SREM', KEYS[3], id)
  rcall('DEL', ik)
  res[4] = res[4] + 1
  group_ended(g)
end

local function examine(tk, id, bucket_end)
  local ik = item_key(id)
  local settled = now >= bucket_end
  local t = rcall('TYPE', ik)['ok']
  if t == 'none' then
    if not settled then return bucket_end end
    rcall('SREM', tk, id); rcall('SREM', KEYS[3], id); rcall('SREM', KEYS[2], id)
    return nil
  end
  if t ~= 'hash' then broken[#broken + 1] = ik; return now end  -- untouched, stays due
  local f = rcall('HMGET', ik, 'd', 'r', 'e', 'c', 't', 'g', 'j')
  local d = tonumber(f[1])
  local g, j = f[6], f[7]
  local in_processing = rcall('SISMEMBER', KEYS[3], id) == 1
  local released = (in_processing or j) and g
  local waiting = rcall('SISMEMBER', KEYS[2], id) == 1
  if in_processing and f[4] and d then  -- a delivery
    if d > now then return d end
    if lapsed(f[5]) then expire(tk, ik, id, d, released); return nil end
    untime(tk, id, d)
    rcall('SREM', KEYS[3], id)
    first_written(ik, f[2], f[4])
    rcall('HDEL', ik, 'c', 'd')
    local r = tonumber(f[2] or '1')  -- (no r beside a receipt: a lean first delivery)
    if max_receives and r >= max_receives then
      if not f[3] then
        rcall('HSET', ik, 'e', 'visibility timeout expired on receive ' .. fmt(r) .. ' of ' .. ARGV[4])
      end
      rcall('HSET', ik, 'x', fmt(now))
      rcall('RPUSH', KEYS[5], id)
      res[2] = res[2] + 1
      if released then rcall('HDEL', ik, 'j') end
      group_ended(released)
      return nil
    end
    res[1] = res[1] + 1
    make_waiting(KEYS[1], KEYS[2], id)
    moved = true
    return nil
  end
  if in_processing then  -- owned, but the claim never wrote its receipt
    if not settled then return bucket_end end
    rcall('SREM', KEYS[3], id)
    if waiting then rcall('SREM', tk, id); return nil end
    if d then
      -- (delayed now: a grouped one still counts in its group, as in flight it did)
      if d > now then
        if released and not j then rcall('HSET', ik, 'j', '1') end
        return d
      end
      res[1] = res[1] + 1
      return to_waiting(tk, ik, id, d, f, released)
    end
    if rcall('LPOS', KEYS[5], id) then
      rcall('SREM', tk, id)
      if released then rcall('HDEL', ik, 'j'); group_ended(released) end  -- (dead: it counted in flight)
      return nil
    end
    res[1] = res[1] + 1
    return to_waiting(tk, ik, id, d, f, released)
  end
  if waiting then
    if not settled then return bucket_end end
    rcall('SREM', tk, id)
    if d or f[4] then
      first_written(ik, f[2], f[4])
      rcall('HDEL', ik, 'c', 'd')
    end
    return nil
  end
  if d then  -- delayed (found in another bucket than its own, and dead: a stale entry)
    if timer_key(bucket_of(d, bucket_ms)) ~= tk then
      if not settled then return bucket_end end
      if rcall('LPOS', KEYS[5], id) then rcall('SREM', tk, id); return nil end
    end
    if d > now then return d end
    if lapsed(f[5]) then expire(tk, ik, id, d, released); return nil end
    if deferring and f[6] and not released and #deferred < limit then
      defer(id)
      return d
    end
    res[3] = res[3] + 1
    return to_waiting(tk, ik, id, d, f, released)
  end
  if not settled then return bucket_end end
  if rcall('LPOS', KEYS[5], id) then rcall('SREM', tk, id); return nil end
  res[1] = res[1] + 1  -- a message nothing referred to: adopted
  return to_waiting(tk, ik, id, d, f, released)
end

-- Whether the queue has had grouped messages (mark_groups), read once a call.
local grouped
local function has_groups()
  if grouped == nil then grouped = redis.pcall('HGET', KEYS[8], 'grouped') == '1' end
  return grouped
end

-- `ids` (each once) in the order examine() takes them: on a queue with groups, by timer and
-- then id, so that delayed messages of a group that fall due in one call join it in the
-- order they fell due (and those due at once, as one enqueue_many made them, in enqueue
-- order); else as they are.
local function in_due_order(ids)
  if #ids < 2 or not has_groups() then return ids end
  local at = {}
  for _, id in ipairs(ids) do
    local d = redis.pcall('HGET', item_key(id), 'd')
    at[id] = {type(d) == 'string' and tonumber(d) or 0, tonumber(id) or 0}
  end
  table.sort(ids, function(a, b)
    local x, y = at[a], at[b]
    if x[1] ~= y[1] then return x[1] < y[1] end
    if x[2] ~= y[2] then return x[2] < y[2] end
    return a < b
  end)
  return ids
end

-- Examine `ids` of timer set tk: the common case, a delivery whose visibility timeout passed
-- and whose timer is in tk, in bulk (one HMGET and one HDEL per id, the set and list writes
-- once for the group); every other id by examine(). Returns the earliest timer that stays.
local function examine_many(tk, ids, bucket_end)
  local min = nil
  local function keep(d) if d and (not min or d < min) then min = d end end
  if #ids == 0 then return nil end
  -- (kept lean: this loop runs once per message of a reap, so Lua's own time shows)
  local first, last = bucket_end - bucket_ms, bucket_end  -- the timers this bucket holds
  local held = rcall('SMISMEMBER', KEYS[3], unpack(ids))
  local expired, keys, fields, seen, rest = {}, {}, {}, {}, {}
  local pcall_ = redis.pcall
  for i = 1, #ids do
    local id = ids[i]
    if not seen[id] then  -- (SSCAN may return an id twice: it is examined once)
      seen[id] = true
      local ik = BASE .. 'item:' .. id
      -- (receives and last error only matter with a receive limit, t with a retention)
      local f = held[i] == 1 and ((max_receives or cutoff) and pcall_('HMGET', ik, 'd', 'c', 'r', 'e', 't', 'g')
                                  or pcall_('HMGET', ik, 'd', 'c', 'r'))
      local d = f and not f.err and f[2] and tonumber(f[1])
      if d and d >= first and d < last then
        if d > now then keep(d) else
          local n = #expired + 1
          expired[n] = id; keys[n] = ik; fields[n] = f
        end
      else
        rest[#rest + 1] = id
      end
    end
  end
  for _, id in ipairs(in_due_order(rest)) do keep(examine(tk, id, bucket_end)) end
  if #expired == 0 then return min end
  rcall('SREM', tk, unpack(expired))
  rcall('SREM', KEYS[3], unpack(expired))
  local all_back = not (max_receives or cutoff)  -- then every one goes back: the list is theirs
  local back, dead = all_back and expired or {}, {}
  for i = 1, #expired do
    local ik = keys[i]
    local f = fields[i]
    if cutoff and lapsed(f[5]) then  -- past its retention: deleted, not redelivered
      rcall('DEL', ik)
      res[4] = res[4] + 1
      group_ended(f[6])
    elseif not max_receives then
      first_written(ik, f[3], f[2])
      rcall('HDEL', ik, 'c', 'd')
      if not all_back then back[#back + 1] = expired[i] end
    else
      first_written(ik, f[3], f[2])
      rcall('HDEL', ik, 'c', 'd')
      local r = tonumber(f[3] or '1')  -- (no r beside a receipt: a lean first delivery)
      if r >= max_receives then
        if not f[4] then
          rcall('HSET', ik, 'e', 'visibility timeout expired on receive ' .. fmt(r) .. ' of ' .. ARGV[4])
        end
        rcall('HSET', ik, 'x', fmt(now))
        dead[#dead + 1] = expired[i]
        if f[6] then rcall('HDEL', ik, 'j'); group_ended(f[6]) end
      else
        back[#back + 1] = expired[i]
      end
    end
  end
  if #back > 0 then
    rcall('RPUSH', KEYS[1], unpack(back))
    rcall('SADD', KEYS[2], unpack(back))
    res[1] = res[1] + #back
    moved = true
  end
  if #dead > 0 then
    rcall('RPUSH', KEYS[5], unpack(dead))
    res[2] = res[2] + #dead
  end
  return min
end

local done = 0
while budget > 0 do
  if bucket == '' then
    local z = rcall('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', skip, 1)
    if #z == 0 then done = 1; break end
    bucket = z[1]
    cursor = '0'
  end
  local tk = timer_key(bucket)
  if wrong_type({tk, 'set'}) then
    broken[#broken + 1] = tk
    skip = skip + 1
    bucket = ''
  else
    local card = rcall('SCARD', tk)
    if cursor == '0' and card <= limit then
      if card > budget then break end  -- the next call takes it whole
      local min = examine_many(tk, rcall('SMEMBERS', tk), (tonumber(bucket) + 1) * bucket_ms)
      budget = budget - math.max(card, 1)
      if min then
        rcall('ZADD', KEYS[4], min, bucket)
        if min <= now then skip = skip + 1 end
      else
        rcall('ZREM', KEYS[4], bucket)
      end
      bucket = ''
    else
      local r = rcall('SSCAN', tk, cursor, 'COUNT', budget)
      cursor = r[1]
      deferring = has_groups()
      examine_many(tk, r[2], (tonumber(bucket) + 1) * bucket_ms)
      deferring = false
      budget = budget - math.max(#r[2], 1)
      if cursor == '0' then
        -- the whole bucket seen: the deferred ones join, in due order
        if #deferred > 0 then
          local ids = {}
          for _, id in ipairs(deferred) do if rcall('SISMEMBER', tk, id) == 1 then ids[#ids + 1] = id end end
          for _, id in ipairs(in_due_order(ids)) do examine(tk, id, (tonumber(bucket) + 1) * bucket_ms) end
          deferred, is_deferred = {}, {}
        end
        if rcall('EXISTS', tk) == 0 then rcall('ZREM', KEYS[4], bucket) else skip = skip + 1 end
        bucket = ''
      end
    end
  end
end
if moved then signal(KEYS[6]) end
if res[1] > 0 then rcall('HINCRBY', KEYS[8], 'redelivered', res[1]) end
if res[2] > 0 then rcall('HINCRBY', KEYS[8], 'dead_lettered', res[2]) end
res[4] = res[4] + group_expired
if res[4] > 0 then rcall('HINCRBY', KEYS[8], 'expired', res[4]) end
local out = {res[1], res[2], res[3], bucket, cursor, skip, done, rcall('EXISTS', KEYS[7]) == 0 and 1 or 0, res[4],
             table.concat(deferred, ' ')}
for _, k in ipairs(broken) do out[#out + 1] = k end
return out
