"""Install `cnikit-cni` into a CNI bin directory with a cheap start-up.

A runtime executes the plugin at every pod ADD and DEL, so its start-up is paid per pod.

The compiled build (`compiled/main.go`, the same plugin answer for answer) starts in ~1.5
ms of CPU against ~18 ms for the Python one. It is built here with the machine's Go (the
standard library only, offline), once per version of its source (main.go and the
constants.json it embeds), and installed as the plugin. Beside it goes the Python plugin as
`<name>-python`, which the compiled one hands a netconf with `"wiring": "plugin"` (the
wiring code is Python). Without Go, or with CNIKIT_CNI_BUILD=python, the Python plugin is
the plugin.

The Python plugin's launcher runs Python isolated and without site (`-IS`): pip's console
script runs the venv's Python with `site`, which costs ~15 ms here (the editable-install
finder, distutils shim). It puts the source tree on sys.path itself: the plugin needs only
the standard library and cnikit. So any interpreter of the same Python version runs it, and
the launcher takes the fastest to start: the system's `python3` (distributions link it
statically) before the one the venv was made from (pyenv and python.org builds load
libpython.so at each start), and never the venv's own link (Python then looks for and reads
pyvenv.cfg). Measured here, VERSION interleaved over 150 runs: 8.3 ms (Debian's python3)
against 9.4 (pyenv's) and 9.6 (venv).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cnikit.errors import EnvironmentProblem

ROOT = Path(__file__).resolve().parents[2]
GO_SOURCE = Path(__file__).resolve().with_name("compiled") / "main.go"
CONSTANTS = GO_SOURCE.with_name("constants.json")  # embedded in the build: part of its source
BUILD_DIR = ROOT / "build" / "cnikit-cni"
BUILD_ENV = "CNIKIT_CNI_BUILD"  # auto (default) | compiled | python
BUILDS = ("auto", "compiled", "python")

TEMPLATE = """#!{python} -IS
import sys
sys.path.insert(0, {root!r})
from cnikit.plugin.main import main
sys.exit(main())
"""


SYSTEM_PYTHON = "/usr/bin/python3"


class BuildError(EnvironmentProblem):
    """The compiled plugin could not be built, or CNIKIT_CNI_BUILD names no build: one line,
    exit 2, like any other problem with the machine's setup."""


_warned: set[str] = set()  # auto's fallbacks already told: once per process, not per node


@functools.cache
def plugin_python() -> str:
    """The interpreter the launcher runs: see the module's docstring."""
    base = getattr(sys, "_base_executable", "") or sys.executable
    if not os.access(base, os.X_OK):
        base = sys.executable
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        got = subprocess.run([SYSTEM_PYTHON, "-IS", "-c",
                              "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return base
    return SYSTEM_PYTHON if got == want else base


def build_path() -> Path:
    """Where the build of the current source (main.go and the constants.json it embeds) goes."""
    digest = hashlib.sha256(GO_SOURCE.read_bytes() + CONSTANTS.read_bytes()).hexdigest()[:16]
    return BUILD_DIR / f"cnikit-cni-{digest}"


def compiled_plugin() -> Path:
    """The compiled plugin for the current source, built first if it is not yet."""
    out = build_path()
    if out.exists():
        return out
    go = shutil.which("go")
    if go is None:
        raise BuildError("Go is not installed (Debian: apt-get install golang-go)")
    try:
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        lock = os.open(BUILD_DIR / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise BuildError(f"{BUILD_DIR}: {e.strerror}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others then find it
        if not out.exists():
            _build(go, out)
    finally:
        os.close(lock)
    return out


def _build(go: str, out: Path) -> None:
    # Offline and reproducible: no modules, no proxy, no cgo, caches inside the build dir.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GO111MODULE": "off",
           "GOPROXY": "off", "GOFLAGS": "", "CGO_ENABLED": "0", "HOME": str(BUILD_DIR),
           "GOPATH": str(BUILD_DIR / "gopath"), "GOCACHE": str(BUILD_DIR / "gocache")}
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        p = subprocess.run([go, "build", "-ldflags", "-s -w", "-o", str(tmp), str(GO_SOURCE)],
                           env=env, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"go build: {e}") from None
    if p.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"go build of {GO_SOURCE.name} failed: {first}")
    os.replace(tmp, out)
    for old in BUILD_DIR.glob("cnikit-cni-*"):  # earlier versions of the source
        if old != out:
            old.unlink(missing_ok=True)


def chosen_build(build: str | None = None) -> str:
    build = (build or os.environ.get(BUILD_ENV) or "auto").strip().lower()
    if build not in BUILDS:
        raise BuildError(f"{BUILD_ENV}={build!r}: expected one of {', '.join(BUILDS)}")
    return build


def write_launcher(bin_dir: str | os.PathLike, name: str = "cnikit-cni",
                   python: str | None = None, build: str | None = None) -> Path:
    """`name` in bin_dir: the compiled plugin (with `<name>-python` beside it) or, where Go
    is missing (`build` auto) or `build` is "python", the Python plugin's launcher."""
    build = chosen_build(build)
    binary = None
    if build != "python":
        try:
            binary = compiled_plugin()
        except BuildError as e:
            if build == "compiled":
                raise
            if str(e) not in _warned:
                _warned.add(str(e))
                print(f"cnikit: the CNI plugin runs as Python ({e})", file=sys.stderr)
    path = Path(bin_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if binary is None:
        _write_python(path, python)
        return path
    _write_python(path.with_name(f"{name}-python"), python)
    tmp = path.with_name(f".{name}.tmp{os.getpid()}")
    try:
        os.link(binary, tmp)  # the same file: no copy of 2 MB at every node's install
    except OSError:
        shutil.copy2(binary, tmp)
    os.replace(tmp, path)
    return path


def _write_python(path: Path, python: str | None) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(TEMPLATE.format(python=python or plugin_python(), root=str(ROOT)))
    tmp.chmod(0o755)
    os.replace(tmp, path)


if __name__ == "__main__":
    print(write_launcher(sys.argv[1] if len(sys.argv) > 1 else "/opt/cni/bin"))
