"""The node's CPU pressure on a real cgroup v2 node (a QEMU guest: Debian 13's kernel, systemd, the kubelet's
systemd driver): real burner pods with real CPU limits, measured by the agent's own sampler over the
guest's ``/proc`` and pod cgroups.

The guest's files are copied over ssh into a tree here at two moments (one ``sh`` each: the figures of one
moment are read together) and the agent's ``Sampler`` reads that tree with the guest's uptime as its
clock, so what is tested is the agent's code on the kernel's own counters. A 500m-limited burner pod alone
leaves ``cpu_pressure_some`` near the idle guest's while its own limit holds it half the time (the trap:
the raw ``some`` rises by about that); three unlimited burners on the guest's two CPUs raise it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.load.cgroups import PodCgroups
from ballast.agent.load.pressure import parse_pressure
from ballast.agent.load.procfs import ProcReader
from ballast.agent.load.sampler import KernelReading, PodRef, Sampler
from ballast.contract.pod import QOSClass
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.guest import Guest, GuestPool
from ballast.testing.realnode import BUSYBOX

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

WINDOW = 10.0
"""Seconds between the two reads (the agent's sample interval)."""
PROC_FILES = ("stat", "meminfo", "pressure/cpu", "pressure/memory", "pressure/io")
POD_FILES = ("cpu.stat", "memory.current", "memory.stat", "cpu.pressure", "memory.pressure", "io.pressure")
MARK = "@@ballast-file "


def _burner(name: str, node: str, limit: str | None) -> dict:
    resources = {"limits": {"cpu": limit}, "requests": {"cpu": limit}} if limit else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "burn", "image": BUSYBOX, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "while :; do :; done"], "resources": resources,
            }],
        },
    }  # fmt: skip


def _start(cp: ControlPlane, guest: Guest, pods: dict[str, str | None]) -> list[PodRef]:
    core = cp.core()
    for name, limit in pods.items():
        core.create_namespaced_pod("default", _burner(name, guest.name, limit))
    wait_until(
        lambda: all(core.read_namespaced_pod(n, "default").status.phase == "Running" for n in pods),
        None,
        f"burner pods {sorted(pods)} running",
        300,
    )
    refs = []
    for name in pods:
        pod = core.read_namespaced_pod(name, "default")
        qos = QOSClass(pod.status.qos_class)
        refs.append(PodRef(pod.metadata.uid, "default", name, qos))
    time.sleep(3)  # past the containers' start
    return refs


def _layout(guest: Guest) -> CgroupLayout:
    """Where the guest's kubelet puts pod cgroups (its configz, as the agent reads it)."""
    config = guest.configz()
    return CgroupLayout(config["cgroupDriver"], config.get("cgroupRoot") or "/")


def _snapshot(guest: Guest, layout: CgroupLayout, refs: list[PodRef], into: Path) -> int:
    """Copy the files the agent reads into ``into`` (``proc/``, ``cgroup/``); the guest's uptime in ns."""
    dirs = {}
    for ref in refs:
        parts = layout.pod_parts(ref.uid, ref.qos)
        assert parts is not None
        dirs[ref.uid] = "/".join(parts)
    script = ["cat /proc/uptime"]
    script += [f"echo '{MARK}proc/{f}'; cat /proc/{f}" for f in PROC_FILES]
    for d in dirs.values():
        script += [f"echo '{MARK}cgroup/{d}/{f}'; cat /sys/fs/cgroup/{d}/{f}" for f in POD_FILES]
    out = _ssh(guest, "; ".join(script))
    head, *parts = out.split(MARK)
    for part in parts:
        name, _, text = part.partition("\n")
        path = into / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (into / "cgroup" / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return int(float(head.split()[0]) * 1e9)


def _ssh(guest: Guest, command: str) -> str:
    """``guest.ssh``, tried again when the connection itself fails (an emulated guest on a busy machine
    may take longer than ssh's connect timeout to answer): the figures come from one command either way."""
    for attempt in range(5):
        try:
            return guest.ssh(command)
        except RuntimeError as e:
            if "exited 255" not in str(e) or attempt == 4:
                raise
            time.sleep(2.0)
    raise AssertionError("unreachable")


def _measure(guest: Guest, refs: list[PodRef], tmp: Path) -> tuple[float, KernelReading]:
    """The guest's raw CPU ``some`` share and the agent's reading over ``WINDOW``."""
    uptime = [0]
    layout = _layout(guest)
    sampler = Sampler(
        ProcReader(tmp / "proc"), PodCgroups(tmp / "cgroup", layout), monotonic=lambda: uptime[0]
    )
    uptime[0] = _snapshot(guest, layout, refs, tmp)
    some0 = parse_pressure((tmp / "proc" / "pressure" / "cpu").read_text()).some
    start = uptime[0]
    sampler.sample(refs, pressure=True)
    time.sleep(WINDOW)
    uptime[0] = _snapshot(guest, layout, refs, tmp)
    some1 = parse_pressure((tmp / "proc" / "pressure" / "cpu").read_text()).some
    reading = sampler.sample(refs, pressure=True)
    return (some1 - some0) / ((uptime[0] - start) / 1000), reading


def test_a_pod_at_its_own_limit_is_not_contention_and_three_busy_pods_on_two_cpus_are(
    clean_pods: ControlPlane, guests: GuestPool, tmp_path: Path
) -> None:
    guest = guests.get("g1", smp=2)
    assert guest.ssh("nproc").strip() == "2"
    _, idle = _measure(guest, [], tmp_path / "idle")
    baseline = idle.pressure["cpu_pressure_some"]

    refs = _start(clean_pods, guest, {"limited": "500m"})
    raw, limited = _measure(guest, refs, tmp_path / "limited")
    pod = limited.pods[refs[0].uid]
    seen = f"idle {baseline:.3f}; 500m: raw {raw:.3f}, node {limited.pressure}, pod {pod}"
    assert pod.cores is not None and pod.cores <= 0.6, seen  # the limit holds it
    assert pod.throttled is not None and pod.throttled >= 0.3, seen  # about half the time
    assert pod.pressure["cpu"] >= 0.3, seen  # the kernel counts that as its stall ...
    assert raw >= baseline + 0.2, seen  # ... and the node's: the trap
    assert limited.pressure["cpu_pressure_some"] <= baseline + 0.2, seen  # the agent's figure leaves it out
    clean_pods.core().delete_namespaced_pod("limited", "default", grace_period_seconds=0)

    refs = _start(clean_pods, guest, {"busy-1": None, "busy-2": None, "busy-3": None})
    _, busy = _measure(guest, refs, tmp_path / "busy")
    seen = f"idle {baseline:.3f}; three unlimited: node {busy.pressure}, pods {busy.pods}"
    assert busy.pressure["cpu_pressure_some"] >= max(0.3, baseline + 0.15), seen
    assert all(p.throttled in (None, 0.0) for p in busy.pods.values()), seen
