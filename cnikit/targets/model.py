"""The build under test: a daemon run once per node, a CNI plugin with its conflist, and
the cluster-wide components run once per run (an operator, a resource controller).

A Target is data only; cnikit.targets.loader reads one from TOML, cnikit.targets.reference
makes one per reference profile, and cnikit.targets.node runs it on a node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# The only names replaced in a target's strings; other braces (JSON-like text) stay.
PLACEHOLDERS = ("state_dir", "node", "node_index", "instance_id", "subnet_cidr", "vpc_cidr",
                "cni_bin_dir", "cni_conf_dir", "ec2_endpoint", "imds_endpoint", "region")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# What only a node has: a component runs once per run, on no node.
NODE_ONLY = ("node", "node_index", "instance_id", "cni_bin_dir", "cni_conf_dir")


def render(value, values: dict[str, str]):
    """value with every known placeholder replaced, in every string of nested lists/dicts."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), value)
    if isinstance(value, list | tuple):
        return [render(v, values) for v in value]
    if isinstance(value, dict):
        return {k: render(v, values) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class ReadySpec:
    """Ready when this unix socket accepts a connection, or this URL answers 2xx (asked from
    inside the node's namespace)."""

    socket: str | None = None
    url: str | None = None
    timeout: float = 60.0


@dataclass(frozen=True)
class ObserveSpec:
    """Upstream aws-node's ports, read when declared."""

    introspection: int | None = None  # GET /v1/enis
    metrics: int | None = None  # Prometheus text, awscni_*


@dataclass(frozen=True)
class DaemonSpec:
    command: tuple[str, ...] | None = None  # argv, argv[0] resolved to a file
    image: str | None = None  # a container image instead of a command
    args: tuple[str, ...] | None = None  # with image: arguments to its entrypoint
    env: dict[str, str] = field(default_factory=dict)
    ready: ReadySpec | None = None


@dataclass(frozen=True)
class ComponentSpec:
    """A cluster-wide component: one command for the whole run (not per node), in the run's
    VPC namespace, restartable and killable by the nemesis by its name."""

    name: str
    command: tuple[str, ...]  # argv, argv[0] resolved to a file
    env: dict[str, str] = field(default_factory=dict)
    ready: ReadySpec | None = None


@dataclass(frozen=True)
class PluginSpec:
    binaries: dict[str, Path]  # name in the CNI bin dir -> the file
    conflist: dict  # placeholders still in; rendered per node
    conflist_file: Path | None = None  # where it came from, when a file


@dataclass(frozen=True)
class Target:
    name: str
    version: str
    daemon: DaemonSpec
    plugin: PluginSpec
    observe: ObserveSpec = ObserveSpec()
    source: Path | None = None  # the TOML file; None for a built-in
    profile: object | None = None  # cnikit.daemon.profiles.Profile, for a built-in
    files: dict[str, Path] | None = None  # files_under_test when not the command's and plugin's
    # Pods a node takes, as kubelet's --max-pods is set from a CNI's capacity: one number, or
    # instance type -> number; None (or a type not listed): upstream's formula (max_pods_for).
    max_pods: int | dict[str, int] | None = None
    # The address family of the build's pods: "ipv4", "ipv6" (the VPC CNI's IPv6 mode, in a
    # dual-stack VPC) or "dual" (a build that runs in either). A built-in runs its profile's.
    ip_family: str = "ipv4"
    components: tuple[ComponentSpec, ...] = ()
    # Every other file that makes up the build ([build] files: helpers, libraries, configs):
    # relative path (to the target file) -> the file.
    build_files: dict[str, Path] = field(default_factory=dict)

    @property
    def builtin(self) -> bool:
        return self.profile is not None

    @property
    def families(self) -> tuple[str, ...]:
        """The families of the scenarios this build is run under."""
        if self.profile is not None:
            return tuple(self.profile.families)
        return ("ipv4", "ipv6") if self.ip_family == "dual" else (self.ip_family,)

    def runs(self, scenario) -> bool:
        """Whether `scenario` (a cnikit.scenarios Scenario) applies to this build: its
        address family is one the build runs in."""
        return getattr(scenario, "family", "ipv4") in self.families

    @property
    def image(self) -> str | None:
        return self.daemon.image

    @property
    def conflist(self) -> dict:
        return self.plugin.conflist

    def expected(self, scenario: str) -> str | None:
        """The verdict this build should reach: a profile's expectation, "holds" for a file
        (what every correct build must reach); None when not asserted."""
        if self.profile is not None:
            return self.profile.expected_verdict(scenario)
        return "holds"

    def max_pods_for(self, instance_type: str) -> int:
        """Pods a node of `instance_type` takes: the target's `max_pods`, else upstream's
        formula, ENIs x (IPv4 addresses per ENI - 1) + 2 (aws/amazon-vpc-cni-k8s
        misc/eni-max-pods.txt: the primary address of each ENI is not a pod's, and two
        host-network pods per node)."""
        if isinstance(self.max_pods, int):
            return self.max_pods
        if isinstance(self.max_pods, dict) and instance_type in self.max_pods:
            return self.max_pods[instance_type]
        from cnikit.cloud.limits import FALLBACK, InstanceLimits

        lim = FALLBACK.get(instance_type, InstanceLimits(3, 10))
        return lim.max_enis * (lim.ipv4_per_eni - 1) + 2

    def component(self, name: str) -> ComponentSpec | None:
        return next((c for c in self.components if c.name == name), None)

    def files_under_test(self) -> dict[str, Path]:
        """role -> file ("daemon", "plugin:<name>", "conflist", "target", "component:<name>",
        "build:<path>"), for the certificate's hashes."""
        if self.files is not None:
            return dict(self.files)
        out: dict[str, Path] = {}
        if self.source is not None:
            out["target"] = self.source
        if self.daemon.command:
            out["daemon"] = Path(self.daemon.command[0])
        for name, path in self.plugin.binaries.items():
            out[f"plugin:{name}"] = path
        if self.plugin.conflist_file is not None:
            out["conflist"] = self.plugin.conflist_file
        for c in self.components:
            out[f"component:{c.name}"] = Path(c.command[0])
        for rel, path in self.build_files.items():
            out[f"build:{rel}"] = path
        return out

    def environments(self) -> dict[str, dict[str, str]]:
        """role -> the environment the target sets ("daemon", "component:<name>"), as
        written (placeholders in), for the certificate."""
        out = {"daemon": dict(self.daemon.env)}
        for c in self.components:
            out[f"component:{c.name}"] = dict(c.env)
        return out

    def __str__(self) -> str:
        return self.name
