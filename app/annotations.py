"""Node load annotations: ``"<value>,<timestamp>"`` parsing, formatting and freshness.

The format is crane-scheduler's, so Ballast and crane annotators are interchangeable. Parsing is
deliberately forgiving in one direction only: anything that cannot be read becomes "no information"
(``None``), never an exception, because a bad annotation must not reject a node or break a request.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

HOT_VALUE_KEY = "node_hot_value"
HOT_VALUE_VALID_SECONDS = 300.0
"""crane's DefautlHotVauleActivePeriod: a hot value counts for five minutes after it was written."""

EXTRA_ACTIVE_SECONDS = 300.0
"""crane's ExtraActivePeriod: a metric counts until ``timestamp + sync period + 5m``."""

# crane's legacy layout "2006-01-02T15:04:05Z": a literal Z after a local wall-clock time.
_LEGACY = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


@dataclass(frozen=True, slots=True)
class Sample:
    """One parsed annotation: the value and when it was measured (Unix seconds)."""

    value: float
    timestamp: float

    def age(self, now: float) -> float:
        return now - self.timestamp

    def is_fresh(self, now: float, valid_for: float) -> bool:
        """A sample counts while ``timestamp + valid_for`` is in the future."""
        return self.timestamp + valid_for > now


def parse_timestamp(text: str, legacy_zone: tzinfo | None = None) -> float | None:
    """Parse an annotation timestamp into Unix seconds, or ``None`` when it cannot be read.

    RFC 3339 with any offset is read as written. With ``legacy_zone`` set, a second-precision
    ``...Z`` stamp is crane's legacy form and is read as a wall-clock time in that zone (crane wrote
    local time followed by a literal ``Z``).
    """
    s = text.strip()
    if not s:
        return None
    try:
        if legacy_zone is not None and _LEGACY.match(s):
            naive = datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")
            return naive.replace(tzinfo=legacy_zone).timestamp()
        if s[-1] in "zZ":
            s = s[:-1] + "+00:00"
        parsed = datetime.fromisoformat(s)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        # RFC 3339 requires an offset; a bare local time is ambiguous, so it carries no information.
        return None
    return parsed.timestamp()


def parse_sample(raw: object, legacy_zone: tzinfo | None = None) -> Sample | None:
    """Parse ``"<value>,<timestamp>"``; ``None`` for missing, malformed, NaN, infinite or negative values."""
    if not isinstance(raw, str):
        return None
    value_text, sep, stamp = raw.partition(",")
    if not sep:
        return None
    try:
        value = float(value_text)
    except ValueError:
        return None
    if math.isnan(value) or math.isinf(value) or value < 0:
        return None
    ts = parse_timestamp(stamp, legacy_zone)
    if ts is None:
        return None
    return Sample(value, ts)


def format_timestamp(when: float) -> str:
    """RFC 3339 UTC at second precision, the form Ballast writes: ``2026-11-22T07:00:00Z``."""
    return datetime.fromtimestamp(int(when), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_load(ratio: float, when: float) -> str:
    """A load annotation value: ratio with five decimals, then the timestamp."""
    return f"{ratio:.5f},{format_timestamp(when)}"


def format_hot_value(hot: int, when: float) -> str:
    return f"{int(hot)},{format_timestamp(when)}"
