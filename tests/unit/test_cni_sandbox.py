"""A pod sandbox whose node namespace is gone: the ADD is a CniError naming it, and no
plugin was started (the plugin runs in the node's namespace, entered for the fork)."""

from __future__ import annotations

import pytest

from cnikit.fabric.cni import CniError, CniSandbox

PTP_DIRS = ["/usr/lib/cni", "/opt/cni/bin"]


def test_a_node_namespace_that_is_gone_is_one_cni_error():
    sb = CniSandbox({"cniVersion": "1.0.0", "name": "gone", "type": "ptp"}, PTP_DIRS,
                    "c-gone", "/run/netns/cnikit-test-no-such-pod",
                    runner_ns="/run/netns/cnikit-test-no-such-node")
    with pytest.raises(CniError, match="cnikit-test-no-such-node is gone"):
        sb.add()
    assert sb.result is None
