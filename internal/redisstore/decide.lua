-- The Redis store's one server-side function: it decides a batch of plans
-- on the bucket hashes in KEYS, at Redis's own clock, with the integer GCRA
-- of pkg/tokenbucket, and writes each plan's levels only if it is admitted
-- (charges and refunds are applied regardless). See script.go for the
-- arguments it is sent and what it returns.
--
-- Levels are 128-bit integers (tokenbucket.Int128), and Lua's numbers are
-- doubles, exact only below 2^53. A number here is one of two forms:
--   - a pair {h, l}, the value h·10^14 + l, with 0 <= l < 10^14 and
--     |h| <= 2^51: every level of a bucket whose refill is below 10^14
--     millitokens a period, until the year 2286. A sum or difference of
--     two pairs is computed exactly on doubles (|h| stays below 2^53, l
--     below 2^48), and kept as a pair if |h| <= 2^51 again;
--   - limbs {neg, d}: a sign and base-10^7 digits (products of two stay
--     below 2^53), for everything else.
-- An operation on two pairs whose result leaves the pairs' range, and
-- every operation with limbs, is done on limbs: it is exact in either
-- form, and its result is a pair again when it fits one.
--
-- Redis makes a script's functions anew at every call, so the limbs'
-- functions, which a call rarely needs, are made on first use.

local tonumber, sfmt, ssub, sbyte, smatch, floor, ceil = tonumber, string.format, string.sub, string.byte, string.match, math.floor, math.ceil
local call, KEYS, ARGV = redis.call, KEYS, ARGV

local E = 1e14 -- a pair's low part's base
local HMAX = 2 ^ 51 -- a pair's bound on |h|

-- pstr is the decimal string of h·10^14 + l (|h| < 2^53, 0 <= l < 10^14).
local function pstr(h, l)
  if h == 0 then return sfmt('%d', l) end
  if h > 0 then return sfmt('%d%014d', h, l) end
  h = -h -- the value is -(h·10^14 - l)
  if l > 0 then h, l = h - 1, E - l end
  if h == 0 then return sfmt('-%d', l) end
  return sfmt('-%d%014d', h, l)
end

-- limbs returns the limb numbers' functions, made on first use.
local LB
local function limbs()
  if LB then return LB end
  local B = 10000000 -- a limb's base
  local function trim(d)
    while #d > 1 and d[#d] == 0 do d[#d] = nil end
    return d
  end
  -- big parses a decimal string ("-123").
  local function big(s)
    local neg = false
    if sbyte(s, 1) == 45 then
      neg = true
      s = ssub(s, 2)
    end
    local d = {}
    local i = #s
    while i >= 1 do
      local j = i - 6
      if j < 1 then j = 1 end
      d[#d + 1] = tonumber(ssub(s, j, i))
      i = j - 1
    end
    if #d == 0 then d[1] = 0 end
    trim(d)
    if #d == 1 and d[1] == 0 then neg = false end
    return { neg = neg, d = d }
  end
  local function str(a)
    local d = a.d
    local parts = { sfmt('%d', d[#d]) }
    for i = #d - 1, 1, -1 do parts[#parts + 1] = sfmt('%07d', d[i]) end
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
        r[i], c = s - B, 1
      else
        r[i], c = s, 0
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
        r[i], c = s + B, 1
      else
        r[i], c = s, 0
      end
    end
    return trim(r)
  end
  local function add(a, b)
    if a.neg == b.neg then return { neg = a.neg, d = addmag(a.d, b.d) } end
    local c = cmpmag(a.d, b.d)
    if c == 0 then return { neg = false, d = { 0 } } end
    if c > 0 then return { neg = a.neg, d = submag(a.d, b.d) } end
    return { neg = b.neg, d = submag(b.d, a.d) }
  end
  local function neg(a)
    if #a.d == 1 and a.d[1] == 0 then return a end
    return { neg = not a.neg, d = a.d }
  end
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
        c = floor(t / B)
        r[i + j - 1] = t - c * B
      end
      local k = i + #b.d
      while c > 0 do
        local t = r[k] + c
        c = floor(t / B)
        r[k] = t - c * B
        k = k + 1
      end
    end
    local out = { neg = a.neg ~= b.neg, d = trim(r) }
    if #out.d == 1 and out.d[1] == 0 then out.neg = false end
    return out
  end
  -- canon is a as a pair when it fits one.
  local function canon(a)
    local d = a.d
    if #d > 4 then return a end
    local h, l = (d[3] or 0) + (d[4] or 0) * B, d[1] + (d[2] or 0) * B
    if a.neg then
      h, l = -h, -l
      if l < 0 then h, l = h - 1, l + E end
    end
    return { h, l }
  end
  -- of is a number of either form as limbs.
  local function of(a)
    if a.d then return a end
    return big(pstr(a[1], a[2]))
  end
  local function approx(a)
    local v = 0
    for i = #a.d, 1, -1 do v = v * B + a.d[i] end
    if a.neg then return -v end
    return v
  end
  LB = { big = big, str = str, add = add, neg = neg, cmp = cmp, mul = mul, canon = canon, of = of, approx = approx }
  return LB
end

-- pair is h·10^14 + l (exact: |h| < 2^53, 0 <= l < 10^14) as a number.
local function pair(h, l)
  if h > HMAX or h < -HMAX then return limbs().big(pstr(h, l)) end
  return { h, l }
end

-- num parses a decimal string.
local function num(s)
  local m, n = s, #s
  local neg = sbyte(s, 1) == 45
  if neg then
    m, n = ssub(s, 2), n - 1
  end
  if n > 28 then return limbs().canon(limbs().big(s)) end
  local h, l = 0, nil
  if n <= 14 then
    l = tonumber(m)
  else
    h, l = tonumber(ssub(m, 1, n - 14)), tonumber(ssub(m, n - 13))
  end
  if neg then
    h, l = -h, -l
    if l < 0 then h, l = h - 1, l + E end
  end
  return { h, l }
end

local function str(a)
  if a.d then return limbs().str(a) end
  return pstr(a[1], a[2])
end

local function add(a, b)
  if a.d or b.d then
    local lb = limbs()
    return lb.canon(lb.add(lb.of(a), lb.of(b)))
  end
  local h, l = a[1] + b[1], a[2] + b[2]
  if l >= E then h, l = h + 1, l - E end
  return pair(h, l)
end

local function neg(a)
  if a.d then
    local lb = limbs()
    return lb.canon(lb.neg(a))
  end
  local h, l = -a[1], -a[2]
  if l < 0 then h, l = h - 1, l + E end
  return { h, l }
end

local function sub(a, b)
  if a.d or b.d then return add(a, neg(b)) end
  local h, l = a[1] - b[1], a[2] - b[2]
  if l < 0 then h, l = h - 1, l + E end
  return pair(h, l)
end

local function cmp(a, b)
  if a.d or b.d then
    local lb = limbs()
    return lb.cmp(lb.of(a), lb.of(b))
  end
  local x, y = a[1], b[1]
  if x == y then x, y = a[2], b[2] end
  if x == y then return 0 end
  if x < y then return -1 end
  return 1
end

local function max(a, b)
  if a == b or cmp(a, b) >= 0 then return a end
  return b
end

-- approx is a's value as a double (for expiries and bounds).
local function approx(a)
  if a.d then return limbs().approx(a) end
  return a[1] * E + a[2]
end

-- times is a·k, k a count: exact on doubles below 2^52, else on limbs.
local function times(a, k)
  local v = approx(a) * k
  if not a.d and v < 2 ^ 52 and v > -2 ^ 52 then
    local h = floor(v / E)
    local l = v - h * E
    if l < 0 then h, l = h - 1, l + E elseif l >= E then h, l = h + 1, l - E end
    return { h, l }
  end
  local lb = limbs()
  return lb.canon(lb.mul(lb.of(a), lb.big(sfmt('%d', k))))
end

-- mulclock is clock·rate: clock a count (of ms, or of calendar periods),
-- rate a decimal string and r its value as a double. Exact on doubles when both are below 10^14
-- (each partial product of their base-10^7 halves is below 2^53), else on
-- limbs.
local function mulclock(clock, rate, r)
  if clock >= 0 and clock < E and #rate <= 14 and r and r >= 0 then
    local c1, r1 = floor(clock / 1e7), floor(r / 1e7)
    local c0, r0 = clock - c1 * 1e7, r - r1 * 1e7
    local mid = c1 * r0 + c0 * r1
    local m1 = floor(mid / 1e7)
    local h, l = c1 * r1 + m1, c0 * r0 + (mid - m1 * 1e7) * 1e7
    if l >= E then h, l = h + 1, l - E end
    return pair(h, l)
  end
  local lb = limbs()
  return lb.canon(lb.mul(lb.big(sfmt('%.0f', clock)), lb.big(rate)))
end

local ZERO = { 0, 0 }

-- step applies spec d to level value x; returns whether it admitted and
-- the new value.
local function step(d, x)
  local op = d.op
  if op == 'c' then -- consume
    if d.big or cmp(x, d.under) > 0 then return false, x end
    if d.pos then x = add(max(x, d.base), d.span) end
    return true, x
  elseif op == 'k' then -- check
    return cmp(x, d.lim.at) <= 0, x
  elseif op == 'h' then -- charge
    local ok = (not d.big) and cmp(x, d.under) <= 0
    if d.pos then x = add(max(x, d.base), d.span) end
    return ok, x
  elseif op == 'r' then -- refund
    if d.pos then x = max(sub(x, d.span), d.base) end
    return true, x
  end
  return false, x
end

-- blind applies what a refused plan applies regardless: charges, refunds.
local function blind(d, x)
  if not d.pos then return x end
  if d.op == 'h' then return add(max(x, d.base), d.span) end
  if d.op == 'r' then return max(sub(x, d.span), d.base) end
  return x
end

-- The clock: Redis's, in unix milliseconds; ARGV[1] sets it instead when
-- not empty (a store on a test's clock).
local nowMs
if ARGV[1] ~= '' then
  nowMs = tonumber(ARGV[1])
else
  local t = call('TIME')
  nowMs = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end

local out, top = { nowMs }, 1 -- the reply, and its length
local expire = {} -- per key index, how long it must live at least (ms)

-- Usage: ARGV[2] is '' (not kept) or the windows the caller expects now
-- to fall in, with when each window's keys expire: hour start, hour
-- expiry, day start, day expiry, month start, month end, month expiry.
-- When now is in another window the batch is answered 'c' whole, and the
-- caller tries again at Redis's clock.
-- (The windows are UTC's: an instant in the hour is in its day and month.)
local usage
if ARGV[2] ~= '' then
  local hour, hexp, dexp, mexp = smatch(ARGV[2], '^(%d+),(%d+),%d+,(%d+),%d+,%d+,(%d+)$')
  hour = tonumber(hour)
  usage = { exp = { hexp, dexp, mexp }, miss = nowMs < hour or nowMs >= hour + 3600000 }
end

-- levels: per key index, per limit field, the level the batch touches,
-- loaded once: {ki, field, x (number or nil), shape, stored (string or
-- false), was (the shape stored), dirty, d (the spec that last changed
-- it)}; while a plan is decided, its value before the plan (start) and
-- as the plan leaves it (work), when mark is the plan's.
local levels = {}

-- limits: what the specs of one limit share, by the limit's shape: its
-- clock's at = clock·rate and base = at − capacity·period, its rate (a
-- double, for expiries), and its calendar period.
local limits = {}

-- specs: the batch's distinct debits, ARGV[4] of them from ARGV[5], 14
-- arguments each: key index, limit field, op, role, too big (n >
-- capacity), n, n·period, capacity·period, refill amount, the limit's
-- shape, its calendar clock ("" or "index,start,end,maxperiod"), a
-- restatement ("" or "oldX,newX"), its usage keys' indexes ("" or
-- "hour,day,month,resources") and its resource; by number (a string, as
-- the plans name them). A spec also holds its level, once loaded, and,
-- for usage, how many times admitted plans counted it (used).
local specs, specList = {}, {}
local pos = 5
for i = 1, tonumber(ARGV[4]) do
  local p = pos
  pos = p + 14
  local shape, capspan, rate, cal = ARGV[p + 9], ARGV[p + 7], ARGV[p + 8], ARGV[p + 10]
  local lim = limits[shape]
  if not (lim and lim.capspan == capspan and lim.rateS == rate and lim.cal == cal) then
    local r, clock, clockmiss, periodEnd, maxPeriod = tonumber(rate), nowMs, false, false, false
    if cal ~= '' then
      local idx, s, e, mp = smatch(cal, '^(-?%d+),(-?%d+),(-?%d+),(%d+)$')
      clockmiss = nowMs < tonumber(s) or nowMs >= tonumber(e)
      clock, periodEnd, maxPeriod = tonumber(idx), tonumber(e), tonumber(mp)
    end
    local at = mulclock(clock, rate, r)
    lim = {
      capspan = capspan, rateS = rate, cal = cal, rate = r, at = at, base = sub(at, num(capspan)),
      clockmiss = clockmiss, periodEnd = periodEnd, maxPeriod = maxPeriod,
    }
    limits[shape] = lim
  end
  local op, n, span, uk = ARGV[p + 2], ARGV[p + 5], num(ARGV[p + 6]), ARGV[p + 12]
  local under = sub(lim.at, span) -- at − n·period
  local counts = usage and uk ~= '' and n ~= '0' and (op == 'c' or op == 'h' or op == 'r')
  local d = {
    ki = tonumber(ARGV[p]), field = ARGV[p + 1], op = op, role = ARGV[p + 3], big = ARGV[p + 4] == '1',
    n = n, span = span, shape = shape, restate = ARGV[p + 11], uk = uk, res = ARGV[p + 13],
    lim = lim, base = lim.base, under = under, pos = cmp(span, ZERO) > 0,
    pairs = not (span.d or lim.base.d or under.d), counts = counts, nv = counts and num(n),
    used = 0, level = false,
  }
  specs[sfmt('%d', i)] = d
  specList[i] = d
end

-- The plans, each: kind ('d' decide, 's' settle once, its ID key in
-- KEYS, 'p' repay once per replica stamp), number of debits, the kind's
-- arguments, and its debits' spec numbers. The reply is one flat array:
-- Redis's clock, then per plan its status, its number of fields, and its
-- fields: per debit the level it saw, '' none (a full bucket), '=' as an
-- earlier debit's of the plan, a pair's h and l as two integers, or a
-- limbs number's decimal string; for status 'x' each debit's stored level
-- and shape.
local OK = { d = 'd1', s = 's1', p = 'p1' }
local REFUSED = { d = 'd0', s = 's0', p = 'p0' }
local ds, oks = {}, {}
local SMALL = { ['1'] = 1, ['2'] = 2, ['3'] = 3 }
for mark = 1, tonumber(ARGV[3]) do
  local kind, n = ARGV[pos], ARGV[pos + 1]
  n = SMALL[n] or tonumber(n)
  pos = pos + 2
  local once, item, stampField, stamp, keep
  if kind == 's' then
    once, keep = tonumber(ARGV[pos]), tonumber(ARGV[pos + 1])
    pos = pos + 2
  elseif kind == 'p' then
    item, stampField, stamp, keep = tonumber(ARGV[pos]), ARGV[pos + 1], num(ARGV[pos + 2]), tonumber(ARGV[pos + 3])
    pos = pos + 4
  end
  for i = 1, n do ds[i] = specs[ARGV[pos + i - 1]] end
  pos = pos + n
  top = top + 2
  local si, base = top - 1, top -- the plan's status, and its count of fields
  out[si], out[base] = kind, 0
  repeat -- once: break ends the plan
    if usage and usage.miss then
      out[si] = 'c'
      break
    end
    local miss, restate = false, false
    for i = 1, n do
      if ds[i].lim.clockmiss then miss = true end
    end
    if miss then
      out[si] = 'c' -- the caller's calendar clock is not Redis's
      break
    end
    -- Levels, restated where the caller asks and the stored one is as it
    -- expects; a stored level under another shape refuses the plan to the
    -- caller, who restates it.
    for i = 1, n do
      local d = ds[i]
      local l = d.level
      if not l then
        local byField = levels[d.ki]
        if not byField then
          byField = {}
          levels[d.ki] = byField
        end
        l = byField[d.field]
        if not l then
          local v = call('HMGET', KEYS[d.ki], 'x' .. d.field, 's' .. d.field)
          l = {
            ki = d.ki, field = d.field, stored = v[1], shape = v[2], was = v[2], x = v[1] and num(v[1]),
            dirty = false, d = false, mark = 0, start = false, work = false,
          }
          byField[d.field] = l
        end
        d.level = l
      end
      if l.x and l.shape ~= d.shape then
        local old, new = smatch(d.restate, '^(-?%d+),(-?%d+)$')
        if old and old == l.stored then
          l.x, l.shape, l.stored, l.dirty = num(new), d.shape, new, true
        else
          restate = true
        end
      end
    end
    if restate then
      out[si] = 'x'
      for i = 1, n do
        out[top + 1], out[top + 2] = ds[i].level.stored or '', ds[i].level.shape or ''
        top = top + 2
      end
      break
    end
    if kind == 's' and call('EXISTS', KEYS[once]) == 1 then
      out[si] = 'u' -- settled before
      break
    end
    if kind == 'p' then
      local st = call('HGET', KEYS[item], stampField)
      if st and cmp(num(st), stamp) >= 0 then
        out[si] = 'u' -- repaid before
        break
      end
    end
    -- What the plan saw: the levels before it (new buckets start full).
    for i = 1, n do
      local l = ds[i].level
      if l.mark == mark then
        top = top + 1
        out[top] = '='
      else
        l.mark, l.start = mark, l.x or ds[i].base
        l.work = l.start
        local x = l.x
        if not x then
          top = top + 1
          out[top] = ''
        elseif x.d then
          top = top + 1
          out[top] = str(x)
        else
          out[top + 1], out[top + 2] = x[1], x[2]
          top = top + 2
        end
      end
    end
    for i = 1, n do
      local d = ds[i]
      local l = d.level
      local x, u = l.work, d.under
      if d.op == 'c' and d.pairs and not x.d and not d.big then
        -- A consume on pairs, inline: step's, without its calls.
        local xh, xl = x[1], x[2]
        if xh > u[1] or (xh == u[1] and xl > u[2]) then
          oks[i] = false
        else
          oks[i] = true
          if d.pos then
            local b, sp = d.base, d.span
            if xh < b[1] or (xh == b[1] and xl < b[2]) then xh, xl = b[1], b[2] end
            xh, xl = xh + sp[1], xl + sp[2]
            if xl >= E then xh, xl = xh + 1, xl - E end
            l.work = pair(xh, xl)
          end
        end
      else
        oks[i], l.work = step(d, x)
      end
    end
    -- cascade.Admit
    local admitted, quotas, quotaOK = true, 0, 0
    if kind == 'd' then
      for i = 1, n do
        local role = ds[i].role
        if role == 'e' then
          if not oks[i] then admitted = false end
        elseif role == 'q' then
          quotas = quotas + 1
          if oks[i] then quotaOK = quotaOK + 1 end
        end
      end
      admitted = admitted and (quotas == 0 or quotaOK > 0)
    end
    if not admitted then
      for i = 1, n do ds[i].level.work = ds[i].level.start end
      for i = 1, n do
        local l = ds[i].level
        l.work = blind(ds[i], l.work)
      end
    end
    for i = 1, n do
      local d = ds[i]
      local l = d.level
      if l.work ~= l.start and cmp(l.work, l.start) ~= 0 then
        l.x, l.dirty, l.shape, l.d = l.work, true, d.shape, d
      end
      if admitted and d.counts then d.used = d.used + 1 end
    end
    if admitted then out[si] = OK[kind] else out[si] = REFUSED[kind] end
    if kind == 's' then
      call('SET', KEYS[once], '1', 'PX', keep)
    elseif kind == 'p' then
      call('HSET', KEYS[item], stampField, str(stamp))
      expire[item] = math.max(expire[item] or 0, keep)
    end
  until true
  out[base] = top - base
end

-- Writes: each key's changed levels in one HSET (a level's shape only
-- when it changed), and how long the key must live from now: until each
-- level's bucket is full again (rounded up, with a margin), for the spec
-- that last wrote it.
for ki, byField in pairs(levels) do
  local hset
  for _, l in pairs(byField) do
    if l.dirty then
      hset = hset or { 'HSET', KEYS[ki] }
      hset[#hset + 1] = 'x' .. l.field
      hset[#hset + 1] = str(l.x)
      if l.shape ~= l.was then
        hset[#hset + 1] = 's' .. l.field
        hset[#hset + 1] = l.shape
      end
      -- A level the batch restated but no plan changed keeps its expiry.
      if l.d then
        local lim = l.d.lim
        local need = approx(sub(l.x, lim.base)) / lim.rate
        if need <= 0 then need = 0 end
        need = ceil(need * (1 + 1e-9)) + 1
        if lim.periodEnd then
          need = (lim.periodEnd - nowMs) + need * lim.maxPeriod + 1000
        else
          need = need + 1000
        end
        -- (A bucket that takes millennia to fill lives 2^46 ms: Redis
        -- takes no longer expiry, and no number it would print as 1e+21.)
        expire[ki] = math.max(expire[ki] or 0, math.min(need, 2 ^ 46))
      end
    end
  end
  if hset then call(unpack(hset)) end
end

-- Usage: what the admitted plans consumed (consumes and charges, less
-- refunds), per window key and limit field, summed over the batch.
-- Usage is counted, never decided on: an increment Redis refuses (one
-- that would overflow) is dropped, not the batch. A window's key gets its
-- expiry, and the entity's set of resources the resource, when the
-- increment made its field (a field that was there was made by a call
-- that did both).
if usage then
  local adds, order = {}, {}
  for _, d in ipairs(specList) do
    if d.used > 0 then
      local v = d.nv
      if d.used > 1 then v = times(v, d.used) end
      if d.op == 'r' then v = neg(v) end
      local h, dd, m, r = smatch(d.uk, '^(%d+),(%d+),(%d+),(%d+)$')
      local ks = { h, dd, m }
      for w = 1, 3 do
        local id = ks[w] .. '\0' .. d.field
        local a = adds[id]
        if a then
          a.v, a.s = add(a.v, v), nil
        else
          a = { ki = tonumber(ks[w]), field = d.field, v = v, w = w, r = r, res = d.res }
          if v == d.nv then a.s = d.n end
          adds[id] = a
          order[#order + 1] = a
        end
      end
    end
  end
  for _, a in ipairs(order) do
    local v = a.s or str(a.v)
    if v ~= '0' then
      local got = redis.pcall('HINCRBY', KEYS[a.ki], a.field, v)
      local near = approx(a.v)
      if type(got) == 'number' and (got == near or near >= 2 ^ 52 or near <= -2 ^ 52) then
        call('PEXPIREAT', KEYS[a.ki], usage.exp[a.w])
        if a.w == 3 then
          local r = tonumber(a.r)
          call('SADD', KEYS[r], a.res)
          call('PEXPIREAT', KEYS[r], usage.exp[3])
        end
      end
    end
  end
end

-- Expiries, never shortened; one is set a second past what it needs, so
-- that a key decided on again within that second is not written again.
for ki, ms in pairs(expire) do
  local left = call('PTTL', KEYS[ki])
  if left < ms then call('PEXPIRE', KEYS[ki], ceil(ms) + 1000) end
end
return out
