"""Build a fabric on an embedded EC2 and hold it until SIGINT/SIGTERM (then clean up).

    python -m cnikit.fabric.hold [--nodes N] [--pods M] [--run-id ID]

Prints one JSON line when ready: {"run_id", "namespaces", "pods": {name: ip}}. A tool for
poking at the fabric by hand and for the crash tests (kill -9 it, then see the next run
clean up). Bad input or an unusable environment: one line on stderr, exit code 2.
"""

from __future__ import annotations

import faulthandler
import json
import sys
import time

import click

from cnikit.errors import CnikitError
from cnikit.runtime import require_root
from faultcore import gc_policy


@click.command()
@click.option("--nodes", default=2, type=click.IntRange(1, 64), show_default=True)
@click.option("--pods", default=2, type=click.IntRange(0, 200), show_default=True,
              help="pods per node, wired directly")
@click.option("--run-id", default=None, help="claim this run id instead of a fresh one")
@click.option("--instance-type", default="m5.large", show_default=True)
def hold(nodes: int, pods: int, run_id: str | None, instance_type: str) -> None:
    require_root("the fabric")
    from cnikit.cloud import Cloud
    from cnikit.fabric import ec2ops, netns
    from cnikit.fabric.cleanup import cleanup_on_signals
    from cnikit.fabric.topology import Fabric
    from cnikit.runtime import Run

    run = Run.claim(run_id)
    try:
        # A teardown that hangs says where, on stderr, instead of hanging silently: armed
        # when the signal comes, wherever it finds the process.
        with cleanup_on_signals(on_signal=lambda: faulthandler.dump_traceback_later(
                TEARDOWN_REPORT_S, exit=False)):
            cloud = Cloud.start()
            try:
                topo = cloud.bootstrap(nodes=nodes, instance_type=instance_type)
                with Fabric(cloud, topo, run) as fabric:
                    for n in range(nodes):
                        for ip, dev in ec2ops.assign_pod_ips(cloud, fabric, n, pods):
                            fabric.add_pod(n, ip, dev)
                    print(json.dumps({"run_id": run.run_id,
                                      "namespaces": netns.names(f"ck-{run.run_id}-"),
                                      "pods": {p.name: p.ip for p in fabric.pods.values()}}),
                          flush=True)
                    _wait()
            finally:
                cloud.stop()
    finally:
        run.close()


TEARDOWN_REPORT_S = 20.0  # the teardown takes a second or two


def _wait() -> None:
    """Idle until a signal unwinds us (KeyboardInterrupt / Interrupted). Not signal.pause():
    a signal that lands after Python's last check for one and before the pause(2) call
    leaves it asleep for good, its handler never run (CI: a SIGTERM'd hold still running
    120 s later, with no hung-teardown report, as the handler arms that). A bounded sleep
    runs a handler within a second, however the signal falls."""
    while True:
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    gc_policy.relax()
    try:
        hold.main(args=argv, prog_name="cnikit-fabric-hold", standalone_mode=False)
    except CnikitError as e:
        click.echo(f"cnikit: {e}", err=True)
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return 2
    except (KeyboardInterrupt, click.exceptions.Abort):
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
