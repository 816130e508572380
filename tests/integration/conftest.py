"""Fixtures for integration tests (root, real namespaces). Other areas add theirs here."""

from __future__ import annotations

import contextlib
import itertools
import os

import pytest

from tests.waiting import wait_for

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: network namespaces")


_vpc_numbers = itertools.count(10)


def reaper_of(pid: int) -> int | None:
    """The pid of the reaper watching process `pid` (cnikit.reaper), if any."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"cnikit.reaper" in argv and str(pid).encode() in argv[argv.index(
                b"cnikit.reaper") + 1:argv.index(b"cnikit.reaper") + 2]:
            return int(entry)
    return None


def crash(proc) -> None:
    """SIGKILL a kit process and its reaper, as a machine that loses power would: what it
    made stays behind for the next run's cleanup to find."""
    import signal

    reaper = reaper_of(proc.pid)
    if reaper is not None:
        os.kill(reaper, signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def wait_until(predicate, timeout: float, poll: float = 0.01, what: str = "condition"):
    """tests.waiting.wait_for with this folder's argument order (poll before what)."""
    return wait_for(predicate, timeout, what=what, interval=poll)


@pytest.fixture(scope="module")
def fab_cloud():
    """One embedded EC2 (moto + gate) per test module; each test bootstraps its own VPC."""
    if not ROOT:
        pytest.skip("needs root: network namespaces")
    from cnikit.cloud import Cloud

    cloud = Cloud.start()
    yield cloud
    cloud.stop()


@pytest.fixture
def make_fabric(fab_cloud):
    """make_fabric(nodes=3, instance_type="m5.large", imds=None) -> a started Fabric,
    closed (everything removed) at the end of the test, whatever happened."""
    from cnikit.fabric.topology import Fabric

    made = []

    def make(nodes: int = 3, instance_type: str = "m5.large", imds=None) -> Fabric:
        # A fresh VPC CIDR per fabric: EC2's ownership is keyed by IP, so two VPCs of one
        # cloud must not hand out the same addresses.
        k = next(_vpc_numbers)
        topo = fab_cloud.bootstrap(nodes=nodes, instance_type=instance_type,
                                   vpc_cidr=f"10.{k}.0.0/16", subnet_cidr=f"10.{k}.1.0/24")
        fabric = Fabric(fab_cloud, topo, imds=imds).start()
        made.append(fabric)
        return fabric

    yield make
    for fabric in made:
        fabric.close()


@contextlib.contextmanager
def docker_host(url: str):
    """DOCKER_HOST=url for the body, as a user of a real engine would export it."""
    kept = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = url
    try:
        yield
    finally:
        if kept is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = kept


def replay_3019_in_docker(url: str, profile: str, code: int, verdict: str, report_dir,
                          env: dict[str, str], timeout: float) -> dict:
    """`cnikit run imds-stale-equal-length --runtime docker` against the engine at `url`,
    asking the engine for the kit's containers while it runs: the exit code and verdict
    expected, the daemons really ran as that engine's containers (2 nodes) and none is left.
    Returns the report."""
    import json
    import re
    import subprocess
    import sys
    import threading

    from cnikit.containers.docker_api import Docker

    seen: set[str] = set()
    done = threading.Event()

    def watch():
        with docker_host(url):
            docker = Docker()
            while not done.is_set():
                seen.update(n for n, _ in docker.kit_containers())
                done.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        r = subprocess.run([sys.executable, "-m", "cnikit.cli", "run", "imds-stale-equal-length",
                            "--runtime", "docker", "--profile", profile,
                            "--report", str(report_dir)],
                           capture_output=True, text=True, timeout=timeout, env=env)
    finally:
        done.set()
        watcher.join(10)
    assert r.returncode == code, r.stdout + r.stderr
    assert verdict in r.stdout
    assert f"runtime: the daemons ran in docker containers (engine at {url})" in r.stdout
    report = json.loads((report_dir / "report.json").read_text())
    rid = re.search(r"ck-([0-9a-z]{5})-n\d", r.stdout + json.dumps(report["nodes"]))
    assert rid, "no run id in the output"
    assert len({n for n in seen if n.startswith(f"ck-{rid.group(1)}-n")}) >= 2, seen
    with docker_host(url):
        left = [n for n, run in Docker().kit_containers() if run == rid.group(1)]
    assert left == [], f"containers left behind: {left}"
    return report


@pytest.fixture(scope="session")
def docker_engine():
    """A private Docker Engine for the session (cnikit.containers.dockerd: Debian's dockerd
    on its own socket, data and exec roots, removed at the end even if pytest crashes); its
    DOCKER_HOST is `.url`. Skipped with the one-line reason where dockerd cannot start."""
    from cnikit.containers import dockerd
    from cnikit.errors import EnvironmentProblem

    reason = dockerd.available()
    if reason:
        pytest.skip(reason)
    try:
        engine = dockerd.PrivateDockerd().start()
    except EnvironmentProblem as e:
        pytest.skip(str(e))
    yield engine
    engine.stop()
