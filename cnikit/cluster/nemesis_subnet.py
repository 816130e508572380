"""The nemesis's acts on a subnet's address space, as another tenant of it: addresses taken
one in every free /28 (a fragmented subnet), a subnet CIDR reservation made."""

from __future__ import annotations

import ipaddress

from cnikit.cluster.nemesis_log import INFO

PREFIX_LEN = 28
# Addresses one ENI of the tenant holds besides its primary (EC2's limit for an ENI that is
# not attached to an instance, cnikit.cloud.limits.UNATTACHED).
PER_ENI = 49


class SubnetActs:
    """A mixin of Nemesis (its `cloud`, its other principal's client and its log)."""

    def nodes_subnet(self) -> str:
        """The subnet of the run's nodes: node 0's primary ENI's (a cloud may hold other
        runs' VPCs: a pytest session's clusters share one)."""
        if self.daemons is None:
            raise ValueError("this nemesis has no nodes: name the subnet")
        instance = self.daemons.instance_id(0)
        for e in self.cloud.gate.owners().enis.values():
            if e.instance_id == instance and e.device_index == 0:
                return e.subnet_id
        raise ValueError(f"node 0's instance {instance} has no primary ENI in EC2")

    def whole_free_blocks(self, subnet_id: str) -> list[ipaddress.IPv4Network]:
        """The /28s of the subnet EC2 could delegate now: inside its usable range, none of
        their addresses held by any ENI (addresses and prefixes, as the gate's owners)."""
        c = self.other_client()
        cidr = c.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["CidrBlock"]
        net = ipaddress.IPv4Network(cidr)
        held: set[int] = set()
        for e in self.cloud.gate.owners().enis.values():
            if e.subnet_id == subnet_id:
                held.update(int(ipaddress.IPv4Address(ip)) for ip in e.ips)
                for p in e.prefixes:
                    block = ipaddress.IPv4Network(p)
                    held.update(range(int(block.network_address),
                                      int(block.broadcast_address) + 1))
        first, last = int(net.network_address) + 4, int(net.broadcast_address) - 1
        return [b for b in net.subnets(new_prefix=PREFIX_LEN)
                if first <= int(b.network_address) and int(b.broadcast_address) <= last
                and not any(v in held for v in range(int(b.network_address),
                                                     int(b.broadcast_address) + 1))]

    def fragment_subnet(self, subnet_id: str | None = None) -> dict:
        """Another tenant takes one address in the middle of every /28 of the subnet that is
        whole free (on ENIs of its own, made in the subnet), so no /28 is left to delegate
        while nearly every address stays free (upstream #2749, #3264). Returns the subnet,
        the tenant's ENIs and the addresses taken."""
        subnet_id = subnet_id or self.nodes_subnet()
        target = {"subnet": subnet_id}

        def act() -> dict:
            c = self.other_client()
            ips = [str(b[len(list(b)) // 2]) for b in self.whole_free_blocks(subnet_id)]
            enis = []
            for i in range(0, len(ips), PER_ENI):
                eni = c.create_network_interface(
                    SubnetId=subnet_id, Description="another tenant of the subnet")[
                    "NetworkInterface"]["NetworkInterfaceId"]
                enis.append(eni)
                # its primary (the lowest free address) may land in a free /28 too, never
                # on a middle address: a free /28's first address is lower
                c.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                              PrivateIpAddresses=ips[i:i + PER_ENI])
            return {"subnet": subnet_id, "enis": enis, "ips": ips}

        done = self.attempt("ec2-fragment-subnet", target, act, principal="other")
        self.record(INFO, "ec2-fragment-subnet", {**target, "enis": done["enis"],
                                                  "ips": done["ips"]}, principal="other")
        return done

    def reserve_cidr(self, cidr: str, kind: str = "explicit",
                     subnet_id: str | None = None) -> str:
        """Another principal makes a subnet CIDR reservation (CreateSubnetCidrReservation) of
        `kind` ("explicit" or "prefix"); returns its id."""
        subnet_id = subnet_id or self.nodes_subnet()
        target = {"subnet": subnet_id, "cidr": cidr, "type": kind}
        made = self.attempt("ec2-reserve-cidr", target, lambda: self.other_client()
                            .create_subnet_cidr_reservation(SubnetId=subnet_id, Cidr=cidr,
                                                            ReservationType=kind),
                            principal="other")
        rid = made["SubnetCidrReservation"]["SubnetCidrReservationId"]
        self.record(INFO, "ec2-reserve-cidr", {**target, "reservation": rid}, principal="other")
        return rid

    def tag_subnet(self, subnet_id: str, tags: dict[str, str] | None = None,
                   untag: tuple[str, ...] = ()) -> None:
        """An operator sets `tags` on a subnet and removes the keys `untag` (CreateTags,
        DeleteTags), as when a subnet is taken out of subnet discovery while nodes run
        (cilium #32346)."""
        target = {"subnet": subnet_id, "tags": dict(tags or {}), "untag": list(untag)}

        def act() -> None:
            c = self.other_client()
            if tags:
                c.create_tags(Resources=[subnet_id],
                              Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
            if untag:
                c.delete_tags(Resources=[subnet_id], Tags=[{"Key": k} for k in untag])

        self.attempt("ec2-tag-subnet", target, act, principal="other")
        self.record(INFO, "ec2-tag-subnet", target, principal="other")
