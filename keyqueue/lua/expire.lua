--[[
  One bounded step of the expiry sweep: delete, as an ack does, the waiting and delayed
  messages whose age (now minus t, the first enqueue or the last requeue) reached the
  retention, and the dead letters dead-lettered (x) longer than dead_retention ago. In-flight
  messages keep their delivery: the reaper deletes them at their deadline instead.
  Phases, in order: 'head' (the head of the FIFO, where the oldest wait: its expired ones
  leave the list in one rewrite of the window, stale entries with them, while whole windows
  went), 'waiting' (SSCAN of items: a released message may wait behind younger ones, so the
  head is not enough; the few found there leave the list by LREM when near its head), 'delayed' (the timer sets, bucket by bucket,
  in index order; a delayed message expires before its delay ends), 'dead' (the head of the
  dead list, which is in the order of dead-lettering). At most `limit` ids per call.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead  KEYS[6] signal
  KEYS[7] config  KEYS[8] counters (expired)
  ARGV[3] retention ms ('' = none)  ARGV[4] dead retention ms ('' = none)  ARGV[5] bucket ms
  ARGV[6] limit  ARGV[7] phase  ARGV[8] SSCAN cursor  ARGV[9] rank of the timer bucket
  A released grouped message deleted frees its group's next (held messages expire when they
  are released: those that reached the retention are deleted then, group_fill).
  Returns {expired, phase, cursor, rank, done (1/0)}.
]]
local retention = tonumber(ARGV[3])
local dead_retention = tonumber(ARGV[4])
local bucket_ms = tonumber(ARGV[5])
local limit = tonumber(ARGV[6])
local phase, cursor, rank = ARGV[7], ARGV[8], tonumber(ARGV[9])
-- How far down the list an expired message's entry is looked for and removed (a step of
-- 200 ids then compares at most 20,000 entries).
local NEAR_HEAD = 100
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list', KEYS[8], 'hash'}) or group_bad({})
if bad then return corrupt(bad) end

local now = now_ms()
local expired = 0
group_cutoff = retention and now - retention

-- The reply, the expired ones counted first (with the held ones group_fill deleted).
local function reply(phase_, cursor_, rank_, done)
  expired = expired + group_expired
  if expired > 0 then rcall('HINCRBY', KEYS[8], 'expired', expired) end
  return {expired, phase_, cursor_, rank_, done}
end

-- The t of each id (false for an item of the wrong type: left to the reaper to report).
local function enqueued(ids)
  local out = {}
  for i = 1, #ids do
    local t = redis.pcall('HGET', item_key(ids[i]), 't')
    out[i] = type(t) == 'string' and tonumber(t) or false
  end
  return out
end

if phase == 'head' then
  if not retention then
    phase = 'dead'
  else
    local cutoff = now - retention
    local window = rcall('LRANGE', KEYS[1], 0, limit - 1)
    local ts = enqueued(window)
    local waiting = #window > 0 and rcall('SMISMEMBER', KEYS[2], unpack(window)) or {}
    local held = #window > 0 and rcall('SMISMEMBER', KEYS[3], unpack(window)) or {}
    local kept, keys, gone, stale = {}, {}, {}, 0
    for i = 1, #window do
      local id = window[i]
      if waiting[i] == 0 then
        -- a stale entry (its message is not waiting): dropped, as a claim drops it
        stale = stale + 1
      -- waiting and not owned (the ownership rule), as a claim takes it
      elseif ts[i] and ts[i] <= cutoff and held[i] == 0 and not gone[id] then
        gone[id] = true
        keys[#keys + 1] = item_key(id)
      elseif not gone[id] then
        kept[#kept + 1] = id
      end
    end
    if #keys > 0 or stale > 0 then
      -- The window again without them, in its order: one pass instead of an LREM each.
      rcall('LTRIM', KEYS[1], #window, -1)
      for i = #kept, 1, -1 do rcall('LPUSH', KEYS[1], kept[i]) end
    end
    if #keys > 0 then
      local ids = {}
      for id in pairs(gone) do ids[#ids + 1] = id end
      rcall('SREM', KEYS[2], unpack(ids))
      local ended = released_groups(ids, true)
      rcall('DEL', unpack(keys))
      for _, g in ipairs(ended) do group_end(g) end
      expired = #keys
    end
    if #window < limit or #kept > 0 then phase, cursor = 'waiting', '0' end
  end
elseif phase == 'waiting' then
  if not retention then
    phase, cursor = 'dead', '0'
  else
    local cutoff = now - retention
    local scan = rcall('SSCAN', KEYS[2], cursor, 'COUNT', limit)
    local ids = scan[2]
    local ts = enqueued(ids)
    local held = #ids > 0 and rcall('SMISMEMBER', KEYS[3], unpack(ids)) or {}
    for i = 1, #ids do
      local id = ids[i]
      -- not owned, and SREM items returning 1 makes it ours (the ownership rule), as a claim's does
      if ts[i] and ts[i] <= cutoff and held[i] == 0 and rcall('SREM', KEYS[2], id) == 1 then
        -- its entry goes when near the head; further down it stays, a stale entry that claims
        -- and the head of this sweep drop (an LREM there would walk the list for each)
        if rcall('LPOS', KEYS[1], id, 'MAXLEN', NEAR_HEAD) then rcall('LREM', KEYS[1], 1, id) end
        local ended = released_groups({id}, true)
        rcall('DEL', item_key(id))
        if ended[1] then group_end(ended[1]) end
        expired = expired + 1
      end
    end
    cursor = scan[1]
    if cursor == '0' then phase = 'delayed' end
  end
  if phase == 'delayed' then rank = 0 end
elseif phase == 'delayed' then
  local z = retention and rcall('ZRANGE', KEYS[4], rank, rank) or {}
  if #z == 0 then
    phase, cursor = 'dead', '0'
  else
    local cutoff = now - retention
    local b = z[1]
    local tk = timer_key(b)
    if wrong_type({tk, 'set'}) then
      rank, cursor = rank + 1, '0'  -- left to the reaper to report
    else
      local scan = rcall('SSCAN', tk, cursor, 'COUNT', limit)
      local ids = scan[2]
      if #ids > 0 then
        local held = rcall('SMISMEMBER', KEYS[3], unpack(ids))
        local waiting = rcall('SMISMEMBER', KEYS[2], unpack(ids))
        for i = 1, #ids do
          local id = ids[i]
          if held[i] == 0 and waiting[i] == 0 then
            local f = redis.pcall('HMGET', item_key(id), 't', 'd')
            local t, d = not f.err and tonumber(f[1]), not f.err and tonumber(f[2])
            -- delayed: a timer, and neither owned nor waiting (a dead letter has no d)
            if t and d and t <= cutoff then
              rcall('SREM', tk, id)
              local own = timer_key(bucket_of(d, bucket_ms))
              if own ~= tk then rcall('SREM', own, id) end
              local ended = released_groups({id}, false)
              rcall('DEL', item_key(id))
              if ended[1] then group_end(ended[1]) end
              expired = expired + 1
            end
          end
        end
      end
      cursor = scan[1]
      if cursor == '0' then
        if rcall('EXISTS', tk) == 0 then rcall('ZREM', KEYS[4], b) else rank = rank + 1 end
      end
    end
  end
else  -- dead: from the head while dead-lettered at least dead_retention ago
  if dead_retention then
    local cutoff = now - dead_retention
    local ids = rcall('LRANGE', KEYS[5], 0, limit - 1)
    local gone, keys = 0, {}
    for i = 1, #ids do
      local ik = item_key(ids[i])
      local f = redis.pcall('HMGET', ik, 'x', 't')
      if f.err then break end  -- left to the reaper to report
      local x = tonumber(f[1])
      if not x and not f[2] then  -- no message behind the entry
        gone = i
      elseif not x then  -- dead-lettered before x was recorded: its dead_retention starts now
        rcall('HSET', ik, 'x', fmt(now))
        break
      elseif x <= cutoff then
        gone = i
        keys[#keys + 1] = ik
      else
        break
      end
    end
    if gone > 0 then
      rcall('LTRIM', KEYS[5], gone, -1)
      if #keys > 0 then
        rcall('DEL', unpack(keys))
        expired = expired + #keys
      end
    end
    if gone == limit then  -- maybe more
      return reply('dead', '0', 0, 0)
    end
  end
  return reply('head', '0', 0, 1)
end
return reply(phase, cursor, rank, 0)
