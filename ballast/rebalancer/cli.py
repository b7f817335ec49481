"""``ballast rebalancer``: command-line flags; ``COMMAND`` declares it to ``ballast``
(``ballast.program.skeleton``).

The handler returns the exit code: 0 done (``--once``) or clean shutdown; 1 a runtime failure (the API
server could not be listed in ``--once``, an eviction call failed); 2 a configuration problem (policy,
``spec.rebalance``, flags, kubeconfig). The work happens in ``ballast.rebalancer.run``.
"""

from __future__ import annotations

import argparse

from ballast.program.flags import (
    add_kubeconfig,
    add_policy_poll,
    add_serving,
    duration,
)
from ballast.program.leader import add_leader_flags
from ballast.program.skeleton import Command

__all__ = ["COMMAND", "add_flags"]


def add_flags(p: argparse.ArgumentParser) -> None:
    """``ballast rebalancer``'s own flags (the logging flags come last, from the skeleton)."""
    p.add_argument(
        "--policy",
        required=True,
        metavar="FILE",
        help="DynamicSchedulerPolicy YAML with spec.rebalance (without it the rebalancer idles); re-read "
        "when the file changes or on SIGHUP (a file that does not load is refused, the running one kept)",
    )
    add_policy_poll(p)
    add_kubeconfig(p)
    p.add_argument("--interval", type=duration, default="1m", metavar="DURATION", help="time between cycles")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and explain everything (Events, metrics, /rebalance) but call no eviction",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="list nodes and pods, run one cycle, print it, exit (one cycle counts one hot cycle: with "
        "consecutiveAbnormal above 1 it shows what waits, and evicts nothing)",
    )
    p.add_argument("--json", action="store_true", help="with --once: print the cycle as JSON")
    p.add_argument(
        "--load-report-interval",
        type=duration,
        default="1m",
        metavar="DURATION",
        help="the agents' --load-report-interval: a NodeLoad counts as fresh (its pods' measured usage is "
        "used instead of their estimates) while its updateTime is within two of these",
    )

    p.add_argument(
        "--event-ttl",
        type=duration,
        default="1h",
        metavar="DURATION",
        help="kube-apiserver's --event-ttl: how long the Events live that a new leader learns its "
        "predecessors' evictions from; with a longer workloadWindow a new leader evicts nothing until "
        "the evictions it cannot know of have left the window",
    )

    add_leader_flags(p, "ballast-rebalancer", "evicts", "evicting")

    add_serving(
        p,
        port_default=8092,
        endpoints="/healthz, /readyz, /metrics and /rebalance",
        relists="nodes and pods",
    )


COMMAND = Command(
    name="rebalancer",
    help="evict pods from nodes that stay hot, where the extender's rules place them on a cool node",
    description=(
        "Every --interval, read the nodes' load annotations (the extender's freshness rules); "
        "on a node hot for spec.rebalance.consecutiveAbnormal cycles, evict pods through the Eviction API "
        "(PodDisruptionBudgets hold) while a cool node would take them, within the limits. Runs "
        "continuously under Lease leader election, or once with --once."
    ),
    flags=add_flags,
    run="ballast.rebalancer.run:run",
)
