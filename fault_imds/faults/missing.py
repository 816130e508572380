from __future__ import annotations

from dataclasses import replace

from fault_imds.faults.base import Chaos, ImdsFault
from fault_imds.faults.holding import ADDRESS_LISTS


class Missing(ImdsFault):
    """Leave out the targeted entries: IPs or prefixes (`ips`, IPv4 or IPv6), a whole MAC,
    paths, or an instance's whole tree."""

    kind = "missing"
    stage = "content"
    order = 30  # last: an entry left out stays out whatever a hold would show
    description = "leave out the targeted IPs, prefixes, MAC, paths or instance"
    chaos = Chaos(rank=2, aim="interface")

    def apply(self, view) -> None:
        t = self.target
        for iid in list(view.models):
            if t.instance_id is not None and iid != t.instance_id:
                continue
            m = view.models[iid]
            if t.path is not None:
                view.leaf_op(iid, self._drop_paths)
            elif t.ips is not None:
                gone = set(t.ips)
                enis = [
                    replace(e, **{name: tuple(x for x in getattr(e, name) if x not in gone)
                                  for name in ADDRESS_LISTS})
                    if t.mac is None or e.mac == t.mac
                    else e
                    for e in m.enis
                ]
                view.models[iid] = m.with_enis(enis)
            elif t.mac is not None:
                view.models[iid] = m.with_enis(e for e in m.enis if e.mac != t.mac)
            else:
                del view.models[iid]

    def _drop_paths(self, leaves: dict[str, str]) -> None:
        for p in [p for p in leaves if self.target.path_matches(p)]:
            del leaves[p]
