"""Install `cnikit-cni` into a CNI bin directory with a cheap start-up.

The console script pip generates runs the venv's Python with `site`, which costs ~15 ms
here (the editable-install finder, distutils shim). A CNI plugin runs once per pod, so the
launcher runs Python isolated and without site (`-IS`, ~7 ms) and puts the source tree on
sys.path itself: the plugin needs only the standard library and cnikit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TEMPLATE = """#!{python} -IS
import sys
sys.path.insert(0, {root!r})
from cnikit.plugin.main import main
sys.exit(main())
"""


def write_launcher(bin_dir: str | os.PathLike, name: str = "cnikit-cni",
                   python: str = sys.executable) -> Path:
    path = Path(bin_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{name}.tmp{os.getpid()}")
    tmp.write_text(TEMPLATE.format(python=python, root=str(ROOT)))
    tmp.chmod(0o755)
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    print(write_launcher(sys.argv[1] if len(sys.argv) > 1 else "/opt/cni/bin"))
