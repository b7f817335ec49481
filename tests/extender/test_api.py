"""The extender over HTTP, replaying what a real kube-scheduler v1.36 sent."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE
from tests.conftest import CAPTURE_TIME, fixture_files, read_fixture


def verb_of(path: Path) -> str:
    return path.stem.split("-")[1]


HOT_NODE = "ip-10-0-42-182.us-west-2.compute.internal"
SPOT_HOT = "ip-10-0-88-155.us-west-2.compute.internal"


@pytest.fixture
def client() -> TestClient:
    app = create_app(load_policy(POLICY_FILE), clock=lambda: CAPTURE_TIME)
    with TestClient(app) as c:
        yield c


VERB_FIXTURES = [p for p in fixture_files() if verb_of(p) in ("filter", "prioritize")]


@pytest.mark.parametrize("path", VERB_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_captured_request_is_answered_in_shape(client: TestClient, path: Path) -> None:
    body = json.loads(path.read_text())
    verb = verb_of(path)
    r = client.post(f"/{verb}", content=path.read_bytes(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    out = r.json()
    if verb == "filter":
        assert set(out) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
        assert out["Error"] == ""
        if body["Nodes"] is not None:
            assert out["NodeNames"] is None
            passed = {n["metadata"]["name"]: n for n in out["Nodes"]["items"]}
            sent = {n["metadata"]["name"]: n for n in body["Nodes"]["items"]}
            assert set(passed) | set(out["FailedNodes"]) == set(sent)
            assert not set(passed) & set(out["FailedNodes"])
            for name, n in passed.items():
                assert n == sent[name]  # Node objects come back unchanged
        else:
            assert out["Nodes"] is None
            assert out["NodeNames"] == body["NodeNames"]  # no cache: every name passes
    else:
        names = (
            [n["metadata"]["name"] for n in body["Nodes"]["items"]] if body["Nodes"] else body["NodeNames"]
        )
        assert [h["Host"] for h in out] == names
        assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in out)


def test_hot_node_rejected_with_reason(client: TestClient) -> None:
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    out = client.post("/filter", json=body).json()
    assert set(out["FailedNodes"]) == {HOT_NODE}
    reason = out["FailedNodes"][HOT_NODE]
    # 0.83399 measured, plus this pod's own estimate: 500m x 0.85 over 7910m allocatable = 0.05373
    assert reason.startswith(
        "load cpu_usage_avg_5m is 0.83399 measured + 0.05373 estimated (this pod and pods placed since) "
        "= 0.88772, above the limit 0.65 (measured "
    ), reason
    # the stale node (a day old) and the node without annotations pass: no information never rejects
    names = {n["metadata"]["name"] for n in out["Nodes"]["items"]}
    assert {"ip-10-0-26-126.us-west-2.compute.internal", "ip-10-0-56-176.us-west-2.compute.internal"} <= names


def test_scores_follow_load(client: TestClient) -> None:
    body = read_fixture("full-nodes/02-prioritize-burstable-checkout-api.json")
    scores = {h["Host"]: h["Score"] for h in client.post("/prioritize", json=body).json()}
    assert scores[HOT_NODE] == 0  # busy and hot value 4
    assert scores["ip-10-0-56-176.us-west-2.compute.internal"] == 0  # unmeasured
    assert scores["ip-10-0-26-126.us-west-2.compute.internal"] == 0  # stale
    assert scores["ip-10-0-40-140.us-west-2.compute.internal"] >= 5
    assert scores["ip-10-0-77-36.us-west-2.compute.internal"] >= 4


def test_daemonset_pod_passes_untouched(client: TestClient) -> None:
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    ds = read_fixture("full-nodes/09-filter-daemonset-node-exporter.json")["Pod"]
    body["Pod"] = ds
    out = client.post("/filter", json=body).json()
    assert out["FailedNodes"] == {}
    assert len(out["Nodes"]["items"]) == len(body["Nodes"]["items"])


def test_names_only_without_cache_counts_and_warns_once(client: TestClient, caplog) -> None:
    body = read_fixture("node-names/01-filter-burstable-checkout-api.json")
    with caplog.at_level(logging.WARNING, logger="ballast.extender"):
        for _ in range(3):
            assert client.post("/filter", json=body).json()["NodeNames"] == body["NodeNames"]
    warnings = [r for r in caplog.records if "only NodeNames" in r.getMessage()]
    assert len(warnings) == 1
    metrics = client.get("/metrics").text
    assert "ballast_extender_names_only_requests_total 3.0" in metrics


def test_lowercase_keys_accepted(client: TestClient) -> None:
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    lower = {"pod": body["Pod"], "nodes": body["Nodes"]}
    out = client.post("/filter", json=lower).json()
    assert set(out["FailedNodes"]) == {HOT_NODE}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"", "(body)"),
        (b"not json", "(body)"),
        (b"[1, 2]", "(body)"),
        (b'{"Nodes": {"items": []}}', "Pod"),
        (b'{"Pod": "x", "NodeNames": []}', "Pod"),
        (b'{"Pod": {}, "Nodes": []}', "Nodes"),
        (b'{"Pod": {}, "Nodes": {"items": {}}}', "Nodes.items"),
        (b'{"Pod": {}, "Nodes": {"items": [1]}}', "Nodes.items[0]"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items[0].metadata.name"),
        (
            b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "a", "annotations": []}}]}}',
            "Nodes.items[0].metadata.annotations",
        ),
        (b'{"Pod": {}, "NodeNames": "a"}', "NodeNames"),
        (b'{"Pod": {}, "NodeNames": [1]}', "NodeNames[0]"),
        (b'{"Pod": {}}', "Nodes"),
        (
            b'{"Pod": {"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}, '
            b'"NodeNames": []}',
            "Pod.spec.containers[0].resources",
        ),
        (b'{"Pod": {"metadata": 5}, "NodeNames": []}', "Pod.metadata"),
        (
            b'{"Pod": {"spec": {"containers": [{"resources": {"limits": {"cpu": "1e99999999"}}}]}}, '
            b'"NodeNames": []}',
            "Pod.spec.containers[0].resources",
        ),
        (
            b'{"Pod": {"spec": {"containers": [{"resources": {"requests": {"memory": "-1Gi"}}}]}}, '
            b'"NodeNames": []}',
            "Pod.spec.containers[0].resources",
        ),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_bad_bodies_get_400_naming_the_field(client: TestClient, verb: str, body: bytes, field: str) -> None:
    r = client.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    out = r.json()
    assert out["field"] == field and out["reason"] and out["error"].startswith(field)


def test_operations_endpoints(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ok"
    pol = client.get("/policy").json()
    assert pol["predicate"][0] == {"name": "cpu_usage_avg_5m", "maxLimitPercent": 0.65, "onMissing": "pass"}
    assert client.get("/version").json()["component"] == "extender"
    client.post("/filter", json=read_fixture("full-nodes/01-filter-burstable-checkout-api.json"))
    m = client.get("/metrics").text
    assert 'ballast_extender_requests_total{code="200",verb="filter"} 1.0' in m
    assert 'ballast_extender_nodes_rejected_total{metric="cpu_usage_avg_5m"} 1.0' in m
    assert "ballast_extender_request_duration_seconds_bucket" in m
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    spec = client.get("/openapi.json").json()
    ex = spec["paths"]["/filter"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert {"whole nodes", "names only"} <= set(ex)
    assert "ExtenderArgs" in spec["components"]["schemas"]


def test_openapi_examples_work(client: TestClient) -> None:
    """The examples on the docs page are real requests that get real answers."""
    spec = client.get("/openapi.json").json()
    for verb in ("filter", "prioritize"):
        for ex in spec["paths"][f"/{verb}"]["post"]["requestBody"]["content"]["application/json"][
            "examples"
        ].values():
            r = client.post(f"/{verb}", json=ex["value"])
            assert r.status_code == 200, r.text


def test_reload_keeps_last_good_policy(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    shutil.copy(POLICY_FILE, path)
    app = create_app(
        load_policy(path), policy_path=str(path), policy_poll_seconds=0, clock=lambda: CAPTURE_TIME
    )
    store = app.state.services.store
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    with TestClient(app) as c:
        path.write_text(path.read_text().replace("maxLimitPecent: 0.65", "maxLimitPecent: 6.5"))
        assert store.reload("test") is False
        # still filtering with the old limits
        assert set(c.post("/filter", json=body).json()["FailedNodes"]) == {HOT_NODE}
        ready = c.get("/readyz")
        assert ready.status_code == 503
        assert "maxLimitPecent" in ready.json()["policy"]["reloadError"]
        assert "ballast_policy_last_reload_ok 0.0" in c.get("/metrics").text
        # a good file raises the limit: the hot node now passes the 5m check but not the 1h one
        path.write_text(path.read_text().replace("maxLimitPecent: 6.5", "maxLimitPecent: 0.9"))
        assert store.reload_if_changed() is True
        assert c.get("/readyz").status_code == 200
        failed = c.post("/filter", json=body).json()["FailedNodes"]
        assert failed[HOT_NODE].startswith("load cpu_usage_max_avg_1h")
        assert c.get("/policy").json()["generation"] == 2


def test_captured_requests_ship_with_the_repo() -> None:
    """A clone on its own must carry the kube-scheduler requests its tests replay (nothing from outside)."""
    from ballast.testing.parts import ROOT
    from tests.conftest import FIXTURES, fixture_files

    assert FIXTURES.is_relative_to(ROOT)
    files = fixture_files()
    assert len(fixture_files("full-nodes")) >= 10 and len(fixture_files("node-names")) >= 10
    for f in files:
        body = json.loads(f.read_text())
        assert "Pod" in body or "PodName" in body, f.name


def test_the_fast_path_answers_as_the_routes_do() -> None:
    """kube-scheduler's verbs enter through the verb router (``ballast.extender.api.verb_router``); FastAPI's
    routes for the verbs (which a mounted app, with a root path, still goes through) give the same statuses,
    answers and counts."""
    bodies = [(f"/{verb_of(p)}", p.read_bytes()) for p in VERB_FIXTURES]
    bodies += [("/filter", b"{"), ("/prioritize", b"[]"), ("/preempt", b"{}"), ("/bind", b"{}")]
    bodies += [("/bind", b'{"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n"}')]
    answers = []
    for root in ("", "/mounted"):
        app = create_app(load_policy(POLICY_FILE), clock=lambda: CAPTURE_TIME)
        with TestClient(app, root_path=root) as c:
            got = [c.post(root + path, content=body) for path, body in bodies]
            counts = sorted(
                line
                for line in c.get(root + "/metrics").text.splitlines()
                if line.startswith("ballast_extender_requests_total")
            )
        answers.append(([(r.status_code, r.json()) for r in got], counts))
    assert answers[0] == answers[1]
    assert answers[0][1]  # requests were counted


def test_the_router_and_the_openapi_page_read_one_table_of_verbs() -> None:
    """Each verb is defined once (``ballast.extender.api.verbs.VERBS``): the verb router answers those paths,
    and the OpenAPI page lists those as the extender's verbs, in the table's order."""
    from ballast.extender.api.verbs import VERBS

    app = create_app(load_policy(POLICY_FILE))
    paths = [spec.path for spec in VERBS]
    assert list(app.verb_router.verbs) == paths == ["/filter", "/prioritize", "/preempt", "/bind"]
    documented = [
        path
        for path, ops in app.openapi()["paths"].items()
        if "extender verbs" in ops.get("post", {}).get("tags", ())
    ]
    assert documented == paths
