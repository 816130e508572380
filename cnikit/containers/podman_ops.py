"""Docker's container operations as podman commands (the daemon's containers under podman)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cnikit.containers.container_ops import remove_retrying
from cnikit.containers.podman import Podman

if TYPE_CHECKING:
    from cnikit.containers.container_daemon import ContainerDaemon


class PodmanCli:
    """Docker's container operations as podman commands: podman runs with the kit's own
    configuration and storage, and writes the daemon's log where tail() reads it."""

    def __init__(self, podman: Podman):
        self.podman = podman

    def run_container(self, daemon: ContainerDaemon) -> tuple[str, int | None]:
        cid = self.podman.out(*daemon.command())
        info = self.podman.out("inspect", "--format", "{{.State.Pid}}", cid)
        return cid, int(info) if info.isdigit() and int(info) > 0 else None

    def kill(self, name: str, sig: int) -> None:
        self.podman.run("kill", "--signal", str(int(sig)), name, check=False)

    def exit_code(self, name: str) -> int | None:
        code = self.podman.out("inspect", "--format", "{{.State.ExitCode}}", name, check=False)
        return int(code) if code.lstrip("-").isdigit() else None

    def remove(self, name: str) -> None:
        remove_retrying(lambda: self.podman.run("rm", "-f", "--ignore", "--time", "0", name),
                         lambda: self.podman.run("wait", "--interval", "50ms", name, check=False,
                                                 timeout=10))

    def logs(self, daemon: ContainerDaemon, lines: int) -> str:
        try:
            text = daemon.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        # k8s-file lines: "<time> stdout F <text>"
        return "\n".join(line.split(" ", 3)[-1] for line in text[-lines:])

    def ensure_image(self) -> str:
        from cnikit.containers.image import ensure_image

        return ensure_image(self.podman)

    def remove_dead_containers(self) -> list[str]:
        from cnikit.containers.cleanup import remove_dead_containers

        return remove_dead_containers(self.podman)
