--[[
  Shared by every script (prepended at load time).
  Convention for every script:
    ARGV[1]  key base "P:{NAME}:"; scripts append only "item:<id>" and "timer:<bucket>"
    ARGV[2]  clock override in epoch ms ('' = the server's TIME); tests use it to control time
  Item hash fields: b body, t enqueued ms, r receives, n deliveries (never reset),
    c current receipt ('<n>-<claim ms>'), d timer ms (visibility deadline while processing,
    visible-at while delayed; absent while waiting or dead), e last error, a attributes
    (opaque bytes a surface such as the SQS API writes at enqueue), f first delivery ms,
    s the fire time ms of a schedule's message (written with n = 0, so a claim's second read finds it),
    g the message's group (read by a claim's first read while the queue holds groups), j '1'
    on a grouped message released with a delay after a delivery: a grouped message counts
    among its group's released messages while it waits (in items: held ones are not), is in
    flight (in processing), or is delayed with j (released_groups); j may stay after that.
  A first delivery is stored lean: its claim writes only c ('1-<ms>', and 'g' after it for a
    grouped message) and d; while r is absent beside c, r and n are 1 and f is the receipt's
    time (read_item), and first_written writes them out before anything deletes the receipt.
  Groups: hash `groups` maps a group with released messages to their count; list `group:<g>`
    holds the group's other messages in order (held), counted together in string `held`.
  Errors: redis.error_reply('KQCORRUPT <key>') when a key holds the wrong type; raised before
    any write, so a failing call changes nothing.
]]
local rcall = redis.call
local BASE = ARGV[1]

local function now_ms()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n) return string.format('%d', n) end

local function item_key(id) return BASE .. 'item:' .. id end

local function timer_key(bucket) return BASE .. 'timer:' .. bucket end

local function bucket_of(t, bucket_ms) return fmt(math.floor(t / bucket_ms)) end

-- The name of the first key whose type is neither `want` nor absent, else nil.
local function wrong_type(keys_and_types)
  for i = 1, #keys_and_types, 2 do
    local t = rcall('TYPE', keys_and_types[i])['ok']
    if t ~= 'none' and t ~= keys_and_types[i + 1] then return keys_and_types[i] end
  end
  return nil
end

local function corrupt(key) return redis.error_reply('KQCORRUPT ' .. key) end

-- Whether a counter's value as read (a string, or false when absent) is one INCRBY or
-- HINCRBY would refuse ("1.5", "1e3", " 5": Lua's tonumber takes them, Redis does not).
local function not_integer(v) return v and not string.match(v, '^-?%d+$') end

-- The error of a failed write (a redis.pcall reply) as the operation's: KQCORRUPT `key` when
-- the key holds the wrong type or a counter that is not a number, else Redis' own (OOM, ...).
local function write_error(reply, key)
  local e = reply.err
  if string.find(e, 'WRONGTYPE', 1, true) or string.find(e, 'not an integer', 1, true) then
    return corrupt(key)
  end
  return redis.error_reply(e)
end

-- Record that `id` has a timer at `t`; the index is scored by the earliest timer a bucket
-- may hold (ZADD LT only lowers), so the reaper skips buckets with nothing due.
local function timer_add(timers, id, t, bucket_ms)
  local b = bucket_of(t, bucket_ms)
  rcall('SADD', timer_key(b), id)
  rcall('ZADD', timers, 'LT', t, b)
end

local function timer_del(timers, id, t, bucket_ms)
  local b = bucket_of(t, bucket_ms)
  local k = timer_key(b)
  if rcall('SREM', k, id) == 1 and rcall('EXISTS', k) == 0 then rcall('ZREM', timers, b) end
end

-- The item keys of new ids first .. first+n-1 (their ids into `ids`), or nil when one exists:
-- item keys are new by construction, so one that exists means seq was overwritten.
local function new_item_keys(first, n, ids)
  local iks = {}
  for j = 1, n do
    local id = fmt(first + j - 1)
    ids[j] = id; iks[j] = BASE .. 'item:' .. id
  end
  for i = 1, n, 1000 do
    if rcall('EXISTS', unpack(iks, i, math.min(i + 999, n))) > 0 then return nil end
  end
  return iks
end

-- Wake one long-poll waiter; the list never holds more than one token.
-- (Once a call: after the first, the list holds a token, and no script takes one.)
local signalled = false
local function signal(sig)
  if signalled then return end
  if rcall('LLEN', sig) == 0 then rcall('RPUSH', sig, '1') end
  signalled = true
end

-- One message enqueued visible now (enqueue.lua's and enqueue_group.lua's hot path, their
-- KEYS): the writes check the types themselves (redis.pcall), in an order where each one
-- that can fail is undone with those before it, so a corrupt key changes nothing without a
-- read of every key first. undo_enqueue undoes the steps before `step` (2: the item, 3: the
-- FIFO entry, 4: the items entry) and the id, and returns `err`.
local function undo_enqueue(step, id, err)
  if step > 3 then rcall('SREM', KEYS[3], id) end
  if step > 2 then rcall('RPOP', KEYS[2]) end
  if step > 1 then rcall('DEL', item_key(id)) end
  if id == '1' then rcall('DEL', KEYS[1]) else rcall('DECR', KEYS[1]) end
  return err
end

-- The new id (INCR seq), or nil and the error: seq is not a number, or the id's item exists
-- (item keys are new by construction; one that exists means seq was overwritten).
local function next_id()
  local id = redis.pcall('INCR', KEYS[1])
  if type(id) == 'table' then return nil, write_error(id, KEYS[1]) end
  id = fmt(id)
  if rcall('EXISTS', item_key(id)) == 1 then return nil, undo_enqueue(1, id, corrupt(KEYS[1])) end
  return id
end

-- A queue's first message (id 1) marks the queue's counters hash (field item_format, which
-- no counter read lists): every message this version enqueues with attributes carries n (0
-- until delivered), so a claim on a marked queue reads a only where n shows (claim.lua). A
-- queue whose messages an older version may have written has no mark, and its claims read a
-- in every first read. (A mark only: a hash of the wrong type is left to the counters' users.)
local function mark_format(counters, id)
  if id == '1' then redis.pcall('HSET', counters, 'item_format', '2') end
end

-- A queue that has had a grouped message is marked so in its counters hash (field grouped,
-- which no counter read lists, never removed): its claims read g in their first read (a
-- grouped message is written without n), and the script-free mode refuses it.
local function mark_groups(counters)
  redis.pcall('HSET', counters, 'grouped', '1')
end

-- After the item's HSET: the FIFO and items entries when `waiting`, then the enqueued
-- counter. Returns the counter's reply (1: the counters were absent, as when Redis lost its
-- data), or nil and the error, every write undone.
local function push_new(id, waiting)
  local step = 2
  if waiting then
    local r = redis.pcall('RPUSH', KEYS[2], id)
    if type(r) == 'table' then return nil, undo_enqueue(2, id, write_error(r, KEYS[2])) end
    r = redis.pcall('SADD', KEYS[3], id)
    if type(r) == 'table' then return nil, undo_enqueue(3, id, write_error(r, KEYS[3])) end
    step = 4
  end
  local r = redis.pcall('HINCRBY', KEYS[7], 'enqueued', 1)
  if type(r) == 'table' then return nil, undo_enqueue(step, id, write_error(r, KEYS[7])) end
  return r
end

-- Move a waiting-eligible id to the tail of the FIFO.
local function make_waiting(queue, items, id)
  rcall('RPUSH', queue, id)
  rcall('SADD', items, id)
end

-- The same for ids, in calls of at most 1,000 (unpack() takes only about 8,000 values).
local function make_waiting_all(queue, items, ids)
  for i = 1, #ids, 1000 do
    local last = math.min(i + 999, #ids)
    rcall('RPUSH', queue, unpack(ids, i, last))
    rcall('SADD', items, unpack(ids, i, last))
  end
end

-- A schedule's state (schedule_state: v:f:l:m:a:p:n) after a fire of m messages, the latest
-- for fire time `last`, that skipped `missed` fire times and moved the next fire to `nxt`
-- ('' = none): nil when it cannot be read. `z` is the schedule's index score and `every` its
-- interval (ms, nil for cron): schedule_fire_due moves only the index of an `every` schedule
-- it fires, so the fires since the state was written are counted in here (as the client's
-- schedules.fired_since does).
local function state_fired(s, m, last, missed, nxt, z, every)
  local v, f, l, mi, rest, n = string.match(s, '^(%d+):(%d+):(%d*):(%d+):(%d+:[01]:)(%d*)$')
  if not v then return nil end
  f = tonumber(f)
  if every and z and n ~= '' and string.sub(rest, -2, -2) == '0' then
    local moved = z - tonumber(n)
    if moved > 0 and moved % every == 0 and z < math.huge then
      f = f + moved / every
      l = fmt(z - every)
    end
  end
  if m > 0 then l = last end
  return fmt(tonumber(v) + 1) .. ':' .. fmt(f + m) .. ':' .. l .. ':' .. fmt(tonumber(mi) + missed) .. ':' .. rest .. nxt
end

-- Whether a schedule's index score as stored (ZSCORE/ZMSCORE: its text, false when absent) is
-- the one its writer read (text, '' = no entry), compared as numbers.
local function score_is(stored, read)
  return (stored and tonumber(stored) or false) == (read ~= '' and tonumber(read) or false)
end

-- Bodies up to 100 fields are split into fields b, b1, b2, ... of `chunk` bytes (the
-- server's hash-max-listpack-value, which the client reads: 64 by default), so the item hash
-- stays a compact listpack; a larger body is one field b (its hash is large anyway).

-- Append the field/value pairs of a body to `out` (for HSET).
local function body_fields(out, body, chunk)
  local len = #body
  if len <= chunk or len > chunk * 100 then
    out[#out + 1] = 'b'; out[#out + 1] = body
    return out
  end
  out[#out + 1] = 'b'; out[#out + 1] = string.sub(body, 1, chunk)
  local k = 1
  for i = chunk + 1, len, chunk do
    out[#out + 1] = 'b' .. k; out[#out + 1] = string.sub(body, i, i + chunk - 1)
    k = k + 1
  end
  return out
end

-- HSET a new item: its body's fields, then the field/value pairs given; no table is made for
-- a body of one or two fields.
local function write_item(ik, body, chunk, ...)
  local len = #body
  if len <= chunk then return rcall('HSET', ik, 'b', body, ...) end
  if len <= 2 * chunk then
    return rcall('HSET', ik, 'b', string.sub(body, 1, chunk), 'b1', string.sub(body, chunk + 1), ...)
  end
  return rcall('HSET', ik, unpack(body_fields({...}, body, chunk)))
end

-- A lean first delivery (see the header), given its r and c as read: nil when it is not one,
-- else the first delivery's time (false when c is not '1-<ms>').
local function lean_first(r, c)
  if r or not c then return nil end
  return string.match(c, '^1%-(%d+)g?$') or false
end

-- The item hash as a table with the body reassembled in f.b: nil when the key is absent,
-- false when it holds the wrong type (the read fails, nothing is written).
local function read_item(ik)
  local raw = redis.pcall('HGETALL', ik)
  if raw.err then return false end
  if #raw == 0 then return nil end
  local f, parts = {}, nil
  for i = 1, #raw, 2 do
    local k = raw[i]
    if #k > 1 and string.byte(k, 1) == 98 then  -- 'b1', 'b2', ...
      parts = parts or {}
      parts[tonumber(string.sub(k, 2))] = raw[i + 1]
    else
      f[k] = raw[i + 1]
    end
  end
  if parts then
    local whole = {f.b}
    for j = 1, #parts do whole[j + 1] = parts[j] end
    f.b = table.concat(whole)
  end
  local first = lean_first(f.r, f.c)
  if first ~= nil then f.r, f.n, f.f = '1', f.n or '1', f.f or first or nil end
  return f
end

-- Before the receipt of item ik is deleted: a lean first delivery's r, n and f written out
-- (see the header). r, c: the fields as read.
local function first_written(ik, r, c)
  local t = lean_first(r, c)
  if t then rcall('HSET', ik, 'r', '1', 'n', '1', 'f', t)
  elseif t == false then rcall('HSET', ik, 'r', '1', 'n', '1') end
end

-- Append the reply shape of one message: id, b, t, r, d, c, e, a, f, s, g.
local function push_message(out, id, f)
  out[#out + 1] = id
  out[#out + 1] = f.b or ''
  out[#out + 1] = f.t or false
  out[#out + 1] = f.r or false
  out[#out + 1] = f.d or false
  out[#out + 1] = f.c or false
  out[#out + 1] = f.e or false
  out[#out + 1] = f.a or false
  out[#out + 1] = f.f or false
  out[#out + 1] = f.s or false
  out[#out + 1] = f.g or false
end

-- The current timer of `id` when `receipt` is its current delivery and it is still owned, else
-- nil; and its receives as read (r: false when absent).
local function owned(processing, ik, id, receipt)
  local f = rcall('HMGET', ik, 'c', 'd', 'r')
  if f[1] and f[1] == receipt and rcall('SISMEMBER', processing, id) == 1 then
    return tonumber(f[2]) or 0, f[3]
  end
  return nil
end

-- Take an owned id out of processing and its timer bucket, forgetting its receipt (r: its
-- receives as owned() read them).
local function disown(processing, timers, ik, id, d, bucket_ms, receipt, r)
  rcall('SREM', processing, id)
  if d > 0 then timer_del(timers, id, d, bucket_ms) end
  first_written(ik, r, receipt)
  rcall('HDEL', ik, 'c', 'd')
end

-- A read that doubles as a type check: the reply, or nil after recording the key in `bad`.
local function checked(bad, cmd, key, ...)
  local reply = redis.pcall(cmd, key, ...)
  if type(reply) == 'table' and reply.err then bad[#bad + 1] = key; return nil end
  return reply
end

-- Group ids by the bucket of their timer (timers[i] ms, a number or its text; 0, false or nil =
-- none), in first-seen order. A batch's timers are mostly one: a bucket is worked out per run.
local function by_bucket(ids, timers, bucket_ms)
  local groups, order = {}, {}
  local last, g = nil, nil
  for i = 1, #ids do
    local t = timers[i]
    if t ~= last then
      last, g = t, nil
      t = tonumber(t)
      if t and t > 0 then
        local b = bucket_of(t, bucket_ms)
        g = groups[b]
        if not g then g = {}; groups[b] = g; order[#order + 1] = b end
      end
    end
    if g then g[#g + 1] = ids[i] end
  end
  return groups, order
end

-- The first timer set of `order` that holds the wrong type, else nil.
local function bad_bucket(order)
  for _, b in ipairs(order) do
    if wrong_type({timer_key(b), 'set'}) then return timer_key(b) end
  end
  return nil
end

-- Remove grouped ids from their timer sets, dropping emptied buckets from the index.
local function drop_timers(timers, groups, order)
  for _, b in ipairs(order) do
    local tk = timer_key(b)
    rcall('SREM', tk, unpack(groups[b]))
    if rcall('EXISTS', tk) == 0 then rcall('ZREM', timers, b) end
  end
end


-- Message groups (see the header): the bookkeeping is touched only for items with field g, so
-- an ungrouped message costs nothing more.
local function group_key(g) return BASE .. 'group:' .. g end

-- The first key of the group bookkeeping of groups `gs` (a list) that holds the wrong type.
local function group_bad(gs)
  local checks = {BASE .. 'groups', 'hash', BASE .. 'held', 'string'}
  for _, g in ipairs(gs) do checks[#checks + 1] = group_key(g); checks[#checks + 1] = 'list' end
  return wrong_type(checks)
end

local group_limit_read
local function group_limit()  -- (read once a call)
  if not group_limit_read then
    group_limit_read = tonumber(rcall('HGET', BASE .. 'config', 'group_concurrency') or '') or 1
  end
  return group_limit_read
end

-- Set by a script that knows the retention, as its cutoff (ms): group_fill deletes a held
-- message whose age reached it (t at or before the cutoff) instead of releasing it, as a
-- claim would at once, and counts it in group_expired, which the script adds to its expired
-- count. So a group that expired while held goes in one pass, not a message per claim or
-- sweep; past GROUP_EXPIRE_LIMIT deletions a call releases them as before (the next deletes them).
local group_cutoff = false
local group_expired = 0
local GROUP_EXPIRE_LIMIT = 1000

-- Release held messages of group g while fewer than the limit are released (`active` of
-- them now) to the tail of the FIFO, and store the count unless it is still `stored`.
-- Returns how many were released.
local function group_fill(g, active, stored)
  local limit, gk, n = group_limit(), group_key(g), 0
  while active < limit do
    local id = rcall('LPOP', gk)
    if not id then break end
    if rcall('DECR', BASE .. 'held') <= 0 then rcall('DEL', BASE .. 'held') end
    local ik = item_key(id)
    if rcall('EXISTS', ik) == 1 then  -- (a held id without a message is dropped)
      local t = group_cutoff and group_expired < GROUP_EXPIRE_LIMIT and redis.pcall('HGET', ik, 't')
      if type(t) == 'string' and tonumber(t) and tonumber(t) <= group_cutoff then
        rcall('DEL', ik)
        group_expired = group_expired + 1
      else
        make_waiting(BASE .. 'queue', BASE .. 'items', id)
        active, n = active + 1, n + 1
      end
    end
  end
  if active ~= stored then
    if active > 0 then rcall('HSET', BASE .. 'groups', g, active) else rcall('HDEL', BASE .. 'groups', g) end
  end
  if n > 0 then signal(BASE .. 'signal') end
  return n
end

-- A released message of group g ended (acked, dead-lettered, expired, purged): the group's
-- next takes its place.
local function group_end(g)
  local stored = tonumber(rcall('HGET', BASE .. 'groups', g) or '')
  return group_fill(g, math.max((stored or 1) - 1, 0), stored)
end

-- Released messages of groups `gs` ended (one entry a message; a group may repeat), as
-- group_end for each, in two steps around the caller's other writes. group_take, before
-- them: the groups' counts read at once and their next held ids popped (the pops check the
-- lists' types, undone if one fails): returns what group_give needs, or nil and the error,
-- nothing changed. group_give, after them: the popped ids released, written together.
local function group_take(gs)
  local ended, order, n_order = {}, {}, 0
  for _, g in ipairs(gs) do
    local e = ended[g]
    if e then ended[g] = e + 1 else ended[g] = 1; n_order = n_order + 1; order[n_order] = g end
  end
  local hk, held_key = BASE .. 'groups', BASE .. 'held'
  local stored = redis.pcall('HMGET', hk, unpack(order))
  if stored.err then return nil, corrupt(hk) end
  local held = redis.pcall('GET', held_key)
  if type(held) == 'table' or not_integer(held) then return nil, corrupt(held_key) end
  local limit = group_limit()
  -- (locals: this runs once a grouped message, and each global or field lookup costs)
  local pcall_, item, group = redis.pcall, BASE .. 'item:', BASE .. 'group:'
  local ids, stored_of, active_of, n_ids = {}, {}, {}, 0
  local popped, from, n_pop = {}, {}, 0  -- every popped id and its group's place in order, to undo
  -- Pop group i's next ids while it has fewer than the limit released (`active`); with `look`,
  -- an id without a message is dropped. Returns the new count, or nil and the group's key.
  local function pop(i, active, look)
    local gk = group .. order[i]
    while active < limit do
      local id = pcall_('LPOP', gk)
      if not id then break end
      if type(id) == 'table' then return nil, gk end
      n_pop = n_pop + 1
      popped[n_pop], from[n_pop] = id, i
      if not look or rcall('EXISTS', item .. id) == 1 then
        n_ids = n_ids + 1
        ids[n_ids] = id
        active = active + 1
      end
    end
    return active
  end
  local function undo(gk)
    for m = n_pop, 1, -1 do rcall('LPUSH', group .. order[from[m]], popped[m]) end
    return nil, corrupt(gk)
  end
  for i = 1, n_order do
    local have, e = tonumber(stored[i] or ''), ended[order[i]]
    local active = (have or e) - e
    if active < 0 then active = 0 end
    local now_active, gk = pop(i, active, false)
    if not now_active then return undo(gk) end
    stored_of[i], active_of[i] = have, now_active
  end
  -- Every released id's message looked up at once (one EXISTS of their keys): a held id
  -- without a message, which only a damaged queue has, is dropped, and its group pops again,
  -- each id looked up alone. (Until then every popped id is kept: ids is popped, and from
  -- gives each one's group.)
  local keys, found = {}, 0
  for q = 1, n_ids do keys[q] = item .. ids[q] end
  for q = 1, n_ids, 1000 do found = found + rcall('EXISTS', unpack(keys, q, math.min(q + 999, n_ids))) end
  if found < n_ids then
    local all, short = ids, {}
    ids, n_ids = {}, 0
    for q = 1, #all do
      if rcall('EXISTS', keys[q]) == 1 then
        n_ids = n_ids + 1
        ids[n_ids] = all[q]
      else
        local i = from[q]
        active_of[i] = active_of[i] - 1
        short[#short + 1] = i
      end
    end
    for _, i in ipairs(short) do
      local now_active, gk = pop(i, active_of[i], true)
      if not now_active then return undo(gk) end
      active_of[i] = now_active
    end
  end
  return {order = order, stored = stored_of, active = active_of, ids = ids, popped = n_pop}
end

local function group_give(take)
  local hk, held_key = BASE .. 'groups', BASE .. 'held'
  if take.popped > 0 and rcall('DECRBY', held_key, take.popped) <= 0 then rcall('DEL', held_key) end
  for i, g in ipairs(take.order) do
    local active = take.active[i]
    if active ~= take.stored[i] then
      if active > 0 then rcall('HSET', hk, g, active) else rcall('HDEL', hk, g) end
    end
  end
  local ids = take.ids
  make_waiting_all(BASE .. 'queue', BASE .. 'items', ids)
  if #ids > 0 then signal(BASE .. 'signal') end
end

-- A grouped message `id` joins group g at its end (enqueued, due after its delay, requeued):
-- released at once when the group has room and nothing held, else held. True when released.
local function group_join(id, g)
  local gk = group_key(g)
  local active = tonumber(rcall('HGET', BASE .. 'groups', g) or '') or 0
  if active < group_limit() and rcall('LLEN', gk) == 0 then
    make_waiting(BASE .. 'queue', BASE .. 'items', id)
    rcall('HSET', BASE .. 'groups', g, active + 1)
    return true
  end
  rcall('RPUSH', gk, id)
  rcall('INCR', BASE .. 'held')
  return false
end

-- The groups of `ids` whose item counts among its group's released messages, one entry per
-- id, read before the items are deleted: every grouped one of ids that were `live` (waiting
-- in items, or in flight), else (delayed) those with j (see the header).
local function released_groups(ids, live)
  local out = {}
  for _, id in ipairs(ids) do
    local f = rcall('HMGET', item_key(id), 'g', 'j')
    if f[1] and (live or f[2]) then out[#out + 1] = f[1] end
  end
  return out
end
