"""cnikit-cni beyond its case table (plugin_cases.json, test_plugin_cases.py): the Python
build's start-up cost guard (no json/re/enum/socket/boto3/pyroute2 imports), its JSON, the
interpreter its launcher picks, and how the compiled build is installed and hands plugin-side
wiring to the Python one."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import jsonschema
import pytest

from cnikit.plugin import tinyjson
from cnikit.plugin.launcher import write_launcher
from tests.unit.plugin_support import BUILDS, ERROR_SCHEMA, FakeDaemon, install, needs_go, run

CNI_ENV = {"CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
           "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web"}


def conf(**kw):
    return json.dumps({"cniVersion": "1.0.0", "name": "aws-cni", "type": "cnikit-cni", **kw}).encode()


@pytest.fixture(scope="module")
def python_plugin(tmp_path_factory):
    return install(tmp_path_factory, "python")


def test_startup_imports_stay_small():
    from cnikit.plugin.launcher import ROOT

    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import cnikit.plugin.main; "
            "print(' '.join(sorted(sys.modules)))")
    mods = set(subprocess.run([sys.executable, "-IS", "-c", code], capture_output=True,
                              text=True, check=True).stdout.split())
    heavy = {"os", "json", "re", "enum", "socket", "boto3", "botocore", "pyroute2", "cnikit.fabric",
             "cnikit.daemon", "click", "asyncio"}
    assert not heavy & mods, heavy & mods


def test_tinyjson_matches_json():
    seed = 11
    print(f"seed={seed}")
    rng = random.Random(seed)

    def value(depth=0):
        kinds = [lambda: None, lambda: True, lambda: False, lambda: rng.randint(-10**6, 10**6),
                 lambda: rng.random() * 1e3,
                 lambda: "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(rng.randrange(6)))]
        if depth < 3:
            kinds += [lambda: [value(depth + 1) for _ in range(rng.randrange(4))],
                      lambda: {f"k{i}\"": value(depth + 1) for i in range(rng.randrange(4))}]
        return rng.choice(kinds)()

    for _ in range(300):
        v = value()
        assert tinyjson.loads(tinyjson.dumps(v)) == v == json.loads(tinyjson.dumps(v))
        assert tinyjson.loads(json.dumps(v)) == v
    for bad in ["", "{", "[1,]", "1 2", "NaN", '{"a" 1}', "nul"]:
        with pytest.raises(ValueError):
            tinyjson.loads(bad)


def test_launcher_runs_an_interpreter_of_this_python_version_outside_any_venv(python_plugin):
    # Through a venv's link, Python reads pyvenv.cfg at each start (1 ms of a plugin run).
    shebang = open(python_plugin).readline()
    python = shebang[2:].split()[0]
    out = subprocess.run([python, "-IS", "-c", "import sys; print(sys.version_info[:2], "
                          "sys.prefix == sys.base_prefix)"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == f"{tuple(sys.version_info[:2])} True", out


@pytest.mark.parametrize("command", ["ADD", "DEL"])
def test_plugin_wiring_is_the_python_builds_answer(tmp_path_factory, tmp_path, command):
    # The compiled build hands plugin-side wiring to the Python one, whose answer it gives.
    seen = []
    for build in BUILDS:
        plugin = install(tmp_path_factory, build)
        (tmp_path / "s.sock").unlink(missing_ok=True)
        d = FakeDaemon(tmp_path / "s.sock", lambda r: {"ok": True, "ip": "10.0.1.9", "deviceNumber": 0})
        try:
            out = run(plugin, command, conf(daemonSocket=d.path, wiring="plugin"), **CNI_ENV)
        finally:
            d.close()
        seen.append((out, d.requests))
    assert seen[0] == seen[1]
    assert seen[0][1] and "netns" not in seen[0][1][0]  # the plugin, not the daemon, wires


def test_plugin_wiring_needs_the_python_build_beside_the_compiled_one(tmp_path):
    needs_go()
    plugin = write_launcher(tmp_path, build="compiled")
    (tmp_path / "cnikit-cni-python").unlink()
    rc, err = run(str(plugin), "ADD", conf(wiring="plugin"), **CNI_ENV)
    assert rc == 1 and err["code"] == 5 and err["details"].endswith("cnikit-cni-python"), err
    assert err["msg"].startswith('"wiring": "plugin" needs the Python plugin beside this one: ')
    jsonschema.validate(err, ERROR_SCHEMA)


def test_compiled_build_is_what_a_node_gets(tmp_path, monkeypatch):
    needs_go()
    monkeypatch.delenv("CNIKIT_CNI_BUILD", raising=False)
    plugin = write_launcher(tmp_path)
    assert plugin.read_bytes()[:4] == b"\x7fELF"
    assert (tmp_path / "cnikit-cni-python").read_text().startswith("#!")
    monkeypatch.setenv("CNIKIT_CNI_BUILD", "python")
    assert write_launcher(tmp_path / "py").read_text().startswith("#!")
    monkeypatch.setenv("CNIKIT_CNI_BUILD", "fast")
    from cnikit.plugin.launcher import BuildError

    with pytest.raises(BuildError, match="CNIKIT_CNI_BUILD") as bad:
        write_launcher(tmp_path / "bad")
    assert bad.value.exit_code == 2  # the CLI's one line and code, not a traceback


def test_a_change_to_the_constants_is_a_new_compiled_build(tmp_path, monkeypatch):
    # main.go embeds constants.json: a build of the old file would answer the old words.
    from cnikit.plugin import launcher

    before = launcher.build_path()
    changed = tmp_path / "constants.json"
    changed.write_bytes(launcher.CONSTANTS.read_bytes() + b"\n")
    monkeypatch.setattr(launcher, "CONSTANTS", changed)
    assert launcher.build_path() != before
