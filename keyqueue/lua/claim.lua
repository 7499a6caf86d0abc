--[[
  Claim up to `count` messages from the head of the FIFO for a visibility timeout.
  Ownership rule of the design: the caller owns an id when SADD processing returns 1 and
  SREM items returns 1; list entries failing it are stale and dropped. A message out of
  receives goes to dead letters instead of being delivered.
  KEYS[1] queue  KEYS[2] items  KEYS[3] processing  KEYS[4] timers  KEYS[5] dead  KEYS[6] signal
  ARGV[3] count  ARGV[4] visibility ms  ARGV[5] bucket ms  ARGV[6] max receives ('' = no limit)
  Returns {dead_lettered, id, b, t, r, d, c, e, id, b, ...}.
]]
local count = tonumber(ARGV[3])
local vis = tonumber(ARGV[4])
local bucket_ms = tonumber(ARGV[5])
local max_receives = tonumber(ARGV[6])

local bad = wrong_type({KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'set', KEYS[4], 'zset',
                        KEYS[5], 'list', KEYS[6], 'list'})
if bad then return corrupt(bad) end

local now = now_ms()
local deadline = now + vis
local deadline_s = fmt(deadline)
local tk = timer_key(bucket_of(deadline, bucket_ms))
if wrong_type({tk, 'set'}) then return corrupt(tk) end

local out = {0}
local claimed = 0
while claimed < count do
  local heads = rcall('LRANGE', KEYS[1], 0, count - claimed - 1)
  if #heads == 0 then break end
  -- Check every item key of this round before the first write.
  for i = 1, #heads do
    local ik = item_key(heads[i])
    if wrong_type({ik, 'hash'}) then
      if claimed == 0 and out[1] == 0 then return corrupt(ik) end
      heads = {unpack(heads, 1, i - 1)}
      count = 0  -- deliver what this call already took; the next call reports the key
      break
    end
  end
  if #heads == 0 then break end
  rcall('LTRIM', KEYS[1], #heads, -1)
  for i = 1, #heads do
    local id = heads[i]
    local ik = item_key(id)
    if rcall('SADD', KEYS[3], id) == 1 then
      if rcall('SREM', KEYS[2], id) == 1 and rcall('EXISTS', ik) == 1 then
        local r = tonumber(rcall('HGET', ik, 'r') or '0')
        if max_receives and r >= max_receives then
          rcall('SREM', KEYS[3], id)
          rcall('HDEL', ik, 'c', 'd')
          if not rcall('HGET', ik, 'e') then
            rcall('HSET', ik, 'e', 'exceeded max_receives (' .. ARGV[6] .. ')')
          end
          rcall('RPUSH', KEYS[5], id)
          out[1] = out[1] + 1
        else
          local n = rcall('HINCRBY', ik, 'n', 1)
          rcall('HSET', ik, 'r', fmt(r + 1), 'c', fmt(n) .. '-' .. fmt(now), 'd', deadline_s)
          rcall('SADD', tk, id)
          push_message(out, id, ik)
          claimed = claimed + 1
        end
      else
        rcall('SREM', KEYS[3], id)  -- not ours: not waiting, or no message behind it
      end
    end
  end
end
if claimed > 0 then
  rcall('ZADD', KEYS[4], 'LT', deadline, bucket_of(deadline, bucket_ms))
  if rcall('LLEN', KEYS[1]) > 0 then signal(KEYS[6]) end
end
return out
