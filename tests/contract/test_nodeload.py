"""The NodeLoad contract: what the agent renders, readers parse back; any JSON value parses without an
exception; the CRD manifest's coordinates are the module's."""

from __future__ import annotations

from fractions import Fraction

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ballast.contract.nodeload import (
    API_VERSION,
    GROUP,
    KIND,
    NODELOAD_PATH,
    PLURAL,
    VERSION,
    NodeLoadStatus,
    PodUsage,
    new_object,
    parse_status,
    render_status,
)
from ballast.testing.parts import ROOT

CRD_FILE = ROOT / "scheduler_config" / "crd-nodeload.yaml"

STATUS = NodeLoadStatus(
    update_time=1_764_100_800.0,
    window=300.0,
    node_cpu=3.2,
    node_memory=12 * 2**30,
    pods=(PodUsage("shop", "web-1", "6f0c", 0.45, 300 * 2**20),),
    node_metrics={"cpu_usage_avg_5m": 0.4, "cpu_usage_p95_5m": 0.875},
)


def test_the_contract_example_renders_as_documented() -> None:
    assert render_status(STATUS) == {
        "updateTime": "2025-11-25T20:00:00Z",
        "window": "5m",
        "node": {
            "cpu": "3200m",
            "memory": "12Gi",
            "metrics": {"cpu_usage_avg_5m": 0.4, "cpu_usage_p95_5m": 0.875},
        },
        "pods": [{"namespace": "shop", "name": "web-1", "uid": "6f0c", "cpu": "450m", "memory": "300Mi"}],
    }


def test_what_the_agent_renders_the_reader_parses_back() -> None:
    assert parse_status({"status": render_status(STATUS)}) == STATUS


def test_a_bad_pod_entry_is_dropped_and_the_rest_kept() -> None:
    status = render_status(STATUS)
    status["pods"].append({"namespace": "shop", "name": "web-2", "uid": "x", "cpu": "lots", "memory": "1Mi"})
    parsed = parse_status({"status": status})
    assert parsed is not None and [p.name for p in parsed.pods] == ["web-1"]


def test_a_bad_metric_entry_is_dropped_and_the_rest_kept() -> None:
    status = render_status(STATUS)
    metrics = status["node"]["metrics"]
    metrics.update({"above": 1.5, "nan": float("nan"), "text": "0.5", "flag": True, "x" * 64: 0.5})
    parsed = parse_status({"status": status})
    assert parsed is not None and parsed.node_metrics == STATUS.node_metrics
    status["node"]["metrics"] = "not an object"
    parsed = parse_status({"status": status})
    assert parsed is not None and parsed.node_metrics == {} and parsed.node_cpu == STATUS.node_cpu


def test_a_status_without_metrics_parses_as_one_that_measured_none() -> None:
    status = render_status(STATUS)
    del status["node"]["metrics"]
    parsed = parse_status({"status": status})
    assert parsed is not None and parsed.node_metrics == {}


def test_the_crd_schema_admits_what_the_agent_renders() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "node"
    ]
    metrics = node["properties"]["metrics"]
    assert metrics["additionalProperties"] == {"type": "number", "minimum": 0, "maximum": 1}
    assert set(render_status(STATUS)["node"]) <= set(node["properties"])


PRESSED = PodUsage("shop", "batch-1", "7a1d", 0.5, 64 * 2**20, {"cpu": 0.46, "memory": 0.0, "io": 0.01}, 0.5)


def test_a_pods_pressure_and_throttling_render_and_parse_back() -> None:
    status = NodeLoadStatus(1_764_100_800.0, 300.0, 1.0, 2**30, (*STATUS.pods, PRESSED))
    rendered = render_status(status)
    assert rendered["pods"][0].keys() == {"namespace", "name", "uid", "cpu", "memory"}  # not measured: absent
    assert rendered["pods"][1]["pressure"] == {"cpu": 0.46, "io": 0.01, "memory": 0.0}
    assert rendered["pods"][1]["throttled"] == 0.5
    assert parse_status({"status": rendered}) == status


def test_a_bad_pressure_entry_is_dropped_and_the_rest_of_the_pod_kept() -> None:
    status = NodeLoadStatus(1_764_100_800.0, 300.0, 1.0, 2**30, (PRESSED,))
    rendered = render_status(status)
    rendered["pods"][0]["pressure"].update({"cpu": 1.5, "gpu": 0.1, "io": "0.01"})
    rendered["pods"][0]["throttled"] = True
    (pod,) = parse_status({"status": rendered}).pods  # type: ignore[union-attr]
    assert (pod.name, pod.cpu, dict(pod.pressure), pod.throttled) == ("batch-1", 0.5, {"memory": 0.0}, None)
    rendered["pods"][0]["pressure"] = ["not", "an", "object"]
    (pod,) = parse_status({"status": rendered}).pods  # type: ignore[union-attr]
    assert dict(pod.pressure) == {} and pod.memory == 64 * 2**20


def test_the_crd_schema_admits_a_pods_pressure_and_throttling() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    pod = status["properties"]["pods"]["items"]["properties"]
    share = {"type": "number", "minimum": 0, "maximum": 1}
    assert {k: v for k, v in pod["throttled"].items() if k != "description"} == share
    assert pod["pressure"]["properties"] == {"cpu": share, "memory": share, "io": share}
    rendered = render_status(NodeLoadStatus(1_764_100_800.0, 300.0, 1.0, 2**30, (PRESSED,)))
    assert set(rendered["pods"][0]) <= set(pod)


def test_a_bad_node_total_or_time_is_no_information() -> None:
    for key, bad in [
        ("updateTime", "yesterday"),
        ("window", "-5m"),
        ("node", {"cpu": "1e400"}),
        ("pods", "x"),
    ]:
        assert parse_status({"status": {**render_status(STATUS), key: bad}}) is None, key


def test_freshness_is_two_report_intervals() -> None:
    t = STATUS.update_time
    assert STATUS.is_fresh(t + 119, 60)
    assert not STATUS.is_fresh(t + 120, 60)
    assert not STATUS.is_fresh(t - 61, 60), "a report far ahead of the reader's clock is not fresh"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_value_parses_without_an_exception(value: object) -> None:
    parse_status(value)
    parse_status({"status": value})
    parse_status({"status": {**render_status(STATUS), "node": value}})
    parse_status({"status": {**render_status(STATUS), "pods": [value]}})
    parse_status(
        {"status": {**render_status(STATUS), "node": {"cpu": "1", "memory": "1Gi", "metrics": value}}}
    )


def test_the_crd_manifest_has_the_module_coordinates() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert crd["spec"]["group"] == GROUP and crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == KIND and crd["spec"]["names"]["plural"] == PLURAL
    (version,) = crd["spec"]["versions"]
    assert version["name"] == VERSION and version["subresources"] == {"status": {}}
    assert f"/apis/{API_VERSION}/{PLURAL}" == NODELOAD_PATH
    owner = new_object("node-a", "uid-a")["metadata"]["ownerReferences"][0]
    assert owner == {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-a"}


def test_a_quantity_text_is_judged_against_each_ceiling_however_often_it_is_read() -> None:
    """Texts are parsed once and remembered; what is remembered is per ceiling, so the same text can be a
    valid memory amount and an impossible CPU amount in the same status, read after read."""
    from ballast.contract.nodeload import MAX_CPU_CORES, _quantity

    huge = str(MAX_CPU_CORES * 10)  # 10^6 cores: no node has them; 10^6 bytes of memory is ordinary
    for _ in range(3):
        assert _quantity(huge, MAX_CPU_CORES) is None
        assert _quantity(huge, 2**60) == 10**6
        assert _quantity("250m", MAX_CPU_CORES) == Fraction(1, 4)
        assert _quantity("-1", MAX_CPU_CORES) is None and _quantity("1e999999", 2**60) is None
