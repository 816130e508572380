from __future__ import annotations

from cnikit.check.cost.base import Calls, Finding, Rule

# Upstream's minimum ENI lifetime (ipamd's minENILifeTime, one minute): an ENI younger than
# this is never freed, since attaching one costs the account four calls and seconds of a
# node's time. In the run's compressed time (Calls.scale).
MIN_LIFETIME_S = 60.0


class EniChurn(Rule):
    """The build attached an ENI and freed it again within upstream's minimum ENI lifetime,
    with no pod ever on one of its addresses: a create, an attach, a detach and a delete
    for nothing, which in a loop (upstream #1451, #1775: WARM_ENI_TARGET=0 allocating and
    freeing the same ENI) burns the account's EC2 rate limit and the subnet's addresses."""

    kind = "eni-churn"
    why = "aws/amazon-vpc-cni-k8s#1451, #1775"

    def judge(self, calls: Calls) -> list[Finding]:
        bound = MIN_LIFETIME_S * calls.scale
        addresses: dict[str, set[str]] = {}
        attached: dict[str, tuple[float, str | None]] = {}  # eni -> (when, instance)
        churned: dict[str, list[tuple[str, float, float]]] = {}  # node -> [(eni, at, lived)]
        for r in calls.records:
            eni = r.get("eni_id")
            if not eni or eni in calls.touched:
                continue
            addresses.setdefault(eni, set()).update(r.get("ips") or ())
            if r["outcome"] != "ok":
                continue
            if r["action"] == "AttachNetworkInterface":
                attached[eni] = (r["time"], r.get("instance_id"))
            elif r["action"] == "DetachNetworkInterface" and eni in attached:
                at, instance = attached.pop(eni)
                lived = r["time"] - at
                if lived < bound and not addresses[eni] & calls.pod_ips:
                    node = calls.nodes.get(instance, instance or "?")
                    churned.setdefault(node, []).append((eni, at, lived))
        out = []
        for node, enis in churned.items():
            names = ", ".join(f"{eni} after {lived:.1f}s" for eni, _at, lived in enis)
            out.append(Finding(self.kind, node, len(enis), enis[0][1],
                               f"{node} freed {len(enis)} ENI(s) no pod used, sooner than "
                               f"upstream's minimum ENI lifetime ({bound:.1f}s): {names}"))
        return out
