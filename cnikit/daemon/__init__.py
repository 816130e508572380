"""The reference CNI daemon (upstream's ipamd) with upstream-faithful and hardened profiles.

    config.py      upstream's environment variables (+ CNIKIT_PROFILE, CNIKIT_TIME_SCALE)
    apis.py        the two views it reads: Ec2Api (truth) and ImdsApi (maybe stale)
    datastore.py   ENIs, /32 IPs and /28 prefixes, who holds each IP, IP cooldown
    checkpoint.py  ipam.json in upstream's vpc-cni-ipam/1 format, atomic writes
    pool.py        warm-pool arithmetic (WARM_ENI/IP/PREFIX_TARGET, MINIMUM_IP_TARGET)
    ipamd.py       IpamD: start-up, ADD/DEL/CHECK, pool manager, ENI lifecycle, tick()
    reconcile.py   the reconcile strategies a profile picks (how much it trusts IMDS)
    subnets.py     subnet discovery: the subnets of the node's AZ a new ENI may go to
    profiles/      one module per profile: name, summary, strategy, expected verdicts
    ec2_query.py / imds_http.py   the real views (EC2 Query API, IMDSv2)
    fakes.py       in-memory views for unit tests; clock.py: real and fake clocks
    server.py      the process: unix socket for the plugin, metrics, introspection
    podnet.py      the pod data plane for a request, over cnikit.fabric.wiring
    handle.py      DaemonHandle: a node daemon's start, readiness, kill and stop, whatever
                   runs it (the process and container runtimes fill in the spawning)
    process.py     DaemonProcess: run / kill / restart `cnikit daemon` in a namespace

The cluster that runs a daemon on every node is above this package (cnikit.cluster).
"""
