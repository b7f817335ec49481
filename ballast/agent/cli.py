"""``ballast agent``: the node agent's command line (run mode, and ``topology`` to check discovery).

``COMMAND`` declares the ``agent`` command to ``ballast`` (``ballast.program.skeleton``); each handler is
stored as ``args.func`` and returns the exit code, the convention of every ``ballast`` command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ballast.agent.topology.model import CPUTopology, TopologyError
from ballast.agent.topology.sysfs import read_topology
from ballast.program.flags import (
    HelpFormatter,
    add_kubeconfig,
    add_metrics_endpoint,
    add_watch_stall,
    duration,
)
from ballast.program.skeleton import Command

__all__ = ["COMMAND", "show_topology", "topology_json"]


def add_flags(agent: argparse.ArgumentParser) -> None:
    """``ballast agent``'s own flags (the logging flags come last, from the skeleton)."""
    agent.add_argument(
        "--node-name",
        metavar="NAME",
        help="name of the Node this agent runs on; when not given, the NODE_NAME environment variable "
        "(a DaemonSet sets it from the downward API's spec.nodeName)",
    )
    add_kubeconfig(agent)
    agent.add_argument(
        "--sysfs",
        type=Path,
        default=Path("/sys"),
        metavar="DIR",
        help="root of the sysfs tree to read topology from (read once at start)",
    )
    kubelet = agent.add_mutually_exclusive_group()
    kubelet.add_argument(
        "--kubelet-config",
        type=Path,
        default=Path("/var/lib/kubelet/config.yaml"),
        metavar="FILE",
        help="the kubelet's KubeletConfiguration file (mounted from the node), read on every resync",
    )
    kubelet.add_argument(
        "--kubelet-configz",
        action="store_true",
        help="read the kubelet settings from the API server's /api/v1/nodes/NAME/proxy/configz instead of "
        "a file: at start, then at most every 10 minutes",
    )
    agent.add_argument(
        "--resync",
        type=duration,
        default="10s",
        metavar="DURATION",
        help="how often to re-check the kubelet settings and the stored NRT and re-publish it when it "
        "differs (Node label changes re-publish at once)",
    )
    agent.add_argument(
        "--publish",
        type=_publish_list,
        default="crane",
        metavar="LIST",
        help="which NodeResourceTopology objects to publish, comma-separated: crane "
        "(topology.crane.io/v1alpha1, what the Ballast extender and crane-scheduler read) and/or community "
        "(topology.node.k8s.io/v1alpha2, what scheduler-plugins' NodeResourceTopologyMatch reads)",
    )
    add_metrics_endpoint(
        agent, port_default=8091, endpoints="the /healthz, /readyz and /metrics endpoint", once=False
    )
    load = agent.add_argument_group("load reporting (the built-in load source: --report-load)")
    load.add_argument(
        "--report-load",
        action="store_true",
        help="measure the node's and each pod's CPU and memory from /proc and the pod cgroups, and publish "
        "them: crane's load annotations and node_hot_value on this Node, each pod's usage in its NodeLoad",
    )
    load.add_argument(
        "--load-sample-interval",
        type=duration,
        default="10s",
        metavar="DURATION",
        help="how often /proc and the pod cgroups are read",
    )
    load.add_argument(
        "--load-report-interval",
        type=duration,
        default="1m",
        metavar="DURATION",
        help="how often the NodeLoad's status is written (at most once per interval); the hot value's "
        "period too",
    )
    load.add_argument(
        "--proc-root",
        type=Path,
        default=Path("/proc"),
        metavar="DIR",
        help="the proc file system to read stat and meminfo from (the host's, even inside a container)",
    )
    load.add_argument(
        "--cgroup-root",
        type=Path,
        default=Path("/sys/fs/cgroup"),
        metavar="DIR",
        help="the host's cgroup tree (v1 or v2) the pod cgroups are read from: the load, and each "
        "container's cpuset, which the CPU manager reads back on every reconcile",
    )
    load.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="the DynamicSchedulerPolicy (the shipped ConfigMap): syncPolicy says which load annotations to "
        "write and how often, hotValue the binding windows; re-read when the file changes or on SIGHUP "
        "(a file that does not load is refused and the running policy kept). Required with --report-load",
    )
    cpu = agent.add_argument_group("CPU manager (runs while the published NRT says cpuManagerPolicy Static)")
    cpu.add_argument(
        "--cpu-manager",
        choices=("on", "off"),
        default="on",
        help="off: publish only, with cpuManagerPolicy None so that the scheduler assigns no CPUs here",
    )
    # Written out, not imported: the parser must not load gRPC. tests/agent/test_run.py checks they match.
    cpu.add_argument(
        "--cri-endpoint",
        default="unix:///run/containerd/containerd.sock",
        metavar="URL",
        help="CRI runtime socket for cpuset updates (containerd's; CRI-O: unix:///var/run/crio/crio.sock)",
    )
    cpu.add_argument(
        "--nri",
        choices=("auto", "off"),
        default="off",
        help="auto: where the runtime's NRI socket (--nri-socket) exists, register as an NRI plugin so that "
        "containers are created on their cpuset (not yet shown end to end: docs/agent.md); off: cpusets "
        "only by the CRI reconcile, after creation",
    )
    cpu.add_argument(
        "--nri-socket",
        default="/var/run/nri/nri.sock",
        metavar="PATH",
        help="the runtime's NRI socket (containerd >= 1.7 with NRI enabled, CRI-O >= 1.26)",
    )
    cpu.add_argument(
        "--cpu-state-file",
        type=Path,
        default=Path("/var/lib/ballast/cpu_manager_state"),
        metavar="FILE",
        help="the CPU manager's checkpoint of assignments",
    )
    cpu.add_argument(
        "--scheduler-name",
        dest="scheduler_names",
        action="append",
        metavar="NAME",
        help="scheduler whose topology-result annotations are trusted; repeat for several "
        "(when not given: ballast-scheduler)",
    )
    cpu.add_argument(
        "--result-key-file",
        metavar="FILE",
        help="key (at least 32 bytes, e.g. a mounted Secret) the extender seals topology results with; when "
        "given, only results whose ballast.io/topology-result-seal verifies are honoured (give the extender "
        "the same key)",
    )
    cpu.add_argument(
        "--default-cpu-policy",
        choices=("none", "exclusive", "numa", "immovable"),
        default="exclusive",
        help="CPU policy of eligible pods without a topology.crane.io/cpu-policy annotation",
    )
    cpu.add_argument(
        "--cpu-manager-reconcile-period",
        type=duration,
        default="5s",
        metavar="DURATION",
        help="how often the CPU manager re-applies cpusets (pod events also trigger a pass)",
    )
    add_watch_stall(agent)


def add_topology(agent: argparse.ArgumentParser) -> None:
    """``ballast agent topology``: discovery only, after the agent's own flags."""
    commands = agent.add_subparsers(dest="agent_command", metavar="COMMAND")
    topology = commands.add_parser(
        "topology",
        # Named outright: argparse would build it from the agent's two-line usage above.
        prog=f"{agent.prog} topology",
        formatter_class=HelpFormatter,
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


COMMAND = Command(
    name="agent",
    help="run the node agent (topology discovery, NodeResourceTopology publishing, exclusive cpusets)",
    description=(
        "Run the Ballast node agent on one node: discover its CPU/NUMA topology, publish it as a "
        "NodeResourceTopology, and pin exclusive cpusets. 'ballast agent topology' only prints what "
        "discovery finds."
    ),
    # Without a command the agent runs; argparse alone would print a bare "COMMAND ..." as if required.
    usage=(
        "%(prog)s [OPTIONS]                                    run the node agent\n"
        "       %(prog)s [OPTIONS] topology [--sysfs DIR] [--json]   print the discovered topology"
    ),
    flags=add_flags,
    run="ballast.agent.run:run",
    subcommands=add_topology,
)


def _publish_list(text: str) -> frozenset[str]:
    names = {p.strip() for p in text.split(",") if p.strip()}
    unknown = names - {"crane", "community"}
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected crane, community or crane,community; got {text!r}")
    return frozenset(names)


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
        topology = read_topology(args.sysfs)
    except TopologyError as e:
        print(f"ballast agent topology: {e}", file=sys.stderr)
        return 1
    print(json.dumps(topology_json(topology)) if args.json else topology_table(topology))
    return 0
