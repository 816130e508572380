"""cnikit.check: watching a run and judging it.

    prober / prober_proc   the client: one process, a UDP socket in every pod, one epoll loop
    nemesis                faults done to EC2, recorded as operations
    monitor                EC2's ownership (and the daemon's view) as observations
    history                the append-only, JSON-serialisable record of all of the above
    checkers, invariants   folds over the history: violations and warnings, timestamped
    watch                  Watch(fabric): all of it wired to a fabric's pods
"""
