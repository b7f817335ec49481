"""No annotation, label or policy value stops a program: any JSON value, of any size, is a value or "bad".

The finding that started this: ``ballast.io/load-thresholds: {"cpu_usage_avg_5m": 1000…0}`` (an integer of
310 digits; ``math.isfinite(int)`` raises ``OverflowError``) made every whole-node ``/filter`` answer
``Error``, dropped the node from the names-mode cache (so it passed with no load check and ``/nodes/evil``
was a 404), failed the rebalancer's node watch at every relist, and ``high: 10**400`` in the policy was a
traceback at start-up. The tests below pin each of those, then a property test sends arbitrary JSON into
every annotation and label Ballast reads, through the extender's verbs in both modes, the rebalancer's
caches and the annotator's reader.
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ballast.annotator.plan import PatchPlanner
from ballast.annotator.sources import NodeIndex
from ballast.cli import main
from ballast.contract.annotations import HOT_VALUE_KEY, format_load
from ballast.contract.seal import SEAL_ANNOTATION
from ballast.contract.topology_result import AWARENESS_KEY, CPU_POLICY_ANNOTATION, TOPOLOGY_RESULT_ANNOTATION
from ballast.extender.main import create_app
from ballast.kube.client import Kube
from ballast.model.nodestate import parse_node
from ballast.model.policy import PolicyError, parse_policy
from ballast.model.policy_store import PolicyStore
from ballast.model.thresholds import THRESHOLDS_ANNOTATION
from ballast.rebalancer.cache import NodeCache, PodCache
from ballast.testing.parts import POLICY_FILE
from tests.conftest import CAPTURE_TIME, read_fixture

CPU = "cpu_usage_avg_5m"
HUGE = 10**309
"""An integer of 310 digits: no float holds it."""
FRESH = format_load(0.95, CAPTURE_TIME - 30).split(",")[1]


def policy_text() -> str:
    """The shipped policy with a node pool (labels matter), prod limits and a rebalance section."""
    doc = yaml.safe_load(POLICY_FILE.read_text())
    doc["spec"]["nodePools"] = [
        {
            "name": "batch",
            "nodeSelector": {"matchLabels": {"pool": "batch"}},
            "predicate": [{"name": CPU, "maxLimitPecent": 0.85}],
        }
    ]
    doc["spec"]["prod"] = {"priorityThreshold": 1000, "predicate": [{"name": CPU, "maxLimitPecent": 0.5}]}
    doc["spec"]["rebalance"] = {"thresholds": [{"name": CPU, "high": 0.8, "low": 0.45}]}
    return yaml.safe_dump(doc)


POLICY = parse_policy(policy_text())


def node(name: str, cpu: float, annotations: dict[str, Any] | None = None, labels: Any = None) -> dict:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": labels if labels is not None else {"kubernetes.io/hostname": name},
            "annotations": {CPU: format_load(cpu, CAPTURE_TIME - 30), **(annotations or {})},
        },
        "spec": {},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


EVIL = {THRESHOLDS_ANNOTATION: f'{{"{CPU}": {HUGE}}}'}


def nodes_with_evil() -> list[dict]:
    return [node("evil", 0.95, EVIL), node("cool", 0.20), node("warm", 0.70)]


def pod_body(priority: int = 0) -> dict:
    pod = copy.deepcopy(read_fixture("full-nodes/01-filter-burstable-checkout-api.json")["Pod"])
    pod["spec"]["priority"] = priority
    return pod


def whole_app() -> TestClient:
    return TestClient(create_app(POLICY, clock=lambda: CAPTURE_TIME, policy_poll_seconds=0))


def names_app(nodes: list[dict]) -> TestClient:
    app = create_app(POLICY, kube=Kube(None), clock=lambda: CAPTURE_TIME, policy_poll_seconds=0)
    app.state.services.cache.reflectors[0].handler.replace(copy.deepcopy(nodes), "1")
    return TestClient(app)  # no lifespan: the reflectors never start


# -- the 310-digit threshold ---------------------------------------------------------------------


def test_a_310_digit_threshold_is_bad_and_the_pool_or_global_limits_hold() -> None:
    load = parse_node(node("evil", 0.95, EVIL), POLICY, CAPTURE_TIME)
    assert "expected a number in [0, 1]" in load.bad[THRESHOLDS_ANNOTATION]
    assert load.limits is POLICY.limits and CPU in load.samples  # the load is still read
    pooled = parse_node(node("evil", 0.95, EVIL, {"pool": "batch"}), POLICY, CAPTURE_TIME)
    assert pooled.limits is POLICY.pool_limits["batch"]


def test_whole_node_filter_with_one_bad_node_still_filters_the_others() -> None:
    client = whole_app()
    body = {"Pod": pod_body(), "Nodes": {"items": nodes_with_evil()}}
    r = client.post("/filter", json=body)
    assert r.status_code == 200 and r.json()["Error"] == "", r.text
    passing = [n["metadata"]["name"] for n in r.json()["Nodes"]["items"]]
    assert passing == ["cool"]  # warm is above the global 0.65, evil too: its limits fail safe
    assert set(r.json()["FailedNodes"]) == {"evil", "warm"}
    r = client.post("/prioritize", json=body)
    assert r.status_code == 200 and len(r.json()) == 3
    view = client.get("/nodes/evil")
    assert view.status_code == 200 and THRESHOLDS_ANNOTATION in json.dumps(view.json())


def test_names_mode_keeps_the_bad_node_and_checks_its_load() -> None:
    client = names_app(nodes_with_evil())
    body = {"Pod": pod_body(), "NodeNames": ["evil", "cool", "warm"]}
    r = client.post("/filter", json=body)
    assert r.status_code == 200 and r.json()["Error"] == "", r.text
    assert r.json()["NodeNames"] == ["cool"] and set(r.json()["FailedNodes"]) == {"evil", "warm"}
    view = client.get("/nodes/evil")
    assert view.status_code == 200, view.text
    assert "expected a number in [0, 1]" in json.dumps(view.json())


def test_the_rebalancer_caches_take_the_bad_node_and_a_relist_goes_through() -> None:
    nodes = NodeCache(lambda: POLICY, clock=lambda: CAPTURE_TIME)
    nodes.replace(iter(nodes_with_evil()), "1")
    facts = nodes.snapshot()
    assert set(facts) == {"evil", "cool", "warm"}
    assert THRESHOLDS_ANNOTATION in facts["evil"].load.bad
    assert facts["evil"].load.samples[CPU].value == 0.95
    nodes.apply("MODIFIED", node("cool", 0.3, EVIL))
    assert nodes.snapshot()["cool"].load.samples[CPU].value == 0.3


def test_the_rebalancer_caches_leave_out_only_what_is_not_an_object() -> None:
    nodes, pods = NodeCache(lambda: POLICY, clock=lambda: CAPTURE_TIME), PodCache(lambda: POLICY)
    nodes.replace([[], {"metadata": []}, node("cool", 0.2)], "1")  # type: ignore[list-item]
    assert set(nodes.snapshot()) == {"cool"} and nodes.unreadable == 2
    good = {"metadata": {"uid": "u1", "name": "p", "namespace": "d"}, "spec": {"nodeName": "cool"}}
    odd = {"metadata": {"uid": "u2", "name": "q", "namespace": "d"}, "spec": {"nodeName": "cool",
           "containers": [{"resources": {"requests": {"cpu": HUGE}}}], "tolerations": 5}}  # fmt: skip
    pods.replace([7, good, odd], "1")  # type: ignore[list-item]
    assert {p.uid for p in pods.on("cool")} == {"u1", "u2"} and pods.unreadable == 1
    assert next(p for p in pods.on("cool") if p.uid == "u2").skip is not None


# -- the policy -------------------------------------------------------------------------------------


def _policy_with(tmp_path: Path, change) -> Path:
    doc = yaml.safe_load(policy_text())
    change(doc["spec"])
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("program", "change", "field"),
    [
        ("rebalancer", lambda s: s["rebalance"]["thresholds"][0].update(high=10**400),
         "spec.rebalance.thresholds[0].high"),
        ("rebalancer", lambda s: s["rebalance"].update(consecutiveAbnormal=10**400),
         "spec.rebalance.consecutiveAbnormal"),
        ("rebalancer", lambda s: s["rebalance"].update(limits={"perCycle": 10**30}),
         "spec.rebalance.limits.perCycle"),
        ("extender", lambda s: s["predicate"][0].update(maxLimitPecent=10**400),
         "spec.predicate[0].maxLimitPecent"),
        ("extender", lambda s: s["priority"][0].update(weight=10**400), "spec.priority[0].weight"),
        ("extender", lambda s: s["syncPolicy"][0].update(period="9" * 400 + "h"),
         "spec.syncPolicy[0].period"),
        ("extender", lambda s: s["hotValue"][0].update(count=10**400), "spec.hotValue[0].count"),
        ("extender", lambda s: s.update(estimation={"defaultCpu": "1e400"}), "spec.estimation.defaultCpu"),
        ("extender", lambda s: s["nodePools"][0]["predicate"][0].update(maxLimitPecent=-(10**400)),
         "spec.nodePools[0].predicate[0].maxLimitPecent"),
        ("annotator", lambda s: s["predicate"][0].update(maxLimitPecent=float("nan")),
         "spec.predicate[0].maxLimitPecent"),
    ],
)  # fmt: skip
def test_a_huge_number_in_the_policy_is_a_refused_policy_with_its_field(
    tmp_path: Path, capsys, program: str, change, field: str
) -> None:
    path = _policy_with(tmp_path, change)
    extra = {"rebalancer": ["--once"], "annotator": ["--once", "--prometheus-url", "http://127.0.0.1:1"]}
    assert main([program, "--policy", str(path), *extra.get(program, [])]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err, err


def test_a_reload_with_a_huge_number_keeps_the_last_good_policy(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text())
    store = PolicyStore(parse_policy(path.read_text(), str(path)), str(path))
    good = store.current
    doc = yaml.safe_load(policy_text())
    doc["spec"]["predicate"][0]["maxLimitPecent"] = 10**400
    path.write_text(yaml.safe_dump(doc))
    assert store.reload("test") is False
    assert store.current is good and "spec.predicate[0].maxLimitPecent" in store.failure.error


# -- any JSON value anywhere ------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.integers(max_value=-(10**300), min_value=-(10**400)),
    st.floats(),
    st.text(max_size=20),
)


def _nested(leaves: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=12,
    )


json_values = _nested(scalars)
"""Any JSON value, NaN and the infinities included (Python's json writes them; they are no JSON)."""
strict_json_values = _nested(scalars.filter(lambda v: not isinstance(v, float) or math.isfinite(v)))
"""Any value a JSON request body can carry."""


def _json_text(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


STAMPS = st.sampled_from(
    [FRESH, "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2026-11-22T07:39:00", ""]
)
deep = st.integers(1, 5000).map(lambda n: "[" * n + "]" * n)
annotation_text = st.one_of(
    json_values.map(_json_text),  # what kubectl annotate of a JSON value gives
    st.text(max_size=40),
    st.builds(lambda v, t: f"{_json_text(v)},{t}", scalars, STAMPS),  # "<value>,<stamp>" of any value
    st.builds(lambda v: _json_text({CPU: v}), json_values),  # a thresholds object with any limit
    deep,
)
NODE_KEYS = (*POLICY.sync_periods, HOT_VALUE_KEY, THRESHOLDS_ANNOTATION, "ballast.io/load-source")
POD_KEYS = (
    AWARENESS_KEY,
    CPU_POLICY_ANNOTATION,
    TOPOLOGY_RESULT_ANNOTATION,
    SEAL_ANNOTATION,
    "ballast.io/evict",
    "kubernetes.io/config.mirror",
)
zone_lists = st.lists(
    st.fixed_dictionaries(
        {"name": json_values, "type": json_values},
        optional={
            "resources": st.fixed_dictionaries(
                {"capacity": st.dictionaries(st.sampled_from(["cpu", "memory"]), json_values)}
            )
        },
    ),
    max_size=3,
).map(_json_text)


huge = st.integers(min_value=10**300, max_value=10**400) | st.integers(
    max_value=-(10**300), min_value=-(10**400)
)
thresholds_text = st.dictionaries(
    st.sampled_from(sorted(POLICY.sync_periods)) | st.text(max_size=8),
    huge | json_values,
    min_size=1,
    max_size=3,
).map(_json_text)
SPECIAL = {THRESHOLDS_ANNOTATION: thresholds_text}


def _annotations(keys: tuple[str, ...], extra: st.SearchStrategy) -> st.SearchStrategy:
    """Each key present or not (half the time), with any text, or the shape that key expects."""
    return st.fixed_dictionaries(
        {}, optional={k: st.one_of(annotation_text, SPECIAL.get(k, extra)) for k in keys}
    )


node_annotations = _annotations(NODE_KEYS, st.builds(lambda v, t: f"{v},{t}", huge, STAMPS))
pod_annotations = _annotations(POD_KEYS, zone_lists)
labels = st.fixed_dictionaries({}, optional={k: annotation_text for k in ("pool", "zone")})


class Programs:
    """Each program's reader of nodes and pods, built once (hypothesis calls the test many times)."""

    def __init__(self) -> None:
        base = [node("cool", 0.20), node("warm", 0.70)]
        self.names_app = create_app(
            POLICY, kube=Kube(None), clock=lambda: CAPTURE_TIME, policy_poll_seconds=0
        )
        self.cache = self.names_app.state.services.cache
        self.cache.reflectors[0].handler.replace(copy.deepcopy(base), "1")
        self.names = TestClient(self.names_app)
        self.whole = whole_app()
        self.base = base
        self.rebalancer_nodes = NodeCache(lambda: POLICY, clock=lambda: CAPTURE_TIME)
        self.rebalancer_pods = PodCache(lambda: POLICY)
        self.annotator = NodeIndex([*POLICY.metrics, HOT_VALUE_KEY])
        self.planner = PatchPlanner(POLICY.sync_periods, POLICY.sync_periods, 60.0)


_PROGRAMS: list[Programs] = []


def programs() -> Programs:
    if not _PROGRAMS:
        _PROGRAMS.append(Programs())
    return _PROGRAMS[0]


def _ok_filter(r: Any, what: str, names: set[str]) -> None:
    assert r.status_code == 200, (what, r.status_code, r.text[:300])
    out = r.json()
    assert out["Error"] == "", (what, out["Error"])
    passing = set(
        out.get("NodeNames") or [n["metadata"]["name"] for n in (out.get("Nodes") or {}).get("items") or []]
    )
    assert passing | set(out["FailedNodes"]) | set(out.get("FailedAndUnresolvableNodes") or {}) == names, what
    assert "cool" in passing, (what, out)  # the good node is judged as ever


@given(node_ann=node_annotations, node_labels=labels, pod_ann=pod_annotations, pod_labels=labels,
       priority=st.sampled_from([0, 1000]))  # fmt: skip
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_json_in_any_annotation_or_label_is_a_value_or_bad_in_every_program(
    node_ann: dict[str, str], node_labels: dict[str, str], pod_ann: dict[str, str],
    pod_labels: dict[str, str], priority: int,
) -> None:  # fmt: skip
    p = programs()
    bad = node("odd", 0.5, node_ann, node_labels)
    bad["metadata"]["annotations"] = node_ann  # whatever the load annotation was, it is this now
    pod = pod_body(priority)
    pod["metadata"] = {**pod["metadata"], "uid": "uid-odd-pod", "annotations": pod_ann, "labels": pod_labels}
    pod["spec"] = {**pod["spec"], "nodeName": "odd"}
    pod["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True",
                                                         "lastTransitionTime": FRESH}]}  # fmt: skip
    names = {"odd", "cool", "warm"}
    # the extender, names mode: the watch handlers, then every verb and page
    p.cache.reflectors[0].handler.apply("MODIFIED", copy.deepcopy(bad))
    p.cache.reflectors[1].handler.apply("MODIFIED", copy.deepcopy(pod))
    assert p.cache.node("odd") is not None
    body = {"Pod": pod, "NodeNames": sorted(names)}
    _ok_filter(p.names.post("/filter", json=body), "names filter", names)
    r = p.names.post("/prioritize", json=body)
    assert r.status_code == 200 and len(r.json()) == 3, r.text[:300]
    assert p.names.get("/nodes/odd").status_code == 200
    assert p.names.get("/nodes").status_code == 200
    assert p.names.post("/explain", json=body).status_code == 200
    # the extender, whole-node mode (what kube-scheduler sends: string values, as above)
    whole = {"Pod": pod, "Nodes": {"items": [copy.deepcopy(bad), *copy.deepcopy(p.base)]}}
    _ok_filter(p.whole.post("/filter", json=whole), "whole filter", names)
    r = p.whole.post("/prioritize", json=whole)
    assert r.status_code == 200 and len(r.json()) == 3, r.text[:300]
    assert p.whole.post("/explain", json=whole).status_code == 200
    # the rebalancer's caches: a relist and a watch event
    p.rebalancer_nodes.replace(iter([copy.deepcopy(bad), *copy.deepcopy(p.base)]), "1")
    p.rebalancer_nodes.apply("MODIFIED", copy.deepcopy(bad))
    assert set(p.rebalancer_nodes.snapshot()) == names
    p.rebalancer_pods.replace(iter([copy.deepcopy(pod)]), "1")
    p.rebalancer_pods.apply("MODIFIED", copy.deepcopy(pod))
    assert [f.uid for f in p.rebalancer_pods.on("odd")] == ["uid-odd-pod"]
    # the annotator's reader: its node index and the patch it would plan from what is there
    p.annotator.replace(iter([copy.deepcopy(bad)]), "1")
    p.annotator.apply("MODIFIED", copy.deepcopy(bad))
    info = p.annotator.get("odd")
    assert info is not None
    p.planner.plan("odd", info.annotations, {CPU: 0.5}, 3, time.time())


@given(value=strict_json_values)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_json_value_as_an_annotation_in_a_whole_node_request_is_an_answer(value: Any) -> None:
    """kube-scheduler sends strings; a caller that sends any other JSON gets an answer too (a 400 naming
    the field, or the node judged), never an ``Error`` or a 500."""
    p = programs()
    bad = node("odd", 0.5, {THRESHOLDS_ANNOTATION: value, CPU: value, HOT_VALUE_KEY: value})
    whole = {"Pod": pod_body(), "Nodes": {"items": [bad, *copy.deepcopy(p.base)]}}
    r = p.whole.post("/filter", json=whole)
    if r.status_code == 400:
        assert "field" in r.json(), r.text[:300]
    else:
        _ok_filter(r, "whole filter", {"odd", "cool", "warm"})


@given(
    value=json_values, where=st.sampled_from(["predicate", "priority", "rebalance", "hotValue", "estimation"])
)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_json_value_in_the_policy_is_a_policy_or_a_refusal(value: Any, where: str) -> None:
    from ballast.model.rebalance_policy import rebalance_settings

    doc = yaml.safe_load(policy_text())
    spec = doc["spec"]
    target = {
        "predicate": lambda: spec["predicate"][0].update(maxLimitPecent=value),
        "priority": lambda: spec["priority"][0].update(weight=value),
        "rebalance": lambda: spec["rebalance"]["thresholds"][0].update(high=value),
        "hotValue": lambda: spec["hotValue"][0].update(count=value),
        "estimation": lambda: spec.update(estimation={"cpuFactor": value, "defaultCpu": value}),
    }
    target[where]()
    try:
        policy = parse_policy(yaml.safe_dump(doc))
        rebalance_settings(policy)
        json.dumps(policy.to_json())
    except PolicyError as exc:
        assert all(path.startswith("spec.") for path, _ in exc.problems), exc.problems
