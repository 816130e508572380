"""Bugs a CNI's users fear, planted one at a time in a copy of the reference daemon.

Each Mutant is one text replacement in one file of the hardened profile's code path: `find`
must occur exactly once in the tree (tests/unit/test_mutants.py checks it, so a refactor that
moves the code breaks CI instead of silently dropping the mutant). bench/bench_detection.py
certifies each mutant and reports which the scenario suite catches.

Keep the list growing: a new mutant is one more entry below, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CATEGORIES = ("checkpointing", "imds-trust", "ec2-trust", "cooldown", "allocation", "release",
              "eni-lifecycle", "restart-restore", "ipv6")
# A mutant of this category breaks the daemon's IPv6 mode (ENABLE_IPv6=true): it is
# certified as an IPv6 build (its target's ip_family), on the IPv6 scenarios.
IPV6 = "ipv6"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to the repository root
    find: str
    replace: str
    why: str  # what a user of the CNI would see go wrong
    category: str

    def apply(self, text: str) -> str:
        """text with the bug planted; ValueError unless `find` occurs exactly once."""
        n = text.count(self.find)
        if n != 1:
            raise ValueError(f"mutant {self.name}: its text occurs {n} times in {self.file}, "
                             "not once (the code moved: update bench/mutants.py)")
        return text.replace(self.find, self.replace)


R = "cnikit/daemon/reconcile.py"
DS = "cnikit/daemon/datastore.py"
IPAMD = "cnikit/daemon/ipamd.py"
CKPT = "cnikit/daemon/checkpoint.py"
V6 = "cnikit/daemon/ipv6.py"

MUTANTS: list[Mutant] = [
    # ---- checkpointing ------------------------------------------------------------------
    Mutant(
        "checkpoint-skipped-on-add", DS,
        "        self._by_key[key] = (eni.eni_id, cidr.cidr, addr.ip)\n        try:\n"
        "            self._persist()\n",
        "        self._by_key[key] = (eni.eni_id, cidr.cidr, addr.ip)\n        try:\n"
        "            pass  # checkpointed with the next DEL\n",
        "ADD answers before the allocation is checkpointed: a crash forgets the pod and its "
        "IP goes to the next pod",
        "checkpointing"),
    Mutant(
        "checkpoint-skips-prefix-pods", DS,
        "                    if a.assigned:\n                        rows.append({",
        "                    if a.assigned and not c.is_prefix:\n                        rows.append({",
        "pods on /28 prefixes are left out of ipam.json: after a restart their addresses are "
        "handed out again",
        "checkpointing"),
    Mutant(
        "checkpoint-skipped-on-del", DS,
        "        del self._by_key[key]\n        try:\n            self._persist()\n",
        "        del self._by_key[key]\n        try:\n            pass  # checkpointed with the next ADD\n",
        "DEL is not checkpointed: after a crash deleted pods come back and hold their IPs "
        "(leaked in EC2)",
        "checkpointing"),
    Mutant(
        "checkpoint-not-atomic", CKPT,
        'tmp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")',
        "tmp = self.path",
        "ipam.json is rewritten in place (no temp file + rename): a kill mid-write leaves a "
        "torn checkpoint and the daemon cannot start",
        "checkpointing"),
    Mutant(
        "torn-checkpoint-starts-fresh", CKPT,
        '            raise CheckpointError(f"{self.path}: not JSON ({e})") from None\n',
        '            return {"version": FORMAT_VERSION, "allocations": []}\n',
        "an ipam.json that does not decode is read as a fresh node's: the daemon starts "
        "without its pods and hands their addresses to new ones",
        "checkpointing"),
    Mutant(
        "torn-checkpoint-removed-on-refusal", "cnikit/daemon/main.py",
        '            raise CnikitError(f"cannot recover: {e}") from None\n',
        "            ipamd.checkpoint.path.unlink(missing_ok=True)\n"
        '            raise CnikitError(f"cannot recover: {e}") from None\n',
        "the daemon refuses an ipam.json it cannot decode, but removes it on its way out: "
        "restarted, it starts as a fresh node and hands its pods' addresses to new ones",
        "checkpointing"),
    # ---- what the daemon trusts of IMDS -------------------------------------------------
    Mutant(
        "startup-from-imds", R,
        "    trusts_imds = False\n",
        "    trusts_imds = True\n",
        "start-up and new ENIs take IMDS at face value (as upstream does): a stale IMDS "
        "brings back IPs EC2 already gave to another node (upstream 3887, 3824)",
        "imds-trust"),
    Mutant(
        "reconcile-walks-imds", R,
        "    for view in truth:\n",
        "    for view in imds_enis:\n",
        "the reconcile takes each ENI's addresses from IMDS, not from EC2's Describe: a stale "
        "IMDS re-adds IPs the node released (upstream 3019)",
        "imds-trust"),
    Mutant(
        "imds-agrees-by-length", R,
        "        elif set(v.secondary_ips) != set(eni.ips()):",
        "        elif len(v.secondary_ips) != len(eni.ips()):",
        "IMDS 'agrees' when the counts match (upstream 3019's length compare): EC2 is asked "
        "only every few reconciles",
        "imds-trust"),
    Mutant(
        "ec2-asked-only-on-disagreement", R,
        "    if not _imds_agrees(d, imds_enis) or d.reconcile_runs % HARDENED_FULL_CHECK_EVERY == 0:",
        "    if not _imds_agrees(d, imds_enis):",
        "EC2 is asked only when IMDS disagrees: a stale IMDS that matches the datastore hides "
        "an address EC2 took back, and the daemon hands it out",
        "imds-trust"),
    # ---- what the daemon trusts of EC2 --------------------------------------------------
    Mutant(
        "add-on-describe-alone", R,
        "            if addr not in seen.get(view.eni_id, ()):",
        "            if view.eni_id not in seen:",
        "an address only a lagging Describe still shows is re-added as free once IMDS lists "
        "its ENI: a released IP goes to a pod after EC2 gave it elsewhere",
        "ec2-trust"),
    Mutant(
        "lost-address-reused", DS,
        "                if c.cidr in self.quarantined:\n                    continue\n",
        "",
        "an address EC2 took back while a pod held it is handed to the next pod once the "
        "holder is gone",
        "ec2-trust"),
    Mutant(
        "eni-lost-in-describe-swept", R,
        "        if eni.assigned_count():\n"
        '            d.metrics.inc("awscni_ipamd_error_count", fn="eniLostInEC2")\n'
        "            continue\n"
        "        d.ds.remove_eni(eni_id)\n",
        "        d.ds.remove_eni(eni_id, force=True)\n",
        "an ENI a lagging Describe does not list yet is dropped with its pods; its IPs come "
        "back free (upstream 1967 with EC2 as the witness)",
        "eni-lifecycle"),
    Mutant(
        "throttled-describe-is-gone", "cnikit/daemon/ec2_query.py",
        '            if e.code == "InvalidNetworkInterfaceID.NotFound":\n'
        "                return None\n",
        '            if e.code in ("InvalidNetworkInterfaceID.NotFound", "RequestLimitExceeded"):\n'
        "                return None\n",
        "a throttled DescribeNetworkInterfaces of one ENI reads as 'not found': an ENI being "
        "freed is taken as deleted already and forgotten, detached and left available",
        "eni-lifecycle"),
    # ---- cooldowns ----------------------------------------------------------------------
    Mutant(
        "ip-cooldown-not-started", DS,
        "        addr.unassigned_at = self.clock.now()\n",
        "",
        "DEL frees the IP without starting its cooldown: the next pod gets it while peers "
        "still hold conntrack and ARP entries for the old one (upstream 1091)",
        "cooldown"),
    Mutant(
        "reconcile-cooldown-dropped", R,
        "            if d.recently_freed_state(addr)[1]:\n"
        "                continue  # EC2 may still be catching up with our own release\n",
        "",
        "the reconcile re-adds an address the node released seconds ago while Describe and "
        "IMDS still list it",
        "cooldown"),
    Mutant(
        "restart-forgets-ip-cooldowns", R,
        "    keeps_ip_cooldowns = True\n",
        "    keeps_ip_cooldowns = False\n",
        "a restarted daemon takes every free address as out of cooldown (upstream's checkpoint "
        "carries none): a pod deleted just before the restart has its IP handed on at once",
        "cooldown"),
    Mutant(
        "release-while-cooling", DS,
        "        return all(not a.assigned and not self.cooling(a) for a in c.addresses.values())",
        "        return all(not a.assigned for a in c.addresses.values())",
        "the pool releases an IP to EC2 during its cooldown: another node gets it while "
        "peers still send to the deleted pod",
        "release"),
    Mutant(
        "failed-release-back-in-pool", R,
        "            continue\n        d.ds.quarantined.add(c)\n",
        "            continue\n",
        "an address whose release EC2 refused goes back into the pool as free: EC2 may have "
        "given it to another node, and a new pod gets it",
        "release"),
    Mutant(
        "pool-counts-cooling", DS,
        "        return self.total - self.assigned - self.cooldown\n",
        "        return self.total - self.assigned\n",
        "the pool counts addresses in their IP cooldown as available (upstream's "
        "AvailableAddresses, #1700, #2896): after a burst of deletes it does not grow while "
        "they cool, though the ENI has room, and new pods wait out the cooldown",
        "cooldown"),
    # ---- allocation ---------------------------------------------------------------------
    Mutant(
        "prefix-pick-ignores-holder", DS,
        "                            continue\n"
        "                        if not a.assigned and not self.cooling(a):",
        "                            continue\n"
        "                        if not self.cooling(a):",
        "inside a /28 prefix an address is chosen by its cooldown alone: one a pod holds is "
        "given to a second pod",
        "allocation"),
    Mutant(
        "repeated-add-new-ip", DS,
        "        existing = self.find(key)\n        if existing is not None:\n"
        "            return existing\n",
        "",
        "a retried ADD of the same sandbox gets a second IP; the first stays allocated "
        "(leaked) and a repeated DEL frees only one",
        "allocation"),
    Mutant(
        "capacity-counts-primary", IPAMD,
        "Capacity(max_enis, self.limits.ipv4_per_eni - 1)",
        "Capacity(max_enis, self.limits.ipv4_per_eni)",
        "the ENI's primary IP is counted as a pod slot: the daemon asks EC2 for one IP more "
        "than the ENI holds and the pool stops growing",
        "allocation"),
    # ---- ENI lifecycle ------------------------------------------------------------------
    Mutant(
        "eni-freed-while-cooling", DS,
        "            if any(a.assigned or self.cooling(a) for a in eni.addresses()):",
        "            if any(a.assigned for a in eni.addresses()):",
        "an ENI whose IPs are still cooling down is detached and deleted: its IPs return to "
        "the subnet before peers forget them",
        "eni-lifecycle"),
    Mutant(
        "eni-min-lifetime-ignored", DS,
        "            if eni.is_primary or now - eni.created_at < min_lifetime:",
        "            if eni.is_primary:",
        "a freshly attached ENI may be freed at once: ENIs churn (attach, delete) under a "
        "warm target",
        "eni-lifecycle"),
    # ---- restart / restore --------------------------------------------------------------
    Mutant(
        "restore-drops-unconfirmed", R,
        "        return hold_unconfirmed(d, rows)\n",
        "        return rows\n",
        "after a restart, checkpointed pods a lagging Describe does not show yet are "
        "dropped: their IPs become free for the next pod",
        "restart-restore"),
    Mutant(
        "startup-trusts-lagging-describe", R,
        "        drop_unconfirmed(d)\n",
        "        pass  # Describe is EC2's word\n",
        "start-up keeps every free address EC2's Describe shows, also one a lagging Describe "
        "still lists after the node released it just before the restart",
        "restart-restore"),
    Mutant(
        "restore-matches-host-routes-only", DS,
        "                    if target in ipaddress.ip_network(c.cidr, strict=False):",
        '                    if c.cidr == f"{ip}/32":',
        "restore matches a checkpointed IP against /32 entries only: pods on /28 prefixes "
        "are dropped at restart and their addresses reused",
        "restart-restore"),
    # ---- issue 30 row E: every node restarted at once under the account's EC2 limit -----
    Mutant(
        "no-backoff-on-throttle", "cnikit/daemon/main.py",
        "            stop.wait(delay)\n            delay = min(delay * 2, 5.0)\n",
        "            pass  # EC2 answered; ask again at once\n",
        "a throttled start-up is retried at once: after every node restarted together "
        "(upstream 873/617) the daemons keep the account's EC2 bucket empty and none starts",
        "restart-restore"),
    # ---- issue 30 row F: another principal acts on the node's EC2 resources ------------
    Mutant(
        "unassigned-address-kept", R,
        "            d.ds.del_cidr(view.eni_id, cidr)\n            d.ds.quarantined.discard(cidr)\n"
        '            d.metrics.inc("awscni_reconcile_count", fn="eniIPPoolReconcileDel")\n',
        "            continue  # EC2 took a free address: it will be back\n",
        "an address another principal unassigned out of band (upstream 377/391) stays free "
        "in the pool and goes to the next pod, which EC2 routes nowhere",
        "ec2-trust"),
    # ---- issue 30 row B: IMDS lists a deleted ENI (upstream #1008, #1340; #2497) ----------
    Mutant(
        "init-aborts-on-notfound", R,
        "        if truth is None:\n"
        "            d.metrics.inc(\"awscni_ipamd_error_count\", fn=\"startupDepartedENI\")\n",
        "        if truth is None:\n"
        "            raise ApiError(f\"{view.eni_id}: not found\", \"InvalidNetworkInterfaceID.NotFound\")\n",
        "start-up calls EC2 on every ENI IMDS lists and aborts on NotFound: an ENI deleted "
        "while IMDS still lists it keeps the daemon crash-looping (upstream #1008, #1340)",
        "eni-lifecycle"),
    # ---- issue 30 row D: crash points (crash-after-attach, crash-after-assign) -------------
    Mutant(
        "untracked-eni-never-adopted", IPAMD,
        "        if view.eni_id in self.ds.enis:\n            return\n",
        "        if view.eni_id in self.ds.enis or (view.device_index and not any(\n"
        "                e[\"kind\"] == \"eni-attached\" and e.get(\"eni\") == view.eni_id\n"
        "                for e in self.events) and not any(\n"
        "                r.get(\"ipv4\") in view.secondary_ips for r in (\n"
        "                    self.checkpoint.read() if self.checkpoint is not None else []))):\n"
        "            return  # neither attached by this daemon nor in its checkpoint\n",
        "upstream #66/#401: an ENI attached just before a restart, before the datastore "
        "recorded it, is never adopted (only ENIs the daemon attached itself or holds pods "
        "on are): it leaks for good and the node runs out of ENIs for its pods",
        "eni-lifecycle"),
    # ---- issue 30 rows A and H: EC2 answers during attach (ec2-faults) -------------------
    Mutant(
        "attach-error-gives-up", IPAMD,
        '            log.warning("attach %s at %d failed: %s; deleting it", view.eni_id, index, e)\n',
        '            log.warning("attach %s at %d failed: %s; deleting it", view.eni_id, index, e)\n'
        "            self.capacity = Capacity(len(self.ds.enis), self.capacity.slots_per_eni)\n",
        "cilium #11088: an Attach error (an outage's misleading 'instance is not running') is "
        "believed: the node is never given another ENI and new pods wait for ever",
        "eni-lifecycle"),
    Mutant(
        "eni-used-before-addresses-show", R,
        "    if not trusts_imds(d):\n        d.setup_eni(created)\n        return\n",
        "    if not trusts_imds(d):\n        try:  # attached is enough (before #1174)\n"
        "            shown = d.ec2.describe_eni(created.eni_id)\n"
        "        except ApiError:\n            shown = None\n"
        "        d.setup_eni(shown if shown is not None and shown.attachment_id else created)\n"
        "        return\n",
        "#1148/#989: a new ENI enters the datastore with the addresses Describe shows once it "
        "is attached, none while they lag; the next Assign on it hits "
        "PrivateIpAddressLimitExceeded and new pods wait",
        "ec2-trust"),
    # ---- issue 30 row C: attach and detach take time (upstream #732, #401, #608, #1223) --
    Mutant(
        "delete-eni-once", IPAMD,
        "        return self._delete_pending(eni_id)\n",
        "        ok = self._delete_pending(eni_id)\n"
        "        self.pending_deletes.discard(eni_id)  # tried once, then forgotten\n"
        "        return ok\n",
        "a freed ENI's delete is tried once right after the detach; EC2 answers 'in use' "
        "while the detach takes its seconds, and the ENI is left available (upstream #1399, "
        "#732)",
        "eni-lifecycle"),
    Mutant(
        "adopt-detaching-eni", IPAMD,
        "        self.pending_deletes |= self._detaching()\n",
        "",
        "a daemon restarted while an ENI it freed is detaching takes the ENI back (IMDS and "
        "Describe still list it): its addresses go to pods after EC2 detached it, and the "
        "ENI is never deleted (upstream #732)",
        "eni-lifecycle"),
    # ---- issue 30 row G: the runtime's retries (scenario runtime-retries) ------------------
    Mutant(
        "del-not-idempotent", DS,
        "            self._forget_lost(key)\n            return None\n",
        "            self._forget_lost(key)\n"
        "            raise DatastoreError(f\"no IP held by {key}\")\n",
        "a DEL of a sandbox that holds nothing (already deleted, a replay) fails: the runtime "
        "retries it forever and the pod is stuck terminating (VPC CNI #2048, #2331)",
        "allocation"),
    Mutant(
        "replayed-del-frees-by-ip", "cnikit/daemon/server.py",
        "            a = self.ipamd.check(key)\n        if netns_path or a is not None:",
        "            key = self.ipamd.ds.holder(str(req.get(\"prevIp\") or \"\")) or key\n"
        "            a = self.ipamd.check(key)\n        if netns_path or a is not None:",
        "a DEL frees the address its prevResult names, not what its sandbox holds: a DEL "
        "replayed after the address went to a new pod takes it from that pod (cilium #10065)",
        "allocation"),
]

# ---- issue 40: the IPv6 mode (one /80 on the primary ENI, no pool, no reconcile) ----------
MUTANTS += [
    Mutant(
        "ipv6-pick-ignores-cooldown", DS,
        "        free = [a for a in c.addresses.values() if not a.assigned and not self.cooling(a)]\n",
        "        free = [a for a in c.addresses.values() if not a.assigned]\n",
        "the IPv6 pick takes a released address of the /80 still in its cooldown (the longest "
        "released first): a pod deleted a moment ago has its address handed on while peers "
        "still send to it (upstream 1091 in IPv6 mode)",
        IPV6),
    Mutant(
        "ipv6-pick-ignores-holder", DS,
        "        free = [a for a in c.addresses.values() if not a.assigned and not self.cooling(a)]\n",
        "        free = [a for a in c.addresses.values() if not self.cooling(a)]\n",
        "the IPv6 pick looks only at an address's cooldown: once an address of the /80 has "
        "been used, the one a running pod holds goes to a second pod",
        IPV6),
    Mutant(
        "ipv6-restart-skips-checkpoint", IPAMD,
        "        ipv6.start(self)\n"
        "        rows = self.checkpoint.read() if self.checkpoint is not None else []\n",
        "        ipv6.start(self)\n"
        "        rows = []  # IPv6 mode: the /80 is EC2's word, the pods come back by themselves\n",
        "a restarted daemon in IPv6 mode takes its /80 from EC2 but not its pods from the "
        "checkpoint: the running pods' addresses are free again and go to new pods",
        IPV6),
    Mutant(
        "ipv6-restart-forgets-cooldowns", IPAMD,
        "        if self.cfg.strategy.keeps_ip_cooldowns and self.checkpoint is not None:\n"
        "            self.ds.recall_cooling(self.checkpoint.read_cooling())\n"
        "        _, dropped = self.ds.restore(rows)\n",
        "        _, dropped = self.ds.restore(rows)\n",
        "the IPv6 start-up restores the pods but not the cooldowns of the addresses freed "
        "just before the restart: the next pod gets one of them at once",
        IPV6),
    Mutant(
        "ipv6-startup-trusts-imds-prefix", V6,
        "    prefixes = list(primary.ipv6_prefixes)\n",
        "    import ipaddress  # IMDS's ipv6-prefix is the node's word on its /80s\n"
        "    shown = {str(ipaddress.ip_network(p, strict=False)) for v in views\n"
        "             if v.device_index == 0 for p in v.ipv6_prefixes}\n"
        "    stale = [p for p in primary.ipv6_prefixes\n"
        "             if str(ipaddress.ip_network(p, strict=False)) not in shown]\n"
        "    if stale:  # EC2 lists a /80 IMDS does not: given back, a new one taken\n"
        "        d.ec2._call(\"UnassignIpv6Addresses\", NetworkInterfaceId=primary.eni_id,\n"
        "                    Ipv6Prefix=stale)\n"
        "    prefixes = [p for p in primary.ipv6_prefixes if p not in stale]\n",
        "the IPv6 start-up believes IMDS's ipv6-prefix: a /80 EC2 holds that a partial or "
        "stale IMDS read leaves out is released with the running pods on it and a new one "
        "assigned (upstream 3824's class in IPv6 mode)",
        IPV6),
    Mutant(
        "ipv6-strict-subnet-read", V6,
        "    for v in views:\n"
        "        if v.device_index and v.subnet_ipv6_cidr is None:\n"
        "            d.record_decision(\"startup-skip-ipv4-only-eni\", eni=v.eni_id)\n",
        "    require_ipv6_subnets(d, views)  # every ENI has an IPv6 subnet block\n",
        "v1.20.0-v1.20.4's IPv6 start-up: an ENI whose subnet-ipv6-cidr-blocks IMDS answers "
        "404 for (an unmanaged ENI of an IPv4-only subnet) fails the read of every ENI, and "
        "the daemon never starts again (upstream 3489)",
        IPV6),
]

BY_NAME = {m.name: m for m in MUTANTS}

# --quick: one bug each that the replays below should catch, and one they should not.
QUICK = ("startup-from-imds", "prefix-pick-ignores-holder", "ip-cooldown-not-started")
QUICK_SCENARIOS = ("restart-stale-imds", "prefix-partial-read")
