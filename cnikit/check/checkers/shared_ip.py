from __future__ import annotations

from cnikit.check.checkers.base import Checker, canonical_ip


class SharedIp(Checker):
    """No two pods hold the same IP: two pod-adds with one IP, or a probe answered by a pod
    other than the one probed."""

    kind = "shared-ip"
    order = 20
    colour, legend = "#2a6f6f", "IP shared by two pods"
    subject_names = "ip"

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.wrong: dict[str, set[tuple[str, str, str]]] = {}  # ip -> {(src, dst, by)}

    def step(self, e: dict, state) -> None:
        f, v, at = e["f"], e["value"] or {}, e["time"]
        touched: set[str] = set()
        if e["process"] == "prober" and f in ("wrong", "right"):
            pod = state.pods.get(v["dst"])
            if pod is None:
                return
            ip = pod["ip"]
            marks = self.wrong.setdefault(ip, set())
            if f == "wrong":
                marks.add((v["src"], v["dst"], v["by"]))
            else:
                for m in [m for m in marks if m[:2] == (v["src"], v["dst"])]:
                    marks.discard(m)
            touched.add(ip)
        elif e["process"] == "client" and e["type"] == "ok" and f in (
                "pod-add", "pod-kept", "pod-delete", "pod-deleting"):
            if f in ("pod-add", "pod-kept"):
                touched.add(canonical_ip(v["ip"]))
            else:
                for ip, marks in self.wrong.items():
                    if any(v.get("pod") in m for m in marks):
                        self.wrong[ip] = {m for m in marks if v.get("pod") not in m}
                        touched.add(ip)
                touched |= {ip for ip in self.open}
        for ip in touched:
            holders = sorted(state.by_ip.get(ip, ()))
            marks = self.wrong.get(ip, set())
            if len(holders) > 1 or marks:
                answered = sorted({m[2] for m in marks})
                self._open(ip, at, pods=holders, answered_by=answered,
                           evidence="probe answered by another pod" if marks else "pod-add")
            else:
                self._close(ip, at)

    # The subject is the IP; the pods holding it are in the detail.
    @classmethod
    def describe(cls, v: dict, pods: dict[str, dict]) -> dict:
        d = v.get("detail") or {}
        return {"pod": ",".join(d.get("pods", [])), "ip": v["subject"],
                "what": f"IP held by pods {', '.join(d.get('pods', []))} ({d.get('evidence')})"}

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str:
        return f"IP {ip} held by more than one pod"

    @classmethod
    def outcome(cls, ip: str | None, pods: list[str], symptom: str) -> str:
        return (f"{ip} was held by {len(pods) or 'more than one'} pods at once"
                + (f" ({', '.join(pods)})" if pods else ""))

    @classmethod
    def sentence(cls, v: dict, say) -> str:
        d = v.get("detail") or {}
        pods = ", ".join(d.get("pods") or []) or "?"
        s = f"IP {v.get('subject')} was given to more than one pod ({pods}) {say.span}"
        if d.get("answered_by"):
            s += f"; probes answered by {', '.join(d['answered_by'])}"
        return s + say.root
