"""Every case of plugin_cases.json against each build of cnikit-cni, the compiled one and the
Python one, run as a container runtime runs a plugin (environment and stdin, one exec) with a
real unix socket server as the daemon. The exit code, the stdout and the requests the daemon
got must be the table's: a build that answers differently fails here, with the diff, so the
two cannot drift apart. The table's "about" says how a case reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from cnikit.plugin.launcher import CONSTANTS
from tests.unit.plugin_support import BUILDS, ERROR_SCHEMA, FakeDaemon, install, run

TABLE = json.loads(Path(__file__).with_name("plugin_cases.json").read_text())
ANY = "<any>"

# Errors no unit case can reach, and where each is tested instead.
UNREACHED = {
    "read_config": "stdin that cannot be read: nothing a runtime does",
    "no_python_build": "test_plugin_cli.py removes the Python build beside the compiled one",
    "pod_check_failed": "CHECK of a pod the Python build wired itself: needs root and a pod",
    "internal": "a bug in the plugin",
}


@pytest.fixture(scope="module", params=BUILDS)
def plugin(request, tmp_path_factory):
    return install(tmp_path_factory, request.param)


def _filled(value, sock):
    """The value with "{socket}" in its strings replaced by the case's socket path."""
    if isinstance(value, str):
        return value.replace("{socket}", sock)
    if isinstance(value, list):
        return [_filled(v, sock) for v in value]
    if isinstance(value, dict):
        return {k: _filled(v, sock) for k, v in value.items()}
    return value


def _merged(base, changes):
    """base with changes applied, a change to null removing the key."""
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not None}


def _reply(daemon):
    """What the fake daemon's answer function returns for a case's `daemon`."""
    if daemon == "hangs up":
        return None
    if "says" in daemon:
        return daemon["says"].encode()
    return daemon["answer"]


def play(plugin, case, sock):
    """One case's run: what the plugin did, in the table's shape."""
    case, defaults = _filled(case, sock), _filled(TABLE["defaults"], sock)
    env = _merged(defaults["env"], case.get("env", {}))
    stdin = (case["stdin"] if "stdin" in case
             else json.dumps(_merged(defaults["config"], case.get("config", {})))).encode()
    daemon = case.get("daemon", {"answer": defaults["daemon"]})
    fake = None if daemon == "down" else FakeDaemon(sock, lambda _req: _reply(daemon))
    try:
        rc, out = run(plugin, case["command"], stdin, **env)
    finally:
        if fake:
            fake.close()
    return {"exit": rc, "stdout": out, "requests": fake.requests if fake else []}


def _loosened(got, want):
    """got, where want holds ANY over a non-empty string: the JSON parsers' own words."""
    if want == ANY and isinstance(got, str) and got:
        return ANY
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: _loosened(v, want.get(k)) for k, v in got.items()}
    return got


def _expected(case, sock):
    return _filled({"exit": case["exit"], "stdout": case["stdout"],
                    "requests": case.get("requests", [])}, sock)


@pytest.mark.parametrize("case", TABLE["cases"], ids=[c["name"] for c in TABLE["cases"]])
def test_case(plugin, tmp_path, case):
    sock = str(tmp_path / "ipamd.sock")
    got, want = _loosened(play(plugin, case, sock), _expected(case, sock)), _expected(case, sock)
    # One part at a time, so a failure's diff shows only the part that differs.
    assert got["stdout"] == want["stdout"]
    assert got["exit"] == want["exit"]
    assert got["requests"] == want["requests"]
    if got["exit"] != 0:
        jsonschema.validate(got["stdout"], ERROR_SCHEMA)


def test_case_names_are_unique():
    names = [c["name"] for c in TABLE["cases"]]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_every_error_has_a_case():
    """A new error in constants.json comes with a case that shows who gets it."""
    errors = json.loads(CONSTANTS.read_text())["errors"]
    answered = [c["stdout"] for c in TABLE["cases"] if c["exit"] != 0 and c["stdout"]]
    missing = []
    for key, err in errors.items():
        words = re.compile(".*".join(map(re.escape, re.split(r"\{\w+\}", err["msg"]))) + "$")
        if key not in UNREACHED and not any(
                a.get("code") == err["code"] and words.match(a.get("msg", "")) for a in answered):
            missing.append(key)
    assert missing == [], "give each a case in plugin_cases.json, or a reason in UNREACHED"
    assert set(UNREACHED) <= set(errors)
