"""The evictions a leader keeps counting, and how a new leader rebuilds its predecessor's from the cluster.

A *promise* is an eviction call that counts for the per-workload window, the node's wait for a newer
measurement and the eviction pace: one that evicted, and one whose outcome is unknown (no answer, a reset,
a timeout, a 5xx: the API server may have performed it).

An unknown outcome is released (it stops counting for the workload window) only when the pod is seen
unchanged after the call could have taken effect: the watch shows the same UID, not terminating, on the
same node, in a cycle that starts at least ``SETTLE`` seconds after the call was made. ``SETTLE`` is
kube-apiserver's default request timeout (60 s): a request the server was still processing when the
client gave up has ended by then, so an unchanged pod means the eviction did not happen. The node's wait
for a newer measurement is not released (waiting for one more measurement costs one interval). A pod that
is gone or terminating keeps the promise until the window ends, as an eviction does.

Rebuilding (``from_events``): the rebalancer writes an Event on every pod it calls the Eviction API for,
before the call (``RebalanceEvicting``), then turned into the outcome; its ``ballast.io/rebalance``
annotation carries the node, the workload and the writer's clock. On becoming leader, a replica lists
this component's Events (``source=ballast-rebalancer``) and counts, per pod, ``Rebalanced`` and
``RebalanceUnknown`` Events, and a ``RebalanceEvicting`` one that no later outcome on that pod replaced
(its writer stopped during the call: an unknown outcome). Times for the window and the pace are the
Events' ``creationTimestamp`` measured against the API server's own clock (the list reply's ``Date``),
never against another replica's clock, rounded towards "more recent": a new leader never hastens. The
node's wait uses the writer's own clock, the one the measurements it waits past were compared with.

Events live as long as kube-apiserver's ``--event-ttl`` (1 h by default): with a workload window longer
than that, a new leader evicts nothing until what the Events could not tell has left the window
(``Limiter.history_unknown``). An Event that could not be written leaves
nothing to rebuild from (the write failures are counted in ``ballast_rebalancer_api_calls_total``).
Dry runs rebuild from ``RebalanceDryRun`` Events, real runs from the others: they never mix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ballast.contract.numbers import finite
from ballast.contract.times import parse_rfc3339
from ballast.rebalancer.evictor import ANNOTATION, COMPONENT, DONE, DRY, INTENT, UNKNOWN_REASON

__all__ = ["SETTLE", "Promise", "from_events"]

SETTLE = 60.0
"""Seconds after an unknown eviction call before an unchanged pod releases it (kube-apiserver's default
``--request-timeout``)."""
COUNTED = (DONE, UNKNOWN_REASON)


@dataclass(frozen=True, slots=True)
class Promise:
    uid: str
    namespace: str
    name: str
    node: str
    workload: str
    at: float
    """When the call was made, on this replica's wall clock: what the window and the pace count from."""
    waits_past: float
    """The node waits for a measurement newer than this (the evicting replica's clock)."""
    unknown: bool


@dataclass(frozen=True, slots=True)
class _Record:
    uid: str
    namespace: str
    name: str
    reason: str
    node: str
    workload: str
    created: float
    writer_at: float


def _record(event: Any, dry_run: bool) -> _Record | None:
    """One Event of this component, or ``None`` for anything else or anything unreadable."""
    if not isinstance(event, Mapping):
        return None
    source = event.get("source")
    if not isinstance(source, Mapping) or source.get("component") != COMPONENT:
        return None
    meta = event.get("metadata")
    obj = event.get("involvedObject")
    if not isinstance(meta, Mapping) or not isinstance(obj, Mapping) or obj.get("kind") != "Pod":
        return None
    annotations = meta.get("annotations")
    raw = annotations.get(ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(raw, str) or len(raw) > 4096:
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("dryRun") is not dry_run:
        return None
    fields = (obj.get("uid"), obj.get("namespace"), obj.get("name"), event.get("reason"),
              data.get("node"), data.get("workload"))  # fmt: skip
    if not all(isinstance(f, str) and f for f in fields):
        return None
    created = parse_rfc3339(meta.get("creationTimestamp"))
    writer_at = finite(data.get("at"))
    if created is None or writer_at is None:
        return None
    uid, namespace, name, reason, node, workload = fields
    return _Record(uid, namespace, name, reason, node, workload, created, writer_at)  # type: ignore[arg-type]


def from_events(
    events: Iterable[Any], server_now: float, local_now: float, *, dry_run: bool = False
) -> list[Promise]:
    """The promises the Events of this component still hold at ``server_now`` (the API server's clock),
    with times on the local clock ``local_now``. Total: an unreadable Event is skipped."""
    by_pod: dict[str, list[_Record]] = {}
    for event in events:
        rec = _record(event, dry_run)
        if rec is not None:
            by_pod.setdefault(rec.uid, []).append(rec)
    out: list[Promise] = []
    for records in by_pod.values():
        records.sort(key=lambda r: (r.created, r.writer_at))
        for i, rec in enumerate(records):
            if dry_run:
                counted, unknown = rec.reason == DRY, False
            elif rec.reason in COUNTED:
                counted, unknown = True, rec.reason == UNKNOWN_REASON
            elif rec.reason == INTENT:
                # an intent whose outcome was written as a separate Event later is that outcome's
                later = [r for r in records[i + 1 :] if r.reason != INTENT and r.writer_at >= rec.writer_at]
                counted, unknown = not later, True
            else:
                counted, unknown = False, False
            if not counted:
                continue
            # whole seconds on both sides: the age may be up to a second shorter, never longer
            age = max(0.0, server_now - rec.created - 1.0)
            out.append(Promise(rec.uid, rec.namespace, rec.name, rec.node, rec.workload,
                               local_now - age, rec.writer_at, unknown))  # fmt: skip
    return out
