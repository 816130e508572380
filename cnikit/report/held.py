"""Why a run held, in one sentence from the record: which faults reached the build and how
often, that every pod kept its address and its peers through them, and, when the build
keeps a log of its decisions, whether it dropped any address it held.

    why_held(tl, exposure)
    # "held because the build met its faults (IMDS stale 15 times, ec2-assign-elsewhere
    #  once) and all 14 pods kept their addresses and their peers throughout; its own log
    #  shows no address dropped from its datastore"
"""

from __future__ import annotations

from cnikit.report.rootcause import DROPS
from cnikit.report.timeline import Timeline

PREFIX = "held because "


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def _fault(f: dict) -> str:
    op, kind = f.get("op") or "fault", f.get("kind")
    if kind and op.startswith("imds"):
        op = f"IMDS {kind}"
    elif kind and op.startswith("ec2"):
        op = f"EC2 {kind}"
    return f"{op} {_times(int(f.get('reached') or 0))}"


def why_held(tl: Timeline, exposure: dict | None) -> str:
    reached = [f for f in (exposure or {}).get("faults") or [] if f.get("reached")]
    met = (f"the build met its faults ({', '.join(_fault(f) for f in reached)})" if reached
           else "no fault reached the build")
    pods = len(tl.pods)
    kept = (f"all {pods} pods kept their addresses and their peers throughout" if pods > 1
            else "its pod kept its address and its peers throughout" if pods
            else "no pod ran")
    text = f"{PREFIX}{met} and {kept}"
    if tl.daemon_events:
        drops = sum(len(e.get("addresses") or []) for events in tl.daemon_events.values()
                    for e in events if e.get("kind") in DROPS)
        text += ("; its own log shows no address dropped from its datastore" if not drops
                 else f"; its own log shows {drops} address(es) dropped from its datastore")
    return text
