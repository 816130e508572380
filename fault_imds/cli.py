"""`fault-imds`: serve the IMDS, or set its faults over the control API.

    fault-imds serve --ec2-endpoint URL [--listen HOST:PORT] [--control HOST:PORT]
                     [--instance-id ID] [--require-v2] [--seed N]
    fault-imds add KIND [--mac M | --eni-id E] [--instance-id I] [--path GLOB] [--ip IP ...]
                   [--duration S] [--probability P] [one option per kind attribute: --status N,
                   --ms N, --jitter-ms N, --seconds N, --mode reject|expire, ...]
    fault-imds list | remove ID | clear | events [--since N] | kinds

The control URL comes from --control-url, else $FAULT_IMDS_CONTROL, else the default
serve address.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import click

from faultcore.cli import run_cli, seed_option, wait_for_signal
from faultcore.errors import OneLineError
from faultcore.version import version_option

DEFAULT_LISTEN = "127.0.0.1:1338"
DEFAULT_CONTROL = "127.0.0.1:1339"


def _hostport(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise OneLineError(f"{what} must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _control_url(value: str | None) -> str:
    url = value or os.environ.get("FAULT_IMDS_CONTROL") or f"http://{DEFAULT_CONTROL}"
    return url if "://" in url else f"http://{url}"


def _client(control_url: str | None):
    from fault_imds.client import FaultClient

    return FaultClient(_control_url(control_url))


class KindOptions(click.Command):
    """A command with one option per attribute the fault kinds declare (their `params`),
    read from the registry when the command runs: a kind's file adds its options."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        from fault_imds.faults import KINDS

        params = super().get_params(ctx)
        taken = {p.name for p in params}
        extra = []
        for name, declared in KINDS.params().items():
            if name in taken:
                continue  # a kind attribute named like a common option is set in the spec
            types = {param.type for _, param in declared}
            extra.append(click.Option(
                [f"--{name.replace('_', '-')}", name],
                type=types.pop() if len(types) == 1 else _number_or_text,
                default=None,
                help="; ".join(f"{kind}: {param.help or getattr(param.check, 'what', '')}"
                               for kind, param in declared) + "."))
        return params[:-1] + extra + params[-1:]  # before --help


def _number_or_text(value: str):
    """An option several kinds declare with different types: a number when it reads as one
    (the kind's check has the last word)."""
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return value


control_option = click.option(
    "--control-url",
    default=None,
    help=f"Control API URL (default $FAULT_IMDS_CONTROL or http://{DEFAULT_CONTROL}).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@version_option("fault-imds", "fault_imds")
def cli() -> None:
    """An IMDS derived from live EC2 state, with faults held for a chosen time."""


@cli.command()
@click.option("--ec2-endpoint", required=True, help="EC2 API endpoint (the cnikit gate).")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="IMDS HOST:PORT.")
@click.option(
    "--control", default=DEFAULT_CONTROL, show_default=True, help="Control API HOST:PORT."
)
@click.option("--instance-id", default=None, help="Instance for loopback callers.")
@click.option("--require-v2", is_flag=True, help="Refuse IMDSv1 (token-less) requests.")
@seed_option(help="Seed for probabilistic faults.")
@click.option(
    "--ec2-wait",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for EC2 to answer at start.",
)
def serve(ec2_endpoint, listen, control, instance_id, require_v2, seed, ec2_wait) -> None:
    """Serve IMDS until Ctrl-C."""
    from fault_imds.server import ImdsServer

    logging.basicConfig(level=logging.WARNING, format="fault-imds: %(message)s")

    server = ImdsServer(
        ec2_endpoint=ec2_endpoint,
        listen=_hostport(listen, "--listen"),
        control=_hostport(control, "--control"),
        instance_id=instance_id,
        require_v2=require_v2,
        seed=seed,
        ec2_wait_s=ec2_wait,
    )
    try:
        server.start()
    except OSError as e:
        raise OneLineError(f"cannot serve: {e}") from None
    click.echo(f"IMDS     {server.url}")
    click.echo(f"control  {server.control_url}")
    sys.stdout.flush()
    try:
        wait_for_signal()
    finally:
        server.stop()


@cli.command(cls=KindOptions)
@click.argument("kind")
@click.option("--instance-id", default=None)
@click.option("--mac", default=None)
@click.option("--eni-id", default=None)
@click.option("--path", default=None, help="Glob over the request path.")
@click.option("--ip", "ips", multiple=True, help="An IP or prefix (repeatable).")
@click.option("--duration", type=float, default=None, help="Seconds until it expires.")
@click.option("--probability", type=float, default=None)
@control_option
def add(kind, instance_id, mac, eni_id, path, ips, duration, control_url, **attrs) -> None:
    """Add a fault; prints its id. Each kind's attributes are options (`fault-imds kinds`)."""
    target = {
        "instance_id": instance_id,
        "mac": mac,
        "eni_id": eni_id,
        "path": path,
        "ips": list(ips) or None,
    }
    target = {k: v for k, v in target.items() if v is not None}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    handle = _client(control_url).add(kind, target=target or None, duration=duration, **attrs)
    if handle.deprecated:
        click.echo(f"fault-imds: {handle.deprecated}", err=True)
    click.echo(handle.id)


@cli.command("list")
@control_option
def list_(control_url) -> None:
    """Active faults, as JSON lines."""
    for fault in _client(control_url).list():
        click.echo(json.dumps(fault))


@cli.command()
@click.argument("fault_id")
@control_option
def remove(fault_id, control_url) -> None:
    """Remove one fault."""
    if not _client(control_url).remove(fault_id):
        raise OneLineError(f"no active fault {fault_id!r}")


@cli.command()
@control_option
def clear(control_url) -> None:
    """Remove every fault."""
    removed = _client(control_url).clear()
    click.echo(f"removed {len(removed)}")


@cli.command()
@click.option("--since", type=int, default=0)
@control_option
def events(since, control_url) -> None:
    """Fault and served-value events, as JSON lines."""
    for event in _client(control_url).events(since):
        click.echo(json.dumps(event))


@cli.command()
@control_option
def kinds(control_url) -> None:
    """Fault kinds the server knows, in the order they apply (content, then request)."""
    known = _client(control_url).kinds()
    stages = {"content": 0, "request": 1}
    for name, info in sorted(
        known.items(), key=lambda kv: (stages.get(kv[1].get("stage"), 2), kv[1].get("order", 0))
    ):
        click.echo(
            f"{name:8} {info.get('stage', '?'):7} {info['description']} "
            f"(attributes: {', '.join(info['attributes']) or '-'})"
        )


def main(argv: list[str] | None = None) -> int:
    return run_cli(cli, "fault-imds", argv)


if __name__ == "__main__":
    sys.exit(main())
