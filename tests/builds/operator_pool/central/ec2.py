"""EC2's Query API (form-encoded POST, XML answers, SigV4) from the environment the kit gives
every build: AWS_ENDPOINT_URL_EC2, AWS_REGION and the credentials. Standard library only."""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

TIMEOUT = 5.0
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Ec2Error(Exception):
    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}")
        self.code = code


class Ec2:
    def __init__(self) -> None:
        self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.endpoint = (os.environ.get("AWS_ENDPOINT_URL_EC2")
                         or f"https://ec2.{self.region}.amazonaws.com").rstrip("/") + "/"

    def call(self, action: str, params: dict[str, str], tries: int = 6) -> ET.Element:
        """The answer's root element, namespaces stripped. Throttling is retried with a
        backoff; anything else is the caller's to judge (a mutation whose answer was lost
        may have happened: the next resync reads EC2)."""
        body = urllib.parse.urlencode({"Action": action, "Version": "2016-11-15", **params}).encode()
        for attempt in range(tries):
            root = self._post(body)
            code = root.findtext("Errors/Error/Code")
            if code is None:
                return root
            if code != "RequestLimitExceeded" or attempt == tries - 1:
                raise Ec2Error(code, root.findtext("Errors/Error/Message") or "")
            time.sleep(min(1.0, 0.05 * 2 ** attempt) * random.uniform(1.0, 2.0))
        raise AssertionError("unreachable")

    def _post(self, body: bytes) -> ET.Element:
        req = urllib.request.Request(self.endpoint, data=body, method="POST", headers=self._sign(body))
        try:
            with OPENER.open(req, timeout=TIMEOUT) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:  # EC2's errors come with an XML body
            raw = e.read()
        except OSError as e:
            raise Ec2Error("Unreachable", str(e)) from None
        try:
            root = ET.fromstring(raw)
        except ET.ParseError:
            raise Ec2Error("BadResponse", raw[:200].decode(errors="replace")) from None
        for el in root.iter():
            el.tag = el.tag.rsplit("}", 1)[-1]
        return root

    def _sign(self, body: bytes) -> dict[str, str]:
        """SigV4 headers: the gate tells the build's calls from others' by the key."""
        headers = {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
        key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if not (key_id and secret):
            return headers
        url = urllib.parse.urlsplit(self.endpoint)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        headers.update({"host": url.netloc, "x-amz-date": stamp})
        names = sorted(headers)
        canonical = "\n".join(["POST", url.path or "/", "", *(f"{k}:{headers[k]}" for k in names),
                               "", ";".join(names), hashlib.sha256(body).hexdigest()])
        scope = f"{stamp[:8]}/{self.region}/ec2/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        key = ("AWS4" + secret).encode()
        for part in (stamp[:8], self.region, "ec2", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
                                    f"SignedHeaders={';'.join(names)}, Signature={signature}")
        del headers["host"]  # urllib sends the same one
        return headers

    def primary_eni(self, instance_id: str) -> tuple[str, str, set[str]]:
        """The instance's device-0 ENI: its id, its primary address and its secondaries."""
        root = self.call("DescribeNetworkInterfaces", {
            "Filter.1.Name": "attachment.instance-id", "Filter.1.Value.1": instance_id})
        for item in root.iterfind("networkInterfaceSet/item"):
            if item.findtext("attachment/deviceIndex") == "0":
                return (item.findtext("networkInterfaceId") or "",
                        item.findtext("privateIpAddress") or "", secondaries(item))
        raise Ec2Error("NoPrimaryEni", instance_id)

    def eni_addresses(self, eni_id: str) -> set[str]:
        root = self.call("DescribeNetworkInterfaces", {"NetworkInterfaceId.1": eni_id})
        item = root.find("networkInterfaceSet/item")
        if item is None:
            raise Ec2Error("InvalidNetworkInterfaceID.NotFound", eni_id)
        return secondaries(item)

    def assign(self, eni_id: str, count: int) -> set[str]:
        root = self.call("AssignPrivateIpAddresses", {
            "NetworkInterfaceId": eni_id, "SecondaryPrivateIpAddressCount": str(count)})
        return {a.text for a in root.iterfind("assignedPrivateIpAddressesSet/item/privateIpAddress")
                if a.text}

    def unassign(self, eni_id: str, ip: str) -> None:
        self.call("UnassignPrivateIpAddresses", {"NetworkInterfaceId": eni_id,
                                                 "PrivateIpAddress.1": ip})


def secondaries(item: ET.Element) -> set[str]:
    return {a.findtext("privateIpAddress") or "" for a in item.iterfind("privateIpAddressesSet/item")
            if a.findtext("primary") != "true"} - {""}


def addresses_per_eni(ec2: Ec2, instance_type: str) -> int:
    """IPv4 addresses an ENI of the type takes, the primary included."""
    root = ec2.call("DescribeInstanceTypes", {"InstanceType.1": instance_type})
    return int(root.findtext("instanceTypeSet/item/networkInfo/ipv4AddressesPerInterface") or 0)
