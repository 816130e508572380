"""Node runtimes without starting anything: selection and its one-line errors, the podman
configuration files, the container's command line (namespace, volumes, DaemonSet env,
labels), the Docker namespace entry helper, the image's content hash."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cnikit.containers import noderuntime
from cnikit.containers.container_daemon import ContainerDaemon
from cnikit.containers.docker_api import Docker
from cnikit.containers.noderuntime import make_daemon
from cnikit.containers.podman import Podman
from cnikit.daemon.process import DaemonProcess
from cnikit.errors import EnvironmentProblem, UsageError


def test_unknown_runtime_is_a_usage_error():
    with pytest.raises(UsageError, match="not one of process, podman, docker"):
        noderuntime.check_runtime("lxc")
    with pytest.raises(UsageError):
        make_daemon("lxc", "/tmp/x", {}, "ck-abcde-n0")


def test_process_runtime_is_the_daemon_process(tmp_path):
    d = make_daemon("process", tmp_path, {"A": "1"}, "ck-abcde-n0")
    assert isinstance(d, DaemonProcess) and d.socket_path == tmp_path / "ipamd.sock"


def test_docker_without_engine_is_one_line():
    reason = Docker.available()
    if reason is None:
        pytest.skip("a Docker engine is reachable here")
    assert "\n" not in reason and reason.startswith("docker")
    with pytest.raises(EnvironmentProblem):
        noderuntime.check_runtime("docker")


class ArgvOnlyPodman(Podman):
    """Podman whose require() does not look for the binary: command() only builds argv."""

    def require(self):
        return self


def test_podman_command_joins_the_node_namespace_with_daemonset_env(tmp_path):
    d = ContainerDaemon(ArgvOnlyPodman(), tmp_path / "st", env={"CNIKIT_PROFILE": "hardened",
                                                                 "WARM_ENI_TARGET": "2"},
                        netns="/run/netns/ck-abcde-n1", image="localhost/img:1")
    argv = d.command()
    assert argv[:2] == ["run", "-d"] and "--privileged" not in argv
    caps = [argv[i + 1] for i, a in enumerate(argv) if a == "--cap-add"]
    assert caps == ["NET_ADMIN", "SYS_ADMIN", "NET_RAW"]
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "--security-opt"]
    assert opts == ["seccomp=unconfined", "apparmor=unconfined", "label=disable"]
    assert argv[argv.index("--network") + 1] == "ns:/run/netns/ck-abcde-n1"
    vols = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert f"{tmp_path / 'st'}:{tmp_path / 'st'}" in vols and "/run/netns:/run/netns:rslave" in vols
    env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--env")
    assert env["WARM_ENI_TARGET"] == "2", "the caller's env overrides the DaemonSet's"
    assert env["ENABLE_PREFIX_DELEGATION"] == "false" and env["MY_NODE_NAME"] == "ck-abcde-n1"
    assert env["CNIKIT_STATE_DIR"] == str(tmp_path / "st")
    assert "io.cnikit.run=abcde" in argv and d.name == "ck-abcde-n1-ipamd"
    assert argv[-4:] == ["localhost/img:1", "daemon", "--state-dir", str(tmp_path / "st")]


def test_docker_command_enters_the_namespace_from_inside(tmp_path):
    class D(Docker):
        def require(self):
            return self

    argv = ContainerDaemon(D(), tmp_path, netns="ck-abcde-n0", image="img").command()
    assert argv[argv.index("--network") + 1] == "none"
    i = argv.index("cnikit.containers.enter")
    assert argv[i + 1] == "/run/netns/ck-abcde-n0" and argv[i + 2] == "--"


def test_container_daemon_needs_a_namespace(tmp_path):
    with pytest.raises(UsageError):
        ContainerDaemon(ArgvOnlyPodman(), tmp_path, netns=None)


def test_podman_conf_files(tmp_path, monkeypatch):
    import cnikit.containers.podman as pm

    monkeypatch.setattr(pm, "CONF_ROOT", tmp_path)
    p = pm.Podman(net_dir=tmp_path / "nets", plugin_dirs=["/opt/cni"], name="t")
    env = p.env()
    conf = (tmp_path / "containers-t.conf").read_text()
    assert env["CONTAINERS_CONF"] == str(tmp_path / "containers-t.conf")
    assert 'runtime = "runc"' in conf and 'default_ulimits = ["nofile=1024:1024"' in conf
    assert 'network_backend = "cni"' in conf and '"/opt/cni"' in conf
    assert f'network_config_dir = "{tmp_path / "nets"}"' in conf
    assert "graphroot" in (tmp_path / "storage.conf").read_text()


def test_enter_usage_and_missing_namespace():
    run = [sys.executable, "-m", "cnikit.containers.enter"]
    p = subprocess.run(run, capture_output=True, text=True)
    assert p.returncode == 2 and "usage" in p.stderr
    p = subprocess.run(run + ["/run/netns/no-such-ns", "--", "/bin/true"], capture_output=True, text=True)
    assert p.returncode == 2 and "no-such-ns" in p.stderr and "Traceback" not in p.stderr


def test_image_hash_is_stable_and_names_the_tag():
    from cnikit.containers import image

    h = image.content_hash()
    assert h == image.content_hash() and len(h) == 16
    assert image.image_ref(h) == f"localhost/cnikit-daemon:{h}"
    names = {d.metadata["Name"].lower() for d in image._dists()}
    assert "click" in names
    assert not names & {"moto", "boto3", "botocore"}, \
        "the daemon image carries only what the daemon imports"


def test_the_daemon_imports_without_what_its_image_leaves_out():
    # The image carries only what the daemon imports: a module of the daemon that pulls in
    # botocore, boto3 or moto (say through cnikit.cloud's package) kills every container
    # daemon at start, which only the podman and Docker tests would otherwise show.
    from cnikit.daemon.process import DAEMON_MODULES

    blocked = "import sys\nfor m in ('botocore', 'boto3', 'moto'):\n    sys.modules[m] = None\n"
    code = blocked + "".join(f"import {m}\n" for m in DAEMON_MODULES)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-600:]
