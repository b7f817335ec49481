"""Where the kubelet's reserved CPUs land: the explicit list, or packed low whole cores."""

from __future__ import annotations

import pytest

from ballast.agent.cpumanager.cpu_assignment import NotEnoughCPUsError
from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import KubeletSettings, parse_kubelet_config
from ballast.agent.topology.reserved import num_reserved_cpus, reserved_cpus
from tests.agent.kubelet_topologies import (
    DUAL_SOCKET_HT,
    DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT,
    QUAD_SOCKET_FOUR_WAY_HT,
    SINGLE_SOCKET_HT,
)


def settings(kube_cpu: str | None = None, system_cpu: str | None = None, cpus: str = "") -> KubeletSettings:
    config: dict = {"reservedSystemCPUs": cpus}
    if kube_cpu is not None:
        config["kubeReserved"] = {"cpu": kube_cpu, "memory": "1Gi"}
    if system_cpu is not None:
        config["systemReserved"] = {"cpu": system_cpu}
    return parse_kubelet_config(config)


def test_eight_cpus_with_ht_two_reserved_is_the_first_core() -> None:
    # The kubelet's own comment: "8 CPUs, HT, 2 reserved -> {0,4}".
    assert reserved_cpus(SINGLE_SOCKET_HT, settings("1", "1")) == CPUSet.of(0, 4)


@pytest.mark.parametrize(
    ("topo", "kube", "system", "expect"),
    [
        (SINGLE_SOCKET_HT, "500m", None, "0"),
        (SINGLE_SOCKET_HT, "500m", "600m", "0,4"),  # ceil(1.1) = 2
        (SINGLE_SOCKET_HT, "1", "2", "0-1,4"),
        (DUAL_SOCKET_HT, "1", "1", "0,6"),  # reserved cores 0 & 6, as in TestStaticPolicyStart
        (DUAL_SOCKET_HT, "3", "3", "0,2,4,6,8,10"),  # a whole socket
        (DUAL_SOCKET_MULTI_NUMA_PER_SOCKET_HT, "2", None, "0,40"),
        (QUAD_SOCKET_FOUR_WAY_HT, "8", None, "0,50,109-110,169-170,229-230"),  # cores 0 and 1, 4 threads each
        (SINGLE_SOCKET_HT, None, None, ""),
        (SINGLE_SOCKET_HT, "0", "0", ""),
    ],
)
def test_reserved_cpus_are_packed_on_low_whole_cores(topo, kube, system, expect: str) -> None:
    assert reserved_cpus(topo, settings(kube, system)) == CPUSet.parse(expect)


def test_explicit_list_wins_over_quantities() -> None:
    s = settings("4", "4", cpus="3,7")
    assert num_reserved_cpus(s) == 2
    assert reserved_cpus(SINGLE_SOCKET_HT, s) == CPUSet.of(3, 7)


def test_explicit_list_is_taken_verbatim_even_beyond_the_topology() -> None:
    assert reserved_cpus(SINGLE_SOCKET_HT, settings(cpus="6-9")) == CPUSet.parse("6-9")


def test_count_is_ceil_of_the_sum() -> None:
    assert num_reserved_cpus(settings("100m", "100m")) == 1
    assert num_reserved_cpus(settings("1", "1001m")) == 3
    assert num_reserved_cpus(settings()) == 0


def test_reserving_more_than_the_machine_has() -> None:
    with pytest.raises(NotEnoughCPUsError, match="requested=9, available=8"):
        reserved_cpus(SINGLE_SOCKET_HT, settings("9"))
