"""Binding records and the hot value: UID dedupe, deletions, windows by bisect, bounded memory."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from ballast.annotator.bindings import (
    EVENTS,
    PODS,
    Binding,
    BindingRecords,
    binding_from_event,
    binding_from_pod,
    hot_value,
)
from ballast.annotator.sources import EventBindings, PodBindings
from ballast.model.policy import HotValueWindow

NOW = 1_800_000_000.0
CRANE_WINDOWS = (HotValueWindow(300, 5), HotValueWindow(60, 2))


def stamp(when: float) -> str:
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    uid: str,
    node: str | None = "n1",
    scheduled: float | None = NOW - 10,
    *,
    created: float = NOW - 20,
    phase: str = "Running",
    deleting: bool = False,
) -> dict:
    meta: dict = {"name": f"p-{uid}", "namespace": "default", "uid": uid, "creationTimestamp": stamp(created)}
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    conditions = []
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(scheduled)})
    spec = {"nodeName": node} if node else {}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": conditions}}


def event(uid: str, node: str, when: float, *, name: str = "p", fmt: str = "eventTime") -> dict:
    ev = {
        "metadata": {"name": f"{name}.1", "namespace": "default", "creationTimestamp": stamp(when + 1)},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": name, "uid": uid},
        "reason": "Scheduled",
        "type": "Normal",
        "message": f"Successfully assigned default/{name} to {node}",
    }
    if fmt == "eventTime":
        ev["eventTime"] = datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    else:
        ev["firstTimestamp"] = stamp(when)
        ev["lastTimestamp"] = stamp(when + 30)
    return ev


# ---- reading bindings from objects


def test_binding_from_pod_uses_pod_scheduled_time() -> None:
    assert binding_from_pod(pod("u1", scheduled=NOW - 42)) == Binding("u1", "n1", NOW - 42)


def test_binding_from_pod_without_condition_uses_creation() -> None:
    assert binding_from_pod(pod("u1", scheduled=None, created=NOW - 7)) == Binding("u1", "n1", NOW - 7)


def test_pods_that_do_not_count() -> None:
    assert binding_from_pod(pod("u1", node=None)) is None
    assert binding_from_pod(pod("u1", deleting=True)) is None
    assert binding_from_pod(pod("u1", phase="Succeeded")) is None
    assert binding_from_pod(pod("u1", phase="Failed")) is None
    assert binding_from_pod({"metadata": {}, "spec": {"nodeName": "n1"}}) is None


def test_binding_from_event_forms() -> None:
    assert binding_from_event(event("u1", "n2", NOW - 5)) == Binding("u1", "n2", NOW - 5)
    assert binding_from_event(event("u1", "n2", NOW - 5, fmt="legacy")) == Binding("u1", "n2", NOW - 5)
    other = event("u1", "n2", NOW)
    other["reason"] = "FailedScheduling"
    assert binding_from_event(other) is None
    garbled = event("u1", "n2", NOW)
    garbled["message"] = "0/3 nodes are available"
    assert binding_from_event(garbled) is None
    no_uid = event("", "n2", NOW - 1, name="web-0")
    assert binding_from_event(no_uid) == Binding("default/web-0", "n2", NOW - 1)


def test_event_times_are_read_by_the_one_time_parser() -> None:
    """An event's times are API object times (``ballast.contract.times``), not annotation stamps: a time
    that is not RFC 3339 as written (here with spaces around it) is no time, and the next one dates it."""
    ev = event("u1", "n2", NOW - 5, fmt="legacy")
    ev["eventTime"] = f" {stamp(NOW - 60)} "
    assert binding_from_event(ev) == Binding("u1", "n2", NOW - 5)


# ---- records


def records() -> BindingRecords:
    return BindingRecords(horizon=360)


def test_updates_and_duplicates_count_once() -> None:
    r = records()
    b = Binding("u1", "n1", NOW - 10)
    assert r.observe(b, NOW)
    assert not r.observe(b, NOW)
    assert not r.observe(b, NOW, EVENTS)  # the same pod reported by its event
    assert r.count_since("n1", NOW - 60) == 1


def test_delete_stops_counting_and_later_reports_are_ignored() -> None:
    r = records()
    r.observe(Binding("u1", "n1", NOW - 10), NOW)
    assert r.forget("u1", NOW)
    assert r.count_since("n1", NOW - 60) == 0
    assert not r.observe(Binding("u1", "n1", NOW - 10), NOW, EVENTS)  # a late event for a deleted pod
    assert r.count_since("n1", NOW - 60) == 0


def test_window_boundaries() -> None:
    r = records()
    for i, age in enumerate([0, 59, 60, 61, 299, 300, 301]):
        r.observe(Binding(f"u{i}", "n1", NOW - age), NOW)
    assert r.count_since("n1", NOW - 60) == 3  # ages 0, 59, 60
    assert r.count_since("n1", NOW - 300) == 6
    assert r.count_since("other", NOW - 300) == 0


def test_crane_formula() -> None:
    r = records()
    for i in range(4):  # 4 pods in the last minute
        r.observe(Binding(f"a{i}", "n1", NOW - 30), NOW)
    assert hot_value(r, "n1", NOW, CRANE_WINDOWS) == 0 + 2  # floor(4/5) + floor(4/2)
    for i in range(3):  # 3 more, 3 minutes ago
        r.observe(Binding(f"b{i}", "n1", NOW - 180), NOW)
    assert hot_value(r, "n1", NOW, CRANE_WINDOWS) == 1 + 2  # floor(7/5) + floor(4/2)
    assert hot_value(r, "n1", NOW + 31, CRANE_WINDOWS) == 1 + 0  # the minute has passed
    assert hot_value(r, "n1", NOW, ()) == 0


def test_old_bindings_are_ignored_and_expired() -> None:
    r = records()
    assert not r.observe(Binding("old", "n1", NOW - 361), NOW)
    r.observe(Binding("u1", "n1", NOW - 100), NOW)
    r.observe(Binding("u2", "n2", NOW - 10), NOW)
    assert r.expire(NOW + 265) == 1  # u1 is older than the horizon now
    assert len(r) == 1 and r.nodes() == ["n2"]
    assert r.get("u1") is None


def test_redated_binding_moves() -> None:
    r = records()
    r.observe(Binding("u1", "n1", NOW - 200), NOW, EVENTS)
    r.observe(Binding("u1", "n1", NOW - 20), NOW, PODS)  # the pod's own condition wins
    assert r.count_since("n1", NOW - 60) == 1
    assert len(r) == 1
    assert r.expire(NOW + 170) == 0  # the stale heap entry of the first date is skipped


def test_events_do_not_override_the_pod() -> None:
    r = records()
    r.observe(Binding("u1", "n1", NOW - 20), NOW, PODS)
    assert not r.observe(Binding("u1", "n1", NOW - 200), NOW, EVENTS)
    assert r.get("u1") == ("n1", NOW - 20, PODS)


def test_memory_is_bounded_per_node() -> None:
    r = BindingRecords(horizon=360, max_per_node=10)
    for i in range(25):
        r.observe(Binding(f"u{i}", "n1", NOW - 100 + i), NOW)
    assert r.count_since("n1", NOW - 300) == 10
    assert len(r) == 10 and r.dropped_over_cap == 15
    assert r.get("u24") is not None and r.get("u0") is None  # the newest are kept


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["observe", "observe", "observe", "forget"]),
            st.integers(0, 30),  # uid
            st.sampled_from(["n1", "n2", "n3"]),
            st.integers(0, 400),  # age in seconds
        ),
        max_size=80,
    ),
    st.integers(1, 360),
)
def test_counts_match_brute_force(ops: list[tuple[str, int, str, int]], window: int) -> None:
    r = records()
    model: dict[str, tuple[str, float]] = {}
    forgotten: set[str] = set()
    for op, uid_n, node, age in ops:
        uid = f"u{uid_n}"
        if op == "forget":
            r.forget(uid, NOW)
            model.pop(uid, None)
            forgotten.add(uid)
        else:
            r.observe(Binding(uid, node, NOW - age), NOW)
            if uid not in forgotten and age <= 360:
                model[uid] = (node, NOW - age)
    for node in ("n1", "n2", "n3"):
        expected = sum(1 for n, when in model.values() if n == node and when >= NOW - window)
        assert r.count_since(node, NOW - window) == expected


# ---- watch handlers


def test_pod_handler_relist_forgets_pods_deleted_while_disconnected() -> None:
    r = records()
    h = PodBindings(r, clock=lambda: NOW)
    h.replace([pod("u1"), pod("u2"), pod("u3", node="n2")])
    assert r.count_since("n1", NOW - 60) == 2
    h.replace([pod("u1"), pod("u3", node="n2")])  # u2 vanished
    assert r.count_since("n1", NOW - 60) == 1
    h.apply("MODIFIED", pod("u1", deleting=True))  # graceful delete started
    assert r.count_since("n1", NOW - 60) == 0
    h.apply("DELETED", pod("u3", node="n2"))
    assert len(r) == 0


def test_pod_handler_finished_pod_stops_counting() -> None:
    r = records()
    h = PodBindings(r, clock=lambda: NOW)
    h.apply("ADDED", pod("u1"))
    h.apply("MODIFIED", pod("u1"))  # an update of the same pod
    assert r.count_since("n1", NOW - 60) == 1
    h.apply("MODIFIED", pod("u1", phase="Succeeded"))
    assert r.count_since("n1", NOW - 60) == 0


def test_event_handler_ignores_deletions_and_dedupes() -> None:
    r = records()
    h = EventBindings(r, clock=lambda: NOW)
    h.replace([event("u1", "n1", NOW - 5), event("u1", "n1", NOW - 5)])
    h.apply("MODIFIED", event("u1", "n1", NOW - 5))
    h.apply("DELETED", event("u1", "n1", NOW - 5))  # the event's TTL, not the pod's deletion
    assert r.count_since("n1", NOW - 60) == 1
