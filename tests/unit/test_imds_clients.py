"""Real IMDS clients against fault_imds (IMDSv2 enforced, so a v1 fallback would fail):
botocore's own fetchers (region, instance profile credentials), the ec2-metadata package,
cloud-init's EC2 datasource; plus the `fault-imds` CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import botocore.session
import pytest
import urllib3
from botocore.utils import IMDSFetcher, IMDSRegionProvider, InstanceMetadataFetcher
from ec2_metadata import EC2Metadata

from cnikit.cloud import Cloud
from fault_imds.client import FaultClient
from fault_imds.server import ImdsServer
from tests.unit.imds_support import Imds, give_instance_profile

FAULT_IMDS = str(Path(sys.executable).parent / "fault-imds")


@pytest.fixture(scope="module")
def env():
    cloud = Cloud.start(ec2="moto", seed=7)
    topo = cloud.bootstrap(nodes=2)
    give_instance_profile(cloud, topo.instances[0].instance_id)
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


@pytest.mark.slow
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


def _credentials_fetcher(server) -> InstanceMetadataFetcher:
    return InstanceMetadataFetcher(timeout=2, num_attempts=2,
                                   config={"ec2_metadata_service_endpoint": server.url + "/"})


def test_botocore_instance_profile_credentials(env, monkeypatch):
    """botocore's credential chain, with nothing else configured, takes the instance profile's
    credentials from the IMDS (IMDSv2), and they work against the kit's EC2."""
    cloud, topo, server = env
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url + "/")
    session = botocore.session.get_session()
    creds = session.get_credentials()
    assert creds is not None and creds.method == "iam-role"
    frozen = creds.get_frozen_credentials()
    assert frozen.access_key.startswith("ASIA") and frozen.token
    ec2 = session.create_client("ec2", region_name="us-east-1", endpoint_url=cloud.endpoint)
    ids = [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert topo.instances[0].instance_id in ids
    fetched = _credentials_fetcher(server).retrieve_iam_role_credentials()
    assert fetched["role_name"] == "node-role" and fetched["access_key"] == frozen.access_key


def test_botocore_credentials_under_faults(env):
    """Faults on the credential path reach botocore: a delay it waits out, an error it reports
    as no credentials (never a half-read or stale answer)."""
    cloud, topo, server = env
    fc = FaultClient(server.control_url)
    with fc.latency(ms=300, path="latest/meta-data/iam/security-credentials/*"):
        start = time.monotonic()
        creds = _credentials_fetcher(server).retrieve_iam_role_credentials()
        assert time.monotonic() - start >= 0.3
        assert creds["role_name"] == "node-role" and creds["access_key"].startswith("ASIA")
    with fc.error(status=500, path="latest/meta-data/iam/security-credentials/*"):
        assert _credentials_fetcher(server).retrieve_iam_role_credentials() == {}
    with fc.token(mode="reject"):
        # botocore falls back to IMDSv1, which this server refuses: no credentials.
        assert _credentials_fetcher(server).retrieve_iam_role_credentials() == {}
    assert _credentials_fetcher(server).retrieve_iam_role_credentials()["role_name"] == "node-role"


# Run by Debian's python3, where the distribution's cloud-init lives (it is not on PyPI).
CLOUD_INIT_CRAWL = """
import json, sys, tempfile
from cloudinit import helpers
from cloudinit.sources import DataSourceEc2
tmp = tempfile.mkdtemp()
cfg = {"datasource": {"Ec2": {"metadata_urls": [sys.argv[1]], "max_wait": 10, "timeout": 5}}}
ds = DataSourceEc2.DataSourceEc2(cfg, None, helpers.Paths({"run_dir": tmp, "cloud_dir": tmp}))
ds._cloud_name = "aws"  # what DMI says on EC2; this machine's DMI says otherwise
print(json.dumps(ds.crawl_metadata(), default=str))
"""
SYSTEM_PYTHON = "/usr/bin/python3"


def _cloud_init_missing() -> str | None:
    if not os.path.exists(SYSTEM_PYTHON):
        return f"{SYSTEM_PYTHON} is missing"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import cloudinit.sources.DataSourceEc2"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return ("cloud-init is not installed for the system python: `apt-get install "
                "cloud-init` (in the Makefile's APT_PACKAGES)")
    return None


def test_cloud_init_ec2_datasource_crawls_the_fault_imds(env):
    """cloud-init's DataSourceEc2 picks the newest API version it knows (2021-03-23), takes an
    IMDSv2 token, and crawls meta-data and the identity document."""
    missing = _cloud_init_missing()
    if missing:
        pytest.skip(missing)
    cloud, topo, server = env
    inst = topo.instances[0]
    out = subprocess.run([SYSTEM_PYTHON, "-c", CLOUD_INIT_CRAWL, server.url], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    crawled = json.loads(out.stdout)
    assert crawled, out.stderr[-2000:]  # {}: cloud-init found no metadata at all
    assert crawled["_metadata_api_version"] == "2021-03-23"
    md = crawled["meta-data"]
    assert md["instance-id"] == inst.instance_id and md["local-ipv4"] == inst.primary_ip
    assert md["placement"]["availability-zone"] == inst.az
    assert md["placement"]["region"] == "us-east-1"
    nic = md["network"]["interfaces"]["macs"][inst.mac]
    assert nic["local-ipv4s"] == inst.primary_ip and nic["network-card"] == "0"
    assert md["iam"]["info"]["Code"] == "Success"
    assert crawled["dynamic"]["instance-identity"]["document"]["instanceId"] == inst.instance_id
