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
    require_root("cnikit cleanup")
    from cnikit import reaper, runtime
    from cnikit.fabric.cleanup import remove_dead_runs

    only = set(runs) or None
    # Asking the container engine costs a second or so: for chosen runs only when one of
    # them started containers (the run dir says so, and goes below).
    engines = {"podman"} if only is None else {
        e for rid in only if (e := reaper.containers_of(runtime.RUN_ROOT / rid))}
    report = remove_dead_runs(dry_run=dry_run, only=only)
    if dry_run:
        for name in report.namespaces:
            click.echo(f"namespace {name}")
        for pid in report.processes:
            click.echo(f"process {pid}")
        for path in report.directories:
            click.echo(f"directory {path}")
        click.echo(f"cnikit cleanup (dry run): would remove {len(report.namespaces)} namespaces, "
                   f"{len(report.processes)} processes, {len(report.directories)} state "
                   f"directories, runs {', '.join(report.runs) or 'none'}")
    elif report or not quiet:
        click.echo(f"cnikit cleanup: {report.summary()}")
    from cnikit.containers.cleanup import remove_dead_containers

    containers = []
    if "podman" in engines:
        containers += remove_dead_containers(dry_run=dry_run, only=only)
    if "docker" in engines:
        from cnikit.containers.noderuntime import Docker

        containers += remove_dead_containers(Docker(), dry_run=dry_run, only=only)
    if dry_run:
        for name in containers:
            click.echo(f"container {name}")
    elif containers or (not quiet and engines):
        click.echo(f"cnikit cleanup: removed {len(containers)} kit containers")
    if images and not dry_run:
        from cnikit.containers.cleanup import remove_images

        removed, why = remove_images()
        if why is not None:
            click.echo(f"cnikit cleanup: images kept: {why}")
        elif removed or not quiet:
            click.echo(f"cnikit cleanup: removed {len(removed)} kit images")
