"""`cnikit ec2`: the embedded EC2 (moto + gate) alone, in the foreground until Ctrl-C/SIGTERM."""

from __future__ import annotations

import sys

import click

from cnikit.errors import UsageError
from faultcore.cli import StopSignals, seed_option


@click.command("ec2")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port of the gate (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the gate.")
@click.option("--ec2", "ec2_kind", type=click.Choice(["moto", "localstack"]), default="moto",
              show_default=True, help="The upstream EC2 behind the gate.")
@click.option("--ec2-endpoint", default=None,
              help="URL of an already running upstream (default for localstack: "
                   "AWS_ENDPOINT_URL or http://$LOCALSTACK_HOST:4566).")
@seed_option(help="Seed of the fault dice.")
@click.option("--region", default="us-east-1", show_default=True,
              help="The kit's own region (unsigned calls); the gate serves every region a "
                   "request is signed for.")
def ec2(port: int, host: str, ec2_kind: str, ec2_endpoint: str | None, seed: int | None,
        region: str) -> None:
    """Run the embedded EC2 (moto or LocalStack behind the gate) in the foreground."""
    from cnikit.cloud import Cloud
    from cnikit.cloud.gate import check_region

    check_region(region)
    if ec2_endpoint and not ec2_endpoint.startswith(("http://", "https://")):
        raise UsageError(f"--ec2-endpoint must be an http(s) URL, got {ec2_endpoint!r}")
    with StopSignals() as stop:
        cloud = Cloud.start(ec2=ec2_kind, endpoint=ec2_endpoint, port=port, host=host, seed=seed,
                            region=region)
        try:
            click.echo(f"EC2 endpoint: {cloud.endpoint}")
            click.echo(f"  upstream ({ec2_kind}): {cloud.upstream_url}")
            click.echo(f"  ownership: {cloud.endpoint}/_cnikit/owners   faults: "
                       f"{cloud.endpoint}/_cnikit/faults   audit: {cloud.endpoint}/_cnikit/audit")
            click.echo("  export " + " ".join(f"{k}={v}" for k, v in cloud.client_env().items()))
            click.echo("Ctrl-C to stop.")
            sys.stdout.flush()  # scripts read the endpoint from a pipe while we run
            stop.wait()
        finally:
            cloud.stop()
            click.echo("EC2 stopped.")
