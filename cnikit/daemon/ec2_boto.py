"""The real EC2 view: boto3 against AWS_ENDPOINT_URL_EC2 (the kit's gate, or anything EC2-shaped)."""

from __future__ import annotations

import time

import boto3
import botocore.config
import botocore.exceptions

from cnikit.daemon.apis import ApiError, EniView, InstanceInfo, Limits


def _view(ni: dict) -> EniView:
    att = ni.get("Attachment") or {}
    ips = [p["PrivateIpAddress"] for p in ni.get("PrivateIpAddresses", [])]
    primary = ni.get("PrivateIpAddress") or (ips[0] if ips else "")
    ips = [primary] + [ip for ip in ips if ip != primary] if primary else ips
    return EniView(
        eni_id=ni["NetworkInterfaceId"],
        mac=ni.get("MacAddress", ""),
        device_index=att.get("DeviceIndex") if att.get("InstanceId") else None,
        primary_ip=primary,
        ips=ips,
        prefixes=[p["Ipv4Prefix"] for p in ni.get("Ipv4Prefixes", [])],
        subnet_id=ni.get("SubnetId", ""),
        attachment_id=att.get("AttachmentId"),
        instance_id=att.get("InstanceId"),
        tags={t["Key"]: t["Value"] for t in ni.get("TagSet", [])},
    )


class Boto3Ec2:
    def __init__(self, endpoint: str | None, region: str, scale: float = 1.0):
        cfg = botocore.config.Config(
            retries={"max_attempts": 2, "mode": "standard"},
            connect_timeout=2, read_timeout=10, max_pool_connections=4,
        )
        self._c = boto3.client(
            "ec2", endpoint_url=endpoint, region_name=region, config=cfg,
            aws_access_key_id="testing", aws_secret_access_key="testing",
        ) if endpoint else boto3.client("ec2", region_name=region, config=cfg)
        self._scale = scale

    def _call(self, op: str, **kw) -> dict:
        try:
            return getattr(self._c, op)(**kw)
        except botocore.exceptions.ClientError as e:
            err = e.response.get("Error", {})
            raise ApiError(f"{op}: {err.get('Code')}: {err.get('Message')}",
                           err.get("Code") or "ClientError") from None
        except (botocore.exceptions.BotoCoreError, OSError) as e:
            raise ApiError(f"{op}: {e}", type(e).__name__) from None

    def describe_instance(self, instance_id: str) -> InstanceInfo:
        r = self._call("describe_instances", InstanceIds=[instance_id])
        try:
            inst = r["Reservations"][0]["Instances"][0]
        except (KeyError, IndexError):
            raise ApiError(f"instance {instance_id} not found", "InvalidInstanceID.NotFound") from None
        primary = next((n for n in inst.get("NetworkInterfaces", [])
                        if n.get("Attachment", {}).get("DeviceIndex") == 0), {})
        return InstanceInfo(
            instance_id=instance_id,
            instance_type=inst["InstanceType"],
            subnet_id=inst.get("SubnetId") or primary.get("SubnetId", ""),
            security_groups=[g["GroupId"] for g in inst.get("SecurityGroups", [])],
            primary_eni_id=primary.get("NetworkInterfaceId", ""),
            primary_ip=inst.get("PrivateIpAddress", ""),
        )

    def instance_limits(self, instance_type: str) -> Limits:
        r = self._call("describe_instance_types", InstanceTypes=[instance_type])
        try:
            net = r["InstanceTypes"][0]["NetworkInfo"]
        except (KeyError, IndexError):
            raise ApiError(f"unknown instance type {instance_type}", "InvalidInstanceType") from None
        return Limits(net["MaximumNetworkInterfaces"], net["Ipv4AddressesPerInterface"])

    def describe_enis(self, instance_id: str) -> list[EniView]:
        r = self._call("describe_network_interfaces",
                       Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])
        return [_view(n) for n in r.get("NetworkInterfaces", [])]

    def describe_eni(self, eni_id: str) -> EniView | None:
        try:
            r = self._call("describe_network_interfaces", NetworkInterfaceIds=[eni_id])
        except ApiError as e:
            if e.code == "InvalidNetworkInterfaceID.NotFound":
                return None
            raise
        nis = r.get("NetworkInterfaces", [])
        return _view(nis[0]) if nis else None

    def describe_tagged_enis(self, tag: str, value: str) -> list[EniView]:
        r = self._call("describe_network_interfaces",
                       Filters=[{"Name": f"tag:{tag}", "Values": [value]}])
        return [_view(n) for n in r.get("NetworkInterfaces", [])]

    def create_eni(self, subnet_id, security_groups, tags, secondary_ips) -> EniView:
        kw = {"SubnetId": subnet_id, "Description": "aws-K8S-cnikit",
              "TagSpecifications": [{"ResourceType": "network-interface",
                                     "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]}
        if security_groups:
            kw["Groups"] = security_groups
        if secondary_ips:
            kw["SecondaryPrivateIpAddressCount"] = secondary_ips
        return _view(self._call("create_network_interface", **kw)["NetworkInterface"])

    def attach_eni(self, eni_id, instance_id, device_index) -> str:
        r = self._call("attach_network_interface", NetworkInterfaceId=eni_id,
                       InstanceId=instance_id, DeviceIndex=device_index)
        return r["AttachmentId"]

    def detach_eni(self, attachment_id) -> None:
        self._call("detach_network_interface", AttachmentId=attachment_id, Force=True)

    def delete_eni(self, eni_id) -> None:
        # A detach completes asynchronously on real EC2: retry a few times, like upstream.
        for attempt in range(5):
            try:
                self._call("delete_network_interface", NetworkInterfaceId=eni_id)
                return
            except ApiError as e:
                if e.code == "InvalidNetworkInterfaceID.NotFound":
                    return
                if attempt == 4 or e.code not in ("InvalidParameterValue", "IncorrectState"):
                    raise
                time.sleep(0.2 * self._scale)

    def assign_ips(self, eni_id, count) -> list[str]:
        r = self._call("assign_private_ip_addresses", NetworkInterfaceId=eni_id,
                       SecondaryPrivateIpAddressCount=count)
        got = [p["PrivateIpAddress"] for p in r.get("AssignedPrivateIpAddresses", [])]
        if not got:
            raise ApiError(f"assign on {eni_id} returned no addresses", "EmptyAnswer")
        return got

    def unassign_ips(self, eni_id, ips) -> None:
        self._call("unassign_private_ip_addresses", NetworkInterfaceId=eni_id,
                   PrivateIpAddresses=list(ips))

    def assign_prefixes(self, eni_id, count) -> list[str]:
        r = self._call("assign_private_ip_addresses", NetworkInterfaceId=eni_id, Ipv4PrefixCount=count)
        got = [p["Ipv4Prefix"] for p in r.get("AssignedIpv4Prefixes", [])]
        if not got:
            raise ApiError(f"prefix assign on {eni_id} returned no prefixes", "EmptyAnswer")
        return got

    def unassign_prefixes(self, eni_id, prefixes) -> None:
        self._call("unassign_private_ip_addresses", NetworkInterfaceId=eni_id,
                   Ipv4Prefixes=list(prefixes))
