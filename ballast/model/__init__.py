"""The shared load model every cluster-level program reads: the policy, load annotations and their
freshness, what is known of a node, per-node verdicts, the estimation of just-placed pods, and the
rebalancer's section of the policy (``rebalance_policy``).

Pure logic and small thread-safe records, no HTTP and no Kubernetes client: the extender, the annotator
and the rebalancer import it, and it imports none of them."""
