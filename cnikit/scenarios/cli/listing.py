"""`cnikit scenarios`: the scenarios, one line each."""

from __future__ import annotations

import click

from cnikit.targets import builtin, builtin_names


@click.command("scenarios")
@click.option("--verbose", "-v", is_flag=True, help="also the expected verdicts and why")
def scenarios_cmd(verbose: bool) -> None:
    """List the scenarios, one line each."""
    from cnikit import scenarios

    width = max(len(n) for n in scenarios.names())
    for name in scenarios.names():
        sc = scenarios.get(name)
        family = "" if sc.family == "ipv4" else f"[{sc.family}] "
        click.echo(f"{name:<{width}}  {family}{sc.description}")
        if verbose:
            exp = ", ".join(f"{p}: {sc.expected.get(p) or 'not asserted'}" for p in builtin_names()
                            if builtin(p).runs(sc))
            click.echo(f"{'':<{width}}  expected {exp}")
            click.echo(f"{'':<{width}}  why: {sc.why}")
