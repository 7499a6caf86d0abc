--[[
  Shared by every script (prepended at load time).
  Convention for every script:
    ARGV[1]  key base "P:{NAME}:"; scripts append only "item:<id>" and "timer:<bucket>"
    ARGV[2]  clock override in epoch ms ('' = the server's TIME); tests use it to control time
  Item hash fields: b body, t enqueued ms, r receives, n deliveries (never reset),
    c current receipt, d timer ms (visibility deadline while processing, visible-at while
    delayed; absent while waiting or dead), e last error.
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

-- Wake one long-poll waiter; the list never holds more than one token.
local function signal(sig)
  if rcall('LLEN', sig) == 0 then rcall('RPUSH', sig, '1') end
end

-- Move a waiting-eligible id to the tail of the FIFO.
local function make_waiting(queue, items, id)
  rcall('RPUSH', queue, id)
  rcall('SADD', items, id)
end

local MSG_FIELDS = {'b', 't', 'r', 'd', 'c', 'e'}

-- Append the reply shape of one message: id, b, t, r, d, c, e.
local function push_message(out, id, ik)
  local f = rcall('HMGET', ik, unpack(MSG_FIELDS))
  out[#out + 1] = id
  for i = 1, 6 do out[#out + 1] = f[i] or false end
end

-- The current timer of `id` when `receipt` is its current delivery and it is still owned, else nil.
local function owned(processing, ik, id, receipt)
  local f = rcall('HMGET', ik, 'c', 'd')
  if f[1] and f[1] == receipt and rcall('SISMEMBER', processing, id) == 1 then
    return tonumber(f[2]) or 0
  end
  return nil
end

-- Take an owned id out of processing and its timer bucket, forgetting its receipt.
local function disown(processing, timers, ik, id, d, bucket_ms)
  rcall('SREM', processing, id)
  if d > 0 then timer_del(timers, id, d, bucket_ms) end
  rcall('HDEL', ik, 'c', 'd')
end

