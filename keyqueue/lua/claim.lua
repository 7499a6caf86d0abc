--[[
  Claim up to `count` messages from the head of the FIFO for a visibility timeout.
  Ownership rule of the design: the caller owns an id that it moves into processing (not
  there yet) and out of items (still there); list entries failing it are stale and
  dropped. A message out of receives goes to dead letters instead of being delivered, one
  whose age (from t) reached the retention is deleted (as an ack does) instead.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead  KEYS[6] signal
  KEYS[7] config  KEYS[8] counters (dead_lettered, expired, throttled)  KEYS[9] throttle
  ARGV[3] count  ARGV[4] visibility ms  ARGV[5] bucket ms  ARGV[6] max receives ('' = no limit)
  ARGV[7] retention ms ('' = none)
  ARGV[11] '1' when the claim retries one whose refusal its caller has counted (a long-poll
  held back: a refused claim is counted once), else '' or none.
  A shard of a sharded queue (optional, '' each when not): ARGV[8] the key base of the window counters it shares
  (the logical queue's), and on one server KEYS[10..] the other shards' processing (the
  in-flight cap counts them all); on a cluster ARGV[9], ARGV[10] its share (index, shard
  count) of each window and of the in-flight cap: of the window's N claims numbered w * N on
  (of the cap's slots numbered 0 on), those whose number is the index modulo the count.
  Flow control, read from the config hash by every call (so a change applies at once): the
  claim takes at most what the fields rate_limit ("N/S": N claims per window of S seconds,
  window = floor(now / S), counted in the string key rate:<window>, which expires at the
  window's end) and max_in_flight (against SCARD processing) leave, and nothing while the
  throttle key holds a time (ms) still to come. Neither is read or written when unset.
  Returns {dead_lettered, config_missing (1/0), next_timer, now, deadline, first receipt,
  limited, id, b, b1, t, id, b, b1, t, ...}: next_timer is ms from now to the earliest timer in
  the index (nil: none), so the client knows when a reap may find something, at no extra round
  trip; limited is nil, or when a limit held back messages that wait, the ms until it may let a
  claim through (the throttle's end, the window's end), -1 when only max_in_flight did (a slot
  frees at an ack).
  Each message is four values: its id, its body (in b and b1) and enqueue time; for a message
  that is not a first delivery without error or attributes (receives 1, the first receipt,
  first delivered now), the id is {id, r, c, e, a, f, s, g} instead (g: the message's group);
  for such a first delivery of a group's message it is 'id g' (ids are digits, and a group has
  no space), and of a schedule's {id, s, g}.
  A grouped message that goes to dead letters or is deleted frees its group's next. The deadline is the call's.
  (Every value of the reply costs Redis time: most messages take 4 instead of 9.)
]]
-- An item read whole (a body of more than two fields, or no t or b) as the fields a claim needs,
-- {b, b1, t, n, a, r, e, f, s, g} with the body whole in b; nil when the key is absent.
local function read_whole(ik)
  local f = read_item(ik)
  return f and {f.b or '', false, f.t or false, f.n or false, f.a or false, f.r or false, f.e or false,
                f.f or false, f.s or false, f.g or false}
end

local count = tonumber(ARGV[3])
-- ARGV[i], nil when absent or '' (the optional ones)
local function opt(i) local v = ARGV[i]; if v == '' then return nil end; return v end
local shared_base, share_index, share_count = opt(8), opt(9), opt(10)
local bucket_ms = tonumber(ARGV[5])
local max_receives = tonumber(ARGV[6])
local retention = tonumber(ARGV[7])

-- Every key's type is known before the first write, at few extra calls: the index and the
-- signal by the reads this script makes anyway (redis.pcall), the queue and the sets by the
-- first round's reads, the timer set by its SADD (the first write of a round), and the two
-- keys written only for a dead letter by TYPE, when dead letters are possible at all.
local bad = {}
local first = checked(bad, 'ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
local tokens = checked(bad, 'LLEN', KEYS[6])
local limits = checked(bad, 'HMGET', KEYS[7], 'rate_limit', 'max_in_flight')
local throttle = checked(bad, 'GET', KEYS[9])
if #bad > 0 then return corrupt(bad[1]) end
local now = now_ms()
-- Flow control: `count` cut to what the limits leave; `limited` as the reply says.
local limited = false
local rate_key, window_end
if throttle then
  local left = tonumber(throttle)
  if not left then return corrupt(KEYS[9]) end
  if left > now then limited, count = left - now, 0 end
end
if count > 0 and limits[2] and limits[2] ~= '' then
  local cap = tonumber(limits[2])
  if not cap then return corrupt(KEYS[7]) end
  local held = checked(bad, 'SCARD', KEYS[3])
  if not held then return corrupt(KEYS[3]) end
  for i = 10, #KEYS do
    local other = checked(bad, 'SCARD', KEYS[i])
    if not other then return corrupt(KEYS[i]) end
    held = held + other
  end
  if share_count then
    local index, shards = tonumber(share_index), tonumber(share_count)
    cap = math.floor((cap - 1 - index) / shards) - math.floor((-1 - index) / shards)
  end
  local free = math.max(cap - held, 0)
  if free < count then limited, count = -1, free end
end
if count > 0 and limits[1] and limits[1] ~= '' then
  local n, s = string.match(limits[1], '^(%d+)/(.+)$')
  local window = tonumber(s) and math.floor(tonumber(s) * 1000 + 0.5)
  if not window or window < 1 then return corrupt(KEYS[7]) end
  local w = math.floor(now / window)
  rate_key, window_end = (shared_base or BASE) .. 'rate:' .. fmt(w), (w + 1) * window
  local used = checked(bad, 'GET', rate_key)
  if used == nil or (used and not tonumber(used)) then return corrupt(rate_key) end
  local limit = tonumber(n)
  if share_count then
    local index, shards = tonumber(share_index), tonumber(share_count)
    limit = math.floor(((w + 1) * limit - 1 - index) / shards) - math.floor((w * limit - 1 - index) / shards)
  end
  local left = math.max(limit - tonumber(used or '0'), 0)
  if left < count then limited, count = window_end - now, left end
end
if max_receives or retention or limited then
  local wrong = wrong_type({KEYS[5], 'list', KEYS[8], 'hash'})
  if wrong then return corrupt(wrong) end
end
-- A message enqueued (or requeued) at or before `cutoff` has reached the retention.
local cutoff = retention and now - retention
group_cutoff = cutoff
local deadline = now + tonumber(ARGV[4])
local deadline_s, now_s = fmt(deadline), fmt(now)
local bucket = bucket_of(deadline, bucket_ms)
local tk = timer_key(bucket)
local item = BASE .. 'item:'
-- The receipt of a first delivery (deliveries 1): most deliveries, made without a number. A
-- grouped message's receipt ends in 'g', so an ack reads the group of those messages only.
local first_receipt = '1-' .. now_s
local first_grouped = first_receipt .. 'g'

local out = {0, rcall('EXISTS', KEYS[7]) == 0 and 1 or 0, false, now_s, deadline_s, first_receipt, limited}
local n_out = #out
local claimed = 0
local written = false  -- once true, a failing read ends the claim with what it took
local lapsed = {}  -- item keys of the messages this round found expired
local ended = {}  -- the groups of grouped messages this round dead-lettered or deleted
-- Expired messages one call deletes at most (a backlog that expired at once is not deleted in
-- one long call: the next claim, or the reaper's sweep, goes on).
local LAPSED_LIMIT = 1000
local dropped = 0

-- Whether item fields v (a claim's) show an age that reached the retention.
local function expired(v)
  return cutoff and v[3] and tonumber(v[3]) <= cutoff
end

-- The heads owned by the ownership rule (waiting, not held), each once: leaving items; of
-- those with a message, taken (item keys and fields alongside), expired (their item keys) or
-- dead when out of receives.
local function sort_out(heads, keys, items, waiting, held)
  local leaving, taken, tkeys, fields, dead, gone, seen = {}, {}, {}, {}, {}, {}, {}
  local n = 0
  lapsed, ended = {}, {}
  for i = 1, #heads do
    local id = heads[i]
    if waiting[i] == 1 and held[i] == 0 and not seen[id] then
      seen[id] = true
      leaving[#leaving + 1] = id
      local v = items[i]
      if v then
        if expired(v) then
          lapsed[#lapsed + 1] = keys[i]
          if v[10] then ended[#ended + 1] = v[10] end
        elseif max_receives and tonumber(v[6] or '0') >= max_receives then
          dead[#dead + 1] = id
          gone[#gone + 1] = v
          if v[10] then ended[#ended + 1] = v[10] end
        else
          n = n + 1
          taken[n], tkeys[n], fields[n] = id, keys[i], v
        end
      end
    end
  end
  return leaving, taken, tkeys, fields, dead, gone
end

-- Whether every attributed message of this queue carries n, and whether it has had grouped
-- messages (mark_format, mark_groups in _lib.lua): read once there is something to claim.
local marked, grouped = nil, false

while claimed < count and dropped < LAPSED_LIMIT do
  -- at most 1,000 per round: unpack() takes only about 8,000 values
  local heads = checked(bad, 'LRANGE', KEYS[1], 0, math.min(count - claimed, 1000) - 1)
  if not heads then return corrupt(KEYS[1]) end  -- (only the first round can fail)
  if #heads == 0 then break end
  if marked == nil then
    local marks = redis.pcall('HMGET', KEYS[8], 'item_format', 'grouped')
    if marks.err then marked, grouped = false, true  -- (the counters' users report it)
    else marked, grouped = marks[1] == '2', marks[2] == '1' end
  end
  -- The ownership rule's reads first, so that the loop over the items also finds whether
  -- every head is owned and delivered (plain).
  local waiting = redis.pcall('SMISMEMBER', KEYS[2], unpack(heads))
  if waiting.err then return corrupt(KEYS[2]) end  -- (only the first round can fail)
  local held = redis.pcall('SMISMEMBER', KEYS[3], unpack(heads))
  if held.err then return corrupt(KEYS[3]) end
  -- Read every item of this round before the first write; a wrong type fails the read. The
  -- fields a claim needs, {b, b1, t, n, a, r, e, f, s, g}: by one HMGET of b, b1, t and n for
  -- a body of up to two fields (no table of every field, no concatenation of many), and only
  -- when n is there, a second one of the others. n (deliveries) is written by every delivery,
  -- with r and f, and never deleted, and e is only ever written after a delivery; a schedule's
  -- and (on a queue of this version: marked) an attributed message are written with n = 0: a
  -- message without n has none of r, e, f, a or s, and most claims are first deliveries. (Every
  -- value an HMGET returns costs, a fifth one more than a fourth: its reply outgrows a
  -- table of four.) An unmarked queue's first read takes a as well, and the first read of a
  -- queue that has had groups takes g (a group's message is written without n unless it has
  -- attributes).
  local keys, items, plain = {}, {}, true
  local pcall_ = redis.pcall
  for i = 1, #heads do
    local ik = item .. heads[i]
    local v
    if not grouped then
      v = marked and pcall_('HMGET', ik, 'b', 'b1', 't', 'n') or pcall_('HMGET', ik, 'b', 'b1', 't', 'n', 'a')
    elseif marked then
      v = pcall_('HMGET', ik, 'b', 'b1', 't', 'n', 'g')
      if not v.err then v[10], v[5] = v[5], nil end
    else
      v = pcall_('HMGET', ik, 'b', 'b1', 't', 'n', 'a', 'g')
      if not v.err then v[10], v[6] = v[6], nil end
    end
    if v.err then
      if not written then return corrupt(ik) end
      heads = {unpack(heads, 1, i - 1)}  -- deliver what this call took; the next reports it
      count = 0
      break
    end
    local b, b1 = v[1], v[2]
    if v[3] and b and not (b1 and #b1 == #b) then
      if v[4] == '0' then  -- never delivered (a schedule's, an attributed one): no r, e or f yet
        local more = rcall('HMGET', ik, 'a', 's', 'g')
        v[5], v[9], v[10] = more[1], more[2], more[3]
      elseif v[4] then
        local more = rcall('HMGET', ik, 'r', 'e', 'f', 'a', 's', 'g')
        v[6], v[7], v[8], v[5], v[9], v[10] = more[1], more[2], more[3], more[4], more[5], more[6]
      end
    else  -- maybe b2, b3, ...; or no t or b (not written by an enqueue, or no hash at all)
      v = read_whole(ik)
    end
    keys[i], items[i] = ik, v
    if plain and (waiting[i] ~= 1 or held[i] ~= 0 or not v or (max_receives and tonumber(v[6] or '0') >= max_receives)
                  or (cutoff and expired(v))) then
      plain = false
    end
  end
  if #heads == 0 then break end
  -- Usually every head is owned and delivered: then heads, keys and items are the lists, and
  -- an id listed twice shows in the count of the timer set's SADD below.
  local leaving, taken, tkeys, fields, dead, gone = heads, heads, keys, items, {}, {}
  if not plain then leaving, taken, tkeys, fields, dead, gone = sort_out(heads, keys, items, waiting, held) end
  -- The writes of this round; the timer set's SADD first, as its type check.
  if #taken > 0 then
    local added = redis.pcall('SADD', tk, unpack(taken))
    if type(added) == 'table' and added.err then
      if not written then return write_error(added, tk) end
      break
    end
    if added < #taken and taken == heads then  -- an id listed twice (or one already timed here)
      leaving, taken, tkeys, fields, dead, gone = sort_out(heads, keys, items, waiting, held)
    end
  end
  if #ended > 0 then
    local wrong = group_bad(ended)
    if wrong then
      if not written then return corrupt(wrong) end
      break
    end
  end
  written = true
  rcall('LTRIM', KEYS[1], #heads, -1)
  for j = 1, #taken do
    local v = fields[j]
    local n, a = v[4], v[5]
    if not (n or a) then
      -- a first delivery (no n: never delivered, so no r, e or f either) without attributes:
      -- stored lean, its receipt and deadline only (r, n and f implied: see _lib.lua); the
      -- client knows the rest but a group. (A grouped message in flight counts among its
      -- group's released messages by its place in processing.)
      local g = v[10]
      if g then
        rcall('HSET', tkeys[j], 'c', first_grouped, 'd', deadline_s)
        out[n_out + 1] = taken[j] .. ' ' .. g  -- (a table a message would cost Redis far more)
      else
        rcall('HSET', tkeys[j], 'c', first_receipt, 'd', deadline_s)
        out[n_out + 1] = taken[j]
      end
    elseif n == '0' and not (a or v[6] or v[7] or v[8]) then
      -- the same of a schedule's message (written with n = 0): its fire time goes to the client,
      -- and the group of a grouped one that has n = 0 (a reap or an fsck repair that made a
      -- message waiting writes it with HINCRBY n 0)
      rcall('HSET', tkeys[j], 'r', '1', 'n', '1', 'c', v[10] and first_grouped or first_receipt, 'd', deadline_s,
            'f', now_s)
      out[n_out + 1] = {taken[j], v[9] or false, v[10] or false}
    else
      -- receives and deliveries + 1, as text (a message never delivered has neither field)
      local r, e, f = v[6], v[7], v[8]
      local receipt = first_receipt
      r = r and fmt(tonumber(r) + 1) or '1'
      if n then
        n = fmt(tonumber(n) + 1)
        receipt = n .. '-' .. now_s
      else
        n = '1'
      end
      if v[10] then receipt = receipt .. 'g' end
      if f then rcall('HSET', tkeys[j], 'r', r, 'n', n, 'c', receipt, 'd', deadline_s)
      else  -- the first delivery also records when it was made (SQS's ApproximateFirstReceiveTimestamp)
        f = now_s
        rcall('HSET', tkeys[j], 'r', r, 'n', n, 'c', receipt, 'd', deadline_s, 'f', now_s)
      end
      out[n_out + 1] = {taken[j], r, receipt, e or false, a, f, v[9] or false, v[10] or false}  -- (no nil: it would end the list)
    end
    out[n_out + 2], out[n_out + 3], out[n_out + 4] = v[1], v[2], v[3]
    n_out = n_out + 4
  end
  for j, id in ipairs(dead) do
    if gone[j][7] then rcall('HSET', item .. id, 'x', now_s)
    else rcall('HSET', item .. id, 'e', 'exceeded max_receives (' .. ARGV[6] .. ')', 'x', now_s) end
    if gone[j][10] then rcall('HDEL', item .. id, 'j') end
  end
  if #lapsed > 0 then
    rcall('DEL', unpack(lapsed))
    rcall('HINCRBY', KEYS[8], 'expired', #lapsed)
    dropped = dropped + #lapsed
    lapsed = {}
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
  if #ended > 0 then
    for _, g in ipairs(ended) do group_end(g) end
    ended = {}
  end
end
if group_expired > 0 then rcall('HINCRBY', KEYS[8], 'expired', group_expired) end
if rate_key and claimed > 0 then
  rcall('INCRBY', rate_key, claimed)
  rcall('PEXPIRE', rate_key, window_end - now)
end
-- A refused claim (messages wait that a limit kept back) is counted once; a limit that kept
-- nothing back is not reported.
if limited then
  if rcall('LLEN', KEYS[1]) == 0 then out[7] = false
  elseif not opt(11) then rcall('HINCRBY', KEYS[8], 'throttled', 1) end
end
local earliest = first[2] and tonumber(first[2])
if claimed > 0 then
  rcall('ZADD', KEYS[4], 'LT', deadline_s, bucket)
  if tokens == 0 and rcall('LLEN', KEYS[1]) > 0 then rcall('RPUSH', KEYS[6], '1') end
  if not earliest or deadline < earliest then earliest = deadline end
elseif dropped >= LAPSED_LIMIT and tokens == 0 and rcall('LLEN', KEYS[1]) > 0 then
  rcall('RPUSH', KEYS[6], '1')  -- a waiting claim goes on at once
end
if earliest then out[3] = math.floor(earliest - now) end
return out
