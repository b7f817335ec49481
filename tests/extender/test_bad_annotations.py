"""One bad annotation or object must never disable Ballast: it is "no information" for that node and metric.

Each test here reproduces a finding that disabled or broke the extender before the fix (a ``node_hot_value``
of ``1e308`` overflowed the score, stopped the node watch and made ``/nodes`` a 500; a timestamp in the far
future counted as fresh; an annotation nested 1000 levels deep answered ``Error: TypeError``).
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ballast.contract.annotations import MAX_FUTURE_SECONDS, format_load, read_sample
from ballast.extender.main import create_app
from ballast.extender.metrics import ExtenderMetrics
from ballast.kube.client import Kube, load_api_client
from ballast.model.nodestate import parse_node
from ballast.model.policy import Policy, load_policy
from ballast.testing.parts import POLICY_FILE, wait_for
from tests.conftest import CAPTURE_TIME, read_fixture
from tests.extender.test_cluster import HOT, IDLE, Clock, clean, fixture_nodes
from tests.fuzz_nodes import METRICS, STAMPS, VALUES, Harness, base_nodes
from tests.fuzz_nodes import run as fuzz

STAMP = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(CAPTURE_TIME))
CPU = "cpu_usage_avg_5m"


def value(cache, name: str) -> float | None:
    sample = cache.node(name).samples.get(CPU)
    return sample.value if sample is not None else None


def bad_count(metrics: ExtenderMetrics, metric: str) -> float:
    value = metrics.registry.get_sample_value("ballast_extender_bad_annotations_total", {"metric": metric})
    return value or 0.0


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("1e308,2026-11-22T07:39:00Z", "above"),
        ("inf,2026-11-22T07:39:00Z", "not a finite"),
        ("-0.5,2026-11-22T07:39:00Z", "negative"),
        ("0.5,2099-01-01T00:00:00Z", "future"),
        ("0.5,garbage", "timestamp"),
        ("abc", "expected"),
    ],
)
def test_values_that_cannot_be_a_ratio_are_bad_with_a_reason(raw: str, why: str) -> None:
    sample, reason = read_sample(raw, CAPTURE_TIME, cap=10.0)
    assert sample is None and reason is not None and why in reason


def test_a_timestamp_within_the_skew_allowance_is_accepted() -> None:
    ahead = format_load(0.5, CAPTURE_TIME + MAX_FUTURE_SECONDS - 5)
    sample, reason = read_sample(ahead, CAPTURE_TIME, cap=10.0)
    assert reason is None and sample is not None and sample.value == 0.5


def test_parse_node_keeps_the_reason_per_metric(policy: Policy) -> None:
    node = {
        "metadata": {
            "name": "n1",
            "annotations": {
                CPU: "1e308,2026-11-22T07:39:00Z",
                "mem_usage_avg_5m": "0.2,2026-11-22T07:39:00Z",
                "node_hot_value": "1e308,2026-11-22T07:39:00Z",
            },
        }
    }
    load = parse_node(node, policy, CAPTURE_TIME)
    assert CPU not in load.samples and "mem_usage_avg_5m" in load.samples
    assert load.hot is None
    assert set(load.bad) == {CPU, "node_hot_value"}


@pytest.fixture
def cluster(fake_kube, kubeconfig: Path):
    for n in fixture_nodes().values():
        fake_kube.add(clean(n) | {"kind": "Node"})
    kube = Kube(load_api_client(str(kubeconfig)), timeout=2.0)
    metrics = ExtenderMetrics()
    app = create_app(
        load_policy(POLICY_FILE), kube=kube, clock=Clock(CAPTURE_TIME), policy_poll_seconds=0, metrics=metrics
    )
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        yield client, app, metrics


def test_huge_hot_value_in_names_mode_disables_nothing(cluster, fake_kube) -> None:
    client, app, metrics = cluster
    cache = app.state.services.cache
    assert fake_kube.wait_for_watches(2)
    fake_kube.patch("nodes", IDLE, {"metadata": {"annotations": {"node_hot_value": f"1e308,{STAMP}"}}})
    wait_for(lambda: "node_hot_value" in cache.node(IDLE).bad, what="the bad hot value parsed")
    # The watch goes on: a later change to another node is still followed.
    other = next(n for n in fixture_nodes() if n not in (HOT, IDLE))
    fake_kube.patch("nodes", other, {"metadata": {"annotations": {CPU: f"0.99,{STAMP}"}}})
    wait_for(lambda: value(cache, other) == 0.99, what="the watch to follow another node")
    pod = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")["Pod"]
    names = list(fixture_nodes())
    r = client.post("/filter", json={"Pod": pod, "NodeNames": names})
    assert r.status_code == 200 and r.json()["Error"] == ""
    assert other in r.json()["FailedNodes"] and IDLE in r.json()["NodeNames"]
    r = client.post("/prioritize", json={"Pod": pod, "NodeNames": names})
    assert r.status_code == 200 and len(r.json()) == len(names)
    nodes = client.get("/nodes")
    assert nodes.status_code == 200
    idle = next(n for n in nodes.json()["nodes"] if n["name"] == IDLE)
    assert idle["hotValue"]["value"] is None and "above" in idle["hotValue"]["bad"]
    assert client.get(f"/nodes/{IDLE}").status_code == 200
    assert client.post("/explain", json={"Pod": pod}).status_code == 200
    assert bad_count(metrics, "node_hot_value") >= 1
    assert "ballast_extender_bad_annotations_total" in client.get("/metrics").text


def test_bad_load_value_is_shown_in_nodes(cluster, fake_kube) -> None:
    client, app, metrics = cluster
    cache = app.state.services.cache
    assert fake_kube.wait_for_watches(2)
    fake_kube.patch("nodes", IDLE, {"metadata": {"annotations": {CPU: "0.5,2099-01-01T00:00:00Z"}}})
    wait_for(lambda: CPU in cache.node(IDLE).bad, what="the future timestamp judged bad")
    view = client.get(f"/nodes/{IDLE}").json()
    cpu = next(m for m in view["metrics"] if m["metric"] == CPU)
    assert cpu["state"] == "bad" and "future" in cpu["reason"] and cpu["fresh"] is False
    assert bad_count(metrics, CPU) >= 1


def test_one_failing_object_does_not_stop_the_watch(cluster, fake_kube, monkeypatch) -> None:
    client, app, _ = cluster
    cache = app.state.services.cache
    import ballast.extender.cache as cache_module

    real = cache_module.parse_node

    def parse(node, policy, now=None):
        if node["metadata"]["name"] == HOT:
            raise RuntimeError("boom")
        return real(node, policy, now)

    monkeypatch.setattr(cache_module, "parse_node", parse)
    assert fake_kube.wait_for_watches(2)
    fake_kube.patch("nodes", HOT, {"metadata": {"annotations": {CPU: f"0.5,{STAMP}"}}})
    fake_kube.patch("nodes", IDLE, {"metadata": {"annotations": {CPU: f"0.77,{STAMP}"}}})
    wait_for(lambda: value(cache, IDLE) == 0.77, what="the event after the failing one")
    reflector = cache.reflectors[0]
    assert reflector.stats.object_errors >= 1
    assert client.get("/nodes").status_code == 200


def whole_node_body(annotations: dict) -> dict:
    full = copy.deepcopy(read_fixture("full-nodes/01-filter-burstable-checkout-api.json"))
    full["Nodes"]["items"][0]["metadata"]["annotations"].update(annotations)
    full["Nodes"]["items"][0]["metadata"]["resourceVersion"] = "bad-1"
    return full


def test_huge_hot_value_in_whole_node_mode() -> None:
    client = TestClient(create_app(load_policy(POLICY_FILE), clock=lambda: CAPTURE_TIME))
    body = whole_node_body({"node_hot_value": f"1e308,{STAMP}"})
    name = body["Nodes"]["items"][0]["metadata"]["name"]
    for verb in ("filter", "prioritize", "explain"):
        r = client.post(f"/{verb}", json=body)
        assert r.status_code == 200, (verb, r.text)
        if verb == "filter":
            assert r.json()["Error"] == ""
    r = client.get(f"/nodes/{name}")
    assert r.status_code == 200 and "above" in r.json()["hotValue"]["bad"]


def test_deeply_nested_annotation_value_is_bad_input() -> None:
    client = TestClient(create_app(load_policy(POLICY_FILE), clock=lambda: CAPTURE_TIME))
    body = json.dumps(whole_node_body({"deep": "NESTED"}))
    body = body.replace('"NESTED"', "[" * 1000 + '"x"' + "]" * 1000)
    for verb in ("filter", "prioritize", "explain"):
        r = client.post(f"/{verb}", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400, (verb, r.text)
        assert r.json()["field"] == "Nodes.items[0].metadata.annotations.deep"


_HARNESS: list[Harness] = []


def harness() -> Harness:
    if not _HARNESS:
        _HARNESS.append(Harness(base_nodes()))
    return _HARNESS[0]


annotation_text = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda v, t: f"{v},{t}",
        st.one_of(
            st.sampled_from(VALUES),
            st.floats(allow_nan=True, allow_infinity=True).map(repr),
            st.text(max_size=12),
        ),
        st.one_of(st.sampled_from(STAMPS), st.text(max_size=30)),
    ),
)


@given(
    name=st.text(min_size=1, max_size=30),
    annotations=st.dictionaries(st.one_of(st.sampled_from(METRICS), st.text(max_size=20)), annotation_text),
    event=st.sampled_from(("ADDED", "MODIFIED", "DELETED")),
    seed=st.integers(0, 1000),
)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_arbitrary_annotations_never_raise(name: str, annotations: dict, event: str, seed: int) -> None:
    """Arbitrary annotation strings on an arbitrary node: parse, the board, filter, prioritize, preempt,
    /nodes and /explain (names and whole-node mode) answer without an exception or a logged error."""
    h = harness()
    node = {
        "metadata": {"name": name, "resourceVersion": str(seed), "annotations": annotations},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }
    parse_node(node, load_policy(POLICY_FILE), CAPTURE_TIME)
    h.apply(event, node)
    h.verbs(random.Random(seed), [node])


def test_fuzz_mutated_nodes_through_cache_and_verbs() -> None:
    """A short fixed-seed run of the fuzz (``python -m tests.fuzz_nodes`` runs the 10 000)."""
    done = fuzz(1000, seed=12)
    assert done["iterations"] == 1000 and done["requests"] == 1000
