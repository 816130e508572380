from __future__ import annotations

from cnikit.check.checkers.base import Checker, canonical_ip
from cnikit.check.checkers.early_reuse import EarlyReuse
from cnikit.check.checkers.ownership import Ownership

# The share of the required IP cooldown a pod may wait for an address while every free one
# cools down and their ENI has room. Upstream's pool manager looks every 5 s, so a build
# that tops its pool up when the free addresses cool (#1700, #2896) answers within one or
# two looks; one that waits the cooldown out makes the pod wait up to all 30 s. Half the
# cooldown (15 s, three looks, scaled with the cooldown) keeps both well apart.
BOUND_SHARE = 0.5
NODES = "nodes"  # the monitor's entry of the nodes' instances and ENI limits (cnikit.check.watch)


class CooldownWait(Checker):
    """A pod whose ADDs keep failing while the node could give it an address: every free
    address EC2 has on the node's ENIs is cooling down (a pod of the node was deleted from
    it within the required IP cooldown), and an ENI holding one of them has room for more
    (the instance type's addresses per ENI). A build that assigns a new address there
    serves the pod within a pool pass; one that counts the cooling addresses as available
    (upstream's AvailableAddresses, #1700, #2896) makes it wait out the cooldown.

    Judged from what the kit sees: EC2's addresses (the monitor's `ownership`, as the
    ip-not-owned checker folds them), the ENI limits (its `nodes` entry), pods deleted (as
    early-reuse keeps them) and the ADDs that failed. A
    violation once one pod has waited so for longer than BOUND_SHARE of the cooldown
    (option `ip_cooldown`; 0: not judged). Not judged on a node holding prefixes, nor while
    a nemesis operation is in force (a throttled or failing EC2 may keep any build waiting):
    the wait is counted from its end."""

    kind = "cooldown-wait"
    timed = True  # a daemon held off the CPU tops its pool up late
    order = 60

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.cooldown = float(self.options.get("ip_cooldown") or 0.0)
        self.bound = BOUND_SHARE * self.cooldown
        self.instance: dict[int, str] = {}  # node -> instance
        self.per_eni: dict[str, int] = {}  # instance -> addresses an ENI holds
        self.reported: set[str] = set()
        self.waiting: dict[str, float] = {}  # pod -> since when its ADDs fail while it could be served
        self.faults: dict[str, float] = {}  # nemesis operations in force -> when they end by themselves
        self.calm = 0.0  # when the last nemesis operation ended

    def step(self, e: dict, run) -> None:
        if self.bound <= 0:
            return
        proc, typ, f, at = e["process"], e["type"], e["f"], e["time"]
        v = e["value"] or {}
        if proc == "monitor" and f == NODES:
            for inst, n in (v.get("nodes") or {}).items():
                self.instance[int(n["node"])] = inst
                if n.get("ipv4_per_eni"):
                    self.per_eni[inst] = int(n["ipv4_per_eni"])
        elif proc == "nemesis" and typ in ("start", "end"):
            self._nemesis(typ, v, at)
        elif proc == "client" and typ == "ok" and f == "pod-add":
            self.waiting.pop(v["pod"], None)
        elif proc == "client" and typ == "fail" and f == "pod-add":
            self._failed(v.get("pod"), v.get("node"), at, run)

    def _nemesis(self, typ: str, v: dict, at: float) -> None:
        fid = str(v.get("id"))
        if typ == "start":
            duration = v.get("duration")
            self.faults[fid] = at + duration if isinstance(duration, (int, float)) else float("inf")
        elif self.faults.pop(fid, None) is not None:
            self.calm = max(self.calm, at)

    def _in_force(self, at: float) -> bool:
        for fid, ends in list(self.faults.items()):
            if ends <= at:
                del self.faults[fid]
                self.calm = max(self.calm, ends)
        return bool(self.faults)

    def _failed(self, pod: str | None, node, at: float, run) -> None:
        inst = self.instance.get(node) if isinstance(node, int) else None
        starved = None if inst is None or self._in_force(at) else self._starved(inst, at, run)
        if pod is None or starved is None:
            self.waiting.pop(pod, None)
            return
        since = max(self.waiting.setdefault(pod, at), self.calm)
        if at - since <= self.bound or pod in self.reported:
            return
        self.reported.add(pod)
        eni, cooling = starved
        what = (f"pod {pod}'s ADDs on node {node} failed for {at - since:.2f}s while every free "
                f"address of the node was cooling down ({', '.join(cooling)}) and {eni} had room "
                f"for more (bound {self.bound:.2f}s, half the {self.cooldown:.2f}s cooldown): the "
                "build waited the cooldown out instead of assigning a new address")
        self._open(pod, at, node=node, instance_id=inst, eni=eni, cooling=cooling,
                   waited=round(at - since, 3), bound=self.bound, what=what)
        self._close(pod, at)  # an event: it stays in the run's violations

    def _starved(self, inst: str, at: float, run) -> tuple[str, list[str]] | None:
        """(an ENI with room, the cooling addresses) when every free address of the node is
        cooling and an ENI holding one has room; else None."""
        # EC2's addresses as the ownership checker folds them, and when each address's pod
        # was deleted as the early-reuse checker does (a retried DEL from its sending).
        owned = run.checker(Ownership.kind)
        freed = run.checker(EarlyReuse.kind).freed
        per_eni = self.per_eni.get(inst)
        if not per_eni or any(p[0] == inst for p in owned.prefixes.values()):
            return None
        owner = {canonical_ip(ip): o for ip, o in owned.ips.items() if o[0] == inst}
        free = [ip for ip, (_, _, primary) in owner.items()
                if not primary and ip not in run.by_ip]
        if not free or any(at - max((t for _, t in freed.get(ip, ())), default=float("-inf"))
                           >= self.cooldown for ip in free):
            return None
        held: dict[str, int] = {}
        for _, eni, _ in owner.values():
            held[eni] = held.get(eni, 0) + 1
        roomy = sorted({owner[ip][1] for ip in free if held[owner[ip][1]] < per_eni})
        return (roomy[0], sorted(free)) if roomy else None
