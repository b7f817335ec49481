"""The agent's load measurement against the real kernel: this machine's ``/proc`` with a real CPU burner,
and real pod cgroups (v1 ``cpuacct``/``memory``, the v2 unified tree's ``cpu.stat``) with real processes.

Other work shares this machine, so no test asserts an absolute node load: each compares what the agent
measured with what the burner itself accrued (``/proc/<pid>/stat``), which no other load can inflate.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from ballast.agent.cgroup_paths import pod_cgroup_parts
from ballast.agent.load.cgroups import PodCgroups
from ballast.agent.load.procfs import ProcReader, cpu_utilisation
from ballast.agent.load.sampler import PodRef, Sampler
from ballast.contract.pod import QOSClass
from tests.agent import load_processes as lp

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real cgroups need root")

TICK = os.sysconf("SC_CLK_TCK")
INTERVAL = 1.5
"""Seconds each measurement covers (the agent's is 10 s; a shorter one only adds tick rounding)."""


def test_node_utilisation_holds_the_burners_share_of_the_cpus() -> None:
    proc = ProcReader("/proc")
    cpus = proc.cpu_times().cpus
    burner = lp.start(lp.BURN)
    try:
        lp.go(burner)
        time.sleep(0.2)  # past start-up
        before, ticks_before = proc.cpu_times(), lp.ticks_of(burner.pid)
        time.sleep(INTERVAL)
        after, ticks_after = proc.cpu_times(), lp.ticks_of(burner.pid)
    finally:
        lp.stop(burner)
    busy = cpu_utilisation(before, after)
    total_ticks = sum(after.modes) - sum(before.modes)
    burner_share = (ticks_after - ticks_before) / total_ticks  # of all CPUs' time
    seen = f"node busy {busy}, burner {burner_share:.3f} of {total_ticks} ticks on {cpus} CPUs"
    assert burner_share > 0.05, f"the burner hardly ran; the machine is too busy to tell ({seen})"
    # The burner's time is inside the node's busy time: whatever else runs can only add to it. (The two
    # counters are read a moment apart and tick-sampled: a few ticks of slack.)
    assert busy is not None and busy >= burner_share - 0.03, seen
    # One spinning process is at most one core: its share of the node is at most one CPU's.
    assert burner_share <= 1 / cpus + 0.03, seen


def test_node_memory_is_cranes_ratio_of_this_machines_meminfo() -> None:
    memory = ProcReader("/proc").meminfo()
    fields = {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
    }
    assert memory.total == fields["MemTotal"]
    assert 0 < memory.utilisation < 1
    assert abs(memory.used - (fields["MemTotal"] - fields["MemAvailable"])) < 256 << 20  # read apart


def _pod(qos: QOSClass = QOSClass.BURSTABLE) -> PodRef:
    return PodRef(str(uuid.uuid4()), "shop", "web-1", qos)


def _measure_burner(cgroups: PodCgroups, pod: PodRef, base_cpu: Path) -> tuple[float, float]:
    """Run a burner in the pod's cgroup; the pod's cores as the sampler saw them, and the burner's own."""
    burner = lp.start(lp.BURN)
    try:
        lp.enter(base_cpu, burner.pid)
        lp.go(burner)
        sampler = Sampler(ProcReader("/proc"), cgroups)
        sampler.sample([pod])
        t0, ticks0 = time.monotonic(), lp.ticks_of(burner.pid)
        time.sleep(INTERVAL)
        sample = sampler.sample([pod])
        t1, ticks1 = time.monotonic(), lp.ticks_of(burner.pid)
    finally:
        lp.stop(burner)
    measured = sample.pods[pod.uid].cores
    assert measured is not None
    return measured, (ticks1 - ticks0) / TICK / (t1 - t0)


def test_v1_pod_cpu_in_cores_is_the_burners_rate(tmp_path: Path) -> None:
    pod = _pod()
    with lp.v1_root(tmp_path) as root:
        parts = pod_cgroup_parts(pod.uid, pod.qos, "cgroupfs")
        cpu_dir = lp.make_pod_cgroup(root / "cpuacct", parts)
        lp.make_pod_cgroup(root / "memory", parts)
        cgroups = PodCgroups(root)
        assert cgroups.version == 1
        measured, own = _measure_burner(cgroups, pod, cpu_dir)
    assert own > 0.1, "the burner hardly ran; the machine is too busy to tell"
    assert measured == pytest.approx(own, abs=0.05, rel=0.1)


def test_v1_pod_working_set_holds_what_a_process_allocated(tmp_path: Path) -> None:
    pod = _pod(QOSClass.GUARANTEED)
    mib = 64
    with lp.v1_root(tmp_path) as root:
        parts = pod_cgroup_parts(pod.uid, pod.qos, "cgroupfs")
        lp.make_pod_cgroup(root / "cpuacct", parts)
        memory_dir = lp.make_pod_cgroup(root / "memory", parts)
        cgroups = PodCgroups(root)
        before = cgroups.read(pod.uid, pod.qos)
        holder = lp.start(lp.HOLD, str(mib))
        try:
            lp.enter(memory_dir, holder.pid)
            lp.go(holder)
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            during = cgroups.read(pod.uid, pod.qos)
        finally:
            lp.stop(holder)
    assert before is not None and before.working_set is not None and before.working_set < 1 << 20
    assert during is not None and during.working_set is not None
    assert during.working_set >= mib << 20
    assert during.working_set < (mib + 64) << 20  # the block, the interpreter, not the machine


def test_v2_pod_cpu_from_cpu_stat_is_the_burners_rate() -> None:
    pod = _pod(QOSClass.BEST_EFFORT)
    with lp.v2_root() as root:
        parts = pod_cgroup_parts(pod.uid, pod.qos, "cgroupfs")
        pod_dir = lp.make_pod_cgroup(root, parts)
        cgroups = PodCgroups(root)
        assert cgroups.version == 2
        measured, own = _measure_burner(cgroups, pod, pod_dir)
    assert own > 0.1, "the burner hardly ran; the machine is too busy to tell"
    assert measured == pytest.approx(own, abs=0.05, rel=0.1)


def test_a_pod_whose_cgroup_is_not_there_is_skipped(tmp_path: Path) -> None:
    here, missing = _pod(), _pod()
    with lp.v1_root(tmp_path) as root:
        for base in ("cpuacct", "memory"):
            lp.make_pod_cgroup(root / base, pod_cgroup_parts(here.uid, here.qos, "cgroupfs"))
        sampler = Sampler(ProcReader("/proc"), PodCgroups(root))
        sampler.sample([here, missing])
        sample = sampler.sample([here, missing])
        # The pod's cgroup goes away (the pod ended) between two samples: skipped, not an error.
        lp.remove_tree(root / "cpuacct" / "kubepods")
        gone = sampler.sample([here, missing])
    assert set(sample.pods) == {here.uid} and sample.skipped == 1
    assert sample.pods[here.uid].cores == pytest.approx(0.0, abs=0.01)  # nothing runs in it
    assert gone.pods == {} and gone.skipped == 2
