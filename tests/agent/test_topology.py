"""Topology discovery from fake sysfs trees of real machine shapes, and the model's queries."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUInfo, CPUTopology, NUMANode, TopologyError
from ballast.agent.topology.sysfs import read_topology
from tests.agent.sysfs_fixtures import (
    NO_NODE_DIR,
    NON_CONTIGUOUS_IDS,
    OFFLINE_CPUS,
    ONE_SOCKET_NO_SMT,
    TWO_SOCKETS_HT,
    TWO_SOCKETS_TWO_NUMA_EACH,
    Machine,
    grid,
    slit,
    write_sysfs,
)

GiB = 2**30


def discover(tmp_path: Path, machine: Machine) -> CPUTopology:
    return read_topology(write_sysfs(tmp_path / "sys", machine))


def cpu_dir(tmp_path: Path) -> Path:
    return tmp_path / "sys" / "devices" / "system" / "cpu"


def node_dir(tmp_path: Path) -> Path:
    return tmp_path / "sys" / "devices" / "system" / "node"


# --- discovered models ----------------------------------------------------------------------------


def test_one_socket_without_smt(tmp_path: Path) -> None:
    topo = discover(tmp_path, ONE_SOCKET_NO_SMT)
    assert topo == CPUTopology.from_cpus(
        [(cpu, cpu, 0, 0) for cpu in range(4)], numa_nodes=[NUMANode(0, 16 * GiB, ((0, 10),))]
    )
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets, topo.num_numa_nodes) == (4, 4, 1, 1)
    assert topo.cpus_per_core == 1


def test_two_sockets_with_ht(tmp_path: Path) -> None:
    topo = discover(tmp_path, TWO_SOCKETS_HT)
    # Linux numbering: CPU c and c+8 are the two threads of core c; socket 0 holds cores 0-3.
    assert topo == CPUTopology.from_cpus(
        [(cpu, cpu % 8, cpu % 8 // 4, cpu % 8 // 4) for cpu in range(16)],
        numa_nodes=[NUMANode(0, 32 * GiB, ((0, 10), (1, 21))), NUMANode(1, 32 * GiB, ((0, 21), (1, 10)))],
    )


def test_two_sockets_with_two_numa_nodes_each(tmp_path: Path) -> None:
    topo = discover(tmp_path, TWO_SOCKETS_TWO_NUMA_EACH)
    rows = [(cpu, cpu % 8, cpu % 8 // 4, cpu % 8 // 2) for cpu in range(16)]
    distances = [(10, 11, 21, 21), (11, 10, 21, 21), (21, 21, 10, 11), (21, 21, 11, 10)]
    nodes = [NUMANode(n, 16 * GiB, tuple(enumerate(distances[n]))) for n in range(4)]
    assert topo == CPUTopology.from_cpus(rows, numa_nodes=nodes)
    assert topo.num_sockets == 2
    assert topo.num_numa_nodes == 4
    assert topo.numa_nodes_of_socket(1) == (2, 3)
    assert topo.sockets_of_numa(3) == (1,)
    assert topo.cpus_in_numa(0) == CPUSet.parse("0-1,8-9")
    assert topo.cores_in_numa(3) == (6, 7)


def test_without_node_directory_everything_is_numa_node_0(tmp_path: Path) -> None:
    topo = discover(tmp_path, NO_NODE_DIR)
    assert topo == CPUTopology.from_cpus([(cpu, cpu % 2, 0, 0) for cpu in range(4)])
    assert topo.numa_nodes == (NUMANode(0),)
    assert topo.memory_bytes(0) is None
    assert topo.distances(0) == {}


def test_offline_cpus_are_left_out_and_core_ids_use_online_threads(tmp_path: Path) -> None:
    topo = discover(tmp_path, OFFLINE_CPUS)
    online = [c for c in range(16) if c not in (3, 5, 11)]
    # Core 3 (CPUs 3, 11) is gone entirely; core 5 keeps only CPU 13, which now names it.
    expected_core = {cpu: cpu % 8 for cpu in online} | {13: 13}
    assert topo.cpus == tuple(CPUInfo(cpu, expected_core[cpu], cpu % 8 // 4, cpu % 8 // 4) for cpu in online)
    assert topo.all_cpus == CPUSet.parse("0-2,4,6-10,12-15")
    assert topo.num_cores == 7
    assert topo.cpus_in_core(13) == CPUSet.of(13)
    assert topo.cpus_in_numa(0) == CPUSet.parse("0-2,8-10")


def test_offline_cpus_still_listed_in_the_node_cpulist_are_ignored(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", OFFLINE_CPUS)
    (node_dir(tmp_path) / "node0" / "cpulist").write_text("0-3,8-11\n")  # some arches keep offline CPUs here
    topo = read_topology(tmp_path / "sys")
    assert topo.cpus_in_numa(0) == CPUSet.parse("0-2,8-10")


def test_non_contiguous_cpu_ids(tmp_path: Path) -> None:
    topo = discover(tmp_path, NON_CONTIGUOUS_IDS)
    assert topo.cpus == (
        CPUInfo(0, 0, 0, 0),
        CPUInfo(1, 1, 0, 0),
        CPUInfo(8, 0, 0, 0),
        CPUInfo(9, 1, 0, 0),
        CPUInfo(16, 16, 1, 1),
        CPUInfo(17, 17, 1, 1),
        CPUInfo(24, 16, 1, 1),
    )
    assert topo.core_ids == (0, 1, 16, 17)
    assert topo.cpus_in_socket(1) == CPUSet.of(16, 17, 24)
    assert topo.memory_bytes(1) == 8 * GiB


def test_core_cpus_list_is_used_when_thread_siblings_list_is_missing(tmp_path: Path) -> None:
    machine = Machine(rows=grid(1, 2, 2), sibling_files=("core_cpus_list",), die_id=False)
    topo = discover(tmp_path, machine)
    assert topo.cpus_in_core(0) == CPUSet.of(0, 2)
    assert topo.cpus_in_core(1) == CPUSet.of(1, 3)
    assert {c.die for c in topo.cpus} == {0}


def test_core_id_groups_threads_when_no_sibling_list_exists(tmp_path: Path) -> None:
    # Core ids repeat across packages (both sockets have a core_id 0): they must not merge.
    topo = discover(tmp_path, Machine(rows=grid(2, 2, 2), sibling_files=()))
    assert topo == CPUTopology.from_cpus([(cpu, cpu % 4, cpu % 4 // 2, cpu % 4 // 2) for cpu in range(8)])


def test_memory_only_numa_node_is_listed_but_not_counted(tmp_path: Path) -> None:
    machine = Machine(
        rows=grid(2, 2, 1),
        memory_kb={0: 1024, 1: 1024, 2: 4096},
        distances=slit([[10, 21, 30], [21, 10, 30], [30, 30, 10]]),
        memory_only_nodes=(2,),
    )
    topo = discover(tmp_path, machine)
    assert [n.id for n in topo.numa_nodes] == [0, 1, 2]
    assert topo.num_numa_nodes == 2
    assert topo.numa_ids == (0, 1)
    assert topo.cpus_in_numa(2) == CPUSet()
    assert topo.memory_bytes(2) == 4096 * 1024
    assert topo.distances(2) == {0: 30, 1: 30, 2: 10}


def test_negative_package_id_counts_as_socket_0(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", ONE_SOCKET_NO_SMT)
    for cpu in range(4):
        (cpu_dir(tmp_path) / f"cpu{cpu}" / "topology" / "physical_package_id").write_text("-1\n")
    assert read_topology(tmp_path / "sys").socket_ids == (0,)


# --- queries ----------------------------------------------------------------------------------------


def test_queries_on_two_sockets_with_ht(tmp_path: Path) -> None:
    topo = discover(tmp_path, TWO_SOCKETS_HT)
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets, topo.num_numa_nodes) == (16, 8, 2, 2)
    assert topo.cpus_per_core == 2
    assert topo.all_cpus == CPUSet.parse("0-15")
    assert topo.cpus_in_numa(0) == CPUSet.parse("0-3,8-11")
    assert topo.cpus_in_socket(1) == CPUSet.parse("4-7,12-15")
    assert topo.cpus_in_core(5) == CPUSet.of(5, 13)
    assert topo.cores_in_socket(1) == (4, 5, 6, 7)
    assert topo.cores_in_numa(0) == (0, 1, 2, 3)
    assert topo.numa_nodes_of_socket(0) == (0,)
    assert topo.sockets_of_numa(1) == (1,)
    assert topo.info(13) == CPUInfo(cpu=13, core=5, socket=1, numa=1)
    assert (topo.core_of[13], topo.socket_of[13], topo.numa_of[13]) == (5, 1, 1)
    assert topo.memory_bytes(1) == 32 * GiB
    assert topo.distances(0) == {0: 10, 1: 21}
    assert topo.cpus_in_core(99) == CPUSet()
    with pytest.raises(KeyError, match="CPU 99 is not in this topology"):
        topo.info(99)
    with pytest.raises(KeyError, match="NUMA node 7"):
        topo.numa_node(7)


def test_from_cpus_sorts_cpus_and_names_numa_nodes() -> None:
    topo = CPUTopology.from_cpus([(3, 1, 0, 1), (0, 0, 0, 0), (2, 1, 0, 1), (1, 0, 0, 0)])
    assert [c.cpu for c in topo.cpus] == [0, 1, 2, 3]
    assert topo.numa_nodes == (NUMANode(0), NUMANode(1))
    assert topo.memory_bytes(0) is None
    assert hash(topo) == hash(CPUTopology.from_cpus([(c, c // 2, 0, c // 2) for c in range(4)]))


@pytest.mark.parametrize(
    ("rows", "nodes", "message"),
    [
        ([(0, 0, 0, 0), (0, 1, 0, 0)], None, "CPU 0 is listed twice"),
        ([(0, 0, 0, 0), (1, 0, 1, 0)], None, "core 0 spans socket/NUMA"),
        ([(0, 0, 0, -1)], None, "negative id"),
        ([(0, 0, 0, 3)], [NUMANode(0)], r"NUMA node\(s\) \[3\] that are not listed"),
        ([(0, 0, 0, 0)], [NUMANode(0), NUMANode(0)], "NUMA node 0 is listed twice"),
    ],
)
def test_from_cpus_rejects_inconsistent_rows(rows, nodes, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        CPUTopology.from_cpus(rows, numa_nodes=nodes)


# --- errors name the file and the reason -------------------------------------------------------------


def test_malformed_node_cpulist(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    bad = node_dir(tmp_path) / "node1" / "cpulist"
    bad.write_text("4-7,x\n")
    with pytest.raises(TopologyError) as err:
        read_topology(tmp_path / "sys")
    assert err.value.path == bad
    assert str(bad) in str(err.value)
    assert "'x'" in str(err.value)


def test_missing_package_id(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    missing = cpu_dir(tmp_path) / "cpu2" / "topology" / "physical_package_id"
    missing.unlink()
    with pytest.raises(TopologyError, match="missing") as err:
        read_topology(tmp_path / "sys")
    assert err.value.path == missing


def test_missing_online_list(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", ONE_SOCKET_NO_SMT)
    (cpu_dir(tmp_path) / "online").unlink()
    with pytest.raises(TopologyError, match=r"cpu/online: missing"):
        read_topology(tmp_path / "sys")


def test_empty_sysfs_root(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="missing"):
        read_topology(tmp_path)


def test_missing_topology_of_an_online_cpu(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", ONE_SOCKET_NO_SMT)
    shutil.rmtree(cpu_dir(tmp_path) / "cpu3" / "topology")
    with pytest.raises(TopologyError, match=r"cpu3/topology/physical_package_id: missing"):
        read_topology(tmp_path / "sys")


def test_siblings_list_without_the_cpu_itself(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    (cpu_dir(tmp_path) / "cpu1" / "topology" / "thread_siblings_list").write_text("2,10\n")
    with pytest.raises(TopologyError, match="does not list CPU 1 itself"):
        read_topology(tmp_path / "sys")


def test_non_integer_core_id(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", Machine(rows=grid(1, 2, 1), sibling_files=()))
    (cpu_dir(tmp_path) / "cpu1" / "topology" / "core_id").write_text("one\n")
    with pytest.raises(TopologyError, match=r"core_id: expected an integer, found 'one'"):
        read_topology(tmp_path / "sys")


def test_distance_count_must_match_node_count(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    (node_dir(tmp_path) / "node0" / "distance").write_text("10 21 31\n")
    with pytest.raises(TopologyError, match=r"node0/distance: has 3 distance\(s\) for 2 NUMA node\(s\)"):
        read_topology(tmp_path / "sys")


def test_garbage_distance(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    (node_dir(tmp_path) / "node1" / "distance").write_text("21 ten\n")
    with pytest.raises(TopologyError, match="expected space-separated integers"):
        read_topology(tmp_path / "sys")


def test_meminfo_without_memtotal(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    (node_dir(tmp_path) / "node1" / "meminfo").write_text("Node 1 MemFree: 12 kB\n")
    with pytest.raises(TopologyError, match=r"node1/meminfo: has no 'Node N MemTotal"):
        read_topology(tmp_path / "sys")


def test_online_cpu_in_no_node(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    (node_dir(tmp_path) / "node1" / "cpulist").write_text("4-7\n")
    with pytest.raises(TopologyError, match=r"online CPU\(s\) 12-15 are not listed in any nodeN/cpulist"):
        read_topology(tmp_path / "sys")


def test_cpu_in_two_nodes(tmp_path: Path) -> None:
    write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT)
    (node_dir(tmp_path) / "node1" / "cpulist").write_text("3-7,12-15\n")
    with pytest.raises(TopologyError, match="CPU 3 is also listed by node0"):
        read_topology(tmp_path / "sys")
