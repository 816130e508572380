"""The kit's own processes run with its collector settings (faultcore.gc_policy): every
command line goes through faultcore.cli.run_cli, which applies them first."""

from __future__ import annotations

import gc

import click

from faultcore import gc_policy
from faultcore.cli import run_cli


def test_run_cli_applies_the_thresholds_before_the_command_runs():
    seen = []

    @click.group()
    def group() -> None:
        pass

    @group.command()
    def probe() -> None:
        seen.append(gc.get_threshold())

    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # Python's defaults, as a fresh process has them
    try:
        assert run_cli(group, "probe-cli", ["probe"]) == 0
    finally:
        gc.set_threshold(*before)
    assert seen == [gc_policy.THRESHOLDS]

