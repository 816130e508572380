"""Targets: the TOML loader (every bad input is one line naming the file and the key, exit 2
through the CLI with nothing started), the built-ins from the profile registry, placeholders,
and profile discovery (adding a profile is adding a module)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cnikit.errors import UsageError
from cnikit.targets import builtin_names, load_target, render, resolve_target

PLUGIN = "cnikit-cni"
CONFLIST = ('conflist = { cniVersion = "1.0.0", name = "net", plugins = '
            '[ { type = "true", sock = "{state_dir}/s" } ] }')


def write(tmp_path: Path, text: str, name: str = "target.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture
def good(tmp_path) -> str:
    """A valid target's text: /bin/true as the daemon and the plugin (any executable will do)."""
    return f"""\
        name = "demo"
        version = "1.2.3"

        [daemon]
        command = ["true", "--state-dir", "{{state_dir}}"]
        env = {{ MY_FLAG = "yes", COUNT = 3 }}
        ready = {{ socket = "{{state_dir}}/ipamd.sock", timeout = 5 }}

        [plugin]
        binaries = ["/bin/true"]
        {CONFLIST}

        [observe]
        introspection = 61679
        metrics = 61678
        """


def test_a_good_target_loads_whole(tmp_path, good):
    t = load_target(write(tmp_path, good))
    assert (t.name, t.version, t.builtin, t.image) == ("demo", "1.2.3", False, None)
    assert Path(t.daemon.command[0]).name == "true" and os.path.isabs(t.daemon.command[0])
    assert t.daemon.env == {"MY_FLAG": "yes", "COUNT": "3"}
    assert t.daemon.ready.socket == "{state_dir}/ipamd.sock" and t.daemon.ready.timeout == 5
    assert (t.observe.introspection, t.observe.metrics) == (61679, 61678)
    assert t.expected("imds-stale-equal-length") == "holds"  # what any correct build must do
    files = t.files_under_test()
    assert set(files) == {"target", "daemon", "plugin:true"}
    assert files["plugin:true"] == Path("/bin/true") and files["target"] == t.source
    assert t.source == (tmp_path / "target.toml").absolute()


def test_a_conflist_file_relative_to_the_target(tmp_path, good):
    conf = {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "true"}]}
    (tmp_path / "net.conflist").write_text(json.dumps(conf))
    text = good.replace(CONFLIST, 'conflist = "net.conflist"')
    t = load_target(write(tmp_path, text))
    assert t.conflist == conf and t.files_under_test()["conflist"] == tmp_path / "net.conflist"


def test_an_image_target(tmp_path, good):
    text = good.replace('command = ["true", "--state-dir", "{state_dir}"]',
                        'image = "localhost/my-cni:1"')
    t = load_target(write(tmp_path, text))
    assert t.image == "localhost/my-cni:1" and t.daemon.command is None
    assert "daemon" not in t.files_under_test()


# (what to change in the good text, the key the one-line reason must name)
BAD = {
    "unknown top key": (("[observe]", "colour = 1\n[observe]"), "colour: unknown key"),
    "unknown daemon key": (('[daemon]\n', '[daemon]\nrestart = "always"\n'), "daemon.restart: unknown key"),
    "unknown ready key": (("timeout = 5", "timeout = 5, retries = 2"), "daemon.ready.retries: unknown key"),
    "unknown observe key": (("metrics = 61678", "metrics = 61678\ntracing = 1"), "observe.tracing: unknown key"),
    "missing name": (('name = "demo"', ""), "name: missing"),
    "name with a slash": (('name = "demo"', 'name = "my/cni"'), "name: 'my/cni': only letters"),
    "missing version": (('version = "1.2.3"', ""), "version: missing"),
    "missing plugin": (("[plugin]", "[plugin_]"), "plugin_: unknown key"),
    "command and image": (('[daemon]\n', '[daemon]\nimage = "x"\n'), "daemon.command: give exactly one"),
    "neither command nor image": (('command = ["true", "--state-dir", "{state_dir}"]', ""),
                                  "daemon.command: give exactly one"),
    "command not a list": (('command = ["true", "--state-dir", "{state_dir}"]', 'command = "true"'),
                           "daemon.command: must be a non-empty list"),
    "missing daemon binary": (('command = ["true"', 'command = ["no-such-cni-daemon"'),
                              "daemon.command[0]: 'no-such-cni-daemon' is not on PATH"),
    "daemon binary path missing": (('command = ["true"', 'command = ["./bin/ipamd"'),
                                   "daemon.command[0]: './bin/ipamd': no such file"),
    "daemon not executable": (('command = ["true"', 'command = ["./plain.txt"'),
                              "daemon.command[0]: ", "plain.txt is not an executable file"),
    "missing plugin binary": (('binaries = ["/bin/true"]', 'binaries = ["/opt/none/cni"]'),
                              "plugin.binaries[0]: '/opt/none/cni': no such file"),
    "plugin not executable": (('binaries = ["/bin/true"]', 'binaries = ["./plain.txt"]'),
                              "plugin.binaries[0]: ", "plain.txt is not an executable file"),
    "env value a table": (('COUNT = 3', 'COUNT = { a = 1 }'), "daemon.env.COUNT: must be a string"),
    "ready both": (('timeout = 5', 'timeout = 5, url = "http://127.0.0.1:1/"'),
                   "daemon.ready: give exactly one of socket and url"),
    "ready bad url": (('socket = "{state_dir}/ipamd.sock"', 'url = "127.0.0.1:61679"'),
                      "daemon.ready.url: '127.0.0.1:61679' is not an http(s) URL"),
    "ready bad timeout": (("timeout = 5", "timeout = -1"), "daemon.ready.timeout: must be a positive"),
    "conflist unreadable": ((CONFLIST, 'conflist = "missing.conflist"'),
                            "plugin.conflist: cannot read"),
    "conflist without plugins": (('plugins = [ { type = "true", sock = "{state_dir}/s" } ]', 'type = "true"'),
                                 "plugin.conflist.plugins: must be a non-empty list"),
    "conflist type not installed": (('type = "true"', 'type = "ptp"'),
                                    "plugin.conflist.plugins[0].type: 'ptp' is not among plugin.binaries"),
    "conflist without name": (('name = "net", ', ''), "plugin.conflist.name: missing"),
    "bad port": (("metrics = 61678", "metrics = 70000"), "observe.metrics: must be a TCP port"),
    "bad toml": (('version = "1.2.3"', 'version = "1.2.3'), "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_input_is_one_line_naming_the_file_and_the_key(case, tmp_path, good):
    (old, new), *want = BAD[case]
    assert old in good, f"test case {case} does not apply"
    (tmp_path / "plain.txt").write_text("not a program")  # mode 0644
    path = write(tmp_path, good.replace(old, new, 1))
    with pytest.raises(UsageError) as e:
        load_target(path)
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert msg.startswith(f"{path}: "), msg
    assert all(w in msg for w in want), msg
    assert e.value.exit_code == 2


def test_a_conflist_file_that_is_not_json(tmp_path, good):
    (tmp_path / "bad.conflist").write_text("{not json")
    text = good.replace(CONFLIST, 'conflist = "bad.conflist"')
    with pytest.raises(UsageError, match=r"target.toml: plugin.conflist: .*bad.conflist is not JSON"):
        load_target(write(tmp_path, text))


def test_an_unreadable_file_and_an_unknown_name(tmp_path):
    with pytest.raises(UsageError, match=r"nope.toml: cannot read: No such file"):
        resolve_target(str(tmp_path / "nope.toml"))
    with pytest.raises(UsageError, match=r"unknown target 'frobnicate': not a built-in"):
        resolve_target("frobnicate")


def test_the_cli_refuses_a_bad_target_with_exit_2_before_starting_anything(tmp_path, good):
    path = write(tmp_path, good.replace('name = "demo"', 'name = "demo"\nflavour = "x"'))
    from cnikit.runtime import RUN_ROOT

    before = set(RUN_ROOT.glob("*")) if RUN_ROOT.exists() else set()
    t0 = time.monotonic()
    for argv in (["run", "imds-outage", "--target", str(path)],
                 ["matrix", "--target", str(path), "-s", "imds-outage"],
                 ["up", "--target", str(path)]):
        r = subprocess.run([sys.executable, "-m", "cnikit.cli", *argv], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines == [f"cnikit: {path}: flavour: unknown key (one of name, version, daemon, "
                         "plugin, observe, max_pods, ip_family, component, build)"], r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""
    # No run was claimed (a run claims its directory before any namespace or process).
    after = set(RUN_ROOT.glob("*")) if RUN_ROOT.exists() else set()
    mine = [d for d in after - before if _owner_started_after(d, t0)]
    assert mine == [], mine


def _owner_started_after(run_dir: Path, t0: float) -> bool:
    try:
        owner = json.loads((run_dir / "owner.json").read_text())
    except (OSError, ValueError):
        return False
    # Other engineers' runs share the machine: only a child of ours would be this recent
    # and already gone (the CLI processes above have exited).
    from cnikit.runtime import run_is_alive

    return not run_is_alive(run_dir) and owner.get("since", 0) >= time.time() - (time.monotonic() - t0)


# ---- built-ins and the profile registry -----------------------------------------------------

def test_builtins_are_the_profiles_in_display_order():
    r = subprocess.run([sys.executable, "-c",
                        "from cnikit.targets import builtin_names; print(builtin_names())"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "['vpc-cni-1.18.3', 'vpc-cni-1.18.4', 'vpc-cni-1.20.4', 'hardened']", r.stderr


def test_a_builtin_runs_through_the_same_seam_as_a_file():
    t = resolve_target("vpc-cni-1.18.3")
    assert t.builtin and t.source is None and t.image is None
    assert t.daemon.command[1:] == ("-m", "cnikit.cli", "daemon", "--state-dir", "{state_dir}")
    assert t.daemon.env == {"CNIKIT_PROFILE": "vpc-cni-1.18.3"}
    assert t.daemon.ready.socket == "{state_dir}/ipamd.sock"
    assert t.conflist["plugins"][0] == {"type": PLUGIN, "daemonSocket": "{state_dir}/ipamd.sock"}
    assert (t.observe.introspection, t.observe.metrics) == (61679, 61678)
    assert t.expected("imds-stale-equal-length") == "violation"
    assert t.expected("random-chaos") is None  # not asserted
    assert resolve_target("hardened").expected("imds-stale-equal-length") == "holds"
    assert all(p.exists() for p in t.files_under_test().values())


def test_every_scenario_expectation_names_a_real_scenario():
    from cnikit import scenarios
    from cnikit.daemon import profiles

    known = set(scenarios.names())
    for p in profiles.registry().values():
        assert set(p.expected) <= known, (p.name, set(p.expected) - known)
        assert p.expected_verdict("a-new-scenario") == "holds"


def test_the_daemon_config_reads_the_registry():
    from cnikit.daemon.config import from_env
    from cnikit.daemon.reconcile import HardenedReconcile, UpstreamReconcile

    assert isinstance(from_env({"CNIKIT_PROFILE": "hardened"}).strategy, HardenedReconcile)
    s = from_env({"CNIKIT_PROFILE": "vpc-cni-1.18.4"}).strategy
    assert isinstance(s, UpstreamReconcile) and s.contents and s.trusts_imds
    with pytest.raises(UsageError, match="CNIKIT_PROFILE='x' is not one of vpc-cni-1.18.3, "
                                         "vpc-cni-1.18.4, vpc-cni-1.20.4, hardened"):
        from_env({"CNIKIT_PROFILE": "x"})


def test_adding_a_profile_is_one_new_module(tmp_path, monkeypatch):
    """A copy of the profiles package plus one file: discovery lists it, in its order."""
    import shutil

    from cnikit.daemon import profiles

    pkg = tmp_path / "myprofiles"
    shutil.copytree(Path(profiles.__file__).parent, pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "__init__.py").write_text("")  # the package's modules, not the registry's code
    (pkg / "vpc_cni_1_19_0.py").write_text(textwrap.dedent("""\
        from cnikit.daemon.profiles import Profile
        from cnikit.daemon.reconcile import UpstreamReconcile

        PROFILE = Profile(name="vpc-cni-1.19.0", summary="a newer upstream",
                          reconcile=UpstreamReconcile(contents=True), order=25)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    found = profiles.discover("myprofiles")
    assert list(found) == ["vpc-cni-1.18.3", "vpc-cni-1.18.4", "vpc-cni-1.19.0", "vpc-cni-1.20.4",
                           "hardened"]
    assert found["vpc-cni-1.19.0"].expected_verdict("imds-stale-equal-length") == "holds"
    # The real registry is untouched.
    assert "vpc-cni-1.19.0" not in builtin_names()


# ---- placeholders -------------------------------------------------------------------------

def test_placeholders_only_the_known_names():
    values = {"state_dir": "/s", "node": "n0", "node_index": "0", "instance_id": "i-1",
              "subnet_cidr": "10.0.1.0/24", "vpc_cidr": "10.0.0.0/16", "cni_bin_dir": "/b",
              "cni_conf_dir": "/c"}
    conf = {"a": "{state_dir}/x.sock", "b": ["{node}-{node_index}", '{"json": {state}}'],
            "c": {"range": "{subnet_cidr}", "n": 3, "other": "{unknown}"}}
    assert render(conf, values) == {"a": "/s/x.sock", "b": ["n0-0", '{"json": {state}}'],
                                    "c": {"range": "10.0.1.0/24", "n": 3, "other": "{unknown}"}}


def test_a_plugin_is_installed_per_node_with_its_conflist_rendered(tmp_path, good, monkeypatch):
    from cnikit.targets.node import NodePlaces, install_plugin

    monkeypatch.delenv("CNIKIT_CNI_BUILD", raising=False)  # the default build

    t = load_target(write(tmp_path, good))
    places = NodePlaces(state_dir=tmp_path / "state", node="n0", node_index=0, instance_id="i-1",
                        subnet_cidr="10.0.1.0/24", vpc_cidr="10.0.0.0/16",
                        cni_bin_dir=tmp_path / "bin", cni_conf_dir=tmp_path / "net.d")
    conf = install_plugin(t, places)
    assert conf["plugins"][0]["sock"] == f"{tmp_path}/state/s"
    assert (tmp_path / "bin" / "true").resolve() == Path("/bin/true").resolve()
    assert json.loads((tmp_path / "net.d" / "10-net.conflist").read_text()) == conf
    # A built-in's plugin is the kit's own: compiled where Go is, with the Python build
    # beside it (which wires pods itself when a netconf asks), else the Python launcher.
    b = resolve_target("hardened")
    conf = install_plugin(b, places)
    launcher = tmp_path / "bin" / PLUGIN
    python = launcher.with_name(f"{PLUGIN}-python") if shutil.which("go") else launcher
    assert os.access(launcher, os.X_OK) and "cnikit.plugin.main" in python.read_text()
    assert conf["plugins"][0]["daemonSocket"] == f"{tmp_path}/state/ipamd.sock"
