"""No container ever on the wrong CPUs: the agent as the shipped DaemonSet's pod is the runtime's NRI plugin
(containerd 1.7 with NRI on, in a cgroup v2 + systemd guest), and a watcher in the guest reads every pod
process's ``Cpus_allowed_list`` every 100 ms.

Judged from each process's first sample on, through a container restart, a new pod, an agent restart
(after its return) and a pod deleted: 0 samples of a pinned container's process off its CPUs, 0 of any
other container's process on them while the pinned pod holds them. The sandboxes' processes (pause, and
runc before it execs pause) are not containers: only container ids the kubelet reported count.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from ballast.agent.cpuset import CPUSet
from ballast.testing import guest_agent
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.guest import Guest, GuestPool
from ballast.testing.realnode import BURN, busybox_pod, delete_pods, wait_running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

WATCHER = r"""
import json, re, sys, time
from pathlib import Path
pods = Path("/sys/fs/cgroup/kubepods.slice")
out = open(sys.argv[1], "a", buffering=1)
while True:
    t = time.time()
    try:
        phase = Path("/run/ballast-watch-phase").read_text().strip()
    except OSError:
        phase = ""
    procs = []
    scopes = list(pods.glob("*/cri-containerd-*.scope")) + list(pods.glob("*/*/cri-containerd-*.scope"))
    for scope in scopes:
        try:
            pids = scope.joinpath("cgroup.procs").read_text().split()
        except OSError:
            continue
        cid = scope.name[len("cri-containerd-"):-len(".scope")]
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            procs.append([cid, int(pid), re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M).group(1)])
    out.write(json.dumps({"t": t, "phase": phase, "procs": procs}) + "\n")
    time.sleep(max(0.0, 0.1 - (time.time() - t)))
"""
"""The watcher, run in the guest with its python3: one JSON line per sample."""

SAMPLES = "/run/ballast-watch.jsonl"
STATE = "/var/lib/ballast/cpu_manager_state"


def violations(
    samples: Iterable[Mapping[str, Any]], owners: Mapping[str, str], exclusive: Mapping[str, CPUSet]
) -> list[tuple[float, str, str, str]]:
    """``(time, phase, container, what)`` for every sample of a pinned container's process off its CPUs and
    of another container's process on a pinned pod's CPUs while that pod's processes run. ``owners``: the
    kubelet's container ids -> pod name (others are sandboxes); ``exclusive``: pinned pod -> its CPUs."""
    samples = list(samples)
    held: dict[str, tuple[float, float]] = {}
    for s in samples:
        for cid, _pid, _cpus in s["procs"]:
            pod = owners.get(cid)
            if pod in exclusive:
                first, last = held.get(pod, (s["t"], s["t"]))
                held[pod] = (min(first, s["t"]), max(last, s["t"]))
    bad = []
    for s in samples:
        for cid, pid, text in s["procs"]:
            pod = owners.get(cid)
            if pod is None:
                continue
            cpus = CPUSet.parse(text)
            if pod in exclusive and cpus != exclusive[pod]:
                bad.append((s["t"], s["phase"], f"{pod} pid {pid}", f"on {cpus}, not {exclusive[pod]}"))
            for other, mine in exclusive.items():
                first, last = held.get(other, (0.0, -1.0))
                if other != pod and first <= s["t"] <= last and cpus & mine:
                    bad.append((s["t"], s["phase"], f"{pod} pid {pid}", f"on {other}'s CPUs {mine}"))
    return bad


def test_violations_are_found_and_sandboxes_left_out() -> None:
    owners = {"c-pin": "pinned", "c-web": "web"}
    exclusive = {"pinned": CPUSet.of(0)}
    samples = [
        {"t": 1.0, "phase": "a", "procs": [["c-web", 7, "0-1"], ["sandbox", 3, "0-1"]]},  # before pinned ran
        {"t": 2.0, "phase": "a", "procs": [["c-pin", 8, "0"], ["c-web", 7, "1"]]},
        {"t": 3.0, "phase": "b", "procs": [["c-pin", 9, "0-1"], ["c-web", 7, "0-1"]]},
        {"t": 4.0, "phase": "c", "procs": [["c-pin", 8, "0"], ["c-web", 7, "1"]]},
        {"t": 5.0, "phase": "d", "procs": [["c-web", 7, "0-1"]]},  # pinned gone: its CPU is shared again
    ]
    assert [(t, phase, who.split()[0]) for t, phase, who, _ in violations(samples, owners, exclusive)] == [
        (3.0, "b", "pinned"),
        (3.0, "b", "web"),
    ]


@pytest.fixture
def guest(guests: GuestPool) -> Guest:
    return guests.get("g1", smp=2, mem=2048)


def container_ids(cp: ControlPlane, names: Iterable[str]) -> dict[str, str]:
    """The kubelet's container ids of these pods, now and before their last restart -> pod name."""
    out = {}
    for name in names:
        try:
            pod = cp.core().read_namespaced_pod(name, "default")
        except Exception:
            continue
        for st in pod.status.container_statuses or []:
            for cid in (st.container_id, getattr(st.last_state.terminated, "container_id", None)):
                if cid:
                    out[cid.rpartition("/")[2]] = name
    return out


def test_no_container_on_the_wrong_cpus_with_the_agent_as_nri_plugin(
    clean_pods: ControlPlane, guest: Guest, install_agent: Callable[[Guest], Any]
) -> None:
    cp = clean_pods
    core = cp.core()
    agent = install_agent(guest)
    log = guest_agent.agent_log(guest, agent)
    assert "NRI plugin 50-ballast registered" in log, log
    guest.ssh(f"rm -f {SAMPLES}; echo start > /run/ballast-watch-phase")
    guest.ssh("cat > /run/ballast-watch.py", input=WATCHER.encode())
    guest.ssh(f"systemd-run --unit ballast-watch --collect python3 /run/ballast-watch.py {SAMPLES}")
    owners: dict[str, str] = {}
    names = ["shared-a", "pinned", "shared-b"]

    def phase(name: str) -> None:
        owners.update(container_ids(cp, names))
        guest.ssh(f"echo {name} > /run/ballast-watch-phase")

    guaranteed = {"requests": {"cpu": "1", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "32Mi"}}
    try:
        core.create_namespaced_pod("default", busybox_pod("shared-a", "exec sleep 3600", node=guest.name))
        core.create_namespaced_pod("default", busybox_pod("pinned", BURN, node=guest.name, **guaranteed))
        pods = wait_running(core, ["shared-a", "pinned"], timeout=300)
        state = json.loads(guest.ssh(f"cat {STATE}"))
        exclusive = {"pinned": CPUSet.parse(state["entries"][pods["pinned"].metadata.uid]["c"])}

        phase("container-restart")
        cid = pods["pinned"].status.container_statuses[0].container_id.rpartition("/")[2]
        guest.ssh(f"kill -9 $(cat /sys/fs/cgroup/kubepods.slice/*/cri-containerd-{cid}.scope/cgroup.procs)")
        wait_until(
            lambda: (
                (
                    core.read_namespaced_pod("pinned", "default").status.container_statuses[0].restart_count
                    or 0
                )
                >= 1
            ),
            None,
            "the pinned container restarted",
            300,
        )
        wait_running(core, ["pinned"], timeout=300)

        phase("new-pod")
        core.create_namespaced_pod("default", busybox_pod("shared-b", "exec sleep 3600", node=guest.name))
        wait_running(core, ["shared-b"], timeout=300)

        phase("agent-restart")
        core.delete_namespaced_pod(agent.metadata.name, agent.metadata.namespace)
        agent = guest_agent.wait_agent_ready(cp, guest.name)
        assert "NRI plugin 50-ballast registered" in guest_agent.agent_log(guest, agent)

        phase("pod-deleted")
        owners.update(container_ids(cp, names))
        delete_pods(core, ["pinned"])
        every = CPUSet.parse(guest.ssh("cat /sys/devices/system/cpu/online").strip())

        def shared_everywhere() -> bool:
            last = json.loads(guest.ssh(f"tail -1 {SAMPLES}"))
            mine = [
                CPUSet.parse(c) for cid, _, c in last["procs"] if owners.get(cid) in ("shared-a", "shared-b")
            ]
            return bool(mine) and all(c == every for c in mine)

        wait_until(shared_everywhere, None, "the pinned pod's CPU back in the shared pool", 120)
        phase("done")
        samples = [json.loads(line) for line in guest.ssh(f"cat {SAMPLES}").splitlines() if line]
    finally:
        guest.ssh("systemctl stop ballast-watch", check=False)
        delete_pods(core, names)
    assert len(samples) > 100
    bad = violations(samples, owners, exclusive)
    assert not bad, f"{len(bad)} samples on the wrong CPUs; first {bad[:5]}"
