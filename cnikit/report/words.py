"""How a report writes a time and an address: the words every part of it shares."""

from __future__ import annotations

from cnikit.report.timeline import Timeline, short_ip, sorted_ips


def rel(tl: Timeline, t: float | None) -> str:
    return "end" if t is None else f"t={t - tl.t0:+.2f}s"


def short(ip: str) -> str:
    """10.0.1.7 -> .7 and 10.0.1.16/28 -> .16/28 (IPv6: timeline.short_ip): enough to tell
    IPs of one subnet apart."""
    return short_ip(ip)


def shorts(ips, limit: int = 8) -> str:
    ips = sorted_ips(ips)
    more = f" and {len(ips) - limit} more" if len(ips) > limit else ""
    return " ".join(short(i) for i in ips[:limit]) + more


def time_scale_sentence(scale: float | None, attempts: list[dict]) -> str | None:
    """Which time scale a run's verdict came from and why, in one line (`attempts`: the runs
    at faster scales the machine was too slow for, cnikit.scenarios.engine.adapt); None for
    a run judged at its first scale."""
    if not attempts:
        return None
    first = attempts[0]
    factor = scale / first["scale"] if scale and first.get("scale") else None
    why = (first.get("too_slow") or "").removeprefix("the machine was too slow for the time "
                                                      "scale: ")
    slower = f" ({factor:g}x slower)" if factor else ""
    tried = ", ".join(f"{a['scale']:g}" for a in attempts)
    return f"judged at time scale {scale:g}{slower}: at {tried} the machine was too slow ({why})"
