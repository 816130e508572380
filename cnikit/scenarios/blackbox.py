"""What the kit can know about any build from outside: the IMDS requests a node made, EC2's
view of its ENIs, and upstream's introspection port when the target declares it.

Pure functions of those observations (no daemon API), so scenarios hold their verdicts on a
build the kit did not write.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
from dataclasses import dataclass

from cnikit.cloud.limits import FALLBACK, InstanceLimits

# The ENI list and an ENI's addresses, under any IMDS API version ("latest", "2021-03-23").
_LISTING = re.compile(r"^/[^/]+/meta-data/network/interfaces/macs/?$")
_ADDRESSES = re.compile(r"^/[^/]+/meta-data/network/interfaces/macs/([^/]+)/(local-ipv4s|ipv4-prefix)$")
PREFIX_SIZE = 16  # a /28


def eni_list_reads(requests: list[dict], attempts: bool = False) -> int:
    """How many full reads of its ENI list a node made: the MAC list answered, then the
    addresses (`local-ipv4s` or `ipv4-prefix`, found or not) of every MAC listed. Any build
    that reconciles with IMDS does this once per pass; the kit's own reads do not count.
    attempts: count every request for the MAC list instead, answered or not (a reconcile
    pass tried while the IMDS fails)."""
    return EniListReads(attempts).feed(requests)


class EniListReads:
    """eni_list_reads over a request log read a page at a time: `feed` the requests that
    came since the last call, get the count so far (a wait polling a growing log reads each
    request once, not all of them again on every poll)."""

    def __init__(self, attempts: bool = False):
        self.attempts = attempts
        self.done = 0
        self.times: list[float] = []  # when each counted read ended (the log's wall clock)
        self._pending: list[set[str]] = []  # MAC lists answered, minus the MACs read since

    def feed(self, requests: list[dict]) -> int:
        for r in requests:
            if r.get("observer") or r.get("method") != "GET":
                continue
            path, status = r.get("path", ""), r.get("status")
            if _LISTING.match(path):
                if self.attempts:
                    self._count(r, 1)
                if status == 200 and not self.attempts:
                    self._pending.append({m.strip().rstrip("/")
                                          for m in r.get("body", "").split() if m.strip()})
                continue
            m = _ADDRESSES.match(path)
            if m and status in (200, 404):
                for macs in self._pending:
                    macs.discard(m.group(1))
                self._count(r, sum(1 for macs in self._pending if not macs))
                self._pending = [macs for macs in self._pending if macs]
        return self.done

    def _count(self, request: dict, n: int) -> None:
        self.done += n
        self.times += [request.get("time", 0.0)] * n


# ---- EC2's view of a node's pool -------------------------------------------------------------

def _int(env: dict, key: str, default: int = 0) -> int:
    try:
        return int(env.get(key, default))
    except (TypeError, ValueError):
        return default


def _pd(env: dict) -> bool:
    return str(env.get("ENABLE_PREFIX_DELEGATION", "")).lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class PoolView:
    """A node's addresses as EC2 has them, and which of them pods hold (by CNI results)."""

    enis: int
    secondary: int  # addresses a pod could get: secondary IPs, or every address of the prefixes
    held: int  # of those, held by pods on the node
    free_prefixes: int  # prefixes with no pod in them
    full: bool  # every ENI carries as many addresses as its instance type allows

    @property
    def free(self) -> int:
        return self.secondary - self.held


def pool_view(enis: list, pod_ips: set[str], limits: InstanceLimits) -> PoolView:
    """enis: EC2's ENIs of the node (cnikit.cloud.ownership.EniInfo)."""
    secondary = held = free_prefixes = 0
    full = True
    for e in enis:
        ips = [ip for ip in e.ips if ip != e.primary_ip]
        secondary += len(ips)
        held += sum(ip in pod_ips for ip in ips)
        for p in e.prefixes:
            net = ipaddress.ip_network(p, strict=False)
            inside = sum(ipaddress.ip_address(ip) in net for ip in pod_ips)
            secondary += net.num_addresses
            held += inside
            free_prefixes += inside == 0
        full &= len(ips) + len(e.prefixes) >= limits.ipv4_per_eni - 1
    return PoolView(len(enis), secondary, held, free_prefixes, full)


def warm_target_met(view: PoolView, env: dict, instance_type: str) -> bool:
    """Whether EC2 shows the node holding the warm addresses upstream's variables ask for
    (WARM_IP_TARGET / MINIMUM_IP_TARGET, WARM_PREFIX_TARGET, else WARM_ENI_TARGET), or a node
    that cannot grow any more (MAX_ENI or the instance type's limits reached)."""
    limits = FALLBACK.get(instance_type, InstanceLimits(3, 10))
    max_enis = min(_int(env, "MAX_ENI", limits.max_enis) or limits.max_enis, limits.max_enis)
    if view.enis >= max_enis and view.full:
        return True
    warm_ip, min_ip = _int(env, "WARM_IP_TARGET"), _int(env, "MINIMUM_IP_TARGET")
    if warm_ip or min_ip:
        return view.free >= warm_ip and view.secondary >= min_ip
    if _pd(env):
        return view.free_prefixes >= max(_int(env, "WARM_PREFIX_TARGET", 1), 1) or (
            view.free > 0 and _int(env, "WARM_PREFIX_TARGET", 1) == 0)
    return view.free >= _int(env, "WARM_ENI_TARGET", 1) * (limits.ipv4_per_eni - 1)


# ---- the [observe] introspection port -------------------------------------------------------

def introspect(netns_path: str, port: int, path: str = "/v1/enis", host: str = "127.0.0.1",
               timeout: float = 2.0) -> dict:
    """GET http://host:port/path from inside a node's network namespace (upstream's
    introspection listens there); the JSON it answers. OSError/ValueError when it does not."""
    from cnikit.fabric.netns import entered

    with entered(netns_path):
        # A socket stays in the namespace it was made in: make it here, use it anywhere.
        sock = socket.create_connection((host, port), timeout=timeout)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.sock = sock
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
    except http.client.HTTPException as e:  # a daemon stopped mid-answer, a garbled answer
        raise OSError(f"{path}: {type(e).__name__}: {e}") from None
    finally:
        conn.close()
    if r.status != 200:
        raise OSError(f"{path}: HTTP {r.status}")
    return json.loads(body)


def enis_view(doc: dict) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Upstream's /v1/enis JSON -> (eni -> addresses or prefixes, ip -> containerID held)."""
    enis: dict[str, list[str]] = {}
    held: dict[str, str] = {}
    for eni_id, eni in (doc.get("ENIs") or {}).items():
        out = []
        for cidr, c in (eni.get("AvailableIPv4Cidrs") or {}).items():
            out.append(cidr if c.get("IsPrefix") else cidr.split("/")[0])
            for ip, a in (c.get("IPAddresses") or {}).items():
                cid = ((a.get("IPAMKey") or {}).get("containerID")) or ""
                if cid:
                    held[ip] = cid
        enis[eni_id] = sorted(out)
    return enis, held
