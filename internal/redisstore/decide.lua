-- The Redis store's one server-side function: it decides a batch of plans
-- on the bucket hashes in KEYS, at Redis's own clock, with the integer GCRA
-- of pkg/tokenbucket, and writes each plan's levels only if it is admitted
-- (charges and refunds are applied regardless). See script.go for the
-- arguments it is sent and what it returns.
--
-- Levels are 128-bit integers (tokenbucket.Int128). Lua's numbers are
-- doubles, exact only below 2^53, so levels are kept here as signed
-- numbers of base-10^7 limbs: products of two limbs stay below 2^53.

local B = 10000000

local function trim(d)
  while #d > 1 and d[#d] == 0 do d[#d] = nil end
  return d
end

-- big parses a decimal string ("-123").
local function big(s)
  local neg = false
  if string.sub(s, 1, 1) == '-' then
    neg = true
    s = string.sub(s, 2)
  end
  local d = {}
  local i = #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    d[#d + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #d == 0 then d[1] = 0 end
  trim(d)
  if #d == 1 and d[1] == 0 then neg = false end
  return { neg = neg, d = d }
end

local function str(a)
  local d = a.d
  local parts = { tostring(d[#d]) }
  for i = #d - 1, 1, -1 do
    parts[#parts + 1] = string.format('%07d', d[i])
  end
  local s = table.concat(parts)
  if a.neg and s ~= '0' then s = '-' .. s end
  return s
end

local function cmpmag(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then
      if a[i] < b[i] then return -1 end
      return 1
    end
  end
  return 0
end

local function addmag(a, b)
  local r, c = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + c
    if s >= B then
      r[i] = s - B
      c = 1
    else
      r[i] = s
      c = 0
    end
  end
  if c > 0 then r[#r + 1] = c end
  return r
end

-- submag returns a - b for |a| >= |b|.
local function submag(a, b)
  local r, c = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - c
    if s < 0 then
      r[i] = s + B
      c = 1
    else
      r[i] = s
      c = 0
    end
  end
  return trim(r)
end

local function add(a, b)
  if a.neg == b.neg then
    return { neg = a.neg, d = addmag(a.d, b.d) }
  end
  local c = cmpmag(a.d, b.d)
  if c == 0 then return { neg = false, d = { 0 } } end
  if c > 0 then return { neg = a.neg, d = submag(a.d, b.d) } end
  return { neg = b.neg, d = submag(b.d, a.d) }
end

local function neg(a)
  if #a.d == 1 and a.d[1] == 0 then return a end
  return { neg = not a.neg, d = a.d }
end

local function sub(a, b) return add(a, neg(b)) end

local function cmp(a, b)
  if a.neg ~= b.neg then
    if a.neg then return -1 end
    return 1
  end
  local c = cmpmag(a.d, b.d)
  if a.neg then return -c end
  return c
end

local function mul(a, b)
  local r = {}
  for i = 1, #a.d + #b.d do r[i] = 0 end
  for i = 1, #a.d do
    local c = 0
    local ai = a.d[i]
    for j = 1, #b.d do
      local t = r[i + j - 1] + ai * b.d[j] + c
      c = math.floor(t / B)
      r[i + j - 1] = t - c * B
    end
    local k = i + #b.d
    while c > 0 do
      local t = r[k] + c
      c = math.floor(t / B)
      r[k] = t - c * B
      k = k + 1
    end
  end
  local out = { neg = a.neg ~= b.neg, d = trim(r) }
  if #out.d == 1 and out.d[1] == 0 then out.neg = false end
  return out
end

local function bmax(a, b)
  if cmp(a, b) >= 0 then return a end
  return b
end

-- approx is a's value as a double (for expiries only).
local function approx(a)
  local v = 0
  for i = #a.d, 1, -1 do v = v * B + a.d[i] end
  if a.neg then return -v end
  return v
end

local ZERO = big('0')

-- A batch's plans mostly repeat the same limits: their numbers are parsed,
-- and their clocks multiplied, once a call (bignums are never mutated, so
-- they may be shared).
local parsed = {}
local function bigc(s)
  local v = parsed[s]
  if not v then
    v = big(s)
    parsed[s] = v
  end
  return v
end

-- The clock: Redis's, in unix milliseconds; ARGV[1] sets it instead when
-- not empty (a store on a test's clock).
local nowMs
if ARGV[1] ~= '' then
  nowMs = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local nowBig = big(string.format('%.0f', nowMs))

-- levels: one per distinct (key, limit field) the batch touches, loaded
-- once: {key, field, x (big or nil), shape, stored (string or false),
-- dirty, ttl}.
local levels = {}
local function level(ki, field)
  local id = ki .. '\0' .. field
  local l = levels[id]
  if l then return l end
  local v = redis.call('HMGET', KEYS[ki], 'x' .. field, 's' .. field)
  l = { ki = ki, field = field, stored = v[1], shape = v[2] }
  if v[1] then l.x = big(v[1]) end
  levels[id] = l
  return l
end

local out = { nowMs }
local expire = {} -- per key index, how long it must live at least (ms)

-- Usage: ARGV[2] is '' (not kept) or the windows the caller expects now
-- to fall in, with when each window's keys expire: hour start, hour
-- expiry, day start, day expiry, month start, month end, month expiry.
-- When now is in another window the batch is answered 'c' whole, and the
-- caller tries again at Redis's clock.
local usage
if ARGV[2] ~= '' then
  local u = {}
  for v in string.gmatch(ARGV[2], '[^,]+') do u[#u + 1] = tonumber(v) end
  usage = { hexp = u[2], dexp = u[4], mexp = u[7], adds = {}, sets = {} }
  if nowMs < u[1] or nowMs >= u[1] + 3600000 or nowMs < u[3] or nowMs >= u[3] + 86400000 or nowMs < u[5] or nowMs >= u[6] then
    usage.miss = true
  end
end
local pos = 3
local function arg()
  pos = pos + 1
  return ARGV[pos - 1]
end

-- debit reads one debit's arguments: key index, limit field, op, role,
-- too big (n > capacity), n·period, capacity·period, refill amount, the
-- limit's shape, its calendar clock ("" or "index,start,end,maxperiod"),
-- and a restatement ("" or "oldX,newX").
local function debit()
  local d = {
    ki = tonumber(arg()), field = arg(), op = arg(), role = arg(), big = arg() == '1',
    n = arg(), span = bigc(arg()), capspan = arg(), rate = arg(), shape = arg(),
    cal = arg(), restate = arg(), uk = arg(), res = arg(),
  }
  local clock = nowBig
  if d.cal ~= '' then
    local idx, s, e, mp = string.match(d.cal, '^(-?%d+),(-?%d+),(-?%d+),(%d+)$')
    if nowMs < tonumber(s) or nowMs >= tonumber(e) then d.clockmiss = true end
    clock = bigc(idx)
    d.periodEnd = tonumber(e)
    d.maxPeriod = tonumber(mp)
  end
  -- at = clock·rate and base = at − capacity·period, once per limit.
  local id = d.rate .. '|' .. d.capspan .. '|' .. d.cal
  local ab = parsed[id]
  if not ab then
    local at = mul(clock, bigc(d.rate))
    ab = { at = at, base = sub(at, bigc(d.capspan)) }
    parsed[id] = ab
  end
  d.at, d.base = ab.at, ab.base
  d.capspan, d.rate = bigc(d.capspan), bigc(d.rate)
  return d
end

-- step applies debit d to level value x; returns whether it admitted and
-- the new value.
local function step(d, x)
  local op = d.op
  if op == 'c' then -- consume
    if d.big then return false, x end
    if cmp(x, sub(d.at, d.span)) > 0 then return false, x end
    if cmp(d.span, ZERO) > 0 then x = add(bmax(x, d.base), d.span) end
    return true, x
  elseif op == 'k' then -- check
    return cmp(x, d.at) <= 0, x
  elseif op == 'h' then -- charge
    local ok = (not d.big) and cmp(x, sub(d.at, d.span)) <= 0
    if cmp(d.span, ZERO) > 0 then x = add(bmax(x, d.base), d.span) end
    return ok, x
  elseif op == 'r' then -- refund
    if cmp(d.span, ZERO) > 0 then x = bmax(sub(x, d.span), d.base) end
    return true, x
  end
  return false, x
end

-- blind applies what a refused plan applies regardless: charges, refunds.
local function blind(d, x)
  if cmp(d.span, ZERO) <= 0 then return x end
  if d.op == 'h' then return add(bmax(x, d.base), d.span) end
  if d.op == 'r' then return bmax(sub(x, d.span), d.base) end
  return x
end

-- admit is cascade.Admit.
local function admit(ds, oks)
  local quotas, quotaOK = 0, 0
  for i = 1, #ds do
    local role = ds[i].role
    if role == 'e' then
      if not oks[i] then return false end
    elseif role == 'q' then
      quotas = quotas + 1
      if oks[i] then quotaOK = quotaOK + 1 end
    end
  end
  return quotas == 0 or quotaOK > 0
end

-- ttl returns how long level l must live from now: until its bucket is
-- full again (rounded up, with a margin), for the debit d that wrote it.
local function ttl(d, x)
  local need = approx(sub(add(x, d.capspan), d.at)) / approx(d.rate)
  if need <= 0 then need = 0 end
  need = math.ceil(need * (1 + 1e-9)) + 1
  if d.periodEnd then
    return (d.periodEnd - nowMs) + need * d.maxPeriod + 1000
  end
  return need + 1000
end

-- count adds what an admitted plan's debits consumed to their entities'
-- usage (consumes and charges, less refunds), summed over the batch.
local function count(ds)
  for i = 1, #ds do
    local d = ds[i]
    if d.uk ~= '' and d.n ~= '0' and (d.op == 'c' or d.op == 'h' or d.op == 'r') then
      local v = bigc(d.n)
      if d.op == 'r' then v = neg(v) end
      local h, dd, m, r = string.match(d.uk, '^(%d+),(%d+),(%d+),(%d+)$')
      for _, ki in ipairs({ tonumber(h), tonumber(dd), tonumber(m) }) do
        local id = ki .. '\0' .. d.field
        local a = usage.adds[id]
        if a then a.v = add(a.v, v) else usage.adds[id] = { ki = ki, field = d.field, v = v } end
      end
      usage.sets[tonumber(r)] = d.res
      usage.exp = usage.exp or {}
      usage.exp[tonumber(h)] = usage.hexp
      usage.exp[tonumber(dd)] = usage.dexp
      usage.exp[tonumber(m)] = usage.mexp
      usage.exp[tonumber(r)] = usage.mexp
    end
  end
end

-- plan decides one plan. Kinds: 'd' decide, 's' settle once (its ID
-- key in KEYS), 'p' repay once per replica stamp.
local function plan()
  local kind = arg()
  local n = tonumber(arg())
  local once, item, stampField, stamp, keep
  if kind == 's' then
    once, keep = tonumber(arg()), tonumber(arg())
  elseif kind == 'p' then
    item, stampField, stamp, keep = tonumber(arg()), arg(), big(arg()), tonumber(arg())
  end
  local ds = {}
  for i = 1, n do ds[i] = debit() end
  local res = { kind }
  if usage and usage.miss then
    res[1] = 'c'
    out[#out + 1] = res
    return
  end
  for i = 1, n do
    if ds[i].clockmiss then
      res[1] = 'c' -- the caller's calendar clock is not Redis's
      out[#out + 1] = res
      return
    end
  end
  -- Levels, restated where the caller asks and the stored one is as it
  -- expects; a stored level under another shape refuses the plan to the
  -- caller, who restates it.
  local ls = {}
  local restate = false
  for i = 1, n do
    local d = ds[i]
    local l = level(d.ki, d.field)
    ls[i] = l
    if l.x and l.shape ~= d.shape then
      local old, new = string.match(d.restate, '^(-?%d+),(-?%d+)$')
      if old and old == l.stored then
        l.x, l.shape, l.stored, l.dirty = big(new), d.shape, new, true
      else
        restate = true
      end
    end
  end
  if restate then
    res[1] = 'x'
    for i = 1, n do
      res[#res + 1] = ls[i].stored or ''
      res[#res + 1] = ls[i].shape or ''
    end
    out[#out + 1] = res
    return
  end
  if kind == 's' and redis.call('EXISTS', KEYS[once]) == 1 then
    res[1] = 'u' -- settled before
    out[#out + 1] = res
    return
  end
  if kind == 'p' then
    local st = redis.call('HGET', KEYS[item], stampField)
    if st and cmp(big(st), stamp) >= 0 then
      res[1] = 'u' -- repaid before
      out[#out + 1] = res
      return
    end
  end
  -- What the plan saw: the levels before it (new buckets start full).
  local work, start = {}, {}
  for i = 1, n do
    local l = ls[i]
    if not work[l] then
      work[l] = l.x or ds[i].base
      start[l] = work[l]
      res[#res + 1] = l.x and str(l.x) or ''
    else
      res[#res + 1] = '='
    end
  end
  local oks = {}
  for i = 1, n do
    local ok, x = step(ds[i], work[ls[i]])
    oks[i] = ok
    work[ls[i]] = x
  end
  local admitted = kind ~= 'd' or admit(ds, oks)
  if not admitted then
    work = {}
    for l, x in pairs(start) do work[l] = x end
    for i = 1, n do work[ls[i]] = blind(ds[i], work[ls[i]]) end
  end
  for i = 1, n do
    local l, d = ls[i], ds[i]
    local x = work[l]
    if cmp(x, start[l]) ~= 0 then
      l.x, l.dirty, l.shape, l.d = x, true, d.shape, d
    end
  end
  if admitted and usage then count(ds) end
  if admitted then res[1] = kind .. '1' else res[1] = kind .. '0' end
  if kind == 's' then
    redis.call('SET', KEYS[once], '1', 'PX', keep)
  elseif kind == 'p' then
    redis.call('HSET', KEYS[item], stampField, str(stamp))
    expire[item] = math.max(expire[item] or 0, keep)
  end
  out[#out + 1] = res
end

local plans = tonumber(arg())
for _ = 1, plans do plan() end

-- Writes: each changed level, and each key's expiry, never shortened.
for _, l in pairs(levels) do
  if l.dirty then
    redis.call('HSET', KEYS[l.ki], 'x' .. l.field, str(l.x), 's' .. l.field, l.shape)
    -- A level the batch restated but no plan changed keeps its expiry.
    if l.d then expire[l.ki] = math.max(expire[l.ki] or 0, ttl(l.d, l.x)) end
  end
end
if usage then
  -- Usage is counted, never decided on: an increment Redis refuses (one
  -- that would overflow) is dropped, not the batch.
  for _, a in pairs(usage.adds) do
    local v = str(a.v)
    if v ~= '0' then redis.pcall('HINCRBY', KEYS[a.ki], a.field, v) end
  end
  for ki, res in pairs(usage.sets) do redis.call('SADD', KEYS[ki], res) end
  for ki, at in pairs(usage.exp or {}) do redis.call('PEXPIREAT', KEYS[ki], at) end
end
for ki, ms in pairs(expire) do
  local left = redis.call('PTTL', KEYS[ki])
  if left < ms then redis.call('PEXPIRE', KEYS[ki], math.ceil(ms)) end
end
return out
