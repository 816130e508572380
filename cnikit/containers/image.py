"""The daemon's container image, built on this machine with no registry.

There is no registry to pull a Python base image from, so the image is assembled from what
the host already runs: its Python 3.11 interpreter with the shared libraries it loads
(found with ldd), the standard library (without tests, tkinter, idle), the packages the
daemon imports (copied from the kit's venv with their metadata: click; the daemon speaks to
EC2 with the standard library) and the kit's own packages. The result
is a root file system tarball `podman import`ed as `localhost/cnikit-daemon:<hash>`.

The tag is a hash of every input (the kit's source, the dependency versions, the
interpreter): an unchanged kit reuses the image (a `podman image exists`, ~40 ms), a
changed one builds again (~5 s) and drops the kit's older daemon images. Users with Docker
build `compose/Dockerfile` instead (a slim Python base and the kit's wheel).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

from cnikit.containers.podman import CONF_ROOT, LABEL_KIT, Podman
from cnikit.errors import EnvironmentProblem

REPO = "localhost/cnikit-daemon"
FORMAT = "5"  # bump when the layout below changes
SOURCE_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cnikit", "fault_imds", "faultcore")
# What `cnikit daemon` imports beyond the standard library (dependencies follow).
ROOT_DISTS = ("click",)
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
               "pydoc_data", "distutils", "config-3.11-x86_64-linux-gnu", "__phello__"}
SITE = "opt/cnikit/site"  # on PYTHONPATH: the same for any interpreter
ENTRYPOINT = '["/usr/local/bin/python3", "-m", "cnikit.cli"]'


def build_dir() -> Path:
    """Under the checkout's git-ignored build/ when there is one, else /var/lib/cnikit."""
    if (SOURCE_ROOT / "pyproject.toml").exists() and os.access(SOURCE_ROOT, os.W_OK):
        return SOURCE_ROOT / "build" / "image"
    return Path("/var/lib/cnikit/build/image")


def _dists() -> list[md.Distribution]:
    """ROOT_DISTS and everything they require (extras left out), from this interpreter."""
    seen: dict[str, md.Distribution] = {}
    todo = list(ROOT_DISTS)
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise EnvironmentProblem(f"image build: package {name} is not installed (make setup)") from None
        seen[name] = dist
        for req in dist.requires or []:
            if "extra ==" in req or "extra==" in req:
                continue
            if "python_version" in req and not _marker_ok(req):
                continue
            todo.append(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0])
    return [seen[k] for k in sorted(seen)]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_ok(req: str) -> bool:
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return True
    marker = Requirement(req).marker
    return marker is None or marker.evaluate()


def source_files() -> list[Path]:
    out = []
    for pkg in PACKAGES:
        for p in sorted((SOURCE_ROOT / pkg).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                out.append(p)
    return out


def content_hash() -> str:
    h = hashlib.sha256(f"format {FORMAT} python {sys.version}\n".encode())
    for d in _dists():
        h.update(f"{d.metadata['Name']}=={d.version}\n".encode())
    for p in source_files():
        h.update(str(p.relative_to(SOURCE_ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def image_ref(digest: str | None = None) -> str:
    return f"{REPO}:{digest or content_hash()}"


def ensure_image(podman: Podman | None = None, log=None) -> str:
    """The current daemon image's reference, built first if the kit changed since."""
    podman = (podman or Podman()).require()
    ref = image_ref()
    if podman.image_exists(ref):
        return ref
    CONF_ROOT.mkdir(parents=True, exist_ok=True)
    # One build at a time (parallel test sessions share the storage).
    with open(CONF_ROOT / "image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if podman.image_exists(ref):
            return ref
        t0 = time.monotonic()
        work = build_dir()
        shutil.rmtree(work, ignore_errors=True)
        rootfs = work / "rootfs"
        build_rootfs(rootfs)
        tar = work / "rootfs.tar"
        with tarfile.open(tar, "w") as tf:
            for entry in sorted(os.listdir(rootfs)):
                tf.add(rootfs / entry, arcname=entry)
        quiet = ["--quiet"] if isinstance(podman, Podman) else []
        podman.run("import", *quiet,
                   "--change", f"ENTRYPOINT {ENTRYPOINT}",
                   "--change", 'CMD ["daemon"]',
                   "--change", "ENV PYTHONUNBUFFERED=1",
                   "--change", "ENV PYTHONDONTWRITEBYTECODE=1",
                   "--change", f"ENV PYTHONPATH=/{SITE}",
                   "--change", f"LABEL {LABEL_KIT}=daemon",
                   str(tar), ref, timeout=300)
        shutil.rmtree(work, ignore_errors=True)
        _drop_old_images(podman, keep=ref)
        if log:
            log(f"built {ref} in {time.monotonic() - t0:.1f}s")
    return ref


def _drop_old_images(podman: Podman, keep: str) -> None:
    out = podman.out("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                     f"reference={REPO}", check=False)
    for ref in out.split():
        if ref != keep:
            podman.run("rmi", ref, check=False)


# ---- the root file system ------------------------------------------------------------

def build_rootfs(rootfs: Path) -> Path:
    rootfs.mkdir(parents=True)
    for d in ("usr/bin", "usr/lib", "usr/lib64", "usr/local/bin", "etc", "tmp", "run", "proc", "sys", "dev", "var"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    # Debian's merged /usr: /lib and /lib64 are links into /usr.
    for link in ("lib", "lib64", "bin", "sbin"):
        (rootfs / link).symlink_to(f"usr/{link if link != 'sbin' else 'bin'}")
    os.chmod(rootfs / "tmp", 0o1777)
    copy_python(rootfs)
    _copy_dists(rootfs / SITE)
    copy_kit(rootfs / SITE)
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc/group").write_text("root:x:0:\n")
    (rootfs / "etc/hosts").write_text("127.0.0.1 localhost\n")
    # No DNS: the daemon's endpoints are addresses, and http.server's getfqdn() would
    # otherwise wait for a name server that no node namespace reaches (5 s per listener).
    (rootfs / "etc/nsswitch.conf").write_text("hosts: files\nnetworks: files\n")
    return rootfs


def copy_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def copy_python(rootfs: Path) -> None:
    """This interpreter, relocated to /usr/local (it finds its prefix from where it is)."""
    exe = Path(os.path.realpath(sys.executable))
    copy_file(exe, rootfs / "usr/local/bin" / exe.name)
    (rootfs / "usr/local/bin/python3").symlink_to(exe.name)
    (rootfs / "usr/bin/python3").symlink_to(f"/usr/local/bin/{exe.name}")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    dynload = Path(sysconfig.get_config_var("DESTSHARED") or stdlib / "lib-dynload")

    def ignore(directory: str, names: list[str]) -> set[str]:
        if Path(directory) == stdlib:
            return {n for n in names if n in STDLIB_SKIP or n in ("site-packages", "dist-packages")}
        return {n for n in names if n in ("test", "tests", "idle_test")}

    target = rootfs / "usr/local/lib" / stdlib.name
    shutil.copytree(stdlib, target, symlinks=True, ignore=ignore)
    if not (target / "lib-dynload").is_dir():
        shutil.copytree(dynload, target / "lib-dynload", symlinks=True)
    libs = {Path("/etc/ld.so.cache")} if Path("/etc/ld.so.cache").exists() else set()
    for obj in [exe, *dynload.glob("*.so")]:
        libs |= shared_libs(obj)
    for lib in libs:
        # The name the loader asks for, in the directory it really is in (RUNPATHs hold).
        real_dir = Path(os.path.realpath(lib.parent))
        copy_file(Path(os.path.realpath(lib)), rootfs / real_dir.relative_to("/") / lib.name)


def shared_libs(obj: Path) -> set[Path]:
    out = subprocess.run(["ldd", str(obj)], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            libs.add(Path(m.group(1)))
    return libs


def _copy_dists(site: Path) -> None:
    for dist in _dists():
        for f in dist.files or []:
            src = Path(dist.locate_file(f))
            rel = Path(f)
            if ".." in rel.parts or not src.is_file():
                continue  # console scripts outside site-packages
            copy_file(src, site / rel)


def copy_kit(site: Path) -> None:
    for src in source_files():
        copy_file(src, site / src.relative_to(SOURCE_ROOT))
    info = site / "cnikit-image.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cnikit\n")
    # Compiled once here, so every daemon start in a container skips compiling (~0.3 s).
    with contextlib.redirect_stdout(sys.stderr):
        import compileall

        for pkg in PACKAGES:
            compileall.compile_dir(str(site / pkg), quiet=1, ddir=f"/{SITE}/{pkg}")
