"""The agent as its DaemonSet's pod on a cgroup v2 + systemd node measures pods as the kubelet does.

The shipped kustomize install's agent (``ballast.testing.guest_agent``: only the image replaced) runs in a
guest with its shipped arguments, mounts and policy (samples every 10 s, reports every minute). The
reference is the guest kubelet's own ``/stats/summary`` (cAdvisor), read through its forwarded port over the
same time the agent's means cover. Both the kubelet's default ``cgroupRoot`` (``/``: pods under
``kubepods.slice``) and one of its own, which the systemd driver turns into nested slices with its ``-``
escaped (``/ballast-nodes/g1`` -> ``ballast_nodes.slice/ballast_nodes-g1.slice/...``), are run: the agent
finds the layout from the kubelet's configuration it mounts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from ballast.contract.nodeload import NODELOAD_PATH, parse_status
from ballast.kube.client import ApiError, Kube
from ballast.testing import guest_agent
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.guest import Guest, GuestPool, KubeletSettings
from ballast.testing.realnode import BURN, busybox_pod, wait_running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

ROOTS = {"default": "/", "custom": "/ballast-nodes/g1"}
POD_SLICES = {
    "default": "kubepods.slice",
    "custom": "ballast_nodes.slice/ballast_nodes-g1.slice/ballast_nodes-g1-kubepods.slice",
}
"""Where the kubelet's systemd driver puts the pods under each root (checked, so the custom root is real)."""
HELD_MIB = 48
"""Written into the pod's /dev/shm (a tmpfs charged to the pod's memory cgroup)."""
TOLERANCE = 0.25
MEASURE_SECONDS = 75.0
"""At least one of the agent's reports (every minute) wholly after the pods started."""


def nodeload_status(kube: Kube, node: str) -> Any:
    try:
        return parse_status(kube.get(f"{NODELOAD_PATH}/{node}"))
    except ApiError:
        return None


def kubelet_figures(guest: Guest, uids: dict[str, str]) -> dict[str, tuple[float, float, float]]:
    """name -> (time of cAdvisor's sample, its cumulative CPU nanoseconds, working set bytes)."""
    pods = {(p.get("podRef") or {}).get("uid"): p for p in guest.stats_summary().get("pods") or []}
    figures = {}
    for name, uid in uids.items():
        stats = pods.get(uid) or {}
        cpu, memory = stats.get("cpu") or {}, stats.get("memory") or {}
        if "usageCoreNanoSeconds" not in cpu or "workingSetBytes" not in memory:
            raise AssertionError(f"the kubelet has no figures for pod {name} yet: {stats}")
        when = datetime.fromisoformat(cpu["time"].replace("Z", "+00:00")).timestamp()
        figures[name] = (when, float(cpu["usageCoreNanoSeconds"]), float(memory["workingSetBytes"]))
    return figures


def close(measured: float, reference: float) -> bool:
    return reference > 0 and abs(measured - reference) <= TOLERANCE * reference


def guest_with_root(guests: GuestPool, kind: str, remove_agent: Callable[[], None]) -> Guest:
    """Guest g1 with the kubelet's cgroupRoot for ``kind``; the agent is removed before the kubelet restarts
    with another root (its pod's cgroups would be left under the old one)."""
    settings = KubeletSettings(cgroup_root=ROOTS[kind])
    guest = guests.get("g1")
    if guest.settings != settings:
        remove_agent()
        guest.configure_kubelet(settings)
    return guest


@pytest.mark.parametrize("kind", ["default", "custom"])
def test_the_agent_measures_pods_as_the_kubelet_does(
    clean_pods: ControlPlane,
    guests: GuestPool,
    install_agent: Callable[[Guest], Any],
    remove_agent: Callable[[], None],
    kind: str,
) -> None:
    """A Burstable burner limited to 500m, a Guaranteed burner (500m) and a pod holding 48 MiB: the NodeLoad's
    figures within 25 % of the kubelet's ``/stats/summary`` over the same time; the Node's load annotations
    written with the agent's stamp. The burners take half of the guest's two CPUs, not more: under
    emulation the kubelet and containerd need most of the rest (a guest kept at 1.5 CPUs of busy pods
    starved them and the agent, whose liveness probe then timed out)."""
    cp = clean_pods
    guest = guest_with_root(guests, kind, remove_agent)
    install_agent(guest)
    assert guest.configz()["cgroupRoot"] == ROOTS[kind]
    core = cp.core()
    kube = Kube(cp.api())
    names = ["burst", "guaranteed", "memory"]
    core.create_namespaced_pod(
        "default",
        busybox_pod("burst", BURN, node=guest.name, requests={"cpu": "100m"}, limits={"cpu": "500m"}),
    )
    core.create_namespaced_pod(
        "default",
        busybox_pod(
            "guaranteed",
            BURN,
            node=guest.name,
            requests={"cpu": "500m", "memory": "64Mi"},
            limits={"cpu": "500m", "memory": "64Mi"},
        ),
    )
    core.create_namespaced_pod("default", busybox_pod(
        "memory", f"dd if=/dev/zero of=/dev/shm/fill bs=1M count={HELD_MIB} && exec sleep 3600",
        node=guest.name, requests={"memory": "100Mi"}))  # fmt: skip
    pods = wait_running(core, names, timeout=300)
    uids = {name: pod.metadata.uid for name, pod in pods.items()}
    kubepods = POD_SLICES[kind].rpartition("/")[2].removesuffix(".slice")
    guaranteed_slice = f"{kubepods}-pod{uids['guaranteed'].replace('-', '_')}.slice"
    assert (
        guest.ssh(
            f"test -d /sys/fs/cgroup/{POD_SLICES[kind]}/{guaranteed_slice} && echo yes", check=False
        ).strip()
        == "yes"
    ), guest.ssh("find /sys/fs/cgroup -name '*kubepods*' -maxdepth 4 -type d")
    # cAdvisor's cumulative counters at two of its samples: the kubelet's mean over the time the agent's
    # report covers (the pods' first samples to the report)
    wait_until(lambda: bool(kubelet_figures(guest, uids)), None, "the kubelet's first figures", 120)
    first = kubelet_figures(guest, uids)
    started = max(when for when, _, _ in first.values())
    wait_until(
        lambda: (
            (s := nodeload_status(kube, guest.name)) is not None
            and set(uids.values()) <= {p.uid for p in s.pods}
            and s.update_time >= started + MEASURE_SECONDS
        ),
        None,
        f"a report in NodeLoad {guest.name} {MEASURE_SECONDS:.0f} s after the pods started",
        MEASURE_SECONDS + 600,
    )
    status = nodeload_status(kube, guest.name)
    time.sleep(2)
    last = kubelet_figures(guest, uids)
    annotations = core.read_node(guest.name).metadata.annotations or {}
    measured = {p.name: p for p in status.pods}
    figures = {  # name: (agent cores, kubelet cores, agent working set, kubelet working set)
        name: (
            measured[name].cpu,
            (last[name][1] - first[name][1]) / (last[name][0] - first[name][0]) / 1e9,
            measured[name].memory,
            last[name][2],
        )
        for name in names
    }
    assert close(figures["burst"][0], figures["burst"][1]), figures
    assert close(figures["guaranteed"][0], figures["guaranteed"][1]), figures
    assert figures["burst"][1] <= 0.6, figures  # the kubelet's quota holds it at 500m
    assert 0.25 <= figures["guaranteed"][1] <= 0.6, figures  # at its CPU, held there by its quota
    assert close(figures["memory"][2], figures["memory"][3]), figures
    assert figures["memory"][2] >= (HELD_MIB - 4) << 20, figures  # the block the pod wrote is its working set
    assert status.node_cpu >= sum(p.cpu for p in status.pods) * (1 - TOLERANCE), status
    assert annotations.get("ballast.io/load-source") == f"agent/{guest.name}", annotations
    for metric in ("cpu_usage_avg_5m", "mem_usage_avg_5m"):
        value, _, stamp = annotations[metric].partition(",")
        assert 0 < float(value) <= 1 and stamp, annotations


def test_the_agent_runs_as_shipped(
    clean_pods: ControlPlane, guests: GuestPool, install_agent: Callable[[Guest], Any]
) -> None:
    """The agent's pod is the shipped DaemonSet's: read-only root, no capabilities, its service account's
    token, the image built here never pulled; and it runs the shipped arguments."""
    guest = guests.get("g1")
    pod = install_agent(guest)
    container = pod.spec.containers[0]
    assert container.image_pull_policy == "Never"
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.capabilities.drop == ["ALL"]
    assert pod.spec.service_account_name == "ballast-agent"
    assert "--report-load" in container.args
    assert any(v.projected for v in pod.spec.volumes), "no projected service-account token"
    assert guest_agent.agent_pod(clean_pods, guest.name).status.container_statuses[0].restart_count == 0
