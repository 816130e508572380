"""fault_imds inside a network namespace, as the fabric uses it: a listening socket made in
the namespace on 169.254.169.254:80 and handed to `add_listener`; callers are told apart by
their source address (an IP one of the instance's ENIs holds), not by any header."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import threading

import pytest

from cnikit.cloud import Cloud
from cnikit.runtime import Run
from fault_imds.client import FaultClient
from fault_imds.server import ImdsServer

pytestmark = pytest.mark.root

CLONE_NEWNET = 0x40000000
IMDS_IP = "169.254.169.254"


def in_netns(name: str, fn):
    """Run fn() in a thread that joined netns `name` (setns is per thread)."""
    out: dict = {}

    def run():
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns failed")
        finally:
            os.close(fd)
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if "error" in out:
        raise out["error"]
    return out["value"]


def http_get(source_ip: str, path: str) -> tuple[int, str]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.bind((source_ip, 0))
        s.connect((IMDS_IP, 80))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {IMDS_IP}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    finally:
        s.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


@pytest.fixture(scope="module")
def netns():
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a network namespace")
    if not shutil.which("ip"):
        pytest.skip("needs iproute2's `ip`")
    run = Run.claim()
    name = f"ck-{run.run_id}-imds"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
        run.close()


def test_listener_in_netns_identifies_callers_by_source_ip(netns):
    cloud = Cloud.start(ec2="moto", seed=3)
    try:
        topo = cloud.bootstrap(nodes=2)
        a, b = topo.instances
        ip = ["ip", "-n", netns]
        subprocess.run([*ip, "link", "set", "lo", "up"], check=True)
        # The namespace's loopback holds the node addresses (no dummy module needed).
        for addr in (a.primary_ip, b.primary_ip, "10.0.1.250", IMDS_IP):
            subprocess.run([*ip, "addr", "add", f"{addr}/32", "dev", "lo"], check=True)

        def listening_socket():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((IMDS_IP, 80))
            s.listen(128)
            return s

        with ImdsServer(ec2_endpoint=cloud.endpoint) as imds:
            imds.add_listener(in_netns(netns, listening_socket))
            assert in_netns(netns, lambda: http_get(a.primary_ip, "/latest/meta-data/instance-id")) \
                == (200, a.instance_id)
            assert in_netns(netns, lambda: http_get(b.primary_ip, "/latest/meta-data/mac")) \
                == (200, b.mac)
            # A node's requests are its own: naming another instance, as the host may, and
            # two instances served, change nothing here (no 400 from a node).
            other = f"/latest/meta-data/instance-id?instance={b.instance_id}"
            assert in_netns(netns, lambda: http_get(a.primary_ip, other)) == (200, a.instance_id)
            # A source no ENI holds is no instance.
            assert in_netns(netns, lambda: http_get("10.0.1.250", "/latest/meta-data/"))[0] == 404
            # Faults target by instance, which is now the caller's address.
            with FaultClient(imds.control_url).error(status=503, instance_id=a.instance_id):
                assert in_netns(netns, lambda: http_get(a.primary_ip, "/latest/meta-data/mac"))[0] \
                    == 503
                assert in_netns(netns, lambda: http_get(b.primary_ip, "/latest/meta-data/mac"))[0] \
                    == 200
    finally:
        cloud.stop()
