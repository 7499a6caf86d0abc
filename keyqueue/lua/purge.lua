--[[
  Delete up to `limit` messages of one source (their ids and item hashes); the caller loops
  until done so Redis is never blocked long. seq, config and dedup keys are kept.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead
  ARGV[3] bucket ms  ARGV[4] source ('waiting' | 'delayed' | 'dead' | 'processing')
  ARGV[5] limit  ARGV[6] bucket offset and ARGV[7] SSCAN cursor in it (delayed only: where
  the previous call stopped; buckets before the offset keep only ids in flight)
  ARGV[8..] (dead only, optional) these dead letters only: those no longer dead are left alone
  'waiting' deletes the held messages of every group first (they wait too); a released grouped
  message deleted frees its group's next (counted when it is purged in turn).
  Returns {deleted, next bucket offset, next cursor, done (1/0)}.
]]
local bucket_ms = tonumber(ARGV[3])
local source = ARGV[4]
local limit = tonumber(ARGV[5])
local offset = tonumber(ARGV[6])
local cursor = ARGV[7]
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list'})
if bad then return corrupt(bad) end
local all_groups = rcall('TYPE', BASE .. 'groups')['ok'] == 'hash' and rcall('HKEYS', BASE .. 'groups') or {}
bad = group_bad(all_groups)
if bad then return corrupt(bad) end

if source == 'dead' and #ARGV > 7 then
  local n = 0
  for i = 8, #ARGV do
    if rcall('LREM', KEYS[5], 0, ARGV[i]) > 0 then
      rcall('DEL', item_key(ARGV[i]))
      n = n + 1
    end
  end
  return {n, 0, '0', 1}
end

local function item_keys(ids)
  local ks = {}
  for i, id in ipairs(ids) do ks[i] = item_key(id) end
  return ks
end

if source == 'waiting' then
  local n = 0
  for _, g in ipairs(all_groups) do
    if n >= limit then break end
    local gk = group_key(g)
    local ids = rcall('LRANGE', gk, 0, limit - n - 1)
    if #ids > 0 then
      rcall('LTRIM', gk, #ids, -1)
      rcall('DEL', unpack(item_keys(ids)))
      if rcall('DECRBY', BASE .. 'held', #ids) <= 0 then rcall('DEL', BASE .. 'held') end
      n = n + #ids
    end
  end
  if n > 0 then return {n, 0, '0', 0} end
end

if source == 'waiting' or source == 'dead' then
  local list = source == 'waiting' and KEYS[1] or KEYS[5]
  local ids = rcall('LRANGE', list, 0, limit - 1)
  if #ids == 0 then return {0, 0, '0', 1} end
  rcall('LTRIM', list, #ids, -1)
  local gone = ids
  if source == 'waiting' then  -- only ids still waiting own their item hash
    local waiting = rcall('SMISMEMBER', KEYS[2], unpack(ids))
    gone = {}
    for i, id in ipairs(ids) do if waiting[i] == 1 then gone[#gone + 1] = id end end
    if #gone > 0 then rcall('SREM', KEYS[2], unpack(gone)) end
  end
  local ended = source == 'waiting' and #all_groups > 0 and released_groups(gone, true) or {}
  if #gone > 0 then rcall('DEL', unpack(item_keys(gone))) end
  for _, g in ipairs(ended) do group_end(g) end
  return {#gone, 0, '0', (#ids < limit) and 1 or 0}
elseif source == 'processing' then
  local ids = rcall('SRANDMEMBER', KEYS[3], limit)
  if #ids == 0 then return {0, 0, '0', 1} end
  local timers = {}
  for i, id in ipairs(ids) do timers[i] = tonumber(rcall('HGET', item_key(id), 'd') or '0') end
  local groups, order = by_bucket(ids, timers, bucket_ms)
  bad = bad_bucket(order)
  if bad then return corrupt(bad) end
  rcall('SREM', KEYS[3], unpack(ids))
  drop_timers(KEYS[4], groups, order)
  local ended = #all_groups > 0 and released_groups(ids, true) or {}
  rcall('DEL', unpack(item_keys(ids)))
  for _, g in ipairs(ended) do group_end(g) end
  return {#ids, 0, '0', (#ids < limit) and 1 or 0}
end

-- delayed: ids in timer buckets that are neither owned nor waiting, scanned in chunks
local n, examined = 0, 0
while examined < limit do
  local z = rcall('ZRANGE', KEYS[4], offset, offset)
  if #z == 0 then return {n, offset, '0', 1} end
  local tk = timer_key(z[1])
  if wrong_type({tk, 'set'}) then return corrupt(tk) end
  local scan = rcall('SSCAN', tk, cursor, 'COUNT', math.min(limit, 1000))
  cursor = scan[1]
  local ids = scan[2]
  examined = examined + math.max(#ids, 1)
  if #ids > 0 then
    local held = rcall('SMISMEMBER', KEYS[3], unpack(ids))
    local waiting = rcall('SMISMEMBER', KEYS[2], unpack(ids))
    local gone = {}
    for i, id in ipairs(ids) do
      if held[i] == 0 and waiting[i] == 0 and rcall('HEXISTS', item_key(id), 'd') == 1 then
        gone[#gone + 1] = id
      end
    end
    if #gone > 0 then
      rcall('SREM', tk, unpack(gone))
      local ended = #all_groups > 0 and released_groups(gone, false) or {}
      rcall('DEL', unpack(item_keys(gone)))
      for _, g in ipairs(ended) do group_end(g) end
      n = n + #gone
    end
  end
  if cursor == '0' then
    if rcall('EXISTS', tk) == 0 then rcall('ZREM', KEYS[4], z[1]) else offset = offset + 1 end
  end
end
return {n, offset, cursor, 0}
