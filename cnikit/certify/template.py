"""`cnikit certify --init FILE`: a commented target file for the reference daemon, the
starting point for a vendor's own."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

from cnikit.errors import UsageError
from cnikit.targets.model import PLACEHOLDERS

TEMPLATE = '''# cnikit target: the CNI build under test (docs/certify.md has every key).
# Certify it with:  cnikit certify {path}
name = "cnikit-reference"
version = "{version}"
# The address family of the build's pods: "ipv4", "ipv6" (the VPC CNI's IPv6 mode: the kit
# runs its IPv6 scenarios in a dual-stack VPC and sets ENABLE_IPv6=true, ENABLE_IPv4=false,
# ENABLE_PREFIX_DELEGATION=true) or "dual" (a build that runs in either mode).
ip_family = "{family}"

[daemon]
# Run once per node, inside the node's network namespace, as a DaemonSet's container would.
{placeholders}
command = [{daemon}, "daemon", "--state-dir", "{{state_dir}}"]
# image = "localhost/my-cni:1.2.3"   # instead of command: a container joined to the node
# The kit sets upstream's variables per scenario (WARM_IP_TARGET, MAX_ENI, ...), the EC2
# endpoint, region and credentials, and the IMDS endpoint; add your build's own here.
env = {{ CNIKIT_PROFILE = "{profile}" }}
# Ready when this unix socket accepts a connection (or: url = "http://127.0.0.1:61679/v1/enis").
ready = {{ socket = "{{state_dir}}/ipamd.sock", timeout = 60 }}

[plugin]
# Copied into each node's CNI bin directory and executed as a container runtime does.
binaries = [{plugin}]
# The network configuration list (a path to a .conflist file works too).
conflist = {{ cniVersion = "1.0.0", name = "aws-cni", plugins = [ {{ type = "cnikit-cni", daemonSocket = "{{state_dir}}/ipamd.sock" }} ] }}

[observe]
# upstream aws-node's ports; the kit reads them when declared (remove what your build lacks).
introspection = 61679   # GET /v1/enis
metrics = 61678         # Prometheus text, awscni_*
'''


def _tool(name: str) -> str:
    """The absolute path of one of the kit's commands (beside this Python first)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise UsageError(f"cannot find the '{name}' command; install cnikit (make setup) first")
    return found


def placeholders_comment() -> str:
    """The comment naming every placeholder a target's strings may hold, from the one list
    the kit replaces (cnikit.targets.model.PLACEHOLDERS)."""
    said = {"state_dir": " (per node, kept across restarts)"}
    names = ", ".join(f"{{{p}}}{said.get(p, '')}" for p in PLACEHOLDERS)
    return "\n".join(textwrap.wrap(f"Placeholders: {names}.", width=90, initial_indent="# ",
                                   subsequent_indent="# ", break_on_hyphens=False))


def render(path: str | Path, profile: str = "hardened") -> str:
    from cnikit import __version__
    from cnikit.daemon import profiles

    families = profiles.get(profile).families
    family = families[0] if len(families) == 1 else "dual"
    return TEMPLATE.format(path=path, version=__version__, profile=profile, family=family,
                           placeholders=placeholders_comment(),
                           daemon=f'"{_tool("cnikit")}"', plugin=f'"{_tool("cnikit-cni")}"')


def write(path: str | Path, profile: str = "hardened", force: bool = False) -> Path:
    path = Path(path)
    if path.exists() and not force:
        raise UsageError(f"{path} exists; remove it or choose another file")
    try:
        path.write_text(render(path, profile))
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    return path
