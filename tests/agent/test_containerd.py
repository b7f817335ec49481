"""Integration: the agent pins a real container in a private containerd through its own CRI client.

The kernel is the judge: the container's ``cpuset.cpus`` cgroup file and its process's
``Cpus_allowed_list`` must show exactly the CPUs the agent assigned, and the shared pool once the
exclusive pod is gone. With ``CI=true`` an unusable containerd fails the test instead of skipping it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ballast.agent.cpumanager.manager import CPUManager
from ballast.agent.cpumanager.runtime import CgroupfsRuntime, ContainerRef, CRIRuntime
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.sysfs import read_topology
from ballast.contract.pod import QOSClass
from ballast.testing.containerd import (
    ContainerdUnavailable,
    PrivateContainerd,
    RunningPod,
    cpus_allowed,
    prerequisites,
)
from ballast.testing.cri_fake import NODE, SCHEDULER, container, pod, zones
from ballast.testing.parts import missing_part

pytestmark = pytest.mark.integration


def _unavailable(reason: str) -> None:
    missing_part(f"containerd integration test cannot run: {reason}")


@pytest.fixture(scope="module")
def containerd():
    reason = prerequisites()
    if reason:
        _unavailable(reason)
    harness = PrivateContainerd()
    try:
        harness.start()
    except ContainerdUnavailable as e:
        harness.stop()
        _unavailable(str(e))
    try:
        yield harness
    finally:
        harness.stop()


def _pod_json(running: RunningPod, *, cpu: str, request_cpu: str | None, result=None, with_ids: bool) -> dict:
    obj = pod(
        running.name,
        [container("app", cpu, "64Mi", request_cpu=request_cpu)],
        uid=running.uid,
        namespace=running.namespace,
        result=result,
        statuses="running" if with_ids else "no-ids",
    )
    if with_ids:
        obj["status"]["containerStatuses"][0]["containerID"] = f"containerd://{running.container_ids['app']}"
    return obj


def _kernel_view(writer: CgroupfsRuntime, running: RunningPod, qos: QOSClass) -> tuple[CPUSet, CPUSet, int]:
    """(cgroup cpuset.cpus, Cpus_allowed_list of the container's process, its pid)."""
    ref = ContainerRef(
        running.uid, running.namespace, running.name, "app", running.container_ids["app"], "containerd", qos
    )
    directory = writer.container_dir(ref)
    assert directory.is_dir(), f"the cgroupfs path rules do not match containerd's layout: {directory}"
    cpus = CPUSet.parse((directory / "cpuset.cpus").read_text().strip())
    pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    assert pids, f"no process in {directory}"
    return cpus, cpus_allowed(pids[0]), pids[0]


def test_exclusive_cpus_reach_the_kernel_and_return_to_the_shared_pool(
    containerd: PrivateContainerd, tmp_path: Path
) -> None:
    started = time.monotonic()
    topology = read_topology(Path("/sys"))
    if topology.num_cpus < 2:
        _unavailable(f"needs at least 2 CPUs to pin one exclusively, the machine has {topology.num_cpus}")
    all_cpus = topology.all_cpus
    reserved = CPUSet.of(all_cpus.sorted()[0])  # like a kubelet reserving its lowest CPU
    numa = topology.numa_ids[-1]

    pinned = containerd.run_pod("pinned", ["app"], qos="guaranteed")
    shared = containerd.run_pod("shared", ["app"], qos="burstable")
    writer = CgroupfsRuntime(Path("/sys/fs/cgroup"))
    before, _, pinned_pid = _kernel_view(writer, pinned, QOSClass.GUARANTEED)
    assert before == all_cpus, "a new container starts on every CPU"

    runtime = CRIRuntime(containerd.endpoint, timeout=10.0)
    manager = CPUManager(
        topology,
        reserved,
        tmp_path / "cpu_manager_state",
        runtime,
        allowed_schedulers=[SCHEDULER],
        node_name=NODE,
    )
    pinned_pod = _pod_json(
        pinned, cpu="1", request_cpu=None, result=zones(**{f"node{numa}": 1}), with_ids=True
    )
    # The shared pod's status has no container id yet: the agent finds it by the kubelet labels.
    shared_pod = _pod_json(shared, cpu="1", request_cpu="100m", with_ids=False)
    try:
        manager.on_pods([pinned_pod, shared_pod])
        result = manager.reconcile_once()
        assert (result.allocated, result.updates, result.update_errors) == (1, 2, 0)

        assigned = manager.state.get_cpuset(pinned.uid, "app")
        assert assigned is not None and len(assigned) == 1
        assert assigned.issubset(topology.cpus_in_numa(numa)) and assigned.isdisjoint(reserved)
        shared_pool = all_cpus - assigned

        cg, allowed, pid = _kernel_view(writer, pinned, QOSClass.GUARANTEED)
        assert (cg, allowed) == (assigned, assigned)
        assert pid == pinned_pid, "updated in place, the process was not restarted"
        cg, allowed, _ = _kernel_view(writer, shared, QOSClass.BURSTABLE)
        assert (cg, allowed) == (shared_pool, shared_pool)

        # Nothing is re-sent when nothing changed.
        assert manager.reconcile_once().updates == 0

        # The exclusive pod goes away: its CPUs return to the shared container.
        containerd.remove_pod(pinned)
        manager.on_pod_event("DELETED", pinned_pod)
        result = manager.reconcile_once()
        assert (result.released, result.updates, result.update_errors) == (1, 1, 0)
        cg, allowed, _ = _kernel_view(writer, shared, QOSClass.BURSTABLE)
        assert (cg, allowed) == (all_cpus, all_cpus)
        assert manager.state.get_default_cpuset() == all_cpus and not manager.state.get_assignments()
    finally:
        manager.close()
    assert time.monotonic() - started < 60


def test_cgroupfs_fallback_writes_a_real_container(containerd: PrivateContainerd) -> None:
    topology = read_topology(Path("/sys"))
    if topology.num_cpus < 2:
        _unavailable(f"needs at least 2 CPUs, the machine has {topology.num_cpus}")
    running = containerd.run_pod("fallback", ["app"], qos="besteffort")
    writer = CgroupfsRuntime(Path("/sys/fs/cgroup"))
    ref = ContainerRef(
        running.uid,
        running.namespace,
        running.name,
        "app",
        running.container_ids["app"],
        "containerd",
        QOSClass.BEST_EFFORT,
    )
    last = CPUSet.of(topology.all_cpus.sorted()[-1])
    writer.set_cpuset(ref, last)
    cg, allowed, _ = _kernel_view(writer, running, QOSClass.BEST_EFFORT)
    assert (cg, allowed) == (last, last)
    containerd.remove_pod(running)
    assert running.sandbox_id not in containerd.list_sandboxes()
