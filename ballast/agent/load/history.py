"""crane's windows over the agent's samples: pure, no I/O.

crane's recording rules are ``*_avg_5m = avg_over_time(active[5m])`` and ``*_max_avg_1h`` /
``*_max_avg_1d = max_over_time(*_avg_5m[1h | 1d])``. The agent keeps what they need and no more:

- ``RecentSamples``: every sample of the last 30 minutes. ``*_avg_5m`` is the mean of those of the last
  300 s, each sample counting once, as ``avg_over_time`` counts them. (A mean of minute means would weigh
  the current minute's first sample like a whole minute: on a node with short bursts that swings the
  value by a third.) A percentile metric (``cpu_usage_p95_5m``,
  ``ballast.contract.annotations.percentile_metric``) is taken from those of its window by koordlet's
  rule, ``sorted[n * N // 100 - 1]`` (the first at least), and omitted while the window holds fewer than
  half the samples it would hold at the sampling interval.
- ``MinuteSeries``: a sum and a count per minute, in a ring of ``size`` minutes (1440 for a day); a minute
  without samples (the agent was down) holds nothing. ``avg(now, 5)`` is the mean of the samples of the
  last five minutes; ``max_avg(now, 60, 5)`` evaluates it at every minute of the last hour (as the rule
  records it every minute) and takes the largest.

A window with less history than its length gives the mean (or maximum) of what there is, as Prometheus's
``avg_over_time`` / ``max_over_time`` do, so a new node has values within its first report.

Pressure metrics (``cpu_pressure_some_avg_5m``, ``memory_pressure_full_max_avg_1h``, ...,
``ballast.contract.annotations.pressure_metric``) are crane's windows over the node's pressure shares
(``ballast.agent.load.pressure``), one series per ``<resource>_pressure_<kind>``, made when the first
share arrives: a node whose policy names none keeps none.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from ballast.contract.annotations import (
    CPU_USAGE_AVG_5M,
    CPU_USAGE_MAX_AVG_1D,
    CPU_USAGE_MAX_AVG_1H,
    MEM_USAGE_AVG_5M,
    MEM_USAGE_MAX_AVG_1D,
    MEM_USAGE_MAX_AVG_1H,
    percentile_metric,
    pressure_metric,
)

__all__ = ["MINUTES_PER_DAY", "MinuteSeries", "RecentSamples", "minute_of"]

MINUTES_PER_DAY = 1440


def minute_of(when: float) -> int:
    return int(when // 60)


class MinuteSeries:
    """The last ``size`` minutes of one metric, a mean per minute."""

    __slots__ = ("_counts", "_last", "_sums", "size")

    def __init__(self, size: int = MINUTES_PER_DAY) -> None:
        if size <= 0:
            raise ValueError("size must be positive")
        self.size = size
        self._sums = [0.0] * size
        self._counts = [0] * size
        self._last: int | None = None
        """The newest minute written; slots older than ``size`` minutes before it are empty."""

    def _advance(self, minute: int) -> None:
        last = self._last
        if last is not None and minute <= last:
            return
        if last is None or minute - last >= self.size:
            self._sums = [0.0] * self.size
            self._counts = [0] * self.size
        else:
            for m in range(last + 1, minute + 1):
                i = m % self.size
                self._sums[i] = 0.0
                self._counts[i] = 0
        self._last = minute

    def add(self, when: float, value: float) -> None:
        """One sample taken at ``when`` (Unix seconds). A sample older than the ring, or not finite, is
        dropped; one for a past minute still in the ring joins that minute."""
        if not math.isfinite(value):
            return
        minute = minute_of(when)
        self._advance(minute)
        assert self._last is not None
        if minute <= self._last - self.size:
            return
        i = minute % self.size
        self._sums[i] += value
        self._counts[i] += 1

    def _slot(self, minute: int) -> tuple[float, int]:
        """``(sum, count)`` of ``minute``; nothing when it is not in the ring."""
        last = self._last
        if last is None or minute > last or minute <= last - self.size:
            return 0.0, 0
        i = minute % self.size
        return self._sums[i], self._counts[i]

    def mean_at(self, minute: int) -> float | None:
        """The mean of ``minute``, or ``None`` when it has no samples (or left the ring)."""
        total, count = self._slot(minute)
        return total / count if count else None

    def _window(self, now: float, minutes: int) -> list[tuple[float, int]]:
        """``(sum, count)`` of each of the ``minutes`` minutes ending with ``now``'s, oldest first."""
        end = minute_of(now)
        return [self._slot(m) for m in range(end - minutes + 1, end + 1)]

    def means(self, now: float, minutes: int) -> list[float | None]:
        """The minute means of the ``minutes`` minutes ending with ``now``'s, oldest first."""
        return [total / count if count else None for total, count in self._window(now, minutes)]

    def avg(self, now: float, minutes: int = 5) -> float | None:
        """Mean of the samples of the last ``minutes`` minutes, each counting once (``None`` without any)."""
        total = count = 0.0
        for s, c in self._window(now, minutes):
            total += s
            count += c
        return total / count if count else None

    def max_avg(self, now: float, window_minutes: int, avg_minutes: int = 5) -> float | None:
        """The largest ``avg_minutes``-minute mean evaluated at each minute of the last
        ``window_minutes`` (``None`` when no minute of it had data within ``avg_minutes``)."""
        values = self._window(now, window_minutes + avg_minutes - 1)
        best: float | None = None
        # A sliding sum over the minutes: O(window) rather than O(window x avg).
        total, count = 0.0, 0
        for i, (s, c) in enumerate(values):
            total += s
            count += c
            if i >= avg_minutes:
                old_s, old_c = values[i - avg_minutes]
                total -= old_s
                count -= old_c
            if i >= avg_minutes - 1 and count:
                mean = total / count
                if best is None or mean > best:
                    best = mean
        return best

    # --- checkpoint form ----------------------------------------------------------------------------

    def to_minutes(self) -> tuple[int | None, list[float | None], list[int]]:
        """``(newest minute, each minute's mean and its sample count, oldest first)``: what a checkpoint
        keeps, so a restored minute weighs what it weighed."""
        if self._last is None:
            return None, [], []
        slots = [self._slot(m) for m in range(self._last - self.size + 1, self._last + 1)]
        return self._last, [total / count if count else None for total, count in slots], [c for _, c in slots]

    @classmethod
    def from_minutes(
        cls, size: int, last: int | None, means: Iterable[float | None], counts: Iterable[int] | None = None
    ) -> MinuteSeries:
        """Rebuild from ``to_minutes``. Without ``counts`` (a checkpoint of the first format) each restored
        minute counts as one sample of its mean."""
        series = cls(size)
        if last is None:
            return series
        values = list(means)[-size:]
        weights = list(counts)[-size:] if counts is not None else [1] * len(values)
        series._last = last
        for offset, (v, c) in enumerate(zip(values, weights, strict=True)):
            if v is None or not math.isfinite(v) or c <= 0:
                continue
            minute = last - len(values) + 1 + offset
            i = minute % size
            series._sums[i] = float(v) * c
            series._counts[i] = c
        return series


class RecentSamples:
    """The samples of the last ``seconds``: crane's ``avg_over_time`` window, each sample counting once."""

    __slots__ = ("_samples", "seconds")

    def __init__(self, seconds: float = 300.0) -> None:
        self.seconds = seconds
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, when: float, value: float) -> None:
        """One sample; one not finite, or older than the newest by the window or more, is dropped."""
        if not math.isfinite(value) or not math.isfinite(when):
            return
        newest = max(when, self._samples[-1][0]) if self._samples else when
        if when <= newest - self.seconds:
            return
        self._samples.append((when, value))
        while self._samples[0][0] <= newest - self.seconds:
            self._samples.popleft()

    def window(self, now: float, seconds: float | None = None) -> list[float]:
        """The samples taken in ``(now - seconds, now]`` (``seconds`` at most the horizon)."""
        start = now - (self.seconds if seconds is None else min(seconds, self.seconds))
        return [value for when, value in self._samples if start < when <= now]

    def mean(self, now: float, seconds: float | None = None) -> float | None:
        """Mean of the samples of the last ``seconds`` (``None`` without any)."""
        values = self.window(now, seconds)
        return sum(values) / len(values) if values else None

    def percentile(self, now: float, percentile: int, seconds: float, interval: float) -> float | None:
        """koordlet's percentile of the last ``seconds``: ``sorted[n * percentile // 100 - 1]``, the first
        at least; ``None`` while fewer than half the samples a full window holds at ``interval``."""
        values = self.window(now, seconds)
        if not values or len(values) < 0.5 * seconds / interval:
            return None
        values.sort()
        return values[max(len(values) * percentile // 100 - 1, 0)]

    def samples(self) -> list[tuple[float, float]]:
        """The samples held, oldest first: what a checkpoint keeps."""
        return list(self._samples)


# --- the node's and its pods' history -----------------------------------------------------------------

WINDOW_MINUTES = 5
"""The NodeLoad's window and crane's ``*_avg_5m``."""
RECENT_MINUTES = 30
"""The samples kept: the longest percentile window."""

CRANE_METRICS: dict[str, tuple[str, int]] = {
    CPU_USAGE_AVG_5M: ("cpu", 0),
    CPU_USAGE_MAX_AVG_1H: ("cpu", 60),
    CPU_USAGE_MAX_AVG_1D: ("cpu", MINUTES_PER_DAY),
    MEM_USAGE_AVG_5M: ("mem", 0),
    MEM_USAGE_MAX_AVG_1H: ("mem", 60),
    MEM_USAGE_MAX_AVG_1D: ("mem", MINUTES_PER_DAY),
}
"""crane's metric names -> (the ratio series, 0 for the 5-minute mean or the max-of-5m-means window in
minutes)."""


PRESSURE_SERIES = (
    "cpu_pressure_some",
    "memory_pressure_some",
    "memory_pressure_full",
    "io_pressure_some",
    "io_pressure_full",
)
"""The node's pressure shares the agent keeps (``pressure_metric(name).series``)."""
POD_PRESSURE = ("cpu", "memory", "io", "throttled")
"""A pod's pressure figures in the NodeLoad: its ``some`` shares and its throttled share."""


def measures(name: str) -> bool:
    """Whether the agent measures the metric ``name``: crane's, a percentile or a pressure metric. A
    syncPolicy name it does not measure is not the agent's to write."""
    return name in CRANE_METRICS or percentile_metric(name) is not None or pressure_metric(name) is not None


def windowed(name: str) -> tuple[str, int] | None:
    """A crane-style metric's (series, window) as in ``CRANE_METRICS``: crane's six and the pressure
    metrics; ``None`` for any other name."""
    known = CRANE_METRICS.get(name)
    if known is not None:
        return known
    wanted = pressure_metric(name)
    return None if wanted is None else (wanted.series, wanted.window_minutes)


class LoadHistory:
    """What the agent remembers: the node's CPU and memory ratios for a day (crane's windows), its usage
    and each pod's for the NodeLoad window. Pods not sampled for a whole window are forgotten."""

    def __init__(
        self, ratios: dict[str, MinuteSeries] | None = None, recent: dict[str, RecentSamples] | None = None
    ) -> None:
        self.ratios = ratios or {"cpu": MinuteSeries(), "mem": MinuteSeries()}
        self.recent = recent or {name: RecentSamples(RECENT_MINUTES * 60.0) for name in self.ratios}
        """The node's ratios' samples of the last 30 minutes: ``*_avg_5m`` and the percentile metrics."""
        self.node_cpu = MinuteSeries(WINDOW_MINUTES)
        self.node_memory = MinuteSeries(WINDOW_MINUTES)
        self.pods: dict[str, tuple[MinuteSeries, MinuteSeries]] = {}
        self.pod_pressure: dict[str, dict[str, MinuteSeries]] = {}
        """pod uid -> ``POD_PRESSURE`` name -> its shares over the window (pods measured with pressure)."""
        self._pod_seen: dict[str, int] = {}

    def add_node(
        self, when: float, cpu_ratio: float | None, cpu_cores: float | None, mem_ratio: float, mem_bytes: int
    ) -> None:
        if cpu_ratio is not None:
            self.ratios["cpu"].add(when, cpu_ratio)
            self.recent["cpu"].add(when, cpu_ratio)
        if cpu_cores is not None:
            self.node_cpu.add(when, cpu_cores)
        self.ratios["mem"].add(when, mem_ratio)
        self.recent["mem"].add(when, mem_ratio)
        self.node_memory.add(when, float(mem_bytes))

    def add_pressure(self, when: float, shares: dict[str, float]) -> None:
        """The node's pressure shares of one sample (``PRESSURE_SERIES`` names; others are ignored)."""
        for name, value in shares.items():
            if name not in PRESSURE_SERIES:
                continue
            if name not in self.ratios:
                self.ratios[name] = MinuteSeries()
                self.recent[name] = RecentSamples(RECENT_MINUTES * 60.0)
            self.ratios[name].add(when, value)
            self.recent[name].add(when, value)

    def add_pod_pressure(self, when: float, uid: str, shares: dict[str, float]) -> None:
        """A pod's pressure shares of one sample (``POD_PRESSURE`` names), after its ``add_pod``."""
        series = self.pod_pressure.setdefault(uid, {})
        for name, value in shares.items():
            if name in POD_PRESSURE:
                series.setdefault(name, MinuteSeries(WINDOW_MINUTES)).add(when, value)

    def add_pod(self, when: float, uid: str, cores: float | None, working_set: int | None) -> None:
        series = self.pods.get(uid)
        if series is None:
            series = self.pods[uid] = (MinuteSeries(WINDOW_MINUTES), MinuteSeries(WINDOW_MINUTES))
        if cores is not None:
            series[0].add(when, cores)
        if working_set is not None:
            series[1].add(when, float(working_set))
        self._pod_seen[uid] = minute_of(when)

    def expire(self, now: float) -> None:
        oldest = minute_of(now) - WINDOW_MINUTES
        for uid in [u for u, m in self._pod_seen.items() if m <= oldest]:
            del self._pod_seen[uid]
            self.pods.pop(uid, None)
            self.pod_pressure.pop(uid, None)

    def values(self, now: float, names: Iterable[str], interval: float) -> dict[str, float]:
        """The named metrics the agent measures (crane's, and the percentile metrics at the sampling
        ``interval``) that have data, as ratios in [0, 1]. A maximum also counts the 5-minute mean of this
        moment, so ``*_max_avg_1h`` is never below ``*_avg_5m``."""
        out: dict[str, float] = {}
        for name in names:
            if (wanted := percentile_metric(name)) is not None:
                seconds = wanted.window_minutes * 60.0
                value = self.recent[wanted.series].percentile(now, wanted.percentile, seconds, interval)
                if value is not None:
                    out[name] = min(1.0, max(0.0, value))
                continue
            known = windowed(name)
            if known is None or known[0] not in self.recent:
                continue
            current = self.recent[known[0]].mean(now, WINDOW_MINUTES * 60.0)
            value = current
            if known[1]:
                values = [v for v in (current, self.ratios[known[0]].max_avg(now, known[1])) if v is not None]
                value = max(values) if values else None
            if value is not None:
                out[name] = min(1.0, max(0.0, value))
        return out

    def node_means(self, now: float) -> tuple[float, int] | None:
        """The node's mean CPU (cores) and memory (bytes) over the window, ``None`` before any sample."""
        cpu = self.node_cpu.avg(now, WINDOW_MINUTES)
        memory = self.node_memory.avg(now, WINDOW_MINUTES)
        if cpu is None or memory is None:
            return None
        return cpu, round(memory)

    def pod_pressure_means(self, now: float) -> dict[str, dict[str, float]]:
        """Pod uid -> its pressure figures' means over the window (``POD_PRESSURE`` names it has)."""
        out: dict[str, dict[str, float]] = {}
        for uid, series in self.pod_pressure.items():
            means = {name: s.avg(now, WINDOW_MINUTES) for name, s in series.items()}
            kept = {name: min(1.0, max(0.0, v)) for name, v in means.items() if v is not None}
            if kept:
                out[uid] = kept
        return out

    def pod_means(self, now: float) -> dict[str, tuple[float, int]]:
        """Pod uid -> mean cores and working-set bytes over the window, for pods with both."""
        out: dict[str, tuple[float, int]] = {}
        for uid, (cpu, memory) in self.pods.items():
            c = cpu.avg(now, WINDOW_MINUTES)
            m = memory.avg(now, WINDOW_MINUTES)
            if c is not None and m is not None:
                out[uid] = (c, round(m))
        return out
