"""The static CPU policy: crane-agent's per-pod semantics with the kubelet static policy's rigour. Pure.

The policy reads the topology, the reserved CPUs, a ``StateReader`` and parsed pods (``KubeletPod``) and
returns decisions; the manager applies them to the state and the runtime. No I/O, no clock, no logging.

**Pools.** ``default`` is the state's default set: every CPU not assigned to a container, reserved CPUs
included (the kubelet's SHARED pool). Exclusive and immovable pods both have entries in the state, so the
state keeps the kubelet's invariants (entries disjoint from ``default``, union = all CPUs).

- allocatable (what a new exclusive/immovable pod can take) = ``default`` - reserved;
- shared pool (what an unpinned container runs on) = ``default`` + the CPUs of immovable pods.

``default`` never becomes empty: the kubelet guarantees that by requiring reserved CPUs; without any,
an allocation that would take the last shared CPU is refused.

**Per pod** (``topology.crane.io/cpu-policy``, default from a flag; unknown values count as unset):

- ``exclusive``: per NUMA zone of the topology result, ``take_by_topology`` over allocatable CPUs of that
  NUMA node; the CPUs leave the shared pool.
- ``immovable``: taken the same way, but they stay in the shared pool for unpinned containers; other
  exclusive or immovable pods cannot take them (they are not allocatable).
- ``numa``: the shared pool minus reserved CPUs, restricted to the result's NUMA nodes. Nothing is taken.
- ``none``: the shared pool.

Only pods of QoS class Guaranteed with at least one container whose CPU request is a whole number
qualify (``KubeletPod.exclusive_cpus``); everything else runs on the shared pool whatever it asks for.

**Topology result trust.** The result is honoured only for pods whose ``spec.schedulerName`` is in the
allowed list and, with a result key, only when its seal verifies (``ballast.contract.seal``). Whoever may
create a
pod sets its schedulerName, its nodeName (placing it without any scheduler) and its annotations, so
without a key a forged result on such a pod is honoured (docs/security.md, "What the agent trusts").
A result that is
malformed, names NUMA nodes this machine lacks, or whose CPU total differs from the pod's exclusive CPU
count is treated as absent and reported in ``ExclusiveDecision.rejected``. Without a (trusted) result the
CPUs come from the whole machine, NUMA-packed.

**Containers of a pod.** The pod-level set has ``KubeletPod.exclusive_cpus`` CPUs (the kubelet's
``podGuaranteedCPUs``). Sidecars (restartable init containers) and app containers get disjoint parts of
it; each ordinary init container gets its CPUs from the part not held by sidecars started before it,
so its CPUs are reused by the app containers (the kubelet's ``cpusToReuse``), and entries of one pod may
overlap. Entries of different pods never do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ballast.agent.cpumanager.cpu_assignment import NotEnoughCPUsError, take_by_topology
from ballast.agent.cpumanager.state import POLICY_NAME, State, StateReader
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology
from ballast.contract.exclusive import CPUPolicy, ExclusiveDecision, decide_exclusive
from ballast.contract.pod import ContainerKind, KubeletPod, QOSClass
from ballast.contract.seal import verify

__all__ = [
    "Allocation",
    "AllocationError",
    "Release",
    "StateInvalidError",
    "StaticPolicy",
]


class StateInvalidError(ValueError):
    """A state that breaks the policy's invariants (``StaticPolicy.validate_state``)."""


class AllocationError(Exception):
    """CPUs could not be found for a pod; ``reason`` is a short code for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class Allocation:
    """CPUs chosen for a pod: the pod-level set and each container's part of it."""

    pod_uid: str
    mode: CPUPolicy
    cpus: CPUSet
    containers: Mapping[str, CPUSet] = field(default_factory=dict)

    def apply(self, state: State) -> None:
        with state.batch():
            for name, cpus in self.containers.items():
                state.set_cpuset(self.pod_uid, name, cpus)
            state.set_default_cpuset(state.get_default_cpuset() - self.cpus)


@dataclass(frozen=True)
class Release:
    """A pod's CPUs going back to the default set."""

    pod_uid: str
    cpus: CPUSet

    def apply(self, state: State) -> None:
        with state.batch():
            state.delete_pod(self.pod_uid)
            state.set_default_cpuset(state.get_default_cpuset() | self.cpus)


class StaticPolicy:
    """The decisions; one instance per agent (topology and reserved CPUs are fixed for its lifetime)."""

    name = POLICY_NAME

    def __init__(
        self,
        topology: CPUTopology,
        reserved: CPUSet,
        *,
        allowed_schedulers: Iterable[str],
        default_policy: CPUPolicy | str = CPUPolicy.EXCLUSIVE,
        result_key: bytes | None = None,
    ) -> None:
        self.topology = topology
        self.result_key = result_key
        """With a key, a topology result counts only when its seal verifies (``ballast.contract.seal``)."""
        self.all_cpus = topology.all_cpus
        self.reserved = reserved & topology.all_cpus
        """Reserved CPUs the machine has (an explicit list may name offline ones)."""
        self.allowed_schedulers = frozenset(allowed_schedulers)
        self.default_policy = CPUPolicy(default_policy)
        self._numa_cpus = {n: topology.cpus_in_numa(n) for n in topology.numa_ids}

    # --- per pod ------------------------------------------------------------------------------------

    def requested_policy(self, raw: str | None) -> CPUPolicy:
        """The annotation's policy; absent or unknown values mean the default (crane's rule)."""
        try:
            return CPUPolicy(raw) if raw is not None else self.default_policy
        except ValueError:
            return self.default_policy

    def decide(self, pod: KubeletPod) -> ExclusiveDecision:
        """The shared rule (``ballast.contract.exclusive``), so the extender counts exactly the pods pinned
        here."""
        return decide_exclusive(
            guaranteed=pod.qos is QOSClass.GUARANTEED,
            qos=str(pod.qos),
            exclusive_cpus=pod.exclusive_cpus,
            requested=self.requested_policy(pod.cpu_policy),
            scheduler_name=pod.scheduler_name,
            allowed_schedulers=self.allowed_schedulers,
            result=pod.topology_result,
            result_error=pod.topology_result_error,
            known_numa=self._numa_cpus.keys(),
            sealed=None
            if self.result_key is None
            else verify(
                self.result_key, pod.uid, pod.node_name, pod.topology_result_text, pod.topology_result_seal
            ),
        )

    # --- pools --------------------------------------------------------------------------------------

    def allocatable(self, state: StateReader) -> CPUSet:
        return state.get_default_cpuset() - self.reserved

    def shared_pool(self, state: StateReader, immovable_pods: Iterable[str]) -> CPUSet:
        """The default set plus the CPUs held by immovable pods."""
        assignments = state.get_assignments()
        extra = [cpus for uid in immovable_pods for cpus in assignments.get(uid, {}).values()]
        return state.get_default_cpuset().union(*extra)

    def numa_pool(self, shared: CPUSet, numa_ids: Iterable[int]) -> CPUSet:
        """CPUs for a ``numa`` pod: shared minus reserved on its NUMA nodes, never empty.

        When exclusive pods took every unreserved CPU of the node, the node's reserved CPUs are used,
        and when even those are gone, the whole shared pool: a container must have somewhere to run.
        """
        node_cpus = CPUSet().union(*(self._numa_cpus.get(n, CPUSet()) for n in numa_ids))
        on_node = shared & node_cpus
        return (on_node - self.reserved) or on_node or shared

    def desired_cpuset(
        self,
        state: StateReader,
        pod: KubeletPod,
        decision: ExclusiveDecision,
        container: str,
        shared: CPUSet,
        numa_pools: dict[tuple[int, ...], CPUSet] | None = None,
    ) -> CPUSet:
        """The cpuset a container of ``pod`` should run on now: its assignment, else the pool its pod's
        policy gives it. ``numa_pools`` caches ``numa_pool`` results for one pass."""
        assigned = state.get_cpuset(pod.uid, container)
        if assigned is not None:
            return assigned
        if decision.mode is CPUPolicy.NUMA and decision.zones:
            info = pod.container(container)
            if info is not None and info.exclusive_cpus:
                key = decision.numa_ids
                if numa_pools is None:
                    return self.numa_pool(shared, key)
                pool = numa_pools.get(key)
                if pool is None:
                    pool = numa_pools[key] = self.numa_pool(shared, key)
                return pool
        return shared

    # --- allocation ---------------------------------------------------------------------------------

    def allocate(self, state: StateReader, pod: KubeletPod, decision: ExclusiveDecision) -> Allocation | None:
        """CPUs for a pod that pins (exclusive/immovable) and has none yet; ``None`` when nothing is to
        be done. Raises ``AllocationError`` when the CPUs are not free."""
        if not decision.pins or state.has_pod(pod.uid):
            return None
        allocatable = self.allocatable(state)
        n = decision.exclusive_cpus
        default = state.get_default_cpuset()
        if len(default) - n < 1:
            # Only possible without reserved CPUs: unpinned containers must keep somewhere to run.
            raise AllocationError(
                "insufficient",
                f"taking {n} CPU(s) would leave the shared pool ({default or 'none'}) empty",
            )
        try:
            if decision.zones:
                parts = []
                for numa, k in decision.zones:
                    free = allocatable & self._numa_cpus[numa]
                    if len(free) < k:
                        raise AllocationError(
                            "insufficient",
                            f"NUMA node {numa} has {len(free)} allocatable CPU(s) ({free or 'none'}), "
                            f"the topology result asks for {k}",
                        )
                    parts.append(take_by_topology(self.topology, free, k))
                cpus = CPUSet().union(*parts)
            else:
                if len(allocatable) < n:
                    raise AllocationError(
                        "insufficient",
                        f"{len(allocatable)} allocatable CPU(s) ({allocatable or 'none'}), the pod needs {n}",
                    )
                cpus = take_by_topology(self.topology, allocatable, n)
            containers = self._distribute(pod, cpus)
        except NotEnoughCPUsError as e:
            raise AllocationError("insufficient", str(e)) from None
        return Allocation(pod.uid, decision.mode, cpus, containers)

    def _distribute(self, pod: KubeletPod, cpus: CPUSet) -> dict[str, CPUSet]:
        """Each qualifying container's part of the pod-level set (see the module docstring)."""
        long_running = CPUSet()  # sidecars and app containers: pairwise disjoint
        out: dict[str, CPUSet] = {}
        for c in pod.containers:
            if not c.exclusive_cpus:
                continue
            part = take_by_topology(self.topology, cpus - long_running, c.exclusive_cpus)
            if c.kind is not ContainerKind.INIT:
                long_running |= part
            out[c.name] = part
        return out

    def release(self, state: StateReader, pod_uid: str) -> Release | None:
        """Give a pod's CPUs back to the default set; ``None`` when it has none."""
        if not state.has_pod(pod_uid):
            return None
        return Release(pod_uid, state.pod_cpus(pod_uid))

    # --- state checks -------------------------------------------------------------------------------

    def validate_state(self, state: StateReader) -> None:
        """The kubelet's ``validateState`` rules; raises ``StateInvalidError`` naming the broken rule.

        - reserved CPUs are in the default set (so never assigned);
        - no assignment overlaps the default set; assignments of different pods do not overlap
          (one pod's init and app containers may, by design);
        - the default set and the assignments together are exactly the machine's online CPUs.
        An empty state (no default set, no assignments) is valid: it is a fresh one.
        """
        default = state.get_default_cpuset()
        assignments = state.get_assignments()
        if not default and not assignments:
            return
        if not default:
            raise StateInvalidError("the default cpuset is empty but there are assignments")
        if not self.reserved.issubset(default):
            raise StateInvalidError(
                f'not all reserved cpus: "{self.reserved}" are present in defaultCpuSet: "{default}"'
            )
        seen = CPUSet()
        for uid, ctrs in assignments.items():
            pod_cpus = CPUSet()
            for name, cpus in ctrs.items():
                if not cpus:
                    raise StateInvalidError(f"pod {uid} container {name}: empty assignment")
                if not cpus.isdisjoint(default):
                    raise StateInvalidError(
                        f'pod {uid} container {name}: cpuset "{cpus}" overlaps the default cpuset "{default}"'
                    )
                pod_cpus |= cpus
            if not pod_cpus.isdisjoint(seen):
                raise StateInvalidError(
                    f'pod {uid}: cpuset "{pod_cpus}" overlaps other pods\' assignments ("{pod_cpus & seen}")'
                )
            seen |= pod_cpus
        total = default | seen
        if total != self.all_cpus:
            raise StateInvalidError(
                f'current set of available CPUs "{self.all_cpus}" doesn\'t match with CPUs in state "{total}"'
            )
