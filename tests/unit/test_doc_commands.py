"""The shell blocks of the README and the docs, as a reader pastes them: they parse, every
fault they add ends by itself (one pasted alone must not leave a permanent limit), and the
commands they name exist and take the arguments given, as root (a CI container, which has
no sudo) and as a user, from wherever the reader's own files are."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "fault_imds" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)


def shell_blocks() -> list[tuple[str, str]]:
    """(where, text) of every ```sh block."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{doc.relative_to(ROOT)}:{line}", m.group(1)))
    return out


def commands(block: str) -> list[list[str]]:
    """Each command line of a block as words (continuations joined, comments dropped)."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


BLOCKS = shell_blocks()


def test_there_are_blocks_to_check():
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("where,block", BLOCKS, ids=[w for w, _ in BLOCKS])
def test_each_block_parses_as_shell(where, block):
    p = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"{where}: {p.stderr}"


def fault_bodies() -> list[tuple[str, str, dict]]:
    """(where, API variable, body) of every fault a block POSTs to $CONTROL or $GATE."""
    from cnikit.cloud.faults import KINDS as EC2_KINDS
    from fault_imds.faults import KINDS as IMDS_KINDS

    kinds = {"$CONTROL": IMDS_KINDS, "$GATE": EC2_KINDS}
    out = []
    for where, block in BLOCKS:
        for words in commands(block):
            url = next((w for w in words if w.endswith("/faults")), None)
            if words[0] != "curl" or "-d" not in words or url is None:
                continue
            api = url.rsplit("/", 1)[0]
            body = json.loads(words[words.index("-d") + 1])
            assert api in kinds, f"{where}: a fault posted to {url}"
            assert body["kind"] in kinds[api], f"{where}: {body['kind']} is no kind of {api}"
            out.append((where, api, body))
    return out


def test_every_fault_example_ends_by_itself():
    bodies = fault_bodies()
    assert {api for _, api, _ in bodies} == {"$CONTROL", "$GATE"}
    lasting = [f"{where}: {json.dumps(body)}" for where, _, body in bodies
               if not isinstance(body.get("duration"), (int, float))]
    assert lasting == [], "pasted alone, these faults stay until removed: give each a duration"


def test_no_command_needs_sudo():
    """sudo is missing where CI runs as root: a command needing root starts with $SUDO."""
    found = [f"{where}: {' '.join(words)}" for where, block in BLOCKS for words in commands(block)
              if "sudo" in (words[0], *(b for a, b in zip(words, words[1:], strict=False)
                                       if a in ("&&", ";")))]
    assert found == []


def sudo_lines() -> set[str]:
    return {line.split("#")[0].strip() for _, block in BLOCKS for line in block.splitlines()
            if line.startswith("SUDO=")}


def sudo_value(line: str, unprivileged: bool) -> str:
    cmd = ["bash", "-c", f'{line}; printf %s "$SUDO"']
    if unprivileged:
        cmd = ["unshare", "-U", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout


def test_sudo_is_nothing_as_root_and_sudo_as_a_user():
    [line] = sudo_lines()  # one spelling in every doc
    assert sudo_value(line, unprivileged=False) == ("" if os.geteuid() == 0 else "sudo")
    if os.geteuid() == 0 and shutil.which("unshare"):
        assert sudo_value(line, unprivileged=True) == "sudo"


def test_a_test_saved_anywhere_is_run_with_the_kits_venv_by_its_full_path():
    """docs/pytest.md's test file lives outside the checkout: a relative .venv misses."""
    doc = [(w, b) for w, b in BLOCKS if w.startswith("docs/pytest.md")]
    assert doc
    relative = [w for _, block in doc for words in commands(block) for w in words
                if w.startswith(".venv/")]
    assert relative == []


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def click_parses(root, argv: list[str], where: str) -> None:
    """argv parses under the real click command `root` (groups followed down)."""
    import click

    from cnikit import scenarios
    from cnikit.containers.noderuntime import RUNTIMES

    if "--runtime" in argv:  # parsing it would ask for the engine: checked by name here
        i = argv.index("--runtime")
        assert argv[i + 1] in RUNTIMES, f"{where}: {argv}"
        argv = argv[:i] + argv[i + 2:]
    cmd = root.get_command(click.Context(root), argv[0])
    assert cmd is not None, f"{where}: no command {argv[0]} in {' '.join(argv)}"
    if isinstance(cmd, click.Group):
        return click_parses(cmd, argv[1:], where)
    cmd.make_context(argv[0], argv[1:])
    if argv[0] == "run":
        assert argv[1] in scenarios.names(), f"{where}: no scenario {argv[1]}"


# Every option name pytest takes here (its own, its plugins', the kit's; aliases that --help
# leaves out, such as --junitxml, included), read from its parser in a process of its own.
PYTEST_OPTIONS = """
from _pytest.config import _prepareconfig
parser = _prepareconfig(["-p", "no:cacheprovider"])._parser
print("\\n".join(n for g in [parser._anonymous, *parser._groups] for o in g.options
                for n in o.names()))
"""


def pytest_options() -> set[str]:
    out = subprocess.run([sys.executable, "-c", PYTEST_OPTIONS], capture_output=True, text=True,
                         timeout=120, cwd="/", check=True).stdout
    return set(out.split())


def check_command(words: list[str], where: str, known_options) -> int:
    """Check one command line; how many commands it named that were checked."""
    from cnikit.cli import cli
    from fault_imds.cli import cli as fault_imds

    words = [w.replace("$KIT/", f"{ROOT}/") for w in words]
    if words[0] == "$SUDO":
        words = words[1:]
    exe = words[0]
    if exe == "make":
        targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        assert set(targets) <= makefile_targets(), f"{where}: {' '.join(words)}"
        return 1
    if exe in ("cnikit", "fault-imds"):
        click_parses(cli if exe == "cnikit" else fault_imds, words[1:], where)
        return 1
    if "/.venv/bin/" not in f"/{exe}":
        return 0
    path = Path(exe) if Path(exe).is_absolute() else ROOT / exe
    assert path.exists(), f"{where}: {exe} is not in the kit's venv"
    name, args = path.name, words[1:]
    if name in ("cnikit", "fault-imds"):
        return check_command([name, *args], where, known_options)
    if name != "python" or args[:1] != ["-m"]:
        return 1
    module, args = args[1], args[2:]
    assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
    if module == "cnikit.containers.dockerd":
        assert args[:2] == ["run", "--"], f"{where}: {' '.join(words)}"
        return 1 + check_command(args[2:], where, known_options)
    if module == "pytest":
        options = {w.split("=")[0] for w in args if w.startswith("-")}
        assert options <= known_options(), f"{where}: pytest has no {options - known_options()}"
    return 1


def test_the_commands_named_exist_and_take_their_arguments():
    known: list[set[str]] = []

    def known_options() -> set[str]:
        if not known:
            known.append(pytest_options())
        return known[0]

    checked = sum(check_command(words, where, known_options)
                  for where, block in BLOCKS for words in commands(block))
    assert checked >= 30
