-- ratomic on Redis: the in-memory engine's equations (sections 4.1–4.4 of
-- https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md) on one
-- hash per key, a field per named limit. One script for every operation so
-- the arithmetic exists once; loaded by SHA1 and called with EVALSHA.
--
-- KEYS[1]  the key's hash
-- ARGV[1]  operation: 'a' allow, 'p' peek, 'r' refund, 'x' reset;
--          'l<k>' allow and lease up to k more tokens (token buckets only);
--          'g<end>,<used>;…' give a lease's unused tokens back, a pair per
--          limit (see "Leases" below)
-- ARGV[2]  now in whole microseconds, or '' for the server's TIME
-- ARGV[3]  cost (allow, peek) or tokens (refund)
-- ARGV[4…] per limit, three values: the hash field, whose first letter is
--          the limit's kind ('g' GCRA, 'f' fixed window, 's' sliding
--          window), then T µs and capacity (g) or window µs and limit (f, s)
-- last     if the count of arguments leaves one over: the least TTL in ms
--          (none: exactly the time until the key is full)
--
-- Reply: allow/peek: {allowed, then per limit allowed, remaining, limit,
-- retry µs, reset µs}; lease: the same, then {tokens leased, now, then
-- per limit the end of the lease}; refund: {fields written}; give-back:
-- {limits given back}; reset: {1}.
--
-- Leases. A token bucket's state is its TAT: the end of the emission slots
-- (one token = T µs of the timeline) granted so far. A lease of k tokens is
-- the next k slots after the call's own: the range [end − k·T, end), the
-- TAT moved to `end`. The process that holds it grants from that range
-- alone, so no slot is granted twice, and a slot is used only at a time it
-- could have been granted at here (see ratomic's core/src/backend/lease.rs for the
-- bound). The end of the latest lease is kept as the limit's fence
-- ('L' .. field): a refund or a reset never moves the TAT back below it,
-- which would hand out again slots a process holds; a give-back moves it
-- back only while the TAT is still that lease's end (nothing granted since).
--
-- Lua numbers are doubles: every value here is a whole number below 2^53
-- (the client refuses rules and times that could leave that range), so the
-- arithmetic is exact. Numbers are written back with '%.0f', never
-- tostring (which keeps only 14 digits).

-- Server work per call, measured (redis-server 7.0, CPU time per call with
-- the common call below, allow on one token bucket at the server's time):
-- TIME 0.1 µs, HGET 0.4, HSET 0.35, PEXPIRE 0.35 (a hash cannot take a value
-- and an expiry in one write before Redis 7.4's HPEXPIRE); each argument
-- ~0.07 µs to parse; closures made before the common call returned ~0.3 µs.
-- So the common calls come first, with nothing made before them.

local now
if ARGV[2] == '' then
  -- TIME then a write: Redis 3.2-4 replicates such a script only as its
  -- effects when asked (5 and later always do).
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end

-- The common case: one GCRA limit, allow or peek. The same equations and
-- the same reply as gcra_decide and store below (the parity tests hold both
-- to the in-memory engine), with their floor divisions written out.
local op = ARGV[1]
local argc = #ARGV
if (argc == 6 or argc == 7) and (op == 'a' or op == 'p') and string.byte(ARGV[4]) == 103 then -- 'g'
  local key, field = KEYS[1], ARGV[4]
  local t, b = tonumber(ARGV[5]), tonumber(ARGV[6])
  local amount = tonumber(ARGV[3])
  local tat = tonumber(redis.call('HGET', key, field)) or 0
  if tat < now then tat = now end
  local d = tat - now
  local tau = b * t
  local need = amount * t
  local slack = tau - need
  local after = d + need
  if d > slack then after = d end
  -- Whole tokens left: floor((tau - after) / t), exactly.
  local left = 0
  if after < tau then
    local x = tau - after
    left = math.floor(x / t)
    local r = x - left * t
    if r < 0 then left = left - 1 elseif r >= t then left = left + 1 end
  end
  if d > slack then return {0, 0, left, b, d - slack, d} end
  if op == 'a' and need ~= 0 then
    -- store's TTL: the time until full again (`after` > 0), in whole ms
    -- rounded up, at least the floor.
    local ms = math.floor(after / 1000)
    local r = after - ms * 1000
    if r < 0 then ms = ms - 1; r = r + 1000 elseif r >= 1000 then ms = ms + 1; r = r - 1000 end
    if r > 0 then ms = ms + 1 end
    if argc == 7 then
      local least = tonumber(ARGV[7])
      if ms < least then ms = least end
    end
    redis.call('HSET', key, field, string.format('%.0f', tat + need))
    redis.call('PEXPIRE', key, string.format('%.0f', ms))
  end
  return {1, 1, left, b, 0, after}
end

op = string.sub(ARGV[1], 1, 1)
local op_arg = string.sub(ARGV[1], 2)
local amount = tonumber(ARGV[3])
local n = math.floor((argc - 3) / 3)
local ttl_floor = 0
if argc == 3 * n + 4 then ttl_floor = tonumber(ARGV[argc]) end

local floor = math.floor

-- Exact floor division and remainder of whole numbers a ≥ 0, b > 0.
local function divmod(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
  return q, r
end

local function div_ceil(a, b)
  local q, r = divmod(a, b)
  if r > 0 then q = q + 1 end
  return q
end

local function num(x) return string.format('%.0f', x) end

-- One fixed window (window_view, frame and window_decide below, with no
-- previous window).
if n == 1 and (op == 'a' or op == 'p') and string.sub(ARGV[4], 1, 1) == 'f' then
  local key, field = KEYS[1], ARGV[4]
  local w, l = tonumber(ARGV[5]), tonumber(ARGV[6])
  local v = redis.call('HGET', key, field)
  local stored, cur = 0, 0
  if v then
    local i, c = string.match(v, '(%d+):(%d+)')
    stored, cur = tonumber(i), tonumber(c)
  end
  local index, offset = divmod(now, w)
  local gap = 0
  if stored > index then
    index, gap, offset = stored, stored * w - now, 0
  elseif stored < index then
    cur = 0
  end
  local to_end = gap + w - offset
  local after = cur + amount
  if after > l then return {0, 0, l - cur, l, to_end, to_end} end
  if op == 'a' and amount ~= 0 then
    local ms = div_ceil(to_end, 1000)
    if ms < ttl_floor then ms = ttl_floor end
    redis.call('HSET', key, field, num(index) .. ':' .. num(after))
    redis.call('PEXPIRE', key, num(ms))
  end
  local reset = 0
  if after > 0 then reset = to_end end
  return {1, 1, l - after, l, 0, reset}
end

-- GCRA (the contract, 4.1). State: TAT.
local function gcra_view(v) return tonumber(v) or 0 end

local function gcra_tokens(tau, t, d)
  if d >= tau then return 0 end
  return (divmod(tau - d, t))
end

local function gcra_decide(tat, t, b, cost)
  local tau = b * t
  if tat < now then tat = now end
  local d = tat - now
  local need = cost * t
  local slack = tau - need
  if d > slack then
    return {0, gcra_tokens(tau, t, d), b, d - slack, d}, nil
  end
  local after = d + need
  local nxt = nil
  if cost ~= 0 then nxt = num(tat + need) end
  return {1, gcra_tokens(tau, t, after), b, 0, after}, nxt
end

-- Never below the fence: slots a lease holds are not handed out again.
local function gcra_refund(tat, t, tokens, fence)
  if tat <= now then return nil end
  local new = tat - tokens * t
  if new < now then new = now end
  if new < fence then new = fence end
  if new >= tat then return nil end
  return num(new)
end

local function gcra_idle(v)
  local tat = gcra_view(v)
  if tat > now then return tat - now end
  return 0
end

-- Windows (the contract, 4.2 and 4.3), aligned to the epoch of `now`. State:
-- 'index:count' (fixed) or 'index:prev:cur' (sliding). A call stamped
-- before the stored window counts in the stored window.
local function frame(stored, w)
  local index, offset = divmod(now, w)
  if stored == index then return index, 0, offset, 'same' end
  if stored > index then return stored, stored * w - now, 0, 'same' end
  if stored + 1 == index then return index, 0, offset, 'previous' end
  return index, 0, offset, 'long_ago'
end

local function window_view(v, kind, w)
  local index, prev, cur = 0, 0, 0
  if v then
    local parts = {}
    for p in string.gmatch(v, '%d+') do parts[#parts + 1] = tonumber(p) end
    index = parts[1]
    if kind == 'f' then cur = parts[2] else prev = parts[2]; cur = parts[3] end
  end
  local fi, gap, offset, age = frame(index, w)
  if age == 'previous' then prev = cur; cur = 0
  elseif age == 'long_ago' then prev = 0; cur = 0 end
  if kind == 'f' then prev = 0 end
  return {index = fi, gap = gap, offset = offset, prev = prev, cur = cur}
end

local function window_pack(kind, c, cur)
  if kind == 'f' then return num(c.index) .. ':' .. num(cur) end
  return num(c.index) .. ':' .. num(c.prev) .. ':' .. num(cur)
end

local function until_end(c, w) return c.gap + w - c.offset end

local function carried(c, w)
  if c.prev == 0 then return 0 end
  return div_ceil(c.prev * (w - c.offset), w)
end

local function window_reset(kind, c, w, cur)
  if kind == 'f' then
    if cur > 0 then return until_end(c, w) end
    return 0
  end
  if cur > 0 then return until_end(c, w) + w end
  if c.prev > 0 then return until_end(c, w) end
  return 0
end

local function sliding_retry(c, w, l, cost)
  if c.cur + cost <= l then
    local fit = divmod((l - c.cur - cost) * w, c.prev)
    return c.gap + (w - fit) - c.offset
  end
  local fit = divmod((l - cost) * w, c.cur)
  return until_end(c, w) + (w - fit)
end

local function window_decide(kind, c, w, l, cost)
  local after = c.cur + cost
  local carry = carried(c, w)
  if after + carry <= l then
    local nxt = nil
    if cost > 0 then nxt = window_pack(kind, c, after) end
    return {1, l - after - carry, l, 0, window_reset(kind, c, w, after)}, nxt
  end
  local to_end = until_end(c, w)
  if kind == 'f' then return {0, l - c.cur, l, to_end, to_end}, nil end
  local remaining = l - c.cur - carry
  if remaining < 0 then remaining = 0 end
  return {0, remaining, l, sliding_retry(c, w, l, cost), window_reset(kind, c, w, c.cur)}, nil
end

local function window_refund(kind, c, tokens)
  if c.cur == 0 or tokens == 0 then return nil end
  local back = tokens
  if back > c.cur then back = c.cur end
  return window_pack(kind, c, c.cur - back)
end

-- One limit at a time.
local function field_of(i) return ARGV[3 * i + 1] end
local function kind_of(i) return string.sub(ARGV[3 * i + 1], 1, 1) end
local function p1(i) return tonumber(ARGV[3 * i + 2]) end
local function p2(i) return tonumber(ARGV[3 * i + 3]) end

local function decide(i, v, cost)
  local kind = kind_of(i)
  if kind == 'g' then return gcra_decide(gcra_view(v), p1(i), p2(i), cost) end
  return window_decide(kind, window_view(v, kind, p1(i)), p1(i), p2(i), cost)
end

local function refund(i, v, tokens, fence)
  local kind = kind_of(i)
  if kind == 'g' then return gcra_refund(gcra_view(v), p1(i), tokens, fence) end
  return window_refund(kind, window_view(v, kind, p1(i)), tokens)
end

local function idle(i, v)
  local kind = kind_of(i)
  if kind == 'g' then return gcra_idle(v) end
  local c = window_view(v, kind, p1(i))
  return window_reset(kind, c, p1(i), c.cur)
end

local key = KEYS[1]
local fields = {}
for i = 1, n do fields[i] = field_of(i) end
local values = redis.call('HMGET', key, unpack(fields))

-- Writes the changed fields and sets the key's TTL to the time until every
-- limit is full again, rounded up to whole ms, at least 1 ms (a TTL of 0
-- would keep the key forever) and at least the floor. A key full at `now`
-- is still kept that 1 ms rather than deleted: a call stamped a little
-- earlier (the `*_at` forms, a server clock stepping back) must still see it.
local function store(changes)
  local set = {}
  local longest = 0
  for i = 1, n do
    local v = values[i]
    if changes[i] then v = changes[i]; set[#set + 1] = fields[i]; set[#set + 1] = v end
    local d = idle(i, v)
    if d > longest then longest = d end
  end
  if #set == 0 then return 0 end
  local ms = div_ceil(longest, 1000)
  if ms < 1 then ms = 1 end
  if ms < ttl_floor then ms = ttl_floor end
  redis.call('HSET', key, unpack(set))
  redis.call('PEXPIRE', key, num(ms))
  return #set / 2
end

-- The fences of the token buckets (0 where none is kept).
local function fences()
  local names = {}
  for i = 1, n do names[i] = 'L' .. fields[i] end
  local raw = redis.call('HMGET', key, unpack(names))
  local out = {}
  for i = 1, n do out[i] = tonumber(raw[i]) or 0 end
  return out
end

if op == 'r' then
  local fence = fences()
  local changes = {}
  for i = 1, n do changes[i] = refund(i, values[i], amount, fence[i]) end
  return {store(changes)}
end

-- Reset: every limit full again, but for the slots leases still hold (a
-- token bucket whose fence is ahead of now keeps its TAT at the fence).
if op == 'x' then
  local fence = fences()
  local keep = {}
  for i = 1, n do
    if kind_of(i) == 'g' and fence[i] > now then
      keep[#keep + 1] = fields[i]; keep[#keep + 1] = num(fence[i])
      keep[#keep + 1] = 'L' .. fields[i]; keep[#keep + 1] = num(fence[i])
    end
  end
  redis.call('DEL', key)
  if #keep > 0 then
    local longest = 0
    for i = 1, n do if fence[i] - now > longest then longest = fence[i] - now end end
    local ms = div_ceil(longest, 1000)
    if ms < ttl_floor then ms = ttl_floor end
    redis.call('HSET', key, unpack(keep))
    redis.call('PEXPIRE', key, num(ms))
  end
  return {1}
end

-- Give-back: per limit, the end of the lease and the first slot its holder
-- did not use. Only while the TAT is still the lease's end (no slot granted
-- after it) does the TAT go back, to that slot (or now, if later).
if op == 'g' then
  local ends, used = {}, {}
  for e, u in string.gmatch(op_arg, '(%d+),(%d+)') do ends[#ends + 1] = tonumber(e); used[#used + 1] = tonumber(u) end
  if #ends ~= n then return redis.error_reply('ERR ratomic: give-back needs an end and a used slot per limit') end
  local fence = fences()
  local set = {}
  local back = 0
  for i = 1, n do
    local tat = tonumber(values[i]) or 0
    if kind_of(i) == 'g' and tat == ends[i] and fence[i] == ends[i] then
      local new = used[i]
      if new < now then new = now end
      if new < tat then
        set[#set + 1] = fields[i]; set[#set + 1] = num(new)
        set[#set + 1] = 'L' .. fields[i]; set[#set + 1] = num(new)
        back = back + 1
      end
    end
  end
  if back > 0 then redis.call('HSET', key, unpack(set)) end
  return {back}
end

-- Lease: allow `amount`, then take up to k more tokens of every limit (the
-- same number of each), all token buckets: at most half of what the
-- tightest limit has left after the call, so that a bucket near empty is not
-- leased out (its last tokens stay here for whoever asks next, rather than
-- idle in one process's lease).
if op == 'l' then
  local k = tonumber(op_arg) or 0
  local reply = {1}
  local tats = {}
  local take = k
  for i = 1, n do
    if kind_of(i) ~= 'g' then return redis.error_reply('ERR ratomic: only token buckets can be leased') end
    local d = gcra_decide(gcra_view(values[i]), p1(i), p2(i), amount)
    if d[1] == 0 then reply[1] = 0 end
    for j = 1, 5 do reply[#reply + 1] = d[j] end
    local t, b = p1(i), p2(i)
    local tat = gcra_view(values[i])
    if tat < now then tat = now end
    tats[i] = tat + amount * t
    local spare = b * t - (tats[i] - now)
    local can = 0
    if spare > 0 then can = floor((divmod(spare, t)) / 2) end
    if can < take then take = can end
  end
  if reply[1] == 0 then
    for i = 1, n do
      local at = 5 * (i - 1) + 2
      if reply[at] == 1 then
        local d = gcra_decide(gcra_view(values[i]), p1(i), p2(i), 0)
        reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = d[2], d[3], 0, d[5]
      end
    end
    reply[#reply + 1] = 0; reply[#reply + 1] = now
    for i = 1, n do reply[#reply + 1] = 0 end
    return reply
  end
  if take < 0 then take = 0 end
  local set = {}
  local longest = 0
  reply[#reply + 1] = take; reply[#reply + 1] = now
  for i = 1, n do
    local e = tats[i] + take * p1(i)
    reply[#reply + 1] = e
    if amount > 0 or take > 0 then
      set[#set + 1] = fields[i]; set[#set + 1] = num(e)
      if take > 0 then set[#set + 1] = 'L' .. fields[i]; set[#set + 1] = num(e) end
    end
    if e - now > longest then longest = e - now end
  end
  if #set > 0 then
    local ms = div_ceil(longest, 1000)
    if ms < 1 then ms = 1 end
    if ms < ttl_floor then ms = ttl_floor end
    redis.call('HSET', key, unpack(set))
    redis.call('PEXPIRE', key, num(ms))
  end
  return reply
end

local reply = {1}
local changes = {}
for i = 1, n do
  local d, nxt = decide(i, values[i], amount)
  if d[1] == 0 then reply[1] = 0 end
  changes[i] = nxt
  for j = 1, 5 do reply[#reply + 1] = d[j] end
end
if reply[1] == 0 then
  -- A denied call charges no limit: each limit that would have allowed it
  -- answers for its state as it stands (its answer to a cost of 0: what it
  -- still has, the time until full), still allowed, as the in-memory Limiter reports it.
  for i = 1, n do
    local at = 5 * (i - 1) + 2
    if reply[at] == 1 then
      local d = decide(i, values[i], 0)
      reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = d[2], d[3], 0, d[5]
    end
  end
  return reply
end
if op == 'a' then store(changes) end
return reply
