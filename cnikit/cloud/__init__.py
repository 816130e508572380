"""Embedded EC2: moto (or LocalStack) behind the EC2 gate.

    from cnikit.cloud import Cloud
    cloud = Cloud.start(ec2="moto")
    topo = cloud.bootstrap(nodes=3, instance_type="m5.large")
    cloud.gate.owners()
    cloud.stop()

See docs/architecture.md for the contract; gate/__init__.py for how the gate works.

The names below are imported when first used: a module that needs only `cnikit.cloud.limits`
(the scenario registry, every CLI command) does not pay for moto, boto3 and aiohttp (about
0.8 s of CPU in each `cnikit` process that never starts an EC2).
"""

from __future__ import annotations

import importlib

from cnikit.cloud.botocore_data import share_parsed_data

share_parsed_data()  # before moto's EC2 models are imported: they parse at import

_LAZY = {
    "Cloud": "cnikit.cloud.cloud",
    "Instance": "cnikit.cloud.cloud",
    "Topology": "cnikit.cloud.cloud",
    "EniInfo": "cnikit.cloud.ownership",
    "Owner": "cnikit.cloud.ownership",
    "OwnershipSnapshot": "cnikit.cloud.ownership",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
