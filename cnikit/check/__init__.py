"""cnikit.check: watching a run and judging it.

    prober / prober_proc   the client: one process, sockets in every pod, epoll loops in
    prober_shard           two threads (each a socket per pod and its share of the pairs)
    monitor                EC2's ownership (and the daemon's view) as observations
    history                the append-only, JSON-serialisable record of all of the above
    checkers, invariants   folds over the history: violations and warnings, timestamped
    watch                  Watch(fabric): all of it wired to a fabric's pods

Faults are the nemesis's (cnikit.cluster.nemesis), above this package: it records each in
the history; the checkers never read those entries.
"""
