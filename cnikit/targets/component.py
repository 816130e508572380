"""Running a target's cluster-wide components: each once per run, in the run's VPC namespace.

There the EC2 gate and the IMDS answer at the addresses every node uses
(`{ec2_endpoint}`, `{imds_endpoint}`), and the namespace is the run's alone, so two runs side
by side (`--jobs`) never share a port. A component has the kit's environment a daemon has
(EC2 endpoint, region, credentials, IMDS endpoint, time scale, the scenario's variables), its
own state directory (`{state_dir}`, kept across restarts; its output in `daemon.log` there),
and the daemon's lifecycle (cnikit.targets.node.TargetProcess): ready by its own readiness,
killed with its process group, recorded for cleanup. It is no instance: the IMDS serves it
nothing of a node's. Under every runtime it runs as a process (the namespace is the
fabric's, which every runtime has).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cnikit.targets.model import ComponentSpec, ReadySpec, render
from cnikit.targets.node import TargetProcess


@dataclass(frozen=True)
class ClusterPlaces:
    """What a component's placeholders stand for (a node's own are refused by the loader)."""

    state_dir: Path
    subnet_cidr: str
    vpc_cidr: str
    ec2_endpoint: str
    imds_endpoint: str
    region: str

    def values(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.__dict__.items()}


def component_process(spec: ComponentSpec, places: ClusterPlaces, env: dict[str, str],
                      netns: str) -> TargetProcess:
    """The component's process (not started): env is what the kit provides, the
    component's own env added over it, placeholders rendered."""
    values = places.values()
    ready = ReadySpec(**render(spec.ready.__dict__, values)) if spec.ready else None
    proc = TargetProcess(render(list(spec.command), values), places.state_dir,
                         {**env, **render(spec.env, values)}, netns, ready)
    proc.what = f"component {spec.name}"
    return proc
