"""Layers point one way (docs/architecture.md, "Layers"): read every module's imports with
ast and fail when one points the wrong way; start `fault-imds serve` with `cnikit` made
unimportable and read an IMDS path from it.

    faultcore          imports nothing of ours
    fault_imds         faultcore only (it runs and ships without cnikit)
    cnikit.cloud       never fault_imds (the IMDS is above EC2; the header both use is
                       faultcore.caller's)
    cnikit.<package>   imports only its own layer or below (LAYERS: base, ec2, fabric,
                       nodes, checkers, orchestration); no import cycles between packages

Every import counts, the ones inside functions too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
OURS = ("cnikit", "fault_imds", "faultcore")

# (importer prefix, imported prefix, why it is wrong)
FORBIDDEN = [
    ("faultcore", "cnikit", "faultcore is the bottom layer: it imports nothing of ours"),
    ("faultcore", "fault_imds", "faultcore is the bottom layer: it imports nothing of ours"),
    ("fault_imds", "cnikit", "fault_imds runs and ships alone: only faultcore below it"),
    ("cnikit.cloud", "fault_imds", "EC2 is below the IMDS: the gate knows nothing of it"),
]

# cnikit's packages from the bottom up (docs/architecture.md, "Layers"). A package imports
# only from its own layer or below; within a layer, no cycles. A new package fails the test
# until it is placed here.
LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"cnikit.errors", "cnikit.__version__", "cnikit.runtime", "cnikit.reaper",
              "cnikit.unixcall", "cnikit.forkserver"}),
    ("ec2", {"cnikit.cloud", "cnikit.kube"}),
    ("fabric", {"cnikit.fabric"}),
    ("nodes", {"cnikit.daemon", "cnikit.plugin", "cnikit.containers", "cnikit.targets"}),
    ("checkers", {"cnikit.check", "cnikit.report"}),
    ("orchestration", {"cnikit.cluster", "cnikit.scenarios", "cnikit.testkit",
                       "cnikit.certify", "cnikit.pytest_plugin", "cnikit.pytest_root",
                       "cnikit.cli"}),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module imported, line) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import sub` may name a submodule: count pkg.sub as well as pkg.
            out.append((mod, node.lineno))
            out += [(f"{mod}.{a.name}", node.lineno) for a in node.names if a.name != "*"]
    return out


def _sources(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def import_graph() -> dict[str, list[tuple[str, int]]]:
    """module -> the modules of ours it imports (with line numbers)."""
    graph = {}
    for package in OURS:
        for path in _sources(package):
            graph[_module_name(path)] = [
                (m, line) for m, line in _imports(path) if any(_under(m, p) for p in OURS)
            ]
    return graph


def wrong_way(graph) -> list[str]:
    """One line per import statement that breaks a rule."""
    bad: dict[tuple[str, int, str], str] = {}
    for module, imported in graph.items():
        for name, line in imported:
            for src, dst, why in FORBIDDEN:
                key = (module, line, why)
                if _under(module, src) and _under(name, dst) and len(name) < len(
                        bad.get(key, name + "_")):
                    bad[key] = name
    return sorted(f"{m}:{line} imports {name}: {why}" for (m, line, why), name in bad.items())


def subpackage(module: str) -> str | None:
    """cnikit's first-level package or module a module belongs to (None: not cnikit)."""
    parts = module.split(".")
    if parts[0] != "cnikit" or len(parts) < 2:
        return None
    return f"cnikit.{parts[1]}"


def package_edges(graph) -> dict[str, set[str]]:
    """cnikit subpackage -> the cnikit subpackages it imports."""
    edges: dict[str, set[str]] = {}
    for module, imported in graph.items():
        src = subpackage(module)
        if src is None:
            continue
        edges.setdefault(src, set())
        for name, _ in imported:
            dst = subpackage(name)
            if dst is not None and dst != src:
                edges[src].add(dst)
                edges.setdefault(dst, set())
    return edges


def package_cycles(graph) -> set[tuple[str, ...]]:
    """Every elementary cycle of cnikit's subpackage graph, each as a tuple starting at its
    smallest member (a -> b -> a is ("cnikit.a", "cnikit.b"))."""
    edges = package_edges(graph)
    cycles: set[tuple[str, ...]] = set()
    nodes = sorted(edges)
    for start in nodes:
        # Cycles whose smallest member is `start`: a DFS over larger members only
        # (bounded: a dozen packages at most, each path visits a node once).
        todo = [(start, (start,))]
        while todo:
            node, path = todo.pop()
            for nxt in sorted(edges[node]):
                if nxt == start:
                    cycles.add(path)
                elif nxt > start and nxt not in path:
                    todo.append((nxt, (*path, nxt)))
    return cycles


def cycle_evidence(graph, cycle: tuple[str, ...]) -> list[str]:
    """The imports that make up a cycle's edges (one per import statement)."""
    steps = set(zip(cycle, (*cycle[1:], cycle[0]), strict=True))
    shortest: dict[tuple[str, int], str] = {}
    for module, imported in graph.items():
        for name, line in imported:
            if (subpackage(module), subpackage(name)) in steps:
                key = (module, line)
                if key not in shortest or len(name) < len(shortest[key]):
                    shortest[key] = name
    return sorted(f"{m}:{line} -> {name}" for (m, line), name in shortest.items())


def test_no_import_points_the_wrong_way():
    graph = import_graph()
    assert graph["fault_imds.engine"], "the import graph is empty: the parser is broken"
    bad = wrong_way(graph)
    assert not bad, "imports that point the wrong way:\n" + "\n".join(bad)


def test_the_checker_catches_a_wrong_import():
    """The rules fire on each kind of violation (so the test above can fail)."""
    graph = {
        "fault_imds.server": [("cnikit.errors", 3)],
        "faultcore.fault": [("fault_imds.tree", 4)],
        "cnikit.cloud.gate": [("fault_imds.ec2_view", 5)],
        "cnikit.daemon.pool": [("fault_imds.client", 6)],  # allowed: above the IMDS
        "cnikit.scenarios.engine": [("cnikit.cloud.faults", 7)],
    }
    assert wrong_way(graph) == [
        "cnikit.cloud.gate:5 imports fault_imds.ec2_view: EC2 is below the IMDS: the gate "
        "knows nothing of it",
        "fault_imds.server:3 imports cnikit.errors: fault_imds runs and ships alone: only "
        "faultcore below it",
        "faultcore.fault:4 imports fault_imds.tree: faultcore is the bottom layer: it imports "
        "nothing of ours",
    ]
    cyclic = {"cnikit.a.x": [("cnikit.b.y", 1)], "cnikit.b.y": [("cnikit.c", 2)],
              "cnikit.c": [("cnikit.a", 3)], "cnikit.d": [("cnikit.a.x", 4)]}
    assert package_cycles(cyclic) == {("cnikit.a", "cnikit.b", "cnikit.c")}
    cyclic["cnikit.a.x"].append(("cnikit.c", 5))
    assert package_cycles(cyclic) == {("cnikit.a", "cnikit.b", "cnikit.c"), ("cnikit.a", "cnikit.c")}


def test_relative_imports_are_resolved(tmp_path, monkeypatch):
    pkg = tmp_path / "fault_imds" / "faults"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import base\nfrom ..tree import MACS\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    names = {m for m, _ in _imports(pkg / "__init__.py")}
    assert {"fault_imds.faults.base", "fault_imds.tree", "fault_imds.tree.MACS"} <= names


def test_no_package_cycles_in_cnikit():
    graph = import_graph()
    message = []
    for cycle in sorted(package_cycles(graph)):
        message.append(" -> ".join((*cycle, cycle[0])) + ":")
        message += [f"    {e}" for e in cycle_evidence(graph, cycle)]
    assert not message, "package cycles between cnikit's subpackages:\n" + "\n".join(message)


def layer_of(package: str) -> int | None:
    return next((i for i, (_, members) in enumerate(LAYERS) if package in members), None)


def upward(graph) -> list[str]:
    """One line per import from a lower layer into a higher one (and per unplaced package)."""
    bad = set()
    for src, dsts in package_edges(graph).items():
        if layer_of(src) is None:
            bad.add(f"{src} is in no layer: place it in LAYERS (and docs/architecture.md)")
            continue
        for dst in dsts:
            if layer_of(dst) is not None and layer_of(dst) > layer_of(src):
                bad.add(f"{src} ({LAYERS[layer_of(src)][0]}) imports {dst} "
                        f"({LAYERS[layer_of(dst)][0]}): "
                        + "; ".join(e for e in cycle_evidence(graph, (src, dst))
                                    if e.startswith(src)))
    return sorted(bad)


def test_cnikit_layers_point_down():
    bad = upward(import_graph())
    assert not bad, "imports that point up the layers:\n" + "\n".join(bad)


def test_the_layer_rule_fires():
    graph = {"cnikit.fabric.topology": [("cnikit.daemon.process", 7)],
             "cnikit.daemon.podnet": [("cnikit.fabric.wiring", 3)],
             "cnikit.newpkg": [("cnikit.errors", 1)]}
    assert upward(graph) == [
        "cnikit.fabric (fabric) imports cnikit.daemon (nodes): "
        "cnikit.fabric.topology:7 -> cnikit.daemon.process",
        "cnikit.newpkg is in no layer: place it in LAYERS (and docs/architecture.md)",
    ]


# -- fault-imds without cnikit ---------------------------------------------------------------

# Runs `python -m fault_imds` with an import blocker for `cnikit` first on sys.meta_path:
# any `import cnikit...` (at start or later, in any thread) raises ImportError.
BLOCKED_MAIN = """
import sys, runpy
class BlockCnikit:
    def find_spec(self, name, path=None, target=None):
        if name == "cnikit" or name.startswith("cnikit."):
            raise ImportError(f"cnikit is blocked in this process (imported: {name})")
        return None
sys.meta_path.insert(0, BlockCnikit())
for name in [m for m in sys.modules if m == "cnikit" or m.startswith("cnikit.")]:
    del sys.modules[name]
sys.argv[0] = "fault-imds"
runpy.run_module("fault_imds", run_name="__main__", alter_sys=True)
"""


class ImdsProcess:
    """`fault-imds serve` in a subprocess with cnikit blocked; reads its two URLs."""

    def __init__(self, ec2_endpoint: str, instance_id: str, cwd: Path = ROOT,
                 pythonpath: str | None = None):
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BLOCKED_MAIN, "serve", "--ec2-endpoint", ec2_endpoint,
             "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
             "--instance-id", instance_id, "--seed", "1"],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.urls = {}
        try:
            for _ in range(2):  # "IMDS     URL" then "control  URL"; EOF ends the loop
                line = self.proc.stdout.readline()
                if not line:
                    break
                what, _, url = line.strip().partition(" ")
                self.urls[what] = url.strip()
        finally:
            if len(self.urls) < 2:
                self.stop()
        if len(self.urls) < 2:
            raise AssertionError(f"fault-imds serve did not start: {self.stderr}")
        self.url, self.control_url = self.urls["IMDS"], self.urls["control"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.stderr = self.proc.stderr.read() if self.proc.stderr else ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def http(method: str, url: str, body: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_blocker_blocks_cnikit():
    """The wrapper really makes cnikit unimportable (so the next test can fail)."""
    code = BLOCKED_MAIN.replace('runpy.run_module("fault_imds", run_name="__main__", '
                                'alter_sys=True)', "import cnikit.errors")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "cnikit is blocked" in out.stderr


@pytest.mark.slow
def test_fault_imds_serves_with_cnikit_unimportable(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    inst = topo.instances[0]
    with ImdsProcess(gate_cloud.endpoint, inst.instance_id) as imds:
        base = imds.url + "/latest/meta-data/"

        def served():
            status, body = http("GET", base + "instance-id")
            return status == 200 and body.decode() == inst.instance_id

        wait_for(served, 30, "the IMDS to serve the instance")
        status, macs = http("GET", base + "network/interfaces/macs/")
        assert status == 200 and macs.decode().strip("/\n"), macs
        mac = macs.decode().split()[0].strip("/")
        status, ips = http("GET", base + f"network/interfaces/macs/{mac}/local-ipv4s")
        assert status == 200 and inst.primary_ip in ips.decode().split()
        # Its fault API works too (the shape is faultcore's).
        status, added = http("POST", imds.control_url + "/faults",
                             {"kind": "error", "status": 503, "target": {"path": "*/ami-id"}})
        assert status == 201, added
        assert http("GET", base + "ami-id")[0] == 503
        assert http("GET", base + "instance-id")[0] == 200
    assert "cnikit is blocked" not in imds.stderr, imds.stderr
