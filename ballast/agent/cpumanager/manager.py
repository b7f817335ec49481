"""The CPU manager: keeps the assignments in step with the pods on this node and the cpusets in step
with the assignments.

Feed it pods (``on_pods`` with the full list, ``on_pod_event`` per watch event; it is also a
``ballast.kube.client.Reflector`` handler through ``replace``/``apply``) and call ``reconcile_once``, or let
``run(stop)`` call it every ``reconcile_period`` seconds and at once after pod events.

One pass:

1. Nothing happens before the first full pod list: an empty list at start-up must not look like
   "every pod is gone".
2. Pods that are gone (deleted, or Succeeded/Failed) give their CPUs back.
3. Pods that pin CPUs (exclusive, immovable) and have none yet get them, oldest pod first. A pod whose
   CPUs are not free stays on the shared pool; it is retried when the allocatable CPUs change.
4. Every running container gets its desired cpuset (its assignment, else the pool its pod's policy
   gives it) through the runtime when it differs from what was last applied to that container id, or
   from what its cgroup says now (``readback``: the cpuset is read back on every pass, so one changed
   behind the agent's back is repaired and counted as a repair). A new container id (a restart) is
   applied afresh; after an agent restart everything is. Failures are logged and counted, and retried
   on the next pass, then after one period, two, four, ... up to a minute (a runtime that cannot reach a
   container's shim holds its NRI lock while it tries: a retry on every pass would keep other containers
   from starting).

With NRI (``ballast.agent.nri``) the runtime also asks the manager, while it creates a container, which
cpuset that container gets (``pin_at_creation``): the pod's CPUs are allocated then if the pass has not
done it yet, and the other containers whose cpuset that changes are named, for the runtime to update
before the new container starts. The state is guarded by one lock that is never held during a runtime
call: the runtime may be waiting for the manager's answer to its own question.

A pod's policy and topology result are read again on every event until the pod has CPUs assigned, so
an annotation that arrives after the pod (crane's informer missed those) is honoured. Once CPUs are
assigned they are frozen while the pod lives: a later annotation edit is not a resize. After an agent
restart they are read again from the pods.

The checkpoint (``ballast.agent.cpumanager.state_checkpoint.CheckpointState``) is validated at start; a
rejected one is moved
aside, counted, and the state is rebuilt from the running pods by step 3 of the first pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ballast.agent.cpumanager.metrics import CPUManagerMetrics
from ballast.agent.cpumanager.policy_static import AllocationError, StaticPolicy
from ballast.agent.cpumanager.runtime import ContainerRef, ContainerRuntime, CpusetReader, RuntimeCallError
from ballast.agent.cpumanager.state import HeldCPUs, StateReader
from ballast.agent.cpumanager.state_checkpoint import DEFAULT_STATE_PATH, CheckpointState, StateWriteError
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology
from ballast.contract.exclusive import CPUPolicy, ExclusiveDecision
from ballast.contract.pod import KubeletPod, parse_pod

__all__ = ["DEFAULT_RECONCILE_PERIOD", "DEFAULT_STATE_PATH", "CPUManager", "ReconcileResult"]

log = logging.getLogger("ballast.agent.cpumanager")

DEFAULT_RECONCILE_PERIOD = 5.0
RETRY_MAX = 60.0
"""Longest wait before a container whose cpuset the runtime failed to set is tried again."""
LOOKUP_TTL = 60.0
"""Seconds a container id found through the runtime (not in the pod status) is trusted."""


@dataclass
class ReconcileResult:
    """What one pass did."""

    skipped: bool = False
    """True before the first full pod list: nothing was done."""
    allocated: int = 0
    released: int = 0
    allocation_errors: int = 0
    updates: int = 0
    update_errors: int = 0
    unchanged: int = 0
    repairs: int = 0
    """Containers whose cgroup cpuset differed from what was last applied (changed behind the agent's
    back, or an update that did not land): set again."""
    duration: float = 0.0


class CPUManager:
    on_assignments: Callable[[], None] | None = None
    """Told after a reconcile changed which CPUs a pod holds (the agent republishes its NRT)."""

    """Assign CPUs to pods on one node and apply cpusets through a ``ContainerRuntime``."""

    def __init__(
        self,
        topology: CPUTopology,
        reserved: CPUSet,
        state_path: Path | str,
        runtime: ContainerRuntime,
        *,
        allowed_schedulers: Iterable[str],
        default_policy: CPUPolicy | str = CPUPolicy.EXCLUSIVE,
        node_name: str,
        reconcile_period: float = DEFAULT_RECONCILE_PERIOD,
        metrics: CPUManagerMetrics | None = None,
        result_key: bytes | None = None,
        readback: CpusetReader | None = None,
        pod_wait: float = 1.0,
    ) -> None:
        """``state_path``: the checkpoint (``ballast.agent.cpumanager.state_checkpoint.DEFAULT_STATE_PATH``
        on a node);
        ``runtime``: where cpusets go (``CRIRuntime`` on a node); ``allowed_schedulers``: the
        ``spec.schedulerName`` values whose topology results are trusted; ``default_policy``: for pods
        without a valid cpu-policy annotation; ``node_name``: pods of other nodes are ignored;
        ``readback``: reads a container's cpuset from its cgroup (``CgroupCpusetReader``), ``None`` trusts
        what was applied; ``pod_wait``: how long ``pin_at_creation`` waits for the pod watch to name a pod
        the runtime creates a container for."""
        if runtime is None:
            raise ValueError(
                "CPUManager needs a runtime (ballast.agent.cpumanager.runtime.CRIRuntime for a real node)"
            )
        if not node_name:
            raise ValueError("CPUManager needs the node name")
        if reconcile_period <= 0:
            raise ValueError("reconcile_period must be positive")
        self.topology = topology
        self.node_name = node_name
        self.runtime = runtime
        self.reconcile_period = reconcile_period
        self.metrics = metrics or CPUManagerMetrics()
        self.readback = readback
        self.pod_wait = pod_wait
        self.policy = StaticPolicy(
            topology,
            reserved,
            allowed_schedulers=allowed_schedulers,
            default_policy=default_policy,
            result_key=result_key,
        )
        runtime.bind_metrics(self.metrics)
        self._state = CheckpointState(state_path, validate=self.policy.validate_state)
        if self._state.recovery is not None:
            self.metrics.state_recoveries.labels(self._state.recovery.kind).inc()
        if self._state.fresh:
            try:
                self._state.set_default_cpuset(topology.all_cpus)
            except StateWriteError as e:
                self._write_failed(e)

        self.on_assignments: Callable[[], None] | None = None
        """Called after a pass that assigned or released CPUs (the community NRT is republished)."""
        self._lock = threading.Lock()  # pods, decisions, synced: written by watch threads
        self._reconcile_lock = threading.Lock()
        self._wake = threading.Event()
        self._pods: dict[str, KubeletPod] = {}
        self._decisions: dict[str, ExclusiveDecision] = {}
        self._frozen: set[str] = set()  # pods with CPUs assigned: their decision no longer changes
        self._synced = False
        # The assignments, what was applied and to whom: one lock, never held across a runtime call.
        self._state_lock = threading.RLock()
        self._generation = 0  # bumped whenever the assignments change: a plan made before is stale
        self._applied: dict[str, CPUSet] = {}
        self._owners: dict[str, tuple[str, str]] = {}  # container id -> (pod UID, container name)
        # reconcile-thread only:
        self._backoff: dict[str, tuple[int, float]] = {}  # container id -> (failures, next try, monotonic)
        self._looked_up: dict[tuple[str, str, int], tuple[str, float]] = {}
        self._alloc_failed: dict[str, tuple[CPUSet, str]] = {}

    # --- feeding pods -------------------------------------------------------------------------------

    def on_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """The complete list of this node's pods (a list or relist); pods not in it are gone."""
        parsed: dict[str, KubeletPod] = {}
        for obj in pods:
            info = parse_pod(obj)
            if self._ours(info):
                parsed[info.uid] = info
        with self._lock:
            self._pods = parsed
            for uid in list(self._decisions):
                if uid not in parsed:
                    del self._decisions[uid]
            for info in parsed.values():
                self._decide(info)
            self._synced = True
        self._wake.set()

    def on_pod_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED`` with the pod's JSON."""
        info = parse_pod(pod)
        if not info.uid:
            return
        with self._lock:
            if event_type == "DELETED" or not self._ours(info):
                self._pods.pop(info.uid, None)
                self._decisions.pop(info.uid, None)
                self._frozen.discard(info.uid)
            else:
                self._pods[info.uid] = info
                self._decide(info)
        self._wake.set()

    # ``ballast.kube.client.Reflector`` handler protocol
    def replace(self, objects: list[dict[str, Any]], resource_version: str = "") -> None:
        self.on_pods(objects)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.on_pod_event(event_type, obj)

    def _ours(self, info: KubeletPod) -> bool:
        return bool(info.uid) and info.node_name == self.node_name

    def _decide(self, info: KubeletPod) -> None:
        """(Re)decide a pod's policy unless it has CPUs assigned (caller holds ``_lock``)."""
        if info.uid in self._frozen:
            return
        previous = self._decisions.get(info.uid)
        decision = self.policy.decide(info)
        self._decisions[info.uid] = decision
        if decision.rejected is not None and (previous is None or previous.rejected != decision.rejected):
            reason, message = decision.rejected
            self.metrics.topology_results_ignored.labels(reason).inc()
            log.warning("pod %s/%s (%s): %s", info.namespace, info.name, info.uid, message)

    # --- reconcile ----------------------------------------------------------------------------------

    def reconcile_once(self) -> ReconcileResult:
        """One pass (see the module docstring). Never raises for runtime or checkpoint failures.
        When the pods' pinned CPUs changed, ``on_assignments`` is told (the NRT publishes them)."""
        with self._reconcile_lock:
            before = self.held()
            started = time.perf_counter()
            result = self._reconcile()
            result.duration = time.perf_counter() - started
            if not result.skipped:
                self.metrics.reconcile_duration.observe(result.duration)
            changed = self.held() != before
        if changed and self.on_assignments is not None:
            self.on_assignments()
        return result

    def _reconcile(self) -> ReconcileResult:
        result = ReconcileResult()
        with self._lock:
            if not self._synced:
                result.skipped = True
                return result
            pods = dict(self._pods)
            decisions = dict(self._decisions)
        active = {uid: p for uid, p in pods.items() if not p.terminal}
        state = self._state

        # One checkpoint write for all releases and allocations of the pass, saved before any cpuset
        # is applied: a crash after pinning never loses the assignments behind it.
        with self._state_lock:
            try:
                with state.batch():
                    self._release_gone(active, result)
                    self._allocate_new(active, decisions, result)
            except StateWriteError as e:
                self._write_failed(e)
            if result.allocated or result.released:
                self._generation += 1
            self._refreeze()
        self._apply_cpusets(active, decisions, result)

        with self._state_lock:
            if state.dirty:
                try:
                    state.flush()
                except StateWriteError as e:
                    self._write_failed(e)
            self._update_gauges(decisions)
        return result

    def _refreeze(self) -> None:
        with self._lock:
            self._frozen = set(self._state.get_assignments())

    def _release_gone(self, active: Mapping[str, KubeletPod], result: ReconcileResult) -> None:
        for uid in [uid for uid in self._state.get_assignments() if uid not in active]:
            release = self.policy.release(self._state, uid)
            if release is None:
                continue
            release.apply(self._state)
            result.released += 1
            self._alloc_failed.pop(uid, None)
            log.info("pod %s is gone: CPUs %s returned to the shared pool", uid, release.cpus)
        for uid in [uid for uid in self._alloc_failed if uid not in active]:
            del self._alloc_failed[uid]

    def _allocate_new(
        self,
        active: Mapping[str, KubeletPod],
        decisions: Mapping[str, ExclusiveDecision],
        result: ReconcileResult,
    ) -> None:
        state = self._state
        waiting = [
            p
            for uid, p in active.items()
            if (d := decisions.get(uid)) is not None and d.pins and not state.has_pod(uid)
        ]
        for pod in sorted(waiting, key=lambda p: (p.created, p.uid)):
            decision = decisions[pod.uid]
            allocatable = self.policy.allocatable(state)
            failed = self._alloc_failed.get(pod.uid)
            if failed is not None and failed[0] == allocatable:
                continue  # nothing was freed since the last attempt
            try:
                allocation = self.policy.allocate(state, pod, decision)
            except AllocationError as e:
                result.allocation_errors += 1
                self.metrics.allocation_errors.labels(e.reason).inc()
                level = logging.WARNING if failed is None else logging.DEBUG
                log.log(
                    level,
                    "pod %s/%s (%s): no CPUs for policy %s: %s; on the shared pool until CPUs are freed",
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    decision.mode,
                    e,
                )
                self._alloc_failed[pod.uid] = (allocatable, str(e))
                continue
            if allocation is None:
                continue
            allocation.apply(state)
            self._alloc_failed.pop(pod.uid, None)
            result.allocated += 1
            self.metrics.allocations.labels(str(decision.mode)).inc()
            where = (
                "NUMA " + ",".join(f"node{n}={k}" for n, k in decision.zones)
                if decision.zones
                else "whole machine"
            )
            log.info(
                "pod %s/%s (%s): %s CPUs %s (%s); containers %s",
                pod.namespace,
                pod.name,
                pod.uid,
                decision.mode,
                allocation.cpus,
                where,
                ", ".join(f"{c}={s}" for c, s in allocation.containers.items()),
            )

    def _apply_cpusets(
        self,
        active: Mapping[str, KubeletPod],
        decisions: Mapping[str, ExclusiveDecision],
        result: ReconcileResult,
    ) -> None:
        # 1. Which containers run (ids looked up through the runtime when the status lacks them): no lock.
        running: list[tuple[KubeletPod, ExclusiveDecision, str, ContainerRef]] = []
        for pod in active.values():
            decision = decisions.get(pod.uid)
            if decision is None:
                continue
            for container in pod.containers:
                status = pod.statuses.get(container.name)
                if status is not None and not status.running:
                    continue
                if status is None and pod.phase != "Running":
                    continue
                ref = ContainerRef(
                    pod.uid,
                    pod.namespace,
                    pod.name,
                    container.name,
                    status.container_id if status is not None else "",
                    status.runtime if status is not None else "",
                    pod.qos,
                )
                if not ref.container_id:
                    ref = self._look_up(ref, status.restart_count if status is not None else 0)
                    if ref is None:
                        continue
                running.append((pod, decision, container.name, ref))
        # 2. What each should have, from one consistent state.
        with self._state_lock:
            generation = self._generation
            pools = self._pools(decisions, active)
            plan = [
                (ref, self.policy.desired_cpuset(self._state, pod, decision, name, *pools))
                for pod, decision, name, ref in running
            ]
            seen = {ref.container_id for ref, _ in plan}
            for cid in [cid for cid in self._applied if cid not in seen]:
                del self._applied[cid]
                self._owners.pop(cid, None)
            for ref, _ in plan:
                self._owners[ref.container_id] = (ref.pod_uid, ref.container_name)
        # 3. Read back, and apply what differs. A plan made before the assignments changed (the runtime
        # asked ``pin_at_creation`` meanwhile) is dropped: the next pass, at once, makes a new one.
        for ref, desired in plan:
            with self._state_lock:
                if self._generation != generation:
                    self._wake.set()
                    return
                applied = self._applied.get(ref.container_id)
            actual = self._read_back(ref) if applied == desired else None
            if applied == desired and (actual is None or actual == desired):
                result.unchanged += 1
                continue
            repair = applied == desired
            failures, not_before = self._backoff.get(ref.container_id, (0, 0.0))
            if time.monotonic() < not_before:
                continue  # a container the runtime failed to update: not retried on every pass
            self.metrics.pinning_requests.labels(self.runtime.name).inc()
            try:
                self.runtime.set_cpuset(ref, desired)
            except RuntimeCallError as e:
                result.update_errors += 1
                self.metrics.pinning_errors.labels(self.runtime.name, e.reason).inc()
                with self._state_lock:
                    self._applied.pop(ref.container_id, None)
                # Each try may hold the runtime busy (its NRI lock while it waits for a stuck shim): back
                # off after the second failure, doubling from one period up to RETRY_MAX.
                delay = min(self.reconcile_period * 2 ** (failures - 1), RETRY_MAX) if failures else 0.0
                self._backoff[ref.container_id] = (failures + 1, time.monotonic() + delay)
                if e.not_found:
                    for key in [k for k in self._looked_up if k[:2] == (ref.pod_uid, ref.container_name)]:
                        del self._looked_up[key]
                log.warning("cpuset %s for %s not applied (retried next pass): %s", desired, ref, e)
                continue
            result.updates += 1
            self._backoff.pop(ref.container_id, None)
            if repair:
                result.repairs += 1
                self.metrics.cpuset_repairs.labels(self.runtime.name).inc()
                log.warning("cpuset of %s was %s, not %s: repaired", ref, actual, desired)
            with self._state_lock:
                self._applied[ref.container_id] = desired
            log.debug("cpuset of %s set to %s", ref, desired)
        for key in [k for k in self._looked_up if k[0] not in active]:
            del self._looked_up[key]
        for cid in [cid for cid in self._backoff if cid not in seen]:
            del self._backoff[cid]

    def _pools(
        self, decisions: Mapping[str, ExclusiveDecision], active: Mapping[str, Any]
    ) -> tuple[CPUSet, dict[tuple[int, ...], CPUSet]]:
        """The shared pool now and an empty NUMA-pool cache (caller holds ``_state_lock``)."""
        state = self._state
        immovable = [
            uid
            for uid, d in decisions.items()
            if d.mode is CPUPolicy.IMMOVABLE and uid in active and state.has_pod(uid)
        ]
        return self.policy.shared_pool(state, immovable), {}

    def _read_back(self, ref: ContainerRef) -> CPUSet | None:
        """The container's cpuset as its cgroup says, ``None`` without a reader or when unreadable (a
        container that just exited, a layout the reader does not know)."""
        if self.readback is None:
            return None
        try:
            return self.readback.read_cpuset(ref)
        except RuntimeCallError as e:
            log.debug("cannot read the cpuset of %s back: %s", ref, e)
            return None

    # --- NRI: the runtime asks while it creates a container -----------------------------------------

    def pin_at_creation(
        self, pod_uid: str, container_name: str, container_id: str, *, known_only: bool = False
    ) -> tuple[CPUSet | None, dict[str, CPUSet]]:
        """The cpuset container ``container_id`` (``container_name`` of pod ``pod_uid``) must be created
        with, and the other containers' new cpusets when this changed them (the pod's CPUs were allocated
        just now): ``(cpus, {container id: cpus})``.

        A pod the watch has not named yet is waited for up to ``pod_wait`` seconds; a pod still unknown
        then gets its checkpointed CPUs if it holds some, else the shared pool (the next pass pins it).
        ``known_only`` (the runtime's list of what exists, at registration): no waiting, and ``None`` for
        such a pod rather than a guess. Never calls the runtime.
        """
        deadline = time.monotonic() + (0.0 if known_only else self.pod_wait)
        while True:
            with self._lock:
                pod = self._pods.get(pod_uid)
                decision = self._decisions.get(pod_uid)
            if pod is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        allocated = False
        with self._state_lock:
            state = self._state
            if pod is not None and decision is not None and decision.pins and not state.has_pod(pod_uid):
                result = ReconcileResult()
                try:
                    with state.batch():
                        self._allocate_new({pod_uid: pod}, {pod_uid: decision}, result)
                except StateWriteError as e:
                    self._write_failed(e)
                if result.allocated:
                    allocated = True
                    self._generation += 1
                    self._refreeze()
            with self._lock:
                pods = dict(self._pods)
                decisions = dict(self._decisions)
            active = {uid: p for uid, p in pods.items() if not p.terminal}
            shared, numa_pools = self._pools(decisions, active)
            cpus: CPUSet | None
            if pod is not None and decision is not None:
                cpus = self.policy.desired_cpuset(state, pod, decision, container_name, shared, numa_pools)
            elif (held := state.get_cpuset(pod_uid, container_name)) is not None:
                cpus = held
            elif known_only:
                return None, {}
            else:
                cpus = shared
            updates: dict[str, CPUSet] = {}
            for cid, (uid, name) in self._owners.items():
                other, other_decision = pods.get(uid), decisions.get(uid)
                if cid == container_id or other is None or other_decision is None:
                    continue
                want = self.policy.desired_cpuset(state, other, other_decision, name, shared, numa_pools)
                if self._applied.get(cid) != want:
                    updates[cid] = want
                    self._applied[cid] = want  # the runtime applies them; the read-back checks
            self._applied[container_id] = cpus
            self._owners[container_id] = (pod_uid, container_name)
        if allocated:
            self._wake.set()
            if self.on_assignments is not None:
                self.on_assignments()
        return cpus, updates

    def forget_container(self, container_id: str) -> None:
        """The runtime removed the container: it needs no cpuset any more."""
        with self._state_lock:
            self._applied.pop(container_id, None)
            self._owners.pop(container_id, None)

    def _look_up(self, ref: ContainerRef, restarts: int) -> ContainerRef | None:
        """The container id from the runtime (kubelet labels) when the pod status has none.

        Remembered per restart count (a restart makes a new container) for ``LOOKUP_TTL`` seconds."""
        key = (ref.pod_uid, ref.container_name, restarts)
        now = time.monotonic()
        cached = self._looked_up.get(key)
        if cached is not None and now - cached[1] < LOOKUP_TTL:
            return ref.with_id(cached[0])
        try:
            cid = self.runtime.find_container_id(ref)
        except RuntimeCallError as e:
            self.metrics.pinning_errors.labels(self.runtime.name, "lookup-" + e.reason).inc()
            log.warning("cannot look up %s: %s", ref, e)
            return None
        for old in [k for k in self._looked_up if k[:2] == key[:2]]:
            del self._looked_up[old]
        if not cid:
            return None
        self._looked_up[key] = (cid, now)
        return ref.with_id(cid)

    def _update_gauges(self, decisions: Mapping[str, ExclusiveDecision]) -> None:
        state = self._state
        assignments = state.get_assignments()
        assigned = CPUSet().union(*(c for ctrs in assignments.values() for c in ctrs.values()))
        immovable = [
            uid for uid in assignments if (d := decisions.get(uid)) and d.mode is CPUPolicy.IMMOVABLE
        ]
        self.metrics.exclusive_cpus.set(len(assigned))
        self.metrics.shared_pool_cpus.set(len(self.policy.shared_pool(state, immovable)))
        self.metrics.pinned_pods.labels("immovable").set(len(immovable))
        self.metrics.pinned_pods.labels("exclusive").set(len(assignments) - len(immovable))

    def _write_failed(self, e: StateWriteError) -> None:
        self.metrics.state_write_errors.inc()
        log.error("%s; the state is kept in memory and saved again on the next pass", e)

    # --- loop ---------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Run the next pass now."""
        self._wake.set()

    def run(self, stop: threading.Event, *, poll: float = 0.25) -> None:
        """Reconcile every ``reconcile_period`` seconds and right after pod events, until ``stop`` is set.

        ``stop`` is checked every ``poll`` seconds while idle. A pass that raises is logged, not fatal.
        """
        log.info(
            "CPU manager running on node %s: %d CPUs, reserved %s, reconcile every %.1fs, runtime %s",
            self.node_name,
            self.topology.num_cpus,
            self.policy.reserved or "none",
            self.reconcile_period,
            self.runtime.name,
        )
        while not stop.is_set():
            self._wake.clear()
            try:
                done = self.reconcile_once()
                if (done.allocated or done.released) and self.on_assignments is not None:
                    self.on_assignments()
            except Exception:
                log.exception("reconcile pass failed; retrying on the next one")
            deadline = time.monotonic() + self.reconcile_period
            while not stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._wake.wait(min(poll, remaining)):
                    break

    def pod_reflector(self, api_client: Any, *, resync_seconds: float = 300.0) -> Any:
        """A ``ballast.kube.client.Reflector`` over this node's pods, feeding this manager; ``start()`` it."""
        from ballast.kube.client import Reflector

        return Reflector(
            api_client,
            "/api/v1/pods",
            self,
            params={"fieldSelector": f"spec.nodeName={self.node_name}"},
            name=f"pods@{self.node_name}",
            resync_seconds=resync_seconds,
        )

    # --- inspection ---------------------------------------------------------------------------------

    @property
    def state(self) -> StateReader:
        """The assignments, read-only."""
        return self._state

    @property
    def synced(self) -> bool:
        return self._synced

    def applied(self) -> dict[str, CPUSet]:
        """Container id -> cpuset last applied successfully."""
        with self._state_lock:
            return dict(self._applied)

    def held(self) -> dict[str, HeldCPUs]:
        """Pod UID -> the CPUs the state assigns it, with its namespace and name: what both NRTs publish
        (crane's per zone, the community's ``available`` and pods fingerprint).

        One rule: a pod holds CPUs from their assignment until their release, whether or not the pod watch
        has named it yet (after a restart the checkpoint comes before the first list); its namespace and
        name are then ``""``."""
        with self._lock:
            pods = dict(self._pods)
        out = {}
        for uid in self._state.get_assignments():
            cpus = self._state.pod_cpus(uid)
            if cpus:
                info = pods.get(uid)
                out[uid] = HeldCPUs(info.namespace if info else "", info.name if info else "", cpus)
        return out

    def decision(self, pod_uid: str) -> ExclusiveDecision | None:
        with self._lock:
            return self._decisions.get(pod_uid)

    def close(self) -> None:
        self.runtime.close()
