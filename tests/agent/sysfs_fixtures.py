"""Fake sysfs trees for real machine shapes, written into a test's ``tmp_path``.

A machine is described compactly (``Machine``: one ``(cpu, socket, core_id, numa)`` row per CPU, with
``core_id`` as the kernel numbers cores within a package) and ``write_sysfs`` lays out the files the
kernel would show: ``devices/system/cpu/online``, ``cpuN/topology/*`` and ``devices/system/node/nodeN/*``.
Offline CPUs get ``cpuN/online`` = 0 and no ``topology/`` directory, as on x86.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ballast.agent.cpuset import CPUSet

GiB_KB = 1024 * 1024  # one GiB in the kB unit meminfo uses


@dataclass(frozen=True)
class Machine:
    rows: tuple[tuple[int, int, int, int], ...]
    """``(cpu, socket, core_id_in_package, numa)`` for every present CPU, online or not."""
    offline: frozenset[int] = frozenset()
    memory_kb: Mapping[int, int] = field(default_factory=dict)
    """MemTotal per NUMA node in kB; nodes missing here get no ``meminfo`` file."""
    distances: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """SLIT row per NUMA node; nodes missing here get no ``distance`` file."""
    node_dir: bool = True
    """False: no ``devices/system/node`` at all (kernel without NUMA)."""
    sibling_files: tuple[str, ...] = ("thread_siblings_list", "core_cpus_list")
    die_id: bool = True
    memory_only_nodes: tuple[int, ...] = ()
    """NUMA nodes with memory but no CPUs (an empty ``cpulist``)."""

    @property
    def online(self) -> CPUSet:
        return CPUSet(r[0] for r in self.rows) - CPUSet(self.offline)


def grid(
    sockets: int, cores: int, threads: int, numa_per_socket: int = 1
) -> tuple[tuple[int, int, int, int], ...]:
    """Rows numbered the way Linux numbers x86 CPUs: all first threads, then all second threads.

    CPU ``t * sockets * cores + s * cores + c`` is thread ``t`` of core ``c`` on socket ``s``; the cores of
    a socket are split evenly over its NUMA nodes.
    """
    rows = []
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                numa = s * numa_per_socket + c * numa_per_socket // cores
                rows.append((t * sockets * cores + s * cores + c, s, c, numa))
    return tuple(sorted(rows))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_sysfs(root: Path, machine: Machine) -> Path:
    """Write the tree under ``root`` (which plays ``/sys``) and return ``root``."""
    cpu_dir = root / "devices" / "system" / "cpu"
    present = CPUSet(r[0] for r in machine.rows)
    _write(cpu_dir / "online", f"{machine.online}\n")
    _write(cpu_dir / "present", f"{present}\n")
    _write(cpu_dir / "possible", f"{present}\n")
    siblings: dict[tuple[int, int], list[int]] = {}
    for cpu, socket, core, _ in machine.rows:
        if cpu not in machine.offline:
            siblings.setdefault((socket, core), []).append(cpu)
    for cpu, socket, core, _ in machine.rows:
        if cpu in machine.offline:
            _write(cpu_dir / f"cpu{cpu}" / "online", "0\n")
            continue
        if cpu != 0:  # the kernel shows no online file for the boot CPU
            _write(cpu_dir / f"cpu{cpu}" / "online", "1\n")
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        _write(topo / "physical_package_id", f"{socket}\n")
        _write(topo / "core_id", f"{core}\n")
        if machine.die_id:
            _write(topo / "die_id", "0\n")
        for name in machine.sibling_files:
            _write(topo / name, f"{CPUSet(siblings[(socket, core)])}\n")

    if machine.node_dir:
        node_dir = root / "devices" / "system" / "node"
        numa_ids = sorted({r[3] for r in machine.rows} | set(machine.memory_only_nodes))
        _write(node_dir / "online", f"{CPUSet(numa_ids)}\n")
        for numa in numa_ids:
            # x86 drops offline CPUs from the node's mask; the reader must cope either way.
            cpus = CPUSet(r[0] for r in machine.rows if r[3] == numa) - CPUSet(machine.offline)
            _write(node_dir / f"node{numa}" / "cpulist", f"{cpus}\n")
            if numa in machine.memory_kb:
                _write(node_dir / f"node{numa}" / "meminfo", _meminfo(numa, machine.memory_kb[numa]))
            if numa in machine.distances:
                _write(
                    node_dir / f"node{numa}" / "distance", " ".join(map(str, machine.distances[numa])) + "\n"
                )
    return root


def _meminfo(numa: int, total_kb: int) -> str:
    free = total_kb // 2
    lines = [
        ("MemTotal", total_kb),
        ("MemFree", free),
        ("MemUsed", total_kb - free),
        ("Active", 1024),
        ("HugePages_Total", 0),
    ]
    return "".join(
        f"Node {numa} {name}:{value:>16}{'' if name.startswith('Huge') else ' kB'}\n" for name, value in lines
    )


def slit(matrix: Iterable[Iterable[int]]) -> dict[int, tuple[int, ...]]:
    """``{node: row}`` from a square distance matrix."""
    return {i: tuple(row) for i, row in enumerate(matrix)}


# --- real machine shapes -----------------------------------------------------------------------------

ONE_SOCKET_NO_SMT = Machine(rows=grid(1, 4, 1), memory_kb={0: 16 * GiB_KB}, distances={0: (10,)})
"""A small VM or desktop: 1 socket, 4 cores, no SMT, one NUMA node."""

TWO_SOCKETS_HT = Machine(
    rows=grid(2, 4, 2),
    memory_kb={0: 32 * GiB_KB, 1: 32 * GiB_KB},
    distances=slit([[10, 21], [21, 10]]),
)
"""2 sockets x 4 cores x 2 threads; socket 0 is CPUs 0-3,8-11 and NUMA node 0."""

TWO_SOCKETS_TWO_NUMA_EACH = Machine(
    rows=grid(2, 4, 2, numa_per_socket=2),
    memory_kb={n: 16 * GiB_KB for n in range(4)},
    distances=slit([[10, 11, 21, 21], [11, 10, 21, 21], [21, 21, 10, 11], [21, 21, 11, 10]]),
)
"""Sub-NUMA clustering: 2 sockets x 4 cores x 2 threads, 2 NUMA nodes per socket (node0 = CPUs 0,1,8,9)."""

NO_NODE_DIR = Machine(rows=grid(1, 2, 2), node_dir=False)
"""A kernel built without NUMA: no ``devices/system/node``."""

OFFLINE_CPUS = Machine(
    rows=grid(2, 4, 2),
    offline=frozenset({3, 11, 5}),
    memory_kb={0: 32 * GiB_KB, 1: 32 * GiB_KB},
    distances=slit([[10, 21], [21, 10]]),
)
"""TWO_SOCKETS_HT with a whole core (3, 11) and one thread (5, sibling of 13) hot-unplugged."""

NON_CONTIGUOUS_IDS = Machine(
    rows=(
        (0, 0, 0, 0),
        (1, 0, 1, 0),
        (8, 0, 0, 0),
        (9, 0, 1, 0),
        (16, 1, 0, 1),
        (17, 1, 1, 1),
        (24, 1, 0, 1),
    ),
    memory_kb={0: 8 * GiB_KB, 1: 8 * GiB_KB},
    distances=slit([[10, 20], [20, 10]]),
)
"""Sparse CPU ids (firmware that numbers by APIC id): 0,1,8,9 on socket 0, 16,17,24 on socket 1."""
