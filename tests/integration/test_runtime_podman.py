"""The daemon under the podman runtime: the 3019 replay through the real CLI (its
violation in podman; both profiles through the Docker API), the runtime's interface (kill,
restart with the state kept, stop, the node's namespace, the DaemonSet's environment) and
the removal of dead runs' containers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from cnikit.containers.podman import LABEL_KIT, LABEL_RUN, Podman
from tests.integration.conftest import docker_host, replay_3019_in_docker
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
    pytest.mark.skipif(Podman.available() is not None, reason=f"{Podman.available()}"),
]

CNIKIT = [sys.executable, "-m", "cnikit.cli"]


def started_containers(name_prefix: str) -> list[str]:
    out = Podman().out("events", "--stream=false", "--since", "30m", "--filter", "event=start",
                       "--format", "{{.Name}}")
    return [n for n in out.split() if n.startswith(name_prefix)]


# A replay takes 20 s on a quiet machine; a fresh CI machine's suite (ten workers on two
# cores, Compose building its images beside it) once took 228 s for it, past a 240 s
# timeout during the teardown: the bound is for a hung run, not a slow one.
REPLAY_TIMEOUT = 600


# The violation only: hardened's daemon image holds the same replay in podman as a
# vendor's image target (tests/integration/test_certify.py).
@pytest.mark.timeout(REPLAY_TIMEOUT + 60)
@pytest.mark.parametrize("profile,code,verdict", [("vpc-cni-1.18.3", 1, "VIOLATION")])
def test_3019_replay_with_the_daemon_in_podman(profile, code, verdict, tmp_path):
    r = subprocess.run(CNIKIT + ["run", "imds-stale-equal-length", "--runtime", "podman",
                                 "--profile", profile, "--report", str(tmp_path)],
                       capture_output=True, text=True, timeout=REPLAY_TIMEOUT)
    assert r.returncode == code, r.stdout + r.stderr
    assert verdict in r.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == verdict.lower()
    # The daemons really ran as podman containers of this run, and none is left.
    rid = re.search(r"ck-([0-9a-z]{5})-n\d", r.stdout + json.dumps(report["nodes"]))
    assert rid, "no run id in the output"
    prefix = f"ck-{rid.group(1)}-n"
    assert len(set(started_containers(prefix))) >= 2, "no daemon container started"
    left = Podman().out("ps", "-a", "--filter", f"label={LABEL_RUN}={rid.group(1)}", "--format",
                        "{{.Names}}")
    assert left == "", f"containers left behind: {left}"


@pytest.fixture(scope="module")
def cluster():
    from cnikit.cluster import CniCluster

    with CniCluster(nodes=1, profile="hardened", scale=0.05, runtime="podman") as c:
        yield c


def test_container_joins_the_node_namespace_with_the_daemonset_env(cluster):
    from cnikit.containers.container_daemon import ContainerDaemon

    d = cluster.daemons[0]
    assert isinstance(d, ContainerDaemon) and d.alive()
    node_ns = os.stat(cluster.fabric.nodes[0].ns.path).st_ino
    assert os.stat(f"/proc/{d.pid}/ns/net").st_ino == node_ns
    # The container has a mount namespace of its own: it is not a host process.
    assert os.stat(f"/proc/{d.pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino
    info = d.engine.inspect(d.name)
    env = dict(e.split("=", 1) for e in info["Config"]["Env"])
    assert env["WARM_ENI_TARGET"] == "1" and env["ENABLE_PREFIX_DELEGATION"] == "false"
    assert env["MY_NODE_NAME"] == cluster.fabric.nodes[0].ns.name
    assert env["CNIKIT_PROFILE"] == "hardened"
    assert info["Config"]["Labels"][LABEL_RUN] == cluster.fabric.rid


# What a daemon in its container does to reach the cluster's object store: the kubeconfig its
# environment names (bound into the container), the server it names, the nodes listed there.
READ_NODES = ("import json, os, urllib.request; server = json.load(open(os.environ["
              "'KUBECONFIG']))['clusters'][0]['cluster']['server']; print(json.load("
              "urllib.request.urlopen(server + '/api/v1/nodes'))['items'][0]['metadata']['name'])")


def test_the_daemons_container_reaches_the_clusters_object_store(cluster):
    d = cluster.daemons[0]
    out = Podman().out("exec", d.name, "/usr/local/bin/python3", "-c", READ_NODES)
    assert out.strip() == cluster.fabric.nodes[0].name


def test_kill_restart_keeps_the_state_and_stop_removes(cluster):
    d = cluster.daemons[0]
    pod = cluster.add_pod(0, "keep")
    first_pid = d.pid
    assert d.kill(signal.SIGKILL) == 137
    assert not d.alive()
    cluster.restart_daemon(0)
    assert d.alive() and d.pid != first_pid
    # ipam.json on the shared state dir brought the pod's IP back.
    held = {a["ip"] for a in cluster.status(0)["assignments"]}
    assert pod.ip in held
    d.stop()
    assert not d.alive()
    assert d.engine.inspect(d.name) is None, "stop() left the container"
    d.start(wait=60)
    assert pod.ip in {a["ip"] for a in cluster.status(0)["assignments"]}
    cluster.delete_pod(pod)


@pytest.mark.exclusive  # sweeps every run's containers (see Makefile)
def test_cleanup_removes_dead_runs_containers_only():
    from cnikit.containers.cleanup import remove_dead_containers, remove_images
    from cnikit.containers.image import ensure_image
    from cnikit.runtime import Run

    p = Podman()
    image = ensure_image(p)
    live = Run.claim()
    dead_rid = "zz" + live.run_id[2:] if not live.run_id.startswith("zz") else "yy" + live.run_id[2:]
    names = {"dead": f"ck-{dead_rid}-leftover", "live": f"ck-{live.run_id}-live"}
    try:
        for rid, name in ((dead_rid, names["dead"]), (live.run_id, names["live"])):
            p.out("create", "--name", name, "--label", f"{LABEL_KIT}=daemon", "--label",
                  f"{LABEL_RUN}={rid}", image)
        assert names["dead"] in remove_dead_containers(p, dry_run=True)
        assert p.inspect(names["dead"]) is not None  # a dry run removes nothing
        # Images are never removed from under a container.
        assert remove_images(p) == ([], "kit containers still exist (a live run?)")
        assert p.image_exists(image)
        removed = remove_dead_containers(p)
        assert names["dead"] in removed and names["live"] not in removed
        assert p.inspect(names["dead"]) is None and p.inspect(names["live"]) is not None
    finally:
        p.run("rm", "-f", names["dead"], names["live"], check=False)
        live.close()


def test_docker_without_an_engine_is_one_line_exit_2():
    from cnikit.containers.docker_api import Docker

    reason = Docker.available()
    if reason is None:
        pytest.skip("a Docker engine is reachable here")
    r = subprocess.run(CNIKIT + ["run", "imds-stale-equal-length", "--runtime", "docker"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "docker" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr[-4000:]  # the whole traceback if any


PLUGIN_TEST = '''
import signal


def test_restart_keeps_pods_in_podman(cluster, invariants):
    from cnikit.containers.container_daemon import ContainerDaemon

    c = cluster(nodes=2, pods=2)
    assert all(isinstance(d, ContainerDaemon) for d in c.daemons)
    c.kill_daemon(0, signal.SIGKILL)
    c.restart_daemon(0)
    c.add_pod(0, "after-restart")
'''


def test_pytest_option_runs_the_plugins_cluster_in_podman(tmp_path):
    (tmp_path / "test_user.py").write_text(PLUGIN_TEST)
    env = {k: v for k, v in os.environ.items() if k != "CNIKIT_RUNTIME"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--cnikit-runtime", "podman", str(tmp_path / "test_user.py")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout


def test_dockers_way_into_the_namespace_works_in_a_real_container(cluster):
    """Docker's join (--network none, then setns from inside, cnikit.containers.enter),
    exercised with podman as the engine: the daemon ends up in the node's namespace."""
    from cnikit.containers.container_daemon import ContainerDaemon

    base = cluster.daemons[0]
    base.stop()
    d = ContainerDaemon(Podman(), base.state_dir, env=base.env, netns=cluster.fabric.nodes[0].ns.path,
                        name=f"ck-{cluster.fabric.rid}-n0-enter", run_id=cluster.fabric.rid, join="enter")
    try:
        d.start(wait=60)
        assert "--network" in d.command() and "none" in d.command()
        assert os.stat(f"/proc/{d.pid}/ns/net").st_ino == os.stat(cluster.fabric.nodes[0].ns.path).st_ino
        assert cluster.status(0)["ok"]
    finally:
        d.stop()
        base.start(wait=60)


# ---- the Docker runtime, through the Docker Engine API that podman serves here ------------

@pytest.fixture(scope="module")
def docker_api():
    """podman's Docker Engine API service on a socket of its own, for this module only."""
    from cnikit.containers.podman import ApiService

    with ApiService() as api:
        yield api.url


@pytest.fixture(scope="module")
def docker_cluster(docker_api):
    from cnikit.cluster import CniCluster

    with docker_host(docker_api), CniCluster(nodes=1, profile="hardened", scale=0.05,
                                             runtime="docker") as c:
        yield c


@pytest.fixture
def docker_env(docker_api):
    with docker_host(docker_api):
        yield docker_api


def test_docker_runtime_runs_the_daemon_through_the_engine_api(docker_cluster, docker_env):
    from cnikit.containers.container_daemon import ContainerDaemon
    from cnikit.containers.docker_api import Docker

    d = docker_cluster.daemons[0]
    assert isinstance(d, ContainerDaemon) and isinstance(d.engine, Docker) and d.alive()
    # The engine API (not a CLI) knows the container; it entered the node's namespace
    # from inside (network none + setns), as on a Docker engine.
    info = d.engine.client.api.inspect_container(d.name)
    assert info["State"]["Pid"] == d.pid
    assert info["HostConfig"]["NetworkMode"] == "none" and not info["HostConfig"]["Privileged"]
    assert set(info["HostConfig"]["CapAdd"]) >= {"NET_ADMIN", "SYS_ADMIN"}
    assert "cnikit.containers.enter" in info["Args"]
    assert os.stat(f"/proc/{d.pid}/ns/net").st_ino == \
        os.stat(docker_cluster.fabric.nodes[0].ns.path).st_ino
    env = dict(e.split("=", 1) for e in info["Config"]["Env"])
    assert env["WARM_ENI_TARGET"] == "1" and env["CNIKIT_PROFILE"] == "hardened"
    assert info["Config"]["Labels"][LABEL_RUN] == docker_cluster.fabric.rid
    # The engine's log API lags the daemon's write by a moment under load.
    wait_for(lambda: "ready" in d.tail(20), 10, "'ready' in the daemon's log, read through the API")


def test_docker_daemons_container_reaches_the_clusters_object_store(docker_cluster, docker_env):
    from cnikit.containers.container_daemon import PYTHON

    d = docker_cluster.daemons[0]
    # An exec starts outside the node's namespace under Docker: it enters it as the daemon did.
    code, out = d.engine.client.containers.get(d.name).exec_run(
        [PYTHON, "-m", "cnikit.containers.enter", d.netns, "--", PYTHON, "-c", READ_NODES])
    assert (code, out.decode().strip()) == (0, docker_cluster.fabric.nodes[0].name)


def test_docker_kill_restart_keeps_the_state_and_stop_removes(docker_cluster, docker_env):
    d = docker_cluster.daemons[0]
    pod = docker_cluster.add_pod(0, "keep")
    first_pid = d.pid
    assert d.kill(signal.SIGKILL) == 137
    assert not d.alive()
    docker_cluster.restart_daemon(0)
    assert d.alive() and d.pid != first_pid
    assert pod.ip in {a["ip"] for a in docker_cluster.status(0)["assignments"]}
    d.stop()
    assert not d.alive()
    assert d.engine.inspect(d.name) is None, "stop() left the container"
    d.start(wait=60)
    assert pod.ip in {a["ip"] for a in docker_cluster.status(0)["assignments"]}
    docker_cluster.delete_pod(pod)


@pytest.mark.exclusive  # sweeps every run's containers (see Makefile)
def test_docker_sweep_removes_dead_runs_containers_only(docker_env):
    from cnikit.containers.docker_api import Docker
    from cnikit.runtime import Run

    docker = Docker().require()
    image = docker.ensure_image()
    live = Run.claim()
    dead_rid = "zz" + live.run_id[2:] if not live.run_id.startswith("zz") else "yy" + live.run_id[2:]
    names = {"dead": f"ck-{dead_rid}-dleftover", "live": f"ck-{live.run_id}-dlive"}
    try:
        for rid, name in ((dead_rid, names["dead"]), (live.run_id, names["live"])):
            docker.client.api.create_container(image, name=name, labels={
                LABEL_KIT: "daemon", LABEL_RUN: rid})
        removed = docker.remove_dead_containers()
        assert names["dead"] in removed and names["live"] not in removed
        assert docker.inspect(names["dead"]) is None and docker.inspect(names["live"]) is not None
    finally:
        for name in names.values():
            docker.remove(name)
        live.close()


@pytest.mark.timeout(REPLAY_TIMEOUT + 60)
@pytest.mark.parametrize("profile,code,verdict", [("vpc-cni-1.18.3", 1, "VIOLATION"),
                                                  ("hardened", 0, "HOLDS")])
def test_3019_replay_with_the_daemon_in_docker(docker_api, profile, code, verdict, tmp_path):
    # The daemons must really run as containers the Engine API knows. Asked of the API while
    # the run is on (podman's events file rotates at 1 MB and can lose a run's start events).
    replay_3019_in_docker(docker_api, profile, code, verdict, tmp_path,
                          {**os.environ, "DOCKER_HOST": docker_api}, REPLAY_TIMEOUT)
