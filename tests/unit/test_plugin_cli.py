"""cnikit-cni without root: spec error JSON for every bad input, VERSION, the result it builds
from a daemon answer (against a real unix-socket server standing in for the daemon), and
its start-up cost guard (no json/re/enum/socket/boto3/pyroute2 imports). Every case runs
against both builds, the compiled one and the Python one: they must answer alike."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading

import jsonschema
import pytest

from cnikit.plugin import tinyjson
from cnikit.plugin.launcher import write_launcher

ERROR_SCHEMA = {
    "type": "object", "required": ["cniVersion", "code", "msg"],
    "properties": {"code": {"type": "integer", "minimum": 1},
                   "msg": {"type": "string", "minLength": 1, "pattern": r"^[^\n]*$"}},
}


def needs_go():
    if shutil.which("go") is None:
        pytest.skip("Go is not installed (Debian: apt-get install golang-go)")


@pytest.fixture(scope="module", params=["compiled", "python"])
def plugin(request, tmp_path_factory):
    if request.param == "compiled":
        needs_go()
    return str(write_launcher(tmp_path_factory.mktemp("bin"), build=request.param))


@pytest.fixture(scope="module")
def python_plugin(tmp_path_factory):
    return str(write_launcher(tmp_path_factory.mktemp("bin"), build="python"))


class FakeDaemon:
    """A real unix socket server answering like the daemon, recording the requests."""

    def __init__(self, path, answer):
        self.path, self.answer, self.requests = str(path), answer, []
        self.srv = socket.socket(socket.AF_UNIX)
        self.srv.bind(self.path)
        self.srv.listen(8)
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with conn:
                req = json.loads(conn.makefile().readline())
                self.requests.append(req)
                resp = self.answer(req)
                if resp is not None:
                    conn.sendall(json.dumps(resp).encode() + b"\n")

    def close(self):
        self.srv.close()


def run(plugin, command, stdin=b"", **env):
    base = {"PATH": os.environ["PATH"], "CNI_COMMAND": command}
    base.update({k: v for k, v in env.items() if v is not None})
    p = subprocess.run([plugin], input=stdin, env=base, capture_output=True, timeout=30)
    assert p.stderr == b""
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None)


CNI_ENV = {"CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
           "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web"}


def conf(**kw):
    return json.dumps({"cniVersion": "1.0.0", "name": "aws-cni", "type": "cnikit-cni", **kw}).encode()


def test_version(plugin):
    rc, out = run(plugin, "VERSION")
    assert rc == 0 and out == {"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]}


@pytest.mark.parametrize("command,stdin,env,code", [
    ("ADD", b"garbage", CNI_ENV, 6),
    ("ADD", b"", CNI_ENV, 6),
    ("ADD", b'"str"', CNI_ENV, 6),
    ("ADD", b'{"name": "n"}', CNI_ENV, 7),
    ("ADD", b'{"cniVersion": "0.2.0", "name": "n"}', CNI_ENV, 1),
    ("ADD", conf(mtu=10), CNI_ENV, 2),
    ("ADD", conf(wiring="magic"), CNI_ENV, 2),
    ("ADD", conf(), {**CNI_ENV, "CNI_CONTAINERID": None}, 4),
    ("ADD", conf(), {**CNI_ENV, "CNI_NETNS": None}, 4),
    ("FROB", conf(), CNI_ENV, 4),
    ("", conf(), CNI_ENV, 4),
    ("ADD", conf(daemonSocket="/nonexistent/ipamd.sock"), CNI_ENV, 11),
    ("DEL", conf(daemonSocket="/nonexistent/ipamd.sock"), CNI_ENV, 11),
    ("CHECK", conf(daemonSocket="/nonexistent/ipamd.sock"), CNI_ENV, 7),  # no prevResult
])
def test_errors_are_spec_json(plugin, command, stdin, env, code):
    rc, err = run(plugin, command, stdin, **env)
    assert rc != 0
    jsonschema.validate(err, ERROR_SCHEMA)
    assert err["code"] == code, err


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
@pytest.mark.parametrize("stdin,env,code", [
    # What libcni's skel (and so ptp) checks before a plugin runs: SPEC.md's rules.
    (conf(name=None), CNI_ENV, 7),
    (conf(name=""), CNI_ENV, 7),
    (conf(name="aws cni"), CNI_ENV, 7),
    (conf(), {**CNI_ENV, "CNI_CONTAINERID": "c/1"}, 4),
    (conf(), {**CNI_ENV, "CNI_CONTAINERID": "c 1"}, 4),
    (conf(), {**CNI_ENV, "CNI_CONTAINERID": "-c1"}, 4),
    (conf(), {**CNI_ENV, "CNI_CONTAINERID": "c1\u00e9"}, 4),
    (conf(), {**CNI_ENV, "CNI_IFNAME": "eth0:1"}, 4),
    (conf(), {**CNI_ENV, "CNI_IFNAME": "a" * 16}, 4),
])
def test_spec_validation_before_the_daemon(plugin, tmp_path, command, stdin, env, code):
    d = FakeDaemon(tmp_path / "s.sock", lambda r: {"ok": True, "ip": "10.0.1.9", "deviceNumber": 0})
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.1.9/32", "interface": 1}]}
    conf_ = {**json.loads(stdin), "daemonSocket": d.path, "prevResult": prev}
    try:
        rc, err = run(plugin, command, json.dumps({k: v for k, v in conf_.items() if v is not None}).encode(),
                      **env)
    finally:
        d.close()
    assert rc != 0 and err["code"] == code, err
    jsonschema.validate(err, ERROR_SCHEMA)
    assert d.requests == []


def test_valid_names_are_accepted(plugin, tmp_path):
    d = FakeDaemon(tmp_path / "s.sock", lambda r: {"ok": True, "ip": "10.0.1.9", "deviceNumber": 0})
    try:
        rc, res = run(plugin, "ADD", conf(daemonSocket=d.path, name="a.b_c-9"),
                      **{**CNI_ENV, "CNI_CONTAINERID": "0a.B_c-d", "CNI_IFNAME": "e" * 15})
    finally:
        d.close()
    assert rc == 0, res
    assert d.requests[0]["network"] == "a.b_c-9" and d.requests[0]["containerID"] == "0a.B_c-d"


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1"])
def test_check_before_0_4_0_is_code_1_without_asking_the_daemon(plugin, tmp_path, version):
    d = FakeDaemon(tmp_path / "s.sock", lambda r: {"ok": False, "code": 11, "error": "busy"})
    prev = {"cniVersion": version, "ips": [{"version": "4", "address": "10.0.1.9/32"}]}
    try:
        rc, err = run(plugin, "CHECK", json.dumps({"cniVersion": version, "name": "n",
                                                   "daemonSocket": d.path,
                                                   "prevResult": prev}).encode(), **CNI_ENV)
    finally:
        d.close()
    assert rc != 0 and err["code"] == 1 and err["cniVersion"] == version, err
    assert d.requests == []


def test_add_result_and_request(plugin, tmp_path):
    def answer(req):
        return {"ok": True, "ip": "10.0.1.23", "eniId": "eni-1", "deviceNumber": 1,
                "subnetCidr": "10.0.1.0/24", "router": "10.0.1.1", "hostVeth": "eni0123456789a",
                "hostMac": "02:00:00:00:00:01", "podMac": "0a:00:00:00:00:02"}

    d = FakeDaemon(tmp_path / "s.sock", answer)
    try:
        rc, res = run(plugin, "ADD", conf(daemonSocket=d.path, mtu=9001), **CNI_ENV)
    finally:
        d.close()
    assert rc == 0, res
    assert res["ips"] == [{"address": "10.0.1.23/32", "gateway": "169.254.1.1", "interface": 1}]
    assert res["interfaces"][1] == {"name": "eth0", "mac": "0a:00:00:00:00:02", "sandbox": "/run/netns/x"}
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}]
    (req,) = d.requests
    assert req["cmd"] == "add" and req["containerID"] == "c1" and req["netns"] == "/run/netns/x"
    assert req["podNamespace"] == "ns" and req["podName"] == "web" and req["mtu"] == 9001
    assert req["metadata"] == {"k8sPodNamespace": "ns", "k8sPodName": "web"}


def test_old_versions_get_their_result_format(plugin, tmp_path):
    d = FakeDaemon(tmp_path / "s.sock", lambda r: {"ok": True, "ip": "10.0.1.9", "deviceNumber": 0})
    try:
        rc, res = run(plugin, "ADD", json.dumps({"cniVersion": "0.4.0", "name": "n",
                                                 "daemonSocket": d.path}).encode(), **CNI_ENV)
    finally:
        d.close()
    assert rc == 0 and res["cniVersion"] == "0.4.0" and res["ips"][0]["version"] == "4"


def test_daemon_errors_pass_through(plugin, tmp_path):
    d = FakeDaemon(tmp_path / "s.sock", lambda r: {"ok": False, "code": 11, "error": "no IP available"})
    try:
        rc, err = run(plugin, "ADD", conf(daemonSocket=d.path), **CNI_ENV)
    finally:
        d.close()
    assert rc != 0 and err["code"] == 11 and "no IP" in err["msg"]


def test_daemon_dying_mid_request_is_try_again(plugin, tmp_path):
    d = FakeDaemon(tmp_path / "s.sock", lambda r: None)  # closes without answering
    try:
        rc, err = run(plugin, "ADD", conf(daemonSocket=d.path), **CNI_ENV)
    finally:
        d.close()
    assert rc != 0 and err["code"] == 11


def test_check_sends_prev_result_ip(plugin, tmp_path):
    d = FakeDaemon(tmp_path / "s.sock", lambda r: {"ok": True, "ip": "10.0.1.9", "deviceNumber": 0})
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.1.9/32", "interface": 1}]}
    try:
        rc, out = run(plugin, "CHECK", conf(daemonSocket=d.path, prevResult=prev), **CNI_ENV)
    finally:
        d.close()
    assert (rc, out) == (0, None)
    assert d.requests[0]["cmd"] == "check" and d.requests[0]["expectIp"] == "10.0.1.9"


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


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    needs_go()
    return [str(write_launcher(tmp_path_factory.mktemp("bin"), build=b)) for b in ("compiled", "python")]


DIFF_CASES = [
    ("ADD", b"[1, 2]", CNI_ENV), ("ADD", b"1 2", CNI_ENV), ("ADD", b"{}", CNI_ENV),
    ("ADD", b'{"cniVersion": 1, "name": "n"}', CNI_ENV),
    ("ADD", b'{"cniVersion": "9.9.9", "name": "n"}', CNI_ENV),
    ("ADD", conf(name="a b"), CNI_ENV), ("ADD", conf(mtu=1500.0), CNI_ENV),
    ("ADD", conf(mtu="1500"), CNI_ENV), ("ADD", conf(mtu=70000), CNI_ENV),
    ("ADD", conf(wiring=None), CNI_ENV), ("FROB", conf(), CNI_ENV), ("", conf(), CNI_ENV),
    ("ADD", conf(), {**CNI_ENV, "CNI_IFNAME": "eth 0"}),
    ("ADD", conf(), {**CNI_ENV, "CNI_IFNAME": "eth\x1c0"}),
    ("ADD", conf(), {**CNI_ENV, "CNI_IFNAME": "it's\t\u00a0\u2003"}),
    ("FROB\x7f\"'", conf(), CNI_ENV),
    ("ADD", conf(), {**CNI_ENV, "CNI_IFNAME": ".."}),
    ("ADD", conf(), {**CNI_ENV, "CNI_CONTAINERID": "_c"}),
    ("DEL", conf(), {**CNI_ENV, "CNI_IFNAME": None}),
    ("CHECK", conf(prevResult={"ips": []}), CNI_ENV),
    ("CHECK", conf(prevResult=[]), CNI_ENV),
    ("CHECK", json.dumps({"cniVersion": "0.3.1", "name": "n"}).encode(), CNI_ENV),
]


@pytest.mark.parametrize("command,stdin,env", DIFF_CASES)
def test_both_builds_answer_alike(both, command, stdin, env):
    compiled, python = (run(p, command, stdin, **env) for p in both)
    if python[1]["code"] == 6:  # the JSON parser's own words differ; code and message agree
        compiled[1].pop("details", None), python[1].pop("details", None)
    assert compiled == python


@pytest.mark.parametrize("answer", [
    {"ok": True, "ip": "10.0.1.9", "deviceNumber": 0, "hostVeth": "eni1", "hostMac": "m", "podMac": "p"},
    {"ok": False, "code": 11, "error": "no IP available"},
    {"ok": False},
    {"ok": False, "code": 11.0, "error": ""},
    None,
])
@pytest.mark.parametrize("command,extra", [
    ("ADD", {}), ("ADD", {"dns": {"nameservers": ["10.0.0.2"]}, "mtu": 9001, "vethPrefix": "x"}),
    ("ADD", {"cniVersion": "0.3.1"}), ("DEL", {}),
    ("CHECK", {"prevResult": {"ips": [{"address": "10.0.1.9/32"}]}}),
    # The compiled build hands plugin-side wiring to the Python one, whose answer it gives.
    ("ADD", {"wiring": "plugin"}), ("DEL", {"wiring": "plugin"}),
])
def test_both_builds_send_and_answer_alike(both, tmp_path, command, extra, answer):
    seen = []
    for plugin in both:
        (tmp_path / "s.sock").unlink(missing_ok=True)
        d = FakeDaemon(tmp_path / "s.sock", lambda r: answer)
        try:
            out = run(plugin, command, conf(**{"daemonSocket": d.path, **extra}), **CNI_ENV)
        finally:
            d.close()
        seen.append((out, d.requests))
    assert seen[0] == seen[1]


def test_plugin_wiring_needs_the_python_build_beside_the_compiled_one(tmp_path):
    needs_go()
    plugin = write_launcher(tmp_path, build="compiled")
    (tmp_path / "cnikit-cni-python").unlink()
    rc, err = run(str(plugin), "ADD", conf(wiring="plugin"), **CNI_ENV)
    assert rc == 1 and err["code"] == 5 and err["details"].endswith("cnikit-cni-python"), err
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
