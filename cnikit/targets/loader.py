"""A target from its TOML file, checked whole before anything starts.

Every problem is one UsageError line naming the file and the key: unknown keys, missing
required ones, wrong types, bad TOML, a binary that is missing or not executable, a conflist
that cannot be read or is not one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tomllib
from pathlib import Path

from cnikit.errors import UsageError
from cnikit.targets.model import (
    NODE_ONLY,
    ComponentSpec,
    DaemonSpec,
    ObserveSpec,
    PluginSpec,
    ReadySpec,
    Target,
)

TOP = {"name": True, "version": True, "daemon": True, "plugin": True, "observe": False,
       "max_pods": False, "ip_family": False, "component": False, "build": False}
IP_FAMILIES = ("ipv4", "ipv6", "dual")
DAEMON = ("command", "image", "args", "env", "ready")
COMPONENT = {"name": True, "command": True, "env": False, "ready": False}
BUILD = ("files",)
READY = ("socket", "url", "timeout")
PLUGIN = {"binaries": True, "conflist": True}
OBSERVE = ("introspection", "metrics")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class _Checker:
    def __init__(self, path: Path):
        self.path = path
        self.base = path.parent

    def fail(self, key: str, reason: str):
        raise UsageError(f"{self.path}: {key}: {reason}" if key else f"{self.path}: {reason}")

    def table(self, doc, key: str, allowed, required=()) -> dict:
        if not isinstance(doc, dict):
            self.fail(key, "must be a table")
        for k in doc:
            if k not in allowed:
                self.fail(f"{key}.{k}" if key else k,
                          f"unknown key (one of {', '.join(allowed)})")
        for k in required:
            if k not in doc:
                self.fail(f"{key}.{k}" if key else k, "missing (required)")
        return doc

    def string(self, value, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(key, "must be a non-empty string")
        return value

    def strings(self, value, key: str) -> list[str]:
        if not isinstance(value, list) or not value:
            self.fail(key, "must be a non-empty list of strings")
        for i, v in enumerate(value):
            self.string(v, f"{key}[{i}]")
        return value

    def executable(self, ref: str, key: str) -> Path:
        """A path (relative to the target file) or a name on PATH (or beside the kit's Python)."""
        if "/" in ref:
            p = Path(ref) if os.path.isabs(ref) else self.base / ref
            if not p.exists():
                self.fail(key, f"{ref!r}: no such file")
        else:
            found = shutil.which(ref) or shutil.which(ref, path=str(Path(sys.executable).parent))
            if found is None:
                self.fail(key, f"{ref!r} is not on PATH")
            p = Path(found)
        if not p.is_file() or not os.access(p, os.X_OK):
            self.fail(key, f"{p} is not an executable file")
        return p.absolute()


def load_target(path: str | os.PathLike) -> Target:
    """The target described by the TOML file at path; UsageError (one line) when it is bad."""
    path = Path(path)
    c = _Checker(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        c.fail("", f"cannot read: {e.strerror}")
    except UnicodeDecodeError:
        c.fail("", "not valid TOML: not UTF-8 text")
    except tomllib.TOMLDecodeError as e:
        c.fail("", f"not valid TOML: {e}")
    c.table(doc, "", tuple(TOP), [k for k, req in TOP.items() if req])
    name = c.string(doc["name"], "name")
    if not NAME.fullmatch(name):
        c.fail("name", f"{name!r}: only letters, digits, '.', '_' and '-' (it names report "
                       "directories and JUnit classes)")
    version = c.string(doc["version"], "version")
    max_pods = _max_pods(c, doc.get("max_pods"))
    family = c.string(doc.get("ip_family", "ipv4"), "ip_family")
    if family not in IP_FAMILIES:
        c.fail("ip_family", f"{family!r}: one of {', '.join(IP_FAMILIES)}")
    return Target(name=name, version=version, daemon=_daemon(c, doc["daemon"]),
                  plugin=_plugin(c, doc["plugin"]), observe=_observe(c, doc.get("observe", {})),
                  source=path.absolute(), max_pods=max_pods, ip_family=family,
                  components=_components(c, doc.get("component", [])),
                  build_files=_build_files(c, doc.get("build", {})))


def _max_pods(c: _Checker, value) -> int | dict[str, int] | None:
    """Pods a node takes: one number, or a table of instance type -> number (upstream's
    eni-max-pods.txt is per type; the kit's scenarios run m5.large and t3.small nodes)."""
    def count(v, key: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            c.fail(key, "must be a positive whole number (pods a node takes, as kubelet's "
                        "--max-pods)")
        return v

    if value is None:
        return None
    if isinstance(value, dict):
        return {k: count(v, f"max_pods.{k}") for k, v in value.items()}
    return count(value, "max_pods")


def _daemon(c: _Checker, d) -> DaemonSpec:
    c.table(d, "daemon", DAEMON)
    if ("command" in d) == ("image" in d):
        c.fail("daemon.command", "give exactly one of daemon.command and daemon.image")
    command = image = args = None
    if "command" in d:
        argv = c.strings(d["command"], "daemon.command")
        command = (str(c.executable(argv[0], "daemon.command[0]")), *argv[1:])
        if "args" in d:
            c.fail("daemon.args", "only with daemon.image (put arguments in daemon.command)")
    else:
        image = c.string(d["image"], "daemon.image")
        if "args" in d:
            args = tuple(c.strings(d["args"], "daemon.args")) if d["args"] else ()
    return DaemonSpec(command=command, image=image, args=args, env=_env(c, d, "daemon"),
                      ready=_ready(c, d, "daemon"))


def _env(c: _Checker, d: dict, key: str) -> dict[str, str]:
    """`key`.env: NAME = "value" (numbers and booleans as text)."""
    env = {}
    raw_env = d.get("env", {})
    if not isinstance(raw_env, dict):
        c.fail(f"{key}.env", "must be a table of NAME = \"value\"")
    for k, v in raw_env.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        if not isinstance(v, str | int | float):
            c.fail(f"{key}.env.{k}", "must be a string (or a number)")
        env[k] = str(v)
    return env


def _ready(c: _Checker, d: dict, key: str) -> ReadySpec | None:
    if "ready" not in d:
        return None
    r = c.table(d["ready"], f"{key}.ready", READY)
    if ("socket" in r) == ("url" in r):
        c.fail(f"{key}.ready", "give exactly one of socket and url")
    timeout = r.get("timeout", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        c.fail(f"{key}.ready.timeout", "must be a positive number of seconds")
    url = None
    if "url" in r:
        url = c.string(r["url"], f"{key}.ready.url")
        if not url.startswith(("http://", "https://")):
            c.fail(f"{key}.ready.url", f"{url!r} is not an http(s) URL")
    return ReadySpec(socket=c.string(r["socket"], f"{key}.ready.socket") if "socket" in r
                     else None, url=url, timeout=float(timeout))


def _components(c: _Checker, raw) -> tuple[ComponentSpec, ...]:
    """[[component]]: each a name, a command, and optionally env and ready, as a daemon's.
    A component runs on no node, so a node's placeholders in it are refused."""
    if not isinstance(raw, list):
        c.fail("component", "must be an array of tables ([[component]])")
    out: list[ComponentSpec] = []
    for i, d in enumerate(raw):
        key = f"component[{i}]"
        c.table(d, key, tuple(COMPONENT), [k for k, req in COMPONENT.items() if req])
        name = c.string(d["name"], f"{key}.name")
        if not NAME.fullmatch(name):
            c.fail(f"{key}.name", f"{name!r}: only letters, digits, '.', '_' and '-' (the "
                                  "nemesis names it, and its state directory)")
        if any(o.name == name for o in out):
            c.fail(f"{key}.name", f"{name!r} is the name of another component")
        argv = c.strings(d["command"], f"{key}.command")
        command = (str(c.executable(argv[0], f"{key}.command[0]")), *argv[1:])
        spec = ComponentSpec(name=name, command=command, env=_env(c, d, key),
                             ready=_ready(c, d, key))
        _no_node_placeholders(c, key, [*argv[1:], *spec.env.values(),
                                       *(vars(spec.ready).values() if spec.ready else ())])
        out.append(spec)
    return tuple(out)


def _no_node_placeholders(c: _Checker, key: str, values) -> None:
    for v in values:
        found = [p for p in NODE_ONLY if isinstance(v, str) and f"{{{p}}}" in v]
        if found:
            c.fail(key, f"{{{found[0]}}} is a node's placeholder: a component runs once per "
                        "run, on no node")


def _build_files(c: _Checker, b) -> dict[str, Path]:
    """[build] files: globs relative to the target file, every file they match hashed into
    the certificate; a glob that matches no file is refused (a typo would hash nothing)."""
    c.table(b, "build", BUILD)
    if "files" not in b:
        return {}
    out: dict[str, Path] = {}
    for i, pattern in enumerate(c.strings(b["files"], "build.files")):
        if os.path.isabs(pattern) or ".." in Path(pattern).parts:
            c.fail(f"build.files[{i}]", f"{pattern!r}: a glob relative to the target file, "
                                        "inside its directory")
        found = sorted(p for p in c.base.glob(pattern) if p.is_file())
        if not found:
            c.fail(f"build.files[{i}]", f"{pattern!r} matches no file under {c.base}")
        for p in found:
            out[p.relative_to(c.base).as_posix()] = p.absolute()
    return out


def _plugin(c: _Checker, p) -> PluginSpec:
    c.table(p, "plugin", tuple(PLUGIN), [k for k, req in PLUGIN.items() if req])
    binaries: dict[str, Path] = {}
    for i, ref in enumerate(c.strings(p["binaries"], "plugin.binaries")):
        f = c.executable(ref, f"plugin.binaries[{i}]")
        binaries[Path(ref).name] = f
    raw, conflist_file = p["conflist"], None
    if isinstance(raw, str):
        conflist_file = (c.base / raw if not os.path.isabs(raw) else Path(raw)).absolute()
        try:
            raw = json.loads(conflist_file.read_text())
        except OSError as e:
            c.fail("plugin.conflist", f"cannot read {conflist_file}: {e.strerror}")
        except ValueError as e:
            c.fail("plugin.conflist", f"{conflist_file} is not JSON: {e}")
    _check_conflist(c, raw, binaries)
    return PluginSpec(binaries=binaries, conflist=raw, conflist_file=conflist_file)


def _check_conflist(c: _Checker, conf, binaries: dict[str, Path]) -> None:
    key = "plugin.conflist"
    if not isinstance(conf, dict):
        c.fail(key, "must be a table (or the path of a .conflist file)")
    for k in ("cniVersion", "name"):
        if not isinstance(conf.get(k), str) or not conf.get(k):
            c.fail(f"{key}.{k}", "missing (a string is required)")
    plugins = conf.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        c.fail(f"{key}.plugins", "must be a non-empty list of plugin configurations")
    for i, pl in enumerate(plugins):
        if not isinstance(pl, dict):
            c.fail(f"{key}.plugins[{i}]", "must be a table")
        kinds = [(f"{key}.plugins[{i}].type", pl.get("type"))]
        if isinstance(pl.get("ipam"), dict) and "type" in pl["ipam"]:
            kinds.append((f"{key}.plugins[{i}].ipam.type", pl["ipam"]["type"]))
        for k, kind in kinds:
            if not isinstance(kind, str) or not kind:
                c.fail(k, "missing (a string is required)")
            if kind not in binaries:
                c.fail(k, f"{kind!r} is not among plugin.binaries ({', '.join(binaries)})")


def _observe(c: _Checker, o) -> ObserveSpec:
    c.table(o, "observe", OBSERVE)
    ports = {}
    for k in OBSERVE:
        if k in o:
            v = o[k]
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
                c.fail(f"observe.{k}", "must be a TCP port (1..65535)")
            ports[k] = v
    return ObserveSpec(**ports)
