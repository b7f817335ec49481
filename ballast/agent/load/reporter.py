"""Publishing what the agent measured: the node's load annotations and its ``NodeLoad``.

``LoadReporter.tick()`` runs every ``--load-sample-interval``: one sample into the history, then

- **the Node's annotations**: each metric the policy's ``syncPolicy`` names that the agent knows (crane's
  six, ``ballast.agent.load.history.CRANE_METRICS``) is written at its period, and ``node_hot_value`` (when
  the
  policy has ``hotValue`` windows) every report interval; whatever is due goes in one merge patch with
  the ``ballast.io/load-source`` stamp. A name the agent does not know is logged once and left to the
  annotator. When another source's fresh values are on the Node
  (``ballast.model.load_source.other_fresh_source``), nothing is written there: logged once, counted.
- **the NodeLoad** (``ballast.contract.nodeload``): created once when missing (owned by the Node), then only
its
  status is written, at most once per ``--load-report-interval``: the node's and each pod's mean usage
  over the 5-minute window, for the pods bound to this node that have both figures; when the policy
  names a pressure metric, each pod's pressure (``cpu``/``memory``/``io`` ``some`` shares, cgroup v2) and
  the share of the window its CPU limit held it (``throttled``).

When pods are bound to the node but none of their cgroups can be found for ``BLIND_SAMPLES`` samples in a
row, the NodeLoad would list no pod and say nothing: the reporter asks the kubelet's cgroup layout again
(``layout``; it may have been unreadable at start), and if that changes nothing, says so once in the log
and in ``ballast_agent_load_pod_cgroups_missing``.

Both go out on report ticks only (every ``--load-report-interval``; an annotation falls due on the report
tick nearest its period), so a node costs the API server two writes per report interval whatever the
policy's periods: the status and one patch (and the NodeLoad's create, once). Memory is reported in whole
MiB. A failed write is logged once per distinct message, counted, and retried on the next report; nothing
here raises out of ``tick``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.load.checkpoint import HistoryCheckpoint
from ballast.agent.load.history import CRANE_METRICS, WINDOW_MINUTES, LoadHistory, measures
from ballast.agent.load.metrics import LoadMetrics
from ballast.agent.load.pods import NodePods
from ballast.agent.load.sampler import KernelReading, Sampler
from ballast.contract.annotations import HOT_VALUE_KEY, format_hot_value, format_load, pressure_metric
from ballast.contract.nodeload import NODELOAD_PATH, NodeLoadStatus, PodUsage, new_object, render_status
from ballast.kube.client import ApiError, Kube, path_for
from ballast.model.hot_value import hot_value_of
from ballast.model.load_source import LOAD_SOURCE_KEY, agent_source, other_fresh_source
from ballast.model.policy import Policy

__all__ = ["BLIND_SAMPLES", "LoadReporter", "TickResult"]

log = logging.getLogger("ballast.agent.load")

BLIND_SAMPLES = 3
"""Samples in a row with pods bound and no pod cgroup found before the agent says so: a new pod's cgroup
appears a moment after the pod is bound, so one blind sample means nothing."""


@dataclass
class TickResult:
    sampled: bool = False
    annotations: tuple[str, ...] = ()
    """The annotation keys written this tick (the stamp included)."""
    nodeload: bool = False
    """The NodeLoad status was written."""
    conflict: str | None = None
    """Another source whose fresh values kept the agent off the Node's annotations."""
    errors: list[str] = field(default_factory=list)


class LoadReporter:
    def __init__(
        self,
        kube: Kube,
        node_name: str,
        sampler: Sampler,
        pods: NodePods,
        policy: Callable[[], Policy],
        node: Callable[[], Mapping[str, Any] | None],
        *,
        history: LoadHistory | None = None,
        checkpoint: HistoryCheckpoint | None = None,
        metrics: LoadMetrics | None = None,
        sample_interval: float = 10.0,
        report_interval: float = 60.0,
        clock: Callable[[], float] = time.time,
        layout: Callable[[], CgroupLayout | None] | None = None,
    ) -> None:
        """``policy``: the current policy (``PolicyStore.current``); ``node``: this node's Node object as
        the agent's watch last saw it (its uid owns the NodeLoad, its annotations say who wrote them);
        ``layout``: the kubelet's cgroup layout as its settings say now (``None``: unreadable)."""
        self.kube = kube
        self.node_name = node_name
        self.sampler = sampler
        self.pods = pods
        self.policy = policy
        self.node = node
        self.checkpoint = checkpoint
        self.history = (
            history if history is not None else (checkpoint.load() if checkpoint else LoadHistory())
        )
        self.metrics = metrics or LoadMetrics()
        if checkpoint is not None and checkpoint.rejected is not None:
            self.metrics.checkpoint_rejected.inc()
        self.sample_interval = sample_interval
        self.report_interval = report_interval
        self._clock = clock
        self.source = agent_source(node_name)
        self.node_path = path_for("v1", "nodes", name=node_name)
        self.nodeload_path = f"{NODELOAD_PATH}/{node_name}"
        self._written: dict[str, float] = {}
        self._last_report: float | None = None
        self._last_saved: float | None = None
        self._nodeload_exists = False
        self._unknown_logged: set[str] = set()
        self._conflict_logged: str | None = None
        self._last_error: dict[str, str] = {}
        self.layout = layout
        self._pressure_ticks: int | None = None
        """Ticks since pressure was last read (1: this one), ``None`` while the policy names none."""
        self._blind = 0
        """Samples in a row with pods bound to the node and none of their cgroups found."""
        self._said_blind = False

    # --- one tick -----------------------------------------------------------------------------------

    def tick(self) -> TickResult:
        result = TickResult()
        started = time.perf_counter()
        try:
            pressure = self._pressure_due()
            sample = self.sampler.sample(self.pods.refs(), pressure=pressure)
        except (OSError, ValueError) as e:
            self.metrics.samples.labels("error").inc()
            self._error("sample", f"reading the node's load failed: {e}", result)
            return result
        self.metrics.sample_duration.observe(time.perf_counter() - started)
        self.metrics.samples.labels("ok").inc()
        self.metrics.pods_measured.set(len(sample.pods))
        if sample.skipped:
            self.metrics.pods_skipped.inc(sample.skipped)
        self._check_pod_cgroups(sample)
        h = self.history
        h.add_node(sample.when, sample.cpu_ratio, sample.cpu_cores, sample.mem_ratio, sample.mem_bytes)
        h.add_pressure(sample.when, sample.pressure)
        for uid, pod in sample.pods.items():
            h.add_pod(sample.when, uid, pod.cores, pod.working_set)
            if pod.pressure or pod.throttled is not None:
                shares = dict(pod.pressure)
                if pod.throttled is not None:
                    shares["throttled"] = pod.throttled
                h.add_pod_pressure(sample.when, uid, shares)
        h.expire(sample.when)
        result.sampled = True
        now = sample.when
        # Everything goes out on report ticks: the annotations that are due, in one patch, and the status.
        # So a node costs two writes per report interval, whatever the metrics' periods.
        due = self._last_report is None or now - self._last_report >= self.report_interval - self._slack
        if due and self.history.node_means(now) is not None:  # the first tick only seeds the CPU counters
            self._last_report = now
            self._annotate(self.policy(), now, result)
            self._report(now, result)
        if self.checkpoint is not None and (
            self._last_saved is None or now - self._last_saved >= self.report_interval - self._slack
        ):
            self._save(now, result)
        return result

    def _pressure_due(self) -> bool:
        """Pressure is read when the policy names a pressure metric, every report interval's worth of
        samples (the first tick, then every sixth at 10 s and 1 m): its counters are cumulative, so one
        share over the interval is what six over its samples would average to, and each pod costs four
        more files."""
        if not any(pressure_metric(m) is not None for m in self.policy().sync_periods):
            self._pressure_ticks = None
            return False
        every = max(1, round(self.report_interval / self.sample_interval))
        ticks = self._pressure_ticks
        self._pressure_ticks = 1 if ticks is None or ticks >= every else ticks + 1
        return self._pressure_ticks == 1

    def _check_pod_cgroups(self, sample: KernelReading) -> None:
        """Notice pods bound here whose cgroups are nowhere to be found (module docstring)."""
        cgroups = self.sampler.cgroups
        if cgroups is None:
            return
        bound = len(sample.pods) + sample.skipped
        if bound == 0 or sample.pods:
            if self._said_blind:
                log.info("node %s: pod cgroups found again (%d of %d pods measured)", self.node_name,
                         len(sample.pods), bound)  # fmt: skip
            self._blind, self._said_blind = 0, False
            self.metrics.pod_cgroups_missing.set(0)
            return
        self._blind += 1
        if self._blind % BLIND_SAMPLES:
            return
        # Every BLIND_SAMPLES samples while blind: the kubelet's settings may be readable now.
        kubelet = self.layout() if self.layout is not None else None
        if kubelet is not None and kubelet != cgroups.layout:
            log.info("node %s: following the kubelet's cgroup layout now: %s (was %s)", self.node_name,
                     kubelet.describe(), cgroups.layout.describe())  # fmt: skip
            cgroups.relayout(kubelet)
            return
        self.metrics.pod_cgroups_missing.set(1)
        if self._said_blind:
            return
        self._said_blind = True
        where = cgroups.kubepods_dir()
        if where is None:
            log.warning(
                "node %s: %d pods are bound here, but the kubelet runs with cgroupsPerQOS: false and makes "
                "no pod cgroups: the NodeLoad lists no pods (the node's own load is still measured)",
                self.node_name,
                bound,
            )
            return
        log.warning(
            "node %s: %d pods are bound here, but none of their cgroups is under %s (%s): the NodeLoad "
            "lists no pods. Is --cgroup-root the host's cgroup tree, and can the agent read the kubelet's "
            "settings (--kubelet-config FILE or --kubelet-configz) for its cgroupRoot and cgroupDriver?",
            self.node_name,
            bound,
            where,
            cgroups.describe(),
        )

    def _save(self, now: float, result: TickResult) -> None:
        assert self.checkpoint is not None
        try:
            self.checkpoint.save(self.history)
        except OSError as e:
            self.metrics.write_errors.labels("checkpoint").inc()
            self._error("checkpoint", f"saving the load history {self.checkpoint.path}: {e}", result)
            return
        self._last_error.pop("checkpoint", None)
        self._last_saved = now

    @property
    def _slack(self) -> float:
        """A report falls due up to half a tick early, so a 1m interval with 10s ticks is not 1m10s."""
        return self.sample_interval / 2

    def _annotation_due(self, key: str, period: float, now: float) -> bool:
        """Due on the report tick nearest its period (half a report interval early at most)."""
        last = self._written.get(key)
        return last is None or now - last >= period - self.report_interval / 2

    def _annotate(self, policy: Policy, now: float, result: TickResult) -> None:
        due: dict[str, str] = {}
        known = [m for m in policy.sync_periods if measures(m)]
        for name in policy.sync_periods:
            if name not in known and name not in self._unknown_logged:
                self._unknown_logged.add(name)
                log.info("syncPolicy metric %s is not one the agent measures: left to the annotator", name)
        values = self.history.values(
            now,
            [m for m in known if self._annotation_due(m, policy.sync_periods[m], now)],
            self.sample_interval,
        )
        for name, ratio in values.items():
            due[name] = format_load(ratio, now)
        if policy.hot_values and self._annotation_due(HOT_VALUE_KEY, self.report_interval, now):
            due[HOT_VALUE_KEY] = format_hot_value(
                hot_value_of(self.pods.count_bound_since(), now, policy.hot_values), now
            )
        if not due:
            return
        node = self.node()
        annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
        other = other_fresh_source(annotations, self.source, policy, now)
        if other is not None:
            result.conflict = other
            self.metrics.source_conflicts.inc()
            if other != self._conflict_logged:
                log.warning(
                    "node %s: %s wrote its load annotations and they are fresh; the agent leaves them "
                    "(run one load source per node: the agent, or the annotator)",
                    self.node_name,
                    other,
                )
                self._conflict_logged = other
            return
        if self._conflict_logged is not None:
            log.info(
                "node %s: %s's load values went stale; the agent writes them again",
                self.node_name,
                self._conflict_logged,
            )
            self._conflict_logged = None
        due[LOAD_SOURCE_KEY] = self.source
        try:
            self.kube.merge_patch(self.node_path, {"metadata": {"annotations": due}})
        except ApiError as e:
            self.metrics.write_errors.labels("node").inc()
            self._error("node", f"patching Node {self.node_name}'s load annotations: {e}", result)
            return
        self.metrics.writes.labels("node").inc()
        self._last_error.pop("node", None)
        for key in due:
            self._written[key] = now
        result.annotations = tuple(sorted(due))

    def _status(self, now: float) -> NodeLoadStatus | None:
        node = self.history.node_means(now)
        if node is None:
            return None
        refs = {r.uid: r for r in self.pods.refs()}
        pressure = self.history.pod_pressure_means(now)
        pods = tuple(
            PodUsage(
                ref.namespace,
                ref.name,
                uid,
                cpu,
                _mib(memory),
                {k: v for k, v in pressure.get(uid, {}).items() if k != "throttled"},
                pressure.get(uid, {}).get("throttled"),
            )
            for uid, (cpu, memory) in sorted(self.history.pod_means(now).items())
            if (ref := refs.get(uid)) is not None
        )
        # crane's six whatever the policy syncs, and the percentile and pressure metrics it names
        measured = [
            *CRANE_METRICS,
            *(m for m in self.policy().sync_periods if m not in CRANE_METRICS and measures(m)),
        ]
        metrics = self.history.values(now, measured, self.sample_interval)
        return NodeLoadStatus(now, WINDOW_MINUTES * 60.0, node[0], _mib(node[1]), pods, metrics)

    def _report(self, now: float, result: TickResult) -> None:
        status = self._status(now)
        if status is None:
            return
        body = {"status": render_status(status)}
        try:
            if not self._nodeload_exists:
                self._create()
            try:
                self.kube.merge_patch(f"{self.nodeload_path}/status", body)
            except ApiError as e:
                if e.code != 404:
                    raise
                self._nodeload_exists = False  # deleted under us (or with its Node): create, then again
                self._create()
                self.kube.merge_patch(f"{self.nodeload_path}/status", body)
        except ApiError as e:
            self.metrics.write_errors.labels("nodeload").inc()
            hint = ""
            if e.code == 404:
                hint = " (is the NodeLoad CRD installed? kubectl apply -f scheduler_config/crd-nodeload.yaml)"
            self._error("nodeload", f"writing NodeLoad {self.node_name}: {e}{hint}", result)
            return
        self.metrics.writes.labels("nodeload").inc()
        self.metrics.last_report.set(now)
        self._last_error.pop("nodeload", None)
        result.nodeload = True

    def _create(self) -> None:
        node = self.node() or {}
        uid = str((node.get("metadata") or {}).get("uid") or "") or None
        try:
            self.kube.create(NODELOAD_PATH, new_object(self.node_name, uid))
            log.info("created NodeLoad %s", self.node_name)
        except ApiError as e:
            if e.code != 409:
                raise
        self._nodeload_exists = True

    def _error(self, what: str, message: str, result: TickResult) -> None:
        result.errors.append(message)
        if self._last_error.get(what) != message:
            log.error("%s; retrying on the next tick", message)
            self._last_error[what] = message
        else:
            log.debug("%s", message)


def _mib(nbytes: int) -> int:
    """Memory in whole MiB: ``"300Mi"`` rather than ``"314572731"`` keeps 110 pods' NodeLoad under 16 KiB,
    and a MiB is below anything the rebalancer tells apart."""
    return round(nbytes / 2**20) * 2**20
