"""The Redis scripts of ``proxy.core.limits.admission``, and the KEYS and ARGV the Python side
gives them.

Each script is one atomic step on the server (Redis runs a script alone), and does exactly what
``proxy.core.limits.memory.MemoryStore`` does with the same KEYS and ARGV: ``RESERVE`` takes
one team's reservations of a moment in turn, each checking every counter and the lease set
before it adds to any, as calls of their own would; ``SETTLE`` corrects counters (never below
0), frees leases and adds to the usage ledger (``proxy.core.limits.ledger``), for the requests
of one team that ``proxy.core.limits.tally`` gathered. Every key gets its TTL when it is
written, so windows expire on their own. Redis Cluster: every key of one call has the team's
hash tag (``limits.key_prefix``), so they are in one slot.

Two Lua 5.1 traps: ``GET`` of a missing key gives false, not nil; and a number is a double,
which ``tostring`` writes as ``1e+15`` past 14 digits, which ``INCRBY`` and ``SET`` would not
take as an integer: numbers go back to Redis as the ARGV strings they came as, or ``%d``,
and ``%d`` of a double past 2**63 writes -2**63: every counter written is held within
``limits.COUNT_MAX`` (exact in a double), every ledger field within ``ledger.FIELD_MAX``.

A key that holds what the scripts did not write (not an integer, another type) is that team's
trouble, not the store's: ``RESERVE`` answers its team with a ``NOTCOUNTER`` error before it
writes anything; ``SETTLE`` leaves the key as it is, does the rest, and says how many it left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from proxy.core.limits.admission import COUNT_MAX, Decision, Reservation, admit
from proxy.core.limits.ledger import FIELD_MAX

# The bounds, in each script: Redis's largest integer as a string, which no double holds.
_BOUNDS: Final = f"local COUNT_MAX = {COUNT_MAX}\nlocal LEDGER_MAX = '{FIELD_MAX}'\n"

RESERVE: Final = (
    _BOUNDS
    + """
-- One team's reservations of one loop turn, in order, as if each were a call of its own.
-- KEYS[i], i = 1..n: the charges' counters; KEYS[n + 1], if there is one: the lease set.
-- ARGV, first what is the same for every request of a team's window: ARGV[1] n; charge i:
-- ARGV[1 + i] limit, ARGV[1 + n + i] unit (0 requests, 1 tokens, 2 nano-USD), ARGV[1 + 2 * n + i]
-- when its key expires (epoch seconds); ARGV[3 * n + 2] the lease limit. Then the batch's:
-- ARGV[3 * n + 3] now, ARGV[3 * n + 4] the count c of runs, reservations alike (a request's
-- own alone, or those a worker makes ahead). Each run, from a = 3 * n + 5 on: ARGV[a] how many
-- it holds, k; ARGV[a + 1] tokens, ARGV[a + 2] nano-USD, ARGV[a + 3] the leases' deadline;
-- then, with a lease set, ARGV[a + 3 + j] the j-th lease's member, j = 1..k.
-- A run is admitted in turn up to its first refusal (with the same amounts, all after it would
-- be refused too). Returns, for each run, n + 2 integers: how many it admitted, then each
-- counter and the leases held as its first saw them; all in one string, separated by spaces.
local n = tonumber(ARGV[1])
local lease_limit = tonumber(ARGV[3 * n + 2])
local now = ARGV[3 * n + 3]
local count = tonumber(ARGV[3 * n + 4])
local limits, units, used = {}, {}, {}
for i = 1, n do
  local key = KEYS[i]
  local limit = tonumber(ARGV[1 + i])
  local unit = tonumber(ARGV[1 + n + i])
  limits[i], units[i] = limit, unit + 1
  local value = tonumber(redis.call('GET', key) or '0')
  if value == nil or value ~= value then
    -- Not a number, nor NaN: not ours. Refused before anything is written (this team's
    -- answer alone: the key expires with its window, or an operator deletes it).
    return redis.error_reply('NOTCOUNTER ' .. key .. ' holds no integer')
  end
  used[i] = math.min(COUNT_MAX, math.max(0, value))
end
local lease_key = KEYS[n + 1]
local in_flight = 0
if lease_key then
  -- A lease whose deadline has passed is a request that died without settling.
  redis.call('ZREMRANGEBYSCORE', lease_key, '-inf', now)
  in_flight = redis.call('ZCARD', lease_key)
end
local replies, leases, longest, taken = {}, {}, 1, false
local a = 3 * n + 5
for r = 1, count do
  local k = tonumber(ARGV[a])
  local tokens = tonumber(ARGV[a + 1])
  local nanos = tonumber(ARGV[a + 2])
  local deadline = ARGV[a + 3]
  local amounts = {1, tokens, nanos}
  -- Numbers as %d: tostring writes a double of more than 14 digits as 1e+15.
  local reply = {}
  for i = 1, n do reply[i + 1] = string.format('%d', used[i]) end
  reply[n + 2] = string.format('%d', in_flight)
  local admitted = 0
  for j = 1, k do
    local fits = not lease_key or in_flight + 1 <= lease_limit
    for i = 1, n do
      if used[i] + amounts[units[i]] > limits[i] then fits = false end
    end
    if not fits then break end
    admitted = admitted + 1
    for i = 1, n do used[i] = used[i] + amounts[units[i]] end
    if lease_key then
      local member = ARGV[a + 3 + j]
      in_flight = in_flight + 1
      leases[#leases + 1] = deadline
      leases[#leases + 1] = member
    end
  end
  reply[1] = admitted
  replies[r] = table.concat(reply, ' ')
  if admitted > 0 then
    taken = true
    if lease_key then
      longest = math.max(longest, math.floor(tonumber(deadline) - tonumber(now)) + 1)
    end
  end
  if lease_key then a = a + 4 + k else a = a + 4 end
end
if taken then
  for i = 1, n do
    -- What it holds now, as read (bounded) and added to: the script runs alone.
    local key = KEYS[i]
    local expires = ARGV[1 + 2 * n + i]
    redis.call('SET', key, string.format('%d', used[i]))
    redis.call('EXPIREAT', key, expires)
  end
end
if #leases > 0 then
  redis.call('ZADD', lease_key, unpack(leases))
  -- Only ever lengthened: a shorter lease must not expire the set under a longer one.
  if redis.call('TTL', lease_key) < longest then
    redis.call('EXPIRE', lease_key, string.format('%d', longest))
  end
end
return table.concat(replies, ' ')
"""
)

SETTLE: Final = (
    _BOUNDS
    + """
-- One team's settlements (proxy.core.limits.tally): KEYS: n counters, then m lease sets, then
-- h ledger hashes, then, for a marked tally, its marker. ARGV[1] n, ARGV[2] m, ARGV[3] h,
-- ARGV[4] the tally's sequence number (0: unmarked), ARGV[5] the marker's ttl; then for each
-- counter its delta and ttl; for each lease set the count of its members, then them; for each
-- hash its ttl and its count of fields, then each field and its increment. ARGV is read in
-- order, from ARGV[6] on. Returns {1 if applied (0: applied before), keys and fields left alone}.
local n = tonumber(ARGV[1])
local m = tonumber(ARGV[2])
local h = tonumber(ARGV[3])
local sequence = tonumber(ARGV[4])
if sequence > 0 then
  -- Its sender's tallies are applied in order, each sent again until answered: one whose
  -- number is not past the last applied was applied (its reply lost). Marked first: a
  -- script that fails midway is not undone, and what it did must not be done twice.
  local marker = KEYS[n + m + h + 1]
  local last = tonumber(redis.call('GET', marker) or '0') or 0
  if last >= sequence then return {0, 0} end
  redis.call('SET', marker, ARGV[4], 'EX', ARGV[5])
end
local skipped = 0
local a = 6
for i = 1, n do
  local key = KEYS[i]
  local delta = tonumber(ARGV[a])
  local found = redis.pcall('GET', key)
  local value = nil
  if found == false then value = 0 elseif type(found) == 'string' then value = tonumber(found) end
  if value == nil or value ~= value then
    -- Not a number (nor NaN, which is not equal to itself): not ours; left as it is.
    skipped = skipped + 1
  else
    -- Bounded: %d of a double past 2**63 writes -2**63, which would clear a spent budget.
    value = math.min(COUNT_MAX, math.max(0, value + delta))
    redis.call('SET', key, string.format('%d', value), 'EX', ARGV[a + 1])
  end
  a = a + 2
end
for i = 1, m do
  local lease_key = KEYS[n + i]
  local count = tonumber(ARGV[a])
  for j = 1, count do
    redis.pcall('ZREM', lease_key, ARGV[a + j])
  end
  a = a + count + 1
end
for i = 1, h do
  local hash_key = KEYS[n + m + i]
  local hash_ttl = ARGV[a]
  local fields = tonumber(ARGV[a + 1])
  a = a + 2
  for j = 1, fields do
    local done = redis.pcall('HINCRBY', hash_key, ARGV[a], ARGV[a + 1])
    if type(done) == 'table' then
      -- An integer past Redis's (2**63 - 1, summed over a period) is held there; a field
      -- or a key that holds what was not written here is left as it is.
      local found = redis.pcall('HGET', hash_key, ARGV[a])
      if type(found) == 'string' and string.match(found, '^%d+$') then
        redis.call('HSET', hash_key, ARGV[a], LEDGER_MAX)
      else
        skipped = skipped + 1
      end
    end
    a = a + 2
  end
  redis.pcall('EXPIRE', hash_key, hash_ttl)
end
return {1, skipped}
"""
)

# The most reservations in one RESERVE call: Lua's unpack of their leases has a bound.
RESERVE_BATCH: Final = 256

# A run: reservations alike (the same charges, amounts and lease limit and deadline; their
# leases' members apart), a request's own alone or those a pool makes ahead; a store admits
# them in turn, up to the first it refuses.
Run = Sequence[Reservation]


def reserve_call(runs: Sequence[Run], now: float) -> tuple[list[str], list[str]]:
    """RESERVE's KEYS and ARGV for ``runs`` (of one team's window, in order) at ``now``."""
    keys, static = reserve_static(runs[0][0])
    return keys, [*static, *reserve_tail(runs, now)]


def reserve_static(reservation: Reservation) -> tuple[list[str], list[str]]:
    """RESERVE's KEYS, and the ARGV that every reservation of the team's window shares (a
    store may keep them, encoded, for the window's length)."""
    charges = reservation.charges
    lease = reservation.lease
    keys = [charge.key for charge in charges]
    args = [str(len(charges))]
    args += [charge.limit_text for charge in charges]
    args += [str(charge.unit) for charge in charges]
    args += [str(charge.expires) for charge in charges]
    args.append(str(lease.limit) if lease is not None else "0")
    if lease is not None:
        keys.append(lease.key)
    return keys, args


def reserve_tail(runs: Sequence[Run], now: float) -> list[str]:
    """The ARGV after the static ones: when the batch is sent, how many runs it holds, and
    each run's: its count, tokens, nano-USD and leases' deadline, then its leases' members
    (the numbers spelt once for the whole run: a float's repr costs more than the rest)."""
    tail = [repr(float(now)), str(len(runs))]
    for run in runs:
        first = run[0]
        _, tokens, nanos = first.amounts
        lease = first.lease
        if lease is None:
            tail += (str(len(run)), str(tokens), str(nanos), "0")
        else:
            tail += (str(len(run)), str(tokens), str(nanos), repr(float(lease.deadline)))
            tail += [r.lease.member for r in run if r.lease is not None]
    return tail


def reserve_replies(reply: Sequence[int], runs: Sequence[Run]) -> list[list[int]]:
    """RESERVE's reply cut into each run's (``ValueError`` if it does not divide, or says
    more were admitted than a run holds)."""
    count = len(runs)
    size, rest = divmod(len(reply), count) if count else (0, 1)
    if rest or size < 2:
        raise ValueError(f"a reply of {len(reply)} integers for {count} runs")
    replies = [list(reply[i : i + size]) for i in range(0, len(reply), size)]
    for values, run in zip(replies, runs, strict=True):
        if not 0 <= values[0] <= len(run):
            raise ValueError(f"{values[0]} admitted of a run of {len(run)}")
    return replies


def reserve_decision(reservation: Reservation, reply: Sequence[int], now: float) -> Decision:
    """The decision on a run's first reservation, from the run's reply: the script's
    counters as it saw them, and for a refusal, ``admit``'s account of it, which must agree
    that it is one."""
    in_flight = reply[-1] if len(reply) > 1 else 0
    used = tuple(reply[1:-1])
    if reply[0]:
        return Decision(True, used, in_flight)
    decision = admit(reservation, used, in_flight, now)
    if decision.admitted:
        raise ValueError("the RESERVE script and limits.admit disagree")
    return decision
