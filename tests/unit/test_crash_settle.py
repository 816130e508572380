"""After a crash point: what the crashed call made is judged without assuming which address
or ENI the build hands out next (cnikit.scenarios.common.settles_after_crash). A stand-in
Ctx: the helper only adds and deletes pods and reads how many the node takes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cnikit.scenarios.common import settles_after_crash
from cnikit.scenarios.engine import Liveness


class Ctx:
    """A node whose build hands out addresses that are never the crashed call's."""

    eni_capacity = 9

    def __init__(self, max_pods: int):
        self.max_pods = max_pods
        self.pods: list = []
        self.adapted: list[str] = []
        self.steps: list[str] = []
        self._next = 10

    def pods_on(self, node):
        return list(self.pods)

    def room(self, node):
        return self.max_pods - len(self.pods)

    def require_pod(self, node, retry_for=None):
        self._next += 1
        self.pods.append(SimpleNamespace(ip=f"10.0.1.{self._next}"))
        return self.pods[-1]

    def delete_pod(self, pod):
        self.pods.remove(pod)

    def wait_reconciles(self, node, count):
        pass

    def run_seconds(self, seconds):
        return seconds

    def adapt(self, what):
        self.adapted.append(what)

    def step(self, title, **focus):
        self.steps.append(title)


def never():
    return None


def test_a_full_node_that_never_picked_the_crashed_address_is_no_liveness_failure():
    ctx = Ctx(max_pods=5)
    settles_after_crash(ctx, 0, "eni-1", never, "the assigned addresses", lambda: {})
    assert ctx.adapted and "holds all 5 pods" in ctx.adapted[0]
    assert "after the restart the assigned addresses were kept spare" in ctx.steps


def test_a_node_with_room_whose_two_enis_of_pods_never_reached_it_is():
    ctx = Ctx(max_pods=100)
    with pytest.raises(Liveness, match="neither used by a pod nor given back"):
        settles_after_crash(ctx, 0, "eni-1", never, "the assigned addresses", lambda: {})
    assert len(ctx.pods) == 2 * Ctx.eni_capacity and not ctx.adapted
