"""The rebalancer: moves pods off nodes that stay hot, through the Eviction API, only where they fit.

Pure (no I/O, tested with tables):

- ``pods``      a pod read once from the watch: owner, workload, priority, QoS, estimate, constraints, and
  why it may never be evicted.
- ``classify``  hot, cool, normal or unknown from fresh annotations; cycle counts; the wait after an
  eviction for a newer measurement.
- ``victims``   who may go, how much each takes off (measured from a fresh NodeLoad, else estimated), and
  in which order.
- ``fit``       whether a victim would be placed on a cool node (the extender's filter, requests, selectors,
  taints) and not go above ``high`` with a margin, with this cycle's reservations.
- ``limits``    per node, namespace, cycle, and per workload in a window.
- ``plan``      one cycle's decisions, and the view of them (``/rebalance``, ``--once --json``).
- ``policy_check`` policies that set the extender and the rebalancer against each other (reported).
- ``promises``  the evictions that still count (evicted or of unknown outcome), and how a new leader
  rebuilds its predecessor's from the rebalancer's own Events.

I/O:

- ``cache``     watch-driven nodes and pods (``ballast.kube.client.Reflector``), indexed by node.
- ``nodeloads`` watch-driven NodeLoads: each node's measured per-pod usage, read when fresh.
- ``evictor``   ``policy/v1`` Evictions (a 429 naming a PodDisruptionBudget, throttling, unknown
  outcomes) and the Events that remember each call.
- ``metrics``, ``cli``, ``run``: counters, flags, and the wiring with leader election and health.
"""
