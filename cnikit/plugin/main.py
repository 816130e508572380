"""cnikit-cni: a CNI plugin (spec 1.0.0) that is a thin client of the cnikit daemon.

Executed once per pod, so it imports nothing beyond json/os/socket/sys: the daemon
allocates the IP and (by default) wires the pod with cnikit.fabric.wiring, already
loaded in its process. With `"wiring": "plugin"` in the netconf the plugin wires the
pod itself (same code, paid for with the import). ADD gives back its IP when wiring
fails; DEL tolerates what is already gone; CHECK compares against prevResult. Inputs are
checked as libcni's skel (so ptp) checks them, before the daemon is asked: the network
name and CNI_CONTAINERID (SPEC.md's characters), CNI_IFNAME, CHECK only from 0.4.0.

compiled/main.go is the same plugin, compiled: both read compiled/constants.json (versions,
defaults, every error's code and words), and tests/unit/plugin_cases.json, run against each
build, says what each input gets.

Netconf keys beyond the spec: `daemonSocket` (default $CNIKIT_DAEMON_SOCKET or
/run/cnikit/daemon/ipamd.sock), `wiring` ("daemon" | "plugin"), `mtu`, `vethPrefix`.
"""

import posix
import sys

from cnikit.plugin import tinyjson as json


def getenv(name, default=""):
    # posix.environ, not os.environ: `os` is not loaded under -S and costs ~1.5 ms to import.
    v = posix.environ.get(name.encode())
    return v.decode("utf-8", "surrogateescape") if v is not None else default


def _constants():
    # One file both builds read (main.go embeds it): versions, defaults, error codes, words.
    with open(__file__.rpartition("/")[0] + "/compiled/constants.json", "rb") as f:
        return json.loads(f.read())


_C = _constants()
SUPPORTED = _C["supportedVersions"]
CHECK_SINCE = _C["checkSince"]  # CHECK came with spec 0.4.0: older configs get code 1, as libcni's skel
DEFAULT_SOCKET = _C["defaultSocket"]
GATEWAY = _C["gateway"]
GATEWAY6 = _C["gateway6"]  # an IPv6 pod's next hop (upstream's, on every pod)


class CniError(Exception):
    def __init__(self, code, msg, details=""):
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details


def fail(key, details="", **fill):
    """The error constants.json names `key`, its message's {name}s filled in from `fill`."""
    e = _C["errors"][key]
    msg = e["msg"].format(**fill) if fill else e["msg"]
    return CniError(e["code"], msg, details)


def valid_name(s):
    """The spec's rule for a container ID and a network name, as libcni checks it
    (`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`); str methods, because importing `re` (and enum
    with it) costs several ms per pod."""
    return (s.isascii() and s[:1].isalnum()
            and (s[1:].replace("_", "").replace(".", "").replace("-", "") or "a").isalnum())


def _check_ifname(name):
    # libcni's ValidateInterfaceName, i.e. what the kernel accepts (dev_valid_name). Its
    # whitespace is Go's unicode.IsSpace, which unlike str.isspace leaves out \x1c-\x1f.
    if len(name.encode()) > 15 or name in (".", "..") or "/" in name or ":" in name \
            or any(c.isspace() and c not in "\x1c\x1d\x1e\x1f" for c in name):
        raise fail("bad_ifname", name)


def _call(sock_path, req, timeout=60.0):
    # Here, not at the top: it loads _socket, which VERSION does not need.
    from cnikit.unixcall import exchange

    try:
        buf = exchange(sock_path, json.dumps(req).encode() + b"\n", timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        raise fail("daemon_down", sock_path) from None
    except OSError as e:
        # The system's words in lower case, as Go's syscall package has them.
        reason = e.strerror or str(e)
        raise fail("daemon_failed", sock_path, reason=reason[:1].lower() + reason[1:]) from None
    if not buf.strip():
        raise fail("daemon_hung_up", sock_path)
    try:
        resp = json.loads(buf)
    except ValueError:
        resp = None
    if not isinstance(resp, dict):
        raise fail("daemon_garbled", sock_path)
    if resp.get("ok") is not True:
        # The daemon's own code and words when it gave them, as an integer and a string.
        err = fail("daemon_refused")
        code, words = resp.get("code"), resp.get("error")
        if type(code) is int and code >= 1:
            err.code = code
        if isinstance(words, str) and words:
            err.msg = words
        raise err
    return resp


def _ip(resp):
    ip = resp.get("ip")
    if not isinstance(ip, str) or not ip:
        raise fail("daemon_no_ip")
    return ip


def _text(d, key):
    v = d.get(key)
    return v if isinstance(v, str) else ""


def _cni_args(raw):
    out = {}
    for part in (raw or "").split(";"):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _env(name, required=True):
    v = getenv(name)
    if required and not v:
        raise fail("env_required", name=name)
    return v


def _load_conf(raw):
    try:
        conf = json.loads(raw)
    except ValueError as e:
        raise fail("not_json", str(e)) from None
    if not isinstance(conf, dict):
        raise fail("not_object")
    ver = conf.get("cniVersion")
    if not isinstance(ver, str) or not ver:
        raise fail("no_version")
    if ver not in SUPPORTED:
        raise fail("unsupported_version", version=ver, supported=", ".join(SUPPORTED))
    name = conf.get("name")
    if not isinstance(name, str) or not name:
        raise fail("no_name")
    if not valid_name(name):
        raise fail("bad_name", name)
    if conf.get("wiring", "daemon") not in ("daemon", "plugin"):
        raise fail("bad_wiring")
    if "mtu" in conf and (type(conf["mtu"]) is not int or not 68 <= conf["mtu"] <= 65535):
        raise fail("bad_mtu")
    return conf


def _request(cmd, conf, with_netns=True):
    args = _cni_args(getenv("CNI_ARGS"))
    cid, ifname = _env("CNI_CONTAINERID"), _env("CNI_IFNAME")
    if not valid_name(cid):
        raise fail("bad_container_id", cid)
    _check_ifname(ifname)
    req = {
        "cmd": cmd,
        "network": conf["name"],
        "containerID": cid,
        "ifName": ifname,
        "podNamespace": args.get("K8S_POD_NAMESPACE", ""),
        "podName": args.get("K8S_POD_NAME", ""),
        "vethPrefix": _text(conf, "vethPrefix") or "eni",
        "metadata": {k: v for k, v in (("k8sPodNamespace", args.get("K8S_POD_NAMESPACE")),
                                       ("k8sPodName", args.get("K8S_POD_NAME"))) if v},
    }
    if "mtu" in conf:
        req["mtu"] = conf["mtu"]
    if with_netns and conf.get("wiring", "daemon") == "daemon":
        req["netns"] = getenv("CNI_NETNS")
    return req


def _socket(conf):
    return _text(conf, "daemonSocket") or getenv("CNIKIT_DAEMON_SOCKET") or DEFAULT_SOCKET


def _local():
    from cnikit.daemon.podnet import PodNet, PodNetError, veth_name

    return PodNet, PodNetError, veth_name


def cmd_add(conf):
    netns = _env("CNI_NETNS")
    req = _request("add", conf)
    sock = _socket(conf)
    resp = _call(sock, req)
    ip = _ip(resp)
    if conf.get("wiring") == "plugin":
        PodNet, PodNetError, veth_name = _local()
        veth = veth_name(req["podNamespace"], req["podName"], req["containerID"], req["vethPrefix"])
        try:
            resp.update(PodNet().add(netns, ip, veth, req["ifName"], resp["deviceNumber"],
                                     resp.get("router") or "", conf.get("mtu")))
        except PodNetError as e:
            _call(sock, dict(req, cmd="del"))
            raise CniError(e.code, str(e)) from None
    return _result(conf, req, resp, ip, netns)


def _result(conf, req, resp, addr, netns):
    v6 = ":" in addr
    gateway = GATEWAY6 if v6 else GATEWAY
    ip = {"address": f"{addr}/{128 if v6 else 32}", "gateway": gateway, "interface": 1}
    if conf["cniVersion"] != "1.0.0":
        ip["version"] = "6" if v6 else "4"
    dns = conf.get("dns")
    return {
        "cniVersion": conf["cniVersion"],
        "interfaces": [
            {"name": _text(resp, "hostVeth"), "mac": _text(resp, "hostMac")},
            {"name": req["ifName"], "mac": _text(resp, "podMac"), "sandbox": netns},
        ],
        "ips": [ip],
        "routes": [{"dst": "::/0" if v6 else "0.0.0.0/0", "gw": gateway}],
        "dns": dns if isinstance(dns, dict) else {},
    }


def cmd_del(conf):
    req = _request("del", conf)
    # The address the runtime's prevResult names, as upstream's DelNetworkRequest carries it
    # (IPv4Addr): a hint only. A DEL frees what its sandbox holds, never an address by
    # itself: a replayed DEL's prevResult may name an address another pod holds now
    # (cilium #10065).
    prev_ip = _prev_ip_or_none(conf)
    if prev_ip:
        req["prevIp"] = prev_ip
    resp = _call(_socket(conf), req)
    if conf.get("wiring") == "plugin":
        PodNet, PodNetError, veth_name = _local()
        veth = veth_name(req["podNamespace"], req["podName"], req["containerID"], req["vethPrefix"])
        try:
            PodNet().delete(getenv("CNI_NETNS") or None, resp.get("ip"), veth,
                            resp.get("deviceNumber"))
        except PodNetError as e:
            raise CniError(e.code, str(e)) from None
    return None


def _prev_ip_or_none(conf):
    try:
        return _prev_ip(conf)
    except CniError:
        return None


def _prev_ip(conf):
    prev = conf.get("prevResult")
    if not isinstance(prev, dict):
        raise fail("no_prev_result")
    ips = prev.get("ips")
    for ip in ips if isinstance(ips, list) else []:
        addr = ip.get("address") if isinstance(ip, dict) else None
        if isinstance(addr, str) and addr:
            return addr.split("/")[0]
    raise fail("prev_result_no_ip")


def cmd_check(conf):
    _env("CNI_NETNS")
    req = _request("check", conf)
    req["expectIp"] = _prev_ip(conf)
    if conf.get("wiring") == "plugin":
        req.pop("netns", None)
        resp = _call(_socket(conf), req)
        PodNet, _, veth_name = _local()
        veth = veth_name(req["podNamespace"], req["podName"], req["containerID"], req["vethPrefix"])
        problem = PodNet().check(getenv("CNI_NETNS"), _ip(resp), veth, req["ifName"])
        if problem:
            raise fail("pod_check_failed", problem=problem)
    else:
        _call(_socket(conf), req)
    return None


def main(argv=None):
    cmd = getenv("CNI_COMMAND")
    ver = "1.0.0"
    try:
        if cmd == "VERSION":
            out = {"cniVersion": "1.0.0", "supportedVersions": SUPPORTED}
        else:
            if cmd not in ("ADD", "DEL", "CHECK"):
                raise fail("unknown_command", cmd) if cmd else fail("no_command")
            conf = _load_conf(sys.stdin.read())
            ver = conf["cniVersion"]
            if cmd == "CHECK" and SUPPORTED.index(ver) < SUPPORTED.index(CHECK_SINCE):
                raise fail("check_not_allowed", ver)
            out = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check}[cmd](conf)
    except CniError as e:
        err = {"cniVersion": ver, "code": e.code, "msg": e.msg}
        if e.details:
            err["details"] = e.details
        sys.stdout.write(json.dumps(err) + "\n")
        return 1
    except Exception as e:  # never a traceback on the runtime's stdout
        err = fail("internal", reason=f"{type(e).__name__}: {e}")
        sys.stdout.write(json.dumps({"cniVersion": ver, "code": err.code, "msg": err.msg}) + "\n")
        return 1
    if out is not None:
        sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
