"""Embedded EC2: moto (or LocalStack) behind the EC2 gate.

    from cnikit.cloud import Cloud
    cloud = Cloud.start(ec2="moto")
    topo = cloud.bootstrap(nodes=3, instance_type="m5.large")
    cloud.gate.owners()
    cloud.stop()

See docs/architecture.md for the contract; gate.py for how the gate works.
"""

from cnikit.cloud.botocore_data import share_parsed_data

share_parsed_data()  # before moto's EC2 models are imported: they parse at import

from cnikit.cloud.cloud import Cloud, Instance, Topology  # noqa: E402
from cnikit.cloud.ownership import EniInfo, Owner, OwnershipSnapshot  # noqa: E402

__all__ = ["Cloud", "EniInfo", "Instance", "Owner", "OwnershipSnapshot", "Topology"]
