"""The daemon process around IpamD: the plugin's unix socket, the pool loop, metrics and
introspection over HTTP. One lock serialises every call into the logic.

Socket protocol (one JSON object per line each way):
  -> {"cmd": "add"|"del"|"check"|"ping", "network": N, "containerID": C, "ifName": I,
      "metadata": {...}}
     a DEL may carry "prevIp" (the runtime's prevResult's address): a hint, never what is
     freed; a DEL frees what its sandbox (containerID, ifName) holds (cilium #10065)
  <- {"ok": true, "ip": ..., "eniId": ..., "deviceNumber": ..., "subnetCidr": ..., "router": ...}
  <- {"ok": false, "code": <CNI error code>, "error": "one line"}
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cnikit.daemon import metrics
from cnikit.daemon.apis import ApiError
from cnikit.daemon.datastore import DatastoreError, IpamKey, NoAvailableIP
from cnikit.daemon.egress_ipam import EgressExhausted, EgressIpam
from cnikit.daemon.ipamd import IpamD
from cnikit.daemon.podnet import PodNet, PodNetError, veth_name
from cnikit.unixcall import exchange

log = logging.getLogger("cnikit.daemon.server")

SOCKET_NAME = "ipamd.sock"
CHECKPOINT_NAME = "ipam.json"
MAX_REQUEST = 64 * 1024
# Seconds between a server's checks of its stop flag when nothing wakes it. stop() wakes
# each server with a connection, so this is only a safety net: polled at 20 Hz, the three
# servers of an idle daemon took 5 ms of CPU a second (0.5 ms at 2 Hz).
SERVE_POLL = 0.5

# CNI spec error codes the daemon's answers map to.
CNI_TRY_AGAIN = 11
CNI_INVALID_CONFIG = 7
CNI_IO = 5
CNI_CHECK_FAILED = 100  # plugin-specific range (spec: codes 100+ are the plugin's)


# The kit's scenarios observe every build from outside; they run the reference daemon with
# this off to prove they never lean on what a foreign build would not have.
PRIVATE_STATUS_ENV = "CNIKIT_PRIVATE_STATUS"


def private_status_on() -> bool:
    return os.environ.get(PRIVATE_STATUS_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def _egress_owner(key: IpamKey) -> str:
    return f"{key.container_id}/{key.if_name}"


def router_of(subnet_cidr: str) -> str:
    if not subnet_cidr:
        return ""
    net = ipaddress.ip_network(subnet_cidr, strict=False)
    return str(net.network_address + 1)


class Daemon:
    def __init__(self, ipamd: IpamD, state_dir: str | os.PathLike, pool_interval: float):
        self.ipamd = ipamd
        self.state_dir = Path(state_dir)
        self.lock = threading.Lock()
        self.pool_interval = pool_interval
        self.stopping = threading.Event()
        self._servers: list = []
        self._threads: list[threading.Thread] = []
        self.podnet: PodNet | None = None
        cfg = ipamd.cfg
        # IPv6 pods' IPv4 egress (upstream's egress-cni with host-local IPAM).
        self.egress = (EgressIpam(cfg.v4_egress_range, self.state_dir / "egress-v4")
                       if cfg.ipv6 and cfg.v4_egress else None)

    @property
    def socket_path(self) -> Path:
        return self.state_dir / SOCKET_NAME

    # ---- requests ---------------------------------------------------------------------

    def handle(self, req: dict) -> dict:
        cmd = req.get("cmd")
        if cmd == "ping":
            return {"ok": True}
        if cmd == "status":
            if not private_status_on():
                return {"ok": False, "code": CNI_INVALID_CONFIG,
                        "error": f"the private status API is off ({PRIVATE_STATUS_ENV}=off)"}
            return self.status()
        if cmd not in ("add", "del", "check"):
            return {"ok": False, "code": CNI_INVALID_CONFIG, "error": f"unknown command {cmd!r}"}
        cid, ifname = req.get("containerID"), req.get("ifName")
        if not isinstance(cid, str) or not cid or not isinstance(ifname, str) or not ifname:
            return {"ok": False, "code": CNI_INVALID_CONFIG, "error": "containerID and ifName are required"}
        key = IpamKey(str(req.get("network") or ""), cid, ifname)
        netns_path = req.get("netns") if isinstance(req.get("netns"), str) else ""
        try:
            if cmd == "add":
                return self._add(key, req, netns_path)
            if cmd == "del":
                return self._del(key, req, netns_path)
            return self._check(key, req, netns_path)
        except NoAvailableIP as e:
            return {"ok": False, "code": CNI_TRY_AGAIN, "error": f"no IP available: {e}"}
        except PodNetError as e:
            return {"ok": False, "code": e.code, "error": str(e)}
        except (DatastoreError, ApiError, OSError, EgressExhausted) as e:
            return {"ok": False, "code": CNI_IO, "error": f"{type(e).__name__}: {e}"}

    def _answer(self, a, **extra) -> dict:
        sub = self.ipamd.eni_cidrs.get(a.eni_id) or self.ipamd.subnet_cidr
        return {"ok": True, "ip": a.ip, "eniId": a.eni_id, "deviceNumber": a.device_number,
                "subnetCidr": sub, "router": router_of(sub), **extra}

    def _veth(self, key: IpamKey, req: dict) -> str:
        return veth_name(str(req.get("podNamespace") or ""), str(req.get("podName") or ""),
                         key.container_id, str(req.get("vethPrefix") or "eni"))

    def _podnet(self) -> PodNet:
        if self.podnet is None:
            self.podnet = PodNet(background_delete=True)
        return self.podnet

    def _add(self, key: IpamKey, req: dict, netns_path: str) -> dict:
        md = req.get("metadata") if isinstance(req.get("metadata"), dict) else {}
        with self.lock:
            a = self.ipamd.add(key, md)
        if not netns_path:
            return self._answer(a)
        veth = self._veth(key, req)
        mtu = req.get("mtu") if isinstance(req.get("mtu"), int) else None
        try:
            # A repeated ADD of a sandbox already wired with this address (a runtime that
            # lost the first answer): the same answer, the pod's interface left as it is.
            wired = self._podnet().wired(netns_path, a.ip, veth, key.if_name)
            if wired is not None:
                return self._answer(a, **wired)
            router = router_of(self.ipamd.eni_subnet_cidr(a.eni_id))
            if a.device_number and not router:
                # Without the subnet the ENI's route table cannot be made, and the pod would
                # be wired dark: fail the ADD (the runtime retries), as upstream fails an ENI
                # whose network it could not set up.
                raise PodNetError("the subnet of the ENI is unknown (IMDS failing?): "
                                  "try again", CNI_TRY_AGAIN)
            wired = self._podnet().add(netns_path, a.ip, veth, key.if_name, a.device_number,
                                       router, mtu)
            if self.egress is not None:
                wired.update(self._add_egress(key, netns_path))
        except BaseException:
            # Like ptp's cmdAdd: give back what this ADD took before answering the error.
            with self.lock:
                self.ipamd.delete(key)
                if self.egress is not None:
                    self.egress.release(_egress_owner(key))
            raise
        return self._answer(a, **wired)

    def _add_egress(self, key: IpamKey, netns_path: str) -> dict:
        from cnikit.fabric import egress

        with self.lock:
            ip = self.egress.allocate(_egress_owner(key))
        return self._podnet().add_egress(
            netns_path, ip, egress.host_veth_name(key.container_id),
            self.ipamd.cfg.v4_egress_range, self.ipamd.cfg.strategy.egress_replaces_stale_route)

    def _del(self, key: IpamKey, req: dict, netns_path: str) -> dict:
        with self.lock:
            a = self.ipamd.check(key)
        if netns_path or a is not None:
            # Unwire before the IP is released: a freed IP must not be still routed here.
            self._podnet().delete(netns_path or None, a.ip if a else None, self._veth(key, req),
                                  a.device_number if a else None)
        with self.lock:
            gone = self.ipamd.delete(key)
            if self.egress is not None:
                # Freed at once; its host veth goes with the pod's namespace (upstream's).
                self.egress.release(_egress_owner(key))
        if gone is None:
            return {"ok": True, "released": False}
        return self._answer(gone, released=True)

    def _check(self, key: IpamKey, req: dict, netns_path: str) -> dict:
        with self.lock:
            a = self.ipamd.check(key)
        if a is None:
            return {"ok": False, "code": CNI_TRY_AGAIN, "error": f"no IP held by {key}"}
        expect = req.get("expectIp")
        if expect and expect != a.ip:
            return {"ok": False, "code": CNI_CHECK_FAILED,
                    "error": f"daemon holds {a.ip} for {key}, prevResult says {expect}"}
        if netns_path:
            problem = self._podnet().check(netns_path, a.ip, self._veth(key, req), key.if_name)
            if problem:
                return {"ok": False, "code": CNI_CHECK_FAILED, "error": problem}
        return self._answer(a)

    def status(self) -> dict:
        with self.lock:
            d = self.ipamd
            st = d.ds.stats()
            return {"ok": True, "profile": d.cfg.profile, "reconciles": d.reconcile_runs,
                    "events": d.events[-50:],
                    "stats": {"total": st.total, "assigned": st.assigned, "cooldown": st.cooldown,
                              "available": st.available, "prefixes": st.prefixes, "enis": st.enis},
                    "withinTargets": d.within_targets(),
                    "limits": vars(d.limits) if d.limits else None,
                    "decision": vars(d.decision()),
                    "assignments": [{"containerID": a.key.container_id, "ifName": a.key.if_name,
                                     "ip": a.ip, "eniId": a.eni_id} for a in d.ds.assignments()],
                    "enis": {e.eni_id: {"device": e.device_number, "ips": e.ips(),
                                        "prefixes": e.prefixes()} for e in d.ds.enis.values()}}

    def snapshot(self) -> dict:
        with self.lock:
            return self.ipamd.ds.introspect()

    # ---- lifecycle --------------------------------------------------------------------

    def serve(self, metrics_addr=None, introspection_addr=None) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.egress is not None:
            from cnikit.fabric import egress

            egress.snat(self.ipamd.cfg.v4_egress_range, self.ipamd.instance.primary_ip)
        # A socket file left by a killed daemon would refuse our bind.
        self.socket_path.unlink(missing_ok=True)
        daemon = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 30  # a client that connects and says nothing must not pin a thread

            def handle(self):
                try:
                    line = self.rfile.readline(MAX_REQUEST)
                except OSError:
                    return
                try:
                    req = json.loads(line)
                    if not isinstance(req, dict):
                        raise ValueError("not an object")
                except ValueError as e:
                    resp = {"ok": False, "code": CNI_INVALID_CONFIG, "error": f"bad request: {e}"}
                else:
                    resp = daemon.handle(req)
                self.wfile.write(json.dumps(resp).encode() + b"\n")

        class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        unix = UnixServer(str(self.socket_path), Handler)
        self._start(unix, "socket")
        if metrics_addr:
            self._start(self._http(metrics_addr, {"/metrics": self._metrics_text}), "metrics")
        if introspection_addr:
            self._start(self._http(introspection_addr, {
                "/v1/enis": lambda: json.dumps(self.snapshot()),
                "/v1/pods": lambda: json.dumps(self._pods()),
                "/v1/ipamd-env-settings": lambda: json.dumps(self._settings()),
                "/v1/events": lambda: json.dumps(self.ipamd.events[-200:]),
            }), "introspection")
        t = threading.Thread(target=self._pool_loop, name="pool", daemon=True)
        t.start()
        self._threads.append(t)

    def _metrics_text(self) -> str:
        with self.lock:
            return metrics.render(self.ipamd)

    def _pods(self) -> dict:
        """Upstream's /v1/pods shape: "<pod>_<namespace>_<container>" -> IP and device."""
        out = {}
        with self.lock:
            for a in self.ipamd.ds.assignments():
                meta = self.ipamd.ds.metadata(a.key)
                name = f"{meta.get('k8sPodName', '')}_{meta.get('k8sPodNamespace', '')}_{a.key.container_id}"
                out[name] = {"IPv4Addr": a.ip, "DeviceNumber": a.device_number, "ENI": a.eni_id,
                             "IfName": a.key.if_name}
        return out

    def _settings(self) -> dict:
        c = self.ipamd.cfg
        return {"CNIKIT_PROFILE": c.profile, "WARM_ENI_TARGET": c.warm_eni_target,
                "WARM_IP_TARGET": c.warm_ip_target, "MINIMUM_IP_TARGET": c.minimum_ip_target,
                "WARM_PREFIX_TARGET": c.warm_prefix_target,
                "ENABLE_PREFIX_DELEGATION": c.prefix_delegation, "MAX_ENI": c.max_eni,
                "IP_COOLDOWN_PERIOD": c.ip_cooldown, "CNIKIT_TIME_SCALE": c.scale}

    def _http(self, addr, routes):
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                fn = routes.get(self.path.split("?")[0])
                if fn is None:
                    self.send_error(404)
                    return
                body = fn().encode()
                self.send_response(200)
                ctype = "application/json" if self.path.startswith("/v1/") else "text/plain; version=0.0.4"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        class S(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        return S(tuple(addr), H)

    def _start(self, server, name: str) -> None:
        t = threading.Thread(target=server.serve_forever, args=(SERVE_POLL,), name=name,
                             daemon=True)
        t.start()
        self._servers.append(server)
        self._threads.append(t)

    def _pool_loop(self) -> None:
        while not self.stopping.wait(self.pool_interval):
            self.pool_pass()

    def pool_pass(self) -> None:
        """One pass of the pool manager: reconcile when due, then the pool."""
        with self.lock:
            due = self.ipamd.reconcile_due()
            steps = self.ipamd.add_pool_steps
        view = None
        if due:
            # IMDS can be slow or faulty: read it without holding up CNI requests.
            try:
                view = self.ipamd.imds.enis()
            except ApiError as e:
                view = e
        with self.lock:
            try:
                if due and self.ipamd.add_pool_steps != steps:
                    # An ADD grew the pool during the read: the view predates that ENI or
                    # those addresses, and upstream, whose ADD never grows the pool, never
                    # reconciles against such a view. Reconcile next pass, on a fresh read.
                    self.ipamd.pool_step()
                else:
                    self.ipamd.tick(view)
            except Exception:  # a bug in one pass must not stop the pool manager
                log.exception("pool manager pass failed")
                self.ipamd.metrics.inc("awscni_ipamd_error_count", fn="poolLoop")

    def addresses(self) -> dict[str, tuple[str, int]]:
        out = {}
        for s in self._servers:
            if isinstance(s.server_address, tuple):
                out[type(s).__name__] = s.server_address
        return out

    def stop(self) -> None:
        self.stopping.set()
        # shutdown() returns once its server's loop sees the flag: a connection wakes the
        # loop at once (it then exits unanswered), else it notices within SERVE_POLL.
        stoppers = [threading.Thread(target=s.shutdown) for s in self._servers]
        for t in stoppers:
            t.start()
        for t, s in zip(stoppers, self._servers, strict=True):
            while t.is_alive():  # a wake before the flag was set is served as a request
                _wake(s)
                t.join(0.05)
        for s in self._servers:
            s.server_close()
        self.socket_path.unlink(missing_ok=True)


def _wake(server) -> None:
    addr = server.server_address
    if isinstance(addr, tuple):  # a wildcard bind is reached on loopback
        addr = ("127.0.0.1" if addr[0] in ("", "0.0.0.0") else addr[0], addr[1])
    try:
        with socket.socket(server.address_family, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            s.connect(addr)
    except OSError:
        pass  # the poll notices the flag instead


def request(socket_path: str | os.PathLike, req: dict, timeout: float = 30.0) -> dict:
    """One call to a daemon's socket, as the plugin makes it (for tests and tools)."""
    return json.loads(exchange(str(socket_path), json.dumps(req).encode() + b"\n", timeout))
