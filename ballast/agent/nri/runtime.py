"""The CPU manager's runtime in NRI mode: cpusets set after creation go through CRI, not NRI.

With NRI the runtime asks the plugin for each container's cpuset while it creates it, and the answer also
moves the other containers off CPUs that creation took (containerd applies those updates inside its own
CreateContainer). Everything set later (CPUs allocated ahead of the containers, CPUs returned, repairs)
goes through CRI ``UpdateContainerResources``, as without NRI, and never through NRI's unsolicited
``UpdateContainers``: in containerd's NRI adaptation up to nri v0.12.0 (containerd 1.7 and 2.0 vendor
v0.6 - v0.8) ``UpdateContainers`` takes the adaptation's lock and then containerd's, while every CRI
lifecycle call takes them the other way round, so an update that meets a container creation deadlocks
the runtime's NRI for good (containerd/nri 55afaa2, "avoid holding lock across runtime update callback",
fixed in v0.12.1). This was hit on containerd 1.7.24: sandboxes stopped starting ("failed to reserve
sandbox name") until containerd restarted. CRI updates take the locks in the lifecycle order.
``NRIPlugin.update`` stays for runtimes known to be fixed.
"""

from __future__ import annotations

from ballast.agent.cpumanager.runtime import ContainerRef, ContainerRuntime
from ballast.agent.cpuset import CPUSet
from ballast.agent.nri.plugin import NRIPlugin

__all__ = ["NRIRuntime"]


class NRIRuntime(ContainerRuntime):
    """``set_cpuset`` through ``fallback`` (the CRI runtime); the plugin answers at creation."""

    name = "nri"

    def __init__(self, plugin: NRIPlugin, fallback: ContainerRuntime) -> None:
        self.plugin = plugin
        self.fallback = fallback

    def set_cpuset(self, ref: ContainerRef, cpus: CPUSet) -> None:
        self.fallback.set_cpuset(ref, cpus)

    def find_container_id(self, ref: ContainerRef) -> str | None:
        return self.fallback.find_container_id(ref)

    def bind_metrics(self, metrics) -> None:  # type: ignore[no-untyped-def]
        self.fallback.bind_metrics(metrics)

    def close(self) -> None:
        self.fallback.close()
