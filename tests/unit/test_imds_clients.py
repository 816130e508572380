"""Real IMDS clients against fault_imds (IMDSv2 enforced, so a v1 fallback would fail):
botocore's own fetchers and the ec2-metadata package; plus the `fault-imds` CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import botocore.session
import pytest
import urllib3
from botocore.utils import IMDSFetcher, IMDSRegionProvider
from ec2_metadata import EC2Metadata

from cnikit.cloud import Cloud
from fault_imds.client import FaultClient
from fault_imds.server import ImdsServer
from tests.unit.imds_support import Imds

FAULT_IMDS = str(Path(sys.executable).parent / "fault-imds")


@pytest.fixture(scope="module")
def env():
    cloud = Cloud.start(ec2="moto", seed=7)
    topo = cloud.bootstrap(nodes=2)
    server = ImdsServer(ec2_endpoint=cloud.endpoint, require_v2=True,
                        instance_id=topo.instances[0].instance_id, seed=7).start()
    yield cloud, topo, server
    server.stop()
    cloud.stop()


def test_botocore_fetchers_read_instance_id_and_region_with_imdsv2(env, monkeypatch):
    cloud, topo, server = env
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url + "/")
    session = botocore.session.get_session()
    # What a boto3 session does when no region is configured: ask IMDS.
    assert IMDSRegionProvider(session).provide() == "us-east-1"
    endpoint = session.get_config_variable("ec2_metadata_service_endpoint")
    assert endpoint == server.url + "/"
    fetcher = IMDSFetcher(timeout=2, num_attempts=2,
                          config={"ec2_metadata_service_endpoint": endpoint})
    token = fetcher._fetch_metadata_token()
    assert token  # IMDSv2: a token was issued (this server refuses v1)
    resp = fetcher._get_request("latest/meta-data/instance-id", None, token=token)
    assert resp.text == topo.instances[0].instance_id
    # With the session gone bad (a token fault), botocore sees a failure, not stale data.
    with FaultClient(server.control_url).token(mode="reject"):
        assert IMDSRegionProvider(botocore.session.get_session()).provide() is None


def test_ec2_metadata_package(env):
    cloud, topo, server = env
    inst = topo.instances[0]
    # ec2-metadata has the 169.254.169.254 base URL built in; its supported hook is the
    # urllib3 pool manager it takes: a ProxyManager sends every request to this server.
    md = EC2Metadata(pool_manager=urllib3.ProxyManager(server.url))
    assert md.instance_id == inst.instance_id
    assert md.region == "us-east-1"
    assert md.availability_zone == inst.az
    assert md.private_ipv4 == inst.primary_ip
    assert md.mac == inst.mac
    assert md.instance_type == "m5.large"
    nic = md.network_interfaces[inst.mac]
    assert nic.device_number == 0
    assert nic.interface_id == inst.primary_eni_id
    assert nic.private_ipv4s[0] == inst.primary_ip
    assert nic.subnet_ipv4_cidr_block == topo.subnet_cidr
    assert nic.vpc_ipv4_cidr_blocks == [topo.vpc_cidr]
    assert nic.security_group_ids and nic.owner_id == "123456789012"
    assert md.instance_identity_document["instanceId"] == inst.instance_id


def run_cli(*args: str, control: str) -> subprocess.CompletedProcess:
    return subprocess.run([FAULT_IMDS, *args, "--control-url", control], capture_output=True,
                          text=True, timeout=30)


def test_cli_add_list_remove_clear(env):
    cloud, topo, server = env
    inst = topo.instances[1]
    out = run_cli("add", "stale", "--mac", inst.mac, "--duration", "30", control=server.control_url)
    assert out.returncode == 0, out.stderr
    fid = out.stdout.strip()
    listed = run_cli("list", control=server.control_url)
    assert fid in listed.stdout and '"kind": "stale"' in listed.stdout
    assert run_cli("remove", fid, control=server.control_url).returncode == 0
    again = run_cli("remove", fid, control=server.control_url)
    assert again.returncode == 2 and "no active fault" in again.stderr
    bad = run_cli("add", "nope", control=server.control_url)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("fault-imds: unknown fault kind")
    assert len(bad.stderr.strip().splitlines()) == 1
    neg = run_cli("add", "stale", "--duration", "-1", control=server.control_url)
    assert neg.returncode == 2 and "duration" in neg.stderr
    run_cli("add", "error", "--probability", "0.5", "--path", "*/ami-id",
            control=server.control_url)
    run_cli("add", "latency", "--ms", "5", control=server.control_url)
    cleared = run_cli("clear", control=server.control_url)
    assert cleared.returncode == 0 and "removed 2" in cleared.stdout
    assert FaultClient(server.control_url).list() == []


def test_cli_serve(env):
    cloud, topo, _ = env
    inst = topo.instances[1]
    proc = subprocess.Popen(
        [FAULT_IMDS, "serve", "--ec2-endpoint", cloud.endpoint, "--listen", "127.0.0.1:0",
         "--control", "127.0.0.1:0", "--instance-id", inst.instance_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        imds_line = proc.stdout.readline().split()
        control_line = proc.stdout.readline().split()
        assert imds_line[0] == "IMDS" and control_line[0] == "control", (imds_line, control_line)
        imds = Imds(imds_line[1])
        assert imds.text("/latest/meta-data/instance-id") == inst.instance_id
        fc = FaultClient(control_line[1])
        with fc.missing(mac=inst.mac):
            assert imds.get(f"/latest/meta-data/network/interfaces/macs/{inst.mac}/mac")[0] == 404
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()


def test_cli_serve_bad_usage():
    out = subprocess.run([FAULT_IMDS, "serve", "--ec2-endpoint", "http://127.0.0.1:9",
                          "--listen", "nonsense"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--listen must be HOST:PORT" in out.stderr
