"""Node load annotations: crane's metric names (the keys), ``"<value>,<timestamp>"`` parsing, formatting and
freshness.

The format is crane-scheduler's, so Ballast and crane annotators are interchangeable. Parsing is
deliberately forgiving in one direction only: anything that cannot be read becomes "no information"
(``None``), never an exception, because a bad annotation must not reject a node or break a request.
There is one reader, ``read_sample``, so the extender, the annotator and the agent judge the same text alike:
a value above the sane cap, or stamped further ahead than the allowed clock skew, is no information to all.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

from ballast.contract.times import format_rfc3339, parse_rfc3339

CPU_USAGE_AVG_5M = "cpu_usage_avg_5m"
CPU_USAGE_MAX_AVG_1H = "cpu_usage_max_avg_1h"
CPU_USAGE_MAX_AVG_1D = "cpu_usage_max_avg_1d"
MEM_USAGE_AVG_5M = "mem_usage_avg_5m"
MEM_USAGE_MAX_AVG_1H = "mem_usage_max_avg_1h"
MEM_USAGE_MAX_AVG_1D = "mem_usage_max_avg_1d"
CRANE_LOAD_METRICS = (
    CPU_USAGE_AVG_5M,
    CPU_USAGE_MAX_AVG_1H,
    CPU_USAGE_MAX_AVG_1D,
    MEM_USAGE_AVG_5M,
    MEM_USAGE_MAX_AVG_1H,
    MEM_USAGE_MAX_AVG_1D,
)
"""crane's recording-rule names for node load, the keys of its load annotations: what the agent measures and
what the annotator queries by default. The names are the contract with the extender and with crane tooling;
this is their one home (the policy files and docs spell them out for people)."""

PERCENTILE_METRIC_PATTERN = r"^(cpu|mem)_usage_p(5[0-9]|[6-9][0-9])_(5|10|30)m$"
"""Percentile metrics (beyond crane): ``cpu_usage_p<N>_<W>m`` and ``mem_usage_p<N>_<W>m``, N in 50..99,
W in 5, 10 or 30 minutes: the N-th percentile of the usage ratio's samples of the last W minutes. The agent
measures every one a policy's ``syncPolicy`` names; its admission policy admits these names by this
pattern (``scheduler_config/deploy/agent-admission-policy.yaml``, a test keeps the two equal)."""
_PERCENTILE_METRIC = re.compile(PERCENTILE_METRIC_PATTERN)


@dataclass(frozen=True, slots=True)
class PercentileMetric:
    """A percentile metric's name, read: ``series`` is ``cpu`` or ``mem``."""

    series: str
    percentile: int
    window_minutes: int


def percentile_metric(name: str) -> PercentileMetric | None:
    """``cpu_usage_p95_5m`` -> (cpu, 95, 5); ``None`` for any other name."""
    found = _PERCENTILE_METRIC.fullmatch(name)
    if found is None:
        return None
    return PercentileMetric(found[1], int(found[2]), int(found[3]))


PRESSURE_MARK = "_pressure_"
"""Pressure metrics (``cpu_pressure_some_avg_5m``, ``memory_pressure_full_avg_5m``, ...) carry this in
their names: the share of wall time tasks stalled, a signal of contention, not usage."""


def is_pressure_metric(name: str) -> bool:
    """A pressure metric: no estimate of a just-placed pod is added to it, and none is taken off it."""
    return PRESSURE_MARK in name


PRESSURE_METRIC_PATTERN = (
    r"^(cpu_pressure_some|(memory|io)_pressure_(some|full))_(avg_5m|max_avg_1h|max_avg_1d)$"
)
"""Pressure metrics the agent measures: ``<resource>_pressure_<some|full>_<window>`` with crane's windows
(``avg_5m``, ``max_avg_1h``, ``max_avg_1d``): the share of wall time (0..1) in which some (or, ``full``,
all) non-idle tasks stalled on the resource, from the kernel's PSI (``/proc/pressure/*``). No
``cpu_pressure_full``: the kernel reports 0 for it at the node. The agent's admission policy admits these
names by this pattern (a test keeps the two equal)."""
_PRESSURE_METRIC = re.compile(PRESSURE_METRIC_PATTERN)

PRESSURE_WINDOWS = {"avg_5m": 0, "max_avg_1h": 60, "max_avg_1d": 1440}
"""A pressure metric's window -> 0 for the 5-minute mean, else the minutes its 5-minute means' maximum
covers (crane's ``*_max_avg_*`` rule)."""


@dataclass(frozen=True, slots=True)
class PressureMetric:
    """A pressure metric's name, read: ``resource`` is ``cpu``, ``memory`` or ``io``, ``kind`` ``some`` or
    ``full``, ``window_minutes`` as in ``PRESSURE_WINDOWS``."""

    resource: str
    kind: str
    window_minutes: int

    @property
    def series(self) -> str:
        """The sampled share this metric is a window of: ``cpu_pressure_some`` and the like."""
        return f"{self.resource}_pressure_{self.kind}"


def pressure_metric(name: str) -> PressureMetric | None:
    """``memory_pressure_full_max_avg_1h`` -> (memory, full, 60); ``None`` for any other name."""
    if _PRESSURE_METRIC.fullmatch(name) is None:
        return None
    resource, _, rest = name.partition(PRESSURE_MARK)
    kind, _, window = rest.partition("_")
    return PressureMetric(resource, kind, PRESSURE_WINDOWS[window])


HOT_VALUE_KEY = "node_hot_value"
HOT_VALUE_VALID_SECONDS = 300.0
"""crane's DefautlHotVauleActivePeriod: a hot value counts for five minutes after it was written."""

EXTRA_ACTIVE_SECONDS = 300.0
"""crane's ExtraActivePeriod: a metric counts until ``timestamp + sync period + 5m``."""

MAX_LOAD_RATIO = 10.0
"""A usage ratio above this (1000 % of allocatable) is a broken writer, not a measurement."""
MAX_HOT_VALUE = 10_000.0
"""A hot value counts recently placed pods; 10 already takes the whole score, 10 000 is no count at all."""
MAX_FUTURE_SECONDS = 300.0
"""Clock skew allowed between the writer and the extender; a stamp further ahead would stay fresh forever."""

# crane's legacy layout "2006-01-02T15:04:05Z": a literal Z after a local wall-clock time.
_LEGACY = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One parsed annotation: the value and when it was measured (Unix seconds)."""

    value: float
    timestamp: float
    ordered_at: float | None = None
    """Set when the stamp was ahead of the extender's clock on arrival: that arrival time. Clocks drift
    between the annotator's machine and the extender's; a measurement cannot include pods placed after it
    arrived, so estimates are ordered against ``order_at`` and skew never switches them off."""

    @property
    def order_at(self) -> float:
        """When the measurement was taken, for ordering estimates: the stamp, at the latest its arrival."""
        return self.timestamp if self.ordered_at is None else self.ordered_at

    def age(self, now: float) -> float:
        return now - self.timestamp

    def expires_at(self, valid_for: float) -> float:
        return self.timestamp + valid_for

    def is_fresh(self, now: float, valid_for: float) -> bool:
        """A sample counts while ``timestamp + valid_for`` is in the future (the one freshness rule)."""
        return self.timestamp + valid_for > now


def fresh(sample: LoadSample | None, valid_for: float, now: float) -> LoadSample | None:
    """``sample`` while it counts, else ``None`` (missing and stale are both no information). The rule is
    ``LoadSample.is_fresh``, written out: a node's recomputation asks this some thirty times."""
    return sample if sample is not None and sample.timestamp + valid_for > now else None


def parse_timestamp(text: str, legacy_zone: tzinfo | None = None) -> float | None:
    """Parse an annotation timestamp into Unix seconds, or ``None`` when it cannot be read.

    RFC 3339 with any offset is read as written. With ``legacy_zone`` set, a second-precision
    ``...Z`` stamp is crane's legacy form and is read as a wall-clock time in that zone (crane wrote
    local time followed by a literal ``Z``).
    """
    s = text.strip()
    if not s:
        return None
    if legacy_zone is not None and _LEGACY.match(s):
        try:
            naive = datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            return None
        return naive.replace(tzinfo=legacy_zone).timestamp()
    # RFC 3339 requires an offset; a bare local time is ambiguous, so it carries no information.
    return parse_rfc3339(s)


def read_sample(
    raw: object,
    now: float,
    *,
    legacy_zone: tzinfo | None = None,
    cap: float = MAX_LOAD_RATIO,
    strict: bool = True,
) -> tuple[LoadSample | None, str | None]:
    """Read one annotation value, the one reader every program uses: ``(sample, None)``, ``(None, None)``
    when it is absent, or ``(None, reason)`` when it is there but cannot be a measurement.

    Malformed text, a value that is not a finite non-negative number and a timestamp that is not RFC 3339
    with an offset (or, with ``legacy_zone``, crane's legacy form) are never a measurement. ``strict`` (every
    reader that decides whether a value counts: the extender, a writer asking whether another writer's
    values are fresh) also refuses a value above ``cap``, the largest sane one (``MAX_LOAD_RATIO`` or
    ``MAX_HOT_VALUE``: anything the score and filter arithmetic cannot take safely), and a timestamp more
    than ``MAX_FUTURE_SECONDS`` ahead of ``now`` (it would stay fresh for as long as it is ahead).
    ``strict=False`` is for a writer comparing what it would write with what is there, never for judging
    whether a value counts. A bad value is "no information" for that node and metric only; the reason is
    kept so ``/nodes`` can show it and the extender can count it.
    """
    if raw is None:
        return None, None
    if not isinstance(raw, str):
        return None, f"expected a string, got {type(raw).__name__}"
    value_text, sep, stamp = raw.partition(",")
    if not sep:
        return None, 'expected "<value>,<timestamp>"'
    try:
        value = float(value_text)
    except ValueError:
        return None, f"value {value_text[:40]!r} is not a number"
    if not math.isfinite(value):
        return None, f"value {value_text[:40]!r} is not a finite number"
    if value < 0:
        return None, f"value {value:g} is negative"
    if strict and value > cap:
        return None, f"value {value:g} is above the sane maximum {cap:g}"
    ts = parse_timestamp(stamp, legacy_zone)
    if ts is None:
        return None, f"timestamp {stamp[:40]!r} is not RFC 3339 with an offset"
    if strict and ts > now + MAX_FUTURE_SECONDS:
        return None, f"timestamp {stamp[:40]!r} is more than {MAX_FUTURE_SECONDS:g}s in the future"
    return LoadSample(value, ts, now if ts > now else None), None


def format_timestamp(when: float) -> str:
    """RFC 3339 UTC at second precision, the form Ballast writes: ``2026-11-22T07:00:00Z``."""
    return format_rfc3339(when)


def format_load(ratio: float, when: float) -> str:
    """A load annotation value: ratio with five decimals, then the timestamp."""
    return f"{ratio:.5f},{format_timestamp(when)}"


def format_hot_value(hot: int, when: float) -> str:
    return f"{int(hot)},{format_timestamp(when)}"
