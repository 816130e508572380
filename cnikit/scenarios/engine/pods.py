"""Ctx's clients: pods added and deleted as a runtime would (a mixin of Ctx)."""

from __future__ import annotations

import time

from cnikit.check.history import CLIENT
from cnikit.cluster import retries
from cnikit.scenarios.engine.outcomes import (
    SCENARIO,
    Liveness,
    Precondition,
)


class Pods:
    """The clients: pods added through the target's plugin and deleted."""

    # -- clients ---------------------------------------------------------------------------

    def add_pod(self, node: int, retry_for: float = 10.0, poll: float = 0.1):
        """ADD through the target's plugin as a runtime would, retrying failures like kubelet
        does. Returns the Pod, or None when the build gave no IP in time, or when the node
        already runs its max_pods (the scheduler sends no pod to a full node)."""
        from cnikit.errors import CnikitError

        if self.room(node) <= 0:
            self.history.info(SCENARIO, "node-full", {"node": node,
                                                      "max_pods": self.max_pods_of(node)})
            return None
        name = f"pod-{next(self._pod_numbers)}"
        end = time.monotonic() + retry_for
        while True:
            try:
                pod = self.cluster.add_pod(node, name)
            except CnikitError as e:
                self.last_add_error[node] = str(e)[:300]
                self.history.append(CLIENT, "fail", "pod-add", {"pod": name, "node": node,
                                                                 "error": str(e)[:200]})
                if time.monotonic() >= end:
                    self.add_failures += 1
                    return None
                self.check_progress()
                time.sleep(poll)
                continue
            pod.k8s_name = name
            pod.added_at = time.monotonic()  # when its ADD came back (scenarios time races)
            self.pods[pod.name] = pod
            return pod

    def require_pod(self, node: int, retry_for: float = 10.0):
        """A pod any correct build must give an IP (no fault active, room in EC2): none
        within `retry_for` is a liveness violation of the build."""
        if self.room(node) <= 0:
            raise Precondition(f"room for one more pod on node {node} "
                               f"(max_pods {self.max_pods_of(node)})")
        pod = self.add_pod(node, retry_for=retry_for)
        if pod is None:
            raise Liveness(f"node {node}", f"a pod got no IP within {retry_for:g}s",
                           {"last CNI error": self.last_add_error.get(node, "-")})
        return pod

    def delete_pod(self, pod, netns_path: str | None = None) -> Exception | None:
        """DEL and the namespace removed (the runtime gives up on a DEL that fails: its error
        is recorded and returned). `netns_path` "": a runtime that lost the namespace."""
        self.pods.pop(pod.name, None)
        try:
            self.cluster.delete_pod(pod, netns_path)
        except Exception as e:  # noqa: BLE001 - a failing DEL is recorded, the pod is gone anyway
            self.history.append(CLIENT, "fail", "pod-delete", {"pod": pod.name, "error": str(e)[:200]})
            return e
        return None

    # -- the runtime's retries (cnikit.cluster.retries; judged by the runtime-retry checker)

    def repeat_add(self, pod) -> str | None:
        """ADD again for a live pod's sandbox: the IP answered, or None."""
        return self.cluster.repeat_add(pod)

    def replay_delete(self, pod) -> bool:
        """DEL of a deleted pod's sandbox again, with its old prevResult and netns path (its
        address may be a new pod's by now). True if it answered success."""
        return self.cluster.replay_delete(pod)

    def delete_without_netns(self, pod) -> bool:
        """The pod deleted with an empty CNI_NETNS (the runtime lost its namespace: VPC CNI
        #1939); the spec lets DEL be called so and requires it to succeed."""
        self.pods.pop(pod.name, None)
        return self.cluster.delete_without_netns(pod)

    def try_delete(self, pod, op: str) -> bool:
        """A DEL of a live pod's sandbox that keeps the pod (the runtime keeps a sandbox
        until its DEL succeeds), e.g. while the node's daemon is down: op names it. True if
        it answered success (the runtime then removes the namespace: `delete_pod` after)."""
        return self.cluster.try_delete(pod, op) is None

    def retry_delete(self, pod, op: str, retry_for: float = 10.0, poll: float = 0.2) -> bool:
        """The runtime's DEL retried until it succeeds or `retry_for` has passed, then the
        namespace removed either way; one operation `op` with the attempts and the last
        error. True if a DEL succeeded."""
        end = time.monotonic() + retry_for
        attempts = 0
        self.cluster.fabric.del_in_flight(pod, done=False)
        while True:
            attempts += 1
            try:
                pod.cni.delete()
                error = None
            except Exception as e:  # noqa: BLE001 - retried, then recorded
                error = e
            if error is None or time.monotonic() >= end:
                break
            time.sleep(poll)  # the runtime's back-off between retries, not a wait on a state
        retries.record(self.history, op, pod, error, attempts=attempts)
        # The sandbox goes now: its DEL succeeded, or the runtime gave up on it.
        self.pods.pop(pod.name, None)
        self.cluster.delete_pod(pod, send_del=False)
        if error is not None:
            self.history.append(CLIENT, "fail", "pod-delete",
                                {"pod": pod.name, "error": str(error)[:200]})
        return error is None

    def pods_on(self, node: int) -> list:
        return [p for p in self.pods.values() if p.node.index == node]

    @property
    def eni_capacity(self) -> int:
        """Secondary addresses one ENI of the nodes' instance type holds (AWS's figures)."""
        from cnikit.cloud.limits import FALLBACK

        return FALLBACK[self.instance_type].ipv4_per_eni - 1

    def max_pods_of(self, node: int) -> int:
        """Pods the node takes, by its instance type."""
        return self.node_max_pods[node] if node < len(self.node_max_pods) else self.max_pods

    def room(self, node: int) -> int:
        """How many more pods the node takes (its max_pods less its live pods)."""
        return self.max_pods_of(node) - len(self.pods_on(node))

