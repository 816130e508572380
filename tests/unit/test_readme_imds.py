"""The README's IMDS commands, pasted into a shell as written, against a VPC of several
nodes served by one fault IMDS (what `cnikit up` prints): the AWS CLI finds an instance,
curl reads its metadata, IMDSv1 and IMDSv2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cnikit.cloud import Cloud
from fault_imds.server import ImdsServer
from tests.unit.imds_support import Imds
from tests.waiting import wait_for

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = str(Path(sys.executable).parent)


def imds_block() -> str:
    """The README's shell block that reads the IMDS from the host (it starts with the ID)."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    found = [b for b in blocks if b.startswith("ID=$(aws ec2 describe-instances")]
    assert len(found) == 1, "the README's IMDS block (ID=$(aws ec2 ...) is gone"
    return found[0]


@pytest.mark.slow
def test_the_readmes_imds_commands_work_when_pasted(tmp_path):
    cloud = Cloud.start(ec2="moto", seed=20261130)
    try:
        topo = cloud.bootstrap(nodes=2)
        with ImdsServer(ec2_endpoint=cloud.endpoint) as imds:
            for inst in topo.instances:
                wait_for(lambda i=inst: Imds(imds.url, i.instance_id).text(
                    "/latest/meta-data/instance-id") == i.instance_id, 10,
                    f"the IMDS to serve {inst.instance_id}")
            env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                   "HOME": str(tmp_path), "AWS_CONFIG_FILE": str(tmp_path / "none"),
                   "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                   "IMDS": imds.url, **cloud.client_env()}
            script = ("set -eu -o pipefail\n" + imds_block()
                      + 'echo; echo "ID=$ID MAC=$MAC TOKEN=${#TOKEN}"\n')
            out = subprocess.run(["bash", "-c", script], env=env, capture_output=True,
                                 text=True, timeout=120)
    finally:
        cloud.stop()
    assert out.returncode == 0, out.stderr
    *_, served, summary = out.stdout.splitlines()
    ids = dict(kv.split("=", 1) for kv in summary.split())
    inst = next(i for i in topo.instances if i.instance_id == ids["ID"])
    # curl prints no newline of its own: the MAC listing (IMDSv1), then the address the
    # IMDSv2 read answered, the instance's own: its token was issued and taken.
    assert served == f"{ids['MAC']}/{inst.primary_ip}", out.stdout
    assert int(ids["TOKEN"]) > 20, out.stdout
