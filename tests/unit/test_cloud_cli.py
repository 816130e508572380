"""`cnikit ec2`: foreground, prints the endpoint, serves EC2, stops cleanly on SIGTERM/Ctrl-C."""

from __future__ import annotations

import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from tests.procsignal import signal_a_side_thread

CNIKIT = Path(sys.executable).parent / "cnikit"


# Hang bounds, not speed goals: quiet, `cnikit ec2` prints its endpoint in 1.3 s and stops
# in 1.0 s; beside twelve busy processes per core each took 25 s, and in `make
# test-under-load` over 60 s.
HANG_S = 240.0


def read_endpoint(proc, deadline_s: float = HANG_S) -> str:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not sel.select(timeout=0.5):
            continue
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("EC2 endpoint:"):
            return line.split(":", 1)[1].strip()
    proc.kill()  # before reading its stderr to the end, which a live process never ends
    raise AssertionError(f"cnikit ec2 printed no endpoint in {deadline_s:g}s; stderr: "
                         + proc.communicate()[1][-2000:])


@pytest.mark.slow
@pytest.mark.timeout(2 * HANG_S + 60)
@pytest.mark.parametrize("sig,thread", [(signal.SIGTERM, "main"), (signal.SIGINT, "main"),
                                        (signal.SIGTERM, "side")],
                         ids=["SIGTERM", "SIGINT", "SIGTERM-on-a-side-thread"])
def test_cnikit_ec2_runs_and_stops(sig, thread):
    proc = subprocess.Popen([str(CNIKIT), "ec2", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        endpoint = read_endpoint(proc)
        ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        assert vpc.startswith("vpc-")
        if thread == "main":
            proc.send_signal(sig)
        else:  # where the kernel may deliver a signal sent to the process
            signal_a_side_thread(proc.pid, sig)
        # communicate drains both pipes: a child blocked on a full stderr pipe never exits.
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, err[-2000:]
        assert "EC2 stopped." in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cnikit_ec2_bad_usage_is_one_line_exit_2():
    r = subprocess.run([str(CNIKIT), "ec2", "--ec2-endpoint", "nonsense"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0
