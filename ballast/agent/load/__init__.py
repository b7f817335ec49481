"""The agent as Ballast's own load source: measure the node and its pods from the kernel, keep crane's
windows, publish the node's load annotations and its ``NodeLoad``.

Modules: ``procfs`` (node CPU and memory from ``/proc``), ``cgroups`` (each pod's CPU counter and working
set), ``pressure`` (PSI shares, and the rule that keeps pods at their own CPU limits out of the node's CPU
pressure), ``sampler`` (counters to rates), ``history`` (crane's windows over the samples, pure),
``checkpoint`` (the day of history across restarts), ``pods`` (the pods bound to this node and their
binding times), ``reporter`` (one Node patch and one NodeLoad status write, at most, per report),
``loop`` (its thread and wiring in ``ballast agent --report-load``), ``metrics``.
"""
