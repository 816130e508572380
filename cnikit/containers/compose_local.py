"""Run compose/docker-compose.yml here, with podman-compose and locally built images.

No registry is reachable from this machine, so the Dockerfile's and LocalStack's images are
replaced by local stand-ins (cnikit.containers.stack_images), named through the variables
the Compose file reads (CNIKIT_IMAGE, LOCALSTACK_IMAGE). Everything else is the file as a
Docker user runs it: the same services, commands, network (podman's CNI bridge with the
dnsname plugin, so services find each other by name), published ports, the node
containers. The scenario container's exit code is the verdict.

    python -m cnikit.containers.compose_local [--keep]      (make compose-podman)

Exit 0 when the scenario's verdict is what it expects (the default `vpc-cni-1.18.3` must
show the violation: exit code 1 of `cnikit run`), 1 otherwise, 2 when it cannot run.
Always `podman-compose down` at the end (unless --keep), and removes the iptables INPUT
rule the dnsname plugin leaves for the network's bridge.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from cnikit.containers.podman import Podman
from cnikit.errors import CnikitError, EnvironmentProblem

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
PROJECT = "cnikit"
SERVICES = ("localstack", "ec2-gate", "fault-imds", "node", "scenario")


def expected_exit(profile: str, scenario: str) -> int | None:
    """`cnikit run`'s exit code the profile expects for the scenario (None: not asserted)."""
    from cnikit.daemon import profiles

    verdict = profiles.get(profile).expected_verdict(scenario)
    return None if verdict is None else (0 if verdict == "holds" else 1)


def log(msg: str) -> None:
    print(f"compose-podman: {msg}", file=sys.stderr, flush=True)


def options(prog: str, argv: list[str] | None) -> tuple[argparse.Namespace, str, str]:
    """The command line (--keep, --timeout) and CNIKIT_PROFILE/CNIKIT_SCENARIO with defaults."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--keep", action="store_true", help="leave the stack running")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    return (args, os.environ.get("CNIKIT_PROFILE", "vpc-cni-1.18.3"),
            os.environ.get("CNIKIT_SCENARIO", "imds-stale-equal-length"))


def wait_exited(state, service: str, timeout: float, statuses: tuple[str, ...]) -> int:
    """The exit code of `service` once state(service) shows it stopped in one of `statuses`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = state(service)
        if st and not st.get("Running") and st.get("Status") in statuses:
            return int(st.get("ExitCode", -1))
        time.sleep(0.5)
    raise EnvironmentProblem(f"{service} still running after {timeout:.0f}s")


def run_stack(stack, profile: str, scenario: str, args: argparse.Namespace, log) -> int:
    """Bring the stack up (after clearing a previous run's leftovers), wait for the scenario
    container's exit, print its logs, take it down unless --keep; 0 when the exit is what
    the profile expects and the other services are still up, else 1."""
    stack.down()  # a previous run's leftovers
    t1 = time.monotonic()
    up: dict[str, bool] = {}
    try:
        stack.compose("up", "-d", "--no-build")
        code = stack.wait_exit("scenario", args.timeout)
        log(f"scenario {scenario} [{profile}] exited {code} after {time.monotonic() - t1:.0f}s")
        print(stack.logs("scenario"))
        up = {s: bool(stack.state(s).get("Running")) for s in SERVICES[:-1]}
        log(f"still running: {json.dumps(up)}")
    finally:
        if not args.keep:
            stack.down()
    expected = expected_exit(profile, scenario)
    ok = code == expected and all(up.values())
    log("as expected" if ok else f"NOT as expected (exit {code}, expected {expected}; {up})")
    return 0 if ok else 1


def podman_compose() -> str:
    exe = shutil.which("podman-compose") or str(Path(sys.executable).parent / "podman-compose")
    if not Path(exe).exists():
        raise EnvironmentProblem("podman-compose is not installed (pip install podman-compose)")
    return exe


class Stack:
    def __init__(self, env: dict[str, str]):
        self.podman = Podman().require()
        self.exe = podman_compose()
        self.env = {**self.podman.env(), **env}

    def compose(self, *args: str, check: bool = True, timeout: float = 600):
        p = subprocess.run([self.exe, "-p", PROJECT, "-f", str(COMPOSE_FILE), *args],
                           env=self.env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if check and p.returncode != 0:
            last = (p.stderr.strip().splitlines() or [str(p.returncode)])[-1]
            raise EnvironmentProblem(f"podman-compose {args[0]}: {last}")
        return p

    def state(self, service: str) -> dict:
        info = self.podman.inspect(f"{PROJECT}_{service}_1") or {}
        return info.get("State") or {}

    def wait_exit(self, service: str, timeout: float) -> int:
        return wait_exited(self.state, service, timeout, ("exited", "stopped"))

    def logs(self, service: str, tail: int = 20) -> str:
        return self.podman.out("logs", "--tail", str(tail), f"{PROJECT}_{service}_1", check=False)

    def down(self) -> None:
        nets = self.podman.out("network", "ls", "--format", "{{.Name}} {{.NetworkInterface}}",
                               check=False)
        bridge = next((line.split()[1] for line in nets.splitlines()
                       if line.startswith(f"{PROJECT}_default ") and len(line.split()) > 1), None)
        self.compose("down", "-v", check=False)
        if bridge:
            subprocess.run(["iptables", "-D", "INPUT", "-i", bridge, "-p", "udp", "-m", "udp",
                            "--dport", "53", "-j", "ACCEPT"], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    args, profile, scenario = options("compose-podman", argv)
    try:
        if os.geteuid() != 0:
            raise EnvironmentProblem("compose-podman needs root (node containers make namespaces)")
        from cnikit.containers.stack_images import kit_image, localstack_image

        t0 = time.monotonic()
        env = {"CNIKIT_IMAGE": kit_image(log=log), "LOCALSTACK_IMAGE": localstack_image(log=log),
               "CNIKIT_PROFILE": profile, "CNIKIT_SCENARIO": scenario}
        log(f"images ready in {time.monotonic() - t0:.0f}s: {env['CNIKIT_IMAGE']}, {env['LOCALSTACK_IMAGE']}")
        (ROOT / "reports" / "compose").mkdir(parents=True, exist_ok=True)
        return run_stack(Stack(env), profile, scenario, args, log)
    except CnikitError as e:
        print(f"compose-podman: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
