"""The extender on nodes with community NRTs (v1alpha2), through the fake API server: the watch, filter and
prioritize, bind and the assumed record, malformed objects in /nodes and the metric."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ballast.contract.podfingerprint import fingerprint
from ballast.extender.main import create_app
from ballast.extender.numa.community_assumed import Assumed
from ballast.kube.client import Kube, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.fakekube import make_nrt
from ballast.testing.nrt_community import container, guaranteed, pod, two_zones
from ballast.testing.parts import POLICY_FILE, wait_for

FULL, ROOMY, LOOSE, BOTH, PLAIN = "nfd-full", "nfd-roomy", "nfd-best-effort", "both", "plain"


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}},
    }


LONG_AGO = "2020-01-01T00:00:00Z"


def bound(
    name: str, node_name: str, cpus: int = 1, namespace: str = "shop", scheduled: str | None = None
) -> dict[str, Any]:
    """A pod already bound to ``node_name`` (``scheduled``: when, for a pod the exporter has long counted)."""
    p = guaranteed(name, cpus, namespace=namespace)
    p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running"}
    if scheduled is not None:
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}
        ]
    return p


@pytest.fixture
def community(fake_kube, kubeconfig: Path):
    fake_kube.register_custom_resource(
        "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", "NodeResourceTopology"
    )
    for n in (FULL, ROOMY, LOOSE, BOTH, PLAIN):
        fake_kube.add(node(n))
    fake_kube.add(two_zones(FULL, 2, 4))
    fake_kube.add(two_zones(ROOMY, 8, 8))
    fake_kube.add(two_zones(LOOSE, 2, 4, policy="best-effort"))
    fake_kube.add(two_zones(BOTH, 2, 4))
    fake_kube.add(make_nrt(BOTH, zones=[]))  # a crane object wins on its node (its checks pass with no zones)
    kube = Kube(load_api_client(str(kubeconfig)), timeout=3.0)
    app = create_app(load_policy(POLICY_FILE), kube=kube, policy_poll_seconds=0)
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        yield client, app


NAMES = [FULL, ROOMY, LOOSE, BOTH, PLAIN]


def test_filter_rejects_nodes_where_no_zone_fits_and_names_the_zones(community) -> None:
    client, _ = community
    out = client.post("/filter", json={"Pod": guaranteed("g6", 6), "NodeNames": NAMES}).json()
    assert out["FailedNodes"] == {
        FULL: "no single NUMA zone fits app container app (cpu 6, memory 1Gi): "
        "node-0 free cpu 2, memory 15Gi; node-1 free cpu 4, memory 15Gi"
    }
    assert out["NodeNames"] == [ROOMY, LOOSE, BOTH, PLAIN]
    for p in (
        pod("be"),
        pod("burst", container("app", "6", "1Gi", limits=False)),
        guaranteed("frac", "5500m"),
    ):
        out = client.post("/filter", json={"Pod": p, "NodeNames": NAMES}).json()
        assert out["FailedNodes"] == {}, p["metadata"]["name"]
    metrics = client.get("/metrics").text
    assert 'ballast_extender_nodes_rejected_total{metric="numa"} 1.0' in metrics


def test_prioritize_prefers_the_emptier_zone_and_leaves_others_alone(community) -> None:
    client, _ = community
    scores = {
        h["Host"]: h["Score"]
        for h in client.post("/prioritize", json={"Pod": guaranteed("g2", 2), "NodeNames": NAMES}).json()
    }
    # no load annotations: load score 0, folded with the zone score at weight 0.5
    assert scores[ROOMY] > scores[FULL] > 0
    assert scores[LOOSE] == scores[BOTH] == scores[PLAIN] == 0
    be = client.post("/prioritize", json={"Pod": pod("be"), "NodeNames": NAMES}).json()
    assert {h["Score"] for h in be} == {0}


def test_burst_of_binds_never_overbooks_a_zone(community, fake_kube) -> None:
    client, app = community
    view = app.state.services.cache.community
    uids = []
    for i in range(6):
        created = fake_kube.add(guaranteed(f"burst-{i}", 3, namespace="shop"))
        uids.append(created["metadata"]["uid"])
        body = {"Pod": fake_kube.get("pods", f"burst-{i}", namespace="shop"), "NodeNames": [ROOMY]}
        assert client.post("/filter", json=body).json()["NodeNames"] == [ROOMY]
    results: dict[int, str] = {}

    def bind(i: int) -> None:
        body = {"PodName": f"burst-{i}", "PodNamespace": "shop", "PodUID": uids[i], "Node": ROOMY}
        results[i] = client.post("/bind", json=body).json()["Error"]

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [i for i, e in results.items() if e == ""]
    assert len(ok) == 4, results  # two zones of 8 free CPUs hold two 3-CPU pods each
    assert all("no single NUMA zone fits" in e for e in results.values() if e)
    assert view.taken(ROOMY) == {
        "node-0": {"cpu": 6000, "memory": 2 * 1024**3},
        "node-1": {"cpu": 6000, "memory": 2 * 1024**3},
    }
    # the next pod's filter sees the assumed CPUs before any object update
    out = client.post("/filter", json={"Pod": guaranteed("next", 3), "NodeNames": [ROOMY]}).json()
    assert ROOMY in out["FailedNodes"] and "node-0 free cpu 2" in out["FailedNodes"][ROOMY]


def test_assumed_pods_are_dropped_when_the_fingerprint_shows_them_counted(community, fake_kube) -> None:
    client, app = community
    cache = app.state.services.cache
    view = cache.community
    fake_kube.add(bound("old", ROOMY, scheduled=LONG_AGO))  # counted by the exporter long ago
    wait_for(lambda: len(cache.pods_on(ROOMY)) == 1)
    view.assume(Assumed("u-new", "shop", "new", ROOMY, (("node-0", {"cpu": 4000}),), view.clock()))
    # an update whose fingerprint does not include the new pod keeps the assumption
    stale = two_zones(ROOMY, 8, 8, fingerprint=fingerprint([("shop", "old")]))
    fake_kube.update(stale, resource="noderesourcetopologies.topology.node.k8s.io")
    wait_for(lambda: view.topology(ROOMY).fingerprint is not None)
    assert view.taken(ROOMY) == {"node-0": {"cpu": 4000}}
    # the exporter has counted the new pod: its available dropped and its fingerprint signs both pods
    fresh = two_zones(ROOMY, 4, 8, fingerprint=fingerprint([("shop", "old"), ("shop", "new")]))
    fake_kube.update(fresh, resource="noderesourcetopologies.topology.node.k8s.io")
    wait_for(lambda: view.taken(ROOMY) == {})
    assert view.settled == 1
    out = client.get(f"/nodes/{ROOMY}").json()["numaCommunity"]
    assert out["zones"][0]["available"]["cpu"] == 4000 and out["assumedPods"] == []


def test_assumptions_expire_without_a_fingerprint(community) -> None:
    _, app = community
    view = app.state.services.cache.community
    clock = [1000.0]
    view.record.clock = lambda: clock[0]
    view.assume(Assumed("ghost", "shop", "ghost", ROOMY, (("node-1", {"cpu": 2000}),), clock[0]))
    assert view.taken(ROOMY) == {"node-1": {"cpu": 2000}}
    clock[0] += view.record.ttl - 1
    assert view.taken(ROOMY) == {"node-1": {"cpu": 2000}}
    clock[0] += 2
    assert view.taken(ROOMY) == {}


def test_a_deleted_pod_leaves_the_record(community, fake_kube) -> None:
    client, app = community
    view = app.state.services.cache.community
    created = fake_kube.add(guaranteed("short", 2, namespace="shop"))
    uid = created["metadata"]["uid"]
    client.post(
        "/filter", json={"Pod": fake_kube.get("pods", "short", namespace="shop"), "NodeNames": [ROOMY]}
    )
    r = client.post("/bind", json={"PodName": "short", "PodNamespace": "shop", "PodUID": uid, "Node": ROOMY})
    assert r.json() == {"Error": ""}
    assert view.record.has(uid)
    wait_for(lambda: len(app.state.services.cache.pods_on(ROOMY)) == 1)
    fake_kube.delete("pods", "short", namespace="shop")
    wait_for(lambda: not view.record.has(uid))


def test_a_failed_binding_takes_the_assumption_back(community, fake_kube) -> None:
    client, app = community
    created = fake_kube.add(guaranteed("web", 2, namespace="shop"))
    uid = created["metadata"]["uid"]
    client.post("/filter", json={"Pod": fake_kube.get("pods", "web", namespace="shop"), "NodeNames": [ROOMY]})
    fake_kube.fail_next("POST", r"/binding$", 500, message="etcd is down")
    r = client.post("/bind", json={"PodName": "web", "PodNamespace": "shop", "PodUID": uid, "Node": ROOMY})
    assert "etcd is down" in r.json()["Error"]
    assert not app.state.services.cache.community.record.has(uid)


def test_malformed_object_is_no_information_counted_and_shown(community, fake_kube) -> None:
    client, app = community
    bad = two_zones(FULL, 2, 4)
    bad["zones"][0]["resources"][0]["available"] = "-3"
    fake_kube.update(bad, resource="noderesourcetopologies.topology.node.k8s.io")
    view = app.state.services.cache.community
    wait_for(lambda: FULL in view.malformed)
    out = client.post("/filter", json={"Pod": guaranteed("g6", 6), "NodeNames": [FULL]}).json()
    assert out["FailedNodes"] == {} and out["NodeNames"] == [FULL]
    shown = client.get(f"/nodes/{FULL}").json()["numaCommunity"]
    assert shown["nrt"] == "malformed" and "negative" in shown["reason"]
    assert "ballast_extender_nrt_malformed_total 1.0" in client.get("/metrics").text


def test_explain_shows_the_fit_and_the_choice(community) -> None:
    client, _ = community
    ex = client.post("/explain", json={"Pod": guaranteed("g4", 4), "NodeNames": [FULL, ROOMY, LOOSE]}).json()
    by = {n["name"]: n for n in ex["nodes"]}
    assert by[FULL]["numaCommunity"]["pod"]["choice"][0]["zone"] == "node-1"
    assert by[ROOMY]["numaCommunity"]["pod"]["fits"] is True
    assert "best-effort" in by[LOOSE]["numaCommunity"]["note"]
    ex = client.post("/explain", json={"Pod": guaranteed("g6", 6), "NodeNames": [FULL]}).json()
    assert ex["nodes"][0]["filter"]["passes"] is False and ex["favoured"] is None


def test_pods_bound_by_another_binder_are_recorded_from_the_pod_watch(community, fake_kube) -> None:
    client, app = community
    view = app.state.services.cache.community
    for i in range(2):
        p = guaranteed(f"elsewhere-{i}", 6, namespace="shop")
        p["spec"]["nodeName"] = ROOMY  # bound without Ballast's bind
        p["status"] = {"phase": "Pending"}
        fake_kube.add(p)
    wait_for(lambda: len(view.assumed_on(ROOMY)) == 2)
    assert view.taken(ROOMY) == {
        "node-0": {"cpu": 6000, "memory": 1024**3},
        "node-1": {"cpu": 6000, "memory": 1024**3},
    }
    out = client.post("/filter", json={"Pod": guaranteed("next", 3), "NodeNames": [ROOMY]}).json()
    assert ROOMY in out["FailedNodes"]
    # a BestEffort pod bound there takes nothing; nor does one on a node whose object does not filter
    fake_kube.add(bound("be-pod", ROOMY, 1) | {"spec": {"nodeName": ROOMY, "containers": [{"name": "c"}]}})
    fake_kube.add(bound("loose-pod", LOOSE, 6))
    wait_for(lambda: len(app.state.services.cache.pods_on(LOOSE)) == 1)
    assert len(view.assumed_on(ROOMY)) == 2 and view.assumed_on(LOOSE) == []
