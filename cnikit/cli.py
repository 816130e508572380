"""The `cnikit` command. Each subcommand lives with the module it drives.

Errors the user can act on (CnikitError, any faultcore OneLineError) print one line and exit
with their code (faultcore.cli.run_cli, shared with `fault-imds`).
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys

import click

from faultcore.cli import run_cli
from faultcore.version import version_option

# Subcommands, loaded only when used so `cnikit --help` stays fast.
# name -> "module:click_command". Each module owns its command.
COMMANDS: dict[str, str] = {
    "ec2": "cnikit.cloud.cli:ec2",
    "daemon": "cnikit.daemon.main:daemon",
    "cleanup": "cnikit.cluster.cleanup_cli:cleanup",
    "demo": "cnikit.scenarios.cli.demo:demo_cmd",
    "scenarios": "cnikit.scenarios.cli.listing:scenarios_cmd",
    "run": "cnikit.scenarios.cli.run:run_cmd",
    "matrix": "cnikit.scenarios.cli.matrix:matrix_cmd",
    "up": "cnikit.scenarios.cli.up:up_cmd",
    "certify": "cnikit.certify.cli:certify_cmd",
    "report": "cnikit.certify.merge:report_group",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return _checking_tools(name, getattr(importlib.import_module(module), attr))


def _checking_tools(name: str, command: click.Command) -> click.Command:
    """The command, first checking the programs it runs (runtime.COMMAND_TOOLS): after its
    options are parsed (`--runtime` adds some), before its body starts anything."""
    from cnikit.runtime import COMMAND_TOOLS, require_tools

    body = command.callback
    if name not in COMMAND_TOOLS or body is None:
        return command

    @functools.wraps(body)
    def checked(*args, **kwargs):
        require_tools(name)
        return body(*args, **kwargs)

    command = copy.copy(command)
    command.callback = checked
    return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@version_option("cnikit", "cnikit")
def cli() -> None:
    """Chaos and integration test kit for AWS-VPC-style CNI daemons."""


def main(argv: list[str] | None = None) -> int:
    return run_cli(cli, "cnikit", argv)


if __name__ == "__main__":
    sys.exit(main())
