"""The EC2 gate: an HTTP front speaking the EC2 Query protocol in front of moto/LocalStack.

Why: moto hands out duplicate and reserved IPs, ignores limits and prefix delegation and
loops forever on a full subnet (moto 5.2; tests/unit/test_gate_rules.py). A chaos kit whose
EC2 can itself double-assign an IP would blame CNIs for its own bugs, so every client talks
to the gate instead.

How it works
- aiohttp serves (`web.SockSite` makes `add_listener(sock)` trivial: the fabric hands a
  socket bound inside the VPC namespace); a small pooled keep-alive client
  (cnikit/cloud/upstream.py) forwards to the upstream. Both run on one event loop in a
  background thread.
- The gate keeps a mirror of subnets, instances and ENIs (cnikit/cloud/models.py), loaded
  from the upstream at start and updated after each successful mutating call it forwarded;
  any mutating call it does not model (CreateVpc, CreateTags, ...) is forwarded and
  followed by a full resync. Mutating calls are serialised by one lock, so two concurrent
  requests can never be given the same IP.
- The gate decides every address itself (count-based Assign, CreateNetworkInterface and
  RunInstances primaries) and forwards explicit addresses, so the upstream never chooses.
  Prefixes (/28) live only in the gate: moto ignores them.
- DescribeNetworkInterfaces is answered from the mirror, rendered from the upstream's own
  XML for each ENI with the gate's addresses, prefixes and attachment: filters moto crashes
  on work, prefixes show, `describe-lag` renders the state of N seconds ago, and it costs
  no upstream call. Other reads are forwarded untouched.
- Faults (cnikit/cloud/faults/) are applied before a call is served, except to calls the
  fault IMDS marks (faultcore.caller's header): it plays the hypervisor, which EC2 API
  throttling or Describe lag never reach. Every mutating call lands in the audit log
  (cnikit/cloud/audit.py) with its outcome.
- Ownership (`owners()`, `wait_change()`, `GET /_cnikit/owners` in cnikit/cloud/control.py)
  is served from the mirror, one immutable snapshot per version, never by calling the
  upstream.
- After-call hooks (`gate.after`, cnikit/cloud/after_call.py): run once a call is served,
  before its answer leaves, knowing the calling instance (its X-Cnikit-Instance-Id header
  or the ENI holding its source address): the nemesis's crash points hang there.
- Regions: as EC2 and moto do, the gate serves whatever region a request is signed for (its
  SigV4 credential scope; unsigned requests get the gate's own region). Each region has its
  own mirror (rules never compare addresses across regions) and Describe history; its
  first request loads it from the upstream. Calls the gate makes itself are signed for the
  region they act on. A fault acts on every region unless it names one (`region`); the
  audit log is shared (its records name the region); `owners()` and `wait_change()` serve
  the gate's own region unless asked for another.
- Errors: the gate's own refusals and unexpected failures answer EC2's XML error format
  (`InternalError` 500 for a gate bug, logged); a non-XML upstream error (moto's HTML 500)
  becomes `InternalError` XML too, so clients never see a traceback.

Where each part lives (the rules EC2 enforces are the mirror's, cnikit/cloud/models.py; a
request's parameters, filters and pages are read in cnikit/cloud/query.py, EC2's XML
envelope is cnikit/cloud/responses.py, the upstream's answers become mirror records in
cnikit/cloud/upstream_xml.py; each action's answer is made beside its handler):

    server.py      the HTTP front: parse, validate, fault stages, dispatch, answer; lifecycle
    backend.py     forwarding to the upstream, regions and their mirrors, resync, changes
    actions.py     the registry of modelled actions (a group is one class, defined = registered)
    instances.py   RunInstances, TerminateInstances
    interfaces.py  Create/Delete/Attach/Detach/DescribeNetworkInterfaces (eni_item.py: an
                   ENI's <item>; cnikit/cloud/eni_filters.py: Describe's filters)
    addresses.py   Assign/UnassignPrivateIpAddresses (addresses and /28 prefixes)
    ipv6.py        Assign/UnassignIpv6Addresses (addresses and /80 prefixes)
    trunks.py      Associate/Disassociate/DescribeTrunkInterfaceAssociations: branch ENIs
                   on trunk ENIs (rules: cnikit/cloud/trunks.py)
    subnets.py     DescribeSubnets
    vpcs.py        CreateVpc, DescribeVpcs, CreateSubnet (given IPv6 blocks)
"""

from cnikit.cloud.gate.server import CONTROL, Gate, check_region

__all__ = ["CONTROL", "Gate", "check_region"]
