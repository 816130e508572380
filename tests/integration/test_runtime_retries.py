"""The runtime's retries from the pytest fixtures: the `cluster` fixture repeats an ADD,
deletes with an empty CNI_NETNS and replays a DEL, each a cni-retry operation its history
records (the repeated ADD with the CHECK after it) and the `invariants` judge (cnikit.check.checkers.runtime_retries)."""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces")]


def test_the_runtimes_retries_from_the_fixtures(cluster, invariants):
    c = cluster(nodes=1, pods=1)
    pod = next(iter(c.pods.values()))
    assert c.repeat_add(pod) == pod.ip
    other = c.add_pod(0, "retried")
    assert c.delete_without_netns(other)
    assert c.replay_delete(other)
    ops = [(e["type"], e["value"]["op"]) for e in c.history.entries() if e["f"] == "cni-retry"]
    assert ops == [("ok", "add-repeat"), ("ok", "check-after-repeat"), ("ok", "del-empty-netns"),
                   ("ok", "del-replayed")]
    assert not invariants.violations()
