"""Executing CNI plugins exactly as a container runtime does (CNI spec 1.0.0).

The plugin binary named by the config's `type` is looked up in CNI_PATH and executed with
CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_PATH (and CNI_ARGS) in its
environment and the network configuration on stdin, inside the node's namespace (where a
runtime's plugins run). A conflist runs its plugins in order for ADD, each given the
previous result, in reverse for DEL, and in order for CHECK, each given the ADD's result.
The result is parsed and checked against the pod namespace: every IP it reports on the
sandbox interface must be there.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from cnikit.errors import CnikitError
from cnikit.fabric import cleanup, netns, wiring


class CniError(CnikitError):
    """A plugin failed (its error JSON, one line) or its result does not match the namespace."""

    exit_code = 1

    def __init__(self, message: str, code: int | None = None, details: str = "",
                 status: int | None = None):
        super().__init__(message)
        self.code = code
        self.details = details
        self.status = status  # the plugin's exit status; None: the plugin never answered


class CniResult:
    def __init__(self, raw: dict, netns_path: str, ifname: str):
        self.raw = raw
        ifaces = raw.get("interfaces") or []
        self.interfaces = ifaces
        self.ips: list[str] = []
        for ip in raw.get("ips") or []:
            idx = ip.get("interface")
            if idx is None or (0 <= idx < len(ifaces) and ifaces[idx].get("sandbox")):
                self.ips.append(ip["address"])
        self.sandbox_iface = next((i for i in ifaces if i.get("sandbox") == netns_path
                                   and i.get("name") == ifname), None)


def _plugin_list(config: dict) -> list[dict]:
    if "plugins" in config:
        base = {"cniVersion": config.get("cniVersion", "1.0.0"), "name": config.get("name", "")}
        return [{**base, **p} for p in config["plugins"]]
    return [config]


def find_plugin(kind: str, cni_path: list[str]) -> str:
    for d in cni_path:
        p = Path(d) / kind
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    raise CniError(f"CNI plugin '{kind}' not found in CNI_PATH {':'.join(cni_path)}")


class CniSandbox:
    """One pod sandbox as a runtime sees it: ADD once, DEL (idempotent) any number of times."""

    def __init__(self, config: dict, cni_path: list[str] | str, container_id: str,
                 netns_path: str, ifname: str = "eth0", args: dict | None = None,
                 timeout: float = 30.0, runner_ns: str | None = None,
                 run_dir: Path | None = None, env: dict[str, str] | None = None):
        self.config = config
        self.cni_path = cni_path.split(":") if isinstance(cni_path, str) else list(cni_path)
        self.container_id = container_id
        self.netns_path = netns_path
        self.ifname = ifname
        self.args = args or {}
        self.timeout = timeout
        self.runner_ns = runner_ns
        self.run_dir = run_dir
        # The runtime's own environment, which libcni hands every plugin under the CNI_*
        # variables (os.environ when not given): the kit's EC2 and IMDS variables reach a
        # plugin that calls EC2 itself this way, as they reach it on a real node.
        self.env = dict(os.environ if env is None else env)
        self.result: CniResult | None = None

    def _spawn(self, binary: str, env: dict) -> subprocess.Popen:
        """The plugin as the runtime on the node runs it: in the node's network namespace
        (`runner_ns`) when there is one. A child starts in the namespace of the thread that
        forks it, so this thread enters it for the fork: the same as `nsenter --net`, one
        exec fewer at every ADD and DEL (nsenter took 1 % of make test's CPU)."""
        def popen() -> subprocess.Popen:
            return subprocess.Popen([binary], env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        if not self.runner_ns:
            return popen()
        try:
            with netns.entered(self.runner_ns):
                return popen()
        except FileNotFoundError as e:
            if e.filename == binary:
                raise
            raise CniError(f"the node's network namespace {self.runner_ns} is gone") from None

    def _exec(self, command: str, conf: dict, netns_path: str | None = None) -> dict | None:
        env = {
            **{k: v for k, v in self.env.items() if not k.startswith("CNI_")},
            "PATH": self.env.get("PATH") or os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": self.container_id,
            "CNI_NETNS": self.netns_path if netns_path is None else netns_path,
            "CNI_IFNAME": self.ifname,
            "CNI_PATH": ":".join(self.cni_path),
        }
        if self.args:
            env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in self.args.items())
        binary = find_plugin(conf["type"], self.cni_path)
        proc = self._spawn(binary, env)
        if self.run_dir is not None:
            cleanup.record_process(self.run_dir, proc.pid)
        try:
            out, err = proc.communicate(json.dumps(conf).encode(), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise CniError(f"{conf['type']} {command} timed out after {self.timeout}s") from None
        if proc.returncode != 0:
            try:
                e = json.loads(out)
                msg, code, details = e.get("msg", ""), e.get("code"), e.get("details", "")
            except ValueError:
                msg, code, details = (err or out).decode(errors="replace").strip(), None, ""
            raise CniError(f"{conf['type']} {command} failed (code {code}): {msg}", code, details,
                           proc.returncode)
        if command != "ADD":
            return None
        try:
            return json.loads(out)
        except ValueError:
            raise CniError(f"{conf['type']} ADD printed no JSON result: {out[:200]!r}") from None

    def add(self, pod_nl=None) -> CniResult:
        prev = None
        for conf in _plugin_list(self.config):
            if prev is not None:
                conf = {**conf, "prevResult": prev}
            prev = self._exec("ADD", conf)
        result = CniResult(prev or {}, self.netns_path, self.ifname)
        self.check_against_namespace(result, pod_nl)
        self.result = result
        return result

    def delete(self, netns_path: str | None = None, prev: CniResult | None = None) -> None:
        """DEL, each plugin given the sandbox's last result as prevResult (`prev`: another
        result, e.g. a runtime replaying an old one). `netns_path` overrides CNI_NETNS: ""
        for a runtime that has already lost the namespace (CNI spec: allowed for DEL)."""
        errors: list[CniError] = []
        prev = self.result if prev is None else prev
        for conf in reversed(_plugin_list(self.config)):
            if prev is not None:
                conf = {**conf, "prevResult": prev.raw}
            try:
                self._exec("DEL", conf, netns_path)
            except CniError as e:
                errors.append(e)
        if errors:
            first = errors[0]
            raise CniError("; ".join(str(e) for e in errors), first.code, first.details,
                           first.status)

    @property
    def checks(self) -> bool:
        """Whether the network's cniVersion has CHECK (spec 0.4.0 and later)."""
        version = str(self.config.get("cniVersion") or "0.0.0")
        try:
            return tuple(int(x) for x in version.split(".")) >= (0, 4, 0)
        except ValueError:
            return False

    def check(self, prev: CniResult | None = None) -> None:
        """CHECK, each plugin in order given the sandbox's last ADD result as prevResult
        (libcni hands every plugin of the list the cached result). CniError when a plugin
        says the sandbox is not as the ADD left it."""
        prev = self.result if prev is None else prev
        for conf in _plugin_list(self.config):
            if prev is not None:
                conf = {**conf, "prevResult": prev.raw}
            self._exec("CHECK", conf)

    def check_against_namespace(self, result: CniResult, pod_nl=None) -> None:
        if result.raw.get("cniVersion") is None:
            raise CniError("CNI result has no cniVersion")
        if not result.ips:
            raise CniError("CNI result has no IP for the sandbox")
        nl = pod_nl or wiring.netlink_in(self.netns_path)
        try:
            view = wiring.pod_view(nl, self.ifname)
        finally:
            if pod_nl is None:
                nl.close()
        if not view["present"]:
            raise CniError(f"{self.ifname} is missing in {self.netns_path} after ADD")
        held = {a.split("/")[0] for a in view["ips"]}
        missing = [ip for ip in result.ips if ip.split("/")[0] not in held]
        if missing:
            raise CniError(f"CNI result reports {missing} but {self.ifname} holds {view['ips']}")
        iface = result.sandbox_iface
        if iface and iface.get("mac") and iface["mac"].lower() != (view["mac"] or "").lower():
            raise CniError(f"CNI result MAC {iface['mac']} != {self.ifname} MAC {view['mac']}")
