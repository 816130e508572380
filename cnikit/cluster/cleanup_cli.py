"""`cnikit cleanup`: remove what crashed runs left (namespaces, processes, run and state
directories, containers)."""

from __future__ import annotations

import click

from cnikit.runtime import require_root


@click.command()
@click.option("--quiet", "-q", is_flag=True, help="print nothing when there was nothing to do")
@click.option("--dry-run", "-n", is_flag=True, help="only list what would be removed")
@click.option("--images", is_flag=True,
              help="also remove the container images in the kit's podman storage")
@click.option("--run", "runs", multiple=True, metavar="ID",
              help="only this dead run's leftovers (repeatable); a live run is left alone")
def cleanup(quiet: bool, dry_run: bool, images: bool, runs: tuple[str, ...]) -> None:
    """Remove leftovers of dead runs; live runs and anything not the kit's are left alone."""
    _check_run_ids(runs)
    require_root("cnikit cleanup")
    from cnikit import runtime
    from cnikit.containers.cleanup import remove_dead_containers, remove_images
    from cnikit.fabric.cleanup import remove_dead_runs

    only = set(runs) or None
    # Asking the container engine costs a second or so: for chosen runs only when one of
    # them started containers (the run dir says so, and goes below), or when a run's dir is
    # gone already: another run's start-up sweep removes a dead run's dir but cannot reach
    # an engine it was not given (CI once kept a dead run's container so, exit 0).
    # Docker too where an engine is configured (DOCKER_HOST, or the default socket exists).
    configured = {"podman", *(["docker"] if _docker_configured() else [])}
    engines = configured if only is None else set().union(
        *(_engines_of(runtime.RUN_ROOT / rid, configured) for rid in only))

    def dead_containers(dry: bool) -> list[str]:
        out = []
        if "podman" in engines:
            out += remove_dead_containers(dry_run=dry, only=only)
        if "docker" in engines:
            from cnikit.containers.docker_api import Docker

            # A run chose Docker, or an engine is configured: one that does not answer is
            # said, not passed over as if it held nothing.
            from cnikit.errors import EnvironmentProblem

            try:
                out += remove_dead_containers(Docker(), dry_run=dry, only=only)
            except EnvironmentProblem as e:
                click.echo(f"cnikit cleanup: Docker containers left: {e}", err=True)
        return out

    report = remove_dead_runs(dry_run=dry_run, only=only)
    if dry_run:
        kept = remove_images(dry_run=True) if images else None
        containers = dead_containers(True)
        for line in dry_run_lines(report, containers, kept):
            click.echo(line)
        _say_unknown(only, report, containers)
        return
    if report or not quiet:
        click.echo(f"cnikit cleanup: {report.summary()}")
    containers = dead_containers(False)
    if containers or (not quiet and engines):
        click.echo(f"cnikit cleanup: removed {len(containers)} kit containers")
    if images:
        removed, why = remove_images()
        if why is not None:
            click.echo(f"cnikit cleanup: images kept: {why}")
        elif removed or not quiet:
            click.echo(f"cnikit cleanup: removed {len(removed)} kit images")
    _say_unknown(only, report, containers)


def _check_run_ids(runs: tuple[str, ...]) -> None:
    """Each --run is shaped like a run id (what the kit's names carry: ck-<id>-...)."""
    from cnikit.errors import UsageError
    from cnikit.fabric import names
    from cnikit.runtime import RUN_ID_LEN

    for rid in runs:
        if names.run_id_of(names.vpc_ns(rid)) != rid:
            raise UsageError(f"--run {rid!r} is not a run id: one is {RUN_ID_LEN} letters or "
                             "digits, as in the namespace names ck-<id>-vpc")


def _say_unknown(only: set[str] | None, report, containers: list[str]) -> None:
    """A --run that named nothing here: no leftover, not running. Said, and exit 1, so a
    mistyped id is not taken for a clean machine."""
    from cnikit import runtime
    from cnikit.errors import CnikitError
    from cnikit.fabric import names

    if not only:
        return
    found = set(report.runs) | {names.run_id_of(c) for c in containers} | runtime.live_run_ids()
    unknown = sorted(only - found)
    if unknown:
        raise CnikitError(f"cleanup: no run {', '.join(unknown)} on this machine: nothing of "
                          "it is left and it is not running", exit_code=1)


def _engines_of(run_dir, configured: set[str]) -> set[str]:
    """The engines to ask for a chosen run's containers: the one its dir names, none when
    its dir names none, every configured one when its dir is gone."""
    from cnikit import reaper

    engine = reaper.containers_of(run_dir)
    if engine:
        return {engine}
    return set() if run_dir.exists() else configured


def _docker_configured() -> bool:
    import os

    return bool(os.environ.get("DOCKER_HOST")) or os.path.exists("/var/run/docker.sock")


def dry_run_lines(report, containers: list[str],
                  images: tuple[list[str], str | None] | None = None) -> list[str]:
    """What a dry run prints: one line per thing it would remove, then a summary counted
    from those same lists (so the two never disagree). `images`: remove_images's answer
    when --images was given."""
    from cnikit.fabric import names

    lines = [f"namespace {n}" for n in report.namespaces]
    lines += [f"process {pid}" for pid in report.processes]
    lines += [f"directory {path}" for path in report.directories]
    lines += [f"container {name}" for name in containers]
    runs = set(report.runs) | {rid for c in containers if (rid := names.run_id_of(c))}
    counts = [f"{len(report.namespaces)} namespaces", f"{len(report.processes)} processes",
              f"{len(report.directories)} state directories", f"{len(containers)} containers"]
    note = ""
    if images is not None:
        ids, why = images
        lines += [f"image {i}" for i in ids]
        counts.append(f"{len(ids)} images")
        note = f"; images kept: {why}" if why is not None else ""
    lines.append(f"cnikit cleanup (dry run): would remove {', '.join(counts)} of runs "
                 f"{', '.join(sorted(runs)) or 'none'}{note}")
    return lines
