"""The Redis scripts of ``proxy.core.limits``, and the KEYS and ARGV the Python side gives them.

Each script is one atomic step on the server (Redis runs a script alone), and does exactly what
``proxy.core.limits_store.MemoryStore`` does with the same KEYS and ARGV: ``RESERVE`` checks
every counter and the lease set before it adds to any; ``SETTLE`` corrects counters (never below
0), frees leases and adds to the usage ledger (``proxy.core.ledger``), for the requests of one
team that ``proxy.core.tally`` gathered. Every key gets its TTL when it is written, so windows
expire on their own. Redis Cluster: every key of one call has the team's hash tag
(``limits.key_prefix``), so they are in one slot.

Two Lua 5.1 traps: ``GET`` of a missing key gives false, not nil; and a number is a double,
which ``tostring`` writes as ``1e+15`` past 14 digits, which ``INCRBY`` and ``SET`` would not
take as an integer: numbers go back to Redis as the ARGV strings they came as, or ``%d``.
"""

from __future__ import annotations

from typing import Final

from proxy.core.limits import Decision, Reservation, admit

RESERVE: Final = """
-- KEYS[i], i = 1..n: the charges' counters; KEYS[n + 1], if there is one: the lease set.
-- ARGV, first what is the same for every request of a team's window: ARGV[1] n; charge i:
-- ARGV[1 + i] limit, ARGV[1 + n + i] unit (0 requests, 1 tokens, 2 nano-USD), ARGV[1 + 2 * n + i]
-- when its key expires (epoch seconds); ARGV[3 * n + 2] the lease limit. Then the request's:
-- ARGV[3 * n + 3] now, ARGV[3 * n + 4] tokens, ARGV[3 * n + 5] nano-USD, ARGV[3 * n + 6] the
-- lease's member, ARGV[3 * n + 7] its deadline.
-- Returns {admitted (1 or 0), each counter as seen, the leases held}.
local n = tonumber(ARGV[1])
local now = ARGV[3 * n + 3]
local tokens = ARGV[3 * n + 4]
local nanos = ARGV[3 * n + 5]
local amounts = {'1', tokens, nanos}
local used = {}
local admitted = 1
for i = 1, n do
  local key = KEYS[i]
  local limit = tonumber(ARGV[1 + i])
  local unit = tonumber(ARGV[1 + n + i])
  used[i] = tonumber(redis.call('GET', key) or '0')
  if used[i] + tonumber(amounts[unit + 1]) > limit then admitted = 0 end
end
local lease_key = KEYS[n + 1]
local in_flight = 0
if lease_key then
  -- A lease whose deadline has passed is a request that died without settling.
  redis.call('ZREMRANGEBYSCORE', lease_key, '-inf', now)
  in_flight = redis.call('ZCARD', lease_key)
  local lease_limit = tonumber(ARGV[3 * n + 2])
  if in_flight + 1 > lease_limit then admitted = 0 end
end
if admitted == 1 then
  for i = 1, n do
    local key = KEYS[i]
    local unit = tonumber(ARGV[1 + n + i])
    local expires = ARGV[1 + 2 * n + i]
    redis.call('INCRBY', key, amounts[unit + 1])
    redis.call('EXPIREAT', key, expires)
  end
  if lease_key then
    local member = ARGV[3 * n + 6]
    local deadline = ARGV[3 * n + 7]
    local lease_ttl = math.max(1, math.floor(tonumber(deadline) - tonumber(now)) + 1)
    redis.call('ZADD', lease_key, deadline, member)
    -- Only ever lengthened: a shorter lease must not expire the set under a longer one.
    if redis.call('TTL', lease_key) < lease_ttl then
      redis.call('EXPIRE', lease_key, string.format('%d', lease_ttl))
    end
  end
end
used[n + 1] = in_flight
return {admitted, unpack(used)}
"""

SETTLE: Final = """
-- One team's settlements (proxy.core.tally): KEYS: n counters, then m lease sets, then h ledger
-- hashes. ARGV[1] n, ARGV[2] m, ARGV[3] h; then for each counter its delta and ttl; for each
-- lease set the count of its members, then them; for each hash its ttl and its count of
-- fields, then each field and its increment. ARGV is read in order, from ARGV[4] on.
local n = tonumber(ARGV[1])
local m = tonumber(ARGV[2])
local h = tonumber(ARGV[3])
local a = 4
for i = 1, n do
  local key = KEYS[i]
  local delta = tonumber(ARGV[a])
  local value = tonumber(redis.call('GET', key) or '0')
  redis.call('SET', key, string.format('%d', math.max(0, value + delta)), 'EX', ARGV[a + 1])
  a = a + 2
end
for i = 1, m do
  local lease_key = KEYS[n + i]
  local count = tonumber(ARGV[a])
  for j = 1, count do
    redis.call('ZREM', lease_key, ARGV[a + j])
  end
  a = a + count + 1
end
for i = 1, h do
  local hash_key = KEYS[n + m + i]
  local hash_ttl = ARGV[a]
  local fields = tonumber(ARGV[a + 1])
  a = a + 2
  for j = 1, fields do
    redis.call('HINCRBY', hash_key, ARGV[a], ARGV[a + 1])
    a = a + 2
  end
  redis.call('EXPIRE', hash_key, hash_ttl)
end
return n
"""


def reserve_call(reservation: Reservation, now: float) -> tuple[list[str], list[str]]:
    """RESERVE's KEYS and ARGV for ``reservation``."""
    keys, static = reserve_static(reservation)
    return keys, static + reserve_dynamic(reservation, now)


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


# How many of RESERVE's ARGV are the request's own (``reserve_dynamic``).
DYNAMIC_ARGS: Final = 5


def reserve_dynamic(reservation: Reservation, now: float) -> list[str]:
    """The rest of RESERVE's ARGV: this request's."""
    _, tokens, nanos = reservation.amounts
    lease = reservation.lease
    if lease is None:
        return [repr(float(now)), str(tokens), str(nanos), "", "0"]
    return [repr(float(now)), str(tokens), str(nanos), lease.member, repr(float(lease.deadline))]


def reserve_decision(reservation: Reservation, reply: list[int], now: float) -> Decision:
    """The decision of RESERVE's reply: the script's counters as seen, and for a refusal,
    ``admit``'s account of it, which must agree that it is one."""
    in_flight = reply[-1] if len(reply) > 1 else 0
    used = tuple(reply[1:-1])
    if reply[0]:
        return Decision(True, used, in_flight)
    decision = admit(reservation, used, in_flight, now)
    if decision.admitted:
        raise ValueError("the RESERVE script and limits.admit disagree")
    return decision
