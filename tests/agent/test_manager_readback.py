"""Read back and repair: the manager reads each container's cpuset from its cgroup on every pass (a cgroup
v2 tree under a temporary root, laid out as the kubelet's systemd driver and containerd lay it out) and
sets again what differs from what it applied. The real kernel's files are exercised on the real nodes
(tests/cluster/test_real_node_pinning.py)."""

from __future__ import annotations

from pathlib import Path

from ballast.agent.cpumanager.manager import CPUManager
from ballast.agent.cpumanager.runtime import CgroupfsRuntime, ContainerRef, MemoryRuntime
from ballast.agent.cpuset import CPUSet
from ballast.contract.pod import QOSClass
from ballast.testing.cri_fake import NODE, SCHEDULER, container, container_id, pod
from tests.agent.kubelet_topologies import DUAL_SOCKET_HT

ALL = DUAL_SOCKET_HT.all_cpus


class WritingRuntime(MemoryRuntime):
    """Records like ``MemoryRuntime`` and writes the cpuset where the kernel would show it."""

    def __init__(self, tree: CgroupfsRuntime) -> None:
        super().__init__()
        self.tree = tree

    def set_cpuset(self, ref: ContainerRef, cpus: CPUSet) -> None:
        super().set_cpuset(ref, cpus)
        (self.tree.container_dir(ref) / "cpuset.cpus").write_text(f"{cpus}\n")


def test_a_cpuset_changed_behind_the_agents_back_is_repaired_and_counted(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    tree = CgroupfsRuntime(root, driver="systemd")
    assert tree.version == 2
    web = pod("web", [container("app", "1", "1Gi", request_cpu="500m")])
    uid = web["metadata"]["uid"]
    cid = container_id(uid, "app")
    ref = ContainerRef(uid, "default", "web", "app", cid, "containerd", QOSClass.BURSTABLE)
    directory = tree.container_dir(ref)
    directory.mkdir(parents=True)
    (directory / "cpuset.cpus").write_text("\n")
    (directory / "cpuset.cpus.effective").write_text("0-11\n")
    runtime = WritingRuntime(tree)
    m = CPUManager(
        DUAL_SOCKET_HT,
        CPUSet(),
        tmp_path / "state",
        runtime,
        allowed_schedulers=[SCHEDULER],
        node_name=NODE,
        readback=tree,
    )
    m.on_pods([web])
    first = m.reconcile_once()
    assert (first.updates, first.repairs) == (1, 0) and runtime.calls == [(cid, ALL)]
    assert m.reconcile_once().unchanged == 1 and len(runtime.calls) == 1  # read back: as applied

    (directory / "cpuset.cpus").write_text("3\n")  # someone else's write
    repaired = m.reconcile_once()
    assert (repaired.updates, repaired.repairs) == (1, 1)
    assert runtime.calls[-1] == (cid, ALL) and (directory / "cpuset.cpus").read_text().strip() == "0-11"
    sample = m.metrics.registry.get_sample_value("ballast_agent_cpuset_repairs_total", {"runtime": "memory"})
    assert sample == 1

    (directory / "cpuset.cpus").write_text("\n")  # v2's "inherit": the effective CPUs count
    (directory / "cpuset.cpus.effective").write_text("0-11\n")
    assert m.reconcile_once().repairs == 0
    (directory / "cpuset.cpus.effective").write_text("0-5\n")
    assert m.reconcile_once().repairs == 1


def test_a_container_the_runtime_keeps_failing_is_retried_with_backoff_not_every_pass(tmp_path: Path) -> None:
    from ballast.agent.cpumanager.runtime import RuntimeCallError

    runtime = MemoryRuntime(fail=lambda ref, cpus: RuntimeCallError("unavailable", "shim not answering"))
    m = CPUManager(
        DUAL_SOCKET_HT,
        CPUSet(),
        tmp_path / "state",
        runtime,
        allowed_schedulers=[SCHEDULER],
        node_name=NODE,
        reconcile_period=30.0,
    )
    m.on_pods([pod("web", [container("app", "1", "1Gi", request_cpu="500m")])])
    tries = []
    for _ in range(4):
        before = m.metrics.registry.get_sample_value(
            "ballast_agent_cpuset_updates_total", {"runtime": "memory"}
        )
        m.reconcile_once()
        after = m.metrics.registry.get_sample_value(
            "ballast_agent_cpuset_updates_total", {"runtime": "memory"}
        )
        tries.append(after - (before or 0))
    assert tries == [1, 1, 0, 0]  # the next pass, then not before one period (30 s here)
    runtime.fail = None
    m._backoff.clear()  # the period passed
    assert m.reconcile_once().updates == 1 and not m._backoff
