"""The runtime's retries of CNI calls, as client operations of the run's history.

A container runtime repeats CNI calls (kubelet and containerd resend an ADD whose answer they
lost, replay a DEL with the sandbox's old prevResult, send a DEL with an empty CNI_NETNS,
retry DELs the daemon could not answer, give up on some). Each is one `client` `cni-retry`
entry (cnikit.check.checkers.runtime_retries says which ops are judged and how): `ok`, or
`fail` with the plugin's error, CNI code and exit status (None: the plugin never answered).
CniCluster's methods of the same names use these; so do the scenarios' Ctx and the pytest
fixture `cluster`.
"""

from __future__ import annotations

from cnikit.check.checkers.runtime_retries import RETRY
from cnikit.check.history import CLIENT


def record(history, op: str, pod, error: Exception | None, **value) -> None:
    v = {"op": op, "pod": pod.name, "node": pod.node.index, "ip": pod.ip, **value}
    if error is not None:
        v.update(error=str(error)[:200], code=getattr(error, "code", None),
                 status=getattr(error, "status", None))
    history.append(CLIENT, "fail" if error is not None else "ok", RETRY, v)


def repeat_add(history, pod) -> str | None:
    """ADD again for a live pod's sandbox (same CNI_CONTAINERID, netns and ifname), as a
    runtime does when it lost the first answer. Returns the IP answered, or None.

    The sandbox is CHECKed before and after (`check-after-repeat`, with whether the CHECK
    before passed): a plugin whose error path rolls back with a DEL (ptp does) frees the
    live pod's address, and only its CHECK tells so at once; a new pod given that address
    would show it later, if ever."""
    first = pod.cni.result
    before = _check(pod)
    answer = None
    try:
        got = pod.cni.add(pod_nl=pod.ns.nl)
    except Exception as e:  # noqa: BLE001 - recorded: an error is the plugin's answer
        pod.cni.result = first
        record(history, "add-repeat", pod, e)
    else:
        answer = got.ips[0].split("/")[0]
        record(history, "add-repeat", pod, None, answer=answer)
    if before is not NO_CHECK:
        record(history, "check-after-repeat", pod, _check(pod), checked_before=before is None,
               **({"before": str(before)[:200]} if before is not None else {}))
    return answer


NO_CHECK = object()  # the network's cniVersion has no CHECK (before 0.4.0)


def _check(pod):
    """CHECK of a live sandbox: None when it passed, else the error (NO_CHECK: none)."""
    if not pod.cni.checks:
        return NO_CHECK
    try:
        pod.cni.check()
    except Exception as e:  # noqa: BLE001 - recorded: an error is the plugin's answer
        return e
    return None


def replay_delete(history, pod, live_pods) -> bool:
    """DEL of a deleted pod's sandbox again, with its old prevResult and netns path, as a
    runtime replays one (`live_pods`: the pods now, to name who holds its address). True if
    it answered success."""
    if pod.cni is None:
        return True
    holders = sorted(p.name for p in live_pods if p.ip == pod.ip and p is not pod)
    try:
        pod.cni.delete()
    except Exception as e:  # noqa: BLE001 - recorded and judged
        record(history, "del-replayed", pod, e, held_by=holders)
        return False
    record(history, "del-replayed", pod, None, held_by=holders)
    return True


def try_delete(history, pod, op: str) -> Exception | None:
    """A DEL of a live pod's sandbox that keeps the pod (a runtime keeps a sandbox until its
    DEL succeeds), recorded as `op`. Returns the error, None on success."""
    try:
        pod.cni.delete()
    except Exception as e:  # noqa: BLE001 - recorded; whether judged depends on op
        record(history, op, pod, e)
        return e
    record(history, op, pod, None)
    return None
