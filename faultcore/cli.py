"""Running a click group the kit's way: an error the user can act on is one line on stderr
and an exit code (2 for bad usage), never a traceback; a foreground server waits for the
signal that stops it."""

from __future__ import annotations

import os
import select
import signal

import click

from faultcore import gc_policy
from faultcore.errors import OneLineError


def run_cli(group: click.BaseCommand, prog: str, argv: list[str] | None = None) -> int:
    """Run a click group; OneLineError and click's usage errors become one line and a code."""
    gc_policy.relax()
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


def seed_option(default: int | None = None, help: str = "Seed of the random draws."):
    """`--seed N`, N a whole number 0 or more: one line and exit 2 otherwise. Python's
    random takes -1 silently and draws what seed 1 draws (it seeds with the absolute value),
    so a run reported as seed -1 would be seed 1's run under another name."""
    def check(_ctx, _param, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise OneLineError(f"--seed must be 0 or more, got {value}")
        return value

    return click.option("--seed", type=int, default=default, callback=check, help=help,
                        show_default=default is not None)


class StopSignals:
    """Record which of `signals` arrived, from `with` on; `wait()` blocks the main thread
    until one has (at once if one came already) and returns its number.

    A signal sent to the process lands on any of its threads. On a thread other than the
    main one, Python only flags it for the main thread, which runs the handler at its next
    bytecode: a main thread asleep in `time.sleep` or on a lock sleeps on (a `cnikit up`
    once ignored SIGTERM that way). The wakeup fd is written whichever thread the signal
    lands on, so `wait()`'s select returns and the handler runs."""

    def __init__(self, signals=(signal.SIGINT, signal.SIGTERM)):
        self.signals = tuple(signals)
        self.got: list[int] = []

    def __enter__(self) -> StopSignals:
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._old_fd = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._old = {s: signal.signal(s, lambda n, _frame: self.got.append(n))
                     for s in self.signals}
        return self

    def wait(self) -> int:
        while not self.got:  # the loop's back edge runs a handler another thread flagged
            select.select([self._r], [], [])
            os.read(self._r, 512)
        return self.got[0]

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._r)
        os.close(self._w)


def wait_for_signal(signals=(signal.SIGINT, signal.SIGTERM)) -> int:
    """Block the main thread until one of `signals` arrives; return its number."""
    with StopSignals(signals) as stop:
        return stop.wait()
