"""`cnikit daemon`: the reference CNI daemon, configured by upstream's environment variables."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import click

from cnikit.errors import CnikitError, EnvironmentProblem


def build(cfg, clock=None):
    """IpamD on the real EC2 and IMDS clients, with the checkpoint in the state dir."""
    from cnikit.daemon.checkpoint import JsonCheckpoint
    from cnikit.daemon.clock import SystemClock
    from cnikit.daemon.ec2_query import QueryEc2
    from cnikit.daemon.imds_http import HttpImds
    from cnikit.daemon.ipamd import IpamD
    from cnikit.daemon.server import CHECKPOINT_NAME

    os.makedirs(cfg.state_dir, exist_ok=True)
    return IpamD(cfg, QueryEc2(cfg.ec2_endpoint, cfg.region, cfg.scale),
                 HttpImds(cfg.imds_endpoint, cfg.instance_id_header), clock or SystemClock(),
                 JsonCheckpoint(os.path.join(cfg.state_dir, CHECKPOINT_NAME)))


def start_with_retry(ipamd, stop: threading.Event, log) -> bool:
    """Upstream exits and is restarted until EC2 and IMDS answer; we retry in place."""
    from cnikit.daemon.apis import ApiError
    from cnikit.daemon.checkpoint import CheckpointError
    from cnikit.daemon.type_limits import UnknownInstanceType

    delay = 0.2
    while not stop.is_set():
        try:
            ipamd.start()
            return True
        except CheckpointError as e:
            # Upstream refuses to start on an unreadable checkpoint rather than forget pods.
            raise CnikitError(f"cannot recover: {e}") from None
        except UnknownInstanceType as e:
            raise CnikitError(f"cannot start: {e}") from None
        except ApiError as e:
            log.warning("start-up: %s; retrying in %.1fs", e, delay)
            ipamd.ds.enis.clear()
            stop.wait(delay)
            delay = min(delay * 2, 5.0)
    return False


@click.command("daemon")
@click.option("--state-dir", help="socket, checkpoint and pid file (env CNIKIT_STATE_DIR)")
@click.option("--profile", help="a profile of cnikit.daemon.profiles (env CNIKIT_PROFILE)")
@click.option("--log-level", default="INFO", show_default=True)
def daemon(state_dir, profile, log_level):
    """Run the reference CNI daemon (ipamd) in the foreground."""
    from cnikit.daemon.config import from_env
    from cnikit.daemon.server import Daemon

    env = dict(os.environ)
    if state_dir:
        env["CNIKIT_STATE_DIR"] = state_dir
    if profile:
        env["CNIKIT_PROFILE"] = profile
    cfg = from_env(env)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("cnikit.daemon")
    try:
        ipamd = build(cfg)
    except OSError as e:
        raise EnvironmentProblem(f"state dir {cfg.state_dir}: {e.strerror}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if not start_with_retry(ipamd, stop, log):
        return
    d = Daemon(ipamd, cfg.state_dir, cfg.pool_interval)
    try:
        d.serve(cfg.metrics_addr, cfg.introspection_addr)
    except OSError as e:
        raise CnikitError(f"cannot listen: {e}") from None
    log.info("ready: profile %s, socket %s", cfg.profile, d.socket_path)
    (d.state_dir / "ready").write_text(str(os.getpid()))
    while not stop.wait(1.0):
        pass
    (d.state_dir / "ready").unlink(missing_ok=True)
    d.stop()
