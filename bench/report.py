"""The printed report of bench/run.py: one table per profile, ours/floor and ours/peer ratios,
the targets (with, for information, what the floor achieves against each)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from load import PROFILES, Outcome


@dataclass
class Row:
    gateway: str
    outcome: Outcome
    total_mb: float | None = None
    worker_mb: float | None = None
    cpu_pct: float | None = None
    foreign_pct: float | None = None
    trials: list[float] = field(default_factory=list)  # each trial's figure, when several ran
    # Its trials were taken in turn with ours' (bench/run.py's PAIRED), trial i with ours' i.
    paired: bool = False


Results = dict[str, dict[str, Row]]  # profile -> gateway -> row
# Profiles judged by a latency (which one; lower is better), not by rate (higher is better).
LATENCY = {"plain-1": "p50", "slow-1000": "p99"}


def figure(profile: str, outcome: Outcome) -> float | None:
    """What a trial of ``profile`` is judged by: a rate, or a latency (``LATENCY``)."""
    latency = LATENCY.get(profile)
    if latency is None:
        return outcome.rate
    return outcome.p50_ms if latency == "p50" else outcome.p99_ms


def median_trial(profile: str, rows: list[Row]) -> Row:
    """The trial with the median figure (of an even number, the worse of the middle two), its
    memory the largest any trial saw (the memory target is a ceiling), and every trial's figure.
    A trial that failed or had errors is the one that counts: no median hides it."""
    if len(rows) == 1:
        return rows[0]
    failed = [row for row in rows if row.outcome.failed or row.outcome.errors]
    if failed:
        chosen = failed[0]
    else:
        sign = -1 if profile in LATENCY else 1
        ranked = sorted(rows, key=lambda row: sign * (figure(profile, row.outcome) or 0.0))
        chosen = ranked[(len(ranked) - 1) // 2]  # ranked from the worst
    peaks = [row.total_mb for row in rows if row.total_mb is not None]
    workers = [row.worker_mb for row in rows if row.worker_mb is not None]
    values = [figure(profile, row.outcome) for row in rows]
    return replace(
        chosen,
        total_mb=max(peaks) if peaks else None,
        worker_mb=max(workers) if workers else None,
        trials=[v for v in values if v is not None],
    )


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ms(value: object) -> str:
    return _num(value, 2) if isinstance(value, float) else "-"


def _errors(outcome: Outcome) -> str:
    if outcome.failed:
        return "FAILED: " + outcome.failed
    return ", ".join(f"{k}: {v}" for k, v in outcome.errors.items()) or "none"


def profile_table(name: str, rows: dict[str, Row]) -> list[str]:
    profile = PROFILES[name]
    slow = profile.kind == "slow"
    unit = "req/s" if profile.kind in ("plain", "error") else "streams/s"
    lat = "TTFT " if slow else ""
    head = (
        f"{'':<11}{unit:>10}{lat + 'p50 ms':>13}{lat + 'p99 ms':>13}{'+p50 ms':>11}"
        f"{'x direct':>9}{'RSS MB':>8}{'/worker':>8}{'CPU %':>7}{'load %':>7}{'other %':>8}"
    )
    if slow:
        head += "  complete"
    lines = [f"{name}: {profile.title}", head]
    direct = rows.get("direct")
    for gateway, row in rows.items():
        o = row.outcome
        ratio = added = None
        if direct and direct.outcome.rate and o.rate is not None and gateway != "direct":
            ratio = o.rate / direct.outcome.rate
        if direct and direct.outcome.p50_ms is not None and o.p50_ms is not None:
            added = o.p50_ms - direct.outcome.p50_ms if gateway != "direct" else None
        line = (
            f"{gateway:<11}{_num(o.rate):>10}{_num(o.p50_ms, 2):>13}{_num(o.p99_ms, 2):>13}"
            f"{_num(added, 2):>11}{_num(ratio, 3):>9}{_num(row.total_mb, 0):>8}"
            f"{_num(row.worker_mb, 0):>8}{_num(row.cpu_pct, 0):>7}"
            f"{o.extra.get('client_cpu_pct', '-'):>7}{_num(row.foreign_pct, 0):>8}"
        )
        if slow:
            line += f"  {o.extra.get('completed', 0)}/{o.requests}"
        lines.append(line)
    for gateway, row in rows.items():
        errors = _errors(row.outcome)
        if errors != "none":
            lines.append(f"  {gateway} errors: {errors}")
    tried = {gateway: row.trials for gateway, row in rows.items() if len(row.trials) > 1}
    if tried:
        what = f"{lat}{LATENCY[name]} ms" if name in LATENCY else unit
        lines.append(f"  trials ({what}; the median's row above, with the largest RSS seen):")
        for gateway, values in tried.items():
            digits = 2 if name in LATENCY else 0
            lines.append(f"    {gateway:<11}" + " / ".join(_num(v, digits) for v in values))
    if slow:
        lines += _burst_lines(rows)
    return lines


def _burst_lines(rows: dict[str, Row]) -> list[str]:
    """Where the slow streams' TTFT tail is: bursts of streams opened together (bench/streams.py
    says why they happen)."""
    lines = []
    for gateway, row in rows.items():
        extra = row.outcome.extra
        share, alone, burst, slowest = (
            extra.get(key)
            for key in (
                "burst_share",
                "ttft_p99_alone_ms",
                "ttft_p99_burst_ms",
                "slowest_in_bursts",
            )
        )
        if not isinstance(share, float) or not isinstance(slowest, float):
            continue
        lines.append(
            f"  {gateway}: {share:.0%} of streams opened in bursts (10 or more within 1 ms);"
            f" TTFT p99 {_ms(alone)} ms alone, {_ms(burst)} ms in bursts; the slowest 1 %:"
            f" {slowest:.0%} in bursts"
        )
    return lines


def floor_lines(results: Results) -> list[str]:
    """Ours against the floor (bench/floor.py): what the framework costs and what ours adds."""
    lines = []
    for name in results:
        ours, floor = _outcome(results, name, "ours"), _outcome(results, name, "floor")
        if name == "soak" or ours is None or floor is None:
            continue
        profile = PROFILES[name]
        noun = "throughput" if profile.kind in ("plain", "error") else "streams/s"
        rate = ours.rate / floor.rate if ours.rate and floor.rate else None
        text = f"  {name:<10} ours is {_num(rate, 2)}x floor's {noun}"
        rows = results[name]
        ours_mb, floor_mb = rows["ours"].total_mb, rows["floor"].total_mb
        if ours_mb and floor_mb:
            text += f"; RSS {ours_mb / floor_mb:.2f}x floor's ({ours_mb:.0f} vs {floor_mb:.0f} MB)"
        lines.append(text)
        # Latency tells where time goes only when the load does not saturate the gateway.
        if (profile.connections == 1 or profile.kind == "slow") and (
            ours.p50_ms is not None and floor.p50_ms is not None
        ):
            lat = "TTFT p50" if profile.kind == "slow" else "p50"
            text = (
                f"  {'':<10} {lat}: ours adds {ours.p50_ms - floor.p50_ms:+.2f} ms to floor's"
                f" ({ours.p50_ms:.2f} vs {floor.p50_ms:.2f} ms)"
            )
            direct = _outcome(results, name, "direct")
            if direct is not None and direct.p50_ms is not None:
                text += f"; floor adds {floor.p50_ms - direct.p50_ms:+.2f} ms to direct's"
            lines.append(text)
    if lines:
        lines.insert(0, "ours/floor (floor: aiohttp server + client on uvloop, no logic):")
    return lines


def cpu_per_request(row: Row) -> float | None:
    """The gateway's CPU time per request (or stream) in its trial, in µs: steadier than its rate
    on a shared machine, where what the others do takes cores from it and its rate with them."""
    rate = row.outcome.rate
    if row.cpu_pct is None or not rate:
        return None
    return row.cpu_pct / 100 / rate * 1e6


def ratio_lines(results: Results, peers: list[str]) -> list[str]:
    lines = []
    for peer in peers:
        parts = []
        for name, rows in results.items():
            ours, theirs = rows.get("ours"), rows.get(peer)
            if not ours or not theirs or name == "soak":
                continue
            a, b = ours.outcome, theirs.outcome
            rate = a.rate / b.rate if a.rate and b.rate else None
            p50 = a.p50_ms / b.p50_ms if a.p50_ms and b.p50_ms else None
            mem = ours.total_mb / theirs.total_mb if ours.total_mb and theirs.total_mb else None
            ours_cpu, their_cpu = cpu_per_request(ours), cpu_per_request(theirs)
            cpu = ours_cpu / their_cpu if ours_cpu and their_cpu else None
            parts.append(
                f"  {name:<10} throughput {_num(rate, 2):>7}x   p50 {_num(p50, 3):>7}x"
                f"   RSS {_num(mem, 2):>6}x   CPU per request {_num(cpu, 2):>6}x"
                + (f" ({ours_cpu:,.0f} vs {their_cpu:,.0f} µs)" if cpu else "")
            )
        if parts:
            lines.append(f"ours/{peer}:")
            lines.extend(parts)
    return lines


@dataclass(frozen=True)
class Target:
    text: str
    # Whether ``gateway`` (ours; the floor for information) meets it; None: not measured.
    check: Callable[[Results, str], tuple[bool, str] | None]


def _outcome(results: Results, profile: str, gateway: str) -> Outcome | None:
    row = results.get(profile, {}).get(gateway)
    return None if row is None or row.outcome.failed else row.outcome


def _pairs(results: Results, profile: str, gateway: str, peer: str) -> list[tuple[float, float]]:
    """``gateway``'s and ``peer``'s figures trial by trial, when their trials were taken in turn;
    else none. On a machine whose speed drifts by a fifth within minutes (2026-11-30's evening),
    a pair's two trials share their moment and the medians of the two series need not: the
    median of the pairs' ratios (or differences) is what a paired target is judged by."""
    rows = results.get(profile, {})
    a, b = rows.get(gateway), rows.get(peer)
    if a is None or b is None or not (a.paired and b.paired):
        return []
    if len(a.trials) < 2 or len(a.trials) != len(b.trials):
        return []
    return list(zip(a.trials, b.trials, strict=True))


def _rate_ratio(profile: str, peer: str, at_least: float) -> Target:
    def check(results: Results, gateway: str) -> tuple[bool, str] | None:
        ours, theirs = _outcome(results, profile, gateway), _outcome(results, profile, peer)
        if ours is None or theirs is None or not ours.rate or not theirs.rate:
            return None
        medians = f"{ours.rate:,.0f} vs {theirs.rate:,.1f}/s"
        pairs = [a / b for a, b in _pairs(results, profile, gateway, peer) if b]
        if pairs:
            ratio = statistics.median(pairs)
            each = " / ".join(f"{r:.2f}" for r in pairs)
            text = f"{ratio:.2f}x, the median of {len(pairs)} in turn ({each}); medians {medians}"
            return ratio >= at_least, text
        ratio = ours.rate / theirs.rate
        return ratio >= at_least, f"{ratio:.2f}x ({medians})"

    noun = "streams/s" if profile.startswith("stream") else "throughput"
    return Target(f"{profile}: ours >= {at_least:g}x {peer}'s {noun}", check)


def _added_p50(results: Results, gateway: str) -> tuple[bool, str] | None:
    ours, direct = _outcome(results, "plain-1", gateway), _outcome(results, "plain-1", "direct")
    if ours is None or direct is None or ours.p50_ms is None or direct.p50_ms is None:
        return None
    added = ours.p50_ms - direct.p50_ms
    return added <= 0.5, f"{added:+.3f} ms ({ours.p50_ms:.3f} vs {direct.p50_ms:.3f} ms)"


def _slow_complete(results: Results, gateway: str) -> tuple[bool, str] | None:
    ours = _outcome(results, "slow-1000", gateway)
    if ours is None:
        return None
    completed = int(str(ours.extra.get("completed", 0)))
    return completed == ours.requests and not ours.errors, f"{completed}/{ours.requests}"


def _slow_ttft(results: Results, gateway: str) -> tuple[bool, str] | None:
    ours = _outcome(results, "slow-1000", gateway)
    direct = _outcome(results, "slow-1000", "direct")
    if ours is None or direct is None or ours.p99_ms is None or direct.p99_ms is None:
        return None
    medians = f"{ours.p99_ms:.2f} vs {direct.p99_ms:.2f} ms"
    pairs = [a - b for a, b in _pairs(results, "slow-1000", gateway, "direct")]
    if pairs:
        added = statistics.median(pairs)
        each = " / ".join(f"{d:+.1f}" for d in pairs)
        text = f"{added:+.2f} ms, the median of {len(pairs)} in turn ({each}); medians {medians}"
        return added <= 5, text
    added = ours.p99_ms - direct.p99_ms
    return added <= 5, f"{added:+.2f} ms ({medians})"


def _slow_rss(results: Results, gateway: str) -> tuple[bool, str] | None:
    row = results.get("slow-1000", {}).get(gateway)
    if row is None or row.worker_mb is None:
        return None
    return row.worker_mb < 150, f"{row.worker_mb:.0f} MB peak in one worker"


def _soak(results: Results, gateway: str) -> tuple[bool, str] | None:
    ours = _outcome(results, "soak", gateway)  # only ours is soaked
    if ours is None or "growth_pct" not in ours.extra:
        return None
    growth = float(str(ours.extra["growth_pct"]))
    total = int(str(ours.extra["requests_total"]))
    text = (
        f"{growth:+.1f}% (workers {ours.extra['rss_start_mb']} -> {ours.extra['rss_end_mb']} MB"
        f" over {total:,} requests)"
    )
    if total < 200_000:
        text += f"; only {total:,} of 200,000 requests within the time limit"
    return growth <= 10 and total >= 200_000, text


TARGETS = [
    _rate_ratio("plain-64", "tensorzero", 1.5),
    _rate_ratio("plain-64", "litellm", 50),
    _rate_ratio("stream-16", "tensorzero", 3),
    Target("plain-1: ours adds <= 0.5 ms to the direct p50", _added_p50),
    Target("slow-1000: every stream completes", _slow_complete),
    Target("slow-1000: ours adds <= 5 ms to the direct TTFT p99", _slow_ttft),
    Target("slow-1000: RSS < 150 MB per worker", _slow_rss),
    Target("soak: RSS grows <= 10% over 200,000 requests", _soak),
]


def target_lines(results: Results) -> list[str]:
    lines = ["targets (issue 6):"]
    floor = any("floor" in rows for rows in results.values())
    if floor:
        lines[0] = "targets (issue 6; 'info' lines are no verdict, only what the floor achieves):"
    for target in TARGETS:
        verdict = target.check(results, "ours")
        if verdict is None:
            lines.append(f"  ----  {target.text}: not measured in this run")
        else:
            ok, text = verdict
            lines.append(f"  {'PASS' if ok else 'MISS'}  {target.text}: {text}")
        info = target.check(results, "floor") if floor else None
        if info is not None:
            within, text = info
            meets = "within the target" if within else "outside the target"
            lines.append(f"  info    floor itself: {text}; {meets}")
    return lines
