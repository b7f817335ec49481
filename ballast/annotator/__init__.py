"""The node annotator: node load from Prometheus and hot values from recent bindings, onto Node annotations.

crane-scheduler's annotator, done right (see each module for what crane did and what changed):

- ``matching``  (pure) Prometheus series -> node, by one label (InternalIP, IP:port, name, name:port).
- ``bindings``  (pure) per-node, time-ordered, UID-keyed binding records and crane's hot-value formula.
- ``plan``      (pure) which annotations a node needs this cycle: one merge patch, or none.
- ``schedule``  (pure) per-metric sync periods, retry backoff, the hot-value refresh.
- ``sources``   watch handlers (no I/O): nodes, bindings from pods or ``Scheduled`` events.
- ``prometheus`` async HTTP API client (auth, TLS, prefixes, retries).
- ``controller`` one cycle (queries -> matching -> hot values -> plan -> patches) and the run loop.
- Lease leader election is ``ballast.program.leader`` (the rebalancer holds a Lease too).
- ``health``, ``metrics``, ``cli``, ``run``: endpoints, counters, flags and wiring.
"""
