"""Ctx: what a scenario sees and does (clients, nemesis, waits, the build from outside).

The methods are grouped by concern in mixins (waits, pods, nemesis, observe); Ctx holds
the state they share."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable

from cnikit.check.history import History
from cnikit.scenarios.engine.nemesis import CtxNemesis
from cnikit.scenarios.engine.observe import Observe
from cnikit.scenarios.engine.pods import Pods
from cnikit.scenarios.engine.sampler import DaemonSampler
from cnikit.scenarios.engine.waits import Waits


class Ctx(Waits, Pods, CtxNemesis, Observe):
    """Clients, nemesis and waits for one run. Times given to a scenario in upstream seconds
    go through `ctx.run_seconds()` (the run's time scale)."""

    def __init__(self, cluster, watch, seed: int, target_name: str, scale: float,
                 duration: float | None, on_step: Callable | None = None,
                 sampler: DaemonSampler | None = None, env: dict | None = None):
        self.cluster = cluster
        self.fabric = cluster.fabric
        self.cloud = cluster.cloud
        self.gate = cluster.cloud.gate
        # Every fault goes through the cluster's nemesis (cnikit.cluster.nemesis): one
        # operation and one history shape each. ctx.imds is its fault client (adds recorded).
        self.nemesis = cluster.nemesis
        self.imds = cluster.nemesis.imds
        self.imds_url = cluster.imds.url
        self.watch = watch
        self.history: History = watch.history
        self.seed = seed
        self.rng = random.Random(seed)
        self.target_name = target_name  # the build under test (its target's name)
        self.scale = scale
        self.duration = duration
        self.on_step = on_step
        self.sampler = sampler
        if sampler is not None:  # the sampler tells the kit's kills from the build's exits
            self.nemesis.on_down = sampler.kit_down.add
            self.nemesis.on_up = sampler.kit_down.discard
        # Upstream's variables the build was given: the warm targets EC2's view is held to.
        self.env = dict(env if env is not None else getattr(cluster, "env", None) or {})
        self.instance_type = getattr(cluster, "instance_type", "m5.large")
        # Each node's instance type (a run may mix them); instance_type is node 0's.
        self.instance_types = list(getattr(cluster, "instance_types", None)
                                   or [self.instance_type])
        target = getattr(cluster, "target", None)
        # Pods each node takes (kubelet's --max-pods, by its type): no scenario asks a node
        # for more; max_pods, the fewest any node takes, for scenarios sizing every node alike.
        self.node_max_pods = [target.max_pods_for(t) if target is not None else 10**6
                              for t in self.instance_types]
        self.max_pods = min(self.node_max_pods)
        self.pods: dict[str, object] = {}  # netns name -> fabric Pod, in creation order
        self.steps: list[dict] = []
        self.schedule: list[dict] = []
        self.started = time.monotonic()
        self._pod_numbers = itertools.count(1)  # next() is atomic: adds run in threads too
        self.add_failures = 0
        self.last_add_error: dict[int, str] = {}  # node -> the last failed ADD's answer
        self._spare: str | None = None
        self._reconciling: set[tuple[int, bool]] = set()  # nodes seen reading their ENI list

    def type_of(self, node: int) -> str:
        """The node's instance type."""
        return self.instance_types[node] if node < len(self.instance_types) else self.instance_type

