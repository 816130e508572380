"""IMDS keeps an instance's interface list as it was until the next change of it.

Upstream VPC CNI #1008 and #1340 (AWS support, #2497: a known IMDS defect): after an ENI
was detached and deleted, IMDS went on listing it under `network/interfaces/macs/` until
the instance's interfaces changed again (the next attach or detach). A daemon that called
EC2 on every interface IMDS listed got InvalidNetworkInterfaceID.NotFound at start-up and
aborted (CrashLoopBackOff), until fixes #1011 and #1341 skipped such an interface.
"""

from __future__ import annotations

from typing import Any

from fault_imds.faults.base import Chaos, ImdsFault, Param, SpecError, integer


def _macs(models, iid: str) -> frozenset[str]:
    m = models.get(iid)
    return frozenset(e.mac for e in m.enis) if m is not None else frozenset()


class StaleUntilChange(ImdsFault):
    """Freeze which interfaces the instance is served, until EC2 changes them again."""

    kind = "stale-until-change"
    stage = "content"
    order = 25  # after lag and stale (it freezes the served list), before missing
    targets = ("instance_id",)
    params = {"missed_changes": Param(
        integer(0, 100), 0,
        help="attach/detach changes of the instance's interfaces the fault survives "
             "(0: it ends at the first)")}
    description = ("serve the instance's interfaces as they were when the fault began "
                   "(a detached ENI still listed, a new one not yet) until its next "
                   "attach/detach")
    # Random chaos aims it at a node; 1 missed change keeps a departed ENI listed.
    chaos = Chaos(rank=7, aim="instance", draw=lambda rng: {"missed_changes": rng.choice((0, 1))})

    @classmethod
    def parse_target(cls, spec: dict[str, Any], resolver=None, **kw: Any):
        target = super().parse_target(spec, resolver, **kw)
        if target.instance_id is None:
            raise SpecError("stale-until-change needs target.instance_id")
        return target

    def start(self, engine) -> None:
        iid = self.target.instance_id
        model = engine.served_models.get(iid)
        self.frozen = {e.mac: e for e in model.enis} if model is not None else {}
        self.seen = _macs(engine.true_models, iid)
        self.changes = 0

    def ends(self, engine) -> str | None:
        """Count a change of the instance's interfaces in EC2; the one past
        `missed_changes` ends the fault (the engine then emits `fault_ended` with why)."""
        now = _macs(engine.true_models, self.target.instance_id)
        if now == self.seen:
            return None
        added, gone = sorted(now - self.seen), sorted(self.seen - now)
        self.seen = now
        self.changes += 1
        if self.changes <= self.missed_changes:
            return None
        what = ", ".join([*(f"+{m}" for m in added), *(f"-{m}" for m in gone)])
        return f"change {self.changes} of {self.target.instance_id}'s interfaces ({what})"

    def apply(self, view) -> None:
        iid = self.target.instance_id
        now = view.models.get(iid)
        if now is None:
            return  # the instance is not served at all
        kept = [e for e in now.enis if e.mac in self.frozen]
        shown = {e.mac for e in kept}
        view.models[iid] = now.with_enis(
            kept + [e for mac, e in self.frozen.items() if mac not in shown])
