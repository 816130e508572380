"""Cost: what a run's EC2 calls say the build wasted, judged afterwards from the gate's audit.

Some bugs hurt no pod: they spend the account's EC2 budget or its ENIs. Upstream #989/#1148
(an ENI used before Describe showed its addresses: a stream of Assigns refused with
PrivateIpAddressLimitExceeded) and #1451 (ENIs attached and freed in a loop) are two. A
correctness checker (cnikit.check.checkers) must not fail a build for them, since designs
differ in how many calls they make; a cost finding never changes a verdict. A run's report,
`cnikit run`, a certificate and the detection benchmark list the findings apart.

A finding counts only the build's own calls as EC2 judged them: a refusal a fault injected
(the audit's `injected`), a call of another principal or of the kit itself, and ENIs the
nemesis acted on are left out.

Adding a rule is one module in this package with one Rule subclass (base.py): importing the
package imports every module in it, and defining the class registers it.
"""

from __future__ import annotations

import importlib
import pkgutil

from cnikit.check.cost.base import RULES, Calls, Rule

__all__ = ["RULES", "Calls", "Rule", "judge", "lines"]

for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")


def judge(audit: list[dict], history: list[dict], nodes: dict[str, str] | None = None,
          scale: float = 1.0, throttled: list[dict] | None = None) -> list[dict]:
    """Every registered rule's findings over one run, by kind: [{kind, subject, count, since,
    what}]. `audit`: the gate's records as JSON; `nodes`: instance id -> node name; `scale`:
    the run's time scale (CNIKIT_TIME_SCALE), which compresses upstream's intervals;
    `throttled`: every call a throttle refused, reads included ({time, action,
    instance_id, caller}: the instance the call acted on, else the calling one; the calling
    instance; None when unknown)."""
    calls = Calls.of(audit, history, nodes or {}, scale, throttled or [])
    out = []
    for kind in sorted(RULES):
        out += [f.to_json() for f in RULES[kind]().judge(calls)]
    return out


def lines(findings: list[dict] | None) -> list[str]:
    """One line per finding, as every reader of a run shows them."""
    return [f"cost: {f['kind']}: {f['what']}" for f in findings or []]
