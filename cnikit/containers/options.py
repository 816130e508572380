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


runtime_option = click.option(
    "--runtime", type=click.Choice(RUNTIMES), default=None, expose_value=False,
    callback=_set_runtime, is_eager=True,
    help="how each node's daemon runs: process (default), podman or docker")
