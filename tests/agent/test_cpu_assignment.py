"""``take_by_topology`` against the kubelet's own test tables (``cpu_assignment_test.go``,
``policy_static_test.go``), transcribed as data, plus properties that must hold for any input."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ballast.agent.cpumanager.cpu_assignment import NotEnoughCPUsError, _Accumulator, take_by_topology
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology
from tests.agent.kubelet_topologies import (
    DUAL_SOCKET_HT,
    DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT,
    DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT_LARGE,
    DUAL_SOCKET_NO_HT,
    FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT,
    QUAD_SOCKET_CPULISTS,
    QUAD_SOCKET_FOUR_WAY_HT,
    SINGLE_SOCKET_HT,
    TRIPLE_SOCKET_HT,
)

P = CPUSet.parse


def accumulator(topo: CPUTopology, available: CPUSet) -> _Accumulator:
    return _Accumulator(topo, available.as_frozenset(), 0)


def test_fixture_topologies_have_the_kubelet_shapes() -> None:
    shapes = {
        "single": (SINGLE_SOCKET_HT, 8, 4, 1, 1),
        "dual": (DUAL_SOCKET_HT, 12, 6, 2, 2),
        "dual no ht": (DUAL_SOCKET_NO_HT, 8, 8, 2, 2),
        "triple": (TRIPLE_SOCKET_HT, 18, 9, 3, 3),
        "multi numa": (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, 80, 40, 2, 4),
        "fake multi socket": (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, 80, 40, 4, 2),
        "large": (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT_LARGE, 256, 128, 2, 8),
        "quad": (QUAD_SOCKET_FOUR_WAY_HT, 288, 72, 4, 4),
    }
    for name, (topo, cpus, cores, sockets, numas) in shapes.items():
        got = (topo.num_cpus, topo.num_cores, topo.num_sockets, topo.num_numa_nodes)
        assert got == (cpus, cores, sockets, numas), name
    for socket, cpulist in QUAD_SOCKET_CPULISTS.items():
        assert QUAD_SOCKET_FOUR_WAY_HT.cpus_in_socket(socket) == P(cpulist)
    assert QUAD_SOCKET_FOUR_WAY_HT.cpus_per_core == 4


# --- TestCPUAccumulatorFreeSockets / FreeNUMANodes / FreeSocketsAndNUMANodes -------------------------


@pytest.mark.parametrize(
    ("topo", "available", "expect"),
    [
        (SINGLE_SOCKET_HT, "0-7", [0]),
        (SINGLE_SOCKET_HT, "1-7", []),
        (DUAL_SOCKET_HT, "0-11", [0, 1]),
        (DUAL_SOCKET_HT, "0-9,11", [1]),
        (DUAL_SOCKET_HT, "0,2-9,11", []),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "0-79", [0, 1]),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "1-79", [1]),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "1-78", []),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "0-79", [0, 1, 2, 3]),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "0-19,21-79", [0, 1, 3]),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "0-59,61-78", [0, 1]),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "1-19,21-38,41-60,61-78", [1]),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "0-40,42-49,51-68,71-79", []),
    ],
)
def test_free_sockets(topo: CPUTopology, available: str, expect: list[int]) -> None:
    assert sorted(accumulator(topo, P(available)).free_sockets()) == expect


@pytest.mark.parametrize(
    ("topo", "available", "expect"),
    [
        (SINGLE_SOCKET_HT, "0-7", [0]),
        (SINGLE_SOCKET_HT, "1-7", []),
        (DUAL_SOCKET_HT, "0-11", [0, 1]),
        (DUAL_SOCKET_HT, "0-9,11", [1]),
        (DUAL_SOCKET_HT, "0,2-9,11", []),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "0-79", [0, 1, 2, 3]),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "1-79", [1, 2, 3]),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "1-9,11-79", [2, 3]),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "1-9,11-59,61-79", [3]),
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "1-9,11-59,61-78", []),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "0-79", [0, 1]),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "0-9,11-79", [1]),
        (FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT, "0-9,11-59,61-79", []),
    ],
)
def test_free_numa_nodes_in_order(topo: CPUTopology, available: str, expect: list[int]) -> None:
    assert accumulator(topo, P(available)).free_numa_nodes() == expect


@pytest.mark.parametrize(
    ("available", "sockets", "numas"),
    [
        ("0-79", [0, 1], [0, 1, 2, 3]),
        ("1-79", [1], [1, 2, 3]),
        ("1-9,11-79", [1], [2, 3]),
        ("1-59,61-79", [], [1, 3]),
    ],
)
def test_free_sockets_and_numa_nodes(available: str, sockets: list[int], numas: list[int]) -> None:
    acc = accumulator(DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, P(available))
    assert acc.free_numa_nodes() == numas
    assert acc.free_sockets() == sockets


# --- TestCPUAccumulatorFreeCores / FreeCPUs: the sort order -----------------------------------------


@pytest.mark.parametrize(
    ("topo", "available", "expect"),
    [
        (SINGLE_SOCKET_HT, "0-7", [0, 1, 2, 3]),
        (SINGLE_SOCKET_HT, "0-2,4-6", [0, 1, 2]),
        (SINGLE_SOCKET_HT, "0-6", [0, 1, 2]),
        (SINGLE_SOCKET_HT, "", []),
        (SINGLE_SOCKET_HT, "0-3", []),
        (DUAL_SOCKET_HT, "0-11", [0, 2, 4, 1, 3, 5]),
        (DUAL_SOCKET_HT, "1-5,7-11", [2, 4, 1, 3, 5]),
        (DUAL_SOCKET_HT, "2-5,8-11", [2, 4, 3, 5]),
    ],
)
def test_free_cores_in_order(topo: CPUTopology, available: str, expect: list[int]) -> None:
    assert accumulator(topo, P(available)).free_cores() == expect


@pytest.mark.parametrize(
    ("topo", "available", "expect"),
    [
        (SINGLE_SOCKET_HT, "0-7", [0, 4, 1, 5, 2, 6, 3, 7]),
        (SINGLE_SOCKET_HT, "3-7", [4, 5, 6, 3, 7]),
        (DUAL_SOCKET_HT, "0-11", [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (DUAL_SOCKET_HT, "1-11", [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (DUAL_SOCKET_HT, "1-5,7-11", [2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (TRIPLE_SOCKET_HT, "0-3,6-13", [12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11]),
    ],
)
def test_free_cpus_in_order(topo: CPUTopology, available: str, expect: list[int]) -> None:
    assert list(accumulator(topo, P(available)).free_cpus()) == expect


# --- TestTakeByTopologyNUMAPacked ----------------------------------------------------------------------

TAKE_BY_TOPOLOGY = [
    ("one cpu, single socket HT", SINGLE_SOCKET_HT, "0-7", 1, "0"),
    ("one cpu, single socket HT, some cpus taken", SINGLE_SOCKET_HT, "1,3,5-7", 1, "6"),
    ("two cpus, single socket HT", SINGLE_SOCKET_HT, "0-7", 2, "0,4"),
    ("all cpus, single socket HT", SINGLE_SOCKET_HT, "0-7", 8, "0-7"),
    ("two cpus, single socket HT, only one core free", SINGLE_SOCKET_HT, "0-3,6", 2, "2,6"),
    ("a socket, dual socket HT", DUAL_SOCKET_HT, "0-11", 6, "0,2,4,6,8,10"),
    ("a socket, multi-NUMA-per-socket HT", DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "0-79", 40, "0-19,40-59"),
    ("a NUMA node, multi-NUMA-per-socket HT", DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "0-79", 20, "0-9,40-49"),
    (
        "a NUMA node with one NUMA node already taken",
        DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT,
        "10-39,50-79",
        20,
        "10-19,50-59",
    ),
    ("a socket and a NUMA node", DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "0-79", 60, "0-29,40-69"),
    (
        "a socket and a NUMA node, core (0,40) taken",
        DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT,
        "1-39,41-79",
        60,
        "10-39,50-79",
    ),
    ("one cpu, dual socket HT, core from socket 0", DUAL_SOCKET_HT, "1-5,7-11", 1, "2"),
    ("4 full cores, 3 from NUMA node 0 and 1 from node 1", DUAL_SOCKET_HT, "0-11", 8, "0,6,2,8,4,10,1,7"),
    (
        "32 full cores: the first 3 NUMA nodes filled, 2 cores from the fourth",
        DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT,
        "0-79",
        64,
        "0-29,40-69,30,31,70,71",
    ),
    ("zero cpus", SINGLE_SOCKET_HT, "0-7", 0, ""),
]


@pytest.mark.parametrize(
    ("topo", "available", "num_cpus", "expect"),
    [case[1:] for case in TAKE_BY_TOPOLOGY],
    ids=[case[0] for case in TAKE_BY_TOPOLOGY],
)
def test_take_by_topology_numa_packed(topo: CPUTopology, available: str, num_cpus: int, expect: str) -> None:
    assert take_by_topology(topo, P(available), num_cpus) == P(expect)


# --- TestStaticPolicyAdd (no topology hint): available = default cpuset - reserved -------------------

_ALL_QUAD = QUAD_SOCKET_FOUR_WAY_HT.all_cpus
_QUAD_SOCKET_0 = QUAD_SOCKET_FOUR_WAY_HT.cpus_in_socket(0)
_QUAD_SOCKET_1 = QUAD_SOCKET_FOUR_WAY_HT.cpus_in_socket(1)
_THREE_SOCKET_PARTIALS = CPUSet.of(1, 25, 13, 38, 2, 9, 11, 35, 23, 48, 12, 51, 53, 173, 113, 233, 54, 61)
_SOCKET_1_PLUS = _QUAD_SOCKET_1 | CPUSet.of(10, 34, 22, 47, 53, 173, 61, 181, 108, 228, 115, 235)

STATIC_POLICY_ADD = [
    # (description, topology, reserved CPU count, default cpuset, request, expected)
    ("SingleSocketHT, ExpectAllocOneCore", SINGLE_SOCKET_HT, 1, P("0-1,4-5"), 2, P("1,5")),
    ("DualSocketHT, ExpectAllocOneSocket", DUAL_SOCKET_HT, 1, P("0-1,3-11"), 6, P("1,3,5,7,9,11")),
    ("DualSocketHT, ExpectAllocThreeCores", DUAL_SOCKET_HT, 1, P("0,2-4,6-11"), 6, P("2-4,8-10")),
    ("DualSocketNoHT, ExpectAllocOneSocket", DUAL_SOCKET_NO_HT, 1, P("0-1,3-7"), 4, P("4-7")),
    ("DualSocketNoHT, ExpectAllocFourCores", DUAL_SOCKET_NO_HT, 1, P("0-1,3,6-7"), 4, P("1,3,6-7")),
    ("DualSocketHT, ExpectAllocOneSocketOneCore", DUAL_SOCKET_HT, 1, P("0-1,3-11"), 8, P("1,3-5,7,9-11")),
    (
        "SingleSocketHT, ExpectAllocOneCPU (sibling of the reserved CPU)",
        SINGLE_SOCKET_HT,
        1,
        P("0-7"),
        1,
        P("4"),
    ),
    (
        "topoQuadSocketFourWayHT, ExpectAllocSock0",
        QUAD_SOCKET_FOUR_WAY_HT,
        0,
        _ALL_QUAD - CPUSet.of(3, 11, 4, 5, 6, 7),
        72,
        _QUAD_SOCKET_0,
    ),
    (
        "topoQuadSocketFourWayHT, ExpectAllocAllFullCoresFromThreeSockets",
        QUAD_SOCKET_FOUR_WAY_HT,
        0,
        _THREE_SOCKET_PARTIALS,
        12,
        CPUSet.of(1, 25, 13, 38, 11, 35, 23, 48, 53, 173, 113, 233),
    ),
    (
        "topoQuadSocketFourWayHT, ExpectAllocAllSock1+FullCore",
        QUAD_SOCKET_FOUR_WAY_HT,
        0,
        _SOCKET_1_PLUS,
        76,
        _QUAD_SOCKET_1 | CPUSet.of(10, 34, 22, 47),
    ),
    (
        "topoQuadSocketFourWayHT, ExpectAllocCPUs (only partial cores left)",
        QUAD_SOCKET_FOUR_WAY_HT,
        0,
        CPUSet.of(10, 11, 53, 67, 52),
        5,
        CPUSet.of(10, 11, 53, 67, 52),
    ),
]


@pytest.mark.parametrize(
    ("topo", "num_reserved", "default", "num_cpus", "expect"),
    [case[1:] for case in STATIC_POLICY_ADD],
    ids=[case[0] for case in STATIC_POLICY_ADD],
)
def test_static_policy_allocations(
    topo: CPUTopology, num_reserved: int, default: CPUSet, num_cpus: int, expect: CPUSet
) -> None:
    reserved = take_by_topology(topo, topo.all_cpus, num_reserved)
    assert take_by_topology(topo, default - reserved, num_cpus) == expect


def test_successive_takes_fill_partly_used_cores_first() -> None:
    # TestTakeTopologyIterate on topoQuadSocketFourWayHT: take 1, then 2, then 3 from what is left.
    free = QUAD_SOCKET_FOUR_WAY_HT.all_cpus
    results = []
    for n in (1, 2, 3):
        took = take_by_topology(QUAD_SOCKET_FOUR_WAY_HT, free, n)
        results.append(str(took))
        free -= took
    assert results == ["0", "109,169", "50,110,229"]


@pytest.mark.parametrize(
    ("topo", "available", "num_cpus", "free_count"),
    [
        (SINGLE_SOCKET_HT, "0,2,4,6", 5, 4),
        (SINGLE_SOCKET_HT, "1-7", 8, 7),
        (DUAL_SOCKET_HT, "0,4-11", 10, 9),
        (QUAD_SOCKET_FOUR_WAY_HT, "10-11,37,52-53,55,67", 76, 7),
    ],
)
def test_not_enough_cpus(topo: CPUTopology, available: str, num_cpus: int, free_count: int) -> None:
    with pytest.raises(NotEnoughCPUsError) as err:
        take_by_topology(topo, P(available), num_cpus)
    assert isinstance(err.value, ValueError)
    assert err.value.requested == num_cpus
    message = str(err.value)
    assert f"requested={num_cpus}, available={free_count}" in message
    assert available in message


def test_negative_request_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        take_by_topology(SINGLE_SOCKET_HT, P("0-7"), -1)


def test_cpus_outside_the_topology_are_ignored() -> None:
    assert take_by_topology(SINGLE_SOCKET_HT, P("6-7,100-103"), 2) == P("6-7")
    with pytest.raises(NotEnoughCPUsError, match="available=2"):
        take_by_topology(SINGLE_SOCKET_HT, P("6-7,100-103"), 3)


def test_a_core_is_free_only_when_all_its_own_cpus_are() -> None:
    # CPU 7 is offline, so core 3 is just CPU 3, and CPU 4 (core 0's other thread) is busy. The kubelet's
    # test (free CPUs == NumCPUs / NumCores == 1) would call core 0 free and hand out busy CPU 4 with it.
    topo = CPUTopology.from_cpus([(c, c % 4, 0, 0) for c in range(7)])
    assert take_by_topology(topo, topo.all_cpus - P("4"), 2) == P("0,3")
    assert take_by_topology(topo, topo.all_cpus, 2) == P("0,3")  # the 1-CPU core counts as a whole core


def test_sockets_first_when_a_socket_holds_several_numa_nodes() -> None:
    # 2 sockets, 8 NUMA nodes: a free socket is taken whole before NUMA nodes of the other one.
    topo = DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT_LARGE
    assert take_by_topology(topo, topo.all_cpus, 160) == P("0-79,128-207")


# --- properties ---------------------------------------------------------------------------------------

TOPOLOGIES = [
    SINGLE_SOCKET_HT,
    DUAL_SOCKET_HT,
    DUAL_SOCKET_NO_HT,
    TRIPLE_SOCKET_HT,
    DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT,
    FAKE_MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT,
    QUAD_SOCKET_FOUR_WAY_HT,
]


@st.composite
def requests(draw: st.DrawFn) -> tuple[CPUTopology, CPUSet, int]:
    topo = draw(st.sampled_from(TOPOLOGIES))
    free = CPUSet(draw(st.sets(st.sampled_from(topo.all_cpus.sorted()))))
    return topo, free, draw(st.integers(min_value=0, max_value=len(free)))


@settings(max_examples=200, deadline=None)
@given(requests())
def test_takes_exactly_the_request_from_the_free_cpus(case: tuple[CPUTopology, CPUSet, int]) -> None:
    topo, free, n = case
    took = take_by_topology(topo, free, n)
    assert len(took) == n
    assert took.issubset(free)
    assert take_by_topology(topo, free, n) == took  # deterministic


@settings(max_examples=100, deadline=None)
@given(requests())
def test_whole_free_cores_are_preferred_over_split_ones(case: tuple[CPUTopology, CPUSet, int]) -> None:
    topo, free, n = case
    took = take_by_topology(topo, free, n)
    # If the request fits in whole free cores, the result splits at most one of the cores it touches.
    per_core = topo.cpus_per_core
    free_cores = [c for c in topo.core_ids if topo.cpus_in_core(c).issubset(free)]
    if n % per_core == 0 and len(free_cores) * per_core >= n:
        split = [c for c in topo.core_ids if 0 < len(topo.cpus_in_core(c) & took) < per_core]
        assert split == []


def test_allocation_on_256_cpus_is_fast() -> None:
    # Guards against an accidentally quadratic change; the benchmark reports the real numbers.
    topo = DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT_LARGE
    free = topo.all_cpus - P("0-5,130-140")
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        take_by_topology(topo, free, 37)
        best = min(best, time.perf_counter() - start)
    assert best < 0.002
