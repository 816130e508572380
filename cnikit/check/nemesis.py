"""The nemesis: faults done to EC2 through the gate, each recorded in the history as an
operation (invoke, then ok or fail) of process "nemesis". The checkers never read the
nemesis; they judge only what the clients and the prober observed against EC2's truth.

    nemesis = Ec2Nemesis(cloud, history)
    nemesis.unassign("10.0.1.7")                  # EC2 takes a pod's IP back
    nemesis.reassign("10.0.1.7", to_eni)          # ... and gives it to another ENI
"""

from __future__ import annotations

from cnikit.check.history import NEMESIS, History


class Ec2Nemesis:
    def __init__(self, cloud, history: History):
        self.cloud = cloud
        self.history = history

    def _holder(self, ip: str) -> str | None:
        owner = self.cloud.gate.owners().ips.get(ip)
        return owner.eni_id if owner else None

    def unassign(self, ip: str) -> str:
        """UnassignPrivateIpAddresses of ip from whichever ENI holds it; returns that ENI."""
        eni = self._holder(ip)
        with self.history.op("unassign", {"ip": ip, "eni": eni}, process=NEMESIS):
            if eni is None:
                raise ValueError(f"{ip} is not assigned to any ENI")
            self.cloud.client().unassign_private_ip_addresses(NetworkInterfaceId=eni,
                                                              PrivateIpAddresses=[ip])
        return eni

    def assign(self, ip: str, eni: str, allow_reassignment: bool = False) -> None:
        """AssignPrivateIpAddresses of ip to eni (moving it if allow_reassignment)."""
        with self.history.op("assign", {"ip": ip, "eni": eni, "from": self._holder(ip),
                                        "allow_reassignment": allow_reassignment},
                             process=NEMESIS):
            self.cloud.client().assign_private_ip_addresses(
                NetworkInterfaceId=eni, PrivateIpAddresses=[ip],
                AllowReassignment=allow_reassignment)

    def reassign(self, ip: str, eni: str) -> None:
        self.assign(ip, eni, allow_reassignment=True)
