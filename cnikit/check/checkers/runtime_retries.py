"""What the CNI spec (1.0.0) requires of a plugin under the runtime's retries.

The runtime's retries are client operations (`client` `cni-retry`, value `op`, `pod`, `ip`:
the pod's address from its first ADD; on `fail`: `error`, `code`, `status`, the plugin's
exit status, None when the plugin never answered: not found, timed out, the node gone):

  add-repeat         ADD again for a live sandbox (same container ID, netns, ifname):
                     answering an address other than the first (`answer`) is a violation:
                     the first stays allocated to nothing, and the pod's peers and the
                     runtime disagree on its address. An error is an answer the spec allows.
  check-after-repeat CHECK of that live sandbox after the repeated ADD (`checked_before`:
                     a CHECK before it passed): failing only after it is a violation, the
                     repeated ADD or its error path undid what the first ADD set up (ptp
                     rolls a failed ADD back with a DEL that frees the live pod's address).
                     A build whose CHECK fails before as well is not judged on it.
  del-replayed       DEL of a deleted sandbox again, with its old prevResult (`held_by`:
                     the live pods that hold its address by then, cilium #10065)
  del-empty-netns    DEL with an empty CNI_NETNS (VPC CNI #1939)
  del-after-restart  DEL retried after the node's daemon came back (#2048, #2331)
                     These three must succeed: "Plugins should generally complete a DEL
                     action without error even if some resources are missing". A failure
                     the plugin answered is a violation; one where it never answered is the
                     kit's (not judged).
  del-daemon-down    DEL while the node's daemon is down: a build may fail it (the runtime
                     retries) or answer success from prevResult (upstream since #2350):
                     recorded, not judged.
  del-given-up       a DEL the runtime gave up on (its namespace then removed): recorded.

A DEL that frees what another sandbox holds (a replayed DEL freeing by address) takes a live
pod's address: reachability sees the pod go dark, shared-ip the next pod given it. Older
histories record a failed replayed DEL as `client` `fail` `pod-delete-retry` (ip-reuse-cooldown,
no exit status): judged like `del-replayed` when the plugin's own error is in it.
"""

from __future__ import annotations

from cnikit.check.checkers.base import Checker, canonical_ip

RETRY = "cni-retry"
# DELs every correct plugin answers with success.
MUST_SUCCEED = {
    "del-replayed": "a DEL of a sandbox already deleted (what it would remove is gone)",
    "del-empty-netns": "a DEL with an empty CNI_NETNS (the spec allows it for DEL)",
    "del-after-restart": "the runtime's DEL retried after the node's daemon came back",
}
LEGACY_RETRY = "pod-delete-retry"


class RuntimeRetries(Checker):
    """A DEL that must succeed and failed, a repeated ADD answered with another IP, or one
    that broke its live sandbox (CHECK)."""

    kind = "runtime-retry"
    order = 30
    colour, legend = "#7e1b4d", "a CNI retry answered wrongly"

    def step(self, e: dict, state) -> None:
        if e["process"] != "client":
            return
        f, v, at = e["f"], e["value"] or {}, e["time"]
        if f == LEGACY_RETRY and e["type"] == "fail":
            error = str(v.get("error") or "")
            if "failed (code" in error:  # the plugin's own error answer (cnikit.fabric.cni)
                self._instant(v.get("pod") or "?", at, op="del-replayed", ip=v.get("ip"),
                              error=error, what=f"{MUST_SUCCEED['del-replayed']} failed: {error}")
            return
        if f != RETRY:
            return
        op, pod = v.get("op"), v.get("pod") or "?"
        if op == "add-repeat" and e["type"] == "ok":
            answer, first = v.get("answer"), v.get("ip")
            if answer and first and canonical_ip(answer) != canonical_ip(first):
                self._instant(pod, at, op=op, ip=first, answer=answer,
                              what=f"a repeated ADD of the same sandbox answered {answer}; its "
                                   f"first ADD answered {first}")
        elif op == "check-after-repeat" and e["type"] == "fail" and v.get("checked_before") \
                and v.get("status") is not None:
            self._instant(pod, at, op=op, ip=v.get("ip"), error=v.get("error"),
                          code=v.get("code"),
                          what=f"a CHECK of the live sandbox passed before its ADD was repeated "
                               f"and fails after it: exit status {v.get('status')}, code "
                               f"{v.get('code')}: {v.get('error')}")
        elif op in MUST_SUCCEED and e["type"] == "fail" and v.get("status") is not None:
            held = v.get("held_by") or []
            also = f" (its address is held by {', '.join(held)} now)" if held else ""
            self._instant(pod, at, op=op, ip=v.get("ip"), error=v.get("error"),
                          code=v.get("code"),
                          what=f"{MUST_SUCCEED[op]} failed{also}: exit status "
                               f"{v.get('status')}, code {v.get('code')}: {v.get('error')}")

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.seen: set[tuple[str, str]] = set()  # (pod, op) judged already

    def _instant(self, pod: str, at: float, **detail) -> None:
        # One violation per pod and kind of retry: an act, not a state that lasts.
        if (pod, detail.get("op")) in self.seen:
            return
        self.seen.add((pod, detail.get("op")))
        self._open(pod, at, pod=pod, **detail)
        self._close(pod, at)

    @classmethod
    def describe(cls, v: dict, pods: dict[str, dict]) -> dict:
        d = v.get("detail") or {}
        return {"pod": d.get("pod") or v["subject"], "ip": d.get("ip"), "what": d.get("what")}

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str:
        d = v.get("detail") or {}
        if d.get("op") == "add-repeat":
            return f"a repeated ADD gave pod {d.get('pod')} a second IP ({d.get('answer')})"
        if d.get("op") == "check-after-repeat":
            return f"a repeated ADD broke pod {d.get('pod')}'s sandbox (its CHECK fails)"
        return f"the runtime's {d.get('op')} of pod {d.get('pod')} failed"

    @classmethod
    def sentence(cls, v: dict, say) -> str:
        d = v.get("detail") or {}
        return f"{d.get('what') or cls.symptom(v, d.get('ip'))} {say.span}{say.root}"
