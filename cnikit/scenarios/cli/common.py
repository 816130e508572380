"""What the scenario commands share: quiet logs, progress on stderr, the common options."""

from __future__ import annotations

import contextlib
import logging

import click

from cnikit.targets import builtin_names


def _quiet_logs() -> None:
    # Servers running in this process log their retries; the run's story is the output.
    logging.getLogger().addHandler(logging.NullHandler())
    for name in ("fault_imds", "cnikit", "botocore", "urllib3", "aiohttp"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


@contextlib.contextmanager
def _progress(label: str):
    """A spinner on stderr whose text follows the engine's progress messages."""
    from cnikit.scenarios.cli.status_line import StatusLine

    console = _console()
    if not console.is_terminal or console.is_dumb_terminal:
        yield lambda msg: console.print(msg, markup=False, style="dim")
        return
    with StatusLine(label) as line:
        yield line.update


def _profile_option(default="hardened"):
    return click.option("--profile", "-p", default=default, show_default=True,
                        type=click.Choice(builtin_names()), help="daemon profile (a built-in target)")


def _target_option(multiple: bool = False):
    return click.option("--target", "-t", "targets" if multiple else "target", multiple=multiple,
                        default=None, metavar="FILE",
                        help="a target file (the build under test)"
                             + ("; repeatable, a column each" if multiple else "; instead of --profile"))


def _ec2_options(f):
    f = click.option("--ec2-endpoint", default=None,
                     help="URL of a running moto/LocalStack to put behind the gate")(f)
    f = click.option("--ec2", default="moto", show_default=True,
                     type=click.Choice(["moto", "localstack"]), help="EC2 upstream")(f)
    return f
