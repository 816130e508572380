from __future__ import annotations

from cnikit.check.checkers.base import Checker


class NoIpv4Egress(Checker):
    """An IPv6 pod whose namespace routes IPv4 (its build gives it IPv4 egress through the
    node, as the VPC CNI's egress-cni does) reaches an IPv4 destination in the VPC, from its
    ADD on (cnikit.check.egress_probe). Upstream #3702: a stale host route left by a deleted
    pod took the return path of a new pod given the same egress address."""

    kind = "no-ipv4-egress"
    timed = True  # an answer made late by a stalled machine reads as silence
    order = 15
    colour, legend = "#e7298a", "IPv6 pod with no IPv4 egress"
    outcome_predicate = "lost their IPv4 egress"

    def step(self, e: dict, state) -> None:
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if e["process"] == "egress" and f in ("fail", "recover"):
            pod = v.get("pod")
            if f == "fail" and pod in state.pods:
                self._open(pod, at, ip=state.pods[pod].get("ip"),
                           what=f"no answer over IPv4 egress from the VPC at {v.get('anchor')}",
                           ever_answered=v.get("ever"))
            elif f == "recover":
                self._close(pod, at)
        elif e["process"] == "client" and e["type"] == "ok" and f in ("pod-delete",
                                                                        "pod-deleting"):
            self._close(v.get("pod"), at)

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str:
        return f"pod {v.get('subject')} ({ip}) had no IPv4 egress"
