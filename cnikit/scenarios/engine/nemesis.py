"""Ctx's nemesis: faults, daemon kills and restarts, addresses taken (a mixin of Ctx)."""

from __future__ import annotations

import signal

from cnikit.scenarios.engine.outcomes import (
    Liveness,
)


class CtxNemesis:
    """Ctx's nemesis methods, through the cluster's Nemesis (cnikit.cluster.nemesis)."""

    # -- nemesis (cnikit.cluster.nemesis: one operation, one history shape each) -------------

    def imds_fault(self, kind: str, target: dict | None = None, duration: float | None = None,
                   **attrs):
        return self.nemesis.imds_fault(kind, target=target, duration=duration, **attrs)

    def end_imds_fault(self, handle) -> None:
        self.nemesis.end(handle)

    def ec2_fault(self, kind: str, **kw) -> str:
        return self.nemesis.ec2_fault(kind, **kw)

    def end_ec2_fault(self, fid: str) -> None:
        self.nemesis.end(fid)

    def heal(self) -> None:
        """Every IMDS and EC2 fault removed."""
        self.nemesis.heal()

    # Every kill and restart below marks its node down in the sampler first, and up again
    # once ready (nemesis.on_down, on_up, set by Ctx): a daemon's exit is then the kit's by
    # the time the sampler sees it.

    def kill_daemon(self, node: int, sig: int = signal.SIGKILL) -> None:
        self.nemesis.kill_daemon(node, sig)

    def kill_in_write(self, node: int):
        """Arm the nemesis's trap: the node's daemon is SIGKILLed the next time it opens a
        file of its state for writing (cnikit.cluster.write_trap). Returns the trap."""
        return self.nemesis.kill_in_write(node)

    def crash_at(self, node: int, action: str):
        """Arm a crash point: the process that made the call (the node's daemon, or a
        cluster component) is SIGKILLed when the gate serves `action` for the node, before
        the answer leaves (cnikit.cluster.crash_point). Returns it."""
        return self.nemesis.crash_at(node, action)

    def restart_caller(self, caller: dict) -> None:
        """Restart what a crash point killed (its `caller`: {"node": n} or {"component":
        name}) and wait until it is ready; not ready in time: a liveness violation."""
        from cnikit.errors import DaemonNotReady

        name = caller.get("component")
        if name is None:
            self.restart_daemon(caller["node"])
            return
        try:
            self.nemesis.restart_component(name)
        except DaemonNotReady as e:
            raise Liveness(f"component {name}", "the component did not become ready after a "
                           "restart", {"component": str(e)[:300]}) from None

    def restart_daemon(self, node: int) -> None:
        """Restart the node's daemon and wait until it is ready. Not ready in time: a
        liveness violation (Liveness) of the build; the kit keeps it marked as down."""
        refused = self.restart_refused(node)
        if refused is not None:
            raise Liveness(f"node {node}", "the daemon did not become ready after a restart",
                           {"daemon": refused[:300]})

    def restart_refused(self, node: int) -> str | None:
        """Restart the node's daemon where a build may rightly refuse to start (its state
        on disk is unreadable): None once it is ready, else why not (it exited, or was not
        ready in time, and its log's tail); the kit then keeps it marked as down."""
        from cnikit.errors import DaemonNotReady

        try:
            self.nemesis.restart_daemon(node)
        except DaemonNotReady as e:
            return str(e)
        return None

    def restart_all(self, nodes: list[int] | None = None, wait: float = 60.0) -> None:
        """Every node's daemon (or `nodes'`) killed, then all started together and waited
        for, up to `wait` seconds (the nemesis's restart_all). One not ready in time: a
        liveness violation."""
        from cnikit.errors import DaemonNotReady

        nodes = list(range(len(self.fabric.nodes))) if nodes is None else list(nodes)
        failed = self.nemesis.restart_all(nodes, wait=wait)
        for node, e in sorted(failed.items()):
            if isinstance(e, DaemonNotReady):
                raise Liveness(f"node {node}", "the daemon did not become ready after a "
                               "restart of every node", {"daemon": str(e)[:300]}) from None
            raise e

    def sweep_enis(self, keep: list[str] = ()) -> list[str]:
        """Another principal deletes the cluster's available ENIs (the nemesis's sweep_enis:
        another node's leaked-ENI sweep); the ENIs it deleted."""
        return self.nemesis.sweep_enis(keep=keep)

    def detach_eni(self, eni: str) -> None:
        """Another principal detaches the ENI out of band."""
        self.nemesis.detach_eni(eni)

    def delete_eni(self, eni_id: str) -> None:
        """An operator (another node's sweep) detaches and deletes the ENI, out of band."""
        self.nemesis.delete_eni(eni_id)

    def ec2_take(self, ips: list[str], node: int | None = None) -> None:
        """Another tenant of the subnet takes these IPs: the spare interface, which no daemon
        manages, so none gives them back to EC2 while the run lasts; or `node`'s primary ENI,
        whose daemon may release them again as surplus (within a second, measured, and EC2
        then handed them back to the node that had just released them)."""
        if not ips:
            return
        eni = self.spare_interface() if node is None else \
            self.fabric.topo.instances[node].primary_eni_id
        self.nemesis.take_ips(eni, list(ips))

    def take_released(self, eni: str):
        """While armed (a context manager), every address a release from `eni` frees is
        taken by the spare interface the moment EC2 frees it, before the build hears the answer
        (cnikit.cluster.take_on_release): no build gets it back first. `taken` says which."""
        return self.nemesis.take_on_release(eni, self.spare_interface())

    def spare_interface(self) -> str:
        """Another interface of the subnet, attached to no node (an operator's, a load
        balancer's): what it takes is no node's, so no daemon adopts it. Made at first use:
        a scenario that takes released addresses makes it first (made at the take, its own
        EC2 call gave the pool time to assign a released address again)."""
        if self._spare is None:
            self._spare = self.cloud.client().create_network_interface(
                SubnetId=self.fabric.topo.subnet_id,
                Description="another interface")["NetworkInterface"]["NetworkInterfaceId"]
        return self._spare

