"""compose/docker-compose.yml and compose/Dockerfile: syntax and wiring, without an engine.

Every service reached by URL exists and listens on that port, every dependency exists (and
has a healthcheck where one is waited for), every kit command line parses under the real
cnikit/fault-imds commands after Compose's ${VAR:-default} interpolation, the scenario and
profiles exist, node containers have the capabilities they need (never privileged), and podman-compose normalises the file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "compose" / "Dockerfile"
VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value, env: dict[str, str]):
    if isinstance(value, str):
        return VAR.sub(lambda m: env.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def stack() -> dict:
    return interpolate(yaml.safe_load(COMPOSE.read_text()), {})


def listens_on(name: str, svc: dict) -> set[int]:
    """Ports a service's process listens on, read from its own command and environment."""
    ports = set()
    cmd = svc.get("command") or []
    for flag in ("--port", "--listen", "--control"):
        if flag in cmd:
            ports.add(int(cmd[cmd.index(flag) + 1].rsplit(":", 1)[-1]))
    listen = (svc.get("environment") or {}).get("GATEWAY_LISTEN")
    if listen:
        ports.add(int(listen.rsplit(":", 1)[-1]))
    return ports


def test_services_and_roles(stack):
    assert set(stack["services"]) == {"localstack", "ec2-gate", "fault-imds", "node", "scenario"}
    for name in ("node", "scenario"):
        svc = stack["services"][name]
        assert not svc.get("privileged"), f"{name}: runc refuses privileged where caps lack"
        assert {"NET_ADMIN", "SYS_ADMIN"} <= set(svc.get("cap_add") or []), f"{name} makes namespaces"
        assert "apparmor=unconfined" in (svc.get("security_opt") or []), f"{name} remounts /proc/sys"
        # The kit's prober exits when its parent is PID 1: an init must be PID 1 instead.
        assert stack["services"][name].get("init") is True, f"{name} needs an init as PID 1"
    assert stack["services"]["localstack"]["environment"]["SERVICES"] == "ec2"


def test_dependencies_exist_and_health_is_defined(stack):
    services = stack["services"]
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        for dep, cond in (deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps)):
            assert dep in services, f"{name} depends on unknown {dep}"
            if (cond or {}).get("condition") == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health, it has none"


def test_every_url_points_at_a_service_port(stack):
    services = stack["services"]
    urls = 0
    for name, svc in services.items():
        text = yaml.safe_dump({k: svc.get(k) for k in ("command", "healthcheck", "environment")})
        for host, port in re.findall(r"https?://([\w.-]+):(\d+)", text):
            urls += 1
            target = name if host in ("127.0.0.1", "localhost") else host
            assert target in services, f"{name} calls unknown host {host}"
            assert int(port) in listens_on(target, services[target]), \
                f"{name} calls {host}:{port}; {target} listens on {listens_on(target, services[target])}"
            if target != name:
                assert target in (svc.get("depends_on") or {}), f"{name} calls {target} without depending on it"
    assert urls >= 6


def test_kit_command_lines_parse_under_the_real_commands(stack):
    import click

    from cnikit import scenarios
    from cnikit.cli import cli
    from fault_imds.cli import cli as fault_imds

    checked = 0
    for name, svc in stack["services"].items():
        if "build" not in svc:
            continue
        entry = svc.get("entrypoint") or ["cnikit"]
        argv = list(svc["command"])
        if entry == ["cnikit"]:
            ctx = click.Context(cli)
            cmd = cli.get_command(ctx, argv[0])
            assert cmd is not None, f"{name}: no cnikit command {argv[0]}"
            cmd.make_context(argv[0], argv[1:])
            if argv[0] == "run":
                assert argv[1] in scenarios.names(), f"{name}: unknown scenario {argv[1]}"
        else:
            assert entry == ["fault-imds"], entry
            sub = fault_imds.get_command(click.Context(fault_imds), argv[0])
            assert sub is not None, f"{name}: no fault-imds command {argv[0]}"
            sub.make_context(argv[0], argv[1:])
        checked += 1
    assert checked == 4


LOOPBACK = ("127.0.0.1", "::1", "[::1]", "localhost")


def exposed_ports(spec: dict) -> list[str]:
    """Every port a Compose file publishes on an address other than loopback, as written:
    Docker binds a port with no host address on every interface of the host."""
    exposed = []
    for name, svc in (spec.get("services") or {}).items():
        for port in svc.get("ports") or []:
            if isinstance(port, dict):
                host = port.get("host_ip") or ""
            else:
                # HOST_IP:HOST_PORT:CONTAINER_PORT, HOST_PORT:CONTAINER_PORT or CONTAINER_PORT
                parts = str(port).rsplit(":", 2)
                host = parts[0] if len(parts) == 3 else ""
            if host not in LOOPBACK:
                exposed.append(f"{name}: {port}")
    return exposed


def test_published_ports_are_on_loopback_only():
    """The gate's /_cnikit API and the IMDS control port inject faults and kill daemons, and
    nothing authenticates them: by default a Compose file offers them to this host alone."""
    files = sorted(COMPOSE.parent.glob("*.y*ml"))
    assert COMPOSE in files
    for path in files:
        spec = interpolate(yaml.safe_load(path.read_text()), {})
        assert any(svc.get("ports") for svc in spec["services"].values()), path
        assert exposed_ports(spec) == [], f"{path.name} publishes beyond loopback"
    widened = interpolate(yaml.safe_load(COMPOSE.read_text()), {"CNIKIT_PUBLISH_ADDR": "0.0.0.0"})
    assert len(exposed_ports(widened)) == 3, "CNIKIT_PUBLISH_ADDR widens every published port"


def test_the_loopback_check_catches_every_spelling_of_all_interfaces():
    spec = {"services": {"a": {"ports": ["5000:5000", "1338", "0.0.0.0:1:2", {"target": 3, "published": 3},
                                        {"target": 4, "host_ip": "0.0.0.0"}]},
                         "b": {"ports": ["127.0.0.1:5:5", "[::1]:6:6", {"target": 7, "host_ip": "127.0.0.1"}]}}}
    assert exposed_ports(spec) == ["a: 5000:5000", "a: 1338", "a: 0.0.0.0:1:2",
                                   "a: {'target': 3, 'published': 3}", "a: {'target': 4, 'host_ip': '0.0.0.0'}"]


def test_dockerfile_copies_what_exists_and_runs_the_kits_script():
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        for src in line.split()[:-1]:
            assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    scripts = (ROOT / "pyproject.toml").read_text()
    assert 'cnikit = "cnikit.cli:main"' in scripts and "fault-imds =" in scripts
    assert 'ENTRYPOINT ["cnikit"]' in text


@pytest.mark.skipif(shutil.which("podman-compose") is None and not
                    (Path(os.sys.executable).parent / "podman-compose").exists(),
                    reason="podman-compose not installed (dev dependency)")
def test_podman_compose_normalises_the_file():
    exe = shutil.which("podman-compose") or str(Path(os.sys.executable).parent / "podman-compose")
    p = subprocess.run([exe, "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    cfg = yaml.safe_load(p.stdout)
    assert set(cfg["services"]) == {"localstack", "ec2-gate", "fault-imds", "node", "scenario"}
    assert cfg["services"]["scenario"]["command"][1] == "imds-stale-equal-length"
    assert cfg["services"]["ec2-gate"]["build"]["dockerfile"] == "compose/Dockerfile"
    assert exposed_ports(cfg) == []


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose not installed (make setup: apt package docker-compose)")
def test_compose_v1_takes_the_file_without_its_name(tmp_path):
    """Debian's docker-compose 1.29 (Compose v1) rejects the top-level `name:`; the copy
    compose_docker hands it differs by that line alone and normalises, ports from variables
    and on loopback as Compose itself reads them."""
    from cnikit.containers.compose_docker import v1_file

    v1 = v1_file(tmp_path / "v1.yml")
    original = yaml.safe_load(COMPOSE.read_text())
    assert yaml.safe_load(v1.read_text()) == {k: v for k, v in original.items() if k != "name"}
    env = {**os.environ, "CNIKIT_GATE_PORT": "15000"}
    p = subprocess.run(["docker-compose", "-p", "cnikit", "-f", str(v1), "--project-directory",
                        str(COMPOSE.parent), "config"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr
    cfg = yaml.safe_load(p.stdout)
    assert cfg["services"]["ec2-gate"]["ports"] == ["127.0.0.1:15000:5000/tcp"]
    assert exposed_ports(cfg) == []
    assert not cfg["services"]["node"].get("privileged")
    assert "NET_ADMIN" in cfg["services"]["node"]["cap_add"]


def test_proc_sys_is_remounted_only_where_the_kits_container_asks(monkeypatch):
    from cnikit.fabric import writable_sys

    monkeypatch.delenv(writable_sys.OPT_IN, raising=False)
    assert writable_sys.make_writable() is False  # never on a host or a foreign container
    assert yaml.safe_load(COMPOSE.read_text())["x-kit"]["environment"][writable_sys.OPT_IN] == "1"
