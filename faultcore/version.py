"""What `--version` prints: the installed distribution's version and, run from a git
checkout, the commit (a bug report then names the code that ran, not only a number that
stays 0.1.0 for months)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import click


def describe(package: str) -> str:
    """`0.1.0`, or `0.1.0 (git 1a2b3c4d5e6f)` in a checkout (`-dirty` when files changed)."""
    dists = importlib.metadata.packages_distributions().get(package) or [package]
    try:
        version = importlib.metadata.version(dists[0])
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    found = checkout(Path(sys.modules[package].__file__).resolve().parent)
    if found is None:
        return version
    commit, dirty = found
    return f"{version} (git {commit[:12]}{'-dirty' if dirty else ''})"


def checkout(package_dir: Path) -> tuple[str, bool] | None:
    """(commit, whether tracked files changed) when the package is a folder at the top of a
    git work tree; None otherwise (an installed copy, even one in a virtualenv inside a
    checkout, or no git)."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(package_dir), *args], capture_output=True,
                                 text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != package_dir.parent:
        return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return None if commit is None or status is None else (commit, bool(status))


def version_option(prog: str, package: str):
    """`--version`: `PROG VERSION`, worked out only when asked (git runs then, not on every
    command)."""
    def show(ctx: click.Context, _param, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"{prog} {describe(package)}")
            ctx.exit()

    return click.option("--version", is_flag=True, expose_value=False, is_eager=True,
                        callback=show, help="Show the version (with the git commit when run "
                        "from a checkout) and exit.")
