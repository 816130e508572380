"""The pytest plugin as a user meets it (loaded through its `pytest11` entry point, run in a
subprocess by pytester): a clean test passes, a test that takes a pod's IP away in EC2 fails
when its body returns with what broke and the report's path, and the options are honoured."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces")]

USER_TESTS = r'''
import time

def test_holds(cloud, imds, cluster, invariants):
    c = cluster(nodes=2, pods=3)
    assert c.profile == "vpc-cni-1.18.4"
    assert c.status(0)["profile"] == "vpc-cni-1.18.4"
    pod = c.add_pod(1, "web")
    # IMDS stale for node 1's primary ENI: no profile may lose a pod to that alone.
    mac = cloud.ec2.describe_network_interfaces(
        NetworkInterfaceIds=[c.topo.instances[1].primary_eni_id])["NetworkInterfaces"][0]["MacAddress"]
    with imds.stale(mac=mac, seconds=5):
        c.delete_pod(pod)
        c.add_pod(1, "web-2")
    assert not invariants.violations()

def test_breaks(cloud, cluster, invariants):
    c = cluster(nodes=2, pods=3)
    # Pods of one node talk through that node; the victim's peers must be across the VPC.
    victim = next(p for p in c.pods.values() if p.node.index == 1)
    print("\nVICTIM", victim.name, victim.ip)
    c.unassign(victim)
    assert invariants.wait_for(lambda inv: victim.name in inv.failing_pods(), 10) is not None

def test_stalled(cluster, invariants):
    import os, subprocess
    c = cluster(nodes=2, pods=3)
    print("\nSTALLED AT", c.scale)
    victim = next(p for p in c.pods.values() if p.node.index == 1)
    # The machine holds this process off the CPU for twice the bound at the run's time
    # scale (1 s at 0.1), then a pod goes dark (its link down: EC2 still right, only the
    # probes fail): on such a machine the kit cannot tell whose fault that is, at any scale.
    me = os.getpid()
    subprocess.run(["sh", "-c", f"kill -STOP {me}; sleep {20 * c.scale}; kill -CONT {me}"],
                   check=True)
    subprocess.run(["nsenter", f"--net={victim.path}", "ip", "link", "set", "eth0", "down"],
                   check=True)
    assert invariants.wait_for(lambda inv: victim.name in inv.failing_pods(), 10) is not None

def test_stalled_once(cluster, invariants):
    import os, subprocess
    c = cluster(nodes=2, pods=3)
    victim = next(p for p in c.pods.values() if p.node.index == 1)
    if c.scale < 0.2:  # the busy machine's stall, at the first time scale only
        me = os.getpid()
        subprocess.run(["sh", "-c", f"kill -STOP {me}; sleep 2; kill -CONT {me}"], check=True)
    subprocess.run(["nsenter", f"--net={victim.path}", "ip", "link", "set", "eth0", "down"],
                   check=True)
    assert invariants.wait_for(lambda inv: victim.name in inv.failing_pods(), 10) is not None

def test_sees_the_build_from_outside(cluster, invariants):
    # The checkers' view of the datastore is the build's [observe] port, as any build has it:
    # the reference daemon's private status API off changes nothing.
    c = cluster(nodes=1, env={"CNIKIT_PRIVATE_STATUS": "off"})
    pod = c.add_pod(0, "seen")
    assert pod.ip in c.daemon_ips(c.nodes[0].instance_id)
'''


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """The user tests in one pytest run (one moto start): (result, report dir)."""
    pytester_dir = tmp_path_factory.mktemp("user")
    (pytester_dir / "test_user.py").write_text(USER_TESTS)
    reports = tmp_path_factory.mktemp("reports")
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
         "--cnikit-profile", "vpc-cni-1.18.4", "--cnikit-report", str(reports),
         "--junitxml", str(reports / "junit.xml"), "-rfs",
         "-o", "timeout=240", str(pytester_dir / "test_user.py")],
        cwd=pytester_dir, capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "400"})  # the -rf summary line uncut
    return proc, reports


def test_a_clean_test_passes_and_writes_its_report(outcome):
    proc, reports = outcome
    out = proc.stdout + proc.stderr
    assert "test_user.py::test_holds PASSED" in out or "2 passed" in out, out[-3000:]
    [d] = [p for p in reports.iterdir() if "test_holds" in p.name and p.is_dir()]
    doc = json.loads((d / "report.json").read_text())
    assert doc["verdict"] == "holds" and doc["profile"] == "vpc-cni-1.18.4"
    assert (d / "report.html").read_text().count("IMDS served") >= 2
    # The fixture's IMDS fault is one nemesis operation (cnikit.cluster.nemesis), start to end.
    nemesis = [e for e in doc["history"] if e["process"] == "nemesis"]
    assert [(e["type"], e["f"]) for e in nemesis] == [("start", "imds-fault"), ("end", "imds-fault")]
    assert nemesis[0]["value"]["kind"] == "stale" and "mac" in nemesis[0]["value"]["target"]


def test_a_broken_pod_fails_the_test_with_the_statement_and_report(outcome):
    proc, reports = outcome
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "2 failed, 2 passed, 1 skipped" in out, out[-3000:]
    victim_line = next(line for line in out.splitlines() if line.startswith("VICTIM "))
    _, name, ip = victim_line.split()
    # The one-line summary (-rf) says what broke: kind, pod, IP.
    summary = next(x for x in out.splitlines() if x.startswith("FAILED test_user.py::test_breaks"))
    assert summary.startswith("FAILED test_user.py::test_breaks[vpc-cni-1.18.4] - Failed: cnikit: ")
    assert f"unreachable pod {name} ({ip})" in summary, summary
    statement = next(line for line in out.splitlines() if line.startswith(f"  - pod {name} ("))
    assert f"pod {name} ({ip}) lost connectivity at t=+" in statement
    [d] = [p for p in reports.iterdir() if "test_breaks" in p.name and p.is_dir()]
    doc = json.loads((d / "report.json").read_text())
    taken = [e for e in doc["history"] if e["process"] == "nemesis"]
    assert [(e["type"], e["f"], e["value"]["target"]["ips"]) for e in taken] == [
        ("info", "ec2-unassign", [ip])]
    assert f"because IP {ip} was removed from ENI eni-" in statement
    assert "UnassignPrivateIpAddresses" in statement
    path = next(line.split("report: ", 1)[1] for line in out.splitlines() if "report: " in line)
    assert Path(path).is_file() and path.startswith(str(reports))
    doc = json.loads(Path(path).with_name("report.json").read_text())
    assert doc["verdict"] == "violation"
    assert any(v["kind"] == "unreachable" and v["subject"] == name for v in doc["violations"])
    # The report of a real run: valid JSON, every view recorded, HTML self-contained.
    from cnikit.report import SCHEMA

    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, SCHEMA)
    fs = {e["f"] for e in doc["history"]}
    assert {"ownership", "daemon-view", "pod-add", "fail"} <= fs
    assert any(e["type"] == "served" for e in doc["imds_events"])
    assert any(r["action"] == "UnassignPrivateIpAddresses" for r in doc["audit"])
    html = Path(path).read_text()
    from tests.unit.test_report import parse

    p = parse(html)
    text = " ".join(p.text)
    assert text.count("daemon datastore") >= 2 and f"IP {ip}" in text
    assert [a for t, a in p.tags if t == "g" and a.get("class") == "vmark"]
    assert "http://" not in html and "https://" not in html
    assert not [t for t, _ in p.tags if t in ("script", "link", "img", "iframe")]


def test_a_test_the_machine_stalled_before_it_broke_is_skipped_as_too_slow(outcome):
    """A violation a late machine can fake, just after the kit's process was held off the
    CPU longer than the time scale allows, is no verdict: the test is skipped, with why."""
    proc, _ = outcome
    out = proc.stdout + proc.stderr
    line = next((x for x in out.splitlines() if x.startswith("SKIPPED")), "")
    assert "test_user.py:" in line, line  # where the test is, not where the plugin skipped
    assert "cnikit: the machine was too slow for the time scale: the kit's process was held " \
           "off the CPU" in line, out[-3000:]
    assert "FAILED test_user.py::test_stalled[" not in out
    # It was run again at twice and four times the time scale before it was skipped.
    assert [x.split()[-1] for x in out.splitlines() if x.startswith("STALLED AT")] == \
        ["0.1", "0.2", "0.4"]
    assert line.endswith("(at every time scale tried: 0.1, 0.2 and 0.4)"), line


def test_a_test_the_machine_stalled_once_is_judged_at_a_slower_time_scale(outcome):
    """Too slow at its time scale, the test is run again at twice the scale: the dark pod
    fails it there, and the failure says at which scale it was judged and why."""
    proc, reports = outcome
    out = proc.stdout + proc.stderr
    summary = next(x for x in out.splitlines() if x.startswith("FAILED test_user.py::test_stalled_once"))
    assert "Failed: cnikit: " in summary and "unreachable pod" in summary, summary
    assert "judged at time scale 0.2 (2x slower): at 0.1 the machine was too slow (the kit's " \
           "process was held off the CPU" in out, out[-3000:]
    junit = (reports / "junit.xml").read_text()
    assert 'name="cnikit_time_scale" value="0.2"' in junit


def test_without_report_option_a_failure_still_writes_one(pytester):
    pytester.makepyfile(test_one='''
def test_breaks(cluster, invariants):
    c = cluster(nodes=2, pods=3)
    victim = next(p for p in c.pods.values() if p.node.index == 1)
    c.unassign(victim)
    assert invariants.wait_for(lambda inv: victim.name in inv.failing_pods(), 10) is not None

def test_holds(cloud, invariants):
    pass  # checkers with nothing to watch: nothing to report
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "timeout=240")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    path = next(line.split("report: ", 1)[1] for line in out.splitlines() if "report: " in line)
    assert "cnikit-reports" in path and Path(path).is_file()
    # Only the failing test wrote one.
    assert len(list(Path(path).parent.parent.iterdir())) == 1


@pytest.mark.timeout(500)  # holds the inner session's hang bound (a busy CI machine)
def test_ec2_option_selects_localstack(pytester, request, monkeypatch):
    """--cnikit-ec2 localstack finds the LocalStack that AWS_ENDPOINT_URL names (the one
    this session's LocalStack tests share), as localstack-client's users expect."""
    url = request.getfixturevalue("localstack_url")
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    pytester.makepyfile(test_ls=f'''
def test_ls(cloud):
    assert cloud.upstream_url == {url!r} and not cloud.cloud._owned
    assert cloud.ec2.describe_vpcs()["Vpcs"] is not None
''')
    result = pytester.runpytest_subprocess("--cnikit-ec2", "localstack", "-rs", "-o", "timeout=400")
    result.assert_outcomes(passed=1)


PTP_USER_TEST = r'''
def test_ptp_pods(cluster, invariants):
    c = cluster(nodes=2, pods=4)
    pod = next(iter(c.pods.values()))
    assert invariants.wait_for(lambda inv: inv.violations(), 10) is not None
'''


@pytest.mark.skipif(not Path("/usr/lib/cni/ptp").exists(),
                    reason="Debian's containernetworking-plugins is not installed (make setup)")
@pytest.mark.timeout(560)  # holds the inner session's hang bound (a busy CI machine)
def test_target_option_drives_a_build_the_kit_did_not_write(tmp_path):
    """--cnikit-target with ptp + host-local: the fixtures run that plugin, and the invariants
    fail the test because host-local's addresses were never assigned by EC2."""
    import subprocess
    import sys

    from tests.integration.test_certify import PTP_TARGET

    target = tmp_path / "ptp.toml"
    target.write_text(PTP_TARGET.format(ptp="/usr/lib/cni/ptp", host_local="/usr/lib/cni/host-local"))
    (tmp_path / "test_user.py").write_text(PTP_USER_TEST)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--cnikit-target",
         str(target), "-o", "timeout=400", str(tmp_path / "test_user.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed" in out, out[-3000:]
    assert "cnikit: ip-not-owned pod " in out and "EC2" in out, out[-3000:]


def test_junit_names_the_build_and_carries_run_id_and_report(outcome):
    import xml.etree.ElementTree as ET

    _proc, reports = outcome
    cases = {c.get("name"): c for c in ET.parse(reports / "junit.xml").getroot().iter("testcase")}
    assert set(cases) == {"test_holds[vpc-cni-1.18.4]", "test_breaks[vpc-cni-1.18.4]",
                          "test_sees_the_build_from_outside[vpc-cni-1.18.4]",
                          "test_stalled[vpc-cni-1.18.4]",
                          "test_stalled_once[vpc-cni-1.18.4]"}, set(cases)
    props = {p.get("name"): p.get("value") for p in cases["test_breaks[vpc-cni-1.18.4]"].iter("property")}
    assert props["cnikit_build"] == "vpc-cni-1.18.4"
    assert len(props["cnikit_run_id"]) >= 4 and props["cnikit_report"].endswith("report.html")


@pytest.mark.timeout(460)  # holds the inner session's hang bound (a busy CI machine)
def test_the_documented_example_passes_under_xdist(tmp_path):
    """docs/pytest.md's example, pasted as it is, under pytest-xdist with two workers: each
    worker has its own EC2, IMDS and run ids, so nothing collides."""
    import re
    import subprocess
    import sys

    pytest.importorskip("xdist")
    doc = (Path(__file__).resolve().parents[2] / "docs" / "pytest.md").read_text()
    example = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    (tmp_path / "test_my_cni.py").write_text(example)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2",
         "-o", "timeout=240", "test_my_cni.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "3 passed" in out, out[-3000:]


def test_ip_family_option_makes_ipv6_clusters_and_judges_them(pytester):
    """--cnikit-ip-family ipv6: every cluster is a dual-stack VPC with the build in its IPv6
    mode; the checkers judge its IPv6 pods (the /80 taken from the node darkens them)."""
    pytester.makepyfile(test_six='''
import ipaddress

def test_ipv6_pods_hold(cluster, invariants):
    c = cluster(nodes=2, pods=4)
    for pod in c.pods.values():
        assert ipaddress.ip_address(pod.ip).version == 6
    assert invariants.wait_for(lambda inv: inv.violations(), 2) is None

def test_a_taken_prefix_fails_the_test(cloud, cluster, invariants):
    c = cluster(nodes=2, pods=2)
    victim = next(p for p in c.pods.values() if p.node.index == 1)
    eni = c.topo.instances[1].primary_eni_id
    snap = cloud.gate.owners()
    prefix = next(p for p, o in snap.ipv6_prefixes.items() if o.eni_id == eni)
    cloud.ec2.unassign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6Prefixes=[prefix])
    assert invariants.wait_for(lambda inv: victim.name in inv.failing_pods(), 10) is not None
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "timeout=240",
                                           "--cnikit-ip-family", "ipv6")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "FAILED test_six.py::test_a_taken_prefix_fails_the_test" in out, out[-3000:]
