#!/usr/bin/env python3
"""prefixd: a small IPAM daemon of a foreign design, a test fixture for `cnikit certify`.

It holds /28 prefixes (EC2 prefix delegation) on its node's primary ENI and hands out their
addresses, one per pod, to the `prefix-ipam` CNI plugin over a unix socket. There is no warm
pool: a prefix is assigned when no held address is free and past its cooldown, and released
once nothing uses it (the last one is kept).

    prefixd.py --state-dir DIR [--reconcile correct|trusts-imds] [--repeated-add refuse|same-ip]

`--reconcile` (or PREFIXD_RECONCILE) picks what the periodic reconcile does with a held prefix
that IMDS's `ipv4-prefix` leaves out:
  correct      ask EC2 and keep it while EC2 still shows it; pods are never forgotten on
               IMDS's word;
  trusts-imds  drop it with its pods and release it to EC2: a deliberate bug, the class of
               aws/amazon-vpc-cni-k8s#3824 (a partial IMDS prefix read released an in-use /28).

`--repeated-add` picks the answer to an ADD of a sandbox that holds an address already:
  refuse   an error, as host-local answers ("duplicate allocation is not allowed");
  same-ip  its address again: a deliberate bug with ptp, which then fails on the sandbox's
           existing veth and rolls its ADD back with an IPAM DEL that frees the live pod's
           address (this fixture's first version did so).

Python standard library only, and nothing from cnikit: the kit must judge it from outside.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import os
import random
import re
import socketserver
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger("prefixd")


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name) or default)
    except ValueError:
        return default
    return value if value >= 0 else default


SCALE = _env_float("CNIKIT_TIME_SCALE", 1.0) or 1.0
COOLDOWN = _env_float("IP_COOLDOWN_PERIOD", 30.0) * SCALE  # upstream's variable, in seconds
RECONCILE_EVERY = 60.0 * SCALE
IMDS_TIMEOUT = 1.5  # an IMDS that stalls costs one skipped reconcile, not a stuck daemon
EC2_TIMEOUT = 5.0
MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")
# No proxy: the IMDS and the EC2 endpoint are reached inside the node's namespace.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---- IMDS ------------------------------------------------------------------------------------

class ImdsError(Exception):
    pass


class Imds:
    def __init__(self, base: str):
        self.base = base.rstrip("/")
        self.token: str | None = None
        self.token_until = 0.0

    def _token(self) -> str | None:
        """An IMDSv2 token, or None (then the request goes out as IMDSv1)."""
        if self.token and time.monotonic() < self.token_until:
            return self.token
        req = urllib.request.Request(self.base + "/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        try:
            with OPENER.open(req, timeout=IMDS_TIMEOUT) as r:
                self.token = r.read(4096).decode().strip() or None
            self.token_until = time.monotonic() + 21600 - 60
        except (OSError, ValueError, http.client.HTTPException):
            self.token = None
        return self.token

    def get(self, path: str) -> str | None:
        """The text of meta-data/PATH; None when IMDS answers 404. ImdsError otherwise."""
        for fresh_token in (False, True):
            token = self._token()
            headers = {"X-aws-ec2-metadata-token": token} if token else {}
            req = urllib.request.Request(f"{self.base}/latest/meta-data/{path}", headers=headers)
            try:
                with OPENER.open(req, timeout=IMDS_TIMEOUT) as r:
                    return r.read(65536).decode()
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None
                if e.code == 401 and not fresh_token:
                    self.token = None  # expired or revoked: one more try with a new one
                    continue
                raise ImdsError(f"{path}: HTTP {e.code}") from None
            except (OSError, ValueError, http.client.HTTPException) as e:
                raise ImdsError(f"{path}: {e}") from None
        raise ImdsError(f"{path}: token refused")


# ---- EC2 (Query API, form-encoded POST, XML answers) -----------------------------------------

class Ec2Error(Exception):
    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}")
        self.code = code


class Ec2:
    def __init__(self) -> None:
        self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.endpoint = (os.environ.get("AWS_ENDPOINT_URL_EC2")
                         or f"https://ec2.{self.region}.amazonaws.com").rstrip("/") + "/"

    def call(self, action: str, params: dict[str, str], idempotent: bool = False,
             tries: int = 6) -> ET.Element:
        """The answer's root element (namespaces stripped). Throttling is retried with a
        short backoff; so are transport errors, but only for reads: a mutation whose answer
        was lost may have happened, and the reconcile finds out from EC2 and IMDS."""
        body = urllib.parse.urlencode({"Action": action, "Version": "2016-11-15", **params}).encode()
        for attempt in range(tries):
            try:
                root = self._post(body)
                code = root.findtext("Errors/Error/Code")
                if code is None:
                    return root
                err = Ec2Error(code, root.findtext("Errors/Error/Message") or "")
            except (OSError, http.client.HTTPException) as e:
                err = Ec2Error("Unreachable", str(e))
            retry = err.code == "RequestLimitExceeded" or (
                idempotent and err.code in ("Unreachable", "InternalError", "Unavailable"))
            if not retry or attempt == tries - 1:
                raise err
            time.sleep(min(1.0, 0.05 * 2 ** attempt) * random.uniform(1.0, 2.0))
        raise AssertionError("unreachable")

    def _post(self, body: bytes) -> ET.Element:
        req = urllib.request.Request(self.endpoint, data=body, method="POST",
                                     headers=self._sign(body))
        try:
            with OPENER.open(req, timeout=EC2_TIMEOUT) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:  # EC2's errors come with an XML body
            raw = e.read()
        try:
            root = ET.fromstring(raw)
        except ET.ParseError:
            raise Ec2Error("BadResponse", raw[:200].decode(errors="replace")) from None
        for el in root.iter():
            el.tag = el.tag.rsplit("}", 1)[-1]
        return root

    def _sign(self, body: bytes) -> dict[str, str]:
        """SigV4 headers when credentials are in the environment (the kit's gate also takes
        unsigned calls; real EC2 does not)."""
        headers = {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
        key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if not (key_id and secret):
            return headers
        url = urllib.parse.urlsplit(self.endpoint)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        headers.update({"host": url.netloc, "x-amz-date": stamp})
        if os.environ.get("AWS_SESSION_TOKEN"):
            headers["x-amz-security-token"] = os.environ["AWS_SESSION_TOKEN"]
        names = sorted(headers)
        canonical = "\n".join(["POST", url.path or "/", "", *(f"{k}:{headers[k]}" for k in names),
                               "", ";".join(names), hashlib.sha256(body).hexdigest()])
        scope = f"{stamp[:8]}/{self.region}/ec2/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        key = ("AWS4" + secret).encode()
        for part in (stamp[:8], self.region, "ec2", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
                                    f"SignedHeaders={';'.join(names)}, Signature={signature}")
        del headers["host"]  # urllib sends the same one
        return headers


def prefixes_of(item: ET.Element) -> set[str]:
    return {p.text for p in item.iterfind("ipv4PrefixSet/item/ipv4Prefix") if p.text}


# ---- the datastore and its checkpoint --------------------------------------------------------

class Store:
    """What the daemon holds, written to one JSON file after every change and before any
    answer depends on it. Cooldowns are wall-clock times so that they survive a restart."""

    def __init__(self, path: Path):
        self.path = path
        self.node: dict = {}  # instance_id, eni_id, mac, primary_ip, subnet_cidr
        self.prefixes: dict[str, float] = {}  # cidr -> when it was added (time.time())
        self.allocs: dict[str, str] = {}  # "container-id/ifname" -> ip
        self.cooling: dict[str, float] = {}  # ip -> when it was freed

    def load(self) -> bool:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return False
        # A checkpoint that cannot be read is not silently replaced by an empty one: that
        # would hand the pods' addresses out again. The daemon stops, loudly.
        self.node = dict(doc["node"])
        self.prefixes = {str(k): float(v) for k, v in doc["prefixes"].items()}
        self.allocs = {str(k): str(v) for k, v in doc["allocs"].items()}
        self.cooling = {str(k): float(v) for k, v in doc["cooling"].items()}
        return True

    def save(self) -> None:
        doc = {"version": 1, "node": self.node, "prefixes": self.prefixes,
               "allocs": self.allocs, "cooling": self.cooling}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)  # the old or the new checkpoint, never a torn one
        dirfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)

    def used_in(self, prefix: str) -> list[str]:
        net = ipaddress.ip_network(prefix)
        return [ip for ip in self.allocs.values() if ipaddress.ip_address(ip) in net]

    def cooling_in(self, prefix: str, now: float) -> list[str]:
        net = ipaddress.ip_network(prefix)
        return [ip for ip, t in self.cooling.items()
                if now - t < COOLDOWN and ipaddress.ip_address(ip) in net]

    def pick(self, now: float, skip: set[str]) -> str | None:
        """A free address past its cooldown, from a prefix that already has pods when one
        does (so that empty prefixes stay empty and can go back to EC2). Every address of a
        /28 is usable: EC2 routes the whole prefix to the ENI."""
        used = set(self.allocs.values())
        for prefix in sorted(self.prefixes, key=lambda p: (not self.used_in(p), p)):
            if prefix in skip:
                continue
            free = [str(a) for a in ipaddress.ip_network(prefix) if str(a) not in used
                    and now - self.cooling.get(str(a), float("-inf")) >= COOLDOWN]
            if free:  # the one freed longest ago (never used: first)
                return min(free, key=lambda ip: self.cooling.get(ip, float("-inf")))
        return None


# ---- the daemon ------------------------------------------------------------------------------

class Refused(Exception):
    """An answer for the plugin: a CNI error code and message."""

    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code


class Daemon:
    def __init__(self, state_dir: Path, trusts_imds: bool, refuse_repeated_add: bool = True):
        self.state_dir = state_dir
        self.trusts_imds = trusts_imds
        self.refuse_repeated_add = refuse_repeated_add
        self.store = Store(state_dir / "checkpoint.json")
        self.imds = Imds(os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or "http://169.254.169.254")
        self.ec2 = Ec2()
        # One lock for the datastore and the EC2 calls that change it: an ADD never picks
        # from a prefix that is being released, nor races a reconcile.
        self.lock = threading.RLock()
        self.releasing: set[str] = set()  # held, but set aside until EC2 confirms the release
        self.stop = threading.Event()

    # -- start-up

    def start(self) -> None:
        if self.store.load():
            log.info("checkpoint: %d prefixes, %d pods", len(self.store.prefixes), len(self.store.allocs))
        else:
            self.store.node = self._discover()
            self.store.save()
        # One reconcile before the socket opens: EC2 and IMDS may have moved while we were
        # down (a prefix assigned just before a crash is adopted here).
        self.reconcile()

    def _discover(self) -> dict:
        """Our instance (IMDS) and its primary ENI (EC2), retried until both answer: the
        kit counts a daemon that never gets ready against the build, which is fair."""
        while True:
            try:
                instance_id = (self.imds.get("instance-id") or "").strip()
                if not re.fullmatch(r"i-[0-9a-f]+", instance_id):
                    raise ImdsError(f"instance-id {instance_id[:40]!r}")
                root = self.ec2.call("DescribeNetworkInterfaces", {
                    "Filter.1.Name": "attachment.instance-id", "Filter.1.Value.1": instance_id},
                    idempotent=True)
                eni = next(i for i in root.iterfind("networkInterfaceSet/item")
                           if i.findtext("attachment/deviceIndex") == "0")
                subnet = self.ec2.call("DescribeSubnets", {"SubnetId.1": eni.findtext("subnetId")},
                                       idempotent=True)
                node = {"instance_id": instance_id, "eni_id": eni.findtext("networkInterfaceId"),
                        "mac": (eni.findtext("macAddress") or "").lower(),
                        "primary_ip": eni.findtext("privateIpAddress"),
                        "subnet_cidr": subnet.findtext("subnetSet/item/cidrBlock")}
                ipaddress.ip_interface(f"{node['primary_ip']}/{node['subnet_cidr'].split('/')[1]}")
                log.info("node %s", node)
                return node
            except (ImdsError, Ec2Error, StopIteration, AttributeError, TypeError, ValueError) as e:
                log.warning("discovery: %s; retrying", e)
                time.sleep(0.5)

    # -- what the plugin asks

    def add(self, key: str) -> dict:
        with self.lock:
            held = self.store.allocs.get(key)
            if held is not None and not self.refuse_repeated_add:
                log.info("ADD %s -> %s (again)", key, held)
                return self._answer(held)
            if held is not None:
                # A repeated ADD of the same sandbox is refused, as host-local does: answered
                # with its address, ptp would fail on the sandbox's existing veth and roll
                # back with a DEL that frees the live pod's address (the kit's
                # runtime-retries caught that). A runtime whose ADD failed DELs the sandbox
                # before it tries again, so an ADD we died before answering is not lost.
                raise Refused(999, f"{held} has been allocated to {key}, duplicate "
                                   "allocation is not allowed")
            ip = self.store.pick(time.time(), self.releasing)
            if ip is None:
                self._assign_prefix()
                ip = self.store.pick(time.time(), self.releasing)
            if ip is None:
                raise Refused(11, "no free address even in a new prefix")
            self.store.allocs[key] = ip
            try:
                self.store.save()  # before the answer: a restart must know this pod
            except OSError as e:
                del self.store.allocs[key]
                raise Refused(5, f"checkpoint: {e}") from None
            log.info("ADD %s -> %s", key, ip)
        return self._answer(ip)

    def _answer(self, ip: str) -> dict:
        node = self.store.node
        return {"ip": ip, "prefixlen": int(node["subnet_cidr"].split("/")[1]),
                "gateway": node["primary_ip"]}

    def delete(self, key: str) -> dict:
        with self.lock:
            ip = self.store.allocs.pop(key, None)
            if ip is None:
                raise Refused(3, f"{key} not found")
            self.store.cooling[ip] = time.time()
            try:
                self.store.save()
            except OSError as e:
                self.store.allocs[key] = ip
                raise Refused(5, f"checkpoint: {e}") from None
            log.info("DEL %s (%s cools down for %.1fs)", key, ip, COOLDOWN)
            return {"ip": ip}

    def check(self, key: str) -> dict:
        with self.lock:
            ip = self.store.allocs.get(key)
        if ip is None:
            raise Refused(3, f"{key} not found")
        return {"ip": ip}

    # -- EC2

    def _assign_prefix(self) -> None:
        eni = self.store.node["eni_id"]
        try:
            root = self.ec2.call("AssignPrivateIpAddresses",
                                 {"NetworkInterfaceId": eni, "Ipv4PrefixCount": "1"})
        except Ec2Error as e:
            raise Refused(11, f"AssignPrivateIpAddresses: {e}") from None
        prefix = root.findtext("assignedIpv4PrefixSet/item/ipv4Prefix") or ""
        try:
            if ipaddress.ip_network(prefix).prefixlen != 28:
                raise ValueError(prefix)
        except ValueError:
            raise Refused(11, f"AssignPrivateIpAddresses answered no /28: {prefix!r}") from None
        self.store.prefixes[prefix] = time.time()
        self.store.save()
        log.info("assigned %s to %s", prefix, eni)

    def _ec2_prefixes(self) -> set[str] | None:
        """The prefixes EC2 shows on our ENI; None when EC2 cannot say."""
        try:
            root = self.ec2.call("DescribeNetworkInterfaces",
                                 {"NetworkInterfaceId.1": self.store.node["eni_id"]}, idempotent=True)
            item = root.find("networkInterfaceSet/item")
            return None if item is None else prefixes_of(item)
        except Ec2Error as e:
            log.warning("DescribeNetworkInterfaces: %s", e)
            return None

    def _unassign(self, prefix: str) -> bool:
        """Whether the prefix is off our ENI now. An error may hide a release that happened
        (a lost answer; a retry is then refused): EC2's view decides."""
        try:
            self.ec2.call("UnassignPrivateIpAddresses",
                          {"NetworkInterfaceId": self.store.node["eni_id"], "Ipv4Prefix.1": prefix})
            return True
        except Ec2Error as e:
            log.warning("UnassignPrivateIpAddresses %s: %s", prefix, e)
            shown = self._ec2_prefixes()
            return shown is not None and prefix not in shown

    # -- the periodic work

    def _imds_prefixes(self) -> set[str]:
        """The prefixes IMDS lists on our ENI, reading every listed ENI as a reconcile pass
        does. A 404 means none (as upstream's reader takes it); anything malformed fails
        the whole read."""
        listing = self.imds.get("network/interfaces/macs/")
        if listing is None:
            raise ImdsError("no MAC list (404)")
        macs = [m.strip().rstrip("/").lower() for m in listing.split()]
        if not all(MAC.fullmatch(m) for m in macs):
            raise ImdsError(f"MAC list {listing[:80]!r}")
        ours: set[str] = set()  # our ENI left out of the list: IMDS says nothing is on it
        for mac in macs:
            text = self.imds.get(f"network/interfaces/macs/{mac}/ipv4-prefix") or ""
            found = set()
            for line in text.split():
                net = ipaddress.ip_network(line)  # ValueError: garbage
                if net.version != 4 or net.prefixlen != 28:
                    raise ValueError(line)
                found.add(str(net))
            if mac == self.store.node["mac"]:
                ours = found
        return ours

    def reconcile(self) -> None:
        began = time.time()
        try:
            listed = self._imds_prefixes()
        except (ImdsError, ValueError) as e:
            log.warning("reconcile skipped: IMDS %s", e)
            return
        with self.lock:
            # Prefixes assigned since the read began cannot be in it.
            missing = {p for p, added in self.store.prefixes.items()
                       if added < began and p not in listed}
            new = listed - set(self.store.prefixes) - self.releasing
            if self.trusts_imds:
                for prefix in missing:
                    self._forget(prefix)
                missing = set()
            shown = self._ec2_prefixes() if missing or new else None
            for prefix in missing:
                if shown is None or prefix in shown:
                    continue  # EC2 still shows it (or cannot say): IMDS is behind, keep it
                # EC2 no longer has it either: no new pod gets an address from it, but the
                # pods in it keep their records (their DEL frees them; nothing re-uses them).
                log.warning("%s is gone from IMDS and EC2: no longer handed out (%d pods in it)",
                            prefix, len(self.store.used_in(prefix)))
                del self.store.prefixes[prefix]
            for prefix in new:
                if shown is not None and prefix in shown:  # both views agree: ours
                    log.info("adopting %s (IMDS and EC2 show it)", prefix)
                    self.store.prefixes[prefix] = time.time()
            self.store.save()

    def _forget(self, prefix: str) -> None:
        """The trusts-imds variant's bug: IMDS did not list it, so it is taken for gone."""
        gone = self.store.used_in(prefix)
        for key in [k for k, ip in self.store.allocs.items() if ip in gone]:
            del self.store.allocs[key]
        del self.store.prefixes[prefix]
        self.store.save()
        log.warning("%s missing from IMDS: dropped with %d pods, released", prefix, len(gone))
        self._unassign(prefix)

    def release_idle(self) -> None:
        with self.lock:
            now = time.time()
            self.store.cooling = {ip: t for ip, t in self.store.cooling.items() if now - t < COOLDOWN}
            idle = [p for p in sorted(self.store.prefixes)
                    if not self.store.used_in(p) and not self.store.cooling_in(p, now)]
            if len(idle) == len(self.store.prefixes):
                idle = idle[1:]  # keep one: the next pod needs no EC2 call
            for prefix in idle:
                self.releasing.add(prefix)
                if self._unassign(prefix):
                    self.releasing.discard(prefix)
                    del self.store.prefixes[prefix]
                    log.info("released %s", prefix)
                # else: set aside, tried again next time
            self.store.save()

    def loop(self) -> None:
        while not self.stop.wait(RECONCILE_EVERY):
            try:
                self.reconcile()
                self.release_idle()
            except Exception:  # noqa: BLE001 - one bad pass must not end the reconciles
                log.exception("reconcile pass failed")


# ---- the socket: one JSON request line, one JSON answer line ---------------------------------

class Handler(socketserver.StreamRequestHandler):
    timeout = 30

    def handle(self) -> None:
        line = self.rfile.readline(65536)
        if not line.strip():
            return  # a readiness probe: connect, then close
        daemon: Daemon = self.server.daemon  # type: ignore[attr-defined]
        try:
            req = json.loads(line)
            op, key = req["op"], str(req["key"])
            answer = {"add": daemon.add, "del": daemon.delete, "check": daemon.check}[op](key)
            answer["ok"] = True
        except Refused as e:
            answer = {"ok": False, "code": e.code, "msg": str(e)}
        except (ValueError, KeyError, TypeError) as e:
            answer = {"ok": False, "code": 6, "msg": f"bad request: {e}"}
        except Exception as e:  # noqa: BLE001 - the plugin gets an answer, the daemon lives on
            log.exception("request failed")
            answer = {"ok": False, "code": 11, "msg": f"internal error: {e}"}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state-dir", required=True, type=Path)
    ap.add_argument("--reconcile", choices=("correct", "trusts-imds"),
                    default=os.environ.get("PREFIXD_RECONCILE", "correct"))
    ap.add_argument("--repeated-add", choices=("refuse", "same-ip"), default="refuse")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s prefixd %(levelname)s %(message)s")
    args.state_dir.mkdir(parents=True, exist_ok=True)
    daemon = Daemon(args.state_dir, args.reconcile == "trusts-imds",
                    refuse_repeated_add=args.repeated_add == "refuse")
    log.info("reconcile=%s cooldown=%.2fs every=%.2fs", args.reconcile, COOLDOWN, RECONCILE_EVERY)
    daemon.start()
    sock = args.state_dir / "daemon.sock"
    sock.unlink(missing_ok=True)  # left by the previous life (SIGKILL)
    server = Server(str(sock), Handler)
    server.daemon = daemon  # type: ignore[attr-defined]
    threading.Thread(target=daemon.loop, name="reconcile", daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
