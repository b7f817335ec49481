"""The extender service: the verbs kube-scheduler calls (filter, prioritize, bind, preempt), its watches
of nodes, pods and topology, the NUMA placement, and the HTTP layer (``ballast.extender.api``)."""
