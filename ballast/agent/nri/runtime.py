"""Cpusets through NRI's ``UpdateContainers`` while the plugin is registered, through CRI otherwise.

The CPU manager's reconcile applies cpusets through one ``ContainerRuntime``; with NRI that is this one.
The runtime applies an NRI update as it applies a CRI ``UpdateContainerResources`` (it also stores the
cpuset in the container's spec), so both paths leave the same result; NRI is preferred because its
answer comes from the same runtime session that created the containers. A container the runtime could
not update, or a plugin not registered at the moment (the runtime restarting), goes through CRI, whose
error, if any, is the precise one the manager counts.
"""

from __future__ import annotations

from ballast.agent.cpumanager.runtime import ContainerRef, ContainerRuntime, RuntimeCallError
from ballast.agent.cpuset import CPUSet
from ballast.agent.nri.plugin import NRIPlugin
from ballast.agent.nri.ttrpc import ConnectionClosed, TtrpcError

__all__ = ["NRIRuntime"]


class NRIRuntime(ContainerRuntime):
    name = "nri"

    def __init__(self, plugin: NRIPlugin, fallback: ContainerRuntime) -> None:
        self.plugin = plugin
        self.fallback = fallback

    def set_cpuset(self, ref: ContainerRef, cpus: CPUSet) -> None:
        if self.plugin.connected:
            try:
                failed = self.plugin.update({ref.container_id: cpus})
            except ConnectionClosed:
                failed = [ref.container_id]
            except TtrpcError as e:
                raise RuntimeCallError(
                    "unavailable" if e.code in (4, 14) else "error", f"{ref}: {e}"
                ) from None
            if not failed:
                return
        self.fallback.set_cpuset(ref, cpus)

    def find_container_id(self, ref: ContainerRef) -> str | None:
        return self.fallback.find_container_id(ref)

    def bind_metrics(self, metrics) -> None:  # type: ignore[no-untyped-def]
        self.fallback.bind_metrics(metrics)

    def close(self) -> None:
        self.fallback.close()
