"""Rebuilding a predecessor's promises from the rebalancer's own Events (pure): what counts, on whose
clock, and that no Event can break it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from ballast.contract.times import parse_rfc3339 as parse_time
from ballast.rebalancer.promises import from_events

SERVER = 1_800_000_000.0
LOCAL = 5_000.0  # this replica's clock: unrelated to the server's


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(uid: str, reason: str, created: float, *, writer_at: float | None = None, dry: bool = False,
          node: str = "n1", workload: str = "default/Deployment/web") -> dict[str, Any]:  # fmt: skip
    record = {"node": node, "workload": workload, "at": created if writer_at is None else writer_at,
              "dryRun": dry}  # fmt: skip
    return {
        "metadata": {
            "creationTimestamp": iso(created),
            "annotations": {"ballast.io/rebalance": json.dumps(record)},
        },
        "involvedObject": {"kind": "Pod", "uid": uid, "namespace": "default", "name": f"pod-{uid}"},
        "reason": reason,
        "source": {"component": "ballast-rebalancer"},
    }


def test_evicted_unknown_and_an_intent_without_outcome_count() -> None:
    events = [
        event("a", "Rebalanced", SERVER - 100),
        event("b", "RebalanceUnknown", SERVER - 50),
        event("c", "RebalanceEvicting", SERVER - 10),  # its writer died during the call
        event("d", "RebalanceBlocked", SERVER - 5),
        event("e", "RebalanceThrottled", SERVER - 5),
        event("f", "RebalanceFailed", SERVER - 5),
    ]
    got = {p.uid: p for p in from_events(events, SERVER, LOCAL)}
    assert set(got) == {"a", "b", "c"}
    assert not got["a"].unknown and got["b"].unknown and got["c"].unknown
    # ages on the server's clock, a second younger than they may be: never older (a new leader never hastens)
    assert got["a"].at == LOCAL - 99 and got["c"].at == LOCAL - 9
    assert got["a"].node == "n1" and got["a"].workload == "default/Deployment/web"


def test_an_intent_replaced_by_a_later_refusal_does_not_count_but_a_later_eviction_does() -> None:
    refused = [event("a", "RebalanceEvicting", SERVER - 30), event("a", "RebalanceBlocked", SERVER - 30)]
    assert from_events(refused, SERVER, LOCAL) == []
    retried = [*refused, event("a", "Rebalanced", SERVER - 3)]
    (p,) = from_events(retried, SERVER, LOCAL)
    assert p.at == LOCAL - 2 and not p.unknown


def test_the_node_wait_keeps_the_writers_clock_and_the_window_the_servers() -> None:
    # the old leader's clock ran an hour ahead: its measurements were compared with its own times
    (p,) = from_events([event("a", "Rebalanced", SERVER - 20, writer_at=SERVER + 3600)], SERVER, LOCAL)
    assert p.waits_past == SERVER + 3600
    assert p.at == LOCAL - 19


def test_dry_runs_and_real_runs_never_mix() -> None:
    events = [event("a", "RebalanceDryRun", SERVER - 5, dry=True), event("b", "Rebalanced", SERVER - 5)]
    assert [p.uid for p in from_events(events, SERVER, LOCAL)] == ["b"]
    assert [p.uid for p in from_events(events, SERVER, LOCAL, dry_run=True)] == ["a"]


@pytest.mark.parametrize(
    "bad",
    [
        None, 3, "x", [], {}, {"source": {"component": "kubelet"}},
        {"source": {"component": "ballast-rebalancer"}, "metadata": None},
    ],
)  # fmt: skip
def test_anything_else_is_skipped(bad: Any) -> None:
    assert from_events([bad, event("a", "Rebalanced", SERVER - 1)], SERVER, LOCAL)[0].uid == "a"


@pytest.mark.parametrize(
    "annotation",
    ["", "{", "[]", "null", '{"node": 1}', '{"node": "n", "workload": "w", "at": 1e999, "dryRun": false}',
     '{"node": "n", "workload": "w", "at": "soon", "dryRun": false}',
     '{"node": "n", "workload": "w", "at": 1' + "0" * 400 + ', "dryRun": false}',
     '{"node": "n", "workload": "w", "at": 1, "dryRun": "no"}', "x" * 10000],
)  # fmt: skip
def test_an_unreadable_annotation_is_no_information(annotation: str) -> None:
    e = event("a", "Rebalanced", SERVER - 1)
    e["metadata"]["annotations"]["ballast.io/rebalance"] = annotation
    assert from_events([e], SERVER, LOCAL) == []


@pytest.mark.parametrize("value", ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.5+00:00"])
def test_parse_time(value: str) -> None:
    assert parse_time(value) is not None


@pytest.mark.parametrize("value", [None, 3, "", "yesterday", "2026-01-01T00:00:00", "9" * 400])
def test_parse_time_is_total(value: Any) -> None:
    assert parse_time(value) is None
