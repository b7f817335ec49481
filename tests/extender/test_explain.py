"""/explain answers what filter and prioritize answer for the same body, and writes nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ballast.extender.main import create_app
from ballast.extender.numa.crane_bind import MISSING
from ballast.extender.remembered import REMEMBER_CAP, REMEMBER_SECONDS, RememberedNodes
from ballast.kube.client import Kube, load_api_client
from ballast.model.nodestate import NodeState
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE
from tests.conftest import CAPTURE_TIME, fixture_files, read_fixture
from tests.extender.test_cluster import clean, fixture_nodes

BODIES = [p for p in fixture_files() if p.stem.split("-")[1] in ("filter", "prioritize")]
FULL_FILES = [p for p in fixture_files("full-nodes") if p.stem.split("-")[1] in ("filter", "prioritize")]


@pytest.fixture
def standalone() -> Iterator[TestClient]:
    app = create_app(load_policy(POLICY_FILE), clock=lambda: CAPTURE_TIME)
    with TestClient(app) as c:
        yield c


@pytest.fixture
def cached(fake_kube, kubeconfig: Path) -> Iterator[TestClient]:
    """The extender with the fake cluster's watch-driven cache holding the captured nodes."""
    for n in fixture_nodes().values():
        fake_kube.add(clean(n) | {"kind": "Node"})
    kube = Kube(load_api_client(str(kubeconfig)), timeout=2.0)
    app = create_app(load_policy(POLICY_FILE), kube=kube, clock=lambda: CAPTURE_TIME, policy_poll_seconds=0)
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        yield client


def names_of(body: dict) -> list[str]:
    if body.get("Nodes") is not None:
        return [n["metadata"]["name"] for n in body["Nodes"]["items"]]
    return list(body.get("NodeNames") or [])


def verbs_answer(client: TestClient, body: dict) -> tuple[dict[str, str | None], dict[str, int]]:
    """Per node: None when filter passes it, else the reason; and prioritize's score."""
    f = client.post("/filter", json=body).json()
    assert f["Error"] == ""
    passing = set(f["NodeNames"] or []) | {n["metadata"]["name"] for n in (f["Nodes"] or {}).get("items", [])}
    verdicts = {n: None if n in passing else f["FailedNodes"][n] for n in names_of(body)}
    scores = {e["Host"]: e["Score"] for e in client.post("/prioritize", json=body).json()}
    return verdicts, scores


def explain_answer(client: TestClient, body: dict) -> tuple[dict[str, str | None], dict[str, int]]:
    r = client.post("/explain", json=body)
    assert r.status_code == 200, r.text
    views = r.json()["nodes"]
    verdicts = {v["name"]: None if v["filter"]["passes"] else v["filter"]["reason"] for v in views}
    scores = {v["name"]: v["score"].get("scoreWithNuma", v["score"]["score"]) for v in views}
    return verdicts, scores


def assert_agrees(client: TestClient, body: dict) -> None:
    explained = explain_answer(client, body)
    assert explained == verbs_answer(client, body)


def remember_every_node(client: TestClient) -> None:
    """What a standalone extender has seen before: whole-node requests for every captured pod."""
    for path in FULL_FILES:
        assert client.post(f"/{path.stem.split('-')[1]}", content=path.read_bytes()).status_code == 200


@pytest.mark.parametrize("path", BODIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_explain_agrees_with_the_verbs_standalone(standalone: TestClient, path: Path) -> None:
    remember_every_node(standalone)  # the contradiction: /explain used these in names mode, filter does not
    assert_agrees(standalone, json.loads(path.read_text()))


def test_explain_agrees_with_the_verbs_with_the_cluster_cache(cached: TestClient) -> None:
    for path in BODIES:
        assert_agrees(cached, json.loads(path.read_text()))


def test_names_mode_without_cache_explains_no_information(standalone: TestClient) -> None:
    remember_every_node(standalone)
    body = read_fixture("node-names/01-filter-burstable-checkout-api.json")
    views = standalone.post("/explain", json=body).json()["nodes"]
    assert views and all(v["known"] is False and v["filter"]["passes"] for v in views)
    assert all("no node cache" in v["note"] for v in views)


POD = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")["Pod"]
NODES = list(fixture_nodes().values())


@st.composite
def bodies(draw) -> dict:
    """A whole-node or names body over the captured nodes with drawn loads and a drawn pod size."""
    chosen = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=len(NODES), unique_by=id))
    nodes = []
    for i, node in enumerate(copy.deepcopy(chosen)):
        ann = node["metadata"].setdefault("annotations", {})
        for key in ("cpu_usage_avg_5m", "mem_usage_avg_5m"):
            if key in ann and draw(st.booleans()):
                value = draw(st.floats(0, 1, allow_nan=False))
                ann[key] = f"{value:.5f},{ann[key].split(',', 1)[1]}"
        node["metadata"]["resourceVersion"] = f"gen-{draw(st.integers(0, 10**9))}-{i}"
        nodes.append(node)
    pod = copy.deepcopy(POD)
    cpu = draw(st.integers(0, 8000))
    pod["metadata"]["uid"] = f"uid-{draw(st.integers(0, 50))}"
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = f"{cpu}m"
    if draw(st.booleans()):
        return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies())
def test_explain_agrees_on_generated_bodies(standalone: TestClient, body: dict) -> None:
    assert_agrees(standalone, body)


def test_explain_writes_nothing(standalone: TestClient) -> None:
    ext = standalone.app.state.services.extender
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    uid = body["Pod"]["metadata"]["uid"]
    for _ in range(2):
        assert standalone.post("/explain", json=body).status_code == 200
    assert len(ext._parsed) == 0, "explain remembered nodes"
    assert ext.ledger.known(uid) is None, "explain held an estimate"
    assert standalone.get("/nodes").json()["count"] == 0
    one = copy.deepcopy(body)
    # a single passing node: filter would hold the pod's estimate there
    items = one["Nodes"]["items"]
    one["Nodes"]["items"] = [n for n in items if n["metadata"]["name"].startswith("ip-10-0-40-140")]
    assert standalone.post("/explain", json=one).status_code == 200
    assert ext.ledger.known(uid) is None
    standalone.post("/filter", json=one)
    assert ext.ledger.known(uid) is not None and len(ext._parsed) == 1  # the verbs do write


def test_explain_writes_nothing_to_the_cluster_cache(cached: TestClient) -> None:
    ext = cached.app.state.services.extender
    body = read_fixture("node-names/01-filter-burstable-checkout-api.json")
    body["NodeNames"] = [n for n in body["NodeNames"] if n.startswith("ip-10-0-40-140")]
    uid = body["Pod"]["metadata"]["uid"]
    assert cached.post("/explain", json=body).status_code == 200
    assert ext.ledger.known(uid) is None and ext.numa.seen(uid) is MISSING
    cached.post("/filter", json=body)
    assert ext.ledger.known(uid) is not None  # the verbs do write
    # what filter learns about the pod's NUMA need is only worked out once some node pins CPUs
    assert ext.numa.seen(uid) is MISSING and not ext.source.pins_cpus()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_standalone_nodes_are_remembered_for_a_while_and_say_so() -> None:
    clock = Clock(CAPTURE_TIME)
    app = create_app(load_policy(POLICY_FILE), clock=clock)
    with TestClient(app) as client:
        remember_every_node(client)
        nodes = client.get("/nodes").json()
        assert nodes["source"] == "requests" and nodes["count"] == len(NODES)
        assert nodes["remembered"] == {
            "from": "whole-node requests",
            "ttlSeconds": REMEMBER_SECONDS,
            "cap": REMEMBER_CAP,
        }
        clock.now += REMEMBER_SECONDS + 1
        assert client.get("/nodes").json()["count"] == 0
        # forgotten nodes come back with the next request that carries them; the board forgot them too
        body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
        assert_agrees(client, body)
        assert client.get("/nodes").json()["count"] == len(body["Nodes"]["items"])
        board = app.state.services.extender.request_board
        assert set(board.derived) == {n["metadata"]["name"] for n in body["Nodes"]["items"]}


def test_the_remembered_nodes_are_capped() -> None:
    nodes = RememberedNodes(3, 60, lambda: 0.0)
    for name in "abcde":
        nodes[name] = NodeState(name)
    assert len(nodes) == 3 and sorted(nodes.drain_forgotten()) == ["a", "b"]
    assert nodes.drain_forgotten() == []


def test_a_fresh_hot_value_of_zero_shows_as_fresh(standalone: TestClient) -> None:
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    node = next(n for n in body["Nodes"]["items"] if n["metadata"]["name"].startswith("ip-10-0-40-140"))
    node["metadata"]["annotations"]["node_hot_value"] = "0,2026-11-22T07:39:00Z"  # 30 s before the clock
    body["Nodes"]["items"] = [node]
    hot = standalone.post("/explain", json=body).json()["nodes"][0]["hotValue"]
    assert hot == {"value": 0, "ageSeconds": 30.0, "fresh": True}
    node["metadata"]["annotations"]["node_hot_value"] = "0,2026-11-22T07:00:00Z"
    node["metadata"]["resourceVersion"] += "-old"
    assert standalone.post("/explain", json=body).json()["nodes"][0]["hotValue"]["fresh"] is False


def test_names_mode_without_cache_favours_no_node(standalone: TestClient) -> None:
    """No node was scored, so none is favoured (every name passes only for want of information)."""
    body = read_fixture("node-names/01-filter-burstable-checkout-api.json")
    answer = standalone.post("/explain", json=body).json()
    assert answer["favoured"] is None
    assert answer["nodes"] and all(v["score"]["score"] == 0 for v in answer["nodes"])


def test_a_favoured_node_is_one_that_was_scored(cached: TestClient) -> None:
    body = read_fixture("node-names/01-filter-burstable-checkout-api.json")
    body["NodeNames"] = ["not-in-the-cache", *body["NodeNames"]]
    answer = cached.post("/explain", json=body).json()
    views = {v["name"]: v for v in answer["nodes"]}
    favoured = views[answer["favoured"]]
    assert favoured["known"] and favoured["filter"]["passes"], favoured


def _pod(namespace: str | None) -> dict:
    pod = copy.deepcopy(POD)
    pod["metadata"].pop("namespace", None)
    if namespace is not None:
        pod["metadata"]["namespace"] = namespace
    pod["metadata"]["name"] = "w"
    return pod


def test_pods_are_named_namespace_slash_name_or_name_alone(standalone: TestClient) -> None:
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    body["Pod"] = _pod(None)
    answer = standalone.post("/explain", json=body).json()
    assert answer["pod"] == "w"
    assert {v["estimation"]["incoming"]["pod"] for v in answer["nodes"]} == {"w"}
    body["Pod"] = _pod("shop")
    assert standalone.post("/explain", json=body).json()["pod"] == "shop/w"


def test_nodes_judge_with_a_placeholder_that_has_no_name(standalone: TestClient) -> None:
    """/nodes judges with a pod that requests nothing; it shows as no pod, not as ``"/"``."""
    remember_every_node(standalone)
    nodes = standalone.get("/nodes").json()["nodes"]
    one = standalone.get(f"/nodes/{nodes[0]['name']}").json()
    for view in (*nodes, one):
        assert view["estimation"]["incoming"]["pod"] is None


def test_projected_load_is_shown_without_float_noise(standalone: TestClient) -> None:
    remember_every_node(standalone)
    nodes = standalone.get("/nodes").json()["nodes"]
    one = standalone.get(f"/nodes/{nodes[0]['name']}").json()
    body = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")
    explained = standalone.post("/explain", json=body).json()["nodes"]
    shown = [v["score"]["projectedLoad"] for v in (*nodes, one, *explained)]
    assert any(x is not None for x in shown)
    for x in shown:
        assert x is None or x == round(x, 6), x
