"""Holding targeted entries equal to a reference view: what `stale` and `lag` share.

`stale`'s reference is what was served when it began; `lag`'s is EC2 as it was N s ago.
Granularity follows the target: a path glob holds rendered entries, `ips` hold the
membership of those addresses in local-ipv4s / ipv4-prefix / ipv6s / ipv6-prefix (each
list of the ENI that `ips` may name: ADDRESS_LISTS), a MAC (or ENI) holds the
whole interface (present or absent), an instance alone holds its whole tree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from fault_imds.faults.base import Target
from fault_imds.tree import InstanceMeta

# The EniMeta fields whose members a target's `ips` name.
ADDRESS_LISTS = ("local_ipv4s", "ipv4_prefixes", "ipv6s", "ipv6_prefixes")


def hold_members(current: Iterable[str], reference: Iterable[str], held: Iterable[str]):
    """current, except that each held item is present exactly when the reference has it."""
    held, ref, cur = set(held), tuple(reference), tuple(current)
    kept = [x for x in cur if x not in held or x in ref]
    back = [x for x in ref if x in held and x not in cur]
    return tuple(kept + back)


def hold_leaves(leaves: dict[str, str], reference: dict[str, str], target: Target) -> None:
    for p in [p for p in leaves if target.path_matches(p) and p not in reference]:
        del leaves[p]
    for p, body in reference.items():
        if target.path_matches(p):
            leaves[p] = body


def hold(
    view,
    target: Target,
    reference: dict[str, InstanceMeta],
    reference_leaves: Callable[[str], dict[str, str]],
) -> None:
    cur = view.models
    for iid in dict.fromkeys([*cur, *reference]):
        if target.instance_id is not None and iid != target.instance_id:
            continue
        ref, now = reference.get(iid), cur.get(iid)
        if target.path is not None:
            view.leaf_op(
                iid, lambda leaves, iid=iid: hold_leaves(leaves, reference_leaves(iid), target)
            )
        elif target.mac is None and target.ips is None:
            if ref is None:
                cur.pop(iid, None)
            else:
                cur[iid] = ref
        elif now is None:
            continue  # the instance is not served at all: no entries to hold
        elif target.ips is None:
            ref_eni = ref.eni(target.mac) if ref else None
            others = [e for e in now.enis if e.mac != target.mac]
            cur[iid] = now.with_enis(others + ([ref_eni] if ref_eni else []))
        else:
            enis = []
            for e in now.enis:
                if target.mac is not None and e.mac != target.mac:
                    enis.append(e)
                    continue
                r = ref.eni(e.mac) if ref else None
                enis.append(replace(e, **{
                    name: hold_members(getattr(e, name), getattr(r, name) if r else (), target.ips)
                    for name in ADDRESS_LISTS
                }))
            cur[iid] = now.with_enis(enis)
