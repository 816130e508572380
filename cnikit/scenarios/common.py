"""Helpers the scenarios share: peers across the fabric, pod churn."""

from __future__ import annotations

from cnikit.scenarios.engine import Ctx, Liveness, Precondition


def peers(ctx: Ctx, node: int = 1, count: int = 2) -> list:
    """Pods on another node. Same-node pod traffic never leaves the node; traffic between
    nodes crosses the VPC fabric, which routes by EC2's assignments: an IP EC2 no longer
    gives the pod's node goes dark there, as it does on AWS. No fault is active yet: a pod
    without an IP is the build's liveness violation."""
    return [ctx.require_pod(node) for _ in range(min(count, ctx.room(node)))]


def fill(ctx: Ctx, node: int, count: int) -> list:
    """Pods on a node with room in EC2 and no fault active: each must get an IP. A node
    whose build declares fewer pods (max_pods) gets as many as it takes."""
    return [ctx.require_pod(node) for _ in range(min(count, ctx.room(node)))]


def churn(ctx: Ctx, nodes: list[int], cycles: int, max_pods: int = 8, retry_for: float = 10.0,
          between=None) -> None:
    """Seeded pod churn: each cycle adds a pod or deletes one (chosen by ctx.rng)."""
    for i in range(cycles):
        node = ctx.rng.choice(nodes)
        mine = ctx.pods_on(node)
        if mine and (len(mine) >= min(max_pods, ctx.max_pods) or ctx.rng.random() < 0.45):
            ctx.delete_pod(ctx.rng.choice(mine))
        else:
            ctx.add_pod(node, retry_for=retry_for)
        if between is not None:
            between(i)


def settled(ctx: Ctx, node: int, count: int) -> tuple[list, object, dict]:
    """The usual opening: two peers on node 1, `count` pods on `node`, and its warm pool at
    its targets in EC2. Returns the pods, the node's first ENI (EC2's view) and the focus of
    the steps on it."""
    eni = ctx.node_enis(node)[0]
    focus = {"node": node, "eni": eni.eni_id, "mac": eni.mac}
    peers(ctx, node=1, count=2)
    pods = fill(ctx, node, count)
    ctx.wait_within_targets(node)
    return pods, eni, focus


def age_past(ctx: Ctx, lag: float, eni_id: str | None = None) -> None:
    """Let the system run until EC2's last address change (on `eni_id`; None: on any ENI of
    the cluster) is older than `lag`, before a Describe `lag` seconds behind begins: the
    lagging view then shows the settled cluster, and lags only what changes from here.
    Begun sooner, a lagging Describe also hides addresses every node's running pods got
    while the cluster came up, how many depending on how fast the machine was (under three
    runs at once in CI, 1.18.4 swept another node's peers in restart-lagging-describe)."""
    ctx.run_for(max(0.0, lag + 0.5 - _since_last_change(ctx, eni_id)))


def _since_last_change(ctx: Ctx, eni_id: str | None) -> float:
    """Seconds since EC2 last changed addresses (on `eni_id`, or anywhere; the gate's audit
    log of successful mutating calls)."""
    import time

    times = ec2_call_times(ctx, eni_id=eni_id, ok_only=True)
    return time.time() - max(times) if times else float("inf")


def ec2_call_times(ctx: Ctx, actions: tuple[str, ...] = (), eni_id: str | None = None,
                   ip: str | None = None, since: float = 0.0,
                   ok_only: bool = False) -> list[float]:
    """When (wall clock) the gate saw the mutating EC2 calls that match: of `actions` (any
    if empty), on `eni_id`, naming `ip`, at or after `since`, refused ones too unless
    `ok_only` (the gate's audit log)."""
    return [r.time for r in ctx.gate.audit.records()
            if (not actions or r.action in actions) and (eni_id is None or r.eni_id == eni_id)
            and (ip is None or ip in r.ips) and r.time >= since
            and (not ok_only or r.outcome == "ok")]


def pods_until_reuse(ctx: Ctx, node: int, ip: str, until: float, room: int) -> list:
    """New pods on `node` until one is given `ip` (a deleted pod's), the monotonic time
    `until` (its cooldown's end) passes or `room` pods were added: a build that hands out
    addresses before their cooldown is over reaches `ip` soon. The new pods, in order."""
    import time

    new = []
    while len(new) < room and time.monotonic() < until:
        pod = ctx.add_pod(node, retry_for=max(0.5, until - time.monotonic()))
        if pod is None:
            break
        new.append(pod)
        if pod.ip == ip:
            break
    return new


def in_cooldown(ctx: Ctx, deleted: float, pod) -> bool:
    """Whether `pod` (None: no pod) came early enough in the IP cooldown of a delete at
    monotonic time `deleted` that a build handing the address on would be caught: with the
    time the old pod's flows need to reach it left (early_reuse.MIN_LEFT_S). A scenario that
    staged no such pod was too slow to test the cooldown (engine.TooSlow)."""
    from cnikit.check.checkers.early_reuse import MIN_LEFT_S

    return pod is not None and pod.added_at - deleted <= ctx.ip_cooldown - MIN_LEFT_S


def warm_addresses(ctx: Ctx, node: int, eni) -> list[str]:
    """The free addresses of the node's warm pool on `eni`, as EC2 has them (none: a build
    without a warm pool has nothing for EC2 to take, and the scenario ends not exposed)."""
    held = {p.ip for p in ctx.pods_on(node) if getattr(p, "ip", None)}
    warm = sorted(set(ctx.ec2_eni(eni.eni_id).ips) - held - {eni.primary_ip})
    if not warm:
        ctx.not_exposed(f"node {node} holds no free address on {eni.eni_id} for EC2 to take")
    return warm


def interface_with_room(ctx: Ctx, node: int, count: int) -> str:
    """Where EC2 moves `count` addresses it takes from another node: `node`'s first ENI
    with room for them, else an interface of no node. A design that fills its ENIs (an
    operator assigning a node's whole pool to its primary ENI) leaves no room on `node`,
    and EC2 refuses a move past the ENI's limit (PrivateIpAddressLimitExceeded)."""
    for eni in ctx.node_enis(node):
        if len(eni.ips) + len(eni.prefixes) + count <= ctx.eni_capacity + 1:
            return eni.eni_id
    return ctx.spare_interface()


def release(ctx: Ctx, eni, pods: list, count: int, before: set[str] | None = None,
            within: float = 15) -> list[str]:
    """Delete `pods` and wait until `count` of the ENI's addresses (`before`: as EC2 has
    them now) are gone from it in EC2, the build having released them. A correct build need
    not release them (it may keep them for its next pods): the scenario goes on with fewer
    (`ctx.design`). Returns the addresses gone."""
    before = set(ctx.ec2_eni(eni.eni_id).ips) if before is None else set(before)
    for pod in pods:
        ctx.delete_pod(pod)

    def gone() -> list[str]:
        return sorted(before - set(ctx.ec2_eni(eni.eni_id).ips))

    ctx.design(lambda: len(gone()) >= count, within, f"{count} addresses released to EC2")
    return gone()


def crash_while_adding(ctx: Ctx, node: int, action: str, most: int) -> dict:
    """Arm a crash point after `action` on `node` (ctx.crash_at) and add up to `most` pods
    there, one at a time as a runtime would, until the build makes that call for the node
    and its caller (the node's daemon, or a cluster component) is killed before the answer;
    restart it, and let the ADD in flight be retried. Returns what the point fired on. A
    build that never made the call for those pods is not exposed."""
    import threading

    point = ctx.crash_at(node, action)

    def adds() -> None:
        for _ in range(most):
            if point.fired is not None or ctx.room(node) <= 0:
                return
            # The runtime retries an ADD until the daemon is back (kubelet does).
            ctx.add_pod(node, retry_for=max(30.0, ctx.run_seconds(60)))

    adder = threading.Thread(target=adds, name=f"adds-{node}", daemon=True)
    try:
        adder.start()
        ctx.design(lambda: point.wait(0.05) or not adder.is_alive(), 120,
                   f"the build called {action} for pods on node {node}")
    finally:
        # The adder may end while the kill is under way (a warm pool answers the ADD without
        # waiting for the assign): close waits for the kill, so the restart comes after it.
        fired = point.close()
    if fired is None:
        adder.join(60)
        ctx.not_exposed(f"the build made no {action} call for {most} pods on node {node}: "
                        "no window to crash in")
    caller = fired.get("caller") or {"node": node}
    who = (f"component {caller['component']}" if "component" in caller
           else f"node {caller['node']}'s daemon")
    ctx.step(f"{who} killed after {action}" + (f" of {fired['eni']}" if fired.get("eni")
                                               else ""),
             node=node, **({"eni": fired["eni"]} if fired.get("eni") else {}))
    ctx.restart_caller(caller)
    adder.join(90)
    ctx.step("restarted; the ADD in flight retried", node=node)
    return fired


def pods_until(ctx: Ctx, node: int, settled, most: int) -> str | None:
    """After a crash_while_adding: new pods on `node`, one at a time, until settled() says
    what became of what the crashed call made (a string), the node has no room, or it holds
    `most` pods. Returns settled()'s last answer (None: neither)."""
    while not settled() and ctx.room(node) > 0 and len(ctx.pods_on(node)) < most:
        ctx.require_pod(node, retry_for=max(15.0, ctx.run_seconds(60)))
    return settled()


def settles_after_crash(ctx: Ctx, node: int, eni: str, settled, what: str, evidence) -> None:
    """After a crash_while_adding: pods_until settled() says what became of `what` (the
    crashed call's work on `eni`), bounded by what two ENIs hold; neither used nor given
    back is a liveness failure with evidence(). Then pods come and go on the node.

    Which address or ENI a build hands out next is its own choice (lowest first, at random,
    the newest): a node holding all the pods it declares (no room) served its whole
    capacity, and what the crashed call made may be the spare it keeps, so that ends the
    search without a verdict (the leak checker judges a spare held too long). Only a node
    with room whose two ENIs' worth of pods never reached it is a liveness failure."""
    state = pods_until(ctx, node, settled, 2 * ctx.eni_capacity)
    if state is None and ctx.room(node) <= 0:
        ctx.adapt(f"node {node} holds all {len(ctx.pods_on(node))} pods it takes and "
                  f"{what} of the crashed call stayed its spare")
        state = "kept spare"
    if state is None:
        raise Liveness(f"node {node}", f"{what} of the call the caller died in is neither "
                       "used by a pod nor given back",
                       {"eni": eni, **evidence(), "pods on node": len(ctx.pods_on(node))})
    verb = "were" if what.endswith("es") else "was"
    ctx.step(f"after the restart {what} {verb} {state}", node=node, eni=eni)
    pods_come_and_go(ctx, node)


def pods_come_and_go(ctx: Ctx, node: int, count: int = 3) -> None:
    """Delete `count` pods of `node`, add as many, wait for a reconcile: the old pods keep
    working, new ones get addresses."""
    for pod in ctx.pods_on(node)[:count]:
        ctx.delete_pod(pod)
    for _ in range(count):
        ctx.require_pod(node)
    ctx.wait_reconciles(node, 1)
    ctx.step("pods deleted and added; a reconcile", node=node)


def restart_all_under_limit(ctx: Ctx, nodes: list[int], rate: float, burst: float) -> str:
    """Pods on every node, then the account's EC2 limit (one bucket for every node and
    action, upstream 873/617) and every daemon killed and started together: each must come
    up and give a new pod under the limit (liveness). Returns the limit's fault id, still
    in force."""
    import time

    peers(ctx, node=nodes[-1], count=2)
    for n in nodes[:-1]:
        fill(ctx, n, 2)
    ctx.step("pods up on every node")
    since = time.monotonic()
    limit = ctx.ec2_fault("throttle", scope="account", rate=rate, burst=burst)
    ctx.step(f"the account's EC2 limit: {rate:g} calls/s, burst {burst:g}, one bucket for "
             "every node and action")
    ctx.restart_all(nodes, wait=max(30.0, ctx.run_seconds(300)))
    ctx.step("every daemon killed, then all started together: all ready")
    for n in nodes:
        ctx.require_pod(n, retry_for=max(20.0, ctx.run_seconds(120)))
    fault = ctx.gate.faults.get(limit)
    refused = fault.refused_since(since) if fault is not None else 0
    ctx.step(f"a new pod on every node under the limit ({refused} calls refused so far)")
    return limit


def attach_unmanaged_eni(ctx: Ctx, node: int, ipv6_only: bool) -> str:
    """A subnet of the other family beside the node's (IPv4-only, or IPv6-only from the
    VPC's /56), an ENI there tagged `node.k8s.amazonaws.com/no_manage=true` (a storage or
    appliance interface the CNI must leave alone), attached to the node at the next device
    index, once IMDS lists it: what the daemon's next start-up reads (upstream #3489,
    #3681). Returns the ENI's id."""
    import ipaddress

    from botocore.exceptions import ClientError

    ec2 = ctx.cloud.client()
    topo = ctx.fabric.topo
    if ipv6_only:
        blocks = ipaddress.IPv6Network(topo.vpc_ipv6_cidr).subnets(new_prefix=64)
        block = next(str(b) for b in blocks if str(b) != topo.subnet_ipv6_cidr)
        subnet = ec2.create_subnet(VpcId=topo.vpc_id, Ipv6Native=True, Ipv6CidrBlock=block,
                                   AvailabilityZone=topo.az)["Subnet"]["SubnetId"]
    else:
        vpc = ipaddress.ip_network(topo.vpc_cidr)
        cidr = next(str(n) for n in vpc.subnets(new_prefix=24)
                    if str(n) != topo.subnet_cidr and n.network_address != vpc.network_address)
        subnet = ec2.create_subnet(VpcId=topo.vpc_id, CidrBlock=cidr,
                                   AvailabilityZone=topo.az)["Subnet"]["SubnetId"]
    eni = ec2.create_network_interface(
        SubnetId=subnet, Description="an appliance's interface",
        TagSpecifications=[{"ResourceType": "network-interface",
                            "Tags": [{"Key": "node.k8s.amazonaws.com/no_manage",
                                      "Value": "true"}]}],
    )["NetworkInterface"]
    instance = topo.instances[node].instance_id
    for _ in range(5):
        # The build attaches ENIs of its own meanwhile (its warm pool): a device index taken
        # between the look and the attach is EC2's refusal, and the next free one is tried.
        taken = {e.device_index for e in ctx.gate.owners().enis.values()
                 if e.instance_id == instance and e.device_index is not None}
        device = next(i for i in range(1, 16) if i not in taken)
        try:
            ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                         InstanceId=instance, DeviceIndex=device)
            break
        except ClientError as e:
            if "device index" not in str(e):
                raise
    else:
        raise Precondition("a free device index on the node for the unmanaged ENI, in 5 tries")
    mac = eni["MacAddress"].lower()
    entry = "ipv6s" if ipv6_only else "local-ipv4s"
    ctx.wait_until(lambda: ctx.imds_served(node, mac, entry) is not None, 10,
                   "IMDS lists the new ENI")
    return eni["NetworkInterfaceId"]


def kill_in_write_of_an_add(ctx: Ctx, node: int, retry_for: float = 30.0):
    """An ADD on `node` (retried by the runtime for `retry_for` seconds, until the daemon
    is back, as kubelet does) while the nemesis's write trap is armed: the daemon is killed
    the moment it opens a file of its state directory for writing. Returns (the ADD's
    thread, what the trap caught: None when the daemon wrote nothing for that ADD, a build
    with no state on disk; the thread has then ended)."""
    import threading

    trap = ctx.kill_in_write(node)
    try:
        adder = threading.Thread(target=ctx.add_pod, args=(node,),
                                 kwargs={"retry_for": retry_for})
        adder.start()
        wrote = ctx.design(lambda t=trap: t.wait(0.05), 15,
                           "the daemon wrote a file of its state directory for an ADD")
    finally:
        trap.close()
    if not wrote:
        adder.join(retry_for + 10)
        return adder, None
    return adder, trap.fired or {}


def leaks_judged(ctx: Ctx, node: int, since: float) -> None:
    """Let the run go on until the leak checker has judged `node`'s addresses after a
    change at `since` (epoch seconds: a DEL, a restart): a view of the build's datastore
    asked after it was seen, and every address EC2 gives the node that the build holds for
    no pod has been held that long past the leak grace (a leak opened) or is held again. A
    scenario that ended sooner would end before a forgotten address is judged. A build
    without the [observe] view has no leak judged at all: nothing to wait for."""
    if ctx.sampler is None or not ctx.sampler.introspection:
        return
    instance = ctx.fabric.nodes[node].instance_id
    leak = ctx.watch.invariants.checker("leak")

    def judged() -> bool:
        return (leak.asked.get(instance, 0.0) > since and instance in leak.daemon
                and all(ip in leak.open for ip in list(leak.unknown_since)))

    ctx.design(judged, leak.grace + ctx.run_seconds(30) + 5,
               f"the leak checker judged node {node}'s addresses")
