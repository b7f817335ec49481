"""The load reporter's schedule and rules, on a simulated clock with a recording API (what the API server
does with the writes is tested against the real one in tests/cluster/test_agent_load_e2e.py)."""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.load.cgroups import PodCgroups
from ballast.agent.load.history import LoadHistory
from ballast.agent.load.pods import NodePods
from ballast.agent.load.procfs import ProcReader
from ballast.agent.load.reporter import BLIND_SAMPLES, LoadReporter
from ballast.agent.load.sampler import KernelReading, PodReading, Sampler
from ballast.contract.nodeload import NODELOAD_PATH
from ballast.kube.client import ApiError
from ballast.model.policy import build_policy

T0 = 1_800_000_000.0 - 1_800_000_000.0 % 60
POLICY = build_policy(
    {
        "apiVersion": "scheduler.policy.crane.io/v1alpha1",
        "kind": "DynamicSchedulerPolicy",
        "spec": {
            "syncPolicy": [
                {"name": "cpu_usage_avg_5m", "period": "3m"},
                {"name": "cpu_usage_max_avg_1h", "period": "15m"},
                {"name": "mem_usage_avg_5m", "period": "3m"},
                {"name": "gpu_usage_avg_5m", "period": "3m"},
            ],
            "hotValue": [{"timeRange": "5m", "count": 2}],
        },
    }
)


class Recorder:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.writes: list[tuple[float, str, dict[str, Any]]] = []
        self.fail: int | None = None

    def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail is not None:
            raise ApiError(self.fail, "Boom", "injected")
        self.writes.append((self.clock[0], path, body))
        return {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append((self.clock[0], path, body))
        return body


class FixedSampler:
    """Half the CPUs busy, a quarter of the memory used; pod ``p1`` at 0.25 cores and 100 MiB."""

    cgroups = None

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.first = True
        self.asked_pressure: list[bool] = []

    def sample(self, pods: Any, *, pressure: bool = False) -> KernelReading:
        """With ``pressure``: the node's CPU stalled 0.2 of the time, memory 0.05 (some) and 0.01 (full),
        IO never; each pod's CPU 0.3 and its limit holding it 0.4 (shares need a previous read too)."""
        self.asked_pressure.append(pressure)
        first, self.first = self.first, False
        s = KernelReading(self.clock[0], None if first else 0.5, None if first else 1.0, 0.25, 1 << 30)
        s.pods = {r.uid: PodReading(None if first else 0.25, 100 << 20) for r in pods}
        if pressure and not first:
            s.pressure = {
                "cpu_pressure_some": 0.2,
                "memory_pressure_some": 0.05,
                "memory_pressure_full": 0.01,
                "io_pressure_some": 0.0,
                "io_pressure_full": 0.0,
            }
            for reading in s.pods.values():
                reading.pressure.update(cpu=0.3, memory=0.0, io=0.0)
                reading.throttled = 0.4
        return s


def pod(uid: str, bound: str = "2026-11-25T20:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "shop", "name": f"web-{uid}", "creationTimestamp": bound},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]},
    }  # fmt: skip


def reporter(clock: list[float], node: dict[str, Any] | None = None) -> tuple[LoadReporter, Recorder]:
    kube = Recorder(clock)
    pods = NodePods("n1")
    pods.replace([pod("p1"), pod("p2"), pod("p3")])  # bound long before T0: no hot value
    r = LoadReporter(
        kube,  # type: ignore[arg-type]
        "n1",
        FixedSampler(clock),  # type: ignore[arg-type]
        pods,
        lambda: POLICY,
        lambda: node or {"metadata": {"name": "n1", "uid": "node-uid", "annotations": {}}},
        history=LoadHistory(),
    )
    return r, kube


def test_two_writes_per_report_each_metric_at_its_period_and_unknown_names_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [T0]
    r, kube = reporter(clock)
    caplog.set_level(logging.INFO, "ballast.agent.load")
    assert r.tick().annotations == ()  # the first sample only seeds the CPU counters
    for _ in range(6 * 60):  # an hour of 10 s samples
        clock[0] += 10
        r.tick()
    writes = [(t, p) for t, p, _ in kube.writes if p != NODELOAD_PATH]
    per_minute = [
        sum(1 for t, _ in writes if s <= t < s + 60) for s in range(int(T0), int(clock[0]) - 59, 10)
    ]
    assert max(per_minute) == 2
    assert [p for _, p, _ in kube.writes].count(NODELOAD_PATH) == 1  # created once
    patches = [(t, b["metadata"]["annotations"]) for t, p, b in kube.writes if p == "/api/v1/nodes/n1"]
    assert gaps(patches, "cpu_usage_avg_5m") == {180}
    assert gaps(patches, "cpu_usage_max_avg_1h") == {900}
    first = patches[0][1]
    assert first["cpu_usage_avg_5m"].startswith("0.50000,") and first["mem_usage_avg_5m"].startswith(
        "0.25000,"
    )
    assert first["ballast.io/load-source"] == "agent/n1"
    assert "gpu_usage_avg_5m" not in first
    assert caplog.text.count("gpu_usage_avg_5m is not one the agent measures") == 1


def gaps(patches: list[tuple[float, dict[str, str]]], key: str) -> set[int]:
    """The intervals, in seconds, between the patches that carried ``key``."""
    times = [t for t, a in patches if key in a]
    return {round(b - a) for a, b in itertools.pairwise(times)}


def test_the_hot_value_counts_this_nodes_recent_bindings_by_the_annotators_rule() -> None:
    clock = [T0]
    r, kube = reporter(clock)
    r.pods.replace([pod("a", _iso(T0 - 60)), pod("b", _iso(T0 - 120)), pod("c", _iso(T0 - 3600))])
    r.tick()
    clock[0] += 10
    r.tick()
    (patch,) = [b for _, p, b in kube.writes if p == "/api/v1/nodes/n1"]
    assert patch["metadata"]["annotations"]["node_hot_value"].startswith("1,")  # floor(2 in 5m / 2)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_the_nodeload_lists_the_bound_pods_owned_by_the_node_in_whole_mib() -> None:
    clock = [T0]
    r, kube = reporter(clock)
    r.tick()
    clock[0] += 10
    assert r.tick().nodeload
    created = next(b for _, p, b in kube.writes if p == NODELOAD_PATH)
    assert created["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    (status,) = [b["status"] for _, p, b in kube.writes if p == f"{NODELOAD_PATH}/n1/status"]
    assert status["window"] == "5m"
    assert status["node"] == {
        "cpu": "1",
        "memory": "1Gi",
        # every metric the agent measures, whether or not the policy syncs it onto the Node
        "metrics": {
            "cpu_usage_avg_5m": 0.5,
            "cpu_usage_max_avg_1h": 0.5,
            "cpu_usage_max_avg_1d": 0.5,
            "mem_usage_avg_5m": 0.25,
            "mem_usage_max_avg_1h": 0.25,
            "mem_usage_max_avg_1d": 0.25,
        },
    }
    assert {p["uid"]: (p["cpu"], p["memory"]) for p in status["pods"]} == {
        u: ("250m", "100Mi") for u in ("p1", "p2", "p3")
    }


def test_another_sources_fresh_values_are_left_and_stale_ones_taken_over() -> None:
    clock = [T0]
    theirs = {"ballast.io/load-source": "annotator", "cpu_usage_avg_5m": f"0.90000,{_iso(T0)}"}
    node = {"metadata": {"name": "n1", "uid": "u", "annotations": theirs}}
    r, _ = reporter(clock, node)
    r.tick()
    clock[0] += 10
    result = r.tick()
    assert result.conflict == "annotator" and result.annotations == () and result.nodeload
    assert r.metrics.source_conflicts._value.get() == 1
    clock[0] += 3 * 60 + 5 * 60  # the annotator's value is past its period + 5m
    assert r.tick().annotations != ()


def test_a_failed_write_is_counted_and_tried_again_at_the_next_report() -> None:
    clock = [T0]
    r, kube = reporter(clock)
    kube.fail = 500
    r.tick()
    clock[0] += 10
    failed = r.tick()
    assert failed.errors and not failed.nodeload
    assert r.metrics.write_errors.labels("node")._value.get() == 1
    kube.fail = None
    clock[0] += 10
    assert not r.tick().nodeload  # not before the next report
    clock[0] += 50
    assert r.tick().nodeload


class _Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        self.calls.append(("replace", sorted(o["metadata"]["uid"] for o in objects)))

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.calls.append((event_type, obj["metadata"]["uid"]))


def test_one_pod_watch_serves_every_user_and_a_late_one_gets_the_list_first() -> None:
    from ballast.agent.pod_watch import NodePodWatch

    started: list[str] = []

    class HandFed(NodePodWatch):
        def new_reflector(self) -> Any:  # no API server: the test feeds the watch by hand
            class Idle:
                def start(self) -> None:
                    started.append("start")

                def stop(self) -> None:
                    started.append("stop")

            return Idle()

    watch = HandFed(object(), "n1")
    early, late = _Recording(), _Recording()
    watch.subscribe(early).start()
    watch.replace(iter([pod("a"), pod("b")]))  # once through, as the Reflector's pages arrive
    watch.apply("DELETED", pod("a"))
    watch.apply("ADDED", pod("c"))
    subscription = watch.subscribe(late)
    subscription.start()
    watch.apply("MODIFIED", pod("b"))
    subscription.stop()
    watch.apply("DELETED", pod("b"))
    assert early.calls == [
        ("replace", ["a", "b"]), ("DELETED", "a"), ("ADDED", "c"), ("MODIFIED", "b"), ("DELETED", "b")
    ]  # fmt: skip
    assert late.calls == [("replace", ["b", "c"]), ("MODIFIED", "b")]
    assert started == ["start"]  # one watch for both
    watch.subscribe(early).stop()
    assert started == ["start", "stop"]  # the last one out stops it


def kernel_reporter(
    cgroup_tree: Path, pod_dirs: list[str], pods: NodePods, layout: Any = None
) -> LoadReporter:
    """A reporter over this machine's ``/proc`` and a cgroup v1 tree with a ``cpuacct.usage`` in each of
    ``pod_dirs`` (relative to the cpuacct hierarchy)."""
    for rel in pod_dirs:
        d = cgroup_tree / "cpuacct" / rel
        d.mkdir(parents=True)
        (d / "cpuacct.usage").write_text("1000\n")
    return LoadReporter(
        Recorder([T0]),  # type: ignore[arg-type]
        "n1",
        Sampler(ProcReader("/proc"), PodCgroups(cgroup_tree)),
        pods,
        lambda: POLICY,
        lambda: {"metadata": {"name": "n1", "uid": "node-uid"}},
        history=LoadHistory(),
        layout=layout,
    )


def test_pods_bound_here_whose_cgroups_are_nowhere_are_said_once_and_the_kubelets_layout_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kubelet with ``cgroupRoot: /rn1`` and an agent that could not read its settings: the pods' cgroups
    are not under ``/kubepods``. After ``BLIND_SAMPLES`` samples it says so once (log and gauge); once the
    kubelet's settings can be read, it follows their layout and measures the pods."""
    kubelet: list[CgroupLayout | None] = [None]  # unreadable at first
    pods = NodePods("n1")
    pods.replace([pod("p1"), pod("p2")])
    dirs = [f"rn1/kubepods/besteffort/pod{uid}" for uid in ("p1", "p2")]
    r = kernel_reporter(tmp_path, dirs, pods, layout=lambda: kubelet[0])
    missing = r.metrics.pod_cgroups_missing
    with caplog.at_level(logging.WARNING, "ballast.agent.load"):
        for _ in range(BLIND_SAMPLES * 3):
            r.tick()
    warnings = [m for m in caplog.messages if "none of their cgroups" in m]
    assert len(warnings) == 1, caplog.messages
    assert "2 pods are bound here" in warnings[0] and str(tmp_path / "cpuacct" / "kubepods") in warnings[0]
    assert missing._value.get() == 1 and r.metrics.pods_measured._value.get() == 0
    kubelet[0] = CgroupLayout("cgroupfs", "/rn1")  # the kubelet's settings can be read now
    for _ in range(BLIND_SAMPLES + 1):
        r.tick()
    assert r.sampler.cgroups is not None and r.sampler.cgroups.layout == kubelet[0]
    assert r.metrics.pods_measured._value.get() == 2 and missing._value.get() == 0


def test_a_node_without_pods_or_with_some_pods_measured_is_not_blind(tmp_path: Path) -> None:
    pods = NodePods("n1")
    r = kernel_reporter(tmp_path, ["kubepods/besteffort/podp1"], pods)
    for _ in range(5):  # no pods at all
        r.tick()
    assert r.metrics.pod_cgroups_missing._value.get() == 0
    pods.replace([pod("p1"), pod("p2")])  # p2's cgroup is not there (yet): p1's is
    for _ in range(5):
        r.tick()
    assert r.metrics.pod_cgroups_missing._value.get() == 0
    assert r.metrics.pods_measured._value.get() == 1


def test_a_percentile_the_policy_names_is_written_once_half_its_window_is_sampled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = build_policy(
        {
            "apiVersion": "scheduler.policy.crane.io/v1alpha1",
            "kind": "DynamicSchedulerPolicy",
            "spec": {
                "syncPolicy": [
                    {"name": "cpu_usage_avg_5m", "period": "1m"},
                    {"name": "cpu_usage_p95_5m", "period": "1m"},
                    {"name": "mem_usage_p90_10m", "period": "1m"},
                ]
            },
        }
    )
    clock = [T0]
    r, kube = reporter(clock)
    r.policy = lambda: policy
    caplog.set_level(logging.INFO, "ballast.agent.load")
    for _ in range(6 * 7):  # seven minutes of 10 s samples
        r.tick()
        clock[0] += 10
    patches = [(t, b["metadata"]["annotations"]) for t, p, b in kube.writes if p == "/api/v1/nodes/n1"]
    first_p95 = min(t for t, a in patches if "cpu_usage_p95_5m" in a)
    assert T0 + 150 <= first_p95 < T0 + 150 + 60  # 15 of the window's 30 samples, then its period
    assert min(t for t, a in patches if "cpu_usage_avg_5m" in a) < first_p95
    last = next(a for t, a in reversed(patches) if "cpu_usage_p95_5m" in a)
    assert last["cpu_usage_p95_5m"].startswith("0.50000,")
    # 30 of the 10-minute window's 60 samples (memory is read from the first tick on): half a window
    assert min(t for t, a in patches if "mem_usage_p90_10m" in a) >= T0 + 290
    assert "not one the agent measures" not in caplog.text


def test_pressure_is_measured_only_when_the_policy_names_a_pressure_metric_and_published_like_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [T0]
    r, kube = reporter(clock)
    r.tick()
    clock[0] += 10
    r.tick()
    sampler = r.sampler
    assert sampler.asked_pressure == [False, False]  # type: ignore[attr-defined]
    (status,) = [b["status"] for _, p, b in kube.writes if p == f"{NODELOAD_PATH}/n1/status"]
    assert not any("pressure" in m for m in status["node"]["metrics"])
    assert all("pressure" not in p and "throttled" not in p for p in status["pods"])

    policy = build_policy(
        {
            "apiVersion": "scheduler.policy.crane.io/v1alpha1",
            "kind": "DynamicSchedulerPolicy",
            "spec": {
                "syncPolicy": [
                    {"name": "cpu_usage_avg_5m", "period": "1m"},
                    {"name": "cpu_pressure_some_avg_5m", "period": "1m"},
                    {"name": "memory_pressure_full_max_avg_1h", "period": "1m"},
                ]
            },
        }
    )
    clock = [T0]
    r, kube = reporter(clock)
    r.policy = lambda: policy
    caplog.set_level(logging.INFO, "ballast.agent.load")
    for _ in range(13):
        r.tick()
        clock[0] += 10
    # read once per report interval (a minute of 10 s samples): cumulative counters need no more
    assert r.sampler.asked_pressure == ([True] + [False] * 5) * 2 + [True]  # type: ignore[attr-defined]
    patches = [b["metadata"]["annotations"] for _, p, b in kube.writes if p == "/api/v1/nodes/n1"]
    first = next(a for a in patches if "cpu_pressure_some_avg_5m" in a)
    assert first["cpu_pressure_some_avg_5m"].startswith("0.20000,")
    assert first["memory_pressure_full_max_avg_1h"].startswith("0.01000,")
    assert "not one the agent measures" not in caplog.text
    status = [b["status"] for _, p, b in kube.writes if p == f"{NODELOAD_PATH}/n1/status"][-1]
    # crane's six, and the pressure metrics the policy names (not the ones it does not)
    assert status["node"]["metrics"]["cpu_pressure_some_avg_5m"] == 0.2
    assert status["node"]["metrics"]["memory_pressure_full_max_avg_1h"] == 0.01
    assert "memory_pressure_some_avg_5m" not in status["node"]["metrics"]
    assert {p["uid"]: (p["pressure"], p["throttled"]) for p in status["pods"]} == {
        u: ({"cpu": 0.3, "memory": 0.0, "io": 0.0}, 0.4) for u in ("p1", "p2", "p3")
    }
