"""The nemesis's acts on a target's cluster-wide components (an operator): killed, and
restarted, by name, with the down time a daemon's kill has."""

from __future__ import annotations

import signal
from typing import Protocol


class ClusterComponents(Protocol):
    """What the nemesis needs of whoever runs the components (CniCluster); ValueError (one
    line) for a name the run has not. Nothing here records."""

    def signal_component(self, name: str, sig: int) -> None: ...

    def stop_and_start_component(self, name: str, wait: float) -> None: ...

    def component_calling(self, source: str, port: int) -> str | None:
        """The component whose process holds the connection from source:port, if any."""


class ComponentActs:
    """A mixin of Nemesis (with DaemonActs: its down times): a component is down from its
    kill to its restart's end. Operations component-kill and component-restart, target
    {"component": name}."""

    def _components(self) -> ClusterComponents:
        if self.daemons is None:
            raise ValueError("this nemesis has no cluster")
        return self.daemons

    def kill_component(self, name: str, sig: int = signal.SIGKILL, **params) -> None:
        """Send sig to the component (its process group): down until restart_component.
        params are recorded with the kill (a crash point's `after_call`)."""
        comps = self._components()
        self.down_kill(("component", name), f"kill-{name}", "component-kill",
                       {"component": name}, lambda: comps.signal_component(name, sig),
                       signal=int(sig), **params)

    def restart_component(self, name: str, wait: float = 60.0) -> None:
        """Restart the component (its state kept) and wait until it is ready."""
        comps = self._components()
        self.down_restart(("component", name), f"restart-{name}", "component-restart",
                          {"component": name},
                          lambda: comps.stop_and_start_component(name, wait))
