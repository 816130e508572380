"""cnikit-cni: a CNI plugin (spec 1.0.0) that is a thin client of the cnikit daemon.

Executed once per pod, so it imports nothing beyond json/os/socket/sys: the daemon
allocates the IP and (by default) wires the pod with cnikit.fabric.wiring, already
loaded in its process. With `"wiring": "plugin"` in the netconf the plugin wires the
pod itself (same code, paid for with the import). ADD gives back its IP when wiring
fails; DEL tolerates what is already gone; CHECK compares against prevResult. Inputs are
checked as libcni's skel (so ptp) checks them, before the daemon is asked: the network
name and CNI_CONTAINERID (SPEC.md's characters), CNI_IFNAME, CHECK only from 0.4.0.

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

SUPPORTED = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]
CHECK_SINCE = "0.4.0"  # CHECK came with spec 0.4.0: older configs get code 1, as libcni's skel
DEFAULT_SOCKET = "/run/cnikit/daemon/ipamd.sock"
GATEWAY = "169.254.1.1"
GATEWAY6 = "fe80::1"  # an IPv6 pod's next hop (upstream's, on every pod)

# CNI spec error codes
E_VERSION, E_FIELD, E_UNKNOWN_CONTAINER, E_ENV, E_IO, E_DECODE, E_CONFIG, E_TRY_AGAIN = (
    1, 2, 3, 4, 5, 6, 7, 11)


class CniError(Exception):
    def __init__(self, code, msg, details=""):
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details


def valid_name(s):
    """The spec's rule for a container ID and a network name, as libcni checks it
    (`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`); str methods, because importing `re` (and enum
    with it) costs several ms per pod."""
    return (s.isascii() and s[:1].isalnum()
            and (s[1:].replace("_", "").replace(".", "").replace("-", "") or "a").isalnum())


def _check_ifname(name):
    # libcni's ValidateInterfaceName, i.e. what the kernel accepts (dev_valid_name).
    if len(name.encode()) > 15 or name in (".", "..") or "/" in name or ":" in name \
            or any(c.isspace() for c in name):
        raise CniError(E_ENV, f"interface name {name!r} is not one the kernel accepts", name)


def _call(sock_path, req, timeout=60.0):
    # Here, not at the top: it loads _socket, which VERSION does not need.
    from cnikit.unixcall import exchange

    try:
        buf = exchange(sock_path, json.dumps(req).encode() + b"\n", timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        raise CniError(E_TRY_AGAIN, "cnikit daemon is not running", sock_path) from None
    except OSError as e:
        raise CniError(E_TRY_AGAIN, f"cnikit daemon: {e.strerror or e}", sock_path) from None
    try:
        resp = json.loads(buf)
    except ValueError:
        raise CniError(E_TRY_AGAIN, "cnikit daemon closed the connection", sock_path) from None
    if not resp.get("ok"):
        raise CniError(int(resp.get("code") or E_IO), str(resp.get("error") or "daemon error"))
    return resp


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
        raise CniError(E_ENV, f"{name} is required")
    return v


def _load_conf(raw):
    try:
        conf = json.loads(raw)
    except ValueError as e:
        raise CniError(E_DECODE, "network configuration is not JSON", str(e)) from None
    if not isinstance(conf, dict):
        raise CniError(E_DECODE, "network configuration is not a JSON object")
    ver = conf.get("cniVersion")
    if not isinstance(ver, str) or not ver:
        raise CniError(E_CONFIG, "cniVersion is required")
    if ver not in SUPPORTED:
        raise CniError(E_VERSION, f"cniVersion {ver} is not supported ({', '.join(SUPPORTED)})")
    name = conf.get("name")
    if not isinstance(name, str) or not name:
        raise CniError(E_CONFIG, "missing network name")
    if not valid_name(name):
        raise CniError(E_CONFIG, "invalid characters found in network name", name)
    if conf.get("wiring", "daemon") not in ("daemon", "plugin"):
        raise CniError(E_FIELD, "wiring must be \"daemon\" or \"plugin\"")
    if "mtu" in conf and (not isinstance(conf["mtu"], int) or not 68 <= conf["mtu"] <= 65535):
        raise CniError(E_FIELD, "mtu must be an integer in 68..65535")
    return conf


def _request(cmd, conf, with_netns=True):
    args = _cni_args(getenv("CNI_ARGS"))
    cid, ifname = _env("CNI_CONTAINERID"), _env("CNI_IFNAME")
    if not valid_name(cid):
        raise CniError(E_ENV, "invalid characters in containerID", cid)
    _check_ifname(ifname)
    req = {
        "cmd": cmd,
        "network": conf["name"],
        "containerID": cid,
        "ifName": ifname,
        "podNamespace": args.get("K8S_POD_NAMESPACE", ""),
        "podName": args.get("K8S_POD_NAME", ""),
        "vethPrefix": conf.get("vethPrefix") or "eni",
        "metadata": {k: v for k, v in (("k8sPodNamespace", args.get("K8S_POD_NAMESPACE")),
                                       ("k8sPodName", args.get("K8S_POD_NAME"))) if v},
    }
    if "mtu" in conf:
        req["mtu"] = conf["mtu"]
    if with_netns and conf.get("wiring", "daemon") == "daemon":
        req["netns"] = getenv("CNI_NETNS")
    return req


def _socket(conf):
    return conf.get("daemonSocket") or getenv("CNIKIT_DAEMON_SOCKET") or DEFAULT_SOCKET


def _local():
    from cnikit.daemon.podnet import PodNet, PodNetError, veth_name

    return PodNet, PodNetError, veth_name


def cmd_add(conf):
    netns = _env("CNI_NETNS")
    req = _request("add", conf)
    sock = _socket(conf)
    resp = _call(sock, req)
    if conf.get("wiring") == "plugin":
        PodNet, PodNetError, veth_name = _local()
        veth = veth_name(req["podNamespace"], req["podName"], req["containerID"], req["vethPrefix"])
        try:
            resp.update(PodNet().add(netns, resp["ip"], veth, req["ifName"], resp["deviceNumber"],
                                     resp.get("router") or "", conf.get("mtu")))
        except PodNetError as e:
            _call(sock, dict(req, cmd="del"))
            raise CniError(e.code, str(e)) from None
    return _result(conf, req, resp, netns)


def _result(conf, req, resp, netns):
    v6 = ":" in resp["ip"]
    gateway = GATEWAY6 if v6 else GATEWAY
    ip = {"address": f"{resp['ip']}/{128 if v6 else 32}", "gateway": gateway, "interface": 1}
    if conf["cniVersion"] != "1.0.0":
        ip["version"] = "6" if v6 else "4"
    result = {
        "cniVersion": conf["cniVersion"],
        "interfaces": [
            {"name": resp.get("hostVeth", ""), "mac": resp.get("hostMac", "")},
            {"name": req["ifName"], "mac": resp.get("podMac", ""), "sandbox": netns},
        ],
        "ips": [ip],
        "routes": [{"dst": "::/0" if v6 else "0.0.0.0/0", "gw": gateway}],
        "dns": conf.get("dns") or {},
    }
    return result


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
        raise CniError(E_CONFIG, "CHECK needs prevResult")
    for ip in prev.get("ips") or []:
        addr = (ip.get("address") or "") if isinstance(ip, dict) else ""
        if addr:
            return addr.split("/")[0]
    raise CniError(E_CONFIG, "prevResult holds no IP")


def cmd_check(conf):
    _env("CNI_NETNS")
    req = _request("check", conf)
    req["expectIp"] = _prev_ip(conf)
    if conf.get("wiring") == "plugin":
        req.pop("netns", None)
        resp = _call(_socket(conf), req)
        PodNet, _, veth_name = _local()
        veth = veth_name(req["podNamespace"], req["podName"], req["containerID"], req["vethPrefix"])
        problem = PodNet().check(getenv("CNI_NETNS"), resp["ip"], veth, req["ifName"])
        if problem:
            raise CniError(100, problem)
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
                raise CniError(E_ENV, f"unknown CNI_COMMAND {cmd!r}" if cmd else "CNI_COMMAND is required")
            conf = _load_conf(sys.stdin.read())
            ver = conf["cniVersion"]
            if cmd == "CHECK" and SUPPORTED.index(ver) < SUPPORTED.index(CHECK_SINCE):
                raise CniError(E_VERSION, "config version does not allow CHECK", ver)
            out = {"ADD": cmd_add, "DEL": cmd_del, "CHECK": cmd_check}[cmd](conf)
    except CniError as e:
        err = {"cniVersion": ver, "code": e.code, "msg": e.msg}
        if e.details:
            err["details"] = e.details
        sys.stdout.write(json.dumps(err) + "\n")
        return 1
    except Exception as e:  # never a traceback on the runtime's stdout
        sys.stdout.write(json.dumps({"cniVersion": ver, "code": 999,
                                     "msg": f"internal error: {type(e).__name__}: {e}"}) + "\n")
        return 1
    if out is not None:
        sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
