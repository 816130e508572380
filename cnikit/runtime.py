"""Process-wide conventions: run ids, the run directory, the time scale, preconditions.

Everything the kit creates on the host carries a run id, and each live run has a
directory under RUN_ROOT holding `owner.json` (pid and process start time), so a
later run can tell a crashed run's leftovers (owner dead) from a live run's.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from cnikit.errors import EnvironmentProblem

RUN_ROOT = Path(os.environ.get("CNIKIT_RUN_ROOT", "/run/cnikit"))
# The daemons' state (sockets, ipam.json) of a run lives on a tmpfs, as on a real node.
SHM_ROOT = Path("/dev/shm")
# Short, because interface names are limited to 15 characters and carry the run id.
RUN_ID_LEN = 5
NAME_PREFIX = "ck"


def time_scale() -> float:
    """CNIKIT_TIME_SCALE compresses every interval of the kit and the daemon at once.

    0.1 means ten times faster than upstream's defaults. Defaults are upstream's (1.0).
    """
    raw = os.environ.get("CNIKIT_TIME_SCALE", "1")
    try:
        value = float(raw)
    except ValueError:
        raise EnvironmentProblem(f"CNIKIT_TIME_SCALE={raw!r} is not a number") from None
    if not 0 < value <= 100:
        raise EnvironmentProblem(f"CNIKIT_TIME_SCALE={raw!r} must be in (0, 100]")
    return value


def scaled(seconds: float) -> float:
    """An upstream interval in this process's compressed time."""
    return seconds * time_scale()


def shm_dir(run_id: str) -> Path:
    return SHM_ROOT / f"cnikit-{run_id}"


def new_run_id() -> str:
    return secrets.token_hex(4)[:RUN_ID_LEN]


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of pid (field 22 of /proc/pid/stat), or None if gone.

    Comparing it, not just the pid, keeps a recycled pid from keeping a dead run alive.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def is_zombie(pid: int) -> bool:
    """True for a process that has exited and is not yet reaped (or is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@dataclass
class Run:
    """A live run: its id and directory. Claim one with `Run.claim()`, release with `close()`."""

    run_id: str
    dir: Path

    @classmethod
    def claim(cls, run_id: str | None = None) -> Run:
        run_id = run_id or new_run_id()
        if not run_id.isalnum() or len(run_id) != RUN_ID_LEN:
            raise EnvironmentProblem(f"run id {run_id!r} must be {RUN_ID_LEN} letters or digits")
        RUN_ROOT.mkdir(parents=True, exist_ok=True)
        path = RUN_ROOT / run_id
        try:
            path.mkdir()
        except FileExistsError:
            raise EnvironmentProblem(
                f"run id {run_id} is already in use ({path}); pick another or run 'cnikit cleanup'"
            ) from None
        write_owner(path)
        return cls(run_id, path)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def write_owner(path: Path) -> None:
    """Mark a directory as this process's (`run_is_alive` tells whether its owner lives)."""
    owner = {"pid": os.getpid(), "start": process_start_time(os.getpid()), "since": time.time()}
    (path / "owner.json").write_text(json.dumps(owner))


def owner_of(path: Path) -> tuple[int, str | None] | None:
    """(pid, start time) of the process that marked path (write_owner), or None."""
    try:
        owner = json.loads((path / "owner.json").read_text())
        return int(owner["pid"]), owner.get("start")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def still_running(pid: int, start: str | None) -> bool:
    """pid is still the process that started at `start`, and has not exited."""
    return process_start_time(pid) == start and not is_zombie(pid)


def run_is_alive(run_dir: Path) -> bool:
    """True while the process that claimed run_dir is still the same running process."""
    owner = owner_of(run_dir)
    if owner is None:
        # A directory being created right now has no owner file yet: give it time.
        try:
            return time.time() - run_dir.stat().st_mtime < 10
        except OSError:
            return False
    return still_running(*owner)


def live_run_ids() -> set[str]:
    if not RUN_ROOT.is_dir():
        return set()
    return {p.name for p in RUN_ROOT.iterdir() if p.is_dir() and run_is_alive(p)}


def require_root(what: str = "this command") -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem(f"{what} needs root (network namespaces); run it with sudo")


# The Debian package that provides each external program the kit runs.
PACKAGES = {"nsenter": "util-linux", "podman": "podman", "runc": "runc", "docker": "docker.io",
            "ip6tables": "iptables", "iptables": "iptables",
            "ldd": "libc-bin"}
# The programs each `cnikit` command runs, checked before it starts anything. A command
# not listed runs none.
COMMAND_TOOLS: dict[str, tuple[str, ...]] = {
    "run": ("nsenter",), "matrix": ("nsenter",), "demo": ("nsenter",), "up": ("nsenter",),
    "certify": ("nsenter",),
}
# ... plus the daemon runtime's own, when CNIKIT_RUNTIME (`--runtime`) chooses one (ldd
# finds the libraries the daemon image needs).
RUNTIME_TOOLS: dict[str, tuple[str, ...]] = {"podman": ("podman", "runc", "ldd"),
                                             "docker": ("ldd",)}  # the Engine API, no CLI


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        package = PACKAGES.get(name, name)
        raise EnvironmentProblem(f"'{name}' not found on PATH; it comes with the Debian package "
                                 f"{package} (apt-get install {package})")
    return path


def require_tools(command: str) -> None:
    """Every program `cnikit COMMAND` will run is on PATH, or a one-line error naming it."""
    tools = COMMAND_TOOLS.get(command, ())
    if tools:
        tools += RUNTIME_TOOLS.get(os.environ.get("CNIKIT_RUNTIME", ""), ())
    for name in tools:
        require_tool(name)
