"""cnikit-cni driven by libcni, the CNI project's own library that containerd and CRI-O link.

`libcni_runtime/main.go` is a minimal runtime over Debian's libcni 1.1.2: it loads the
node's conflist, runs ADD (which also caches the result), CHECK (from that cache, as
runtimes do) and DEL. libcni parses every result into its Go types and hands it to the next
plugin of the chain (here the reference `tuning` plugin), so a result the spec's readers
cannot take fails here even where the kit's own JSON schema would pass it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from tests.integration.test_cni_conformance import RESULT_SCHEMA

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

SOURCE = Path(__file__).parent / "libcni_runtime" / "main.go"
GOPATH = Path("/usr/share/gocode")  # where Debian's Go library packages put their source
REFERENCE_PLUGINS = Path("/usr/lib/cni")


@pytest.fixture(scope="module")
def libcni_runtime(tmp_path_factory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (Debian: apt-get install golang-go)")
    if not (GOPATH / "src/github.com/containernetworking/cni/libcni").is_dir():
        pytest.skip("libcni's source is not installed "
                    "(Debian: apt-get install golang-github-appc-cni-dev)")
    out = tmp_path_factory.mktemp("libcni") / "libcni-runtime"
    # GOPATH mode and no network: the build uses Debian's copy of libcni only.
    env = {"PATH": os.environ["PATH"], "HOME": str(out.parent), "GO111MODULE": "off",
           "GOPATH": str(GOPATH), "GOCACHE": str(out.parent / "gocache"), "GOFLAGS": "",
           "GOPROXY": "off", "CGO_ENABLED": "0"}
    built = subprocess.run([go, "build", "-o", str(out), str(SOURCE)], env=env,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return out


@pytest.fixture(scope="module")
def cluster():
    from cnikit.cluster import CniCluster

    with CniCluster(nodes=1, profile="hardened", scale=0.05) as c:
        yield c


class Runtime:
    """libcni-runtime run inside the node's namespace, with its own result cache."""

    def __init__(self, cluster, binary: Path, workdir: Path):
        self.c, self.binary, self.workdir = cluster, binary, workdir
        self.cache = workdir / "cache"  # never /var/lib/cni: the host's runtimes own that
        self.n = 0

    def conflist(self, *chained: dict, **extra) -> Path:
        conf = self.c.netconf(0, **extra)
        plugin = {k: v for k, v in conf.items() if k not in ("cniVersion", "name")}
        path = self.workdir / f"net-{self.n}.conflist"
        path.write_text(json.dumps({"cniVersion": "1.0.0", "name": conf["name"],
                                    "plugins": [plugin, *chained]}))
        return path

    def new_netns(self) -> str:
        from cnikit.fabric import netns

        self.n += 1
        name = f"ck-{self.c.fabric.rid}-n0-l{self.n}"
        os.close(netns.create(name))
        return f"/run/netns/{name}"

    def run(self, command: str, conflist: Path, netns: str, cid: str):
        env = {"PATH": os.environ["PATH"],
               "CNI_PATH": os.pathsep.join([str(self.c.bin_dir), str(REFERENCE_PLUGINS)])}
        p = subprocess.run(["nsenter", f"--net={self.c.fabric.nodes[0].ns.path}", "--",
                            str(self.binary), command, str(conflist), netns, cid, "eth0",
                            str(self.cache)], env=env, capture_output=True, text=True,
                           timeout=60)
        out = json.loads(p.stdout) if p.stdout.strip() else None
        return p.returncode, out, p.stderr


@pytest.fixture(scope="module")
def rt(cluster, libcni_runtime, tmp_path_factory):
    return Runtime(cluster, libcni_runtime, tmp_path_factory.mktemp("libcni-run"))


def held(cluster, cid: str) -> str | None:
    return {a["containerID"]: a["ip"] for a in cluster.status(0)["assignments"]}.get(cid)


@pytest.mark.parametrize("chained", [False, True], ids=["alone", "then-tuning"])
def test_add_check_del_through_libcni(cluster, rt, chained):
    conflist = rt.conflist(*([{"type": "tuning"}] if chained else []))
    ns, cid = rt.new_netns(), f"libcni-{'chain' if chained else 'alone'}"
    rc, result, err = rt.run("add", conflist, ns, cid)
    assert rc == 0, (result, err)
    jsonschema.validate(result, RESULT_SCHEMA)
    ip = result["ips"][0]["address"].split("/")[0]
    assert held(cluster, cid) == ip
    # CHECK takes the cached result as prevResult, as runtimes do.
    assert rt.run("check", conflist, ns, cid)[:2] == (0, None)
    assert rt.run("del", conflist, ns, cid)[:2] == (0, None)
    assert held(cluster, cid) is None
    assert rt.run("del", conflist, ns, cid)[:2] == (0, None), "a second DEL must succeed"


def test_a_plugin_error_reaches_the_runtime_as_the_spec_error(cluster, rt):
    conflist = rt.conflist(daemonSocket="/run/nowhere.sock")
    ns = rt.new_netns()
    rc, out, err = rt.run("add", conflist, ns, "libcni-down")
    assert rc == 1, err
    assert out["code"] == 11 and out["msg"], out  # try again later: the daemon is down
    assert held(cluster, "libcni-down") is None
