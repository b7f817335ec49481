"""One annotation cycle, and the loop that runs cycles on the policy's schedule while leading.

A cycle:

1. one instant query per due metric, all at once (``Policy.metrics`` in a full cycle: 6 queries for
   5000 nodes, where crane sent up to 3 per node and metric);
2. series -> node by label (``matching``), percent -> ratio; nodes without a usable value keep their
   annotation as it is;
3. hot value per node from the binding records (``bindings``);
4. one merge patch per node that has news (``plan``), stamped ``ballast.io/load-source: annotator``, sent
   from a small thread pool, each one only while this replica still leads. A node where another source
   (the node's agent) has fresh values is left to it (``ballast.model.load_source``): logged once per node,
   counted every cycle.

A failed query skips only its metric (logged once per cycle with the query, counted) and is retried
with backoff; nothing is ever written for it, so an outage never wipes or zeroes annotations.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from ballast.annotator.bindings import BindingRecords, hot_value
from ballast.annotator.matching import MatchResult, Series, match_series
from ballast.annotator.metrics import AnnotatorMetrics
from ballast.annotator.plan import NodePatch, PatchPlanner
from ballast.annotator.prometheus import Vector
from ballast.annotator.schedule import Schedule
from ballast.annotator.sources import NodeIndex
from ballast.contract.annotations import HOT_VALUE_KEY, MAX_LOAD_RATIO
from ballast.kube.client import ApiError, Kube, path_for
from ballast.model.load_source import ANNOTATOR_SOURCE, other_fresh_source
from ballast.model.policy import Policy

__all__ = [
    "Annotator",
    "CycleReport",
    "KubeNodeWriter",
    "LoadSource",
    "NodeWriter",
    "run_loop",
]

log = logging.getLogger("ballast.annotator")

PERCENT = 100.0
"""crane's recording rules give percentages; annotations carry ratios."""


def as_ratio(percent: float) -> float | None:
    """The annotation ratio of a percentage, or ``None`` when it cannot be one: the extender's rule
    (``read_sample``), applied before writing. Not finite, negative or above ``MAX_LOAD_RATIO`` (1000 %)
    is a broken source, not a load: nothing is written (clamping 1e308 to 1.00000 and refreshing it kept
    a node rejected for as long as the source was broken). Between 100 % and 1000 % is written as
    measured (an overcommitted node exceeds its allocatable). ``-0`` becomes ``0``."""
    if not math.isfinite(percent) or percent < 0:
        return None
    ratio = percent / PERCENT
    return ratio + 0.0 if ratio <= MAX_LOAD_RATIO else None


_LOGGED_CONFLICTS = 3


class LoadSource(Protocol):
    async def query(self, expr: str) -> list[Series]: ...


class NodeWriter(Protocol):
    def patch_node(self, name: str, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Merge-patch a node; return the patched node, ``None`` when the node is gone; raise on failure."""
        ...


class KubeNodeWriter:
    """Node patches through ``ballast.kube.client.Kube`` (official client,
    ``application/merge-patch+json``)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def patch_node(self, name: str, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        try:
            return self.kube.merge_patch(path_for("v1", "nodes", name=name), body)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise


@dataclass
class CycleReport:
    started: float
    metrics: tuple[str, ...]
    duration: float = 0.0
    nodes: int = 0
    synced: list[str] = field(default_factory=list)
    query_errors: dict[str, str] = field(default_factory=dict)
    without_data: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0
    other_source: int = 0
    """Nodes left alone because another load source has fresh values there."""
    patches: int = 0
    patch_errors: int = 0
    not_leader: int = 0
    changed_nodes: int = 0
    """Nodes patched because a value changed (the others were patched to refresh an expiring stamp)."""

    @property
    def ok(self) -> bool:
        return not self.query_errors and not self.patch_errors and not self.not_leader

    @property
    def result(self) -> str:
        if self.ok:
            return "ok"
        if self.metrics and not self.synced:
            return "failed"
        return "partial"


class Annotator:
    """Runs cycles; everything it talks to is passed in (tests hand it fakes or the fake API server)."""

    def __init__(
        self,
        policy: Policy,
        prometheus: LoadSource,
        nodes: NodeIndex,
        writer: NodeWriter,
        records: BindingRecords | None = None,
        *,
        metrics: AnnotatorMetrics | None = None,
        clock: Callable[[], float] = time.time,
        match_label: str = "instance",
        query_template: str = "{metric}",
        hot_interval: float = 60.0,
        patch_concurrency: int = 8,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.policy = policy
        self.prometheus = prometheus
        self.nodes = nodes
        self.writer = writer
        self.records = records
        self.metrics = metrics or AnnotatorMetrics()
        self.clock = clock
        self.match_label = match_label
        self.query_template = query_template
        self.hot_interval = hot_interval
        self.may_write = may_write
        self.planner = PatchPlanner(
            {m: policy.valid_for(m) for m in policy.metrics},
            dict(policy.sync_periods),
            hot_interval,
            legacy_zone=policy.legacy_zone,
            source=ANNOTATOR_SOURCE,
        )
        self._left_to: dict[str, str] = {}
        """Nodes left to another load source, and which: each is logged when it starts and when it ends."""
        self._pool = ThreadPoolExecutor(max(1, patch_concurrency), thread_name_prefix="annotator-patch")

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def expression(self, metric: str) -> str:
        return self.query_template.replace("{metric}", metric)

    async def _query(self, metric: str) -> list[Series] | Exception:
        t0 = time.perf_counter()
        try:
            series = await self.prometheus.query(self.expression(metric))
        except Exception as exc:  # every failure only skips this metric
            self.metrics.queries.labels(metric, "error").inc()
            return exc
        finally:
            self.metrics.query_duration.observe(time.perf_counter() - t0)
        self.metrics.queries.labels(metric, "ok").inc()
        if isinstance(series, Vector) and series.malformed:
            self.metrics.malformed_samples.labels(metric).inc(series.malformed)
        return series

    async def cycle(self, due: Sequence[str]) -> CycleReport:
        """Sync ``due`` metrics (may be empty: hot value only) and write what changed."""
        now = self.clock()
        t0 = time.perf_counter()
        report = CycleReport(started=now, metrics=tuple(due))
        try:
            await self._cycle(due, now, report)
        except Exception:
            self.metrics.failures.labels("cycle").inc()
            log.exception("annotation cycle failed")
            report.query_errors.setdefault("(cycle)", "internal error, see the log")
        report.duration = time.perf_counter() - t0
        self.metrics.cycle_duration.observe(report.duration)
        self.metrics.cycles.labels(report.result).inc()
        if report.ok:
            self.metrics.last_cycle_success.set(now)
        log.log(
            logging.INFO if due or report.patches else logging.DEBUG,
            "cycle %s in %.2fs: metrics %s, %d nodes, %d patched (%d with changes), %d patch errors%s",
            report.result,
            report.duration,
            ",".join(due) or "(hot value only)",
            report.nodes,
            report.patches,
            report.changed_nodes,
            report.patch_errors,
            f", not leader any more: {report.not_leader} skipped" if report.not_leader else "",
        )
        return report

    async def _cycle(self, due: Sequence[str], now: float, report: CycleReport) -> None:
        answers = await asyncio.gather(*(self._query(m) for m in due))
        snapshot = self.nodes.snapshot()
        report.nodes = len(snapshot)
        self.metrics.nodes.set(len(snapshot))
        addresses = [n.addresses for n in snapshot]
        loads: dict[str, dict[str, float]] = {}
        for metric, answer in zip(due, answers, strict=True):
            if isinstance(answer, Exception):
                report.query_errors[metric] = str(answer)
                self.metrics.failures.labels("prometheus").inc()
                log.warning(
                    "query %r for %s failed, its annotations are left as they are: %s",
                    self.expression(metric),
                    metric,
                    answer,
                )
                continue
            matched = match_series(answer, addresses, self.match_label)
            self._account(metric, matched, len(snapshot), report)
            if not answer:
                log.warning(
                    "%s: Prometheus has no series for %r; are the recording rules "
                    "(scheduler_config/recording-rules.yaml) loaded?",
                    metric,
                    self.expression(metric),
                )
            elif snapshot and not matched.values and not matched.unusable:
                example = answer[0].labels.get(self.match_label, "(label missing)")
                log.warning(
                    "%s: none of %d series names a node by its %r label (e.g. %r); nodes are matched by "
                    "InternalIP, IP:port, name or name:port (see --match-label)",
                    metric,
                    len(answer),
                    self.match_label,
                    example,
                )
            refused = 0
            for node, value in matched.values.items():
                ratio = as_ratio(value)
                if ratio is None:
                    refused += 1
                    matched.unusable[node] = value
                    report.without_data[metric] = report.without_data.get(metric, 0) + 1
                    continue
                loads.setdefault(node, {})[metric] = ratio
            if refused:
                self.metrics.refused_values.labels(metric).inc(refused)
                self.metrics.nodes_without_data.labels(metric).set(report.without_data[metric])
            report.synced.append(metric)
            self.metrics.last_success.labels(metric).set(now)

        hot: dict[str, int] | None = None
        if self.records is not None and self.policy.hot_values:
            self.records.expire(now)
            self.metrics.bindings.set(len(self.records))
            windows = self.policy.hot_values
            hot = {n.name: hot_value(self.records, n.name, now, windows) for n in snapshot}

        patches: list[NodePatch] = []
        left_to: dict[str, str] = {}
        for n in snapshot:
            other = other_fresh_source(n.annotations, ANNOTATOR_SOURCE, self.policy, now)
            if other is not None:
                left_to[n.name] = other
                continue
            p = self.planner.plan(
                n.name, n.annotations, loads.get(n.name, {}), None if hot is None else hot[n.name], now
            )
            if p is not None:
                patches.append(p)
                if p.changed:
                    report.changed_nodes += 1
        self._note_other_sources(left_to, report)
        await self._send(patches, report)
        if hot is not None and not report.patch_errors and not report.not_leader:
            self.metrics.last_success.labels(HOT_VALUE_KEY).set(now)

    def _note_other_sources(self, left_to: Mapping[str, str], report: CycleReport) -> None:
        """Count the nodes left to another source this cycle; log each once when it starts, and when the
        annotator writes it again."""
        report.other_source = len(left_to)
        if left_to:
            self.metrics.load_source_conflicts.inc(len(left_to))
        for node, other in sorted(left_to.items()):
            if self._left_to.get(node) != other:
                log.warning(
                    "node %s: %s has fresh load values there (ballast.io/load-source); the annotator leaves "
                    "them and writes nothing on this node while they stay fresh. Run one load source per "
                    "node: the agent's --report-load or the annotator",
                    node,
                    other,
                )
        for node in sorted(self._left_to.keys() - left_to.keys()):
            log.info(
                "node %s: no fresh values of %s any more; the annotator writes it", node, self._left_to[node]
            )
        self._left_to = dict(left_to)

    def _account(self, metric: str, matched: MatchResult, nodes: int, report: CycleReport) -> None:
        without = nodes - len(matched.values)
        report.without_data[metric] = without
        report.conflicts += len(matched.conflicts)
        self.metrics.nodes_without_data.labels(metric).set(without)
        self.metrics.unmatched_series.labels(metric).set(matched.unmatched)
        if matched.conflicts:
            self.metrics.conflicts.labels(metric).inc(len(matched.conflicts))
            for c in matched.conflicts[:_LOGGED_CONFLICTS]:
                log.warning(
                    "%s: node %s matches %d series by %s; kept %s = %g, ignored %s",
                    metric,
                    c.node,
                    1 + len(c.dropped),
                    c.rule.name,
                    c.kept.describe(),
                    c.kept.value,
                    ", ".join(f"{s.describe()} = {s.value:g}" for s in c.dropped),
                )
            if len(matched.conflicts) > _LOGGED_CONFLICTS:
                log.warning(
                    "%s: %d more nodes match several series (the highest value is kept)",
                    metric,
                    len(matched.conflicts) - _LOGGED_CONFLICTS,
                )
        if matched.unusable:
            sample = ", ".join(f"{n}={v}" for n, v in sorted(matched.unusable.items())[:3])
            log.info(
                "%s: %d nodes have only NaN or negative values (%s); their annotations are left alone",
                metric,
                len(matched.unusable),
                sample,
            )

    async def _send(self, patches: Sequence[NodePatch], report: CycleReport) -> None:
        if not patches:
            return
        loop = asyncio.get_running_loop()
        errors: list[str] = []
        results = await asyncio.gather(
            *(loop.run_in_executor(self._pool, self._patch_one, p) for p in patches)
        )
        for p, (outcome, detail) in zip(patches, results, strict=True):
            self.metrics.patches.labels(outcome).inc()
            if outcome == "ok":
                report.patches += 1
                for key in p.annotations:
                    self.metrics.annotations_written.labels(key).inc()
            elif outcome == "skipped":
                report.not_leader += 1
            elif outcome == "error":
                report.patch_errors += 1
                errors.append(f"{p.node}: {detail}")
        if errors:
            self.metrics.failures.labels("patch").inc(len(errors))
            log.warning(
                "%d node patches failed (retried next cycle), e.g. %s", len(errors), "; ".join(errors[:3])
            )

    def _patch_one(self, patch: NodePatch) -> tuple[str, str]:
        if not self.may_write():
            return "skipped", ""
        try:
            node = self.writer.patch_node(patch.node, patch.body())
        except Exception as exc:
            return "error", str(exc)
        if node is None:
            return "gone", ""
        self.nodes.update(node)
        return "ok", ""


async def run_loop(
    annotator: Annotator,
    schedule: Schedule,
    *,
    stop: threading.Event,
    is_leader: Callable[[], bool] = lambda: True,
    heartbeat: Callable[[], None] = lambda: None,
    monotonic: Callable[[], float] = time.monotonic,
    poll: float = 0.25,
) -> None:
    """Run cycles on ``schedule`` while leading, until ``stop`` is set.

    On (re)gaining leadership everything is due at once: the previous leader's schedule is unknown, and
    the planner skips whatever it already wrote.
    """
    leading = False
    while not stop.is_set():
        heartbeat()
        if not is_leader():
            if leading:
                log.info("not leading any more: annotation paused")
            leading = False
            await asyncio.sleep(poll)
            continue
        if not leading:
            schedule.reset()
            leading = True
        now = monotonic()
        if now >= schedule.next_wakeup():
            due = schedule.due(now)
            report = await annotator.cycle(due)
            for metric in due:
                schedule.done(metric, now, metric in report.synced)
            schedule.cycle_done(now)
        remaining = schedule.next_wakeup() - monotonic()
        if remaining > 0 and not stop.is_set():
            await asyncio.sleep(min(poll, remaining))
