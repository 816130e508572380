from __future__ import annotations

from cnikit.check.checkers.base import VIOLATION, EniChecker

# The history's process of the scenario's own markers (cnikit.scenarios.engine.outcomes,
# a layer above the checkers): its `end` is when a leak is judged.
SCENARIO = "scenario"


class EniLeak(EniChecker):
    """An ENI that was attached to one of the run's nodes and is left available (attached
    nowhere, not deleted) at the end of the run, for longer than a grace: an ENI leaked
    (upstream #732, #401, #608, #1223: a restart while it was detaching, a delete tried once
    while EC2 still answered "in use"). It costs the account an ENI and the subnet its
    addresses until someone deletes it by hand. Read from the monitor's `loose-enis`
    entries (EC2's truth through the gate). A build may keep a detached ENI for a while
    (a retry, a leaked-ENI sweep): only one still available after `eni_leak_grace` seconds
    (default six times `leak_grace`, the address leak's grace) when the run ends counts."""

    kind = "eni-leak"
    severity = VIOLATION
    order = 45
    subject_names = "eni"  # neither a pod nor an address: no pod lane, no IP story

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        default = 6 * float(self.options.get("leak_grace", 60.0))
        self.grace = float(self.options.get("eni_leak_grace", default))
        self.loose: dict[str, dict] = {}  # eni -> {was_on, mac, ips}
        self.since: dict[str, float] = {}  # eni -> loose since

    def step(self, e: dict, run) -> None:
        proc, f, at = e["process"], e["f"], e["time"]
        if proc == "monitor" and f == "loose-enis":
            self.loose = dict((e["value"] or {}).get("enis") or {})
            for eni_id in [x for x in self.since if x not in self.loose]:
                del self.since[eni_id]
                self._close(eni_id, at)
            for eni_id in self.loose:
                self.since.setdefault(eni_id, at)
        elif proc == SCENARIO and f == "end":
            for eni_id, first in self.since.items():
                if at - first < self.grace:
                    continue
                info = self.loose.get(eni_id) or {}
                ips = info.get("ips") or []
                what = (f"{eni_id} (mac {info.get('mac', '?')}, {len(ips)} address"
                        f"{'' if len(ips) == 1 else 'es'}) detached from "
                        f"{info.get('was_on', '?')} and left available for {at - first:.1f}s "
                        f"(grace {self.grace:.1f}s): never deleted")
                self._open(eni_id, first + self.grace, eni=eni_id, node=info.get("was_on"),
                           ips=ips, what=what)

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str | None:
        d = v.get("detail") or {}
        return f"{v.get('subject')} leaked: available, attached to no node (was on {d.get('node')})"
