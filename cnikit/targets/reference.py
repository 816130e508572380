"""The reference daemon's profiles as targets, through the same seam as a target file: a
command run in each node's namespace, readiness by its socket, cnikit-cni with its conflist,
upstream's observe ports."""

from __future__ import annotations

import sys
from pathlib import Path

from cnikit.targets.model import DaemonSpec, ObserveSpec, PluginSpec, ReadySpec, Target

KIT = Path(__file__).resolve().parents[1]
SOCKET = "{state_dir}/ipamd.sock"
PLUGIN = "cnikit-cni"


def builtin_target(profile) -> Target:
    """The target for one cnikit.daemon.profiles.Profile."""
    from cnikit import __version__
    from cnikit.daemon.config import INTROSPECTION_PORT, METRICS_PORT

    daemon = DaemonSpec(
        command=(sys.executable, "-m", "cnikit.cli", "daemon", "--state-dir", "{state_dir}"),
        env={"CNIKIT_PROFILE": profile.name},
        ready=ReadySpec(socket=SOCKET, timeout=60.0),
    )
    plugin = PluginSpec(
        binaries={PLUGIN: KIT / "plugin" / "main.py"},  # installed as a fast launcher
        conflist={"cniVersion": "1.0.0", "name": "aws-cni",
                  "plugins": [{"type": PLUGIN, "daemonSocket": SOCKET}]},
    )
    return Target(name=profile.name, version=__version__, daemon=daemon, plugin=plugin,
                  observe=ObserveSpec(introspection=INTROSPECTION_PORT, metrics=METRICS_PORT),
                  profile=profile,
                  files={"daemon": KIT / "daemon" / "main.py", f"plugin:{PLUGIN}": KIT / "plugin" / "main.py"})
