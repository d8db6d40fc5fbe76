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
-- ARGV[1] now, ARGV[2] n; charge i: ARGV[3 * i] amount, ARGV[3 * i + 1] limit,
-- ARGV[3 * i + 2] ttl; the lease: ARGV[3 * n + 3] member, ARGV[3 * n + 4] limit,
-- ARGV[3 * n + 5] deadline, ARGV[3 * n + 6] ttl.
-- Returns {admitted (1 or 0), each counter as seen, the leases held}.
local now = ARGV[1]
local n = tonumber(ARGV[2])
local used = {}
local admitted = 1
for i = 1, n do
  local key = KEYS[i]
  local amount = tonumber(ARGV[3 * i])
  local limit = tonumber(ARGV[3 * i + 1])
  used[i] = tonumber(redis.call('GET', key) or '0')
  if used[i] + amount > limit then admitted = 0 end
end
local lease_key = KEYS[n + 1]
local in_flight = 0
if lease_key then
  -- A lease whose deadline has passed is a request that died without settling.
  redis.call('ZREMRANGEBYSCORE', lease_key, '-inf', now)
  in_flight = redis.call('ZCARD', lease_key)
  local lease_limit = tonumber(ARGV[3 * n + 4])
  if in_flight + 1 > lease_limit then admitted = 0 end
end
if admitted == 1 then
  for i = 1, n do
    local key = KEYS[i]
    local amount_text = ARGV[3 * i]
    local ttl = ARGV[3 * i + 2]
    redis.call('INCRBY', key, amount_text)
    redis.call('EXPIRE', key, ttl)
  end
  if lease_key then
    local member = ARGV[3 * n + 3]
    local deadline = ARGV[3 * n + 5]
    local lease_ttl = ARGV[3 * n + 6]
    redis.call('ZADD', lease_key, deadline, member)
    -- Only ever lengthened: a shorter lease must not expire the set under a longer one.
    if redis.call('TTL', lease_key) < tonumber(lease_ttl) then
      redis.call('EXPIRE', lease_key, lease_ttl)
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
    keys = [charge.key for charge in reservation.charges]
    args = [repr(float(now)), str(len(reservation.charges))]
    for charge in reservation.charges:
        args += [str(charge.amount), str(charge.limit), str(charge.window.ttl(now))]
    lease = reservation.lease
    if lease is not None:
        keys.append(lease.key)
        ttl = max(1, int(lease.deadline - now) + 1)
        args += [lease.member, str(lease.limit), repr(float(lease.deadline)), str(ttl)]
    return keys, args


def reserve_decision(reservation: Reservation, reply: list[int], now: float) -> Decision:
    """The decision of RESERVE's reply: ``admit`` on the counters the script saw, which must
    agree with what the script did."""
    admitted, *used = reply
    in_flight = used.pop() if used else 0
    decision = admit(reservation, tuple(used), in_flight, now)
    if decision.admitted != bool(admitted):
        raise ValueError("the RESERVE script and limits.admit disagree")
    return decision
