"""The reconcile loop: allocation, release, cpuset updates through a real gRPC client, recovery, the loop."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest

from ballast.agent.cpumanager.manager import CPUManager
from ballast.agent.cpumanager.runtime import CRIRuntime, MemoryRuntime, RuntimeCallError
from ballast.agent.cpumanager.state_checkpoint import encode_checkpoint
from ballast.agent.cpuset import CPUSet
from ballast.agent.cri.client import CRIClient
from ballast.contract.exclusive import CPUPolicy
from ballast.testing.cri_fake import (
    NODE,
    SCHEDULER,
    FakeRuntimeService,
    container,
    container_id,
    pod,
    serve_fake_runtime,
    zones,
)
from tests.agent.kubelet_topologies import DUAL_SOCKET_HT

ALL = DUAL_SOCKET_HT.all_cpus  # 0-11; NUMA 0 even, NUMA 1 odd
NUMA1 = CPUSet.parse("1,3,5,7,9,11")
RESERVED = CPUSet.of(0, 6)


def _manager(tmp_path: Path, runtime, **kwargs) -> CPUManager:
    kwargs.setdefault("allowed_schedulers", [SCHEDULER])
    kwargs.setdefault("node_name", NODE)
    return CPUManager(DUAL_SOCKET_HT, RESERVED, tmp_path / "cpu_manager_state", runtime, **kwargs)


def _sample(m: CPUManager, name: str, labels: dict | None = None) -> float | None:
    return m.metrics.registry.get_sample_value(name, labels or {})


def _cid(p: dict, name: str, restarts: int = 0) -> str:
    return container_id(p["metadata"]["uid"], name, restarts)


# --- through the CRI client and a gRPC runtime --------------------------------------------------------


@pytest.fixture
def cri():
    with serve_fake_runtime() as (service, endpoint):
        runtime = CRIRuntime(client=CRIClient(endpoint, retries=2, backoff=0.001))
        yield service, runtime
        runtime.close()


def test_exact_update_calls_and_nothing_resent_when_unchanged(tmp_path: Path, cri) -> None:
    service, runtime = cri
    m = _manager(tmp_path, runtime)
    ex = pod("ex", [container("app", "2", "1Gi")], result=zones(node1=2))
    shared = pod("web", [container("app", "1", "1Gi", request_cpu="500m")])
    for p in (ex, shared):
        service.add_container(_cid(p, "app"), p["metadata"]["uid"], "app")
    m.on_pods([ex, shared])
    r = m.reconcile_once()
    assert (r.allocated, r.updates, r.update_errors) == (1, 2, 0)
    assert sorted(service.updates) == sorted([(_cid(ex, "app"), "1,7"), (_cid(shared, "app"), "0,2-6,8-11")])

    service.updates.clear()
    r = m.reconcile_once()
    assert service.updates == [] and r.unchanged == 2 and r.updates == 0
    assert _sample(m, "ballast_agent_cpuset_updates_total", {"runtime": "cri"}) == 2
    assert _sample(m, "ballast_agent_exclusive_cpus") == 2
    assert _sample(m, "ballast_agent_shared_pool_cpus") == 10


def test_pod_gone_returns_cpus_and_grows_the_shared_pool(tmp_path: Path, cri) -> None:
    service, runtime = cri
    m = _manager(tmp_path, runtime)
    ex = pod("ex", [container("app", "4", "1Gi")], result=zones(node1=4))
    web = pod("web", [container("app", None, None)])
    for p in (ex, web):
        service.add_container(_cid(p, "app"), p["metadata"]["uid"], "app")
    m.on_pods([ex, web])
    m.reconcile_once()
    assert service.cpuset_of(_cid(web, "app")) == "0,2,4-6,8,10-11"
    service.updates.clear()
    m.on_pod_event("DELETED", ex)
    r = m.reconcile_once()
    assert r.released == 1
    assert service.updates == [(_cid(web, "app"), "0-11")]
    assert not m.state.get_assignments() and m.state.get_default_cpuset() == ALL


def test_terminal_pods_release_their_cpus(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    m = _manager(tmp_path, rt)
    job = pod("job", [container("app", "2", "1Gi")])
    m.on_pods([job])
    m.reconcile_once()
    assert m.state.has_pod(job["metadata"]["uid"])
    job["status"]["phase"] = "Succeeded"
    job["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
    m.on_pod_event("MODIFIED", job)
    assert m.reconcile_once().released == 1
    assert m.state.get_default_cpuset() == ALL


def test_container_restart_is_pinned_again(tmp_path: Path, cri) -> None:
    service, runtime = cri
    m = _manager(tmp_path, runtime)
    ex = pod("ex", [container("app", "2", "1Gi")])
    uid = ex["metadata"]["uid"]
    service.add_container(_cid(ex, "app"), uid, "app")
    m.on_pods([ex])
    m.reconcile_once()
    first = service.updates[-1][1]
    restarted = pod("ex", [container("app", "2", "1Gi")], uid=uid, restarts={"app": 1})
    service.add_container(_cid(restarted, "app", 1), uid, "app", attempt=1)
    m.on_pod_event("MODIFIED", restarted)
    m.reconcile_once()
    assert service.updates[-1] == (_cid(restarted, "app", 1), first), "same CPUs, new container id"
    assert _cid(ex, "app") not in m.applied()


def test_failed_update_is_counted_and_retried_next_pass(tmp_path: Path, cri) -> None:
    service, runtime = cri
    m = _manager(tmp_path, runtime)
    ex = pod("ex", [container("app", "2", "1Gi")])
    service.add_container(_cid(ex, "app"), ex["metadata"]["uid"], "app")
    # retries=2: three attempts in the pass, all failing
    service.fail_updates = [grpc.StatusCode.UNAVAILABLE] * 3
    m.on_pods([ex])
    r = m.reconcile_once()
    assert (r.updates, r.update_errors) == (0, 1)
    assert len(service.raw_updates) == 3 and service.updates == []
    assert (
        _sample(m, "ballast_agent_cpuset_update_errors_total", {"runtime": "cri", "reason": "unavailable"})
        == 1
    )
    assert (
        _sample(
            m,
            "ballast_agent_runtime_call_retries_total",
            {"method": "UpdateContainerResources", "code": "UNAVAILABLE"},
        )
        == 2
    )
    r = m.reconcile_once()
    assert (r.updates, r.update_errors) == (1, 0)
    assert service.updates == [(_cid(ex, "app"), str(m.state.get_cpuset(ex["metadata"]["uid"], "app")))]


def test_container_ids_from_the_runtime_when_the_status_has_none(tmp_path: Path, cri) -> None:
    service, runtime = cri
    m = _manager(tmp_path, runtime)
    p = pod("ex", [container("app", "2", "1Gi")], statuses="no-ids")
    uid = p["metadata"]["uid"]
    service.add_container("runtime-id-0", uid, "app", attempt=0)
    service.add_container("runtime-id-1", uid, "app", attempt=1)
    m.on_pods([p])
    m.reconcile_once()
    assert [cid for cid, _ in service.updates] == ["runtime-id-1"]
    assert {"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": "app"} in service.list_filters
    lookups = len(service.list_filters)
    m.reconcile_once()
    assert len(service.list_filters) == lookups, "the id is remembered"


def test_pod_without_statuses_is_looked_up_only_when_running(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    m = _manager(tmp_path, rt)
    pending = pod("p", [container("app", "2", "1Gi")], statuses="none", phase="Pending")
    m.on_pods([pending])
    m.reconcile_once()
    assert rt.lookups == [] and rt.calls == []
    assert m.state.has_pod(pending["metadata"]["uid"]), "CPUs are chosen before the container starts"
    waiting = pod(
        "p",
        [container("app", "2", "1Gi")],
        uid=pending["metadata"]["uid"],
        statuses="waiting",
        phase="Pending",
    )
    m.on_pod_event("MODIFIED", waiting)
    m.reconcile_once()
    assert rt.calls == []


# --- the pod feed -------------------------------------------------------------------------------------


def test_nothing_happens_before_the_first_pod_list(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    state = tmp_path / "cpu_manager_state"
    state.write_bytes(
        encode_checkpoint("static", ALL - CPUSet.of(1, 7), {"old-pod": {"app": CPUSet.of(1, 7)}})
    )
    m = _manager(tmp_path, rt)
    m.on_pod_event("ADDED", pod("x", [container("app", "2", "1Gi")]))
    r = m.reconcile_once()
    assert r.skipped and rt.calls == []
    assert m.state.has_pod("old-pod"), "an empty view at start-up is not 'every pod is gone'"
    m.on_pods([])
    m.reconcile_once()
    assert not m.state.has_pod("old-pod")


def test_pods_of_other_nodes_are_ignored(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    m = _manager(tmp_path, rt)
    m.on_pods([pod("elsewhere", [container("app", "2", "1Gi")], node="node-b")])
    m.reconcile_once()
    assert not m.state.get_assignments() and rt.calls == []


def test_reflector_handler_protocol(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    m = _manager(tmp_path, rt)
    p = pod("ex", [container("app", "2", "1Gi")])
    m.replace([p], "123")
    m.apply("MODIFIED", p)
    m.reconcile_once()
    assert len(rt.calls) == 1
    reflector = m.pod_reflector(object())
    assert reflector.path == "/api/v1/pods"
    assert reflector.params == {"fieldSelector": f"spec.nodeName={NODE}"}
    assert reflector.handler is m


def test_annotation_edits_after_allocation_are_not_a_resize(tmp_path: Path) -> None:
    m = _manager(tmp_path, MemoryRuntime())
    p = pod("ex", [container("app", "2", "1Gi")], result=zones(node1=2))
    uid = p["metadata"]["uid"]
    m.on_pods([p])
    m.reconcile_once()
    cpus = m.state.get_cpuset(uid, "app")
    edited = pod("ex", [container("app", "2", "1Gi")], uid=uid, result=zones(node0=2), policy="none")
    m.on_pod_event("MODIFIED", edited)
    m.reconcile_once()
    assert m.state.get_cpuset(uid, "app") == cpus and cpus.issubset(NUMA1)
    assert m.decision(uid).mode is CPUPolicy.EXCLUSIVE


def test_bad_and_untrusted_results_are_counted_not_fatal(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    m = _manager(tmp_path, rt)
    pods = [
        pod("rogue", [container("app", "2", "1Gi")], result=zones(node1=2), scheduler="default-scheduler"),
        pod("bad", [container("app", "1", "1Gi")], result='[{"name":"x"}]'),
        pod("short", [container("app", "1", "1Gi")], result='[{"name":"no"}]'),
        pod("far", [container("app", "1", "1Gi")], result=zones(node9=1)),
        pod("sum", [container("app", "1", "1Gi")], result=zones(node1=4)),
    ]
    m.on_pods(pods)
    r = m.reconcile_once()
    assert r.allocated == 5, "all of them still get CPUs, from the whole machine"
    ignored = "ballast_agent_topology_results_ignored_total"
    assert _sample(m, ignored, {"reason": "untrusted-scheduler"}) == 1
    assert _sample(m, ignored, {"reason": "malformed"}) == 2
    assert _sample(m, ignored, {"reason": "unknown-numa"}) == 1
    assert _sample(m, ignored, {"reason": "cpu-mismatch"}) == 1


def test_allocation_waits_for_cpus_to_be_freed(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    m = _manager(tmp_path, rt)
    big = pod("big", [container("app", "8", "1Gi")], created="2026-01-01T00:00:00Z")
    late = pod("late", [container("app", "4", "1Gi")], created="2026-01-01T00:01:00Z")
    m.on_pods([big, late])
    r = m.reconcile_once()
    assert (r.allocated, r.allocation_errors) == (1, 1), "the older pod wins"
    late_uid = late["metadata"]["uid"]
    assert m.state.get_cpuset(late_uid, "app") is None
    assert rt.cpusets[_cid(late, "app")] == m.state.get_default_cpuset(), "meanwhile on the shared pool"
    r = m.reconcile_once()
    assert r.allocation_errors == 0, "not retried while nothing changed"
    m.on_pod_event("DELETED", big)
    r = m.reconcile_once()
    assert r.allocated == 1 and len(m.state.get_cpuset(late_uid, "app")) == 4
    assert rt.cpusets[_cid(late, "app")] == m.state.get_cpuset(late_uid, "app")
    assert _sample(m, "ballast_agent_cpu_allocation_errors_total", {"reason": "insufficient"}) == 1


def test_not_found_forgets_a_looked_up_id(tmp_path: Path) -> None:
    def fail(ref, cpus):
        return RuntimeCallError("not-found", "gone") if ref.container_id == "stale" else None

    rt = MemoryRuntime(fail=fail)
    m = _manager(tmp_path, rt)
    p = pod("ex", [container("app", "2", "1Gi")], statuses="no-ids")
    rt.containers[(p["metadata"]["uid"], "app")] = "stale"
    m.on_pods([p])
    assert m.reconcile_once().update_errors == 1
    rt.containers[(p["metadata"]["uid"], "app")] = "fresh"
    m.reconcile_once()
    assert [cid for cid, _ in rt.calls] == ["fresh"]


# --- restart and recovery -----------------------------------------------------------------------------


def test_restart_from_checkpoint_gives_the_same_state(tmp_path: Path) -> None:
    pods = [
        pod("a", [container("app", "2", "1Gi")], result=zones(node1=2)),
        pod("b", [container("app", "3", "1Gi")], policy="immovable"),
        pod("c", [container("app", "1", "1Gi", request_cpu="500m")]),
        pod("d", [container("app", "2", "1Gi")], init=[container("init", "3", "1Gi")]),
    ]
    rt1 = MemoryRuntime()
    m1 = _manager(tmp_path, rt1)
    m1.on_pods(pods)
    m1.reconcile_once()
    before = (m1.state.get_default_cpuset(), {u: dict(c) for u, c in m1.state.get_assignments().items()})
    file_before = (tmp_path / "cpu_manager_state").read_bytes()

    rt2 = MemoryRuntime()
    m2 = _manager(tmp_path, rt2)
    assert (
        m2.metrics.registry.get_sample_value("ballast_agent_state_recoveries_total", {"kind": "corrupt"})
        is None
    )
    m2.on_pods(pods)
    r = m2.reconcile_once()
    after = (m2.state.get_default_cpuset(), {u: dict(c) for u, c in m2.state.get_assignments().items()})
    assert after == before and r.allocated == 0
    assert (tmp_path / "cpu_manager_state").read_bytes() == file_before
    assert rt2.cpusets == rt1.cpusets, "after a restart every container is set once more, to the same CPUs"


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # torn write
        lambda b: b.replace(b'"checksum":', b'"checksum":1'),  # checksum mismatch
        lambda b: b"garbage\x00",
        lambda b: encode_checkpoint(
            "static", CPUSet.parse("0-11"), {"ghost": {"app": CPUSet.of(1)}}
        ),  # overlap
        lambda b: encode_checkpoint("static", CPUSet.parse("0-7"), {}),  # union != CPUs
    ],
)
def test_corrupt_checkpoint_is_kept_aside_and_rebuilt_from_running_pods(tmp_path: Path, damage) -> None:
    pods = [
        pod("a", [container("app", "2", "1Gi")], result=zones(node1=2), created="2026-01-01T00:00:00Z"),
        pod("b", [container("app", "4", "1Gi")], created="2026-01-01T00:00:01Z"),
    ]
    m1 = _manager(tmp_path, MemoryRuntime())
    m1.on_pods(pods)
    m1.reconcile_once()
    path = tmp_path / "cpu_manager_state"
    bad = damage(path.read_bytes())
    path.write_bytes(bad)

    rt = MemoryRuntime()
    m2 = _manager(tmp_path, rt)
    kinds = {"corrupt", "invalid"}
    counted = sum(
        m2.metrics.registry.get_sample_value("ballast_agent_state_recoveries_total", {"kind": k}) or 0
        for k in kinds
    )
    assert counted == 1
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("cpu_manager_state.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == bad, "the old file is kept, unchanged"

    m2.on_pods(pods)
    r = m2.reconcile_once()
    assert r.allocated == 2
    m2.policy.validate_state(m2.state)
    a_uid, b_uid = (p["metadata"]["uid"] for p in pods)
    assert m2.state.get_cpuset(a_uid, "app").issubset(NUMA1) and len(m2.state.get_cpuset(b_uid, "app")) == 4
    assert set(rt.cpusets) == {_cid(p, "app") for p in pods}
    # The rebuilt state is saved and trusted on the next start.
    m3 = _manager(tmp_path, MemoryRuntime())
    assert m3.state.get_assignments() == m2.state.get_assignments()


def test_state_write_failure_is_counted_and_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ballast.agent.cpumanager import state_checkpoint as state_mod

    m = _manager(tmp_path, MemoryRuntime())
    real = state_mod.write_atomically
    monkeypatch.setattr(
        state_mod, "write_atomically", lambda *a: (_ for _ in ()).throw(OSError(28, "disk full"))
    )
    p = pod("a", [container("app", "2", "1Gi")])
    m.on_pods([p])
    r = m.reconcile_once()
    assert r.allocated == 1 and _sample(m, "ballast_agent_state_write_errors_total") >= 1
    monkeypatch.setattr(state_mod, "write_atomically", real)
    m.reconcile_once()
    assert p["metadata"]["uid"] in (tmp_path / "cpu_manager_state").read_text()


# --- the loop -----------------------------------------------------------------------------------------


def test_run_reacts_to_pod_events_at_once_and_stops(tmp_path: Path) -> None:
    rt = MemoryRuntime()
    m = _manager(tmp_path, rt, reconcile_period=30.0)
    stop = threading.Event()
    thread = threading.Thread(target=m.run, args=(stop,), kwargs={"poll": 0.05})
    thread.start()
    try:
        m.on_pods([])
        p = pod("ex", [container("app", "2", "1Gi")])
        started = time.monotonic()
        m.on_pod_event("ADDED", p)
        while not rt.calls and time.monotonic() - started < 5:
            time.sleep(0.01)
        assert rt.calls, "pinned without waiting for the 30 s period"
        assert time.monotonic() - started < 2
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_run_survives_a_failing_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _manager(tmp_path, MemoryRuntime(), reconcile_period=0.05)
    calls = []

    def boom():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return None

    monkeypatch.setattr(m, "reconcile_once", boom)
    stop = threading.Event()
    thread = threading.Thread(target=m.run, args=(stop,), kwargs={"poll": 0.01})
    thread.start()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert len(calls) >= 3


def test_constructor_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="runtime"):
        CPUManager(DUAL_SOCKET_HT, RESERVED, tmp_path / "s", None, allowed_schedulers=[], node_name=NODE)
    with pytest.raises(ValueError, match="node name"):
        CPUManager(
            DUAL_SOCKET_HT, RESERVED, tmp_path / "s", MemoryRuntime(), allowed_schedulers=[], node_name=""
        )


def test_fake_service_type() -> None:
    assert isinstance(FakeRuntimeService(), FakeRuntimeService)


def test_a_result_arriving_after_the_pod_is_honoured(tmp_path: Path) -> None:
    # crane's informer only had AddFunc: an annotation written after the pod was first seen was missed.
    m = _manager(tmp_path, MemoryRuntime())
    early = pod("ex", [container("app", "2", "1Gi")], policy="none")
    uid = early["metadata"]["uid"]
    m.on_pods([early])
    m.reconcile_once()
    assert not m.state.get_assignments()
    late = pod("ex", [container("app", "2", "1Gi")], uid=uid, result=zones(node1=2))
    m.on_pod_event("MODIFIED", late)
    m.reconcile_once()
    assert m.state.get_cpuset(uid, "app").issubset(NUMA1)


def test_a_rejected_result_is_counted_once_per_pod_not_per_event(tmp_path: Path) -> None:
    m = _manager(tmp_path, MemoryRuntime())
    rogue = pod(
        "rogue", [container("app", "2", "1Gi")], result=zones(node1=2), scheduler="other", statuses="none"
    )
    m.on_pods([rogue])
    for _ in range(3):
        m.on_pod_event("MODIFIED", rogue)
    assert _sample(m, "ballast_agent_topology_results_ignored_total", {"reason": "untrusted-scheduler"}) == 1


def test_a_restored_pod_holds_its_cpus_before_the_pod_list_names_it(tmp_path: Path) -> None:
    """One rule for what a pod holds (both NRTs publish it): from assignment to release. After a restart
    the checkpoint's pods hold their CPUs before the first list says who they are, so neither NRT may show
    those CPUs as free meanwhile."""
    (tmp_path / "cpu_manager_state").write_bytes(
        encode_checkpoint("static", ALL - CPUSet.of(1, 7), {"old-pod": {"app": CPUSet.of(1, 7)}})
    )
    m = _manager(tmp_path, MemoryRuntime())
    assert m.held() == {"old-pod": ("", "", CPUSet.of(1, 7))}
    m.on_pods([pod("kafka", [container("app", "2", "1Gi")], uid="old-pod", namespace="shop")])
    assert m.held() == {"old-pod": ("shop", "kafka", CPUSet.of(1, 7))}
