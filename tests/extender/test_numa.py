"""NUMA-aware filter, score and bind from NodeResourceTopology (issue: NUMA extender)."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from ballast.contract.pod import parse_pod
from ballast.contract.topology_result import render_topology_result
from ballast.extender.main import create_app
from ballast.extender.numa.crane import (
    NumaRequest,
    ZoneUsage,
    combine,
    fit,
    numa_request,
    numa_score,
    parse_nrt,
)
from ballast.extender.numa.crane_bind import MISSING
from ballast.kube.client import Kube, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.fakekube import make_nrt
from ballast.testing.parts import POLICY_FILE, wait_for
from tests.conftest import read_fixture

KAFKA = read_fixture("node-names/05-filter-guaranteed-exclusive-cpu-kafka-broker.json")["Pod"]


def zones(*cpus: int, memory: str | None = None) -> list[dict]:
    out = []
    for i, c in enumerate(cpus):
        alloc = {"cpu": str(c)} | ({"memory": memory} if memory else {})
        out.append(
            {"name": f"node{i}", "type": "Node", "resources": {"capacity": alloc, "allocatable": alloc}}
        )
    return out


def guaranteed(name: str, cpu: int, *, aware: str | None = None, policy: str | None = None, uid=None) -> dict:
    ann = {}
    if aware is not None:
        ann["topology.crane.io/topology-awareness"] = aware
    if policy is not None:
        ann["topology.crane.io/cpu-policy"] = policy
    res = {"cpu": str(cpu), "memory": "1Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "annotations": ann} | ({"uid": uid} if uid else {}),
        "spec": {
            "schedulerName": "ballast-scheduler",
            "containers": [{"name": "app", "image": "x", "resources": {"requests": res, "limits": res}}],
        },
    }


# -- pure ---------------------------------------------------------------------------------------------


def test_which_pods_need_numa() -> None:
    req = numa_request(KAFKA)
    assert req == NumaRequest(cpus=4, memory_bytes=8 << 30, aware=True, policy="exclusive")
    assert numa_request(guaranteed("p", 2, policy="none")) is None
    burstable = guaranteed("p", 2)
    burstable["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2"}  # no memory limit: Burstable
    assert numa_request(burstable) is None
    fractional = guaranteed("p", 2)
    fractional["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1500m", "memory": "1Gi"},
        "limits": {"cpu": "1500m", "memory": "1Gi"},
    }
    assert numa_request(fractional) is None
    assert numa_request(guaranteed("p", 2, aware="false")).aware is False
    assert numa_request(guaranteed("p", 2)).aware is None


def test_fit_aware_and_reasons() -> None:
    topo = parse_nrt(make_nrt("n1", zones=zones(8, 8)))
    usage = ZoneUsage()
    usage.add("shop/a", [("node0", 4000, 0)])
    usage.add("shop/b", [("node1", 5000, 0)])
    req = NumaRequest(6, 0, None, "exclusive")
    f = fit(topo, usage, req)
    assert not f.ok and f.reason == "no single NUMA zone fits cpu 6: node0 free 4, node1 free 3"
    f = fit(topo, usage, NumaRequest(4, 0, None, "exclusive"))
    assert f.ok and f.result == (("node0", 4, 0),) and numa_score(f) == 10
    # not aware: whole CPUs from the zones with most free first, result sorted by name
    f = fit(topo, usage, NumaRequest(6, 0, False, "exclusive"))
    assert f.ok and f.result == (("node0", 4, 0), ("node1", 2, 0)) and numa_score(f) == 5
    f = fit(topo, usage, NumaRequest(8, 0, False, "exclusive"))
    assert not f.ok and f.reason == "NUMA zones together cannot fit cpu 8: node0 free 4, node1 free 3"


def test_memory_aware_fit_and_render() -> None:
    topo = parse_nrt(make_nrt("n1", zones=zones(8, 8, memory="16Gi")))
    req = NumaRequest(2, 20 << 30, None, "exclusive")
    assert not fit(topo, ZoneUsage(), req, memory_aware=True).ok
    assert fit(topo, ZoneUsage(), req, memory_aware=False).ok
    f = fit(topo, ZoneUsage(), NumaRequest(2, 8 << 30, None, "exclusive"), memory_aware=True)
    text = render_topology_result(f.result)
    # memory written as memory (crane wrote the CPU value there)
    assert text == '[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"2","memory":"8Gi"}}}]'
    assert render_topology_result((("node1", 4, 0),)) == (
        '[{"name":"node1","type":"Node","resources":{"capacity":{"cpu":"4"}}}]'
    )


@pytest.mark.parametrize(
    ("load", "numa", "w", "out"),
    [(6, 10, 0.5, 8), (6, 5, 0.5, 6), (10, 0, 0.5, 5), (3, 10, 0.0, 3), (3, 10, 1.0, 10)],
)
def test_score_combination(load: int, numa: int, w: float, out: int) -> None:
    assert combine(load, numa, w) == out


# -- in a cluster -------------------------------------------------------------------------------------

N1, N2, N3, N4 = "numa-1", "numa-2", "kubelet-managed", "no-nrt"


def node(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}},
    }


@pytest.fixture
def numa(fake_kube, kubeconfig: Path):
    for n in (N1, N2, N3, N4):
        fake_kube.add(node(n))
    fake_kube.add(make_nrt(N1, zones=zones(8, 8)))
    fake_kube.add(make_nrt(N2, zones=zones(8, 8), topology_manager_policy="None"))
    fake_kube.add(make_nrt(N3, zones=zones(8, 8), cpu_manager_policy="None"))
    kube = Kube(load_api_client(str(kubeconfig)), timeout=3.0)
    app = create_app(load_policy(POLICY_FILE), kube=kube, policy_poll_seconds=0)
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        yield client, app


def bound(fake_kube, name: str, node_: str, result: str, cpu: int, policy: str | None = None) -> None:
    pod = guaranteed(name, cpu, policy=policy)
    pod["metadata"]["annotations"]["topology.crane.io/topology-result"] = result
    pod["spec"]["nodeName"] = node_
    pod["status"] = {"phase": "Running"}
    fake_kube.add(pod)


def test_filter_reasons_awareness_and_unmanaged_nodes(numa, fake_kube) -> None:
    client, app = numa
    cache = app.state.services.cache
    bound(fake_kube, "a", N1, render_topology_result((("node0", 5, 0),)), 5)
    bound(fake_kube, "b", N1, render_topology_result((("node1", 6, 0),)), 6)
    # numa pods take nothing
    bound(fake_kube, "c", N1, render_topology_result((("node1", 2, 0),)), 2, policy="numa")
    wait_for(lambda: len(cache.pods_on(N1)) == 3)
    names = [N1, N2, N3, N4]
    out = client.post("/filter", json={"Pod": guaranteed("p", 4), "NodeNames": names}).json()
    assert out["FailedNodes"] == {N1: "no single NUMA zone fits cpu 4: node0 free 3, node1 free 2"}
    assert out["NodeNames"] == [N2, N3, N4]  # N2 not aware by NRT: 5 free in total is enough
    # the pod says it is not topology-aware: the zones together suffice on N1
    out = client.post("/filter", json={"Pod": guaranteed("p", 4, aware="false"), "NodeNames": names}).json()
    assert out["FailedNodes"] == {}
    # the pod insists on one zone: N2's NRT policy is overridden
    out = client.post("/filter", json={"Pod": guaranteed("p", 9, aware="true"), "NodeNames": names}).json()
    assert set(out["FailedNodes"]) == {N1, N2}
    assert out["NodeNames"] == [N3, N4]  # kubelet-managed and NRT-less nodes are left to the kubelet
    # pods without exclusive CPUs are not NUMA pods
    out = client.post("/filter", json={"Pod": guaranteed("p", 4, policy="none"), "NodeNames": names}).json()
    assert out["FailedNodes"] == {}


def test_prioritize_prefers_fewer_zones(numa) -> None:
    client, _ = numa
    pod = guaranteed("p", 10, aware="false")  # fits N1/N2 only across two zones
    scores = {
        h["Host"]: h["Score"]
        for h in client.post("/prioritize", json={"Pod": pod, "NodeNames": [N1, N2, N3]}).json()
    }
    # no load annotations: load score 0; numa score 5 (2 zones) at weight 0.5 -> 3 (2.5 rounds half up)
    assert scores == {N1: 3, N2: 3, N3: 0}
    pod = guaranteed("p", 4)
    scores = {
        h["Host"]: h["Score"]
        for h in client.post("/prioritize", json={"Pod": pod, "NodeNames": [N1, N3]}).json()
    }
    assert scores == {N1: 5, N3: 0}


def test_bind_writes_annotation_then_binding_and_agent_reads_it(numa, fake_kube) -> None:
    client, app = numa
    created = fake_kube.add(guaranteed("kafka", 4))
    uid = created["metadata"]["uid"]
    pod = fake_kube.get("pods", "kafka", namespace="shop")
    client.post("/filter", json={"Pod": pod, "NodeNames": [N1]})
    fake_kube.clear_requests()
    r = client.post("/bind", json={"PodName": "kafka", "PodNamespace": "shop", "PodUID": uid, "Node": N1})
    assert r.json() == {"Error": ""}
    calls = [(q.method, q.path, q.content_type) for q in fake_kube.requests if q.method in ("PATCH", "POST")]
    assert calls == [
        ("PATCH", "/api/v1/namespaces/shop/pods/kafka", "application/merge-patch+json"),
        ("POST", "/api/v1/namespaces/shop/pods/kafka/binding", "application/json"),
    ]
    stored = fake_kube.get("pods", "kafka", namespace="shop")
    text = stored["metadata"]["annotations"]["topology.crane.io/topology-result"]
    assert orjson.loads(text) == [{"name": "node0", "type": "Node", "resources": {"capacity": {"cpu": "4"}}}]
    # the agent's CPU manager reads exactly what the extender wrote
    agent_view = parse_pod(stored)
    assert agent_view.topology_result == ((0, 4),) and agent_view.topology_result_error is None
    assert agent_view.exclusive_cpus == 4 and stored["spec"]["nodeName"] == N1
    # the assumption counts at once, then the pod's own annotation replaces it
    cache = app.state.services.cache
    wait_for(lambda: cache.zone_usage(N1).cpu_milli.get("node0") == 4000 and uid not in cache.assumed)


def test_binding_failure_rolls_the_annotation_back(numa, fake_kube) -> None:
    client, app = numa
    created = fake_kube.add(guaranteed("web", 2))
    uid = created["metadata"]["uid"]
    client.post("/filter", json={"Pod": fake_kube.get("pods", "web", namespace="shop"), "NodeNames": [N1]})
    fake_kube.fail_next("POST", r"/binding$", 500, message="etcd is down")
    r = client.post("/bind", json={"PodName": "web", "PodNamespace": "shop", "PodUID": uid, "Node": N1})
    assert "etcd is down" in r.json()["Error"]
    stored = fake_kube.get("pods", "web", namespace="shop")
    assert "topology.crane.io/topology-result" not in (stored["metadata"].get("annotations") or {})
    assert "nodeName" not in stored["spec"] or not stored["spec"]["nodeName"]
    assert uid not in app.state.services.cache.assumed


def test_concurrent_binds_never_overbook_a_zone(numa, fake_kube) -> None:
    client, _ = numa
    uids = []
    for i in range(8):
        created = fake_kube.add(guaranteed(f"burst-{i}", 3))
        uids.append(created["metadata"]["uid"])
        client.post(
            "/filter", json={"Pod": fake_kube.get("pods", f"burst-{i}", namespace="shop"), "NodeNames": [N1]}
        )
    results: dict[int, str] = {}

    def bind(i: int) -> None:
        body = {"PodName": f"burst-{i}", "PodNamespace": "shop", "PodUID": uids[i], "Node": N1}
        results[i] = client.post("/bind", json=body).json()["Error"]

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [i for i, e in results.items() if e == ""]
    assert len(ok) == 4  # two zones of 8 CPUs hold two 3-CPU pods each
    per_zone: dict[str, int] = {}
    for i in ok:
        pod = fake_kube.get("pods", f"burst-{i}", namespace="shop")
        for z in orjson.loads(pod["metadata"]["annotations"]["topology.crane.io/topology-result"]):
            per_zone[z["name"]] = per_zone.get(z["name"], 0) + int(z["resources"]["capacity"]["cpu"])
    assert all(v <= 8 for v in per_zone.values()) and sum(per_zone.values()) == 12
    for e in results.values():
        if e:
            assert "no single NUMA zone fits cpu 3" in e


def test_assumptions_expire(numa, fake_kube) -> None:
    _, app = numa
    cache = app.state.services.cache
    clock = [1000.0]
    from cachetools import TTLCache

    cache.assumed = TTLCache(100, 60, timer=lambda: clock[0])
    cache.assume("ghost", N1, (("node0", 4, 0),))
    assert cache.zone_usage(N1).cpu_milli["node0"] == 4000
    clock[0] += 61
    assert cache.zone_usage(N1).cpu_milli.get("node0", 0) == 0


def test_why_endpoints_show_zones_and_choice(numa, fake_kube) -> None:
    client, app = numa
    bound(fake_kube, "a", N1, render_topology_result((("node0", 5, 0),)), 5)
    wait_for(lambda: len(app.state.services.cache.pods_on(N1)) == 1)
    view = client.get(f"/nodes/{N1}").json()["numa"]
    assert view["cpuManagerPolicy"] == "Static"
    z0 = view["zones"][0]
    assert (z0["name"], z0["takenCpuMilli"], z0["freeCpuMilli"], z0["takenBy"]) == (
        "node0",
        5000,
        3000,
        ["shop/a"],
    )
    ex = client.post("/explain", json={"Pod": guaranteed("p", 4), "NodeNames": [N1, N4]}).json()
    n1 = next(n for n in ex["nodes"] if n["name"] == N1)
    assert n1["numa"]["pod"]["choice"] == [{"zone": "node1", "cpus": 4, "memoryBytes": 0}]
    assert n1["numa"]["pod"]["fits"] is True
    assert client.get(f"/nodes/{N4}").status_code == 200
    assert client.get(f"/nodes/{N4}").json()["numa"]["nrt"] is False


def test_numa_work_follows_whether_any_node_pins_cpus(numa, fake_kube) -> None:
    """NUMA parsing is skipped while no NRT says Ballast pins CPUs, and resumes the moment one does."""
    client, app = numa
    cache, ext = app.state.services.cache, app.state.services.extender
    assert cache.pins_cpus()  # N1 and N2 are static with zones (N3's kubelet manages its CPUs)
    fake_kube.delete("noderesourcetopologies", N1)
    fake_kube.delete("noderesourcetopologies", N2)
    wait_for(lambda: not cache.pins_cpus())
    first = fake_kube.add(guaranteed("early", 4))
    client.post("/filter", json={"Pod": fake_kube.get("pods", "early", namespace="shop"), "NodeNames": [N1]})
    assert ext.numa.seen(first["metadata"]["uid"]) is MISSING
    fake_kube.add(make_nrt(N1, zones=zones(8, 8)))
    wait_for(cache.pins_cpus)
    late = fake_kube.add(guaranteed("late", 20))  # more than any zone of N1 holds
    pod = fake_kube.get("pods", "late", namespace="shop")
    out = client.post("/filter", json={"Pod": pod, "NodeNames": [N1]}).json()
    assert ext.numa.seen(late["metadata"]["uid"]) is not MISSING
    assert N1 in out["FailedNodes"], out
