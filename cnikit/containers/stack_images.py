"""Local images for running compose/docker-compose.yml with podman-compose on a machine
that has no registry (this one): stand-ins for the Dockerfile's image and LocalStack's.

    localhost/cnikit:<hash>             the host's Python, the kit's venv packages (no dev
                                        tools), the kit, `nsenter`/`ip`; entrypoint cnikit
    localhost/cnikit-localstack:<hash>  the host's Python and .venv-localstack's packages;
                                        `python -m localstack.runtime.main`, and curl for
                                        the Compose healthcheck

Built as the daemon image is (cnikit.containers.image): a root file system assembled from
the host and `podman import`ed, tagged by a hash of its inputs, rebuilt only on change.
`python -m cnikit.containers.stack_images` builds both and prints the two references as
CNIKIT_IMAGE=... and LOCALSTACK_IMAGE=..., the variables the Compose file reads.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import tarfile
from pathlib import Path

from cnikit.containers import image as img
from cnikit.containers.podman import CONF_ROOT, LABEL_KIT, Podman

DEV_ONLY = {"ruff", "pytest", "_pytest", "pip", "setuptools", "_distutils_hack", "pluggy",
            "iniconfig", "podman_compose", "__editable__", "cnikit", "pytest_timeout"}
KIT_BINARIES = ("/usr/bin/nsenter", "/usr/sbin/ip")
LOCALSTACK_BINARIES = ("/usr/bin/curl",)


def _site(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _kept(site: Path) -> list[Path]:
    out = []
    for p in sorted(site.iterdir()):
        stem = p.name.split("-")[0].split(".")[0]
        if stem in DEV_ONLY or p.name.startswith("__editable__") or p.suffix == ".pth" \
                or p.name == "__pycache__":
            continue
        out.append(p)
    return out


def _hash(parts: list[str], sources: bool) -> str:
    h = hashlib.sha256(f"stack 3 {img.FORMAT} {sys.version}\n".encode())
    for s in parts:
        h.update(s.encode() + b"\n")
    if sources:
        for p in img.source_files():
            h.update(str(p.relative_to(img.SOURCE_ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _base_rootfs(rootfs: Path, binaries: tuple[str, ...]) -> None:
    rootfs.mkdir(parents=True)
    for d in ("usr/bin", "usr/lib", "usr/lib64", "usr/local/bin", "usr/sbin", "etc", "tmp",
              "run", "proc", "sys", "dev", "var/tmp", "root"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    for link in ("lib", "lib64", "bin", "sbin"):
        (rootfs / link).symlink_to(f"usr/{link}")
    os.chmod(rootfs / "tmp", 0o1777)
    img.copy_python(rootfs)
    for b in binaries:
        src = Path(os.path.realpath(b))
        img.copy_file(src, rootfs / Path(b).relative_to("/"))
        for lib in img.shared_libs(src):
            real_dir = Path(os.path.realpath(lib.parent))
            img.copy_file(Path(os.path.realpath(lib)), rootfs / real_dir.relative_to("/") / lib.name)
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc/group").write_text("root:x:0:\n")
    # Compose services find each other by name (podman's dnsname plugin).
    (rootfs / "etc/nsswitch.conf").write_text("hosts: files dns\nnetworks: files\n")
    if Path("/usr/share/zoneinfo").is_dir():  # LocalStack's scheduler needs time zones
        shutil.copytree("/usr/share/zoneinfo", rootfs / "usr/share/zoneinfo", symlinks=True)
    certs = Path("/etc/ssl/certs/ca-certificates.crt")
    if certs.exists():
        img.copy_file(certs, rootfs / "etc/ssl/certs/ca-certificates.crt")


def _libs_of_tree(rootfs: Path, trees: list[Path]) -> None:
    """The shared libraries the native extensions under these trees load (e.g. libgcc_s)."""
    libs: set[Path] = set()
    for tree in trees:
        for so in tree.rglob("*.so*") if tree.is_dir() else [tree]:
            if so.is_file() and ".so" in so.name:
                libs |= img.shared_libs(so)
    for lib in libs:
        if lib.is_relative_to(img.SOURCE_ROOT) or "site-packages" in lib.parts:
            continue  # the package's own bundled libraries came with it
        real_dir = Path(os.path.realpath(lib.parent))
        target = rootfs / real_dir.relative_to("/") / lib.name
        if not target.exists():
            img.copy_file(Path(os.path.realpath(lib)), target)


def _import(podman: Podman, rootfs: Path, ref: str, changes: list[str]) -> None:
    tar = rootfs.parent / "rootfs.tar"
    with tarfile.open(tar, "w") as tf:
        for entry in sorted(os.listdir(rootfs)):
            tf.add(rootfs / entry, arcname=entry)
    args = ["import", "--quiet"]
    for c in changes:
        args += ["--change", c]
    podman.run(*args, str(tar), ref, timeout=900)


def _build(engine, repo: str, digest: str, fill, changes: list[str], log) -> str:
    """The image in `engine`: Podman (its CLI), or the Docker runtime's engine (its API)."""
    ref = f"{repo}:{digest}"
    if engine.image_exists(ref):
        return ref
    CONF_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CONF_ROOT / "image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if engine.image_exists(ref):
            return ref
        work = img.build_dir().parent / repo.rsplit("/", 1)[-1]
        shutil.rmtree(work, ignore_errors=True)
        fill(work / "rootfs")
        changes = changes + [f"LABEL {LABEL_KIT}=stack"]
        if not isinstance(engine, Podman):
            engine.import_rootfs(work / "rootfs", ref, changes)
            shutil.rmtree(work, ignore_errors=True)
            engine.drop_old_images(repo, keep=ref)
            log(f"built {ref}")
            return ref
        _import(engine, work / "rootfs", ref, changes)
        shutil.rmtree(work, ignore_errors=True)
        out = engine.out("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                         f"reference={repo}", check=False)
        for old in out.split():
            if old != ref:
                engine.run("rmi", old, check=False)
        log(f"built {ref}")
    return ref


def _copy_site(kept: list[Path], dst: Path) -> None:
    """The kept site-packages entries, files and trees, into the image's site dir."""
    for p in kept:
        if p.is_dir():
            shutil.copytree(p, dst / p.name, symlinks=True)
        else:
            img.copy_file(p, dst / p.name)


def kit_image(engine=None, log=print) -> str:
    """engine: Podman (the default) or docker_api.Docker."""
    engine = (engine or Podman()).require()
    site = _site(Path(sys.prefix))
    kept = _kept(site)
    digest = _hash([p.name for p in kept], sources=True)
    dst = "opt/cnikit/site"

    def fill(rootfs: Path) -> None:
        _base_rootfs(rootfs, KIT_BINARIES)
        _copy_site(kept, rootfs / dst)
        img.copy_kit(rootfs / dst)
        _libs_of_tree(rootfs, kept)
        for name, mod in (("cnikit", "cnikit.cli"), ("fault-imds", "fault_imds.cli")):
            script = rootfs / "usr/local/bin" / name
            script.write_text(f"#!/usr/local/bin/python3\nimport sys\nfrom {mod} import main\n"
                              "sys.exit(main())\n")
            script.chmod(0o755)
        (rootfs / "usr/bin/python").symlink_to("/usr/local/bin/python3")

    return _build(engine, "localhost/cnikit", digest, fill, [
        'ENTRYPOINT ["cnikit"]', 'CMD ["--help"]', "ENV PYTHONUNBUFFERED=1",
        f"ENV PYTHONPATH=/{dst}", "ENV PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin",
    ], log)


def localstack_image(engine=None, log=print) -> str:
    """engine: Podman (the default) or docker_api.Docker."""
    from cnikit.cloud.localstack import VENV

    engine = (engine or Podman()).require()
    site = _site(VENV)
    if not site.is_dir():
        from cnikit.errors import EnvironmentProblem

        raise EnvironmentProblem("LocalStack is not installed: run `make localstack`")
    kept = _kept(site)
    digest = _hash([p.name for p in kept], sources=False)
    dst = "opt/localstack/site"

    def fill(rootfs: Path) -> None:
        _base_rootfs(rootfs, LOCALSTACK_BINARIES)
        _copy_site(kept, rootfs / dst)
        _libs_of_tree(rootfs, kept)
        (rootfs / "usr/bin/python").symlink_to("/usr/local/bin/python3")

    return _build(engine, "localhost/cnikit-localstack", digest, fill, [
        'ENTRYPOINT ["/usr/local/bin/python3", "-m", "localstack.runtime.main"]',
        "ENV PYTHONUNBUFFERED=1", f"ENV PYTHONPATH=/{dst}",
        "ENV PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin",
        "ENV DNS_ADDRESS=0", "ENV SKIP_SSL_CERT_DOWNLOAD=1", "ENV OVERRIDE_IN_DOCKER=0",
        "ENV FILESYSTEM_ROOT=/tmp/localstack", "WORKDIR /tmp",
    ], log)


if __name__ == "__main__":
    def err(msg):
        print(msg, file=sys.stderr)

    kit = kit_image(log=err)
    ls = localstack_image(log=err)
    print(f"CNIKIT_IMAGE={kit}\nLOCALSTACK_IMAGE={ls}")
