"""Reading the node's CPU topology from sysfs: the only I/O behind
``ballast.agent.topology.model.CPUTopology``.

The root is a parameter (what ``/sys`` is), so tests point it at a fake tree. Core ids follow the
kubelet (``getUniqueCoreID``): the lowest CPU id among a core's hardware threads, not sysfs ``core_id``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ballast.agent.cpuset import CPUSet, CPUSetParseError
from ballast.agent.topology.model import CPUInfo, CPUTopology, NUMANode, TopologyError

__all__ = ["read_topology"]


_NODE_DIR = re.compile(r"node(\d+)")
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s+kB\s*$", re.MULTILINE)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise TopologyError("missing (required for topology discovery)", path) from None
    except OSError as e:
        raise TopologyError(f"unreadable: {e.strerror or e}", path) from None


def _read_cpulist(path: Path) -> CPUSet:
    try:
        return CPUSet.parse(_read(path))
    except CPUSetParseError as e:
        raise TopologyError(str(e), path) from None


def _read_int(path: Path) -> int:
    text = _read(path).strip()
    # sysfs ids are decimal; physical_package_id is -1 on some virtual machines without a package.
    if not re.fullmatch(r"-?\d+", text):
        raise TopologyError(f"expected an integer, found {text!r}", path)
    return int(text)


def _core_key(cpu_dir: Path, cpu: int, socket: int, die: int) -> int | tuple[int, int, int]:
    """The siblings' lowest id (kubelet ``getUniqueCoreID``), or (socket, die, core_id) without the lists."""
    topo = cpu_dir / f"cpu{cpu}" / "topology"
    for name in ("thread_siblings_list", "core_cpus_list"):
        path = topo / name
        if path.exists():
            siblings = _read_cpulist(path)
            if cpu not in siblings:
                raise TopologyError(f"does not list CPU {cpu} itself (found {str(siblings)!r})", path)
            return siblings.sorted()[0]
    # Very old or stripped-down kernels: group threads the way the kernel defines siblings.
    return (socket, die, _read_int(topo / "core_id"))


def read_topology(root: Path | str = Path("/sys")) -> CPUTopology:
    """Discover the topology of the online CPUs from a sysfs tree (``root`` is what ``/sys`` is).

    Reads ``devices/system/cpu/online``, each online CPU's ``topology/`` files and, when
    ``devices/system/node`` exists, each ``nodeN/{cpulist,meminfo,distance}``. Offline CPUs are left
    out. Raises ``TopologyError`` naming the file for a missing required file or malformed content.
    """
    root = Path(root)
    cpu_dir = root / "devices" / "system" / "cpu"
    online = _read_cpulist(cpu_dir / "online")
    if not online:
        raise TopologyError("lists no online CPU", cpu_dir / "online")

    placement: dict[int, tuple[int, int, int | tuple[int, int, int]]] = {}
    for cpu in online:
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        socket = max(_read_int(topo / "physical_package_id"), 0)
        die_path = topo / "die_id"
        die = max(_read_int(die_path), 0) if die_path.exists() else 0
        placement[cpu] = (socket, die, _core_key(cpu_dir, cpu, socket, die))

    # Cores found via core_id (no sibling lists) still get the kubelet's id: their lowest CPU.
    lowest: dict[int | tuple[int, int, int], int] = {}
    for cpu, (_, _, key) in placement.items():
        lowest[key] = min(cpu, lowest.get(key, cpu))

    numa_of, nodes = _read_numa_nodes(root / "devices" / "system" / "node", online)
    cpus = tuple(
        CPUInfo(cpu=cpu, core=lowest[key], socket=socket, numa=numa_of[cpu], die=die)
        for cpu, (socket, die, key) in placement.items()
    )
    return CPUTopology(cpus, nodes)


def _read_numa_nodes(node_dir: Path, online: CPUSet) -> tuple[dict[int, int], tuple[NUMANode, ...]]:
    """NUMA id of every online CPU, and the nodes with memory and distances.

    Without ``devices/system/node`` (kernels without NUMA) all CPUs are on node 0, memory unknown.
    """
    ids = []
    if node_dir.is_dir():
        ids = sorted(int(m.group(1)) for p in node_dir.iterdir() if (m := _NODE_DIR.fullmatch(p.name)))
    if not ids:
        return dict.fromkeys(online, 0), (NUMANode(0),)

    numa_of: dict[int, int] = {}
    raw_distances: dict[int, list[int]] = {}
    memory: dict[int, int | None] = {}
    for node in ids:
        path = node_dir / f"node{node}"
        for cpu in _read_cpulist(path / "cpulist") & online:
            if cpu in numa_of:
                raise TopologyError(f"CPU {cpu} is also listed by node{numa_of[cpu]}", path / "cpulist")
            numa_of[cpu] = node
        memory[node] = _read_memtotal(path / "meminfo")
        distance_path = path / "distance"
        if distance_path.exists():
            raw_distances[node] = _read_distances(distance_path, len(ids))

    orphans = online - CPUSet(numa_of)
    if orphans:
        raise TopologyError(f"online CPU(s) {orphans} are not listed in any nodeN/cpulist", node_dir)
    # The kernel prints the distances to the online nodes in id order, so the j-th value is for ids[j].
    nodes = tuple(
        NUMANode(node, memory[node], tuple(zip(ids, raw_distances.get(node, ()), strict=False)))
        for node in ids
    )
    return numa_of, nodes


def _read_memtotal(path: Path) -> int | None:
    if not path.exists():
        return None
    match = _MEMTOTAL.search(_read(path))
    if match is None:
        raise TopologyError("has no 'Node N MemTotal: <n> kB' line", path)
    return int(match.group(1)) * 1024


def _read_distances(path: Path, num_nodes: int) -> list[int]:
    fields = _read(path).split()
    if not all(f.isascii() and f.isdigit() for f in fields):
        raise TopologyError(f"expected space-separated integers, found {' '.join(fields)!r}", path)
    if len(fields) != num_nodes:
        raise TopologyError(f"has {len(fields)} distance(s) for {num_nodes} NUMA node(s)", path)
    return [int(f) for f in fields]
