"""The nemesis (Jepsen's word): every fault the kit injects, one operation each, in one shape
in the history, whoever asks for it (a scenario through Ctx, random-chaos, the pytest
fixtures, `cnikit up`).

    n = cluster.nemesis                             # CniCluster's; the kit's for shared parts
    f = n.imds_fault("stale", target={"mac": mac}, duration=5)     # -> the IMDS fault's id
    n.end(f)                                        # or f.remove(), or `with f:`
    g = n.ec2_fault("throttle", target={"action": "AssignPrivateIpAddresses"}, probability=0.5)
    n.end(g)                                        # both take the one spec shape of faultcore
    n.kill_daemon(0); n.restart_daemon(0)           # the daemon is down from kill to restart
    n.kill_component("operator"); n.restart_component("operator")   # a cluster-wide one
    t = n.kill_in_write(0); t.wait(10)              # killed as it opens a state file to write
    c = n.crash_at(0, "AttachNetworkInterface"); c.wait(10)   # killed after that EC2 call
    n.take_ips(eni, ips)                            # another tenant of the subnet takes addresses
    n.delete_eni(eni)                               # an operator detaches and deletes an ENI
    n.imds.await_end(f, 30)                         # a fault that ends on an event (its end)
    n.unassign(ip); n.assign(ip, eni, allow_reassignment=True)    # EC2 moves a pod's address
    n.restart_all()                                 # every daemon killed, then all started at once
    n.sweep_enis(); n.detach_eni(eni); n.unassign(ip, other=True)  # another principal's acts
    n.link_down(0, 1, 2.0); n.flush_host_routing(0)  # a node's own network under the build
    n.delete_host_veth(pod); n.set_mtu(0, 1500, device_index=1)
    n.heal()                                        # every fault ends

History entries (cnikit.check.history), process "nemesis", f the operation:
    type "start"  a fault in effect until the entry of type "end" with the same value.id,
                  or for value.duration seconds
    type "end"    that fault ended; value.by says how: "removed" (ended, healed),
                  "expired" (a followed fault's duration ran out: the nemesis's own faults
                  end by their start's duration, with no entry), "ended" (the fault ended
                  by itself on an event, value.why saying which: stale-until-change at the
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
component-kill and component-restart (a target's cluster-wide component, target
{"component": name}, down from kill to restart as a daemon is),
host-link-down (an ENI's interface down, ended by "up"), host-flush (a node's
rules and tables flushed as a networkd restart does), host-veth-delete, host-mtu,
daemon-restart-all (every daemon killed, then all started together: the nodes' own
daemon-kill/daemon-restart entries frame it), ec2-take-held (an address a pod holds, taken until given back:
the pod's damage meanwhile is the nemesis's, cnikit.check.damage), heal. The checkers never read the nemesis: they judge what the
clients and the prober observed against EC2's truth; the report draws it.

One job a module: nemesis_log (the record), nemesis_imds (IMDS faults, and why one aimed at
an interface that left EC2 is skipped), nemesis_ec2_faults (the gate's faults),
nemesis_daemons (kills and restarts), nemesis_components (the same for cluster-wide
components), nemesis_ec2_acts (another tenant's, operator's or
principal's acts on EC2), nemesis_hostnet (the node's own network under the build),
nemesis_follower (faults others add over the control APIs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from cnikit.check.history import History
from cnikit.cluster.nemesis_components import ComponentActs
from cnikit.cluster.nemesis_daemons import DaemonActs, NodeDaemons
from cnikit.cluster.nemesis_ec2_acts import Ec2Acts
from cnikit.cluster.nemesis_ec2_faults import Ec2Faults
from cnikit.cluster.nemesis_follower import Follower
from cnikit.cluster.nemesis_hostnet import HostNetActs
from cnikit.cluster.nemesis_imds import NemesisFaultClient, TargetGone
from cnikit.cluster.nemesis_log import INFO, NemesisLog
from cnikit.cluster.nemesis_subnet import SubnetActs
from fault_imds.client import FaultHandle

__all__ = ["Nemesis", "TargetGone"]  # TargetGone: what a skipped fault raises (docs/pytest.md)


class Nemesis(NemesisLog, DaemonActs, ComponentActs, Ec2Acts, HostNetActs, SubnetActs):
    """The faults one history (or several: a kit's clusters share a cloud and an IMDS) sees.

    `history`: a History, or a callable returning the histories to record into now.
    `imds_control`: the fault IMDS's control URL; `cloud`: the Cloud (its gate's faults, an
    EC2 client); `daemons`: the nodes' daemons (a NodeDaemons: CniCluster). Each part is
    optional: an act on a missing one raises.
    """

    def __init__(self, history: History | Callable[[], Iterable[History]], *,
                 imds_control: str | None = None, cloud=None,
                 daemons: NodeDaemons | None = None):
        super().__init__(history)
        self.imds = NemesisFaultClient(self, imds_control, cloud) if imds_control else None
        self.ec2 = Ec2Faults(self, cloud.gate.faults) if cloud is not None else None
        self.cloud = cloud
        self.daemons = daemons
        self._down_lock = threading.Lock()
        # node, or ("component", name) -> (op, id) of its open down time
        self._down: dict[object, tuple[str, str]] = {}
        self._other_lock = threading.Lock()
        self._other = None  # the other principal's EC2 client, made at first use
        # Called with the node before every kill or restart the kit makes (a kill, a crash
        # point, a write trap, a restart of one or every node), and once its restart made
        # it ready: a watcher then knows a daemon's exit is the kit's by the time it sees it.
        self.on_down: Callable[[int], None] = lambda node: None
        self.on_up: Callable[[int], None] = lambda node: None
        self.crash_points: dict[str, object] = {}  # id -> CrashPoint armed by crash_at

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

    # -- faults others add over the control APIs ---------------------------------------------

    def follow(self, interval: float = 0.25) -> Follower:
        """Record faults added and removed over the control APIs (`$CONTROL/faults`,
        `$GATE/faults`) as nemesis operations with via="control-api", until .stop(). For a
        cluster whose faults come from outside (`cnikit up`)."""
        return Follower(self, interval).start()
