"""Running a click group the kit's way: an error the user can act on is one line on stderr
and an exit code (2 for bad usage), never a traceback."""

from __future__ import annotations

import click

from faultcore.errors import OneLineError


def run_cli(group: click.BaseCommand, prog: str, argv: list[str] | None = None) -> int:
    """Run a click group; OneLineError and click's usage errors become one line and a code."""
    try:
        group.main(args=argv, prog_name=prog, standalone_mode=False)
    except OneLineError as e:
        click.echo(f"{prog}: {e}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo(f"{prog}: interrupted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    return 0
