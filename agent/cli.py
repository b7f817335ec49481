"""``ballast agent``: the node agent's command line (run mode, and ``topology`` to check discovery).

``register(subparsers)`` adds the ``agent`` command to the ``ballast`` parser; each handler is stored
as ``args.func`` and returns the exit code, the convention of ``app/cli.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent.topology import CPUTopology, TopologyError
from app.durations import parse_duration

__all__ = ["register", "run_agent", "show_topology", "topology_json"]


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return seconds


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``agent`` (and its ``topology`` subcommand) to a ``ballast`` subparsers object."""
    agent = subparsers.add_parser(
        "agent",
        help="run the node agent (topology discovery, NodeResourceTopology publishing, exclusive cpusets)",
        description="Run the Ballast node agent on one node: discover its CPU/NUMA topology, publish it as a "
        "NodeResourceTopology, and pin exclusive cpusets. 'ballast agent topology' only prints what "
        "discovery finds.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    agent.add_argument(
        "--node-name", metavar="NAME", help="name of the Node this agent runs on (required to run)"
    )
    agent.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig for the API server; without it the in-cluster service account is used",
    )
    agent.add_argument(
        "--sysfs",
        type=Path,
        default=Path("/sys"),
        metavar="DIR",
        help="root of the sysfs tree to read topology from",
    )
    agent.add_argument(
        "--kubelet-config",
        type=Path,
        metavar="FILE",
        help="the kubelet's KubeletConfiguration file; without it the settings come from the API server's "
        "/api/v1/nodes/NAME/proxy/configz",
    )
    agent.add_argument(
        "--resync",
        type=_duration,
        default="10s",
        metavar="DURATION",
        help="how often to re-read the topology and kubelet settings and re-publish the NRT when it changed",
    )
    _add_logging(agent)
    agent.set_defaults(func=run_agent)

    commands = agent.add_subparsers(dest="agent_command", metavar="COMMAND")
    topology = commands.add_parser(
        "topology",
        help="print the CPU/NUMA topology discovered from sysfs, then exit",
        description="Print the CPUs (core, socket, NUMA node) and NUMA nodes (CPUs, memory, distances) that "
        "topology discovery finds, as a table or as JSON.",
    )
    # SUPPRESS keeps `ballast agent --sysfs DIR topology` working: the parent's value stays when absent here.
    topology.add_argument(
        "--sysfs",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="root of the sysfs tree (default: /sys)",
    )
    topology.add_argument("--json", action="store_true", help="print JSON instead of a table")
    topology.set_defaults(func=show_topology)
    return agent


def _add_logging(parser: argparse.ArgumentParser) -> None:
    # Imported here: app.cli imports this module, so a top-level import would be circular.
    from app.cli import add_common

    add_common(parser)


def run_agent(args: argparse.Namespace) -> int:
    """Run mode: publish the NRT and enforce cpusets. The loop against the API server is not written yet."""
    if not args.node_name:
        print(
            "ballast agent: --node-name is required (usually the downward API's spec.nodeName)",
            file=sys.stderr,
        )
        return 2
    raise NotImplementedError(
        "ballast agent: the NRT publishing and cpuset loop is not implemented yet; "
        "'ballast agent topology' shows what topology discovery finds"
    )


def topology_json(topology: CPUTopology) -> dict[str, Any]:
    """The discovery result as plain JSON data (CPUs sorted by id, NUMA nodes by id)."""
    return {
        "cpus": [{"cpu": c.cpu, "core": c.core, "socket": c.socket, "numa": c.numa} for c in topology.cpus],
        "numa_nodes": [
            {
                "id": n.id,
                "cpus": str(topology.cpus_in_numa(n.id)),
                "memory_bytes": n.memory_bytes,
                "distances": {str(other): d for other, d in n.distances},
            }
            for n in topology.numa_nodes
        ],
    }


def _gib(memory: int | None) -> str:
    return "unknown" if memory is None else f"{memory / 2**30:.1f} GiB"


def topology_table(topology: CPUTopology) -> str:
    """A summary line, the NUMA nodes, then one row per CPU."""
    lines = [
        f"{topology.num_cpus} CPUs, {topology.num_cores} cores, {topology.num_sockets} socket(s), "
        f"{topology.num_numa_nodes} NUMA node(s), {topology.cpus_per_core} CPU(s) per core",
        "",
        f"{'NUMA':<6}{'CPUS':<24}{'MEMORY':<14}DISTANCES",
    ]
    for n in topology.numa_nodes:
        distances = " ".join(f"{other}:{d}" for other, d in n.distances) or "-"
        lines.append(
            f"{n.id:<6}{str(topology.cpus_in_numa(n.id)) or '-':<24}{_gib(n.memory_bytes):<14}{distances}"
        )
    lines += ["", f"{'CPU':<6}{'CORE':<6}{'SOCKET':<8}NUMA"]
    lines += [f"{c.cpu:<6}{c.core:<6}{c.socket:<8}{c.numa}" for c in topology.cpus]
    return "\n".join(lines)


def show_topology(args: argparse.Namespace) -> int:
    """``ballast agent topology``: discover from ``--sysfs`` and print; exit 1 naming the file on failure."""
    try:
        topology = CPUTopology.from_sysfs(args.sysfs)
    except TopologyError as e:
        print(f"ballast agent topology: {e}", file=sys.stderr)
        return 1
    print(json.dumps(topology_json(topology)) if args.json else topology_table(topology))
    return 0
