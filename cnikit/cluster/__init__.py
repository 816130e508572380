"""Orchestration, above every layer: the whole system on one machine.

    cni_cluster    CniCluster: EC2 (moto behind the gate), the fault IMDS, the fabric, and the
                   build under test (a cnikit.targets Target) on every node; the cluster owns
                   each node's daemon (kill, restart)
    cleanup_cli    `cnikit cleanup`: leftovers of dead runs (fabric and containers)

The run engine (cnikit.scenarios), the pytest fixtures (cnikit.testkit) and `cnikit up` sit
on top of this; nothing below imports it.
"""

from cnikit.cluster.cni_cluster import CniCluster, ec2_ips_of, state_root

__all__ = ["CniCluster", "ec2_ips_of", "state_root"]
