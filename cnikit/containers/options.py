"""`--runtime` for the commands that start daemons (`cnikit run`, `cnikit up`, ...).

The choice travels as CNIKIT_RUNTIME (CniCluster's default), so no command or engine
needs new plumbing; an unusable runtime (no podman, no Docker engine) is a one-line error.
"""

from __future__ import annotations

import os

import click

from cnikit.containers.noderuntime import RUNTIMES


def _set_runtime(ctx, param, value):
    if value:
        from cnikit.containers.noderuntime import check_runtime

        os.environ["CNIKIT_RUNTIME"] = check_runtime(value)
    return value


def runtime_params(runtime: str) -> dict:
    """What a run records of its runtime: its name and, for Docker, which engine (the
    machine's, or the kit's private one: cnikit.containers.dockerd)."""
    if runtime == "docker":
        from cnikit.containers.docker_api import Docker

        return {"runtime": runtime, "engine": Docker.host()}
    return {"runtime": runtime}


def runtime_used(params: dict) -> str | None:
    """The line a run's output has when its daemons ran in containers (its params'
    `runtime` and `engine`, cnikit.scenarios.engine.run); None for plain processes."""
    runtime = params.get("runtime")
    if runtime in (None, "process"):
        return None
    engine = params.get("engine")
    return (f"runtime: the daemons ran in {runtime} containers"
            + (f" (engine at {engine})" if engine else ""))


runtime_option = click.option(
    "--runtime", type=click.Choice(RUNTIMES), default=None, expose_value=False,
    callback=_set_runtime, is_eager=True,
    help="how each node's daemon runs: process (default), podman or docker")
