--[[
  Read up to `count` messages of one source without changing anything.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead
  ARGV[3] source ('waiting' | 'processing' | 'delayed' | 'dead' | 'held')  ARGV[4] count
  Returns {id, b, t, r, d, c, e, a, f, s, g, ...}: waiting and dead in list order, processing
  by id, delayed by the time they become visible, held group by group (each in its order).
]]
local source = ARGV[3]
local count = tonumber(ARGV[4])
local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list'})
if bad then return corrupt(bad) end

local ids = {}
if count <= 0 then return ids end
if source == 'waiting' then ids = rcall('LRANGE', KEYS[1], 0, count - 1)
elseif source == 'dead' then ids = rcall('LRANGE', KEYS[5], 0, count - 1)
elseif source == 'processing' then ids = rcall('SORT', KEYS[3], 'LIMIT', 0, count)
elseif source == 'held' then
  bad = group_bad({})
  if bad then return corrupt(bad) end
  local gs = rcall('HKEYS', BASE .. 'groups')
  table.sort(gs)
  for _, g in ipairs(gs) do
    if #ids >= count then break end
    local gk = group_key(g)
    if wrong_type({gk, 'list'}) then return corrupt(gk) end
    for _, id in ipairs(rcall('LRANGE', gk, 0, count - #ids - 1)) do ids[#ids + 1] = id end
  end
else
  local buckets = rcall('ZRANGE', KEYS[4], 0, -1)
  table.sort(buckets, function(a, b) return tonumber(a) < tonumber(b) end)
  local found = {}
  for _, b in ipairs(buckets) do
    if #found >= count then break end
    local tk = timer_key(b)
    if wrong_type({tk, 'set'}) then return corrupt(tk) end
    for _, id in ipairs(rcall('SMEMBERS', tk)) do
      local d = tonumber(rcall('HGET', item_key(id), 'd') or '')
      if d and rcall('SISMEMBER', KEYS[3], id) == 0 and rcall('SISMEMBER', KEYS[2], id) == 0 then
        found[#found + 1] = {d, tonumber(id), id}
      end
    end
  end
  table.sort(found, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
  for i = 1, math.min(count, #found) do ids[i] = found[i][3] end
end

local out = {}
for _, id in ipairs(ids) do
  local f = read_item(item_key(id))
  if f == false then return corrupt(item_key(id)) end
  if f then push_message(out, id, f) end
end
return out
