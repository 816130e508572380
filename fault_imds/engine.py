"""The fault engine: EC2 state + active faults -> what each instance is served.

Runs on the server's event loop only (no locks): the EC2 poller hands states over with
call_soon_threadsafe, the control API and the ticker call in from the same loop.

Served bodies are precomputed per instance whenever EC2 or the fault set changes (and when
a `lag` reference moves on), so answering a request is one dict lookup; request faults are
evaluated only while any are active.

Composition order (several faults compose): each kind's file declares its stage and its
`order` (`fault-imds kinds` and GET /kinds list them); the stages registered at a hook point
run in their order (fault_imds/faults/base.py), and within a stage faults run by order,
then in creation order. Today:
  content stage, on the structured view:
    lag (10)      targeted entries taken from EC2 as it was `seconds` ago
    stale (20)    targeted entries replaced by what was served when the stale began
    stale-until-change (25)  an instance's interface list frozen until its next change
    missing (30)  targeted entries removed
    path-targeted content faults act on the rendered entries afterwards, in the same order.
  request stage, for each matching fault (probability rolled once each, in
  faultcore.fault.Fault.fires, with the server's seeded random generator):
    drop (10)     close the connection, nothing else happens
    token (20)    401 for a request carrying a token
    latency (30)  wait, then go on
    error (40)    answer the status
"""

from __future__ import annotations

import ipaddress
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from fault_imds.faults import (
    KINDS,
    Answer,
    Drop,
    ImdsFault,
    Resolver,
    SpecError,
    parse_spec,
)
from fault_imds.faults.base import REQUEST, VIEW, UnknownTarget
from fault_imds.tree import (
    SERVED_LISTS,
    Ec2State,
    InstanceMeta,
    build_models,
    render,
    serve_map,
    served_lists,
)

EVENTS_MAX = 200_000
SERVED_ENTRIES = SERVED_LISTS


class View:
    """The content stage's working copy: faults edit `models` and register leaf ops."""

    def __init__(self, models: dict[str, InstanceMeta], now: float, engine: Engine):
        self.models = models
        self.now = now
        self._engine = engine
        self.leaf_ops: list[tuple[str, Callable[[dict[str, str]], None]]] = []

    def leaf_op(self, iid: str, fn: Callable[[dict[str, str]], None]) -> None:
        self.leaf_ops.append((iid, fn))

    def models_at(self, t: float) -> dict[str, InstanceMeta]:
        return self._engine.models_at(t)

    def leaves_at(self, t: float, iid: str) -> dict[str, str]:
        return self._engine.leaves_at(t, iid)


class RequestCtx:
    """What request faults see of a request."""

    __slots__ = ("instance_id", "path", "token", "rng", "_expire", "_served")

    def __init__(self, instance_id, path, token, rng, expire: Callable[[], None],
                 served: Callable[[], bytes | None] | None = None):
        self.instance_id = instance_id
        self.path = path
        self.token = token
        self.rng = rng
        self._expire = expire
        self._served = served

    def expire_token(self) -> None:
        self._expire()

    def served(self) -> bytes | None:
        """The body this request would be served without request faults (None: 404)."""
        return self._served() if self._served is not None else None


class EventLog:
    def __init__(self, maxlen: int = EVENTS_MAX):
        self._events: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self._seq = 0
        self._listeners: list[Callable[[], None]] = []

    def add(self, type_: str, **fields: Any) -> None:
        self._seq += 1
        self._events.append({"seq": self._seq, "time": time.time(), "type": type_, **fields})
        for wake in self._listeners:
            wake()

    def on_add(self, wake: Callable[[], None]) -> None:
        self._listeners.append(wake)

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        return [e for e in self._events if e["seq"] > seq]

    @property
    def last_seq(self) -> int:
        return self._seq


class Engine(Resolver):
    def __init__(self, history=None, seed: int | None = None, clock=time.monotonic):
        # history: anything with at(t) -> Ec2State | None (the Ec2View)
        self.history = history
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = clock
        self.state: Ec2State | None = None
        self.true_models: dict[str, InstanceMeta] = {}
        self.served_models: dict[str, InstanceMeta] = {}
        self.served_leaves: dict[str, dict[str, str]] = {}
        self.served: dict[str, dict[str, bytes]] = {}
        self.faults: dict[str, ImdsFault] = {}
        self.by_stage: dict[str, list[ImdsFault]] = {}
        # The faults of the stages at each hook point, in the order they run.
        self.content_faults: list[ImdsFault] = []
        self.request_faults: list[ImdsFault] = []
        self.events = EventLog()
        self.recomputes = 0
        self._ip_owner: dict[str, str] = {}
        self._prefix_owner: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
        self._served_lists: dict[tuple[str, str], tuple[str, dict[str, tuple[str, ...]]]] = {}
        self._refs: dict[str, int] = {}
        self._cache: dict[int, tuple[Ec2State, dict[str, InstanceMeta]]] = {}
        self._leaf_cache: dict[tuple[int, str], dict[str, str]] = {}
        self._render_cache: dict[InstanceMeta, tuple] = {}
        self._next = 0
        # Called after a fault is activated (the server's ticker sleeps while there is none).
        self.on_fault_added: Callable[[], None] | None = None

    # -- EC2 side ----------------------------------------------------------------------------

    def set_state(self, state: Ec2State) -> None:
        self.state = state
        self.true_models = self._models_of(state)
        owner: dict[str, str] = {}
        prefixes = []
        for iid, m in self.true_models.items():
            for e in m.enis:
                for ip in (*e.local_ipv4s, *e.ipv6s):
                    owner[ip] = iid
                for p in (*e.ipv4_prefixes, *e.ipv6_prefixes):
                    prefixes.append((ipaddress.ip_network(p), iid))
        self._ip_owner = owner
        self._prefix_owner = prefixes
        for fid, f in list(self.faults.items()):
            why = f.ends(self)
            if why is not None:
                self.remove(fid, reason="fault_ended", why=why, recompute=False)
        self.recompute()

    def owner_of(self, ip: str) -> str | None:
        """The instance whose ENI holds ip (the caller's identity, as real IMDS knows it)."""
        iid = self._ip_owner.get(ip)
        if iid is None and self._prefix_owner:
            try:
                addr = ipaddress.ip_address(ip.removeprefix("::ffff:"))
            except ValueError:
                return None
            iid = next((i for net, i in self._prefix_owner if addr in net), None)
        return iid

    def _models_of(self, state: Ec2State) -> dict[str, InstanceMeta]:
        hit = self._cache.get(id(state))
        if hit is not None and hit[0] is state:
            return hit[1]
        models = build_models(state)
        if len(self._cache) > 16:
            self._cache.clear()
            self._leaf_cache.clear()
        self._cache[id(state)] = (state, models)
        return models

    def _state_at(self, t: float) -> Ec2State | None:
        state = self.history.at(t) if self.history is not None else None
        return state if state is not None else self.state

    def models_at(self, t: float) -> dict[str, InstanceMeta]:
        state = self._state_at(t)
        return self._models_of(state) if state is not None else {}

    def leaves_at(self, t: float, iid: str) -> dict[str, str]:
        state = self._state_at(t)
        if state is None:
            return {}
        key = (id(state), iid)
        if key not in self._leaf_cache:
            m = self._models_of(state).get(iid)
            self._leaf_cache[key] = render(m) if m is not None else {}
        return self._leaf_cache[key]

    # -- Resolver (target validation) ----------------------------------------------------------

    def has_instance(self, iid: str) -> bool:
        return iid in self.true_models or bool(self.state and iid in self.state.instances)

    def mac_of_eni(self, eni_id: str) -> str | None:
        for e in self.state.enis if self.state else ():
            if e.get("NetworkInterfaceId") == eni_id:
                return (e.get("MacAddress") or "").lower() or None
        return None

    def eni_of_mac(self, mac: str) -> str | None:
        for e in self.state.enis if self.state else ():
            if (e.get("MacAddress") or "").lower() == mac:
                return e.get("NetworkInterfaceId")
        return None

    def _note_departure(self, e: UnknownTarget) -> None:
        """Look the refused interface up in the states EC2 was seen in (newest first): the
        first state after the last one that had it is when it left."""
        if e.field not in ("mac", "eni_id"):
            return
        snapshots = getattr(self.history, "snapshots", None)
        states = snapshots() if snapshots is not None else []
        after = None
        for state in reversed(states):
            for eni in state.enis:
                mac = (eni.get("MacAddress") or "").lower()
                if (mac if e.field == "mac" else eni.get("NetworkInterfaceId")) == e.value:
                    since = after.wall if after is not None else time.time()
                    e.left_ec2(eni.get("NetworkInterfaceId") or "", mac, since)
                    return
            after = state

    # -- faults ------------------------------------------------------------------------------

    def add(self, spec: Any) -> ImdsFault:
        """Validate and activate a fault; SpecError (nothing changed) on a bad spec, its
        UnknownTarget saying when a target interface EC2 had has left it."""
        fid = f"f{self._next + 1}"
        try:
            fault = parse_spec(spec, self, fid, self.clock(), time.time())
        except UnknownTarget as e:
            self._note_departure(e)
            raise
        self._next += 1
        fault.start(self)
        self.faults[fid] = fault
        self._reindex()
        self.events.add("fault_added", fault=fault.to_json())
        if self._edits_view(fault):
            self.recompute()
        if self.on_fault_added is not None:
            self.on_fault_added()
        return fault

    def remove(self, fid: str, reason: str = "fault_removed", why: str | None = None,
               recompute: bool = True) -> bool:
        """End a fault: `reason` is the event's type (fault_removed, fault_expired,
        fault_ended: it ended by itself, `why` saying what ended it); recompute False when
        the caller recomputes the view next anyway."""
        fault = self.faults.pop(fid, None)
        if fault is None:
            return False
        self._refs.pop(fid, None)
        self._reindex()
        extra = {"why": why} if why is not None else {}
        self.events.add(reason, fault=fault.to_json(), **extra)
        if recompute and self._edits_view(fault):
            self.recompute()
        return True

    def clear(self) -> int:
        ids = list(self.faults)
        for fid in ids:
            self.remove(fid)
        return len(ids)

    def list(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in self.faults.values()]

    @staticmethod
    def _edits_view(fault: ImdsFault) -> bool:
        stage = KINDS.stages.get(fault.stage)
        return stage is not None and stage.hook == VIEW

    def _reindex(self) -> None:
        ordered = sorted(self.faults.values(), key=KINDS.order_key)
        self.by_stage = {name: [f for f in ordered if f.stage == name] for name in KINDS.stages}
        self.content_faults = [f for s in KINDS.at(VIEW) for f in self.by_stage[s.name]]
        self.request_faults = [f for s in KINDS.at(REQUEST) for f in self.by_stage[s.name]]

    def tick(self) -> None:
        """Expire faults whose time is up; recompute when a lag reference moved on."""
        now = self.clock()
        for fid, f in list(self.faults.items()):
            if f.expires is not None and f.expires <= now:
                self.remove(fid, reason="fault_expired")
        for f in self.content_faults:
            t = f.reference_time(now)
            if t is not None and self._refs.get(f.id) != id(self._state_at(t)):
                self.recompute()
                break

    # -- the served view ---------------------------------------------------------------------

    def recompute(self) -> None:
        now = self.clock()
        view = View(dict(self.true_models), now, self)
        for stage in KINDS.at(VIEW):  # the one place the view's stages run
            stage.run(self.by_stage.get(stage.name, ()), view)
        for f in self.content_faults:
            t = f.reference_time(now)
            if t is not None:
                self._refs[f.id] = id(self._state_at(t))
        self.served_models = dict(view.models)
        # An instance whose model did not change (and that no path fault edits) keeps its
        # rendered tree: with many instances, one ENI's change re-renders one tree.
        edited = {iid for iid, _ in view.leaf_ops}
        cache: dict[InstanceMeta, tuple] = {}
        leaves: dict[str, dict[str, str]] = {}
        served: dict[str, dict[str, bytes]] = {}
        lists: dict[str, dict] = {}
        for iid, m in view.models.items():
            if iid in edited:
                leaves[iid] = render(m)
                continue
            hit = self._render_cache.get(m)
            if hit is None:
                lv = render(m)
                hit = (lv, serve_map(lv), served_lists(lv))
            cache[m] = hit
            leaves[iid], served[iid], lists[iid] = hit
        for iid, fn in view.leaf_ops:
            fn(leaves.setdefault(iid, {}))
        for iid in edited:
            served[iid] = serve_map(leaves[iid])
            lists[iid] = served_lists(leaves[iid])
        self._render_cache = cache
        self.served_leaves = leaves
        self.served = served
        self.recomputes += 1
        self._log_served_changes(lists)

    def _log_served_changes(self, lists: dict[str, dict]) -> None:
        current: dict[tuple[str, str], tuple[str, dict[str, tuple[str, ...]]]] = {}
        for iid, by_mac in lists.items():
            model = self.served_models.get(iid)
            for mac, entries in by_mac.items():
                eni = model.eni(mac) if model else None
                current[(iid, mac)] = (eni.eni_id if eni else "", entries)
        for key in dict.fromkeys([*self._served_lists, *current]):
            old, new = self._served_lists.get(key), current.get(key)
            for entry in SERVED_ENTRIES:
                before = old[1][entry] if old else None
                after = new[1][entry] if new else None
                # Only local-ipv4s is always served; the others are absent when empty.
                if before == after or (entry != "local-ipv4s" and not before and not after):
                    continue
                self.events.add(
                    "served",
                    instance_id=key[0],
                    mac=key[1],
                    eni_id=(new or old)[0],
                    entry=entry,
                    values=list(after or ()),
                    present=new is not None,
                )
        self._served_lists = current

    async def request_stage(self, ctx: RequestCtx) -> Answer | Drop | None:
        """The request hook point: run its stages in order, each on its firing faults
        (rolled lazily, as the stage reaches them); the first stage that answers wins."""
        now = self.clock()
        for stage in KINDS.at(REQUEST):
            faults = self.by_stage.get(stage.name, ())
            if not faults:
                continue
            firing = (f for f in faults if not f.expired(now) and f.fires(ctx, self.rng))
            out = await stage.run(firing, ctx)
            if out is not None:
                return out
        return None


def kinds() -> dict[str, dict[str, Any]]:
    """Each kind's description, stage, order and attributes (`fault-imds kinds`, GET /kinds)."""
    return KINDS.describe()


__all__ = ["Engine", "EventLog", "RequestCtx", "SpecError", "View", "kinds"]
