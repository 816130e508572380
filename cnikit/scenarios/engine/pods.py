"""Ctx's clients: pods added and deleted as a runtime would (a mixin of Ctx)."""

from __future__ import annotations

import time

from cnikit.check.history import CLIENT
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
            self.history.info(SCENARIO, "node-full", {"node": node, "max_pods": self.max_pods})
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
            raise Precondition(f"room for one more pod on node {node} (max_pods {self.max_pods})")
        pod = self.add_pod(node, retry_for=retry_for)
        if pod is None:
            raise Liveness(f"node {node}", f"a pod got no IP within {retry_for:g}s",
                           {"last CNI error": self.last_add_error.get(node, "-")})
        return pod

    def delete_pod(self, pod) -> None:
        self.pods.pop(pod.name, None)
        try:
            self.cluster.delete_pod(pod)
        except Exception as e:  # noqa: BLE001 - a failing DEL is recorded, the pod is gone anyway
            self.history.append(CLIENT, "fail", "pod-delete", {"pod": pod.name, "error": str(e)[:200]})

    def pods_on(self, node: int) -> list:
        return [p for p in self.pods.values() if p.node.index == node]

    def room(self, node: int) -> int:
        """How many more pods the node takes (its max_pods less its live pods)."""
        return self.max_pods - len(self.pods_on(node))

