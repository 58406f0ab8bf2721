/**
 * The Lua scripts of the Redis budget ledger, one per operation. They implement the rules of
 * `src/budget/budget.ts` (the memory ledger's pure accounting) over Redis hashes, on the caller's
 * clock (`now` is an argument, as in the `Ledger` interface): admission `estimate <= limit - spent -
 * reserved` checked on every budget and committed on all or none, holds that count at their estimate
 * past `expiresAt` and are never dropped before their window ends (rolling: until settled or
 * released, or `rollingMs` after they expired, however old they are).
 *
 * All keys of one ledger share the hash tag in KEYS[1] (`{<prefix>:ledger}`), so a reservation on
 * several budgets is one atomic script, in one Redis Cluster slot. Under it, per window id
 * (`<h(budgetId)>:<start>:<end>`):
 *   :w:<wid>   hash  id bid ws we rm s r l    (budget id, its hash, window, rolling ms, spent, reserved, limit)
 *   :h:<wid>   hash  reservation id -> 'micros at expiresAt'   (holds in flight)
 *   :he:<wid>  zset  'reservation id:micros' scored by expiresAt (the holds, to find expired ones
 *              and, rolling, the ones that left the window)
 *   :ha:<wid>  zset  'reservation id:micros' scored by at  (rolling: the holds, to prune by time)
 *   :g:<wid>   zset  'reservation id:micros' scored by date    (rolling: settled spend by time)
 *   :b:<bid>   set   window ids of one budget;   :i   set   every window id (snapshots, reset)
 *   :r:<id>    string  the window ids a reservation holds
 *   :x:<id>    string  a tombstone: released before its reserve ran (see LEDGER_SETTLE_LUA)
 *   (an id is chosen by the client, see `redis-ledger.ts`: no ':' and no space)
 * Money is integer micro-units; every number is passed as a `%.17g` string (exact below 2^53).
 * The two hold indexes keep a reserve, a refusal and a prune from reading every hold of a window:
 * they read the holds that expired or left the window (a refusal with 2,000 holds in flight read
 * them all: 6.4 ms of Redis time on a calendar budget, 21.6 ms on a rolling one).
 */

const LEDGER_LUA = `
local P = KEYS[1]
local INF = math.huge
local function fmt(x) return string.format('%.17g', x) end
local GRACE = 3600000

-- Keep key alive at least ttl ms (at most 1e15: PEXPIRE takes no exponent).
local function extend(key, ttl)
  if ttl > 1e15 then ttl = 1e15 end
  local left = redis.call('PTTL', key)
  if left < ttl then redis.call('PEXPIRE', key, math.ceil(ttl)) end
end

-- How long a window's keys live: to its end plus one period (a late settle may still land there),
-- or, rolling, one window length, plus an hour of grace.
local function windowTtl(ws, we, rm, now)
  if rm then return rm + GRACE end
  local ttl = (we - now) + (we - ws) + GRACE
  if ttl < GRACE then ttl = GRACE end
  return ttl
end

local function touch(wid, ws, we, rm, bid, now)
  local ttl = windowTtl(ws, we, rm, now)
  extend(P .. ':w:' .. wid, ttl)
  if redis.call('EXISTS', P .. ':h:' .. wid) == 1 then extend(P .. ':h:' .. wid, ttl) end
  if redis.call('EXISTS', P .. ':g:' .. wid) == 1 then extend(P .. ':g:' .. wid, ttl) end
  -- PEXPIRE of a key that does not exist does nothing.
  extend(P .. ':he:' .. wid, ttl)
  if rm then extend(P .. ':ha:' .. wid, ttl) end
  extend(P .. ':b:' .. bid, ttl)
  extend(P .. ':i', ttl)
  return ttl
end

local function dropWindow(wid, bid)
  redis.call('DEL', P .. ':w:' .. wid, P .. ':h:' .. wid, P .. ':g:' .. wid, P .. ':he:' .. wid, P .. ':ha:' .. wid)
  redis.call('SREM', P .. ':b:' .. bid, wid)
  redis.call('SREM', P .. ':i', wid)
end

-- Per window, how many of the oldest ':ha:' members this run has checked against the holds (see
-- checkedMembers); any change to the indexes forgets it.
local checkedAhead = {}

-- Index a hold (reserve) or drop it from the indexes (settle, release, prune). member: 'id:micros'.
local function indexHold(wid, member, at, expiresAt, rolling)
  checkedAhead[wid] = nil
  redis.call('ZADD', P .. ':he:' .. wid, expiresAt, member)
  if rolling then redis.call('ZADD', P .. ':ha:' .. wid, at, member) end
end
local function unindexHold(wid, member, rolling)
  checkedAhead[wid] = nil
  redis.call('ZREM', P .. ':he:' .. wid, member)
  if rolling then redis.call('ZREM', P .. ':ha:' .. wid, member) end
end

-- Index every hold of the window afresh; the indexes expire with the holds.
local function reindex(wid, rolling)
  local h, he, ha = P .. ':h:' .. wid, P .. ':he:' .. wid, P .. ':ha:' .. wid
  checkedAhead[wid] = nil
  redis.call('DEL', he, ha)
  local holds = redis.call('HGETALL', h)
  for i = 1, #holds, 2 do
    local micros, at, expiresAt = string.match(holds[i + 1], '(%S+) (%S+) (%S+)')
    indexHold(wid, holds[i] .. ':' .. micros, at, expiresAt, rolling)
  end
  local ttl = redis.call('PTTL', h)
  if ttl > 0 then
    redis.call('PEXPIRE', he, ttl)
    if rolling then redis.call('PEXPIRE', ha, ttl) end
  end
end

-- Holds written before the indexes existed (an older tollgate): index them all, once.
local function ensureIndexed(wid, rolling)
  if redis.call('HLEN', P .. ':h:' .. wid) == redis.call('ZCARD', P .. ':he:' .. wid) then return end
  reindex(wid, rolling)
end

-- The id and micros of an index member 'id:micros' (ids hold no ':').
local function memberParts(member)
  return string.match(member, '^(.*):(%S+)$')
end

-- Index members read from key (an index of wid), checked against the holds: an older tollgate,
-- still running beside this one, settles holds without unindexing them and reserves holds without
-- indexing them, and the counts can then agree while the members are wrong. A member whose hold is
-- gone (or holds other micros) rebuilds the indexes, and read() runs again on them. stride: 2 when
-- read() answers members WITHSCORES; skip: leading members already checked.
local function checkedMembers(wid, rolling, key, read, stride, skip)
  local members = read(key)
  local h = P .. ':h:' .. wid
  stride = stride or 1
  -- One HMGET per 1,000 members (unpack's stack is bounded).
  for first = (skip or 0) * stride + 1, #members, 1000 * stride do
    local ids, micros = {}, {}
    for m = first, math.min(#members, first + 1000 * stride - 1), stride do
      ids[#ids + 1], micros[#micros + 1] = memberParts(members[m])
    end
    local holds = redis.call('HMGET', h, unpack(ids))
    for i = 1, #ids do
      if not holds[i] or string.match(holds[i], '^(%S+)') ~= micros[i] then
        reindex(wid, rolling)
        return read(key)
      end
    end
  end
  return members
end

-- Rolling: drop settled spend dated at or before now - rollingMs, and holds that expired by then
-- (budget.ts pruneRolling): a hold in flight counts however old it is.
local function pruneRolling(wid, rm, now)
  local w = P .. ':w:' .. wid
  local cutoff = fmt(now - rm)
  local spent = 0
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', P .. ':g:' .. wid, '-inf', cutoff)) do
    spent = spent + tonumber(string.match(member, ':(%S+)$'))
  end
  if spent ~= 0 then
    redis.call('ZREMRANGEBYSCORE', P .. ':g:' .. wid, '-inf', cutoff)
    redis.call('HINCRBY', w, 's', fmt(0 - spent))
  end
  ensureIndexed(wid, true)
  local h, he, ha = P .. ':h:' .. wid, P .. ':he:' .. wid, P .. ':ha:' .. wid
  -- The oldest hold by time is checked too (one member): an older tollgate's settles leave members
  -- there first, and its reserves add holds no index finds; a stale one rebuilds the indexes.
  checkedMembers(wid, true, ha, function(key)
    return redis.call('ZRANGE', key, 0, 0)
  end)
  local gone = checkedMembers(wid, true, he, function(key)
    return redis.call('ZRANGEBYSCORE', key, '-inf', cutoff)
  end)
  if #gone == 0 then return end
  local reserved = 0
  checkedAhead[wid] = nil
  for _, member in ipairs(gone) do
    local id, micros = memberParts(member)
    redis.call('HDEL', h, id)
    redis.call('ZREM', ha, member)
    reserved = reserved + tonumber(micros)
  end
  redis.call('ZREMRANGEBYSCORE', he, '-inf', cutoff)
  redis.call('HINCRBY', w, 'r', fmt(0 - reserved))
end

-- Holds past expiresAt: reported as spent (their process may have died after sending).
local function expiredMicros(wid, now, rolling)
  ensureIndexed(wid, rolling)
  local sum = 0
  local expired = checkedMembers(wid, rolling, P .. ':he:' .. wid, function(key)
    return redis.call('ZRANGEBYSCORE', key, '-inf', fmt(now))
  end)
  for _, member in ipairs(expired) do
    local _, micros = memberParts(member)
    sum = sum + tonumber(micros)
  end
  return sum
end

-- Rolling: what a refusal or a snapshot reads of a window's holds besides the youngest in flight:
-- the expired ones ({expiresAt, micros} ascending, as members, and their sum) and the sum of those
-- in flight older than the window. See budget.ts rollingHoldDate: an expired hold leaves rm after
-- expiresAt, one in flight rm after its date if it settled now (its at, or now if at has left).
local function rollingHolds(wid, rm, now)
  ensureIndexed(wid, true)
  local c = { rm = rm, now = now, cutoff = fmt(now - rm), expired = {}, isExpired = {},
    expiredMicros = 0, old = false, oldMicros = 0 }
  local expired = checkedMembers(wid, true, P .. ':he:' .. wid, function(key)
    return redis.call('ZRANGEBYSCORE', key, '-inf', fmt(now), 'WITHSCORES')
  end, 2)
  for i = 1, #expired, 2 do
    local _, micros = memberParts(expired[i])
    c.expired[#c.expired + 1] = { tonumber(expired[i + 1]), tonumber(micros) }
    c.isExpired[expired[i]] = true
    c.expiredMicros = c.expiredMicros + tonumber(micros)
  end
  local old = checkedMembers(wid, true, P .. ':ha:' .. wid, function(key)
    return redis.call('ZRANGEBYSCORE', key, '-inf', c.cutoff)
  end)
  for _, member in ipairs(old) do
    if not c.isExpired[member] then
      local _, micros = memberParts(member)
      c.old = true
      c.oldMicros = c.oldMicros + tonumber(micros)
    end
  end
  return c
end

-- Rolling: the first n counted entries (settled spend and holds) as {date, micros}, ascending by
-- date (an entry leaves the window rm after it): the first n of each source, merged. c: from
-- rollingHolds.
-- Two lists of {date, micros} ascending, merged: the first n.
local function merged(a, b, n)
  local out, i, j = {}, 1, 1
  while (i <= #a or j <= #b) and #out < n do
    if j > #b or (i <= #a and a[i][1] <= b[j][1]) then
      out[#out + 1] = a[i]
      i = i + 1
    else
      out[#out + 1] = b[j]
      j = j + 1
    end
  end
  return out
end

local function counted(wid, n, c)
  local settled = {}
  local g = redis.call('ZRANGE', P .. ':g:' .. wid, 0, n - 1, 'WITHSCORES')
  for i = 1, #g, 2 do
    settled[#settled + 1] = { tonumber(g[i + 1]), tonumber(string.match(g[i], ':(%S+)$')) }
  end
  -- The holds in flight dated in the window, by at: n of them, past the expired ones among them.
  -- rollingRetryAt reads ever more of them: each is checked once.
  local young = checkedMembers(wid, true, P .. ':ha:' .. wid, function(key)
    return redis.call('ZRANGEBYSCORE', key, '(' .. c.cutoff, '+inf', 'WITHSCORES', 'LIMIT', 0, n + #c.expired)
  end, 2, checkedAhead[wid])
  checkedAhead[wid] = #young / 2
  local held = {}
  for i = 1, #young, 2 do
    if #held >= n then break end
    if not c.isExpired[young[i]] then
      local _, micros = memberParts(young[i])
      held[#held + 1] = { tonumber(young[i + 1]), tonumber(micros) }
    end
  end
  -- In flight and older than the window: dated now, all together.
  local old = {}
  if c.old then old[1] = { c.now, c.oldMicros } end
  return merged(merged(merged(settled, held, n), c.expired, n), old, n)
end

-- budget.ts rollingResetAt: when the oldest counted spend leaves the window; now if none.
local function rollingResetAt(wid, c)
  local oldest = counted(wid, 1, c)
  if #oldest == 0 then return c.now end
  return oldest[1][1] + c.rm
end

-- budget.ts rollingRetryAt: earliest time estimate fits if nothing else happens. total: every
-- counted micro-unit (the window's spent + reserved). Reads the oldest entries only as far as
-- must leave, in chunks that double.
local function rollingRetryAt(wid, total, c, estimate, limit)
  if estimate > limit then return INF end
  local retryAt, done, n = c.now, 0, 64
  while not (estimate <= limit - total) do
    local entries = counted(wid, n, c)
    if done >= #entries then break end
    for i = done + 1, #entries do
      total = total - entries[i][2]
      if entries[i][1] + c.rm > retryAt then retryAt = entries[i][1] + c.rm end
      done = i
      if estimate <= limit - total then break end
    end
    n = n * 2
  end
  return retryAt
end

local function windowOf(wid)
  local f = redis.call('HMGET', P .. ':w:' .. wid, 'id', 'bid', 'ws', 'we', 'rm', 's', 'r', 'l')
  if not f[1] then return nil end
  local rm = nil
  if f[5] ~= '' then rm = tonumber(f[5]) end
  return {
    id = f[1], bid = f[2], ws = tonumber(f[3]), we = tonumber(f[4]), rm = rm,
    s = tonumber(f[6]), r = tonumber(f[7]), l = tonumber(f[8]),
  }
end
`;

/**
 * Reserve an estimate on every entry's budget, all or nothing, under the id the client chose.
 * KEYS: the ledger tag key. ARGV: now, reservation id, count, then 9 values per entry: budgetId,
 * budget hash, window id, windowStart, windowEnd, rollingMs ('' for calendar), limit, estimate,
 * expiresAt.
 * Reply: {1, reservationId, (budgetId, spent, reserved, limit)...} or
 *   {0, budgetId, spent, reserved, limit, estimate, resetAt, retryAt} ('inf' for Infinity), or
 *   {2}: the id was released before this reserve ran (a tombstone); nothing changed.
 * The same id twice (a command re-sent after its reply was lost) holds once: the second run
 * answers the first's reservation with the current totals.
 */
export const LEDGER_RESERVE_LUA = `${LEDGER_LUA}
local now = tonumber(ARGV[1])
local id = ARGV[2]
local count = tonumber(ARGV[3])
-- Released before it ran (its client gave up on it and the release overtook it): never stands.
if redis.call('EXISTS', P .. ':x:' .. id) == 1 then return { 2 } end
local entries = {}
for i = 1, count do
  local a = 3 + (i - 1) * 9
  local rm = nil
  if ARGV[a + 6] ~= '' then rm = tonumber(ARGV[a + 6]) end
  entries[i] = {
    id = ARGV[a + 1], bid = ARGV[a + 2], wid = ARGV[a + 3], ws = tonumber(ARGV[a + 4]),
    we = tonumber(ARGV[a + 5]), rm = rm, limit = tonumber(ARGV[a + 7]), est = tonumber(ARGV[a + 8]),
    exp = tonumber(ARGV[a + 9]),
  }
  -- Rolling: a hold leaves rm after it expired, so never before rm after now (budget.ts addHold).
  if rm and entries[i].exp < now then entries[i].exp = now end
end

if redis.call('EXISTS', P .. ':r:' .. id) == 1 then
  -- Ran before: answer the reservation it made (a window dropped since answers zeros).
  local reply = { 1, id }
  for _, e in ipairs(entries) do
    local win = windowOf(e.wid)
    reply[#reply + 1] = e.id
    reply[#reply + 1] = fmt(win and win.s or 0)
    reply[#reply + 1] = fmt(win and win.r or 0)
    reply[#reply + 1] = fmt(win and win.l or e.limit)
  end
  return reply
end

for _, e in ipairs(entries) do
  local w = P .. ':w:' .. e.wid
  if redis.call('EXISTS', w) == 0 then
    -- A new window: keep the previous calendar window of this budget (late settles land there);
    -- drop older ones, and every other rolling definition (the budget's period changed).
    for _, other in ipairs(redis.call('SMEMBERS', P .. ':b:' .. e.bid)) do
      local o = windowOf(other)
      if o == nil then
        redis.call('SREM', P .. ':b:' .. e.bid, other)
        redis.call('SREM', P .. ':i', other)
      elseif o.rm or e.rm or o.we < e.ws then
        dropWindow(other, e.bid)
      end
    end
    local rm = ''
    if e.rm then rm = fmt(e.rm) end
    redis.call('HSET', w, 'id', e.id, 'bid', e.bid, 'ws', fmt(e.ws), 'we', fmt(e.we), 'rm', rm,
      's', '0', 'r', '0', 'l', fmt(e.limit))
    redis.call('SADD', P .. ':b:' .. e.bid, e.wid)
    redis.call('SADD', P .. ':i', e.wid)
    -- TTLs now: a reserve refused below must not leave keys that never expire.
    touch(e.wid, e.ws, e.we, e.rm, e.bid, now)
  else
    -- The configuration changed: the latest limit applies.
    redis.call('HSET', w, 'l', fmt(e.limit))
  end
  if e.rm then pruneRolling(e.wid, e.rm, now) end
  local win = windowOf(e.wid)
  -- budget.ts fits: subtract instead of adding three terms (exact near the largest amounts).
  if not (e.est <= e.limit - win.s - win.r) then
    local expired
    local resetAt, retryAt = e.we, e.we
    if e.est > e.limit then retryAt = INF end
    if e.rm then
      local c = rollingHolds(e.wid, e.rm, now)
      expired = c.expiredMicros
      resetAt = rollingResetAt(e.wid, c)
      retryAt = rollingRetryAt(e.wid, win.s + win.r, c, e.est, e.limit)
    else
      expired = expiredMicros(e.wid, now, false)
    end
    return { 0, e.id, fmt(win.s + expired), fmt(win.r - expired), fmt(e.limit), fmt(e.est), fmt(resetAt), fmt(retryAt) }
  end
end

local reply = { 1, id }
local held = {}
local ttl = 0
for _, e in ipairs(entries) do
  local w = P .. ':w:' .. e.wid
  local r = redis.call('HINCRBY', w, 'r', fmt(e.est))
  -- Holds an older tollgate wrote unindexed stay so until a read needs them (see ensureIndexed and
  -- checkedMembers).
  redis.call('HSET', P .. ':h:' .. e.wid, id, fmt(e.est) .. ' ' .. fmt(now) .. ' ' .. fmt(e.exp))
  indexHold(e.wid, id .. ':' .. fmt(e.est), fmt(now), fmt(e.exp), e.rm ~= nil)
  local t = touch(e.wid, e.ws, e.we, e.rm, e.bid, now)
  if t > ttl then ttl = t end
  held[#held + 1] = e.wid
  reply[#reply + 1] = e.id
  reply[#reply + 1] = fmt(tonumber(redis.call('HGET', w, 's')))
  reply[#reply + 1] = fmt(r)
  reply[#reply + 1] = fmt(e.limit)
end
redis.call('SET', P .. ':r:' .. id, table.concat(held, ' '), 'PX', math.ceil(ttl))
return reply
`;

/**
 * Settle (ARGV[3] = actual micros) or release (ARGV[3] = '') a reservation.
 * KEYS: the ledger tag key. ARGV: now, reservation id, actual, and tombstone ms ('' for none): a
 * release for a reserve whose answer never came (see `redis-ledger.ts` cancel) first leaves a
 * tombstone for that long, so that the reserve, should it run later, holds nothing.
 * Reply: {found (0/1), (budgetId, spent, reserved, limit)...}, or {-1, budgetId}: the actual cost
 * would take that budget's spent + reserved past 2^53 - 1 micros; nothing changed.
 */
export const LEDGER_SETTLE_LUA = `${LEDGER_LUA}
local now = tonumber(ARGV[1])
local id = ARGV[2]
local actual = nil
if ARGV[3] ~= '' then actual = tonumber(ARGV[3]) end
if ARGV[4] ~= nil and ARGV[4] ~= '' then
  redis.call('SET', P .. ':x:' .. id, '1', 'PX', math.ceil(tonumber(ARGV[4])))
end
local rec = redis.call('GET', P .. ':r:' .. id)
if not rec then return { 0 } end
-- Every window first: a charge that would take spent + reserved past 2^53 - 1 (the exact range,
-- see money.ts) changes none of them; the client throws InvalidCostError.
if actual then
  for wid in string.gmatch(rec, '%S+') do
    local hold = redis.call('HGET', P .. ':h:' .. wid, id)
    local win = windowOf(wid)
    if hold and win then
      local micros = tonumber(string.match(hold, '(%S+) '))
      if win.s + win.r - micros + actual > 9007199254740991 then return { -1, win.id } end
    end
  end
end
redis.call('DEL', P .. ':r:' .. id)
local reply = { 1 }
for wid in string.gmatch(rec, '%S+') do
  local h = P .. ':h:' .. wid
  local hold = redis.call('HGET', h, id)
  local win = windowOf(wid)
  local micros, at, exp = nil, nil, nil
  if hold then
    micros, at, exp = string.match(hold, '(%S+) (%S+) (%S+)')
    unindexHold(wid, id .. ':' .. micros, win ~= nil and win.rm ~= nil)
  end
  if hold and win and win.rm and tonumber(exp) <= now - win.rm then
    -- A rolling hold that expired rm ago has left the window: dropped as pruneRolling drops it,
    -- not charged.
    redis.call('HDEL', h, id)
    redis.call('HINCRBY', P .. ':w:' .. wid, 'r', fmt(0 - tonumber(micros)))
  elseif hold and win then
    redis.call('HDEL', h, id)
    local w = P .. ':w:' .. wid
    local r = redis.call('HINCRBY', w, 'r', fmt(0 - tonumber(micros)))
    local s = win.s
    if actual then
      s = redis.call('HINCRBY', w, 's', fmt(actual))
      -- Rolling: spend is dated when the call was sent, the hold's at, unless that has left the
      -- window (a long call): then now (budget.ts rollingSettleDate).
      if win.rm and actual > 0 then
        local date = at
        if not (tonumber(at) > now - win.rm) then date = fmt(now) end
        redis.call('ZADD', P .. ':g:' .. wid, date, id .. ':' .. fmt(actual))
      end
    end
    touch(wid, win.ws, win.we, win.rm, win.bid, now)
    reply[#reply + 1] = win.id
    reply[#reply + 1] = fmt(s)
    reply[#reply + 1] = fmt(r)
    reply[#reply + 1] = fmt(win.l)
  end
end
-- Found only if some window still held it (not one dropped, nor a rolling hold expired a window ago).
if #reply == 1 then reply[1] = 0 end
return reply
`;

/**
 * Every budget's current window at now (calendar windows containing now, every rolling window).
 * KEYS: the ledger tag key. ARGV: now.
 * Reply: flat (budgetId, windowStart, windowEnd, rollingMs or '', spent, reserved, limit, resetAt)...
 */
export const LEDGER_SNAPSHOT_LUA = `${LEDGER_LUA}
local now = tonumber(ARGV[1])
local reply = {}
for _, wid in ipairs(redis.call('SMEMBERS', P .. ':i')) do
  local win = windowOf(wid)
  if win == nil then
    redis.call('SREM', P .. ':i', wid)
  elseif win.rm or (win.ws <= now and now < win.we) then
    local resetAt, expired = win.we, nil
    if win.rm then
      pruneRolling(wid, win.rm, now)
      win = windowOf(wid)
      local c = rollingHolds(wid, win.rm, now)
      expired = c.expiredMicros
      resetAt = rollingResetAt(wid, c)
    else
      expired = expiredMicros(wid, now, false)
    end
    local rm = ''
    if win.rm then rm = fmt(win.rm) end
    reply[#reply + 1] = win.id
    reply[#reply + 1] = fmt(win.ws)
    reply[#reply + 1] = fmt(win.we)
    reply[#reply + 1] = rm
    reply[#reply + 1] = fmt(win.s + expired)
    reply[#reply + 1] = fmt(win.r - expired)
    reply[#reply + 1] = fmt(win.l)
    reply[#reply + 1] = fmt(resetAt)
  end
end
return reply
`;

/**
 * Forget a budget (with its per-key ids `budgetId[...]`), or everything ('').
 * KEYS: the ledger tag key. ARGV: budgetId or ''. Reply: windows dropped.
 */
export const LEDGER_RESET_LUA = `${LEDGER_LUA}
local target = ARGV[1]
local dropped = 0
for _, wid in ipairs(redis.call('SMEMBERS', P .. ':i')) do
  local win = windowOf(wid)
  if win == nil then
    redis.call('SREM', P .. ':i', wid)
  elseif target == '' or win.id == target or string.sub(win.id, 1, #target + 1) == target .. '[' then
    dropWindow(wid, win.bid)
    dropped = dropped + 1
  end
end
return dropped
`;

/**
 * Claim a threshold of one window (`Ledger.claimThreshold`): recorded in the window's hash as field
 * `f:<threshold>` = when it fired, so a claim lives and goes with its window (dropped, reset). Fired
 * already (rolling: less than `rollingMs` ago): not claimed, and when it fired is answered. A window
 * not in the ledger claims nothing. Runs on no other key: a crossing costs one short script.
 * KEYS: the ledger tag key. ARGV: now, window id, threshold (as text), rollingMs ('' calendar).
 * Reply: {1, now} claimed, {0, firedAt} fired already, {0} no such window.
 */
export const LEDGER_CLAIM_LUA = `
local w = KEYS[1] .. ':w:' .. ARGV[2]
if redis.call('EXISTS', w) == 0 then return { 0 } end
local field = 'f:' .. ARGV[3]
local last = redis.call('HGET', w, field)
if last then
  local rm = tonumber(ARGV[4])
  if not rm or tonumber(ARGV[1]) - tonumber(last) < rm then return { 0, last } end
end
redis.call('HSET', w, field, ARGV[1])
return { 1, ARGV[1] }
`;
