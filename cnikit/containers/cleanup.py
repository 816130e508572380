"""Removing the kit's containers that dead runs left behind, and on request its images.

Every container the kit starts carries the label io.cnikit.kit and its run's id in
io.cnikit.run; one whose run is no longer alive (runtime.live_run_ids) is removed. A live
run's containers and anything without the kit's label are never touched.

Images live in the kit's own podman storage (podman.STORAGE_ROOT), so removing all of
them touches nothing else; it is refused while a kit container is still there.
"""

from __future__ import annotations

from cnikit import runtime
from cnikit.containers.podman import LABEL_KIT, LABEL_RUN, Podman
from cnikit.errors import EnvironmentProblem


def kit_containers(engine) -> list[tuple[str, str]]:
    """(name, run id) of every container with the kit's label."""
    if not isinstance(engine, Podman):  # the Docker runtime asks the Engine API
        return engine.kit_containers()
    label = f'index .Labels "{LABEL_RUN}"'  # podman's Labels is a map
    out = engine.out("ps", "-a", "--filter", f"label={LABEL_KIT}", "--format",
                     f"{{{{.Names}}}}\t{{{{{label}}}}}", check=False)
    rows = []
    for line in out.splitlines():
        name, _, rid = line.partition("\t")
        if name:
            rows.append((name.strip(), rid.strip()))
    return rows


def remove_dead_containers(engine=None, dry_run: bool = False,
                           only: set[str] | None = None) -> list[str]:
    """Remove the kit's containers whose run is dead (of those runs alone, with `only`);
    returns their names."""
    engine = engine or Podman()
    if (reason := engine.available()) is not None:
        if isinstance(engine, Podman):
            return []  # no podman here: nothing of the kit's can be in it
        raise EnvironmentProblem(reason)
    live = runtime.live_run_ids()
    dead = [name for name, rid in kit_containers(engine)
            if rid not in live and (only is None or rid in only)]
    # Re-check right before removing: a run may have claimed its id meanwhile.
    live = runtime.live_run_ids()
    dead = [name for name, rid in kit_containers(engine) if name in dead and rid not in live]
    if dead and not dry_run:
        if isinstance(engine, Podman):
            engine.run("rm", "-f", "--time", "0", *dead, check=False)
        else:
            # One the engine would not remove is said, not counted as removed: a busy
            # engine once kept a dead run's container while cleanup reported success.
            failed = []
            for name in dead:
                try:
                    engine.remove(name)
                except EnvironmentProblem as e:
                    failed.append(f"{name} ({e})")
            if failed:
                raise EnvironmentProblem(f"could not remove {', '.join(failed)}")
    return dead


def remove_images(engine=None, dry_run: bool = False) -> tuple[list[str], str | None]:
    """Remove every image in the kit's podman storage: (image ids, reason it did not).
    dry_run: the ids it would remove now, or the reason it would not."""
    engine = engine or Podman()
    reason = engine.available()
    if reason is not None:
        return [], reason
    if kit_containers(engine):
        return [], "kit containers still exist (a live run?)"
    ids = engine.out("images", "-q", "--no-trunc", check=False).split()
    if not ids or dry_run:
        return ids, None
    engine.run("rmi", "--force", *ids, check=False)
    left = set(engine.out("images", "-q", "--no-trunc", check=False).split())
    return [i for i in ids if i not in left], None
