"""`cnikit scenarios`: the scenarios, one line each (or one JSON object)."""

from __future__ import annotations

import json

import click

from cnikit.targets import builtin, builtin_names


@click.command("scenarios")
@click.option("--verbose", "-v", is_flag=True, help="also the expected verdicts and why")
@click.option("--json", "as_json", is_flag=True,
              help="print {name: {description, family, why, expected}} as one JSON object")
def scenarios_cmd(verbose: bool, as_json: bool) -> None:
    """List the scenarios, one line each."""
    from cnikit import scenarios

    if as_json:
        click.echo(json.dumps({name: _entry(scenarios.get(name)) for name in scenarios.names()},
                              indent=1))
        return
    width = max(len(n) for n in scenarios.names())
    for name in scenarios.names():
        sc = scenarios.get(name)
        family = "" if sc.family == "ipv4" else f"[{sc.family}] "
        click.echo(f"{name:<{width}}  {family}{sc.description}")
        if verbose:
            exp = ", ".join(f"{p}: {v or 'not asserted'}" for p, v in _expected(sc).items())
            click.echo(f"{'':<{width}}  expected {exp}")
            click.echo(f"{'':<{width}}  why: {sc.why}")


def _expected(sc) -> dict[str, str | None]:
    """Each built-in profile that runs the scenario -> the verdict it expects (None: any)."""
    return {p: sc.expected.get(p) for p in builtin_names() if builtin(p).runs(sc)}


def _entry(sc) -> dict:
    return {"description": sc.description, "family": sc.family, "why": sc.why,
            "expected": _expected(sc)}
