"""The gate's faults with adds and removes recorded as nemesis operations."""

from __future__ import annotations

from cnikit.cloud.faults import KINDS
from cnikit.cluster.nemesis_log import END, START, NemesisLog


class Ec2Faults:
    """The gate's faults (cnikit.cloud.faults.FaultSet) with adds and removes recorded, in
    the fault IMDS client's shape: what the `cloud` fixture's .faults and Ctx.ec2 hand out."""

    def __init__(self, log: NemesisLog, faults):
        self.log, self.faults = log, faults

    def add(self, kind: str, target: dict | None = None, duration: float | None = None,
            **attrs) -> str:
        kind = KINDS.by_name.respelled(kind)  # recorded by its name, whatever the spelling
        params = {"kind": kind, "duration": duration, **attrs}
        with self.log.adding:
            fid = self.log.attempt("ec2-fault", dict(target or {}), lambda: self.faults.add(
                kind, target=target, duration=duration, **attrs), **params)
            self.log.record(START, "ec2-fault", dict(target or {}), id=fid, **params)
            self.log.own_ids.add(str(fid))
        return fid

    def remove(self, fid: str) -> bool:
        found = self.faults.remove(fid)
        started = self.log.started(fid)
        if started is not None:
            self.log.record(END, "ec2-fault", started["target"], id=fid, by="removed")
        return found

    def clear(self) -> list[str]:
        removed = self.faults.clear()
        for v in self.log.in_effect():
            if v["op"] == "ec2-fault":
                self.log.record(END, "ec2-fault", v["target"], id=v["id"], by="removed")
        return removed

    def list(self) -> list[dict]:
        return self.faults.list()
