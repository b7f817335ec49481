"""The CPUs the kubelet holds back for system daemons, chosen the way the kubelet's static policy does.

The agent must keep these CPUs out of exclusive assignments and report them per NUMA zone in the NRT.
The kubelet uses ``reservedSystemCPUs`` verbatim when it is set; otherwise it reserves
``ceil(kubeReserved.cpu + systemReserved.cpu)`` CPUs picked by ``take_by_topology`` over all CPUs, which
lands on the lowest-numbered whole cores (8 CPUs with HT, 2 reserved: ``{0, 4}``).
"""

from __future__ import annotations

from ballast.agent.cpumanager.cpu_assignment import take_by_topology
from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import KubeletSettings
from ballast.agent.topology.model import CPUTopology

__all__ = ["num_reserved_cpus", "reserved_cpus"]


def num_reserved_cpus(settings: KubeletSettings) -> int:
    """How many CPUs are reserved: the size of ``reservedSystemCPUs``, else ``ceil(kube + system cpu)``."""
    if settings.reserved_system_cpus is not None:
        return len(settings.reserved_system_cpus)
    cpu = settings.reserved_resources().get("cpu")
    return max(cpu.ceil(), 0) if cpu is not None else 0


def reserved_cpus(topology: CPUTopology, settings: KubeletSettings) -> CPUSet:
    """The reserved CPU set. An explicit list is returned as written, even CPUs the topology lacks.

    Raises ``NotEnoughCPUsError`` when more CPUs are reserved than the machine has.
    """
    if settings.reserved_system_cpus is not None:
        return settings.reserved_system_cpus
    return take_by_topology(topology, topology.all_cpus, num_reserved_cpus(settings))
