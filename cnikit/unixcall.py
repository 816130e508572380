"""One exchange on a daemon's unix socket: a JSON line out, the reply line back.

The wire the reference daemon serves (cnikit.daemon.server) and three clients speak: the
CNI plugin (cnikit.plugin.main), the kit's own calls (cnikit.daemon.server.request) and the
readiness ping (cnikit.daemon.handle.ping). The plugin runs once per pod, so this module
imports `_socket` and nothing else: `socket` imports enum (~4 ms per pod), and each caller
encodes and decodes with its own JSON module (the plugin's tinyjson, the kit's json).
"""

import _socket


def exchange(path, line: bytes, timeout: float) -> bytes:
    """Send `line` (a JSON object and a newline) to the unix socket at `path` (a str); the
    reply up to its newline, or what came before the daemon closed the connection. OSError (a
    TimeoutError too) as the socket raises it."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(line)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    return buf
