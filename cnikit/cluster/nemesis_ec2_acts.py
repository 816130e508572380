"""The nemesis's acts on EC2 from outside the build: another tenant of the subnet, an
operator, another principal of the account (its console, another node's sweep)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from cnikit.cloud.audit import OTHER_PRINCIPAL_KEY
from cnikit.cluster.nemesis_log import END, FAIL, INFO, START, error_text

# Another principal of the account (an operator's console, another node's sweep): its own
# credentials, so the gate's audit records its calls under its access key (`principal`).
OTHER_PRINCIPAL = {"AWS_ACCESS_KEY_ID": OTHER_PRINCIPAL_KEY, "AWS_SECRET_ACCESS_KEY": "other"}
# The tag the reference daemon (and upstream's) puts on the ENIs it creates.
CLUSTER_TAG = "cluster.k8s.amazonaws.com/name"


class Ec2Acts:
    """A mixin of Nemesis (its `cloud` and its log): each act on EC2 is one operation."""

    def _client(self):
        if self.cloud is None:
            raise ValueError("this nemesis has no EC2")
        return self.cloud.client()

    def _holder(self, ip: str) -> str | None:
        owner = self.cloud.gate.owners().ips.get(ip)
        return owner.eni_id if owner else None

    def take_ips(self, eni: str, ips: list[str]) -> None:
        """Another tenant of the subnet takes these addresses (assigned to `eni` in EC2)."""
        target = {"eni": eni, "ips": list(ips)}
        self.attempt("ec2-assign-elsewhere", target, lambda: self._client()
                  .assign_private_ip_addresses(NetworkInterfaceId=eni,
                                               PrivateIpAddresses=list(ips)))
        self.record(INFO, "ec2-assign-elsewhere", target)

    def take_on_release(self, eni: str, taker: str):
        """Arm a take on release (cnikit.cluster.take_on_release): whatever a release from
        `eni` frees goes to `taker` once the release took effect, before its answer leaves.
        Returns it (`taken`, `close()`; a context manager)."""
        from cnikit.cluster.take_on_release import TakeOnRelease

        return TakeOnRelease(self, eni, taker)

    def other_client(self):
        """An EC2 client of another principal of the account (OTHER_PRINCIPAL's keys)."""
        if self.cloud is None:
            raise ValueError("this nemesis has no EC2")
        with self._other_lock:
            if self._other is None:
                import boto3
                import botocore.config

                self._other = boto3.client(
                    "ec2", endpoint_url=self.cloud.endpoint, region_name=self.cloud.region,
                    aws_access_key_id=OTHER_PRINCIPAL["AWS_ACCESS_KEY_ID"],
                    aws_secret_access_key=OTHER_PRINCIPAL["AWS_SECRET_ACCESS_KEY"],
                    config=botocore.config.Config(retries={"max_attempts": 1,
                                                           "mode": "standard"},
                                                  connect_timeout=5, read_timeout=30))
            return self._other

    def unassign(self, ip: str, other: bool = False) -> str:
        """UnassignPrivateIpAddresses of ip from whichever ENI holds it; returns that ENI.
        `other`: by another principal (an operator's console, upstream 377/391)."""
        eni = self._holder(ip)
        target = {"eni": eni, "ips": [ip]}
        principal = "other" if other else None

        def act():
            if eni is None:
                raise ValueError(f"{ip} is not assigned to any ENI")
            client = self.other_client() if other else self._client()
            client.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ip])

        self.attempt("ec2-unassign", target, act, principal=principal)
        self.record(INFO, "ec2-unassign", target, principal=principal)
        return eni

    def sweep_enis(self, tag: str = CLUSTER_TAG, value: str | None = None,
                   keep: Iterable[str] = ()) -> list[str]:
        """Another principal's leaked-ENI sweep (upstream 1099: another node's sweep): every
        "available" ENI carrying `tag` (with `value`, if given) deleted, except `keep`.
        Returns the ENIs deleted (one EC2 may have attached or deleted meanwhile is
        skipped: the sweep is a race by nature)."""
        value_filter = [value] if value is not None else ["*"]
        keep = set(keep)
        target = {"tag": tag, **({"value": value} if value is not None else {})}

        def act() -> list[str]:
            c = self.other_client()
            found = c.describe_network_interfaces(Filters=[
                {"Name": f"tag:{tag}", "Values": value_filter}])["NetworkInterfaces"]
            gone = []
            for ni in found:
                eni = ni["NetworkInterfaceId"]
                if ni.get("Status") != "available" or ni.get("Attachment") or eni in keep:
                    continue
                try:
                    c.delete_network_interface(NetworkInterfaceId=eni)
                except Exception:  # noqa: BLE001 - attached or gone meanwhile: not swept
                    continue
                gone.append(eni)
            return gone

        gone = self.attempt("ec2-sweep-enis", target, act, principal="other")
        self.record(INFO, "ec2-sweep-enis", {**target, "enis": gone}, principal="other")
        return gone

    def detach_eni(self, eni: str) -> None:
        """Another principal detaches an ENI out of band (Force), its addresses with it."""
        target = {"eni": eni}

        def act() -> None:
            c = self.other_client()
            ni = c.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"]
            att = (ni[0].get("Attachment") or {}) if ni else {}
            if not att.get("AttachmentId"):
                raise ValueError(f"{eni} is not attached")
            target["instance_id"] = att.get("InstanceId")
            c.detach_network_interface(AttachmentId=att["AttachmentId"], Force=True)

        self.attempt("ec2-detach", target, act, principal="other")
        self.record(INFO, "ec2-detach", target, principal="other")

    def assign(self, ip: str, eni: str, allow_reassignment: bool = False) -> None:
        """AssignPrivateIpAddresses of ip to eni (moving it from its holder if allowed)."""
        target = {"eni": eni, "ips": [ip], "from": self._holder(ip)}
        self.attempt("ec2-assign", target, lambda: self._client().assign_private_ip_addresses(
            NetworkInterfaceId=eni, PrivateIpAddresses=[ip],
            AllowReassignment=allow_reassignment), allow_reassignment=allow_reassignment)
        self.record(INFO, "ec2-assign", target, allow_reassignment=allow_reassignment)

    def reassign(self, ip: str, eni: str) -> None:
        self.assign(ip, eni, allow_reassignment=True)

    def take_held(self, ip: str, eni: str) -> str:
        """EC2 moves an address a pod holds to `eni` (AllowReassignment): the pod is dark by
        the nemesis's own act until give_back(id). Recorded as a start before the act, so
        the checkers (cnikit.check.damage) excuse the holder's damage from its first sign;
        returns the operation's id."""
        fid = self.new_id("take")
        target = {"eni": eni, "ips": [ip], "from": self._holder(ip)}
        self.record(START, "ec2-take-held", target, id=fid)
        try:
            self._client().assign_private_ip_addresses(
                NetworkInterfaceId=eni, PrivateIpAddresses=[ip], AllowReassignment=True)
        except Exception as e:
            self.record(FAIL, "ec2-take-held", target, id=fid, error=error_text(e))
            self.record(END, "ec2-take-held", target, id=fid, by="failed")
            raise
        return fid

    def delete_eni(self, eni: str, wait: float = 30.0) -> None:
        """An operator (or another node's leaked-ENI sweep) detaches the ENI, forced, and
        deletes it once EC2 lets it (VPC CNI #1008): one info entry ec2-delete-eni. A Delete
        answered "in use" while the detach completes is tried again on EC2's next change,
        for up to `wait` seconds."""
        owner = self.cloud.gate.owners().enis.get(eni) if self.cloud is not None else None
        target = {"eni": eni, "instance_id": owner.instance_id if owner else None}

        def act():
            c = self._client()
            ni = c.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
            att = ni.get("Attachment") or {}
            if att.get("AttachmentId") and att.get("Status") in ("attached", "attaching"):
                c.detach_network_interface(AttachmentId=att["AttachmentId"], Force=True)
            deadline = time.monotonic() + wait
            while True:
                version = self.cloud.gate.owners().version
                try:
                    c.delete_network_interface(NetworkInterfaceId=eni)
                    return
                except Exception as e:  # botocore's ClientError
                    code = getattr(e, "response", {}).get("Error", {}).get("Code")
                    if code not in ("InvalidNetworkInterface.InUse", "IncorrectState") \
                            or time.monotonic() >= deadline:
                        raise
                self.cloud.gate.wait_change(version, max(0.05, min(1.0, deadline
                                                                   - time.monotonic())))

        self.attempt("ec2-delete-eni", target, act)
        self.record(INFO, "ec2-delete-eni", target)

    def give_back(self, fid: str, eni: str) -> None:
        """The address of take_held(id) assigned to `eni` again (the holder's node's ENI);
        the operation ends once EC2 has it there."""
        started = self.started(fid)
        if started is None:
            raise ValueError(f"no address taken as {fid!r}")
        ip = started["target"]["ips"][0]
        self.attempt("ec2-take-held", started["target"], lambda: self._client()
                  .assign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ip],
                                               AllowReassignment=True), id=fid)
        self.record(END, "ec2-take-held", {**started["target"], "back_to": eni}, id=fid,
                    by="given-back")
