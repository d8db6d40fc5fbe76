"""The Redis scripts of ``proxy.core.limits``, and the KEYS and ARGV the Python side gives them.

Each script is one atomic step on the server (Redis runs a script alone), and does exactly what
``proxy.core.limits_store.MemoryStore`` does with the same KEYS and ARGV: ``RESERVE`` takes
one team's reservations of a moment in turn, each checking every counter and the lease set
before it adds to any, as calls of their own would; ``SETTLE`` corrects counters (never below
0), frees leases and adds to the usage ledger (``proxy.core.ledger``), for the requests of one
team that ``proxy.core.tally`` gathered. Every key gets its TTL when it is written, so windows
expire on their own. Redis Cluster: every key of one call has the team's hash tag
(``limits.key_prefix``), so they are in one slot.

Two Lua 5.1 traps: ``GET`` of a missing key gives false, not nil; and a number is a double,
which ``tostring`` writes as ``1e+15`` past 14 digits, which ``INCRBY`` and ``SET`` would not
take as an integer: numbers go back to Redis as the ARGV strings they came as, or ``%d``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from proxy.core.limits import Decision, Reservation, admit

RESERVE: Final = """
-- One team's reservations of one loop turn, in order, as if each were a call of its own.
-- KEYS[i], i = 1..n: the charges' counters; KEYS[n + 1], if there is one: the lease set.
-- ARGV, first what is the same for every request of a team's window: ARGV[1] n; charge i:
-- ARGV[1 + i] limit, ARGV[1 + n + i] unit (0 requests, 1 tokens, 2 nano-USD), ARGV[1 + 2 * n + i]
-- when its key expires (epoch seconds); ARGV[3 * n + 2] the lease limit. Then the batch's:
-- ARGV[3 * n + 3] now, ARGV[3 * n + 4] the count c of reservations; then for each, from
-- a = 3 * n + 5 on, four: ARGV[a] tokens, ARGV[a + 1] nano-USD, ARGV[a + 2] the lease's member,
-- ARGV[a + 3] its deadline.
-- Returns, for each reservation, n + 2 integers: admitted (1 or 0), each counter as it saw it,
-- the leases held; all in one string, separated by spaces (one reply to read, not c arrays).
local n = tonumber(ARGV[1])
local lease_limit = tonumber(ARGV[3 * n + 2])
local now = ARGV[3 * n + 3]
local count = tonumber(ARGV[3 * n + 4])
local limits, units, used, before = {}, {}, {}, {}
for i = 1, n do
  local key = KEYS[i]
  local limit = tonumber(ARGV[1 + i])
  local unit = tonumber(ARGV[1 + n + i])
  limits[i], units[i] = limit, unit + 1
  used[i] = tonumber(redis.call('GET', key) or '0')
  before[i] = used[i]
end
local lease_key = KEYS[n + 1]
local in_flight = 0
if lease_key then
  -- A lease whose deadline has passed is a request that died without settling.
  redis.call('ZREMRANGEBYSCORE', lease_key, '-inf', now)
  in_flight = redis.call('ZCARD', lease_key)
end
local replies, leases, longest, taken = {}, {}, 1, false
for r = 1, count do
  local a = 3 * n + 1 + 4 * r
  local tokens = tonumber(ARGV[a])
  local nanos = tonumber(ARGV[a + 1])
  local member = ARGV[a + 2]
  local deadline = ARGV[a + 3]
  local amounts = {1, tokens, nanos}
  local admitted = 1
  -- Numbers as %d: tostring writes a double of more than 14 digits as 1e+15.
  local reply = {}
  for i = 1, n do
    reply[i + 1] = string.format('%d', used[i])
    if used[i] + amounts[units[i]] > limits[i] then admitted = 0 end
  end
  if lease_key and in_flight + 1 > lease_limit then admitted = 0 end
  reply[1] = admitted
  reply[n + 2] = string.format('%d', in_flight)
  replies[r] = table.concat(reply, ' ')
  if admitted == 1 then
    taken = true
    for i = 1, n do used[i] = used[i] + amounts[units[i]] end
    if lease_key then
      in_flight = in_flight + 1
      leases[#leases + 1] = deadline
      leases[#leases + 1] = member
      longest = math.max(longest, math.floor(tonumber(deadline) - tonumber(now)) + 1)
    end
  end
end
if taken then
  for i = 1, n do
    local key = KEYS[i]
    local expires = ARGV[1 + 2 * n + i]
    redis.call('INCRBY', key, string.format('%d', used[i] - before[i]))
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


# The most reservations in one RESERVE call: Lua's unpack of their leases has a bound.
RESERVE_BATCH: Final = 256


def reserve_call(reservations: Sequence[Reservation], now: float) -> tuple[list[str], list[str]]:
    """RESERVE's KEYS and ARGV for ``reservations`` (of one team's window, in order) at ``now``."""
    keys, static = reserve_static(reservations[0])
    return keys, [*static, *reserve_tail(reservations, now)]


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


def reserve_tail(reservations: Sequence[Reservation], now: float) -> list[str]:
    """The ARGV after the static ones: when the batch is sent, how many it holds, and each
    reservation's own (``reserve_own``)."""
    tail = [repr(float(now)), str(len(reservations))]
    # Those made ahead in one call share their amounts and their leases' deadline: each
    # number is spelt once for all of them (a float's repr costs more than the rest).
    spelt: tuple[object, list[str]] = (None, [])
    for reservation in reservations:
        _, tokens, nanos = reservation.amounts
        lease = reservation.lease
        same = (tokens, nanos, lease.deadline if lease is not None else None)
        if same != spelt[0]:
            spelt = (same, reserve_own(reservation))
        own = spelt[1]
        tail += (own[0], own[1], lease.member if lease is not None else "", own[3])
    return tail


# How many of RESERVE's ARGV are each reservation's own (``reserve_own``).
OWN_ARGS: Final = 4


def reserve_own(reservation: Reservation) -> list[str]:
    """One reservation's ARGV: its tokens, its nano-USD, its lease's member and deadline."""
    _, tokens, nanos = reservation.amounts
    lease = reservation.lease
    if lease is None:
        return [str(tokens), str(nanos), "", "0"]
    return [str(tokens), str(nanos), lease.member, repr(float(lease.deadline))]


def reserve_replies(reply: Sequence[int], count: int) -> list[list[int]]:
    """RESERVE's reply cut into each reservation's (``ValueError`` if it does not divide)."""
    size, rest = divmod(len(reply), count) if count else (0, 1)
    if rest or size < 2:
        raise ValueError(f"a reply of {len(reply)} integers for {count} reservations")
    return [list(reply[i : i + size]) for i in range(0, len(reply), size)]


def reserve_decision(reservation: Reservation, reply: Sequence[int], now: float) -> Decision:
    """The decision of one reservation's reply: the script's counters as seen, and for a
    refusal, ``admit``'s account of it, which must agree that it is one."""
    in_flight = reply[-1] if len(reply) > 1 else 0
    used = tuple(reply[1:-1])
    if reply[0]:
        return Decision(True, used, in_flight)
    decision = admit(reservation, used, in_flight, now)
    if decision.admitted:
        raise ValueError("the RESERVE script and limits.admit disagree")
    return decision
