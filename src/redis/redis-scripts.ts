/**
 * The Lua scripts of the Redis store, one per operation, as named string constants. Each runs
 * atomically in Redis, reads Redis server time with `TIME` (unless a test passes `now`), and answers
 * in one round trip. They need nothing beyond Redis 5 scripting (plain `EVALSHA`; no functions), so
 * Redis 7 and Valkey run them as they are.
 *
 * The limit arithmetic mirrors `src/core/*.ts` operation for operation, on the same IEEE doubles
 * (Lua 5.1 numbers), so a decision in Redis equals the decision of the TypeScript core at the same
 * `now`: `test/integration/redis-parity.test.ts` runs random workloads through both. Two rules make
 * that hold:
 * - numbers are stored and returned as `%.17g` strings, which round-trip every double exactly
 *   (Lua's `tostring` keeps 14 digits, and Redis truncates a returned Lua number to an integer);
 * - every expression keeps the operand order of its TypeScript twin (float addition is not associative).
 *
 * State encodings (one Redis key per level, TTL = until the state is idle, so idle state disappears
 * and an absent key means "full/initial", exactly as `LimitCore.isIdle` promises):
 * - token/leaky bucket: the theoretical arrival time `tat`;
 * - fixed window: `w n p`; sliding window: `w cur prev older`;
 * - sliding log: `horizon t0 c0 t1 c1 ...`;
 * - concurrency: a hash of leases, reservation id -> `cost expiresAt`, so a process that dies holding
 *   permits gives them back when its leases expire.
 *
 * Level arguments are five values each: algorithm code (`tb lb fw sl sw cc`), limit, intervalMs,
 * burst, cost. The burst of a token bucket whose capacity exceeds it (`StoreLevel.capacity`, a
 * bucket kept on the safe side by an arrival margin) is sent as `burst:capacity`.
 */

// Shared helpers and the six algorithms, prepended to the scripts that need them.
const LIMITS_LUA = `
local INF = math.huge
local NO_HORIZON = -1.7976931348623157e308
local floor = math.floor

local function fmt(x) return string.format('%.17g', x) end

-- TTL (ms) so that a key lives until idleAt (store time), at least 1 ms; minTtl keeps test keys.
-- At most MAX_TTL (about 31,700 years): a longer one would be printed with an exponent, which
-- PX refuses, after the call's other levels were written.
local MIN_TTL = 1
local MAX_TTL = 1e15
local function ttlUntil(idleAt, now)
  local ttl = math.ceil(idleAt - now) + 1
  if ttl < MIN_TTL then ttl = MIN_TTL end
  if ttl < 1 then ttl = 1 end
  if ttl > MAX_TTL then ttl = MAX_TTL end
  return ttl
end

-- A level: { algo, limit, I, burst, cost, key, T, tol, cap, full }. capacity: a token bucket's
-- largest cost when it exceeds the burst (nil: the burst); see core/token-bucket.ts for full.
local function level(algo, limit, I, burst, cost, key, capacity)
  local L = { algo = algo, limit = limit, I = I, burst = burst, cost = cost, key = key, cap = limit, full = 0 }
  if algo == 'tb' or algo == 'lb' then
    -- core/gcra.ts emissionIntervalMs: T (ms/unit) = intervalMs / limit
    L.T = I / limit
    if algo == 'tb' then
      L.tol = burst * L.T
      L.cap = capacity or burst
      -- full (ms) = (capacity - burst) × T: a full bucket's TAT lies that long before now.
      L.full = (L.cap - burst) * L.T
    end
  end
  return L
end

-- A level's burst argument: 'burst', or 'burst:capacity' for a token bucket whose capacity exceeds
-- its burst. Answers the burst and the capacity (nil when not given).
local function burstArg(text)
  local burst, capacity = string.match(text, '^([^:]*):(.*)$')
  if burst then return tonumber(burst), tonumber(capacity) end
  return tonumber(text), nil
end

------------------------------------------------------------------------------------------------
-- GCRA (token bucket, leaky bucket): state is the TAT.
local function gcraEarliest(L, tat, cost, now)
  if cost > L.cap then return INF end
  -- core/token-bucket.ts: full for L.full or longer, any cost up to the capacity starts now.
  if tat <= now - L.full then return now end
  local tol = L.tol
  if L.algo == 'lb' then tol = cost * L.T end
  -- Negative for a cost above the burst (a capacity above it): the start comes after the TAT.
  local slackMs = tol - cost * L.T
  local atMs = tat - slackMs
  if atMs > now then return atMs end
  return now
end
local function gcraTake(L, tat, cost, at)
  local m = tat
  if at > m then m = at end
  return m + cost * L.T
end

------------------------------------------------------------------------------------------------
-- The window algorithms, built on first use: every closure a script defines is created again on
-- every run, so a call passing only token or leaky buckets (the common case) skips these.
local W = nil
local function windows()
  if W then return W end
  local EPS = 2^-52
  local TINY = 2^-1074
  -- core/next-up.ts
  local function nextUp(x)
    local step = math.abs(x) * EPS
    if step > 0 then return x + step end
    return x + TINY
  end

  -- core/aligned-window.ts
  local function windowStartMs(index, I)
    local startMs = index * I
    while floor(startMs / I) < index do startMs = nextUp(startMs) end
    return startMs
  end

  local function decode(s)
    local t = {}
    for v in string.gmatch(s, '%S+') do t[#t + 1] = tonumber(v) end
    return t
  end

  local function encode(t)
    local out = {}
    for i = 1, #t do out[i] = fmt(t[i]) end
    return table.concat(out, ' ')
  end


  ------------------------------------------------------------------------------------------------
  -- Fixed window: { w, n, p }
  local function fwUnitsIn(s, index)
    if index > s[1] then return 0 end
    if index == s[1] then return s[2] end
    return s[3]
  end
  local function fwFirstOpen(s)
    if s[2] > 0 then return s[1] end
    return s[1] - 1
  end
  local function fwEarliest(L, s, cost, now)
    if cost > L.limit then return INF end
    local nowWindow = floor(now / L.I)
    local window = fwFirstOpen(s)
    if nowWindow > window then window = nowWindow end
    while fwUnitsIn(s, window) + cost > L.limit do window = window + 1 end
    if window == nowWindow then return now end
    return windowStartMs(window, L.I)
  end
  local function fwTake(L, s, cost, at)
    local window = floor(at / L.I)
    if window == s[1] then
      s[2] = s[2] + cost
    elseif window > s[1] then
      if window == s[1] + 1 then s[3] = s[2] else s[3] = 0 end
      s[2] = cost
      s[1] = window
    elseif window == s[1] - 1 then
      s[3] = s[3] + cost
    end
    return s
  end
  local function fwRefund(L, s, cost, at)
    local window = floor(at / L.I)
    if window == s[1] then s[2] = math.max(s[2] - cost, 0)
    elseif window == s[1] - 1 then s[3] = math.max(s[3] - cost, 0) end
    return s
  end
  local function fwIdleAt(L, s, now)
    local nowWindow = floor(now / L.I)
    local idle
    if nowWindow > s[1] then idle = true
    elseif nowWindow == s[1] then idle = s[2] <= 0
    else idle = nowWindow == s[1] - 1 and s[2] <= 0 and s[3] <= 0 end
    if idle then return nil end
    return windowStartMs(s[1] + 1, L.I)
  end

  ------------------------------------------------------------------------------------------------
  -- Sliding window counter: { w, cur, prev, older }
  local function swUnitsIn(s, index)
    if index > s[1] then return 0 end
    if index == s[1] then return s[2] end
    if index == s[1] - 1 then return s[3] end
    return s[4]
  end
  local function swFirstOpen(s)
    if s[2] > 0 then return s[1] end
    return s[1] - 1
  end
  local function swEstimateAt(L, s, t)
    local x = t / L.I
    local window = floor(x)
    if window > s[1] + 1 then return 0 end
    if window < swFirstOpen(s) then return INF end
    return swUnitsIn(s, window - 1) * (1 - (x - window)) + swUnitsIn(s, window)
  end
  local function swEarliest(L, s, cost, now)
    local limit, I = L.limit, L.I
    if cost > limit then return INF end
    if swEstimateAt(L, s, now) + cost <= limit then return now end
    local t = now
    local window = floor(now / I)
    local firstOpen = swFirstOpen(s)
    if window < firstOpen then
      window = firstOpen
      t = windowStartMs(window, I)
    end
    while true do
      if swEstimateAt(L, s, t) + cost <= limit then return t end
      local weighted = swUnitsIn(s, window - 1)
      local room = limit - swUnitsIn(s, window) - cost
      if room >= 0 and weighted > 0 then
        local solved = (window + 1 - room / weighted) * I
        if solved > t then t = solved end
        local step = 0
        while step < 64 and floor(t / I) == window do
          if swEstimateAt(L, s, t) + cost <= limit then return t end
          t = nextUp(t)
          step = step + 1
        end
      end
      window = window + 1
      t = windowStartMs(window, I)
    end
  end
  local function swTake(L, s, cost, at)
    local window = floor(at / L.I)
    local ahead = window - s[1]
    if ahead == 0 then
      s[2] = s[2] + cost
    elseif ahead > 0 then
      local older = 0
      if ahead == 1 then older = s[3] elseif ahead == 2 then older = s[2] end
      local prev = 0
      if ahead == 1 then prev = s[2] end
      s[4] = older
      s[3] = prev
      s[2] = cost
      s[1] = window
    elseif ahead == -1 then
      s[3] = s[3] + cost
    elseif ahead == -2 then
      s[4] = s[4] + cost
    end
    return s
  end
  local function swRefund(L, s, cost, at)
    local ahead = floor(at / L.I) - s[1]
    if ahead == 0 then s[2] = math.max(s[2] - cost, 0)
    elseif ahead == -1 then s[3] = math.max(s[3] - cost, 0)
    elseif ahead == -2 then s[4] = math.max(s[4] - cost, 0) end
    return s
  end
  local function swIdleAt(L, s, now)
    local nowWindow = floor(now / L.I)
    local idle = true
    if nowWindow < swFirstOpen(s) then idle = false
    else
      for window = nowWindow - 1, s[1] do
        if swUnitsIn(s, window) > 0 then idle = false end
      end
    end
    if idle then return nil end
    return windowStartMs(s[1] + 2, L.I)
  end

  ------------------------------------------------------------------------------------------------
  -- Sliding log: { horizon, t0, c0, t1, c1, ... } (entry k: time at 2 + 2k, cost at 3 + 2k)
  local function slQueueEnd(log)
    local n = #log
    local lastMs = NO_HORIZON
    if n > 1 then lastMs = log[n - 1] end
    if lastMs > log[1] then return lastMs end
    return log[1]
  end
  local function slPrune(L, log, cutoffMs, lazy)
    local n = #log
    local count = (n - 1) / 2
    local lo, hi = 0, count
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if log[2 + 2 * mid] + L.I <= cutoffMs then lo = mid + 1 else hi = mid end
    end
    if lo == 0 or (lazy and lo * 2 < count) then return end
    local exitMs = log[2 + 2 * (lo - 1)] + L.I
    if exitMs > log[1] then log[1] = exitMs end
    local shift = 2 * lo
    for j = 2, n - shift do log[j] = log[j + shift] end
    for j = n, n - shift + 1, -1 do log[j] = nil end
  end
  local function slEarliest(L, log, cost, now)
    if cost > L.limit then return INF end
    local fromMs = slQueueEnd(log)
    if now > fromMs then fromMs = now end
    local n = #log
    local first = n + 1
    local units = 0
    local i = n - 1
    while i >= 2 do
      if log[i] + L.I <= fromMs then break end
      units = units + log[i + 1]
      first = i
      i = i - 2
    end
    local excess = units + cost - L.limit
    if excess <= 0 then return fromMs end
    local freed = 0
    i = first
    while i < n do
      freed = freed + log[i + 1]
      if freed >= excess then return log[i] + L.I end
      i = i + 2
    end
    return INF
  end
  local function slTake(L, log, cost, at)
    local n = #log
    if n == 1 then
      log[2] = at
      log[3] = cost
      return log
    end
    local lastMs = log[n - 1]
    slPrune(L, log, lastMs - L.I, true)
    if at > lastMs then
      local m = #log
      log[m + 1] = at
      log[m + 2] = cost
      return log
    end
    local i = #log - 1
    while i >= 2 and log[i] > at do i = i - 2 end
    if i >= 2 and log[i] == at then
      log[i + 1] = log[i + 1] + cost
    else
      table.insert(log, i + 2, at)
      table.insert(log, i + 3, cost)
    end
    return log
  end
  local function slRefund(L, log, cost, at, now)
    local i = #log - 1
    while i >= 2 do
      local timeMs = log[i]
      if timeMs < at then break end
      if timeMs == at then
        local left = log[i + 1] - cost
        if left > 0 then
          log[i + 1] = left
        else
          table.remove(log, i)
          table.remove(log, i)
        end
        break
      end
      i = i - 2
    end
    slPrune(L, log, now, false)
    return log
  end
  local function slIdleAt(L, log, now)
    local qe = slQueueEnd(log)
    local n = #log
    local lastExit = NO_HORIZON
    if n > 1 then lastExit = log[n - 1] + L.I end
    if qe <= now and (n == 1 or lastExit <= now) then return nil end
    if lastExit > qe then return lastExit end
    return qe
  end


  W = {
    nextUp = nextUp,
    windowStartMs = windowStartMs,
    decode = decode,
    encode = encode,
    fwEarliest = fwEarliest,
    fwTake = fwTake,
    fwRefund = fwRefund,
    fwIdleAt = fwIdleAt,
    swEarliest = swEarliest,
    swTake = swTake,
    swRefund = swRefund,
    swIdleAt = swIdleAt,
    slEarliest = slEarliest,
    slTake = slTake,
    slRefund = slRefund,
    slIdleAt = slIdleAt,
  }
  return W
end

------------------------------------------------------------------------------------------------
-- Load, decide, take, refund and save any level.

-- Concurrency: live leases summed; expired leases are dropped on the way.
local function ccLoad(L, now)
  local flat = redis.call('HGETALL', L.key)
  local inFlight = 0
  for i = 1, #flat, 2 do
    local cost, expiresAt = string.match(flat[i + 1], '(%S+) (%S+)')
    if tonumber(expiresAt) <= now then
      redis.call('HDEL', L.key, flat[i])
    else
      inFlight = inFlight + tonumber(cost)
    end
  end
  return inFlight
end

local function load(L, now)
  local algo = L.algo
  if algo == 'cc' then return ccLoad(L, now) end
  local raw = redis.call('GET', L.key)
  if algo == 'tb' or algo == 'lb' then
    if raw then return tonumber(raw) end
    -- core/token-bucket.ts initial: a full bucket.
    return now - L.full
  end
  if raw then return windows().decode(raw) end
  if algo == 'fw' then return { floor(now / L.I), 0, 0 } end
  if algo == 'sw' then return { floor(now / L.I), 0, 0, 0 } end
  return { NO_HORIZON }
end

local function earliest(L, s, cost, now)
  local algo = L.algo
  if algo == 'tb' or algo == 'lb' then return gcraEarliest(L, s, cost, now) end
  if algo == 'fw' then return windows().fwEarliest(L, s, cost, now) end
  if algo == 'sw' then return windows().swEarliest(L, s, cost, now) end
  if algo == 'sl' then return windows().slEarliest(L, s, cost, now) end
  -- concurrency: not timed
  if s + cost <= L.limit then return now end
  return INF
end

local function take(L, s, cost, at)
  local algo = L.algo
  if algo == 'tb' or algo == 'lb' then return gcraTake(L, s, cost, at) end
  if algo == 'fw' then return windows().fwTake(L, s, cost, at) end
  if algo == 'sw' then return windows().swTake(L, s, cost, at) end
  if algo == 'sl' then return windows().slTake(L, s, cost, at) end
  return s + cost
end

-- Write a level's state back with a TTL until it is idle (an idle state is deleted).
local function save(L, s, now)
  local algo = L.algo
  local idleAt
  if algo == 'tb' or algo == 'lb' then
    -- Idle (core isIdle) once the TAT is L.full before now.
    if s > now - L.full then
      local text = fmt(s)
      redis.call('SET', L.key, text, 'PX', ttlUntil(s + L.full, now))
      return text
    end
    redis.call('DEL', L.key)
    return fmt(s)
  end
  if algo == 'fw' then idleAt = windows().fwIdleAt(L, s, now)
  elseif algo == 'sw' then idleAt = windows().swIdleAt(L, s, now)
  else idleAt = windows().slIdleAt(L, s, now) end
  if idleAt == nil then
    redis.call('DEL', L.key)
  else
    redis.call('SET', L.key, windows().encode(s), 'PX', ttlUntil(idleAt, now))
  end
  return ''
end

-- Refund cost taken at at. GCRA gives back only the latest take (its TAT still equals the mark
-- the reservation returned): giving back an older one would let the next call start inside the
-- chain of reservations behind it. An older take of the chain (TAT above its mark) waits in the
-- level's give-back hash (mark -> cost, key L.key .. ':g'), and goes back once the takes above it
-- have: processes giving back interleaved takes (at a pause) may do so in any order. Marks match
-- within near (a TAT given back is (x + c·T) - c·T, which may miss x by a few ulps). Windows and
-- logs subtract from the window or entry the take was in. memory-store.ts giveBackTake is its twin.
local function refund(L, cost, at, mark, id, now)
  local algo = L.algo
  if algo == 'cc' then
    redis.call('HDEL', L.key, id)
    return
  end
  if algo == 'tb' or algo == 'lb' then
    local tat, taken = tonumber(redis.call('GET', L.key) or ''), tonumber(mark)
    if tat == nil or taken == nil then return end
    -- near (ms): 1e-13 of the TAT (hundreds of ulps), at most a 16th of T. Marks of costs below
    -- 1/8 may lie that close: a take may then match as the latest one take early, which leaves the
    -- TAT low by at most near (under 1/16 unit) until the take above it goes; never more in all.
    local near = math.abs(tat) * 1e-13
    if near > L.T / 16 then near = L.T / 16 end
    -- Above the TAT: given back already (or its state was dropped).
    if taken > tat + near then return end
    local waiting = L.key .. ':g'
    if taken < tat - near then
      -- Waits for the takes above; lives no longer than the state does now.
      redis.call('HSET', waiting, fmt(taken), fmt(cost))
      redis.call('PEXPIRE', waiting, ttlUntil(tat + L.full, now))
      return
    end
    tat = tat - cost * L.T
    local flat = redis.call('HGETALL', waiting)
    local kept = 0
    if #flat > 0 then
      local marks = {}
      for f = 1, #flat, 2 do
        local m, c = tonumber(flat[f]), tonumber(flat[f + 1])
        -- Unreadable (not written by this script): dropped, never given back.
        if m and c and m == m and c == c and c > 0 and c < INF then
          marks[#marks + 1] = { m, c, flat[f] }
        else
          redis.call('HDEL', waiting, flat[f])
        end
      end
      table.sort(marks, function(x, y) return x[1] > y[1] end)
      kept = #marks
      for e = 1, #marks do
        local m = marks[e]
        if m[1] < tat - near then break end
        redis.call('HDEL', waiting, m[3])
        kept = kept - 1
        -- Above the TAT: its chain is gone (a state dropped); at it: now the latest, it goes too.
        if m[1] <= tat + near then tat = tat - m[2] * L.T end
      end
    end
    -- The waiting hash, while it holds entries, lives as long as the state.
    if tat > now - L.full then
      local ttl = ttlUntil(tat + L.full, now)
      redis.call('SET', L.key, fmt(tat), 'PX', ttl)
      if kept > 0 then redis.call('PEXPIRE', waiting, ttl) end
    elseif kept > 0 then
      redis.call('DEL', L.key, waiting)
    else
      redis.call('DEL', L.key)
    end
    return
  end
  local raw = redis.call('GET', L.key)
  if not raw then return end
  local s = windows().decode(raw)
  if algo == 'fw' then s = windows().fwRefund(L, s, cost, at)
  elseif algo == 'sw' then s = windows().swRefund(L, s, cost, at)
  else s = windows().slRefund(L, s, cost, at, now) end
  save(L, s, now)
end

local function serverNow(override)
  if override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  -- ms = s * 1000 + µs / 1000
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- A learned spec is stored as 'algo limit intervalMs burst unit'.
local function learnedLevel(tag, scope, id, spec, units)
  local algo, limit, I, burst, unit = string.match(spec, '(%S+) (%S+) (%S+) (%S+) (.*)')
  local cost = units[unit]
  if cost == nil then
    if unit == 'requests' then cost = 1 else cost = 0 end
  end
  local L = level(algo, tonumber(limit), tonumber(I), tonumber(burst), 0, tag .. ':L:' .. scope .. ':' .. id)
  -- A learned limit smaller than the call can never admit it: count the call as a whole window.
  if cost > L.cap then cost = L.cap end
  L.cost = cost
  return L
end
`;

/**
 * Reserve one call on every level, all or nothing, at the earliest time all admit it.
 *
 * KEYS: level state keys (n), then the meta hashes (m): the partition's ('-'), and the call's scope's
 *   when it has one (its pause and learned limits are read from the last).
 * ARGV: nowOverride ('' = TIME), maxWaitMs (-1 = none), n, m, reservation id (concurrency leases),
 *   concurrency lease ms, minTtlMs, shared levels and ownWaitMs ('' '' = none; see
 *   ReserveOptions.ownFrom), learned unit costs ('unit cost unit cost ...'), then 5 values per level.
 * Reply: {1, startAt, now, mark_1..mark_n, learnedCount, (id, cost, mark)...} or
 *   {0, waitMs (-1: unpredictable), reason, now, held by the shared levels (1) or its own (0)}.
 */
export const RESERVE_LUA = `${LIMITS_LUA}
local now = serverNow(ARGV[1])
local maxWait = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local m = tonumber(ARGV[4])
local id = ARGV[5]
local leaseMs = tonumber(ARGV[6])
MIN_TTL = tonumber(ARGV[7])
-- The key tag and scope id, from the scope's meta key '<tag>:m:<scope>' (learned limits' keys).
local tag, scope = string.match(KEYS[n + m], '^(.*):m:([^:]*)$')

local levels, states = {}, {}
for i = 1, n do
  local a = 10 + (i - 1) * 5
  local burst, capacity = burstArg(ARGV[a + 4])
  levels[i] = level(ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), burst,
    tonumber(ARGV[a + 5]), KEYS[i], capacity)
end

-- The scope's meta hash: its pause ('p') and the limits learned for it ('l:<id>', expiring at
-- 'e:<id>'). Nothing starts before the latest pause that holds this call (the partition's, then
-- the scope's).
local from = now
local learnedIds = {}
if m == 2 then
  local until_ = tonumber(redis.call('HGET', KEYS[n + 1], 'p') or '')
  if until_ and until_ > from then from = until_ end
end
-- The partition's pause is shared (see below), the scope's is the call's own; without a scope the
-- pause read next is the partition's.
local partitionFrom = from
local meta = redis.call('HGETALL', KEYS[n + m])
-- Each learned limit lives until its 'e:<id>' (learnedTtlMs after it was last learned); one past
-- it is dropped here, as the memory store drops it (the hash's own TTL is its longest).
local expires = nil
for j = 1, #meta, 2 do
  if string.sub(meta[j], 1, 2) == 'e:' then
    expires = expires or {}
    expires[string.sub(meta[j], 3)] = tonumber(meta[j + 1])
  end
end
local units = nil
for j = 1, #meta, 2 do
  local field = meta[j]
  local kind = string.sub(field, 1, 2)
  if field == 'p' then
    local until_ = tonumber(meta[j + 1])
    if until_ > from then from = until_ end
  elseif kind == 'l:' then
    local lid = string.sub(field, 3)
    local expiresAt = expires and expires[lid]
    if expiresAt and expiresAt <= now then
      redis.call('HDEL', KEYS[n + m], field, 'e:' .. lid)
    else
      -- Learned limits shared through this partition join the call's levels.
      if units == nil then
        units = {}
        for u, c in string.gmatch(ARGV[10], '(%S+) (%S+)') do units[u] = tonumber(c) end
      end
      levels[#levels + 1] = learnedLevel(tag, scope, lid, meta[j + 1], units)
      learnedIds[#levels] = lid
    end
  end
end

local sharedFrom = from
if m == 2 then sharedFrom = partitionFrom end
local sharedAt = sharedFrom
local startAt = from
-- The start the shared levels allow: the first ARGV 8 levels ('' = all), see ReserveOptions.ownFrom
-- (learned levels are the call's own). A call whose own levels alone hold it more than ARGV 9 ms
-- past now and past that start waits for them unreserved.
local shared = tonumber(ARGV[8]) or INF
local ownWait = tonumber(ARGV[9]) or INF
local blocked = nil
for i = 1, #levels do
  local L = levels[i]
  if L.cost ~= 0 then
    states[i] = load(L, now)
    local at = earliest(L, states[i], L.cost, from)
    if at == INF then
      if L.algo == 'cc' then blocked = 'concurrency' else blocked = 'capacity' end
    else
      if at > startAt then startAt = at end
      if i <= shared then
        -- From the shared pause only: the scope's pause holds this call, not the shared levels.
        local sharedStart = at
        if from ~= sharedFrom then sharedStart = earliest(L, states[i], L.cost, sharedFrom) end
        if sharedStart > sharedAt then sharedAt = sharedStart end
      end
    end
  end
end
if blocked then return { 0, '-1', blocked, fmt(now) } end
-- waitMs = startAt - now: how long the call would wait for its start.
-- The fifth element says which held it (with ownFrom): 1 the shared levels, 0 its own.
local ownHolds = startAt > sharedAt
if (maxWait >= 0 and startAt - now > maxWait) or (ownHolds and startAt - now > ownWait) then
  return { 0, fmt(startAt - now), 'wait', fmt(now), ownHolds and 0 or 1 }
end

local reply = { 1, fmt(startAt), fmt(now) }
local learnedReply = {}
for i = 1, #levels do
  local L = levels[i]
  local mark = ''
  if L.cost ~= 0 then
    if L.algo == 'cc' then
      -- expiresAt = now + lease (ms): a dead process's permits come back then.
      redis.call('HSET', L.key, id, fmt(L.cost) .. ' ' .. fmt(now + leaseMs))
      redis.call('PEXPIRE', L.key, leaseMs)
    else
      mark = save(L, take(L, states[i], L.cost, startAt), now)
    end
  end
  if i <= n then
    reply[#reply + 1] = mark
  else
    -- Every learned level in force, cost 0 too: what the call used there is settled later (adjust).
    learnedReply[#learnedReply + 1] = learnedIds[i]
    learnedReply[#learnedReply + 1] = fmt(L.cost)
    learnedReply[#learnedReply + 1] = mark
  end
end
reply[#reply + 1] = #learnedReply / 3
for j = 1, #learnedReply do reply[#reply + 1] = learnedReply[j] end
return reply
`;

/**
 * `RESERVE_LUA` for calls whose levels are all token or leaky buckets (the common case), for one
 * call or for a batch of calls sent together (the store's batching of concurrent decisions): each
 * call is decided in order, atomically and all or nothing on its own levels, exactly as if it ran
 * alone after the calls before it. Same arithmetic as core/gcra.ts; the client computes each
 * level's constants from the call's cost with the core's own expressions (`slackMs = τ - cost·T`,
 * `stepMs = cost·T`, `fullMs = (capacity - burst)·T`) and sends them as shortest round-trip
 * decimals, which Lua reads back exactly.
 *
 * Lean on purpose (it runs for nearly every decision): one `TIME` per run, each meta hash and each
 * level's state read once per run and each state written once at the end (later calls of the batch
 * see the earlier ones' takes through a table, as they would see their writes), and `now` is
 * answered as one integer, `TIME`'s microseconds (exact: below 2^53 until the year 2255). An admitted call formats no number: it answers what it read
 * (the pause it waits for, each level's state) and the client computes startAt and the marks with the
 * same operations on the same doubles; each state is written as a number, which Redis prints as a
 * round-trip decimal.
 *
 * Calls of one shape and cost (the same keys and level arguments) form a class, sent once; each call
 * then sends only its class, now override and deadline.
 *
 * KEYS: per class, its n level state keys, then its m meta hashes: the partition's ('-'), and the
 *   call's scope's when it has one (pause 'p' of both; learned limits of the last).
 * ARGV: minTtlMs, the number of classes, then per class: n, m, then per level slackMs, stepMs and
 *   fullMs (slackMs '' = cost 0, level not consulted; 'x' = a cost above the level's capacity;
 *   fullMs: core/token-bucket.ts, 0 but for a token bucket whose capacity exceeds its burst); then
 *   per call: its class (1-based), nowOverride ('' = TIME), maxWaitMs (-1 = none).
 * Reply: TIME in microseconds (0 when every call had a now override), then per call
 *   {1, state_1..state_n} admitted from now, or {3, from, state_1..state_n} admitted after the pause
 *   whose text is `from` (state_i: the level's state as read, '' = none or cost 0, '=' = the mark of
 *   this run's previous take on that level; the client computes startAt and the marks from them),
 *   {0, waitMs (-1: unpredictable), reason}
 *   refused, or {2}: not decided, nothing committed. The first call whose scope has learned limits
 *   answers 2 (it needs `RESERVE_LUA`), and so does every call after it, to be run again in order.
 */
export const RESERVE_BUCKETS_LUA = `
-- Globals are looked up through a metatable function in Redis 7 scripts: read each one once.
local call, tonumber, format, ceil = redis.call, tonumber, string.format, math.ceil
local KEYS, ARGV = KEYS, ARGV
local minTtl = tonumber(ARGV[1])
local reply = { 0 }
local r = 1
local clock = nil

-- Classes: first key (0-based), level and meta key counts, and the levels' slack, step and full by
-- ARGV position (slack false: cost 0; true: above capacity).
local ck, cn, cm, cb, num = {}, {}, {}, {}, {}
local k, a = 0, 2
for c = 1, tonumber(ARGV[2]) do
  local n, m = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  ck[c], cn[c], cm[c], cb[c] = k, n, m, a + 2
  for j = a + 3, a + 2 + 3 * n, 3 do
    local slack = ARGV[j]
    if slack == '' then num[j] = false
    elseif slack == 'x' then num[j] = true
    else
      num[j] = tonumber(slack)
      num[j + 1] = tonumber(ARGV[j + 1])
      num[j + 2] = tonumber(ARGV[j + 2])
    end
  end
  k = k + n + m
  a = a + 2 + 3 * n
end

-- Per run: each meta hash's pause (false: none), its text, and whether it holds learned limits;
-- each level state's TAT (false: no state), its text as read, whether a call of this run took from
-- it, and its TTL for the write at the end. cur and seen: the call's levels' TATs as read before
-- its take, and what the reply says of them (tables reused by every call).
local pauses, pauseTexts, learned = {}, {}, {}
local tats, raws, taken, ttls, dirty, cur, seen = {}, {}, {}, {}, {}, {}, {}
local nd = 0

-- stop: a call met learned limits; it and every later call are left undecided (answered 2), so the
-- client can run them again in their order.
local stop = false
for a = a, #ARGV - 1, 3 do
  if stop then
    r = r + 1
    reply[r] = 2
  else
    local c, override = tonumber(ARGV[a + 1]), ARGV[a + 2]
    local k, n, m, b = ck[c], cn[c], cm[c], cb[c]
    local now
    if override ~= '' then
      now = tonumber(override)
    else
      if clock == nil then
        local t = call('TIME')
        local sec, usec = tonumber(t[1]), tonumber(t[2])
        -- Answered as one integer (µs, exact below 2^53); ms = s * 1000 + µs / 1000
        reply[1] = sec * 1000000 + usec
        clock = sec * 1000 + usec / 1000
      end
      now = clock
    end
    -- Nothing starts before the latest pause that holds this call (the partition's, then the scope's).
    local from, fromText = now, ''
    for j = k + n + 1, k + n + m do
      local key = KEYS[j]
      local untilMs = pauses[key]
      if untilMs == nil then
        untilMs = false
        local flat = call('HGETALL', key)
        for f = 1, #flat, 2 do
          if flat[f] == 'p' then
            untilMs = tonumber(flat[f + 1])
            pauseTexts[key] = flat[f + 1]
          else
            learned[key] = true
          end
        end
        pauses[key] = untilMs
      end
      if untilMs and untilMs > from then from, fromText = untilMs, pauseTexts[key] end
    end
    if learned[KEYS[k + n + m]] then
      stop = true
      r = r + 1
      reply[r] = 2
    else
      local startAt = from
      local capacity = false
      for i = 1, n do
        local slack = num[b + 3 * i - 2]
        if slack == true then
          capacity = true
        elseif slack then
          local key = KEYS[k + i]
          local full = num[b + 3 * i]
          local tat = tats[key]
          if tat == nil then
            local raw = call('GET', key)
            tat = tonumber(raw or '') or false
            tats[key] = tat
            raws[key] = raw or ''
          end
          tat = tat or now - full
          cur[i] = tat
          -- What the client starts from: the state as read ('' none), or '=' after a take by an
          -- earlier call of this run (the client has that take's mark).
          if taken[key] then seen[i] = '=' else seen[i] = raws[key] end
          -- core/gcra.ts gcraEarliestAt: max(TAT - slack, from); no state is a TAT of now - full,
          -- and a bucket full for that long starts any cost at once (core/token-bucket.ts).
          local atMs = tat - slack
          if atMs < from or tat <= from - full then atMs = from end
          if atMs > startAt then startAt = atMs end
        end
      end
      if capacity then
        reply[r + 1], reply[r + 2], reply[r + 3] = 0, '-1', 'capacity'
        r = r + 3
      else
        local maxWait = tonumber(ARGV[a + 3])
        -- waitMs = startAt - now: how long the call would wait for its start.
        if maxWait >= 0 and startAt - now > maxWait then
          reply[r + 1], reply[r + 2], reply[r + 3] = 0, format('%.17g', startAt - now), 'wait'
          r = r + 3
        else
          -- Admitted. The reply carries what the decision read, not what it computed: the client
          -- repeats the same arithmetic on the same doubles for startAt and each mark (formatting a
          -- double in Lua costs more than the rest of a decision).
          -- 1: starts from now; 3: from the pause whose text follows.
          if fromText == '' then
            r = r + 1
            reply[r] = 1
          else
            reply[r + 1], reply[r + 2] = 3, fromText
            r = r + 2
          end
          for i = 1, n do
            r = r + 1
            if num[b + 3 * i - 2] == false then
              reply[r] = ''
            else
              local key = KEYS[k + i]
              reply[r] = seen[i]
              -- core/gcra.ts gcraTake: max(TAT, startAt) + cost·T
              local tat = cur[i]
              if startAt > tat then tat = startAt end
              tat = tat + num[b + 3 * i - 1]
              tats[key] = tat
              if not taken[key] then
                taken[key] = true
                nd = nd + 1
                dirty[nd] = key
              end
              -- TTL (ms) until the state is idle (full ms after the TAT), at least 1 ms (and
              -- minTtl), at most 1e15 (PX takes no exponent).
              local ttl = ceil(tat + num[b + 3 * i] - now) + 1
              if ttl < minTtl then ttl = minTtl end
              if ttl > 1e15 then ttl = 1e15 end
              ttls[key] = ttl
            end
          end
        end
      end
    end
  end
end
-- A number argument is written by Redis as a round-trip decimal (%.17g, or the shortest form).
for j = 1, nd do
  local key = dirty[j]
  call('SET', key, tats[key], 'PX', ttls[key])
end
return reply
`;

/**
 * `RESERVE_BUCKETS_LUA` for one call: the same decision and the same reply as a batch of one, with
 * none of the batch's bookkeeping (classes, per-run caches), which costs a lone decision about a
 * quarter of its Redis time (callgrind). The store sends it whenever a tick holds one bucket call.
 *
 * KEYS: the call's n level state keys, then its meta hashes (the partition's, then the scope's).
 * ARGV: minTtlMs, nowOverride ('' = TIME), maxWaitMs (-1 = none), then per level slackMs, stepMs
 *   and fullMs (slackMs '' = cost 0; 'x' = a cost above the level's capacity).
 * Reply: as `RESERVE_BUCKETS_LUA` for one call.
 */
export const RESERVE_BUCKET_LUA = `
local call, tonumber = redis.call, tonumber
local KEYS, ARGV = KEYS, ARGV
local n = (#ARGV - 3) / 3
local last = #KEYS
local us, now = 0, nil
if ARGV[2] == '' then
  local t = call('TIME')
  local sec, usec = tonumber(t[1]), tonumber(t[2])
  -- Answered as one integer (µs, exact below 2^53); ms = s * 1000 + µs / 1000
  us = sec * 1000000 + usec
  now = sec * 1000 + usec / 1000
else
  now = tonumber(ARGV[2])
end
-- Nothing starts before the latest pause that holds the call; learned limits on its scope (the last
-- meta hash) need RESERVE_LUA: answer 2, nothing done.
local from, fromText = now, ''
for j = n + 1, last do
  local flat = call('HGETALL', KEYS[j])
  for f = 1, #flat, 2 do
    if flat[f] == 'p' then
      local untilMs = tonumber(flat[f + 1])
      if untilMs and untilMs > from then from, fromText = untilMs, flat[f + 1] end
    elseif j == last then
      return { us, 2 }
    end
  end
end
local startAt = from
local tats, seen, fulls = {}, {}, {}
for i = 1, n do
  local slack = ARGV[1 + 3 * i]
  if slack == 'x' then return { us, 0, '-1', 'capacity' } end
  if slack ~= '' then
    local raw = call('GET', KEYS[i])
    local full = tonumber(ARGV[3 + 3 * i])
    -- core/gcra.ts gcraEarliestAt: max(TAT - slack, from); no state is a TAT of now - full, and a
    -- bucket full for that long starts any cost at once (core/token-bucket.ts).
    local tat = tonumber(raw or '') or now - full
    tats[i], seen[i], fulls[i] = tat, raw or '', full
    local atMs = tat - tonumber(slack)
    if atMs < from or tat <= from - full then atMs = from end
    if atMs > startAt then startAt = atMs end
  end
end
-- waitMs = startAt - now: how long the call would wait for its start.
local maxWait = tonumber(ARGV[3])
if maxWait >= 0 and startAt - now > maxWait then
  return { us, 0, string.format('%.17g', startAt - now), 'wait' }
end
local minTtl = tonumber(ARGV[1])
-- 1: starts from now; 3: from the pause whose text follows.
local reply, r = { us, 1 }, 2
if fromText ~= '' then
  reply[2], reply[3], r = 3, fromText, 3
end
for i = 1, n do
  local tat = tats[i]
  if tat == nil then
    reply[r + i] = ''
  else
    reply[r + i] = seen[i]
    -- core/gcra.ts gcraTake: max(TAT, startAt) + cost·T
    if startAt > tat then tat = startAt end
    tat = tat + tonumber(ARGV[2 + 3 * i])
    -- TTL (ms) until the state is idle (full ms after the TAT), at least 1 ms (and minTtl), at most
    -- 1e15 (PX takes no exponent).
    local ttl = math.ceil(tat + fulls[i] - now) + 1
    if ttl < minTtl then ttl = minTtl end
    if ttl > 1e15 then ttl = 1e15 end
    call('SET', KEYS[i], tat, 'PX', ttl)
  end
end
return reply
`;

/**
 * Give back a reservation (or only its concurrency permits, when the call finished).
 *
 * KEYS: level state keys (n), then the scope's meta hash (learned limits).
 * ARGV: nowOverride, n, reservation id, minTtlMs, '', '', startAt, learnedCount,
 *   then 6 values per level (algo, limit, intervalMs, burst, cost, mark), then (id, cost, mark)
 *   per learned level.
 * Reply: now.
 */
export const REFUND_LUA = `${LIMITS_LUA}
local now = serverNow(ARGV[1])
local n = tonumber(ARGV[2])
local id = ARGV[3]
MIN_TTL = tonumber(ARGV[4])
local tag, scope = string.match(KEYS[n + 1], '^(.*):m:([^:]*)$')
local at = tonumber(ARGV[7])
local learnedCount = tonumber(ARGV[8])
for i = 1, n do
  local a = 8 + (i - 1) * 6
  local cost = tonumber(ARGV[a + 5])
  if cost ~= 0 then
    -- The capacity too: a state is idle only once the bucket is full to it.
    local burst, capacity = burstArg(ARGV[a + 4])
    local L = level(ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), burst, cost, KEYS[i], capacity)
    refund(L, cost, at, ARGV[a + 6], id, now)
  end
end
local b = 8 + n * 6
for j = 1, learnedCount do
  local lid, cost, mark = ARGV[b + 1], tonumber(ARGV[b + 2]), ARGV[b + 3]
  b = b + 3
  local spec = redis.call('HGET', KEYS[n + 1], 'l:' .. lid)
  if spec then
    local L = learnedLevel(tag, scope, lid, spec, {})
    L.cost = cost
    refund(L, cost, at, mark, id, now)
  end
end
return fmt(now)
`;

/**
 * Count calls that ran in their window levels from their response instead of their start (see
 * `Store.recount`): per level, give the units back at startAt and take them again at
 * `min(now, startAt + max(marginMs, intervalMs / 10))`, as `core.take(core.refund(...))` does. The
 * learned limits the call was charged on (sliding logs) get the same move while they are known.
 *
 * KEYS: the window levels' state keys (k, only those the reservation charged), then the scope's
 *   meta hash when learned limits follow.
 * ARGV: nowOverride, minTtlMs, marginMs, startAt, k, startedAt (when the call really started, no
 *   earlier than startAt), then 5 values per level (algo, limit, intervalMs, burst, cost), then
 *   (id, cost) per learned level.
 * Reply: now.
 */
export const RECOUNT_LUA = `${LIMITS_LUA}
local now = serverNow(ARGV[1])
MIN_TTL = tonumber(ARGV[2])
local margin, startAt = tonumber(ARGV[3]), tonumber(ARGV[4])
local k = tonumber(ARGV[5])
local from = tonumber(ARGV[6])
if from < startAt then from = startAt end
local function move(L, cost)
  -- core/recount.ts recountState: min(now, max(startAt, startedAt) + max(marginMs, intervalMs / 10))
  local cap = L.I / 10
  if margin > cap then cap = margin end
  local at = from + cap
  if now < at then at = now end
  if at > startAt then
    -- A state gone idle (its TTL ran out before the response came) is the initial one: the call
    -- is still counted where its response puts it.
    local w = windows()
    local s = load(L, now)
    if L.algo == 'fw' then s = w.fwRefund(L, s, cost, startAt)
    elseif L.algo == 'sw' then s = w.swRefund(L, s, cost, startAt)
    else s = w.slRefund(L, s, cost, startAt, now) end
    save(L, take(L, s, cost, at), now)
  end
end
for i = 1, k do
  local a = 6 + (i - 1) * 5
  local cost = tonumber(ARGV[a + 5])
  move(level(ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), cost, KEYS[i]), cost)
end
if #KEYS > k then
  local tag, scope = string.match(KEYS[k + 1], '^(.*):m:([^:]*)$')
  for b = 6 + k * 5, #ARGV - 1, 2 do
    local lid, cost = ARGV[b + 1], tonumber(ARGV[b + 2])
    local spec = redis.call('HGET', KEYS[k + 1], 'l:' .. lid)
    if spec then
      local L = learnedLevel(tag, scope, lid, spec, {})
      L.cost = cost
      if L.algo == 'fw' or L.algo == 'sw' or L.algo == 'sl' then move(L, cost) end
    end
  end
end
return fmt(now)
`;

/**
 * Settle a call's actual units (see `Store.adjust`): per level, take the units it used beyond its
 * reservation, or give back those it did not use where that is exact (`refund`'s rules; never a
 * window the call was recounted in). Taken at startAt; with marginMs, a window level is taken where
 * a recount puts the call: `min(now, startAt + max(marginMs, intervalMs / 10))`, as
 * `core/recount.ts` computes.
 *
 * KEYS: the levels' state keys (k, those with something to settle), then the scope's meta hash when
 *   learned levels follow.
 * ARGV: nowOverride, minTtlMs, startAt, marginMs ('' = none), k, units used ('unit count ...',
 *   URI-encoded units), startedAt (see RECOUNT_LUA), then 7 values per level (algo, limit, intervalMs, burst, units to take (> 0)
 *   or give back (< 0), mark, '1' to take where a recount puts the call), then (id, cost, mark) per
 *   learned level.
 * Reply: now.
 */
export const ADJUST_LUA = `${LIMITS_LUA}
local now = serverNow(ARGV[1])
MIN_TTL = tonumber(ARGV[2])
local startAt = tonumber(ARGV[3])
local margin = tonumber(ARGV[4])
local k = tonumber(ARGV[5])
local from = tonumber(ARGV[7])
if from < startAt then from = startAt end
local function settle(L, delta, mark, recounted)
  local at = startAt
  if recounted then
    -- core/recount.ts recountAtMs: max(startAt, min(now, max(startAt, startedAt) + max(marginMs, intervalMs / 10)))
    local cap = L.I / 10
    if margin > cap then cap = margin end
    at = from + cap
    if now < at then at = now end
    if at < startAt then at = startAt end
  end
  if delta > 0 then
    save(L, take(L, load(L, now), delta, at), now)
  elseif delta < 0 then
    refund(L, -delta, at, mark, '', now)
  end
end
for i = 1, k do
  local a = 7 + (i - 1) * 7
  local burst, capacity = burstArg(ARGV[a + 4])
  local L = level(ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), burst, 0, KEYS[i], capacity)
  settle(L, tonumber(ARGV[a + 5]), ARGV[a + 6], ARGV[a + 7] == '1')
end
if #KEYS > k then
  local used = {}
  for u, c in string.gmatch(ARGV[6], '(%S+) (%S+)') do used[u] = tonumber(c) end
  local tag, scope = string.match(KEYS[k + 1], '^(.*):m:([^:]*)$')
  for b = 7 + k * 7, #ARGV - 1, 3 do
    local lid, cost, mark = ARGV[b + 1], tonumber(ARGV[b + 2]), ARGV[b + 3]
    local spec = redis.call('HGET', KEYS[k + 1], 'l:' .. lid)
    if spec then
      local L = learnedLevel(tag, scope, lid, spec, {})
      local u = used[string.match(spec, '%S+ %S+ %S+ %S+ (.*)')]
      -- memory-store.ts adjustment(): more is capped at the capacity, taken where a recount puts
      -- the call on a window; less only where exact (not a window the call was recounted in).
      local window = L.algo == 'fw' or L.algo == 'sw' or L.algo == 'sl'
      local recounted = margin ~= nil and window
      if u and u >= 0 and u < math.huge then
        if u > cost then
          local delta = u - cost
          if delta > L.cap then delta = L.cap end
          settle(L, delta, mark, recounted)
        elseif u < cost and not recounted then
          settle(L, u - cost, mark, false)
        end
      end
    end
  end
end
return fmt(now)
`;

/**
 * Pause a partition (or one scope of it) until `untilMs` (store time, ms), or for `durationMs` from
 * now; a pause only ever extends. Publishes `key untilMs now` on the channel so every process
 * holding reservations in the partition re-plans them at once.
 *
 * KEYS: the scope's meta hash (field 'p'). ARGV: nowOverride, mode ('until' | 'for'), ms, channel.
 * Reply: {untilMs (the pause in force), now}.
 */
export const PAUSE_LUA = `
local function fmt(x) return string.format('%.17g', x) end
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local untilMs = tonumber(ARGV[3])
if ARGV[2] == 'for' then untilMs = now + untilMs end
-- A pause of 'forever' (or of more than 1e15 ms, about 31,700 years) lasts 1e15 ms: stored as a
-- plain decimal, with a TTL that PEXPIRE takes.
if untilMs > now + 1e15 then untilMs = now + 1e15 end
local current = tonumber(redis.call('HGET', KEYS[1], 'p') or '')
if current and current <= now then current = nil end
if current and current >= untilMs then return { fmt(current), fmt(now) } end
if untilMs <= now then return { fmt(current or 0), fmt(now) } end
redis.call('HSET', KEYS[1], 'p', fmt(untilMs))
-- The hash also holds learned limits: its TTL only ever grows.
local ttl = math.ceil(untilMs - now) + 1
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call('PUBLISH', ARGV[4], KEYS[1] .. ' ' .. fmt(untilMs) .. ' ' .. fmt(now))
return { fmt(untilMs), fmt(now) }
`;

/** Read a pause. KEYS: the scope's meta hash. ARGV: nowOverride. Reply: {untilMs or 0, now}. */
export const READ_PAUSE_LUA = `
local function fmt(x) return string.format('%.17g', x) end
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local current = tonumber(redis.call('HGET', KEYS[1], 'p') or '')
if current and current > now then return { fmt(current), fmt(now) } end
return { '0', fmt(now) }
`;

/**
 * Share a limit learned from a provider's headers: every later reservation in the partition (and
 * scope) checks it too. A new learned limit is seeded with the units the provider says are used; a
 * known one (a sliding log) is topped up to them (two processes' first calls both count).
 *
 * KEYS: the scope's meta hash (fields 'l:<id>' and its expiry 'e:<id>'), the learned level's state key.
 * ARGV: nowOverride, id, spec ('algo limit intervalMs burst unit'), ttlMs, seedUnits, minTtlMs,
 *   seedAgeMs (the seed is taken that long before now: at the start of the provider's window).
 * Reply: {1 if new or changed else 0, now}.
 */
export const LEARN_LUA = `${LIMITS_LUA}
local now = serverNow(ARGV[1])
local id, spec, ttl, seed = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
MIN_TTL = tonumber(ARGV[6])
local seedAt = now - tonumber(ARGV[7])
local known = redis.call('HMGET', KEYS[1], 'l:' .. id, 'e:' .. id)
local previous = known[1]
-- Past its own expiry it is no longer known (see RESERVE_LUA); 'e:<id>' is when it expires now.
local expiresAt = tonumber(known[2] or '')
if expiresAt and expiresAt <= now then previous = false end
redis.call('HSET', KEYS[1], 'l:' .. id, spec, 'e:' .. id, fmt(now + ttl))
-- The hash also holds the scope's pause: its TTL only ever grows.
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
if seed > 0 then
  local algo, limit, I, burst = string.match(spec, '(%S+) (%S+) (%S+) (%S+)')
  local L = level(algo, tonumber(limit), tonumber(I), tonumber(burst), 0, KEYS[2])
  if seed > L.cap then seed = L.cap end
  local s = load(L, now)
  if previous then
    -- Known already (learned by another process first, or a changed limit): a sliding log is topped
    -- up to what this answer says is used, counting its takes up to now (reservations ahead are not
    -- what the provider has seen), so every process's first calls are counted. Other states stay.
    local used = seed
    if algo == 'sl' then
      used = 0
      for i = 2, #s - 1, 2 do
        if s[i] + L.I > now and s[i] <= now then used = used + s[i + 1] end
      end
    end
    seed = seed - used
  end
  if seed > 0 then save(L, take(L, s, seed, seedAt), now) end
end
if previous == spec then return { 0, fmt(now) } end
return { 1, fmt(now) }
`;

/**
 * Claim a partition's probe (`Store.claimProbe`): unless another holder has it, the holder has it
 * now for ttlMs (its own claim extended).
 * KEYS: the probe key. ARGV: holder, ttlMs. Reply: 1 if claimed, else 0.
 */
export const CLAIM_PROBE_LUA = `
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`;

/**
 * Give a claimed probe back (`Store.releaseProbe`), only if its holder still has it.
 * KEYS: the probe key. ARGV: holder. Reply: 1 if given back, else 0.
 */
export const RELEASE_PROBE_LUA = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/** Server time, for the gate's clock offset and for health probes. Reply: now (ms). */
/**
 * The recovery probe: a write (a short-lived key), so a server that answers reads but refuses
 * writes (maxmemory with noeviction, a read-only replica) still counts as down.
 * KEYS: the probe key. Reply: 1.
 */
export const WRITABLE_LUA = `
redis.call('SET', KEYS[1], '1', 'PX', 1000)
return 1
`;

export const TIME_LUA = `
local t = redis.call('TIME')
return string.format('%.17g', tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000)
`;
