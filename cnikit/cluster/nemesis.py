"""The nemesis (Jepsen's word): every fault the kit injects, one operation each, in one shape
in the history, whoever asks for it (a scenario through Ctx, random-chaos, the pytest
fixtures, `cnikit up`).

    n = cluster.nemesis                             # CniCluster's; the kit's for shared parts
    f = n.imds_fault("stale", target={"mac": mac}, duration=5)     # -> the IMDS fault's id
    n.end(f)                                        # or f.remove(), or `with f:`
    g = n.ec2_fault("throttle", target={"action": "AssignPrivateIpAddresses"}, probability=0.5)
    n.end(g)                                        # both take the one spec shape of faultcore
    n.kill_daemon(0); n.restart_daemon(0)           # the daemon is down from kill to restart
    t = n.kill_in_write(0); t.wait(10)              # killed as it opens a state file to write
    c = n.crash_at(0, "AttachNetworkInterface"); c.wait(10)   # killed after that EC2 call
    n.take_ips(eni, ips)                            # another tenant of the subnet takes addresses
    n.delete_eni(eni)                               # an operator detaches and deletes an ENI
    n.imds.await_end(f, 30)                         # a fault that ends on an event (its end)
    n.unassign(ip); n.assign(ip, eni, allow_reassignment=True)    # EC2 moves a pod's address
    n.restart_all()                                 # every daemon killed, then all started at once
    n.sweep_enis(); n.detach_eni(eni); n.unassign(ip, other=True)  # another principal's acts
    n.heal()                                        # every fault ends

History entries (cnikit.check.history), process "nemesis", f the operation:
    type "start"  a fault in effect until the entry of type "end" with the same value.id,
                  or for value.duration seconds
    type "end"    that fault ended; value.by says how: "removed" (ended, healed),
                  "expired" (a followed fault's duration ran out: the nemesis's own faults
                  end by their start's duration, with no entry), "ended" (the fault ended
                  by itself on an event, value.why saying which: stale_until_change at the
                  instance's next attach/detach), "restart", "given-back", "failed"
    type "info"   an instant act (addresses taken or moved)
    type "fail"   the act failed (value.error): nothing was injected
    type "info" of op "fault-skipped": a fault aimed at an interface that left EC2 before
                  it could be applied (value.fault: the operation skipped, value.reason why)
    value         {"op": f, "id": ..., "target": {what it hits}, ...the fault's parameters}
Operations: imds-fault, ec2-fault, daemon-kill (`in_write`: killed as it opened that file
of its state for writing; `after_call`: killed when the gate served that EC2 call from the
node, before its answer left), daemon-restart, ec2-assign-elsewhere,
ec2-unassign (`principal`: "other" for another principal's), ec2-assign, ec2-sweep-enis
(another principal deletes the cluster's available ENIs), ec2-detach (another principal
detaches an ENI), ec2-delete-eni (an ENI detached and deleted out of band),
daemon-restart-all (every daemon killed, then all started together: the nodes' own
daemon-kill/daemon-restart entries frame it), ec2-take-held (an address a pod holds, taken until given back:
the pod's damage meanwhile is the nemesis's, cnikit.check.damage), heal. The checkers never read the nemesis: they judge what the
clients and the prober observed against EC2's truth; the report draws it.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable

from cnikit.check.history import NEMESIS, History
from cnikit.cloud.audit import OTHER_PRINCIPAL_KEY
from fault_imds.client import FaultClient, FaultHandle, UnknownTarget

START, END, INFO, FAIL = "start", "end", "info", "fail"
# Another principal of the account (an operator's console, another node's sweep): its own
# credentials, so the gate's audit records its calls under its access key (`principal`).
OTHER_PRINCIPAL = {"AWS_ACCESS_KEY_ID": OTHER_PRINCIPAL_KEY, "AWS_SECRET_ACCESS_KEY": "other"}
# The tag the reference daemon (and upstream's) puts on the ENIs it creates.
CLUSTER_TAG = "cluster.k8s.amazonaws.com/name"
SKIPPED = "fault-skipped"
# A fault's end event -> the `by` of its end entry.
ENDINGS = {"fault_ended": "ended", "fault_expired": "expired", "fault_removed": "removed"}


class TargetGone(UnknownTarget):
    """The fault's interface left EC2 between being chosen and the fault (the build freed
    it meanwhile): nothing was injected, and the nemesis recorded a fault-skipped saying
    why. Random chaos moves on; a scenario that aimed at that interface decides (an
    unhandled one makes its run inconclusive, not an error)."""


class Nemesis:
    """The faults one history (or several: a kit's clusters share a cloud and an IMDS) sees.

    `history`: a History, or a callable returning the histories to record into now.
    `imds_control`: the fault IMDS's control URL; `cloud`: the Cloud (its gate's faults, an
    EC2 client); `daemons`: an object with _kill_daemon/_restart_daemon(node) and
    instance_id(node) (CniCluster). Each part is optional: an act on a missing one raises.
    """

    def __init__(self, history: History | Callable[[], Iterable[History]], *,
                 imds_control: str | None = None, cloud=None, daemons=None):
        self._histories = history if callable(history) else (lambda: [history])
        self.imds = NemesisFaultClient(self, imds_control) if imds_control else None
        self.ec2 = Ec2Faults(self, cloud.gate.faults) if cloud is not None else None
        self.cloud = cloud
        self.daemons = daemons
        self._lock = threading.Lock()
        # id -> (its start entry's value, its times, monotonic expiry or None)
        self._open: dict[str, tuple[dict, dict, float | None]] = {}
        self._down: dict[int, tuple[str, str]] = {}  # node -> (op, id) of its open down time
        # Held from a fault's add until its start is recorded, and by the follower while it
        # reads fault_added events: an event of the nemesis's own add is then always seen
        # with the id in own_ids (else the follower recorded that start a second time).
        self.adding = threading.Lock()
        self.own_ids: set[str] = set()
        self._seq = itertools.count(1)
        self._other = None  # the other principal's EC2 client, made at first use
        # Called with the node before every kill or restart the kit makes (a kill, a crash
        # point, a write trap, a restart of one or every node), and once its restart made
        # it ready: a watcher then knows a daemon's exit is the kit's by the time it sees it.
        self.on_down: Callable[[int], None] = lambda node: None
        self.on_up: Callable[[int], None] = lambda node: None
        self.crash_points: dict[str, object] = {}  # id -> CrashPoint armed by crash_at

    # -- recording -----------------------------------------------------------------------

    def record(self, type_: str, op: str, target: dict | None = None, *, id: str | None = None,
               **params) -> dict:
        """One nemesis entry in every history; a start is remembered until its end."""
        value = {"op": op, "id": id, "target": dict(target or {}),
                 **{k: v for k, v in params.items() if v is not None}}
        entries = [h.info(NEMESIS, op, value) if type_ == INFO else
                   h.append(NEMESIS, type_, op, value) for h in self._histories()]
        with self._lock:
            if type_ == START and id is not None:
                now = time.monotonic()
                e = entries[0] if entries else {"time": time.time(), "mono": now}
                duration = params.get("duration")
                expires = now + duration if isinstance(duration, (int, float)) else None
                self._open[id] = (value, {"at": e["time"], "mono": e["mono"]}, expires)
            elif type_ == END:
                self._open.pop(id, None)
        return value

    def close(self, op: str, fid: str, by: str, **params) -> bool:
        """Record the end of an open fault, once: False when it was not open (ended and
        recorded already, by whichever of the nemesis, its client or the follower saw the
        end first)."""
        with self._lock:
            opened = self._open.pop(fid, None)
        if opened is None or (opened[2] is not None and opened[2] <= time.monotonic()):
            return False  # not open, or its start's duration already ended it
        self.record(END, op, opened[0]["target"], id=fid, by=by, **params)
        return True

    def _live(self) -> list[tuple[dict, dict, float | None]]:
        """The faults begun and not ended (ones whose duration passed are dropped)."""
        now = time.monotonic()
        with self._lock:
            for fid in [f for f, (_, _, exp) in self._open.items() if exp is not None
                        and exp <= now]:
                del self._open[fid]
            return list(self._open.values())

    def attach(self, history: History) -> None:
        """A history that starts now (a cluster made later) gets the faults in effect."""
        for value, times, _ in self._live():
            history.append(NEMESIS, START, value["op"], value, **times)

    def in_effect(self) -> list[dict]:
        """The start values of the faults the nemesis began and has not ended."""
        return [v for v, _, _ in self._live()]

    def _act(self, op: str, target: dict, fn: Callable, **params):
        """Run the act; record it as failed (and re-raise) when it raises."""
        try:
            return fn()
        except Exception as e:
            self.record(FAIL, op, target, error=f"{type(e).__name__}: {e}"[:300], **params)
            raise

    def departure(self, refused: UnknownTarget) -> str | None:
        """Why a refused target is gone: the interface EC2 had and has no longer (EC2 read
        from the gate, never lagged, when there is one), with the call that deleted it from
        the gate's audit. None: not an interface that left (a bad spec, or EC2 has it)."""
        left = refused.departed
        if not left:
            return None
        eni, mac = left.get("eni_id"), left.get("mac")
        if self.cloud is not None:
            snap = self.cloud.gate.owners()
            if eni in snap.enis or any(e.mac.lower() == mac for e in snap.enis.values()):
                return None
        ago = max(0.0, time.time() - float(left.get("since") or time.time()))
        why = f"{eni} (mac {mac}) left EC2 {ago:.2f}s before the fault"
        deleted = self._deletion(eni)
        return f"{why} ({deleted})" if deleted else why

    def _deletion(self, eni: str | None) -> str | None:
        if self.cloud is None or not eni:
            return None
        calls = [r for r in self.cloud.gate.audit.records()
                 if r.eni_id == eni and r.action == "DeleteNetworkInterface" and r.outcome == "ok"]
        if not calls:
            return None
        return f"DeleteNetworkInterface {time.time() - calls[-1].time:.2f}s before"

    # -- IMDS and EC2 faults -------------------------------------------------------------

    def imds_fault(self, kind: str, target: dict | None = None, duration: float | None = None,
                   **attrs) -> FaultHandle:
        """A fault of the IMDS (fault_imds kinds); returns its handle (an id)."""
        if self.imds is None:
            raise ValueError("this nemesis has no fault IMDS")
        return self.imds.add(kind, target=target, duration=duration, **attrs)

    def ec2_fault(self, kind: str, target: dict | None = None, duration: float | None = None,
                  **attrs) -> str:
        """A fault of the EC2 API at the gate (cnikit.cloud.faults kinds); its id. `target`
        as the gate takes it: {"action": ..., "region": ...}, either left out for all."""
        if self.ec2 is None:
            raise ValueError("this nemesis has no EC2 gate")
        return self.ec2.add(kind, target=target, duration=duration, **attrs)

    def end(self, fault) -> bool:
        """End an IMDS or EC2 fault by its handle or id; False if it was already gone."""
        fid = str(fault)
        if self.ec2 is not None and fid.startswith("ec2f-"):
            return self.ec2.remove(fid)
        if self.imds is None:
            raise ValueError(f"no fault {fid!r} to end")
        return self.imds.remove(fid)

    def heal(self) -> None:
        """Every IMDS and EC2 fault removed (daemons are restarted by their owner)."""
        if self.imds is not None:
            self.imds.clear()
        if self.ec2 is not None:
            self.ec2.clear()
        self.record(INFO, "heal")

    # -- daemons -------------------------------------------------------------------------

    def _node(self, node: int) -> dict:
        if self.daemons is None:
            raise ValueError("this nemesis has no daemons")
        return {"node": node, "instance_id": self.daemons.instance_id(node)}

    def kill_daemon(self, node: int, sig: int = signal.SIGKILL, **params) -> None:
        """Send sig to the node's daemon: it is down until restart_daemon(node)."""
        target = self._node(node)
        self.on_down(node)
        self._act("daemon-kill", target, lambda: self.daemons._kill_daemon(node, sig),
                  signal=int(sig), **params)
        with self._lock:
            if node in self._down:  # killed again while down: one down time
                return
            fid = f"kill-{node}-{next(self._seq)}"
            self._down[node] = ("daemon-kill", fid)
        self.record(START, "daemon-kill", target, id=fid, signal=int(sig), **params)

    def kill_in_write(self, node: int):
        """Arm a trap on the node's daemon state directory: the next time the daemon opens a
        file there for writing (a checkpoint write), it is SIGKILLed right after the open,
        before it wrote a byte (cnikit.cluster.write_trap). Returns the armed WriteTrap
        (`wait(timeout)` -> what it fired on); the kill is a daemon-kill with `in_write`."""
        from cnikit.cluster.write_trap import WriteTrap

        self._node(node)

        def fire(pid: int, path: str) -> None:
            self.kill_daemon(node, signal.SIGKILL, in_write=os.path.basename(path))

        # The trap kills first and records after (kill_daemon): on_down goes before the kill.
        return WriteTrap(self.daemons._state_dir(node), lambda: self.daemons._daemon_pids(node),
                         fire, before_kill=lambda: self.on_down(node))

    def crash_at(self, node: int, action: str):
        """Arm a crash point (cnikit.cluster.crash_point): the node's daemon is SIGKILLed
        when the gate serves `action` (one of CRASH_ACTIONS) from it, successfully, after the
        call took effect and before its answer leaves. Returns the armed CrashPoint
        (`wait(timeout)` -> what it fired on); the kill is a daemon-kill with `after_call`.
        ValueError (one line) for another action."""
        from cnikit.cluster.crash_point import CrashPoint

        point = CrashPoint(self, node, action)
        point.id = f"crash-{node}-{next(self._seq)}"
        self.crash_points[point.id] = point
        return point

    def restart_daemon(self, node: int, wait: float = 60.0) -> None:
        """Restart the node's daemon and wait until it is ready: the end of its kill, or for
        a running daemon a daemon-restart from stop to ready. A restart that fails (raises)
        leaves the daemon down until one succeeds."""
        target = self._node(node)
        self.on_down(node)
        with self._lock:
            down = self._down.get(node)
            if down is None:
                down = self._down[node] = ("daemon-restart", f"restart-{node}-{next(self._seq)}")
                fresh = True
            else:
                fresh = False
        if fresh:
            self.record(START, down[0], target, id=down[1])
        self._act("daemon-restart", target, lambda: self.daemons._restart_daemon(node, wait))
        with self._lock:
            self._down.pop(node, None)
        self.on_up(node)
        self.record(END, down[0], target, id=down[1], by="restart")

    def restart_all(self, nodes: Iterable[int], wait: float = 60.0) -> dict[int, Exception]:
        """A synchronized restart (upstream 873/617: every node restarted at once): every
        node's daemon SIGKILLed first, then all started together, each waited for. One
        daemon-restart-all entry, framed by each node's daemon-kill and its end. Returns
        node -> the error of a restart that failed (that daemon stays down)."""
        nodes = list(nodes)
        for node in nodes:
            self.kill_daemon(node, signal.SIGKILL, all_at_once=True)
        self.record(INFO, "daemon-restart-all", {"nodes": nodes})
        failed: dict[int, Exception] = {}

        def one(node: int) -> None:
            try:
                self.restart_daemon(node, wait)
            except Exception as e:  # noqa: BLE001 - reported to the caller, per node
                failed[node] = e

        threads = [threading.Thread(target=one, args=(n,), name=f"restart-{n}") for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return failed

    # -- faults others add over the control APIs ---------------------------------------------

    def follow(self, interval: float = 0.25) -> Follower:
        """Record faults added and removed over the control APIs (`$CONTROL/faults`,
        `$GATE/faults`) as nemesis operations with via="control-api", until .stop(). For a
        cluster whose faults come from outside (`cnikit up`)."""
        return Follower(self, interval).start()

    # -- EC2 acts (another tenant, an operator, a buggy daemon elsewhere) ------------------

    def _client(self):
        if self.cloud is None:
            raise ValueError("this nemesis has no EC2")
        return self.cloud.client()

    def _holder(self, ip: str) -> str | None:
        owner = self.cloud.gate.owners().ips.get(ip)
        return owner.eni_id if owner else None

    def take_ips(self, eni: str, ips: list[str]) -> None:
        """Another tenant of the subnet takes these addresses (assigned to `eni` in EC2)."""
        target = {"eni": eni, "ips": list(ips)}
        self._act("ec2-assign-elsewhere", target, lambda: self._client()
                  .assign_private_ip_addresses(NetworkInterfaceId=eni,
                                               PrivateIpAddresses=list(ips)))
        self.record(INFO, "ec2-assign-elsewhere", target)

    def take_on_release(self, eni: str, taker: str):
        """Arm a take on release (cnikit.cluster.take_on_release): whatever a release from
        `eni` frees goes to `taker` once the release took effect, before its answer leaves.
        Returns it (`taken`, `close()`; a context manager)."""
        from cnikit.cluster.take_on_release import TakeOnRelease

        return TakeOnRelease(self, eni, taker)

    def other_client(self):
        """An EC2 client of another principal of the account (OTHER_PRINCIPAL's keys)."""
        if self.cloud is None:
            raise ValueError("this nemesis has no EC2")
        with self._lock:
            if self._other is None:
                import boto3
                import botocore.config

                self._other = boto3.client(
                    "ec2", endpoint_url=self.cloud.endpoint, region_name=self.cloud.region,
                    aws_access_key_id=OTHER_PRINCIPAL["AWS_ACCESS_KEY_ID"],
                    aws_secret_access_key=OTHER_PRINCIPAL["AWS_SECRET_ACCESS_KEY"],
                    config=botocore.config.Config(retries={"max_attempts": 1,
                                                           "mode": "standard"},
                                                  connect_timeout=5, read_timeout=30))
            return self._other

    def unassign(self, ip: str, other: bool = False) -> str:
        """UnassignPrivateIpAddresses of ip from whichever ENI holds it; returns that ENI.
        `other`: by another principal (an operator's console, upstream 377/391)."""
        eni = self._holder(ip)
        target = {"eni": eni, "ips": [ip]}
        principal = "other" if other else None

        def act():
            if eni is None:
                raise ValueError(f"{ip} is not assigned to any ENI")
            client = self.other_client() if other else self._client()
            client.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ip])

        self._act("ec2-unassign", target, act, principal=principal)
        self.record(INFO, "ec2-unassign", target, principal=principal)
        return eni

    def sweep_enis(self, tag: str = CLUSTER_TAG, value: str | None = None,
                   keep: Iterable[str] = ()) -> list[str]:
        """Another principal's leaked-ENI sweep (upstream 1099: another node's sweep): every
        "available" ENI carrying `tag` (with `value`, if given) deleted, except `keep`.
        Returns the ENIs deleted (one EC2 may have attached or deleted meanwhile is
        skipped: the sweep is a race by nature)."""
        value_filter = [value] if value is not None else ["*"]
        keep = set(keep)
        target = {"tag": tag, **({"value": value} if value is not None else {})}

        def act() -> list[str]:
            c = self.other_client()
            found = c.describe_network_interfaces(Filters=[
                {"Name": f"tag:{tag}", "Values": value_filter}])["NetworkInterfaces"]
            gone = []
            for ni in found:
                eni = ni["NetworkInterfaceId"]
                if ni.get("Status") != "available" or ni.get("Attachment") or eni in keep:
                    continue
                try:
                    c.delete_network_interface(NetworkInterfaceId=eni)
                except Exception:  # noqa: BLE001 - attached or gone meanwhile: not swept
                    continue
                gone.append(eni)
            return gone

        gone = self._act("ec2-sweep-enis", target, act, principal="other")
        self.record(INFO, "ec2-sweep-enis", {**target, "enis": gone}, principal="other")
        return gone

    def detach_eni(self, eni: str) -> None:
        """Another principal detaches an ENI out of band (Force), its addresses with it."""
        target = {"eni": eni}

        def act() -> None:
            c = self.other_client()
            ni = c.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"]
            att = (ni[0].get("Attachment") or {}) if ni else {}
            if not att.get("AttachmentId"):
                raise ValueError(f"{eni} is not attached")
            target["instance_id"] = att.get("InstanceId")
            c.detach_network_interface(AttachmentId=att["AttachmentId"], Force=True)

        self._act("ec2-detach", target, act, principal="other")
        self.record(INFO, "ec2-detach", target, principal="other")

    def assign(self, ip: str, eni: str, allow_reassignment: bool = False) -> None:
        """AssignPrivateIpAddresses of ip to eni (moving it from its holder if allowed)."""
        target = {"eni": eni, "ips": [ip], "from": self._holder(ip)}
        self._act("ec2-assign", target, lambda: self._client().assign_private_ip_addresses(
            NetworkInterfaceId=eni, PrivateIpAddresses=[ip],
            AllowReassignment=allow_reassignment), allow_reassignment=allow_reassignment)
        self.record(INFO, "ec2-assign", target, allow_reassignment=allow_reassignment)

    def reassign(self, ip: str, eni: str) -> None:
        self.assign(ip, eni, allow_reassignment=True)

    def take_held(self, ip: str, eni: str) -> str:
        """EC2 moves an address a pod holds to `eni` (AllowReassignment): the pod is dark by
        the nemesis's own act until give_back(id). Recorded as a start before the act, so
        the checkers (cnikit.check.damage) excuse the holder's damage from its first sign;
        returns the operation's id."""
        fid = f"take-{next(self._seq)}"
        target = {"eni": eni, "ips": [ip], "from": self._holder(ip)}
        self.record(START, "ec2-take-held", target, id=fid)
        try:
            self._client().assign_private_ip_addresses(
                NetworkInterfaceId=eni, PrivateIpAddresses=[ip], AllowReassignment=True)
        except Exception as e:
            self.record(FAIL, "ec2-take-held", target, id=fid, error=f"{type(e).__name__}: {e}"[:300])
            self.record(END, "ec2-take-held", target, id=fid, by="failed")
            raise
        return fid

    def delete_eni(self, eni: str, wait: float = 30.0) -> None:
        """An operator (or another node's leaked-ENI sweep) detaches the ENI, forced, and
        deletes it once EC2 lets it (VPC CNI #1008): one info entry ec2-delete-eni. A Delete
        answered "in use" while the detach completes is tried again on EC2's next change,
        for up to `wait` seconds."""
        owner = self.cloud.gate.owners().enis.get(eni) if self.cloud is not None else None
        target = {"eni": eni, "instance_id": owner.instance_id if owner else None}

        def act():
            c = self._client()
            ni = c.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
            att = ni.get("Attachment") or {}
            if att.get("AttachmentId") and att.get("Status") in ("attached", "attaching"):
                c.detach_network_interface(AttachmentId=att["AttachmentId"], Force=True)
            deadline = time.monotonic() + wait
            while True:
                version = self.cloud.gate.owners().version
                try:
                    c.delete_network_interface(NetworkInterfaceId=eni)
                    return
                except Exception as e:  # botocore's ClientError
                    code = getattr(e, "response", {}).get("Error", {}).get("Code")
                    if code not in ("InvalidNetworkInterface.InUse", "IncorrectState") \
                            or time.monotonic() >= deadline:
                        raise
                self.cloud.gate.wait_change(version, max(0.05, min(1.0, deadline
                                                                   - time.monotonic())))

        self._act("ec2-delete-eni", target, act)
        self.record(INFO, "ec2-delete-eni", target)

    def give_back(self, fid: str, eni: str) -> None:
        """The address of take_held(id) assigned to `eni` again (the holder's node's ENI);
        the operation ends once EC2 has it there."""
        started = next((v for v in self.in_effect() if v["id"] == fid), None)
        if started is None:
            raise ValueError(f"no address taken as {fid!r}")
        ip = started["target"]["ips"][0]
        self._act("ec2-take-held", started["target"], lambda: self._client()
                  .assign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ip],
                                               AllowReassignment=True), id=fid)
        self.record(END, "ec2-take-held", {**started["target"], "back_to": eni}, id=fid,
                    by="given-back")


class NemesisFaultClient(FaultClient):
    """The fault IMDS's client whose adds and removes are the nemesis's operations: what the
    `imds` fixture and Ctx.imds hand out (every shortcut, stale() to drop(), goes through add)."""

    def __init__(self, nemesis: Nemesis, control_url: str):
        super().__init__(control_url)
        self.nemesis = nemesis

    def add(self, kind: str, target: dict | None = None, duration: float | None = None,
            **attrs) -> FaultHandle:
        """Add and record the fault; one aimed at an interface that left EC2 meanwhile is
        skipped (recorded, TargetGone), never failed."""
        params = {"kind": kind, "duration": duration, **attrs}
        aimed = dict(target or {})
        with self.nemesis.adding:
            return self._add(kind, target, duration, params, aimed, attrs)

    def _add(self, kind, target, duration, params, aimed, attrs) -> FaultHandle:
        try:
            h = super().add(kind, target=target, duration=duration, **attrs)
        except UnknownTarget as e:
            why = self.nemesis.departure(e)
            if why is None:
                self.nemesis.record(FAIL, "imds-fault", aimed, error=f"{type(e).__name__}: {e}"[:300],
                                    **params)
                raise
            self.nemesis.record(INFO, SKIPPED, aimed, fault="imds-fault", reason=why, **params)
            raise TargetGone(f"imds {kind} fault skipped: {why}", e.target, e.departed) from None
        except Exception as e:
            self.nemesis.record(FAIL, "imds-fault", aimed, error=f"{type(e).__name__}: {e}"[:300],
                                **params)
            raise
        self.nemesis.record(START, "imds-fault", aimed, id=str(h), **params)
        self.nemesis.own_ids.add(str(h))
        return h

    def remove(self, fid: str) -> bool:
        found = super().remove(fid)
        if not found:  # gone already: it may have ended by itself
            self.await_end(fid, 0)
        self._ended(str(fid))
        return found

    def follow_end(self, fid, timeout: float) -> threading.Thread:
        """await_end in a thread of its own, for a fault that may end by itself before its
        duration (random chaos): its end is recorded as it happens. The IMDS going away
        meanwhile (the run's teardown) ends the wait."""
        def wait() -> None:
            try:
                self.await_end(fid, timeout)
            except Exception:  # noqa: BLE001 - the IMDS stopped: nothing left to record
                pass

        t = threading.Thread(target=wait, name=f"await-end-{fid}", daemon=True)
        t.start()
        return t

    def _last_seq(self) -> int:
        return int(self._ok("GET", f"/events?since={2 ** 62}&wait=0")["last_seq"])

    def await_end(self, fid, timeout: float, look_back: int = 20000) -> dict | None:
        """Wait up to `timeout` s for the fault to end (by itself: fault_ended; or expired,
        removed) and record that end once, as `by: "ended"` with the event's why for one
        that ended by itself; returns the event, or None while it is still active."""
        fid = str(fid)
        seq = self._last_seq()
        if not any(f.get("id") == fid for f in self.list()):
            seq = max(0, seq - look_back)  # it ended before: find how, among recent events
            timeout = 0
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events(seq, wait=max(0.0, min(1.0, deadline - time.monotonic()))):
                seq = max(seq, ev["seq"])
                if (ev.get("fault") or {}).get("id") == fid and ev["type"] in ENDINGS:
                    if ev["type"] != "fault_expired":  # that end is the start's duration
                        self.nemesis.close("imds-fault", fid, ENDINGS[ev["type"]],
                                           why=ev.get("why"))
                    return ev
            if time.monotonic() >= deadline:
                return None

    def clear(self) -> list[str]:
        removed = super().clear()
        for fid in removed:
            self._ended(str(fid))
        return removed

    def _ended(self, fid: str) -> None:
        self.nemesis.close("imds-fault", fid, "removed")


class Ec2Faults:
    """The gate's faults (cnikit.cloud.faults.FaultSet) with adds and removes recorded, in
    the fault IMDS client's shape: what the `cloud` fixture's .faults and Ctx.ec2 hand out."""

    def __init__(self, nemesis: Nemesis, faults):
        self.nemesis, self.faults = nemesis, faults

    def add(self, kind: str, target: dict | None = None, duration: float | None = None,
            **attrs) -> str:
        params = {"kind": kind, "duration": duration, **attrs}
        with self.nemesis.adding:
            fid = self.nemesis._act("ec2-fault", dict(target or {}), lambda: self.faults.add(
                kind, target=target, duration=duration, **attrs), **params)
            self.nemesis.record(START, "ec2-fault", dict(target or {}), id=fid, **params)
            self.nemesis.own_ids.add(str(fid))
        return fid

    def remove(self, fid: str) -> bool:
        found = self.faults.remove(fid)
        started = next((v for v in self.nemesis.in_effect() if v["id"] == fid), None)
        if started is not None:
            self.nemesis.record(END, "ec2-fault", started["target"], id=fid, by="removed")
        return found

    def clear(self) -> list[str]:
        removed = self.faults.clear()
        for v in self.nemesis.in_effect():
            if v["op"] == "ec2-fault":
                self.nemesis.record(END, "ec2-fault", v["target"], id=v["id"], by="removed")
        return removed

    def list(self) -> list[dict]:
        return self.faults.list()


class Follower:
    """Turns the fault IMDS's and the gate's fault events into nemesis entries, one record
    shape for both: a start with the fault's target and parameters, an end with `by`
    (removed, expired). Only faults others add: the nemesis records its own."""

    KEPT_OUT = ("id", "kind", "target", "duration", "created", "expires")

    def __init__(self, nemesis: Nemesis, interval: float):
        self.n, self.interval = nemesis, interval
        self._stop = threading.Event()
        self._seq = {"imds-fault": 0, "ec2-fault": 0}  # the last event seen of each API
        self._followed: set[str] = set()  # ids this follower started: it ends only those
        self._thread = threading.Thread(target=self._loop, name="nemesis-follower", daemon=True)

    def _sources(self) -> list[tuple[str, Callable[[int, float], list[dict]]]]:
        """(op, events(since, wait)) of each fault API the nemesis has."""
        out: list[tuple[str, Callable[[int, float], list[dict]]]] = []
        if self.n.imds is not None:
            out.append(("imds-fault",
                        lambda since, wait: FaultClient.events(self.n.imds, since, wait=wait)))
        if self.n.ec2 is not None:
            out.append(("ec2-fault", lambda since, wait: self.n.ec2.faults.events(since)))
        return out

    def start(self) -> Follower:
        for op, events in self._sources():  # only what is added from now on
            self._seq[op] = max((e["seq"] for e in events(0, 0)), default=0)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a part going down at teardown; try again
                self._stop.wait(self.interval)

    def poll(self) -> None:
        """One round: each API's fault events since the last; the IMDS's long poll (up to
        interval) paces the rounds, else a wait of interval."""
        if self.n.imds is None:
            self._stop.wait(self.interval)
        for op, events in self._sources():
            got = events(self._seq[op], self.interval)
            # Under the nemesis's add lock: an add of its own whose event is here has
            # recorded its start and its id (never recorded twice).
            with self.n.adding:
                for ev in got:
                    self._seq[op] = max(self._seq[op], ev["seq"])
                    self._follow(op, ev)

    def _follow(self, op: str, ev: dict) -> None:
        fault = ev.get("fault") or {}
        fid, target = str(fault.get("id")), fault.get("target") or {}
        kind = ev.get("type")
        if kind == "fault_added" and fid not in self.n.own_ids:
            self._followed.add(fid)
            self.n.record(START, op, target, id=fid, via="control-api", **self._params(fault))
        elif kind == "fault_ended":
            # Ended by itself (any fault, the nemesis's own too): nobody removed it, so
            # only this event tells the history; recorded once (Nemesis.close).
            self._followed.discard(fid)
            self.n.close(op, fid, ENDINGS[kind], why=ev.get("why"))
        elif kind in ("fault_removed", "fault_expired") and fid in self._followed:
            self._followed.discard(fid)
            self.n.record(END, op, target, id=fid, by=ENDINGS[kind])

    def _params(self, fault: dict) -> dict:
        return {"kind": fault.get("kind"), "duration": fault.get("duration"),
                **{k: v for k, v in fault.items() if k not in self.KEPT_OUT}}
