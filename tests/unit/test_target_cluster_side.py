"""A target's cluster side and the rest of its build: [[component]] (run once per run) and
[build] files (hashed into the certificate with the target file and every environment)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cnikit.errors import UsageError
from cnikit.targets import load_target

BASE = textwrap.dedent("""\
    name = "operator-design"
    version = "0.1"

    [daemon]
    command = ["true", "--state", "{state_dir}"]
    env = { POOL = "8" }

    [plugin]
    binaries = ["/bin/true"]
    conflist = { cniVersion = "1.0.0", name = "net", plugins = [ { type = "true" } ] }
    """)

OPERATOR = textwrap.dedent("""
    [[component]]
    name = "operator"
    command = ["true", "--ec2", "{ec2_endpoint}", "--state", "{state_dir}"]
    env = { RESYNC = "30", API_TOKEN = "abc" }
    ready = { url = "http://127.0.0.1:9234/healthz", timeout = 20 }
    """)


def write(tmp_path: Path, text: str, name: str = "target.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_component_loads_with_its_command_env_and_readiness(tmp_path):
    t = load_target(write(tmp_path, BASE + OPERATOR))
    (op,) = t.components
    assert op.name == "operator" and Path(op.command[0]).name == "true"
    assert op.command[1:] == ("--ec2", "{ec2_endpoint}", "--state", "{state_dir}")
    assert op.env == {"RESYNC": "30", "API_TOKEN": "abc"}
    assert op.ready.url == "http://127.0.0.1:9234/healthz" and op.ready.timeout == 20
    assert t.component("operator") is op and t.component("other") is None
    assert t.environments() == {"daemon": {"POOL": "8"},
                                "component:operator": {"RESYNC": "30", "API_TOKEN": "abc"}}


def test_files_under_test_are_the_target_file_the_components_and_the_build(tmp_path):
    (tmp_path / "lib").mkdir()
    for f in ("lib/alloc.py", "lib/agent.py", "lib/notes.txt", "helper.sh"):
        (tmp_path / f).write_text(f)
    text = BASE + OPERATOR + '\n[build]\nfiles = ["lib/*.py", "helper.sh"]\n'
    t = load_target(write(tmp_path, text))
    files = t.files_under_test()
    assert files["target"] == tmp_path / "target.toml"
    assert files["component:operator"].name == "true"
    assert {k: v for k, v in files.items() if k.startswith("build:")} == {
        "build:lib/agent.py": tmp_path / "lib" / "agent.py",
        "build:lib/alloc.py": tmp_path / "lib" / "alloc.py",
        "build:helper.sh": tmp_path / "helper.sh"}


# (text added to BASE, what the one-line reason must say)
BAD = {
    "component a table": ('[component]\nname = "x"\ncommand = ["true"]\n',
                          "component: must be an array of tables"),
    "component without command": ('[[component]]\nname = "x"\n',
                                  "component[0].command: missing"),
    "component unknown key": ('[[component]]\nname = "x"\ncommand = ["true"]\nimage = "y"\n',
                              "component[0].image: unknown key"),
    "component bad name": ('[[component]]\nname = "a b"\ncommand = ["true"]\n',
                           "component[0].name: 'a b': only letters"),
    "component twice": ('[[component]]\nname = "x"\ncommand = ["true"]\n'
                        '[[component]]\nname = "x"\ncommand = ["true"]\n',
                        "component[1].name: 'x' is the name of another component"),
    "component missing binary": ('[[component]]\nname = "x"\ncommand = ["no-such-operator"]\n',
                                 "component[0].command[0]: 'no-such-operator' is not on PATH"),
    "component node placeholder": ('[[component]]\nname = "x"\ncommand = ["true", "{instance_id}"]\n',
                                   "component[0]: {instance_id} is a node's placeholder"),
    "component bad ready": ('[[component]]\nname = "x"\ncommand = ["true"]\n'
                            'ready = { url = "localhost:1" }\n',
                            "component[0].ready.url: 'localhost:1' is not an http(s) URL"),
    "component env table": ('[[component]]\nname = "x"\ncommand = ["true"]\nenv = { A = { b = 1 } }\n',
                            "component[0].env.A: must be a string"),
    "build glob matches nothing": ('[build]\nfiles = ["src/*.go"]\n',
                                   "build.files[0]: 'src/*.go' matches no file"),
    "build glob outside": ('[build]\nfiles = ["../*.toml"]\n',
                           "build.files[0]: '../*.toml': a glob relative to the target file"),
    "build unknown key": ('[build]\nsources = ["x"]\n', "build.sources: unknown key"),
    "build files not a list": ('[build]\nfiles = "x"\n', "build.files: must be a non-empty list"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_cluster_side_is_one_line_naming_the_key(case, tmp_path):
    added, want = BAD[case]
    path = write(tmp_path, BASE + added)
    with pytest.raises(UsageError) as e:
        load_target(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ") and want in msg, msg


# ---- the certificate's identity ---------------------------------------------------------

def _document(path: Path) -> dict:
    from cnikit.certify import certificate
    from cnikit.certify.suite import Certification

    c = Certification(load_target(path), runs=[], started=0.0, ended=1.0)
    return certificate.build(c)


def _variant(tmp_path: Path, name: str, text: str, helper: str = "v1") -> Path:
    d = tmp_path / name
    (d / "lib").mkdir(parents=True)
    (d / "lib" / "agent.py").write_text(helper)
    return write(d, text + '\n[build]\nfiles = ["lib/*.py"]\n')


def test_two_variants_differing_only_in_env_or_a_helper_file_differ_in_identity(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from cnikit.certify import certificate

    one = _document(_variant(tmp_path, "one", BASE + OPERATOR))
    jsonschema.validate(json.loads(json.dumps(one)), certificate.SCHEMA)
    same = _document(_variant(tmp_path, "same", BASE + OPERATOR))
    env = _document(_variant(tmp_path, "env", BASE + OPERATOR.replace('"30"', '"5"')))
    secret = _document(_variant(tmp_path, "secret", BASE + OPERATOR.replace('"abc"', '"abd"')))
    helper = _document(_variant(tmp_path, "helper", BASE + OPERATOR, helper="v2"))
    assert same["identity"] == one["identity"], "the same build in another directory"
    assert len({one["identity"], env["identity"], secret["identity"], helper["identity"]}) == 4
    roles = {f["role"] for f in one["files"]}
    assert {"target", "daemon", "component:operator", "build:lib/agent.py"} <= roles
    assert one["environment"] == {"component:operator": {"API_TOKEN": "(redacted)",
                                                         "RESYNC": "30"},
                                  "daemon": {"POOL": "8"}}
    assert "abc" not in json.dumps(one), "a secret-looking value is never written"


def test_shards_of_builds_with_another_identity_do_not_merge(tmp_path):
    from cnikit.certify.merge import _identity

    one = _document(_variant(tmp_path, "one", BASE + OPERATOR))
    env = _document(_variant(tmp_path, "env", BASE + OPERATOR.replace('"30"', '"5"')))
    # Same files but the target file: take it out to see the environment alone decide.
    for doc in (one, env):
        doc["files"] = [f for f in doc["files"] if f["role"] != "target"]
    assert _identity(one) != _identity(env)


def test_the_docs_operator_design_target_loads(tmp_path):
    """docs/certify.md's worked operator design is a target file the loader takes whole."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "certify.md").read_text()
    section = doc.split("### An operator design", 1)[1]
    text = section.split("```toml\n", 1)[1].split("```", 1)[0]
    for name in ("operator", "agent", "agent-cni"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    (tmp_path / "central").mkdir()
    (tmp_path / "central" / "pool.py").write_text("")
    t = load_target(write(tmp_path, text))
    assert [c.name for c in t.components] == ["operator"]
    assert {"component:operator", "daemon", "plugin:agent-cni", "build:central/pool.py",
            "target"} <= set(t.files_under_test())
