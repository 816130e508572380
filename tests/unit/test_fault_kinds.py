"""Adding a fault kind is one new file, on either side (issue 12, acceptance).

A throwaway kind file is written into a temporary copy of the package (nothing else is
edited); the copy is then run as a user runs it (`python -m fault_imds serve`, with cnikit
unimportable; `python -m cnikit.cli ec2`), and the kind is seen accepted by the control
API, listed, and firing end to end. The rest checks the shared model: registration, the
one probability roll, the one meaning of jitter.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from faultcore.errors import SpecError
from faultcore.fault import Kinds
from faultcore.registry import DuplicateName
from tests.unit.test_layering import ROOT, ImdsProcess, http
from tests.waiting import wait_for

SEED = 20261130

IMDS_REQUEST_KIND = '''
from fault_imds.faults.base import Answer, ImdsFault, Param, integer


class Teapot(ImdsFault):
    """Answer 418 (a throwaway kind: this file is the only change)."""

    kind = "teapot"
    stage = "request"
    order = 35
    uses_probability = True
    targets = ("instance_id", "mac", "eni_id", "path")
    params = {"status": Param(integer(400, 599), 418)}
    description = "answer 418"

    async def apply(self, req):
        return Answer(self.status)
'''

IMDS_CONTENT_KIND = '''
from fault_imds.faults.base import ImdsFault


class OnlyPrimary(ImdsFault):
    """Serve only the first local-ipv4 of the targeted ENIs (a throwaway content kind)."""

    kind = "only-primary"
    stage = "content"
    order = 40
    targets = ("instance_id", "mac", "eni_id")
    description = "serve only the first local-ipv4"

    def apply(self, view):
        from dataclasses import replace

        for iid, m in list(view.models.items()):
            if self.target.instance_id not in (None, iid):
                continue
            view.models[iid] = m.with_enis(
                replace(e, local_ipv4s=e.local_ipv4s[:1])
                if self.target.mac in (None, e.mac) else e
                for e in m.enis
            )
'''

EC2_KIND = '''
from cnikit.cloud.faults.base import Call, Ec2Error, Ec2Fault, Param
from faultcore.fault import integer


class Teapot(Ec2Fault):
    """Answer `Teapot` (a throwaway kind: this file is the only change)."""

    kind = "teapot"
    stage = "request"
    order = 15
    params = {"status": Param(integer(400, 499), 418)}
    description = "answer Teapot"

    def apply(self, call: Call) -> Ec2Error:
        return Ec2Error("Teapot", "I am a teapot.", status=self.status)
'''


def _copy_packages(dest: Path, *names: str) -> None:
    for name in names:
        shutil.copytree(ROOT / name, dest / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def test_imds_kind_is_one_new_file(tmp_path, gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    inst = topo.instances[0]
    ec2 = gate_cloud.client()
    second = ec2.assign_private_ip_addresses(
        NetworkInterfaceId=inst.primary_eni_id, SecondaryPrivateIpAddressCount=1,
    )["AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
    _copy_packages(tmp_path, "fault_imds", "faultcore")
    (tmp_path / "fault_imds" / "faults" / "teapot.py").write_text(IMDS_REQUEST_KIND)
    (tmp_path / "fault_imds" / "faults" / "only_primary.py").write_text(IMDS_CONTENT_KIND)

    with ImdsProcess(gate_cloud.endpoint, inst.instance_id, cwd=tmp_path,
                     pythonpath=str(tmp_path)) as imds:
        status, body = http("GET", imds.control_url + "/kinds")
        kinds = json.loads(body)
        assert kinds["teapot"]["stage"] == "request" and kinds["teapot"]["order"] == 35
        assert kinds["only-primary"]["stage"] == "content"

        base = imds.url + "/latest/meta-data/"
        macs = wait_for(lambda: http("GET", base + "network/interfaces/macs/")[1].decode(), 30,
                        "the IMDS to serve the instance")
        ips_path = base + f"network/interfaces/macs/{macs.split()[0].strip('/')}/local-ipv4s"
        wait_for(lambda: second in http("GET", ips_path)[1].decode().split(), 30,
                 "the secondary IP to be served")

        status, added = http("POST", imds.control_url + "/faults",
                             {"kind": "teapot", "target": {"path": "*/ami-id"}})
        assert status == 201, added
        fid = json.loads(added)["id"]
        status, listed = http("GET", imds.control_url + "/faults")
        assert [(f["id"], f["kind"], f["status"]) for f in json.loads(listed)["faults"]] == [
            (fid, "teapot", 418)]
        assert http("GET", base + "ami-id")[0] == 418
        assert http("GET", base + "instance-id")[0] == 200
        status, refused = http("POST", imds.control_url + "/faults",
                               {"kind": "teapot", "status": 99})
        assert status == 400 and "status must be" in json.loads(refused)["error"]

        status, added = http("POST", imds.control_url + "/faults",
                             {"kind": "only-primary", "target": {"eni_id": inst.primary_eni_id}})
        assert status == 201, added
        assert http("GET", ips_path)[1].decode().split() == [inst.primary_ip]
        assert http("DELETE", imds.control_url + "/faults")[0] == 200
        assert second in http("GET", ips_path)[1].decode().split()
    assert "cnikit is blocked" not in imds.stderr, imds.stderr


class Ec2Process:
    """`python -m cnikit.cli ec2` run from a directory holding the packages to test."""

    def __init__(self, cwd: Path):
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cnikit.cli", "ec2", "--port", "0", "--seed", str(SEED)],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()  # "EC2 endpoint: URL", or EOF when it failed
        if not first.startswith("EC2 endpoint:"):
            self.stop()
            raise AssertionError(f"cnikit ec2 did not start: {first!r} {self.stderr}")
        self.endpoint = first.split(":", 1)[1].strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.stderr = self.proc.stderr.read() if self.proc.stderr else ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def test_ec2_kind_is_one_new_file(tmp_path):
    import boto3

    _copy_packages(tmp_path, "cnikit", "fault_imds", "faultcore")
    (tmp_path / "cnikit" / "cloud" / "faults" / "teapot.py").write_text(EC2_KIND)
    with Ec2Process(tmp_path) as ec2:
        faults = ec2.endpoint + "/_cnikit/faults"
        status, added = http("POST", faults, {"kind": "teapot", "target": {"action": "DescribeVpcs"}})
        assert status == 201, added
        fid = json.loads(added)["id"]
        listed = json.loads(http("GET", faults)[1])["faults"]
        assert [(f["id"], f["kind"], f["target"], f["status"]) for f in listed] == [
            (fid, "teapot", {"action": "DescribeVpcs"}, 418)]
        client = boto3.client("ec2", endpoint_url=ec2.endpoint, region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test")
        with pytest.raises(ClientError) as exc:
            client.describe_vpcs()
        assert exc.value.response["Error"]["Code"] == "Teapot"
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 418
        client.describe_instances()  # another action: untouched
        status, refused = http("POST", faults, {"kind": "teapot", "colour": "red"})
        assert status == 400 and "unknown field 'colour'" in json.loads(refused)["error"]
        assert http("DELETE", f"{faults}/{fid}")[0] == 200
        client.describe_vpcs()


def test_the_real_packages_do_not_have_the_throwaway_kinds():
    """The kinds above came from the temporary copies alone."""
    from cnikit.cloud.faults import KINDS as EC2_KINDS
    from fault_imds.faults import KINDS as IMDS_KINDS

    assert "teapot" not in EC2_KINDS and "teapot" not in IMDS_KINDS
    assert "only-primary" not in IMDS_KINDS


# -- the shared model ------------------------------------------------------------------------


def test_a_kind_declares_where_it_applies_when_defined():
    from faultcore.fault import Fault

    kinds = Kinds("test fault kind", ("request",))

    class Base(Fault):
        family = kinds

    class Good(Base):
        kind = "good"
        stage = "request"
        order = 7

    assert kinds.get("good") is Good and kinds.describe()["good"]["order"] == 7
    with pytest.raises(TypeError, match="stage must be one of"):
        type("Bad", (Base,), {"kind": "bad", "stage": "content"})
    with pytest.raises(DuplicateName, match="'good' is defined twice: in tests/unit/"
                       "test_fault_kinds.py and in elsewhere"):
        type("Other", (Base,), {"kind": "good", "stage": "request", "__module__": "elsewhere"})
    with pytest.raises(SpecError, match="unknown test fault kind 'nope'"):
        kinds.get("nope")


def test_probability_is_rolled_in_one_place_for_both_families():
    """The same seed and probability give the same firing pattern on both sides, because
    both go through Fault.fires; and a certain fault draws nothing from the generator."""
    from cnikit.cloud.faults import Ec2Fault
    from cnikit.cloud.faults.base import Call
    from fault_imds.engine import RequestCtx
    from fault_imds.faults import ImdsFault, Target

    print(f"seed={SEED}")
    ec2 = Ec2Fault.from_spec({"kind": "error", "probability": 0.3}, "e", 0.0, 0.0)
    imds = ImdsFault.family.get("error")("i", Target(), None, 0.3, {"status": 500}, 0.0, 0.0)
    rng_a, rng_b = random.Random(SEED), random.Random(SEED)
    call = Call("X", 0.0, rng_a)
    req = RequestCtx(None, "latest/meta-data/ami-id", None, rng_b, lambda: None)
    a = [ec2.fires(call, rng_a) for _ in range(400)]
    b = [imds.fires(req, rng_b) for _ in range(400)]
    assert a == b and 80 <= sum(a) <= 160
    certain = Ec2Fault.from_spec({"kind": "error"}, "c", 0.0, 0.0)
    rng = random.Random(SEED)
    assert certain.fires(call, rng) and rng.random() == random.Random(SEED).random()


def test_jitter_means_plus_or_minus_on_both_sides():
    """EC2 latency `ms` +- `jitter_ms` as the IMDS's (it used to be 0..+jitter for EC2)."""
    from cnikit.cloud.faults import FaultSet
    from fault_imds.faults import KINDS

    faults = FaultSet(seed=SEED)
    faults.add("latency", ms=100, jitter_ms=50)
    delays = [faults.on_request("DescribeVpcs")[0] for _ in range(200)]
    assert all(0.05 <= d <= 0.15 for d in delays)
    assert sum(d < 0.1 for d in delays) > 50 and sum(d > 0.1 for d in delays) > 50
    assert "+-" in KINDS.describe()["latency"]["description"]


def test_content_kinds_take_no_probability():
    from fault_imds.engine import Engine

    engine = Engine(seed=SEED)
    with pytest.raises(SpecError, match="probability does not apply to missing"):
        engine.add({"kind": "missing", "probability": 0.5})
    assert engine.list() == []


@pytest.mark.parametrize("spec, reason", [
    ({"kind": "latency", "ms": "fast"}, "ms must be a number"),
    ({"kind": "throttle", "rate": 0}, "rate must be > 0"),
    ({"kind": "describe-lag", "seconds": 301}, "seconds must be <= 300"),
    ({"kind": "error", "target": {"action": ""}}, "target action must be an EC2 action name"),
    ({"kind": "error", "target": "DescribeVpcs"}, "target must be an object"),
    ({"kind": "error", "target": {"mac": "0a:00:00:00:00:01"}}, "unknown target field 'mac'"),
    ({"kind": "error", "action": "DescribeVpcs"}, "'action' goes in the target"),
    ({"kind": "error", "duration": 0}, "duration must be > 0"),
])
def test_ec2_specs_are_checked_by_the_shared_model(spec, reason):
    from cnikit.cloud.faults import FaultSet
    from cnikit.errors import UsageError

    faults = FaultSet()
    with pytest.raises(UsageError, match=reason) as exc:
        faults.add(**spec)
    assert "\n" not in str(exc.value) and faults.list() == []
