"""One cycle with in-process doubles: a scripted load source and a node writer that records patches."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from ballast.annotator.bindings import Binding, BindingRecords
from ballast.annotator.controller import Annotator, run_loop
from ballast.annotator.matching import Series
from ballast.annotator.metrics import AnnotatorMetrics
from ballast.annotator.prometheus import PrometheusError, Vector
from ballast.annotator.schedule import Schedule
from ballast.annotator.sources import NodeIndex
from ballast.contract.annotations import HOT_VALUE_KEY, format_hot_value, format_load
from ballast.model.load_source import ANNOTATOR_SOURCE, LOAD_SOURCE_KEY, agent_source
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE

POLICY = load_policy(POLICY_FILE)
NOW = 1_800_000_000.0


class Source:
    """Answers per expression; an Exception value is raised."""

    def __init__(self, answers: Mapping[str, Any]) -> None:
        self.answers = dict(answers)
        self.asked: list[str] = []

    async def query(self, expr: str) -> list[Series]:
        self.asked.append(expr)
        answer = self.answers.get(expr, [])
        if isinstance(answer, Exception):
            raise answer
        return answer


class Writer:
    def __init__(self, nodes: dict[str, dict], fail: set[str] | None = None) -> None:
        self.nodes = nodes
        self.fail = fail or set()
        self.patches: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def patch_node(self, name: str, body: Mapping[str, Any]):
        if name in self.fail:
            raise RuntimeError("500 InternalError: etcd timeout")
        if name not in self.nodes:
            return None
        with self.lock:
            self.patches.append((name, dict(body)))
            node = self.nodes[name]
            node["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
            return node


def node(name: str, ip: str, annotations: dict[str, str] | None = None) -> dict:
    return {
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]
        },
    }


def series(metric: str, **values: float) -> list[Series]:
    return [Series({"__name__": metric, "instance": f"{ip}:9100"}, v) for ip, v in values.items()]


def build(
    nodes: list[dict],
    answers: Mapping[str, Any],
    *,
    records: BindingRecords | None = None,
    fail: set[str] | None = None,
    may_write=lambda: True,
    clock=lambda: NOW,
):
    index = NodeIndex([*POLICY.metrics, HOT_VALUE_KEY])
    index.replace(nodes)
    writer = Writer({n["metadata"]["name"]: n for n in nodes}, fail)
    source = Source(answers)
    metrics = AnnotatorMetrics()
    annotator = Annotator(
        POLICY, source, index, writer, records, metrics=metrics, clock=clock, may_write=may_write
    )
    return annotator, source, writer, metrics


def sample(metrics: AnnotatorMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_one_query_per_metric_and_one_patch_per_node() -> None:
    nodes = [node("a", "10.0.0.1"), node("b", "10.0.0.2")]
    answers = {
        m: series(m, **{"10.0.0.1": 10.0 + i, "10.0.0.2": 20.0 + i}) for i, m in enumerate(POLICY.metrics)
    }
    annotator, source, writer, metrics = build(nodes, answers)
    report = asyncio.run(annotator.cycle(POLICY.metrics))
    assert report.ok and report.result == "ok"
    assert source.asked == list(POLICY.metrics)
    assert sorted(name for name, _ in writer.patches) == ["a", "b"]
    a = dict(writer.patches)["a"]["metadata"]["annotations"]
    loads = {m: format_load((10.0 + i) / 100, NOW) for i, m in enumerate(POLICY.metrics)}
    assert a == {**loads, LOAD_SOURCE_KEY: ANNOTATOR_SOURCE}
    assert sample(metrics, "ballast_annotator_node_patches_total", result="ok") == 2
    assert (
        sample(metrics, "ballast_annotator_prometheus_queries_total", metric="cpu_usage_avg_5m", result="ok")
        == 1
    )
    assert sample(metrics, "ballast_annotator_last_cycle_success_timestamp_seconds") == NOW
    # The node index learned the written values from the patch answers: the next cycle writes nothing.
    writer.patches.clear()
    assert asyncio.run(annotator.cycle(POLICY.metrics)).patches == 0
    assert writer.patches == []


def test_a_failed_query_skips_only_its_metric(caplog: pytest.LogCaptureFixture) -> None:
    old = format_load(0.9, NOW - 60)
    nodes = [node("a", "10.0.0.1", {"cpu_usage_avg_5m": old})]
    answers = {
        "cpu_usage_avg_5m": PrometheusError(
            "query 'cpu_usage_avg_5m' failed: HTTP 503", query="cpu_usage_avg_5m"
        ),
        "mem_usage_avg_5m": series("mem_usage_avg_5m", **{"10.0.0.1": 50.0}),
    }
    annotator, _, writer, metrics = build(nodes, answers)
    with caplog.at_level(logging.WARNING):
        report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m", "mem_usage_avg_5m"]))
    assert report.result == "partial" and report.synced == ["mem_usage_avg_5m"]
    (patch,) = writer.patches
    assert patch[1]["metadata"]["annotations"] == {
        "mem_usage_avg_5m": format_load(0.5, NOW),
        LOAD_SOURCE_KEY: ANNOTATOR_SOURCE,
    }
    assert writer.nodes["a"]["metadata"]["annotations"]["cpu_usage_avg_5m"] == old
    assert sample(metrics, "ballast_annotator_failures_total", kind="prometheus") == 1
    assert caplog.text.count("query 'cpu_usage_avg_5m' for cpu_usage_avg_5m failed") == 1


def test_malformed_items_are_counted_per_metric_and_the_rest_is_used() -> None:
    answer = Vector(series("cpu_usage_avg_5m", **{"10.0.0.1": 40.0}))
    answer.malformed = 2
    annotator, _, writer, metrics = build([node("a", "10.0.0.1")], {"cpu_usage_avg_5m": answer})
    report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m"]))
    assert report.ok
    assert writer.nodes["a"]["metadata"]["annotations"]["cpu_usage_avg_5m"] == format_load(0.4, NOW)
    assert sample(metrics, "ballast_annotator_malformed_samples_total", metric="cpu_usage_avg_5m") == 2


def test_all_queries_failing_is_a_failed_cycle() -> None:
    answers = {m: PrometheusError("down") for m in POLICY.metrics}
    annotator, _, writer, metrics = build([node("a", "10.0.0.1")], answers)
    report = asyncio.run(annotator.cycle(POLICY.metrics))
    assert report.result == "failed" and writer.patches == []
    assert sample(metrics, "ballast_annotator_cycles_total", result="failed") == 1


def test_no_data_nodes_are_counted_and_left_alone() -> None:
    nodes = [node("a", "10.0.0.1"), node("b", "10.0.0.2"), node("c", "10.0.0.3")]
    answers = {"cpu_usage_avg_5m": series("cpu_usage_avg_5m", **{"10.0.0.1": 10.0, "10.0.0.2": float("nan")})}
    annotator, _, writer, metrics = build(nodes, answers)
    report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m"]))
    assert report.without_data == {"cpu_usage_avg_5m": 2}
    assert [name for name, _ in writer.patches] == ["a"]
    assert sample(metrics, "ballast_annotator_nodes_without_data", metric="cpu_usage_avg_5m") == 2


def test_values_are_written_as_measured_or_not_at_all() -> None:
    """One rule with the extender: up to 1000 % is a load (an overcommitted node passes 100 %), and is
    written as measured; above it, or not finite, or negative, nothing is written and it is counted."""
    values = {"10.0.0.1": 100.4, "10.0.0.2": 1e308, "10.0.0.3": -0.0, "10.0.0.4": 999.0, "10.0.0.5": 1000.01}
    nodes = [node(n, ip) for n, ip in zip("abcde", values, strict=True)]
    annotator, _, writer, metrics = build(nodes, {"cpu_usage_avg_5m": series("cpu_usage_avg_5m", **values)})
    report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m"]))
    written = {n: p["metadata"]["annotations"]["cpu_usage_avg_5m"].split(",")[0] for n, p in writer.patches}
    assert written == {"a": "1.00400", "c": "0.00000", "d": "9.99000"}
    assert report.without_data == {"cpu_usage_avg_5m": 2}
    assert sample(metrics, "ballast_annotator_refused_values_total", metric="cpu_usage_avg_5m") == 2


def test_patch_failures_and_deleted_nodes() -> None:
    nodes = [node("a", "10.0.0.1"), node("b", "10.0.0.2")]
    answers = {"cpu_usage_avg_5m": series("cpu_usage_avg_5m", **{"10.0.0.1": 1.0, "10.0.0.2": 2.0})}
    annotator, _, writer, metrics = build(nodes, answers, fail={"a"})
    del writer.nodes["b"]  # deleted between the watch event and the patch
    report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m"]))
    assert report.patch_errors == 1 and report.patches == 0 and report.result == "partial"
    assert sample(metrics, "ballast_annotator_node_patches_total", result="error") == 1
    assert sample(metrics, "ballast_annotator_node_patches_total", result="gone") == 1


def test_no_writes_without_leadership() -> None:
    answers = {"cpu_usage_avg_5m": series("cpu_usage_avg_5m", **{"10.0.0.1": 1.0})}
    annotator, _, writer, metrics = build([node("a", "10.0.0.1")], answers, may_write=lambda: False)
    report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m"]))
    assert writer.patches == [] and report.not_leader == 1
    assert sample(metrics, "ballast_annotator_node_patches_total", result="skipped") == 1


def test_hot_value_only_cycle() -> None:
    records = BindingRecords(360)
    for i in range(5):
        records.observe(Binding(f"u{i}", "a", NOW - 30), NOW)
    nodes = [node("a", "10.0.0.1"), node("b", "10.0.0.2", {HOT_VALUE_KEY: format_hot_value(3, NOW - 20)})]
    annotator, source, writer, _ = build(nodes, {}, records=records)
    report = asyncio.run(annotator.cycle([]))
    assert source.asked == [] and report.ok
    written = {name: body["metadata"]["annotations"] for name, body in writer.patches}
    # a: floor(5/5) + floor(5/2) = 3 (crane's windows); b: bindings gone, its fresh 3 must become 0
    assert written == {
        "a": {HOT_VALUE_KEY: format_hot_value(3, NOW), LOAD_SOURCE_KEY: ANNOTATOR_SOURCE},
        "b": {HOT_VALUE_KEY: format_hot_value(0, NOW), LOAD_SOURCE_KEY: ANNOTATOR_SOURCE},
    }


def test_another_sources_fresh_values_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    """Two writers must not alternate: where the node's agent has fresh values (its stamp beside them),
    the annotator writes nothing, logs it once per node and counts it every cycle; once the agent's values
    go stale it takes the node over, stamped as its own, and says so."""
    agents = {LOAD_SOURCE_KEY: agent_source("a"), "cpu_usage_avg_5m": format_load(0.2, NOW - 60)}
    nodes = [node("a", "10.0.0.1", agents), node("b", "10.0.0.2")]
    answers = {"cpu_usage_avg_5m": series("cpu_usage_avg_5m", **{"10.0.0.1": 70.0, "10.0.0.2": 30.0})}
    clock = [NOW]
    annotator, _, writer, metrics = build(nodes, answers, clock=lambda: clock[0])
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m"]))
            assert report.other_source == 1
    assert [name for name, _ in writer.patches] == ["b"]  # a never, b once (then nothing new)
    assert writer.nodes["a"]["metadata"]["annotations"] == agents
    assert sample(metrics, "ballast_annotator_load_source_conflicts_total") == 3
    assert caplog.text.count("node a: agent/a has fresh load values there") == 1
    # The agent stopped: its 5-minute mean expires (sync period 3m + 5m) and the annotator takes over.
    clock[0] = NOW + 8 * 60
    writer.patches.clear()
    with caplog.at_level(logging.INFO):
        report = asyncio.run(annotator.cycle(["cpu_usage_avg_5m"]))
    assert report.other_source == 0
    assert dict(writer.patches)["a"]["metadata"]["annotations"] == {
        "cpu_usage_avg_5m": format_load(0.7, NOW + 8 * 60),
        LOAD_SOURCE_KEY: ANNOTATOR_SOURCE,
    }
    assert "node a: no fresh values of agent/a any more; the annotator writes it" in caplog.text
    assert sample(metrics, "ballast_annotator_load_source_conflicts_total") == 3


def test_an_unstamped_node_is_stamped_once() -> None:
    """Values without a stamp (crane's annotator, an older Ballast) are the annotator's to replace: the
    first cycle stamps the node even when the values are the same, the next writes nothing."""
    nodes = [node("a", "10.0.0.1", {"cpu_usage_avg_5m": format_load(0.3, NOW - 10)})]
    answers = {"cpu_usage_avg_5m": series("cpu_usage_avg_5m", **{"10.0.0.1": 30.0})}
    annotator, _, writer, _ = build(nodes, answers)
    assert asyncio.run(annotator.cycle(["cpu_usage_avg_5m"])).patches == 1
    assert writer.nodes["a"]["metadata"]["annotations"][LOAD_SOURCE_KEY] == ANNOTATOR_SOURCE
    assert asyncio.run(annotator.cycle(["cpu_usage_avg_5m"])).patches == 0


def test_run_loop_syncs_on_schedule_and_pauses_without_leadership() -> None:
    nodes = [node("a", "10.0.0.1")]
    answers = {m: series(m, **{"10.0.0.1": 10.0}) for m in POLICY.metrics}
    annotator, _, _, _ = build(nodes, answers)
    t = [0.0]
    leading = [True]
    stop = threading.Event()
    cycles: list[tuple[float, tuple[str, ...]]] = []
    original = annotator.cycle

    async def traced(due):
        cycles.append((t[0], tuple(due)))
        return await original(due)

    annotator.cycle = traced  # type: ignore[method-assign]

    async def drive():
        task = asyncio.create_task(
            run_loop(
                annotator,
                Schedule(POLICY.sync_periods, 60),
                stop=stop,
                is_leader=lambda: leading[0],
                monotonic=lambda: t[0],
                poll=0.001,
            )
        )
        for now, lead in [(0, True), (60, True), (180, True), (200, False), (900, False), (901, True)]:
            t[0] = now
            leading[0] = lead
            await asyncio.sleep(0.02)
        stop.set()
        await task

    asyncio.run(drive())
    assert cycles[0] == (0, tuple(POLICY.metrics))  # everything at start
    assert cycles[1] == (60, ())  # hot value refresh only
    assert cycles[2] == (180, ("cpu_usage_avg_5m", "mem_usage_avg_5m"))
    assert all(at not in (200, 900) for at, _ in cycles)  # nothing while not leading
    assert cycles[-1] == (901, tuple(POLICY.metrics))  # regained leadership: everything is due again


def test_operator_hints_for_missing_rules_and_wrong_label(caplog: pytest.LogCaptureFixture) -> None:
    answers = {
        "cpu_usage_avg_5m": [],
        "mem_usage_avg_5m": [Series({"__name__": "mem_usage_avg_5m", "pod": "node-exporter-x"}, 10.0)],
    }
    annotator, _, writer, _ = build([node("a", "10.0.0.1")], answers)
    with caplog.at_level(logging.WARNING):
        asyncio.run(annotator.cycle(["cpu_usage_avg_5m", "mem_usage_avg_5m"]))
    assert "are the recording rules" in caplog.text and "'cpu_usage_avg_5m'" in caplog.text
    assert "none of 1 series names a node by its 'instance' label" in caplog.text
    assert writer.patches == []
